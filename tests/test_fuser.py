"""The fuser: which nodes become one kernel, and that generated kernels agree with onnxruntime."""
import re

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.fuser.codegen import _collapse

NATIVE = onnxjit.SessionOptions()
NATIVE.add_session_config_entry("session.disable_fallback_provider", "1")
NATIVE.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL  # the fuser on the graph as given


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _both(model, feeds):
    got = onnxjit.InferenceSession(model, NATIVE).run(None, feeds)
    want = onnxruntime.InferenceSession(model).run(None, feeds)
    return got, want


def _groups(sess):
    return [info.nodes for info in sess.kernels()]


def test_chain_is_one_kernel_and_matches_onnxruntime():
    ops = ["Mul", "Add", "Tanh", "Mul", "Sigmoid", "Sub", "Abs", "Sqrt"]
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        ins = [prev, "k"] if op in ("Mul", "Add", "Sub") else [prev]
        nodes.append(helper.make_node(op, ins, [f"v{i}"]))
        prev = f"v{i}"
    k = helper.make_tensor("k", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, 0.25])
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [3, 4])], [_vi(prev, TensorProto.FLOAT, [3, 4])], [k])
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert len(sess.kernels()) == 1 and len(_groups(sess)[0]) == 8
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = onnxruntime.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    (source,) = sess.kernels()[0].sources.values()
    assert "def kernel(" in source and "vmath.tanh" in source
    assert len(re.findall(r"^\s+t\d+ = ", source, flags=re.M)) == 8  # one local per node, no temp arrays


def test_two_hundred_adds_fuse_into_one_kernel():
    nodes, prev = [], "x"
    for i in range(200):
        nodes.append(helper.make_node("Add", [prev, "k"], [f"t{i}"]))
        prev = f"t{i}"
    k = helper.make_tensor("k", TensorProto.FLOAT, [1, 16], np.ones(16))
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [1, 16])], [_vi(prev, TensorProto.FLOAT, [1, 16])], [k])
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert [len(g) for g in _groups(sess)] == [200]
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x + 200)


def test_value_read_outside_the_group_is_an_output_and_closes_the_group():
    # a = Relu(x) feeds Identity (not fusable) and Neg; the Add after Identity must not join a's group (a cycle)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Identity", ["a"], ["s"]),
             helper.make_node("Add", ["b", "s"], ["y"])]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 3])])
    sess = onnxjit.InferenceSession(model, NATIVE)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime.InferenceSession(model).run(None, {"x": x})[0], rtol=1e-6)
    steps = [s for s in sess._compiled.steps]
    assert [[n.op_type for n in s.nodes] for s in steps] == [["Relu", "Neg"], ["Identity"], ["Add"]]
    assert steps[0].outputs == ["a", "b"]


@pytest.mark.parametrize("shapes", [([2, 3, 4], [4]), ([2, 3, 4], [3, 1]), ([2, 1, 4], [1, 3, 1]), ([], [5]),
                                    ([1, 1], [1]), ([0, 3], [3])])
def test_broadcast_patterns(shapes):
    a, b = shapes
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    model = _model([helper.make_node("Sub", ["a", "b"], ["c"]), helper.make_node("Exp", ["c"], ["y"])],
                   [_vi("a", TensorProto.FLOAT, a), _vi("b", TensorProto.FLOAT, b)], [_vi("y", TensorProto.FLOAT, out)])
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal(a).astype(np.float32), "b": rng.standard_normal(b).astype(np.float32)}
    got, want = _both(model, feeds)
    assert got[0].shape == want[0].shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)



# x shape, k shape, dtype: flat with a remainder tile, parallel tiles, an outer loop with k broadcast along it,
# a parallel outer loop with k constant along the tiled dim, a run-time size, and float64
STAGED_CASES = [([3000], [1], TensorProto.FLOAT), ([70000], [70000], TensorProto.FLOAT),
                ([3, 2000], [2000], TensorProto.FLOAT), ([40, 2048], [40, 1], TensorProto.FLOAT),
                (["N", 1500], [1500], TensorProto.FLOAT), ([2, 700], [1], TensorProto.DOUBLE)]


