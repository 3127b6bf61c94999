"""Issue 11: a hypothesis-driven sweep over every public array-taking function.

One registry (:data:`REGISTRY`) names each public function that takes arrays, the kind of every
array argument (``probs [N, K]``, ``member_probs [M, N, K]``, ``labels [N]``, ...) and what a
valid result looks like (finite, in range). Each function meets every applicable *scenario*:

* ``valid`` - random well-formed input in float32 / float64, as a tensor, numpy array or list;
* ``n0`` / ``n1`` - no sample / one sample; ``k1`` / ``k1000`` - one class / a thousand classes;
* ``float16`` / ``bfloat16`` - well-formed input in a half-precision dtype;
* ``extreme`` - logits up to the dtype's maximum, probabilities exactly 0 and 1 or subnormal;
* ``nan`` / ``inf`` - one NaN / one infinity at a random place of one float argument;
* ``bad_shape`` - one argument with an extra axis or one sample too few;
* ``bad_labels`` - a label outside ``[0, K)`` or not an integer;
* ``single_model`` - one model's ``[N, K]`` probabilities where ``[M, N, K]`` members are expected.

The contract: the call returns a finite, in-range result, or raises a ``ValueError`` whose message
names one of the function's arguments in backticks. Never another exception type, never a
silent NaN. Invalid input (``nan``, ``bad_shape``, ``bad_labels``, ``single_model``) must raise.

Defects found by the sweep and owned by other work are listed in :data:`KNOWN_DEFECTS` (skipped
with a reason) and in ``/work/wt/sweep_findings.md``; empty the set as the fixes land.

Run: ``python -m pytest -q -p no:cacheprovider tests/robustness/test_sweep.py``
(``SWEEP_EXAMPLES=n`` changes the number of examples per function and scenario).
"""

from __future__ import annotations

import inspect
import math
import re
import sys
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bensemble import calibration as cal
from bensemble import conformal as conf
from bensemble import datasets, losses, metrics, regression, utils
from bensemble import uncertainty as unc
from bensemble.metrics import intervals

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_cases import (  # noqa: E402
    CALL_LIMIT_S,
    EXAMPLES,
    F64,
    KINDS,
    Case,
    _extreme,
    _Hang,
    _is_float,
    _make,
    _time_limit,
    _to_container,
)
from sweep_registry import (  # noqa: E402
    REGISTRY,
    Entry,
)

SCENARIOS = (
    "valid",
    "n0",
    "n1",
    "k1",
    "k1000",
    "float16",
    "bfloat16",
    "extreme",
    "nan",
    "inf",
    "bad_shape",
    "bad_labels",
    "single_model",
)
MUST_RAISE = {"nan", "bad_shape", "bad_labels", "single_model"}
# Entries that take labels but not the number of classes (only -1 / float labels are invalid).
_LABELS_WITHOUT_K = {"split_calibration"}

# Defects the sweep found that belong to other work in flight (see /work/wt/sweep_findings.md).
# "<entry>::<scenario>" -> reason. Empty this as the fixes are merged.
_HANG = "lac_cutoff steps one ulp at a time when a LAC threshold is within an ulp of 1 (hangs)"
_FIT_ERROR = (
    "raises CalibrationFitError (a RuntimeError) on uninformative logits (issue 11 class 6)"
)
_CONSTANT = "raises CalibrationFitError (a RuntimeError) on row-constant logits"
_ENTROPY_INPUT = "entropy() takes no numpy array / list (TypeError): validates nothing (class 3)"
_ENTROPY_NONFINITE = "entropy() returns NaN / inf for non-finite probs (class 3)"
KNOWN_DEFECTS: dict[str, str] = {}


def _applicable(entry: Entry, scenario: str) -> bool:
    kinds = entry.kinds.values()
    float_kinds = [k for k in kinds if _is_float(k)]
    classy = any(KINDS[k][1] for k in kinds)
    if scenario in ("k1", "k1000"):
        return classy and (scenario == "k1" or entry.max_k >= 1000)
    if scenario == "extreme" and entry.overflows:
        return False
    if scenario in ("float16", "bfloat16", "extreme", "nan", "inf"):
        if scenario == "nan" and entry.propagates:
            return False
        return bool(float_kinds)
    if scenario == "bad_shape" and entry.batched:
        return False
    if scenario == "bad_labels":
        return any(k in ("labels", "binary_labels") for k in kinds)
    if scenario == "single_model":
        return "member" in kinds
    return True


CASES = [
    pytest.param(entry, scenario, id=f"{entry.name}::{scenario}")
    for entry in REGISTRY
    for scenario in SCENARIOS
    if _applicable(entry, scenario)
]


