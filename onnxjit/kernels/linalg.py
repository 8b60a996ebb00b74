"""Gemm and MatMul kernels: BLAS (`kernels.blas.gemm` on strided blocks, `np.dot`; float32 stays float32), and
the activation epilogue they and the convolution kernels share.

Each kernel fills its share [start, end) of blocks into a preallocated output and releases the GIL, so the
caller spreads the blocks over onnxjit's threads, each block a single-threaded BLAS call (see
`single_threaded_blas`). BLAS's own threads are not used: they synchronize by spinning, and a GEMM whose two
threads did not both get a core (a busy machine, or another pool still spinning: numpy's BLAS and scipy's are
two) took a whole scheduler slice, 16-20 ms instead of 0.2 ms for a 128x384x384 product; blocks taken
dynamically finish on whichever threads run. A GEMM is cut into blocks of columns first (each block packs its
share of B and all of A, the activations, usually the smaller), then of rows where the columns are too few.

Epilogue: each kernel takes an activation code `kind` (an index into ACTIVATIONS, 0 for none) and its constants
`act` = (alpha, beta, 0, 1) in the output's dtype, and applies it to each output row right after writing it,
while the row is still in cache (the com.onnxjit FusedConv / FusedGemm / FusedMatMul ops). The formulas are
those the elementwise fuser renders for the standalone ops (onnxjit/fuser/exprs.py), so a fused activation
rounds as the unfused one.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import blas, packed_gemm, vmath
from onnxjit.kernels.simd import LANES, vfma, vload, vsplat, vsum
from onnxjit.kernels.views import u64 as _u

# activation codes: a kernel's `kind` is the index here; the names are the ONNX op types
ACTIVATIONS = ("Identity", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "Elu", "Selu",
               "HardSwish", "Softplus", "ThresholdedRelu", "Swish")
(IDENTITY, RELU, LEAKY_RELU, SIGMOID, TANH, CLIP, HARD_SIGMOID, ELU, SELU, HARD_SWISH, SOFTPLUS,
 THRESHOLDED_RELU, SWISH) = range(len(ACTIVATIONS))


@functools.lru_cache(maxsize=256)
def activation_consts(alpha, beta, dtype):
    """The `act` array the kernels take: (alpha, beta, 0, 1) in the output dtype (so the math stays in it); one
    read-only array per set of constants, made once."""
    a = np.array([alpha, beta, 0, 1], dtype=dtype)
    a.flags.writeable = False
    return a


@njit(cache=True, nogil=True)
def activate(y, j0, j1, kind, act):
    """y[j0:j1] = activation(y[j0:j1]) in place, for the activation code `kind` and its constants `act`
    (alpha, beta, 0, 1): Clip takes (min, max), HardSigmoid and HardSwish (alpha, beta) of alpha * v + beta,
    Selu (alpha, gamma), LeakyRelu / Elu / ThresholdedRelu / Swish alpha. One branch per call; each loop
    vectorizes.

    Where an activation keeps v as it is (Relu of v >= 0, ...), it writes v + zero (zero = act[2], a run-time
    value LLVM cannot fold away): writing v itself back is a store LLVM drops, and the loop's store becomes a
    masked one (vmaskmovps), which on AMD Zen 3 ran Relu over 12,544 floats in 8.7 us instead of 2.2."""
    a, b, zero, one = act[0], act[1], act[2], act[3]
    if kind == RELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = zero if v < zero else v + zero  # NaN stays NaN, as in onnxruntime
    elif kind == LEAKY_RELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v + zero if v >= zero else v * a
    elif kind == SIGMOID:
        for j in range(j0, j1):
            y[_u(j)] = vmath.sigmoid(y[_u(j)])
    elif kind == TANH:
        for j in range(j0, j1):
            y[_u(j)] = vmath.tanh(y[_u(j)])
    elif kind == CLIP:
        for j in range(j0, j1):
            y[_u(j)] = min(max(y[_u(j)], a), b) + zero
    elif kind == HARD_SIGMOID:
        for j in range(j0, j1):
            t = a * y[_u(j)] + b
            t = one if t > one else t
            y[_u(j)] = zero if t < zero else t
    elif kind == ELU:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v + zero if v >= zero else a * vmath.expm1(v)
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
            y[_u(j)] = v + zero if v > a else zero
    elif kind == SWISH:
        for j in range(j0, j1):
            v = y[_u(j)]
            y[_u(j)] = v * vmath.sigmoid(a * v)


@njit(cache=True, nogil=True, forceinline=True)
def activate_rows(of, first, row_len, rows, start, width, kind, act):
    """`activate` over `rows` rows of the flat array of, row_len apart from of[first], the `width` values from
    `start` in each: in one call where the rows are whole (a call per row cost 40-70 ns: 1,280 HardSwish rows of a
    7x7 conv output took 38.6 us, one call 9.6)."""
    if width == row_len:
        activate(of, first, first + rows * row_len, kind, act)
    else:
        for r in range(rows):
            j0 = first + r * row_len + start
            activate(of, j0, j0 + width, kind, act)


@njit(cache=True, nogil=True)
def gemm_blocks(a, b, trans_b, c, alpha, beta, has_c, kind, act, rows, cols, out, blk0, blk1):
    """out = activation(alpha * a @ op(b) + beta * c) for the blocks [blk0, blk1) of `rows` rows by `cols`
    columns (row-block major); a (M, K) C-contiguous, b (K, N), or (N, K) when `trans_b`; c C-contiguous of shape
    (1 or M, 1 or N), broadcast as it is read (a broadcast view's zero strides kept its row loop scalar).
    Each block is one BLAS call writing its block of `out` in place (blas.gemm on strided views), then the
    epilogue over it while it is in cache."""
    m, n = out.shape
    n_cb = (n + cols - 1) // cols
    for blk in range(blk0, blk1):
        m0 = (blk // n_cb) * rows
        n0 = (blk % n_cb) * cols
        m1 = min(m, m0 + rows)
        n1 = min(n, n0 + cols)
        y = out[m0:m1, n0:n1]
        if trans_b:
            blas.gemm(a[m0:m1], b[n0:n1], y, alpha, 0.0, False, True)
        else:
            blas.gemm(a[m0:m1], b[:, n0:n1], y, alpha, 0.0, False, False)
        _finish_block(out, c, beta, has_c, kind, act, m0, m1, n0, n1)


@njit(cache=True, nogil=True)
def gemm_packed_blocks(a, bp, n, c, alpha, beta, has_c, kind, act, rows, cols, chunk_blocks, out, blk0, blk1):
    """gemm_blocks for float32 with B packed once (packed_gemm.pack_blocks of op(b), (K, N)) and multiplied by
    packed_gemm's microkernel; `cols` a multiple of packed_gemm's LANES; a row C (1, N) added, and Relu and Clip
    applied, in its registers where A is read in place (alpha 1; 0.94-0.97x the time of an epilogue pass with Relu,
    one Emerald Rapids thread), else Relu and Clip there only without C."""
    m, kk = a.shape
    n_cb = (n + cols - 1) // cols
    # a row C (a Linear layer's bias) is added in the microkernel's registers where it reads A in place, and then
    # a Relu or Clip clamps there too: no pass over the output after
    row_c = has_c and alpha == 1.0 and c.shape[0] == 1 and c.shape[1] == n
    cb = np.zeros(bp.shape[0] * packed_gemm.LANES, dtype=np.float32)
    if row_c:
        bt = np.float32(beta)
        for j in range(n):
            cb[j] = bt * c[0, j]
    c_after = has_c and not row_c
    lo, hi, kind = register_clamp(kind, act, c_after)
    scratch = np.empty(packed_gemm.prepacked_scratch_size(kk, rows), dtype=np.float32)
    of = out.reshape(-1)
    for blk in range(blk0, blk1):
        m0 = (blk // n_cb) * rows
        n0 = (blk % n_cb) * cols
        m1 = min(m, m0 + rows)
        n1 = min(n, n0 + cols)
        packed_gemm.gemm_prepacked(a, m0, m1, np.float32(alpha), bp, n0 // packed_gemm.LANES, n1 - n0, chunk_blocks,
                                   cb, of, m0 * n + n0, n, scratch, lo, hi)
        if c_after or kind != IDENTITY:
            _finish_block(out, c, beta, c_after, kind, act, m0, m1, n0, n1)


@njit(cache=True, nogil=True, forceinline=True)
def register_clamp(kind, act, added_after):
    """(lo, hi, kind left for the epilogue) of packed_gemm's in-register clamp: a Relu or Clip becomes the float32
    bounds and leaves IDENTITY, unless a term is `added_after` the product (a residual, Gemm's C), which the
    activation must follow; any other activation keeps (-inf, inf) and stays for the epilogue."""
    lo, hi = -np.inf, np.inf
    if not added_after and (kind == RELU or kind == CLIP):
        lo, hi = (0.0, np.inf) if kind == RELU else (act[0], act[1])
        kind = IDENTITY
    return np.float32(lo), np.float32(hi), kind


@njit(cache=True, nogil=True, forceinline=True)
def _finish_block(out, c, beta, has_c, kind, act, m0, m1, n0, n1):
    """out[m0:m1, n0:n1] += beta * c (broadcast as it lies), then the activation; in out's dtype (beta, a Python
    float, made float32 sums go through float64)."""
    bt = out.dtype.type(beta)
    if has_c:
        for i in range(m0, m1):
            yr = out[i]
            cr = c[0] if c.shape[0] == 1 else c[i]
            if c.shape[1] == 1:
                cv = bt * cr[0]
                for j in range(n0, n1):
                    yr[_u(j)] += cv
            else:
                for j in range(n0, n1):
                    yr[_u(j)] += bt * cr[_u(j)]
    if kind != IDENTITY:
        n = out.shape[1]
        activate_rows(out.reshape(-1), m0 * n, n, m1 - m0, n0, n1 - n0, kind, act)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def dot_cols(a, bt, c, alpha, beta, has_c, kind, act, cols, out, blk0, blk1):
    """As gemm_blocks over blocks of columns (`cols` each, bt (N, K)), for very few rows: each output is its own
    dot product over K in one fixed order, the same for every column. A BLAS call per block of columns rounds the
    last, narrower block differently; then equal columns (a layer whose weight rows are equal) come out unequal,
    and a softmax after them turns a 1-ulp difference into a wrong answer where onnxruntime gives equal outputs."""
    m, kk = a.shape
    n = bt.shape[0]
    zero = out.dtype.type(0)  # the sum in out's dtype: ar[0] * br[0] * 0 made it float64 for float32 operands
    for blk in range(blk0, blk1):
        n0 = blk * cols
        n1 = min(n, n0 + cols)
        for i in range(m):
            ar = a[i]
            for j in range(n0, n1):
                br = bt[j]
                acc = zero
                for t in range(kk):
                    acc += ar[t] * br[t]
                y = alpha * acc
                if has_c:
                    y += beta * c[0 if c.shape[0] == 1 else i, 0 if c.shape[1] == 1 else j]
                out[i, j] = y
            if kind != IDENTITY:
                activate(out[i], n0, n1, kind, act)


@njit(cache=True, nogil=True)
def dot_cols_f32(a, bt, c, alpha, beta, has_c, kind, act, cols, out, blk0, blk1):
    """dot_cols for float32, each dot product in vectors of LANES (kernels.simd): lane l sums the products at
    t = l mod LANES, the lanes are added in vsum's fixed order and the tail after them, the same order for every
    output, so equal columns still come out equal. The scalar loop is one chain of dependent adds (strict float
    order: LLVM keeps it scalar): a 1x576 @ 576x144 product (a squeeze-excitation conv) ran at 1.5 GFLOP/s.
    Four columns share each load of a's vector."""
    m, kk = a.shape
    n = bt.shape[0]
    af = a.reshape(-1)
    bf = bt.reshape(-1)
    body = kk - kk % LANES
    zero = np.float32(0)
    for blk in range(blk0, blk1):
        n0 = blk * cols
        n1 = min(n, n0 + cols)
        for i in range(m):
            a0 = _u(i * kk)
            j = n0
            while j < n1:
                w = min(4, n1 - j)
                b0 = _u(j * kk)
                b1 = _u(min(j + 1, n1 - 1) * kk)
                b2 = _u(min(j + 2, n1 - 1) * kk)
                b3 = _u(min(j + 3, n1 - 1) * kk)
                s0 = vsplat(zero)
                s1 = vsplat(zero)
                s2 = vsplat(zero)
                s3 = vsplat(zero)
                for t in range(0, body, LANES):
                    av = vload(af, a0 + _u(t))
                    s0 = vfma(av, vload(bf, b0 + _u(t)), s0)
                    s1 = vfma(av, vload(bf, b1 + _u(t)), s1)
                    s2 = vfma(av, vload(bf, b2 + _u(t)), s2)
                    s3 = vfma(av, vload(bf, b3 + _u(t)), s3)
                sums = (vsum(s0), vsum(s1), vsum(s2), vsum(s3))
                bases = (b0, b1, b2, b3)
                for q in range(w):
                    acc = sums[q]
                    for t in range(body, kk):
                        acc += af[a0 + _u(t)] * bf[bases[q] + _u(t)]
                    y = alpha * acc
                    if has_c:
                        y += beta * c[0 if c.shape[0] == 1 else i, 0 if c.shape[1] == 1 else j + q]
                    out[i, j + q] = y
                j += w
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

# OpenBLAS runs a GEMM of at most this many multiply-adds on the calling thread alone (SMP_THRESHOLD_MIN *
# GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c): below it, setting its thread count (two to four calls into
# it, 3-5 us: most of a small MatMul step) changes nothing
BLAS_SERIAL_WORK = 1 << 18


def matmul_on_this_thread(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's a @ b (2-D) in blocks of b's columns small enough (BLAS_SERIAL_WORK) that numpy's OpenBLAS runs each
    on the calling thread: once woken, its threads spin about 0.1 s on the other cores, where onnxjit's pinned
    workers then share theirs (a squeezenet's first 7-10 runs took 1.6-2x as long after the Winograd weights'
    transform woke them). For the small products of weight preparation, not for real GEMMs."""
    cols = max(1, BLAS_SERIAL_WORK // max(1, a.shape[0] * a.shape[1]))
    if b.shape[1] <= cols:
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
    for j in range(0, b.shape[1], cols):
        np.matmul(a, b[:, j:j + cols], out=out[:, j:j + cols])
    return out


def single_threaded_blas_for(work):
    """`single_threaded_blas` around a job of `work` multiply-adds (or more) in BLAS calls, or no context where
    the job is too small for BLAS to start its threads."""
    return single_threaded_blas if work > BLAS_SERIAL_WORK else contextlib.nullcontext()
