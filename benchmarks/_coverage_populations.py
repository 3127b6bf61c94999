"""Populations whose binned calibration errors are known exactly (coverage simulations).

Shared by ``benchmarks/bench_interval_coverage.py`` and the slow coverage test
(``tests/metrics/test_interval_coverage.py``). Each population is tuned by one scale ``lam`` so
that its *binned population* error with the report's fixed bins equals a target exactly:

* :class:`TopLabelPopulation` (top-label ECE): confidence ``c = 0.1 + 0.9 X``, ``X ~ Beta(a, b)``;
  ``P(correct | c) = c + lam delta(c)``; ``T_b = lam int_b f(c) delta(c) dc`` by adaptive
  quadrature (scipy ``quad``, absolute error < 1e-13), ECE ``= sum_b |T_b|`` is linear in
  ``lam``. ``K = 10`` classes: the top class holds ``c``, the others ``(1 - c) / 9`` each.
* :class:`ClasswisePopulation` (classwise ECE): ``A`` probability vectors ("atoms", drawn once,
  equally likely); the true label distribution of atom ``a`` is ``q_a = p_a + lam s_a (1/K -
  p_a)`` (``s_a >= 0`` varies with the atom: over-confident by varying amounts), so
  ``T_kb = lam mean_a s_a (1/K - p_ak) [p_ak in b]`` exactly, bins from the library's own binning.
* :class:`EECEPopulation` (binary EECE, bins fixed): ``M`` cells (the bins) with masses
  ``rho_m``; member ``h`` predicts ``c_hm + e`` with ``e ~ U(-a, a)`` iid, EU the member
  variance (``E[EU | m] = Var_h c_hm + (H - 1) a^2 / (3 H)``); ``P(y = 1 | m) = pi_m`` solved so
  that the population term is ``tau_m = lam r_m`` exactly; EECE ``= sum_m rho_m |tau_m|``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from bensemble.metrics._binning import grid_edges, uniform_bin_ids

N_BINS = 15  # the report's default equal-width bins


class TopLabelPopulation:
    """Top-label confidences from a scaled Beta, correctness ``c + lam delta(c)``."""

    def __init__(self, target: float, shape: str = "wave", n_bins: int = N_BINS, a=5.0, b=1.5):
        from scipy import integrate, stats

        self.k, self.n_bins, self.shape = 10, n_bins, shape
        self.beta = stats.beta(a, b)
        edges = grid_edges(n_bins).numpy()

        def density(c):
            return self.beta.pdf((c - 0.1) / 0.9) / 0.9

        per_bin = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            lo, hi = max(lo, 0.1), hi
            if hi <= lo:
                per_bin.append(0.0)
                continue
            value, _ = integrate.quad(
                lambda c: density(c) * self._delta(c), lo, hi, epsabs=1e-14, epsrel=1e-12, limit=200
            )
            per_bin.append(value)
        unit = float(np.abs(per_bin).sum())
        self.lam = target / unit
        self.terms = self.lam * np.asarray(per_bin)  # T_b, exact
        self.truth = float(np.abs(self.terms).sum())

    def _delta(self, c):
        if self.shape == "wave":  # signs change inside bins 2, 7 and 12
            return c * (1 - c) * np.cos(3 * np.pi * c)
        return -c * (1 - c)  # "over": over-confident everywhere

    def sample(self, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        c = 0.1 + 0.9 * rng.beta(self.beta.args[0], self.beta.args[1], size=n)
        correct = rng.random(n) < c + self.lam * self._delta(c)
        probs = np.empty((n, self.k))
        probs[:] = ((1 - c) / (self.k - 1))[:, None]
        probs[:, 0] = c
        wrong = rng.integers(1, self.k, size=n)
        labels = np.where(correct, 0, wrong)
        return torch.from_numpy(probs), torch.from_numpy(labels)


class ClasswisePopulation:
    """``A`` atoms ``p_a`` (Dirichlet, floored), true labels from ``q_a``."""

    def __init__(self, target: float, k: int = 4, atoms: int = 1000, n_bins: int = N_BINS):
        rng = np.random.default_rng(20240611)
        self.k, self.n_bins = k, n_bins
        p = 0.85 * rng.dirichlet(np.full(k, 0.6), size=atoms) + 0.15 / k
        self.p = p / p.sum(1, keepdims=True)
        strength = 0.5 + 0.5 * np.cos(4 * np.pi * self.p.max(1))  # in [0, 1]
        direction = strength[:, None] * (1.0 / k - self.p)  # rows sum to 0
        ids = uniform_bin_ids(torch.from_numpy(self.p), n_bins).long().numpy()  # [A, K]
        flat = (ids + np.arange(k) * n_bins).reshape(-1)
        unit_terms = np.bincount(flat, weights=direction.reshape(-1), minlength=k * n_bins) / atoms
        unit = float(np.abs(unit_terms).sum()) / k
        self.lam = target / unit
        self.q = self.p + self.lam * direction
        if self.q.min() < 0:
            raise ValueError("target too large for this population")
        self.terms = self.lam * unit_terms / k
        self.truth = float(np.abs(self.terms).sum())
        self._cdf = np.cumsum(self.q, 1)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        a = rng.integers(0, self.p.shape[0], size=n)
        u = rng.random(n)
        labels = np.minimum((u[:, None] > self._cdf[a]).sum(1), self.k - 1)
        return torch.from_numpy(self.p[a]), torch.from_numpy(labels)


class EECEPopulation:
    """Binary members around cell centres; ``tau_m = lam r_m`` exactly; bins = cells."""

    def __init__(self, target: float, cells: int = 50, members: int = 5, half_width: float = 0.25):
        rng = np.random.default_rng(7)
        self.m, self.h, self.a = cells, members, half_width
        self.rho = rng.dirichlet(np.full(cells, 3.0))
        centre = rng.uniform(0.3, 0.7, size=cells)
        self.c = np.clip(centre[None] + rng.normal(0, 0.04, size=(members, cells)), 0.26, 0.74)
        noise = (members - 1) / members * half_width**2 / 3.0  # E[Var_h e]
        r = np.cos(3 * np.pi * np.arange(cells) / cells) + 0.6  # in [-0.4, 1.6]
        self.lam = target / float((self.rho * np.abs(r)).sum())
        self.tau = self.lam * r
        if (self.tau + noise).min() < 0:
            raise ValueError("target too large for this population")
        side = np.where(np.arange(cells) % 2 == 0, 1.0, -1.0)
        self.pi = self.c.mean(0) + side * np.sqrt(self.tau + noise)
        self.truth = float((self.rho * np.abs(self.tau)).sum())
        self._cdf = np.cumsum(self.rho)

    def sample(
        self, n: int, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cell = np.minimum(np.searchsorted(self._cdf, rng.random(n) * self._cdf[-1]), self.m - 1)
        p = self.c[:, cell] + rng.uniform(-self.a, self.a, size=(self.h, n))
        y = (rng.random(n) < self.pi[cell]).astype(np.int64)
        return torch.from_numpy(p), torch.from_numpy(y), torch.from_numpy(cell)


def binomial_lower_bound(covered: int, runs: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower bound of a coverage of ``covered`` out of ``runs``."""
    from scipy import stats

    if covered == 0:
        return 0.0
    return float(stats.beta.ppf(1.0 - confidence, covered, runs - covered + 1))


