"""Laplace on the demo's digits MLP: the plain network (MAP) against K-FAC and last-layer Laplace.

The network is the demo's (``bensemble.methods.zoo``: ``make_mlp(64, 10)``, hidden (100, 20),
Adam lr 1e-3, 20 epochs, batches of 32, no weight decay), trained on the demo's split of
scikit-learn's digits (60% train, 20% calibration, 20% test, stratified, ``random_state=seed``);
the calibration part is the validation data that tunes the prior precision
(``fit(train, val=val)``, the recommended use). Per seed and approximation:

* the prior precision chosen;
* test NLL (nats) of ``predictive(x)`` (K-FAC: linearised, probit; last layer: probit);
* test NLL of the mean of 30 sampled members (K-FAC: ``Ensemble.from_posterior``, sampled
  networks; last layer: ``sample_members``);
* top-label ECE (15 equal-width bins) of ``predictive(x)``;
* mean EU (mutual information of the 30 members, nats) on the test digits and on as many
  uniform-noise images ``U[0, 1]^64``, and out / in.

Rows "default" are the recommended use; "evidence only" is the fit without validation data (it
warns when it is likely worse than the network); "0.2 prior 1.0" is K-FAC at bensemble 0.2's
documented ``prior_precision=1.0``.

Run: ``PYTHONPATH=. python benchmarks/laplace_digits.py`` (5 seeds, about 2 minutes on one
core); ``--write`` replaces this script's section of ``benchmarks/results.md``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from bensemble.core import Ensemble
from bensemble.methods import LaplaceApproximation, LastLayerLaplace
from bensemble.methods.deep_ensemble import train_model
from bensemble.methods.mlp import make_mlp
from bensemble.methods.zoo import ZooSettings
from bensemble.metrics import expected_calibration_error
from bensemble.uncertainty import decompose_classification_uncertainty

ROOT = Path(__file__).resolve().parent.parent
N_MEMBERS = 30
ROWS = (
    ("MAP (the network)", None),
    ("K-FAC default (val)", (LaplaceApproximation, "val", None)),
    ("last-layer default (val)", (LastLayerLaplace, "val", None)),
    ("K-FAC evidence only", (LaplaceApproximation, None, None)),
    ("last-layer evidence only", (LastLayerLaplace, None, None)),
    ("K-FAC, 0.2 prior 1.0", (LaplaceApproximation, None, 1.0)),
)


def digits_split(seed: int):
    """The demo's digits split (``bensemble.app.demo_data.digits_runs``)."""
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = np.arange(len(y))
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    return (x[train], y[train]), (x[cal], y[cal]), (x[test], y[test])


def demo_network(train, seed: int, epochs: int) -> torch.nn.Module:
    """The zoo's network and training (``member_probs``' ``_train_net``), for ``epochs``."""
    settings = ZooSettings(epochs=epochs)
    torch.manual_seed(seed)
    net = make_mlp(64, 10, settings.hidden)
    return train_model(
        net,
        train,
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        optimizer=lambda params: torch.optim.Adam(params, lr=settings.lr),
        seed=seed,
    )


def nll(probs: torch.Tensor, labels: torch.Tensor) -> float:
    probs = probs.double()[torch.arange(len(labels)), labels]
    return float(-torch.log(probs.clamp_min(1e-300)).mean())


def mean_eu(members: torch.Tensor) -> float:
    return float(decompose_classification_uncertainty(members.double())[2].mean())


