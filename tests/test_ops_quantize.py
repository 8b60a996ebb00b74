"""The quantization ops on the CPU provider alone (fallback disabled: a node it refused would raise NotImplemented),
each against onnxruntime's output: QuantizeLinear / DequantizeLinear per-tensor, per-axis and blocked over each
integer type (int4 through a Cast, which onnxruntime's Python API cannot hand out), float8 with and without
saturation, NaN / inf / ties / saturation edges; DynamicQuantizeLinear; MatMulInteger and QLinearMatMul over
operand signedness, zero points absent / per-tensor / per-column, batches and broadcasting; ConvInteger and
QLinearConv with groups, strides, pads, dilations, auto_pad, per-channel weights and bias; typed errors naming the
op; the com.microsoft quantized ops (native kernels and numpy references); models written by onnxruntime's
quantizer; and the integer dot-product kernel's machine code, its int16 (non-VNNI) layout and its im2col packing."""
from __future__ import annotations

import math
import re

import llvmlite.binding as llvm
import ml_dtypes
import numba
import numpy as np
import onnx
import pytest
from conftest import kernel_options, native_session, one_node_model, ort_run
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxjit
from onnxjit.kernels import quantize as kq

FEATURES = llvm.get_host_cpu_features().flatten().split(",")
EDGES = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, -3.0, 254.0, 255.0, 256.0, 300.0, -300.0,
                  1e10, -1e10, np.nan, np.inf, -np.inf, 7.4, -7.6], np.float32)


def _check(model, feeds, view=None):
    """The CPU provider's outputs equal onnxruntime's: same dtype and shape, values exactly (float8 compared by
    their bits)."""
    got = native_session(model).run(None, feeds)
    want = ort_run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        if g.dtype.itemsize == 1 and g.dtype.kind == "V" or g.dtype.name.startswith("float8"):
            g, w = g.view(np.uint8), w.view(np.uint8)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)
    return got


def _rng():
    return np.random.default_rng(7)


# --- QuantizeLinear ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("zp_dtype,zp", [(np.uint8, 3), (np.int8, -2), (np.uint16, 300), (np.int16, -7)])
def test_quantize_per_tensor_edges(zp_dtype, zp):
    x = EDGES * np.float32(1 if np.dtype(zp_dtype).itemsize == 1 else 200)
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", np.array(2.0, np.float32), True),
                                              ("zp", np.array(zp, zp_dtype), True)], 21,
                           out_types=[helper.np_dtype_to_tensor_dtype(np.dtype(zp_dtype))])
    _check(model, {"x": x})


def test_quantize_without_zero_point_is_uint8_or_output_dtype():
    x = EDGES
    _check(one_node_model("QuantizeLinear", [("x", x, False), ("s", np.array(0.5, np.float32), True)], 13,
                          out_types=[TP.UINT8]), {"x": x})
    _check(one_node_model("QuantizeLinear", [("x", x, False), ("s", np.array(0.5, np.float32), True)], 21,
                          out_types=[TP.INT16], output_dtype=TP.INT16), {"x": x})


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_quantize_per_axis(axis):
    x = (_rng().standard_normal((2, 3, 4)) * 100).astype(np.float32)
    c = x.shape[axis]
    scale = np.linspace(0.5, 2.0, c).astype(np.float32)
    zp = np.arange(c, dtype=np.int8) - 1
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", scale, True), ("zp", zp, True)], 13, axis=axis,
                           out_types=[TP.INT8])
    _check(model, {"x": x})


@pytest.mark.parametrize("zp_dtype,axis,block", [(np.int8, 1, 2), (np.uint16, 0, 3), (np.uint8, -1, 4)])
def test_quantize_blocked(zp_dtype, axis, block):
    x = (_rng().standard_normal((4, 5, 6)) * 50).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block)
    scale = _rng().uniform(0.3, 2.0, shape).astype(np.float32)
    zp = _rng().integers(0, 9, shape).astype(zp_dtype)
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", scale, True), ("zp", zp, True)], 21, axis=axis,
                           block_size=block, out_types=[helper.np_dtype_to_tensor_dtype(np.dtype(zp_dtype))])
    _check(model, {"x": x})


@pytest.mark.parametrize("to,zp", [(TP.INT4, -1), (TP.UINT4, 3), (TP.INT4, None)])
def test_quantize_int4(to, zp):
    """int4 out of QuantizeLinear, seen through a Cast to int8 (onnxruntime's Python API has no int4 arrays)."""
    x = EDGES[:-5]
    inits = [helper.make_tensor("s", TP.FLOAT, [], [0.75])]
    names = ["x", "s"]
    if zp is not None:
        inits.append(helper.make_tensor("zp", to, [], [zp]))
        names.append("zp")
    nodes = [helper.make_node("QuantizeLinear", names, ["q"], output_dtype=to if zp is None else 0),
             helper.make_node("Cast", ["q"], ["y"], to=TP.INT8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", TP.INT8, [x.size])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    _check(model, {"x": x})


@pytest.mark.parametrize("to,saturate", [(TP.FLOAT8E4M3FN, 1), (TP.FLOAT8E4M3FN, 0), (TP.FLOAT8E5M2, 1),
                                         (TP.FLOAT8E5M2FNUZ, 0)])
def test_quantize_float8(to, saturate):
    """float8 out of QuantizeLinear: e4m3fn compared bit for bit (-0.0, NaN, the saturated ends), the others
    through a Cast to float (onnxruntime's Python API hands out only e4m3fn)."""
    x = EDGES * np.float32(300)
    zp = helper.make_tensor("zp", to, [], [0.0])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q" if to != TP.FLOAT8E4M3FN else "y"],
                              saturate=saturate)]
    if to != TP.FLOAT8E4M3FN:
        nodes.append(helper.make_node("Cast", ["q"], ["y"], to=TP.FLOAT))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", to if to == TP.FLOAT8E4M3FN else TP.FLOAT, [x.size])],
                              initializer=[helper.make_tensor("s", TP.FLOAT, [], [2.0]), zp])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    _check(model, {"x": x})


