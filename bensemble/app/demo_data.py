"""The two datasets of ``bensemble demo`` (see :mod:`bensemble.app.demo`): train every method,
then score it with the protocol of :mod:`bensemble.app.demo_protocol`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from bensemble.app.demo_figures import FIGURE_METHODS
from bensemble.app.demo_protocol import _eece_bins, _evaluate_method

if TYPE_CHECKING:
    from bensemble.app.demo_config import DemoConfig
    from bensemble.methods.zoo import ZooSettings

__all__ = ["ONE_VS_ALL_DIGIT", "digits_runs", "toy_runs"]

#: The digit the binary-only methods separate from the other nine.
ONE_VS_ALL_DIGIT = 8


def toy_runs(config: DemoConfig, seed: int, settings: ZooSettings, bar: Any) -> tuple:
    from bensemble.conformal import split_calibration
    from bensemble.datasets import make_toy_gaussians, make_toy_grid
    from bensemble.methods.zoo import PAPER_ORDER, member_probs

    g = torch.Generator().manual_seed(seed)
    train = make_toy_gaussians(config.toy_train, generator=g)
    cal = make_toy_gaussians(config.toy_calibration, generator=g)
    test = make_toy_gaussians(config.toy_test, generator=g)
    grid = make_toy_grid(config.grid_per_axis, generator=g)
    parts = split_calibration(cal.y, seed=seed)
    x_eval = torch.cat([cal.x, test.x, grid.x])
    n_cal, n_test = len(cal), len(test)
    runs = []
    methods = PAPER_ORDER if config.toy_methods is None else config.toy_methods
    for method in [m for m in PAPER_ORDER if m in methods]:
        bar.set_postfix_str(f"toy: {method}")
        members = member_probs(method, train.x, train.y, x_eval, settings=settings, seed=seed)
        run = _evaluate_method(
            method, members, n_cal, cal.y, test.y, parts, eta_test=test.eta, seed=seed
        )
        if method in FIGURE_METHODS:
            h = members[:, n_cal + n_test :, 1]  # members' P(y = 1 | x) on the grid
            run.maps = {
                "EU(x)": h.var(dim=0, unbiased=False),
                "E_h[(eta(x) - h(x))^2]": ((grid.eta[None, :] - h) ** 2).mean(dim=0),
            }
        runs.append(run)
        bar.update(1)
    setup = {
        "train": len(train),
        "calibration": n_cal,
        "temperature_part": len(parts.temperature),
        "conformal_part": len(parts.conformal),
        "test": n_test,
        "grid": f"{config.grid_per_axis}x{config.grid_per_axis} on [-8, 8]^2",
        "eece_bins": _eece_bins(n_test),
    }
    return runs, setup, (grid.x, train.x, train.y)


def digits_runs(config: DemoConfig, seed: int, settings: ZooSettings, bar: Any) -> tuple:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from bensemble.conformal import split_calibration
    from bensemble.methods.zoo import PAPER_ORDER, member_probs

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.int64)
    idx = torch.arange(len(y)).numpy()
    train, rest = train_test_split(idx, test_size=0.4, random_state=seed, stratify=data.target)
    cal, test = train_test_split(rest, test_size=0.5, random_state=seed, stratify=data.target[rest])
    parts = split_calibration(y[cal], stratify=True, seed=seed)
    x_eval = torch.cat([x[cal], x[test]])
    runs = []
    tasks = [(m, None) for m in PAPER_ORDER if m in config.digits_methods]
    tasks += [(m, ONE_VS_ALL_DIGIT) for m in PAPER_ORDER if m in config.digits_binary_methods]
    for method, digit in tasks:
        yy = y if digit is None else (y == digit).to(torch.int64)
        label = method if digit is None else f"{method} ({digit} vs rest)"
        bar.set_postfix_str(f"digits: {label}")
        members = member_probs(method, x[train], yy[train], x_eval, settings=settings, seed=seed)
        runs.append(
            _evaluate_method(
                label, members, len(cal), yy[cal], yy[test], parts, eta_test=None, seed=seed
            )
        )
        bar.update(1)
    setup = {
        "train": len(train),
        "calibration": len(cal),
        "temperature_part": len(parts.temperature),
        "conformal_part": len(parts.conformal),
        "test": len(test),
        "eece_bins": _eece_bins(len(test)),
        "one_vs_all_digit": ONE_VS_ALL_DIGIT,
    }
    return runs, setup
