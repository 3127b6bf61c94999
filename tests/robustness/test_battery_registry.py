"""The registry of public names and their batteries (issue 19, item 1).

A public class or function in no battery fails :func:`test_every_public_name_is_in_a_battery`,
which prints the uncovered names. The count of public names each battery covers is printed by
``python -m pytest tests/robustness/test_battery_registry.py -rP`` (or
``python tests/robustness/battery_registry.py``).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sweep_registry  # noqa: E402
from battery_registry import coverage, summary  # noqa: E402
from public_api import public_names  # noqa: E402


def test_every_public_name_is_in_a_battery() -> None:
    print(summary())
    _, uncovered, _ = coverage()
    assert not uncovered, (
        f"public names in no battery: {uncovered}. Add each to the one that fits: "
        "sweep_registry.py (array-taking functions: a glossary name in GLOSSARY, or an "
        "override), battery_modules.py (nn.Modules), battery_estimators.py (fit / predict), "
        "test_battery_results.py (result dataclasses, displays, plot functions), "
        "battery_calls.py / battery_calls_reporting.py (other functions and helper classes: one "
        "valid call, bad calls naming the argument), battery_meters.py / battery_replicates.py "
        "(mergeable states), or battery_registry.DECLARED with a reason"
    )


def test_no_battery_names_a_missing_public_name() -> None:
    _, _, stale = coverage()
    assert not stale, f"battery entries naming no public name (renamed or removed?): {stale}"


def test_every_module_class_is_in_the_module_battery() -> None:
    """nn.Module classes need the module battery itself, not just any battery."""
    covered, _, _ = coverage()
    exempt = set(covered["declared"])
    modules = {p.name for p in public_names() if p.kind == "module"} - exempt
    missing = modules - set(covered["modules"])
    assert not missing, f"nn.Modules outside the module battery (battery_modules.py): {missing}"


def test_the_walk_sees_every_sub_package() -> None:
    packages = {p.package for p in public_names()}
    assert {
        "bensemble.layers",
        "bensemble.core",
        "bensemble.search",
        "bensemble.metrics",
    } <= packages
    assert len(public_names()) >= 150


def test_sweep_overrides_are_only_where_inference_fails() -> None:
    """An override equal to what the glossary infers is redundant: delete it (CHECKS/FLAGS
    carry its range check and options)."""
    public = sweep_registry.public_functions()
    redundant = [
        entry.name
        for entry in sweep_registry.OVERRIDES
        if entry.name in public
        and entry.call is public[entry.name]
        and sweep_registry.inferred_kinds(entry.call) == entry.kinds
    ]
    assert not redundant, f"overrides that generation would produce as they are: {redundant}"


def test_a_new_glossary_function_is_swept_without_a_line(monkeypatch) -> None:
    def brand_new_metric(member_probs, labels, n_bins: int = 10) -> float:
        return 0.0

    def not_array_taking(path: str) -> None:
        return None

    functions = {"brand_new_metric": brand_new_metric, "not_array_taking": not_array_taking}
    monkeypatch.setattr(sweep_registry, "public_functions", lambda: functions)
    entries = {entry.name: entry for entry in sweep_registry.generated_entries()}
    assert set(entries) == {"brand_new_metric"}
    assert entries["brand_new_metric"].kinds == {"member_probs": "member", "labels": "labels"}


def test_every_swept_function_takes_its_arguments() -> None:
    """The generated kinds are real parameters of each function (no glossary typo)."""
    for entry in sweep_registry.REGISTRY:
        if inspect.isfunction(entry.call) and entry.call.__name__ != "<lambda>":
            params = inspect.signature(entry.call).parameters
            assert set(entry.kinds) <= set(params), entry.name
