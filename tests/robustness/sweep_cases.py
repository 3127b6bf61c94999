"""The sweep's inputs (array kinds, cases, edge values) and its result checks.

See test_sweep.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np
import torch

EXAMPLES = int(os.environ.get("SWEEP_EXAMPLES", "4"))
F64 = torch.float64
CALL_LIMIT_S = 20.0  # one call taking longer is a defect (a hang), not a slow test
TOL = 1e-6  # slack on range bounds; widened to K ulps of the input dtype (see _tol)


# ----------------------------------------------------------------------------- time limit
class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Turn a hang into a failure (SIGALRM; a no-op where signals are unavailable)."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def _raise(signum, frame):
        raise _Hang(f"did not return within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- array kinds
# kind -> (float?, has a class axis?, has a member axis?)
KINDS = {
    "probs": (True, True, False),  # [N, K] on the simplex
    "logits": (True, True, False),  # [N, K] real
    "member": (True, True, True),  # [M, N, K] on the simplex
    "member_out": (True, True, True),  # a second [M, N', K] stack (OOD inputs)
    "binary_member": (True, False, True),  # [M, N] in [0, 1]
    "means": (True, False, True),  # [M, N] real
    "variances": (True, False, True),  # [M, N] >= 0
    "labels": (False, False, False),  # [N] int in [0, K)
    "binary_labels": (False, False, False),  # [N] int in {0, 1}
    "conf": (True, False, False),  # [N] in [0, 1]
    "eta": (True, False, False),  # [N] in [0, 1]
    "correct": (False, False, False),  # [N] bool
    "scores": (True, False, False),  # [N] real
    "positive": (False, False, False),  # [N] bool
    "sets": (False, True, False),  # [N, K] bool
    "vectors": (True, True, False),  # [N, D] real rows (K plays D)
    "centroids": (True, True, False),  # [C, D] real, C = 3
    "x": (True, True, False),  # [N, K] real, elementwise functions
    "points": (True, False, False),  # [N, 2] real inputs of the toy problem
    "reg_member": (True, False, True),  # [M, N, 2] regression members: (mean, variance >= 0)
    "index": (False, False, False),  # [N] int64 global row numbers (any order, from an offset)
    "coordinates": (True, True, False),  # [K] real: one vector (K plays its length)
}


def _is_float(kind: str) -> bool:
    return KINDS[kind][0]


@dataclass
class Case:
    scenario: str
    n: int
    k: int
    m: int
    dtype: torch.dtype
    container: str
    scale: float
    seed: int
    detail: str = ""
    corrupted: str = ""  # the argument the nan / inf scenario put a non-finite value into

    def describe(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        extra = f", {self.detail}" if self.detail else ""
        return (
            f"scenario={self.scenario}, N={self.n}, K={self.k}, M={self.m}, {dtype}, "
            f"{self.container}, scale={self.scale:g}, seed={self.seed}{extra}"
        )


def _make(kind: str, case: Case, g: torch.Generator) -> torch.Tensor:
    n, k, m, s = case.n, case.k, case.m, case.scale
    if kind == "probs":
        return torch.softmax(torch.randn(n, k, generator=g, dtype=F64) * s, -1)
    if kind in ("logits", "vectors", "x"):
        return torch.randn(n, k, generator=g, dtype=F64) * s
    if kind == "points":
        return torch.randn(n, 2, generator=g, dtype=F64) * s
    if kind == "centroids":
        return torch.randn(3, k, generator=g, dtype=F64)
    if kind == "member":
        return torch.softmax(torch.randn(m, n, k, generator=g, dtype=F64) * s, -1)
    if kind == "member_out":
        return torch.softmax(torch.randn(m, n + 1, k, generator=g, dtype=F64) * s, -1)
    if kind == "binary_member":
        return torch.rand(m, n, generator=g, dtype=F64)
    if kind == "means":
        return torch.randn(m, n, generator=g, dtype=F64) * s
    if kind == "variances":
        return torch.rand(m, n, generator=g, dtype=F64) * s
    if kind == "reg_member":
        mean = torch.randn(m, n, generator=g, dtype=F64) * s
        return torch.stack([mean, 0.01 + torch.rand(m, n, generator=g, dtype=F64) * s], -1)
    if kind == "labels":
        return torch.randint(0, k, (n,), generator=g)
    if kind == "binary_labels":
        return torch.randint(0, 2, (n,), generator=g)
    if kind in ("conf", "eta"):
        return torch.rand(n, generator=g, dtype=F64)
    if kind in ("correct", "positive"):
        return torch.randint(0, 2, (n,), generator=g).bool()
    if kind == "scores":
        return torch.randn(n, generator=g, dtype=F64) * s
    if kind == "sets":
        return torch.rand(n, k, generator=g) < 0.5
    if kind == "index":
        return torch.randperm(n, generator=g) + int(torch.randint(0, 10**6, (), generator=g))
    if kind == "coordinates":
        return torch.randn(k, generator=g, dtype=F64) * s
    raise KeyError(kind)


def _extreme(kind: str, x: torch.Tensor, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Push one argument to the edge of its domain, representable in ``dtype``."""
    if x.numel() == 0:
        return x
    info = torch.finfo(dtype)
    if kind in ("logits", "scores", "means", "vectors", "x", "points", "coordinates"):
        # logits and scores up to the dtype's maximum (softmax and ranks are shift- and
        # scale-robust); other real values up to 1e30, whose squares a float64 still holds
        sizes = [1e4, 1e30, info.max / 4] if kind in ("logits", "scores") else [1e4, 1e30]
        big = min(sizes[int(torch.randint(0, len(sizes), (1,), generator=g))], info.max / 4)
        return torch.sign(x) * big * (x.abs() > 0.5)
    if kind in ("probs", "member", "member_out"):
        hot = torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(F64)
        tiny = info.tiny / 2 if dtype != torch.bfloat16 else info.tiny
        return (hot * (1 - tiny * (x.shape[-1] - 1)) + (1 - hot) * tiny).clamp(0, 1)
    if kind in ("conf", "eta", "binary_member"):
        return (x > 0.5).to(F64)
    if kind == "variances":
        return torch.where(x > 0.5, torch.zeros_like(x), x * 1e30)
    if kind == "reg_member":  # means up to 1e30, variances 0 (atoms) or 1e30-sized
        mean, var = (
            _extreme("means", x[..., 0], dtype, g),
            _extreme("variances", x[..., 1], dtype, g),
        )
        return torch.stack([mean, var], -1)
    return x


