"""Private binning kernels shared by the binned metrics (ECE, classwise ECE, reliability, EECE).

The contract is *bin id, then one pass of sums*:

1. Give every value a bin id (``uniform_bin_ids`` arithmetically for equal-width bins,
   ``bucketize_ids`` against explicit edges, e.g. from ``quantile_edges``).
2. Accumulate per-bin sums with ``bin_sums`` (``index_add_`` into float64, bincount-style: exact
   counts, float64 sums, one pass per statistic).

No Python loop over samples, bins or classes. Several independent binnings (the classes of a
classwise ECE, correct / incorrect predictions) share one pass through *groups*: group ``g`` owns
the slots ``[g * (n_bins + 1), g * (n_bins + 1) + n_bins)``; the last slot of each group is never
used (see :func:`ungroup`).

Edge rule (bensemble 0.2's, pinned by tests)
--------------------------------------------
Equal-width bin ``b`` is ``(e_b, e_{b+1}]`` where ``e`` is bensemble 0.2's grid
``torch.linspace(0, 1, n_bins + 1)`` in float32, and a value is compared with the edges *in the
value's own floating dtype* (float32 grid values are rounded to float16 for float16 inputs and are
exact in float64 for float64 inputs), which is what bensemble's ``confidences > lower`` /
``confidences <= upper`` on a float32 0-dim edge does. A value of exactly 0 belongs to bin 0
(bensemble's loop drops it from every bin; a top-label confidence is never 0, so its ECE is
unaffected).
"""

from __future__ import annotations

import torch

__all__ = [
    "grid_edges",
    "comparison_edges",
    "uniform_bin_ids",
    "bucketize_ids",
    "quantile_edges",
    "bin_sums",
    "ungroup",
]

_F64 = torch.float64
# The one-step correction needs 2 * n * eps + 3 * r < 1; we demand half of that.
_MAX_PERTURBATION = 0.5


def grid_edges(n_bins: int, device: torch.device | str | None = None) -> torch.Tensor:
    """bensemble 0.2's equal-width edges: float32 ``linspace(0, 1, n_bins + 1)``, as float64.

    Returns:
        ``[n_bins + 1]`` float64 tensor (exact copies of the float32 grid values).
    """
    return torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float32, device=device).to(_F64)


def comparison_edges(
    n_bins: int, value_dtype: torch.dtype, device: torch.device | str | None = None
) -> torch.Tensor:
    """The grid as a value of dtype ``value_dtype`` sees it (rounded to that dtype), as float64."""
    grid = torch.linspace(0.0, 1.0, n_bins + 1, dtype=torch.float32, device=device)
    return grid.to(value_dtype).to(_F64)


def uniform_bin_ids(
    values: torch.Tensor,
    n_bins: int,
    *,
    groups: torch.Tensor | None = None,
    n_groups: int = 1,
) -> torch.Tensor:
    """Equal-width bin ids under the ``(lower, upper]`` rule, exact with respect to the edges.

    The edges are compared in ``values``' own dtype (bensemble 0.2's rule). The id is computed
    arithmetically and corrected once against the edges: ``j = floor(n * v + delta)`` with a small
    ``delta >= n * eps + r`` (``eps``: largest distance of an edge, as seen in that dtype, from
    ``k / n``; ``r``: rounding of the product) is either the right bin ``b`` or ``b + 1``, and
    ``v <= e_j`` tells which (``e_0`` is taken as ``-inf`` so a 0 stays in bin 0, and ``e_n = 1``
    sends ``v = 1`` back to bin ``n - 1``). This is ``ceil(v * n) - 1`` clamped and corrected:
    a multiply-add, a cast, one lookup into an ``n + 1``-entry table, a compare and an add, on
    4-byte temporaries for float32 input. When the edges are too coarse for one correction step
    (float16 / bfloat16 with thousands of bins, where edges can even coincide) it falls back to
    ``torch.bucketize``.

    Args:
        values: ``[...]`` values in ``[0, 1]``, any floating dtype.
        n_bins: number of bins ``n``.
        groups: optional integer / bool tensor broadcastable to ``values``' shape (e.g. ``[N]``
            for ``[N]`` values, ``[K]`` for ``[N, K]``): group index in ``[0, n_groups)``.
        n_groups: number of groups (sizes the integer type of the ids).

    Returns:
        Integer ids (int32, or int64 when ``n_groups * (n_bins + 1)`` needs it) of ``values``'
        shape: ``b + g * (n_bins + 1)``.
    """
    stride = n_bins + 1
    device = values.device
    edges = comparison_edges(n_bins, values.dtype, device)
    k = torch.arange(stride, dtype=_F64, device=device)
    eps = float((edges - k / n_bins).abs().max())
    index_dtype = torch.int32 if n_groups * stride < 2**31 - 1 else torch.int64
    for zdtype in (torch.float32, _F64):
        if zdtype == torch.float32 and values.dtype == _F64:
            continue  # a float64 value would be rounded before the multiply; use float64
        r = 4.0 * (n_bins + 2) * torch.finfo(zdtype).eps  # rounding of delta + n * v
        if 2.0 * n_bins * eps + 3.0 * r < _MAX_PERTURBATION:
            break
    else:
        ids = bucketize_ids(values.to(_F64), edges, groups=groups)
        return ids.to(index_dtype)
    delta = n_bins * eps + 2.0 * r
    table = edges.to(values.dtype)
    table[0] = -torch.inf
    # candidate j = floor(delta + n * v) in {b, b + 1}
    z = torch.add(torch.tensor(delta, dtype=zdtype, device=device), values.to(zdtype), alpha=n_bins)
    ids = z.to(index_dtype)
    flat = ids.reshape(-1)
    if z.dtype == table.dtype and z.is_contiguous():  # z is dead: reuse its memory
        lower = torch.index_select(table, 0, flat, out=z.view(-1)).view(ids.shape)
    else:
        lower = table.index_select(0, flat).view(ids.shape)
    ids.add_(values <= lower, alpha=-1)
    if groups is not None:
        ids.add_(groups, alpha=stride)
    return ids


