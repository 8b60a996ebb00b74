"""Gemm and MatMul kernels: BLAS through `np.dot` (float32 stays float32), and the activation epilogue they and
the convolution kernels share.

Each kernel fills its share [start, end) of blocks into a preallocated output and releases the GIL, so the
caller can spread the blocks over threads, each block a single-threaded BLAS call (see `single_threaded_blas`):
a BLAS thread pool spinning next to other threads makes both crawl on a small machine. A GEMM with many rows
is instead one block, one BLAS call with BLAS's own threads (`blas_threads`): row blocks each re-pack the
whole B operand, and 8 blocks of a 256x1024 @ 1024x1024 GEMM took 13-16 ms against 4.6 ms for one call.

Epilogue: each kernel takes an activation code `kind` (an index into ACTIVATIONS, 0 for none) and its constants
`act` = (alpha, beta, 0, 1) in the output's dtype, and applies it to each output row right after writing it,
while the row is still in cache (the com.onnxjit FusedConv / FusedGemm / FusedMatMul ops). The formulas are
those the elementwise fuser renders for the standalone ops (onnxjit/fuser/exprs.py), so a fused activation
rounds as the unfused one.
"""
from __future__ import annotations

import threading

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


# activation codes: a kernel's `kind` is the index here; the names are the ONNX op types
ACTIVATIONS = ("Identity", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Elu", "Selu",
               "HardSwish", "Softplus", "ThresholdedRelu")
(IDENTITY, RELU, LEAKY_RELU, SIGMOID, TANH, CLIP, HARD_SIGMOID, ELU, SELU, HARD_SWISH, SOFTPLUS,
 THRESHOLDED_RELU) = range(len(ACTIVATIONS))


def activation_consts(alpha, beta, dtype):
    """The `act` array the kernels take: (alpha, beta, 0, 1) in the output dtype (so the math stays in it)."""
    return np.array([alpha, beta, 0, 1], dtype=dtype)


@njit(cache=True, nogil=True)
def activate(y, j0, j1, kind, act):
    """y[j0:j1] = activation(y[j0:j1]) in place, for the activation code `kind` and its constants `act`
    (alpha, beta, 0, 1): Clip takes (min, max), HardSigmoid and HardSwish (alpha, beta) of alpha * v + beta,
    Selu (alpha, gamma), LeakyRelu / Elu / ThresholdedRelu alpha. One branch per call; each loop vectorizes."""
    a, b, zero, one = act[0], act[1], act[2], act[3]
    if kind == RELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = zero if v < zero else v  # NaN stays NaN, as in onnxruntime
    elif kind == LEAKY_RELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v if v >= zero else v * a
    elif kind == SIGMOID:
        for j in range(j0, j1):
            y[_u(j)] = vmath.sigmoid(y[_u(j)])
    elif kind == TANH:
        for j in range(j0, j1):
            y[_u(j)] = vmath.tanh(y[_u(j)])
    elif kind == CLIP:
        for j in range(j0, j1):
            y[_u(j)] = min(max(y[_u(j)], a), b)
    elif kind == HARD_SIGMOID:
        for j in range(j0, j1):
            t = a * y[_u(j)] + b
            t = one if t > one else t
            y[_u(j)] = zero if t < zero else t
    elif kind == ELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v if v >= zero else a * vmath.expm1(v)
    elif kind == SELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = b * (v if v > zero else a * vmath.expm1(v))
    elif kind == HARD_SWISH:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v * max(zero, min(one, a * v + b))
    elif kind == SOFTPLUS:
        for j in range(j0, j1):
            y[_u(j)] = vmath.softplus(y[_u(j)])
    elif kind == THRESHOLDED_RELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v if v > a else zero


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
def gemm_rows(a, b, c, alpha, beta, has_c, kind, act, rows, out, blk0, blk1):
    """out = activation(alpha * a @ b + beta * c) for the blocks [blk0, blk1) of `rows` rows; a (M, K) and
    b (K, N) C-contiguous, c broadcast to (M, N)."""
    m, n = out.shape
    for blk in range(blk0, blk1):
        m0 = blk * rows
        m1 = min(m, m0 + rows)
        if m0 < m1:
            y = out[m0:m1]
            np.dot(a[m0:m1], b, y)
            _epilogue(y, c, m0, 0, alpha, beta, has_c)
            if kind != IDENTITY:
                for i in range(m0, m1):
                    activate(out[i], 0, n, kind, act)


@njit(cache=True, nogil=True)
def gemm_cols(a, bt, c, alpha, beta, has_c, kind, act, cols, out, blk0, blk1):
    """out = activation(alpha * a @ bt.T + beta * c) for the blocks [blk0, blk1) of `cols` columns; a (M, K) and
    bt (N, K) C-contiguous, c broadcast to (M, N). For few rows, as a batch-1 fully connected layer."""
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
                if kind != IDENTITY:
                    activate(orow, n0, n1, kind, act)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def dot_cols(a, bt, c, alpha, beta, has_c, kind, act, cols, out, blk0, blk1):
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
            if kind != IDENTITY:
                activate(out[i], n0, n1, kind, act)


@njit(cache=True, nogil=True)
def matmul_batched(a, b, kind, act, out, i0, i1):
    """out[i] = activation(a[i] @ b[i]) for i in [i0, i1); a (B, M, K), b (B, K, N) C-contiguous."""
    m, n = out.shape[1], out.shape[2]
    for i in range(i0, i1):
        np.dot(a[i], b[i], out[i])
        if kind != IDENTITY:
            for r in range(m):
                activate(out[i, r], 0, n, kind, act)


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


class _BlasThreadCount:
    """The process-wide thread count of the BLAS behind numba's np.dot, shared by the kernels' contexts:
    `with blas_threads(n)` around one GEMM large enough for BLAS's own threads, `with single_threaded_blas`
    while a kernel spreads many GEMMs over threads itself. Contexts nest and overlap across threads; BLAS runs
    with the fewest threads any of them asks for (nested BLAS threads would oversubscribe the cores), and the
    count the process had is restored when the last leaves."""

    def __init__(self):
        self._lock = threading.Lock()
        self._wanted: list[int] = []
        self._saved = 1
        self._fns = None
        self._looked = False

    def enter(self, n: int) -> None:
        with self._lock:
            if not self._looked:
                self._fns, self._looked = _blas_thread_functions(), True
            if self._fns is None:
                return
            if not self._wanted:
                self._saved = self._fns[0]()
            self._wanted.append(n)
            self._apply(min(self._wanted))

    def leave(self, n: int) -> None:
        with self._lock:
            if self._fns is None:
                return
            self._wanted.remove(n)
            self._apply(min(self._wanted) if self._wanted else self._saved)

    def _apply(self, n: int) -> None:
        if self._fns[0]() != n:
            self._fns[1](n)


_BLAS_THREADS = _BlasThreadCount()


class blas_threads:
    """Context: the kernels' BLAS calls inside use `n` threads (fewer while another thread holds a
    single-threaded context)."""

    def __init__(self, n: int):
        self.n = max(1, int(n))

    def __enter__(self):
        _BLAS_THREADS.enter(self.n)
        return self

    def __exit__(self, *exc):
        _BLAS_THREADS.leave(self.n)
        return False


single_threaded_blas = blas_threads(1)
