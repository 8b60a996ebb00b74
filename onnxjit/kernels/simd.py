"""Explicit float32 vectors for njit kernels: `F32V`, a vector of LANES float32 values held in registers, and the
few operations a register-tiled GEMM, a vector dot product, channels-last pooling and a depthwise conv's rows need
(`vload`, `vstore`, `vsplat`, `vfma`, `vclamp`, `vmax`, `vmin`, `vsum`, `vtranspose`; the masked `vload_cols`,
`vload_even_cols` and `vstore_first` with their `columns` masks), and `to_planes`, a channels-last tile back to
NCHW.

Why: LLVM's vectorizers did not keep a GEMM tile's accumulators in vector registers. Written with scalar
accumulators (one per output of a 6x16 tile) or with a local accumulator array, the inner loop of a 1x1 conv
compiled to scalar FMAs with stack spills, at 2-4 GFLOP/s against OpenBLAS's 75-80 on one AMD Zen 3 core. The
same loop over these vectors compiles to one broadcast and two vfmadd231ps per row and step, at 80-85 GFLOP/s.

The vector is LLVM's `<LANES x float>` (16 with AVX2, 32 with AVX-512, two registers either way). Loads and
stores are unaligned (any element offset). Indices are flat element offsets into a C-contiguous array (unsigned:
no wraparound checks), unchecked: the caller keeps offset + LANES inside the array, except for the masked ones,
which touch only the lanes their mask allows.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic, models, register_model

from onnxjit.cache.jit import njit
from onnxjit.kernels.views import u64 as _u


def _has_avx512() -> bool:
    """Whether the host CPU, which Numba compiles for, has AVX-512 (also part of every cache entry's key, so a
    cached kernel always matches)."""
    import llvmlite.binding as llvm
    return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")


HAS_AVX512 = _has_avx512()
# 16 floats (two ymm registers) with AVX2, 32 (two zmm) with AVX-512: either way a vector is two registers, so a
# row of packed_gemm's tile is two independent FMA chains (16 lanes on AVX-512 would halve them)
LANES = 32 if HAS_AVX512 else 16
VECTOR_REGISTERS = 32 if HAS_AVX512 else 16  # zmm0-31 with AVX-512, ymm0-15 with AVX2
_VEC = ir.VectorType(ir.FloatType(), LANES)


class F32Vector(types.Type):
    """Numba's type of a `<LANES x float>` register value."""

    def __init__(self):
        super().__init__(name=f"f32x{LANES}")


F32V = F32Vector()


@register_model(F32Vector)
class _F32VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VEC)


def _vector_pointer(context, builder, arrty, arr, index):
    data = context.make_array(arrty)(context, builder, value=arr).data
    return builder.bitcast(builder.gep(data, [index]), _VEC.as_pointer())


def _float32_array(arr):
    return isinstance(arr, types.Array) and arr.dtype == types.float32 and arr.layout == "C"


@intrinsic
def vload(typingctx, arr, index):
    """arr.flat[index:index + LANES] as a vector (arr C-contiguous float32)."""
    if not _float32_array(arr) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_vector_pointer(context, builder, sig.args[0], args[0], args[1]), align=4)

    return F32V(arr, index), codegen


@intrinsic
def vstore(typingctx, arr, index, v):
    """arr.flat[index:index + LANES] = v."""
    if not _float32_array(arr) or not isinstance(index, types.Integer) or v != F32V:
        return None

    def codegen(context, builder, sig, args):
        builder.store(args[2], _vector_pointer(context, builder, sig.args[0], args[0], args[1]), align=4)
        return context.get_dummy_value()

    return types.none(arr, index, v), codegen


LINE_FLOATS = 16  # float32s in a 64-byte cache line: one prefetch_l2 each


