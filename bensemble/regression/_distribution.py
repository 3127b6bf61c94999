r"""Kernels of the members' predictive distribution: CDF, density, quantiles and CRPS.

Every kernel takes float64 ``means [M, N]`` and ``variances [M, N]`` (``>= 0``; a variance of 0
is an atom at the mean, so point members are the all-atom case) and works on chunks of points,
so its temporaries are ``O(M * chunk)`` (``O(M^2 * chunk)`` for the mixture CRPS).

* CDF pair: ``F(y) = P(X <= y)`` and ``S(y) = P(X >= y)``, each ``(1/M) sum_m`` of the members'
  (``Phi((y - mu) / sigma)``, or ``1{mu <= y}`` for an atom). ``S`` is computed directly
  (``Phi((mu - y) / sigma)``), not as ``1 - F``, so the upper tail keeps its relative precision;
  ``F + S = 1 + P(X = y)``.
* Quantile ``Q(p) = inf{x : F(x) >= p}`` (the left-continuous inverse): closed form for one
  Gaussian, else bisection inside ``[min_m q_m(p), max_m q_m(p)]`` (``q_m`` the members'
  quantiles; an atom's is its mean) down to adjacent float64 values (:func:`quantiles`).
* CRPS of the mixture (Grimit et al. 2006):

  .. math:: \mathrm{CRPS} = \sum_m w_m A(y - \mu_m, \sigma_m^2)
            - \tfrac12 \sum_{m, m'} w_m w_{m'} A(\mu_m - \mu_{m'}, \sigma_m^2 + \sigma_{m'}^2),

  ``A(d, v) = 2 sqrt(v) phi(d / sqrt(v)) + d (2 Phi(d / sqrt(v)) - 1)`` (``= |d|`` at ``v = 0``),
  ``w_m = 1/M``. All atoms: the energy form ``(1/M) sum |x_m - y| - 1/(2 M^2) sum |x_m - x_m'|``,
  computed from the sorted members, ``sum_{m,m'} |x_m - x_m'| = 2 sum_i (2i - M - 1) x_(i)``.
"""

from __future__ import annotations

import math

import torch

from bensemble.regression._inputs import CHUNK

__all__ = [
    "cdf_pair",
    "crps_values",
    "gaussian_crps",
    "log_density",
    "quantile",
    "quantiles",
]

