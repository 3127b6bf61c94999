"""Splitting one held-out set into a temperature-fitting part and a conformal part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import as_labels, check_probability
from bensemble.conformal.scores import check_seed

__all__ = ["CalibrationSplit", "split_calibration"]


@dataclass(frozen=True)
class CalibrationSplit:
    """Disjoint index sets into one held-out set.

    Attributes:
        temperature: indices ``[n_t]`` (int64, ascending) for fitting a temperature or any other
            post-hoc calibrator, and for choosing the score or ``alpha``.
        conformal: indices ``[n_c]`` (int64, ascending) reserved for the conformal threshold.
    """

    temperature: torch.Tensor
    conformal: torch.Tensor


def split_calibration(
    labels: Any,
    *,
    temperature_fraction: float = 0.5,
    stratify: bool = False,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> CalibrationSplit:
    """Randomly split a held-out set into a temperature-fitting part and a conformal part.

    Why two parts: the split-conformal guarantee ``P(Y in C(X)) >= 1 - alpha`` holds because the
    conformal calibration scores and the test score are exchangeable - which requires the score
    function (model, temperature, score rule, ``alpha``) to be fixed *before* the conformal
    labels are looked at. Fitting the temperature on the same labels makes every calibration
    score depend on all of them, so the calibration scores are no longer exchangeable with a
    fresh test score and the rank argument behind the threshold breaks (typically giving
    under-coverage). Fit the temperature (and choose the score) on ``temperature``, calibrate on
    ``conformal``, and evaluate on a third, untouched set.

    Args:
        labels: labels ``[N]`` of the held-out set (used for ``N`` and, with ``stratify``, for
            the classes).
        temperature_fraction: share of the samples (of each class, with ``stratify``) that goes
            to the temperature part, in ``(0, 1)``. Per class, ``round(fraction * n_c)``
            samples (ties to even) go to the temperature part.
        stratify: keep each class's proportion equal in both parts.
        generator: source of the random permutation (its state advances: calls differ).
        seed: seed of the permutation when no ``generator`` is given: an integer in
            ``[0, 2**64)`` (floats, bools and negative numbers are refused, never truncated);
            default 0, so identical calls give the same split; ``None``: torch's global random
            state.

    Returns:
        :class:`CalibrationSplit` of disjoint ascending index tensors covering ``0..N-1``.

    Raises:
        ValueError: when either part would be empty, or on a bad argument.

    Example:
        >>> parts = split_calibration(torch.tensor([0, 1] * 5), seed=0)
        >>> len(parts.temperature), len(parts.conformal)
        (5, 5)
    """
    fn = "split_calibration"
    y = as_labels(labels, "labels", fn)
    fraction = check_probability(temperature_fraction, "temperature_fraction", fn)
    if not isinstance(stratify, bool):
        raise ValueError(f"{fn}: `stratify` must be True or False (got {stratify!r})")
    generator = check_seed(generator, seed, fn)
    lowest = int(y.min())
    if lowest < 0:  # class indices, whether or not they are used for stratification
        raise ValueError(f"{fn}: `labels` must be class indices >= 0 (got minimum {lowest})")
    n = y.shape[0]
    perm = torch.randperm(n, generator=generator).to(y.device)
    if stratify:
        # Group the shuffled samples by class (stable, so the order inside a class stays random).
        perm = perm[torch.argsort(y[perm], stable=True)]
        counts = torch.bincount(y)
        offsets = torch.cumsum(counts, 0) - counts
        grouped_labels = y[perm]
        rank_in_class = torch.arange(n, device=y.device) - offsets[grouped_labels]
        n_temperature = torch.round(counts.to(torch.float64) * fraction).to(torch.int64)
        to_temperature = rank_in_class < n_temperature[grouped_labels]
    else:
        to_temperature = torch.arange(n, device=y.device) < round(fraction * n)
    temperature = torch.sort(perm[to_temperature]).values
    conformal = torch.sort(perm[~to_temperature]).values
    if temperature.numel() == 0 or conformal.numel() == 0:
        raise ValueError(
            f"{fn}: `temperature_fraction` must leave samples in both parts "
            f"(got {fraction} of {n} samples: {temperature.numel()} / {conformal.numel()})"
        )
    return CalibrationSplit(temperature=temperature, conformal=conformal)
