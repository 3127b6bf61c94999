"""``bensemble evaluate --recalibrate-epistemic``: the members before and after an
:class:`~bensemble.calibration.EpistemicRecalibrator`, on the same test part.

The protocol (the split of :func:`~bensemble.app.evaluate.calibrated.split_indices`, same seed):

1. the ordinary evaluation of the members (every table, intervals, verdicts: "before");
2. the temperature half of the calibration part is gathered as members ``[M, n_T, K]`` (float64,
   ``chunk_size`` rows per read; it is small: the members of ``n_T`` points) and the
   recalibrator ``z'_m = zbar / T + s (z_m - zbar)`` is fitted there by the pooled NLL;
3. the engine runs again over a source whose every read is transformed by the fitted map
   (:class:`~bensemble.app.evaluate.sources.Predictions` ``transform``): the EECE's canonical
   member order and K-means bins are fitted on the *recalibrated* test members, and the metrics
   of their pooled prediction ``mean_m softmax(z'_m)`` are summed chunk by chunk ("after").

The map acts on each sample's members alone, so the after pass inherits the engine's guarantee:
one chunk, many chunks, shards or worker processes give the same numbers up to float64
summation order. The report gains a third stage in the metrics and selective tables, an
``recalibration`` table (``T``, ``s``, the bounds the fit reached, the EECE and the members'
epistemic uncertainty before and after) and the recalibrated members' epistemic reliability
diagram. The after pass runs without bootstrap (its numbers are point estimates) and reads the
input a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from bensemble.app.evaluate.calibrated import split_indices
from bensemble.app.evaluate.evaluation import Evaluation
from bensemble.app.evaluate.options import EvaluateOptions

__all__ = ["evaluate_recalibrated", "fit_recalibrator", "recalibration_row"]

#: Stage name prefix of the recalibrated members' row in the metrics and selective tables.
STAGE = "epistemically recalibrated"


def fit_recalibrator(source: Any, options: EvaluateOptions) -> tuple[Any, int]:
    """The :class:`~bensemble.calibration.EpistemicRecalibrator` fitted on the temperature half of
    ``options.calibration_split`` of ``source`` (members gathered ``chunk_size`` rows per read),
    and the number of points it was fitted on."""
    from bensemble.calibration import EpistemicRecalibrator

    temp_idx, _, _ = split_indices(source.n, options.calibration_split, seed=options.seed)
    block = options.block(source.n, source.m * source.k)
    rows = temp_idx.numpy()
    parts = [source.take(rows[a : a + block]) for a in range(0, len(rows), block)]
    source.release()
    members = torch.cat(parts, dim=1)
    del parts
    recalibrator = EpistemicRecalibrator(on_boundary="warn")
    recalibrator.fit(members, source.label_take(temp_idx))
    return recalibrator, len(rows)


def evaluate_recalibrated(
    source: Any,
    options: EvaluateOptions,
    run: Callable[[Any, EvaluateOptions], Evaluation],
    *,
    fn: str = "evaluate_predictions",
) -> Evaluation:
    """Evaluate ``source`` before and after epistemic recalibration (module docstring).

    Args:
        source: the row source (:class:`~bensemble.app.evaluate.sources.Predictions`).
        options: checked options with ``recalibrate_epistemic=True``.
        run: ``run(source, options) -> Evaluation``, one run of the engine
            (:func:`~bensemble.app.evaluate.api.evaluate_source` with its workers and backend).
        fn: the function named in error messages.

    Returns:
        The "before" :class:`~bensemble.app.evaluate.evaluation.Evaluation` with the recalibrated
        stage's rows, ``recalibration`` and ``recalibration_details`` added.

    Raises:
        ValueError: no ``calibration_split``, or one member only (``M = 1``: no spread).
    """
    if options.calibration_split is None:
        raise ValueError(
            f"{fn}: `recalibrate_epistemic` (--recalibrate-epistemic) needs a "
            "`calibration_split` (--calibration-split): the recalibrator is fitted on its "
            "temperature half (got None)"
        )
    if source.m < 2:
        raise ValueError(
            f"{fn}: `recalibrate_epistemic` (--recalibrate-epistemic) needs member predictions "
            f"[M, N, K] with M > 1: one model has no spread to rescale (got M = {source.m})"
        )
    plain = replace(options, recalibrate_epistemic=False)
    before = run(source, plain)
    recalibrator, n_fit = fit_recalibrator(source, plain)
    source.transform = recalibrator
    try:
        after = run(source, replace(plain, bootstrap=0))
    finally:
        source.transform = None
    return combined(before, after, recalibrator, n_fit)


def recalibration_row(
    before: Evaluation, after: Evaluation, recalibrator: Any, n_fit: int
) -> dict[str, Any]:
    """The ``recalibration`` table's row: the fit, and the EECE and the members' epistemic
    uncertainty before and after, on the same reported part."""
    b, a = before.ensemble, after.ensemble
    return {
        "temperature": recalibrator.temperature_,
        "spread": recalibrator.spread_,
        "at_boundary": ", ".join(recalibrator.at_boundary_) or "no",
        "converged": bool(recalibrator.converged_),
        "n_fit": int(n_fit),
        "fit_nll": float(recalibrator.nll_),
        "eece_before": b["eece"],
        "eece_after": a["eece"],
        "eece_bins_after": a.get("eece_bins_fitted", a.get("eece_bins")),
        "mean_member_variance_before": b["mean_member_variance"],
        "mean_member_variance_after": a["mean_member_variance"],
        "mean_epistemic_before": b["mean_epistemic"],
        "mean_epistemic_after": a["mean_epistemic"],
    }


def combined(before: Evaluation, after: Evaluation, recalibrator: Any, n_fit: int) -> Evaluation:
    """``before`` with the recalibrated members' stage, table, diagram and notes added."""
    t, s = recalibrator.temperature_, recalibrator.spread_
    name = f"{STAGE} (T={t:.3f}, s={s:.3f})"
    metrics = dict(after.metrics[0], stage=name)
    selective = dict(after.selective[0], stage=name)
    before.metrics.append(metrics)
    before.selective.append(selective)
    before.curves[f"recalibrated (s = {s:.3f})"] = after.curves["unscaled"]
    before.recalibration = recalibration_row(before, after, recalibrator, n_fit)
    before.recalibration_details = after.eece_details
    before.setup["recalibrate_epistemic"] = True
    if recalibrator.at_boundary_:
        ends = ", ".join(recalibrator.at_boundary_)
        before.notes.append(
            f"The epistemic recalibration's fit reached a bound ({ends}): T = {t:.4g}, "
            f"s = {s:.4g}. At s_min the members' disagreement did not improve "
            "the pooled NLL on the temperature half, so the recalibrated members all but "
            "coincide; keep the raw members' EU where you rank by it."
        )
    return before
