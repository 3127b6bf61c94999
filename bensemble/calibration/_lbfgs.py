"""Float64 L-BFGS with a strong-Wolfe line search, shared by the affine calibrators.

Vector, matrix and Dirichlet calibration minimise a convex mean NLL (plus a quadratic penalty)
over a handful of tensors; this runs the optimiser, measures the final gradient and refuses a
diverged fit. No public names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__: list[str] = []

# L-BFGS settings (float64 objective).
_TOLERANCE_GRAD = 1e-10
_TOLERANCE_CHANGE = 1e-15
_HISTORY = 20
#: ``converged_``: final max-abs gradient of the objective at most this.
CONVERGENCE_GTOL = 1e-6


@dataclass(frozen=True)
class LbfgsResult:
    """The minimiser and how it was reached."""

    params: list[torch.Tensor]
    max_gradient: float
    n_iter: int
    finite: bool

    @property
    def converged(self) -> bool:
        return self.finite and self.max_gradient <= CONVERGENCE_GTOL


def minimise(
    objective: Callable[[list[torch.Tensor]], torch.Tensor],
    initial: list[torch.Tensor],
    max_iter: int,
) -> LbfgsResult:
    """Minimise ``objective(params)`` from ``initial`` (float64 tensors, not modified).

    Runs with gradients enabled whatever the caller's grad mode, and returns detached tensors.
    """
    params = [p.detach().clone().requires_grad_() for p in initial]
    optimizer = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=_TOLERANCE_GRAD,
        tolerance_change=_TOLERANCE_CHANGE,
        history_size=_HISTORY,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = objective(params)
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
        optimizer.zero_grad()
        objective(params).backward()
    grads = [p.grad for p in params]
    gmax = max(float(g.abs().max()) if g is not None and g.numel() else 0.0 for g in grads)
    finite = all(bool(torch.isfinite(p).all()) for p in params) and gmax == gmax
    n_iter = int(optimizer.state[params[0]].get("n_iter", 0))
    return LbfgsResult([p.detach() for p in params], gmax, n_iter, finite)
