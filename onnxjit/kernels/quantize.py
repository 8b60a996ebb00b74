"""Quantization kernels: QuantizeLinear / DequantizeLinear over (outer, axis, inner) views, the integer GEMM that
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and com.microsoft's QGemm / MatMulIntegerToFloat /
DynamicQuantizeMatMul run on, and com.microsoft's 8-bit elementwise ops (onnxjit.ops.quantize plans them all).

Quantize and dequantize see x as (O, C, I) around the quantization axis, and the scale and zero point as
(O', Cb, I') with O' in (1, O), I' in (1, I) and Cb = ceil(C / block): per-tensor is (1, 1, 1) over x as (1, 1,
size), per-axis (1, C, 1) with block 1, blocked (O, ceil(C / block), I). Rounding is to nearest even (rint), then
the zero point is added and the result saturates to the type's range; NaN goes to the lowest value, as
onnxruntime's MLAS does. int4 / int2 values are ml_dtypes' one-byte-per-element types: the value's low bits,
written and read through a uint8 view.

The integer GEMM computes out = (A - za) @ (B - zb) over 8-bit A and B with the CPU's integer dot-product
instructions:
- with AVX-512 VNNI (or AVX-VNNI), `vpdpbusd`: each int32 lane accumulates the products of 4 unsigned bytes of A
  with 4 signed bytes of B. A signed A is made unsigned by adding 128 and an unsigned B signed by subtracting 128;
  the offsets fold into the zero points (A - za = (A + 128) - (za + 128)), so any operand signedness runs on it;
- otherwise int16 pairs and `vpmaddwd` (LLVM emits it from the widening multiply and pairwise add written out in
  generic IR below, and fuses it with the add into VNNI's `vpdpwssd` where it can): exact, where the AVX2
  `vpmaddubsw` would saturate 255 * 127 + 255 * 127 to int16.
With `dot` = A_t @ B_t (A_t, B_t the operands as stored), (A_t - za') @ (B_t - zb') is
dot - zb'[n] * rowsum(A_t)[m] - za'[m] * (colsum(B_t)[n] - K * zb'[n]), the terms the epilogue adds (`rowsum`,
`colterm`), in int32 arithmetic that wraps as onnxruntime's accumulators do. B is packed in panels of NR columns,
each K / G words of NR lanes of G elements (G = 4 bytes or 2 int16; K zero-padded to a multiple of G), and each
row of A is read a word at a time and broadcast, so a 4 x NR register tile of int32 accumulators takes one
broadcast and two dot-product instructions per row and word: on one Emerald Rapids core, 128x768 @ 768x768 in
0.3 ms of dot products (230 GMAC/s); onnxruntime took 0.1 ms on two cores there (its MLAS carries AMX tile
kernels for this CPU, which this does not use). `pack_columns` writes B in this layout from an image as im2col would (a
matrix
is a 1x1 convolution over a (K, 1, 1, N) image), together with its column sums, a word (G rows) at a time over
each run of a panel's pixels along one output row (a run of x, strided by the conv's stride): 0.65 ms for the
3x3 im2col of 64 channels over 56x56 (1.8 M elements) on one Emerald Rapids core.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic, models, overload, register_model

from onnxjit.cache.jit import njit
from onnxjit.kernels import amx
from onnxjit.kernels.amx import tile_config, tile_dot_u8s8, tile_load, tile_release, tile_store, tile_zero
from onnxjit.kernels.conv import im2col_row
from onnxjit.kernels.simd import HAS_AVX512, LANES, vload, vmax, vmin, vsplat, vstore
from onnxjit.kernels.views import u64 as _u

_FEATURES = llvm.get_host_cpu_features().flatten().split(",")
# vpdpbusd on 512-bit vectors (AVX-512 VNNI) or 256-bit ones (AVX-VNNI, the VEX form); else int16 pairs
HAS_VNNI = ("+avx512vnni" in _FEATURES and HAS_AVX512) or "+avxvnni" in _FEATURES
IW = 16 if HAS_AVX512 else 8  # int32 lanes of a vector register (zmm / ymm)
MR = 4  # rows of A per register tile
NR = 2 * IW  # columns of B per panel: two vectors per tile row
# the operand element types of the integer dot product: (A's, B's, elements per int32 word)
DOT_TYPES = (np.uint8, np.int8, 4) if HAS_VNNI else (np.int16, np.int16, 2)
# AMX tiles (igemm_amx) where the process may use them: the byte operands, B's panels of NR = 32 columns read as two
# 16-column tiles
HAS_AMX_GEMM = amx.HAS_AMX and HAS_VNNI and IW == amx.ROWS
AMX_ROWS = 2 * amx.ROWS  # rows of A per igemm_amx unit (two tiles)
AMX_K_STEPS = 8  # steps of 64 K values per K block of igemm_amx: a unit's A block and B panel 16 KB each
AMX_CHUNK_UNITS = 64  # units a K block runs over before the next (their sums: 4 KB each)
# what the operands' K is padded to (with zeros) and, for A, its rows: whole tiles for AMX, whole words otherwise
K_ALIGN = amx.ROW_BYTES if HAS_AMX_GEMM else DOT_TYPES[2]
M_ALIGN = AMX_ROWS if HAS_AMX_GEMM else 1

_I32VEC = ir.VectorType(ir.IntType(32), IW)


class I32Vector(types.Type):
    """Numba's type of an `<IW x i32>` register value (the integer GEMM's accumulators)."""

    def __init__(self):
        super().__init__(name=f"i32x{IW}")


I32V = I32Vector()


@register_model(I32Vector)
class _I32VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _I32VEC)


def _element_pointer(context, builder, arrty, arr, index, indexty, pointee):
    data = context.make_array(arrty)(context, builder, value=arr).data
    i = context.cast(builder, index, indexty, types.intp)
    return builder.bitcast(builder.gep(data, [i]), pointee.as_pointer())


@intrinsic
def vzero_i32(typingctx):
    """An int32 vector of zeros."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_I32VEC, None)

    return I32V(), codegen


