"""Shared test configuration: a deterministic suite.

Hypothesis profiles (choose one with ``BENSEMBLE_HYPOTHESIS_PROFILE``):

* ``ci`` (the default, and what ``make test`` / CI use): derandomised, so every run draws the same
  examples and a green suite stays green; no deadline (shared CI cores are slow); failing examples
  are printed with their reproduction blob.
* ``dev``: randomised, same size as ``ci`` - to look for new counter-examples while developing.
* ``explore``: randomised and ten times larger.

Every test also starts from fixed global seeds (torch, numpy, ``random``), so a test that draws
from a global generator without its own ``Generator`` is still reproducible.
"""

import os
import random

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

torch.set_num_threads(1)

_COMMON = {"deadline": None, "print_blob": True}
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, **_COMMON)
settings.register_profile("dev", max_examples=40, derandomize=False, **_COMMON)
settings.register_profile("explore", max_examples=400, derandomize=False, **_COMMON)

PROFILE = os.environ.get("BENSEMBLE_HYPOTHESIS_PROFILE") or "ci"
if PROFILE not in ("ci", "dev", "explore"):
    raise ValueError(
        "tests/conftest.py: `BENSEMBLE_HYPOTHESIS_PROFILE` must be one of 'ci', 'dev', 'explore' "
        f"(got {PROFILE!r})"
    )
if os.environ.get("CI", "").lower() in ("1", "true", "yes") and PROFILE != "ci":
    # CI must never flake: a randomised profile is a local tool only.
    PROFILE = "ci"
settings.load_profile(PROFILE)

GLOBAL_SEED = 0

# helper modules of the sweep, imported by tests/robustness/test_sweep.py (no tests of their own)
collect_ignore = ["robustness/sweep_cases.py", "robustness/sweep_registry.py"]


def _seed_global_generators() -> None:
    torch.manual_seed(GLOBAL_SEED)
    np.random.seed(GLOBAL_SEED)  # noqa: NPY002 - seeding the legacy global generator on purpose
    random.seed(GLOBAL_SEED)


# Draws made while test modules are imported (parametrize lists) come out the same on every run.
_seed_global_generators()


@pytest.fixture(autouse=True)
def _fixed_global_seeds():
    """Seed the global generators before every test; restore the torch RNG state after it."""
    state = torch.random.get_rng_state()
    _seed_global_generators()
    yield
    torch.random.set_rng_state(state)


@pytest.fixture(autouse=True)
def _hypothesis_settings_of_the_decorator(request):
    """Give every parametrized hypothesis test the settings its decorator made, not a growing chain.

    Hypothesis' pytest plugin wraps ``fn._hypothesis_internal_use_settings`` in one more
    ``settings(parent=...)`` on every parametrized call, so after about a thousand cases of one test
    reading any setting walks a chain deeper than Python's recursion limit (RecursionError inside
    hypothesis, seen in test_sweep on CI). The fixture runs before the plugin's wrap and puts the
    decorator's settings back, so the chain is one link long whatever the number of cases.
    """
    function = getattr(request.node, "obj", None)
    function = getattr(function, "__func__", function)
    current = getattr(function, "_hypothesis_internal_use_settings", None)
    if current is not None:
        original = function.__dict__.setdefault("_bensemble_decorator_settings", current)
        function._hypothesis_internal_use_settings = original
    yield
