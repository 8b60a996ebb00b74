"""onnxjit.quantization against onnxruntime.quantization: the same calls on the same tiny models and calibration
batches must write the same graph (nodes, names, attributes) and the same quantization parameters, initializer by
initializer; both runtimes must run the file and agree; the quantized model must pick the float model's top class.

Calibration runs on onnxjit, whose float results can differ from onnxruntime's in the last bits, so scales are
compared within float32 rounding there (and a zero point or int32 bias within one step when its scale differs);
with the ranges fixed (onnxruntime's calibration cache fed to onnxjit, and back) every initializer must be equal
to the bit.
"""
from __future__ import annotations

import io
import logging
import sys

import numpy as np
import onnx
import onnxruntime
import onnxruntime.quantization as ortq
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit
import onnxjit.quantization as jitq
from onnxjit.errors import InvalidArgument, NoSuchFile, NotImplemented

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _quiet_onnxruntime_quantizer():
    # onnxruntime's quantizer logs "consider pre-processing" warnings on the root logger
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)


# models: tiny, seeded
def _weight(rng, name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, initializers, opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializers),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv_net() -> onnx.ModelProto:
    """Conv (bias) -> Relu -> MaxPool -> Flatten -> Gemm (transB, bias): 10 classes from 3x8x8 images."""
    rng = np.random.default_rng(10)
    nodes = [helper.make_node("Conv", ["x", "Wc", "bc"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], "pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p1"], ["f1"], "flat1"),
             helper.make_node("Gemm", ["f1", "Wg", "bg"], ["y"], "gemm1", transB=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                  [_weight(rng, "Wc", (4, 3, 3, 3)), _weight(rng, "bc", (4,), 0.1), _weight(rng, "Wg", (10, 64), 0.2),
                   _weight(rng, "bg", (10,), 0.1)])


def mlp() -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> Gemm -> Sigmoid -> MatMul: 5 classes from 16 features."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], "mm1"),
             helper.make_node("Add", ["h1", "b1"], ["h1b"], "add1"),
             helper.make_node("Relu", ["h1b"], ["r1"], "relu1"),
             helper.make_node("Gemm", ["r1", "W2", "b2"], ["h2"], "gemm2", transB=1),
             helper.make_node("Sigmoid", ["h2"], ["s2"], "sig2"),
             helper.make_node("MatMul", ["s2", "W3"], ["y"], "mm3")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
                  [_weight(rng, "W1", (16, 32)), _weight(rng, "b1", (32,), 0.1), _weight(rng, "W2", (24, 32)),
                   _weight(rng, "b2", (24,), 0.1), _weight(rng, "W3", (24, 5))])


def embedding() -> onnx.ModelProto:
    """Gather from a 20x8 table -> mean over the sequence -> MatMul: 4 classes from 6 token ids."""
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["e"], "gather1"),
             helper.make_node("ReduceMean", ["e"], ["m"], "mean1", axes=[1], keepdims=0),
             helper.make_node("MatMul", ["m", "Wo"], ["y"], "mm1")]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 6])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                  [_weight(rng, "E", (20, 8)), _weight(rng, "Wo", (8, 4))], opset=13)


