"""com.microsoft quantized ops that onnxruntime's quantizer writes (numpy references; onnxjit.ops.quantize runs
them natively on the CPU provider with these same formulas and helpers).

  QLinearAdd(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?) -> C, numpy broadcasting:
      C = rint((A - A_zp) * (A_scale / C_scale) + (B - B_zp) * (B_scale / C_scale)) + C_zp
  QLinearMul(same inputs) -> C = rint((A - A_zp) * (B - B_zp) * (A_scale * B_scale / C_scale)) + C_zp
  QLinearSigmoid(X, X_scale, X_zp?, Y_scale, Y_zp?) -> Y = quantize(sigmoid(dequantize(X)))
  QLinearLeakyRelu(same inputs; alpha, default 0.01) -> Y = quantize(leaky_relu(dequantize(X)))
  QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp; channels_last 0) -> the mean over the spatial dims,
      Y = rint((sum(X) - x_zp * S) * (x_scale / (y_scale * S))) + y_zp, S the spatial size; (N, C, 1...) or
      (N, 1..., C) with channels_last
  QLinearAveragePool(X, x_scale, x_zp?, y_scale, y_zp?; AveragePool's attributes, channels_last 0) ->
      Y = quantize(AveragePool(dequantize(X)))
  QLinearSoftmax(X, X_scale, x_zp?, y_scale, y_zp?; axis, opset) -> Y = quantize(Softmax(dequantize(X))),
      Softmax as ai.onnx's at `opset` (before 13 over x flattened to 2-D at axis)
  QLinearConcat(Y_scale, Y_zp, X0, X0_scale, X0_zp, X1, ...; axis) -> Y: each input requantized to Y's scale
      and zero point (copied where they are its own), then concatenated along axis
  QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?; alpha 1, transA 0, transB 0) ->
      acc = (A' - a_zp) @ (B' - b_zp) + C (int32, C broadcast to (M, N)); Y = acc * (alpha * a_scale * b_scale)
      (float32) without y_scale, else rint(acc * (alpha * a_scale * b_scale / y_scale)) + y_zp; b per tensor or
      per column
  MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?) -> Y = (A - a_zp) @ (B - b_zp) *
      (a_scale * b_scale) + bias, MatMul's broadcasting, b per tensor or per column
  DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?) -> MatMulIntegerToFloat of A quantized to uint8 as
      DynamicQuantizeLinear does, with its scale and zero point

8-bit tensors are int8 or uint8; "quantize" is rint(v / scale) + zero point, saturated to the type's range, in
float32, and "dequantize" (x - zero point) * scale; the multipliers are float32 products and quotients computed in
the order shown, as onnxruntime's kernels compute them (its vectorized elementwise kernels may round a value
halfway between two integers either way: the tests allow a difference of one there). Scales and zero points are
per tensor (one value) except where said.
"""
from __future__ import annotations

import math

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib.microsoft import reference_op


def scalar(op: str, name: str, v, default=None):
    """A per-tensor scale or zero point (one value): the value, or `default` where the input is absent."""
    if v is None:
        return default
    v = np.asarray(v)
    if v.size != 1:
        raise ValueError(f"{op}: {name} must be a scalar (one value), got shape {v.shape}")
    return v.reshape(-1)[0]


def saturate(v: np.ndarray, dtype) -> np.ndarray:
    """float32 values already rounded, with the zero point added, saturated into an 8-bit `dtype`."""
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def requantize(acc: np.ndarray, multiplier, zero_point, dtype) -> np.ndarray:
    """rint(acc * multiplier) + zero_point (float32), saturated into `dtype`."""
    scaled = np.rint(np.asarray(acc).astype(np.float32) * np.asarray(multiplier, np.float32))
    return saturate(scaled + np.float32(zero_point), dtype)


def lookup_table(fn, x_scale, x_zero_point, y_scale, y_zero_point, dtype) -> np.ndarray:
    """The 256 outputs quantize(fn(dequantize(x))) of an 8-bit unary op, indexed by x's byte (x viewed as uint8)."""
    x = np.arange(256, dtype=np.uint8).view(dtype)
    f = (x.astype(np.int32) - np.int32(x_zero_point)).astype(np.float32) * np.float32(x_scale)
    y = np.asarray(fn(f), np.float32)
    return saturate(np.rint(y / np.float32(y_scale)) + np.float32(y_zero_point), dtype)


