"""Pólya–Gamma ``PG(1, c)`` random variables: an exact sampler and the closed-form moments.

A Pólya–Gamma variable ``omega ~ PG(b, c)`` is the infinite convolution of gammas (Polson, Scott &
Windle 2013, eq. 1)::

    omega = 1 / (2 pi^2) * sum_{k >= 1} g_k / ((k - 1/2)^2 + c^2 / (4 pi^2)),   g_k ~ Gamma(b, 1)

with ``E[omega] = b / (2c) tanh(c/2)`` and ``Var[omega] = b (sinh c - c) / (4 c^3 cosh^2(c/2))``
(``b/4`` and ``b/24`` at ``c = 0``). Only ``b = 1`` is needed by logistic regression.

The sampler is the *exact* accept/reject method of Polson, Scott & Windle (2013, section 4), after
Devroye's series method for the Jacobi distribution: ``PG(1, c) = J*(1, c/2) / 4``, and ``J*(1, z)``
is drawn from a two-piece proposal (an exponential tail on ``(t, inf)`` and a truncated inverse
Gaussian on ``(0, t]``, ``t = 0.64``) whose acceptance test evaluates the alternating series of
the density one term at a time. Nothing is truncated, so draws are exact up to floating point; the
acceptance rate exceeds 0.9992 for every ``c``. Everything is vectorised: each round proposes for
all still-pending entries at once and only the rejected ones go round again.

Reference: N. G. Polson, J. G. Scott and J. Windle (2013), "Bayesian inference for logistic models
using Pólya–Gamma latent variables", JASA 108(504), 1339–1349.
"""

from __future__ import annotations

import math

import torch

from bensemble._seeds import DEFAULT_SEED
from bensemble._validation import as_float_tensor, check_generator

__all__ = ["sample_polya_gamma", "polya_gamma_mean", "polya_gamma_variance"]

#: Split point of the two proposal pieces (the value Polson, Scott & Windle recommend).
_T = 0.64
_PI2 = math.pi**2
#: Terms of the alternating series evaluated at once, and the most ever evaluated (the terms fall
#: like exp(-2 n^2 / t), so 4 decide in practice); an entry still undecided at the maximum is
#: redrawn.
_FIRST_TERMS = 4
_MAX_TERMS = 64
#: Below this |c| the closed-form moments use their Taylor expansions (avoids cancellation).
_SMALL_C = 1e-3


def polya_gamma_mean(c) -> torch.Tensor:
    """``E[PG(1, c)] = tanh(c/2) / (2c)`` (``1/4`` at ``c = 0``), elementwise, float64."""
    c = as_float_tensor(c, "c", "polya_gamma_mean", allow_empty=True).abs()
    safe = torch.where(c < _SMALL_C, torch.ones_like(c), c)
    exact = torch.tanh(safe / 2.0) / (2.0 * safe)
    return torch.where(c < _SMALL_C, 0.25 - c**2 / 48.0, exact)


def polya_gamma_variance(c) -> torch.Tensor:
    """``Var[PG(1, c)] = (sinh c - c) / (4 c^3 cosh^2(c/2))`` (``1/24`` at ``c = 0``), float64.

    Written as ``(2 tanh(c/2) - c sech^2(c/2)) / (4 c^3)`` so that large ``|c|`` does not overflow.
    """
    c = as_float_tensor(c, "c", "polya_gamma_variance", allow_empty=True).abs()
    safe = torch.where(c < _SMALL_C, torch.ones_like(c), c)
    half = safe / 2.0
    exact = (2.0 * torch.tanh(half) - safe / torch.cosh(half) ** 2) / (4.0 * safe**3)
    return torch.where(c < _SMALL_C, 1.0 / 24.0 - c**2 / 120.0, exact)


def sample_polya_gamma(
    c, *, generator: torch.Generator | None = None, seed: int | None = DEFAULT_SEED
):
    """Exact draws ``omega ~ PG(1, c)``, one per entry of ``c``.

    Args:
        c: tilting parameters, any shape (tensor or numpy array); the law is symmetric in ``c``.
        generator: random source (its state advances: calls differ).
        seed: seed when no ``generator`` is given (default 0); ``None``: torch's global
            random state.

    Returns:
        float64 tensor of the shape of ``c`` (on ``c``'s device).

    Example:
        >>> w = sample_polya_gamma(torch.zeros(20000), seed=0)
        >>> abs(float(w.mean()) - 0.25) < 0.005
        True
    """
    fn = "sample_polya_gamma"
    c = as_float_tensor(c, "c", fn, allow_empty=True)
    g = check_generator(generator, seed, fn)
    return _sample_pg1(c.reshape(-1), g).reshape(c.shape)


