r"""Replicate state of the EECE with its bins held fixed (conditional on the bins).

Notation of :mod:`bensemble.metrics.epistemic`: ``H`` members, group ``g`` (one per class for the
classwise EECE, one for the binary / top-label form), bin ``m`` of the group's partition. Point
``i`` enters its bin with weight ``w_i`` and adds, per bin, the ``H + 4`` sums

    W = sum w,  Y = sum w y,  E = sum w EU,  Q = sum w sum_h (y - p_h)^2,  P_h = sum w p_h

(one sparse product per block of samples; ``sums [G M (H + 4), R + 1]``). From them:

* the reported value (plug-in; row 0 equals
  :func:`~bensemble.metrics.expected_epistemic_calibration_error` with the same bins):
  ``t_m = mean_h (Y/W - P_h/W)^2 - E/W``, ``EECE = mean_g sum_m (W_m/W) |t_m|``;
* the bias-corrected per-bin term: the mean over members of the U-statistic of
  ``(acc - conf_h)^2``, ``u_m = (sum_h (Y - P_h)^2 - Q) / (H W (W - 1)) - E/W`` (unbiased given
  the bin's count; 0 for a bin with at most one point), ``T_gm = (W_m / W) u_m / G``. The plug-in
  squared error is biased upwards by about ``Var(y - p_h) / W_m`` per bin, as large as the
  terms themselves at the report's ~sqrt(N) bins.

The interval is :func:`~bensemble.metrics.intervals.l1_norm_interval` of ``T``: it covers the
population EECE ``mean_g sum_m P(m) |tau_m|`` of the *fixed* partition (``tau_m`` the population
term of bin ``m``: ``mean_h (P(y | m) - E[p_h | m])^2 - E[EU | m]``), conditional on the bins:
K-means centroids fitted once and held fixed, their fit's own variability not included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bensemble._validation import (
    as_binary_member_probs,
    as_float_tensor,
    as_labels,
    as_member_probs,
    check_bool,
    check_finite,
    check_positive_int,
)
from bensemble.metrics.intervals._interval import Interval, l1_norm_interval
from bensemble.metrics.intervals._replicate_checks import check_eece_sums
from bensemble.metrics.intervals._replicates import (
    LEVEL,
    ReplicatesBase,
    as_index_tensor,
    check_level,
)
from bensemble.metrics.intervals._sparse_sums import add_sparse_sums

__all__ = ["EECEReplicates"]

_F64 = torch.float64


class EECEReplicates(ReplicatesBase):
    r"""The EECE with fixed bins, its bootstrap replicates and its interval.

    ``update(weights, member_probs, labels, point_bins, eu=None)``:

    * ``member_probs``: ``[H, c, K]`` (classwise: one group per class, ``K = n_groups``) or,
      with ``binary=True`` at construction, ``[H, c]`` positive-class probabilities (one group:
      the binary or the top-label EECE, whose caller passes the top class's probabilities and
      ``labels = [prediction is right]``);
    * ``labels``: ``[c]`` integer labels (``{0, 1}`` when binary);
    * ``point_bins``: ``[G, c]`` (or ``[c]``, shared by every group) bin ids in ``[0, n_slots)``,
      e.g. ``EECEDetails.point_bins`` or :func:`~bensemble.metrics.assign_bins` of fixed
      centroids;
    * ``eu``: reported epistemic uncertainty ``[c]`` (binary) or ``[c, K]``, non-negative;
      default the member variance ``Var_h p_h`` (divisor ``H``), as the metric.

    Args:
        n_members: ``H``.
        n_slots: bins per group ``M`` (ids in ``[0, M)``; empty bins are allowed).
        n_groups: ``G``: classes of a classwise EECE, 1 for the binary form.
        binary: member probabilities come as ``[H, c]`` (requires ``n_groups=1``).
        n_replicates: bootstrap replicates ``R``.

    Example:
        >>> from bensemble.metrics.intervals import poisson_weights
        >>> p = torch.tensor([[0.2, 0.2, 0.9, 0.9], [0.4, 0.4, 0.7, 0.7]])
        >>> state = EECEReplicates(2, 2, binary=True, n_replicates=20)
        >>> _ = state.update(poisson_weights(range(4), 20), p, [0, 1, 1, 1], [0, 0, 1, 1])
        >>> round(state.compute().point, 4)
        0.04
    """

    _fn = "EECEReplicates"
    _SETTINGS = ("n_members", "n_slots", "n_groups", "binary")
    method = "l1-two-step"

    def __init__(
        self,
        n_members: int,
        n_slots: int,
        *,
        n_groups: int = 1,
        binary: bool = False,
        n_replicates: int = 200,
    ) -> None:
        fn = self._fn
        self.n_members = check_positive_int(n_members, "n_members", fn)
        self.n_slots = check_positive_int(n_slots, "n_slots", fn)
        self.n_groups = check_positive_int(n_groups, "n_groups", fn)
        self.binary = check_bool(binary, "binary", fn)
        if self.binary and self.n_groups != 1:
            raise ValueError(f"{fn}: `n_groups` must be 1 with binary=True (got {n_groups})")
        self.width = self.n_members + 4
        super().__init__(n_replicates)

    def _sums_shape(self) -> tuple[int, ...]:
        return (self.n_groups * self.n_slots * self.width, self.n_replicates + 1)

    def _check_sums(self, state: dict[str, torch.Tensor], where: str, prefix: str = "") -> None:
        check_eece_sums(state, where, (self.n_groups, self.n_slots, self.n_members), prefix)

    def _prepare(
        self, member_probs: Any, labels: Any, point_bins: Any, eu: Any = None
    ) -> tuple[int, dict[str, np.ndarray]]:
        fn = self._fn + ".update"
        h, g = self.n_members, self.n_groups
        if self.binary:
            p = as_binary_member_probs(member_probs, "member_probs", fn).to(_F64).cpu()
            cols = p[:, :, None]  # [H, c, 1]
        else:
            cols = as_member_probs(member_probs, "member_probs", fn).to(_F64).cpu()  # [H, c, K]
        if cols.shape[0] != h or cols.shape[2] != g:
            raise ValueError(
                f"{fn}: `member_probs` must have {h} members and {g} groups (classes) "
                f"(got shape {tuple(cols.shape)})"
            )
        c = cols.shape[1]
        y = as_labels(labels, "labels", fn, n=c, num_classes=2 if self.binary else g).cpu()
        outcome = (y[:, None] == (torch.ones(1) if self.binary else torch.arange(g))).to(_F64)
        bins = self._check_bins(point_bins, c, fn)  # [c, G]
        if eu is None:
            eu_t = cols.var(0, unbiased=False)  # [c, G]
        else:
            eu_t = as_float_tensor(eu, "eu", fn).to(_F64).cpu()
            check_finite(eu_t, "eu", fn)
            if eu_t.numel() and float(eu_t.min()) < 0:
                raise ValueError(
                    f"{fn}: `eu` must be non-negative (got a minimum of {float(eu_t.min()):.4g})"
                )
            if tuple(eu_t.shape) not in ([(c,), (c, 1)] if g == 1 else [(c, g)]):
                raise ValueError(
                    f"{fn}: `eu` must have shape {[c] if g == 1 else [c, g]} (got "
                    f"{list(eu_t.shape)})"
                )
            eu_t = eu_t.reshape(c, g)
        gaps = outcome[None] - cols  # [H, c, G]
        # per group: count, EU, Q and the H members (rows 0, 2, 3, 4.. of the bin); the outcome
        # (row 1) is non-zero in one group only (the label's class), so one entry per sample
        values = torch.empty(c, g, self.width - 1, dtype=_F64)
        values[:, :, 0] = 1.0
        values[:, :, 1] = eu_t
        values[:, :, 2] = (gaps * gaps).sum(0)
        values[:, :, 3:] = cols.permute(1, 2, 0)
        slot = bins + torch.arange(g) * self.n_slots  # [c, G]
        offsets = torch.tensor([0, *range(2, self.width)])
        rows = (slot[:, :, None] * self.width + offsets).reshape(c, -1)
        hit = outcome.argmax(1, keepdim=True)  # the label's group (group 0 when binary)
        y_rows = slot.gather(1, hit) * self.width + 1
        y_values = outcome.gather(1, hit)
        return c, {
            "rows": torch.cat([rows, y_rows], 1).contiguous().numpy(),
            "values": torch.cat([values.reshape(c, -1), y_values], 1).contiguous().numpy(),
        }

    def _check_bins(self, point_bins: Any, c: int, fn: str) -> torch.Tensor:
        b = as_index_tensor(point_bins, "point_bins", fn).cpu()
        if b.ndim == 1:
            b = b[None].expand(self.n_groups, -1)
        if b.ndim != 2 or tuple(b.shape) != (self.n_groups, c):
            raise ValueError(
                f"{fn}: `point_bins` must have shape [{c}] or [{self.n_groups}, {c}] "
                f"(got {tuple(b.shape)})"
            )
        if b.numel() and (int(b.min()) < 0 or int(b.max()) >= self.n_slots):
            raise ValueError(
                f"{fn}: `point_bins` must lie in [0, {self.n_slots - 1}] (got values in "
                f"[{int(b.min())}, {int(b.max())}])"
            )
        return b.T

    def _accumulate(self, into: np.ndarray, prepared: Any, rows: slice, w: np.ndarray) -> None:
        add_sparse_sums(into, prepared["rows"][rows], prepared["values"][rows], w)

    # ---------------------------------------------------------------- results
    def _parts(self, replicates: slice = slice(None)) -> tuple[torch.Tensor, ...]:
        """Per replicate and bin: ``W, Y, E, Q, P [R + 1, G, M(, H)]`` (the rows
        ``replicates`` of them)."""
        self._check_ready()
        s = torch.from_numpy(self._sums[:, replicates]).T.reshape(
            -1, self.n_groups, self.n_slots, self.width
        )
        return s[..., 0], s[..., 1], s[..., 2], s[..., 3], s[..., 4:]

    def plug_in_values(self, replicates: slice = slice(None)) -> torch.Tensor:
        """``[R + 1]`` plug-in EECE per replicate (row 0: the metric's value; ``replicates``
        picks rows: each row's value depends on its own sums only)."""
        w, y, e, _, p = self._parts(replicates)
        denom = w.clamp_min(1e-300)
        acc, conf = y / denom, p / denom[..., None]
        terms = ((acc[..., None] - conf) ** 2).mean(-1) - e / denom
        weighted = torch.where(w > 0, w * terms.abs(), torch.zeros_like(w))
        total = w.sum(-1).clamp_min(1e-300)  # [R + 1, G]: every point is in one bin per group
        return (weighted.sum(-1) / total).mean(-1)

    def replicate_terms(self) -> torch.Tensor:
        """``[R + 1, G M]`` bias-corrected per-bin terms ``T`` (row 0: the data)."""
        w, y, e, q, p = self._parts()
        pairs = w * (w - 1.0)
        spread = ((y[..., None] - p) ** 2).sum(-1) - q
        ok = w > 1.0
        u = torch.where(
            ok,
            spread / (self.n_members * pairs.clamp_min(1e-300)) - e / w.clamp_min(1e-300),
            torch.zeros_like(w),
        )
        total = w.sum(-1, keepdim=True).clamp_min(1e-300)
        return (w / total * u / self.n_groups).reshape(self.n_replicates + 1, -1)

    def compute(self, level: float = LEVEL) -> Interval:
        """The EECE (plug-in, as reported) and the interval of the population EECE."""
        level = check_level(level, f"{self._fn}.compute")
        terms = self.replicate_terms()
        point = float(self.plug_in_values(slice(0, 1))[0])  # the data's row only
        estimate = float(terms[0].abs().sum())
        low, high = l1_norm_interval(terms[0], terms[1:], level)
        covers = (
            f"the population EECE of this fixed partition ({self.n_slots} bins per group, "
            f"{self.n_groups} group(s)), conditional on the bins: the sampling variability of "
            "the evaluated points, not that of the K-means fit (centroids held fixed)"
        )
        return Interval(point, low, high, level, self.method, covers, estimate, self.n_replicates)
