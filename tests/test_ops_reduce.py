"""CPU kernels of the reductions (Reduce*, ArgMax/ArgMin) and the normalizations (Softmax, LogSoftmax, Hardmax,
LayerNormalization) against onnxruntime, one-node models over dtypes, axes/keepdims/noop variants and opsets.

Every model runs with the fallback provider disabled and every step is checked to be on CPUExecutionProvider,
so a pass proves the Numba kernel ran. Where onnxruntime has no kernel for a dtype (bfloat16, uint32/uint64,
double Hardmax, ...), onnx's reference evaluator is the oracle, on values where the two agree.
"""
from __future__ import annotations

import numpy as np
import onnx.reference
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from conftest import native_session as cpu_session, one_node_model as make_model  # noqa: E402
import onnxjit.ops.normalization  # noqa: F401  (registers the ops, as onnxjit.ops will)
import onnxjit.ops.reduce  # noqa: F401

CPU = "CPUExecutionProvider"
ort.set_default_logger_severity(3)

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(helper.tensor_dtype_to_np_dtype(T.BFLOAT16))
# rtol, atol per dtype
TOL = {F16: (2e-3, 2e-3), BF16: (1e-2, 1e-2), F32: (2e-5, 2e-6), F64: (1e-11, 1e-13)}


def _data(shape, dtype, seed=0, lo=-4, hi=5):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(lo, 0) if dtype.kind == "u" else lo
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(dtype)



def expected(model, feeds, oracle):
    if oracle == "reference":
        return onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    return ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, feeds)


def assert_close(got, want, where=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    if want.dtype in TOL:
        rtol, atol = TOL[want.dtype]
        np.testing.assert_allclose(got.astype(F64), want.astype(F64), rtol=rtol, atol=atol, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def check(op, inputs, opset, n_out=1, out_types=None, oracle="ort", want=None, **attrs):
    """Run the one-node model on onnxjit's CPU provider and compare with `want`, or else the oracle's outputs."""
    model = make_model(op, inputs, opset, n_out, out_types, **attrs)
    feeds = {name: arr for name, arr, is_init in inputs if arr is not None and not is_init}
    got = cpu_session(model).run(None, feeds)
    if want is None:
        want = expected(model, feeds, oracle)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, f"{op} output {i}")
    return got


# --- Reduce* ---------------------------------------------------------------------------------------------------
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def input_axes_since(op):
    return 13 if op == "ReduceSum" else 18


def reduce_check(op, x, opset, axes=None, oracle="ort", axes_as_init=False, want=None, **attrs):
    """Reduce* with `axes` as the attribute (old opsets) or the input (new ones); None leaves it out."""
    inputs = [("x", x, False)]
    if opset >= input_axes_since(op):
        if axes is not None:
            inputs.append(("axes", np.array(axes, np.int64), axes_as_init))
    elif axes is not None:
        attrs["axes"] = axes
    return check(op, inputs, opset, oracle=oracle, want=want, **attrs)


def _values_for(op, dtype, shape, seed=0):
    x = _data(shape, dtype, seed)
    if op == "ReduceLogSum" and np.dtype(dtype).kind == "f":
        x = np.abs(x) + np.asarray(0.5, dtype)  # keep the sums positive
    if op == "ReduceProd" and np.dtype(dtype).kind == "f":
        x = (np.sign(x) * (np.abs(x) % 1.5 + 0.5)).astype(dtype)
    return x


AXES_VARIANTS = [  # axes, keepdims
    (None, 1), ([1], 1), ([1], 0), ([0, 2], 1), ([0, 2], 0), ([-1], 0), ([0, 1], 1), ([-3, 3], 0),
]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("new_opset", [False, True])
@pytest.mark.parametrize("axes,keepdims", AXES_VARIANTS)
def test_reduce_f32_axes(op, new_opset, axes, keepdims):
    opset = input_axes_since(op) if new_opset else 11
    reduce_check(op, _values_for(op, F32, (2, 3, 4, 5)), opset, axes, keepdims=keepdims)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [F16, F64, np.int32, np.int64])
