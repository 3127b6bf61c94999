"""Issue 11, class 9: a deterministic, honest test suite and a clean package surface.

* the hypothesis profile CI uses is derandomised; global generators are seeded for every test;
* progress bars never write to a stderr that is not a terminal;
* the top-level namespace and every sub-package's ``__all__`` hold only the public API;
* ``LICENSE`` and ``py.typed`` ship; the docstring examples run under ``make test``.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.resources
import importlib.util
import io
import os
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import bensemble

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=ROOT
    )


# ----------------------------------------------------------------------------- determinism
@pytest.mark.skipif(
    (os.environ.get("BENSEMBLE_HYPOTHESIS_PROFILE") or "ci") != "ci", reason="a randomised profile"
)
def test_default_hypothesis_profile_is_derandomised():
    assert settings.default.derandomize is True
    assert settings.default.deadline is None
    assert settings.default.database is None
    assert settings.default.print_blob is True
    assert 10 <= settings.default.max_examples <= 100


def _profile_after_conftest(monkeypatch, env: dict[str, str]):
    """Import a fresh copy of tests/conftest.py under ``env``; return the settings it loaded."""
    spec = importlib.util.spec_from_file_location("_conftest_probe", ROOT / "tests" / "conftest.py")
    for key, value in {"CI": "", "BENSEMBLE_HYPOTHESIS_PROFILE": "", **env}.items():
        monkeypatch.setenv(key, value)
    before = settings._current_profile
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return settings.default
    finally:
        settings.load_profile(before)


@pytest.mark.parametrize(
    "env, derandomized",
    [
        pytest.param({}, True, id="default"),
        pytest.param({"BENSEMBLE_HYPOTHESIS_PROFILE": "dev"}, False, id="dev"),
        pytest.param({"BENSEMBLE_HYPOTHESIS_PROFILE": "explore"}, False, id="explore"),
        pytest.param({"BENSEMBLE_HYPOTHESIS_PROFILE": "dev", "CI": "true"}, True, id="ci-wins"),
    ],
)
def test_profile_selection(env, derandomized, monkeypatch):
    assert _profile_after_conftest(monkeypatch, env).derandomize is derandomized


def test_unknown_profile_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="BENSEMBLE_HYPOTHESIS_PROFILE"):
        _profile_after_conftest(monkeypatch, {"BENSEMBLE_HYPOTHESIS_PROFILE": "fast"})


@pytest.mark.parametrize("attempt", [0, 1])
def test_global_generators_are_seeded_for_every_test(attempt):
    # both parametrisations see the same draws: the autouse fixture reseeds before each test
    expected = torch.Generator().manual_seed(0)
    torch.testing.assert_close(torch.rand(3), torch.rand(3, generator=expected))


def test_make_test_and_ci_use_the_ci_profile():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "BENSEMBLE_HYPOTHESIS_PROFILE=$${BENSEMBLE_HYPOTHESIS_PROFILE:-ci}" in recipe
    assert "pytest" in recipe
    assert re.search(r"^CI=true make test$", (ROOT / ".ci" / "run").read_text(), re.M)


# ----------------------------------------------------------------------------- progress bars
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _train_tiny_ensemble() -> None:
    from bensemble.methods import train_ensemble

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 2, generator=gen), torch.randint(0, 2, (16,), generator=gen)
    train_ensemble(lambda: nn.Linear(2, 2), (x, y), n_members=2, epochs=2, seed=0, progress=True)


def _experiment_bar() -> None:
    from bensemble.experiments._common import progress_bar

    assert list(progress_bar(range(5), desc="experiment", enabled=True)) == list(range(5))


@pytest.mark.parametrize("path", [_train_tiny_ensemble, _experiment_bar], ids=lambda f: f.__name__)
def test_progress_bars_are_silent_when_stderr_is_not_a_terminal(path, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    path()
    assert stream.getvalue() == ""


@pytest.mark.parametrize("path", [_train_tiny_ensemble, _experiment_bar], ids=lambda f: f.__name__)
def test_progress_bars_draw_on_a_terminal(path, monkeypatch):
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    path()
    assert "it" in stream.getvalue() and "\r" in stream.getvalue()


def test_disabled_progress_bar_never_draws(monkeypatch):
    from bensemble._progress import progress

    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    with progress(total=3, enabled=False) as bar:
        bar.update(3)
    assert list(progress([1, 2], enabled=False)) == [1, 2]
    assert stream.getvalue() == ""


def test_redirected_stderr_of_a_training_process_is_empty():
    code = (
        "import torch; from torch import nn; from bensemble.methods import train_ensemble\n"
        "x, y = torch.randn(16, 2), torch.randint(0, 2, (16,))\n"
        "train_ensemble(lambda: nn.Linear(2, 2), (x, y), n_members=2, epochs=3, seed=0)\n"
    )
    out = _run_python(code)
    assert out.returncode == 0
    assert out.stderr == ""


def test_every_progress_bar_goes_through_the_helper():
    offenders = []
    for path in (ROOT / "bensemble").rglob("*.py"):
        if path.name == "_progress.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\btqdm\s*\(|trange\s*\(", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# ----------------------------------------------------------------------------- namespace
PUBLIC_API = {
    "__version__",
    "Ensemble",
    "ExplicitMembers",
    "StochasticMembers",
    "SklearnMembers",
    "PackedMembers",
    "MCDropoutEnsembler",
    "TemperatureScaling",
    "VectorScaling",
    "MatrixScaling",
    "decompose_classification_uncertainty",
    "decompose_regression_uncertainty",
    "variance_decomposition",
    "SplitConformalClassifier",
    "expected_epistemic_calibration_error",
    "LaplaceApproximation",
    "PBPEngine",
    "RandomSearcher",
    "EvolutionarySearcher",
    "NESBayesianSampler",
    "SearchSpace",
}
SUBMODULES = {
    "calibration",
    "cli",
    "conformal",
    "core",
    "datasets",
    "diversity",
    "experiments",
    "integrations",
    "io",
    "layers",
    "losses",
    "methods",
    "metrics",
    "plots",
    "regression",
    "search",
    "uncertainty",
    "utils",
}
NOT_PUBLIC = {"Any", "annotations", "importlib", "version", "PackageNotFoundError", "TYPE_CHECKING"}


def test_top_level_all_is_the_public_api():
    assert set(bensemble.__all__) == PUBLIC_API
    assert len(bensemble.__all__) == len(PUBLIC_API)


def test_top_level_dir_lists_only_public_names():
    public = {name for name in dir(bensemble) if not name.startswith("_")} | {"__version__"}
    assert public == PUBLIC_API | SUBMODULES
    leaked = NOT_PUBLIC & (set(dir(bensemble)) | set(vars(bensemble)))
    assert leaked == set()


def test_star_import_gives_exactly_all():
    namespace: dict[str, object] = {}
    exec("from bensemble import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC_API


@pytest.mark.parametrize("name", sorted(SUBMODULES))
def test_submodules_resolve_lazily(name):
    assert getattr(bensemble, name) is importlib.import_module(f"bensemble.{name}")


def _all_modules() -> list[str]:
    names = ["bensemble"]
    names += [m.name for m in pkgutil.walk_packages(bensemble.__path__, "bensemble.")]
    return sorted(names)


PACKAGES = sorted(
    m.name for m in pkgutil.walk_packages(bensemble.__path__, "bensemble.") if m.ispkg
)
# documented type aliases of torch.Tensor (bensemble.core.types)
ALIASES = {"Predictions", "MemberPredictions"}


def _foreign(name: str, value: object) -> bool:
    if name in NOT_PUBLIC or isinstance(value, types.ModuleType):
        return True
    owner = getattr(value, "__module__", None)
    if not callable(value) or owner is None:
        return False  # constants (tuples, dicts, numbers) defined here
    return not owner.startswith("bensemble") and name not in ALIASES


@pytest.mark.parametrize("package", PACKAGES)
def test_subpackage_all_exposes_only_its_own_api(package):
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    if package in (
        "bensemble.experiments",
        "bensemble.app",
    ):  # command-line applications, no importable API at package level
        assert exported in (None, [])
        return
    assert exported, f"{package} has no __all__"
    assert len(set(exported)) == len(exported)
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    leaked = sorted(n for n, v in namespace.items() if n != "__builtins__" and _foreign(n, v))
    assert leaked == []


@pytest.mark.parametrize("name", _all_modules())
def test_every_all_name_is_defined(name):
    module = importlib.import_module(name)
    missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
    assert missing == []


# ----------------------------------------------------------------------------- packaging
def test_license_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "bensemble contributors" in text
    assert 'license = { text = "MIT" }' in PYPROJECT


def test_py_typed_ships():
    marker = importlib.resources.files("bensemble").joinpath("py.typed")
    assert marker.is_file()
    data = PYPROJECT.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^bensemble = \[.*"py\.typed".*\]', data, re.M)


# ----------------------------------------------------------------------------- doctests
def test_pytest_collects_the_docstring_examples():
    options = PYPROJECT.split("[tool.pytest.ini_options]", 1)[1]
    assert re.search(r'^testpaths = \[.*"bensemble".*\]', options, re.M)
    assert re.search(r"^addopts = .*--doctest-modules", options, re.M)


def test_there_are_docstring_examples_to_run():
    finder = doctest.DocTestFinder()
    examples = 0
    for name in _all_modules():
        module = importlib.import_module(name)
        examples += sum(len(t.examples) for t in finder.find(module, module=module))
    assert examples >= 50


def test_every_module_imports_without_the_optional_extras():
    # doctest collection imports every module: none may need faiss or torchmetrics at import time
    code = (
        "import sys, importlib, pkgutil\n"
        "sys.modules['faiss'] = None; sys.modules['torchmetrics'] = None\n"
        "import bensemble\n"
        "for m in pkgutil.walk_packages(bensemble.__path__, 'bensemble.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('ok')\n"
    )
    out = _run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _root_conftest():
    spec = importlib.util.spec_from_file_location("_root_conftest_probe", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doctest_collection_leaves_out_modules_missing_an_optional_extra(monkeypatch):
    hook = _root_conftest().pytest_ignore_collect
    path = ROOT / "bensemble" / "metrics" / "epistemic.py"
    assert hook(path, None) is None  # importable: collected
    assert hook(ROOT / "tests" / "conftest.py", None) is None  # not a package module

    def missing(name, extra):
        def fail(module_name):
            raise ModuleNotFoundError(f"No module named {extra!r}", name=extra)

        return fail

    monkeypatch.setattr(importlib, "import_module", missing("bensemble.metrics.epistemic", "faiss"))
    assert hook(path, None) is True
    monkeypatch.setattr(importlib, "import_module", missing("x", "not_an_extra"))
    assert hook(path, None) is None  # a real import error is reported by the collection


_IMPORT_EACH_FRESH = """
import importlib, pkgutil, sys
import bensemble
names = ["bensemble"] + [m.name for m in pkgutil.walk_packages(bensemble.__path__, "bensemble.")]
failed = []
for name in names:
    for loaded in [k for k in sys.modules if k == "bensemble" or k.startswith("bensemble.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    # An import cycle only shows when the module in the cycle is imported first.
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_FRESH], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ""


def _settings_chain_length(settings_object) -> int:
    length = 0
    while settings_object is not None:
        length += 1
        settings_object = getattr(settings_object, "_fallback", None)
    return length


@pytest.mark.parametrize("case", range(30))
@settings(max_examples=1)
@given(value=st.integers(0, 1))
def test_parametrized_hypothesis_settings_do_not_chain(case, value):
    """tests/conftest.py keeps hypothesis' per-call settings wrap from growing with the cases."""
    own = test_parametrized_hypothesis_settings_do_not_chain._hypothesis_internal_use_settings
    # decorator's settings -> profile -> hypothesis' defaults, plus the plugin's one wrap per call
    assert _settings_chain_length(own) <= 6, f"case {case}: chain of {_settings_chain_length(own)}"