@njit(cache=True, nogil=True, forceinline=True)
def aligned_empty(n):
    """n float32s from a cache-line boundary: a channels-last scratch buffer, read and written a vector at a time
    at multiples of LANES, whose every vector then covers whole lines. Numba aligns a new array to 32 bytes only,
    and its arrays start 32 bytes past a line as a rule, so each 64-byte register of a vector straddled two lines:
    a 576-channel depthwise 3x3 conv over 14x14 pixels (conv.conv_depthwise_blocked, one Intel Xeon AVX-512 core)
    84 -> 66 us aligned."""
    buf = np.empty(n + LINE_FLOATS, dtype=np.float32)
    s = (-(buf.ctypes.data // 4)) % LINE_FLOATS
    return buf[s:s + n]


@njit(cache=True, nogil=True, forceinline=True)
def aligned_full(n, value):
    """aligned_empty(n) filled with the float32 value."""
    a = aligned_empty(n)
    a[:] = value
    return a


def aligned_array(shape, dtype=np.float32):
    """A new uninitialized C-contiguous array from a cache-line boundary, outside njit code (weights laid out as
    vectors once: numpy aligns large arrays to 16 bytes only)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + LINE_FLOATS * 4, dtype=np.uint8)
    s = (-buf.ctypes.data) % (LINE_FLOATS * 4)
    return buf[s:s + nbytes].view(dtype).reshape(shape)


@intrinsic
def prefetch_l2(typingctx, arr, index):
    """A hint to bring the cache line of arr.flat[index] into L2 (x86's prefetcht1); no load, no fault."""
    if not _float32_array(arr) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), i8p), ir.Constant(i32, 0),
                          ir.Constant(i32, 2), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, index), codegen


def _masked_columns(builder, col, ncols, count):
    """<count x i1>: whether column col + l is inside [0, ncols), for lanes l < count (int32 compares)."""
    i32 = ir.IntType(32)
    vi = ir.VectorType(i32, count)

    def splat(v):
        one = builder.insert_element(ir.Constant(vi, ir.Undefined), builder.trunc(v, i32), ir.Constant(i32, 0))
        return builder.shuffle_vector(one, ir.Constant(vi, ir.Undefined), ir.Constant(vi, [0] * count))

    cols = builder.add(splat(col), ir.Constant(vi, list(range(count))))
    return builder.and_(builder.icmp_signed(">=", cols, ir.Constant(vi, [0] * count)),
                        builder.icmp_signed("<", cols, splat(ncols)))


@intrinsic
def columns(typingctx, col, ncols, step):
    """The bit mask (uint64, bit l for lane l) of the columns col + l, for the LANES * step lanes vload_cols
    (step 1) or vload_even_cols (step 2) reads, that lie inside [0, ncols): made once for a column shift, it
    serves every row the shift reads (kept in a register or an array, it is one k-register move per load)."""
    if not all(isinstance(v, types.Integer) for v in (col, ncols, step)):
        return None

    def codegen(context, builder, sig, args):
        col_v, ncols_v, step_v = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (0, 1, 2))
        i64 = ir.IntType(64)
        wide = builder.bitcast(_masked_columns(builder, col_v, ncols_v, 2 * LANES), ir.IntType(2 * LANES))
        bits = builder.zext(wide, i64) if 2 * LANES < 64 else wide
        # step 1: only the low LANES bits (the rest of the 64 columns are past one vector)
        low = builder.and_(bits, ir.Constant(i64, (1 << LANES) - 1))
        return builder.select(builder.icmp_signed("==", step_v, ir.Constant(i64, 1)), low, bits)

    return types.uint64(col, ncols, step), codegen


def _masked_loader(step):
    """vload_cols (step 1) and vload_even_cols (step 2): lane l is arr.flat[start + step * l] where bit step * l
    of `bits` (`columns`) is set, else 0. A masked load (AVX-512's k-masked vmovups, AVX2's vmaskmovps) reads
    none of the places masked off, so start may point before the array or past its end; step 2 loads 2 * LANES
    floats and keeps the even ones (a two-register shuffle): a stride-2 conv's columns with no de-interleaved
    copy of its input."""
    count = LANES * step

    @intrinsic
    def load(typingctx, arr, start, bits):
        if not _float32_array(arr) or not isinstance(start, types.Integer) or not isinstance(bits, types.Integer):
            return None
        wide = ir.VectorType(ir.FloatType(), count)

        def codegen(context, builder, sig, args):
            start_v = context.cast(builder, args[1], sig.args[1], types.int64)
            bits_v = context.cast(builder, args[2], sig.args[2], types.uint64)
            mask = builder.bitcast(builder.trunc(bits_v, ir.IntType(count)) if count < 64 else bits_v,
                                   ir.VectorType(ir.IntType(1), count))
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            ptr = builder.bitcast(builder.gep(data, [start_v]), wide.as_pointer())
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(wide, [wide.as_pointer(), ir.IntType(32), mask.type, wide]),
                f"llvm.masked.load.v{count}f32.p0")
            v = builder.call(fn, [ptr, ir.Constant(ir.IntType(32), 4), mask, ir.Constant(wide, None)])
            if step == 1:
                return v
            return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                                            list(range(0, count, step))))

        return F32V(arr, start, bits), codegen

    return load