def test_reduce_dtypes(op, dtype):
    x = _values_for(op, dtype, (3, 4, 5), seed=1)
    if op in ("ReduceProd", "ReduceSumSquare") and np.dtype(dtype).kind == "i":
        x = _data((3, 4, 5), dtype, 1, -3, 4)
    for opset, axes, keepdims in ((13, [1], 0), (18, [0, 2], 1), (18, None, 0)):
        reduce_check(op, x, opset, axes, keepdims=keepdims)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [BF16, np.uint32, np.uint64])
def test_reduce_dtypes_without_ort_kernel(op, dtype):
    x = np.abs(_values_for(op, F32, (3, 4), seed=2)).astype(dtype) if dtype == BF16 else \
        _data((3, 4), dtype, 2, 0, 4)
    if op == "ReduceLogSum":
        x = x + np.asarray(1, dtype)  # the sums stay positive
    want = None
    if op in ("ReduceLogSum", "ReduceLogSumExp") and dtype != BF16:
        # onnx.reference cannot take the log of unsigned ints: onnxruntime on the same values as int64
        model = make_model(op, [("x", x.astype(np.int64), False), ("axes", np.array([1], np.int64), False)], 18,
                           keepdims=0)
        feeds = {"x": x.astype(np.int64), "axes": np.array([1], np.int64)}
        want = [w.astype(dtype) for w in expected(model, feeds, "ort")]
    elif dtype != BF16:  # onnx.reference widens some unsigned sums to uint64
        model = make_model(op, [("x", x, False), ("axes", np.array([1], np.int64), False)], 18, keepdims=0)
        feeds = {"x": x, "axes": np.array([1], np.int64)}
        want = [w.astype(dtype) for w in expected(model, feeds, "reference")]
    reduce_check(op, x, 18, [1], oracle="reference", want=want, keepdims=0)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_int_saturates_like_onnxruntime(op):
    big32 = np.array([[2 ** 31 - 1, 2 ** 31 - 1, 7], [-2 ** 31, -1, 0], [2 ** 16, 2 ** 16, 3], [5, -9, 2]], np.int32)
    big64 = np.array([[2 ** 63 - 1, 1, 0], [2 ** 62 + 1, 1, 3], [-2 ** 63, -1, 0], [2 ** 53 + 1, 2 ** 53 + 1, 1]],
                     np.int64)
    for x in (big32, big64):
        reduce_check(op, x, 18, [1], keepdims=0)
        reduce_check(op, x, 18, [0], keepdims=1)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [F32, F16, np.int32, np.int64])
def test_reduce_empty_set(op, dtype):
    x = np.zeros((2, 0, 3), dtype)
    reduce_check(op, x, 18, [1], keepdims=1)
    reduce_check(op, x, 18, [1], keepdims=0)
    reduce_check(op, x, 18, [2], keepdims=0)  # the kept zero-size axis: an empty output


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op):
    x = _values_for(op, F32, (2, 3), seed=3)
    opset = input_axes_since(op)
    reduce_check(op, x, opset, [], noop_with_empty_axes=1)  # every element alone
    reduce_check(op, x, opset, None, noop_with_empty_axes=1)
    reduce_check(op, x, opset, [], noop_with_empty_axes=0, keepdims=0)  # all axes
    reduce_check(op, x, opset, [1], noop_with_empty_axes=1, axes_as_init=True)
    xi = _data((2, 3), np.int32, 3, -5, 6)
    reduce_check(op, np.abs(xi) + 1 if op == "ReduceLogSum" else xi, opset, [], noop_with_empty_axes=1)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_scalar_and_size_one_axes(op):
    reduce_check(op, np.array(1.5, np.float32), input_axes_since(op), None, keepdims=0)
    x = _values_for(op, F32, (3, 1, 4, 1), seed=4)
    reduce_check(op, x, input_axes_since(op), [1, 3], keepdims=0)  # only size-1 axes
    reduce_check(op, x, input_axes_since(op), [0, 1, 3], keepdims=1)  # adjacent once size-1 dims are ignored
    reduce_check(op, x, 11, [2, 1])


