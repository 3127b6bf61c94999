"""Package surface: short names, bensemble 0.2 import paths, a cheap import, the console script."""

import importlib
import subprocess
import sys

import pytest

import bensemble
from bensemble.cli import main


@pytest.mark.parametrize("name", [n for n in bensemble.__all__ if n != "__version__"])
def test_short_names_resolve(name):
    assert getattr(bensemble, name) is not None


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        bensemble.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "module, name",
    [
        ("bensemble.core.ensemble", "Ensemble"),
        ("bensemble.core.member", "MemberAdapter"),
        ("bensemble.core.member", "ExplicitMembers"),
        ("bensemble.core.member", "StochasticMembers"),
        ("bensemble.core.types", "Predictor"),
        ("bensemble.core.types", "KLProvider"),
        ("bensemble.core.types", "PosteriorSource"),
        ("bensemble.calibration.scaling", "TemperatureScaling"),
        ("bensemble.calibration.scaling", "VectorScaling"),
        ("bensemble.metrics", "negative_log_likelihood"),
        ("bensemble.metrics", "brier_score"),
        ("bensemble.metrics", "expected_calibration_error"),
        ("bensemble.metrics", "reliability_diagram"),
        ("bensemble.uncertainty.decomposition", "decompose_classification_uncertainty"),
        ("bensemble.uncertainty.decomposition", "decompose_regression_uncertainty"),
        ("bensemble.diversity.dropout", "MCDropoutEnsembler"),
        ("bensemble.layers.base", "BaseBayesianLayer"),
        ("bensemble.layers", "BayesianLinear"),
        ("bensemble.layers.conv", "BayesianConv2d"),
        ("bensemble.losses", "GaussianLikelihood"),
        ("bensemble.losses", "VariationalLoss"),
        ("bensemble.utils", "enable_dropout"),
        ("bensemble.utils", "get_total_kl"),
        ("bensemble.utils", "predict_with_uncertainty"),
        ("bensemble.utils", "standard_normal_cdf"),
    ],
)
def test_bensemble_02_import_paths(module, name):
    assert hasattr(importlib.import_module(module), name)


def test_import_is_cheap():
    code = "import sys, bensemble; print('matplotlib' in sys.modules, 'sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_version_flag(capsys):
    assert main(["--version"]) == 0  # main returns the exit status, never raises SystemExit
    assert capsys.readouterr().out.strip() == f"bensemble {bensemble.__version__}"
    assert bensemble.__version__ == "0.3.0"