def leaky_relu(alpha: float):
    a = np.float32(alpha)
    return lambda f: np.where(f >= 0, f, f * a)


def sigmoid(f: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-f.astype(np.float64)))).astype(np.float32)


def identity(f: np.ndarray) -> np.ndarray:
    return f


def qlinear_binary_params(op, a_scale, a_zp, b_scale, b_zp, c_scale, c_zp):
    """(a_zp, b_zp, c_zp, ratio_a, ratio_b) of QLinearAdd (ratios A_scale / C_scale, B_scale / C_scale) and
    QLinearMul (ratio_a A_scale * B_scale / C_scale, ratio_b 1)."""
    sa, sb, sc = (np.float32(scalar(op, n, v)) for n, v in (("A_scale", a_scale), ("B_scale", b_scale),
                                                             ("C_scale", c_scale)))
    za, zb, zc = (int(scalar(op, n, v, 0)) for n, v in (("A_zero_point", a_zp), ("B_zero_point", b_zp),
                                                         ("C_zero_point", c_zp)))
    if op == "QLinearAdd":
        return za, zb, zc, sa / sc, sb / sc
    return za, zb, zc, sa * sb / sc, np.float32(1)


def check_8bit(op: str, **arrays) -> None:
    for name, v in arrays.items():
        if v is not None and np.asarray(v).dtype not in (np.int8, np.uint8):
            raise ValueError(f"{op}: {name} must be int8 or uint8, got {np.asarray(v).dtype}")


@reference_op
class QLinearAdd(OpRun):
    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        check_8bit("QLinearAdd", A=a, B=b)
        za, zb, zc, ra, rb = qlinear_binary_params("QLinearAdd", a_scale, a_zp, b_scale, b_zp, c_scale, c_zp)
        va = (a.astype(np.int32) - za).astype(np.float32) * ra
        vb = (b.astype(np.int32) - zb).astype(np.float32) * rb
        return (saturate(np.rint(va + vb) + np.float32(zc), a.dtype),)


@reference_op
class QLinearMul(OpRun):
    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        check_8bit("QLinearMul", A=a, B=b)
        za, zb, zc, ratio, _ = qlinear_binary_params("QLinearMul", a_scale, a_zp, b_scale, b_zp, c_scale, c_zp)
        prod = (a.astype(np.int32) - za).astype(np.float32) * (b.astype(np.int32) - zb).astype(np.float32)
        return (saturate(np.rint(prod * ratio) + np.float32(zc), a.dtype),)


def unary_table(op, fn, x, x_scale, x_zp, y_scale, y_zp):
    check_8bit(op, X=x)
    return lookup_table(fn, scalar(op, "X_scale", x_scale), scalar(op, "X_zero_point", x_zp, 0),
                        scalar(op, "Y_scale", y_scale), scalar(op, "Y_zero_point", y_zp, 0), x.dtype)


@reference_op
class QLinearSigmoid(OpRun):
    def _run(self, x, x_scale, x_zp=None, y_scale=None, y_zp=None):
        return (unary_table("QLinearSigmoid", sigmoid, x, x_scale, x_zp, y_scale, y_zp)[x.view(np.uint8)],)


@reference_op
class QLinearLeakyRelu(OpRun):
    def _run(self, x, x_scale, x_zp=None, y_scale=None, y_zp=None, alpha=0.01):
        table = unary_table("QLinearLeakyRelu", leaky_relu(alpha), x, x_scale, x_zp, y_scale, y_zp)
        return (table[x.view(np.uint8)],)


