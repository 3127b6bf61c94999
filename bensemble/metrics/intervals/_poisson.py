r"""Counter-based Poisson(1) bootstrap weights: a pure function of (seed, sample, replicate).

The Poisson bootstrap gives every sample ``i`` an independent weight ``w[i, r] ~ Poisson(1)`` in
replicate ``r`` instead of resampling ``n`` points with replacement (the multinomial counts of
the classical bootstrap converge to independent Poisson(1) counts as ``n`` grows). Because the
weights are independent across samples, a weighted sum over the data is a sum over chunks, so a
replicate is accumulated in the same mergeable float64 states as the metric itself.

Here the weight is *computed*, not drawn from a stream: a 64-bit integer hash of
``(seed, global sample index, replicate)`` gives a uniform number, and the inverse CDF of
Poisson(1) turns it into a count. Splitting the data into chunks, shards or workers therefore
never changes a weight (nor an interval), and replicate ``r`` is the same whatever the number of
replicates asked for (``poisson_weights(i, 100)`` is the first 100 columns of
``poisson_weights(i, 200)``).

The generator (all arithmetic on numpy ``uint64``, where multiplication wraps modulo ``2**64``):

* ``mix(z)``: the splitmix64 finaliser ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
  z *= 0x94D049BB133111EB; z ^= z >> 31`` (a bijection of 64-bit words with full avalanche);
* ``key = mix(seed ^ C)``; sample keys ``a_i = mix(key + (i + 1) G)``; replicate-pair keys
  ``b_j = mix(mix(key ^ C') + (j + 1) G)`` (``G`` the golden-ratio increment of splitmix64);
* ``h[i, j] = mix(a_i ^ b_j)``; its low 32 bits are the uniform ``u[i, 2j]``, its high 32 bits
  ``u[i, 2j + 1]``;
* ``w = #{k : u >= T_k}`` with ``T_k = round(2**32 F(k))``, ``F`` the Poisson(1) CDF: one lookup
  in a 65,536-entry table on the top 16 bits of ``u`` plus one comparison with the threshold
  inside that cell (the rare ``u`` of the top cell, which holds several thresholds, are counted
  exactly). Weights stop at 12: ``P(Poisson(1) > 12) = 6e-11`` is below the 32-bit resolution.

Cost: about 7 ns of CPU per weight (10^6 samples x 200 replicates in about 1.4 s on one core,
``benchmarks/bench_interval_coverage.py --weights``), computed in cache-sized blocks.
"""

from __future__ import annotations

import secrets
import sys
from typing import Any

import numpy as np
import torch

from bensemble._validation import to_tensor