def test_reduce_opset_1_and_12():
    x = _values_for("ReduceMax", F32, (2, 3, 4), seed=5)
    for op in REDUCE_OPS:
        for opset in (1, 12):
            reduce_check(op, np.abs(x) + np.float32(0.5), opset, [0, 2], keepdims=0)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp", "ReduceL2"])
def test_reduce_nan_inf(op):
    x = np.array([[1, np.nan, 3, 2], [np.nan, 2, 5, 1], [1, 2, np.inf, -np.inf], [-np.inf] * 4, [np.inf, 1, 1, 1]],
                 np.float32)
    reduce_check(op, x, 18, [1], keepdims=0)
    reduce_check(op, x[:3, :3], 18, [0], keepdims=0)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_])
def test_reduce_minmax_small_types(op, dtype):
    x = _data((3, 4, 2), dtype, 6)
    for axes, keepdims in ((None, 0), ([1], 1), ([0, 2], 0)):
        reduce_check(op, x, 20, axes, keepdims=keepdims)
    if dtype != np.bool_:
        reduce_check(op, x, 13, [1], keepdims=0)
        reduce_check(op, np.zeros((2, 0), dtype), 18, [1], keepdims=0)


def test_reduce_axes_from_a_computed_tensor():
    """The axes input is read at run time: the same session reduces other axes when fed other axes."""
    x = _values_for("ReduceSum", F32, (2, 3, 4), seed=7)
    model = make_model("ReduceSum", [("x", x, False), ("axes", np.array([1], np.int64), False)], 13, keepdims=0)
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "n"
    sess = cpu_session(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    for axes in ([1], [0, 2], [-1], []):
        feeds = {"x": x, "axes": np.array(axes, np.int64)}
        assert_close(sess.run(None, feeds)[0], ref.run(None, feeds)[0], str(axes))


def test_reduce_large_rows():
    """Long rows and columns (vectorized bodies and tails) and a non-adjacent axes transpose."""
    x = _data((3, 1037, 19), F32, 8)
    for op in ("ReduceSum", "ReduceMax", "ReduceLogSumExp", "ReduceSumSquare", "ReduceMean"):
        for axes in ([1], [2], [0, 2]):
            reduce_check(op, x, 18, axes, keepdims=0)


# --- ArgMax / ArgMin -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [F32, F64, F16, np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("opset", [11, 13])
def test_argminmax(op, dtype, opset):
    x = _data((3, 4, 5), dtype, 9, -3, 4)  # ints: ties
    for axis, keepdims in ((0, 1), (1, 0), (-1, 1), (2, 0)):
        check(op, [("x", x, False)], opset, out_types=[T.INT64], axis=axis, keepdims=keepdims)
        if opset >= 12:
            check(op, [("x", x, False)], opset, out_types=[T.INT64], axis=axis, keepdims=keepdims,
                  select_last_index=1)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argminmax_default_axis_and_old_opset(op):
    x = _data((4, 3), F32, 10)
    check(op, [("x", x, False)], 1, out_types=[T.INT64])
    check(op, [("x", x, False)], 12, out_types=[T.INT64], keepdims=0, select_last_index=1)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.uint32, np.uint64])
def test_argminmax_types_without_ort_kernel(op, dtype):
    x = _data((3, 5), dtype, 11, 0, 4)
    if dtype == np.uint64:
        x[0, 1] = np.uint64(2 ** 63 + 5)  # beyond int64: ordered as unsigned
    check(op, [("x", x, False)], 13, out_types=[T.INT64], oracle="reference", axis=1, keepdims=0)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argminmax_nan_and_ties(op):
    x = np.array([[1, np.nan, 3, np.nan], [np.nan, 2, 5, 5], [1, 2, np.inf, np.inf], [np.nan] * 4, [2, 2, 1, 1]],
                 np.float32)
    for last in (0, 1):
        check(op, [("x", x, False)], 13, out_types=[T.INT64], axis=1, select_last_index=last)
        check(op, [("x", x, False)], 13, out_types=[T.INT64], axis=0, select_last_index=last)


# --- Softmax / LogSoftmax / Hardmax ----------------------------------------------------------------------------
SOFTMAX_OPS = ["Softmax", "LogSoftmax", "Hardmax"]