_F64 = torch.float64
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _steps(n: int, per_row: int) -> range:
    return range(0, n, max(1, CHUNK // max(1, per_row)))


def cdf_pair(
    means: torch.Tensor, variances: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(F(y), S(y))`` ``[N]``: ``P(X <= y)`` and ``P(X >= y)`` under the members' mixture."""
    n_members, n = means.shape
    lower = torch.empty(n, dtype=_F64, device=means.device)
    upper = torch.empty_like(lower)
    for start in _steps(n, n_members):
        stop = start + max(1, CHUNK // max(1, n_members))
        mu, var, t = means[:, start:stop], variances[:, start:stop], y[None, start:stop]
        sd = var.sqrt()
        atom = sd == 0
        z = (t - mu) / torch.where(atom, torch.ones_like(sd), sd)
        lower[start:stop] = torch.where(atom, (mu <= t).to(_F64), torch.special.ndtr(z)).mean(0)
        upper[start:stop] = torch.where(atom, (mu >= t).to(_F64), torch.special.ndtr(-z)).mean(0)
    return lower, upper


def log_density(means: torch.Tensor, variances: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log f(y)`` ``[N]`` of the mixture (every variance > 0), by a log-sum-exp over members."""
    n_members, n = means.shape
    out = torch.empty(n, dtype=_F64, device=means.device)
    for start in _steps(n, n_members):
        stop = start + max(1, CHUNK // max(1, n_members))
        mu, var, t = means[:, start:stop], variances[:, start:stop], y[None, start:stop]
        log_pdf = -0.5 * (t - mu).square() / var - 0.5 * var.log() - _LOG_SQRT_2PI
        if n_members == 1:
            out[start:stop] = log_pdf[0]
        else:
            out[start:stop] = torch.logsumexp(log_pdf, dim=0) - math.log(n_members)
    return out


def gaussian_crps(mean: torch.Tensor, variance: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Closed-form CRPS of ``N(mean, variance)`` at ``y`` (``|y - mean|`` for variance 0)."""
    sd = variance.sqrt()
    atoms = bool((sd == 0).any())
    residual = y - mean
    z = residual / (torch.where(sd == 0, 1.0, sd) if atoms else sd)
    # sd (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi)), in place: four temporaries of [N]
    value = torch.special.ndtr(z).mul_(2.0).sub_(1.0).mul_(z)
    value.add_(z.square_().mul_(-0.5).exp_(), alpha=2.0 / math.sqrt(2.0 * math.pi))
    value.sub_(_INV_SQRT_PI).mul_(sd)
    return torch.where(sd == 0, residual.abs(), value) if atoms else value


def _a(d: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``A(d, v) = E|d + sqrt(v) Z|`` for ``Z ~ N(0, 1)``."""
    sd = v.sqrt()
    atom = sd == 0
    z = d / torch.where(atom, torch.ones_like(sd), sd)
    pdf = torch.exp(-0.5 * z.square()) / math.sqrt(2.0 * math.pi)
    value = 2.0 * sd * pdf + d * (2.0 * torch.special.ndtr(z) - 1.0)
    return torch.where(atom, d.abs(), value)


def _energy_crps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Energy-form CRPS of the empirical distribution of ``x [M, n]`` at ``y [n]``."""
    m = x.shape[0]
    first = (x - y[None]).abs().mean(dim=0)
    ordered = torch.sort(x, dim=0).values
    coef = (2.0 * torch.arange(1, m + 1, dtype=_F64, device=x.device) - m - 1.0)[:, None]
    spread = (coef * ordered).sum(dim=0) / (m * m)  # = (1 / (2 M^2)) sum_{m, m'} |x_m - x_m'|
    return first - spread


def crps_values(means: torch.Tensor, variances: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS ``[N]`` of the members' mixture at ``y`` (closed form; energy form for atoms)."""
    n_members, n = means.shape
    if n_members == 1:
        return gaussian_crps(means[0], variances[0], y)
    out = torch.empty(n, dtype=_F64, device=means.device)
    if not bool((variances > 0).any()):
        for start in _steps(n, n_members):
            stop = start + max(1, CHUNK // n_members)
            out[start:stop] = _energy_crps(means[:, start:stop], y[start:stop])
        return out
    rows, cols = torch.triu_indices(n_members, n_members, offset=1, device=means.device)
    per_row = n_members * n_members
    for start in _steps(n, per_row):
        stop = start + max(1, CHUNK // per_row)
        mu, var, t = means[:, start:stop], variances[:, start:stop], y[None, start:stop]
        first = _a(t - mu, var).mean(dim=0)
        pairs = _a(mu[rows] - mu[cols], var[rows] + var[cols]).sum(dim=0)
        # the m = m' terms are A(0, 2 v_m) = 2 sqrt(v_m / pi); the pairs m != m' count twice
        diagonal = var.sqrt().mul(2.0 * _INV_SQRT_PI).sum(dim=0)
        out[start:stop] = first - (2.0 * pairs + diagonal) / (2.0 * n_members * n_members)
    return out


def _ordered(x: torch.Tensor) -> torch.Tensor:
    """int64 keys that order float64 values as numbers (``-0.0`` and ``0.0`` share key 0)."""
    bits = x.view(torch.int64)
    return torch.where(bits < 0, -(bits & 0x7FFFFFFFFFFFFFFF), bits)


def _from_ordered(k: torch.Tensor) -> torch.Tensor:
    return torch.where(k < 0, (-k) | torch.iinfo(torch.int64).min, k).view(_F64)


def _mixture_cdf(mu: torch.Tensor, var: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``F(x)`` for ``mu, var [M, 1, c]`` and ``x [L, c]`` -> ``[L, c]``."""
    sd = var.sqrt()
    atom = sd == 0
    z = (x[None] - mu) / torch.where(atom, torch.ones_like(sd), sd)
    return torch.where(atom, (mu <= x[None]).to(_F64), torch.special.ndtr(z)).mean(0)


def quantiles(means: torch.Tensor, variances: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """``Q(p) = inf{x : F(x) >= p}`` ``[L, N]`` for the levels ``p [L]`` in ``(0, 1)``.

    One Gaussian: ``mu + sigma Phi^{-1}(p)``. All atoms: the order statistic ``x_(k)`` with the
    smallest ``k`` such that ``k / M >= p`` (the float ``k / M``, as the CDF computes it).
    Otherwise bisection inside ``[min_m q_m(p), max_m q_m(p)]`` over the *bit patterns* of the
    float64 values in the bracket: at most 64 steps to the two adjacent floats around the
    quantile, whatever its magnitude (a bisection over reals would crawl through the denormals
    when the quantile is 0).
    """
    levels = levels.to(device=means.device, dtype=_F64)
    n_members, n = means.shape
    if not bool((variances > 0).any()):  # atoms only
        at_atoms = torch.arange(1, n_members + 1, dtype=_F64, device=means.device) / n_members
        k = torch.searchsorted(at_atoms, levels).clamp_max(n_members - 1)
        return torch.sort(means, dim=0).values[k]
    z = torch.special.ndtri(levels)
    if n_members == 1:
        return means + variances.sqrt() * z[:, None]
    out = torch.empty(levels.shape[0], n, dtype=_F64, device=means.device)
    per_row = n_members * levels.shape[0]
    for start in _steps(n, per_row):
        stop = start + max(1, CHUNK // per_row)
        mu, var = means[:, None, start:stop], variances[:, None, start:stop]
        q = mu + var.sqrt() * z[None, :, None]  # [M, L, c] the members' quantiles
        lo, hi = q.min(dim=0).values, q.max(dim=0).values
        p = levels[:, None]
        hi = torch.where(_mixture_cdf(mu, var, lo) >= p, lo, hi)  # lo itself qualifies
        lo_k, hi_k = _ordered(lo), _ordered(hi)
        for _ in range(66):  # F(lo) < p <= F(hi) (or lo == hi); halve the floats between
            open_ = hi_k - 1 > lo_k  # (hi_k - lo_k would overflow across zero)
            if not bool(open_.any()):
                break
            mid_k = (lo_k >> 1) + (hi_k >> 1) + (lo_k & hi_k & 1)  # floor of the mean, exact
            up = _mixture_cdf(mu, var, _from_ordered(mid_k)) >= p
            hi_k = torch.where(open_ & up, mid_k, hi_k)
            lo_k = torch.where(open_ & ~up, mid_k, lo_k)
        out[:, start:stop] = _from_ordered(hi_k)
    return out


def quantile(means: torch.Tensor, variances: torch.Tensor, p: float) -> torch.Tensor:
    """``Q(p)`` ``[N]`` for one level ``p`` in ``(0, 1)`` (:func:`quantiles`)."""
    return quantiles(means, variances, torch.tensor([p], dtype=_F64))[0]
