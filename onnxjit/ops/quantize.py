"""The ONNX quantization ops on the CPU provider: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, and the com.microsoft ones onnxruntime's quantizer writes
(QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearSoftmax, QLinearConcat, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul: semantics, formulas and numpy
references in onnxjit.contrib.microsoft.quantized); kernels in `onnxjit.kernels.quantize`.

QuantizeLinear / DequantizeLinear take every form their opsets define: per-tensor (a scalar or one-element
scale), per-axis (`axis`, a 1-D scale), blocked (`block_size`, opset 21+: the scale of x's rank, ceil(C / block)
along the axis), `output_dtype` (21+ / 23+), `saturate` for float8. Integer types int8, uint8, int16, uint16,
int4, uint4, int2, uint2 (and int32 into DequantizeLinear) run on the kernels directly; float8 and float4e2m1
values are computed in float32 by the same kernels and converted by ml_dtypes (round to nearest even, as the
Cast op does). x / scale is computed in float32 whatever the input type (float16 and bfloat16 inputs are exact
in it) before opset 23; from 23 in the `precision` type (by default the scale's: float16 / bfloat16 rounding the
quotient of x and the scale, each converted to that type, as onnxruntime does). The float8e8m0 scales of opset
24+ are left to the next provider (None from the builder).

The integer matrix products run one integer GEMM (kernels.quantize.igemm, on `vpdpbusd` where the CPU has VNNI)
whose epilogue adds the zero-point terms and the bias and, for the QLinear ops, requantizes with the multiplier
a_scale * b_scale / y_scale (float32, computed in that order as onnxruntime does; per column of B for
QLinearMatMul, per output channel for QLinearConv), rounds half to even and saturates. MatMul-like ops broadcast
their batch dims as MatMul does (ops.linalg), with per-row A and per-column B zero points; a constant B (the
weights) is packed once. The convolutions put the weights on the GEMM's A side (one row per output channel, packed
once when constant) and the input's im2col on its B side, packed per run with the input's zero point as its padding,
so each group's output comes out in NCHW order; geometry and attributes are Conv's (ops.nn).

The com.microsoft elementwise ops run on kernels of their own (QLinearAdd / QLinearMul one pass in float32 as
onnxruntime computes them; QLinearSigmoid / QLinearLeakyRelu / a requantized QLinearConcat input a lookup in the
256 outputs of the op, made once per scale and zero point); QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul
the integer GEMM above, with C / the float scaling applied after it (numpy). Float16 scales of
MatMulIntegerToFloat and QLinearMatMul's float8 operands (opset 21) are left to the next provider.

Run-time errors (a scale of the wrong shape, shapes that do not multiply) are ValueErrors naming the op and the
input, which the session reports as a RuntimeException naming the node.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import ml_dtypes
import numpy as np
from onnx import TensorProto as TP

from onnxjit.contrib.microsoft import quantized as ms
from onnxjit.ir.types import TensorType, elem_type_of, np_dtype
from onnxjit.kernels import quantize as kq
from onnxjit.ops.cast import FLOAT8
from onnxjit.ops.nn import (AUTO_PADS, ConstantDerived, constant_input, conv_attributes, conv_geometry,
                            conv_kernel_of, is_constant, pad3, pool_attributes, pool_runner, rank_of, ro, ro_reshaped,
                            shape5_of, wanted_outputs)
from onnxjit.ops.registry import attr, input_tensor_types, register_op
from onnxjit.worker_pool import CallSite, run_units

# integer element type -> (lowest, highest, bits of a sub-byte type stored one per byte, else 0)
INTEGER_RANGES = {TP.INT8: (-128, 127, 0), TP.UINT8: (0, 255, 0), TP.INT16: (-32768, 32767, 0),
                  TP.UINT16: (0, 65535, 0), TP.INT4: (-8, 7, 4), TP.UINT4: (0, 15, 4), TP.INT2: (-2, 1, 2),
                  TP.UINT2: (0, 3, 2)}
SIGNED_NARROW = frozenset({TP.INT4, TP.INT2})
FLOAT_CODES = FLOAT8 | {TP.FLOAT4E2M1}  # float8 / float4 values: computed in float32, converted by ml_dtypes
SCALE_TYPES = frozenset({TP.FLOAT, TP.FLOAT16, TP.BFLOAT16})
QUANTIZE_INPUTS = SCALE_TYPES | {TP.INT32}
DEQUANTIZE_INPUTS = frozenset(INTEGER_RANGES) | FLOAT_CODES | {TP.INT32}
EIGHT_BIT = frozenset({TP.INT8, TP.UINT8})


def _elem(node, i):
    types = input_tensor_types(node)
    t = types[i] if i < len(types) else None
    return None if t is None else t.elem_type


def _present(node, i):
    return i < len(node.inputs) and node.inputs[i] is not None and node.inputs[i].name != ""


def _output_elem(node):
    t = node.outputs[0].type if node.outputs else None
    return t.elem_type if isinstance(t, TensorType) else None


# --- the (outer, axis, inner) layout of Quantize / Dequantize ---------------------------------------------------
def quant_layout(op, x_shape, scale_shape, zp_shape, axis, block_size):
    """(x as (O, C, I), scale and zero point as (O', Cb, I'), channels per scale along C) for the per-tensor,
    per-axis and blocked forms (see kernels.quantize); ValueError naming the op where the shapes do not fit."""
    if zp_shape is not None and tuple(zp_shape) != tuple(scale_shape) \
            and not math.prod(zp_shape) == math.prod(scale_shape) == 1:  # () and (1,) are both per-tensor
        raise ValueError(f"{op}: the zero point's shape {tuple(zp_shape)} is not the scale's {tuple(scale_shape)}")
    r = len(x_shape)
    size = math.prod(x_shape)
    if block_size > 0:
        if r == 0 or not -r <= axis < r:
            raise ValueError(f"{op}: axis {axis} is out of range for x of shape {tuple(x_shape)}")
        a = axis % r
        c = x_shape[a]
        want = tuple(-(-c // block_size) if i == a else d for i, d in enumerate(x_shape))
        if tuple(scale_shape) != want:
            raise ValueError(f"{op}: with block_size={block_size} the scale must have shape {want} for x of shape "
                             f"{tuple(x_shape)}, got {tuple(scale_shape)}")
        outer, inner = math.prod(x_shape[:a]), math.prod(x_shape[a + 1:])
        return (outer, c, inner), (outer, want[a], inner), block_size
    if math.prod(scale_shape) == 1 and len(scale_shape) <= 1:
        return (1, 1, size), (1, 1, 1), 1
    if len(scale_shape) != 1:
        raise ValueError(f"{op}: the scale must be a scalar, or 1-D for per-axis quantization (or of x's rank with "
                         f"block_size), got shape {tuple(scale_shape)}")
    if r == 0 or not -r <= axis < r:
        raise ValueError(f"{op}: axis {axis} is out of range for x of shape {tuple(x_shape)}")
    a = axis % r
    if scale_shape[0] != x_shape[a]:
        raise ValueError(f"{op}: a per-axis scale of {scale_shape[0]} values for axis {a} of x of shape "
                         f"{tuple(x_shape)}")
    return (math.prod(x_shape[:a]), x_shape[a], math.prod(x_shape[a + 1:])), (1, x_shape[a], 1), 1


def _units(x3):
    return x3[0] * x3[1] * -(-x3[2] // kq.INNER_CHUNK)


def _int32_params(zp, narrow, signed):
    """A zero point as int32 (a sub-byte type through its low bits)."""
    if narrow:
        v = zp.view(np.uint8).astype(np.int32) & ((1 << narrow) - 1)
        return (v ^ (1 << (narrow - 1))) - (1 << (narrow - 1)) if signed else v
    return zp.astype(np.int32)


def _quantize_kernel(op, to, saturate, axis, block_size, precision=None):
    """fn(x, scale, zero_point=None) -> y of element type `to`, or None where `to` is not one the kernel writes.
    `precision`: float16 / bfloat16 where x / scale is computed in that type (opset 23+), else float32."""
    out_dtype = np_dtype(to)
    if to in INTEGER_RANGES:
        lo, hi, narrow = INTEGER_RANGES[to]
        to_float = False
    elif to in FLOAT_CODES:
        big = float(ml_dtypes.finfo(out_dtype).max)
        lo, hi, narrow = (-big, big, 0) if saturate else (1.0, 0.0, 0)  # lo > hi: no clamp
        to_float = True
    else:
        return None

    def run(x, scale, zp=None):
        if elem_type_of(x.dtype) not in QUANTIZE_INPUTS:
            raise ValueError(f"{op}: x of type {x.dtype} is not one it takes (float, float16, bfloat16, int32)")
        x3, s3, block = quant_layout(op, x.shape, scale.shape, None if zp is None else zp.shape, axis, block_size)
        scale32 = ro(np.asarray(scale, np.float32).reshape(s3))
        x32 = np.asarray(x, np.float32).reshape(x3)
        if precision is not None:
            # x / scale rounded to `precision` (x and the scale first converted to it), as onnxruntime computes it:
            # a float32 quotient of two such values, rounded once more, is their correctly rounded quotient
            s_in = np.asarray(scale, precision).astype(np.float32).reshape(s3)
            s_full = np.repeat(s_in, block, axis=1)[:, :x3[1]] if block > 1 else s_in
            x32 = (x.astype(precision).astype(np.float32).reshape(x3) / s_full).astype(precision).astype(np.float32)
            scale32 = _ones(s3)
        if zp is None:
            zp3 = _NO_ZERO_POINT[to_float]
        elif to_float:
            zp3 = ro(zp.astype(np.float32).reshape(s3))
        else:
            zp3 = ro(_int32_params(zp, narrow, to in SIGNED_NARROW).reshape(s3))
        y = np.empty(x.shape, out_dtype)
        target = np.empty(x.shape, np.float32) if to_float else (y.view(np.uint8) if narrow else y)
        units = _units(x3)
        if units:
            run_units(kq.quantize, (ro(x32), scale32, zp3, block, np.float32(lo), np.float32(hi),
                                    (1 << narrow) - 1 if narrow else -1, to_float, target.reshape(x3)), units,
                      4 * x.size)
        return (target.astype(out_dtype) if to_float else y,)
    return run


_NO_ZERO_POINT = {False: ro(np.zeros(0, np.int32).reshape(1, 1, 0)), True: ro(np.zeros(0, np.float32).reshape(1, 1, 0))}


def _ones(shape):
    return ro(np.ones(shape, np.float32))


def build_quantize_linear(node):
    x_elem, s_elem = _elem(node, 0), _elem(node, 1)
    if x_elem not in QUANTIZE_INPUTS | {None} or s_elem not in SCALE_TYPES or wanted_outputs(node) != 1:
        return None  # (an x of a type not known before run time is checked then)
    # the type x / scale is computed in: float32 before opset 23, then `precision`, by default the scale's type
    precision = (int(attr(node, "precision", 0) or 0) or s_elem) if node.opset >= 23 else TP.FLOAT
    if precision not in SCALE_TYPES:
        return None
    if _present(node, 2):
        to = _elem(node, 2)
    else:
        to = int(attr(node, "output_dtype", 0) or 0) or TP.UINT8
    if to is None:
        return None
    axis = int(attr(node, "axis", 1)) if node.opset >= 13 else 1
    block_size = int(attr(node, "block_size", 0) or 0)
    if block_size < 0:
        return None
    return _quantize_kernel("QuantizeLinear", to, bool(attr(node, "saturate", 1)), axis, block_size,
                            None if precision == TP.FLOAT else np_dtype(precision))


def build_dequantize_linear(node):
    x_elem, s_elem = _elem(node, 0), _elem(node, 1)
    if s_elem not in SCALE_TYPES or wanted_outputs(node) != 1 or x_elem not in DEQUANTIZE_INPUTS | {None}:
        return None  # (an x of a type not known before run time is checked then)
    out_elem = int(attr(node, "output_dtype", 0) or 0) or s_elem
    if out_elem not in SCALE_TYPES:
        return None
    out_dtype = np_dtype(out_elem)
    axis = int(attr(node, "axis", 1)) if node.opset >= 13 else 1
    block_size = int(attr(node, "block_size", 0) or 0)
    if block_size < 0:
        return None

    def run(x, scale, zp=None):
        x_type = elem_type_of(x.dtype)
        if x_type not in DEQUANTIZE_INPUTS:
            raise ValueError(f"DequantizeLinear: x of type {x.dtype} is not one it takes")
        narrow = INTEGER_RANGES[x_type][2] if x_type in INTEGER_RANGES else 0
        is_float = x_type in FLOAT_CODES
        signed = x_type in SIGNED_NARROW
        x3, s3, block = quant_layout("DequantizeLinear", x.shape, scale.shape, None if zp is None else zp.shape,
                                     axis, block_size)
        if zp is None:
            zp3 = _NO_ZERO_POINT[is_float]
        elif is_float:
            zp3 = ro(zp.astype(np.float32).reshape(s3))
        else:
            zp3 = ro(_int32_params(zp, narrow, signed).reshape(s3))
        if is_float:
            xv = x.astype(np.float32)
        else:
            xv = x.view(np.uint8) if narrow else x
        y = np.empty(x.shape, np.float32)
        units = _units(x3)
        if units:
            run_units(kq.dequantize, (ro(xv.reshape(x3)), narrow, signed,
                                      ro(np.asarray(scale, np.float32).reshape(s3)), zp3, block, y.reshape(x3)),
                      units, 2 * x.size)
        return (y if out_dtype == np.float32 else y.astype(out_dtype),)
    return run


for _v in (10, 13, 19, 21, 23, 24, 25):
    register_op("QuantizeLinear", since=_v)(build_quantize_linear)
    register_op("DequantizeLinear", since=_v)(build_dequantize_linear)


def dynamic_quantization(x):
    """DynamicQuantizeLinear's (float32 scale, uint8 zero point) of float32 x."""
    scale, zp = kq.dynamic_quantization(np.ascontiguousarray(x))
    return np.float32(scale), np.uint8(zp)


