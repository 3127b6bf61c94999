"""Risk-coverage curve for selective prediction (compute with bensemble.metrics, then draw)."""

from __future__ import annotations

from typing import Any

import torch

from bensemble._validation import (
    as_float_tensor,
    as_labels,
    as_member_stack,
    check_positive,
    to_tensor,
)
from bensemble.metrics.selective import aurc, risk_coverage_curve, selective_confidence

__all__ = ["RiskCoverageDisplay", "plot_risk_coverage"]


class RiskCoverageDisplay:
    """Risk-coverage curve: selective risk against coverage as the confidence threshold drops.

    Holds the output of :func:`bensemble.metrics.risk_coverage_curve` unchanged; :meth:`plot`
    only draws it. Build it with :meth:`from_predictions` or :meth:`from_ensemble`.

    Args:
        coverage: coverage at each threshold ``[G]``.
        risk: selective risk at each threshold ``[G]``.
        thresholds: the distinct confidences, decreasing ``[G]``.
        aurc: area under the curve (:func:`bensemble.metrics.aurc`), shown in the legend.
        name: label of the curve.

    Attributes:
        ax_: the matplotlib Axes drawn on (after :meth:`plot`).
        figure_: its Figure.
        line_: the drawn Line2D.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> d = RiskCoverageDisplay.from_predictions([0.9, 0.8, 0.7], [1, 0, 1]).plot()
        >>> d.ax_.get_xlabel()
        'Coverage'
    """

    def __init__(
        self,
        coverage: torch.Tensor,
        risk: torch.Tensor,
        thresholds: torch.Tensor,
        *,
        aurc: float | None = None,
        name: str | None = None,
    ) -> None:
        fn = "RiskCoverageDisplay"
        c = as_float_tensor(coverage, "coverage", fn, ndim=1, dtype=None)
        for arg, value in (("risk", risk), ("thresholds", thresholds)):
            t = as_float_tensor(value, arg, fn, ndim=1, dtype=None)
            if t.shape != c.shape:
                raise ValueError(
                    f"{fn}: `{arg}` must have the shape of `coverage` {tuple(c.shape)} "
                    f"(got {tuple(t.shape)})"
                )
        if aurc is not None:
            aurc = check_positive(aurc, "aurc", fn, allow_zero=True)
        self.coverage = coverage
        self.risk = risk
        self.thresholds = thresholds
        self.aurc = aurc
        self.name = name

    @classmethod
    def from_predictions(
        cls, confidence: Any, correct: Any, *, name: str | None = None
    ) -> RiskCoverageDisplay:
        """Compute the curve from confidences ``[N]`` and 0/1 correctness ``[N]``."""
        coverage, risk, thresholds = risk_coverage_curve(confidence, correct)
        return cls(coverage, risk, thresholds, aurc=aurc(confidence, correct), name=name)

    @classmethod
    def from_ensemble(
        cls,
        member_probs: Any,
        labels: Any,
        *,
        confidence: str = "max_probability",
        name: str | None = None,
        binary: bool = False,
    ) -> RiskCoverageDisplay:
        """Curve of the mean prediction of ``member_probs [M, N, K]`` against ``labels [N]``.

        ``confidence`` is a method of :func:`bensemble.metrics.selective_confidence`; correctness
        is the argmax of the mean prediction. ``binary=True`` reads a 2-D ``member_probs`` as
        binary positive-class members ``[M, N]`` (a 2-D array is an error without it).
        """
        fn = "RiskCoverageDisplay.from_ensemble"
        # validated in the input's dtype, so float16 data keeps its own row-sum tolerance
        p = as_member_stack(
            to_tensor(member_probs, "member_probs", fn), fn=fn, binary=binary, dtype=None
        )
        conf = selective_confidence(p, confidence, binary=binary)
        p = p.to(torch.float64)
        if binary:
            p = torch.stack([1.0 - p, p], dim=-1)
        mean = p.mean(dim=0)
        y = as_labels(labels, "labels", fn, n=mean.shape[0], num_classes=mean.shape[1])
        correct = (mean.argmax(dim=-1) == y.to(mean.device)).to(torch.float64)
        return cls.from_predictions(conf, correct, name=name or confidence)

    def plot(
        self, ax: Any = None, *, name: str | None = None, **kwargs: Any
    ) -> RiskCoverageDisplay:
        """Draw selective risk against coverage, one vertex per threshold.

        Args:
            ax: matplotlib Axes; a new figure is created when None.
            name: legend label (overrides the one given at construction).
            **kwargs: passed to ``Axes.plot``.

        Returns:
            ``self`` with ``ax_``, ``figure_`` and ``line_`` set.
        """
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots()
        label = name if name is not None else self.name
        if self.aurc is not None:
            label = f"{label} (AURC {self.aurc:.4f})" if label else f"AURC {self.aurc:.4f}"
        (self.line_,) = ax.plot(
            self.coverage.cpu().numpy(), self.risk.cpu().numpy(), label=label, **kwargs
        )
        ax.set_xlabel("Coverage")
        ax.set_ylabel("Selective risk")
        ax.set_xlim(0.0, 1.0)
        if label:
            ax.legend(loc="upper left")
        self.ax_ = ax
        self.figure_ = ax.figure
        return self


def plot_risk_coverage(confidence: Any, correct: Any, *, name: str | None = None) -> Any:
    """Risk-coverage curve of ``confidence [N]`` against 0/1 ``correct [N]`` as a Figure.

    A thin shell over :meth:`RiskCoverageDisplay.from_predictions` and
    :meth:`RiskCoverageDisplay.plot`.

    Returns:
        The matplotlib Figure.
    """
    return RiskCoverageDisplay.from_predictions(confidence, correct, name=name).plot().figure_