def test_quantize_float16_input():
    x = (EDGES[:-5] * 3).astype(np.float16)
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", np.array(0.7, np.float16), True),
                                              ("zp", np.array(5, np.uint8), True)], 19,
                           out_types=[TP.UINT8])
    _check(model, {"x": x})


@pytest.mark.parametrize("x_t,s_t,precision,block", [(np.float32, np.float16, None, 0),
                                                      (np.float16, np.float16, None, 3),
                                                      (np.float32, np.float32, TP.FLOAT16, 0)])
def test_quantize_precision(x_t, s_t, precision, block):
    """From opset 23, x / scale is rounded to the precision type (by default the scale's) before rounding to an
    integer: many random values, so quotients near a half that the float16 rounding moves are among them."""
    rng = _rng()
    x = rng.uniform(-12, 12, (50, 6, 7)).astype(x_t)
    scale = (rng.uniform(0.05, 0.2, (50, 2, 7)) if block else np.array(0.0999)).astype(s_t)
    zp = np.zeros(scale.shape, np.int8)
    attrs = {"block_size": block, "axis": 1} if block else {}
    if precision is not None:
        attrs["precision"] = precision
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", scale, True), ("zp", zp, True)], 23,
                           out_types=[TP.INT8], **attrs)
    _check(model, {"x": x})


# --- DequantizeLinear -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,opset", [(np.uint8, 10), (np.int8, 13), (np.int32, 13), (np.int16, 21),
                                         (np.uint16, 21)])
def test_dequantize_per_tensor(dtype, opset):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 0, 1, -1 if info.min else 2, 17], dtype)
    zp = None if dtype == np.int32 else np.array(info.max // 3, dtype)
    inputs = [("x", x, False), ("s", np.array(0.37, np.float32), True)] + ([("zp", zp, True)] if zp is not None else [])
    _check(one_node_model("DequantizeLinear", inputs, opset, out_types=[TP.FLOAT]), {"x": x})


def test_dequantize_per_axis_and_blocked_float16():
    x = _rng().integers(-128, 128, (3, 4, 5)).astype(np.int8)
    scale = np.linspace(0.1, 1.0, 4).astype(np.float32)
    zp = np.array([-3, 0, 5, 127], np.int8)
    _check(one_node_model("DequantizeLinear", [("x", x, False), ("s", scale, True), ("zp", zp, True)], 13,
                          out_types=[TP.FLOAT]), {"x": x})
    bscale = _rng().uniform(0.1, 2, (3, 4, 2)).astype(np.float16)
    bzp = _rng().integers(-5, 5, (3, 4, 2)).astype(np.int8)
    _check(one_node_model("DequantizeLinear", [("x", x, False), ("s", bscale, True), ("zp", bzp, True)], 21, axis=2,
                          block_size=3, out_types=[TP.FLOAT16]), {"x": x})


@pytest.mark.parametrize("dtype,zp", [(ml_dtypes.int4, -3), (ml_dtypes.uint4, 9), (ml_dtypes.float8_e4m3fn, 0.0),
                                      (ml_dtypes.float8_e5m2, None)])
def test_dequantize_sub_byte_and_float8(dtype, zp):
    """int4 / float8 inputs as initializers (onnxruntime cannot be fed them from numpy; it refuses a nonzero float8
    zero point)."""
    if dtype in (ml_dtypes.int4, ml_dtypes.uint4):
        info = ml_dtypes.iinfo(dtype)
        x = np.arange(int(info.min), int(info.max) + 1).astype(dtype)
    else:
        x = np.array([0.0, 1.5, -2.0, 448.0 if dtype == ml_dtypes.float8_e4m3fn else 57344.0, -0.125], dtype)
    inputs = [("x", x, True), ("s", np.array(1.25, np.float32), True)]
    if zp is not None:
        inputs.append(("zp", np.array(zp, dtype), True))
    _check(one_node_model("DequantizeLinear", inputs, 21, out_types=[TP.FLOAT]), {})


# --- DynamicQuantizeLinear --------------------------------------------------------------------------------------
# within one vector of kq.value_range, past several, and one long row (quantized in rows of a quarter of it)
@pytest.mark.parametrize("shape", [(3, 7), (5, 77), (1, 4096)])
@pytest.mark.parametrize("values", ["mixed", "positive", "negative", "zeros", "nan"])
def test_dynamic_quantize_linear(values, shape):
    x = (_rng().standard_normal(shape) * 4).astype(np.float32)
    x = {"mixed": x, "positive": np.abs(x) + 1, "negative": -np.abs(x) - 2, "zeros": x * 0, "nan": x}[values]
    if values == "nan":  # passed over by the range (onnxruntime's too, but for a NaN among the last values)
        x.reshape(-1)[3] = np.nan
    model = one_node_model("DynamicQuantizeLinear", [("x", x, False)], 11, n_out=3,
                           out_types=[TP.UINT8, TP.FLOAT, TP.UINT8])
    _check(model, {"x": x})


# --- MatMulInteger / QLinearMatMul ------------------------------------------------------------------------------
def _ints(dtype, shape, rng):
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


@pytest.mark.parametrize("a_t,b_t", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8),
                                     (np.int8, np.uint8)])
@pytest.mark.parametrize("zps", ["none", "scalar", "per-column"])
def test_matmul_integer(a_t, b_t, zps):
    rng = _rng()
    a, b = _ints(a_t, (9, 37), rng), _ints(b_t, (37, 45), rng)
    inputs = [("a", a, False), ("b", b, True)]
    if zps != "none":
        za = np.array(_ints(a_t, (), rng), a_t)
        zb = _ints(b_t, (45,), rng) if zps == "per-column" else np.array(_ints(b_t, (), rng), b_t)
        inputs += [("za", za, True), ("zb", zb, True)]
    if (a_t, b_t) == (np.int8, np.uint8):  # onnxruntime has no int8 x uint8 kernel: exact integer product instead
        got = native_session(one_node_model("MatMulInteger", inputs, 10, out_types=[TP.INT32])).run(None, {"a": a})[0]
        za = inputs[2][1] if zps != "none" else 0
        zb = inputs[3][1] if zps != "none" else 0
        np.testing.assert_array_equal(got, (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb))
        return
    _check(one_node_model("MatMulInteger", inputs, 10, out_types=[TP.INT32]), {"a": a})


