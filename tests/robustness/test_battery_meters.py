"""The meter battery (issue 19, item 1): every public streaming meter and torchmetrics class,
and every mergeable bootstrap-replicate state of ``bensemble.metrics.intervals``, against bad
batches, incompatible merges, tampered states, update after compute, ``forward()`` and merges of
random shards. The cases live in ``battery_meters.py`` and ``battery_replicates.py``.

Every refusal is a ``ValueError`` and leaves the object bit-identical (state tensors, their
dtypes, the class / member counts it has seen, torchmetrics' update count); afterwards the object
still accumulates to the one-shot value, so nothing was lost or half-applied.
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from battery_meters import METER_NAMES, N, cases, data  # noqa: E402
from battery_replicates import REPLICATE_NAMES, replicate_cases  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:The ``compute`` method:UserWarning",
    "ignore:.*look like probabilities.*:UserWarning",
)

CASES = cases() + replicate_cases()
REL = 1e-10  # float64 sums over at most N = 240 rows, merged in another order
FIRST, SECOND = torch.arange(0, 100), torch.arange(100, N)


def _is_tm(obj) -> bool:
    return hasattr(obj, "_defaults")


def _update(obj, args):
    obj.update(*args)
    return obj


def _interval(out) -> tuple[float, ...]:
    return (out.point, out.low, out.high, out.estimate)


def _value(obj) -> tuple[float, ...]:
    from bensemble.metrics.intervals import Interval

    out = obj.compute()
    if isinstance(out, Interval):  # a replicate state
        return _interval(out)
    if isinstance(out, dict) and all(isinstance(v, Interval) for v in out.values()):
        return tuple(x for k in sorted(out) for x in _interval(out[k]))  # ReplicateState
    if isinstance(out, dict):
        return tuple(float(out[k]) for k in ("total", "aleatoric", "epistemic"))
    return (float(out),)


_EXPECTED: dict = {}


def _expected(case, idx: torch.Tensor) -> tuple[float, ...]:
    """The case's one-shot value on the rows ``idx`` (memoised: many tests share it)."""
    key = (case.id, tuple(idx.tolist()))
    if key not in _EXPECTED:
        _EXPECTED[key] = case.expected(idx)
    return _EXPECTED[key]


def _close(got, expected):
    assert got == pytest.approx(expected, rel=REL, abs=1e-12)


def snapshot(obj) -> dict:
    """Everything a refusal must leave unchanged."""
    if _is_tm(obj):
        return {
            "states": {k: getattr(obj, k).detach().clone() for k in obj._defaults},
            "update_count": obj._update_count,
            "synced": obj._is_synced,
            "meter": copy.deepcopy(obj._meter.__dict__),
        }
    return copy.deepcopy(obj.__dict__)


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):  # replicate states' sums
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.device == b.device
            and torch.equal(a, b)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "_fn") and hasattr(a, "__dict__"):  # a statistic inside a ReplicateState
        return type(a) is type(b) and same(vars(a), vars(b))
    return a == b


def _fed(case):
    return _update(case.make(), case.batch(FIRST))


def _params(kind):
    out = []
    for case in CASES:
        for key in getattr(case, kind):
            out.append(pytest.param(case, key, id=f"{case.id}-{key}"))
    return out


# ----------------------------------------------------------------------------- coverage


def test_meter_names_are_every_public_meter_and_torchmetrics_class():
    import bensemble.metrics as metrics
    from bensemble.metrics._state import MergeableState

    public = {
        name
        for name in metrics.__all__
        if isinstance(getattr(metrics, name), type)
        and issubclass(getattr(metrics, name), MergeableState)
        and getattr(metrics, name) is not MergeableState
    }
    from bensemble.integrations import torchmetrics as tm

    public |= set(tm.__all__)
    assert set(METER_NAMES) == public
    assert len(METER_NAMES) == len(set(METER_NAMES))


def test_replicate_names_are_every_public_replicate_state():
    from bensemble.metrics import intervals
    from bensemble.metrics.intervals._replicates import ReplicatesBase

    public = {
        name
        for name in intervals.__all__
        if isinstance(getattr(intervals, name), type)
        and (
            issubclass(getattr(intervals, name), ReplicatesBase)
            or getattr(intervals, name) is intervals.ReplicateState
        )
    }
    assert set(REPLICATE_NAMES) == public


def test_every_name_has_a_case():
    pytest.importorskip("torchmetrics")
    assert {c.class_name for c in CASES} == set(METER_NAMES) | set(REPLICATE_NAMES)


