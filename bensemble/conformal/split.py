"""Split conformal classification: marginal and class-conditional (Mondrian) prediction sets.

Given ``n`` calibration scores ``s_1, ..., s_n`` (one per calibration example, the score of its
true label) and a miscoverage level ``alpha``, the threshold is the k-th smallest score with

    k = ceil((n + 1)(1 - alpha)),

and the prediction set of a new input is ``{y : s(x, y) <= threshold}``. Under exchangeability of
the calibration examples and the test example, ``P(Y in C(X)) >= 1 - alpha`` marginally.

Conventions:

* **k > n** gives the threshold ``+inf`` and every set is the full label set. Clamping to the
  largest calibration score would *not* preserve the guarantee (the practitioner's guide).
  This happens exactly when ``n < 1/alpha - 1`` (e.g. ``n < 9`` at ``alpha = 0.1``), and is
  warned about (:class:`UserWarning`): such a calibration set is too small for that ``alpha``.
* **Ties** are conservative: a test score equal to the threshold is in the set, and the rank
  rule counts tied calibration scores individually.
* **Exact rank.** ``alpha`` is read as the decimal it prints as (``repr``), so
  ``ceil((9 + 1) * (1 - 0.1))`` is exactly 9 (float arithmetic could round either way). The
  order statistic is taken by exact selection (:func:`numpy.partition` on the CPU,
  :func:`torch.kthvalue` elsewhere) - not a sort, and not :func:`torch.quantile`, which refuses
  inputs over 2**24 elements and whose "higher" interpolation does not implement this rank.
* **Class-conditional** (Mondrian by true label): each class ``c`` gets its own threshold from the
  ``n_c`` calibration examples of that class, with ``k_c = ceil((n_c + 1)(1 - alpha))``, giving
  ``P(Y in C(X) | Y = c) >= 1 - alpha`` for every class; a class with too few calibration
  examples (``k_c > n_c``, including ``n_c = 0``) gets ``+inf`` and is always included.

Conformal calibration keeps every calibration score (the threshold is an order statistic, not
a sum), so there is no streaming form.

The rank and the order statistics (:func:`conformal_rank`, :func:`conformal_quantile`,
:func:`class_conditional_quantiles`, :func:`kth_smallest`) live in
:mod:`bensemble.conformal._quantiles` and are re-exported here; this module holds the classifier
and :func:`lac_cutoff`, the LAC set test in the probabilities' own dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bensemble._seeds import DEFAULT_SEED, derived_seed, integer_seed
from bensemble._validation import as_labels, check_option, check_probability
from bensemble.conformal._quantiles import (
    class_conditional_quantiles,
    class_quantiles,
    conformal_quantile,
    conformal_rank,
    kth_smallest,
    minimum_calibration_size,  # noqa: F401 - re-exported: bensemble.conformal.split's helper
    warn_infinite,
    warn_infinite_classes,
)
from bensemble.conformal.scores import (
    SCORES,
    aps_kernel,
    check_score_options,
    chunk_size,
    draw_uniforms,
    lac_kernel,
    scoring_probs,
)

__all__ = [
    "conformal_rank",
    "conformal_quantile",
    "class_conditional_quantiles",
    "SplitConformalClassifier",
]


def lac_cutoff(threshold: float | torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """The smallest ``c`` of ``dtype`` with ``float64(1 - c) <= threshold`` (one per class).

    ``p -> float64(1 - p)`` is non-increasing (rounding is monotone), so the LAC set
    ``{y : 1 - p_y <= threshold}`` (scores in float64) equals ``{y : p_y >= c}`` compared in the
    input dtype - the same sets as the float64 scores, without a float64 copy of the matrix.
    Thresholds of ``inf`` give ``-inf`` (every label kept).
    """
    q = torch.as_tensor(threshold, dtype=torch.float64, device=device)
    c = (1.0 - q).to(dtype).clamp(min=0.0)  # probabilities are >= 0: c = 0 keeps every label
    c = torch.where(torch.isinf(q), torch.full_like(c, -math.inf), c)
    up = torch.full_like(c, math.inf)
    while True:  # a few ulps at most: rounding of 1 - q to dtype
        too_low = (1.0 - c.to(torch.float64)) > q
        if not bool(too_low.any()):
            break
        c = torch.where(too_low, torch.nextafter(c, up), c)
    # Lower c to the smallest value that still qualifies: bisection over the bit patterns of
    # the non-negative floats of ``dtype`` (they are ordered as integers), so a threshold one ulp
    # below 1 costs ~64 steps, not one step per ulp (2**52 of them near 1e-16).
    bits = _INT_OF_FLOAT[dtype]
    finite = torch.isfinite(c)
    hi = torch.where(finite, c, torch.zeros_like(c)).view(bits).to(torch.int64)
    lo = torch.zeros_like(hi)  # the bit pattern of +0.0
    zero_ok = (1.0 - torch.zeros_like(q)) <= q
    while bool(((hi - lo) > 1).any()):
        mid = (lo + hi) // 2
        good = (1.0 - mid.to(bits).view(dtype).to(torch.float64)) <= q
        hi = torch.where(good, mid, hi)
        lo = torch.where(good, lo, mid)
    lowest = torch.where(zero_ok, torch.zeros_like(c), hi.to(bits).view(dtype))
    return torch.where(finite, lowest, c)


#: The integer type whose bit patterns order the non-negative floats of each dtype.
_INT_OF_FLOAT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


class SplitConformalClassifier:
    """Split conformal prediction sets for a fixed classifier (formula: module docstring).

    Args:
        score: ``"lac"`` (``1 - p_y``), ``"aps"`` or ``"raps"`` (see
            :mod:`bensemble.conformal.scores`).
        alpha: miscoverage level in ``(0, 1)``; sets cover the label with probability
            ``>= 1 - alpha``.
        class_conditional: one threshold per true class (Mondrian), for per-class coverage.
        k_reg: RAPS - number of top-ranked labels left unpenalised (``>= 0``).
        lam: RAPS - penalty per rank beyond ``k_reg`` (``>= 0``; the paper's lambda).
        randomized: APS / RAPS - use the randomised score (exact rather than conservative
            coverage; sets may then be empty). ``False``: the non-randomised score, whose sets
            always hold the top label (never empty). Ignored by LAC.
        generator: draws the predictor's seed once, at construction (its state advances).
        seed: seed of the APS / RAPS uniforms (an integer in ``[0, 2**64)``; default 0);
            ``None``: a seed drawn once from torch's global random state. At most one of
            ``generator`` and ``seed``.

    Randomised sets are reproducible: the uniform of calibration row ``i`` is the ``i``-th draw
    of a generator seeded with ``seed_``, and the uniform of row ``i`` of every
    :meth:`predict_set` call the ``i``-th draw of a generator seeded with a seed derived from
    ``seed_`` (an independent stream), re-seeded for each call. So one predictor gives the same
    sets for the same inputs however often it is asked, and a row's set depends on the row's
    position in the batch, never on earlier calls. The coverage guarantee is unchanged: each
    test uniform is ``U(0, 1)`` and independent of the data and of the calibration uniforms,
    which is all the rank argument needs (test rows sharing a position across calls share their
    uniform, which affects no single row's coverage).

    Attributes:
        seed_: the integer seed of the uniforms (``seed``, or the one drawn from ``generator``
            or from torch's global random state).
        threshold_: the calibrated threshold, a float (``inf`` when ``k > n``), or a float64
            tensor ``[K]`` when ``class_conditional``.
        n_calibration_: number of calibration examples.
        num_classes_: ``K`` seen at calibration.
        class_counts_: calibration examples per class ``[K]`` (int64).

    Example:
        >>> probs = torch.tensor([[0.6, 0.3, 0.1]] * 8 + [[0.2, 0.7, 0.1]] * 2, dtype=torch.float64)
        >>> labels = torch.tensor([0] * 6 + [1] * 4)
        >>> cp = SplitConformalClassifier("lac", alpha=0.2).calibrate(probs, labels)
        >>> cp.threshold_  # k = ceil(11 * 0.8) = 9: the 9th smallest of 1 - p_y
        0.7
        >>> cp.predict_set(torch.tensor([[0.5, 0.4, 0.1]]))
        tensor([[ True,  True, False]])
    """

    def __init__(
        self,
        score: str = "lac",
        alpha: float = 0.1,
        *,
        class_conditional: bool = False,
        k_reg: int = 1,
        lam: float = 0.01,
        randomized: bool = True,
        generator: torch.Generator | None = None,
        seed: int | None = DEFAULT_SEED,
    ) -> None:
        fn = "SplitConformalClassifier"
        self.score = check_option(score, "score", SCORES, fn)
        self.alpha = check_probability(alpha, "alpha", fn)
        if not isinstance(class_conditional, bool):
            raise ValueError(
                f"{fn}: `class_conditional` must be True or False (got {class_conditional!r})"
            )
        self.class_conditional = class_conditional
        self.k_reg, self.lam, self.randomized = check_score_options(k_reg, lam, randomized, fn)
        self.seed_ = integer_seed(generator, seed, fn)
        self.seed = self.seed_  # bensemble 0.3 name

    # ------------------------------------------------------------------ scores
    def _uniforms(
        self, n: int, device: torch.device, stage: str = "predict"
    ) -> torch.Tensor | None:
        """Uniforms of ``n`` rows: a generator re-seeded for every call, one stream for
        ``"calibrate"`` (seeded with ``seed_``) and one for ``"predict"`` (a derived seed)."""
        if self.score == "lac" or not self.randomized:
            return None
        seed = self.seed_ if stage == "calibrate" else derived_seed(self.seed_, stage)
        return draw_uniforms(n, torch.Generator().manual_seed(seed), device)

    def _scores(self, p: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        """Scores of every label for a chunk ``p [n, K]`` (float64)."""
        if self.score == "lac":
            return lac_kernel(p)
        lam = self.lam if self.score == "raps" else 0.0
        return aps_kernel(p, u, k_reg=self.k_reg, lam=lam)

    def _label_scores(self, p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Score of each example's true label ``[n]`` (float64)."""
        if self.score == "lac":
            return 1.0 - p.gather(1, y.unsqueeze(1)).squeeze(1).to(torch.float64)
        u = self._uniforms(p.shape[0], p.device, "calibrate")
        step = chunk_size(p.shape[1])
        parts = []
        for start in range(0, p.shape[0], step):
            stop = start + step
            chunk_u = None if u is None else u[start:stop]
            scores = self._scores(p[start:stop], chunk_u)
            parts.append(scores.gather(1, y[start:stop].unsqueeze(1)).squeeze(1))
        return torch.cat(parts)

    # --------------------------------------------------------------- lifecycle
    def calibrate(self, probs: Any, labels: Any) -> SplitConformalClassifier:
        """Compute the threshold from a calibration set that played no part in fitting the model.

        Args:
            probs: calibration probabilities ``[n, K]`` or member probabilities ``[M, n, K]``
                (rows summing to 1, finite).
            labels: true labels ``[n]`` (integer, in ``[0, K)``).

        Returns:
            ``self``, with ``threshold_``, ``n_calibration_``, ``num_classes_`` and
            ``class_counts_`` set.
        """
        fn = "SplitConformalClassifier.calibrate"
        p = scoring_probs(probs, fn)
        n, k = p.shape
        y = as_labels(labels, "labels", fn, n=n, num_classes=k, device=p.device)
        s = self._label_scores(p, y)
        counts = torch.bincount(y, minlength=k)
        if self.class_conditional:
            self.threshold_: float | torch.Tensor = class_quantiles(s, y, k, self.alpha)
            warn_infinite_classes(fn, self.threshold_, counts, self.alpha)
        else:
            rank = conformal_rank(n, self.alpha)
            if rank > n:
                warn_infinite(fn, n, self.alpha)
            self.threshold_ = math.inf if rank > n else kth_smallest(s, rank)
        self.n_calibration_ = int(n)
        self.num_classes_ = int(k)
        self.class_counts_ = counts
        return self

    def _check_calibrated(self, fn: str) -> None:
        if not hasattr(self, "threshold_"):
            raise ValueError(
                f"{fn}: this SplitConformalClassifier is not calibrated yet; "
                "call calibrate(probs, labels) first"
            )

    def predict_set(self, probs: Any) -> torch.Tensor:
        """Prediction sets as a boolean mask: ``mask[i, y]`` is ``s(x_i, y) <= threshold``.

        Args:
            probs: probabilities ``[N, K]`` or member probabilities ``[M, N, K]``.

        Returns:
            Mask ``[N, K]`` (bool).
        """
        fn = "SplitConformalClassifier.predict_set"
        self._check_calibrated(fn)
        p = scoring_probs(probs, fn)
        if p.shape[1] != self.num_classes_:
            raise ValueError(
                f"{fn}: `probs` must have {self.num_classes_} classes as at calibration "
                f"(got shape {tuple(p.shape)})"
            )
        threshold = self.threshold_
        if isinstance(threshold, torch.Tensor):
            threshold = threshold.to(p.device)
        if self.score == "lac":  # same sets as the float64 scores, compared in p's dtype
            return p >= lac_cutoff(threshold, p.dtype, p.device)
        u = self._uniforms(p.shape[0], p.device, "predict")
        step = chunk_size(p.shape[1])
        mask = torch.empty(p.shape, dtype=torch.bool, device=p.device)
        for start in range(0, p.shape[0], step):
            stop = start + step
            chunk_u = None if u is None else u[start:stop]
            torch.le(self._scores(p[start:stop], chunk_u), threshold, out=mask[start:stop])
        return mask

    def predict_set_indices(self, probs: Any) -> list[torch.Tensor]:
        """Prediction sets as a list of ``N`` int64 tensors of label indices (ascending).

        Args:
            probs: probabilities ``[N, K]`` or member probabilities ``[M, N, K]``.
        """
        mask = self.predict_set(probs)
        rows, cols = mask.nonzero(as_tuple=True)
        sizes = torch.bincount(rows, minlength=mask.shape[0])
        return list(torch.split(cols, sizes.tolist()))

    def __repr__(self) -> str:
        extra = ""
        if self.score != "lac":
            extra = f", randomized={self.randomized}"
            if self.score == "raps":
                extra += f", k_reg={self.k_reg}, lam={self.lam}"
            if self.randomized:
                extra += f", seed={self.seed_}"
        return (
            f"SplitConformalClassifier(score={self.score!r}, alpha={self.alpha}, "
            f"class_conditional={self.class_conditional}{extra})"
        )