def global_average_shape(op, x, channels_last):
    """The output's shape: (N, C, 1, ...), or (N, 1, ..., C) channels last."""
    if x.ndim < 3:
        raise ValueError(f"{op}: X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
    if channels_last:
        return (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
    return x.shape[:2] + (1,) * (x.ndim - 2)


@reference_op
class QLinearGlobalAveragePool(OpRun):
    def _run(self, x, x_scale, x_zp, y_scale, y_zp, channels_last=0):
        op = "QLinearGlobalAveragePool"
        check_8bit(op, X=x)
        out_shape = global_average_shape(op, x, channels_last)
        # (N, S, C) channels last, else (N * C, S, 1): the sums run over axis 1
        planes = x.reshape(x.shape[0], -1, x.shape[-1]) if channels_last else x.reshape(-1, math.prod(x.shape[2:]), 1)
        size = planes.shape[1]
        acc = planes.astype(np.int32).sum(axis=1) - np.int32(scalar(op, "x_zero_point", x_zp)) * size
        mult = np.float32(scalar(op, "x_scale", x_scale)) / (np.float32(scalar(op, "y_scale", y_scale))
                                                             * np.float32(size))
        return (requantize(acc, mult, scalar(op, "y_zero_point", y_zp), x.dtype).reshape(out_shape),)


def average_pool(x: np.ndarray, **attrs) -> np.ndarray:
    """ai.onnx AveragePool-19 of the NCHW float array x (onnx.reference's), with the given attributes."""
    from onnx import helper
    from onnx.reference.ops import load_op
    node = helper.make_node("AveragePool", ["x"], ["y"], **{k: v for k, v in attrs.items() if v is not None})
    cls = load_op("", "AveragePool", 19)
    return cls(node, {"log": lambda *a: None, "opsets": {"": 19}, "verbose": 0, "new_ops": {}}).run(x)[0]


def qlinear_average_pool(x, x_scale, x_zp, y_scale, y_zp, channels_last, average) -> np.ndarray:
    """quantize(average(dequantize(X))) in float32, X NCHW... or (channels_last) NHWC..., `average` AveragePool of an
    NCHW float32 array: QLinearAveragePool, for its reference here and the CPU provider's kernel (ops.quantize)."""
    op = "QLinearAveragePool"
    check_8bit(op, X=x)
    if x.ndim < 3:
        raise ValueError(f"{op}: X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
    f = (x.astype(np.float32) - np.float32(scalar(op, "x_zero_point", x_zp, 0))) * \
        np.float32(scalar(op, "x_scale", x_scale))
    if channels_last:
        f = np.moveaxis(f, -1, 1)
    avg = average(f).astype(np.float32, copy=False)
    y = saturate(np.rint(avg / np.float32(scalar(op, "y_scale", y_scale)))
                 + np.float32(scalar(op, "y_zero_point", y_zp, 0)), x.dtype)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1) if channels_last else y)


@reference_op
class QLinearAveragePool(OpRun):
    """QLinearAveragePool(X, x_scale, x_zero_point?, y_scale, y_zero_point?; AveragePool's attributes and
    channels_last 0) -> Y = quantize(AveragePool(dequantize(X))), NCHW or (channels_last) NHWC."""

    def _run(self, x, x_scale, x_zp=None, y_scale=None, y_zp=None, auto_pad=None, ceil_mode=None, channels_last=0,
             count_include_pad=None, kernel_shape=None, pads=None, strides=None):
        attrs = dict(auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)
        return (qlinear_average_pool(x, x_scale, x_zp, y_scale, y_zp, channels_last,
                                     lambda f: average_pool(f, **attrs)),)


def softmax_table(x_scale, reduce_len: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax exponentials, float32 exp((i - 255 + shift) * x_scale) for i = 0..255 computed
    in float64, where shift = max(0, log(FLT_MAX / reduce_len) - 5) / x_scale keeps a row's sum finite; entry 255 -
    (row max - x) is x's (x's zero point cancels)."""
    x_scale = np.float64(np.float32(x_scale))
    shift = max(0.0, math.log(np.float64(np.finfo(np.float32).max / np.float32(max(reduce_len, 1)))) - 5) / x_scale
    return np.exp((np.arange(256, dtype=np.float64) - 255 + shift) * x_scale).astype(np.float32)


def softmax_rows(op, x, axis, opset) -> tuple[np.ndarray, int]:
    """x as the (rows, D) rows QLinearSoftmax normalizes (a copy where the axis is not the last one) and the axis
    it moved from (opset 13 on) or -1."""
    a = int(axis) % max(x.ndim, 1)
    if int(opset) < 13:
        return x.reshape(math.prod(x.shape[:a]), -1), -1
    return np.ascontiguousarray(np.moveaxis(x, a, -1)).reshape(-1, x.shape[a] if x.ndim else 1), a


def qlinear_softmax(x, x_scale, x_zp, y_scale, y_zp, axis, opset) -> np.ndarray:
    """QLinearSoftmax as onnxruntime computes it (kernels.quantize.softmax_rows says how: a lookup table of
    exponentials, Y's scale as floor(1 / y_scale)), for its reference here; quantize(Softmax(dequantize(X))) to
    within a step or so."""
    op = "QLinearSoftmax"
    check_8bit(op, X=x)
    scalar(op, "x_zero_point", x_zp, 0)
    rows, moved = softmax_rows(op, x, axis, opset)
    v = rows.astype(np.int32)
    e = softmax_table(scalar(op, "x_scale", x_scale), rows.shape[-1])[255 - (v.max(axis=-1, keepdims=True) - v)] \
        if v.size else np.zeros(v.shape, np.float32)
    total = np.cumsum(e, axis=-1, dtype=np.float32)[:, -1:] if v.size else e  # summed in order, as onnxruntime does
    ys = np.floor(np.float32(1) / np.float32(scalar(op, "y_scale", y_scale)))
    with np.errstate(over="ignore"):
        f = (e * ys) / total
    info = np.iinfo(x.dtype)
    zy = int(scalar(op, "y_zero_point", y_zp, 0))
    q = np.where(np.isfinite(f), np.rint(np.where(np.isfinite(f), f, 0)).astype(np.int64) + zy, info.max)
    y = np.clip(q, info.min, info.max).astype(x.dtype)
    if moved < 0:
        return y.reshape(x.shape)
    return np.ascontiguousarray(np.moveaxis(y.reshape(np.moveaxis(x, moved, -1).shape), -1, moved))


@reference_op
class QLinearSoftmax(OpRun):
    """QLinearSoftmax(X, X_scale, x_zero_point?, y_scale, y_zero_point?; axis, opset) -> Y = quantize(Softmax(
    dequantize(X))), Softmax as ai.onnx's at `opset` (before 13: over x flattened to 2-D at `axis`)."""

    def _run(self, x, x_scale, x_zp=None, y_scale=None, y_zp=None, axis=-1, opset=13):
        return (qlinear_softmax(x, x_scale, x_zp, y_scale, y_zp, axis, opset),)


def concat_parts(op, y_scale, y_zp, triples):
    """Each (X, X_scale, X_zp) of QLinearConcat as Y's type: (X, None) where its scale and zero point are Y's, else
    (X, the lookup table requantizing it)."""
    sy, zy = np.float32(scalar(op, "Y_scale", y_scale)), scalar(op, "Y_zero_point", y_zp)
    parts = []
    for i, (x, sx, zx) in enumerate(triples):
        check_8bit(op, **{f"input {i}": x})
        if x.dtype != np.asarray(y_zp).dtype:
            raise ValueError(f"{op}: input {i} is {x.dtype}, Y's zero point {np.asarray(y_zp).dtype}")
        sx, zx = np.float32(scalar(op, f"the scale of input {i}", sx)), scalar(op, f"the zero point of input {i}", zx)
        same = sx == sy and zx == zy
        parts.append((x, None if same else lookup_table(identity, sx, zx, sy, zy, x.dtype)))
    return parts


@reference_op
class QLinearConcat(OpRun):
    def _run(self, y_scale, y_zp, *inputs, axis=None):
        op = "QLinearConcat"
        if len(inputs) % 3 or not inputs:
            raise ValueError(f"{op}: inputs after Y_scale and Y_zero_point must be (X, X_scale, X_zero_point) "
                             f"triples, got {len(inputs)}")
        parts = concat_parts(op, y_scale, y_zp, [inputs[i:i + 3] for i in range(0, len(inputs), 3)])
        return (np.concatenate([x if t is None else t[x.view(np.uint8)] for x, t in parts], axis=axis),)


def qgemm_multiplier(op, alpha, a_scale, b_scale, y_scale):
    """alpha * a_scale * b_scale (per column of B or one value), divided by y_scale where given (float32)."""
    m = np.float32(alpha) * np.float32(scalar(op, "a_scale", a_scale)) * np.asarray(b_scale, np.float32).reshape(-1)
    return m if y_scale is None else m / np.float32(scalar(op, "y_scale", y_scale))


def integer_product(op, a, za, b, zb):
    """(A - za) @ (B - zb) in int32 (MatMul's broadcasting), zb per tensor or per column of B."""
    check_8bit(op, A=a, B=b)
    zb = np.asarray(zb if zb is not None else 0, np.int32)
    if zb.size != 1 and zb.shape[-1:] != b.shape[-1:]:
        raise ValueError(f"{op}: B's zero point must be a scalar or one per column of B ({b.shape[-1]}), got shape "
                         f"{zb.shape}")
    a32 = a.astype(np.int64) - np.int64(scalar(op, "A's zero point", za, 0))
    return np.matmul(a32, b.astype(np.int64) - zb.astype(np.int64)).astype(np.int32)


@reference_op
class QGemm(OpRun):
    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None, alpha=1.0, transA=0,
             transB=0):
        op = "QGemm"
        a = a.T if transA else a
        b = b.T if transB else b
        if b.ndim != 2 or a.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"{op}: A {a.shape} and B {b.shape} (after transposes) are not (M, K) and (K, N)")
        acc = integer_product(op, a, a_zp, b, b_zp)
        if c is not None:
            acc = acc + np.broadcast_to(np.asarray(c, np.int32), acc.shape)
        mult = qgemm_multiplier(op, alpha, a_scale, b_scale, y_scale)
        if y_scale is None:
            return (acc.astype(np.float32) * mult,)
        zy = scalar(op, "y_zero_point", y_zp, 0)
        return (requantize(acc, mult, zy, np.asarray(y_zp).dtype if y_zp is not None else np.uint8),)