@pytest.mark.parametrize("a_shape,b_shape,b_const", [((2, 3, 5, 17), (17, 6), True), ((2, 1, 5, 17), (3, 17, 6), False),
                                                     ((17,), (2, 17, 6), False), ((4, 17), (17,), False)])
def test_matmul_integer_batches(a_shape, b_shape, b_const):
    rng = _rng()
    a, b = _ints(np.uint8, a_shape, rng), _ints(np.int8, b_shape, rng)
    inputs = [("a", a, False), ("b", b, b_const), ("za", np.array(7, np.uint8), True)]
    _check(one_node_model("MatMulInteger", inputs, 10, out_types=[TP.INT32]), {"a": a} | ({} if b_const else {"b": b}))


@pytest.mark.parametrize("a_shape,b_shape", [((3, 0), (0, 4)), ((0, 5), (5, 4)), ((3, 5), (5, 0))])
def test_matmul_integer_empty(a_shape, b_shape):
    a, b = np.full(a_shape, 7, np.uint8), np.ones(b_shape, np.int8)
    model = one_node_model("MatMulInteger", [("a", a, False), ("b", b, False), ("za", np.array(3, np.uint8), True)],
                           10, out_types=[TP.INT32])
    if a_shape[1] == 0:  # onnxruntime leaves this output uninitialized: the exact (empty-sum) product instead
        got = native_session(model).run(None, {"a": a, "b": b})[0]
        np.testing.assert_array_equal(got, np.zeros((3, 4), np.int32))
        return
    _check(model, {"a": a, "b": b})