vload_cols = _masked_loader(1)
vload_even_cols = _masked_loader(2)


@intrinsic
def vstore_first(typingctx, arr, index, v, n):
    """arr.flat[index + l] = v[l] for lanes l < n (a masked store: nothing at or past index + n is touched)."""
    if not _float32_array(arr) or not isinstance(index, types.Integer) or v != F32V or \
            not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        index_v, n_v = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (1, 3))
        mask = _masked_columns(builder, ir.Constant(ir.IntType(64), 0), n_v, LANES)
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], index_v)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_VEC, _VEC.as_pointer(), ir.IntType(32), mask.type]),
            f"llvm.masked.store.v{LANES}f32.p0")
        builder.call(fn, [args[2], ptr, ir.Constant(ir.IntType(32), 4), mask])
        return context.get_dummy_value()

    return types.none(arr, index, v, n), codegen


@intrinsic
def vsplat(typingctx, x):
    """A vector of LANES copies of the float32 x."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        one = builder.insert_element(ir.Constant(_VEC, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
        lanes = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        return builder.shuffle_vector(one, ir.Constant(_VEC, ir.Undefined), lanes)

    return F32V(x), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c in each lane, rounded once (llvm.fma)."""
    if not (a == b == c == F32V):
        return None

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3),
                                            f"llvm.fma.v{LANES}f32")
        return builder.call(fn, args)

    return F32V(a, b, c), codegen


@intrinsic
def vclamp(typingctx, v, lo, hi):
    """v with each lane below lo set to lo and above hi set to hi (float32 bounds; NaN lanes stay NaN, as
    kernels.linalg.activate's Relu and Clip keep them)."""
    if v != F32V or lo != types.float32 or hi != types.float32:
        return None

    def codegen(context, builder, sig, args):
        x = args[0]
        for bound, op in ((args[1], "<"), (args[2], ">")):
            one = builder.insert_element(ir.Constant(_VEC, ir.Undefined), bound, ir.Constant(ir.IntType(32), 0))
            b = builder.shuffle_vector(one, ir.Constant(_VEC, ir.Undefined),
                                       ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES))
            x = builder.select(builder.fcmp_ordered(op, x, b), b, x)
        return x

    return F32V(v, lo, hi), codegen


@intrinsic
def vmax(typingctx, a, b):
    """b where b > a, else a, in each lane: the pools' scalar max (a NaN in a stays, a NaN in b is passed over)."""
    if not (a == b == F32V):
        return None

    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(">", args[1], args[0]), args[1], args[0])

    return F32V(a, b), codegen


@intrinsic
def vmin(typingctx, a, b):
    """b where b < a, else a, in each lane (as vmax: a NaN in b is passed over)."""
    if not (a == b == F32V):
        return None

    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered("<", args[1], args[0]), args[1], args[0])

    return F32V(a, b), codegen


@intrinsic
def vsum(typingctx, v):
    """The float32 sum of v's lanes, added in one fixed order (halves, then halves of the halves): the same
    rounding wherever it is used, so equal inputs give equal sums."""
    if v != F32V:
        return None

    def codegen(context, builder, sig, args):
        x = args[0]
        width = LANES
        while width > 1:
            half = width // 2
            lo = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half))))
            hi = builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(ir.IntType(32), half),
                                                          list(range(half, width))))
            x = builder.fadd(lo, hi)
            width = half
        return builder.extract_element(x, ir.Constant(ir.IntType(32), 0))

    return types.float32(v), codegen


# the side of the square tiles `vtranspose` turns: one register of floats (16 in a zmm, 8 in a ymm)
TILE = LANES // 2


