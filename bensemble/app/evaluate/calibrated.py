"""The calibration split of ``bensemble evaluate``: which rows fit the temperature, which
calibrate the conformal threshold, and how a chunk of test rows is scaled and given sets.

:func:`split_indices` draws the split (a seeded permutation; the calibration part cut in two
separate halves). :class:`CalibratedPart` gathers the two calibration halves from the source as
ensemble-mean probabilities ``[n_cal, K]`` (ascending reads, a chunk at a time; ``M`` members are
never held), fits them exactly as an in-memory run does - :class:`~bensemble.calibration.
TemperatureScaling` on ``log p`` of the first half, then a :class:`~bensemble.conformal.
SplitConformalClassifier` on the temperature-scaled second half - and then scales any chunk of
test rows (``log p / T``) and gives it its prediction sets. Randomised APS / RAPS sets use the
uniforms an in-memory ``predict_set`` over the test part draws, held as one float64 per row (by
global row, so a worker holding any rows finds its own). It is plain picklable data: workers
and Ray tasks receive it whole.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from bensemble import _validation as V
from bensemble._options import check_seed

__all__ = ["CalibratedPart", "split_indices"]


def split_indices(
    n: int, fraction: float, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded random split into temperature / conformal / test indices.

    A random permutation of ``range(n)`` (``torch.Generator`` seeded with ``seed``); its first
    ``n_cal = round(fraction * n)`` entries are the calibration part, the remaining ``n - n_cal``
    the test part. :func:`bensemble.conformal.split_calibration` (same seed) then cuts the
    calibration part into two disjoint halves: one fits the temperature, the other calibrates
    the conformal threshold.

    Raises:
        ValueError: ``fraction`` outside ``(0, 1)`` or a part that would be empty.

    Example:
        >>> temperature, conformal, test = split_indices(10, 0.4, seed=0)
        >>> len(temperature), len(conformal), len(test)
        (2, 2, 6)
    """
    from bensemble.conformal import split_calibration

    fn = "split_indices"
    fraction = V.check_probability(fraction, "calibration_split", fn)
    seed = check_seed(seed, "seed", fn)
    n_cal = round(fraction * n)
    if n_cal < 2 or n - n_cal < 1:
        raise ValueError(
            f"{fn}: `calibration_split` must leave at least 2 calibration samples and 1 test "
            f"sample (got {fraction!r} of {n} samples: {n_cal} calibration, {n - n_cal} test)"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    cal, test = perm[:n_cal], perm[n_cal:]
    halves = split_calibration(torch.zeros(n_cal, dtype=torch.int64), seed=seed)
    return cal[halves.temperature], cal[halves.conformal], test


def gathered_mean(source, index: torch.Tensor, chunk: int) -> torch.Tensor:
    """The member mean ``[n, K]`` of the global rows ``index`` (in that order), ``chunk`` rows
    per read: the calibration part is held as ensemble-mean probabilities, not ``M`` members."""
    index = index.numpy()
    parts = [source.take(index[a : a + chunk]).mean(0) for a in range(0, len(index), chunk)]
    source.release()
    return torch.cat(parts)


def _log(mean: torch.Tensor) -> torch.Tensor:
    return mean.clamp_min(torch.finfo(mean.dtype).tiny).log()


class CalibratedPart:
    """The fitted temperature and conformal threshold, and the test rows (module docstring).

    Args:
        source: the row source (``take``, ``label_take``, ``n``, ``k``, ``release``).
        temp_idx, conf_idx, test: :func:`split_indices` of the source's rows.
        score, alpha, seed: the conformal score, its miscoverage and the seed of its generator.
        chunk: rows per read while gathering.
    """

    def __init__(self, source, temp_idx, conf_idx, test, score, alpha, seed, chunk) -> None:
        from bensemble.calibration import CalibrationFitError, TemperatureScaling
        from bensemble.conformal import SplitConformalClassifier

        fn = "evaluate_predictions"
        scaler = TemperatureScaling(on_boundary="warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                mean = gathered_mean(source, temp_idx, chunk)
                scaler.fit(_log(mean), source.label_take(temp_idx))
        except CalibrationFitError as exc:
            raise ValueError(
                f"{fn}: cannot fit a temperature on the calibration part ({exc})"
            ) from None
        del mean
        self.scaler = scaler
        self.temperature = float(scaler.temperature.item())
        notes = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        self.converged = bool(scaler.converged_)
        self.warning = " ".join(" ".join(notes).split()) or None
        self.cp = SplitConformalClassifier(
            score, alpha=alpha, generator=torch.Generator().manual_seed(seed)
        )
        self.cp.calibrate(
            self.scale(gathered_mean(source, conf_idx, chunk)), source.label_take(conf_idx)
        )
        n = source.n
        # the uniforms predict_set would draw for the test part, in test order, kept per row
        u = self.cp._uniforms(len(test), torch.device("cpu"))
        self.u = None
        if u is not None:
            self.u = torch.zeros(n, dtype=torch.float64)
            self.u[test] = u
        self.is_test = torch.zeros(n, dtype=torch.bool)
        self.is_test[test] = True
        self.n_calibration = len(conf_idx)
        self.n_test = len(test)

    def scale(self, mean: torch.Tensor) -> torch.Tensor:
        """Temperature-scaled probabilities ``softmax(log p / T)`` (float64) of ``mean [b, K]``."""
        with torch.no_grad():
            return torch.softmax(self.scaler(_log(mean)).to(torch.float64), dim=-1)

    def sets(self, probs: torch.Tensor, rows: np.ndarray | slice) -> torch.Tensor:
        """Prediction sets ``[b, K]`` (bool) of the scaled ``probs`` of the global ``rows``."""
        from bensemble.conformal.split import lac_cutoff

        cp = self.cp
        if self.u is None and cp.score == "lac":
            return probs >= lac_cutoff(cp.threshold_, probs.dtype, probs.device)
        u = None if self.u is None else self.u[rows]
        return cp._scores(probs, u) <= cp.threshold_

    def conformal_row(self, covered: int, size: int, empty: int) -> dict:
        """The conformal table's row from the test part's counts."""
        alpha, n_test = self.cp.alpha, self.n_test
        return {
            "score": self.cp.score,
            "alpha": alpha,
            "target_coverage": 1.0 - alpha,
            "coverage": covered / n_test,
            "mean_set_size": size / n_test,
            "empty_set_rate": empty / n_test,
            "n_calibration": self.n_calibration,
            "n_test": n_test,
        }