@pytest.mark.parametrize("a_t,opset,scale_t", [(np.uint8, 10, np.float32), (np.int8, 10, np.float32),
                                               (np.uint8, 21, np.float16)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(a_t, opset, scale_t, per_column):
    """7 rows and 75 columns: whole 4 x 32 register tiles (their epilogue from the registers) and partial ones."""
    rng = _rng()
    a, b = _ints(a_t, (2, 7, 33), rng), _ints(a_t, (33, 75), rng)
    info = np.iinfo(a_t)
    b_scale = (rng.uniform(0.01, 0.05, 75) if per_column else np.array(0.03)).astype(scale_t)
    b_zp = (_ints(a_t, (75,), rng) if per_column else np.array(info.min // 2 + 60)).astype(a_t)
    inputs = [("a", a, False), ("sa", np.array(0.02, scale_t), True), ("za", np.array(info.max // 2, a_t), True),
              ("b", b, True), ("sb", b_scale, True), ("zb", b_zp, True), ("sy", np.array(0.9, scale_t), True),
              ("zy", np.array(info.min + 100, a_t), True)]
    _check(one_node_model("QLinearMatMul", inputs, opset), {"a": a})


# --- ConvInteger / QLinearConv ----------------------------------------------------------------------------------
CONVS = [  # (x shape, w shape, attributes)
    ((1, 3, 7, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 9), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [0, 1, 1, 0]}),
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 1, 2, 2]}),
    ((1, 2, 7, 6), (3, 2, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 11), (5, 3, 4), {"strides": [3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 4, 5), (3, 2, 2, 2, 2), {"pads": [1, 0, 1, 0, 1, 0]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
def test_conv_integer(x_shape, w_shape, attrs):
    rng = _rng()
    x, w = _ints(np.uint8, x_shape, rng), _ints(np.uint8, w_shape, rng)
    inputs = [("x", x, False), ("w", w, True), ("zx", np.array(131, np.uint8), True),
              ("zw", np.array(9, np.uint8), True)]
    _check(one_node_model("ConvInteger", inputs, 10, out_types=[TP.INT32], **attrs), {"x": x})


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS[:5])
@pytest.mark.parametrize("x_t,w_t,per_channel", [(np.uint8, np.int8, True), (np.uint8, np.uint8, False),
                                                 (np.int8, np.int8, False)])
def test_qlinear_conv(x_shape, w_shape, attrs, x_t, w_t, per_channel):
    rng = _rng()
    x, w = _ints(x_t, x_shape, rng), _ints(w_t, w_shape, rng)
    m = w_shape[0]
    w_scale = (rng.uniform(0.002, 0.01, m) if per_channel else np.array(0.005)).astype(np.float32)
    w_zp = np.zeros(m, w_t) if per_channel else np.array(np.iinfo(w_t).max // 2 - 5, w_t)
    xi, yi = np.iinfo(x_t), np.iinfo(x_t)
    inputs = [("x", x, False), ("sx", np.array(0.05, np.float32), True), ("zx", np.array(xi.max // 2, x_t), True),
              ("w", w, True), ("sw", w_scale, True), ("zw", w_zp, True), ("sy", np.array(0.4, np.float32), True),
              ("zy", np.array(yi.min + 120, x_t), True), ("bias", rng.integers(-3000, 3000, m).astype(np.int32), True)]
    _check(one_node_model("QLinearConv", inputs, 10, **attrs), {"x": x})


# --- errors -----------------------------------------------------------------------------------------------------
def test_mismatched_scale_is_a_typed_error_naming_the_op():
    x = np.zeros((2, 3), np.float32)
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", np.ones(4, np.float32), False)], 13)
    with pytest.raises(onnxjit.RuntimeException, match=r"QuantizeLinear.*per-axis scale of 4 values"):
        native_session(model).run(None, {"x": x, "s": np.ones(4, np.float32)})
    model = one_node_model("DequantizeLinear",
                           [("x", x.astype(np.int8), False), ("s", np.ones((2, 3), np.float32), True)],
                           21, block_size=2, out_types=[TP.FLOAT])
    with pytest.raises(onnxjit.RuntimeException, match=r"DequantizeLinear.*block_size=2 the scale must have shape"):
        native_session(model).run(None, {"x": x.astype(np.int8)})


def test_bad_shapes_name_the_op():
    a = np.zeros((3, 5), np.uint8)
    model = one_node_model("MatMulInteger", [("a", a, False), ("b", np.zeros((4, 2), np.uint8), False)], 10,
                           out_types=[TP.INT32])
    for vi, dims in zip(model.graph.input, (["m", "k"], ["kb", "n"])):  # shapes only known at run time
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, TP.UINT8, dims))
    with pytest.raises(onnxjit.RuntimeException, match=r"MatMulInteger.*do not multiply"):
        native_session(model).run(None, {"a": a, "b": np.zeros((4, 2), np.uint8)})
    x = np.zeros((1, 2, 4, 4), np.uint8)
    inputs = [("x", x, False), ("sx", np.array(1.0, np.float32), True), ("zx", np.array(0, np.uint8), True),
              ("w", np.zeros((3, 2, 1, 1), np.uint8), True), ("sw", np.ones(2, np.float32), True),
              ("zw", np.array(0, np.uint8), True), ("sy", np.array(1.0, np.float32), True),
              ("zy", np.array(0, np.uint8), True)]
    with pytest.raises(onnxjit.RuntimeException, match=r"QLinearConv.*scale of w.*3 values"):
        native_session(one_node_model("QLinearConv", inputs, 10)).run(None, {"x": x})


def test_unsupported_types_are_refused_by_name():
    """A node of types outside the op's (an int8 x into QuantizeLinear) is not taken: with the fallback disabled,
    session creation names the op."""
    x = np.zeros(3, np.int8)
    model = one_node_model("QuantizeLinear", [("x", x, False), ("s", np.array(1.0, np.float32), True)], 13,
                           out_types=[TP.UINT8])
    with pytest.raises(onnxjit.NotImplemented, match="QuantizeLinear"):
        onnxjit.InferenceSession(model.SerializeToString(), kernel_options(), providers=["CPUExecutionProvider"])


# --- the integer dot product ------------------------------------------------------------------------------------
def _gemm_by_kernel(igemm, a, b, dot_types):
    """a (M, K) @ b (K, N) through pack_columns and `igemm` (kernels.quantize.igemm's code) with the given operand
    types (the VNNI bytes or the int16 pairs), both operands as stored already (no offsets)."""
    at_type, bt_type, word = dot_types
    m, k = a.shape
    n = b.shape[1]
    kp = -(-k // word) * word
    at = np.zeros((1, m, kp), at_type)
    at[0, :, :k] = a
    panels = -(-n // kq.NR)
    bp = np.empty((1, panels, kp * kq.NR), bt_type)
    colsum = np.empty((1, n), np.int32)
    kq.pack_columns(b.reshape(1, k, 1, 1, n), 0, 1, (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, n), kp, bp, colsum, 0,
                    panels)
    out = np.empty((1, m, n), np.int32)
    zeros_m, zeros_n = np.zeros((1, m), np.int32), np.zeros((1, n), np.int32)
    igemm(at, bp, zeros_m, zeros_m, zeros_n, zeros_n, zeros_m, np.ones((1, m), np.float32),
          np.ones((1, n), np.float32), np.zeros((1, n), np.float32), False, 0, np.float32(0), np.float32(0), out, 0,
          panels * -(-m // kq.MR))
    return out[0]


@pytest.mark.skipif("+avx2" not in FEATURES, reason="checks x86 AVX2 / AVX-512 machine code")
def test_integer_dot_product_instructions():
    """Both operand layouts give the exact product and compile to the CPU's integer dot-product instructions:
    vpdpbusd for bytes (the layout used where the CPU has VNNI), vpmaddwd (vpdpwssd with VNNI) for int16 pairs
    (the layout used elsewhere)."""
    rng = _rng()
    a, b = rng.integers(0, 256, (6, 23)), rng.integers(-128, 128, (23, 40))
    want = a @ b
    # int16 pairs: vpmaddwd and an add, which LLVM fuses into VNNI's vpdpwssd where the CPU has it
    layouts = [((np.int16, np.int16, 2), "vpdpwssd" if kq.HAS_VNNI else "vpmaddwd")]
    if kq.HAS_VNNI:
        layouts.append(((np.uint8, np.int8, 4), "vpdpbusd"))
    for dot_types, instruction in layouts:
        igemm = numba.njit(nogil=True)(kq.igemm.py_func)  # compiled here: cached code cannot be inspected
        np.testing.assert_array_equal(_gemm_by_kernel(igemm, a.astype(dot_types[0]), b.astype(dot_types[1]),
                                                      dot_types), want)
        asm = igemm.inspect_asm(igemm.signatures[0])
        assert re.search(rf"\b{instruction}\b", asm), f"no {instruction} in igemm for {dot_types}"
    assert kq.DOT_TYPES[2] == (4 if kq.HAS_VNNI else 2)


# --- com.microsoft quantized ops: the references (fallback provider) and the native kernels ---------------------
MS = "com.microsoft"


def _ms_model(op, inputs, out_type, **attrs):
    """One com.microsoft node over `inputs` [(name, array or None, is_initializer)] with one output y."""
    names, vis, inits = [], [], []
    for name, arr, is_init in inputs:
        names.append(name if arr is not None else "")
        if arr is not None and is_init:
            inits.append(numpy_helper.from_array(arr, name))
        elif arr is not None:
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
    graph = helper.make_graph([helper.make_node(op, names, ["y"], domain=MS, **attrs)], "g", vis,
                              [helper.make_tensor_value_info("y", out_type, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10)


def _check_both(model, feeds):
    """The native kernels (CPU provider, fallback disabled) and the numpy reference (fallback provider alone) both
    give onnxruntime's output exactly."""
    _check(model, feeds)
    reference = onnxjit.InferenceSession(model.SerializeToString(), providers=["FallbackExecutionProvider"])
    assert [s.provider for s in reference._compiled.steps] == ["FallbackExecutionProvider"]
    want = ort_run(model, feeds)[0]
    got = reference.run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _scalars(dtype, **values):
    return {k: np.array(v, np.float32 if isinstance(v, float) else dtype) for k, v in values.items()}


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype,shapes", [(np.uint8, ((3, 4, 50), (4, 50))), (np.int8, ((2, 1, 5), (3, 1))),
                                          (np.uint8, ((7,), ())), (np.uint8, ((3, 4, 50), (50,))),
                                          (np.int8, ((1, 50), (6, 50)))])
def test_qlinear_add_mul(op, dtype, shapes):
    """Same shapes, a row over the other operand's rows (either side: the row kernel), other broadcasts, a scalar;
    onnxruntime's output bit for bit."""
    rng = _rng()
    a, b = _ints(dtype, shapes[0], rng), _ints(dtype, shapes[1], rng)
    lo = int(np.iinfo(dtype).min)
    p = _scalars(dtype, sa=0.05, za=lo + 100, sb=0.03, zb=lo + 120, sc=0.07 if op == "QLinearAdd" else 0.9,
                 zc=lo + 128)
    inputs = [("a", a, False), ("sa", p["sa"], True), ("za", p["za"], True), ("b", b, False), ("sb", p["sb"], True),
              ("zb", p["zb"], True), ("sc", p["sc"], True), ("zc", p["zc"], True)]
    _check_both(_ms_model(op, inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), {"a": a, "b": b})


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary(op, attrs, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(4, 64)  # every value
    p = _scalars(dtype, sx=0.05, zx=int(info.min) + 130, sy=1 / 256 if op == "QLinearSigmoid" else 0.04,
                 zy=int(info.min))
    inputs = [("x", x, False), ("sx", p["sx"], True), ("zx", p["zx"], True), ("sy", p["sy"], True),
              ("zy", p["zy"], True)]
    _check_both(_ms_model(op, inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), **attrs), {"x": x})


@pytest.mark.parametrize("dtype,channels_last", [(np.uint8, 0), (np.int8, 1), (np.uint8, 1)])
def test_qlinear_global_average_pool(dtype, channels_last):
    x = _ints(dtype, (2, 5, 7, 3), _rng())
    lo = int(np.iinfo(dtype).min)
    p = _scalars(dtype, sx=0.05, zx=lo + 130, sy=0.03, zy=lo + 10)
    inputs = [("x", x, False)] + [(k, p[k], True) for k in ("sx", "zx", "sy", "zy")]
    _check_both(_ms_model("QLinearGlobalAveragePool", inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                          channels_last=channels_last), {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[2, 3], ceil_mode=1, strides=[2, 2]),
                                   dict(kernel_shape=[7, 7], channels_last=1)])
def test_qlinear_average_pool(dtype, attrs):
    """com.microsoft QLinearAveragePool (quantize_static's QOperator format writes it for resnets' pools) runs on
    the CPU provider alone, as its reference (the fallback's) computes it; onnxruntime's output to within one step
    (its float average rounds a value halfway between two steps either way)."""
    shape = (1, 7, 7, 5) if attrs.get("channels_last") else (2, 5, 7, 7)
    x = _ints(dtype, shape, _rng())
    lo = int(np.iinfo(dtype).min)
    p = _scalars(dtype, sx=0.05, zx=lo + 130, sy=0.03, zy=lo + 10)
    inputs = [("x", x, False)] + [(k, p[k], True) for k in ("sx", "zx", "sy", "zy")]
    model = _ms_model("QLinearAveragePool", inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), **attrs)
    got = native_session(model).run(None, {"x": x})[0]
    want = ort_run(model, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    reference = onnxjit.InferenceSession(model.SerializeToString(), providers=["FallbackExecutionProvider"])
    np.testing.assert_array_equal(got, reference.run(None, {"x": x})[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape,axis,opset,sy", [((2, 3, 5), -1, 13, 1 / 256), ((2, 3, 5), 1, 13, 1 / 256),
                                                 ((2, 3, 5), 1, 12, 0.003), ((3, 300), -1, 13, 0.003),
                                                 ((4, 1), -1, 13, 1 / 256)])
def test_qlinear_softmax(dtype, shape, axis, opset, sy):
    """com.microsoft QLinearSoftmax (the QOperator format's Softmax, and QDQ Softmax groups) on the CPU provider
    alone and on its reference: onnxruntime's output exactly (its table of exponentials, its floor(1 / y_scale),
    saturation, rows of one value whose product overflows)."""
    rng = _rng()
    x = _ints(dtype, shape, rng)
    x.reshape(-1)[::7] = np.iinfo(dtype).max  # rows with one value far above the others: probabilities near 1
    lo = int(np.iinfo(dtype).min)
    p = _scalars(dtype, sx=0.1, zx=lo + 128, sy=sy, zy=lo)
    inputs = [("x", x, False)] + [(k, p[k], True) for k in ("sx", "zx", "sy", "zy")]
    model = _ms_model("QLinearSoftmax", inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), axis=axis,
                      opset=opset)
    want, got = ort_run(model, {"x": x})[0], native_session(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    reference = onnxjit.InferenceSession(model.SerializeToString(), providers=["FallbackExecutionProvider"])
    np.testing.assert_array_equal(reference.run(None, {"x": x})[0], want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(dtype):
    rng = _rng()
    x1, x2, x3 = _ints(dtype, (2, 3, 4), rng), _ints(dtype, (2, 5, 4), rng), _ints(dtype, (2, 1, 4), rng)
    lo = int(np.iinfo(dtype).min)
    p = _scalars(dtype, sy=0.05, zy=lo + 128, s2=0.08, z2=lo + 100, s3=0.01, z3=lo + 3)
    inputs = [("sy", p["sy"], True), ("zy", p["zy"], True), ("x1", x1, False), ("s1", p["sy"], True),
              ("z1", p["zy"], True), ("x2", x2, False), ("s2", p["s2"], True), ("z2", p["z2"], True),
              ("x3", x3, False), ("s3", p["s3"], True), ("z3", p["z3"], True)]
    _check_both(_ms_model("QLinearConcat", inputs, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), axis=1),
                {"x1": x1, "x2": x2, "x3": x3})


@pytest.mark.parametrize("quantized_output", [False, True])
@pytest.mark.parametrize("per_column,trans_b", [(False, 0), (True, 1)])
def test_qgemm(quantized_output, per_column, trans_b):
    rng = _rng()
    a, b = _ints(np.uint8, (6, 33), rng), _ints(np.int8, (33, 10), rng)
    b_scale = rng.uniform(0.01, 0.03, 10).astype(np.float32) if per_column else np.array(0.02, np.float32)
    b_zp = np.zeros(10, np.int8) if per_column else np.array(3, np.int8)
    inputs = [("a", a, False), ("sa", np.array(0.05, np.float32), True), ("za", np.array(128, np.uint8), True),
              ("b", np.ascontiguousarray(b.T) if trans_b else b, True), ("sb", b_scale, True), ("zb", b_zp, True),
              ("c", rng.integers(-5000, 5000, (10,)).astype(np.int32), True)]
    if quantized_output:
        inputs += [("sy", np.array(0.5, np.float32), True), ("zy", np.array(100, np.uint8), True)]
    _check_both(_ms_model("QGemm", inputs, TP.UINT8 if quantized_output else TP.FLOAT, alpha=1.5, transB=trans_b),
                {"a": a})


def test_matmul_integer_to_float_and_dynamic_quantize_matmul():
    rng = _rng()
    b = _ints(np.int8, (33, 10), rng)
    bias = rng.standard_normal(10).astype(np.float32)
    b_scale = rng.uniform(0.01, 0.03, 10).astype(np.float32)
    a = _ints(np.uint8, (2, 6, 33), rng)
    inputs = [("a", a, False), ("b", b, True), ("sa", np.array(0.05, np.float32), True), ("sb", b_scale, True),
              ("za", np.array(128, np.uint8), True), ("zb", np.array(3, np.int8), True), ("bias", bias, True)]
    _check_both(_ms_model("MatMulIntegerToFloat", inputs, TP.FLOAT), {"a": a})
    af = rng.standard_normal((2, 6, 33)).astype(np.float32)
    inputs = [("a", af, False), ("b", b, True), ("sb", b_scale, True), ("zb", np.zeros(10, np.int8), True),
              ("bias", bias, True)]
    _check_both(_ms_model("DynamicQuantizeMatMul", inputs, TP.FLOAT), {"a": af})
    inputs[1] = ("b", b, False)  # B fed: A quantized on its own (no prepared product)
    _check_both(_ms_model("DynamicQuantizeMatMul", inputs, TP.FLOAT), {"a": af, "b": b})


@pytest.mark.parametrize("a_type", [np.uint8, np.int8])
def test_products_with_constant_b_prepared_per_shape_follow_each_run(a_type):
    """MatMulInteger and MatMulIntegerToFloat (with a bias) with a constant B (prepared once per A's shape:
    ConstantBProducts) give onnxruntime's outputs run after run as A, its zero point and its scale change, for 2-D
    and 3-D A of several shapes in one session, B's zero point per column."""
    rng = _rng()
    b = _ints(np.int8, (40, 72), rng)  # (two whole panels and a part)
    zb = _ints(np.int8, (72,), rng)
    info = np.iinfo(a_type)
    shape_a = ["N", "M", 40]
    for op, out_type in (("MatMulInteger", TP.INT32), ("MatMulIntegerToFloat", TP.FLOAT)):
        if op == "MatMulInteger":
            names, inits = ["a", "b", "za", "zb"], [numpy_helper.from_array(b, "b"), numpy_helper.from_array(zb, "zb")]
            ins = [helper.make_tensor_value_info("a", helper.np_dtype_to_tensor_dtype(np.dtype(a_type)), shape_a),
                   helper.make_tensor_value_info("za", helper.np_dtype_to_tensor_dtype(np.dtype(a_type)), [])]
        else:
            names = ["a", "b", "sa", "sb", "za", "zb", "bias"]  # (the bias added in the GEMM's epilogue)
            inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(zb, "zb"),
                     numpy_helper.from_array(rng.uniform(0.01, 0.02, 72).astype(np.float32), "sb"),
                     numpy_helper.from_array(rng.standard_normal(72).astype(np.float32), "bias")]
            ins = [helper.make_tensor_value_info("a", helper.np_dtype_to_tensor_dtype(np.dtype(a_type)), shape_a),
                   helper.make_tensor_value_info("sa", TP.FLOAT, []),
                   helper.make_tensor_value_info("za", helper.np_dtype_to_tensor_dtype(np.dtype(a_type)), [])]
        graph = helper.make_graph([helper.make_node(op, names, ["y"], domain="" if op == "MatMulInteger" else MS)],
                                  "g", ins, [helper.make_tensor_value_info("y", out_type, None)], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)],
                                  ir_version=10)
        sess = native_session(model)
        for shape in ((1, 37, 40), (2, 5, 40), (1, 37, 40), (3, 1, 40)):
            feeds = {"a": rng.integers(info.min, info.max + 1, shape).astype(a_type),
                     "za": np.array(rng.integers(info.min, info.max + 1), a_type)}
            if op != "MatMulInteger":
                feeds["sa"] = np.array(rng.uniform(0.01, 0.1), np.float32)
            got, want = sess.run(None, feeds)[0], ort_run(model, feeds)[0]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_contrib_bad_inputs_name_the_op():
    a = np.zeros((2, 3), np.uint8)
    inputs = [("a", a, False), ("sa", np.ones(2, np.float32), False), ("za", np.array(0, np.uint8), True),
              ("b", a, False), ("sb", np.array(1.0, np.float32), True), ("zb", np.array(0, np.uint8), True),
              ("sc", np.array(1.0, np.float32), True)]
    model = _ms_model("QLinearAdd", inputs, TP.UINT8)
    with pytest.raises(onnxjit.RuntimeException, match=r"QLinearAdd.*A_scale must be a scalar"):
        native_session(model).run(None, {"a": a, "sa": np.ones(2, np.float32), "b": a})
    b = np.zeros((4, 5), np.int8)
    inputs = [("a", a, False), ("b", b, True), ("sa", np.array(1.0, np.float32), True),
              ("sb", np.ones(3, np.float32), True)]
    with pytest.raises(onnxjit.RuntimeException, match=r"MatMulIntegerToFloat.*do not multiply"):
        native_session(_ms_model("MatMulIntegerToFloat", inputs, TP.FLOAT)).run(None, {"a": a})


# --- models written by onnxruntime's quantizer ------------------------------------------------------------------
def _small_convnet(rng):
    def weight(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=2),
             helper.make_node("Add", ["c2", "r1"], ["s"]), helper.make_node("Sigmoid", ["s"], ["sg"]),
             helper.make_node("Mul", ["sg", "s"], ["m"]), helper.make_node("GlobalAveragePool", ["m"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [2, 5])],
                              initializer=[weight("w1", (8, 3, 3, 3)), weight("b1", (8,)), weight("w2", (8, 4, 3, 3)),
                                           weight("b2", (8,)), weight("w3", (5, 8)), weight("b3", (5,))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


QUANTIZATION_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                    "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
                    "QLinearGlobalAveragePool", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("how", ["static-qoperator", "static-qdq", "dynamic"])
def test_models_quantized_by_onnxruntime(how, tmp_path):
    """A small convnet quantized by onnxruntime.quantization runs as on onnxruntime, bit for bit, every quantization
    node on the CPU provider (the Flatten of a com.microsoft op's output, whose type inference does not know,
    may fall back); the QDQ model's DequantizeLinear -> op -> QuantizeLinear groups run as the integer ops
    onnxruntime rewrites them into, and the dynamic one's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul as
    DynamicQuantizeMatMul, as onnxruntime does."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    rng = _rng()
    float_path, quant_path = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(_small_convnet(rng), float_path)
    batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(3)]

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    if how == "dynamic":
        quantize_dynamic(float_path, quant_path, weight_type=QuantType.QInt8)
    else:
        quantize_static(float_path, quant_path, Batches(), per_channel=True, weight_type=QuantType.QInt8,
                        quant_format=QuantFormat.QOperator if how == "static-qoperator" else QuantFormat.QDQ)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    sess = onnxjit.InferenceSession(str(quant_path), providers=["CPUExecutionProvider"])
    ran = {(n.op_type, s.provider) for s in sess._compiled.steps for n in s.nodes}
    written = {n.op_type for n in onnx.load(quant_path).graph.node} & QUANTIZATION_OPS
    # as onnxruntime rewrites them: QDQ groups as its optimized model has them (optimizer/qdq.py), quantize_dynamic's
    # MatMulInteger -> Cast -> Mul as MatMulIntegerToFloat (optimizer/matmul_integer_to_float.py)
    expected = written
    if how != "static-qoperator":
        import onnxruntime
        so = onnxruntime.SessionOptions()
        so.optimized_model_filepath = str(tmp_path / "ort.onnx")
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        onnxruntime.InferenceSession(str(quant_path), so, providers=["CPUExecutionProvider"])
        rewritten = {n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node} & QUANTIZATION_OPS
        assert rewritten - written, rewritten  # (onnxruntime rewrites some group)
        if how == "static-qdq":
            # onnxjit rewrites those and, int8 activations allowed (optimizer/qdq.py), the Convs and what follows
            expected = written | rewritten | {"QLinearConv", "QLinearAdd", "QLinearSigmoid", "QLinearMul"}
        else:  # its Gemm's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul as DynamicQuantizeMatMul
            assert rewritten == written - {"MatMulInteger"} | {"DynamicQuantizeMatMul"}, rewritten
            expected = rewritten
    assert len(written) >= 2 and {op for op, _ in ran if op in QUANTIZATION_OPS} == expected, ran
    assert all(provider == "CPUExecutionProvider" for op, provider in ran if op in QUANTIZATION_OPS), ran
    got = sess.run(None, {"x": x})[0]
    want = ort_run(onnx.load(quant_path), {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dot_types", [(np.uint8, np.int8, 4), (np.int16, np.int16, 2)])
@pytest.mark.parametrize("k,s,d", [((1, 3, 2), (1, 2, 1), (1, 1, 2)), ((2, 1, 1), (1, 1, 1), (1, 1, 1))])
def test_pack_columns_is_im2col(dot_types, k, s, d):
    """pack_columns' panels, unpacked, are the im2col matrix (x - offset, rows channel-major taps, columns output
    pixels) and its column sums, in both operand layouts, over strides, dilations and pixel runs that cross output
    rows (the convolutions' B operand)."""
    x = _ints(np.uint8, (2, 3, 3, 9, 11), _rng())
    group, offset = 1, 128
    out_sizes = tuple((n - (kn - 1) * dl - 1) // st + 1 for n, kn, st, dl in zip(x.shape[2:], k, s, d))
    kk, npx, word = 3 * math.prod(k), math.prod(out_sizes), dot_types[2]
    kp, panels = -(-kk // word) * word, -(-npx // kq.NR)
    bp = np.empty((2, panels, kp * kq.NR), dot_types[1])
    colsum = np.zeros((2, npx), np.int32)
    kq.pack_columns(x, offset, group, k, s, d, out_sizes, kp, bp, colsum, 0, 2 * panels)
    unpacked = bp.reshape(2, panels, kp // word, kq.NR, word).transpose(0, 2, 4, 1, 3).reshape(2, kp, -1)
    for img in range(2):
        want = np.array([[int(x[img, c, i * s[0] + a * d[0], h * s[1] + b * d[1], w * s[2] + e * d[2]]) - offset
                          for i, h, w in np.ndindex(*out_sizes)]
                         for c, a, b, e in np.ndindex(3, *k)])
        np.testing.assert_array_equal(unpacked[img, :kk, :npx], want)
        np.testing.assert_array_equal(unpacked[img, kk:], 0)
        np.testing.assert_array_equal(colsum[img], want.sum(axis=0))


def test_lazily_imported_op_modules_register_what_the_table_says():
    """The quantization and com.microsoft op modules are imported when a node first needs one of their ops
    (ops.registry.LAZY_MODULES): the table names every op they register, and nothing they do not."""
    import importlib

    from onnxjit.ops import registry
    lazy = {m for mods in registry.LAZY_MODULES.values() for m in mods}
    for m in lazy:
        importlib.import_module(m)
    # every op a lazy module registers (its builders are that module's functions)
    registered = {key for key, versions in registry.OPS.items()
                  if any(b.__module__ in lazy for b in versions.values())}
    assert ("", "QLinearConv") in registered and ("com.microsoft", "Attention") in registered
    covered = {key for key in registered if key in registry.LAZY_MODULES or (key[0], None) in registry.LAZY_MODULES}
    assert covered == registered, sorted(registered - covered)
    named = {key for key in registry.LAZY_MODULES if key[1] is not None}
    assert named <= set(registry.OPS), sorted(named - set(registry.OPS))


@pytest.mark.skipif(not kq.HAS_AMX_GEMM, reason="needs AMX tiles (Intel Sapphire Rapids or later, granted by the OS)")
@pytest.mark.parametrize("m,k,n,batches", [(1, 5, 3, 1), (37, 70, 45, 2), (64, 128, 64, 1), (33, 200, 97, 3),
                                           (40, 1100, 70, 2), (300, 600, 300, 1)])
# (40 x 1100: K in 3 blocks, the last partial; 300 x 600 x 300: 100 units, run in two chunks)
@pytest.mark.parametrize("a_type", [np.uint8, np.int8])
def test_amx_tiles_give_the_register_kernels_results(m, k, n, batches, a_type):
    """igemm_amx (tdpbusd over 16 x 64-byte tiles) and igemm (vpdpbusd) over the same operands, padded as AMX
    needs (rows of A to whole tiles, K to 64), give the same int32 products and the same requantized bytes, equal to
    numpy's; zero points per row and per column, a bias, batches of A over one B, partial tiles and panels. The
    kernel's machine code has tdpbusd."""
    from onnxjit.ops import quantize as oq
    rng = _rng()
    info = np.iinfo(a_type)
    a = rng.integers(info.min, info.max + 1, (batches, m, k)).astype(a_type)
    b = rng.integers(-128, 128, (1, k, n)).astype(np.int8)
    za = rng.integers(info.min, info.max + 1, (1, m))
    zb = rng.integers(-128, 128, (1, n))
    bias = rng.integers(-1000, 1000, (1, m)).astype(np.int32)
    want = np.einsum("bmk,kn->bmn", a.astype(np.int64) - za[..., None], b[0].astype(np.int64) - zb) + bias[..., None]
    a_op, b_op = oq.a_operand(a), oq.b_matrix_operand(b)
    assert a_op[0].shape[1] % kq.AMX_ROWS == 0 and a_op[0].shape[2] % 64 == 0
    mult_c = rng.uniform(1e-4, 1e-3, (1, n)).astype(np.float32)
    for y_dtype in (np.int32, np.uint8):
        results = []
        for gemm in (kq.igemm, kq.igemm_amx):
            out = np.empty((batches, m, n), y_dtype)
            at, rowsum, a_off = a_op
            bp, colsum, b_off = b_op
            zb_t = zb - b_off
            requant = y_dtype != np.int32
            rows = kq.AMX_ROWS if gemm is kq.igemm_amx else kq.MR
            gemm(at, bp, (za - a_off).astype(np.int32), rowsum, zb_t.astype(np.int32),
                 (colsum - k * zb_t).astype(np.int32), bias, np.ones((1, m), np.float32), mult_c,
                 np.zeros((1, n), np.float32), requant, 3, np.float32(-3), np.float32(252), out, 0,
                 batches * bp.shape[1] * -(-m // rows))
            results.append(out)
        np.testing.assert_array_equal(results[1], results[0])
        if y_dtype == np.int32:
            np.testing.assert_array_equal(results[1], want)
        else:  # rint(acc * multiplier) clamped to the range less the zero point 3, in float32 as the kernels do
            scaled = np.rint(want.astype(np.float32) * mult_c[0])
            np.testing.assert_array_equal(results[1], (np.clip(scaled, -3, 252) + 3).astype(np.uint8))
    amx_gemm = numba.njit(nogil=True)(kq.igemm_amx.py_func)  # compiled here: cached code cannot be inspected
    at, rowsum, _ = a_op
    out = np.empty((batches, m, n), np.int32)
    ones_m = np.ones((1, m), np.float32)
    amx_gemm(at, b_op[0], np.zeros((1, m), np.int32), rowsum, np.zeros((1, n), np.int32), np.zeros((1, n), np.int32),
             np.zeros((1, m), np.int32), ones_m, np.ones((1, n), np.float32), np.zeros((1, n), np.float32), False, 0,
             np.float32(0), np.float32(0), out, 0, 0)
    assert re.search(r"\btdpbusd\b", amx_gemm.inspect_asm(amx_gemm.signatures[0]))
