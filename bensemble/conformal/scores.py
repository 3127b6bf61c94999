"""Nonconformity scores for split conformal classification.

Every score maps probabilities ``probs [N, K]`` to a score for *every* candidate label
``[N, K]``: the lower the score, the more the label conforms. A prediction set keeps the labels
whose score is at most the calibrated threshold, so a larger score means "less plausible".

* **LAC** (least ambiguous set-valued classifier; the practitioner's guide's rule):
  ``s(x, y) = 1 - p_y(x)``.
* **APS** (adaptive prediction sets, Romano et al., 2020): sort the row in decreasing order
  and add up the probabilities of the labels ranked above ``y``. Randomised, ``y``'s own
  probability counts with a weight ``u ~ U(0, 1)`` drawn once per sample,
  ``s(x, y) = sum_{j < r(y)} p_(j) + u p_(r(y))``, which makes coverage exact rather than
  conservative (and allows empty sets). Non-randomised, ``y``'s own probability does not count
  (``u = 0``): ``s(x, y) = sum_{j < r(y)} p_(j)``, the mass ranked strictly above ``y``. The set
  ``{y : s(x, y) <= t}`` then holds the top labels up to *and including* the label at which the
  cumulative mass first exceeds ``t`` - Romano et al.'s non-randomised set - so it always holds
  the top label and is never empty (the top label scores 0, and every threshold is ``>= 0``).
  Counting ``y`` fully instead, ``sum_{j <= r(y)} p_(j)``, would exclude a confident row's top
  label whenever ``p_(1)`` exceeds the threshold, giving empty sets for the most confident
  inputs.
* **RAPS** (regularised APS): APS plus ``lam * max(0, r(y) - k_reg)``, where ``r(y)`` is the
  1-based rank of ``y``; it penalises long tails of unlikely labels. ``lam`` stands for the
  paper's lambda (a Python keyword). The penalty grows with the rank, so the top label still
  has the smallest score any label can have and non-randomised RAPS sets are never empty.

Within a row, equal probabilities are ranked by class index (a stable sort), so scores are
deterministic. Randomised scores take ``seed=`` (default 0, so identical calls give identical
scores; ``None``: torch's global random state) or a ``generator=`` for the uniforms. Member
probabilities ``[M, N, K]`` are scored on their mean over members. All scores are computed in
float64.
"""

from __future__ import annotations

from typing import Any

import torch

from bensemble._seeds import DEFAULT_SEED, resolve_generator
from bensemble._validation import as_probs, check_positive, check_positive_int

__all__ = ["SCORES", "lac_scores", "aps_scores", "raps_scores"]

#: Valid values of the ``score`` option of :class:`~bensemble.conformal.SplitConformalClassifier`.
SCORES = ("lac", "aps", "raps")

# Rows per chunk: bounds the float64 working memory to about 2**22 elements (32 MiB) per buffer.
_CHUNK_ELEMENTS = 1 << 22


def scoring_probs(probs: Any, fn: str) -> torch.Tensor:
    """Validated probabilities ``[N, K]``; ``[M, N, K]`` member stacks are averaged in float64.

    The ``[N, K]`` case keeps the input dtype (the score kernels convert chunk by chunk), so a
    float32 matrix is never copied whole to float64.
    """
    p = as_probs(probs, "probs", fn, ndim=(2, 3), dtype=None)
    if p.ndim == 3:
        p = p.to(torch.float64).mean(dim=0)
    return p