def bucketize_ids(
    values: torch.Tensor, edges: torch.Tensor, *, groups: torch.Tensor | None = None
) -> torch.Tensor:
    """Bin ids against explicit edges under the ``(lower, upper]`` rule (0 goes to bin 0).

    Args:
        values: ``[N]`` or ``[N, G]`` float64 values.
        edges: ``[B + 1]`` float64 increasing (possibly repeated) edges, or ``[G, B + 1]``
            per-column edges for ``[N, G]`` values (then column ``g`` is group ``g``).
        groups: optional group index broadcastable to ``values`` (with 1-D edges only).

    Returns:
        int64 ids ``b + g * (B + 1)``; ``b`` counts the inner edges strictly below the value.
    """
    n_bins = edges.shape[-1] - 1
    inner = edges[..., 1:-1].to(values.dtype)
    if edges.ndim == 1:
        ids = torch.bucketize(values, inner.contiguous(), right=False)
        if groups is not None:
            ids = ids + groups * (n_bins + 1)
        return ids
    # per-column edges: searchsorted on [G, N] rows, then back to [N, G]
    ids = torch.searchsorted(inner.contiguous(), values.t().contiguous(), right=False).t()
    offset = torch.arange(values.shape[1], device=values.device) * (n_bins + 1)
    return ids + offset


def quantile_edges(values: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Equal-mass edges from the empirical order statistics of ``values``.

    Inner edge ``k`` (``k = 1..n_bins-1``) is the ``ceil(k * N / n_bins)``-th smallest value, so
    with the ``(lower, upper]`` rule bin ``b`` holds the samples of rank ``ceil(b N / n) + 1 ..
    ceil((b + 1) N / n)`` when there are no ties. Ties never split: every copy of an edge value
    falls in the lower bin, which can leave a later bin empty (duplicate edges give empty bins,
    reported as such; the number of bins never changes). Outer edges are 0 and 1. Uses one sort
    (exact order statistics; ``torch.quantile`` refuses more than 2**24 elements).

    Args:
        values: ``[N]`` or ``[N, G]`` float64 values in ``[0, 1]`` (per-column edges for 2-D).
        n_bins: number of bins.

    Returns:
        ``[n_bins + 1]`` or ``[G, n_bins + 1]`` float64 edges.
    """
    n = values.shape[0]
    k = torch.arange(1, n_bins, device=values.device)
    rank_index = torch.div(k * n + n_bins - 1, n_bins, rounding_mode="floor") - 1
    ordered = torch.sort(values, dim=0).values
    inner = ordered[rank_index]  # [n_bins - 1] or [n_bins - 1, G]
    if values.ndim == 2:
        inner = inner.t()
    shape = (*inner.shape[:-1], 1)
    zeros = torch.zeros(shape, dtype=_F64, device=values.device)
    return torch.cat([zeros, inner.to(_F64), zeros + 1.0], dim=-1)


def bin_sums(ids: torch.Tensor, n_bins: int, *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per-bin count and weighted sums: one exact accumulation pass each.

    The sums are ``index_add_`` into float64 (counts into int64): the same result as
    ``torch.bincount(ids, weights=w.double(), minlength=n_bins)``, without bincount's hidden
    min / max passes over the ids (which it runs to size its output and which cost ~10x the
    accumulation itself with two threads on a busy CPU).

    Args:
        ids: integer (int32 / int64) bin ids in ``[0, n_bins)`` (any shape; flattened).
        n_bins: number of slots.
        *weights: tensors of ``ids``' shape; summed per bin in float64.

    Returns:
        ``(counts, *sums)``, each ``[n_bins]`` float64 (counts are exact integers).
    """
    flat = ids.reshape(-1)
    device = ids.device
    ones = torch.ones(1, dtype=torch.int64, device=device).expand(flat.shape[0])
    counts = torch.zeros(n_bins, dtype=torch.int64, device=device).index_add_(0, flat, ones)
    sums = tuple(
        torch.zeros(n_bins, dtype=_F64, device=device).index_add_(0, flat, w.reshape(-1).to(_F64))
        for w in weights
    )
    return (counts.to(_F64), *sums)


def ungroup(sums: torch.Tensor, n_bins: int, n_groups: int) -> torch.Tensor:
    """``[n_groups * (n_bins + 1)]`` grouped slots -> ``[n_groups, n_bins]`` per-group bins."""
    return sums.view(n_groups, n_bins + 1)[:, :n_bins]