def op_zoo(where: bool = True) -> onnx.ModelProto:
    """One of each op the quantizers treat specially: Clip, LeakyRelu, AveragePool, Pad (a constant value), Split,
    Mul, Where, Concat, Transpose pairs, GlobalAveragePool, Reshape, Softmax, ArgMax, a Relu and a Conv output that
    are graph outputs. (onnxruntime's QOperator quantizer fails on a Where unless ForceQuantizeNoInputCheck:
    `where=False` leaves it out.)"""
    rng = np.random.default_rng(13)
    f32 = TensorProto.FLOAT
    nodes = [helper.make_node("Conv", ["x", "Wc"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"], "clip1"),
             helper.make_node("LeakyRelu", ["r1"], ["l1"], "lrelu", alpha=0.1),
             helper.make_node("AveragePool", ["l1"], ["a1"], "avg", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Pad", ["a1", "pads", "pad_value"], ["pa"], "pad"),
             helper.make_node("Conv", ["pa", "Wd", "bd"], ["c2"], "conv2"),
             helper.make_node("Split", ["c2"], ["s1", "s2"], "split", axis=1, num_outputs=2),
             helper.make_node("Mul", ["s1", "s2"], ["m1"], "mul"),
             helper.make_node("Where" if where else "Add", ["keep", "m1", "s2"][0 if where else 1:], ["wh"], "where"),
             helper.make_node("Concat", ["wh", "s1"], ["cc"], "concat", axis=1),
             helper.make_node("Transpose", ["cc"], ["t1"], "tr", perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], "tr2", perm=[0, 3, 1, 2]),
             helper.make_node("GlobalAveragePool", ["t2"], ["g1"], "gap"),
             helper.make_node("Reshape", ["g1", "shape"], ["rs"], "reshape"),
             helper.make_node("MatMul", ["rs", "Wm"], ["mm"], "mm"),
             helper.make_node("Softmax", ["mm"], ["y"], "softmax", axis=-1),
             helper.make_node("ArgMax", ["mm"], ["am"], "argmax", axis=1),
             helper.make_node("Relu", ["mm"], ["z"], "relu_out")]
    return _model(nodes, [helper.make_tensor_value_info("x", f32, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", f32, ["N", 6]),
                   helper.make_tensor_value_info("am", TensorProto.INT64, ["N", 1]),
                   helper.make_tensor_value_info("z", f32, ["N", 6]),
                   helper.make_tensor_value_info("c1", f32, ["N", 4, 8, 8])],
                  [_weight(rng, "Wc", (4, 3, 3, 3)), _weight(rng, "Wd", (4, 4, 1, 1)), _weight(rng, "bd", (4,), 0.1),
                   _weight(rng, "Wm", (4, 6)), numpy_helper.from_array(np.array(0, np.float32), "lo"),
                   numpy_helper.from_array(np.array(6, np.float32), "hi"),
                   numpy_helper.from_array(np.array([-1, 4], np.int64), "shape"),
                   numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
                   numpy_helper.from_array(np.array(0.25, np.float32), "pad_value"),
                   numpy_helper.from_array(np.array([True, False]).reshape(1, 2, 1, 1), "keep")], opset=18)


MODELS = {"conv_net": conv_net, "mlp": mlp, "embedding": embedding, "op_zoo": op_zoo}


def random_feeds(name: str, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name == "conv_net" or name == "op_zoo":
        return {"x": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)}
    if name == "mlp":
        return {"x": rng.standard_normal((batch, 16)).astype(np.float32)}
    return {"ids": rng.integers(0, 20, (batch, 6)).astype(np.int64)}


class Reader(jitq.CalibrationDataReader):
    """A handful of calibration batches; onnxruntime takes it too (any object with get_next is a reader)."""

    def __init__(self, batches):
        self.batches, self.i = list(batches), 0

    def get_next(self):
        if self.i == len(self.batches):
            return None
        self.i += 1
        return self.batches[self.i - 1]

    def rewind(self):
        self.i = 0


def reader(name: str) -> Reader:
    return Reader(random_feeds(name, 8, seed) for seed in range(4))


@pytest.fixture
def model_path(tmp_path, request):
    name = request.param
    path = tmp_path / f"{name}.onnx"
    onnx.save(MODELS[name](), path)
    return name, path


# comparisons
def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _nodes(model: onnx.ModelProto) -> list:
    return sorted((n.op_type, n.domain, n.name, tuple(n.input), tuple(n.output),
                   tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in n.attribute)))
                  for n in model.graph.node)


def assert_same_quantization(ort_path, jit_path, exact: bool) -> None:
    """Same nodes (op, domain, name, inputs, outputs, attributes) and initializers. Float initializers (scales)
    equal to the bit when `exact`, else within float32 rounding; integer ones equal, except (not `exact`) a zero
    point or int32 bias whose scale differs in the last bits may sit one step off (a rounding tie broken the
    other way)."""
    want, got = onnx.load(ort_path), onnx.load(jit_path)
    onnx.checker.check_model(got, full_check=True)
    assert _nodes(got) == _nodes(want)
    wi, gi = _initializers(want), _initializers(got)
    assert sorted(gi) == sorted(wi)
    scales_equal = all(np.array_equal(gi[k], wi[k]) for k in wi if wi[k].dtype.kind == "f")
    for k, w in wi.items():
        g = gi[k]
        assert (g.dtype, g.shape) == (w.dtype, w.shape), k
        if exact or (w.dtype.kind == "f" and np.array_equal(g, w)):
            np.testing.assert_array_equal(g, w, err_msg=k)
        elif w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=0, err_msg=k)
        elif scales_equal or not (k.endswith("_zero_point") or w.dtype == np.int32):
            np.testing.assert_array_equal(g, w, err_msg=k)
        else:
            assert np.abs(g.astype(np.int64) - w.astype(np.int64)).max() <= 1, k


def output_step(model: onnx.ModelProto) -> float:
    """The quantization step of the graph output (its scale), or 0 when it is computed in float."""
    inits = _initializers(model)
    out = model.graph.output[0].name
    return float(inits[f"{out}_scale"]) if f"{out}_scale" in inits else 0.0


def run_both(path, feeds):
    ort_out = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    jit_out = onnxjit.InferenceSession(str(path)).run(None, feeds)[0]
    return ort_out, jit_out