__all__ = ["poisson_weights", "resolve_seed", "weight_block", "POISSON_THRESHOLDS"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SEED_SALT, _REPLICATE_SALT = 0x5DEECE66D1CE4E5B, 0x2545F4914F6CDD1D
_U = np.uint64

#: ``round(2**32 * F(k))`` for ``k = 0..11``, ``F`` the Poisson(1) CDF (a test recomputes them
#: with scipy): a weight is the number of thresholds at or below its 32-bit uniform.
POISSON_THRESHOLDS = np.array(
    [
        1580030169,
        3160060337,
        3950075422,
        4213413783,
        4279248374,
        4292415292,
        4294609778,
        4294923276,
        4294962463,
        4294966817,
        4294967253,
        4294967292,
    ],
    dtype=np.uint32,
)
_TOP_CELL = np.uint32(0xFFFF0000)
_BLOCK_WORDS = 1 << 14  # 64-bit hashes per cache block (128 KiB, plus temporaries)


def _mix_scalar(z: int) -> int:
    """The splitmix64 finaliser on a Python int (exact, no numpy scalar overflow warnings)."""
    z &= _MASK
    z ^= z >> 30
    z = (z * _M1) & _MASK
    z ^= z >> 27
    z = (z * _M2) & _MASK
    return z ^ (z >> 31)


def _mix(z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser in place on a uint64 array (``tmp``: scratch of its shape)."""
    np.right_shift(z, _U(30), out=tmp)
    z ^= tmp
    z *= _U(_M1)
    np.right_shift(z, _U(27), out=tmp)
    z ^= tmp
    z *= _U(_M2)
    np.right_shift(z, _U(31), out=tmp)
    z ^= tmp
    return z


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """``base[c]``: thresholds at or below the first value of 16-bit cell ``c``; ``inner[c]``:
    the first threshold inside the cell (``2**32 - 1`` if none; exact for every cell but the
    top one, handled apart)."""
    starts = np.arange(1 << 16, dtype=np.uint64) << _U(16)
    thresholds = POISSON_THRESHOLDS.astype(np.uint64)
    base = np.searchsorted(thresholds, starts, side="right").astype(np.uint8)
    first_above = np.searchsorted(thresholds, starts, side="right")
    inner = np.full(1 << 16, 0xFFFFFFFF, dtype=np.uint32)
    has = first_above < thresholds.size
    candidate = thresholds[np.minimum(first_above, thresholds.size - 1)]
    inside = has & (candidate <= starts + _U(0xFFFF))
    inner[inside] = candidate[inside].astype(np.uint32)
    return base, inner


_BASE, _INNER = _tables()


def resolve_seed(seed: Any, fn: str) -> int:
    """A seed in ``[0, 2**64)``; ``None`` draws a fresh one (resolve once, then reuse it)."""
    if seed is None:
        return secrets.randbits(63)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"{fn}: `seed` must be an integer in [0, 2**64) or None (got {seed!r})")
    return int(seed)


def _replicate_keys(seed: int, n_replicates: int, first_pair: int = 0) -> np.ndarray:
    """``b_j`` for the ``ceil(R / 2)`` replicate pairs from pair ``first_pair`` on (uint64)."""
    key = _mix_scalar(_mix_scalar(seed ^ _SEED_SALT) ^ _REPLICATE_SALT)
    pairs = (n_replicates + 1) // 2
    j = np.arange(first_pair + 1, first_pair + pairs + 1, dtype=np.uint64)
    b = (j * _U(_GOLDEN)) + _U(key)
    return _mix(b, np.empty_like(b))


def _sample_keys(seed: int, index: np.ndarray) -> np.ndarray:
    """``a_i`` for uint64 global indices ``index [c]``."""
    key = _mix_scalar(seed ^ _SEED_SALT)
    a = (index + _U(1)) * _U(_GOLDEN) + _U(key)
    return _mix(a, np.empty_like(a))


def weight_block(
    index: np.ndarray,
    n_replicates: int,
    seed: int,
    out: np.ndarray | None = None,
    *,
    first_replicate: int = 0,
) -> np.ndarray:
    """Poisson(1) counts ``[c, n_replicates]`` (uint8) of the uint64 global ``index [c]``.

    The kernel of :func:`poisson_weights`, without validation (``seed`` an int in
    ``[0, 2**64)``, ``index`` a uint64 array). ``out`` may pass a C-contiguous uint8 buffer of
    the result's shape. ``first_replicate`` (even) starts at that replicate: column ``j`` is
    replicate ``first_replicate + j``.
    """
    c = index.shape[0]
    if out is None:
        out = np.empty((c, n_replicates), dtype=np.uint8)
    if c == 0 or n_replicates == 0:
        return out
    if first_replicate % 2:
        raise ValueError(f"weight_block: `first_replicate` must be even (got {first_replicate})")
    b = _replicate_keys(seed, n_replicates, first_replicate // 2)
    a = _sample_keys(seed, index)
    pairs = b.shape[0]
    rows = max(1, _BLOCK_WORDS // pairs)
    h = np.empty((min(rows, c), pairs), dtype=np.uint64)
    tmp, cell = np.empty_like(h), np.empty((h.shape[0], 2 * pairs), dtype=np.uint32)
    even = 2 * pairs == n_replicates
    wide = out if even else np.empty((min(rows, c), 2 * pairs), dtype=np.uint8)
    for start in range(0, c, rows):
        stop = min(c, start + rows)
        m = stop - start
        hh, tt, cc = h[:m], tmp[:m], cell[:m]
        np.bitwise_xor(a[start:stop, None], b[None, :], out=hh)
        _mix(hh, tt)
        u = _as_words(hh)  # [m, 2 pairs]: low word first, then high word
        dest = out[start:stop] if even else wide[:m]
        poisson_counts(u, dest, cc)
        if not even:
            out[start:stop] = dest[:, :n_replicates]
    return out


def poisson_counts(u: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Inverse CDF of Poisson(1) on 32-bit uniforms: ``out = #{k : u >= T_k}`` (uint8).

    ``u``, ``out`` and ``scratch`` (uint32) share one shape. One table lookup on the top 16 bits,
    one comparison with the threshold inside the cell, and an exact count for the rare ``u`` of
    the top cell (which holds several thresholds).
    """
    np.right_shift(u, np.uint32(16), out=scratch)
    np.take(_BASE, scratch, out=out)
    np.take(_INNER, scratch, out=scratch)
    out += u >= scratch
    top = u >= _TOP_CELL
    if top.any():
        out[top] = np.searchsorted(POISSON_THRESHOLDS, u[top], side="right")
    return out


def _as_words(h: np.ndarray) -> np.ndarray:
    """``h [m, p]`` uint64 as ``[m, 2p]`` uint32 words, the low word of each first."""
    if sys.byteorder == "little":
        return h.view(np.uint32)
    words = np.empty((h.shape[0], 2 * h.shape[1]), dtype=np.uint32)  # pragma: no cover
    words[:, 0::2] = h & _U(0xFFFFFFFF)  # pragma: no cover
    words[:, 1::2] = h >> _U(32)  # pragma: no cover
    return words  # pragma: no cover


def sample_indices(sample_index: Any, fn: str) -> np.ndarray:
    """Validated global indices as a uint64 array ``[c]`` (a ``range`` or a 1-D integer array)."""
    if isinstance(sample_index, range):
        if sample_index.step != 1 or sample_index.start < 0:
            raise ValueError(
                f"{fn}: `sample_index` must be a range of consecutive non-negative rows "
                f"(got {sample_index!r})"
            )
        return np.arange(sample_index.start, sample_index.stop, dtype=np.uint64)
    t = to_tensor(sample_index, "sample_index", fn)
    if t.numel() == 0 and t.ndim == 1:
        return np.empty(0, dtype=np.uint64)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{fn}: `sample_index` must have an integer dtype (got {t.dtype})")
    if t.ndim != 1:
        raise ValueError(f"{fn}: `sample_index` must be 1-D [c] (got shape {tuple(t.shape)})")
    t = t.to(torch.int64).cpu()
    if t.numel() and int(t.min()) < 0:
        raise ValueError(f"{fn}: `sample_index` must be >= 0 (got {int(t.min())})")
    return t.numpy().astype(np.uint64)


def poisson_weights(sample_index: Any, n_replicates: int, *, seed: int | None = 0) -> torch.Tensor:
    """Poisson(1) bootstrap weights of the given samples, a pure function of (seed, index, r).

    Args:
        sample_index: the *global* row numbers of the samples: a ``range(start, stop)`` or a
            1-D integer array / tensor ``[c]`` (non-negative, any order, repeats allowed).
        n_replicates: number of replicates ``R >= 1``; replicate ``r`` does not depend on ``R``.
        seed: integer in ``[0, 2**64)``; ``None`` draws a fresh seed (then two calls, and two
            chunks, get unrelated weights: resolve the seed once for a chunked computation).

    Returns:
        ``[c, R]`` float64 tensor of counts (mean 1, variance 1, independent across samples and
        replicates).

    Example:
        >>> w = poisson_weights(range(0, 4), 3, seed=0)
        >>> w.shape, bool((poisson_weights(range(2, 4), 3, seed=0) == w[2:]).all())
        (torch.Size([4, 3]), True)
    """
    fn = "poisson_weights"
    if isinstance(n_replicates, bool) or not isinstance(n_replicates, (int, np.integer)):
        raise ValueError(f"{fn}: `n_replicates` must be an integer >= 1 (got {n_replicates!r})")
    if not 1 <= n_replicates <= MAX_REPLICATES:
        raise ValueError(
            f"{fn}: `n_replicates` must be an integer in [1, {MAX_REPLICATES}] "
            f"(got {n_replicates!r})"
        )
    index = sample_indices(sample_index, fn)
    s = resolve_seed(seed, fn)
    counts = weight_block(index, int(n_replicates), s)
    return torch.from_numpy(counts.astype(np.float64))


#: Most replicates accepted (a state holds ``R + 1`` rows per statistic).
MAX_REPLICATES = 100_000