@st.composite
def _cases(draw: st.DrawFn, entry: Entry, scenario: str) -> Case:
    n = {"n0": 0, "n1": 1}[scenario] if scenario in ("n0", "n1") else draw(st.integers(2, 24))
    if scenario == "k1":
        k = 1
    elif scenario == "k1000":
        k, n = 1000, min(n, 6)
    else:
        k = draw(st.integers(max(2, entry.min_k), min(8, entry.max_k)))
    if scenario == "float16":
        dtype, containers = torch.float16, ["tensor", "numpy"]
    elif scenario == "bfloat16":
        dtype, containers = torch.bfloat16, ["tensor"]
    else:
        dtype, containers = draw(st.sampled_from([torch.float32, F64])), ["tensor", "numpy", "list"]
    return Case(
        scenario=scenario,
        n=n,
        k=k,
        m=draw(st.integers(1, 4)),
        dtype=dtype,
        container=draw(st.sampled_from(containers)),
        scale=draw(st.sampled_from([0.1, 1.0, 4.0, 20.0])),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def _build(entry: Entry, case: Case) -> dict[str, Any]:
    g = torch.Generator().manual_seed(case.seed)
    arrays = {name: _make(kind, case, g) for name, kind in entry.kinds.items()}
    float_names = [name for name, kind in entry.kinds.items() if _is_float(kind)]
    if case.scenario == "extreme":
        for name in float_names:
            arrays[name] = _extreme(entry.kinds[name], arrays[name], case.dtype, g)
    for name in float_names:
        arrays[name] = arrays[name].to(case.dtype)
    if case.scenario in ("nan", "inf"):
        target = float_names[int(torch.randint(0, len(float_names), (1,), generator=g))]
        x = arrays[target]
        if x.numel():
            flat = x.reshape(-1).clone()
            where = int(torch.randint(0, flat.numel(), (1,), generator=g))
            sign = 1 if torch.rand(1, generator=g) < 0.5 else -1
            flat[where] = math.nan if case.scenario == "nan" else sign * math.inf
            arrays[target] = flat.reshape(x.shape)
            case.detail = f"{flat[where].item()} in `{target}` at flat index {where}"
            case.corrupted = target
        else:
            case.detail = "(nothing to corrupt: empty input)"
    if case.scenario == "bad_shape":
        _break_shape(entry, case, arrays, g)
    if case.scenario == "single_model":
        # one model's [N, K] probabilities where member predictions [M, N, K] are expected:
        # never guessed to be binary members [M, N] (the lead's shape mechanism)
        target = next(n for n, k in entry.kinds.items() if k == "member")
        arrays[target] = arrays[target][0]
        case.detail = f"`{target}` = one model's [N, K] probabilities"
    if case.scenario == "bad_labels":
        target = next(n for n, k in entry.kinds.items() if k in ("labels", "binary_labels"))
        x = arrays[target]
        top = 2 if entry.kinds[target] == "binary_labels" else case.k
        choice = int(torch.randint(0, 3, (1,), generator=g))
        if choice == 0 and entry.name in _LABELS_WITHOUT_K:
            choice = 1  # K is not an argument: a label >= K cannot be told apart from a new class
        if x.numel() == 0:
            arrays[target] = x.double()
            case.detail = f"empty float `{target}`"
        elif choice == 0:
            arrays[target] = x.clone().index_fill_(0, torch.tensor([0]), top)
            case.detail = f"`{target}`[0] = {top} (out of range)"
        elif choice == 1:
            arrays[target] = x.clone().index_fill_(0, torch.tensor([0]), -1)
            case.detail = f"`{target}`[0] = -1"
        else:
            arrays[target] = x.double() + 0.5
            case.detail = f"`{target}` + 0.5 (not integers)"
    return {name: _to_container(x, case) for name, x in arrays.items()}


# kinds whose first sample axis is the shared N (axis 1 for member stacks)
_N_AXIS = {
    "probs": 0,
    "logits": 0,
    "member": 1,
    "binary_member": 1,
    "means": 1,
    "variances": 1,
    "labels": 0,
    "binary_labels": 0,
    "conf": 0,
    "eta": 0,
    "correct": 0,
    "scores": 0,
    "positive": 0,
    "sets": 0,
    "vectors": 0,
    "x": 0,
    "points": 0,
    "reg_member": 1,
    "index": 0,
}


def _break_shape(entry: Entry, case: Case, arrays: dict, g: torch.Generator) -> None:
    """One argument one sample short of the others, a class short, or with two extra axes."""
    shared = [name for name, kind in entry.kinds.items() if kind in _N_AXIS]
    if "centroids" in arrays:  # [C, D] against [N, D]: one feature short
        arrays["centroids"] = arrays["centroids"][:, :-1]
        case.detail = "`centroids` one feature short"
    elif "member_probs_out" in arrays:  # N_in and N_out differ freely; K must agree
        arrays["member_probs_out"] = arrays["member_probs_out"][..., :-1]
        case.detail = "`member_probs_out` one class short"
    elif len(shared) > 1 and case.n > 0:
        target = shared[int(torch.randint(0, len(shared), (1,), generator=g))]
        axis = _N_AXIS[entry.kinds[target]]
        arrays[target] = arrays[target].narrow(axis, 0, case.n - 1)
        case.detail = f"`{target}` one sample short (axis {axis})"
    else:
        names = list(arrays)
        target = names[int(torch.randint(0, len(names), (1,), generator=g))]
        x = arrays[target]
        arrays[target] = x.expand(2, 2, *x.shape).clone()
        case.detail = f"`{target}` with two extra leading axes"


def _arguments(entry: Entry) -> set[str]:
    names = set(entry.kinds) | set(entry.names)
    try:
        names |= set(inspect.signature(entry.call).parameters)
    except (TypeError, ValueError):
        pass
    return names


def _check_error(entry: Entry, case: Case, err: ValueError) -> None:
    message = str(err)
    cited = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", message))
    assert cited & _arguments(entry), (
        f"ValueError does not name an argument ({sorted(_arguments(entry))}): {message!r}"
    )


def _propagated(entry: Entry, args: dict[str, Any], value: Any) -> bool:
    """Elementwise functions may pass NaN / inf through where the input held them."""
    if not entry.propagates or not isinstance(value, torch.Tensor):
        return False
    bad_in = torch.zeros(value.shape, dtype=torch.bool)
    for x in args.values():
        t = torch.as_tensor(x)
        if t.is_floating_point():
            bad_in |= ~torch.isfinite(t.double()).broadcast_to(value.shape)
    bad_out = ~torch.isfinite(value.double())
    return bool(bad_in.any()) and not (bad_out & ~bad_in).any()


@pytest.fixture(scope="module", autouse=True)
def _warm_up():
    """Pay torch's one-off lazy imports (the first optimizer imports torch._dynamo) up front."""
    torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])