def assert_runs_alike(name, float_path, quant_path) -> None:
    """Both runtimes run the quantized file and agree within one quantization step of the output (float
    rounding where the output is float); its top class is the float model's on most of 32 random inputs."""
    feeds = random_feeds(name, 32, seed=99)
    ort_out, jit_out = run_both(quant_path, feeds)
    step = output_step(onnx.load(quant_path))
    np.testing.assert_allclose(jit_out, ort_out, rtol=1e-5, atol=step * 1.0001 + 1e-6)
    float_out = onnxruntime.InferenceSession(str(float_path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    agree = (jit_out.argmax(-1) == float_out.argmax(-1)).mean()
    # 0.8: Distribution calibration (meant for float8) spends half an int8 range on a Relu output's negative side
    assert agree >= 0.8, f"top-1 agreement with the float model {agree:.2f}"


# dynamic
@pytest.mark.parametrize("model_path", ["conv_net", "mlp", "embedding"], indirect=True)
@pytest.mark.parametrize("per_channel,reduce_range,weight_type",
                         [(False, False, "QInt8"), (True, False, "QUInt8"), (True, True, "QInt8")])
def test_quantize_dynamic_matches_onnxruntime(model_path, tmp_path, per_channel, reduce_range, weight_type):
    name, path = model_path
    ortq.quantize_dynamic(path, tmp_path / "ort.onnx", per_channel=per_channel, reduce_range=reduce_range,
                          weight_type=getattr(ortq.QuantType, weight_type))
    jitq.quantize_dynamic(path, tmp_path / "jit.onnx", per_channel=per_channel, reduce_range=reduce_range,
                          weight_type=getattr(jitq.QuantType, weight_type))
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    ops = {n.op_type for n in onnx.load(tmp_path / "jit.onnx").graph.node}
    assert "DynamicQuantizeLinear" in ops
    assert {"conv_net": "ConvInteger", "mlp": "MatMulInteger", "embedding": "MatMulInteger"}[name] in ops
    assert_runs_alike(name, path, tmp_path / "jit.onnx")


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_matmuls_run_as_matmul_integer_to_float(tmp_path, per_channel):
    """quantize_dynamic's MatMulInteger -> Cast -> Mul by the scales' product becomes com.microsoft
    MatMulIntegerToFloat at ORT_ENABLE_EXTENDED and above (the scaling in the integer GEMM's epilogue), and with the
    DynamicQuantizeLinear that only it reads, DynamicQuantizeMatMul (the input quantized into the GEMM's packed A),
    as onnxruntime fuses them: the same float32 outputs as the steps unfused (ORT_ENABLE_BASIC), bit for bit, and
    as onnxruntime's."""
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    ortq.quantize_dynamic(tmp_path / "mlp.onnx", tmp_path / "q.onnx", per_channel=per_channel)
    feeds = random_feeds("mlp", 37, seed=5)
    outs = {}
    for level in (onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC, onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sess = onnxjit.InferenceSession(str(tmp_path / "q.onnx"), so)
        ops = [n.op_type for s in sess._compiled.steps for n in s.nodes]
        fused = level == onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL
        # (each MatMul of this MLP reads a DynamicQuantizeLinear of its own)
        assert ops.count("DynamicQuantizeMatMul") == (3 if fused else 0), ops
        assert ("MatMulInteger" in ops) != fused and ("DynamicQuantizeLinear" in ops) != fused, ops
        outs[level] = sess.run(None, feeds)[0]
    np.testing.assert_array_equal(*outs.values())
    want = onnxruntime.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(outs[onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL], want[0])


def test_bias_add_after_a_dynamic_matmul_goes_into_its_epilogue(tmp_path):
    """A bias Add after quantize_dynamic's MatMul, read by no elementwise op (a Reshape, a graph output), becomes
    MatMulIntegerToFloat's bias, added in the GEMM's epilogue; one read by a Relu stays for the fuser's kernel.
    Outputs bit-equal to the unfused steps' and to onnxruntime's."""
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], "mm1"),
             helper.make_node("Add", ["h1", "b1"], ["h1b"], "add1"),
             helper.make_node("Reshape", ["h1b", "shape"], ["r"], "reshape1"),
             helper.make_node("MatMul", ["x", "W2"], ["h2"], "mm2"),
             helper.make_node("Add", ["b2", "h2"], ["y2"], "add2"),
             helper.make_node("MatMul", ["x", "W3"], ["h3"], "mm3"),
             helper.make_node("Add", ["h3", "b3"], ["h3b"], "add3"),
             helper.make_node("Relu", ["h3b"], ["y3"], "relu3")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "y2", "y3")],
                   [_weight(rng, "W1", (16, 64)), _weight(rng, "b1", (64,), 0.1), _weight(rng, "W2", (16, 40)),
                    _weight(rng, "b2", (40,), 0.1), _weight(rng, "W3", (16, 8)), _weight(rng, "b3", (8,), 0.1),
                    numpy_helper.from_array(np.array([-1, 8, 8], np.int64), "shape")])
    onnx.save(model, tmp_path / "m.onnx")
    ortq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", per_channel=True)
    feeds = {"x": rng.standard_normal((37, 16)).astype(np.float32)}
    outs = {}
    for level in (onnxjit.GraphOptimizationLevel.ORT_ENABLE_BASIC, onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sess = onnxjit.InferenceSession(str(tmp_path / "q.onnx"), so)
        if level == onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL:
            biased = [n for s in sess._compiled.steps for n in s.nodes
                      if n.op_type == "MatMulIntegerToFloat" and len(n.inputs) > 6]
            assert len(biased) == 2 and [n.op_type for s in sess._compiled.steps for n in s.nodes].count("Add") == 1
        outs[level] = sess.run(None, feeds)
    want = onnxruntime.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    for basic, fused, expected in zip(*outs.values(), want):
        np.testing.assert_array_equal(fused, basic)
        np.testing.assert_array_equal(fused, expected)


def test_quantize_dynamic_at_opset_10(tmp_path):
    """No DynamicQuantizeLinear before opset 11: the activation's scale and zero point are computed by nodes
    (onnxruntime's form does not widen the range to hold 0, so a positive-only input such as a Sigmoid's decodes
    wrong: conv_net's quantized inputs, the image and a Relu's output, hold 0)."""
    model = conv_net()
    model.opset_import[0].version = 10
    onnx.save(model, tmp_path / "m.onnx")
    ortq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "ort.onnx")
    jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "jit.onnx")
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    ops = {n.op_type for n in onnx.load(tmp_path / "jit.onnx").graph.node}
    assert "DynamicQuantizeLinear" not in ops and {"ReduceMin", "Floor", "QuantizeLinear"} <= ops
    assert_runs_alike("conv_net", tmp_path / "m.onnx", tmp_path / "jit.onnx")


