r"""``bensemble evaluate --task regression``: second-order regression members scored in bounded
memory.

Given member predictions ``[M, N]`` (points) or ``[M, N, 2]`` (each member's Gaussian mean and
variance) and real targets ``[N]``, :func:`evaluate_regression` reports, for the members'
equal-weight mixture (:mod:`bensemble.regression`):

* scores: the mixture's negative log-likelihood (for point members, of the moment-matched
  Gaussian ``N(mean, Var_m mu_m)``: their empirical distribution has no density), the CRPS
  (closed form for the Gaussian mixture, the energy form for points), the sharpness
  ``sqrt(mean total variance)``, the regression calibration curve over ``n_levels`` central
  intervals and its miscalibration area;
* the central ``1 - alpha`` predictive interval: coverage (PICP), mean width (MPIW) and the
  interval score;
* for ``M > 1``: the decomposition ``total = aleatoric (mean_m sigma_m^2) + epistemic
  (Var_m mu_m)`` and the regression EECE (K-means bins of the members' means);
* with ``calibration_split=f``: the points are split as the classification command splits them
  (:func:`~bensemble.app.evaluate.calibrated.split_indices`, same seed), the whole calibration
  part (both halves, ``round(f N)`` points) calibrates a
  :class:`~bensemble.conformal.SplitConformalRegressor` and every number is measured on the test
  part, with the conformal intervals' coverage and width beside the predictive interval's.

**Memory.** The additive quantities (NLL, CRPS, sharpness, interval coverage / width / score,
the calibration curve's counts on its fixed grid, the decomposition) are float64 sums over chunks
of ``chunk_size`` points (:class:`RegressionSums`), so a file is read a chunk at a time and the
chunking changes nothing beyond float64 summation order. What needs every point at once is held
as float64: the targets (one per point), the members' means of the reported points ``[M, N]``
for the EECE's K-means bins, and the calibration part's members for the conformal quantile.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from bensemble import _validation as V
from bensemble._options import check_seed
from bensemble.app.evaluate.options import _check_split_bins_chunk
from bensemble.app.evaluate.regression_result import RegressionEvaluation, evaluation_of

__all__ = [
    "REGRESSION_CONFORMAL_SCORES",
    "RegressionEvaluation",
    "RegressionOptions",
    "RegressionSums",
    "evaluate_regression",
    "evaluate_regression_rows",
]

_F64 = torch.float64
#: Conformity scores of the split-conformal intervals (``conformal_score``).
REGRESSION_CONFORMAL_SCORES = ("absolute", "normalized")


@dataclass(frozen=True)
class RegressionOptions:
    """Everything that decides a regression evaluation's numbers, besides the data.

    Attributes:
        calibration_split: fraction in ``(0, 1)`` calibrating the conformal intervals, or
            ``None`` (every point reported, no conformal intervals).
        alpha: miscoverage of the predictive and conformal intervals, in ``(0, 1)``.
        n_levels: grid size of the calibration curve (``>= 2``).
        eece_bins: K-means bins of the regression EECE: ``"auto"`` or an integer.
        conformal_score: ``"absolute"`` (``|y - mean|``) or ``"normalized"`` (divided by the
            predicted total standard deviation).
        seed: seeds the split and the EECE's K-means.
        chunk_size: points per read (``None``: one chunk); the numbers do not depend on it
            beyond float64 summation order.
    """

    calibration_split: float | None = None
    alpha: float = 0.1
    n_levels: int = 100
    eece_bins: int | str = "auto"
    conformal_score: str = "absolute"
    seed: int = 0
    chunk_size: int | None = None

    def checked(self, fn: str = "evaluate_regression") -> RegressionOptions:
        """The same options, validated (``ValueError`` naming the argument otherwise)."""
        split, bins, chunk = _check_split_bins_chunk(self, fn, auto_chunk=False)
        levels = V.check_positive_int(self.n_levels, "n_levels", fn, minimum=2)
        if levels > 1_000_000:
            raise ValueError(f"{fn}: `n_levels` must be at most 1000000 (got {levels})")
        return replace(
            self,
            calibration_split=split,
            alpha=V.check_probability(self.alpha, "alpha", fn),
            n_levels=levels,
            eece_bins=bins,
            conformal_score=V.check_option(
                self.conformal_score, "conformal_score", REGRESSION_CONFORMAL_SCORES, fn
            ),
            seed=check_seed(self.seed, "seed", fn),
            chunk_size=chunk,
        )


class RegressionSums:
    """Float64 sums of the additive regression metrics over chunks of points (mergeable).

    Args:
        alpha: miscoverage of the intervals.
        n_levels: grid size of the calibration curve.
    """

    def __init__(self, alpha: float, n_levels: int) -> None:
        from bensemble.regression.calibration_curve import grid

        self.alpha, self.levels = alpha, grid(n_levels)
        self.sums: dict[str, dict[str, torch.Tensor]] = {}
        self.nll_error: str | None = None

    def _add(self, name: str, state: dict[str, torch.Tensor]) -> None:
        from bensemble.regression.scoring import merge_states

        have = self.sums.get(name)
        self.sums[name] = state if have is None else merge_states(have, state)

    def update(self, members: Any, y: torch.Tensor, conformal: Any = None, raw: Any = None) -> None:
        """Add a chunk: validated ``members`` (:class:`~bensemble.regression._inputs.
        RegressionMembers`), targets ``y [b]`` and, with ``conformal``, its intervals of ``raw``."""
        from bensemble.regression import _distribution as D
        from bensemble.regression import calibration_curve as C
        from bensemble.regression import intervals as I
        from bensemble.regression import scoring as S

        self._add("crps", S._crps_update(members, y))
        self._add("sharpness", S._sharpness_update(members))
        self._add("curve", C._calibration_update(members, y, self.levels, "interval"))
        a = self.alpha
        lo = D.quantile(members.means, members.variances, a / 2)
        hi = D.quantile(members.means, members.variances, 1.0 - a / 2)
        self._add("predictive", I._interval_update(lo, hi, y, a))
        _, total, aleatoric, epistemic = members.moments()
        count = torch.tensor(float(y.numel()), dtype=_F64)
        self._add("decomposition", {
            "total": total.sum(dtype=_F64), "aleatoric": aleatoric.sum(dtype=_F64),
            "epistemic": epistemic.sum(dtype=_F64), "count": count,
        })  # fmt: skip
        if self.nll_error is None:
            chosen = members.as_predictive("gaussian" if members.points else "mixture")
            if bool((chosen.variances > 0).all()):
                self._add("nll", S._nll_update(chosen, y))
            else:
                self.nll_error = "a predictive variance is 0 (no density): no NLL"
        if conformal is not None:
            lo, hi = conformal.predict_interval(raw)
            self._add("conformal", I._interval_update(lo.to(_F64), hi.to(_F64), y, a))

    def merge(self, other: RegressionSums) -> RegressionSums:
        """Add the sums of other points."""
        for name, state in other.sums.items():
            self._add(name, state)
        self.nll_error = self.nll_error or other.nll_error
        return self


def evaluate_regression(
    member_preds: Any,
    labels: Any,
    *,
    calibration_split: float | None = None,
    alpha: float = 0.1,
    n_levels: int = 100,
    eece_bins: int | str = "auto",
    conformal_score: str = "absolute",
    seed: int = 0,
    chunk_size: int | None = None,
    members_axis: int = 0,
) -> RegressionEvaluation:
    """Score regression member predictions (protocol and formulas: module docstring).

    Args:
        member_preds: ``[M, N]`` points or ``[M, N, 2]`` (mean, variance) members: a tensor, a
            numpy array or a file (``.npy`` read a chunk at a time).
        labels: ``[N]`` real targets (tensor, array or file).
        calibration_split: fraction in ``(0, 1)`` for the conformal intervals, or ``None``.
        alpha: miscoverage of the intervals.
        n_levels: grid size of the calibration curve.
        eece_bins: bins of the regression EECE (``"auto"`` or an integer).
        conformal_score: ``"absolute"`` or ``"normalized"``.
        seed: seeds the split and the EECE's K-means.
        chunk_size: points per read (``None``: one chunk).
        members_axis: 0 for ``[M, N(, 2)]``, 1 for ``[N, M(, 2)]``.

    Returns:
        A :class:`RegressionEvaluation`.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> y = torch.randn(400, generator=g, dtype=torch.float64)
        >>> means = y + 0.5 * torch.randn(5, 400, generator=g, dtype=torch.float64)
        >>> members = torch.stack([means, torch.full_like(means, 0.5)], -1)
        >>> ev = evaluate_regression(members, y, calibration_split=0.5)
        >>> ev.setup["n_calibration"], ev.setup["n_test"], ev.intervals[1]["interval"]
        (200, 200, 'split conformal (absolute)')
    """
    from bensemble.app.evaluate.regression_rows import RegressionRows, read_targets

    fn = "evaluate_regression"
    options = RegressionOptions(
        calibration_split, alpha, n_levels, eece_bins, conformal_score, seed, chunk_size
    ).checked(fn)
    rows = RegressionRows(member_preds, members_axis=members_axis, name="member_preds", where=fn)
    y = read_targets(labels, rows.n, name="labels", where=fn)
    return evaluate_regression_rows(rows, y, options, fn=fn)


def evaluate_regression_rows(
    rows: Any, y: torch.Tensor, options: RegressionOptions, *, fn: str = "evaluate_regression"
) -> RegressionEvaluation:
    """The engine: split, conformal calibration, the chunked pass and the EECE on ``rows``
    (:class:`~bensemble.app.evaluate.regression_rows.RegressionRows`) and targets ``y [N]``."""
    from bensemble.app.evaluate.calibrated import split_indices
    from bensemble.regression._inputs import as_member_predictions

    o, n = options, rows.n
    block = o.chunk_size or n
    setup: dict[str, Any] = {
        "members": rows.m, "samples": n, "kind": "points" if rows.points else "mean, variance",
        "alpha": o.alpha, "seed": o.seed, "calibration_split": o.calibration_split,
        "n_calibration": 0, "n_test": n,
    }  # fmt: skip
    part, conformal = None, None
    if o.calibration_split is not None:
        from bensemble.conformal import SplitConformalRegressor

        temp_idx, conf_idx, test = split_indices(n, o.calibration_split, seed=o.seed)
        cal = torch.cat([temp_idx, conf_idx]).sort().values
        part = test.sort().values
        setup.update(n_calibration=len(cal), n_test=len(part))
        members = torch.cat([rows.take(cal[a : a + block]) for a in range(0, len(cal), block)], 1)
        conformal = SplitConformalRegressor(o.conformal_score, o.alpha).calibrate(members, y[cal])
        del members
    n_part = n if part is None else len(part)
    sums = RegressionSums(o.alpha, o.n_levels)
    means = torch.empty(rows.m, n_part, dtype=_F64) if rows.m > 1 else None
    for a in range(0, n_part, block):
        b = min(a + block, n_part)
        if part is None:
            raw, yb = rows.slice(a, b), y[a:b]
        else:
            raw, yb = rows.take(part[a:b]), y[part[a:b]]
        members = as_member_predictions(raw, fn, name="member_preds")
        sums.update(members, yb, conformal, raw)
        if means is not None:
            means[:, a:b] = members.means
    y_part = y if part is None else y[part]
    return evaluation_of(setup, sums, means, y_part, options, conformal)