def _sample_pg1(c: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
    """``PG(1, c)`` draws for a flat float64 ``c`` (no input checks; used by the Gibbs loop)."""
    z = c.abs() / 2.0
    x = _propose(z, g)
    accepted = _series_accepts(x, g)
    if bool(accepted.all()):  # the usual case: one round (acceptance rate > 0.9992)
        return x / 4.0
    out = x.clone()
    pending = (~accepted).nonzero()[:, 0]
    while pending.numel() > 0:
        x = _propose(z[pending], g)
        accepted = _series_accepts(x, g)
        out[pending[accepted]] = x[accepted]
        pending = pending[~accepted]
    return out / 4.0


# Vectorisation: every inner rejection loop draws a few iid attempts per pending entry at once and
# keeps the first success (the law of the first success of an iid sequence); entries without a
# success go round again with their proposal piece unchanged, so nothing is biased. Small batches
# take more attempts per round (fewer Python rounds), large ones fewer (less wasted work).
_ATTEMPT_BUDGET = 4096


def _attempts(n_pending: int) -> int:
    return max(2, min(8, _ATTEMPT_BUDGET // max(n_pending, 1)))


def _uniform(shape, g, like: torch.Tensor) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float64, device=like.device)


def _exponential(shape, g, like: torch.Tensor) -> torch.Tensor:
    # -log(1 - U) with U in [0, 1) is finite and Exp(1).
    return -torch.log1p(-_uniform(shape, g, like))


def _first_success(ok: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the value of the first successful attempt ``[n]`` and whether there was one."""
    first = ok.to(torch.uint8).argmax(dim=1, keepdim=True)  # argmax returns the first maximum
    return values.gather(1, first)[:, 0], ok.any(dim=1)


def _propose(z: torch.Tensor, g) -> torch.Tensor:
    """One draw per entry from the two-piece proposal for ``J*(1, z)``."""
    k = _PI2 / 8.0 + z**2 / 2.0
    # Masses of the two pieces: p (exponential tail on (t, inf)) and q (inverse Gaussian on (0, t]):
    #   p = pi / (2 k) exp(-k t)
    #   q = 2 [exp(-z) Phi((t z - 1) / sqrt t) + exp(z) Phi(-(t z + 1) / sqrt t)]
    root_t = math.sqrt(_T)
    log_p = math.log(math.pi / 2.0) - torch.log(k) - k * _T
    log_q = math.log(2.0) + torch.logaddexp(
        -z + torch.special.log_ndtr((_T * z - 1.0) / root_t),
        z + torch.special.log_ndtr(-(_T * z + 1.0) / root_t),
    )
    n = z.numel()
    tail = _uniform(n, g, z) < torch.sigmoid(log_p - log_q)
    x_tail = _T + _exponential(n, g, z) / k
    return torch.where(tail, x_tail, _truncated_inverse_gaussian(z, g))


def _truncated_inverse_gaussian(z: torch.Tensor, g) -> torch.Tensor:
    """Inverse Gaussian with mean ``1/z`` and shape 1, truncated to ``(0, t]``, one per entry."""
    large = z < 1.0 / _T
    if bool(large.all()):
        return _tig_large_mean(z, g)
    if not bool(large.any()):
        return _tig_small_mean(z, g)
    x = torch.empty_like(z)
    x[large] = _tig_large_mean(z[large], g)
    x[~large] = _tig_small_mean(z[~large], g)
    return x


def _tig_large_mean(z: torch.Tensor, g) -> torch.Tensor:
    """Truncated inverse Gaussian when its mean ``1/z`` exceeds ``t``.

    The target density on ``(0, t]`` is proportional to ``x^{-3/2} exp(-1/(2x)) exp(-z^2 x / 2)``.
    The first factor is the law of ``1/N^2`` for a standard normal ``N`` conditioned on
    ``|N| >= a = 1/sqrt(t)``; that tail is drawn as ``N = a + e1/a`` with ``e1 ~ Exp(1)`` kept when
    ``e1^2 <= 2 e2 / t`` (Marsaglia's tail method), and ``1/N^2 = t / (1 + t e1)^2``. The second
    factor is the acceptance probability.
    """
    out = torch.empty_like(z)
    pending = torch.arange(z.numel(), device=z.device)
    while pending.numel() > 0:
        shape = (pending.numel(), _attempts(pending.numel()))
        a, b = _exponential(shape, g, z), _exponential(shape, g, z)
        x = _T / (1.0 + _T * a) ** 2
        tilt = torch.exp(-0.5 * z[pending, None] ** 2 * x)
        ok = (a * a <= 2.0 * b / _T) & (_uniform(shape, g, z) <= tilt)
        value, found = _first_success(ok, x)
        out[pending[found]] = value[found]
        pending = pending[~found]
    return out


def _tig_small_mean(z: torch.Tensor, g) -> torch.Tensor:
    """Truncated inverse Gaussian when its mean ``mu = 1/z`` is at most ``t``: untruncated draws
    (Michael, Schucany & Haas 1976) kept when they land in ``(0, t]``."""
    out = torch.empty_like(z)
    pending = torch.arange(z.numel(), device=z.device)
    while pending.numel() > 0:
        shape = (pending.numel(), _attempts(pending.numel()))
        mu = 1.0 / z[pending, None]
        mu_y = mu * torch.randn(shape, generator=g, dtype=torch.float64, device=z.device) ** 2
        x = mu + 0.5 * mu * mu_y - 0.5 * mu * torch.sqrt(4.0 * mu_y + mu_y * mu_y)
        x = torch.where(_uniform(shape, g, z) > mu / (mu + x), mu * mu / x, x)
        value, found = _first_success(x <= _T, x)
        out[pending[found]] = value[found]
        pending = pending[~found]
    return out


def _series_terms(x: torch.Tensor, n_terms: int) -> torch.Tensor:
    """Terms ``a_n(x)``, ``n < n_terms``, of the ``J*(1, 0)`` density series ``[N, n_terms]``.

    ``a_n(x) = pi (n + 1/2) exp(-(n + 1/2)^2 pi^2 x / 2)`` for ``x > t`` and
    ``pi (n + 1/2) (2 / (pi x))^{3/2} exp(-2 (n + 1/2)^2 / x)`` for ``0 < x <= t``; on each piece
    the terms decrease in ``n``, so the alternating partial sums bracket the density.
    """
    h = torch.arange(n_terms, dtype=torch.float64, device=x.device) + 0.5
    k = h * math.pi
    xx = x[:, None]
    tail = k * torch.exp(-0.5 * k * k * xx)
    safe = xx.clamp_min(1e-300)
    log_body = (
        -1.5 * (math.log(math.pi / 2.0) + torch.log(safe)) + torch.log(k) - 2.0 * h * h / safe
    )
    body = torch.where(xx > 0, torch.exp(log_body), torch.zeros_like(log_body))
    return torch.where(xx > _T, tail, body)


def _series_accepts(x: torch.Tensor, g) -> torch.Tensor:
    """Devroye's alternating-series test: accept ``x`` with probability f(x) / proposal(x).

    With ``u ~ U(0, 1)`` and ``y = u a_0(x)``, the sequential test accepts at the first odd partial
    sum ``S_n >= y`` and rejects at the first even one ``S_n < y``. Because the partial sums bracket
    the density (odd ones increase, even ones decrease), accepting iff ``y <= S_{2m+1}`` or
    rejecting iff ``y > S_{2m}`` for the last evaluated pair gives the same decision; the entries in
    between (essentially never seen with 4 terms) get twice as many terms.
    """
    n_terms = _FIRST_TERMS
    terms = _series_terms(x, n_terms)
    y = _uniform(x.numel(), g, x) * terms[:, 0]
    accepted = torch.zeros_like(x, dtype=torch.bool)
    undecided = torch.ones_like(x, dtype=torch.bool)
    while True:
        signs = torch.ones(n_terms, dtype=torch.float64, device=x.device)
        signs[1::2] = -1.0
        partial = (terms * signs).cumsum(dim=1)
        lower, upper = partial[:, -1], partial[:, -2]  # n_terms is even: last sum is odd
        hit = undecided & (y <= lower)
        accepted |= hit
        undecided &= ~hit & ~(y > upper)
        if not bool(undecided.any()) or n_terms >= _MAX_TERMS:
            return accepted  # entries still undecided at _MAX_TERMS are rejected (redrawn)
        n_terms *= 2
        terms = _series_terms(x, n_terms)