def test_quantize_dynamic_rewrites_gemm_as_matmul_integer(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    jitq.quantize_dynamic(path, tmp_path / "jit.onnx")
    nodes = {n.name: n for n in onnx.load(tmp_path / "jit.onnx").graph.node}
    assert nodes["gemm2_MatMul_quant"].op_type == "MatMulInteger"
    assert nodes["gemm2_MatMul_quant"].input[1] == "W2_Transposed_quantized"
    assert nodes["gemm2_Add"].op_type == "Add"


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_lstm_matches_onnxruntime(tmp_path, direction, per_channel):
    """LSTM -> com.microsoft DynamicQuantizeLSTM (int8 weights, per direction or per gate row)."""
    rng = np.random.default_rng(14)
    hidden, size, dirs = 3, 4, 2 if direction == "bidirectional" else 1
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Yh"], "lstm", hidden_size=hidden,
                              direction=direction),
             helper.make_node("MatMul", ["Yh", "Wo"], ["y"], "mm")]
    inits = [_weight(rng, "W", (dirs, 4 * hidden, size)), _weight(rng, "R", (dirs, 4 * hidden, hidden)),
             _weight(rng, "B", (dirs, 8 * hidden)), _weight(rng, "Wo", (hidden, 2))]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits, opset=14)
    onnx.save(model, tmp_path / "m.onnx")
    ortq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "ort.onnx", per_channel=per_channel)
    jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "jit.onnx", per_channel=per_channel)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load(tmp_path / "jit.onnx").graph.node}
    feeds = {"x": rng.standard_normal((5, 2, size)).astype(np.float32)}
    want = onnxruntime.InferenceSession(str(tmp_path / "jit.onnx")).run(None, feeds)
    got = onnxjit.InferenceSession(str(tmp_path / "jit.onnx")).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_transformer_ops_match_onnxruntime(tmp_path, per_channel):
    """com.microsoft EmbedLayerNormalization -> QEmbedLayerNormalization, Attention -> QAttention."""
    rng = np.random.default_rng(15)
    hidden, vocab, seq = 8, 30, 6
    ms = "com.microsoft"
    nodes = [helper.make_node("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "gamma", "beta", "mask"],
                              ["emb", "mask_index"], "embed", domain=ms, epsilon=1e-5),
             helper.make_node("Attention", ["emb", "Wqkv", "bqkv", "mask_index"], ["att"], "attn", domain=ms,
                              num_heads=2),
             helper.make_node("MatMul", ["att", "Wo"], ["y"], "out")]
    inits = [_weight(rng, "we", (vocab, hidden)), _weight(rng, "pe", (16, hidden)), _weight(rng, "se", (2, hidden)),
             _weight(rng, "gamma", (hidden,)), _weight(rng, "beta", (hidden,), 0.1),
             _weight(rng, "Wqkv", (hidden, 3 * hidden)), _weight(rng, "bqkv", (3 * hidden,), 0.1),
             _weight(rng, "Wo", (hidden, 3))]
    ids = [helper.make_tensor_value_info(n, TensorProto.INT32, [2, seq]) for n in ("ids", "seg", "mask")]
    model = _model(nodes, ids, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, seq, 3])], inits, opset=14)
    model.opset_import.add(domain=ms, version=1)
    onnx.save(model, tmp_path / "m.onnx")
    ortq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "ort.onnx", per_channel=per_channel)
    jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "jit.onnx", per_channel=per_channel)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    ops = {n.op_type for n in onnx.load(tmp_path / "jit.onnx").graph.node}
    assert {"QEmbedLayerNormalization", "QAttention", "MatMulInteger"} <= ops
    feeds = {"ids": rng.integers(0, vocab, (2, seq)).astype(np.int32),
             "seg": rng.integers(0, 2, (2, seq)).astype(np.int32), "mask": np.ones((2, seq), np.int32)}
    want = onnxruntime.InferenceSession(str(tmp_path / "m.onnx")).run(None, feeds)[0]
    got = onnxruntime.InferenceSession(str(tmp_path / "jit.onnx")).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())
    if runs_on_onnxjit_feeds(tmp_path / "jit.onnx", feeds):
        np.testing.assert_allclose(onnxjit.InferenceSession(str(tmp_path / "jit.onnx")).run(None, feeds)[0], got,
                                   rtol=1e-4, atol=1e-5)


