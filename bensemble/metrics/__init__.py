"""Scoring rules, calibration errors, epistemic calibration, selective prediction, OOD scores.

Scalar metrics return Python floats; per-sample or per-bin results return tensors or a small
dataclass. Every function accepts torch tensors or numpy arrays.
"""

# --- scoring rules and classical calibration (metrics/scoring.py, metrics/calibration.py) ---
# --- epistemic calibration (metrics/epistemic.py) ---
# --- selective prediction (metrics/selective.py) ---
# --- OOD / misclassification detection (metrics/ood.py) ---
