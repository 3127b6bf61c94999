"""The column notes of ``bensemble demo``'s tables: what each column is, in which unit.

Printed under each table, shown under it in ``report.html`` and kept in ``summary.json``, as
``bensemble evaluate`` does for its tables.
"""

from __future__ import annotations

from bensemble.app.verdict import empty_set_note

__all__ = ["metric_notes"]


def metric_notes(*, has_tece: bool, alpha: float, ece_bins: int) -> list[str]:
    """Definitions and units of the metrics table's columns (``TECE`` only on the toy data;
    ``alpha`` the conformal miscoverage, ``ece_bins`` the ECE's bins)."""
    notes = [
        "stage: 'before' is the unscaled pooled prediction p(x) = mean_h p_h(x); 'after' is "
        "p(x) temperature-scaled, softmax(log p(x) / T), with T fitted on the first half of the "
        "calibration set (the members are scaled with the same T for the EECE / TECE).",
        "T: the fitted temperature (dimensionless; T > 1 softens the probabilities, T < 1 "
        "sharpens them; empty before scaling).",
        "accuracy: fraction of test points whose argmax is the label. NLL: mean -log p(y | x) in "
        "nats (log(p + 1e-8)). Brier: mean sum_k (p_k - [y = k])^2, in [0, 2].",
        f"ECE: top-label expected calibration error, {ece_bins} equal-width bins, in probability "
        "units (0 is perfect).",
        "EECE: expected epistemic calibration error of the members: per K-means bin (about "
        "sqrt(n) bins; classwise for 10 classes), the gap between the members' squared error and "
        "their variance (the reported EU), in squared-probability units (0 is perfect).",
    ]
    if has_tece:
        notes.append(
            "TECE: true epistemic calibration error against the known P(y = 1 | x) of the toy "
            "problem, per point rather than per bin, in squared-probability units."
        )
    notes += [
        f"coverage: fraction of test points whose LAC conformal set (alpha = {alpha}) holds the "
        f"label; target at least {1 - alpha:g} (the threshold is calibrated on the second half "
        "of the calibration set). set_size: mean number of classes per set. empty_sets: "
        "fraction of empty sets.",
        f"Empty sets: {empty_set_note('lac')}",
    ]
    return notes