def test_onnxruntime_snippet_runs_unchanged(tmp_path):
    """onnxruntime's documented snippet, with the import swapped."""
    from onnxjit.quantization import QuantType, quantize_dynamic
    onnx.save(conv_net(), tmp_path / "model.onnx")
    quantize_dynamic(str(tmp_path / "model.onnx"), str(tmp_path / "model.quant.onnx"), weight_type=QuantType.QUInt8)
    assert_runs_alike("conv_net", tmp_path / "model.onnx", tmp_path / "model.quant.onnx")


def test_quantize_dynamic_takes_a_model_proto(tmp_path):
    jitq.quantize_dynamic(embedding(), tmp_path / "jit.onnx")
    onnx.save(embedding(), tmp_path / "m.onnx")
    ortq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "ort.onnx")
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)


def test_external_data_format(tmp_path):
    """Tensors of 1 KiB or more go to `<model>.data` (here the float weights AddQDQPairToWeight keeps)."""
    onnx.save(conv_net(), tmp_path / "m.onnx")
    jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("conv_net"), use_external_data_format=True,
                         extra_options={"AddQDQPairToWeight": True})
    assert (tmp_path / "q.onnx.data").stat().st_size >= 10 * 64 * 4
    assert {t.name for t in onnx.load(tmp_path / "q.onnx", load_external_data=False).graph.initializer
            if t.data_location == TensorProto.EXTERNAL} == {"Wg"}
    assert_runs_alike("conv_net", tmp_path / "m.onnx", tmp_path / "q.onnx")


def test_quantize_with_configs_matches_onnxruntime(tmp_path):
    onnx.save(conv_net(), tmp_path / "m.onnx")
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        config = lib.StaticQuantConfig(reader("conv_net"), activation_type=lib.QuantType.QUInt8, per_channel=True)
        lib.quantize(tmp_path / "m.onnx", tmp_path / f"{out}_static.onnx", config)
        lib.quantize(tmp_path / "m.onnx", tmp_path / f"{out}_dynamic.onnx", lib.DynamicQuantConfig(reduce_range=True))
    assert_same_quantization(tmp_path / "ort_static.onnx", tmp_path / "jit_static.onnx", exact=False)
    assert_same_quantization(tmp_path / "ort_dynamic.onnx", tmp_path / "jit_dynamic.onnx", exact=True)
    with pytest.raises(InvalidArgument, match="StaticQuantConfig"):
        jitq.quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", {"per_channel": True})


# static, end to end: calibration on onnxjit
@pytest.mark.parametrize("model_path", ["conv_net", "mlp", "embedding"], indirect=True)
@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
@pytest.mark.parametrize("per_channel,activation_type", [(False, "QUInt8"), (True, "QInt8")])
def test_quantize_static_matches_onnxruntime(model_path, tmp_path, quant_format, per_channel, activation_type):
    name, path = model_path
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        lib.quantize_static(path, tmp_path / f"{out}.onnx", reader(name), per_channel=per_channel,
                            quant_format=getattr(lib.QuantFormat, quant_format),
                            activation_type=getattr(lib.QuantType, activation_type))
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=False)
    model = onnx.load(tmp_path / "jit.onnx")
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    if quant_format == "QDQ":
        assert ("", "QuantizeLinear") in ops and ("", "DequantizeLinear") in ops
        if per_channel and name == "conv_net":
            dq = next(n for n in model.graph.node if n.name == "Wc_DequantizeLinear")
            assert helper.get_attribute_value(dq.attribute[0]) == 0 and _initializers(model)["Wc_scale"].shape == (4,)
    else:
        assert ("", {"conv_net": "QLinearConv", "mlp": "QLinearMatMul", "embedding": "QLinearMatMul"}[name]) in ops
    if runs_on_onnxjit(tmp_path / "jit.onnx", name):
        assert_runs_alike(name, path, tmp_path / "jit.onnx")


def runs_on_onnxjit(path, name: str) -> bool:
    return runs_on_onnxjit_feeds(path, random_feeds(name, 2, 0))


def runs_on_onnxjit_feeds(path, feeds) -> bool:
    """Whether onnxjit has every com.microsoft op of the file (QGemm, QLinearAdd, ...: onnxjit runs them once they
    are registered); where one is missing, a session must say so by name (and onnxruntime run the file)."""
    model = onnx.load(path)
    missing = sorted({n.op_type for n in model.graph.node if n.domain == "com.microsoft"} - _microsoft_ops())
    if not missing:
        return True
    with pytest.raises(NotImplemented, match="|".join(missing)):
        onnxjit.InferenceSession(str(path))
    ort_out = onnxruntime.InferenceSession(str(path)).run(None, feeds)[0]
    assert np.isfinite(ort_out).all()
    return False