def dynamic_quantize(x):
    """DynamicQuantizeLinear of float32 x: (uint8 y, float32 scale, uint8 zero point), the scale and zero point from
    x's range extended to include 0 (dynamic_quantization, onnxruntime's formula). y is quantized as
    DynamicQuantizeMatMul quantizes its A: kq.quantize_pack_rows over x's rows, into rows of x's own width with no
    offset (the plain layout)."""
    x = np.ascontiguousarray(x, np.float32)
    scale, zp = dynamic_quantization(x)
    y = np.empty(x.shape, np.uint8)
    k = x.shape[-1] if x.ndim else 1
    m = x.size // k if k else 0
    while m < 16 and k % 2 == 0 and k >= 2048:  # a few long rows: halved, so the threads share them (y's plain
        m, k = 2 * m, k // 2                       # layout takes x's values in rows of any width)
    if m:
        run_units(kq.quantize_pack_rows, (ro_reshaped(x, (m, k)), scale, np.float32(zp), 0, y.reshape(1, m, k),
                                          np.empty((1, m), np.int32)), m, 4 * x.size)
    return y, scale, zp


@register_op("DynamicQuantizeLinear", since=11)
def build_dynamic_quantize_linear(node):
    if _elem(node, 0) != TP.FLOAT:
        return None

    def run(x):
        y, scale, zp = dynamic_quantize(x)
        return (y, np.array(scale, np.float32), np.array(zp, np.uint8))
    return run


