"""DequantizeLinear -> Conv -> QuantizeLinear as QLinearConv (onnxjit/optimizer/qdq.py): rewritten where every
precondition holds, at the extended level and above, and not otherwise; outputs equal onnxruntime's, which
rewrites these convolutions the same way."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import make_model, ort_run, tensor
from onnx import TensorProto, helper, numpy_helper

import onnxjit

U8, I8 = TensorProto.UINT8, TensorProto.INT8
LEVELS = onnxjit.GraphOptimizationLevel


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def qdq_conv_model(x_type=U8, w_dtype=np.int8, per_channel=True, bias=True, bias_scale=None, between=(),
                   convs=1, extra_outputs=(), cin=8, cout=16, seed=0, y_zp_offset=90, opset=13):
    """x (quantized) -> DQ -> Conv 3x3 (W and B from DQs of constants) [-> `between` nodes: op types, or (op type,
    its extra constant inputs)] -> Q -> y, `convs` Convs reading the one DQ of x (outputs y0, y1, ...); Y's zero
    point is the type's lowest value plus `y_zp_offset`."""
    rng = np.random.default_rng(seed)
    x_dtype = np.uint8 if x_type == U8 else np.int8
    info = np.iinfo(x_dtype)
    w = rng.integers(np.iinfo(w_dtype).min, np.iinfo(w_dtype).max, (cout, cin, 3, 3), endpoint=True).astype(w_dtype)
    w_scale = (rng.uniform(0.002, 0.01, cout) if per_channel else np.array(0.005)).astype(np.float32)
    w_zp = np.zeros(w_scale.shape, w_dtype) if w_dtype == np.int8 else np.full(w_scale.shape, 120, w_dtype)
    x_scale, x_zp = np.float32(0.02), np.array(info.min + 120, x_dtype)
    inits = [_init("w_q", w), _init("w_scale", w_scale), _init("w_zp", w_zp), _init("x_scale", x_scale),
             _init("x_zp", x_zp), _init("y_scale", np.float32(0.03)),
             _init("y_zp", np.array(info.min + y_zp_offset, x_dtype))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wf"], axis=0)]
    conv_inputs = ["xf", "wf"]
    if bias:
        scale = (x_scale * w_scale).astype(np.float32) if bias_scale is None else bias_scale
        inits += [_init("b_q", rng.integers(-2000, 2000, cout).astype(np.int32)), _init("b_scale", scale),
                  _init("b_zp", np.zeros(scale.shape, np.int32))]
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zp"], ["bf"], axis=0))
        conv_inputs.append("bf")
    outputs = []
    for k in range(convs):
        nodes.append(helper.make_node("Conv", conv_inputs, [f"c{k}"], pads=[1, 1, 1, 1], strides=[1, 2 - k % 2]))
        last = f"c{k}"
        for j, op in enumerate(between):
            op, extra = op if isinstance(op, tuple) else (op, ())
            names = [f"{op.lower()}{k}_{j}_in{i}" for i in range(len(extra))]
            inits += [_init(n, v) for n, v in zip(names, extra)]
            nodes.append(helper.make_node(op, [last, *names], [f"{op.lower()}{k}_{j}"]))
            last = f"{op.lower()}{k}_{j}"
        nodes.append(helper.make_node("QuantizeLinear", [last, "y_scale", "y_zp"], [f"y{k}"]))
        outputs.append(tensor(f"y{k}", x_type, None))
    outputs += [tensor(n, TensorProto.FLOAT, None) for n in extra_outputs]
    model = make_model(nodes, [tensor("x", x_type, [2, cin, 7, 9])], outputs, opset=opset, initializers=inits)
    feeds = {"x": rng.integers(info.min, info.max, (2, cin, 7, 9), endpoint=True).astype(x_dtype)}
    return model, feeds


def _session(model, level=LEVELS.ORT_ENABLE_ALL):
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _ops(sess):
    return {op: n for op, n in sess.optimization_report.after.items() if n}


@pytest.mark.parametrize("x_type,w_dtype,per_channel,bias", [(U8, np.int8, True, True), (U8, np.uint8, False, True),
                                                              (I8, np.int8, True, False), (U8, np.int8, False, False)])
def test_qdq_conv_becomes_qlinear_conv_equal_to_onnxruntime(x_type, w_dtype, per_channel, bias):
    model, feeds = qdq_conv_model(x_type, w_dtype, per_channel, bias)
    sess = _session(model)
    assert _ops(sess) == {"QLinearConv": 1}
    got, want = sess.run(None, feeds)[0], ort_run(model, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("between,redundant", [(("Relu",), True), ((("Clip", (np.float32(0), np.float32(8))),), True),
                                               ((("Clip", (np.float32(0), np.float32(6))),), False)])
def test_a_relu_or_clip_the_quantize_makes_redundant(between, redundant):
    """With Y's zero point at the type's lowest value the Q writes 0 to 255 * 0.03 = 7.65: a Relu or a Clip to
    [0, 8] before it changes nothing it writes and goes with the Conv into QLinearConv; a Clip to [0, 6] changes
    values in (6, 7.65] and keeps the Conv in float. Both equal onnxruntime's output."""
    model, feeds = qdq_conv_model(between=between, y_zp_offset=0)
    sess = _session(model)
    assert ("QLinearConv" in _ops(sess)) == redundant, _ops(sess)
    got, want = sess.run(None, feeds)[0], ort_run(model, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_a_dequantized_input_that_is_also_a_graph_output():
    """The Conv reads the quantized x; x's DequantizeLinear stays for the graph output."""
    model, feeds = qdq_conv_model(extra_outputs=("xf",))
    sess = _session(model)
    assert _ops(sess) == {"QLinearConv": 1, "DequantizeLinear": 1}
    for got, want in zip(sess.run(None, feeds), ort_run(model, feeds)):
        np.testing.assert_array_equal(got, want)


def test_a_dequantized_input_read_by_two_convs():
    """Both Convs read the quantized x; its DequantizeLinear, read by nothing else then, goes."""
    model, feeds = qdq_conv_model(convs=2)
    sess = _session(model)
    assert _ops(sess) == {"QLinearConv": 2}
    for got, want in zip(sess.run(None, feeds), ort_run(model, feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["basic level", "relu before Q", "int8 x, uint8 w", "bias of another scale"])
def test_convs_left_in_float(case):
    """Where a precondition fails the Conv stays, computed in float; the outputs are then within one step of
    onnxruntime's (which rewrites some of these)."""
    kw, level = {}, LEVELS.ORT_ENABLE_ALL
    if case == "basic level":
        level = LEVELS.ORT_ENABLE_BASIC
    elif case == "relu before Q":
        kw = {"between": ("Relu",)}
    elif case == "int8 x, uint8 w":
        kw = {"x_type": I8, "w_dtype": np.uint8}
    else:
        kw = {"bias_scale": np.full(16, 1e-4, np.float32)}
    model, feeds = qdq_conv_model(**kw)
    sess = _session(model, level)
    ops = _ops(sess)
    assert "QLinearConv" not in ops and ops.get("Conv", 0) + ops.get("com.onnxjit::FusedConv", 0) == 1, ops
    got, want = sess.run(None, feeds)[0], ort_run(model, feeds)[0]
    assert got.dtype == want.dtype
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