def _microsoft_ops() -> set[str]:
    """The com.microsoft ops onnxjit runs: reference implementations (fallback provider) or native builders."""
    from onnxjit import ops  # noqa: F401  (registers the native builders)
    from onnxjit.contrib import microsoft
    from onnxjit.ops.registry import OPS
    return set(microsoft.load_reference_ops()) | {op for domain, op in OPS if domain == "com.microsoft"}


@pytest.mark.parametrize("method", ["MinMax", "Entropy", "Percentile", "Distribution"])
def test_calibration_methods_match_onnxruntime(tmp_path, method):
    onnx.save(conv_net(), tmp_path / "m.onnx")
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        lib.quantize_static(tmp_path / "m.onnx", tmp_path / f"{out}.onnx", reader("conv_net"),
                            calibrate_method=getattr(lib.CalibrationMethod, method),
                            activation_type=lib.QuantType.QUInt8)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=False)
    assert_runs_alike("conv_net", tmp_path / "m.onnx", tmp_path / "jit.onnx")


def test_entropy_calibration_of_an_unbinnable_tensor_names_it(tmp_path):
    """A tensor whose values reach float32's lowest (a BERT's additive attention mask) cannot be cut into
    Entropy's histogram bins; onnxruntime's calibrator fails with numpy's message alone, onnxjit's names the
    tensor and what to do."""
    nodes = [helper.make_node("Mul", ["x", "big"], ["masked"], "mul1"), helper.make_node("Relu", ["masked"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                   [numpy_helper.from_array(np.array(np.finfo(np.float32).max, np.float32), "big")])
    onnx.save(model, tmp_path / "m.onnx")
    batches = [{"x": np.array([[-1.0, 0.0, 0.5, 1.0]], np.float32)} for _ in range(2)]
    with pytest.raises(ValueError, match=r"Entropy calibration cannot histogram tensor 'masked'.*MinMax.*"
                                         r"\(Mul, Relu\) out of op_types_to_quantize"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", Reader(batches),
                             calibrate_method=jitq.CalibrationMethod.Entropy)


# static with the ranges fixed: bit-equal parameters
@pytest.mark.parametrize("name", ["conv_net", "mlp"])
@pytest.mark.parametrize("method", ["MinMax", "Entropy", "Percentile", "Distribution"])
@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
def test_same_ranges_give_bit_equal_parameters(tmp_path, name, method, quant_format):
    """onnxruntime calibrates and writes its cache; onnxjit quantizes from that cache."""
    onnx.save(MODELS[name](), tmp_path / "m.onnx")
    cache = tmp_path / "ranges.json"
    kw = {"per_channel": quant_format == "QDQ", "calibration_cache_path": cache}
    ortq.quantize_static(tmp_path / "m.onnx", tmp_path / "ort.onnx", reader(name),
                         quant_format=getattr(ortq.QuantFormat, quant_format),
                         calibrate_method=getattr(ortq.CalibrationMethod, method), **kw)
    jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "jit.onnx", None,
                         quant_format=getattr(jitq.QuantFormat, quant_format),
                         calibrate_method=getattr(jitq.CalibrationMethod, method), **kw)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)


@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
@pytest.mark.parametrize("extra_options", [{}, {"ActivationSymmetric": True}, {"ForceQuantizeNoInputCheck": True}])
def test_op_zoo_matches_onnxruntime(tmp_path, quant_format, extra_options):
    with_where = quant_format == "QDQ" or extra_options.get("ForceQuantizeNoInputCheck", False)
    onnx.save(op_zoo(where=with_where), tmp_path / "m.onnx")
    cache = tmp_path / "ranges.json"
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        lib.quantize_static(tmp_path / "m.onnx", tmp_path / f"{out}.onnx", reader("op_zoo"),
                            quant_format=getattr(lib.QuantFormat, quant_format), calibration_cache_path=cache,
                            extra_options=dict(extra_options))
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    if runs_on_onnxjit(tmp_path / "jit.onnx", "op_zoo"):
        # QDQ: every output within one step of its own scale of onnxruntime's unfused run (its fused integer
        # kernels round at other places, and six quantized layers deep that adds up to a few steps); QOperator:
        # each of the six quantized layers on the way may round its own step apart in the two runtimes
        steps = 1 if quant_format == "QDQ" else 6
        model = onnx.load(tmp_path / "jit.onnx")
        feeds = random_feeds("op_zoo", 16, seed=98)
        so = onnxruntime.SessionOptions()
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        want = onnxruntime.InferenceSession(str(tmp_path / "jit.onnx"), so).run(None, feeds)
        got = onnxjit.InferenceSession(str(tmp_path / "jit.onnx")).run(None, feeds)
        scales = _initializers(model)
        for out, g, w in zip(model.graph.output, got, want):
            step = float(scales[f"{out.name}_scale"]) if f"{out.name}_scale" in scales else 0.0
            np.testing.assert_allclose(g, w, rtol=0, atol=steps * step * 1.0001, err_msg=out.name)


