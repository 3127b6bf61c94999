"""Fig. 4(a) of the epistemic-calibration paper: mean EECE against mean ECE, one point per method.

Compute, then draw: :func:`eece_ece_summary` reduces one-vs-all rows (one per task and method)
to per-method means and variances over the tasks; :class:`EECEvsECEDisplay` stores those arrays
and draws them on log-log axes with the variances as error bars ("models toward the left are the
most epistemically calibrated, models toward the bottom the most calibrated in the classical
sense"). Log axes cannot show 0: means below ``floor`` (default 1e-4; the paper prints five of its
CIFAR-10 EECEs as 0.00) are drawn inside a shaded, labelled band below ``floor``, each method at
its own place in the band (:func:`floor_positions`), so that every point stays visible instead of
stacking at the floor; the Display says how many were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bensemble.plots._display import Display
from bensemble.plots._layout import place_legend

__all__ = [
    "EECEvsECEDisplay",
    "EECEvsECESummary",
    "eece_ece_summary",
    "floor_positions",
    "plot_eece_vs_ece",
]

#: The band below the floor spans one decade: [floor / 10, floor).
_BAND_DECADES = 1.0


def floor_positions(values: np.ndarray, floor: float) -> np.ndarray:
    """Where to draw ``values [M]`` on a log axis: themselves, or (below ``floor``) a distinct
    place in the band ``[floor / 10, floor)``: entry ``i`` of ``M`` at ``floor * 10^-(i+1)/(M+1)``.

    Example:
        >>> floor_positions(np.array([0.5, 0.0, 0.0]), 1e-4).round(8).tolist()
        [0.5, 3.162e-05, 1.778e-05]
    """
    values = np.asarray(values, dtype=np.float64)
    m = len(values)
    spread = floor * 10.0 ** (-_BAND_DECADES * (np.arange(m) + 1) / (m + 1))
    return np.where(values < floor, spread, values)


@dataclass(frozen=True)
class EECEvsECESummary:
    """Per-method means and (population) variances over the tasks.

    Attributes:
        methods: method names, in first-seen order.
        ece_mean, ece_var, eece_mean, eece_var: float64 arrays ``[M]``.
        n_tasks: tasks per method ``[M]`` (int).
    """

    methods: tuple[str, ...]
    ece_mean: np.ndarray
    ece_var: np.ndarray
    eece_mean: np.ndarray
    eece_var: np.ndarray
    n_tasks: np.ndarray


def eece_ece_summary(rows: Sequence[Mapping[str, Any]]) -> EECEvsECESummary:
    """Mean and variance over tasks of ``ece`` and ``eece`` per ``method``.

    Args:
        rows: one mapping per (task, method) with keys ``method``, ``ece``, ``eece`` (e.g. the
            ``per_task`` table of a one-vs-all run, already averaged over repeats).

    Returns:
        An :class:`EECEvsECESummary`; the variance divides by the number of tasks (``ddof=0``,
        0 for a single task).
    """
    fn = "eece_ece_summary"
    groups: dict[str, list[tuple[float, float]]] = {}
    for i, row in enumerate(rows):
        try:
            pair = (float(row["ece"]), float(row["eece"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{fn}: `rows` must hold `method`, numeric `ece` and `eece` (got row {i}: {row!r})"
            ) from None
        if not np.isfinite(pair).all():
            raise ValueError(
                f"{fn}: `rows` must hold finite `ece` and `eece` (got row {i}: {row!r})"
            )
        groups.setdefault(str(row["method"]), []).append(pair)
    if not groups:
        raise ValueError(f"{fn}: `rows` must not be empty (got 0 rows)")
    arrays = {m: np.asarray(v, dtype=np.float64) for m, v in groups.items()}
    return EECEvsECESummary(
        methods=tuple(arrays),
        ece_mean=np.array([a[:, 0].mean() for a in arrays.values()]),
        ece_var=np.array([a[:, 0].var() for a in arrays.values()]),
        eece_mean=np.array([a[:, 1].mean() for a in arrays.values()]),
        eece_var=np.array([a[:, 1].var() for a in arrays.values()]),
        n_tasks=np.array([len(a) for a in arrays.values()]),
    )


class EECEvsECEDisplay(Display):
    """Fig. 4(a): log-log scatter of mean EECE (x) vs mean ECE (y), variance error bars.

    Args:
        summary: what :func:`eece_ece_summary` returned (stored as is).
        reference: optionally the same summary of the paper's values (e.g. of table 2), drawn
            as hollow squares in each method's colour.
        floor: smallest value drawn on the log axes.
    """

    def __init__(
        self,
        summary: EECEvsECESummary,
        *,
        reference: EECEvsECESummary | None = None,
        floor: float = 1e-4,
    ) -> None:
        if not (isinstance(floor, (int, float)) and floor > 0):
            raise ValueError(f"EECEvsECEDisplay: `floor` must be > 0 (got {floor!r})")
        self.summary = summary
        self.reference = reference
        self.floor = float(floor)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]], **kwargs: Any) -> EECEvsECEDisplay:
        """Summarise one-vs-all ``rows`` with :func:`eece_ece_summary`, then build.

        When every row also carries numeric ``paper ece`` and ``paper eece`` (the paper's value
        for that task), their summary becomes ``reference``.
        """
        reference = None
        if rows and all(
            isinstance(r.get("paper ece"), (int, float))
            and isinstance(r.get("paper eece"), (int, float))
            for r in rows
        ):
            paper = [
                {"method": r["method"], "ece": r["paper ece"], "eece": r["paper eece"]}
                for r in rows
            ]
            reference = eece_ece_summary(paper)
        kwargs.setdefault("reference", reference)
        return cls(eece_ece_summary(rows), **kwargs)

    @property
    def n_floored(self) -> int:
        """How many means are below ``floor`` (drawn at ``floor``)."""
        s = self.summary
        count = int((s.ece_mean < self.floor).sum() + (s.eece_mean < self.floor).sum())
        if self.reference is not None:
            r = self.reference
            count += int((r.ece_mean < self.floor).sum() + (r.eece_mean < self.floor).sum())
        return count

    def plot(
        self, ax: Any = None, *, title: str | None = None, legend_loc: str | None = "outside"
    ) -> EECEvsECEDisplay:
        """Draw on ``ax`` (a new figure when ``None``); returns ``self``.

        ``legend_loc``: ``"outside"`` (default: right of the Axes; one entry per method, and
        the methods spread over the whole log-log square), ``"free"``, any matplotlib ``loc``,
        or ``None``.
        """
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter

        if ax is None:
            _, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
        s = self.summary
        x = floor_positions(s.eece_mean, self.floor)
        y = floor_positions(s.ece_mean, self.floor)
        ref = self.reference
        if ref is not None:
            ref_x = floor_positions(ref.eece_mean, self.floor)
            ref_y = floor_positions(ref.ece_mean, self.floor)
        ref_at = {} if ref is None else {m: i for i, m in enumerate(ref.methods)}
        for i, method in enumerate(s.methods):
            bars = ax.errorbar(
                x[i], y[i], xerr=s.eece_var[i], yerr=s.ece_var[i], marker="o", capsize=3,
                linestyle="none", label=method,
            )  # fmt: skip
            if method in ref_at:
                j = ref_at[method]
                ax.plot(
                    ref_x[j], ref_y[j],
                    marker="s", markersize=9, markerfacecolor="none", linestyle="none",
                    color=bars.lines[0].get_color(),
                )  # fmt: skip
        if ref is not None:
            ax.plot([], [], marker="s", markerfacecolor="none", linestyle="none", color="black",
                    label="paper (hollow)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # minor labels of a short log range overlap
            axis.set_minor_formatter(NullFormatter())
        low = self.floor * 10.0**-_BAND_DECADES
        band = {"color": "grey", "alpha": 0.15, "linewidth": 0}
        label = f"< {self.floor:g} (e.g. 0.00), spread"
        means = [s] if ref is None else [s, ref]
        if any((m.eece_mean < self.floor).any() for m in means):
            ax.axvspan(low, self.floor, **band, label=label)
            ax.set_xlim(left=low * 0.8)
            label = None
        if any((m.ece_mean < self.floor).any() for m in means):
            ax.axhspan(low, self.floor, **band, label=label)
            ax.set_ylim(bottom=low * 0.8)
        ax.set_xlabel("mean EECE over tasks (error bar: variance)")
        ax.set_ylabel("mean ECE over tasks (error bar: variance)")
        note = (
            f"; {self.n_floored} mean(s) < {self.floor:g} drawn in the grey band"
            if self.n_floored
            else ""
        )
        ax.set_title((title or "mean EECE vs mean ECE") + note, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        place_legend(ax, legend_loc, fontsize=7)
        self._drawn_on(ax)
        return self


def plot_eece_vs_ece(rows: Sequence[Mapping[str, Any]], *, title: str | None = None) -> Any:
    """Fig. 4(a) of one-vs-all ``rows`` as a new matplotlib Figure."""
    return EECEvsECEDisplay.from_rows(rows).plot(title=title).figure_