# --- the integer GEMM -------------------------------------------------------------------------------------------
A_TYPE, B_TYPE, _ = kq.DOT_TYPES


def _a_offset(dtype):
    """What is subtracted from A's values to store them (DOT_TYPES' A type): -128 for int8 on the byte path."""
    return -128 if A_TYPE is np.uint8 and dtype == np.int8 else 0


def _b_offset(dtype):
    """What is subtracted from B's values to store them: 128 for uint8 on the byte path (B int8 there)."""
    return 128 if B_TYPE is np.int8 and dtype == np.uint8 else 0


def a_operand(a3):
    """A (Ba, M, K) as the GEMM stores it: ((Ba, M, Kp) zero-padded, its row sums, the offset subtracted)."""
    ba, m, k = a3.shape
    kp = -(-k // kq.K_ALIGN) * kq.K_ALIGN
    offset = _a_offset(a3.dtype)
    mp = -(-m // kq.M_ALIGN) * kq.M_ALIGN  # (rows past M for AMX's whole tiles)
    at = np.empty((ba, mp, kp), A_TYPE)
    rowsum = np.empty((ba, mp), np.int32)
    kq.pack_rows(np.ascontiguousarray(a3), offset, at, rowsum)
    at.flags.writeable = False
    return at, ro(rowsum), offset


def b_operand(x5, group, k, s, d, p, out_sizes, pad):
    """B packed for the GEMM (see kernels.quantize.pack_columns) from x (N, C, D, H, W) as im2col with head pads
    `p`, `pad` (x's zero point) outside it: (packed, column sums, the offset subtracted). Where taps reach
    outside x, the kernel reads a copy of x padded with `pad`."""
    n_img, c = x5.shape[:2]
    kk = c // group * math.prod(k)
    kp = -(-kk // kq.K_ALIGN) * kq.K_ALIGN
    npx = math.prod(out_sizes)
    panels = -(-npx // kq.NR)
    offset = _b_offset(x5.dtype)
    reach = [(o - 1) * st + (kn - 1) * dl + 1 for o, st, kn, dl in zip(out_sizes, s, k, d)]
    padded = [max(n + h, e) for n, h, e in zip(x5.shape[2:], p, reach)]
    if any(p) or padded != list(x5.shape[2:]):
        xp = np.full((n_img, c, *padded), pad, x5.dtype)
        xp[:, :, p[0]:p[0] + x5.shape[2], p[1]:p[1] + x5.shape[3], p[2]:p[2] + x5.shape[4]] = x5
        x5 = xp
    bp = np.empty((n_img * group, panels, kp * kq.NR), B_TYPE)
    colsum = np.zeros((n_img * group, npx), np.int32)
    if bp.size:
        run_units(kq.pack_columns, (ro(x5), offset, group, tuple(k), tuple(s), tuple(d), tuple(out_sizes), kp, bp,
                                    colsum), n_img * group * panels, bp.size)
    bp.flags.writeable = False
    return bp, colsum, offset


def b_matrix_operand(b3):
    """B (Bb, K, N) packed for the GEMM: a 1x1 convolution over a (K, 1, 1, N) image."""
    bb, k, n = b3.shape
    return b_operand(b3.reshape(bb, k, 1, 1, n), 1, (1, 1, 1), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, n), 0)


def integer_gemm(a_op, za, b_op, zb, k, out, bias=None, mult_r=None, mult_c=None, zy=0, y_range=None,
                 col_bias=None):
    """out (B, M, N) = (A - za) @ (B - zb) [+ bias] as int32, or, given y_range (the lowest and highest value of
    out's dtype), requantized: saturate(rint(that * mult_r * mult_c) + zy), or into a float32 out that * mult_r *
    mult_c + col_bias. za, bias and mult_r are per row of A ((Ba', M), Ba' 1 or A's batches), zb, mult_c and
    col_bias per column of B ((Bb', N)); zero points as given."""
    at, rowsum, a_off = a_op
    bp, colsum, b_off = b_op
    nb, m, n = out.shape
    if out.size == 0:
        return out
    zb_t = np.asarray(zb, np.int64) - b_off
    colterm = ro((colsum - k * zb_t).astype(np.int32))
    requant = y_range is not None
    lo, hi = (np.float32(y_range[0] - zy), np.float32(y_range[1] - zy)) if requant else (np.float32(0), np.float32(0))
    bias = np.zeros((1, m), np.int32) if bias is None else bias
    mult_r = np.ones((1, m), np.float32) if mult_r is None else mult_r
    mult_c = np.ones((1, n), np.float32) if mult_c is None else mult_c
    col_bias = no_column_bias(n) if col_bias is None else ro(np.asarray(col_bias, np.float32))
    units = nb * bp.shape[1] * -(-m // kq.IGEMM_ROWS)
    run_units(kq.IGEMM, (at, bp, _i32(np.asarray(za, np.int64) - a_off), rowsum, _i32(zb_t), colterm, _i32(bias),
                         ro(np.asarray(mult_r, np.float32)), ro(np.asarray(mult_c, np.float32)), col_bias, requant,
                         int(zy), lo, hi, out), units, nb * m * n * at.shape[2])
    return out


def _i32(v):
    return ro(np.asarray(v).astype(np.int32))


_NO_COLUMN_BIAS: dict = {}


def no_column_bias(n):
    """Zeros for the GEMM's float bias (1, n), made once per width."""
    z = _NO_COLUMN_BIAS.get(n)
    if z is None:
        z = _NO_COLUMN_BIAS[n] = ro(np.zeros((1, n), np.float32))
    return z


def _points(op, name, zp, batch, rows, cols, per_row):
    """A zero point (or scale) of a MatMul-like op as a (1 or B, rows or cols) array: a scalar (or one value), a
    1-D vector per row of A (per_row) or per column of B, or batch dims + (M, 1) / (1, N)."""
    zp = np.asarray(zp)
    length = rows if per_row else cols
    if zp.size == 1:
        return np.full((1, length), zp.reshape(-1)[0], zp.dtype)
    if zp.ndim == 1 and zp.shape[0] == length:
        return zp.reshape(1, length)
    want = (rows, 1) if per_row else (1, cols)
    if zp.ndim >= 2 and zp.shape[-2:] == want:
        try:
            full = np.broadcast_to(zp, tuple(batch) + want)
        except ValueError:
            full = None
        if full is not None:
            return full.reshape(-1, length)
    where = "per row of A" if per_row else "per column of B"
    raise ValueError(f"{op}: {name} of shape {zp.shape} is neither a scalar nor {length} values {where}")


def _batched(op, a, b):
    """(A as (Ba, M, K), B as (Bb, K, N), the batch dims, the output's shape) under numpy.matmul's rules, each
    operand's batch either 1 or all of the batch dims."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{op}: inputs must have rank >= 1, got shapes {a.shape} and {b.shape}")
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    (m, k), (kb, n) = a2.shape[-2:], b2.shape[-2:]
    if k != kb:
        raise ValueError(f"{op}: A of shape {a.shape} and B of shape {b.shape} do not multiply")
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        raise ValueError(f"{op}: the batch dims of A {a.shape} and B {b.shape} do not broadcast") from None

    def as3(v, rows, cols):
        if math.prod(v.shape[:-2]) == 1:
            return v.reshape(1, rows, cols)
        if v.shape[:-2] != batch:
            v = np.broadcast_to(v, batch + (rows, cols))
        return np.ascontiguousarray(v).reshape(-1, rows, cols)
    out_shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return as3(a2, m, k), as3(b2, k, n), batch, out_shape


def _as_matrices(b):
    """B (..., K, N) (or (K,)) as (batches, K, N): its packing for the GEMM when B is constant."""
    return b_matrix_operand(b.reshape(1, -1, 1) if b.ndim == 1 else b.reshape((-1,) + b.shape[-2:]))


def integer_matmul(op, a, za, b, zb, packed_b, y_dtype=None, mult_c=None, zy=0, scales=None, col_bias=None):
    """The MatMul-like product (A - za) @ (B - zb): int32 (MatMulInteger), or requantized into y_dtype with the
    per-column multipliers mult_c and zero point zy (QLinearMatMul), or with `scales` (A's scale, B's per tensor
    or per column) float32 `product * (a_scale * b_scale)` (MatMulIntegerToFloat) plus col_bias where given
    (_column_bias), each in the GEMM's epilogue.
    packed_b: a ConstantDerived packing the node's constant B (used where B is it and its batch is not
    broadcast)."""
    ms.check_8bit(op, A=a, B=b)
    a3, b3, batch, out_shape = _batched(op, a, b)
    m, k, n = a3.shape[1], a3.shape[2], b3.shape[2]
    za2 = _points(op, "the zero point of A", za, batch, m, n, True)
    zb2 = _points(op, "the zero point of B", zb, batch, m, n, False)
    own_batches = b.ndim == 1 or b3.shape[0] == math.prod(b.shape[:-2])
    b_op = packed_b.of(b) if own_batches and packed_b.holds(b) else b_matrix_operand(b3)
    y_range = mult_r = None
    if scales is not None:
        if scales[1].size not in (1, n):
            raise ValueError(f"{op}: b_scale must be a scalar or one per column of B ({n}), got shape "
                             f"{scales[1].shape}")
        out = np.empty((math.prod(batch), m, n), np.float32)
        mult_r = np.full((1, m), scales[0], np.float32)
        mult_c = _points(op, "b_scale", np.asarray(scales[1], np.float32).reshape(-1), batch, m, n, False)
    else:
        out = np.empty((math.prod(batch), m, n), np.int32 if y_dtype is None else y_dtype)
    if y_dtype is not None:
        info = np.iinfo(y_dtype)
        y_range = (int(info.min), int(info.max))
        mult_c = _points(op, "the scale of B", mult_c, batch, m, n, False)
    integer_gemm(a_operand(a3), za2, b_op, zb2, k, out, mult_r=mult_r, mult_c=mult_c, zy=zy, y_range=y_range,
                 col_bias=col_bias)
    return out.reshape(out_shape)


class _PreparedProduct(NamedTuple):
    """What ConstantBProducts makes once per shape and type of A."""
    site: CallSite  # the GEMM kernel's call site
    b_terms: tuple  # (B packed, B's zero points as stored, B's column terms, A's (zero) bias, unit row multipliers,
    # the column multipliers)
    units: int
    work: int
    m: int  # A's rows
    kp: int  # K padded
    out_dtype: type
    out_shape: tuple
    a_offset: int  # what is subtracted from A's values to store them


class ConstantBProducts:
    """integer_matmul for a node whose B and B's zero point (and scale) are constants, prepared per A's shape and
    dtype: B's packing, its zero-point terms, the multipliers and the kernel's CallSite made once, so that a run
    packs A, fills A's zero point (and scale) and calls the kernel. A step of a quantize_dynamic'd BERT spent more
    in integer_matmul's per-call checks and small arrays than in its 128 x 384 x 384 product (85 us against
    onnxruntime's 46 for the node, the kernel ~25). Other cases (a per-row zero point of A, batched B) return None:
    the caller runs integer_matmul."""

    def __init__(self, op, packed_b: ConstantDerived, zb, b_scale=None):
        """packed_b: the node's ConstantDerived packing its constant B (shared with its integer_matmul calls)."""
        self.op, self.packed_b, self.b, self.zb, self.b_scale = op, packed_b, packed_b.const, zb, b_scale
        self.calls: dict = {}

    def holds(self, b, zb, b_scale=None) -> bool:
        """Whether the run's B, zero point and scale are the node's constants (2-D B)."""
        return self.b is not None and self.b.ndim == 2 and is_constant(b, self.b) and is_constant(zb, self.zb) \
            and is_constant(b_scale, self.b_scale)

    def run(self, a, za, a_scale=None, col_bias=None):
        """The product for A (its zero point `za` one value; `a_scale` with a float output, plus col_bias where
        given, as _column_bias makes it), or None."""
        return self._run(a, za, np.int32 if a_scale is None else np.float32, a_scale, col_bias)

    def run_requantized(self, a, za, mult, zy, y_dtype):
        """QLinearMatMul's product for A, requantized into y_dtype: saturate(rint(sum * mult) + zy), `mult` one
        float32 multiplier or one per column of B (a_scale * b_scale / y_scale), or None."""
        n = self.b.shape[1]
        mult_c = ro(_points(self.op, "the scale of B", np.asarray(mult, np.float32), (), 1, n, False))
        info = np.iinfo(y_dtype)
        requant = (mult_c, int(zy), np.float32(int(info.min) - int(zy)), np.float32(int(info.max) - int(zy)))
        return self._run(a, za, np.dtype(y_dtype).type, None, None, requant)

    def _run(self, a, za, out_dtype, a_scale, col_bias, requant=None):
        if np.ndim(za) > 1 or np.size(za) != 1 or type(a) is not np.ndarray or a.ndim < 2:
            return None
        call = self._call(a.shape, a.dtype, out_dtype)
        ms.check_8bit(self.op, A=a)
        at, rowsum = self._a_buffers(call)
        kq.pack_rows(np.ascontiguousarray(a).reshape(1, call.m, -1), call.a_offset, at, rowsum)
        return self._product(call, at, rowsum, za, a_scale, col_bias, requant)

    def run_quantizing(self, x, col_bias=None):
        """DynamicQuantizeMatMul's product for float32 x (2-D or more), or None: x quantized as DynamicQuantizeLinear
        quantizes it (contrib.microsoft.quantized.dynamic_quantization's scale and zero point) straight into the
        GEMM's packed A (kq.quantize_pack_rows)."""
        if type(x) is not np.ndarray or x.ndim < 2 or x.dtype != np.float32:
            return None
        call = self._call(x.shape, np.dtype(np.uint8), np.float32)
        scale, zp = dynamic_quantization(x)
        at, rowsum = self._a_buffers(call)
        run_units(kq.quantize_pack_rows, (ro_reshaped(x, (call.m, x.shape[-1])), np.float32(scale), np.float32(zp),
                                          call.a_offset, at, rowsum), at.shape[1], 4 * x.size)
        return self._product(call, at, rowsum, zp, scale, col_bias)

    def _call(self, shape, dtype, out_dtype) -> _PreparedProduct:
        """The prepared product for A's shape and dtype, into out_dtype (np.int32: the sums; np.float32: scaled by
        the scales; an 8-bit type: requantized)."""
        key = (shape, dtype.char, out_dtype)
        call = self.calls.get(key)
        if call is None:
            # (a zero-stride stand-in for A: _prepare reads its shape and type)
            stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))
            call = self.calls[key] = self._prepare(stand_in, out_dtype)
        return call

    @staticmethod
    def _a_buffers(call: _PreparedProduct):
        """A's packed rows and their sums, to be filled."""
        at = np.empty((1, -(-call.m // kq.M_ALIGN) * kq.M_ALIGN, call.kp), A_TYPE)
        return at, np.empty((1, at.shape[1]), np.int32)

    @staticmethod
    def _product(call: _PreparedProduct, at, rowsum, za, a_scale, col_bias, requant=None):
        """The kernel's call; `requant`: (mult_c (1, N), zy, lowest - zy, highest - zy) for an 8-bit output."""
        m = call.m
        bp, zb_t, colterm, bias, ones_m, mult_c = call.b_terms
        za2 = np.full((1, m), int(np.asarray(za).reshape(-1)[0]) - call.a_offset, np.int32)
        mult_r = ones_m if a_scale is None else np.full((1, m), a_scale, np.float32)
        out = np.empty((1, m, call.out_shape[-1]), call.out_dtype)
        col_bias = no_column_bias(out.shape[-1]) if col_bias is None else col_bias
        if requant is None:
            requant_args = (False, 0, np.float32(0), np.float32(0))
        else:
            mult_c, requant_args = requant[0], (True,) + requant[1:]
        call.site.run((at, bp, za2, rowsum, zb_t, colterm, bias, mult_r, mult_c, col_bias, *requant_args, out),
                      call.units, call.work)
        return out.reshape(call.out_shape)

    def _prepare(self, a, out_dtype):
        op, b = self.op, self.b
        ms.check_8bit(op, A=a, B=b)
        _batched(op, a, b)  # (its checks: A's K is B's)
        m, k, n = math.prod(a.shape[:-1]), b.shape[0], b.shape[1]
        zb = _points(op, "the zero point of B", 0 if self.zb is None else self.zb, (), m, n, False)
        bp, colsum, b_off = self.packed_b.of(b)
        zb_t = zb.astype(np.int64) - b_off
        mult_c = np.ones((1, n), np.float32)
        if out_dtype == np.float32:
            if np.size(self.b_scale) not in (1, n):
                raise ValueError(f"{op}: b_scale must be a scalar or one per column of B ({n}), got shape "
                                 f"{np.shape(self.b_scale)}")
            mult_c = _points(op, "b_scale", np.asarray(self.b_scale, np.float32).reshape(-1), (), m, n, False)
        kp = bp.shape[2] // kq.NR
        b_terms = (bp, ro(zb_t.astype(np.int32)), ro((colsum - k * zb_t).astype(np.int32)),
                   ro(np.zeros((1, m), np.int32)), ro(np.ones((1, m), np.float32)),
                   ro(np.ascontiguousarray(mult_c, np.float32)))
        return _PreparedProduct(CallSite(kq.IGEMM), b_terms, bp.shape[1] * -(-m // kq.IGEMM_ROWS), m * n * kp, m, kp,
                                out_dtype, tuple(a.shape[:-1]) + (n,), _a_offset(a.dtype))


def _eight_bit(node, indices):
    """Whether the present inputs at `indices` are int8 / uint8 or of a type not known before run time (where type
    inference stopped, say after an op it does not know): the kernels check those as they run."""
    return all(_elem(node, i) in EIGHT_BIT or _elem(node, i) is None for i in indices if _present(node, i))


def _same_elem(node, pairs):
    """Whether each (value input, zero point input) pair has one element type, where the zero point is given and
    both types are known (the kernels check the values' types as they run)."""
    return all(not _present(node, z) or None in (_elem(node, z), _elem(node, v)) or _elem(node, z) == _elem(node, v)
               for v, z in pairs)


@register_op("MatMulInteger", since=10)
def build_matmul_integer(node):
    if not _eight_bit(node, (0, 1, 2, 3)) or wanted_outputs(node) != 1 or not _same_elem(node, ((0, 2), (1, 3))):
        return None
    packed_b = ConstantDerived(constant_input(node, 1), _as_matrices)
    zb_const = constant_input(node, 3) if _present(node, 3) else None
    prepared = ConstantBProducts("MatMulInteger", packed_b, zb_const)

    def run(a, b, za=None, zb=None):
        if prepared.holds(b, zb):
            y = prepared.run(a, 0 if za is None else za)
            if y is not None:
                return (y,)
        return (integer_matmul("MatMulInteger", a, 0 if za is None else za, b, 0 if zb is None else zb,
                               packed_b),)
    return run


def _scalar(op, name, v):
    v = np.asarray(v)
    if v.size != 1:
        raise ValueError(f"{op}: {name} must be a scalar (one value), got shape {v.shape}")
    return v.reshape(-1)[0]


@register_op("QLinearMatMul", since=10)
@register_op("QLinearMatMul", since=21)
def build_qlinear_matmul(node):
    """y = saturate(rint((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale) + y_zp): a per-tensor, b per-tensor
    or per column, y per-tensor; float8 operands (opset 21) are left to the next provider."""
    if len(node.inputs) != 8 or not _eight_bit(node, (0, 2, 3, 5, 7)) \
            or any(_elem(node, i) not in SCALE_TYPES for i in (1, 4, 6)) or wanted_outputs(node) != 1 \
            or not _same_elem(node, ((0, 2), (3, 5))):
        return None
    packed_b = ConstantDerived(constant_input(node, 3), _as_matrices)
    # a constant B (a weight) with its zero point and scale: prepared once per shape of A (the checks, B's terms and
    # the kernel's call site), as MatMulIntegerToFloat's
    prepared = ConstantBProducts("QLinearMatMul", packed_b, constant_input(node, 5), constant_input(node, 4))

    def run(a, a_scale, za, b, b_scale, zb, y_scale, zy):
        op = "QLinearMatMul"
        sa = np.float32(_scalar(op, "a_scale", a_scale))
        sy = np.float32(_scalar(op, "y_scale", y_scale))
        mult = sa * np.asarray(b_scale, np.float32) / sy  # float32, in onnxruntime's order
        y_zp = int(_scalar(op, "y_zero_point", zy))
        if prepared.holds(b, zb, b_scale):
            y = prepared.run_requantized(a, za, mult, y_zp, zy.dtype)
            if y is not None:
                return (y,)
        return (integer_matmul(op, a, za, b, zb, packed_b, zy.dtype, mult, y_zp),)
    return run


# --- ConvInteger / QLinearConv ----------------------------------------------------------------------------------
def _per_channel(op, name, v, m_out, group, dtype):
    """A per-tensor or per-output-channel value as (group, channels per group)."""
    v = np.asarray(v)
    if v.size == 1:
        v = np.full(m_out, v.reshape(-1)[0])
    elif v.ndim != 1 or v.shape[0] != m_out:
        raise ValueError(f"{op}: {name} must be a scalar or have {m_out} values (one per output channel), got "
                         f"shape {v.shape}")
    return v.astype(dtype).reshape(group, m_out // group)


def _integer_conv(node, op, w_index):
    """fn(x, x_zero_point, w, w_zero_point, bias=None, mult=None, y_zero_point=0, y_dtype=None) -> the
    convolution (int32, or requantized into y_dtype with the per-channel multipliers `mult`), or None where the
    node's attributes are not ones the conv geometry takes."""
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    kernel_attr = attr(node, "kernel_shape")
    kernel_attr = [int(v) for v in kernel_attr] if kernel_attr else None
    ranks = {len(kernel_attr)} if kernel_attr else set()
    ranks |= {rk - 2 for rk in (rank_of(node, 0), rank_of(node, w_index)) if rk is not None}
    if auto_pad not in AUTO_PADS or len(ranks) != 1 or not 1 <= next(iter(ranks)) <= 3:
        return None
    r = next(iter(ranks))
    attributes = conv_attributes(node, r, auto_pad)
    if attributes is None:
        return None
    group, strides, dilations, pads = attributes
    packed_w = ConstantDerived(constant_input(node, w_index),
                               lambda w: a_operand(w.reshape(group, w.shape[0] // group, -1)))

    def conv(x, zx, w, zw, bias=None, mult=None, zy=0, y_dtype=None):
        ms.check_8bit(op, x=x, w=w)
        try:
            kernel = conv_kernel_of(x.shape, w.shape, r, kernel_attr, group)
            out, head = conv_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
        except ValueError as e:
            raise ValueError(f"{op}: {str(e).split(': ', 1)[-1]}") from None
        n_img, m_out = x.shape[0], w.shape[0]
        npx = math.prod(out)
        zx = int(_scalar(op, "the zero point of x", zx))
        k3 = pad3(kernel, 1)
        b_op = b_operand(x.reshape(shape5_of(x.shape, r)), group, k3, pad3(strides, 1), pad3(dilations, 1),
                         pad3(head, 0), pad3(out, 1), zx)
        a_op = packed_w.of(w) if packed_w.holds(w) else a_operand(w.reshape(group, m_out // group, -1))
        y = np.empty((n_img * group, m_out // group, npx), np.int32 if y_dtype is None else y_dtype)
        y_range = None
        if y_dtype is not None:
            info = np.iinfo(y_dtype)
            y_range = (int(info.min), int(info.max))
            mult = _per_channel(op, "the scale of w", mult, m_out, group, np.float32)
        if bias is not None:
            if bias.shape != (m_out,):
                raise ValueError(f"{op}: the bias must have shape ({m_out},) (one per output channel), got "
                                 f"{bias.shape}")
            bias = bias.reshape(group, m_out // group)
        integer_gemm(a_op, _per_channel(op, "the zero point of w", zw, m_out, group, np.int64),
                     b_op, np.full((1, npx), zx), w.shape[1] * math.prod(kernel), y, bias=bias, mult_r=mult, zy=zy,
                     y_range=y_range)
        return y.reshape((n_img, m_out) + tuple(out))
    return conv


@register_op("ConvInteger", since=10)
def build_conv_integer(node):
    if not _eight_bit(node, (0, 1, 2, 3)) or wanted_outputs(node) != 1 or not _same_elem(node, ((0, 2), (1, 3))):
        return None
    conv = _integer_conv(node, "ConvInteger", 1)
    if conv is None:
        return None
    return lambda x, w, zx=None, zw=None: (conv(x, 0 if zx is None else zx, w, 0 if zw is None else zw),)


@register_op("QLinearConv", since=10)
def build_qlinear_conv(node):
    """y = saturate(rint((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp), w's scale and zero
    point per tensor or per output channel."""
    if len(node.inputs) not in (8, 9) or not _eight_bit(node, (0, 2, 3, 5, 7)) \
            or any(_elem(node, i) not in SCALE_TYPES for i in (1, 4, 6)) or wanted_outputs(node) != 1 \
            or not _same_elem(node, ((0, 2), (3, 5))) or (_present(node, 8) and _elem(node, 8) != TP.INT32):
        return None
    conv = _integer_conv(node, "QLinearConv", 3)
    if conv is None:
        return None

    def run(x, x_scale, zx, w, w_scale, zw, y_scale, zy, bias=None):
        op = "QLinearConv"
        sx = np.float32(_scalar(op, "x_scale", x_scale))
        sy = np.float32(_scalar(op, "y_scale", y_scale))
        mult = sx * np.asarray(w_scale, np.float32) / sy  # float32, in onnxruntime's order
        return (conv(x, zx, w, zw, bias, mult, int(_scalar(op, "y_zero_point", zy)), zy.dtype),)
    return run


# --- com.microsoft quantized ops (semantics and references: onnxjit.contrib.microsoft.quantized) ----------------
MS_DOMAIN = "com.microsoft"


def _range_of(dtype):
    info = np.iinfo(dtype)
    return np.float32(info.min), np.float32(info.max)


def _chunks(size):
    return -(-size // kq.INNER_CHUNK)


def _apply_table(x, table):
    """table[x] (an 8-bit unary op's 256 outputs) on the lookup kernel."""
    y = np.empty(x.shape, table.dtype)
    run_units(kq.lookup, (ro(x.view(np.uint8)), ro(table), y), _chunks(x.size), x.size)
    return y


@register_op("QLinearAdd", domain=MS_DOMAIN)
@register_op("QLinearMul", domain=MS_DOMAIN)
def build_qlinear_binary(node):
    """kq.qlinear_binary over the output, or kq.qlinear_binary_rows where one operand is a row repeated over the
    other's rows (a bias); the ratios and zero points worked out once where they are the node's constants (a step
    of a QDQ BERT spent more on them than on its 49K values)."""
    op = node.op_type
    if not _eight_bit(node, (0, 2, 3, 5, 7)) or wanted_outputs(node) != 1:
        return None
    multiply = op == "QLinearMul"
    consts = [constant_input(node, i) if _present(node, i) else None for i in (1, 2, 4, 5, 6, 7)]
    fixed = None
    if all(c is not None for c in consts[:5]) and (consts[5] is not None or not _present(node, 7)):
        fixed = ms.qlinear_binary_params(op, *consts)

    def params(a_scale, a_zp, b_scale, b_zp, c_scale, c_zp):
        if fixed is not None and all(is_constant(v, c) for v, c in zip((a_scale, a_zp, b_scale, b_zp, c_scale, c_zp),
                                                                       consts)):
            return fixed
        return ms.qlinear_binary_params(op, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp)

    def run(a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        ms.check_8bit(op, A=a, B=b)
        if a.dtype != b.dtype:
            raise ValueError(f"{op}: A is {a.dtype} and B {b.dtype}: they must have one type")
        dtype = a.dtype
        lo, hi = _range_of(dtype)
        za, zb, zc, ra, rb = params(a_scale, a_zp, b_scale, b_zp, c_scale, c_zp)
        if a.shape == b.shape:
            shape = a.shape
        else:
            try:
                shape = np.broadcast_shapes(a.shape, b.shape)
            except ValueError:
                raise ValueError(f"{op}: A of shape {a.shape} and B of shape {b.shape} do not broadcast") from None
        y = np.empty(shape, dtype)
        if not y.size:
            return (y,)
        n = shape[-1] if shape else 1
        for x, row, swap in ((a, b, False), (b, a, True)):
            if x.shape == shape and row.size == n > 1 and row.shape[-1:] == (n,):  # a row over x's rows
                if swap:  # (both ops are symmetric in their operands; QLinearMul's one ratio stays ratio_a)
                    za, zb = zb, za
                    ra, rb = (ra, rb) if multiply else (rb, ra)
                rows = y.size // n
                run_units(kq.qlinear_binary_rows, (ro_reshaped(x, (rows, n)), ro_reshaped(row, (n,)), multiply, za, zb,
                                                   np.float32(zc), ra, rb, lo, hi, y.reshape(rows, n)),
                          rows, 4 * y.size)
                return (y,)
        # each operand is the output's shape or one value; anything else is broadcast into a copy first
        a, b = (v if v.shape == shape or v.size == 1 else np.broadcast_to(v, shape) for v in (a, b))
        run_units(kq.qlinear_binary, (ro(a), ro(b), multiply, za, zb, np.float32(zc), ra, rb, lo, hi, y),
                  _chunks(y.size), 4 * y.size)
        return (y,)
    return run


@register_op("QLinearSigmoid", domain=MS_DOMAIN)
@register_op("QLinearLeakyRelu", domain=MS_DOMAIN)
def build_qlinear_unary(node):
    """The op's 256 outputs computed once per scale and zero point values, then looked up."""
    op = node.op_type
    if not _eight_bit(node, (0, 2, 4)) or wanted_outputs(node) != 1:
        return None
    fn = ms.sigmoid if op == "QLinearSigmoid" else ms.leaky_relu(float(attr(node, "alpha", 0.01)))
    tables = {}

    def run(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        key = tuple(None if v is None else np.asarray(v).tobytes() for v in (x_scale, x_zp, y_scale, y_zp))
        table = tables.get(key)
        if table is None:
            table = tables[key] = ms.unary_table(op, fn, x, x_scale, x_zp, y_scale, y_zp)
        return (_apply_table(x, table),)
    return run


@register_op("QLinearGlobalAveragePool", domain=MS_DOMAIN)
def build_qlinear_global_average_pool(node):
    op = "QLinearGlobalAveragePool"
    if not _eight_bit(node, (0, 2, 4)) or wanted_outputs(node) != 1:
        return None
    channels_last = bool(attr(node, "channels_last", 0))

    def run(x, x_scale, x_zp, y_scale, y_zp):
        ms.check_8bit(op, X=x)
        dtype = x.dtype
        lo, hi = _range_of(dtype)
        out_shape = ms.global_average_shape(op, x, channels_last)
        x3 = x.reshape(x.shape[0], -1, x.shape[-1]) if channels_last else x.reshape(-1, math.prod(x.shape[2:]), 1)
        size = x3.shape[1]
        mult = np.float32(ms.scalar(op, "x_scale", x_scale)) / (np.float32(ms.scalar(op, "y_scale", y_scale))
                                                                * np.float32(size))
        y = np.empty((x3.shape[0], x3.shape[2]), dtype)
        if y.size:
            run_units(kq.average_planes, (ro(x3), int(ms.scalar(op, "x_zero_point", x_zp)), mult,
                                          np.float32(ms.scalar(op, "y_zero_point", y_zp)), lo, hi, y),
                      x3.shape[0], x.size)
        return (y.reshape(out_shape),)
    return run


@register_op("QLinearAveragePool", domain=MS_DOMAIN)
def build_qlinear_average_pool(node):
    """As onnxruntime computes it, in float32 (contrib.microsoft.quantized.qlinear_average_pool), the average on
    AveragePool's kernel (ops.nn.pool_runner): on the reference's, a resnet's last 7x7 pool in a QOperator model
    took 64 ms."""
    if not _eight_bit(node, (0, 2, 4)) or wanted_outputs(node) != 1:
        return None
    attrs = pool_attributes(node, 3)
    if attrs is None:
        return None
    average = pool_runner(False, attrs)
    channels_last = bool(attr(node, "channels_last", 0))

    def run(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        return (ms.qlinear_average_pool(x, x_scale, x_zp, y_scale, y_zp, channels_last, lambda f: average(f)[0]),)
    return run


@register_op("QLinearSoftmax", domain=MS_DOMAIN)
def build_qlinear_softmax(node):
    """onnxruntime's computation (contrib.microsoft.quantized.qlinear_softmax) on kq.softmax_rows, a row a unit;
    the exponentials' table made once per x_scale and row length."""
    if not _eight_bit(node, (0, 2, 4)) or wanted_outputs(node) != 1:
        return None
    axis, opset = int(attr(node, "axis", -1)), int(attr(node, "opset", 13))
    tables = {}

    def run(x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        op = "QLinearSoftmax"
        ms.check_8bit(op, X=x)
        if x.size == 0:
            return (np.empty(x.shape, x.dtype),)
        ms.scalar(op, "x_zero_point", x_zp, 0)  # (checked to be one value: the softmax does not depend on it)
        rows, moved = ms.softmax_rows(op, x, axis, opset)
        sx = np.float32(ms.scalar(op, "x_scale", x_scale))
        key = (float(sx), rows.shape[1])
        table = tables.get(key)
        if table is None:
            table = tables[key] = ms.softmax_table(sx, rows.shape[1])
        y = np.empty(rows.shape, np.uint8)
        ys = np.floor(np.float32(1) / np.float32(ms.scalar(op, "y_scale", y_scale)))
        run_units(kq.softmax_rows, (ro(rows.view(np.uint8)), x.dtype == np.int8, ro(table), ys,
                                    np.int32(ms.scalar(op, "y_zero_point", y_zp, 0)), y), rows.shape[0], 4 * y.size)
        y = y.view(x.dtype)
        if moved < 0:
            return (y.reshape(x.shape),)
        return (np.ascontiguousarray(np.moveaxis(y.reshape(np.moveaxis(x, moved, -1).shape), -1, moved)),)
    return run


@register_op("QLinearConcat", domain=MS_DOMAIN)
def build_qlinear_concat(node):
    """Inputs whose scale and zero point differ from Y's are requantized through a lookup table, then all are
    concatenated (numpy's copy)."""
    n_in = len(node.inputs)
    if n_in < 5 or (n_in - 2) % 3 or not _eight_bit(node, [1] + list(range(2, n_in, 3)) + list(range(4, n_in, 3))) \
            or wanted_outputs(node) != 1:
        return None
    axis = int(attr(node, "axis", 0))

    def run(y_scale, y_zp, *inputs):
        op = "QLinearConcat"
        parts = ms.concat_parts(op, y_scale, y_zp, [inputs[i:i + 3] for i in range(0, len(inputs), 3)])
        try:
            return (np.concatenate([x if t is None else _apply_table(x, t) for x, t in parts], axis=axis),)
        except (ValueError, np.exceptions.AxisError) as e:
            raise ValueError(f"{op}: the inputs do not concatenate along axis {axis}: {e}") from None
    return run


def _column_bias(op, bias, n):
    """The bias of MatMulIntegerToFloat / DynamicQuantizeMatMul as the GEMM's float column bias (1, n)."""
    if bias is None:
        return None
    if bias.shape != (n,):
        raise ValueError(f"{op}: bias must have shape ({n},), got {bias.shape}")
    return ro_reshaped(bias, (1, n), np.float32)


def _float_product(op, a, za, b, zb, packed_b, a_scale, b_scale, col_bias):
    """(A - za) @ (B - zb) * (a_scale * b_scale) + bias (float32; col_bias: _column_bias's) of
    MatMulIntegerToFloat / DynamicQuantizeMatMul, in the GEMM's epilogue as contrib.microsoft.quantized.to_float
    rounds it (the float32 product of the int32 sum and the float32 product of the scales, then the bias added: two
    roundings, as onnxruntime's)."""
    return integer_matmul(op, a, za, b, zb, packed_b, scales=(a_scale, np.asarray(b_scale)), col_bias=col_bias)


@register_op("MatMulIntegerToFloat", domain=MS_DOMAIN)
def build_matmul_integer_to_float(node):
    if not _eight_bit(node, (0, 1, 4, 5)) or _elem(node, 2) != TP.FLOAT or wanted_outputs(node) != 1 \
            or not _same_elem(node, ((0, 4), (1, 5))):
        return None  # (float16 scales: left to the reference)
    packed_b = ConstantDerived(constant_input(node, 1), _as_matrices)
    prepared = ConstantBProducts("MatMulIntegerToFloat", packed_b,
                                 constant_input(node, 5) if _present(node, 5) else None, constant_input(node, 3))

    def run(a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):
        op = "MatMulIntegerToFloat"
        col_bias = _column_bias(op, bias, b.shape[-1])
        sa, za = ms.scalar(op, "a_scale", a_scale), 0 if a_zp is None else a_zp
        if prepared.holds(b, b_zp, b_scale):
            y = prepared.run(a, za, sa, col_bias)
            if y is not None:
                return (y,)
        return (_float_product(op, a, za, b, 0 if b_zp is None else b_zp, packed_b, sa, b_scale, col_bias),)
    return run


@register_op("DynamicQuantizeMatMul", domain=MS_DOMAIN)
def build_dynamic_quantize_matmul(node):
    if _elem(node, 0) not in (TP.FLOAT, None) or not _eight_bit(node, (1, 3)) or wanted_outputs(node) != 1 \
            or not _same_elem(node, ((1, 3),)):
        return None
    packed_b = ConstantDerived(constant_input(node, 1), _as_matrices)
    prepared = ConstantBProducts("DynamicQuantizeMatMul", packed_b,
                                 constant_input(node, 3) if _present(node, 3) else None, constant_input(node, 2))

    def run(a, b, b_scale, b_zp=None, bias=None):
        op = "DynamicQuantizeMatMul"
        if a.dtype != np.float32:
            raise ValueError(f"{op}: A must be float32, got {a.dtype}")
        col_bias = _column_bias(op, bias, b.shape[-1])
        if prepared.holds(b, b_zp, b_scale):
            y = prepared.run_quantizing(a, col_bias)
            if y is not None:
                return (y,)
        qa, scale, zp = dynamic_quantize(a)
        return (_float_product(op, qa, zp, b, 0 if b_zp is None else b_zp, packed_b, scale, b_scale, col_bias),)
    return run


@register_op("QGemm", domain=MS_DOMAIN)
def build_qgemm(node):
    n_in = len(node.inputs)
    if n_in < 6 or not _eight_bit(node, (0, 2, 3, 5, 8)) or wanted_outputs(node) != 1 \
            or not _same_elem(node, ((0, 2), (3, 5))) or (_present(node, 6) and _elem(node, 6) != TP.INT32):
        return None
    alpha = float(attr(node, "alpha", 1.0))
    trans_a, trans_b = bool(attr(node, "transA", 0)), bool(attr(node, "transB", 0))
    const_b = constant_input(node, 3)
    # B as (K, N): the transposed view where transB, whose packing is made once for a constant B
    packed_b = ConstantDerived(None if const_b is None else (const_b.T if trans_b else const_b), _as_matrices)

    def run(a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None):
        op = "QGemm"
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"{op}: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
        acc = integer_matmul(op, a.T if trans_a else a, ms.scalar(op, "a_zero_point", a_zp), b.T if trans_b else b,
                             b_zp, packed_b)
        if c is not None:
            try:
                acc += np.broadcast_to(np.asarray(c, np.int32), acc.shape)
            except ValueError:
                raise ValueError(f"{op}: C of shape {c.shape} does not broadcast to the output's {acc.shape}") \
                    from None
        b_scale = np.asarray(b_scale)
        if b_scale.size not in (1, acc.shape[1]):
            raise ValueError(f"{op}: b_scale must be a scalar or one per column of B ({acc.shape[1]}), got shape "
                             f"{b_scale.shape}")
        mult = ms.qgemm_multiplier(op, alpha, a_scale, b_scale, y_scale)
        if y_scale is None:
            return (acc.astype(np.float32) * mult,)
        y_dtype = np.uint8 if y_zp is None else y_zp.dtype
        return (ms.requantize(acc, mult, ms.scalar(op, "y_zero_point", y_zp, 0), y_dtype),)
    return run