@pytest.mark.parametrize("entry, scenario", CASES)
@settings(
    max_examples=EXAMPLES,
    phases=[Phase.explicit, Phase.generate],  # the first failing case is reported, not shrunk
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_sweep(entry: Entry, scenario: str, data: st.DataObject) -> None:
    key = f"{entry.name}::{scenario}"
    if key in KNOWN_DEFECTS:
        pytest.skip(f"known defect: {KNOWN_DEFECTS[key]}")
    case = data.draw(_cases(entry, scenario), label="case")
    args = _build(entry, case)
    where = f"{entry.name}({case.describe()})"
    try:
        with warnings.catch_warnings(), _time_limit(CALL_LIMIT_S):
            warnings.simplefilter("ignore")
            value = entry.call(**args, **({"num_classes": case.k} if entry.with_k else {}))
    except ValueError as err:
        try:
            _check_error(entry, case, err)
        except AssertionError as fail:
            raise AssertionError(f"{where}: {fail}") from err
        return
    except Exception as err:  # noqa: BLE001 - the point of the sweep
        raise AssertionError(f"{where}: raised {type(err).__name__}: {err}") from err
    documented = scenario == "nan" and case.corrupted in entry.nonfinite_ok
    if scenario in MUST_RAISE and not case.detail.startswith("(") and not documented:
        if not (scenario == "nan" and _propagated(entry, args, value)):
            raise AssertionError(f"{where}: invalid input accepted, returned {value!r:.120}")
    if _propagated(entry, args, value):
        return
    try:
        entry.check(value, case)
    except AssertionError as fail:
        raise AssertionError(f"{where}: {fail}") from None


def test_registry_covers_the_public_array_api():
    """Every public function of the array-taking sub-packages is swept (or excused here)."""
    excused = {
        # not array-taking, or takes a fitted object / a model / a path
        "calibration_error_from_bins",
        "CalibrationBins",
        "EECEDetails",
        "CalibrationFitError",
        "TemperatureFit",
        "DEFAULT_TEMPERATURE_BOUNDS",
        "DEFAULT_SPREAD_BOUNDS",
        "SCORES",
        "SizeStratifiedCoverage",
        "CalibrationSplit",
        "conformal_rank",  # integers only (n, alpha)
        "enable_dropout",
        "get_total_kl",
        "predict_with_uncertainty",
        "VariationalLoss",
        "make_toy_gaussians",  # integers in, data out
        "make_toy_grid",
        "ToyData",
        "BAYES_ERROR",
        "SmoothCalibrationCurve",  # the result dataclass of smooth_calibration_curve
        "prune_model",  # takes a model
        # regression: result dataclasses, option tuples, and the generator (integers in)
        "RegressionCalibrationCurve",
        "RegressionEECEDetails",
        "PREDICTIVES",
        "REGRESSION_SCORES",
        "SPREADS",
        "RegressionToyData",
        "REGRESSION_TOY_RANGE",
        "make_regression_toy",
        # stateful meters (update / merge / compute): every one is proved equal to its one-shot
        # metric over random shards in tests/metrics/test_streaming_meters.py
        "AccuracyMeter",
        "BrierMeter",
        "ClasswiseCalibrationErrorMeter",
        "NLLMeter",
        "EECEMeter",
        "UncertaintyMeter",
        # replicate statistics (update / merge / compute): the meter battery's replicate cases
        # (battery_replicates.py); Interval is their result dataclass
        "ReplicateState",
        "MeanReplicates",
        "CalibrationReplicates",
        "EECEReplicates",
        "Interval",
    }
    swept = {e.name.split("[")[0].split(".")[0] for e in REGISTRY} | {"SplitConformalClassifier"}
    public = set()
    for module in (metrics, intervals, cal, unc, conf, utils, losses, datasets, regression):
        public |= set(module.__all__)
    assert public - swept - excused == set()


def _numbers(value: Any) -> list[float]:
    """Every number in a result, in a fixed order, as Python floats."""
    if isinstance(value, torch.Tensor):
        return value.detach().double().flatten().tolist()
    if isinstance(value, str) or value is None:  # names, options, "no interval": no numbers
        return []
    if isinstance(value, bool | int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for key in sorted(value) for x in _numbers(value[key])]
    if isinstance(value, list | tuple):
        return [x for item in value for x in _numbers(item)]
    if is_dataclass(value):
        return [x for f in fields(value) for x in _numbers(getattr(value, f.name))]
    if hasattr(value, "savefig"):  # a plot function's Figure: the data of its lines, closed
        import matplotlib.pyplot as plt

        numbers = [
            float(x) for ax in value.axes for line in ax.lines for x in line.get_xydata().ravel()
        ]
        plt.close(value)
        return numbers
    raise TypeError(f"cannot compare a {type(value).__name__}")


def _outcome(entry: Entry, case: Case) -> tuple[str, Any]:
    args = _build(entry, case)
    try:
        with warnings.catch_warnings(), _time_limit(CALL_LIMIT_S):
            warnings.simplefilter("ignore")
            value = entry.call(**args, **({"num_classes": case.k} if entry.with_k else {}))
    except ValueError as err:
        return "ValueError", str(err)
    except _Hang as err:
        raise AssertionError(f"{entry.name}({case.describe()}): {err}") from None
    except Exception as err:  # noqa: BLE001
        return type(err).__name__, str(err)
    return "value", value


@pytest.mark.parametrize("entry", [e for e in REGISTRY if not e.tensor_only], ids=lambda e: e.name)
@settings(
    max_examples=max(1, EXAMPLES // 2),
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_containers_agree(entry: Entry, data: st.DataObject) -> None:
    """The same data as a tensor, a numpy array and a nested list gets the same answer."""
    key = f"{entry.name}::containers"
    if key in KNOWN_DEFECTS:
        pytest.skip(f"known defect: {KNOWN_DEFECTS[key]}")
    case = data.draw(_cases(entry, "valid"), label="case")
    outcomes = {}
    for container in ("tensor", "numpy", "list"):
        case.container = container
        outcomes[container] = _outcome(entry, case)
    kinds = {c: kind for c, (kind, _) in outcomes.items()}
    where = f"{entry.name}({case.describe()})"
    assert len(set(kinds.values())) == 1, f"{where}: outcomes differ: {outcomes}"
    if kinds["tensor"] != "value":
        return
    reference = _numbers(outcomes["tensor"][1])
    rtol = 1e-5 if case.dtype == torch.float32 else 1e-9
    for container in ("numpy", "list"):
        other = _numbers(outcomes[container][1])
        assert len(other) == len(reference), f"{where}: {container} result has another size"
        close = torch.isclose(
            torch.tensor(other, dtype=F64),
            torch.tensor(reference, dtype=F64),
            rtol=rtol,
            atol=rtol,
            equal_nan=True,
        )
        assert close.all(), f"{where}: {container} result differs from the tensor's"