def truth_check(population) -> float:
    """The population's exact error (for the tables)."""
    return population.truth if math.isfinite(population.truth) else float("nan")


def mean_truths(population: TopLabelPopulation) -> dict[str, float]:
    """Exact accuracy, NLL (``-log(p_y + 1e-8)``) and Brier score of a top-label population."""
    from scipy import integrate

    pop, k = population, population.k

    def density(c):
        return pop.beta.pdf((c - 0.1) / 0.9) / 0.9

    def right(c):
        return c + pop.lam * pop._delta(c)

    def brier(c):
        other = (1 - c) / (k - 1)
        ok = (1 - c) ** 2 + (k - 1) * other**2
        wrong = c**2 + (1 - other) ** 2 + (k - 2) * other**2
        return right(c) * ok + (1 - right(c)) * wrong

    def nll(c):
        other = (1 - c) / (k - 1)
        return -right(c) * np.log(c + 1e-8) - (1 - right(c)) * np.log(other + 1e-8)

    out = {}
    for name, fn in (("accuracy", right), ("nll", nll), ("brier", brier)):
        value, _ = integrate.quad(
            lambda c, fn=fn: density(c) * fn(c), 0.1, 1.0, epsabs=1e-13, epsrel=1e-12, limit=400
        )
        out[name] = value
    return out


def selective_truths(population: TopLabelPopulation, points: int = 400_001) -> dict[str, float]:
    """Population misclassification AUROC and AURC of a top-label population (Simpson's rule
    on a fine grid of confidences; the integrands are smooth, error well below 1e-7).

    AUROC ``= P(c_error < c_correct)``; AURC ``= int risk(coverage) d coverage`` with
    ``risk(t) = P(error, c >= t) / P(c >= t)`` for the threshold ``t`` of each coverage.
    """
    from scipy import integrate

    c = np.linspace(0.1, 1.0, points)
    f = population.beta.pdf((c - 0.1) / 0.9) / 0.9
    right = c + population.lam * population._delta(c)
    # tails from the top: mass, errors and correct points with confidence >= c
    tail = integrate.cumulative_simpson((f)[::-1], x=-c[::-1], initial=0.0)[::-1]
    tail_err = integrate.cumulative_simpson((f * (1 - right))[::-1], x=-c[::-1], initial=0.0)[::-1]
    tail_ok = tail - tail_err
    total_err, total_ok = tail_err[0], tail_ok[0]
    auroc = integrate.simpson(f * (1 - right) * tail_ok, x=c) / (total_err * total_ok)
    risk = np.divide(tail_err, tail, out=np.zeros_like(tail), where=tail > 0)
    aurc = integrate.simpson(risk * f, x=c) / tail[0]
    return {"error_auroc": float(auroc), "aurc": float(aurc)}
