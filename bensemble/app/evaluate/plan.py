"""What the passes before the main one fixed: one :class:`Plan`, the same for every range of rows.

A plan is small and picklable (the split's test mask and uniforms are one value per row, the
EECE's centroids ``O(K * bins * M)``): the coordinator builds it
(:func:`bensemble.app.evaluate.engine.prepare`) and every worker process or Ray task receives it
whole, so every range is evaluated under the very same split, temperature, conformal threshold,
member order and bins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bensemble.app.evaluate.calibrated import CalibratedPart
from bensemble.app.evaluate.options import EvaluateOptions

__all__ = ["Plan"]


@dataclass
class Plan:
    """What the passes before the main one fixed (module docstring); the same for every range.

    Attributes:
        options: the checked options.
        m, n, k: members, rows and classes of the whole input.
        n_part: reported rows (the test part with a split, else every row).
        setup: the report's ``setup`` so far (sizes, options, split sizes, temperature notes).
        split: the calibration part, or ``None``.
        part_index: ``[N]`` position of each row in the reported part's order, when the
            intervals need it (a split with intervals), else ``None``.
        order: the EECE's canonical member order (``None``: already in order, or ``M = 1``).
        centroids: per K-means seed, per class, the fitted centroids (empty for ``M = 1``).
        seeds: the K-means seeds.
        eece_bins: the EECE's bins asked for (``"auto"`` resolved), 0 for ``M = 1``.
    """

    options: EvaluateOptions
    m: int
    n: int
    k: int
    n_part: int
    setup: dict[str, Any]
    split: CalibratedPart | None = None
    part_index: torch.Tensor | None = None
    order: torch.Tensor | None = None
    centroids: list[list[torch.Tensor]] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    eece_bins: int = 0
