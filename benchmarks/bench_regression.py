"""Benchmark: second-order regression metrics and conformal intervals against their peers.

Workloads (float64, one torch thread, CPU time by ``time.process_time`` - the machine is shared):

* CRPS of one Gaussian per point, N = 1,000,000: ours ``crps`` vs properscoring's
  ``crps_gaussian(...).mean()``;
* CRPS of M = 10 point members, N = 200,000: ours (energy form from the sorted members) vs
  properscoring's ``crps_ensemble(...).mean()``;
* Gaussian NLL, N = 1,000,000: ours vs Uncertainty Toolbox's ``nll_gaussian``;
* miscalibration area, 100 levels, N = 100,000: ours (two sorted PIT vectors and
  ``searchsorted``) vs Uncertainty Toolbox's ``miscalibration_area(..., vectorized=True)``;
* split conformal, absolute and normalized residuals, calibrate on 500,000 and predict 500,000:
  ours vs crepes' ``ConformalRegressor`` (fit + predict_int), intervals compared elementwise;
* CQR on 100,000 + 100,000: ours vs MAPIE's ``ConformalizedQuantileRegressor`` (prefit).

A second table: coverage and mean width of the 90% intervals over 200 random calibration / test
splits (500 / 1,500 points) of the toy problem's members (three biased Gaussian members whose
variances are half the truth; raw 90% mixture intervals cover 74%), ours against crepes and MAPIE
on the same splits.

Run: ``python benchmarks/bench_regression.py [--repeats 5] [--quick] [--no-write]``; the tables
go to the ``bench_regression`` section of ``benchmarks/results.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: E402

from bensemble.conformal import (  # noqa: E402
    ConformalizedQuantileRegressor,
    SplitConformalRegressor,
)
from bensemble.datasets import make_regression_toy  # noqa: E402
from bensemble.regression import (  # noqa: E402
    crps,
    interval_coverage,
    mean_interval_width,
    miscalibration_area,
    regression_negative_log_likelihood,
)

CLOCK = time.process_time


def _lookup(values):
    from sklearn.base import BaseEstimator, RegressorMixin

    class Lookup(RegressorMixin, BaseEstimator):
        def __init__(self, values=None):
            self.values = values

        def fit(self, X, y):  # noqa: N803
            return self

        @property
        def fitted_(self):
            return True

        def predict(self, X):  # noqa: N803
            return np.asarray(self.values)[np.asarray(X)[:, 0].astype(int)]

    return Lookup(values)


def timing_rows(scale: int, repeats: int) -> list[_harness.Result]:
    import crepes
    import properscoring as ps
    import uncertainty_toolbox as uct
    from mapie.regression import ConformalizedQuantileRegressor as MapieCQR

    rng = np.random.default_rng(0)
    rows = []

    n = 1_000_000 // scale
    mu, sd = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    y = mu + sd * rng.normal(size=n) * 1.3
    p = torch.from_numpy(np.stack([mu, sd**2], -1))[None]
    yt = torch.from_numpy(y)
    t_base, t_ours = _harness.measure_interleaved(
        [lambda: ps.crps_gaussian(y, mu, sd).mean(), lambda: crps(p, yt)], repeats, clock=CLOCK
    )
    diff = abs(crps(p, yt) - ps.crps_gaussian(y, mu, sd).mean())
    checked = "ours checks its inputs (finite, shapes, variances >= 0); the peer checks nothing"
    rows.append(
        _harness.Result(
            f"CRPS, 1 Gaussian, N={n:,}", "properscoring", t_base, t_ours, diff, note=checked
        )
    )
    t_base, t_ours = _harness.measure_interleaved(
        [lambda: uct.nll_gaussian(mu, sd, y), lambda: regression_negative_log_likelihood(p, yt)],
        repeats,
        clock=CLOCK,
    )
    diff = abs(regression_negative_log_likelihood(p, yt) - uct.nll_gaussian(mu, sd, y))
    rows.append(
        _harness.Result(
            f"NLL, 1 Gaussian, N={n:,}", "Uncertainty Toolbox", t_base, t_ours, diff, note=checked
        )
    )

    m_pts = 200_000 // scale
    x = rng.normal(size=(10, m_pts))
    yp = rng.normal(size=m_pts)
    xt, ypt = torch.from_numpy(x), torch.from_numpy(yp)
    t_base, t_ours = _harness.measure_interleaved(
        [lambda: ps.crps_ensemble(yp, x.T).mean(), lambda: crps(xt, ypt)], repeats, clock=CLOCK
    )
    diff = abs(crps(xt, ypt) - ps.crps_ensemble(yp, x.T).mean())
    rows.append(
        _harness.Result(
            f"CRPS, 10 point members, N={m_pts:,}", "properscoring", t_base, t_ours, diff
        )
    )

    k = 100_000 // scale
    pk, yk = p[:, :k], yt[:k]
    t_base, t_ours = _harness.measure_interleaved(
        [
            lambda: uct.miscalibration_area(mu[:k], sd[:k], y[:k], 100, vectorized=True),
            lambda: miscalibration_area(pk, yk),
        ],
        repeats,
        clock=CLOCK,
    )
    diff = abs(miscalibration_area(pk, yk) - uct.miscalibration_area(mu[:k], sd[:k], y[:k], 100))
    rows.append(
        _harness.Result(
            f"miscalibration area, 100 levels, N={k:,}",
            "Uncertainty Toolbox",
            t_base,
            t_ours,
            diff,
            note="ours: two sorts + searchsorted, O(N) memory; UT: an [N, 100] mask",
        )
    )

    half = n // 2
    cal, test = slice(0, half), slice(half, n)
    resid, sig = y[cal] - mu[cal], sd[cal]
    for score in ("absolute", "normalized"):
        sigmas_cal = sig if score == "normalized" else None
        sigmas_test = sd[test] if score == "normalized" else None

        def base(sigmas_cal=sigmas_cal, sigmas_test=sigmas_test):
            model = crepes.ConformalRegressor().fit(resid, sigmas=sigmas_cal)
            return model.predict_int(mu[test], sigmas=sigmas_test, confidence=0.9)

        def ours(score=score):
            cp = SplitConformalRegressor(score, alpha=0.1).calibrate(p[:, cal], yt[cal])
            return cp.predict_interval(p[:, test])

        t_base, t_ours = _harness.measure_interleaved([base, ours], repeats, clock=CLOCK)
        lo, hi = ours()
        ref = base()
        diff = float(
            max(np.abs(lo.numpy() - ref[:, 0]).max(), np.abs(hi.numpy() - ref[:, 1]).max())
        )
        rows.append(
            _harness.Result(
                f"split conformal ({score}), {half:,} + {half:,}", "crepes", t_base, t_ours, diff
            )
        )

    c = 100_000 // scale
    band = np.stack([mu - sd, mu + sd], -1)
    bt = torch.from_numpy(band)[None]
    index = np.arange(n)[:, None]

    def mapie_cqr():
        est = [_lookup(band[:, 0]), _lookup(band[:, 1]), _lookup(mu)]
        model = MapieCQR(est, confidence_level=0.9, prefit=True)
        model.conformalize(index[:c], y[:c])
        return model.predict_interval(index[c : 2 * c], symmetric_correction=True)[1]

    def ours_cqr():
        cqr = ConformalizedQuantileRegressor(alpha=0.1).calibrate(bt[:, :c], yt[:c])
        return cqr.predict_interval(bt[:, c : 2 * c])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_base, t_ours = _harness.measure_interleaved([mapie_cqr, ours_cqr], repeats, clock=CLOCK)
        ref = mapie_cqr()
    lo, hi = ours_cqr()
    diff = float(
        max(np.abs(lo.numpy() - ref[:, 0, 0]).max(), np.abs(hi.numpy() - ref[:, 1, 0]).max())
    )
    rows.append(_harness.Result(f"CQR, {c:,} + {c:,}", "MAPIE (prefit)", t_base, t_ours, diff))
    return rows


def toy_members(n: int, seed: int = 4):
    data = make_regression_toy(n, seed=seed)
    x = data.x[:, 0]
    means = torch.stack([data.mean + 0.1 * torch.sin(k * x) for k in (1.0, 2.0, 3.0)])
    p = torch.stack([means, 0.5 * data.variance.expand(3, -1)], -1)
    sd = data.variance.sqrt()
    band = torch.stack([data.mean - 1.2 * sd, data.mean + 1.2 * sd + 0.1], -1)[None]
    return p, band, data.y


def coverage_table(n_splits: int) -> list[str]:
    import crepes
    from mapie.regression import ConformalizedQuantileRegressor as MapieCQR

    p, band, y = toy_members(2000)
    mean = p[..., 0].mean(0).numpy()
    sigma = (p[..., 1].mean(0) + p[..., 0].var(0, unbiased=False)).sqrt().numpy()
    yn, bn = y.numpy(), band[0].numpy()
    g = torch.Generator().manual_seed(0)
    stats: dict[str, list[list[float]]] = {}
    for _ in range(n_splits):
        perm = torch.randperm(2000, generator=g)
        cal, test = perm[:500], perm[500:]
        c, t = cal.numpy(), test.numpy()
        runs = {}
        for score in ("absolute", "normalized"):
            lo, hi = (
                SplitConformalRegressor(score)
                .calibrate(p[:, cal], y[cal])
                .predict_interval(p[:, test])
            )
            s_c, s_t = (sigma[c], sigma[t]) if score == "normalized" else (None, None)
            ref = crepes.ConformalRegressor().fit(yn[c] - mean[c], sigmas=s_c)
            ref = ref.predict_int(mean[t], sigmas=s_t, confidence=0.9)
            runs[f"{score} (vs crepes)"] = (lo, hi, ref[:, 0], ref[:, 1])
        lo, hi = (
            ConformalizedQuantileRegressor()
            .calibrate(band[:, cal], y[cal])
            .predict_interval(band[:, test])
        )
        index = np.arange(2000)[:, None]
        est = [_lookup(bn[:, 0]), _lookup(bn[:, 1]), _lookup(bn.mean(1))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = MapieCQR(est, confidence_level=0.9, prefit=True).conformalize(index[c], yn[c])
            ref = model.predict_interval(index[t], symmetric_correction=True)[1][:, :, 0]
        runs["CQR (vs MAPIE)"] = (lo, hi, ref[:, 0], ref[:, 1])
        for name, (lo, hi, rlo, rhi) in runs.items():
            stats.setdefault(name, []).append(
                [
                    interval_coverage(lo, hi, y[test]),
                    mean_interval_width(lo, hi),
                    float(np.mean(rhi - rlo)),
                    float(max(np.abs(lo.numpy() - rlo).max(), np.abs(hi.numpy() - rhi).max())),
                ]
            )
    lines = [
        f"Coverage and width of 90% intervals over {n_splits} random splits (500 calibration / "
        "1,500 test points of the toy's biased members):",
        "",
        "| method | mean coverage | min coverage | mean width (ours) | mean width (peer) | "
        "max abs bound difference |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows in stats.items():
        a = np.array(rows)
        lines.append(
            f"| {name} | {a[:, 0].mean():.4f} | {a[:, 0].min():.4f} | {a[:, 1].mean():.4f} | "
            f"{a[:, 2].mean():.4f} | {a[:, 3].max():.1e} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1/10 of the sizes, print only")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scale = 10 if args.quick else 1
    rows = timing_rows(scale, max(args.repeats, 3 if args.quick else 5))
    notes = [
        "CPU time (time.process_time), one torch thread; medians of interleaved runs after a "
        "warm-up; ratio = peer / ours; agreement = largest absolute difference of the values.",
        "",
        *coverage_table(40 if args.quick else 200),
        "",
    ]
    if args.no_write or args.quick:
        print(f"Environment: {_harness.environment()}.")
        print("\n".join(notes))
        print(_harness.format_table(rows))
    else:
        _harness.write_results(rows, notes=notes)


if __name__ == "__main__":
    main()
