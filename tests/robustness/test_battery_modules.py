"""The nn.Module battery (issue 19, item 1): every module the package ships, every conversion.

For each case of battery_modules.MODULE_CASES: ``repr``; ``.to(torch.float64)`` and ``.double()``
(the same function to float32 rounding, and back to the original dtype bit for bit);
``.half()`` then ``.float()`` (the same function to float16 rounding); ``.to("cpu")``;
``.to("meta")`` (and a forward pass there where torch allows it); ``copy.deepcopy``;
``state_dict`` -> ``load_state_dict`` into a module built from another seed;
``torch.save`` / ``torch.load(weights_only=True)``; ``.share_memory()``. Stochastic members are
compared member by member, so a dtype change that draws other noise (other members) fails.

Tolerances: float32 vs float64 forward passes of these small networks (<= 64 terms per dot
product, |terms| <= ~10) differ by at most ~n eps32 sum|terms| ~ 1e-5 relative to the output's
scale; weights rounded to float16 (relative 2**-11 ~ 4.9e-4) move the output by ~1e-3 of its
scale per layer, so 2e-2 of the scale is the float16 bound.
"""

from __future__ import annotations

import copy
import inspect
import io
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from battery_modules import MODULE_CASES, ModuleCase  # noqa: E402

CASES = [pytest.param(case, id=case.name) for case in MODULE_CASES]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for key in sorted(value) for t in _tensors(value[key])]
    if isinstance(value, (int, float)):
        return [torch.tensor(float(value))]
    raise TypeError(f"cannot compare an output of type {type(value).__name__}")


def _float_state(module: nn.Module) -> list[torch.Tensor]:
    return [t for t in [*module.parameters(), *module.buffers()] if t.is_floating_point()]


def _like(inputs: tuple, module: nn.Module, device: str | None = None) -> tuple:
    """Floating inputs in the module's floating dtype (and on ``device``)."""
    state = _float_state(module)
    dtype = state[0].dtype if state else None
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            x = x.to(dtype=dtype or x.dtype, device=device or x.device)
        out.append(x)
    return tuple(out)


def _run(case: ModuleCase, module: nn.Module, inputs: tuple) -> list[torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _tensors(case.output(module, *_like(inputs, module)))


def _close(got: list[torch.Tensor], want: list[torch.Tensor], rel: float, where: str) -> None:
    assert len(got) == len(want), f"{where}: {len(got)} outputs, expected {len(want)}"
    for a, b in zip(got, want):
        assert a.shape == b.shape, f"{where}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
        scale = float(b64.abs().max()) if b64.numel() else 0.0
        torch.testing.assert_close(a64, b64, rtol=rel, atol=rel * max(scale, 1e-3), msg=where)


def _equal(got: list[torch.Tensor], want: list[torch.Tensor], where: str) -> None:
    assert len(got) == len(want), f"{where}: {len(got)} outputs, expected {len(want)}"
    for a, b in zip(got, want):
        assert torch.equal(a, b), f"{where}: output changed (max diff {(a - b).abs().max()})"


@pytest.fixture(params=CASES)
def case(request) -> ModuleCase:
    return request.param


def _original(case: ModuleCase) -> tuple[nn.Module, tuple, list[torch.Tensor]]:
    module = case.build(0)
    inputs = case.inputs()
    return module, inputs, _run(case, module, inputs)


def test_repr(case: ModuleCase) -> None:
    module = case.build(0)
    text = repr(module)
    assert isinstance(text, str) and type(module).__name__ in text


@pytest.mark.parametrize("convert", ["to_float64", "double"])
def test_float64_copy_is_the_same_function(case: ModuleCase, convert: str) -> None:
    module, inputs, want = _original(case)
    wide = copy.deepcopy(module)
    wide = wide.to(torch.float64) if convert == "to_float64" else wide.double()
    assert all(t.dtype == torch.float64 for t in _float_state(wide)), (
        "a float tensor kept its dtype"
    )
    got = _run(case, wide, inputs)
    _close(got, want, 1e-5, f"{case.name}.{convert}()")
    # and back: float32 -> float64 -> float32 loses nothing
    dtypes = {t.dtype for t in _float_state(module)}
    if dtypes == {torch.float32}:
        _equal(_run(case, wide.float(), inputs), want, f"{case.name}.double().float()")


def test_half_round_trip(case: ModuleCase) -> None:
    module, inputs, want = _original(case)
    half = copy.deepcopy(module).half()
    assert all(t.dtype == torch.float16 for t in _float_state(half)), (
        "a float tensor kept its dtype"
    )
    back = half.float()
    assert all(t.dtype == torch.float32 for t in _float_state(back))
    _close(_run(case, back, inputs), want, 2e-2, f"{case.name}.half().float()")


def test_to_cpu_is_a_no_op(case: ModuleCase) -> None:
    module, inputs, want = _original(case)
    assert module.to("cpu") is module
    _equal(_run(case, module, inputs), want, f"{case.name}.to('cpu')")


def test_to_meta(case: ModuleCase) -> None:
    module, inputs, want = _original(case)
    meta = copy.deepcopy(module).to("meta")
    assert all(t.device.type == "meta" for t in [*meta.parameters(), *meta.buffers()])
    if case.meta_forward:
        with torch.no_grad():
            got = _tensors(case.output(meta, *_like(inputs, meta, device="meta")))
        assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
        assert all(t.device.type == "meta" for t in got)


def test_deepcopy(case: ModuleCase) -> None:
    module, inputs, want = _original(case)
    clone = copy.deepcopy(module)
    mine = {t.data_ptr() for t in module.parameters() if t.numel()}
    assert not mine & {t.data_ptr() for t in clone.parameters() if t.numel()}, "shares storage"
    _equal(_run(case, clone, inputs), want, f"deepcopy({case.name})")
    _equal(_run(case, module, inputs), want, f"{case.name} after deepcopy")


def _load_into_other(case: ModuleCase, state: dict) -> nn.Module:
    other = case.build(1)
    other.load_state_dict(state)
    return other


def test_state_dict_round_trip(case: ModuleCase) -> None:
    if not case.state_complete:
        pytest.skip(case.why)
    module, inputs, want = _original(case)
    other = case.build(1)
    differs = [a.shape != b.shape or not torch.equal(a, b) for a, b in zip(
        _run(case, other, inputs), want)]  # fmt: skip
    assert any(differs) or not _float_state(module), "seeds 0 and 1 build the same module"
    _equal(_run(case, _load_into_other(case, module.state_dict()), inputs), want,
           f"{case.name} state_dict round trip")  # fmt: skip


def test_save_and_load_weights_only(case: ModuleCase) -> None:
    if not case.state_complete:
        pytest.skip(case.why)
    module, inputs, want = _original(case)
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    _equal(_run(case, _load_into_other(case, state), inputs), want,
           f"{case.name} torch.save / torch.load(weights_only=True)")  # fmt: skip


def test_share_memory(case: ModuleCase) -> None:
    module, inputs, want = _original(case)
    assert module.share_memory() is module
    _equal(_run(case, module, inputs), want, f"{case.name}.share_memory()")


# --------------------------------------------------------------- nothing shadows nn.Module
# nn.Module methods a subclass is meant to override.
_OVERRIDABLE = {
    "forward",
    "extra_repr",
    "reset_parameters",
    "_load_from_state_dict",
    "get_extra_state",
    "set_extra_state",
    "__setstate__",
    "__getstate__",
    "__init__",
    "__repr__",
    "__dir__",
}


def _package_modules() -> list[type[nn.Module]]:
    import importlib
    import pkgutil

    import bensemble

    found = []
    for info in pkgutil.walk_packages(bensemble.__path__, "bensemble."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # optional extras (torchmetrics, ray) not installed
            continue
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, nn.Module)
                and obj.__module__ == module.__name__
            ):
                found.append(obj)
    return found