def evaluate(spec, net, train, val, test, noise) -> dict:
    x_test, y_test = test
    if spec is None:
        with torch.no_grad():
            probs = torch.softmax(net(x_test).double(), dim=-1)
        return {"nll": nll(probs, y_test), "ece": expected_calibration_error(probs, y_test)}
    cls, use_val, prior = spec
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        la = cls(net, prior_precision=prior).fit(train, val=val if use_val else None)
    probs = la.predictive(x_test)
    if cls is LastLayerLaplace:
        inside, outside = la.sample_members(x_test, N_MEMBERS), la.sample_members(noise, N_MEMBERS)
    else:
        ensemble = Ensemble.from_posterior(la, n_members=N_MEMBERS)
        inside = ensemble.predict_member_probs(x_test)
        outside = ensemble.predict_member_probs(noise)
    eu_in, eu_out = mean_eu(inside), mean_eu(outside)
    return {
        "delta": la.prior_precision_,
        "nll": nll(probs, y_test),
        "members_nll": nll(inside.mean(0), y_test),
        "ece": expected_calibration_error(probs, y_test),
        "eu_in": eu_in,
        "eu_out": eu_out,
        "ratio": eu_out / eu_in,
        "warned": any("Pass validation data" in str(w.message) for w in caught),
    }


def table(results: dict[str, list[dict]]) -> str:
    lines = [
        "| approximation | prior precision | test NLL | NLL - MAP (worst seed) | members' NLL "
        "| ECE | EU in | EU noise | EU noise / in (lowest seed) | warns |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    map_nll = [r["nll"] for r in results[ROWS[0][0]]]
    for name, spec in ROWS:
        rs = results[name]

        def mean(key, rs=rs):
            return statistics.fmean(r[key] for r in rs)

        if spec is None:
            lines.append(
                f"| {name} | - | {mean('nll'):.3f} | - | - | {mean('ece'):.3f} | - | - | - | - |"
            )
            continue
        worst = max(r["nll"] - m for r, m in zip(rs, map_nll))
        deltas = sorted(r["delta"] for r in rs)
        span = (
            f"{deltas[0]:.3g}" if deltas[0] == deltas[-1] else f"{deltas[0]:.3g}-{deltas[-1]:.3g}"
        )
        warned = sum(r["warned"] for r in rs)
        lines.append(
            f"| {name} | {span} | {mean('nll'):.3f} | {worst:+.3f} | {mean('members_nll'):.3f} "
            f"| {mean('ece'):.3f} | {mean('eu_in'):.4f} | {mean('eu_out'):.4f} "
            f"| {mean('ratio'):.2f} ({min(r['ratio'] for r in rs):.2f}) "
            f"| {warned}/{len(rs)} |"
        )
    return "\n".join(lines)


def write_section(text: str, path: Path, name: str) -> None:
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n## {name}\n\n{text}\n{end}\n"
    old = path.read_text()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old + "\n" + block
    path.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--epochs", type=int, default=ZooSettings().epochs, help="training epochs (demo: 20)"
    )
    parser.add_argument("--write", action="store_true", help="update benchmarks/results.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[dict]] = {name: [] for name, _ in ROWS}
    for seed in range(args.seeds):
        train, val, test = digits_split(seed)
        net = demo_network(train, seed, args.epochs)
        noise = torch.rand(len(test[1]), 64, generator=torch.Generator().manual_seed(seed))
        for name, spec in ROWS:
            results[name].append(evaluate(spec, net, train, val, test, noise))
        print(f"seed {seed} done", flush=True)
    demo = args.epochs == ZooSettings().epochs
    trained = "the demo's training" if demo else f"trained {args.epochs} epochs instead of 20"
    command = f"PYTHONPATH=. python benchmarks/laplace_digits.py --seeds {args.seeds}"
    command += "" if demo else f" --epochs {args.epochs}"
    text = (
        f"Digits, the demo's MLP and split ({trained}), {args.seeds} seeds (means; NLL and EU "
        f"in nats; {N_MEMBERS} members; noise = U[0, 1]^64). Command: `{command}`.\n\n"
        + table(results)
        + "\n"
    )
    print(text)
    if args.write:
        name = "laplace_digits" if demo else f"laplace_digits, {args.epochs} epochs"
        write_section(text, ROOT / "benchmarks" / "results.md", name)


if __name__ == "__main__":
    main()
