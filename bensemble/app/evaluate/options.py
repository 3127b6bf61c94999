"""The options of ``bensemble evaluate``, checked once, as one picklable object.

:class:`EvaluateOptions` travels unchanged from the command line or the Python API to every pass
and every worker (processes or Ray tasks), so each reads the same settings. :meth:`checked`
validates them with the messages of :func:`~bensemble.app.evaluate.evaluate_predictions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from bensemble import _validation as V
from bensemble._options import check_seed
from bensemble.app.bootstrap import DEFAULT_BOOTSTRAP, check_bootstrap

__all__ = [
    "CONFORMAL_SCORES",
    "AUTO_CHUNK_VALUES",
    "MAX_PER_CLASS",
    "SMALL_PART",
    "EvaluateOptions",
]

#: Conformal scores ``conformal_score`` accepts.
CONFORMAL_SCORES = ("lac", "aps", "raps")
#: Below this many points a calibration part (temperature or conformal) gets a note.
SMALL_PART = 200
#: Most classes for which the report has a per-class table.
MAX_PER_CLASS = 20
#: Values (``M x K`` per sample) per read with ``chunk_size="auto"`` (the command line's
#: default): a float64 chunk of 2 MiB, and each of its temporaries the same, whatever ``M``, ``K``.
AUTO_CHUNK_VALUES = 1 << 18


@dataclass(frozen=True)
class EvaluateOptions:
    """Everything that decides an evaluation's numbers, besides the data.

    Attributes:
        calibration_split: fraction in ``(0, 1)`` for temperature scaling and conformal
            calibration (two separate halves), or ``None`` (report on every sample).
        alpha: conformal miscoverage level in ``(0, 1)``.
        n_bins: equal-width bins of the ECE and the classwise ECE.
        eece_bins: K-means bins of the EECE: ``"auto"`` or an integer.
        eece_seeds: K-means seeds the EECE averages.
        conformal_score: one of :data:`CONFORMAL_SCORES`.
        seed: seeds the split, the EECE, randomised conformal scores and the bootstrap.
        bootstrap: bootstrap replicates of the intervals (0: none).
        chunk_size: samples per read: an integer, ``"auto"`` (about :data:`AUTO_CHUNK_VALUES`
            values, ``M x K`` per sample) or ``None`` (the whole input in one chunk); a tuning
            knob only, the numbers do not depend on it beyond float64 summation order.
        progress: stage lines and bars on a terminal's stderr.
        recalibrate_epistemic: also fit an :class:`~bensemble.calibration.EpistemicRecalibrator`
            on the temperature half of the split and report the recalibrated members
            (:mod:`~bensemble.app.evaluate.recalibrated`); needs ``calibration_split`` and
            ``M > 1``.
    """

    calibration_split: float | None = None
    alpha: float = 0.1
    n_bins: int = 15
    eece_bins: int | str = "auto"
    eece_seeds: int = 1
    conformal_score: str = "lac"
    seed: int = 0
    bootstrap: int = DEFAULT_BOOTSTRAP
    chunk_size: int | str | None = None
    progress: bool = False
    recalibrate_epistemic: bool = False

    def checked(self, fn: str = "evaluate_predictions") -> EvaluateOptions:
        """The same options, validated (``ValueError`` naming the argument otherwise)."""
        split, eece_bins, chunk = _check_split_bins_chunk(self, fn, auto_chunk=True)
        return replace(
            self,
            calibration_split=split,
            alpha=V.check_probability(self.alpha, "alpha", fn),
            n_bins=V.check_n_bins(self.n_bins, fn),
            eece_bins=eece_bins,
            eece_seeds=V.check_positive_int(self.eece_seeds, "eece_seeds", fn),
            conformal_score=V.check_option(
                self.conformal_score, "conformal_score", CONFORMAL_SCORES, fn
            ),
            seed=check_seed(self.seed, "seed", fn),
            bootstrap=check_bootstrap(self.bootstrap, "bootstrap", fn),
            chunk_size=chunk,
            progress=V.check_bool(self.progress, "progress", fn),
            recalibrate_epistemic=V.check_bool(
                self.recalibrate_epistemic, "recalibrate_epistemic", fn
            ),
        )

    def block(self, n: int, width: int) -> int:
        """Rows per read of an ``n``-row input of ``width = M x K`` values per row."""
        if self.chunk_size is None:
            return max(1, n)
        if self.chunk_size == "auto":
            return max(256, AUTO_CHUNK_VALUES // max(width, 1))
        return self.chunk_size


def _check_split_bins_chunk(options: Any, fn: str, *, auto_chunk: bool) -> tuple[Any, Any, Any]:
    """The checked ``(calibration_split, eece_bins, chunk_size)`` of an options object, for
    :class:`EvaluateOptions` and :class:`~bensemble.app.evaluate.regression.RegressionOptions`:
    a split in ``(0, 1)`` or ``None``, ``"auto"`` or a bin count, ``None`` or a positive chunk
    size (or ``"auto"`` where ``auto_chunk``)."""
    split = options.calibration_split
    if split is not None:
        split = V.check_probability(split, "calibration_split", fn)
    eece_bins = options.eece_bins
    if eece_bins != "auto":
        eece_bins = V.check_n_bins(eece_bins, fn, name="eece_bins")
    chunk = options.chunk_size
    if chunk is not None and not (auto_chunk and chunk == "auto"):
        chunk = V.check_positive_int(chunk, "chunk_size", fn)
    return split, eece_bins, chunk