def test_onnxruntime_reads_onnxjit_calibration_cache(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    cache = tmp_path / "ranges.json"
    jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "jit.onnx", reader("mlp"), calibration_cache_path=cache,
                         calibrate_method=jitq.CalibrationMethod.Percentile)
    ortq.quantize_static(tmp_path / "m.onnx", tmp_path / "ort.onnx", None, calibration_cache_path=cache,
                         calibrate_method=ortq.CalibrationMethod.Percentile)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    ranges = ortq.load_tensors_data(cache)
    assert {"x", "h1", "y"} <= set(ranges.data)


OPTION_CASES = [
    {"extra_options": {"ActivationSymmetric": True}},
    {"extra_options": {"WeightSymmetric": False}, "reduce_range": True},
    {"extra_options": {"AddQDQPairToWeight": True}},
    {"extra_options": {"OpTypesToExcludeOutputQuantization": ["Conv", "MatMul"]}},
    {"extra_options": {"QDQKeepRemovableActivations": True}},
    {"extra_options": {"ForceQuantizeNoInputCheck": True, "MinimumRealRange": 0.5}},
    {"extra_options": {"QuantizeBias": False, "UseQDQContribOps": True}},
    {"nodes_to_exclude": ["relu1", "mm1"]},
    {"op_types_to_quantize": ["Conv", "MatMul"]},
    {"activation_type": "QUInt16", "weight_type": "QInt16"},
    {"activation_type": "QUInt8", "weight_type": "QInt4", "per_channel": True},
]


@pytest.mark.parametrize("name", ["conv_net", "mlp"])
@pytest.mark.parametrize("case", OPTION_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())[:60])
def test_options_match_onnxruntime(tmp_path, name, case):
    onnx.save(MODELS[name](), tmp_path / "m.onnx")
    cache = tmp_path / "ranges.json"
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        kw = {k: getattr(lib.QuantType, v) if k.endswith("_type") else v for k, v in case.items()}
        lib.quantize_static(tmp_path / "m.onnx", tmp_path / f"{out}.onnx", reader(name), calibration_cache_path=cache,
                            **kw)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)


@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_weight_scale_widened_for_int32_bias(tmp_path, quant_format, per_channel):
    """Tiny weights and a large bias: input_scale * weight_scale would put the bias past int32, so the weight's
    scale grows (and the weight is requantized) as onnxruntime does it."""
    model = conv_net()
    inits = {t.name: t for t in model.graph.initializer}
    wc = numpy_helper.to_array(inits["Wc"]) * np.float32(1e-6)
    inits["Wc"].CopyFrom(numpy_helper.from_array(wc, "Wc"))
    inits["bc"].CopyFrom(numpy_helper.from_array(np.array([500.0, -300.0, 2.0, 1e3], np.float32), "bc"))
    onnx.save(model, tmp_path / "m.onnx")
    cache = tmp_path / "ranges.json"
    for lib, out in ((ortq, "ort"), (jitq, "jit")):
        lib.quantize_static(tmp_path / "m.onnx", tmp_path / f"{out}.onnx", reader("conv_net"), per_channel=per_channel,
                            quant_format=getattr(lib.QuantFormat, quant_format), calibration_cache_path=cache)
    assert_same_quantization(tmp_path / "ort.onnx", tmp_path / "jit.onnx", exact=True)
    scales = _initializers(onnx.load(tmp_path / "jit.onnx"))["Wc_scale"]
    plain = np.abs(wc).max() / 127 if not per_channel else np.abs(wc).reshape(4, -1).max(axis=1) / 127
    assert (scales > plain * 1.5).any()  # widened


@pytest.mark.parametrize("case", [{"activation_type": "QUInt16", "weight_type": "QInt16"},
                                  {"extra_options": {"ActivationSymmetric": True}}])
def test_qdq_variants_run_alike(tmp_path, case):
    onnx.save(conv_net(), tmp_path / "m.onnx")
    kw = {k: getattr(jitq.QuantType, v) if k.endswith("_type") else v for k, v in case.items()}
    jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "jit.onnx", reader("conv_net"), **kw)
    assert_runs_alike("conv_net", tmp_path / "m.onnx", tmp_path / "jit.onnx")


