"""Reproducible by default (issue 20, item 2): every public random step, called twice, agrees.

The rule (bensemble/_seeds.py, docs/architecture.md): every ``seed=`` has a fixed default (0),
so two identical calls give identical results; ``seed=None`` (or a ``generator=``) opts in to
fresh randomness. The cases are in seed_cases.py; :func:`test_every_random_public_name_has_a_case`
finds the random names by walking every public ``__all__`` (public_api.py) for a ``seed`` /
``generator`` / ``random_state`` parameter, so a new random name without a case fails here.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from public_api import public_names  # noqa: E402
from seed_cases import NOT_RANDOM, PENDING, SEED_CASES, SeedCase  # noqa: E402

from bensemble._seeds import DEFAULT_SEED, derived_seed, resolve_generator  # noqa: E402

_RANDOM_PARAMETERS = ("seed", "generator", "random_state")


def _random_signatures() -> dict[str, dict[str, Any]]:
    """``{"Name" or "Class.method": {parameter: default}}`` of every public callable with a
    seed-like parameter (a class's ``__init__`` is reported under the class's name)."""
    found: dict[str, dict[str, Any]] = {}
    for public in public_names():
        obj = public.obj
        targets = []
        if inspect.isclass(obj):
            targets.append((public.name, obj.__init__))
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    targets.append((f"{public.name}.{attr}", member))
        elif callable(obj):
            targets.append((public.name, obj))
        for name, fn in targets:
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                continue
            hits = {p: params[p].default for p in _RANDOM_PARAMETERS if p in params}
            if hits:
                found[name] = hits
    return found


def _covered(name: str, cases: set[str]) -> bool:
    """A method is covered by its own case or its class's (``Ensemble.from_stochastic`` by
    ``Ensemble``)."""
    return name in cases or name in NOT_RANDOM or name.split(".")[0] in cases | set(NOT_RANDOM)


def test_every_random_public_name_has_a_case():
    cases = {case.name for case in SEED_CASES} | set(PENDING)
    missing = sorted(name for name in _random_signatures() if not _covered(name, cases))
    assert not missing, (
        f"public names with a seed / generator and no case in seed_cases.py: {missing}"
    )


def test_seed_defaults_are_fixed():
    """No public ``seed`` / ``random_state`` defaults to ``None`` (fresh randomness)."""
    loose = sorted(
        f"{name}({param}=None)"
        for name, params in _random_signatures().items()
        for param, default in params.items()
        if param != "generator"
        and default is None
        and name not in NOT_RANDOM
        and name not in PENDING
        and name.split(".")[0] not in PENDING
    )
    assert not loose, f"seed parameters whose default is fresh randomness: {loose}"


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.detach()]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    raise TypeError(f"a seed case must return tensors (got {type(value).__name__})")


def _run(case: SeedCase, option: dict[str, Any]) -> list[torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _tensors(case.run(option))
    torch.rand(1)  # move torch's global state on: a hidden global draw cannot repeat itself
    return out


def _identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _params() -> list:
    return [
        pytest.param(
            case,
            id=case.name,
            marks=[pytest.mark.xfail(reason=PENDING[case.name], strict=False)]
            if case.name in PENDING
            else [],
        )
        for case in SEED_CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_identical_calls_agree(case: SeedCase) -> None:
    first, second = _run(case, {}), _run(case, {})
    assert _identical(first, second), f"{case.name}: two identical calls differ"


@pytest.mark.parametrize("case", _params())
def test_seed_none_is_fresh(case: SeedCase) -> None:
    if not case.fresh:
        pytest.skip(case.why)
    first, second = _run(case, {"seed": None}), _run(case, {"seed": None})
    assert not _identical(first, second), f"{case.name}: seed=None repeated the same draw"


@pytest.mark.parametrize("case", _params())
def test_explicit_seed_zero_is_the_default(case: SeedCase) -> None:
    if not case.zero_is_default:
        pytest.skip("the default continues a stream (resample)")
    assert _identical(_run(case, {}), _run(case, {"seed": 0})), case.name


# ---------------------------------------------------------------------- the rule itself
def test_default_seed_is_zero_and_told_apart_by_identity():
    assert DEFAULT_SEED == 0 and repr(DEFAULT_SEED) == "0"
    g = torch.Generator().manual_seed(3)
    assert resolve_generator(g, DEFAULT_SEED, "f") is g  # a generator wins over the default
    with pytest.raises(ValueError, match="`generator` or `seed`"):
        resolve_generator(g, 0, "f")  # ... not over an explicit seed
    assert resolve_generator(None, None, "f") is None  # torch's global state
    a, b = resolve_generator(None, DEFAULT_SEED, "f"), resolve_generator(None, 0, "f")
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True, "0"])
def test_bad_seed_names_the_argument(seed):
    with pytest.raises(ValueError, match="f: `seed` must be an integer"):
        resolve_generator(None, seed, "f")


def test_derived_seeds_are_distinct_streams():
    seeds = {derived_seed(s, stage) for s in range(50) for stage in ("predict", "sample_mc")}
    assert len(seeds) == 100 and all(0 <= s < 2**63 for s in seeds)
    assert derived_seed(1, "ab") != derived_seed(1, "a", "b")


def test_default_seed_pickles_to_itself():
    import pickle

    assert pickle.loads(pickle.dumps(DEFAULT_SEED)) is DEFAULT_SEED