def to_float(acc, a_scale, b_scale, bias):
    """acc * (a_scale * b_scale) + bias (float32), b_scale per tensor or per column."""
    y = acc.astype(np.float32) * (np.float32(a_scale) * np.asarray(b_scale, np.float32).reshape(-1))
    return y if bias is None else y + np.asarray(bias, np.float32)


@reference_op
class MatMulIntegerToFloat(OpRun):
    def _run(self, a, b, a_scale, b_scale, a_zp=None, b_zp=None, bias=None):
        op = "MatMulIntegerToFloat"
        acc = integer_product(op, a, a_zp, b, b_zp)
        return (to_float(acc, scalar(op, "a_scale", a_scale), b_scale, bias).astype(np.asarray(a_scale).dtype),)


def dynamic_quantization(x: np.ndarray):
    """(scale, zero point) of DynamicQuantizeLinear for float32 x: its range extended to include 0 (NaN passed
    over, as onnxruntime passes it) over 255 steps (a scale of 1 where the range is empty), zero point
    rint(-min / scale) saturated to uint8 (onnxruntime's formula, in float32; kernels.quantize.dynamic_quantization
    is the CPU provider's)."""
    lo = np.float32(np.fmin.reduce(x, axis=None, initial=0.0))
    hi = np.float32(np.fmax.reduce(x, axis=None, initial=0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.rint(min(max(np.float32(0) - lo / scale, np.float32(0)), np.float32(255)))
    return scale, np.uint8(zp)


@reference_op
class DynamicQuantizeMatMul(OpRun):
    def _run(self, a, b, b_scale, b_zp=None, bias=None):
        op = "DynamicQuantizeMatMul"
        scale, zp = dynamic_quantization(a)
        qa = saturate(np.rint(a / scale) + np.float32(zp), np.uint8)
        return (to_float(integer_product(op, qa, zp, b, b_zp), scale, b_scale, bias),)
