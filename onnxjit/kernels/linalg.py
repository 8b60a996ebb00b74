"""Gemm and MatMul kernels: BLAS through `np.dot` (float32 stays float32).

Each kernel fills its share [start, end) of blocks into a preallocated output and releases the GIL, so the
caller can spread the blocks over threads, each block a single-threaded BLAS call (see `single_threaded_blas`):
a BLAS thread pool spinning next to other threads makes both crawl on a small machine.
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, inline="always")
def _epilogue(y, c, c_row0, c_col0, alpha, beta, has_c):
    """y = alpha * y + beta * c[c_row0:, c_col0:] (c already broadcast to the full output)."""
    m, n = y.shape
    if has_c:
        for i in range(m):
            yr = y[i]
            cr = c[c_row0 + i]
            for j in range(n):
                yr[_u(j)] = alpha * yr[_u(j)] + beta * cr[c_col0 + j]
    elif alpha != 1.0:
        for i in range(m):
            yr = y[i]
            for j in range(n):
                yr[_u(j)] = alpha * yr[_u(j)]


@njit(cache=True, nogil=True)
def gemm_rows(a, b, c, alpha, beta, has_c, rows, out, blk0, blk1):
    """out = alpha * a @ b + beta * c for the blocks [blk0, blk1) of `rows` rows; a (M, K) and b (K, N)
    C-contiguous, c broadcast to (M, N)."""
    m = a.shape[0]
    for blk in range(blk0, blk1):
        m0 = blk * rows
        m1 = min(m, m0 + rows)
        if m0 < m1:
            y = out[m0:m1]
            np.dot(a[m0:m1], b, y)
            _epilogue(y, c, m0, 0, alpha, beta, has_c)


@njit(cache=True, nogil=True)
def gemm_cols(a, bt, c, alpha, beta, has_c, cols, out, blk0, blk1):
    """out = alpha * a @ bt.T + beta * c for the blocks [blk0, blk1) of `cols` columns; a (M, K) and bt (N, K)
    C-contiguous, c broadcast to (M, N). For few rows, as a batch-1 fully connected layer."""
    m = a.shape[0]
    n = bt.shape[0]
    at = a.T
    for blk in range(blk0, blk1):
        n0 = blk * cols
        n1 = min(n, n0 + cols)
        if n0 < n1:
            y = np.dot(bt[n0:n1], at).T.copy()  # (M, n1 - n0)
            _epilogue(y, c, 0, n0, alpha, beta, has_c)
            for i in range(m):
                orow = out[i]
                yr = y[i]
                for j in range(n1 - n0):
                    orow[_u(n0 + j)] = yr[_u(j)]


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def dot_cols(a, bt, c, alpha, beta, has_c, cols, out, blk0, blk1):
    """As gemm_cols, for very few rows: each output is its own dot product over K in one fixed order, the same
    for every column. A BLAS call per block of columns rounds the last, narrower block differently; then equal
    columns (a layer whose weight rows are equal) come out unequal, and a softmax after them turns a 1-ulp
    difference into a wrong answer where onnxruntime gives equal outputs."""
    m, kk = a.shape
    n = bt.shape[0]
    for blk in range(blk0, blk1):
        n0 = blk * cols
        n1 = min(n, n0 + cols)
        for i in range(m):
            ar = a[i]
            for j in range(n0, n1):
                br = bt[j]
                acc = ar[0] * br[0] * 0
                for t in range(kk):
                    acc += ar[t] * br[t]
                y = alpha * acc
                if has_c:
                    y += beta * c[i, j]
                out[i, j] = y


@njit(cache=True, nogil=True)
def matmul_batched(a, b, out, i0, i1):
    """out[i] = a[i] @ b[i] for i in [i0, i1); a (B, M, K), b (B, K, N) C-contiguous."""
    for i in range(i0, i1):
        np.dot(a[i], b[i], out[i])


# --- the BLAS that numba's np.dot calls (scipy's): its thread count ---------------------------------------------
def _blas_thread_functions():
    """(get, set) of the thread count of the BLAS behind scipy.linalg.cython_blas (which numba's np.dot uses),
    or None when it is not an OpenBLAS whose count can be set."""
    try:
        import ctypes

        import scipy.linalg.cython_blas as cython_blas
        lib = ctypes.CDLL(cython_blas.__file__)
    except Exception:  # noqa: BLE001 - no scipy BLAS to tune: kernels still run
        return None
    for prefix in ("scipy_openblas_", "openblas_"):
        get = getattr(lib, prefix + "get_num_threads", None)
        set_ = getattr(lib, prefix + "set_num_threads", None)
        if get is not None and set_ is not None:
            get.restype = ctypes.c_int
            set_.argtypes = [ctypes.c_int]
            return get, set_
    return None


class _SingleThreadedBlas:
    """Context: BLAS single-threaded while kernels that parallelize over GEMMs themselves run (nested BLAS
    threads would oversubscribe the cores). Re-entrant and shared across threads: the count is restored when
    the last user leaves."""

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._saved = 1
        self._fns = None
        self._looked = False

    def __enter__(self):
        with self._lock:
            if not self._looked:
                self._fns, self._looked = _blas_thread_functions(), True
            if self._fns is not None and self._users == 0:
                self._saved = self._fns[0]()
                if self._saved != 1:
                    self._fns[1](1)
            self._users += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._users -= 1
            if self._fns is not None and self._users == 0 and self._saved != 1:
                self._fns[1](self._saved)
        return False


single_threaded_blas = _SingleThreadedBlas()
