"""Which classes a classwise diagram draws, and in which colours (readable at any ``K``).

A pooled classwise epistemic reliability diagram has one marker colour per class. Up to
:data:`DEFAULT_MAX_CLASSES` classes every class is drawn; beyond, the classes with the largest
support (points whose label is the class) are drawn and the figure says so, because a hundred
colours and a hundred legend entries cannot be told apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "DEFAULT_MAX_CLASSES",
    "ClasswiseView",
    "class_colours",
    "class_support",
    "select_details",
    "shown_classes",
    "subset_note",
]

#: Classes a classwise diagram draws by default (the ten colours of ``tab10``).
DEFAULT_MAX_CLASSES = 10


def class_colours(n_classes: int) -> Any:
    """``[K, 4]`` RGBA colours, one per class: tab10 / tab20, else sampled from turbo."""
    import matplotlib

    if n_classes <= 10:
        return matplotlib.colormaps["tab10"](np.arange(n_classes))
    if n_classes <= 20:
        return matplotlib.colormaps["tab20"](np.arange(n_classes))
    return matplotlib.colormaps["turbo"](np.linspace(0.0, 1.0, n_classes))


def class_support(counts: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """``[K]`` points labelled with each class, from classwise per-bin ``counts`` and ``acc``
    (``[K, M]``: bin sizes and fractions of the bin labelled ``k``; empty bins hold NaN):
    ``support_k = sum_m counts[k, m] * acc[k, m]`` (float64)."""
    filled = counts.to(torch.float64) * torch.nan_to_num(acc.to(torch.float64), nan=0.0)
    return filled.sum(dim=-1)


def shown_classes(
    n_classes: int, support: torch.Tensor | None, max_classes: int | None
) -> torch.Tensor:
    """The classes to draw, ``[S]`` int64 in ascending class order: all of them when
    ``max_classes`` is ``None`` or at least ``n_classes``, else the ``max_classes`` with the
    largest ``support`` (ties to the lower class index; the lowest indices without a support)."""
    if max_classes is None or n_classes <= max_classes:
        return torch.arange(n_classes)
    if support is None:
        return torch.arange(max_classes)
    order = torch.argsort(-support.to(torch.float64).cpu(), stable=True)
    return order[:max_classes].sort().values


def subset_note(n_shown: int, n_classes: int) -> str | None:
    """The line a figure carries when it draws a subset of the classes (``None`` otherwise)."""
    if n_shown >= n_classes:
        return None
    return f"{n_shown} of {n_classes} classes shown (largest support); EECE over all classes"


class ClasswiseView:
    """The classes a pooled classwise diagram draws (:func:`shown_classes`), their colours (by
    rank among the drawn classes, so ten drawn classes of a hundred get tab10) and legend
    entries.

    Attributes:
        drawn: ``[S]`` drawn classes, ascending.
        note: :func:`subset_note` (``None`` when every class is drawn).
        mask: ``[B]`` bool, which bins belong to a drawn class.
    """

    def __init__(
        self, classes: torch.Tensor, support: torch.Tensor | None, max_classes: int | None
    ) -> None:
        n_classes = int(classes.max()) + 1
        self.drawn = shown_classes(n_classes, support, max_classes)
        self.note = subset_note(len(self.drawn), n_classes)
        self.mask = torch.isin(classes, self.drawn.to(classes.device))
        self.palette = class_colours(len(self.drawn))
        self._rank = torch.full((n_classes,), -1, dtype=torch.int64)
        self._rank[self.drawn] = torch.arange(len(self.drawn))

    def colours(self, bin_classes: torch.Tensor) -> Any:
        """``[B', 4]`` RGBA colours of bins of drawn classes (``None`` for no bin)."""
        if bin_classes.numel() == 0:
            return None
        return self.palette[self._rank[bin_classes.cpu()].numpy()]

    def handles(self) -> list:
        """One normal-size legend marker per drawn class."""
        from bensemble.plots._layout import marker_handle

        return [marker_handle(self.palette[i], f"class {k}") for i, k in enumerate(self.drawn)]


def select_details(details: Any, class_index: Any, fn: str) -> tuple:
    """``(trust, squared_error, counts, value, classes, support)`` of EECE details for a display:
    binary / top-label details as they are; classwise details ``[K, M]`` either one class
    (``class_index``) or pooled (``classes`` the class of each bin, ``support`` the points of
    each class)."""
    trust, sq, counts, value = details.trust, details.squared_error, details.counts, details.value
    classes = support = None
    if counts.ndim == 2:
        n_classes = counts.shape[0]
        if class_index is not None:
            if (
                isinstance(class_index, bool)
                or not isinstance(class_index, (int, np.integer))
                or not 0 <= int(class_index) < n_classes
            ):
                raise ValueError(
                    f"{fn}: `class_index` must be in [0, {n_classes - 1}] (got {class_index!r})"
                )
            k = int(class_index)
            return trust[k], sq[k], counts[k], float(details.per_class[k]), None, None
        classes = torch.arange(n_classes).repeat_interleave(counts.shape[1])
        support = class_support(counts, details.acc)
        trust, sq, counts = trust.reshape(-1), sq.reshape(-1), counts.reshape(-1)
    elif class_index is not None:
        raise ValueError(f"{fn}: `class_index` must be None for binary details")
    return trust, sq, counts, value, classes, support
