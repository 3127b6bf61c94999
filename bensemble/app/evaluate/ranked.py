r"""Misclassification AUROC and AURC with their Poisson-bootstrap replicates in bounded memory.

The two are ranking statistics: they need every reported sample's confidence. :class:`Ranked`
keeps exactly that - one ``complex128`` per sample, the confidence ``max_k p_k`` as its real
part and its global row number (``+ (row + 1)`` when the argmax is right, ``- (row + 1)`` when
wrong) as its imaginary part (16 bytes per sample; states of other rows merge by
concatenation). :meth:`Ranked.finish` sorts them in place and sweeps once from the most
confident sample down, a block of samples at a time, with the replicates' weights regenerated
from the row numbers (:func:`~bensemble.metrics.intervals.poisson_weights`: the same weights as
every other replicate state, whatever the chunks, shards or workers); memory beyond the samples
is one block of weights. Column 0 of every sum is unit weights: the reported values.

With the samples in decreasing confidence, a tie group ``g`` holds weight ``s_g``, of it ``e_g``
on errors; ``a_g`` and ``E_g`` are the weight and the error weight before it; ``W`` and ``E`` the
totals. Only *units* add terms: a tie group holding errors and right predictions, or a maximal
run of groups holding only errors (over a run the terms telescope). Per unit ``u``:

* misclassification AUROC of the score ``1 - confidence`` (ties count one half, as
  :func:`~bensemble.metrics.auroc`): ``sum_u e_u (a_u - E_u + (s_u - e_u) / 2) / (E (W - E))``;
* AURC (:func:`~bensemble.metrics.aurc`, errors of a tie group spread evenly over its
  positions): ``W AURC = E H[W] - sum_u [e_u (H[a_u + s_u] - 1) + (e_u / s_u) a_u (H[a_u + s_u]
  - H[a_u])]``, ``H`` the harmonic numbers (a table below 128, their asymptotic series above: no
  table of ``N`` entries).

Integer weights are resample counts, so replicate ``r`` is the statistic of the data repeated
``w[:, r]`` times, and the sums of one group may span any number of blocks.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Ranked"]

_BLOCK_VALUES = 1 << 18  # weights of one block of samples: [rows, R + 1] float64, 2 MiB
_EULER = 0.5772156649015329
_SMALL = 128  # below: the harmonic numbers from a table; above: their asymptotic series
_TABLE = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, _SMALL + 1))])


def _harmonic(x: np.ndarray) -> np.ndarray:
    """``H[x] = sum_{t <= x} 1 / t`` for integer-valued ``x >= 0`` (float64): a table below
    128, else ``ln x + gamma + 1/(2x) - 1/(12x^2) + 1/(120x^4) - 1/(252x^6)`` (the next term,
    ``1/(240x^8)``, is below ``1e-19`` there)."""
    out = np.empty_like(x)
    small = x < _SMALL
    out[small] = _TABLE[x[small].astype(np.int64)]
    big = x[~small]
    inv2 = 1.0 / (big * big)
    series = 1.0 / (2.0 * big) - inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 / 252.0))
    out[~small] = np.log(big) + _EULER + series
    return out


def _harmonic_gap(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``H[a + s] - H[a]`` without the cancellation of two values near ``ln a``: for ``a >=
    128``, ``log1p(s / a)`` plus the differences of the series' terms in closed form."""
    out = np.empty_like(a)
    small = a < _SMALL
    out[small] = _harmonic(a[small] + s[small]) - _TABLE[a[small].astype(np.int64)]
    x, d = a[~small], s[~small]
    y = x + d
    first = -d / (2.0 * x * y)  # 1/(2y) - 1/(2x)
    second = d * (x + y) / (12.0 * (x * y) ** 2)  # -(1/(12y^2) - 1/(12x^2))
    third = 1.0 / (120.0 * y**4) - 1.0 / (120.0 * x**4)
    out[~small] = np.log1p(d / x) + first + second + third
    return out