# negative axes only from opset 11: opset-1 cases with one are not generated
@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("opset,axis", [(o, a) for o in (1, 11, 13) for a in (None, 0, 1, 2, -1, -3)
                                        if not (o == 1 and a is not None and a < 0)])
def test_softmax_axes(op, opset, axis):
    x = _data((2, 3, 4), F32, 12) * 3
    attrs = {} if axis is None else {"axis": axis}
    check(op, [("x", x, False)], opset, **attrs)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_softmax_halves_left_to_fallback(op, dtype):
    model = make_model(op, [("x", _data((3, 4), F32, 13).astype(dtype), False)], 13)
    with pytest.raises(onnxjit.NotImplemented, match=op):
        cpu_session(model)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("dtype", [F64])
def test_softmax_dtypes(op, dtype):
    x = _data((3, 4, 5), F32, 13).astype(dtype)
    oracle = "reference" if dtype == BF16 or (op == "Hardmax" and dtype == F64) else "ort"
    for opset, axis in ((11, 1), (13, -1), (13, 1)):
        if oracle == "reference" and opset < 13:
            continue  # onnx.reference has only the opset-13 semantics
        check(op, [("x", x, False)], opset, oracle=oracle, axis=axis)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_large_rows_and_values(op):
    check(op, [("x", _data((64, 1000), F32, 14) * 10, False)], 13)  # vectorized bodies + tails
    check(op, [("x", _data((3, 300, 17), F32, 15) * 10, False)], 13, axis=1)
    big = np.array([[10000, 10001, 10002, 9999.5], [-1e30, 0, 1e30, 3], [3, 3, 3, 3]], np.float32)
    check(op, [("x", big, False)], 13)
    check(op, [("x", big, False)], 13, axis=0)
    if op != "Hardmax":  # onnxruntime has no double Hardmax
        check(op, [("x", big.astype(F64), False)], 11)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_inf_nan_rows(op):
    x = np.array([[-np.inf, 0, 1, -np.inf], [-np.inf, -np.inf, -np.inf, 2.0], [-np.inf] * 4, [np.inf, 1, 2, 3],
                  [np.nan, 1, 2, 3], [1, np.nan, 3, 2], [1, 2, np.inf, np.inf]], np.float32)
    check(op, [("x", x, False)], 13)
    check(op, [("x", x, False)], 13, axis=0)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_empty(op):
    check(op, [("x", np.zeros((2, 0, 3), F32), False)], 13, axis=1)
    check(op, [("x", np.zeros((0, 4), F32), False)], 11)


# --- LayerNormalization ----------------------------------------------------------------------------------------
LN_CASES = [  # x shape, axis, scale shape, bias shape (None: absent)
    ((2, 3, 8), -1, (8,), (8,)),
    ((2, 3, 8), 1, (3, 8), (3, 8)),
    ((2, 3, 8), 0, (2, 3, 8), None),
    ((2, 3, 4, 5), -2, (4, 5), (5,)),
    ((2, 3, 4, 5), 2, (4, 1), (1, 5)),  # broadcast within the normalized dims
    ((4, 37), -1, (37,), (37,)),
    ((6, 300), 1, (300,), None),
]


@pytest.mark.parametrize("xs,axis,ss,bs", LN_CASES)
@pytest.mark.parametrize("n_out", [1, 3])
def test_layer_norm_f32(xs, axis, ss, bs, n_out):
    b = _data(bs, F32, 18) if bs is not None else None
    check("LayerNormalization", [("x", _data(xs, F32, 16) + 1, False), ("s", _data(ss, F32, 17), True),
                                 ("b", b, True)], 17, n_out=n_out, out_types=[T.FLOAT] * n_out, axis=axis,
          epsilon=1e-3)


@pytest.mark.parametrize("dtype", [F16, F64])
@pytest.mark.parametrize("xs,axis,ss,bs", LN_CASES[:4])
def test_layer_norm_dtypes(dtype, xs, axis, ss, bs):
    b = _data(bs, dtype, 18) if bs is not None else None
    check("LayerNormalization", [("x", _data(xs, dtype, 16), False), ("s", _data(ss, dtype, 17), False),
                                 ("b", b, False)], 17, n_out=3,
          out_types=[helper.np_dtype_to_tensor_dtype(dtype), T.FLOAT, T.FLOAT], axis=axis)