# ----------------------------------------------------------------------------- bad batches


def _bad_params():
    out = []
    for case in CASES:
        paths = ("update", "forward") if case.torchmetrics else ("update",)
        for key in case.bad:
            for path in paths:
                out.append(pytest.param(case, key, path, id=f"{case.id}-{key}-{path}"))
    return out


@pytest.mark.parametrize(("case", "bad", "path"), _bad_params())
def test_bad_batch_is_refused_and_keeps_the_state(case, bad, path):
    obj = _update(_fed(case), case.batch(torch.arange(100, 140)))
    before = snapshot(obj)
    call = obj.update if path == "update" else obj.forward
    with pytest.raises(ValueError, match=r"\w+(\.\w+)?: `"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call(*case.bad[bad]())
    assert same(snapshot(obj), before), "a refused batch changed the state"
    _update(obj, case.batch(torch.arange(140, N)))
    _close(_value(obj), _expected(case, torch.cat([FIRST, torch.arange(100, N)])))


# ----------------------------------------------------------------------------- merges


def _merge(obj, other):
    return obj.merge_state(other) if _is_tm(obj) else obj.merge(other)


@pytest.mark.parametrize(("case", "partner"), _params("incompatible"))
def test_incompatible_merge_is_refused_and_keeps_the_state(case, partner):
    obj = _fed(case)
    other = case.incompatible[partner]()
    before = snapshot(obj)
    with pytest.raises(ValueError):
        _merge(obj, other)
    assert same(snapshot(obj), before)
    if _is_tm(obj) and _is_tm(other):  # the same partner as a bare state dict
        with pytest.raises(ValueError):
            obj.merge_state({k: v.clone() for k, v in other.metric_state.items()})
        assert same(snapshot(obj), before)
    _update(obj, case.batch(SECOND))
    _close(_value(obj), _expected(case, torch.cat([FIRST, SECOND])))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_self_merge_and_non_meters_are_refused(case):
    obj = _fed(case)
    before = snapshot(obj)
    for other in (obj, object(), None, "state"):
        with pytest.raises(ValueError):
            _merge(obj, other)
        assert same(snapshot(obj), before)
    _merge(obj, copy.deepcopy(obj))  # a deliberate copy is allowed
    _close(_value(obj), _expected(case, torch.cat([FIRST, FIRST])))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_of_random_shards_equals_one_shot(case, seed):
    g = torch.Generator().manual_seed(seed + 100 * CASES.index(case))
    perm = torch.randperm(N, generator=g)
    n_shards = int(torch.randint(2, 7, (), generator=g))
    cuts = sorted((torch.randperm(N - 1, generator=g)[: n_shards - 1] + 1).tolist())
    shards = [perm[a:b] for a, b in zip([0, *cuts], [*cuts, N], strict=True)]
    parts = [_update(case.make(), case.batch(idx)) for idx in shards]
    merged = parts[0]
    for other in parts[1:]:
        _merge(merged, other)
    _close(_value(merged), _expected(case, torch.arange(N)))


# ----------------------------------------------------------------------------- states


def _state_dict(obj):
    if _is_tm(obj):
        obj.persistent(True)
        return obj.state_dict()
    return obj.state_dict()


def _tensors(sd, obj):
    return sd if _is_tm(obj) else sd["state"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_state_dict_round_trip_carries_everything(case):
    a = _fed(case)
    b = case.make()
    b.load_state_dict(_state_dict(a))
    assert _value(b) == _value(a)
    assert same(_state_dict(b), _state_dict(a))
    if "wrong-k" in case.bad:  # the class count seen travels with the state
        before = snapshot(b)
        with pytest.raises(ValueError), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            b.update(*case.bad["wrong-k"]())
        assert same(snapshot(b), before)
    _update(b, case.batch(SECOND))
    _close(_value(b), _expected(case, torch.cat([FIRST, SECOND])))
    _close(_value(a), _expected(case, FIRST))  # the loaded state is a copy


def _tampers(case):
    """Edits of a saved state: generic per tensor, plus the case's inconsistent sums."""
    out = {}
    keys = list(_tensors(_state_dict(_fed(case)), case.make()))
    for key in keys:
        out[f"{key}-shape"] = lambda s, k=key: s.__setitem__(
            k, torch.cat([s[k].reshape(-1), s[k].reshape(-1)[:1]])
        )
        out[f"{key}-float32"] = lambda s, k=key: s.__setitem__(k, s[k].float())
        out[f"{key}-int64"] = lambda s, k=key: s.__setitem__(k, s[k].long())
        out[f"{key}-nan"] = lambda s, k=key: s[k].reshape(-1).__setitem__(0, float("nan"))
        out[f"{key}-inf"] = lambda s, k=key: s[k].reshape(-1).__setitem__(0, float("inf"))
        if key not in case.signed:
            out[f"{key}-negative"] = lambda s, k=key: s[k].reshape(-1).__setitem__(0, -1.0)
        out[f"{key}-list"] = lambda s, k=key: s.__setitem__(k, s[k].tolist())
        out[f"{key}-missing"] = lambda s, k=key: s.pop(k)
    out["extra-key"] = lambda s: s.__setitem__("bogus", torch.zeros(1, dtype=torch.float64))
    out.update(case.inconsistent)
    return out


def _tamper_params():
    out = []
    for case in CASES:
        paths = ("load", "merge") if case.torchmetrics else ("load",)
        for key in _tampers(case):
            for path in paths:
                out.append(pytest.param(case, key, path, id=f"{case.id}-{key}-{path}"))
    return out


@pytest.mark.parametrize(("case", "tamper", "path"), _tamper_params())
def test_tampered_state_is_refused_and_keeps_the_state(case, tamper, path):
    source = _fed(case)
    sd = copy.deepcopy(_state_dict(source))
    if path == "merge":
        sd = {k: v.clone() for k, v in source.metric_state.items()}
    _tampers(case)[tamper](_tensors(sd, source) if path == "load" else sd)
    obj = _update(case.make(), case.batch(SECOND))
    before = snapshot(obj)
    with pytest.raises(ValueError, match=r"\w+(\.\w+)?: `"):
        obj.load_state_dict(sd) if path == "load" else obj.merge_state(sd)
    assert same(snapshot(obj), before)
    _close(_value(obj), _expected(case, SECOND))


def _inconsistent_params():
    return [
        pytest.param(case, key, id=f"{case.id}-{key}")
        for case in CASES
        if not case.torchmetrics
        for key in case.inconsistent
    ]


@pytest.mark.parametrize(("case", "tamper"), _inconsistent_params())
def test_merge_with_a_corrupt_partner_is_refused_and_keeps_the_state(case, tamper):
    """A partner whose live state was edited in place (sums no data could give) is refused."""
    partner = _fed(case)
    case.inconsistent[tamper](partner.state)
    obj = _update(case.make(), case.batch(SECOND))
    before = snapshot(obj)
    with pytest.raises(ValueError, match=r"\w+(\.\w+)?: `other"):
        obj.merge(partner)
    assert same(snapshot(obj), before)
    _close(_value(obj), _expected(case, SECOND))


@pytest.mark.parametrize("case", [c for c in CASES if not c.torchmetrics], ids=lambda c: c.id)
def test_state_dict_with_other_settings_or_keys_is_refused(case):
    obj = _fed(case)
    before = snapshot(obj)
    good = obj.state_dict()
    bad = [
        {"state": good["state"]},
        {**good, "bogus": 1},
        {**good, "settings": {**good["settings"], "bogus": 1}},
        [good],
        None,
    ]
    for sd in bad:
        with pytest.raises(ValueError, match="load_state_dict: `state_dict"):
            obj.load_state_dict(sd)
        assert same(snapshot(obj), before)


# ----------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_update_after_compute_continues_the_accumulation(case):
    obj = _fed(case)
    first = _value(obj)
    _close(first, _expected(case, FIRST))
    _update(obj, case.batch(SECOND))
    _close(_value(obj), _expected(case, torch.cat([FIRST, SECOND])))
    if _is_tm(obj):  # a merge or a load after compute is not hidden by the cached value
        other = _fed(case)
        obj.merge_state(other)
        _close(_value(obj), _expected(case, torch.cat([FIRST, SECOND, FIRST])))
        obj.load_state_dict(_state_dict(other))
        _close(_value(obj), first)


@pytest.mark.parametrize("case", [c for c in CASES if c.torchmetrics], ids=lambda c: c.id)
def test_forward_returns_the_batch_value_and_accumulates(case):
    obj = case.make()
    for idx in (FIRST, SECOND):
        batch_value = obj(*case.batch(idx))
        assert batch_value.dtype == torch.float64
        _close((float(batch_value),), _expected(case, idx))
    _close(_value(obj), _expected(case, torch.arange(N)))
    assert obj._update_count == 2


def test_cases_use_the_fixed_data():
    d = data()
    assert d["members"].shape == (4, N, 3)