def _overrides(klass: type, name: str) -> bool:
    """``klass.name`` is a true override: it takes every parameter, by name, of the definition it
    replaces (the nearest one outside bensemble, e.g. torchmetrics' ``Metric._apply``), so callers
    of the base - ``.to()``, ``.half()`` - keep working. ``_apply(x, weight, bias)`` over
    ``nn.Module._apply(fn, recurse)`` is a shadow, not an override."""
    base = next(
        k for k in klass.__mro__[1:] if name in vars(k) and not k.__module__.startswith("bensemble")
    )
    ours, theirs = getattr(klass, name), getattr(base, name)
    if not (callable(ours) and callable(theirs)):
        return False
    try:
        mine = inspect.signature(ours).parameters
        wanted = inspect.signature(theirs).parameters
    except (TypeError, ValueError):
        return False
    return all(p in mine for p in wanted) or any(p.kind is p.VAR_KEYWORD for p in mine.values())


def test_no_class_shadows_an_nn_module_member() -> None:
    """A method named like nn.Module's (``_apply`` did) breaks .to()/.half()/.cuda()."""
    reserved = {name for name in dir(nn.Module) if not name.startswith("__")} | {"__call__"}
    shadows = []
    for cls in _package_modules():
        for klass in cls.__mro__:
            if not klass.__module__.startswith("bensemble"):
                continue
            clash = (set(vars(klass)) & reserved) - _OVERRIDABLE
            clash = {name for name in clash if not _overrides(klass, name)}
            shadows += [f"{klass.__module__}.{klass.__name__}.{name}" for name in sorted(clash)]
    assert not shadows, f"nn.Module members shadowed: {sorted(set(shadows))}"


def test_a_shadow_is_told_from_an_override() -> None:
    class Shadow(nn.Module):
        def _apply(self, x, weight, bias):  # the defect the battery was built for
            return x

    class Override(nn.Module):
        def _apply(self, fn, recurse=True):
            return super()._apply(fn, recurse)

    Shadow.__module__ = Override.__module__ = "bensemble.fake"
    assert not _overrides(Shadow, "_apply")
    assert _overrides(Override, "_apply")


def test_no_instance_attribute_shadows_an_nn_module_member(case: ModuleCase) -> None:
    module = case.build(0)
    reserved = {name for name in dir(nn.Module) if not name.startswith("__")}
    base = set(vars(nn.Module()))
    for sub in module.modules():
        if not type(sub).__module__.startswith("bensemble"):
            continue
        clash = (set(vars(sub)) - base) & reserved
        assert not clash, f"{type(sub).__name__} instance attributes shadow nn.Module: {clash}"
