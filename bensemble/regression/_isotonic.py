"""The pinned isotonic map of :class:`~bensemble.regression.QuantileRecalibration`: its fit,
its evaluation and its generalised inverse (knots ``(x, y)`` from ``(0, 0)`` to ``(1, 1)``)."""

from __future__ import annotations

import torch

__all__ = ["interpolate", "inverse", "isotonic_knots"]

_F64 = torch.float64


def isotonic_knots(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Knots ``(x, y)`` of the pinned isotonic map of PIT values ``u`` onto their ECDF."""
    from sklearn.isotonic import isotonic_regression

    ordered = torch.sort(u).values
    n = ordered.shape[0]
    distinct, counts = torch.unique_consecutive(ordered, return_counts=True)
    ecdf = torch.cumsum(counts, 0).to(_F64) / n  # #{u_j <= u} / N at each distinct value
    fitted = isotonic_regression(
        ecdf.numpy(), sample_weight=counts.to(_F64).numpy(), increasing=True, y_min=0.0, y_max=1.0
    )
    xs = torch.cat([torch.zeros(1, dtype=_F64), distinct, torch.ones(1, dtype=_F64)])
    ys = torch.cat(
        [torch.zeros(1, dtype=_F64), torch.from_numpy(fitted), torch.ones(1, dtype=_F64)]
    )
    # the pinned ends may coincide with a PIT of exactly 0 or 1: keep one knot per x
    keep = torch.ones_like(xs, dtype=torch.bool)
    keep[1:] = xs[1:] > xs[:-1]
    keep[-1] = True
    xs, ys = xs[keep], ys[keep]
    ys[-1] = 1.0
    return xs, torch.cummax(ys, 0).values


def interpolate(xs: torch.Tensor, ys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Piecewise-linear ``(xs, ys)`` at ``v`` (``xs`` increasing, ``v`` in ``[xs_0, xs_-1]``)."""
    v = v.clamp(float(xs[0]), float(xs[-1]))
    hi = torch.searchsorted(xs, v, right=False).clamp(1, xs.shape[0] - 1)
    lo = hi - 1
    span = xs[hi] - xs[lo]
    weight = torch.where(span > 0, (v - xs[lo]) / span.clamp_min(torch.finfo(_F64).tiny), 1.0)
    return ys[lo] + weight * (ys[hi] - ys[lo])


def inverse(xs: torch.Tensor, ys: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``inf{u : R(u) >= p}`` of the non-decreasing piecewise-linear ``R`` through the knots."""
    k = torch.searchsorted(ys, p, right=False).clamp(0, ys.shape[0] - 1)
    prev = (k - 1).clamp_min(0)
    rise = ys[k] - ys[prev]
    frac = torch.where(rise > 0, (p - ys[prev]) / rise.clamp_min(torch.finfo(_F64).tiny), 0.0)
    return torch.where(k == 0, xs[0], xs[prev] + frac * (xs[k] - xs[prev]))