def chunk_size(k: int) -> int:
    """Rows per chunk so that a ``[rows, k]`` float64 buffer holds about 2**22 elements."""
    return max(1, _CHUNK_ELEMENTS // max(k, 1))


def draw_uniforms(n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """One ``U(0, 1)`` draw per sample (float64), from ``generator``."""
    return torch.rand(n, generator=generator, dtype=torch.float64).to(device)


def lac_kernel(p: torch.Tensor) -> torch.Tensor:
    """``1 - p`` in float64 (no validation)."""
    return 1.0 - p.to(torch.float64)


def aps_kernel(
    p: torch.Tensor,
    u: torch.Tensor | None,
    *,
    k_reg: int = 0,
    lam: float = 0.0,
) -> torch.Tensor:
    """APS / RAPS scores of every label (no validation).

    Args:
        p: probabilities ``[N, K]``.
        u: uniforms ``[N]`` for the randomised score, or ``None`` for the non-randomised one.
        k_reg: labels ranked ``<= k_reg`` are not penalised.
        lam: penalty per rank beyond ``k_reg`` (0 gives plain APS).
    """
    p = p.to(torch.float64)
    ordered, order = torch.sort(p, dim=1, descending=True, stable=True)
    # the mass ranked strictly above each label (0 for the top label)
    s = torch.cumsum(ordered, dim=1)
    s = torch.cat([torch.zeros_like(s[:, :1]), s[:, :-1]], dim=1)
    if u is not None:
        s = s + u.to(torch.float64).unsqueeze(1) * ordered
    if lam > 0.0:
        ranks = torch.arange(1, p.shape[1] + 1, dtype=torch.float64, device=p.device)
        s = s + lam * torch.clamp(ranks - k_reg, min=0.0)
    return torch.empty_like(s).scatter_(1, order, s)


def check_seed(generator: Any, seed: Any, fn: str) -> torch.Generator | None:
    """The random source under the library's rule (:mod:`bensemble._seeds`): ``generator``,
    else a generator seeded with ``seed`` (default 0), else (``seed=None``) torch's global
    random state."""
    return resolve_generator(generator, seed, fn)


def check_score_options(k_reg: Any, lam: Any, randomized: Any, fn: str) -> tuple[int, float, bool]:
    """Validate the APS / RAPS hyper-parameters; returns them converted."""
    k_reg = check_positive_int(k_reg, "k_reg", fn, minimum=0)
    lam = check_positive(lam, "lam", fn, allow_zero=True)
    if not isinstance(randomized, bool):
        raise ValueError(f"{fn}: `randomized` must be True or False (got {randomized!r})")
    return k_reg, lam, randomized


def lac_scores(probs: Any) -> torch.Tensor:
    """LAC scores ``1 - p_y`` of every label.

    Args:
        probs: probabilities ``[N, K]`` or member probabilities ``[M, N, K]`` (scored on their
            mean over members).

    Returns:
        Scores ``[N, K]`` (float64).

    Example:
        >>> lac_scores(torch.tensor([[0.7, 0.2, 0.1]]))
        tensor([[0.3000, 0.8000, 0.9000]], dtype=torch.float64)
    """
    return lac_kernel(scoring_probs(probs, "lac_scores"))


def aps_scores(
    probs: Any,
    *,
    randomized: bool = True,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> torch.Tensor:
    """APS scores of every label (module docstring for the formula).

    Args:
        probs: probabilities ``[N, K]`` or member probabilities ``[M, N, K]``.
        randomized: weight the label's own probability by ``u ~ U(0, 1)`` (one draw per sample,
            shared by all labels of that sample); ``False``: the mass ranked strictly above the
            label (``u = 0``), whose sets are never empty.
        generator: source of ``u`` (its state advances: calls differ).
        seed: seed of ``u`` when no ``generator`` is given (default 0: identical calls give
            identical scores); ``None``: torch's global random state.

    Returns:
        Scores ``[N, K]`` (float64).

    Example:
        >>> aps_scores(torch.tensor([[0.2, 0.5, 0.3]]), randomized=False)
        tensor([[0.8000, 0.0000, 0.5000]], dtype=torch.float64)
    """
    return _checked_aps(probs, 0, 0.0, randomized, generator, seed, "aps_scores")


def raps_scores(
    probs: Any,
    *,
    k_reg: int = 1,
    lam: float = 0.01,
    randomized: bool = True,
    generator: torch.Generator | None = None,
    seed: int | None = DEFAULT_SEED,
) -> torch.Tensor:
    """RAPS scores: APS plus ``lam * max(0, rank(y) - k_reg)`` with 1-based ranks.

    Args:
        probs, randomized, generator, seed: as in :func:`aps_scores`.
        k_reg: number of top-ranked labels left unpenalised (``>= 0``).
        lam: penalty per rank beyond ``k_reg`` (``>= 0``; the paper's lambda).

    Returns:
        Scores ``[N, K]`` (float64).

    Example:
        >>> raps_scores(torch.tensor([[0.2, 0.5, 0.3]]), k_reg=1, lam=0.1, randomized=False)
        tensor([[1.0000, 0.0000, 0.6000]], dtype=torch.float64)
    """
    return _checked_aps(probs, k_reg, lam, randomized, generator, seed, "raps_scores")


def _checked_aps(
    probs: Any,
    k_reg: Any,
    lam: Any,
    randomized: Any,
    generator: torch.Generator | None,
    seed: int | None,
    fn: str,
) -> torch.Tensor:
    """:func:`aps_kernel` on validated inputs, with the uniforms of the randomised score drawn
    from ``generator`` / ``seed`` (APS is ``k_reg = 0, lam = 0``)."""
    k_reg, lam, randomized = check_score_options(k_reg, lam, randomized, fn)
    generator = check_seed(generator, seed, fn)
    p = scoring_probs(probs, fn)
    u = draw_uniforms(p.shape[0], generator, p.device) if randomized else None
    return aps_kernel(p, u, k_reg=k_reg, lam=lam)