class Ranked:
    """The confidences and row numbers of ``n`` reported samples (module docstring)."""

    def __init__(self, n: int) -> None:
        self.buffer = np.empty(n, dtype=np.complex128)
        self.filled = 0

    def add(self, confidence: np.ndarray, correct: np.ndarray, rows: np.ndarray) -> None:
        """Add samples: confidences (float64), whether each argmax is right, global rows."""
        stop = self.filled + confidence.shape[0]
        signed = np.where(correct, rows + 1.0, -(rows + 1.0))
        view = self.buffer[self.filled : stop]
        view.real = confidence
        view.imag = signed
        self.filled = stop

    def merge(self, other: Ranked) -> Ranked:
        out = Ranked(self.filled + other.filled)
        out.buffer[: self.filled] = self.buffer[: self.filled]
        out.buffer[self.filled :] = other.buffer[: other.filled]
        out.filled = out.buffer.shape[0]
        return out

    def finish(
        self, n_replicates: int = 0, seed: int = 0, block: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(auroc, aurc)``, each ``[R + 1]``: column 0 the reported values, then the ``R``
        replicates (AUROC NaN without an error or without a right prediction). Sorts the
        buffer in place; temporaries hold at most ``block`` samples (and about 2^18 weights)."""
        data = self.buffer[: self.filled]
        data.sort()  # by confidence, then row: descending is read from the end
        self.sorted = True
        sweep = _Sweep(n_replicates + 1)
        step = max(1, _BLOCK_VALUES // (n_replicates + 1))
        step = step if block is None else max(1, min(step, block))
        n = data.shape[0]
        if n_replicates:  # poisson_weights' kernel: uint8 counts straight into the block
            from bensemble.metrics.intervals._poisson import resolve_seed, weight_block

            seed = resolve_seed(seed, "Ranked.finish")
        for stop in range(n, 0, -step):
            block = data[max(0, stop - step) : stop][::-1]
            signed = block.imag
            err = signed < 0
            w = np.empty((block.shape[0], n_replicates + 1))
            w[:, 0] = 1.0
            if n_replicates:
                rows = (np.abs(signed) - 1.0).astype(np.uint64)
                w[:, 1:] = weight_block(rows, n_replicates, seed)
            sweep.add(block.real, err, w)
        return sweep.result()

    def vertices(
        self, max_points: int = 2000, block: int = 1 << 20
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """At most ``max_points`` exact vertices ``(coverage, risk, thresholds)`` of the
        risk-coverage curve, thresholds decreasing: the confidences at evenly spaced positions
        of the samples in decreasing confidence (the most and the least confident included);
        a threshold ``t`` accepts every sample with confidence ``>= t``. Call after
        :meth:`finish` (which sorts)."""
        data = self.buffer[: self.filled]
        if not getattr(self, "sorted", False):
            data.sort()
            self.sorted = True
        n = data.shape[0]
        conf = data.real
        picks = np.unique(np.linspace(0, n - 1, max(2, max_points)).round().astype(np.int64))
        thresholds = np.unique(conf[picks])[::-1].copy()
        # first position of each threshold (ties accepted together): a binary search a piece
        first = np.array([_first_at_least(conf, t) for t in thresholds], dtype=np.int64)
        wrong_from = _wrong_counts_from(data.imag, first, block)
        accepted = n - first
        return accepted / n, wrong_from / accepted, thresholds


def _first_at_least(conf: np.ndarray, t: float) -> int:
    """First index of the ascending ``conf`` holding a value ``>= t`` (a strided view: no copy)."""
    lo, hi = 0, conf.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if conf[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _wrong_counts_from(signed: np.ndarray, positions: np.ndarray, step: int) -> np.ndarray:
    """For each position, the wrong predictions (negative ``signed``) at or after it; one
    blocked pass over the samples."""
    n = signed.shape[0]
    order = np.argsort(positions, kind="stable")
    wanted = positions[order]
    before = np.zeros(wanted.shape[0], dtype=np.int64)  # wrong ones before each position
    seen, j = 0, 0
    for start in range(0, n, step):
        wrong = signed[start : start + step] < 0
        stop = start + wrong.shape[0]
        upto = np.searchsorted(wanted, stop, side="left")
        if upto > j:
            counts = np.concatenate([[0], np.cumsum(wrong)])
            before[j:upto] = seen + counts[wanted[j:upto] - start]
            j = upto
        seen += int(wrong.sum())
    before[j:] = seen
    out = np.empty_like(before)
    out[order] = seen - before
    return out


def _segment_sums(x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sums of the rows ``starts[i]..ends[i]`` of ``x`` (integer-valued float64: a running
    sum's differences are exact), one cumulative sum instead of a reduction per segment."""
    running = np.cumsum(x, axis=0)
    out = running[ends]
    out[1:] -= running[starts[1:] - 1]
    return out


class _Sweep:
    """The running sums of the sweep; ``add`` takes the next block in decreasing confidence."""

    def __init__(self, columns: int) -> None:
        z = np.zeros(columns)
        self.total, self.errors = z.copy(), z.copy()  # weight and error weight so far
        self.auroc, self.spread = z.copy(), z.copy()
        self.group = None  # the open tie group: (conf, s [1, C], e [1, C], n [1], n_err [1])
        self.run = None  # the open run of error-only groups: (a, E, s, e), each [1, C]

    def add(self, conf: np.ndarray, err: np.ndarray, w: np.ndarray) -> None:
        starts = np.flatnonzero(np.r_[True, conf[1:] != conf[:-1]])
        if starts.shape[0] == conf.shape[0] and (self.group is None or conf[0] != self.group[0]):
            # no ties in the block, none with the open group: every sample is a tie group of
            # its own, holding only an error or only a right prediction (no mixed units)
            if self.group is not None:  # the open group ended with the previous block
                self._groups(*self.group[1:])
            self._unmixed(w[:-1], err[:-1])
            last = np.ones(1, dtype=np.int64)
            self.group = (conf[-1], w[-1:], w[-1:] * err[-1], last, last * int(err[-1]))
            return
        e = w * err[:, None]
        count_err = err.astype(np.int64)
        if starts.shape[0] < conf.shape[0]:  # ties: sums per group, exact (integer weights)
            ends = np.r_[starts[1:], conf.shape[0]] - 1
            s, e = _segment_sums(w, starts, ends), _segment_sums(e, starts, ends)
            count_err = np.add.reduceat(count_err, starts)
        else:
            s = w
        count = np.diff(np.r_[starts, conf.shape[0]])
        if self.group is not None:
            _, gs, ge, gn, gerr = self.group
            if conf[0] == self.group[0]:  # the open group goes on in this block
                s[0] += gs[0]
                e[0] += ge[0]
                count[0] += gn[0]
                count_err[0] += gerr[0]
            else:  # it ended with the previous block
                s, e = np.concatenate([gs, s]), np.concatenate([ge, e])
                count, count_err = np.r_[gn, count], np.r_[gerr, count_err]
        self._groups(s[:-1], e[:-1], count[:-1], count_err[:-1])
        self.group = (conf[-1], s[-1:], e[-1:], count[-1:], count_err[-1:])

    def _groups(self, s, e, count, count_err, last: bool = False) -> None:
        """Close complete tie groups ``[G, C]`` in order; a run of error-only groups reaching
        the end stays open unless ``last``."""
        if s.shape[0] == 0:
            return
        before = self.total + np.cumsum(s, 0) - s  # a_g
        errors_before = self.errors + np.cumsum(e, 0) - e  # E_g
        self.total = self.total + s.sum(0)
        self.errors = self.errors + e.sum(0)
        mixed = (count_err > 0) & (count_err < count)
        if mixed.any():
            self._units(before[mixed], errors_before[mixed], s[mixed], e[mixed])
        pure = count_err == count
        if not pure[0]:
            self._close_run()
        if not pure.any():
            return
        # maximal runs of error-only groups, summed over the compressed pure groups
        opens = pure & ~np.r_[False, pure[:-1]]
        where = np.flatnonzero(pure)
        first = np.flatnonzero(opens[where])  # run starts among the pure groups
        run_s = np.add.reduceat(s[where], first, axis=0)
        run_e = np.add.reduceat(e[where], first, axis=0)
        a, big_e = before[where[first]], errors_before[where[first]]
        if pure[0] and self.run is not None:  # the open run goes on
            a[0], big_e[0] = self.run[0][0], self.run[1][0]
            run_s[0] += self.run[2][0]
            run_e[0] += self.run[3][0]
            self.run = None
        keep = run_s.shape[0] - (0 if last or not pure[-1] else 1)
        if keep:
            self._units(a[:keep], big_e[:keep], run_s[:keep], run_e[:keep])
        if keep < run_s.shape[0]:
            self.run = (a[keep:], big_e[keep:], run_s[keep:], run_e[keep:])

    def _unmixed(self, s: np.ndarray, pure: np.ndarray) -> None:
        """:meth:`_groups` of complete groups none of which is mixed (``pure``: error-only,
        else right-only), the last not ``last``: one reduction per maximal run of equal
        ``pure`` instead of running sums over every group (the weights are integers, so the
        sums are exact in any order)."""
        if s.shape[0] == 0:
            return
        seg = np.flatnonzero(np.r_[True, pure[1:] != pure[:-1]])
        sums = np.add.reduceat(s, seg, axis=0)  # [S, C] weight per run
        seg_pure = pure[seg]
        err = sums * seg_pure[:, None]  # error weight per run
        before = self.total + np.cumsum(sums, 0) - sums
        errors_before = self.errors + np.cumsum(err, 0) - err
        self.total = self.total + sums.sum(0)
        self.errors = self.errors + err.sum(0)
        if not seg_pure[0]:
            self._close_run()
        if not seg_pure.any():
            return
        a, big_e, run_s = before[seg_pure], errors_before[seg_pure], sums[seg_pure]
        run_e = run_s.copy()
        if seg_pure[0] and self.run is not None:  # the open run goes on
            a[0], big_e[0] = self.run[0][0], self.run[1][0]
            run_s[0] += self.run[2][0]
            run_e[0] += self.run[3][0]
            self.run = None
        keep = run_s.shape[0] - (1 if seg_pure[-1] else 0)
        if keep:
            self._units(a[:keep], big_e[:keep], run_s[:keep], run_e[:keep])
        if keep < run_s.shape[0]:
            self.run = (a[keep:], big_e[keep:], run_s[keep:], run_e[keep:])

    def _close_run(self) -> None:
        if self.run is not None:
            self._units(*self.run)
            self.run = None

    def _units(self, a, big_e, s, e) -> None:
        """Add the terms of units with weight ``a`` and error weight ``big_e`` before them,
        weight ``s`` and error weight ``e`` in them (``[units, C]`` each)."""
        self.auroc += np.einsum("ij,ij->j", e, a - big_e + 0.5 * (s - e))
        share = np.divide(e, s, out=np.zeros_like(e), where=s > 0)
        self.spread += np.einsum("ij,ij->j", e, _harmonic(a + s) - 1.0)
        self.spread += np.einsum("ij,ij->j", share * a, _harmonic_gap(a, s))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if self.group is not None:
            _, gs, ge, gn, gerr = self.group
            self._groups(gs, ge, gn, gerr, last=True)
            self.group = None
        self._close_run()
        w, big_e = self.total, self.errors
        with np.errstate(invalid="ignore", divide="ignore"):
            auroc = self.auroc / (big_e * (w - big_e))
            aurc = (big_e * _harmonic(w) - self.spread) / w
        return auroc, aurc