@intrinsic
def vtranspose(typingctx, src, s0, s_rs, dst, d0, d_rs):
    """dst[d0 + j * d_rs + i] = src[s0 + i * s_rs + j] for i, j < TILE: a TILE x TILE tile of floats turned in
    registers (float32 arrays, C-contiguous; unchecked offsets). TILE rows are loaded, interleaved pairwise in
    log2(TILE) rounds (row i with row i + TILE / 2: their low halves' elements alternated, then their high
    halves'; after the last round row j holds column j), and stored: 64 two-register shuffles for a 16 x 16
    tile, where a copy element by element moves its 256 floats one at a time."""
    if not (_float32_array(src) and _float32_array(dst)) or not all(
            isinstance(v, types.Integer) for v in (s0, s_rs, d0, d_rs)):
        return None
    vec = ir.VectorType(ir.FloatType(), TILE)
    i64 = ir.IntType(64)
    half = TILE // 2
    low = ir.Constant(ir.VectorType(ir.IntType(32), TILE), [v for k in range(half) for v in (k, k + TILE)])
    high = ir.Constant(ir.VectorType(ir.IntType(32), TILE),
                       [v for k in range(half, TILE) for v in (k, k + TILE)])

    def codegen(context, builder, sig, args):
        sdata = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        ddata = context.make_array(sig.args[3])(context, builder, value=args[3]).data
        s0_v, s_rs_v, d0_v, d_rs_v = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (1, 2, 4, 5))

        def at(data, start, step, i):
            index = builder.add(start, builder.mul(step, ir.Constant(i64, i)))
            return builder.bitcast(builder.gep(data, [index]), vec.as_pointer())

        rows = [builder.load(at(sdata, s0_v, s_rs_v, i), align=4) for i in range(TILE)]
        for _ in range(TILE.bit_length() - 1):
            rows = [builder.shuffle_vector(rows[i], rows[i + half], mask) for i in range(half) for mask in (low, high)]
        for j in range(TILE):
            builder.store(rows[j], at(ddata, d0_v, d_rs_v, j), align=4)
        return context.get_dummy_value()

    return types.none(src, s0, s_rs, dst, d0, d_rs), codegen


@njit(cache=True, nogil=True, forceinline=True)
def to_planes(acc, nc, npix, of, dst, plane):
    """of[dst + c * plane + q] = acc[q * LANES + c] for channels c < nc and pixels q < npix: a channels-last tile
    back to NCHW planes, TILE x TILE blocks turned in registers (vtranspose) and stored as runs of TILE
    pixels, the rest a plane at a time (stores contiguous, loads from L1). With 27 taps a pixel the copy weighs as
    much as the products: a 3->64-channel 3x3 stride-2 stem over 224x224 pixels took 525 us element by element,
    274-354 us turned in registers (two Emerald Rapids threads)."""
    for c0 in range(0, nc, TILE):
        q0 = 0
        if c0 + TILE <= nc:
            while q0 + TILE <= npix:
                vtranspose(acc, q0 * LANES + c0, LANES, of, dst + c0 * plane + q0, plane)
                q0 += TILE
        for c in range(c0, min(nc, c0 + TILE)):
            for q in range(q0, npix):
                of[_u(dst + c * plane + q)] = acc[_u(q * LANES + c)]


@njit(cache=True, nogil=True, forceinline=True)
def from_planes(xf, src, plane, nc, npix, buf):
    """buf[q * LANES + c] = xf[src + c * plane + q] for channels c < nc and pixels q < npix: NCHW planes to a
    channels-last tile, `to_planes`' inverse, TILE x TILE blocks turned in registers (loads contiguous runs of TILE
    pixels), the rest element by element. Element by element, with nc streams one value each, the copy took most
    of a channels-last pool over 14x14 planes."""
    for c0 in range(0, nc, TILE):
        q0 = 0
        if c0 + TILE <= nc:
            while q0 + TILE <= npix:
                vtranspose(xf, src + c0 * plane + q0, plane, buf, q0 * LANES + c0, LANES)
                q0 += TILE
        for q in range(q0, npix):
            for c in range(c0, min(nc, c0 + TILE)):
                buf[_u(q * LANES + c)] = xf[_u(src + c * plane + q)]


@njit(cache=True, nogil=True, forceinline=True)
def into_window(xf, src, plane, nc, in_w, flat, window, wp, ph, pw, r1, c1):
    """The planes xf[src + c * plane:] (c < nc, in_w wide) channels-last into the inside of a padded window wp
    pixels wide (the input's pixel (0, 0) at row ph, column pw; rows [ph, r1) and columns [pw, c1) inside it; the
    border is left as it is): `from_planes` into `flat`, then one vector of LANES channels per pixel."""
    from_planes(xf, src, plane, nc, plane, flat)
    for r in range(ph, r1):
        f0 = (r - ph) * in_w - pw
        for q in range(pw, c1):
            vstore(window, _u((r * wp + q) * LANES), vload(flat, _u((f0 + q) * LANES)))