def test_entropy_threshold_matches_onnxruntime():
    """The KL search itself (quantize_static's default 128 bins leave it one candidate): 512 bins into 128."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from onnxjit.quantization.calibrate import entropy_threshold
    rng = np.random.default_rng(3)
    data = np.concatenate([rng.standard_normal(4000), rng.standard_normal(50) * 6]).astype(np.float32)
    t = np.array(np.abs(data).max(), dtype=np.float32)
    hist, edges = np.histogram(data, 512, range=(-t, t))
    collector = HistogramCollector("entropy", False, 512, 128, 99.999, "same")
    want = collector.get_entropy_threshold((hist, edges, data.min(), data.max(), t), 128)
    got = entropy_threshold(hist, edges, 128)
    assert (got[0], got[1]) == (want[0], want[1])
    assert -t < got[0] and got[1] < t  # a real cut, not the whole range


# calibration progress
def test_progress_bar_only_on_a_terminal(monkeypatch):
    from onnxjit.progress import progress_bar

    def progress(show, total, desc):
        return progress_bar(show, total, desc, "batch")

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = progress(True, 3, "calibrating")
    assert type(bar).__name__ == "tqdm"
    bar.close()
    assert type(progress(False, 3, "calibrating")).__name__ == "_NoBar"  # session.onnxjit.show_progress = "0"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert type(progress(True, 3, "calibrating")).__name__ == "_NoBar"


def test_calibration_progress_counts_batches(monkeypatch, tmp_path):
    seen = []

    class Bar:
        def update(self, n=1):
            seen.append(n)

        def close(self):
            seen.append("closed")
    from onnxjit.quantization import calibrate
    monkeypatch.setattr(calibrate, "progress_bar", lambda show, total, desc, unit: Bar())
    onnx.save(mlp(), tmp_path / "m.onnx")
    jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                         extra_options={"session.onnxjit.show_progress": "0"})
    assert seen == [1, 1, 1, 1, "closed"]  # one step per batch


# quant_pre_process
def test_quant_pre_process_folds_and_tags(tmp_path):
    rng = np.random.default_rng(5)
    c = 4
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], "conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["bn"], "bn"),
             helper.make_node("Identity", ["bn"], ["i"], "id"),
             helper.make_node("Relu", ["i"], ["y"], "relu")]
    inits = [_weight(rng, "W", (c, 3, 3, 3)), _weight(rng, "s", (c,)), _weight(rng, "b", (c,)),
             _weight(rng, "mean", (c,)), numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "var")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    onnx.save(model, tmp_path / "m.onnx")
    jitq.quant_pre_process(tmp_path / "m.onnx", tmp_path / "pre.onnx")
    pre = onnx.load(tmp_path / "pre.onnx")
    assert [n.op_type for n in pre.graph.node] == ["Conv", "Relu"]
    assert {(p.key, p.value) for p in pre.metadata_props} >= {("onnx.quant.pre_process", "onnxruntime.quant")}
    assert {vi.name for vi in pre.graph.value_info} >= {pre.graph.node[0].output[0]}
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = onnxruntime.InferenceSession(str(tmp_path / "m.onnx")).run(None, feeds)[0]
    got = onnxruntime.InferenceSession(str(tmp_path / "pre.onnx")).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    jitq.quantize_static(tmp_path / "pre.onnx", tmp_path / "q.onnx", Reader([feeds]))
    onnx.checker.check_model(onnx.load(tmp_path / "q.onnx"), full_check=True)


# errors
def test_missing_calibration_reader(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    with pytest.raises(InvalidArgument, match="calibration_data_reader"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", None)
    with pytest.raises(InvalidArgument, match="get_next"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", [random_feeds("mlp", 2, 0)])


def test_unknown_op_type(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    with pytest.raises(InvalidArgument, match="'Conv2d'.*not an ONNX operator"):
        jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", op_types_to_quantize=["MatMul", "Conv2d"])
    with pytest.raises(NotImplemented, match="FLOAT8E4M3FN"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                             activation_type=jitq.QuantType.QFLOAT8E4M3FN, weight_type=jitq.QuantType.QFLOAT8E4M3FN)


def test_reader_with_wrong_input_names(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    bad = Reader([{"input": np.zeros((2, 16), np.float32)}])
    with pytest.raises(InvalidArgument, match=r"batch 0.*\['input'\].*missing inputs: \['x'\]"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", bad)
    with pytest.raises(InvalidArgument, match="no batches"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", Reader([]))


def test_missing_model_file(tmp_path):
    with pytest.raises(NoSuchFile, match="nope.onnx"):
        jitq.quantize_dynamic(tmp_path / "nope.onnx", tmp_path / "q.onnx")
    with pytest.raises(NoSuchFile, match="nope.onnx"):
        jitq.quantize_static(tmp_path / "nope.onnx", tmp_path / "q.onnx", reader("mlp"))
    with pytest.raises(NoSuchFile, match="nope.onnx"):
        jitq.quant_pre_process(tmp_path / "nope.onnx", tmp_path / "q.onnx")


def test_bad_options(tmp_path):
    onnx.save(mlp(), tmp_path / "m.onnx")
    with pytest.raises(InvalidArgument, match="ActivationSymetric"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                             extra_options={"ActivationSymetric": True})
    with pytest.raises(NotImplemented, match="SmoothQuant"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                             extra_options={"SmoothQuant": True})
    with pytest.raises(InvalidArgument, match="weight_type QInt8 or QUInt8"):
        jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", weight_type=jitq.QuantType.QInt16)
    with pytest.raises(InvalidArgument, match="QuantFormat.QDQ"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                             quant_format=jitq.QuantFormat.QOperator, activation_type=jitq.QuantType.QUInt16)
    with pytest.raises(InvalidArgument, match="activation_type QInt8 with weight_type QUInt8"):
        jitq.quantize_static(tmp_path / "m.onnx", tmp_path / "q.onnx", reader("mlp"),
                             weight_type=jitq.QuantType.QUInt8)
    with pytest.raises(InvalidArgument, match="QuantType"):
        jitq.quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", weight_type="int8")