@intrinsic
def vstore_i32(typingctx, arr, index, v):
    """arr.flat[index:index + IW] = v (arr C-contiguous int32)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int32 and arr.layout == "C") or v != I32V:
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1], _I32VEC)
        builder.store(args[2], ptr, align=4)
        return context.get_dummy_value()

    return types.none(arr, index, v), codegen


@intrinsic
def vload_i32(typingctx, arr, index):
    """arr.flat[index:index + IW] as a vector (arr C-contiguous int32)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int32 and arr.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1], _I32VEC),
                            align=4)

    return I32V(arr, index), codegen


@intrinsic
def dot_words(typingctx, acc, a, ai, b, bi):
    """acc + in each lane j the dot product of A's word at element ai (4 uint8 or 2 int16 elements) with lane
    j's word of B's vector at element bi (4 int8 or 2 int16): `vpdpbusd` for bytes, `vpmaddwd` for int16."""
    if acc != I32V or not all(isinstance(t, types.Array) and t.layout == "C" for t in (a, b)):
        return None
    if (a.dtype, b.dtype) == (types.uint8, types.int8):
        bytes_ = True
    elif (a.dtype, b.dtype) == (types.int16, types.int16):
        bytes_ = False
    else:
        return None

    def codegen(context, builder, sig, args):
        word = builder.load(_element_pointer(context, builder, sig.args[1], args[1], args[2], sig.args[2],
                                             ir.IntType(32)), align=1)
        one = builder.insert_element(ir.Constant(_I32VEC, ir.Undefined), word, ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(one, ir.Constant(_I32VEC, ir.Undefined),
                                       ir.Constant(ir.VectorType(ir.IntType(32), IW), [0] * IW))
        bv = builder.load(_element_pointer(context, builder, sig.args[3], args[3], args[4], sig.args[4], _I32VEC),
                          align=1)
        if bytes_:
            name = f"llvm.x86.avx512.vpdpbusd.{32 * IW}"
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32VEC, [_I32VEC] * 3), name)
            return builder.call(fn, [args[0], splat, bv])
        # int16 pairs: sign-extend, multiply, add each even lane to the odd one after it (LLVM's vpmaddwd pattern)
        i16v = ir.VectorType(ir.IntType(16), 2 * IW)
        wide = ir.VectorType(ir.IntType(32), 2 * IW)
        prod = builder.mul(builder.sext(builder.bitcast(splat, i16v), wide),
                           builder.sext(builder.bitcast(bv, i16v), wide))
        undef = ir.Constant(wide, ir.Undefined)
        mask = ir.VectorType(ir.IntType(32), IW)
        even = builder.shuffle_vector(prod, undef, ir.Constant(mask, list(range(0, 2 * IW, 2))))
        odd = builder.shuffle_vector(prod, undef, ir.Constant(mask, list(range(1, 2 * IW, 2))))
        return builder.add(args[0], builder.add(even, odd))

    return I32V(acc, a, ai, b, bi), codegen


# finish_lanes' arguments by name: its code generation reads them by name (positions written as numbers went
# stale when the float bias joined them)
_FINISH_LANES_AT = {name: k for k, name in enumerate(("acc", "zb", "jz", "ctr", "jc", "mc", "jm", "cb", "jb", "rs",
                                                      "za", "extra", "mr", "requant", "zy", "lo", "hi", "out", "o"))}


@intrinsic
def finish_lanes(typingctx, acc, zb, jz, ctr, jc, mc, jm, cb, jb, rs, za, extra, mr, requant, zy, lo, hi, out, o):
    """out[o:o + IW] = the epilogue of one accumulator vector (see igemm), its columns' terms at zb[jz:],
    ctr[jc:], mc[jm:] and cb[jb:]: acc - zb * rs - za * ctr + extra in wrapping int32 arithmetic, then with
    `requant` clamp(rint(float32(that) * (mr * mc)), lo, hi) + zy, stored in out's type (truncated to 8 bits as a
    scalar store would); into a float32 out, float32(that) * (mr * mc) + cb whatever `requant` says (two
    roundings, as onnxruntime's MatMulIntegerToFloat adds its bias). Written as vector IR: LLVM left the same loop
    over a tile's 32 columns to its scalar remainder (its vector loop took 64 a pass), 5 cycles a value."""
    arrays = (zb, ctr, mc, cb, out)
    indexes = (jz, jc, jm, jb, o)
    if acc != I32V or not all(isinstance(t, types.Array) and t.layout == "C" and t.ndim == 1 for t in arrays) \
            or (zb.dtype, ctr.dtype, mc.dtype, cb.dtype) != (types.int32, types.int32, types.float32, types.float32) \
            or out.dtype not in (types.int32, types.uint8, types.int8, types.float32) \
            or not all(isinstance(t, types.Integer) for t in indexes):
        return None

    def codegen(context, builder, sig, args):
        i32, f32 = ir.IntType(32), ir.FloatType()
        fvec = ir.VectorType(f32, IW)

        def splat(value, vec):
            one = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(vec, ir.Undefined), ir.Constant(_I32VEC, [0] * IW))

        def cast(name, to):  # the argument `name` as a scalar of type `to`
            k = _FINISH_LANES_AT[name]
            return context.cast(builder, args[k], sig.args[k], to)

        def pointer(name, vec):  # array `name` at the index after it, as a pointer to `vec`
            k = _FINISH_LANES_AT[name]
            return _element_pointer(context, builder, sig.args[k], args[k], args[k + 1], sig.args[k + 1], vec)

        def load(name, vec):
            return builder.load(pointer(name, vec), align=4)
        v = builder.sub(args[0], builder.mul(load("zb", _I32VEC), splat(cast("rs", types.int32), _I32VEC)))
        v = builder.sub(v, builder.mul(splat(cast("za", types.int32), _I32VEC), load("ctr", _I32VEC)))
        v = builder.add(v, splat(cast("extra", types.int32), _I32VEC))
        out_ty = sig.args[_FINISH_LANES_AT["out"]]
        if out_ty.dtype == types.float32:  # the scaled sum itself (MatMulIntegerToFloat), plus the column's bias
            mult = builder.fmul(splat(cast("mr", types.float32), fvec), load("mc", fvec))
            builder.store(builder.fadd(builder.fmul(builder.sitofp(v, fvec), mult), load("cb", fvec)),
                          pointer("out", fvec), align=4)
            return context.get_dummy_value()
        bits = 32 if out_ty.dtype == types.int32 else 8
        store_vec = ir.VectorType(ir.IntType(bits), IW)
        ptr = pointer("out", store_vec)
        with builder.if_else(cast("requant", types.boolean)) as (then, otherwise):
            with then:
                mult = builder.fmul(splat(cast("mr", types.float32), fvec), load("mc", fvec))
                f = builder.fmul(builder.sitofp(v, fvec), mult)
                rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(fvec, [fvec]),
                                                      f"llvm.rint.v{IW}f32")
                f = builder.call(rint, [f])
                lo_s = splat(cast("lo", types.float32), fvec)
                hi_s = splat(cast("hi", types.float32), fvec)
                f = builder.select(builder.fcmp_ordered(">", f, lo_s), f, lo_s)  # max(f, lo): f is never NaN
                f = builder.select(builder.fcmp_ordered("<", f, hi_s), f, hi_s)
                q = builder.add(builder.fptosi(f, _I32VEC), splat(cast("zy", types.int32), _I32VEC))
                builder.store(q if bits == 32 else builder.trunc(q, store_vec), ptr, align=1)
            with otherwise:
                builder.store(v if bits == 32 else builder.trunc(v, store_vec), ptr, align=1)
        return context.get_dummy_value()

    return types.none(acc, zb, jz, ctr, jc, mc, jm, cb, jb, rs, za, extra, mr, requant, zy, lo, hi, out, o), codegen


