"""Which logits should temperature scaling see for an ensemble? Two options, measured on digits.

The digits demo's ensembles (``bensemble demo``: scikit-learn's 8x8 digits, train / calibration /
test = 60 / 20 / 20 % stratified, the calibration part halved by ``split_calibration(...,
stratify=True)``, members from :func:`bensemble.methods.zoo.member_probs`) are scaled in two
ways, both fitted on the same temperature half and scored on the same untouched test part:

* (a) ``pooled``: ordinary temperature scaling of the ensemble's log-probabilities
  ``log mean_m p_m`` ``[N, K]`` (what ``Ensemble.predict_log_proba`` returns), applied as
  ``softmax(log p / T)``. Calibrate after pooling.
* (b) ``shared``: ``TemperatureScaling.fit(member_logits, labels, ensemble=True)`` on the member
  log-probabilities ``[M, N, K]`` (equal to member logits up to a per-row shift, which softmax
  ignores), applied as ``mean_m softmax(log p_m / T)``. One T inside every member, then pool.

For each method and seed it prints the fitted T, the test NLL, the top-label ECE (15 equal-width
bins, as the demo) and the accuracy: unscaled, (a) and (b); then the mean over seeds and how
often each option has the lower NLL / ECE.

Run: ``python benchmarks/compare_ensemble_temperature.py [--seeds 0 1 2 3 4] [--methods ...]
[--quick]`` (``--quick``: ``ZooSettings.quick()`` members instead of the paper's settings).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch

DEFAULT_METHODS = ("Deep Ensemble", "MC-Dropout", "DropConnect", "Bayesian Deep", "Random Forest")
_TINY = torch.finfo(torch.float64).tiny


def _digits(seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from bensemble.conformal import split_calibration

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = torch.arange(len(y)).numpy()
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    parts = split_calibration(y[cal], stratify=True, seed=seed)
    return x, y, train, cal, test, parts.temperature


def _scores(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    from bensemble import metrics as M

    return {
        "NLL": M.negative_log_likelihood(probs, labels),
        "ECE": M.expected_calibration_error(probs, labels, n_bins=15),
        "acc": M.accuracy(probs, labels),
    }


def _fit(scaler, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler.fit(*args, **kwargs)
    note = "; ".join(str(w.message)[:60] for w in caught if w.category is RuntimeWarning)
    return scaler, note


def compare(method: str, seed: int, settings) -> dict[str, object]:
    from bensemble.calibration import TemperatureScaling
    from bensemble.methods.zoo import member_probs

    x, y, train, cal, test, fit_part = _digits(seed)
    x_eval = torch.cat([x[cal], x[test]])
    members = member_probs(method, x[train], y[train], x_eval, settings=settings, seed=seed)
    n_cal = len(cal)
    log_members = members.clamp_min(_TINY).log()  # [M, n, K]
    log_pooled = torch.logsumexp(log_members, dim=0) - torch.log(torch.tensor(members.shape[0]))
    y_cal, y_test = y[cal], y[test]
    fit_members, fit_pooled, fit_labels = log_members[:, :n_cal][:, fit_part], None, None
    fit_pooled, fit_labels = log_pooled[:n_cal][fit_part], y_cal[fit_part]

    pooled, note_a = _fit(TemperatureScaling(), fit_pooled, fit_labels)
    shared, note_b = _fit(TemperatureScaling(), fit_members, fit_labels, ensemble=True)
    with torch.no_grad():
        test_members, test_pooled = log_members[:, n_cal:], log_pooled[n_cal:]
        probs = {
            "none": test_pooled.exp(),
            "a": pooled(test_pooled).softmax(-1),
            "b": shared(test_members).softmax(-1).mean(0),
        }
    row: dict[str, object] = {"method": method, "seed": seed, "M": members.shape[0]}
    row["T_a"], row["T_b"] = pooled.temperature_, shared.temperature_
    for key, p in probs.items():
        for name, value in _scores(p, y_test).items():
            row[f"{name}_{key}"] = value
    row["notes"] = "; ".join(n for n in (note_a, note_b) if n)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--quick", action="store_true", help="ZooSettings.quick() members")
    args = parser.parse_args(argv)

    from bensemble.methods.zoo import ZooSettings

    torch.set_num_threads(1)
    settings = ZooSettings.quick() if args.quick else ZooSettings()
    head = (
        f"{'method':<14} {'seed':>4} {'M':>4} {'T_a':>7} {'T_b':>7} | "
        f"{'NLL none':>8} {'NLL a':>7} {'NLL b':>7} | {'ECE none':>8} {'ECE a':>7} "
        f"{'ECE b':>7} | {'acc none':>8} {'acc b':>7}"
    )
    print(head)
    rows = []
    start = time.perf_counter()
    for method in args.methods:
        for seed in args.seeds:
            r = compare(method, seed, settings)
            rows.append(r)
            print(
                f"{method:<14} {seed:>4} {r['M']:>4} {r['T_a']:>7.3f} {r['T_b']:>7.3f} | "
                f"{r['NLL_none']:>8.4f} {r['NLL_a']:>7.4f} {r['NLL_b']:>7.4f} | "
                f"{r['ECE_none']:>8.4f} {r['ECE_a']:>7.4f} {r['ECE_b']:>7.4f} | "
                f"{r['acc_none']:>8.4f} {r['acc_b']:>7.4f}"
                + (f"  [{r['notes']}]" if r["notes"] else ""),
                flush=True,
            )
    print(f"\nmean over seeds {args.seeds} ({'quick' if args.quick else 'paper'} settings):")
    print(
        f"{'method':<14} {'NLL none':>8} {'NLL a':>7} {'NLL b':>7} | {'ECE none':>8} "
        f"{'ECE a':>7} {'ECE b':>7} | b better: NLL  ECE"
    )
    for method in args.methods:
        rs = [r for r in rows if r["method"] == method]

        def mean(key: str, rs=rs) -> float:
            return statistics.fmean(float(r[key]) for r in rs)

        wins_nll = sum(float(r["NLL_b"]) < float(r["NLL_a"]) for r in rs)
        wins_ece = sum(float(r["ECE_b"]) < float(r["ECE_a"]) for r in rs)
        print(
            f"{method:<14} {mean('NLL_none'):>8.4f} {mean('NLL_a'):>7.4f} {mean('NLL_b'):>7.4f} | "
            f"{mean('ECE_none'):>8.4f} {mean('ECE_a'):>7.4f} {mean('ECE_b'):>7.4f} | "
            f"{wins_nll:>6}/{len(rs)} {wins_ece:>3}/{len(rs)}"
        )
    print(
        f"\n({time.perf_counter() - start:.0f} s; command: python "
        f"benchmarks/compare_ensemble_temperature.py {' '.join(sys.argv[1:])})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
