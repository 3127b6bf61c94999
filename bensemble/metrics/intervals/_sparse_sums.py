r"""Per-row weighted sums of sparse per-sample entries: the replicate states' one product.

A chunk of ``m`` samples has ``E`` entries each (``rows [m, E]`` into a state of ``n_rows`` rows,
``values [m, E]``) and ``R'`` weights each (``weights [m, R']``); the replicate sums are

    into[j, r] += sum_i sum_e values[i, e] weights[i, r] [rows[i, e] = j]

a sparse ``[n_rows, m]`` design times the dense weights. The design is built as CSC (one column
per sample: no sort), turned into CSR by one counting sort and multiplied as CSR (each output row
gathers whole weight rows: about 3x faster than the CSC scatter when a sample has many entries,
as the EECE's ``K (H + 4)``). Both steps call scipy's compiled kernels directly
(``csr_tocsc``, ``csr_matvecs`` / ``csc_matvecs``, which accumulate into ``into``): the sparse
matrix classes around them checked and copied the arrays on every call, a third of the product's
own time for the EECE's ``K M (H + 4)`` rows (``bench_streaming.py --only evaluate``), and the
product adds straight into ``into`` (no ``[n_rows, R']`` temporary).
"""

from __future__ import annotations

import numpy as np

__all__ = ["add_sparse_sums", "sparse_sums"]

_INT32_MAX = np.iinfo(np.int32).max


def sparse_sums(
    rows: np.ndarray, values: np.ndarray, n_rows: int, weights: np.ndarray
) -> np.ndarray:
    """``out[j, r] = sum_i sum_e values[i, e] weights[i, r] [rows[i, e] = j]`` -> ``[n_rows, R']``.

    ``rows, values [m, E]`` (E entries per sample), ``weights [m, R']`` float64
    (:func:`add_sparse_sums` into zeros).

    Example:
        >>> rows = np.array([[0], [2], [0]])
        >>> sparse_sums(rows, np.array([[1.0], [2.0], [3.0]]), 3, np.ones((3, 2))).tolist()
        [[4.0, 4.0], [0.0, 0.0], [2.0, 2.0]]
    """
    out = np.zeros((n_rows, weights.shape[1]))
    add_sparse_sums(out, rows, values, weights)
    return out


def add_sparse_sums(
    into: np.ndarray, rows: np.ndarray, values: np.ndarray, weights: np.ndarray
) -> None:
    """``into += sparse_sums(rows, values, into.shape[0], weights)``, in place (module docstring).

    Raises:
        ValueError: a row id outside ``[0, n_rows)`` (the compiled kernels do not check).
    """
    m, e = rows.shape
    n_rows, n_vecs = into.shape
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n_rows):
        raise ValueError(
            f"add_sparse_sums: `rows` must lie in [0, {n_rows - 1}] (got values in "
            f"[{int(rows.min())}, {int(rows.max())}])"
        )
    w = np.ascontiguousarray(weights, dtype=np.float64)
    kernels = _kernels()
    if kernels is None or not into.flags.c_contiguous or into.dtype != np.float64:
        into += _product(rows, values, n_rows, w)
        return
    to_csr, csr_product, csc_product = kernels
    nnz = m * e
    if nnz == 0:
        return
    index = np.int32 if max(nnz, n_rows, m) < _INT32_MAX else np.int64
    ids = np.ascontiguousarray(rows, dtype=index).reshape(-1)
    data = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    col_ptr = np.arange(0, nnz + 1, e, dtype=index)
    if e == 1:  # one entry per sample: the CSC scatter, no conversion
        csc_product(n_rows, m, n_vecs, col_ptr, ids, data, w.ravel(), into.ravel())
        return
    # the design's CSC is the CSR of its transpose; that one's CSC is the design's CSR
    row_ptr = np.empty(n_rows + 1, dtype=index)
    cols, entries = np.empty(nnz, dtype=index), np.empty(nnz)
    to_csr(m, n_rows, col_ptr, ids, data, row_ptr, cols, entries)
    csr_product(n_rows, m, n_vecs, row_ptr, cols, entries, w.ravel(), into.ravel())


def _product(rows: np.ndarray, values: np.ndarray, n_rows: int, w: np.ndarray) -> np.ndarray:
    """The same product through scipy's sparse matrices (where the kernels are absent, or
    ``into`` is not a C-contiguous float64 array)."""
    from scipy import sparse

    m, e = rows.shape
    indptr = np.arange(0, (m + 1) * e, e, dtype=np.int64)
    design = sparse.csc_matrix(
        (values.reshape(-1), rows.reshape(-1), indptr), shape=(n_rows, m), copy=False
    )
    return np.asarray((design.tocsr() if e > 1 else design) @ w)


def _kernels():
    """scipy's ``(csr_tocsc, csr_matvecs, csc_matvecs)`` (``Y += A X``), or ``None``."""
    try:
        from scipy.sparse import _sparsetools
    except ImportError:  # pragma: no cover - every scipy since 1.8 has it
        return None
    names = ("csr_tocsc", "csr_matvecs", "csc_matvecs")
    found = tuple(getattr(_sparsetools, name, None) for name in names)
    return None if None in found else found
