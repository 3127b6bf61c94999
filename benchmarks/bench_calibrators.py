"""Every post-hoc calibrator on two problems: NLL, ECE, Brier, accuracy and fit time, with a peer's
implementation fitted on the same data in the same process.

* ``digits``: scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), split 60 / 20 / 20 %
  (train / calibration / test, stratified, seeded); one MLP of the demo's architecture
  (``make_mlp(64, 10, (100, 20))``) trained full batch with Adam (lr 1e-2, 300 epochs, no weight
  decay: it over-fits and is over-confident); the calibrators are fitted on the calibration part
  (~360 points) and scored on the test part.
* ``toy``: the paper's two Gaussians (``bensemble.datasets.make_toy_gaussians``), 100 training
  points, the same MLP shape with 2 outputs (Adam, 500 epochs), 1,000 calibration and 4,000 test
  points.

Scores on the test part (mean +- standard deviation over the seeds, which change the split and
the initialisation): NLL in nats, top-label ECE (15 equal-width bins), multi-class Brier score,
accuracy. Fit time: CPU time (``time.process_time``, one torch thread, BLAS limited to one
thread) of one ``fit``, median over 3 repeats and the seeds. Peers: netcal 1.3 (temperature,
isotonic, histogram, beta - netcal's multi-class beta is a multinomial model, not one-vs-all),
scikit-learn's unpenalised multinomial ``LogisticRegression`` on ``log p`` (the same model as
unregularised Dirichlet calibration). ``ratio`` = peer fit time / ours (higher is better for us).

Run: ``python benchmarks/bench_calibrators.py [--seeds 0 1 2 3 4] [--quick]``; writes its section
of ``benchmarks/results.md``. ``--floor-study`` prints instead how the test NLL of beta and
Dirichlet calibration fitted on probabilities depends on ``min_prob`` (the default floor's
evidence).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

from bensemble import calibration as cal  # noqa: E402
from bensemble import metrics as M  # noqa: E402
from bensemble.methods.mlp import make_mlp  # noqa: E402

_REPEATS = 3


# ----------------------------------------------------------------------------- the problems
@dataclass
class Problem:
    cal_logits: torch.Tensor  # [N_cal, K] float64
    cal_labels: torch.Tensor
    test_logits: torch.Tensor
    test_labels: torch.Tensor


def _train(x: torch.Tensor, y: torch.Tensor, k: int, epochs: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = make_mlp(x.shape[1], k, (100, 20))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):  # full batch
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def _logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).double()


def digits_problem(seed: int) -> Problem:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    part, test = train_test_split(
        rest, test_size=0.5, random_state=seed, stratify=data.target[rest]
    )
    model = _train(x[train], y[train], 10, 300, seed)
    return Problem(_logits(model, x[part]), y[part], _logits(model, x[test]), y[test])


def toy_problem(seed: int) -> Problem:
    from bensemble.datasets import make_toy_gaussians

    g = torch.Generator().manual_seed(seed)
    train = make_toy_gaussians(100, generator=g)
    part = make_toy_gaussians(1000, generator=g)
    test = make_toy_gaussians(4000, generator=g)
    model = _train(train.x.float(), train.y, 2, 500, seed)
    return Problem(_logits(model, part.x.float()), part.y, _logits(model, test.x.float()), test.y)


# ----------------------------------------------------------------------------- calibrators
# Each entry: (name, fit(cal_logits, cal_labels) -> predict(test_logits) -> probs [N, K]).
Fitter = Callable[[torch.Tensor, torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]


def _ours_on_logits(make: Callable[[int], Any]) -> Fitter:
    def fit(z: torch.Tensor, y: torch.Tensor):
        model = make(z.shape[1]).fit(z, y)
        return model.predict_proba

    return fit


def _ours_from_logits(make: Callable[..., Any]) -> Fitter:
    def fit(z: torch.Tensor, y: torch.Tensor):
        model = make(from_logits=True).fit(z, y)
        return model.predict_proba

    return fit


def _netcal(cls_name: str, module: str, **kw: Any) -> Fitter:
    def fit(z: torch.Tensor, y: torch.Tensor):
        import importlib

        peer = getattr(importlib.import_module(module), cls_name)(**kw)
        p = z.softmax(-1).numpy()
        binary = p.shape[1] == 2
        peer.fit(p[:, 1] if binary else p, y.numpy())

        def predict(t: torch.Tensor) -> torch.Tensor:
            q = t.softmax(-1).numpy()
            out = np.asarray(peer.transform(q[:, 1] if binary else q), dtype=np.float64)
            out = np.stack([1 - out, out], 1) if binary else out
            return torch.from_numpy(out / out.sum(1, keepdims=True))

        return predict

    return fit


def _sklearn_dirichlet(z: torch.Tensor, y: torch.Tensor):
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000)
    model.fit(z.log_softmax(-1).numpy(), y.numpy())
    return lambda t: torch.from_numpy(model.predict_proba(t.log_softmax(-1).numpy()))


ROWS: list[tuple[str, Fitter | None, str, Fitter | None]] = [
    ("uncalibrated", None, "", None),
    (
        "TemperatureScaling",
        _ours_on_logits(lambda k: cal.TemperatureScaling()),
        "netcal TemperatureScaling",
        _netcal("TemperatureScaling", "netcal.scaling"),
    ),
    ("VectorScaling", _ours_on_logits(cal.VectorScaling), "", None),
    ("MatrixScaling", _ours_on_logits(cal.MatrixScaling), "", None),
    (
        "MatrixScaling(off_diagonal_l2=0.01)",
        _ours_on_logits(lambda k: cal.MatrixScaling(k, off_diagonal_l2=0.01)),
        "",
        None,
    ),
    (
        "IsotonicCalibration",
        _ours_from_logits(cal.IsotonicCalibration),
        "netcal IsotonicRegression",
        _netcal("IsotonicRegression", "netcal.binning"),
    ),
    (
        "HistogramBinningCalibration(10)",
        _ours_from_logits(lambda **kw: cal.HistogramBinningCalibration(10, **kw)),
        "netcal HistogramBinning(10)",
        _netcal("HistogramBinning", "netcal.binning", bins=10),
    ),
    (
        "BetaCalibration",
        _ours_from_logits(cal.BetaCalibration),
        "netcal BetaCalibration",
        _netcal("BetaCalibration", "netcal.scaling"),
    ),
    (
        "DirichletCalibration",
        _ours_from_logits(cal.DirichletCalibration),
        "sklearn LogisticRegression(log p)",
        _sklearn_dirichlet,
    ),
    (
        "DirichletCalibration(0.01, 0.01)",
        _ours_from_logits(lambda **kw: cal.DirichletCalibration(0.01, 0.01, **kw)),
        "",
        None,
    ),
    (
        "DirichletCalibration(1, 1)",
        _ours_from_logits(lambda **kw: cal.DirichletCalibration(1.0, 1.0, **kw)),
        "",
        None,
    ),
]


# ----------------------------------------------------------------------------- measuring
def _scores(probs: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    probs = probs.double()
    probs = probs / probs.sum(-1, keepdim=True)  # peers' float32 round-off
    return {
        "NLL": M.negative_log_likelihood(probs, labels),
        "ECE": M.expected_calibration_error(probs, labels, n_bins=15),
        "Brier": M.brier_score(probs, labels),
        "acc": M.accuracy(probs, labels),
    }


def _fit_timed(fit: Fitter, problem: Problem) -> tuple[Callable, float]:
    times, predict = [], None
    for _ in range(_REPEATS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.process_time()
            predict = fit(problem.cal_logits, problem.cal_labels)
            times.append(time.process_time() - start)
    return predict, statistics.median(times)


def measure(problem: Problem) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, ours, _peer_name, peer in ROWS:
        row: dict[str, Any] = {}
        if ours is None:
            row.update(_scores(problem.test_logits.softmax(-1), problem.test_labels), fit=0.0)
        else:
            predict, seconds = _fit_timed(ours, problem)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row.update(_scores(predict(problem.test_logits), problem.test_labels), fit=seconds)
        if peer is not None:
            predict, seconds = _fit_timed(peer, problem)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scores = _scores(predict(problem.test_logits), problem.test_labels)
            row.update({f"peer {k}": v for k, v in scores.items()}, **{"peer fit": seconds})
        out[name] = row
    return out


def _mean_sd(values: list[float], digits: int = 3) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


def table(runs: list[dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| calibrator | NLL | ECE | Brier | accuracy | fit (CPU) | peer | peer NLL | peer ECE "
        "| peer fit (CPU) | fit ratio |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, _, peer_name, peer in ROWS:
        cells = [name]
        for key in ("NLL", "ECE", "Brier", "acc"):
            cells.append(_mean_sd([run[name][key] for run in runs]))
        fit = statistics.median(run[name]["fit"] for run in runs)
        cells.append("-" if fit == 0 else f"{fit * 1e3:.1f} ms")
        if peer is None:
            cells += ["-"] * 5
        else:
            peer_fit = statistics.median(run[name]["peer fit"] for run in runs)
            cells += [
                peer_name,
                _mean_sd([run[name]["peer NLL"] for run in runs]),
                _mean_sd([run[name]["peer ECE"] for run in runs]),
                f"{peer_fit * 1e3:.1f} ms",
                f"{peer_fit / fit:.2f}x" if fit > 0 else "-",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def floor_study(seed: int = 0) -> str:
    """Test NLL of beta and Dirichlet calibration fitted on *probabilities* for several
    ``min_prob`` floors: the two MLPs, and a random forest's pooled digits probabilities (the
    demo's split and forest, quick settings), whose exact zeros need a floor."""
    from bensemble.methods.zoo import ZooSettings, member_probs

    sets = {}
    for label, build in (("toy MLP", toy_problem), ("digits MLP", digits_problem)):
        pr = build(seed)
        sets[label] = (
            pr.cal_logits.softmax(-1),
            pr.cal_labels,
            pr.test_logits.softmax(-1),
            pr.test_labels,
        )
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    part, test = train_test_split(
        rest, test_size=0.5, random_state=seed, stratify=data.target[rest]
    )
    pooled = member_probs(
        "Random Forest",
        x[train],
        y[train],
        torch.cat([x[part], x[test]]),
        settings=ZooSettings.quick(),
        seed=seed,
    ).mean(0)
    sets["digits forest"] = (pooled[: len(part)], y[part], pooled[len(part) :], y[test])
    makers = {
        "beta": lambda f: cal.BetaCalibration(min_prob=f),
        "Dirichlet": lambda f: cal.DirichletCalibration(min_prob=f),
        "Dirichlet(0.01, 0.01)": lambda f: cal.DirichletCalibration(0.01, 0.01, min_prob=f),
    }
    floors = (1e-6, 1e-12, 1e-16, 1e-30, 1e-300)
    lines = [
        "| probabilities of | calibrator | " + " | ".join(f"{f:g}" for f in floors) + " |",
        "|---|---|" + "---:|" * len(floors),
    ]
    for label, (pc, yc, pt, yt) in sets.items():
        zeros = float((pc == 0).double().mean())
        for name, make in makers.items():
            cells = []
            for floor in floors:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    q = make(floor).fit(pc, yc).predict_proba(pt)
                cells.append(f"{M.negative_log_likelihood(q, yt):.3f}")
            lines.append(f"| {label} ({zeros:.0%} zeros) | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--quick", action="store_true", help="two seeds, no results.md")
    parser.add_argument(
        "--floor-study", action="store_true", help="test NLL against min_prob, then stop"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.floor_study:
        print("Test NLL (nats) by min_prob, calibrators fitted on probabilities, seed 0:")
        print(floor_study())
        return 0
    seeds = args.seeds[:2] if args.quick else args.seeds
    sections = []
    for label, build in (("digits", digits_problem), ("toy", toy_problem)):
        runs = []
        for seed in seeds:
            start = time.perf_counter()
            runs.append(measure(build(seed)))
            print(f"{label} seed {seed}: {time.perf_counter() - start:.1f} s", flush=True)
        sections.append((label, table(runs)))
    notes = [
        f"Environment: {_harness.environment()}; BLAS threads 1.",
        f"Command: `python benchmarks/bench_calibrators.py --seeds {' '.join(map(str, seeds))}`"
        f"; {len(seeds)} seeds (splits and initialisations), mean +- sd; fit time: CPU "
        f"(`time.process_time`), median of {_REPEATS} fits and the seeds.",
        "digits: 8x8 digits, MLP (100, 20) over-fitted (Adam lr 1e-2, 300 full-batch epochs) "
        "on 60%, calibrators fitted on the 20% calibration part (~360 points), scored on the "
        "20% test part (~360). toy: the two Gaussians, the same MLP on 100 points (500 epochs), "
        "1,000 calibration, 4,000 test points.",
        "NLL in nats (probabilities floored at 1e-8 inside the log, so a zero probability - "
        "histogram binning's and isotonic calibration's empty steps - costs 18.4 nats); ECE: "
        "top-label, 15 equal-width bins; Brier: summed over classes. Inputs: the model's "
        "logits (the calibrators of probabilities with `from_logits=True`, which takes exact "
        "log-probabilities); the peers get the softmax probabilities.",
        "netcal's BetaCalibration on 10 classes is a multinomial model (not one-vs-all), fitted "
        "by scipy's L-BFGS-B with a finite-difference gradient; its TemperatureScaling also uses "
        "L-BFGS-B (ours: exact Newton on 1/T). sklearn's unpenalised multinomial logistic "
        "regression on log p is unregularised Dirichlet calibration, so the two rows differ "
        "only by the optimiser's stopping point.",
    ]
    body = ["## bench_calibrators", "", *notes]
    for label, text in sections:
        body += ["", f"### {label}", "", text]
    text = "\n".join(body) + "\n"
    if args.quick:
        print(text)
    else:
        _harness.write_section(text, section="bench_calibrators")
    return 0


if __name__ == "__main__":
    sys.exit(main())