# --- QuantizeLinear / DequantizeLinear ------------------------------------------------------------------------
INNER_CHUNK = 1 << 14  # elements of a quantize / dequantize work unit along the inner dim


@njit(cache=True, nogil=True, forceinline=True)
def _unit_span(u, n_chunks, inner):
    """(row of (O, C), first and end inner index) of work unit u."""
    row = u // n_chunks
    i0 = (u - row * n_chunks) * INNER_CHUNK
    return row, i0, min(inner, i0 + INNER_CHUNK)


@njit(cache=True, nogil=True, forceinline=True)
def _param_base(row, c_size, block, shape):
    """Flat index of row (o, c)'s first scale / zero point (its inner index 0) in an (O', Cb, I') array."""
    o = row // c_size
    c = row - o * c_size
    return ((o if shape[0] > 1 else 0) * shape[1] + c // block) * shape[2]


@njit(cache=True, nogil=True, forceinline=True)
def _operands(x, scale, zero_point, out):
    """quantize's and dequantize's view of their operands: (C, I, chunks of a row, x, scale, out and zero_point
    flat, whether there is a zero point, whether the scale varies along I)."""
    inner = x.shape[2]
    zf = zero_point.reshape(-1)
    return (x.shape[1], inner, (inner + INNER_CHUNK - 1) // INNER_CHUNK, x.reshape(-1), scale.reshape(-1),
            out.reshape(-1), zf, zf.size > 0, scale.shape[2] > 1)


@njit(cache=True, nogil=True)
def quantize(x, scale, zero_point, block, lo, hi, mask, to_float, out, u0, u1):
    """out = saturate(rint(x / scale) + zero_point) over units [u0, u1) of x as (O, C, I) float32, scale and
    zero_point (O', Cb, I') (float32 and int32, or float32 with to_float; zero_point empty for zero), `block`
    channels per scale along C. lo, hi (float32): the output range; `mask` keeps a sub-byte type's low bits (-1
    for the others). With `to_float` out is float32 (the float8 / float4 path, converted by the caller) and gets
    x / scale + zero_point, clamped to [lo, hi] unless lo > hi (saturate=0), NaN kept."""
    c_size, inner, n_chunks, xf, sf, of, zf, has_zp, per_inner = _operands(x, scale, zero_point, out)
    zero = np.float32(0)
    for u in range(u0, u1):
        row, i0, i1 = _unit_span(u, n_chunks, inner)
        p0 = _param_base(row, c_size, block, scale.shape)
        base = row * inner
        if per_inner:  # blocked along an outer axis: a scale per element of the row
            for i in range(i0, i1):
                p = _u(p0 + i)
                z = np.float32(zf[p]) if has_zp else zero
                _quantize_one(xf, of, _u(base + i), sf[p], z, lo, hi, mask, to_float)
            continue
        s = sf[_u(p0)]
        z = np.float32(zf[_u(p0)]) if has_zp else zero
        # one loop per output kind, each a plain loop LLVM vectorizes (the kind tested per element kept it
        # scalar: 13 ns an element)
        if to_float:
            for i in range(base + i0, base + i1):
                _quantize_one(xf, of, _u(i), s, z, lo, hi, mask, True)
        else:
            for i in range(base + i0, base + i1):
                _quantize_one(xf, of, _u(i), s, z, lo, hi, mask, False)


@njit(cache=True, nogil=True, forceinline=True)
def _quantize_one(xf, of, i, s, z, lo, hi, mask, to_float):
    """of[i] = the quantized xf[i] (see quantize)."""
    if to_float:
        v = xf[i] / s
        if z != 0:  # (adding a zero would turn -0.0 into 0.0; onnxruntime keeps -0.0)
            v += z
        if lo <= hi:  # (comparisons, not min / max: NaN stays NaN)
            v = hi if v > hi else (lo if v < lo else v)  # noqa: FURB136
        of[i] = v
    else:
        v = np.rint(xf[i] / s) + z
        v = hi if v > hi else (v if v >= lo else lo)  # noqa: FURB136 - NaN goes to lo
        of[i] = np.int32(v) & mask


@njit(cache=True, nogil=True)
def dequantize(x, narrow, signed, scale, zero_point, block, out, u0, u1):
    """out = (x - zero_point) * scale (float32) over units [u0, u1), the shapes as in `quantize`; x integers
    (`narrow` bits of a uint8 view of a sub-byte type, `signed` or not) or float32 (a float8 input, converted)."""
    c_size, inner, n_chunks, xf, sf, of, zf, has_zp, per_inner = _operands(x, scale, zero_point, out)
    mask = (1 << narrow) - 1
    sign = 1 << (narrow - 1) if signed and narrow else 0
    for u in range(u0, u1):
        row, i0, i1 = _unit_span(u, n_chunks, inner)
        p0 = _param_base(row, c_size, block, scale.shape)
        base = row * inner
        for i in range(i0, i1):
            p = _u(p0 + i) if per_inner else _u(p0)
            q = xf[_u(base + i)]
            if narrow:
                q = ((np.int64(q) & mask) ^ sign) - sign
            if has_zp:
                of[_u(base + i)] = np.float32(q - zf[p]) * sf[p]
            else:
                of[_u(base + i)] = np.float32(q) * sf[p]


# --- the integer GEMM -----------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def pack_columns(x, offset, group, k, s, d, out_sizes, kp, out, colsum, u0, u1):
    """B operands in the GEMM's panel layout from x (N, C, D, H, W), padded already (every tap of every output
    pixel inside it), each (image, group) the im2col matrix of its group's channels (rows: channel-major kernel
    taps, Kp of them, zero beyond the real K; columns: output pixels) of values x - offset. out (N * group,
    panels, Kp / G * NR * G), colsum (N * group, pixels) the column sums over the real K rows. Units: (image,
    group, panel)."""
    g_words = 4 // out.itemsize
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    od, oh, ow = out_sizes
    in_d, in_h, in_w = x.shape[2], x.shape[3], x.shape[4]
    cg = x.shape[1] // group
    kvol = kd * kh * kw
    kk = cg * kvol
    npx = od * oh * ow
    panels = out.shape[1]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    pixel = np.empty(NR, np.int64)  # each panel column's first input element, from its channel plane's start
    taps = np.empty(kk, np.int64)  # each im2col row's offset from the group's first channel plane
    for r in range(kk):
        c, a, b, e = im2col_row(r, kvol, kh, kw)
        taps[r] = ((c * in_d + a * dd) * in_h + b * dh) * in_w + e * dw
    sums = np.empty(NR, np.int32)
    zero = out.dtype.type(0)
    for u in range(u0, u1):
        bg = u // panels
        panel = u - bg * panels
        img = bg // group
        c0 = (bg - img * group) * cg
        px0 = panel * NR
        cols = min(NR, npx - px0)
        for j in range(NR):
            q = px0 + min(j, cols - 1)  # columns past the pixels repeat the last one (never stored)
            i = q // (oh * ow)
            r = q - i * oh * ow
            h = r // ow
            pixel[j] = ((i * sd) * in_h + h * sh) * in_w + (r - h * ow) * sw
            sums[j] = 0
        base = u * out.shape[2]
        plane0 = (img * x.shape[1] + c0) * in_d * in_h * in_w
        full_words = kk // g_words
        for q in range(full_words):  # whole words: per run of pixels along an output row, G rows at a time
            dst = base + q * NR * g_words
            src = plane0 + taps[q * g_words]
            # (a word's rows as offsets from its first: the kernel taps' spacing)
            d1 = taps[q * g_words + 1] - taps[q * g_words]
            d2 = taps[q * g_words + 2 * (g_words // 4)] - taps[q * g_words]
            d3 = taps[q * g_words + 3 * (g_words // 4)] - taps[q * g_words]
            if cols == NR and sw == 1 and px0 % ow + NR <= ow:  # one run of x: a loop of constant length
                _copy_word_run(xf, of, src + pixel[0], d1, d2, d3, 1, 0, NR, dst, g_words, offset, sums)
                continue
            j0 = 0
            while j0 < cols:
                j1 = min(cols, j0 + ow - (px0 + j0) % ow)
                _copy_word_run(xf, of, src + pixel[j0], d1, d2, d3, sw, j0, j1, dst, g_words, offset, sums)
                j0 = j1
            if cols < NR:  # lanes past the pixels: the last one again (never stored)
                _copy_word_run(xf, of, src + pixel[cols - 1], d1, d2, d3, 0, cols, NR, dst, g_words, offset, sums)
        first = full_words * g_words
        for r in range(first, kk):  # the rows of a last partial word, element by element
            src = plane0 + taps[r]
            dst = base + (r // g_words) * NR * g_words + r % g_words
            for j in range(NR):
                v = np.int32(xf[_u(src + pixel[j])]) - offset
                of[_u(dst + j * g_words)] = v
                sums[j] += v
        for r in range(kk, kp):
            dst = base + (r // g_words) * NR * g_words + r % g_words
            for j in range(NR):
                of[_u(dst + j * g_words)] = zero
        for j in range(cols):
            colsum[bg, px0 + j] = sums[j]


@njit(cache=True, nogil=True, forceinline=True)
def _copy_word_run(xf, of, src, d1, d2, d3, step, j0, j1, dst, g_words, offset, sums):
    """Lanes [j0, j1) of one word of a packed panel: lane j's G elements are x at src + (j - j0) * step plus 0, d1
    (, d2, d3), less offset; their sum is added to sums[j]. The unit step is passed as a literal, so that once
    inlined its loads are plain ones LLVM vectorizes."""
    if g_words == 4:
        if step == 1:
            _copy_lanes4(xf, of, src, d1, d2, d3, 1, j0, j1, dst, offset, sums)
        else:
            _copy_lanes4(xf, of, src, d1, d2, d3, step, j0, j1, dst, offset, sums)
    else:
        for j in range(j0, j1):
            o = src + (j - j0) * step
            v0 = np.int32(xf[_u(o)]) - offset
            v1 = np.int32(xf[_u(o + d1)]) - offset
            of[_u(dst + 2 * j)] = v0
            of[_u(dst + 2 * j + 1)] = v1
            sums[j] += v0 + v1


@njit(cache=True, nogil=True, forceinline=True)
def _copy_lanes4(xf, of, src, d1, d2, d3, step, j0, j1, dst, offset, sums):
    """_copy_word_run's lanes of four elements."""
    for j in range(j0, j1):
        o = src + (j - j0) * step
        v0 = np.int32(xf[_u(o)]) - offset
        v1 = np.int32(xf[_u(o + d1)]) - offset
        v2 = np.int32(xf[_u(o + d2)]) - offset
        v3 = np.int32(xf[_u(o + d3)]) - offset
        of[_u(dst + 4 * j)] = v0
        of[_u(dst + 4 * j + 1)] = v1
        of[_u(dst + 4 * j + 2)] = v2
        of[_u(dst + 4 * j + 3)] = v3
        sums[j] += v0 + v1 + v2 + v3


@njit(cache=True, nogil=True)
def pack_rows(a3, offset, at, rowsum):
    """A (Ba, M, K) as the GEMM stores it: at (Ba, M', Kp) = a3 - offset, zero past M and K, and rowsum (Ba, M')
    its row sums: one pass (numpy's conversion, subtraction, copy into the padded array and sum took 80 us for a
    128 x 1536 A)."""
    ba, m, k = a3.shape
    kp = at.shape[2]
    zero = at.dtype.type(0)
    for b in range(ba):
        for i in range(at.shape[1]):
            if i >= m:
                at[b, i, :] = zero
                rowsum[b, i] = 0
                continue
            s = np.int32(0)
            for j in range(k):
                v = np.int32(a3[b, i, j]) - offset
                at[b, i, j] = v
                s += v
            for j in range(k, kp):
                at[b, i, j] = zero
            rowsum[b, i] = s


@njit(cache=True, nogil=True)
def value_range(x):
    """(min, max) over x's values and 0, float32 (x float32, C-contiguous), NaN passed over as onnxruntime's
    MlasFindMinMaxElement passes it (all but a NaN among the last few values): DynamicQuantizeLinear's range, in
    one pass of vectors. (numpy's min and max made two passes, and a scalar min / max loop stays scalar: LLVM does
    not vectorize a float reduction it must keep in order; 128 x 384 values: 5.9 -> 2.1 us, one Intel Xeon core.)"""
    xf = x.reshape(x.size)
    n = xf.size
    lo = vsplat(np.float32(0))
    hi = lo
    n_vec = n - n % LANES
    for i in range(0, n_vec, LANES):
        v = vload(xf, _u(i))
        lo = vmin(lo, v)
        hi = vmax(hi, v)
    lanes = np.empty(2 * LANES, np.float32)
    vstore(lanes, 0, lo)
    vstore(lanes, LANES, hi)
    a, b = np.float32(0), np.float32(0)
    for j in range(LANES):
        a = lanes[j] if lanes[j] < a else a
        b = lanes[LANES + j] if lanes[LANES + j] > b else b
    for i in range(n_vec, n):
        v = xf[i]
        a = v if v < a else a
        b = v if v > b else b
    return a, b


@njit(cache=True, nogil=True)
def dynamic_quantization(x):
    """(scale, zero point) of DynamicQuantizeLinear for float32 x (C-contiguous), as
    contrib.microsoft.quantized.dynamic_quantization computes them (its range from value_range)."""
    lo, hi = value_range(x)
    scale = np.float32(1) if hi == lo else np.float32(np.float32(hi - lo) / np.float32(255))
    zp = np.rint(min(max(np.float32(0) - np.float32(lo / scale), np.float32(0)), np.float32(255)))
    return scale, np.uint8(zp)


@njit(cache=True, nogil=True)
def quantize_pack_rows(x2, scale, zp, offset, at, rowsum, u0, u1):
    """DynamicQuantizeLinear's uint8 values of x2 (M, K) float32 (rint(x / scale) + zp saturated to [0, 255], NaN
    to 0, as `quantize` computes them) stored as pack_rows stores A: at (1, M', Kp) = that - offset, zero past M
    and K, and rowsum (1, M') its row sums; over rows [u0, u1) of M'. One pass where DynamicQuantizeLinear and
    pack_rows made two and an array between them."""
    m, k = x2.shape
    kp = at.shape[2]
    zero = at.dtype.type(0)
    lo, hi = np.float32(0), np.float32(255)
    off = np.int32(offset)
    for i in range(u0, u1):
        if i >= m:
            at[0, i, :] = zero
            rowsum[0, i] = 0
            continue
        s = np.int32(0)
        row, out = x2[i], at[0, i]
        for j in range(k):
            # _quantize_one's value, written out: through a shared forceinline helper, `quantize`'s loop stayed
            # scalar (DynamicQuantizeLinear of 196K values 80 -> 165 us). int32 throughout (Numba types int32 -
            # int32 as int64, and the loop ran in int64 lanes: 128 x 384 values 14.5 -> 11.3 us, one Intel Xeon core;
            # the division bounds it now)
            v = np.rint(row[j] / scale) + zp
            v = hi if v > hi else (v if v >= lo else lo)  # noqa: FURB136 - NaN goes to lo
            q = np.int32(np.int32(v) - off)
            out[j] = q
            s = np.int32(s + q)
        for j in range(k, kp):
            out[j] = zero
        rowsum[0, i] = s


@njit(cache=True, nogil=True)
def igemm(a, bp, za, rowsum, zb, colterm, bias, mult_r, mult_c, col_bias, requant, zy, lo, hi, out, u0, u1):
    """out[b] = (a[b] - za) @ (B[b] - zb) + bias (int32), or with `requant` rint(that * mult_r[m] * mult_c[n])
    clamped to [lo, hi] (the output type's range less zy) plus zy, or into a float32 out that * mult_r[m] *
    mult_c[n] + col_bias[n], over units [u0, u1) of (batch, panel, block of MR rows).

    a: (Ba, M', Kp) A's rows as stored (DOT_TYPES), M' >= M rows, Kp a multiple of the word size, zero-padded;
    bp: (Bb, panels, Kp / G * NR * G) B packed (pack_columns); out (B, M, N). Per-row arrays (za' = A's zero
    points as stored, rowsum, bias, mult_r) are (Ba', M) and per-column ones (zb', colterm, mult_c, col_bias)
    (Bb', N), each read at batch b % its leading size (1 or the operand's batches; for a grouped conv, A's batches
    are the groups)."""
    m, n = out.shape[1], out.shape[2]
    kp = a.shape[2]
    g_words = 4 // a.itemsize
    n_words = kp // g_words
    panels = bp.shape[1]
    row_blocks = (m + MR - 1) // MR
    af = a.reshape(-1)
    bf = bp.reshape(-1)
    tile = np.empty(MR * NR, np.int32)
    half = IW * g_words
    zbf, ctf, mcf, of = zb.reshape(-1), colterm.reshape(-1), mult_c.reshape(-1), out.reshape(-1)
    cbf = col_bias.reshape(-1)
    for u in range(u0, u1):
        rb = u % row_blocks
        bpn = u // row_blocks
        panel = bpn % panels
        b = bpn // panels
        r0 = rb * MR
        rows = min(MR, m - r0)
        a0 = (b % a.shape[0]) * a.shape[1] * kp  # (a's rows may go past M: AMX's layout)
        o0 = a0 + r0 * kp
        o1 = a0 + min(r0 + 1, m - 1) * kp
        o2 = a0 + min(r0 + 2, m - 1) * kp
        o3 = a0 + min(r0 + 3, m - 1) * kp
        pb = ((b % bp.shape[0]) * panels + panel) * bp.shape[2]
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = vzero_i32()
        for q in range(n_words):
            bo = pb + q * NR * g_words
            ao = q * g_words
            c00 = dot_words(c00, af, o0 + ao, bf, bo)
            c01 = dot_words(c01, af, o0 + ao, bf, bo + half)
            c10 = dot_words(c10, af, o1 + ao, bf, bo)
            c11 = dot_words(c11, af, o1 + ao, bf, bo + half)
            c20 = dot_words(c20, af, o2 + ao, bf, bo)
            c21 = dot_words(c21, af, o2 + ao, bf, bo + half)
            c30 = dot_words(c30, af, o3 + ao, bf, bo)
            c31 = dot_words(c31, af, o3 + ao, bf, bo + half)
        n0 = panel * NR
        if rows == MR and n0 + NR <= n:  # a whole tile: its epilogue from the registers
            jz = (b % zb.shape[0]) * n + n0
            jc = (b % colterm.shape[0]) * n + n0
            jm = (b % mult_c.shape[0]) * n + n0
            jb = (b % col_bias.shape[0]) * n + n0
            o = (b * m + r0) * n + n0
            for r in range(MR):
                c0, c1 = (c00, c01) if r == 0 else (c10, c11) if r == 1 else (c20, c21) if r == 2 else (c30, c31)
                mm = r0 + r
                rs, zam = rowsum[b % rowsum.shape[0], mm], za[b % za.shape[0], mm]
                extra, mr = bias[b % bias.shape[0], mm], mult_r[b % mult_r.shape[0], mm]
                finish_lanes(c0, zbf, jz, ctf, jc, mcf, jm, cbf, jb, rs, zam, extra, mr, requant, zy, lo, hi, of,
                             o + r * n)
                finish_lanes(c1, zbf, jz + IW, ctf, jc + IW, mcf, jm + IW, cbf, jb + IW, rs, zam, extra, mr, requant,
                             zy, lo, hi, of, o + r * n + IW)
            continue
        vstore_i32(tile, 0, c00)
        vstore_i32(tile, IW, c01)
        vstore_i32(tile, NR, c10)
        vstore_i32(tile, NR + IW, c11)
        vstore_i32(tile, 2 * NR, c20)
        vstore_i32(tile, 2 * NR + IW, c21)
        vstore_i32(tile, 3 * NR, c30)
        vstore_i32(tile, 3 * NR + IW, c31)
        _finish_tile(tile, b, r0, rows, n0, min(NR, n - n0), za, rowsum, zb, colterm, bias, mult_r,
                     mult_c, col_bias, requant, zy, lo, hi, out)


@njit(cache=True, nogil=True, forceinline=True)
def _amx_unit(u, panels, row_blocks, panels_fastest):
    """(row block, panel, batch) of igemm_amx's unit u."""
    if panels_fastest:
        rest = u // panels
        return rest % row_blocks, u % panels, rest // row_blocks
    rest = u // row_blocks
    return u % row_blocks, rest % panels, rest // panels


@njit(cache=True, nogil=True)
def igemm_amx(a, bp, za, rowsum, zb, colterm, bias, mult_r, mult_c, col_bias, requant, zy, lo, hi, out, u0, u1):
    """igemm on AMX tiles, over units [u0, u1) of (batch, panel, block of AMX_ROWS rows): per unit four 16 x 16
    int32 tiles (two row tiles of A by B's panel as two 16-column tiles) summed over K in steps of 64 by tdpbusd,
    then igemm's epilogue. a (Ba, M', Kp) with M' a multiple of AMX_ROWS and Kp of 64 (zero rows and columns past
    the real ones), bp as igemm's with that Kp; the rest as igemm's. About 5x igemm's speed on one Sapphire Rapids
    core for a 128 x 384 x 384 product.

    K is cut into blocks of AMX_K_STEPS steps: once a unit's block of A and panel of B passed 48 KB together (K
    above ~512), they no longer stayed in L1 between the units sharing them and the tiles ran at a third of their
    speed (128 x 1536 @ 1536 x 384). Each block runs over a chunk of units, their sums kept in memory between
    blocks."""
    m, n = out.shape[1], out.shape[2]
    mp, kp = a.shape[1], a.shape[2]
    panels = bp.shape[1]
    row_blocks = (m + AMX_ROWS - 1) // AMX_ROWS
    af = a.reshape(-1)
    bf = bp.reshape(-1)
    zbf, ctf, mcf, of = zb.reshape(-1), colterm.reshape(-1), mult_c.reshape(-1), out.reshape(-1)
    cbf = col_bias.reshape(-1)
    word_row = NR * 4  # bytes of a panel's row of words (4 K values for each of its NR columns)
    steps = kp // amx.ROW_BYTES
    k_blocks = max(1, (steps + AMX_K_STEPS - 1) // AMX_K_STEPS)  # (K = 0: one block of no steps, sums of 0)
    chunk = AMX_CHUNK_UNITS if k_blocks > 1 else 1
    tile_size = AMX_ROWS * NR
    sums = np.empty(chunk * tile_size, np.int32)  # each unit's sums of the chunk, between K blocks
    tile = np.empty(tile_size, np.int32)
    cfg = np.zeros(64, np.uint8)  # palette 1, eight tiles of 16 rows of 64 bytes
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = amx.ROW_BYTES
        cfg[48 + t] = amx.ROWS
    tile_config(cfg)
    # consecutive units share the operand with fewer blocks, which stays in L1 while the other streams through
    # (128 x 384 x 1536: 38 us with A's block kept, 106 with B's panel; 512 x 256 x 256: 24 against 48 the other
    # way round)
    panels_fastest = panels >= row_blocks
    for c0 in range(u0, u1, chunk):
        c1 = min(u1, c0 + chunk)
        for kb in range(k_blocks):
            q0 = kb * AMX_K_STEPS
            q1 = min(steps, q0 + AMX_K_STEPS)
            for u in range(c0, c1):
                rb, panel, b = _amx_unit(u, panels, row_blocks, panels_fastest)
                r0 = rb * AMX_ROWS
                a0 = ((b % a.shape[0]) * mp + r0) * kp
                pb = ((b % bp.shape[0]) * panels + panel) * bp.shape[2]
                t0 = (u - c0) * tile_size
                if kb == 0:
                    tile_zero(0)
                    tile_zero(1)
                    tile_zero(2)
                    tile_zero(3)
                else:
                    tile_load(0, sums, t0, word_row)
                    tile_load(1, sums, t0 + amx.ROWS, word_row)
                    tile_load(2, sums, t0 + amx.ROWS * NR, word_row)
                    tile_load(3, sums, t0 + amx.ROWS * NR + amx.ROWS, word_row)
                for q in range(q0, q1):
                    tile_load(4, af, a0 + q * amx.ROW_BYTES, kp)
                    tile_load(5, af, a0 + amx.ROWS * kp + q * amx.ROW_BYTES, kp)
                    tile_load(6, bf, pb + q * amx.ROWS * word_row, word_row)
                    tile_load(7, bf, pb + q * amx.ROWS * word_row + amx.ROW_BYTES, word_row)
                    tile_dot_u8s8(0, 4, 6)
                    tile_dot_u8s8(1, 4, 7)
                    tile_dot_u8s8(2, 5, 6)
                    tile_dot_u8s8(3, 5, 7)
                tile_store(0, sums, t0, word_row)
                tile_store(1, sums, t0 + amx.ROWS, word_row)
                tile_store(2, sums, t0 + amx.ROWS * NR, word_row)
                tile_store(3, sums, t0 + amx.ROWS * NR + amx.ROWS, word_row)
                if kb < k_blocks - 1:
                    continue
                rows = min(AMX_ROWS, m - r0)
                n0 = panel * NR
                if n0 + NR > n:  # the last panel's columns past N: the scalar epilogue
                    tile[:] = sums[t0:t0 + tile_size]
                    _finish_tile(tile, b, r0, rows, n0, n - n0, za, rowsum, zb, colterm, bias, mult_r, mult_c,
                                 col_bias, requant, zy, lo, hi, out)
                    continue
                jz = (b % zb.shape[0]) * n + n0
                jc = (b % colterm.shape[0]) * n + n0
                jm = (b % mult_c.shape[0]) * n + n0
                jb = (b % col_bias.shape[0]) * n + n0
                o = (b * m + r0) * n + n0
                # the per-row arrays' rows for this batch, once per unit (four divisions a row cost as much as its
                # dots)
                rs_b, za_b = rowsum[b % rowsum.shape[0]], za[b % za.shape[0]]
                bias_b, mr_b = bias[b % bias.shape[0]], mult_r[b % mult_r.shape[0]]
                for r in range(rows):
                    mm = r0 + r
                    rs, zam, extra, mr = rs_b[mm], za_b[mm], bias_b[mm], mr_b[mm]
                    t = t0 + r * NR
                    finish_lanes(vload_i32(sums, t), zbf, jz, ctf, jc, mcf, jm, cbf, jb, rs, zam, extra, mr, requant,
                                 zy, lo, hi, of, o + r * n)
                    finish_lanes(vload_i32(sums, t + IW), zbf, jz + IW, ctf, jc + IW, mcf, jm + IW, cbf, jb + IW, rs,
                                 zam, extra, mr, requant, zy, lo, hi, of, o + r * n + IW)
    tile_release()


# the integer GEMM the ops run, and the rows of A one of its units covers
IGEMM, IGEMM_ROWS = (igemm_amx, AMX_ROWS) if HAS_AMX_GEMM else (igemm, MR)


def _writes_float(out) -> bool:
    """Whether `out` is a float array (a constant where the kernels are compiled)."""
    return out.dtype.kind == "f"


@overload(_writes_float)
def _writes_float_impl(out):
    is_float = isinstance(out.dtype, types.Float)
    return lambda out: is_float


@njit(cache=True, nogil=True)
def _finish_tile(tile, b, r0, rows, n0, cols, za, rowsum, zb, colterm, bias, mult_r, mult_c, col_bias, requant, zy,
                 lo, hi, out):
    """The epilogue of one register tile: zero-point terms, bias, and the requantization (see igemm), in int32
    arithmetic that wraps as onnxruntime's accumulators do."""
    m, n = out.shape[1], out.shape[2]
    zbr, ctr, mcr = zb[b % zb.shape[0]], colterm[b % colterm.shape[0]], mult_c[b % mult_c.shape[0]]
    cbr = col_bias[b % col_bias.shape[0]]
    of = out.reshape(-1)
    for r in range(rows):
        mm = r0 + r
        zam = za[b % za.shape[0], mm]
        rs = rowsum[b % rowsum.shape[0], mm]
        extra = bias[b % bias.shape[0], mm]
        mr = mult_r[b % mult_r.shape[0], mm]
        o = (b * m + mm) * n + n0
        t = r * NR
        if _writes_float(out):  # the scaled sum itself (see finish_lanes)
            for j in range(cols):
                acc = np.int32(tile[_u(t + j)] - zbr[_u(n0 + j)] * rs - zam * ctr[_u(n0 + j)] + extra)
                of[_u(o + j)] = np.float32(acc) * (mr * mcr[_u(n0 + j)]) + cbr[_u(n0 + j)]
        elif requant:
            for j in range(cols):
                acc = np.int32(tile[_u(t + j)] - zbr[_u(n0 + j)] * rs - zam * ctr[_u(n0 + j)] + extra)
                f = min(max(np.rint(np.float32(acc) * (mr * mcr[_u(n0 + j)])), lo), hi)
                of[_u(o + j)] = np.int32(f) + zy
        else:
            for j in range(cols):
                of[_u(o + j)] = np.int32(tile[_u(t + j)] - zbr[_u(n0 + j)] * rs - zam * ctr[_u(n0 + j)] + extra)


# --- com.microsoft quantized elementwise ops ------------------------------------------------------------------
@njit(cache=True, nogil=True)
def lookup(x, table, out, u0, u1):
    """out = table[x] over units [u0, u1) of INNER_CHUNK elements, x the uint8 view of 8-bit values (an 8-bit
    unary op's 256 outputs precomputed)."""
    xf, of = x.reshape(-1), out.reshape(-1)
    n = xf.size
    for u in range(u0, u1):
        for i in range(u * INNER_CHUNK, min(n, (u + 1) * INNER_CHUNK)):
            of[_u(i)] = table[xf[_u(i)]]


@njit(cache=True, nogil=True)
def qlinear_binary(a, b, multiply, za, zb, zc, ratio_a, ratio_b, lo, hi, out, u0, u1):
    """QLinearAdd (rint((a - za) * ratio_a + (b - zb) * ratio_b) + zc) or, with `multiply`, QLinearMul
    (rint((a - za) * (b - zb) * ratio_a) + zc), saturated to [lo, hi] (float32), over units [u0, u1) of
    INNER_CHUNK elements of the flat output; a or b may hold one value, broadcast."""
    af, bf, of = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    n = of.size
    for u in range(u0, u1):
        i0, i1 = u * INNER_CHUNK, min(n, (u + 1) * INNER_CHUNK)
        # one loop per operand form, each a plain loop LLVM vectorizes
        if af.size == 1:
            va = np.float32(np.int32(af[0]) - za)
            for i in range(i0, i1):
                of[_u(i)] = _qlinear_value(va, bf[_u(i)], multiply, zb, zc, ratio_a, ratio_b, lo, hi)
        elif bf.size == 1:
            for i in range(i0, i1):
                of[_u(i)] = _qlinear_value(np.float32(np.int32(af[_u(i)]) - za), bf[0], multiply, zb, zc, ratio_a,
                                           ratio_b, lo, hi)
        else:
            for i in range(i0, i1):
                of[_u(i)] = _qlinear_value(np.float32(np.int32(af[_u(i)]) - za), bf[_u(i)], multiply, zb, zc,
                                           ratio_a, ratio_b, lo, hi)


@njit(cache=True, nogil=True)
def qlinear_binary_rows(a, b, multiply, za, zb, zc, ratio_a, ratio_b, lo, hi, out, u0, u1):
    """qlinear_binary's value of a (R, N) and b (N,), one row of b for every row of a (a bias over a matrix's
    columns: the row loop vectorizes where a modulo index would not), over rows [u0, u1)."""
    n = b.shape[0]
    for r in range(u0, u1):
        ar, orow = a[r], out[r]
        for j in range(n):
            orow[j] = _qlinear_value(np.float32(np.int32(ar[j]) - za), b[j], multiply, zb, zc, ratio_a, ratio_b, lo,
                                     hi)


@njit(cache=True, nogil=True, forceinline=True)
def _qlinear_value(va, b, multiply, zb, zc, ratio_a, ratio_b, lo, hi):
    vb = np.float32(np.int32(b) - zb)
    v = np.rint(va * vb * ratio_a) if multiply else np.rint(va * ratio_a + vb * ratio_b)
    return np.int32(min(max(v + zc, lo), hi))


@njit(cache=True, nogil=True)
def softmax_rows(x, signed, table, y_scale, zy, out, u0, u1):
    """QLinearSoftmax over rows [u0, u1) of x (rows, D), the uint8 view of 8-bit values (int8 where `signed`),
    as onnxruntime computes it: e = table[255 - (row max - x)] (float32 exponentials,
    contrib.microsoft.quantized.softmax_table), their sum in order, then rint(e * y_scale / sum) + zy saturated,
    with y_scale the float32 floor(1 / Y's scale); the type's highest value where e * y_scale overflows (rows of
    one or two values) or the quotient is past int32's range."""
    d = x.shape[1]
    lo, hi = (np.int32(-128), np.int32(127)) if signed else (np.int32(0), np.int32(255))
    for r in range(u0, u1):
        row = x[r]
        top = np.int32(-1000)
        for j in range(d):
            v = np.int32(np.int8(row[j])) if signed else np.int32(row[j])
            top = max(top, v)
        total = np.float32(0)
        for j in range(d):
            v = np.int32(np.int8(row[j])) if signed else np.int32(row[j])
            total += table[255 - (top - v)]
        for j in range(d):
            v = np.int32(np.int8(row[j])) if signed else np.int32(row[j])
            f = np.float32(table[255 - (top - v)] * y_scale) / total
            q = np.int32(np.rint(f)) + zy if f < np.float32(2e9) else hi  # (an infinite or huge f: saturated)
            out[r, j] = np.uint8(min(max(q, lo), hi) & 255)


@njit(cache=True, nogil=True)
def average_planes(x, zx, multiplier, zy, lo, hi, out, u0, u1):
    """out[p, q] = rint((sum over s of x[p, s, q] - zx * S) * multiplier) + zy, saturated to [lo, hi] (float32):
    QLinearGlobalAveragePool over x as (N * C, S, 1) or, channels last, (N, S, C); units: rows p."""
    size, width = x.shape[1], x.shape[2]
    xf = x.reshape(-1)
    sums = np.empty(width, np.int32)
    for p in range(u0, u1):
        base = p * size * width
        if width == 1:  # a channel's plane, contiguous
            acc = np.int32(0)
            for s in range(size):
                acc += np.int32(xf[_u(base + s)])
            sums[0] = acc
        else:
            sums[:] = 0
            for s in range(size):
                row = base + s * width
                for q in range(width):
                    sums[q] += np.int32(xf[_u(row + q)])
        for q in range(width):
            v = np.rint(np.float32(sums[q] - zx * size) * multiplier) + zy
            out[p, q] = np.int32(min(max(v, lo), hi))
