"""The smooth calibration curve of :func:`bensemble.metrics.smooth_calibration_curve` (fig. 1(c)).

Compute, then draw: the metric returns a :class:`~bensemble.metrics.smooth.SmoothCalibrationCurve`
(grid, curve, density); :class:`SmoothCalibrationDisplay` only stores it and draws the curve
against the diagonal, with the confidences' kernel density as a shaded band at the bottom.
"""

from __future__ import annotations

from typing import Any

from bensemble.metrics.smooth import SmoothCalibrationCurve, smooth_calibration_curve
from bensemble.plots._display import Display
from bensemble.plots._layout import diagonal, place_legend

__all__ = ["SmoothCalibrationDisplay"]


class SmoothCalibrationDisplay(Display):
    """Kernel-smoothed reliability curve.

    Args:
        result: what :func:`~bensemble.metrics.smooth_calibration_curve` returned.
        label: legend label of the curve.
    """

    def __init__(self, result: SmoothCalibrationCurve, *, label: str | None = None) -> None:
        if not isinstance(result, SmoothCalibrationCurve):
            raise ValueError(
                "SmoothCalibrationDisplay: `result` must be a SmoothCalibrationCurve "
                f"(got {type(result).__name__})"
            )
        self.result = result
        self.label = label

    @classmethod
    def from_predictions(
        cls,
        conf: Any,
        correct: Any,
        *,
        bandwidth: float = 0.2,
        kernel: str = "beta",
        grid: Any = None,
        label: str | None = None,
    ) -> SmoothCalibrationDisplay:
        """Compute :func:`~bensemble.metrics.smooth_calibration_curve` and wrap it."""
        result = smooth_calibration_curve(conf, correct, bandwidth, kernel, grid)
        return cls(result, label=label)

    def plot(
        self,
        ax: Any = None,
        *,
        show_density: bool = True,
        legend_loc: str | None = "free",
        **kwargs: Any,
    ):
        """Draw on ``ax`` (a new figure when ``None``); ``kwargs`` go to the curve's ``plot``.

        The diagonal ("Perfect calibration") is drawn once per Axes. ``legend_loc``:
        ``"free"`` (default: the first inside corner whose legend box touches no curve or
        density band, else right of the Axes), ``"outside"``, any matplotlib ``loc``, or
        ``None``.

        Returns:
            ``self`` (with ``ax_`` and ``figure_`` set).
        """
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(4.5, 4.5), layout="constrained")
        r = self.result
        t, curve = r.grid.cpu().numpy(), r.curve.cpu().numpy()
        diagonal(ax, 0.0, 1.0)
        label = self.label or f"{r.kernel} KDE, bandwidth {r.bandwidth:g}"
        ax.plot(t, curve, label=label, **kwargs)
        if show_density:
            density = r.density.cpu().numpy()
            top = float(density.max()) if density.size else 1.0
            ax.fill_between(t, 0, 0.15 * density / top, alpha=0.25, color="grey", label="density")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
        ax.set_ylabel("estimated accuracy")
        place_legend(ax, legend_loc, fontsize=8)
        self._drawn_on(ax)
        return self