@pytest.mark.parametrize("x_shape,k_shape,elem", STAGED_CASES)
def test_long_chain_runs_in_stages_over_tiles(x_shape, k_shape, elem):
    # three transcendentals: three stages; b is a graph output computed in the first stage, x and k are read in
    # two stages, b and d cross stage boundaries
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Tanh", ["a"], ["b"]),
             helper.make_node("Mul", ["b", "x"], ["c"]), helper.make_node("Sigmoid", ["c"], ["d"]),
             helper.make_node("Sub", ["d", "x"], ["e"]), helper.make_node("Add", ["e", "b"], ["f"]),
             helper.make_node("Exp", ["f"], ["g"]), helper.make_node("Mul", ["g", "k"], ["y"])]
    out_shape = list(x_shape)
    model = _model(nodes, [_vi("x", elem, x_shape), _vi("k", elem, k_shape)],
                   [_vi("y", elem, out_shape), _vi("b", elem, out_shape)])
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(7)
    shape = [5 if d == "N" else d for d in x_shape]
    feeds = {"x": rng.standard_normal(shape).astype(dtype), "k": rng.standard_normal(k_shape).astype(dtype)}
    sess = onnxjit.InferenceSession(model, NATIVE)
    got = sess.run(None, feeds)
    want = onnxruntime.InferenceSession(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=3e-6, atol=1e-6)
    (source,) = sess.kernels()[0].sources.values()
    assert "for tile in" in source and source.count("for j in range(count)") == 3
    assert "with vector_interleave(4):" in source


# a transcendental over a long innermost loop compiles with vector iterations interleaved; a short loop, or a body
# without one, compiles as LLVM's cost model chooses
@pytest.mark.parametrize("op,shape,interleaved", [("Sigmoid", [4096], True), ("Sigmoid", [2, 100], False),
                                                  ("Tanh", [2, 5, 300], True), ("Relu", [4096], False)])