def test_layer_norm_two_outputs_and_default_axis():
    x = _data((3, 5, 6), F32, 19)
    check("LayerNormalization", [("x", x, False), ("s", _data((6,), F32, 20), False)], 17, n_out=2,
          out_types=[T.FLOAT, T.FLOAT])


def test_layer_norm_bfloat16_and_double_stash():
    x = _data((3, 8), F32, 21)
    s, b = _data((8,), F32, 22), _data((8,), F32, 23)
    got = check("LayerNormalization", [("x", x.astype(BF16), False), ("s", s.astype(BF16), False),
                                       ("b", b.astype(BF16), False)], 17, oracle="reference")
    assert got[0].dtype == BF16
    model = make_model("LayerNormalization", [("x", x, False), ("s", s, False)], 17, n_out=3,
                       out_types=[T.FLOAT, T.DOUBLE, T.DOUBLE], stash_type=T.DOUBLE)
    y, mean, inv = cpu_session(model).run(None, {"x": x, "s": s})
    x64 = x.astype(F64)
    want_mean = x64.mean(1, keepdims=True)
    want_inv = 1 / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    assert mean.dtype == inv.dtype == F64 and y.dtype == F32
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(inv, want_inv, rtol=1e-12)
    np.testing.assert_allclose(y, (x64 - want_mean) * want_inv * s, rtol=1e-6, atol=1e-6)


