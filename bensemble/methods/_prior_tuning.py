"""Choosing the prior precision of a Laplace approximation, and saying how it was chosen.

Two criteria, as in Daxberger et al. (2021) and laplace-torch:

* **held-out NLL** (recommended): the prior precision ``delta`` on a log-spaced grid that gives
  the lowest mean negative log-likelihood of the posterior predictive on validation data;
* **evidence**: the ``delta`` that maximises the Laplace approximation of the log marginal
  likelihood of the training data (MacKay 1992), on the grid and then refined by a bounded
  scalar search,

      log p(D | delta) ~= log p(D | theta*) - delta/2 ||theta*||^2 + P/2 log delta
                          - 1/2 log det(posterior precision(delta)).

The evidence assumes that ``theta*`` is the MAP of the prior it scores. A network trained
without that prior (no weight decay) keeps weights the prior would never allow, and the evidence
can pick a ``delta`` whose predictive is much worse than the network itself. Without held-out
data the only check is on the training data: :func:`warn_if_worse_than_map` warns when the
predictive loses more than :data:`MAP_NLL_MARGIN` nats of NLL there against the plain network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bensemble._validation import check_positive, check_positive_int, warn_user
from bensemble.methods._kronecker import iterate_pairs

__all__ = [
    "MAP_NLL_MARGIN",
    "PriorPrecisionSearch",
    "check_bounds",
    "log_grid",
    "maximise_evidence",
    "minimise_heldout",
    "warn_if_worse_than_map",
    "tune_prior_precision",
    "check_val_allowed",
]

#: Mean NLL (nats) the predictive may lose on the training data against the plain network
#: before an evidence-tuned prior precision is reported as likely worse than it.
MAP_NLL_MARGIN = 0.02


@dataclass(frozen=True)
class PriorPrecisionSearch:
    """How a Laplace approximation's prior precision was chosen.

    Attributes:
        method: ``"fixed"`` (given), ``"evidence"`` (marginal likelihood of the training data)
            or ``"held-out NLL"`` (validation data).
        prior_precision: the value chosen.
        grid: candidate prior precisions ``[G]`` (``None`` when fixed).
        values: the criterion on the grid ``[G]``: log evidence (nats) or mean held-out NLL.
        laplace_nll: mean NLL (nats) of the posterior predictive at the chosen value, on the
            validation data (held-out NLL) or on up to ``probe`` training points (evidence).
        map_nll: mean NLL of the plain network on the same points.
        n_points: number of points behind ``laplace_nll`` and ``map_nll``.
    """

    method: str
    prior_precision: float
    grid: np.ndarray | None = None
    values: np.ndarray | None = None
    laplace_nll: float | None = None
    map_nll: float | None = None
    n_points: int = 0

    def describe(self) -> str:
        """``"312 (held-out NLL on 360 points)"``, as the approximations' ``repr`` shows it."""
        value = f"{self.prior_precision:.4g}"
        if self.method == "fixed":
            return f"{value} (fixed)"
        if self.method == "evidence":
            return f"{value} (evidence)"
        return f"{value} ({self.method} on {self.n_points} points)"


def check_prior_search(
    prior_precision, n_prior_grid, bounds, fn: str
) -> tuple[float | None, int, tuple[float, float]]:
    """A Laplace approximation's prior settings: ``prior_precision`` (> 0, or ``None`` to
    search it), the search grid's size ``n_prior_grid`` (>= 3) and its ``bounds``."""
    fixed = (
        None if prior_precision is None else check_positive(prior_precision, "prior_precision", fn)
    )
    n_grid = check_positive_int(n_prior_grid, "n_prior_grid", fn, minimum=3)
    return fixed, n_grid, check_bounds(bounds, fn)


def check_bounds(bounds, fn: str) -> tuple[float, float]:
    """``(low, high)`` with ``0 < low < high``, both finite."""
    ok = isinstance(bounds, (tuple, list)) and len(bounds) == 2
    if ok:
        low = check_positive(bounds[0], "prior_precision_bounds[0]", fn)
        high = check_positive(bounds[1], "prior_precision_bounds[1]", fn)
        ok = low < high
    if not ok:
        raise ValueError(
            f"{fn}: `prior_precision_bounds` must be a pair (low, high) with 0 < low < high "
            f"(got {bounds!r})"
        )
    return low, high


def log_grid(bounds: tuple[float, float], n_grid: int) -> np.ndarray:
    """``n_grid`` log-spaced values of ``log delta`` covering ``bounds``."""
    return np.linspace(math.log(bounds[0]), math.log(bounds[1]), n_grid)


