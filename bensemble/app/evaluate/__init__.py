"""``bensemble evaluate``: metrics, uncertainty, temperature scaling and conformal sets for saved
predictions, from any input, in bounded memory.

Given member probabilities ``[M, N, K]`` (``M = 1`` for a single model) and labels ``[N]``,
:func:`evaluate_predictions` reports, for the ensemble-mean prediction
``p(x) = (1/M) sum_m p_m(x)``: accuracy, NLL, Brier score, top-label ECE and classwise ECE, the
misclassification AUROC and AURC; and for ``M > 1`` the mean total / aleatoric / epistemic
uncertainty of the members and their expected epistemic calibration error (EECE).

With ``calibration_split=f`` the samples are shuffled with a seeded generator and the first
``round(f * N)`` form the calibration part, the rest the test part. The calibration part is cut
in two *separate* halves, as the practitioner's guide requires (reusing conformal labels to tune
the temperature breaks the split-conformal guarantee):

1. the first half fits :class:`~bensemble.calibration.TemperatureScaling` on ``log p(x)``
   (the log of the ensemble mean: "pool, then calibrate"; ``softmax(log p) = p``, so ``T = 1``
   is the unscaled prediction, and for one model ``log softmax(z)`` scales exactly like ``z``);
2. the second half calibrates a :class:`~bensemble.conformal.SplitConformalClassifier` on the
   temperature-scaled probabilities, with the temperature already fixed;
3. every number is reported on the untouched test part: metrics before and after scaling,
   conformal coverage and mean set size (target ``1 - alpha``).

The temperature acts on the pooled prediction only; member-level quantities (the uncertainty
decomposition and EECE) are those of the unscaled members. Every headline number gets a 95%
bootstrap interval over the reported part (``bootstrap`` replicates, seeded by ``seed``); the
three questions at the top of the report are answered by the rules of :mod:`bensemble.app.verdict`.

**One engine** (a pipeline, one module per step, no import circle among them):

* load - :mod:`~bensemble.app.evaluate.sources`: in-memory arrays, memory-mapped ``.npy``
  files, ``.npz``, ``.pt``, ``.csv``, several shards or a glob, as one row source read
  ``chunk_size`` rows at a time;
* accumulate - :mod:`~bensemble.app.evaluate.engine` (the passes: calibration, EECE bins, the
  main pass) into mergeable states (:mod:`~bensemble.app.evaluate.states`), over ranges of rows
  here, in processes or in Ray tasks (:mod:`~bensemble.app.evaluate.parallel`);
* compute - :mod:`~bensemble.app.evaluate.compute`: the states -> an
  :class:`~bensemble.app.evaluate.evaluation.Evaluation` (plain data), intervals, notes and
  verdicts (:mod:`~bensemble.app.evaluate.summary`);
* render and write - :mod:`~bensemble.app.evaluate.figures`, :mod:`~bensemble.app.evaluate.page`
  and :mod:`~bensemble.app.evaluate.write`: tables, figures and ``report.html``, the report
  folder written once, atomically.

The in-memory call is the same engine over one chunk; a file larger than memory, shards merged
from several workers and a single tensor give the same numbers (up to float64 summation order,
counts exactly). The command line (:mod:`~bensemble.app.evaluate.cli`) validates every input
before it computes, never writes over an input file and writes the folder atomically.

Names are loaded on first use, so ``import bensemble.app.evaluate`` (what the command line's
parser needs) imports neither torch nor matplotlib.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Evaluation",
    "EvaluateOptions",
    "add_evaluate_arguments",
    "evaluate_predictions",
    "evaluate_shards",
    "planned_files",
    "run_evaluate",
    "split_indices",
    "write_evaluation",
]

_WHERE = {
    "Evaluation": "evaluation",
    "EvaluateOptions": "options",
    "add_evaluate_arguments": "cli",
    "evaluate_predictions": "api",
    "evaluate_shards": "api",
    "planned_files": "write",
    "run_evaluate": "cli",
    "split_indices": "calibrated",
    "write_evaluation": "write",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (module docstring)."""
    if name in _WHERE:
        import importlib

        module = importlib.import_module(f"{__name__}.{_WHERE[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
