"""Gemm and MatMul kernels: BLAS through `np.dot` (float32 stays float32)."""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True)
def gemm(a, b, c, alpha, beta, has_c):
    """alpha * a @ b + beta * c; a (M, K) and b (K, N) may be transposed views, c is broadcast to (M, N)."""
    y = np.dot(a, b)
    m, n = y.shape
    if has_c:
        for i in range(m):
            for j in range(n):
                y[i, j] = alpha * y[i, j] + beta * c[i, j]
    elif alpha != 1.0:
        for i in range(m):
            for j in range(n):
                y[i, j] = alpha * y[i, j]
    return y


@njit(cache=True)
def matmul2d(a, b):
    return np.dot(a, b)


@njit(cache=True)
def matmul_batched(a, b):
    """(B, M, K) @ (B, K, N) -> (B, M, N), one BLAS call per batch entry."""
    nb, m, _ = a.shape
    n = b.shape[2]
    out = np.empty((nb, m, n), dtype=a.dtype)
    for i in range(nb):
        np.dot(a[i], b[i], out[i])
    return out


@njit(cache=True, parallel=True)
def matmul_batched_parallel(a, b):
    """matmul_batched with the batch spread over the threads (BLAS single-threaded meanwhile)."""
    nb, m, _ = a.shape
    n = b.shape[2]
    out = np.empty((nb, m, n), dtype=a.dtype)
    for i in prange(nb):
        np.dot(a[i], b[i], out[i])
    return out


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
        import threading
        self._lock = threading.Lock()
        self._users = 0
        self._saved = 1
        self._fns = None
        self._looked = False

    def __enter__(self):
        with self._lock:
            if not self._looked:
                self._fns, self._looked = _blas_thread_functions(), True
            if self._fns is not None:
                if self._users == 0:
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