def test_row_kernels_over_several_blocks():
    """257 rows of 512: blocks of 128, 128 and 1 rows (the skewed next-row passes cross block ends), for
    Softmax, LogSoftmax and LayerNormalization both apart and as one Softmax->LayerNormalization kernel."""
    x = _data((257, 512), F32, 29) * 3
    s, b = _data((512,), F32, 30), _data((512,), F32, 31)
    for op in ("Softmax", "LogSoftmax"):
        check(op, [("x", x, False)], 13)
    check("LayerNormalization", [("x", x, False), ("s", s, True), ("b", b, True)], 17, n_out=3,
          out_types=[T.FLOAT] * 3)
    nodes = [helper.make_node("Softmax", ["x"], ["p"]),
             helper.make_node("LayerNormalization", ["p", "s", "b"], ["y", "m", "i"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "m", "i")],
                              [numpy_helper.from_array(s, "s"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    got = cpu_session(model).run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("also", ["graph_output", "second_consumer", "none"])
def test_layer_norm_over_a_softmax_buffer(also):
    """LayerNormalization writes over a dead softmax buffer only: the softmax output stays intact when it is
    also a graph output or feeds another node."""
    x = _data((3, 5, 16), F32, 27)
    s = _data((16,), F32, 28)
    nodes = [helper.make_node("Softmax", ["x"], ["p"]), helper.make_node("LayerNormalization", ["p", "s"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", T.FLOAT, x.shape)]
    if also == "graph_output":
        outputs.append(helper.make_tensor_value_info("p", T.FLOAT, x.shape))
    elif also == "second_consumer":
        nodes.append(helper.make_node("ReduceMax", ["p"], ["m"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("m", T.FLOAT, x.shape[:2]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x.shape)], outputs,
                              [numpy_helper.from_array(s, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    sess = cpu_session(model)
    ln = next(n for st in sess._compiled.steps for n in st.nodes if n.op_type == "LayerNormalization")
    assert onnxjit.ops.normalization.input_is_dead_fresh_buffer(ln) == (also == "none")
    want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})
    for _ in range(2):  # the second run reuses nothing of the first
        got = sess.run(None, {"x": x})
        for g, w in zip(got, want):
            assert_close(g, w)


# --- builders decline what they cannot run ---------------------------------------------------------------------
def test_builders_decline_unsupported_dtypes():
    """A known dtype the op does not allow goes to the fallback provider (here disabled: the session fails)."""
    from onnxjit.ir.graph import Attr, Node, Value
    from onnxjit.ir.types import TensorType
    from onnxjit.ops.registry import builder_for

    def node(op, elem, opset, **attrs):
        n = Node(op, [Value("x", TensorType(elem, (2, 3)))], [Value("y")], opset=opset,
                 attributes={k: Attr(k, 2, v) for k, v in attrs.items()})
        return builder_for(n)(n)

    assert node("ReduceSum", T.STRING, 13) is None
    assert node("ReduceSum", T.BOOL, 13) is None
    assert node("ReduceMax", T.BOOL, 20) is not None
    assert node("Softmax", T.INT32, 13) is None
    assert node("ArgMax", T.BOOL, 13) is None
    assert node("ReduceMean", T.FLOAT, 18) is not None


# --- Softmax -> LayerNormalization as one kernel ---------------------------------------------------------------
@pytest.mark.parametrize("op,sm_axis,ln_axis,dtype,n_out,softmax_is_output", [
    ("Softmax", -1, -1, np.float32, 1, False),
    ("Softmax", -1, -1, np.float32, 3, False),  # the statistics of the softmax rows, not of their exp terms
    ("LogSoftmax", 2, -1, np.float32, 3, False),
    ("Softmax", 2, -1, np.float64, 1, False),
    ("Softmax", 1, -1, np.float32, 1, False),   # softmax over another axis: two passes, still one step
    ("Softmax", -1, 1, np.float32, 2, False),   # layer norm over the two last axes: two passes
    ("Softmax", -1, -1, np.float32, 1, True),   # the softmax is read outside: two steps
])
def test_softmax_then_layer_norm(op, sm_axis, ln_axis, dtype, n_out, softmax_is_output):
    x = _data((3, 5, 16), dtype, seed=3)
    tail = (16,) if ln_axis == -1 else (5, 16)
    scale = _data(tail, dtype, seed=4)
    bias = _data(tail, dtype, seed=5)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ln_outs = ["y", "mean", "inv"][:n_out]
    # float64 data normalizes in one pass with float64 statistics (stash_type double)
    stash = T.DOUBLE if dtype == np.float64 else T.FLOAT
    nodes = [helper.make_node(op, ["x"], ["s"], axis=sm_axis),
             helper.make_node("LayerNormalization", ["s", "scale", "bias"], ln_outs, axis=ln_axis, epsilon=1e-3,
                              stash_type=stash)]
    outs = [helper.make_tensor_value_info(n, elem if n == "y" else stash, None) for n in ln_outs]
    if softmax_is_output:
        outs.append(helper.make_tensor_value_info("s", elem, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, x.shape)], outs,
                              [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    sess = cpu_session(model)
    steps = [[n.op_type for n in s.nodes] for s in sess._compiled.steps]
    assert steps == ([[op], ["LayerNormalization"]] if softmax_is_output else [[op, "LayerNormalization"]])
    got = sess.run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    for g, w in zip(got, want):
        assert_close(g, w)


@pytest.mark.parametrize("scale_after", [False, True])
def test_softmax_then_layer_norm_with_a_step_between(scale_after):
    """A LayerNormalization moves up to the Softmax step before it, past a step it does not read; one whose scale
    that later step computes stays a step of its own (the value is not there yet at the Softmax step)."""
    x = _data((3, 5, 16), np.float32, seed=3)
    scale_in = _data((16,), np.float32, seed=4)
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
             helper.make_node("Neg", ["scale_in"], ["neg"]),  # a step between the two
             helper.make_node("LayerNormalization", ["s", "neg" if scale_after else "scale_in"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x.shape),
                                           helper.make_tensor_value_info("scale_in", T.FLOAT, [16])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("neg", T.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    sess = cpu_session(model)
    steps = [[n.op_type for n in s.nodes] for s in sess._compiled.steps]
    if scale_after:
        assert steps == [["Softmax"], ["Neg"], ["LayerNormalization"]]
    else:
        assert steps == [["Softmax", "LayerNormalization"], ["Neg"]]
    feeds = {"x": x, "scale_in": scale_in}
    for g, w in zip(sess.run(None, feeds), ort.InferenceSession(model.SerializeToString()).run(None, feeds)):
        assert_close(g, w)
