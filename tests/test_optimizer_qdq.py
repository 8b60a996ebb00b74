"""QDQ node groups as integer ops (onnxjit/optimizer/qdq.py): DequantizeLinear -> Conv / MatMul / Softmax / Add /
Transpose ... -> QuantizeLinear rewritten where every precondition holds, at the extended level and above, and not
otherwise: the groups onnxruntime rewrites (its optimized model's ops are compared), with outputs equal to its."""
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
                   convs=1, extra_outputs=(), cin=8, cout=16, seed=0, y_zp_offset=90, opset=13, float_ends=False):
    """x (quantized) -> DQ -> Conv 3x3 (W and B from DQs of constants) [-> `between` nodes: op types, or (op type,
    its extra constant inputs)] -> Q -> y, `convs` Convs reading the one DQ of x (outputs y0, y1, ...); Y's zero
    point is the type's lowest value plus `y_zp_offset`. With `float_ends` x is float, quantized by a Q first, and
    each y is dequantized (as quantize_static writes a model)."""
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
    nodes = [helper.make_node("QuantizeLinear", ["x_float", "x_scale", "x_zp"], ["x"])] if float_ends else []
    nodes += [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["xf"]),
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
        if float_ends:
            nodes.append(helper.make_node("DequantizeLinear", [f"y{k}", "y_scale", "y_zp"], [f"y{k}_float"]))
        outputs.append(tensor(f"y{k}_float", TensorProto.FLOAT, None) if float_ends else tensor(f"y{k}", x_type, None))
    outputs += [tensor(n, TensorProto.FLOAT, None) for n in extra_outputs]
    x = rng.integers(info.min, info.max, (2, cin, 7, 9), endpoint=True).astype(x_dtype)
    if float_ends:
        feeds = {"x_float": ((x.astype(np.float32) - x_zp) * x_scale).astype(np.float32)}
        x_in = tensor("x_float", TensorProto.FLOAT, [2, cin, 7, 9])
    else:
        feeds, x_in = {"x": x}, tensor("x", x_type, [2, cin, 7, 9])
    model = make_model(nodes, [x_in], outputs, opset=opset, initializers=inits)
    return model, feeds


def _session(model, level=LEVELS.ORT_ENABLE_ALL):
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    return onnxjit.InferenceSession(model.SerializeToString(), so)


def _ops(sess):
    return {op: n for op, n in sess.optimization_report.after.items() if n}


INTEGER_OPS = ("QLinearConv", "QLinearMatMul", "MatMulIntegerToFloat", "QLinearSoftmax", "QLinearAdd", "QLinearMul",
               "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool",
               "QLinearConcat")


def _integer_ops(counts) -> dict:
    return {op.split("::")[-1]: n for op, n in counts.items() if op.split("::")[-1] in INTEGER_OPS and n}


def _onnxruntime_integer_ops(model, tmp_path) -> dict:
    """The integer ops of the model onnxruntime optimizes `model` into (ORT_ENABLE_EXTENDED)."""
    import collections

    import onnx
    import onnxruntime
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return _integer_ops(collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node))


def _equal_to_onnxruntime(model, feeds, tmp_path, expected_ops):
    """onnxjit rewrites `model` into the integer ops `expected_ops`, as onnxruntime does, and their outputs are
    equal."""
    sess = _session(model)
    assert _integer_ops(_ops(sess)) == expected_ops == _onnxruntime_integer_ops(model, tmp_path)
    for got, want in zip(sess.run(None, feeds), ort_run(model, feeds)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_type,w_dtype,per_channel,bias,float_ends",
                         [(U8, np.int8, True, True, False), (U8, np.uint8, False, True, False),
                          (I8, np.int8, True, False, True), (U8, np.int8, False, False, False)])
def test_qdq_conv_becomes_qlinear_conv_equal_to_onnxruntime(x_type, w_dtype, per_channel, bias, float_ends,
                                                            tmp_path):
    model, feeds = qdq_conv_model(x_type, w_dtype, per_channel, bias, float_ends=float_ends)
    _equal_to_onnxruntime(model, feeds, tmp_path, {"QLinearConv": 1})


