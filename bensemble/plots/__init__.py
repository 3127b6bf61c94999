"""Matplotlib figures: compute with :mod:`bensemble.metrics`, then draw.

Every ``*Display`` stores the arrays a compute function returned and draws them with
``plot(ax=None, **kwargs)`` (keeping ``ax_`` / ``figure_``); the ``plot_*`` functions are thin
shells that return a matplotlib ``Figure``. matplotlib is imported only inside this package.
"""

from bensemble.plots.epistemic import (
    EpistemicReliabilityDisplay,
    plot_epistemic_reliability_diagram,
)
from bensemble.plots.epistemic_panels import plot_epistemic_reliability_panels
from bensemble.plots.maps import plot_toy_maps, toy_map_pairs
from bensemble.plots.reliability import (
    ReliabilityDisplay,
    plot_reliability_diagram,
    wilson_interval,
)
from bensemble.plots.scatter import EECEvsECEDisplay, plot_eece_vs_ece
from bensemble.plots.selective import RiskCoverageDisplay, plot_risk_coverage
from bensemble.plots.smooth import SmoothCalibrationDisplay

__all__ = [
    "EECEvsECEDisplay",
    "EpistemicReliabilityDisplay",
    "ReliabilityDisplay",
    "RiskCoverageDisplay",
    "SmoothCalibrationDisplay",
    "plot_eece_vs_ece",
    "plot_epistemic_reliability_diagram",
    "plot_epistemic_reliability_panels",
    "plot_reliability_diagram",
    "plot_risk_coverage",
    "plot_toy_maps",
    "toy_map_pairs",
    "wilson_interval",
]
