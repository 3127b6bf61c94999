"""Coverage, set size and empty-set rate of the conformal scores over 200 random splits.

Two workloads, alpha = 0.1:

* ``miscalibrated`` - the 200 exchangeable calibration / test splits (500 / 500, K = 5) of
  ``tests/conformal/test_split.py``: Dirichlet(0.7) probabilities, labels drawn from a sharper,
  class-reweighted distribution;
* ``calibrated`` - a well-calibrated 10-class model (logits ``3 * N(0, 1)``, labels drawn from
  its own softmax), 200 splits of 1000 / 1000: the case where a score that counts the label's own
  probability in full gives empty sets for the most confident inputs.

For every score (LAC, APS / RAPS randomised and not), marginal and class-conditional, it prints
the mean over splits of the coverage, the set size and the empty-set rate. Run:
``python benchmarks/compare_conformal_scores.py`` (``PYTHONPATH`` picks the bensemble to measure).
"""

from __future__ import annotations

import numpy as np
import torch

from bensemble.conformal import SplitConformalClassifier, coverage, empty_set_rate, mean_set_size

CONFIGS = [
    dict(score="lac"),
    dict(score="aps", randomized=True),
    dict(score="aps", randomized=False),
    dict(score="raps", randomized=True, k_reg=1, lam=0.1),
    dict(score="raps", randomized=False, k_reg=2, lam=0.05),
]


def miscalibrated():
    rng = np.random.default_rng(2024)
    n_splits, n, k = 200, 1000, 5
    probs = rng.dirichlet(np.ones(k) * 0.7, size=n_splits * n)
    truth = probs**2.5 * np.array([1.0, 1.0, 1.5, 0.7, 1.2])
    truth /= truth.sum(1, keepdims=True)
    labels = (truth.cumsum(1) < rng.random((n_splits * n, 1))).sum(1).clip(max=k - 1)
    return torch.as_tensor(probs).reshape(n_splits, n, k), torch.as_tensor(labels).reshape(
        n_splits, n
    )


def calibrated():
    g = torch.Generator().manual_seed(0)
    probs = (torch.randn(4000, 10, generator=g, dtype=torch.float64) * 3).softmax(-1)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    perms = [torch.randperm(4000, generator=g)[:2000] for _ in range(200)]
    return torch.stack([probs[p] for p in perms]), torch.stack([labels[p] for p in perms])


def main() -> int:
    for name, (probs, labels) in (("miscalibrated", miscalibrated()), ("calibrated", calibrated())):
        half = probs.shape[1] // 2
        print(f"\n{name}: {probs.shape[0]} splits of {half} / {half}, K = {probs.shape[2]}")
        print(f"{'predictor':<10} {'score':<32} {'coverage':>8} {'size':>6} {'empty':>7}")
        for class_conditional in (False, True):
            for config in CONFIGS:
                g = torch.Generator().manual_seed(0)
                cov, size, empty = [], [], []
                for p, y in zip(probs, labels):
                    cp = SplitConformalClassifier(
                        alpha=0.1, class_conditional=class_conditional, generator=g, **config
                    )
                    sets = cp.calibrate(p[:half], y[:half]).predict_set(p[half:])
                    cov.append(coverage(sets, y[half:]))
                    size.append(mean_set_size(sets))
                    empty.append(empty_set_rate(sets))
                label = ", ".join(f"{k}={v}" for k, v in config.items())
                print(
                    f"{'mondrian' if class_conditional else 'marginal':<10} {label:<32} "
                    f"{np.mean(cov):>8.4f} {np.mean(size):>6.3f} {np.mean(empty):>7.4f}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
