"""The fit of :class:`~bensemble.calibration.EpistemicRecalibrator`: temperature and spread of
member logits by Newton's method on the pooled NLL (no public names).

Member logits ``z_m`` ``[M, N, K]`` (log-probabilities serve: the map ignores per-row shifts)
split into their centre ``zbar = mean_m z_m`` and deviations ``d_m = z_m - zbar``; the map is

    w_m = a zbar + s d_m,        a = 1 / T,

and the objective the mean NLL of the pooled prediction ``q = mean_m softmax(w_m)``:

    F(a, s) = mean_i [ log M - logsumexp_m log p_miy ],   log p_miy = w_miy - logsumexp_k w_mik.

With ``r_m = softmax_m(log p_miy)`` (the members' posterior weights of the label), ``u = (zbar,
d_m)`` and ``g_m = u_y - E_{p_m}[u]``, the derivatives are

    grad F = -mean_i sum_m r_m g_m,
    hess F = -mean_i [ sum_m r_m (g_m g_m^T - Cov_{p_m}[u]) - gbar gbar^T ],   gbar = sum_m r_m g_m,

exact in a few float64 passes over ``[M, N, K]``. The optimiser works on ``(log a, log s)`` inside
a box, with a damped Newton step and a backtracking line search (the problem is not convex in
general; a coarse scan over ``log s`` chooses the starting basin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__: list[str] = []

_F64 = torch.float64
_GTOL = 1e-9  # max |gradient| in (log T, log s) at convergence
_SCAN = 13  # starting points on the log s axis
_ARMIJO = 1e-4
_HALVINGS = 40
_MAX_STEP = 2.0  # in log units


@dataclass(frozen=True)
class SpreadFit:
    """Outcome of the (temperature, spread) fit."""

    temperature: float
    spread: float
    nll: float
    n_iter: int
    converged: bool
    at_boundary: tuple[str, ...]  # "T_min", "T_max", "s_min", "s_max" reached with the
    #                                gradient pointing outward


class PooledNLL:
    """``F``, its gradient and Hessian in ``(log a, log s)`` for fixed member logits."""

    def __init__(self, z: torch.Tensor, y: torch.Tensor) -> None:
        self.zbar = z.mean(dim=0)  # [N, K]
        self.d = z - self.zbar  # [M, N, K]
        index = y.view(1, -1, 1)
        self.zbar_y = self.zbar.gather(1, y.view(-1, 1)).squeeze(1)  # [N]
        self.d_y = self.d.gather(2, index.expand(self.d.shape[0], -1, 1)).squeeze(2)  # [M, N]
        self.log_m = math.log(z.shape[0])

    def has_spread(self) -> bool:
        return bool((self.d != 0).any())

    def _log_p_label(self, a: float, s: float) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.d * s + self.zbar * a
        lse = torch.logsumexp(w, dim=2)  # [M, N]
        return w, a * self.zbar_y + s * self.d_y - lse

    def value(self, x: tuple[float, float]) -> float:
        _, lpy = self._log_p_label(math.exp(x[0]), math.exp(x[1]))
        return float((self.log_m - torch.logsumexp(lpy, dim=0)).mean())

    def evaluate(self, x: tuple[float, float]) -> tuple[float, torch.Tensor, torch.Tensor]:
        """``(F, gradient [2], Hessian [2, 2])`` at ``x = (log a, log s)``."""
        a, s = math.exp(x[0]), math.exp(x[1])
        w, lpy = self._log_p_label(a, s)
        p = torch.softmax(w, dim=2)  # [M, N, K]
        pz, pd = p * self.zbar, p * self.d
        e_z, e_d = pz.sum(dim=2), pd.sum(dim=2)  # [M, N]
        e_zz = (pz * self.zbar).sum(dim=2)
        e_dd = (pd * self.d).sum(dim=2)
        e_zd = (pz * self.d).sum(dim=2)
        g_a, g_s = self.zbar_y - e_z, self.d_y - e_d
        r = torch.softmax(lpy, dim=0)
        gbar_a, gbar_s = (r * g_a).sum(dim=0), (r * g_s).sum(dim=0)  # [N]
        s_aa = (r * (g_a * g_a - (e_zz - e_z * e_z))).sum(dim=0) - gbar_a * gbar_a
        s_ss = (r * (g_s * g_s - (e_dd - e_d * e_d))).sum(dim=0) - gbar_s * gbar_s
        s_as = (r * (g_a * g_s - (e_zd - e_z * e_d))).sum(dim=0) - gbar_a * gbar_s
        stats = torch.stack(
            [
                (self.log_m - torch.logsumexp(lpy, dim=0)).mean(),
                -gbar_a.mean(),
                -gbar_s.mean(),
                -s_aa.mean(),
                -s_ss.mean(),
                -s_as.mean(),
            ]
        ).tolist()
        f, fa, fs, faa, fss, fas = stats
        # chain rule to (log a, log s)
        grad = torch.tensor([a * fa, s * fs], dtype=_F64)
        hess = torch.tensor(
            [[a * a * faa + a * fa, a * s * fas], [a * s * fas, s * s * fss + s * fs]], dtype=_F64
        )
        return f, grad, hess


def _newton_step(grad: torch.Tensor, hess: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
    """A descent step on the free coordinates: Newton where the Hessian is positive definite,
    shifted toward gradient descent (``H + lambda I``) where it is not."""
    h = hess * (free[:, None] & free[None, :]) + torch.diag((~free).to(_F64))
    g = grad * free
    lowest = float(torch.linalg.eigvalsh(h).min())
    if lowest <= 1e-12:
        h = h + torch.eye(2, dtype=_F64) * (1e-6 - lowest + 1e-3 * float(g.abs().max()))
    step = -torch.linalg.solve(h, g) * free
    length = float(step.abs().max())
    return step * (_MAX_STEP / length) if length > _MAX_STEP else step


def solve_spread(
    objective: PooledNLL,
    box: tuple[tuple[float, float], tuple[float, float]],
    log_a0: float,
    max_iter: int,
) -> SpreadFit:
    """Minimise ``F`` over ``(log a, log s)`` in ``box`` (each a ``(low, high)`` pair).

    The start: ``log a0`` (the temperature of the collapsed members, ``s -> 0``) and the best of
    a scan of ``log s`` over its range.
    """
    lo = torch.tensor([box[0][0], box[1][0]], dtype=_F64)
    hi = torch.tensor([box[0][1], box[1][1]], dtype=_F64)
    a0 = min(max(log_a0, box[0][0]), box[0][1])
    scan = [box[1][0] + (box[1][1] - box[1][0]) * j / (_SCAN - 1) for j in range(_SCAN)]
    start = min(scan, key=lambda b: objective.value((a0, b)))
    x = torch.tensor([a0, start], dtype=_F64)
    f, grad, hess = objective.evaluate((float(x[0]), float(x[1])))
    converged, it = False, 0
    while it < max_iter:
        it += 1
        at_lo, at_hi = x <= lo, x >= hi
        free = ~((at_lo & (grad > 0)) | (at_hi & (grad < 0)))
        if float((grad * free).abs().max()) <= _GTOL:
            converged = True
            break
        step = _newton_step(grad, hess, free)
        slope = float((grad * step).sum())
        size, accepted = 1.0, False
        for _ in range(_HALVINGS):
            trial = torch.minimum(torch.maximum(x + size * step, lo), hi)
            f_trial = objective.value((float(trial[0]), float(trial[1])))
            if f_trial <= f + _ARMIJO * size * min(slope, 0.0):
                accepted = True
                break
            size *= 0.5
        if not accepted:  # no decrease at rounding level: the optimum to working precision
            converged = float((grad * free).abs().max()) <= 1e-6
            break
        x = trial
        f, grad, hess = objective.evaluate((float(x[0]), float(x[1])))
    ends = []
    for j, (low_name, high_name) in enumerate((("T_max", "T_min"), ("s_min", "s_max"))):
        if float(x[j]) <= float(lo[j]) and float(grad[j]) > 0:
            ends.append(low_name)  # log a at its low end is T at its high end
        if float(x[j]) >= float(hi[j]) and float(grad[j]) < 0:
            ends.append(high_name)
    return SpreadFit(
        temperature=math.exp(-float(x[0])),
        spread=math.exp(float(x[1])),
        nll=f,
        n_iter=it,
        converged=converged and not ends,
        at_boundary=tuple(ends),
    )