@pytest.mark.parametrize("case", ["int8 graph input", "int8 read by two convs"])
def test_int8_activations_rewritten_where_onnxruntime_on_x86_keeps_float(case):
    """On x86 onnxruntime's Conv groups take uint8 activations only, turning an int8 Q -> DQ pair into uint8 where
    one node reads it: it keeps these Convs in float (an int8 graph input, a tensor two Convs read). onnxjit
    rewrites them, as onnxruntime does on ARM: within one step of onnxruntime's output."""
    kw = {"int8 graph input": {}, "int8 read by two convs": {"convs": 2, "float_ends": True}}[case]
    model, feeds = qdq_conv_model(I8, np.int8, **kw)
    sess = _session(model)
    assert _integer_ops(_ops(sess)) == {"QLinearConv": kw.get("convs", 1)}
    for got, want in zip(sess.run(None, feeds), ort_run(model, feeds)):
        assert got.dtype == want.dtype
        step = 0.03 if got.dtype == np.float32 else 1  # (y's scale)
        assert np.abs(got.astype(np.float64) - want.astype(np.float64)).max() <= step * 1.0001


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


class QDQGraph:
    """A QDQ model written as quantize_static writes one: float inputs quantized, each op between a DequantizeLinear
    of every input and a QuantizeLinear of its output (per tensor, `dtype`), the last output dequantized."""

    def __init__(self, dtype, seed=0):
        self.dtype, self.rng = dtype, np.random.default_rng(seed)
        self.elem = U8 if dtype == np.uint8 else I8
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}

    def _params(self, name, scale, zp):
        self.inits += [_init(f"{name}_s", np.float32(scale)), _init(f"{name}_z", np.array(zp, self.dtype))]
        return [f"{name}_s", f"{name}_z"]

    def input(self, name, shape, scale=0.05):
        """A float input, quantized: the name of its DequantizeLinear's output."""
        self.inputs.append(tensor(name, TensorProto.FLOAT, list(shape)))
        self.feeds[name] = self.rng.uniform(-3, 3, shape).astype(np.float32)
        return self.quantized(name, scale, 5 if self.dtype == np.int8 else 130)

    def quantized(self, name, scale, zp):
        p = self._params(name, scale, zp)
        self.nodes += [helper.make_node("QuantizeLinear", [name] + p, [f"{name}_q"]),
                       helper.make_node("DequantizeLinear", [f"{name}_q"] + p, [f"{name}_dq"])]
        return f"{name}_dq"

    def weight(self, name, shape, per_column=False):
        w = self.rng.integers(-127, 127, shape, endpoint=True).astype(np.int8)
        scale = self.rng.uniform(0.01, 0.03, shape[-1]) if per_column else np.array(0.02)
        self.inits += [_init(f"{name}_w", w), _init(f"{name}_ws", scale.astype(np.float32)),
                       _init(f"{name}_wz", np.zeros(scale.shape, np.int8))]
        self.nodes.append(helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_ws", f"{name}_wz"], [name],
                                           axis=1))
        return name

    def op(self, op_type, inputs, name, scale=0.05, zp=None, **attrs):
        """op_type over `inputs`, its output quantized (scale, zp): the name of its DequantizeLinear's output."""
        self.nodes.append(helper.make_node(op_type, inputs, [name], **attrs))
        return self.quantized(name, scale, (3 if self.dtype == np.int8 else 128) if zp is None else zp)

    def model(self, outputs):
        outs = [tensor(n, TensorProto.FLOAT, None) for n in outputs]
        return make_model(self.nodes, self.inputs, outs, opset=13, initializers=self.inits)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_attention_like_groups_equal_to_onnxruntime(dtype, tmp_path):
    """MatMul with a constant per-column B and with two activations -> QLinearMatMul, a DQ -> MatMul with no Q ->
    MatMulIntegerToFloat, Softmax -> QLinearSoftmax, Add -> QLinearAdd, and a Transpose on the quantized tensor:
    the groups onnxruntime makes, equal outputs."""
    g = QDQGraph(dtype)
    x = g.input("x", (2, 4, 8))
    h = g.op("MatMul", [x, g.weight("w1", (8, 6), per_column=True)], "h", scale=0.3)
    t = g.op("Transpose", [h], "t", scale=0.3, perm=[0, 2, 1])
    scores = g.op("MatMul", [t, g.input("k", (2, 4, 5))], "scores", scale=0.4)
    p = g.op("Softmax", [scores], "p", scale=1 / 256, zp=np.iinfo(dtype).min, axis=-1)
    out = g.op("Add", [p, g.input("r", (2, 6, 5))], "out", scale=0.05)
    g.nodes.append(helper.make_node("MatMul", [g.input("x2", (3, 8)), g.weight("w2", (8, 4))], ["y2"]))
    model = g.model([out, "y2"])
    _equal_to_onnxruntime(model, g.feeds, tmp_path, {"QLinearMatMul": 2, "MatMulIntegerToFloat": 1,
                                                     "QLinearSoftmax": 1, "QLinearAdd": 1})
    assert "Transpose" in _ops(_session(model))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_image_like_groups_equal_to_onnxruntime(dtype, tmp_path):
    """Sigmoid, Concat, LeakyRelu, Mul, MaxPool, AveragePool, GlobalAveragePool and a Reshape, each between a DQ
    and a Q: onnxruntime's groups, equal outputs."""
    g = QDQGraph(dtype)
    a = g.op("Sigmoid", [g.input("x", (1, 3, 6, 6))], "a", scale=1 / 256, zp=np.iinfo(dtype).min)
    c = g.op("Concat", [a, g.input("x2", (1, 2, 6, 6))], "c", scale=0.03, axis=1)
    r = g.op("LeakyRelu", [c], "r", scale=0.03, alpha=0.2)
    m = g.op("Mul", [r, g.input("x3", (1, 5, 1, 1))], "m", scale=0.06)
    mp = g.op("MaxPool", [m], "mp", scale=0.06, kernel_shape=[2, 2])
    ap = g.op("AveragePool", [mp], "ap", scale=0.04, kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    gp = g.op("GlobalAveragePool", [ap], "gp", scale=0.04)
    g.inits.append(_init("shape", np.array([1, 5], np.int64)))
    out = g.op("Reshape", [gp, "shape"], "out", scale=0.04)
    model = g.model([out])
    _equal_to_onnxruntime(model, g.feeds, tmp_path, {"QLinearSigmoid": 1, "QLinearConcat": 1, "QLinearLeakyRelu": 1,
                                                     "QLinearMul": 1, "QLinearAveragePool": 1,
                                                     "QLinearGlobalAveragePool": 1})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_value_picking_ops_run_on_the_quantized_tensor(dtype, tmp_path):
    """Resize (nearest), Split (a Q after each output), ReduceMax, MaxPool and ArgMax between DQs and Qs of one
    scale and zero point read and write the quantized tensors (the Qs and DQs around them go, as in onnxruntime's
    optimized model): outputs equal to onnxruntime's."""
    g = QDQGraph(dtype)
    zp = 5 if dtype == np.int8 else 130  # (the inputs' zero point: one scale and zero point throughout)
    g.inits.append(_init("scales", np.array([1, 1, 2, 2], np.float32)))
    r = g.op("Resize", [g.input("x", (1, 4, 3, 3)), "", "scales"], "r", scale=0.05, zp=zp, mode="nearest")
    g.nodes.append(helper.make_node("Split", [r], ["s0", "s1"], axis=1))
    s0, s1 = g.quantized("s0", 0.05, zp), g.quantized("s1", 0.05, zp)
    m = g.op("ReduceMax", [s0], "m", scale=0.05, zp=zp, axes=[3], keepdims=1)
    p = g.op("MaxPool", [s1], "p", scale=0.05, zp=zp, kernel_shape=[2, 2])
    g.nodes.append(helper.make_node("ArgMax", [g.input("x2", (2, 7))], ["idx"], axis=1))
    model = g.model([m, p])
    model.graph.output.append(tensor("idx", TensorProto.INT64, None))
    sess = _session(model)
    ops = _ops(sess)
    assert ops.get("QuantizeLinear") == 2 and ops.get("DequantizeLinear") == 2, ops  # the inputs' Qs, the outputs' DQs
    _equal_to_onnxruntime(model, g.feeds, tmp_path, {})


@pytest.mark.parametrize("case", ["another zero point", "linear mode"])
def test_resize_kept_in_float_where_its_values_are_not_copies(case):
    """A Resize whose Q has another zero point than its DQ, or that interpolates, stays between them in float:
    within one step of onnxruntime's output."""
    g = QDQGraph(np.uint8)
    g.inits.append(_init("scales", np.array([1, 1, 2, 2], np.float32)))
    out = g.op("Resize", [g.input("x", (1, 2, 3, 3)), "", "scales"], "r", scale=0.05,
               zp=128 if case == "another zero point" else 130, mode="nearest" if case != "linear mode" else "linear")
    model = g.model([out])
    sess = _session(model)
    assert _ops(sess).get("DequantizeLinear") == 2, _ops(sess)  # the DQ before the Resize, the output's
    got, want = sess.run(None, g.feeds)[0], ort_run(model, g.feeds)[0]
    assert np.abs(got - want).max() <= 0.05 * 1.0001