def maximise_evidence(
    log_evidence: Callable[[np.ndarray], np.ndarray],
    bounds: tuple[float, float],
    n_grid: int,
    fn: str,
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(delta, grid [G], log evidence [G])``: the grid maximum refined by Brent's method.

    ``log_evidence`` maps ``log delta`` values ``[G]`` to the log evidence ``[G]``. A maximum on
    the edge of ``bounds`` is returned as it is, with a warning to widen them.
    """
    from scipy.optimize import minimize_scalar

    grid = log_grid(bounds, n_grid)
    values = np.asarray(log_evidence(grid), dtype=np.float64)
    best = int(np.argmax(values))
    if best in (0, grid.size - 1):
        warn_user(
            f"{fn}: the marginal likelihood is largest at the edge of `prior_precision_bounds` "
            f"({math.exp(grid[best]):.3g}); widen the bounds",
            RuntimeWarning,
        )
        return float(math.exp(grid[best])), np.exp(grid), values
    result = minimize_scalar(
        lambda t: -float(log_evidence(np.array([t]))[0]),
        bounds=(grid[best - 1], grid[best + 1]),
        method="bounded",
        options={"xatol": 1e-8},
    )
    log_delta = result.x if -result.fun >= values[best] else grid[best]
    return float(math.exp(log_delta)), np.exp(grid), values


def minimise_heldout(nll: np.ndarray, grid: np.ndarray, fn: str) -> float:
    """The grid value ``delta`` with the lowest held-out NLL ``[G]`` (the smallest on ties).

    The upper edge is a valid answer: the validation data prefer a posterior so narrow that
    the predictive is nearly the network's own (:attr:`PriorPrecisionSearch.values` shows the
    curve). The lower edge warns: the search should go further.
    """
    best = int(np.argmin(nll))
    if best == 0:
        warn_user(
            f"{fn}: the held-out NLL is lowest at the smallest prior precision tried "
            f"({grid[best]:.3g}); lower the lower end of `prior_precision_bounds`",
            RuntimeWarning,
        )
    return float(grid[best])


def warn_if_worse_than_map(search: PriorPrecisionSearch, fn: str, remedy: str) -> bool:
    """Warn when an evidence-tuned predictive loses more than :data:`MAP_NLL_MARGIN` nats of
    mean NLL against the plain network on the training points it was checked on.

    ``remedy`` is the call that passes validation data. Returns whether it warned.
    """
    if search.laplace_nll is None or search.map_nll is None:
        return False
    if search.laplace_nll <= search.map_nll + MAP_NLL_MARGIN:
        return False
    warn_user(
        f"{fn}: the prior precision chosen by the evidence ({search.prior_precision:.3g}) "
        f"gives a predictive worse than the plain network on the training data (mean NLL "
        f"{search.laplace_nll:.3f} against {search.map_nll:.3f} nats on {search.n_points} "
        "points); the evidence assumes the network was trained with this prior (e.g. the "
        "matching weight decay), and the predictive is likely worse than the network on new "
        f"data too. Pass validation data to tune it by held-out NLL: {remedy}",
        UserWarning,
    )
    return True


def tune_prior_precision(approx, val, fn: str, remedy: str) -> float:
    """Choose ``approx``'s prior precision (held-out NLL on ``val``, else the evidence), set it
    with ``approx._set_prior(search)`` and return it.

    ``approx`` provides ``prior_precision_bounds``, ``n_prior_grid``, ``_log_evidence(log
    deltas [G]) -> [G]``, ``_nll_curve(pairs, deltas, fn, name) -> (summed predictive NLL [G],
    summed network NLL, count)`` and ``_probe_curve(delta, fn)``, the same on the training
    points kept by the fit. Nothing is set when an error escapes.
    """
    bounds, n_grid = approx.prior_precision_bounds, approx.n_prior_grid
    if val is None:
        delta, grid, values = maximise_evidence(approx._log_evidence, bounds, n_grid, fn)
        totals, map_total, n = approx._probe_curve(delta, fn)
        search = PriorPrecisionSearch(
            "evidence", delta, grid, values, float(totals[0]) / n, map_total / n, n
        )
        approx._set_prior(search, fn)
        warn_if_worse_than_map(search, fn, remedy)
        return delta
    grid = np.exp(log_grid(bounds, n_grid))
    totals, map_total, n = approx._nll_curve(iterate_pairs(val, fn, name="val"), grid, fn, "val")
    if n == 0:
        raise ValueError(f"{fn}: `val` must hold at least one sample (got none)")
    values = np.asarray(totals, dtype=np.float64) / n
    delta = minimise_heldout(values, grid, fn)
    search = PriorPrecisionSearch(
        "held-out NLL", delta, grid, values, float(values.min()), map_total / n, n
    )
    approx._set_prior(search, fn)
    return delta


def check_val_allowed(prior_precision: float | None, val, fn: str) -> None:
    """``val`` tunes the prior precision: refuse it next to a fixed ``prior_precision``."""
    if val is not None and prior_precision is not None:
        raise ValueError(
            f"{fn}: `val` tunes the prior precision, which prior_precision={prior_precision:g} "
            "fixes (got both); pass prior_precision=None to tune it on `val`"
        )