def _to_container(x: torch.Tensor, case: Case) -> Any:
    if case.container == "numpy" and x.dtype != torch.bfloat16:
        return x.numpy()
    if case.container == "list" and x.dtype not in (torch.float16, torch.bfloat16):
        return x.tolist()
    return x


# ----------------------------------------------------------------------------- result checks
def _finite(value: Any, where: str = "result") -> None:
    """Every number in ``value`` is finite (tensors, floats, lists, dicts, dataclasses)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            bad = ~torch.isfinite(value)
            assert not bad.any(), f"{where}: {int(bad.sum())} non-finite value(s)"
    elif isinstance(value, bool | int):
        return
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"
    elif isinstance(value, np.ndarray):
        _finite(torch.as_tensor(value), where)
    elif isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _finite(item, f"{where}[{i}]")
    elif is_dataclass(value):
        for f in fields(value):
            _finite(getattr(value, f.name), f"{where}.{f.name}")


def _tol(case: Case) -> float:
    """Valid probabilities of a low-precision dtype sum to 1 within K rounding errors."""
    return max(TOL, (case.k + 1) * torch.finfo(case.dtype).eps)


def _in(lo: float, hi: float) -> Callable[[Any, Case], None]:
    def check(value: Any, case: Case) -> None:
        assert isinstance(value, float), f"result is {type(value).__name__}, not a Python float"
        _finite(value)
        tol = _tol(case)
        assert lo - tol <= value <= hi + tol, f"result {value} outside [{lo}, {hi}]"

    return check


def _tensors_in(lo: float, hi: float) -> Callable[[Any, Case], None]:
    def check(value: Any, case: Case) -> None:
        items = value if isinstance(value, tuple | list) else (value,)
        if isinstance(value, dict):
            items = tuple(value.values())
        for item in items:
            assert isinstance(item, torch.Tensor), f"result is {type(item).__name__}"
            _finite(item)
            if item.numel():
                top = hi(case) if callable(hi) else hi
                tol = _tol(case)
                assert item.double().min() >= lo - tol, f"min {item.min()} < {lo}"
                assert item.double().max() <= top + tol, f"max {item.max()} > {top}"

    return check


def _nonnegative(value: Any, case: Case) -> None:
    _finite(value)
    numbers = value if isinstance(value, tuple | list) else (value,)
    for item in numbers:
        lowest = float(item.double().min()) if isinstance(item, torch.Tensor) else item
        if not (isinstance(item, torch.Tensor) and item.numel() == 0):
            assert lowest >= -TOL, f"negative result {lowest}"


def _reports(value: Any, case: Case) -> None:
    assert isinstance(value, dict) and value
    for name, scores in value.items():
        for key, number in scores.items():
            assert isinstance(number, float), f"{name}.{key} is {type(number).__name__}"
            assert math.isfinite(number) and -TOL <= number <= 1 + TOL, f"{name}.{key} = {number}"


def _sets(value: Any, case: Case) -> None:
    assert isinstance(value, torch.Tensor) and value.dtype == torch.bool, f"sets: {value!r:.80}"
    assert tuple(value.shape) == (case.n, case.k), f"sets shape {tuple(value.shape)}"


def _per_class(value: Any, case: Case) -> None:
    # documented: NaN for a class with no sample; everything else in [0, 1]
    assert isinstance(value, torch.Tensor) and value.shape == (case.k,)
    known = value[~torch.isnan(value)]
    assert ((known >= 0) & (known <= 1)).all(), f"per-class coverage {value}"


def _stratified(value: Any, case: Case) -> None:
    assert int(value.counts.sum()) == case.n
    filled = value.counts > 0
    cov = value.coverage[filled]
    assert torch.isfinite(cov).all() and ((cov >= 0) & (cov <= 1)).all(), f"coverage {cov}"


def _quantile(value: Any, case: Case) -> None:
    # an infinite threshold is the documented answer for a too-small calibration set
    assert isinstance(value, float) and not math.isnan(value), f"quantile {value}"


def _quantiles(value: Any, case: Case) -> None:
    assert isinstance(value, torch.Tensor) and value.shape == (case.k,)
    assert not torch.isnan(value).any(), f"class quantiles {value}"


def _split(value: Any, case: Case) -> None:
    both = torch.cat([value.temperature, value.conformal]).sort().values
    assert torch.equal(both, torch.arange(case.n)), "the two parts must partition the indices"


def _binned(value: Any, case: Case) -> None:
    _finite(value)
    assert int(value.counts.sum()) == case.n, f"bin counts sum to {int(value.counts.sum())}"


def _reliability(value: Any, case: Case) -> None:
    _finite(value)
    assert sum(value["counts"]) == case.n


def _same_shape_as_input(value: Any, case: Case) -> None:
    assert isinstance(value, torch.Tensor) and tuple(value.shape) == (case.n, case.k)
    _finite(value)


def _entropy(value: Any, case: Case) -> None:
    _tensors_in(0.0, lambda c: math.log(max(c.k, 1)))(value, case)


def _centroids(value: Any, case: Case) -> None:
    _finite(value)
    assert value.ndim == 2 and value.shape[1] == case.k and 1 <= value.shape[0] <= 3


def _selective(value: Any, case: Case) -> None:
    """``(auroc [R + 1], aurc [R + 1])`` in [0, 1], NaN only where documented: the AUROC of a
    replicate without an error or a correct point, the AURC of a replicate holding no sample
    (every weight 0, likely with a few samples); the data's AURC (row 0) is finite."""
    auroc, aurc = value
    assert auroc.dtype == F64 and aurc.dtype == F64 and auroc.shape == aurc.shape
    assert not torch.isinf(auroc).any() and not torch.isinf(aurc).any(), f"{auroc} {aurc}"
    assert not torch.isnan(aurc[0]), f"the data's AURC is NaN: {aurc}"
    for name, values in (("AUROC", auroc), ("AURC", aurc)):
        known = values[~torch.isnan(values)]  # float64 sums: 1 + 4e-16 when all are errors
        assert ((known >= -TOL) & (known <= 1 + TOL)).all(), f"{name} replicates {values}"


def _intervals(value: Any, case: Case) -> None:
    """``{name: Interval | None}``: finite ends in [0, 1], low <= high."""
    assert isinstance(value, dict) and value
    for name, interval in value.items():
        if interval is None:
            continue
        _finite(interval, name)
        for end in (interval.point, interval.low, interval.high):
            assert isinstance(end, float) and -TOL <= end <= 1 + TOL, f"{name}: {interval}"
        assert interval.low <= interval.high, f"{name}: {interval}"


def _ends(value: Any, case: Case) -> None:
    """``(low, high)`` floats, finite, ``low <= high`` (or ``None``: too few finite values)."""
    if value is None:
        return
    low, high = value
    assert isinstance(low, float) and isinstance(high, float), f"ends {value!r}"
    _finite(value)
    assert low <= high, f"low {low} > high {high}"


def _l1_ends(value: Any, case: Case) -> None:
    """``0 <= low <= high`` and finite."""
    _ends(value, case)
    assert value[0] >= 0.0, f"low {value[0]} < 0"


def _bin_ids(value: Any, case: Case) -> None:
    assert value.dtype == torch.int64 and value.shape == (case.n,)
    assert ((value >= 0) & (value < 3)).all()
