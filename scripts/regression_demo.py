"""Second-order regression demo: deep ensembles and MC dropout on data that ships offline.

Two problems:

* ``toy`` - :func:`bensemble.datasets.make_regression_toy` (heteroscedastic, known ``E[Y | x]``),
  600 training points with no point in ``(1, 2)``, 400 calibration and 2000 test points on the
  whole support, so the TECE (against the known truth) is reported too;
* ``diabetes`` - scikit-learn's bundled diabetes data (442 patients, 10 features), standardised,
  split 60 / 20 / 20 into train / calibration / test (seeded).

Two producers of ``[M, N, 2]`` (mean, variance) members, each network ``d -> 64 -> 64 -> 2``
(mean and ``softplus`` variance) trained by the Gaussian NLL (``torch.nn.functional.
gaussian_nll_loss``):

* ``deep ensemble`` - 5 networks, :func:`bensemble.methods.train_ensemble`;
* ``MC dropout`` - one network with dropout 0.1, 30 fixed masks
  (:meth:`bensemble.core.Ensemble.from_stochastic`).

Reported on the test split (``bensemble.regression`` and ``bensemble.conformal``): NLL and CRPS of
the members' mixture, coverage / mean width / interval score of the central 90% interval,
miscalibration area, sharpness, the regression EECE (and TECE for the toy); the same after
variance scaling (:class:`~bensemble.regression.VarianceScaling`) and quantile recalibration
(:class:`~bensemble.regression.QuantileRecalibration`) fitted on the calibration split; and the
90% split conformal interval normalised by the predicted spread.

Run: ``python scripts/regression_demo.py [--epochs 300] [--seed 0]`` (about a minute of CPU);
``--eece-decay`` prints instead the regression EECE of members equal to the truth and of narrow
members with a shared bias as ``N`` grows (the toy, means over 5 draws).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from bensemble.conformal import SplitConformalRegressor
from bensemble.core import Ensemble
from bensemble.datasets import make_regression_toy
from bensemble.methods import train_ensemble, train_model
from bensemble.regression import (
    QuantileRecalibration,
    VarianceScaling,
    calibration_curve_from_pit,
    crps,
    interval_coverage,
    interval_score,
    mean_interval_width,
    miscalibration_area,
    predictive_interval,
    regression_epistemic_calibration_error,
    regression_negative_log_likelihood,
    sharpness,
)
from bensemble.regression import true_regression_epistemic_calibration_error as true_tece

ALPHA = 0.1


def gaussian_nll(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL of a ``[B, 2]`` (mean, raw variance) head."""
    variance = nn.functional.softplus(output[:, 1]) + 1e-6
    return nn.functional.gaussian_nll_loss(output[:, 0], y, variance)


def network(d: int, dropout: float = 0.0) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(d, 64), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers += [nn.Linear(64, 64), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(64, 2))
    return nn.Sequential(*layers)


def as_members(raw: torch.Tensor) -> torch.Tensor:
    """Raw ``[M, N, 2]`` outputs -> (mean, variance) members."""
    return torch.stack([raw[..., 0], nn.functional.softplus(raw[..., 1]) + 1e-6], -1).double()