def test_transcendental_over_a_long_loop_compiles_interleaved(op, shape, interleaved):
    model = _model([helper.make_node("Mul", ["x", "x"], ["a"]), helper.make_node(op, ["a"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, shape)], [_vi("y", TensorProto.FLOAT, shape)])
    feeds = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    sess = onnxjit.InferenceSession(model, NATIVE)
    np.testing.assert_allclose(sess.run(None, feeds)[0], onnxruntime.InferenceSession(model).run(None, feeds)[0],
                               rtol=1e-6, atol=1e-7)
    (source,) = sess.kernels()[0].sources.values()
    assert ("with vector_interleave(4):" in source) == interleaved


def test_collapse_merges_dims_every_input_treats_alike():
    assert _collapse((2, 3, 4), [(2, 3, 4), (2, 3, 4)]) == ([24], [[True], [True]])
    assert _collapse((2, 3, 4), [(2, 3, 4), (4,)]) == ([6, 4], [[True, True], [False, True]])
    assert _collapse((2, 1, 4), [(2, 1, 4), ()]) == ([8], [[True], [False]])


def test_symbolic_batch_compiles_one_kernel_for_every_batch():
    model = _model([helper.make_node("Mul", ["x", "x"], ["y"])], [_vi("x", TensorProto.FLOAT, ["N", 8])],
                   [_vi("y", TensorProto.FLOAT, ["N", 8])])
    sess = onnxjit.InferenceSession(model, NATIVE)
    for n in (1, 3, 7):
        x = np.full((n, 8), 3, np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * x)
    assert len(sess.kernels()[0].sources) == 1  # sizes are arguments, not baked in


def test_groups_of_one_pattern_share_one_kernel_whatever_their_shapes():
    # two Mul-Add-Relu groups (a batch norm's) over different channel counts, and a third over another image size
    shapes = [(3, 5), (6, 5), (3, 9)]  # channels, image size
    nodes, inputs, outputs, inits = [], [], [], []
    for i, (c, hw) in enumerate(shapes):
        rng = np.random.default_rng(i)
        nodes += [helper.make_node("Mul", [f"x{i}", f"s{i}"], [f"a{i}"]),
                  helper.make_node("Add", [f"a{i}", f"b{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"y{i}"])]
        inputs.append(_vi(f"x{i}", TensorProto.FLOAT, [1, c, hw, hw]))
        outputs.append(_vi(f"y{i}", TensorProto.FLOAT, [1, c, hw, hw]))
        inits += [helper.make_tensor(f"{n}{i}", TensorProto.FLOAT, [c, 1, 1], rng.standard_normal(c)) for n in "sb"]
    model = _model(nodes, inputs, outputs, inits)
    sess = onnxjit.InferenceSession(model, NATIVE)
    rng = np.random.default_rng(3)
    feeds = {f"x{i}": rng.standard_normal([1, c, hw, hw]).astype(np.float32)
             for i, (c, hw) in enumerate(shapes)}
    for g, w in zip(sess.run(None, feeds), onnxruntime.InferenceSession(model).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    infos = sess.kernels()
    assert [len(info.nodes) for info in infos] == [3, 3, 3]
    assert len({name for info in infos for name in info.sources}) == 1  # sizes are arguments; no node names
    assert sum(info.compiled for info in infos) <= 1  # loaded once (0: another test's session loaded it already)


INT_CASES = [("Div", np.int32), ("Mod", np.int32), ("Div", np.uint8), ("Mod", np.int64), ("Pow", np.int64),
             ("Mul", np.int8), ("Add", np.uint16), ("PRelu", np.int32), ("PRelu", np.uint32)]


@pytest.mark.parametrize("op,dtype", INT_CASES)
def test_integer_semantics_match_onnxruntime(op, dtype):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node(op, ["a", "b"], ["y"])], [_vi("a", elem, [6]), _vi("b", elem, [6])],
                   [_vi("y", elem, [6])])
    signed = np.dtype(dtype).kind == "i"
    a = np.array([7, -7, 7, -7, 100, 3] if signed else [7, 200, 9, 13, 100, 3], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 2] if signed else [2, 3, 4, 5, 3, 2], dtype=dtype)
    if op == "Pow":
        b = np.abs(b)
    got, want = _both(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == want[0].dtype


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
def test_integer_erf_matches_onnx_reference(dtype):
    """Erf-13 allows integers; onnxruntime has no such kernel, so onnx.reference (erf rounded to float32, then
    truncated) is the oracle."""
    from onnx.reference import ReferenceEvaluator

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Add", ["e", "x"], ["y"])],
                   [_vi("x", elem, [21])], [_vi("y", elem, [21])], opset=13)
    x = np.arange(-10, 11) if np.dtype(dtype).kind == "i" else np.arange(0, 21)
    x = x.astype(dtype)
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert _groups(sess) == [["Erf", "Add"]]
    got = sess.run(None, {"x": x})[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_half_and_double_chains(elem):
    model = _model([helper.make_node("Sigmoid", ["x"], ["g"]), helper.make_node("Mul", ["g", "x"], ["y"])],
                   [_vi("x", elem, [5])], [_vi("y", elem, [5])], opset=20)
    x = np.linspace(-3, 3, 5).astype(helper.tensor_dtype_to_np_dtype(elem))
    got, want = _both(model, {"x": x})
    assert got[0].dtype == want[0].dtype
    np.testing.assert_allclose(got[0].astype(np.float64), want[0].astype(np.float64), rtol=2e-3, atol=1e-3)


def test_comparisons_and_where_and_cast():
    nodes = [helper.make_node("Greater", ["a", "b"], ["g"]), helper.make_node("Not", ["g"], ["n"]),
             helper.make_node("Where", ["n", "a", "b"], ["w"]),
             helper.make_node("Cast", ["w"], ["y"], to=TensorProto.INT32)]
    model = _model(nodes, [_vi("a", TensorProto.FLOAT, [4]), _vi("b", TensorProto.FLOAT, [4])],
                   [_vi("y", TensorProto.INT32, [4])])
    a = np.array([1.5, -2.5, 3.7, 0], np.float32)
    b = np.array([1.0, 2.0, -3.9, 0], np.float32)
    got, want = _both(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got[0], want[0])


REDUCE_CASES = [("ReduceSum", 13, [4, 5, 6], [2], 1), ("ReduceMean", 18, [4, 5, 6], [1, 2], 0),
                ("ReduceMax", 11, [4, 5, 6], [-1], 1), ("ReduceMin", 18, [3, 0, 4], [2], 1),
                ("ReduceL2", 18, [3, 7], None, 1), ("ReduceLogSum", 18, [300, 400], [1], 0),
                ("ReduceSumSquare", 13, [2, 3], [1], 0), ("ReduceProd", 18, [2, 3, 4], [1, 2], 1),
                ("ReduceL1", 13, [5, 6], [-1], 1), ("ReduceSum", 13, [2, 0], [1], 1)]


@pytest.mark.parametrize("op,opset,shape,axes,keep", REDUCE_CASES)
def test_reduction_is_the_output_stage_of_the_group(op, opset, shape, axes, keep):
    axes_input = axes is not None and opset >= (13 if op == "ReduceSum" else 18)
    attrs = {"keepdims": keep}
    if axes is not None and not axes_input:
        attrs["axes"] = axes
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node(op, ["e", "axes"] if axes_input else ["e"], ["y"], **attrs)]
    inits = [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)] if axes_input else []
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, shape)], [_vi("y", TensorProto.FLOAT, None)], inits,
                   opset=opset)
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert _groups(sess) == [["Exp", op]]  # one kernel: exp(x) never goes to memory
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 0.1
    got = sess.run(None, {"x": x})[0]
    want = onnxruntime.InferenceSession(model).run(None, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_reduction_over_leading_axes_is_not_fused():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("ReduceSum", ["e", "axes"], ["y"])]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [3, 4])], [_vi("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("axes", TensorProto.INT64, [1], [0])], opset=13)
    sess = onnxjit.InferenceSession(model)
    assert _groups(sess) == [["Exp"]]
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.full((1, 4), 3 * np.e, np.float32), rtol=1e-6)


@pytest.mark.parametrize("op", ["Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Celu", "Elu", "Selu",
                                "ThresholdedRelu", "Softsign", "Sigmoid", "Tanh", "Softplus", "Abs", "Neg"])
def test_activations_keep_nan_and_infinities_as_onnxruntime(op):
    model = _model([helper.make_node(op, ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [7])],
                   [_vi("y", TensorProto.FLOAT, [7])])
    x = np.array([np.nan, -np.inf, np.inf, -2.5, -0.0, 0.0, 3.0], np.float32)
    got, want = _both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("elem,zero_point", [(TensorProto.INT8, 3), (TensorProto.UINT8, 128), (TensorProto.INT16, -5),
                                             (TensorProto.UINT16, 30000), (TensorProto.UINT8, None)])
def test_quantize_dequantize_pair_is_one_kernel_bit_for_bit(elem, zero_point):
    """A per-tensor QuantizeLinear -> DequantizeLinear pair (a QDQ model's, on every activation) joins the
    elementwise chain around it as scalar expressions: the integer value, read outside as an output too, and the
    float one equal onnxruntime's for every element (rounding to even, saturation, NaN and infinities)."""
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.02])]
    q_in = ["r", "s"]
    if zero_point is not None:
        inits.append(helper.make_tensor("z", elem, [], [zero_point]))
        q_in.append("z")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("QuantizeLinear", q_in, ["q"]),
             helper.make_node("DequantizeLinear", ["q", *q_in[1:]], ["d"]), helper.make_node("Mul", ["d", "d"], ["y"])]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3, 40, 40])],
                   [_vi("y", TensorProto.FLOAT, None), _vi("q", elem, None)], inits, opset=21)
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert _groups(sess) == [["Relu", "QuantizeLinear", "DequantizeLinear", "Mul"]]
    x = (np.random.default_rng(0).standard_normal((2, 3, 40, 40)) * 400).astype(np.float32)
    x[0, 0, 0, :6] = [np.nan, np.inf, -np.inf, 0.01, 0.03, 0.05]  # 0.5 and 1.5 steps: ties to even
    got = sess.run(None, {"x": x})
    want = onnxruntime.InferenceSession(model).run(None, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_per_axis_quantization_stays_on_its_kernel():
    """A scale per channel is not one scalar expression: the pair runs on ops/quantize.py's kernels, unfused."""
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [3], [0.02, 0.05, 0.1]),
             helper.make_tensor("z", TensorProto.INT8, [3], [0, 3, -7])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3, 4])], [_vi("y", TensorProto.FLOAT, None)], inits,
                   opset=13)
    sess = onnxjit.InferenceSession(model, NATIVE)
    assert _groups(sess) == []
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    got, want = _both(model, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
