"""Gemm and MatMul on the CPU provider (float32/float64), BLAS through the kernels in `onnxjit.kernels.linalg`;
com.onnxjit FusedGemm / FusedMatMul are the same builders with an activation epilogue (`Activation`).

A GEMM is split over onnxjit's threads by blocks of columns, and of rows where the columns are too few, each a
single-threaded BLAS call on strided blocks (transB=1 weights read as they lie); a float32 GEMM with a constant B
runs on kernels.packed_gemm instead, B packed once (AMD Zen 3, two threads, ratio to onnxruntime in the same
process: 128x384x1536 0.96-1.01 against BLAS's 1.28, 128x1536x384 0.87-1.09 against 1.27, 256x1024x1024
1.02-1.13 against 1.13-1.15). For very few rows (batch-1 fully connected layers) each output is one dot product
over a row of B as (N, K): a constant B gets its transposed copy made once. A first run over empty caches may leave
those two kernels to the background and run its products on numpy's matmul meanwhile (PreparedProducts._stand_in,
onnxjit.cache.deferred_compile).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from onnxjit.cache import deferred_compile
from onnxjit.kernels import linalg as k
from onnxjit.kernels import packed_gemm
from onnxjit.kernels.simd import LANES
from onnxjit.ops.nn import (CHUNKS_PER_THREAD, FUSED_DOMAIN, NO_ACTIVATION, PACKED_CHUNK_BYTES, PARALLEL_GRAIN,
                            ConstantDerived, activation_of, constant_input, float_type, rank_of, ro, ro_reshaped,
                            run_units)
from onnxjit.ops.registry import attr, register_op
from onnxjit.ops.stand_ins import NumpyProduct
from onnxjit.session.native_plan import NATIVE_GRAIN, In, NativeCall, Out
from onnxjit.worker_pool import CallSites, thread_count


def _packed(b):
    p = packed_gemm.pack_blocks(b)
    p.flags.writeable = False
    return p


def _transposed(b):
    return np.ascontiguousarray(b.T)


FEW_ROWS = 4  # up to this many rows, Gemm computes one dot product per output (see kernels.linalg.dot_cols)


GEMM_MIN_COLS = 64  # fewest columns of a block, where the output has them (BLAS efficiency)
# blocks per thread: fewer, larger BLAS calls run faster; more only balance a thread that stalls. Sapphire Rapids,
# 2 threads: 256x1024x1024 2.2 ms in 4 blocks, 2.6 in 8, 1.7 in one 2-thread BLAS call; 128x1536x384 0.84 / 0.92
# / 1.16 ms in 2 / 4 / 12 blocks. AMD Zen 3, ratio to onnxruntime in the same process, 1 vs 2 blocks per thread:
# the microbench's 3x Gemm+Relu 256x1024 1.01-1.26 vs 1.18-1.39; 128x1536x384 1.27-1.42 vs 1.20-1.43;
# 512x768x768 1.21-1.22 vs 1.27-1.33; 128x384x1536 1.38-1.41 vs 1.43-1.64.
GEMM_BLOCKS_PER_THREAD = 1
GEMM_MIN_ROWS = 32


def _gemm(a, b, trans_b, c, alpha, beta, has_c, act=NO_ACTIVATION, packed=None):
    """act(alpha * a @ op(b) + beta * c), a (M, K) C-contiguous, b (K, N) or, when trans_b, (N, K): blocks of
    columns, GEMM_BLOCKS_PER_THREAD per thread (and blocks of rows where the columns are too few for the threads),
    spread over onnxjit's threads, a single-threaded BLAS call each (see kernels.linalg); for float32 with a
    constant B (`packed`, a ConstantDerived packing it), packed_gemm's microkernel over B packed once."""
    m, kk = a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    out = np.empty((m, n), dtype=a.dtype)
    if packed is not None and a.dtype == np.float32 and packed.holds(b):
        kernel, rest, units, work = _packed_gemm_call(m, kk, packed.of(b), n, c, alpha, beta, has_c, act)
        run_units(kernel, (ro(a),) + rest + (out,), units, work)
        return out
    _, rows, cols = _gemm_blocks(m, kk, n)
    with k.single_threaded_blas_for(m * n * kk):
        run_units(k.gemm_blocks, (ro(a), ro(b), trans_b, c, alpha, beta, has_c, act.kind, act.consts(a.dtype), rows,
                                  cols, out), -(-m // rows) * -(-n // cols), m * n * kk)
    return out


def _gemm_blocks(m, kk, n):
    """(threads, rows, cols) of a GEMM's blocks: GEMM_BLOCKS_PER_THREAD per thread along the columns, and along
    the rows where the columns are too few for the threads."""
    nth = thread_count() if m * n * kk >= PARALLEL_GRAIN else 1
    share = -(-n // (nth * GEMM_BLOCKS_PER_THREAD))
    cols = min(n, max(GEMM_MIN_COLS, -(-share // 16) * 16))
    n_cb = -(-n // cols)
    rows = m if n_cb >= nth else min(m, max(GEMM_MIN_ROWS, -(-m // -(-nth // n_cb))))
    return nth, rows, cols


def _packed_gemm_call(m, kk, bp, n, c, alpha, beta, has_c, act, sites=None):
    """(the kernel, or its CallSite from `sites`, the arguments between A and the output, units, work) of the
    packed GEMM of M rows of float32 A times B packed (`bp`, N columns). A's rows are split first, each unit
    reading (or packing) only its own (cut along B's columns, every unit packed all of A: a 197x768 @ 768x192
    MatMul ran at 92 GFLOP/s on two Zen 3 threads), unless A is read in place (alpha 1) and B is the larger
    (more columns than rows): cut along A's rows, every unit streamed all of B from memory (GPT-2's 128x768 @
    768x50257 head: 154 MB a unit)."""
    nth, rows, cols = _gemm_blocks(m, kk, n)
    if m >= nth * GEMM_MIN_ROWS and not (alpha == 1 and n > m):
        rows, cols = -(-m // (nth * packed_gemm.MR)) * packed_gemm.MR, n
    cols = -(-cols // LANES) * LANES
    chunk_blocks = max(1, PACKED_CHUNK_BYTES // (4 * kk * LANES))
    rest = (bp, n, c, alpha, beta, has_c, act.kind, act.consts(np.float32), rows, cols, chunk_blocks)
    kernel = k.gemm_packed_blocks if sites is None else sites[c.ndim, c.dtype.char]
    return kernel, rest, -(-m // rows) * -(-n // cols), m * n * kk


def _dot_cols(a, bt, c, alpha, beta, has_c, act=NO_ACTIVATION, sites=None):
    """act(alpha * a @ bt.T + beta * c) for a of very few rows (see kernels.linalg.dot_cols), a (M, K) and bt
    (N, K) C-contiguous, c as _compact_c makes it, split over blocks of columns where the work is large enough.
    `sites`: the calling node's CallSites of the float32 and the generic kernel (`dot_sites`), which skip Numba's
    type dispatch (a batch-1 fully connected layer is mostly its step's overhead: in a Loop body, 7-9 us a step
    before)."""
    m = a.shape[0]
    out = np.empty((m, bt.shape[0]), dtype=a.dtype)
    call, rest, units, work = _dot_cols_call(m, a.dtype, bt, c, alpha, beta, has_c, act, sites)
    if sites is None:
        run_units(call, (ro(a),) + rest + (out,), units, work)
    else:
        call.run((ro(a),) + rest + (out,), units, work)
    return out


def _dot_cols_call(m, dtype, bt, c, alpha, beta, has_c, act, sites=None):
    """(the kernel's CallSite from `sites`, or the kernel, the arguments between A and the output, units, work) of
    _dot_cols for M rows of A of this dtype."""
    n, kk = bt.shape
    work = m * n * kk
    blocks = min(n, thread_count() * CHUNKS_PER_THREAD) if work >= PARALLEL_GRAIN else 1
    cols = max(-(-n // blocks), 16)
    f32 = dtype == bt.dtype == np.float32
    rest = (ro(bt), c, alpha, beta, has_c, act.kind, act.consts(dtype), cols)
    # the argument types are fixed by the dtypes and C's dims (ro arrays, C from _compact_c or _no_c); dtypes by
    # their one-letter codes (hashing a dtype costs 0.3-0.6 us)
    call = (k.dot_cols_f32 if f32 else k.dot_cols) if sites is None else \
        sites[0 if f32 else 1][dtype.char, bt.dtype.char, c.dtype.char, c.ndim]
    return call, rest, -(-n // cols), work


class PreparedProducts:
    """A node's products with its constant B, prepared per A's shape and dtype (and C's, where C is computed in the
    run): the kernel's CallSite and every other argument made once, so that a run makes A's read-only view, C's
    compact form and the output and calls the kernel. Few rows run as one dot product per output (`_dot_cols`:
    Gemm's and MatMul's checks, B's view, the thread count and the split cost 2-3 us of a batch-1 step's 5), more
    as the packed GEMM (float32: the checks, the split and Numba's type dispatch cost ~20 us of a MatMul step)."""

    __slots__ = ("calls", "packed_sites")

    def __init__(self):
        self.calls: dict = {}
        self.packed_sites = CallSites(k.gemm_packed_blocks)

    def run(self, a, c=None):
        """The product for A (and the run's C, None where C is the node's constant or absent), or None where it
        was not prepared for their shapes and dtypes."""
        call = self.calls.get((a.shape, a.dtype.char) if c is None else (a.shape, a.dtype.char, c.shape, c.dtype.char))
        return None if call is None else self.call(call, a, c)

    @staticmethod
    def call(call, a, c=None):
        """The prepared `call`'s product for A (and the run's C)."""
        site, rest, c_at, units, work, rows, n, shape = call
        if c is not None:
            rest = rest[:c_at] + (_compact_c(c, rows, n),) + rest[c_at + 1:]
        out = np.empty((rows, n), dtype=a.dtype)
        site.run((ro_reshaped(a, (rows, -1)),) + rest + (out,), units, work)
        return out if shape is None else out.reshape(shape)

    def native(self, a, c=None, c_input=2):
        """`run` as a native_plan.NativeCall (A the step's input 0, the run's C its input `c_input`), or None
        where it is not prepared, stands in for a deferred kernel or is too large to gain from it."""
        if type(a) is not np.ndarray or (c is not None and type(c) is not np.ndarray):
            return None
        call = self.calls.get((a.shape, a.dtype.char) if c is None else (a.shape, a.dtype.char, c.shape, c.dtype.char))
        if call is None or call[0].kernel is None:
            return None
        site, rest, c_at, units, work, rows, n, shape = call
        if work >= NATIVE_GRAIN or a.size % max(rows, 1) or (c is not None and c.ndim > 2):
            return None
        args = [In(0, (rows, a.size // max(rows, 1)))] + list(rest) + [Out(0)]
        if c is not None:
            args[1 + c_at] = In(c_input, (1,) * (2 - c.ndim) + c.shape)
        out_shape = (rows, n) if shape is None else shape
        return NativeCall(site.kernel, args, units, [((rows, n), a.dtype)], [(0, out_shape)],
                          parallel=units > 1 and work >= PARALLEL_GRAIN)

    def prepare(self, a, bt, c, alpha, beta, has_c, act, sites, shape=None, runtime_c=None):
        """Prepare A's few-row calls: A as (rows, K), B as bt (N, K), C as _compact_c makes it (`runtime_c`: the
        run's C, compacted anew in each run of its shape); `shape` the output's where it is not (rows, N)."""
        rows = math.prod(a.shape[:-1])
        site, rest, units, work = _dot_cols_call(rows, a.dtype, bt, c, alpha, beta, has_c, act, sites)
        return self._add(a, runtime_c, (site, rest, 1, units, work, rows, bt.shape[0], shape), bt.T,
                         (c, alpha, beta, has_c, act))

    def prepare_packed(self, a, bp, n, c, alpha, beta, has_c, act, b, shape=None, runtime_c=None):
        """Prepare A's packed-GEMM calls (float32): B packed (`bp`, N columns; `b` as it is, (K, N)); the rest
        as `prepare`."""
        rows = math.prod(a.shape[:-1])
        site, rest, units, work = _packed_gemm_call(rows, a.shape[-1], bp, n, c, alpha, beta, has_c, act,
                                                    self.packed_sites)
        return self._add(a, runtime_c, (site, rest, 2, units, work, rows, n, shape), b, (c, alpha, beta, has_c, act))

    def _add(self, a, runtime_c, call, b, epilogue):
        key = (a.shape, a.dtype.char) if runtime_c is None else (a.shape, a.dtype.char, runtime_c.shape,
                                                                  runtime_c.dtype.char)
        if call[0].kernel in DEFERRABLE and deferred_compile.deferring():
            call = self._stand_in(key, a, call, b, epilogue) or call
        self.calls[key] = call
        return call

    def _stand_in(self, key, a, call, b, epilogue):
        """In a first run that defers kernels (onnxjit.cache.deferred_compile), where the call's kernel has no
        code for its argument types: the kernel deferred, and the call numpy's product standing in for it until
        the kernel is compiled (its op prepares the call again then); else None."""
        site, rest, _, units, work, rows, n, shape = call
        args = (ro_reshaped(a, (rows, -1)),) + rest + (np.empty((0, 0), a.dtype),)  # (the output's type)
        if not deferred_compile.defer_unless_available(site.kernel, args, lambda: self.calls.pop(key, None)):
            return None
        c, alpha, beta, has_c, act = epilogue
        return NumpyProduct(b, act), (c, alpha, beta, has_c), 0, units, work, rows, n, shape


# the product kernels a first run defers where they have no code yet (onnxjit.cache.deferred_compile), numpy's
# matmul standing in: over empty caches, one core, vit_tiny's packed GEMM took 1.9 s of 16 s of compiling with its
# microkernel, and its batch-1 head's dot products 0.8 s
DEFERRABLE = frozenset({k.gemm_packed_blocks, k.dot_cols_f32})


def dot_sites() -> tuple[CallSites, CallSites]:
    """A node's CallSites of _dot_cols' kernels (float32, generic)."""
    return CallSites(k.dot_cols_f32), CallSites(k.dot_cols)


def _compact_c(c, m, n):
    """Gemm's C as a C-contiguous (1 or M, 1 or N) array, which the kernels broadcast as they read it."""
    c2 = np.asarray(c)
    c2 = c2.reshape((1,) * (2 - c2.ndim) + c2.shape) if c2.ndim < 2 else c2
    if c2.ndim != 2 or c2.shape[0] not in (1, m) or c2.shape[1] not in (1, n):
        raise ValueError(f"Gemm: C of shape {np.shape(c)} does not broadcast to the output's ({m}, {n})")
    return ro(c2)


def build_gemm(node):
    n_in = len(node.inputs)
    act = activation_of(node)
    if n_in < 2 or n_in > 3 or float_type(node, (0, 1, 2)) is None or act is None:
        return None
    if any(rank_of(node, i) not in (None, 2) for i in (0, 1)):
        return None
    alpha = float(attr(node, "alpha", 1.0))
    beta = float(attr(node, "beta", 1.0))
    trans_a = int(attr(node, "transA", 0)) != 0
    trans_b = int(attr(node, "transB", 0)) != 0
    bt_cache = ConstantDerived(None if trans_b else constant_input(node, 1), _transposed)
    packed = ConstantDerived(constant_input(node, 1), lambda b: _packed(b.T if trans_b else b))
    sites = dot_sites()
    const_c = constant_input(node, 2) if n_in == 3 else None
    compact_c = {}  # (M, N) -> a constant C as _compact_c makes it
    prepared = PreparedProducts()  # with the constant B and C

    def run(a, b, c=None):
        if packed.holds(b):  # the run's C where it is not the constant (a Scan body's h @ W + x @ U)
            y = prepared.run(a, c if c is not const_c and beta != 0.0 else None)
            if y is not None:
                return (y,)
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
        a = np.ascontiguousarray(a.T if trans_a else a)
        b = b if packed.holds(b) else np.ascontiguousarray(b)  # (the constant B as folding left it: a view, maybe)
        m, kk = a.shape
        kb, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
        if kb != kk:
            raise ValueError(f"Gemm: A {a.shape} and B {b.shape} (after transposes) do not multiply")
        has_c = c is not None and beta != 0.0
        if not has_c:
            cc = _no_c(a.dtype)
        elif c is const_c:
            cc = compact_c.get((m, n))
            if cc is None:
                cc = compact_c[(m, n)] = _compact_c(c, m, n)
        else:
            cc = _compact_c(c, m, n)
        if m == 0 or n == 0 or kk == 0:
            y = np.zeros((m, n), dtype=a.dtype)
            if has_c:
                y += (beta * np.broadcast_to(cc, (m, n))).astype(a.dtype)
            return (act.apply(y),)
        runtime_c = c if c is not const_c and has_c else None
        # (prepared before the product: a first run may defer the prepared call's kernel)
        if m <= FEW_ROWS:  # one dot product per output, over B's rows: (N, K), made once for a constant B
            bt = b if trans_b else bt_cache.of(b)
            if not trans_a and packed.holds(b):
                call = prepared.prepare(a, bt, cc, alpha, beta, has_c, act, sites, runtime_c=runtime_c)
                return (prepared.call(call, a, runtime_c),)
            y = _dot_cols(a, bt, cc, alpha, beta, has_c, act, sites)
        else:
            if not trans_a and a.dtype == np.float32 and packed.holds(b):
                call = prepared.prepare_packed(a, packed.of(b), n, cc, alpha, beta, has_c, act, b.T if trans_b else b,
                                               runtime_c=runtime_c)
                return (prepared.call(call, a, runtime_c),)
            y = _gemm(a, b, trans_b, cc, alpha, beta, has_c, act, packed)
        return (y,)

    def native(a, b, c=None):
        if not packed.holds(b):
            return None
        runtime_c = c is not const_c and beta != 0.0
        call = prepared.native(a, c if runtime_c else None)
        if call is not None:  # B packed once; C compacted once where it is the constant
            call.pinned = (1,) if runtime_c or c is None else (1, 2)
        return call
    run.native = native
    return run


for _v in (1, 6, 7, 9, 11, 13):
    register_op("Gemm", since=_v)(build_gemm)
register_op("FusedGemm", since=1, domain="com.onnxjit")(build_gemm)



def matmul(a, b, bt_cache=None, act=NO_ACTIVATION, packed=None, c=None, sites=None, prepared=None):
    """act(a @ b + c) with numpy.matmul semantics: 1-D operands promoted and squeezed, batch dims broadcast; `c`
    (FusedMatMul's bias, optional) must broadcast to the product's shape without changing it. `bt_cache` may hold
    the transposed copy of a constant B, `packed` its packed_gemm form, `sites` the node's _dot_cols
    CallSites, `prepared` its PreparedProducts, prepared here for the constant B and the C given (the caller runs
    them for that B and C only). A bias along the columns of a product
    with a 2-D B is the GEMM's C (added in its epilogue); any other goes through numpy."""
    if c is not None:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        out_shape = batch + ((a.shape[-2],) if a.ndim > 1 else ()) + ((b.shape[-1],) if b.ndim > 1 else ())
        if np.broadcast_shapes(out_shape, np.shape(c)) != out_shape:
            raise ValueError(f"FusedMatMul: C of shape {np.shape(c)} does not broadcast to the output's {out_shape}")
        c = np.asarray(c, dtype=a.dtype)
        if a.ndim < 2 or b.ndim != 2 or any(d != 1 for d in c.shape[:-1]):
            y = matmul(a, b, bt_cache, NO_ACTIVATION, packed, sites=sites)
            return act.apply(np.add(y, c, out=y))
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = a.reshape(1, -1)
    if b_vec:
        b = b.reshape(-1, 1)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"MatMul needs inputs of rank >= 1, got {a.shape} and {b.shape}")
    m, kk = a.shape[-2:]
    kb, n = b.shape[-2:]
    if kk != kb:
        raise ValueError(f"MatMul: shapes {a.shape} and {b.shape} do not multiply")
    batch = a.shape[:-2] if b.ndim == 2 else np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if m == 0 or n == 0 or kk == 0 or 0 in batch:
        y = act.apply(np.zeros(batch + (m, n), dtype=a.dtype))
    elif b.ndim == 2:  # A's batch folds into its rows: one GEMM
        a2 = np.ascontiguousarray(a).reshape(-1, kk)
        # the bias, a row (or one value) over the product's columns
        c2, has_c = (_no_c(a.dtype), False) if c is None else (ro(c.reshape(1, -1)), True)
        beta = 1.0 if has_c else 0.0
        if a2.shape[0] <= FEW_ROWS and bt_cache is not None and bt_cache.holds(b):
            if prepared is not None and not (a_vec or b_vec):  # (prepared first: a first run may defer its kernel)
                call = prepared.prepare(a, bt_cache.of(b), c2, 1.0, beta, has_c, act, sites, batch + (m, n))
                y = prepared.call(call, a)
            else:
                y = _dot_cols(a2, bt_cache.of(b), c2, 1.0, beta, has_c, act, sites)
        elif prepared is not None and not (a_vec or b_vec) and a.dtype == np.float32 and packed.holds(b):
            call = prepared.prepare_packed(a, packed.of(b), n, c2, 1.0, beta, has_c, act, b, batch + (m, n))
            y = prepared.call(call, a)
        elif not b.flags.c_contiguous and b.flags.f_contiguous:  # a transposed view: read as (N, K) rows
            y = _gemm(a2, b.T, True, c2, 1.0, beta, has_c, act)
        else:
            y = _gemm(a2, np.ascontiguousarray(b), False, c2, 1.0, beta, has_c, act, packed)
        y = y.reshape(batch + (m, n))
    else:
        a3 = np.ascontiguousarray(np.broadcast_to(a, batch + (m, kk))).reshape(-1, m, kk)
        b3 = np.ascontiguousarray(np.broadcast_to(b, batch + (kk, n))).reshape(-1, kk, n)
        y = np.empty((a3.shape[0], m, n), dtype=a.dtype)
        with k.single_threaded_blas_for(a3.shape[0] * m * n * kk):
            run_units(k.matmul_batched, (ro(a3), ro(b3), act.kind, act.consts(a.dtype), y), a3.shape[0],
                      a3.shape[0] * m * n * kk)
        y = y.reshape(batch + (m, n))
    if a_vec and b_vec:
        return y.reshape(y.shape[:-2])
    if a_vec:
        return y.reshape(y.shape[:-2] + (n,))
    if b_vec:
        return y.reshape(y.shape[:-1])
    return y


@functools.lru_cache(maxsize=None)
def _no_c(dtype):
    """The C operand of a GEMM without one: a read-only (1, 1) zero the kernels never read."""
    c = np.zeros((1, 1), dtype=dtype)
    c.flags.writeable = False
    return c


def build_matmul(node):
    act = activation_of(node)
    n_in = 3 if node.domain == FUSED_DOMAIN else 2  # FusedMatMul's optional bias C
    if not 2 <= len(node.inputs) <= n_in or float_type(node, range(len(node.inputs))) is None or act is None:
        return None
    if any(rank_of(node, i) == 0 for i in (0, 1)):
        return None
    const_b = constant_input(node, 1)
    const_b = const_b if const_b is not None and const_b.ndim == 2 else None
    bt_cache = ConstantDerived(const_b, _transposed)
    packed = ConstantDerived(const_b, _packed)
    sites = dot_sites()
    const_c = constant_input(node, 2) if n_in == 3 else None
    prepared = PreparedProducts()  # with the constant B and C

    def run(a, b, c=None):
        if c is const_c and bt_cache.holds(b):
            y = prepared.run(a)
            if y is not None:
                return (y,)
        return (matmul(a, b, bt_cache, act, packed, c, sites, prepared if c is const_c else None),)

    def native(a, b, c=None):
        call = prepared.native(a) if c is const_c and bt_cache.holds(b) else None
        if call is not None:  # B transposed or packed once, and the constant C
            call.pinned = (1,) if c is None else (1, 2)
        return call
    run.native = native
    return run


for _v in (1, 9, 13):
    register_op("MatMul", since=_v)(build_matmul)
register_op("FusedMatMul", since=1, domain="com.onnxjit")(build_matmul)
