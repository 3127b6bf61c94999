"""Which battery covers each public name (issue 19, item 1).

Every public class and function (public_api.py walks every sub-package's ``__all__``) must be in
at least one battery, each of which is data-driven (adding a class or function is one line in
its file):

* ``sweep``      - the hypothesis sweep of array-taking functions (sweep_registry.REGISTRY,
  generated from the glossary of argument names);
* ``modules``    - the nn.Module battery (battery_modules.MODULE_CASES);
* ``estimators`` - fit / predict objects (battery_estimators.ESTIMATOR_CASES);
* ``results``    - result dataclasses, and ``displays`` - plot displays and plot functions
  (test_battery_results.py);
* ``calls``      - every other function and helper class (battery_calls.CALL_CASES);
* ``meters``     - streaming meters, torchmetrics classes (battery_meters.METER_NAMES) and the
  mergeable bootstrap-replicate states (battery_replicates.REPLICATE_NAMES);
* ``declared``   - constants, protocols, exceptions and abstract bases, each with the reason it
  needs no battery (:data:`DECLARED`).

test_battery_registry.py fails, listing the names, when a public class or function is in none.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from public_api import exported_names, public_names  # noqa: E402

_PROTOCOL = "a typing Protocol / alias: structure only; its implementers have batteries"
#: name -> why it is in no behavioural battery.
DECLARED: dict[str, str] = {
    "__version__": "a version string",
    "DROPOUT_TYPES": "a tuple of torch dropout classes (used by StochasticMembers' battery cases)",
    "DEFAULT_TEMPERATURE_BOUNDS": "a tuple of two floats (the default of fit_temperature)",
    "DEFAULT_SPREAD_BOUNDS": "a tuple of two floats (the default of EpistemicRecalibrator)",
    "SCORES": "a tuple of option names (the `score` options of SplitConformalClassifier)",
    "BAYES_ERROR": "a float constant of the toy problem",
    "REGRESSION_TOY_RANGE": "the (low, high) support of the regression toy's x",
    "PREDICTIVES": "a tuple of option names (the `predictive` options of bensemble.regression)",
    "REGRESSION_SCORES": "a tuple of option names (the `score` options of SplitConformalRegressor)",
    "SPREADS": "a tuple of option names (the `spread` options of SplitConformalRegressor)",
    "SUPPORTED_EXTENSIONS": "a tuple of file extensions read by bensemble.io",
    "STATUSES": "a tuple of option names (the `status` options of a report.html Verdict)",
    "STATUS_LABELS": "a dict of display words (status -> label on report.html's cards)",
    "Predictor": _PROTOCOL,
    "KLProvider": _PROTOCOL,
    "PosteriorSource": _PROTOCOL,
    "MemberSource": _PROTOCOL,
    "Predictions": _PROTOCOL,
    "MemberPredictions": _PROTOCOL,
    "CalibrationFitError": "an exception class (raised and tested by the calibration tests)",
    "InputError": "an exception class (a ValueError; raised and tested by test_io.py)",
    "MemberAdapter": "abstract base of member sources: its subclasses are in the module battery",
    "StochasticLayer": "abstract base of random layers: BayesianLinear/DropConnectLinear cover it",
    "BaseBayesianLayer": "abstract base of variational layers: BayesianLinear/Conv2d cover it",
    "SearchSpace": "abstract base the user subclasses: the searcher batteries use one",
    "IllustrativeClassifier": "abstract base: Centroids, EvidentialKNN, RelativeLikelihood use it",
    "Binning": "abstract base of the EECE's binnings: KMeansBinning, UniformBinning, "
    "QuantileBinning, ExplicitBinning cover it",
    "BACKENDS": "a tuple of option names (the `backend` options of fit_bins / KMeansBinning)",
    "DEFAULT_LLOYD_RTOL": "a float constant (the classwise EECE's Lloyd stopping tolerance)",
    "DEFAULT_REFINE": "an int constant (the default `refine` of fit_bins / KMeansBinning)",
    "DEFAULT_SUBSAMPLE": "an int constant (the default `subsample` of fit_bins / KMeansBinning)",
}


def _meter_names() -> tuple[str, ...]:
    from battery_meters import METER_NAMES
    from battery_replicates import REPLICATE_NAMES

    return tuple(METER_NAMES) + tuple(REPLICATE_NAMES)


def batteries() -> dict[str, set[str]]:
    """``{battery: public names it covers}``."""
    from battery_calls import CALL_NAMES
    from battery_estimators import ESTIMATOR_NAMES
    from battery_modules import MODULE_NAMES
    from sweep_registry import REGISTRY
    from test_battery_results import DISPLAY_NAMES, RESULT_NAMES

    return {
        "sweep": {entry.name.split("[")[0] for entry in REGISTRY},
        "modules": set(MODULE_NAMES),
        "estimators": set(ESTIMATOR_NAMES),
        "results": set(RESULT_NAMES),
        "displays": set(DISPLAY_NAMES),
        "calls": set(CALL_NAMES),
        "meters": set(_meter_names()),
        "declared": set(DECLARED),
    }


def coverage() -> tuple[dict[str, list[str]], list[str], dict[str, list[str]]]:
    """``(covered per battery, uncovered public classes/functions, stale battery names)``.

    A battery name that is no public name is *stale* (a renamed or removed class), except the
    sweep's method entries (``"TemperatureScaling.fit"``) and variants.
    """
    public = {p.name: p for p in public_names()}
    found = batteries()
    covered = {name: sorted(found[name] & set(public)) for name in found}
    in_any = set().union(*found.values())
    uncovered = sorted(
        name for name, p in public.items() if name not in in_any and p.kind != "constant"
    )
    uncovered += sorted(n for n, p in public.items() if n not in in_any and p.kind == "constant")
    stale = {
        name: sorted(names - exported_names())
        for name, names in found.items()
        if name != "sweep"  # sweep entries may name methods and variants ("SplitConformal[lac]")
    }
    return covered, uncovered, {k: v for k, v in stale.items() if v}


def summary() -> str:
    """One line per battery with its count of public names, and the total."""
    covered, uncovered, _ = coverage()
    public = public_names()
    lines = [f"{len(public)} public names in {len({p.package for p in public})} packages"]
    for name, names in covered.items():
        kinds = sorted({p.kind for p in public if p.name in names})
        lines.append(f"  {name:<11} {len(names):>4}  ({', '.join(kinds)})")
    in_some = len(public) - len(uncovered)
    lines.append(f"  covered by at least one battery: {in_some} of {len(public)}")
    return "\n".join(lines)


if __name__ == "__main__":  # python tests/robustness/battery_registry.py
    print(summary())