def load(name: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if name == "toy":
        train = make_regression_toy(600, gap=(1.0, 2.0), seed=seed)
        cal = make_regression_toy(400, seed=seed + 1)
        test = make_regression_toy(2000, seed=seed + 2)
        return (
            (train.x.float(), train.y.float()),
            (cal.x.float(), cal.y.double()),
            (test.x.float(), test.y.double()),
            test.mean,
        )
    from sklearn.datasets import load_diabetes

    x, y = (torch.as_tensor(a) for a in load_diabetes(return_X_y=True))
    perm = torch.randperm(x.shape[0], generator=g)
    n_train, n_cal = int(0.6 * len(perm)), int(0.2 * len(perm))
    tr, ca, te = perm[:n_train], perm[n_train : n_train + n_cal], perm[n_train + n_cal :]
    mu, sd = x[tr].mean(0), x[tr].std(0)
    y_mu, y_sd = y[tr].mean(), y[tr].std()
    xs, ys = ((x - mu) / sd).float(), (y - y_mu) / y_sd
    return (xs[tr], ys[tr].float()), (xs[ca], ys[ca]), (xs[te], ys[te]), None


def producers(train, epochs: int, seed: int) -> dict[str, Ensemble]:
    x, y = train
    d = x.shape[1]
    data = TensorDataset(x, y)
    options = {"epochs": epochs, "batch_size": 64, "loss_fn": gaussian_nll}
    members = train_ensemble(
        lambda: network(d), data, n_members=5, seed=seed, progress=False, **options
    )
    torch.manual_seed(seed)
    dropout_net = train_model(network(d, 0.1), data, seed=seed, **options)
    return {
        "deep ensemble": Ensemble.from_models(members),
        "MC dropout": Ensemble.from_stochastic(dropout_net, num_samples=30, seed=seed),
    }


def evaluate(ensemble: Ensemble, cal, test, truth) -> list[dict[str, float | str]]:
    p_cal = as_members(ensemble.predict_members(cal[0]))
    p_test = as_members(ensemble.predict_members(test[0]))
    y_cal, y = cal[1], test[1]
    lower, upper = predictive_interval(p_test, ALPHA)
    row: dict[str, float | str] = {
        "NLL": regression_negative_log_likelihood(p_test, y),
        "CRPS": crps(p_test, y),
        "PICP": interval_coverage(lower, upper, y),
        "MPIW": mean_interval_width(lower, upper),
        "IS": interval_score(lower, upper, y, ALPHA),
        "MCA": miscalibration_area(p_test, y),
        "sharp": sharpness(p_test),
        "EECE": regression_epistemic_calibration_error(p_test, y),
        "TECE": "-" if truth is None else true_tece(p_test, truth),
    }
    scaled = VarianceScaling().fit(p_cal, y_cal)
    p_scaled = scaled.transform(p_test)
    lo_s, hi_s = predictive_interval(p_scaled, ALPHA)
    recal = QuantileRecalibration().fit(p_cal, y_cal)
    lo_q, hi_q = recal.predictive_interval(p_test, ALPHA)
    conformal = SplitConformalRegressor("normalized", ALPHA).calibrate(p_cal, y_cal)
    lo_c, hi_c = conformal.predict_interval(p_test)
    return [
        {"post-hoc": "none", **row},
        {
            "post-hoc": f"variance x{scaled.scale_:.2f}",
            "NLL": regression_negative_log_likelihood(p_scaled, y),
            "CRPS": crps(p_scaled, y),
            "PICP": interval_coverage(lo_s, hi_s, y),
            "MPIW": mean_interval_width(lo_s, hi_s),
            "IS": interval_score(lo_s, hi_s, y, ALPHA),
            "MCA": miscalibration_area(p_scaled, y),
        },
        {
            "post-hoc": "quantile recal.",
            "PICP": interval_coverage(lo_q, hi_q, y),
            "MPIW": mean_interval_width(lo_q, hi_q),
            "IS": interval_score(lo_q, hi_q, y, ALPHA),
            "MCA": calibration_curve_from_pit(recal.pit(p_test, y)).miscalibration_area,
        },
        {
            "post-hoc": "conformal (normalized)",
            "PICP": interval_coverage(lo_c, hi_c, y),
            "MPIW": mean_interval_width(lo_c, hi_c),
            "IS": interval_score(lo_c, hi_c, y, ALPHA),
        },
    ]


COLUMNS = ("NLL", "CRPS", "PICP", "MPIW", "IS", "MCA", "sharp", "EECE", "TECE")


def table(rows: list[dict[str, float | str]]) -> str:
    head = "| data | method | post-hoc | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * 3 + "---:|" * len(COLUMNS)]
    for r in rows:
        cells = [r.get(c, "") for c in COLUMNS]
        shown = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in cells]
        lines.append(
            f"| {r['data']} | {r['method']} | {r['post-hoc']} | " + " | ".join(shown) + " |"
        )
    return "\n".join(lines)


def eece_decay(seeds: int = 5) -> str:
    """Regression EECE of members equal to the truth and of a shared bias, as N grows."""
    lines = [
        "| N | bins | truth: EECE | truth: EECE, no correction | biased: EECE | biased: TECE |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (500, 2000, 8000, 32000):
        values = torch.zeros(4, dtype=torch.float64)
        for seed in range(seeds):
            data = make_regression_toy(n, seed=1000 * seed + n)
            truth = data.mean.expand(5, -1)  # five members equal to E[Y | x]
            x = data.x[:, 0]
            shifts = torch.linspace(-0.05, 0.05, 5, dtype=torch.float64)[:, None]
            biased = data.mean + 0.4 * torch.sin(x) + shifts  # narrow members, shared bias
            values += torch.tensor(
                [
                    regression_epistemic_calibration_error(truth, data.y),
                    regression_epistemic_calibration_error(truth, data.y, bias_correction=False),
                    regression_epistemic_calibration_error(biased, data.y),
                    true_tece(biased, data.mean),
                ],
                dtype=torch.float64,
            )
        v = (values / seeds).tolist()
        bins = min(round(n**0.5), n // 10, 200)
        lines.append(f"| {n} | {bins} | " + " | ".join(f"{x:.5f}" for x in v) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eece-decay", action="store_true", help="print the EECE-vs-N table of the toy and stop"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.process_time()
    if args.eece_decay:
        print(eece_decay())
        print(f"\nmeans over 5 draws of the toy; {time.process_time() - start:.0f} s CPU.")
        return
    rows = []
    for name in ("toy", "diabetes"):
        train, cal, test, truth = load(name, args.seed)
        for method, ensemble in producers(train, args.epochs, args.seed).items():
            for row in evaluate(ensemble, cal, test, truth):
                rows.append({"data": name, "method": method, **row})
    print(table(rows))
    print(
        f"\n{ALPHA:.0%} miscoverage; test split; MCA = miscalibration area; IS = interval score; "
        f"EECE / TECE in squared target units (diabetes: standardised targets). "
        f"{time.process_time() - start:.0f} s CPU."
    )


if __name__ == "__main__":
    main()
