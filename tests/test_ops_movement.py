"""CPU kernels of the data-movement ops (Transpose, Split, Slice, Squeeze, Unsqueeze, Identity, Expand, Tile, Pad,
Shape, Size, ConstantOfShape, Range, DepthToSpace, SpaceToDepth, Trilu) against onnxruntime: one-node models over
dtypes, attribute/input variants and opset versions.

Every model runs with the fallback provider disabled and each step is checked to be on CPUExecutionProvider, so
a pass proves the CPU kernel ran. Where onnxruntime has no kernel (or its Python API cannot feed the dtype:
bfloat16, float8) or cannot load the opset (27, 28), onnx's reference evaluator is the oracle. Where the oracle
raises (out-of-range pads, uneven splits, ...), onnxjit must raise too.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from conftest import native_session as cpu_session, feeds_of  # noqa: E402
import onnxjit.ops.movement  # noqa: F401  (registers the ops, as onnxjit.ops will)
from onnxjit.ir.graph import Attr, Node, Value
from onnxjit.ir.types import TensorType, elem_type_of
from onnxjit.ops.registry import builder_for

CPU = "CPUExecutionProvider"
BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
I64MAX, I32MAX, I64MIN = (1 << 63) - 1, (1 << 31) - 1, -(1 << 63)
ort.set_default_logger_severity(4)

# every dtype family the ops allow: numpy floats/ints, bool, strings (object), float16, bfloat16
ALL = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
       np.uint64, np.bool_, object, BF16]
SOME = [np.float32, np.int64, np.bool_, object, BF16, np.float16, np.uint8]


def data(shape, dtype=np.float32, seed=0):
    """Distinct-ish values of any dtype (strings are object arrays)."""
    n = int(np.prod(shape, dtype=np.int64))
    base = (np.arange(n) * 7 + seed) % 23
    dtype = np.dtype(dtype)
    if np.dtype(dtype).kind == "O":
        return np.array([f"s{v}" for v in base], dtype=object).reshape(shape)
    if dtype == np.bool_:
        return (base % 3 == 0).reshape(shape)
    if dtype.kind == "f" or dtype in (BF16, F8):
        return (base.astype(np.float32) * 0.5 - 3).astype(dtype).reshape(shape)
    return base.astype(dtype).reshape(shape)


def i64(*v):
    return np.array(v, dtype=np.int64)


# --- harness ---------------------------------------------------------------------------------------------------
def make_model(op, inputs, opset, n_out=1, out_types=None, out_names=None, **attrs):
    """One-node model. `inputs`: (name, array, is_initializer) in node order; a None array is an absent input;
    an array that is a list is a sequence input, a ("optional", array) pair an optional."""
    names, vis, inits = [], [], []
    inputs = list(inputs)
    while inputs and inputs[-1][1] is None:  # trailing absent inputs are left out (not named "")
        inputs.pop()
    for name, arr, is_init in inputs:
        if arr is None:
            names.append("")
            continue
        names.append(name)
        if isinstance(arr, list):
            vis.append(helper.make_tensor_sequence_value_info(name, elem_type_of(arr[0].dtype), None))
        elif is_init:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            vis.append(helper.make_tensor_value_info(name, elem_type_of(arr.dtype), arr.shape))
    out_names = out_names or [f"y{i}" for i in range(n_out)]
    first = next(a for _, a, _ in inputs if a is not None)
    types = out_types or [elem_type_of(first[0].dtype if isinstance(first, list) else first.dtype)] * len(out_names)
    outs = [helper.make_tensor_sequence_value_info(n, t, None) if isinstance(first, list) and op == "Identity"
            else helper.make_tensor_value_info(n, t, None) for n, t in zip(out_names, types)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph([node], "g", vis, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)




def _ort_outputs(model, feeds):
    """onnxruntime's outputs, or None where it has no kernel for the model."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    except Exception as e:  # noqa: BLE001 - onnxruntime lacks this kernel: the ONNX reference decides
        # no kernel, or (float16 in an opset-1 model) onnxruntime's own inserted Cast node is invalid there
        if not any(m in str(e) for m in ("NOT_IMPLEMENTED", "Could not find an implementation",
                                         "InsertedPrecisionFreeCast")):
            raise
        return None
    return sess.run(None, feeds)


def _bits(a):
    """An ml_dtypes array (bfloat16, float8) as unsigned ints of its width; other values as they are."""
    return a.view(f"u{a.dtype.itemsize}") if isinstance(a, np.ndarray) and a.dtype.kind == "V" else a


def expected(op, inputs, opset, n_out, out_types, oracle, attrs):
    """The oracle's outputs: onnxruntime, or onnx.reference where onnxruntime cannot run the model.

    onnxruntime's Python API cannot feed bfloat16/float8; data movement does not look at the values, so those
    run through onnxruntime as unsigned ints of the same width (their bits), and the outputs are viewed back."""
    model = make_model(op, inputs, opset, n_out, out_types, **attrs)
    feeds = feeds_of(inputs)
    if oracle == "ort" and opset <= 26:
        ml = [a.dtype for _, a, _ in inputs if isinstance(a, np.ndarray) and a.dtype.kind == "V"]
        if not ml:
            got = _ort_outputs(model, feeds)
            if got is not None:
                return got
        elif op != "Range":
            types = out_types or [elem_type_of(next(a for _, a, _ in inputs if a is not None).dtype)] * n_out
            proxy = [T.UINT16 if t == T.BFLOAT16 else T.UINT8 if t == elem_type_of(F8) else t for t in types]
            pin = [(n, _bits(a), init) for n, a, init in inputs]
            got = _ort_outputs(make_model(op, pin, opset, n_out, proxy, **attrs), feeds_of(pin))
            if got is not None:
                return [g.view(ml[0]) if t != p else g for g, t, p in zip(got, types, proxy)]
    return onnx.reference.ReferenceEvaluator(model).run(None, feeds)


def assert_same(g, w, where="output"):
    if isinstance(w, list):
        assert isinstance(g, list) and len(g) == len(w), where
        for i, (a, b) in enumerate(zip(g, w)):
            assert_same(a, b, f"{where}[{i}]")
        return
    if w is None:
        assert g is None, where
        return
    assert isinstance(g, np.ndarray), f"{where}: {type(g)}"
    w = np.asarray(w)
    if w.dtype.kind in "OUS":  # strings: object arrays on both sides
        assert g.dtype == object, f"{where}: dtype {g.dtype}"
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        assert g.tolist() == w.astype(object).tolist(), where
        return
    assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != {w.dtype}"
    assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
    if w.dtype.kind == "V":  # ml_dtypes: compare the bits
        g, w = g.view(f"u{w.dtype.itemsize}"), w.view(f"u{w.dtype.itemsize}")
    np.testing.assert_array_equal(g, w, err_msg=where)  # data movement: exact, floats included


def check(op, inputs, opset, n_out=1, out_types=None, oracle="ort", want=None, **attrs):
    """Run the one-node model on onnxjit's CPU provider and compare with `want` or the oracle's outputs; where the
    oracle raises, onnxjit must raise as well."""
    model = make_model(op, inputs, opset, n_out, out_types, **attrs)
    feeds = feeds_of(inputs)
    sess = cpu_session(model)
    if want is None:
        try:
            want = expected(op, inputs, opset, n_out, out_types, oracle, attrs)
        except Exception:  # noqa: BLE001 - an error case: onnxjit must refuse it too
            with pytest.raises(Exception):
                sess.run(None, feeds)
            return None
    got = sess.run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {i}")
    return got


def kernel_of(op, opset, in_types, n_out=1, **attrs):
    """The CPU kernel the builder makes for a node (IR built by hand), or None when it declines."""
    ins = [None if t is None else Value(f"x{i}", t) for i, t in enumerate(in_types)]
    node = Node(op, ins, [Value(f"y{i}") for i in range(n_out)], opset=opset,
                attributes={k: Attr(k, 0, v) for k, v in attrs.items()})
    build = builder_for(node)
    return None if build is None else build(node)


def tt(elem, shape=None):
    return TensorType(elem, shape)


# --- Transpose -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
def test_transpose(dtype, perm):
    attrs = {} if perm is None else {"perm": perm}
    check("Transpose", [("x", data((2, 3, 4), dtype), False)], 13, **attrs)


@pytest.mark.parametrize("opset", [1, 21, 25])
@pytest.mark.parametrize("shape,perm", [((5,), None), ((), None), ((2, 1, 3, 2), [3, 1, 0, 2]), ((0, 3), [1, 0])])
def test_transpose_ranks(opset, shape, perm):
    attrs = {} if perm is None else {"perm": perm}
    got = check("Transpose", [("x", data(shape), False)], opset, **attrs)
    assert got[0].flags.c_contiguous


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,perm", [((1, 96, 80, 80), [0, 2, 3, 1]), ((1, 80, 80, 96), [0, 3, 1, 2]),
                                        ((8, 70, 12, 80), [0, 2, 1, 3]), ((6, 12, 97, 80), [0, 1, 3, 2]),
                                        ((9, 50, 40, 33), [2, 0, 1, 3]), ((9, 50, 40, 33), [3, 2, 1, 0])])
def test_transpose_large(shape, perm, threads):
    """Above TRANSPOSE_GRAIN Transpose runs its own kernels: tiles for a batched 2-D transpose (two threads),
    row copies where the last axis stays last; the rest numpy's copy. float16 (two threads) moves as uint16."""
    from onnxjit.ops.movement import TRANSPOSE_GRAIN
    assert np.prod(shape) >= TRANSPOSE_GRAIN
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32 if threads == 1 else np.float16)
    model = make_model("Transpose", [("x", x, False)], 13, perm=perm)
    got = onnxjit.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.flags.c_contiguous and np.array_equal(got, want)


def test_transpose_merges_axes():
    from onnxjit.ops.movement import merged_transpose
    assert merged_transpose((1, 576, 14, 14), (0, 2, 3, 1)) == ([576, 196], [1, 0])
    assert merged_transpose((8, 128, 12, 64), (0, 2, 1, 3)) == ([8, 128, 12, 64], [0, 2, 1, 3])
    assert merged_transpose((2, 3, 4), (0, 1, 2)) == ([24], [0])
    assert merged_transpose((2, 1, 4), (2, 1, 0)) == ([2, 4], [1, 0])


def test_transpose_float8():
    check("Transpose", [("x", data((2, 3), F8), False)], 21)


# --- Split -----------------------------------------------------------------------------------------------------
SPLIT_CASES = [
    # opset, shape, n_out, attrs, split input (None: absent)
    (2, (2, 6), 3, dict(axis=1), None),
    (2, (2, 6), 2, dict(axis=1, split=[1, 5]), None),
    (11, (6, 2), 2, dict(axis=-2, split=[4, 2]), None),
    (11, (3, 4), 2, dict(axis=-1), None),
    (13, (2, 6), 3, dict(axis=1), i64(1, 2, 3)),
    (13, (6,), 3, {}, None),
    (13, (4,), 2, {}, i64(4, 0)),
    (13, (4,), 2, {}, np.zeros(0, np.int64)),  # an empty split: equal parts
    (13, (5,), 2, {}, None),  # uneven without num_outputs: an error
    (13, (5,), 2, {}, i64(2, 2)),  # split not summing to the dim: an error
    (18, (7, 2), 3, dict(axis=0, num_outputs=3), None),
    (18, (2, 8), 4, dict(axis=-1, num_outputs=4), None),
    (18, (5,), 3, dict(num_outputs=3), None),
    (18, (5,), 4, dict(num_outputs=4), None),  # last chunk negative: an error
    (18, (3, 5), 2, dict(axis=1), i64(3, 2)),
    (18, (4, 2), 2, dict(axis=0, num_outputs=2), i64(1, 3)),  # both: an error
]


@pytest.mark.parametrize("opset,shape,n_out,attrs,split", SPLIT_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, object, BF16])
def test_split(opset, shape, n_out, attrs, split, dtype):
    inputs = [("x", data(shape, dtype), False)]
    if split is not None:
        inputs.append(("split", split, False))
    check("Split", inputs, opset, n_out=n_out, **attrs)


def test_split18_without_split_or_num_outputs():
    # the spec wants one of them; onnxruntime loads the model when the input's shape is unknown and splits equally
    node = helper.make_node("Split", ["x"], ["y0", "y1"], axis=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, None)],
                              [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y0", "y1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    x = data((4, 2))
    want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})
    got = cpu_session(model).run(None, {"x": x})
    for g, w in zip(got, want):
        assert_same(g, w)


def test_split_opset1_split_input():
    # Split-1 takes `split` as an optional second input (no onnxruntime kernel): the spec's result
    x = data((2, 5))
    check("Split", [("x", x, False), ("s", i64(2, 3), False)], 1, n_out=2, axis=1, want=[x[:, :2], x[:, 2:]])


@pytest.mark.parametrize("dtype", ALL)
def test_split_dtypes(dtype):
    check("Split", [("x", data((3, 4), dtype), False), ("s", i64(1, 3), True)], 13, n_out=2, axis=1)


# --- Slice -----------------------------------------------------------------------------------------------------
SLICE_CASES = [
    # starts, ends, axes, steps
    ([0, 1], [3, 3], [0, 1], [1, 1]),
    ([-1], [-5], [1], [-1]),
    ([10], [-10], [2], [-2]),
    ([-100], [100], [0], None),
    ([1], [I64MAX], [-1], [2]),
    ([3], [I32MAX], [2], [-1]),  # onnxruntime: INT_MAX with a negative step runs to the front
    ([3], [I32MAX - 1], [2], [-1]),
    ([0, 0, 0], [1, 1, 1], None, None),
    ([1], [3], None, None),
    ([2], [2], [0], [1]),
    ([4], [0], [2], [-3]),
    ([0], [-1], [1], [-1]),
    ([3], [I64MIN], [2], [-1]),
    ([-2, 1], [I64MAX, -1], [-1, 0], [-2, 5]),
    ([0], [2], [0, 1], None),  # length mismatch: an error
    ([0, 0], [2, 2], [1, 1], None),  # duplicate axes: an error
    ([0], [2], [0], [0]),  # step 0: an error
    ([0], [2], [3], None),  # axis out of range: an error
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
@pytest.mark.parametrize("opset", [10, 13])
def test_slice(starts, ends, axes, steps, opset):
    inputs = [("x", data((3, 4, 5)), False), ("starts", i64(*starts), False), ("ends", i64(*ends), False),
              ("axes", None if axes is None else i64(*axes), False),
              ("steps", None if steps is None else i64(*steps), False)]
    while inputs[-1][1] is None:
        inputs.pop()
    check("Slice", inputs, opset)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_slice_dtypes(dtype, index_dtype):
    idx = lambda *v: np.array(v, dtype=index_dtype)  # noqa: E731
    check("Slice", [("x", data((4, 5), dtype), False), ("s", idx(3, -1), False), ("e", idx(0, -100), False),
                    ("a", idx(0, 1), True), ("t", idx(-1, -2), True)], 13)


@pytest.mark.parametrize("starts,ends,axes", [
    ([-100, 1], [I64MAX, -1], [0, 1]), ([1], [1000], None), ([2, 3], [1, 4], [1, 0]), ([0, -3], [-1, 50], None)])
@pytest.mark.parametrize("opset", [1, 9])
def test_slice_attrs(starts, ends, axes, opset):
    attrs = dict(starts=starts, ends=ends)
    if axes is not None:
        attrs["axes"] = axes
    check("Slice", [("x", data((3, 4), np.int64), False)], opset, **attrs)


# --- Squeeze / Unsqueeze ---------------------------------------------------------------------------------------
# negative axes only since opset 11: not generated for opset 1
@pytest.mark.parametrize("opset,axes", [(o, a) for o in (1, 11) for a in (None, [0], [0, 3], [-1, 2], [1])
                                        if not (o == 1 and a and min(a) < 0)])  # [1]: not a unit dim, an error
def test_squeeze_attr(opset, axes):
    attrs = {} if axes is None else {"axes": axes}
    check("Squeeze", [("x", data((1, 3, 1, 1)), False)], opset, **attrs)


@pytest.mark.parametrize("opset", [13, 21, 25])
@pytest.mark.parametrize("axes", [None, i64(0), i64(-1, 0), i64(2), np.zeros(0, np.int64)])
@pytest.mark.parametrize("dtype", SOME)
def test_squeeze_input(opset, axes, dtype):
    check("Squeeze", [("x", data((1, 3, 1), dtype), False), ("axes", axes, False)], opset)


@pytest.mark.parametrize("opset,axes", [(o, a) for o in (1, 11) for a in ([0], [0, 3], [-1], [1, -1], [2, 0])
                                        if not (o == 1 and min(a) < 0)])
def test_unsqueeze_attr(opset, axes):
    check("Unsqueeze", [("x", data((2, 3)), False)], opset, axes=axes)


@pytest.mark.parametrize("opset", [13, 21, 25])
@pytest.mark.parametrize("axes", [i64(0), i64(3, 0), i64(-1, 1), i64(1, 1), i64(5)])  # the last two: errors
@pytest.mark.parametrize("dtype", SOME)
def test_unsqueeze_input(opset, axes, dtype):
    check("Unsqueeze", [("x", data((2, 3), dtype), False), ("axes", axes, True)], opset)


def test_unsqueeze_scalar():
    check("Unsqueeze", [("x", data((), np.int64), False), ("axes", i64(0, -1), False)], 13)


# --- Identity --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("opset", [1, 13, 16, 21])
def test_identity(dtype, opset):
    check("Identity", [("x", data((2, 3), dtype), False)], opset)


def test_identity_sequence():
    seq = [data((2,), np.float32), data((3, 1), np.float32, seed=4)]
    got = check("Identity", [("x", seq, False)], 16)
    assert isinstance(got[0], list) and len(got[0]) == 2


def test_identity_optional():
    # Identity over optional(tensor): a present value and an empty one pass through
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2]))
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_value_info("x", opt)], [helper.make_value_info("y", opt)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=10)
    sess = cpu_session(model)
    x = data((2,))
    assert_same(sess.run(None, {"x": x})[0], ort.InferenceSession(model.SerializeToString(), providers=[CPU])
                .run(None, {"x": x})[0])
    assert sess.run(None, {"x": None})[0] is None


# --- Expand / Tile ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape,shape", [
    ((3, 1), [2, 1, 4]), ((3, 1), [1]), ((3, 1), [3, 4]), ((1,), [2, 0]), ((2, 1, 3), [1, 1, 1, 1]),
    ((), [2, 2]), ((3, 1), [4, 1]), ((3, 1), [2])])  # (3,1) vs [4,1]: an error
@pytest.mark.parametrize("opset", [8, 13])
def test_expand(xshape, shape, opset):
    check("Expand", [("x", data(xshape), False), ("shape", i64(*shape), False)], opset)


@pytest.mark.parametrize("dtype", ALL)
def test_expand_dtypes(dtype):
    got = check("Expand", [("x", data((2, 1), dtype), False), ("shape", i64(2, 2, 3), True)], 13)
    assert got[0].flags.writeable and got[0].flags.c_contiguous


@pytest.mark.parametrize("xshape,reps", [
    ((2, 3), [1, 2]), ((2, 3), [3, 1]), ((2, 3), [0, 2]), ((2,), [3]), ((), []), ((2, 3), [2]), ((1, 2, 1), [2, 1, 3])])
@pytest.mark.parametrize("opset", [6, 13])
def test_tile(xshape, reps, opset):
    check("Tile", [("x", data(xshape), False), ("repeats", np.array(reps, np.int64), False)], opset)


@pytest.mark.parametrize("dtype", ALL)
def test_tile_dtypes(dtype):
    check("Tile", [("x", data((2, 3), dtype), False), ("repeats", i64(2, 2), True)], 13)


def test_tile_opset1():
    # Tile-1 (input, tiles, axis): no onnxruntime kernel, the spec's result
    x = data((2, 3))
    want = [np.tile(x, (1, 3))]
    check("Tile", [("x", x, False), ("tiles", i64(3), False), ("axis", i64(1), False)], 1, want=want)


# --- Pad -------------------------------------------------------------------------------------------------------
PADS_2D = [[1, 0, 2, 1], [0, 2, 1, 0], [-1, 1, 1, -2], [0, 0, 0, 0], [2, 3, 2, 3], [0, 5, 0, 6], [0, -4, 0, 1],
           [-2, 0, -1, 0], [0, -5, 0, 0]]


@pytest.mark.parametrize("pads", PADS_2D)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("opset", [2, 11])
def test_pad_modes(pads, mode, opset):
    x = data((3, 4))
    if opset < 11:
        check("Pad", [("x", x, False)], opset, mode=mode, pads=pads, value=1.5)
    else:
        check("Pad", [("x", x, False), ("pads", i64(*pads), False), ("v", np.array(2.5, np.float32), False)],
              opset, mode=mode)


@pytest.mark.parametrize("pads", PADS_2D + [[3, 3, 3, 3]])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_opset19(pads, mode):
    check("Pad", [("x", data((3, 4), np.int32), False), ("pads", i64(*pads), False)], 19, mode=mode)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_dtypes(dtype, mode):
    x = data((2, 3), dtype)
    cv = np.array("pad" if x.dtype == object else 1, dtype=x.dtype)
    check("Pad", [("x", x, False), ("pads", i64(1, 0, 0, 2), True), ("cv", cv, False)], 21, mode=mode)


@pytest.mark.parametrize("axes,pads", [([1], [1, 2]), ([-1], [2, 0]), ([0, -1], [1, -1, 0, 2]), ([2, 0], [1, 1, 1, 1]),
                                       ([1, 1], [1, 1, 1, 1]), ([1], [1, 1, 1, 1])])
@pytest.mark.parametrize("axes_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_axes(axes, pads, axes_dtype, mode):
    check("Pad", [("x", data((2, 3, 4)), False), ("pads", i64(*pads), False), ("cv", None, False),
                  ("axes", np.array(axes, axes_dtype), False)], 18, mode=mode)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1]])
def test_pad_empty_input(mode, pads):
    check("Pad", [("x", np.zeros((2, 0), np.float32), False), ("pads", i64(*pads), False)], 19, mode=mode)


def test_pad_opset1():
    x = data((2, 3))
    check("Pad", [("x", x, False)], 1, paddings=[1, 0, 0, 1], value=2.0,
          want=[np.pad(x, ((1, 0), (0, 1)), constant_values=2.0)])


def test_pad_scalar_is_an_error():
    check("Pad", [("x", np.array(1, np.float32), False), ("pads", np.zeros(0, np.int64), False)], 13)


# --- Shape / Size ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-1, None), (None, -1), (-10, 10), (2, 1), (1, 2),
                                       (0, 0), (5, None)])
@pytest.mark.parametrize("opset", [15, 19, 21])
def test_shape(start, end, opset):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [("x", data((2, 3, 4)), False)], opset, out_types=[T.INT64], **attrs)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shape", [(), (2, 3), (0, 4)])
@pytest.mark.parametrize("opset", [1, 13])
def test_shape_size(dtype, shape, opset):
    x = data(shape, dtype)
    check("Shape", [("x", x, False)], opset, out_types=[T.INT64])
    got = check("Size", [("x", x, False)], opset, out_types=[T.INT64])
    assert got[0].shape == ()


# --- ConstantOfShape -------------------------------------------------------------------------------------------
COS_VALUES = [None, (T.FLOAT, 1.5), (T.DOUBLE, -2.0), (T.FLOAT16, 0.5), (T.INT64, 7), (T.INT32, -3), (T.INT8, -1),
              (T.UINT8, 200), (T.UINT64, 5), (T.BOOL, True), (T.INT16, 4), (T.UINT32, 9)]


@pytest.mark.parametrize("value", COS_VALUES)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 2)])
@pytest.mark.parametrize("opset", [9, 20, 21])
def test_constant_of_shape(value, shape, opset):
    attrs = {} if value is None else {"value": helper.make_tensor("v", value[0], [1], [value[1]])}
    out = [T.FLOAT if value is None else value[0]]
    check("ConstantOfShape", [("shape", np.array(shape, np.int64), False)], opset, out_types=out, **attrs)


def test_constant_of_shape_bfloat16():
    v = helper.make_tensor("v", T.BFLOAT16, [1], [2.5])
    got = check("ConstantOfShape", [("shape", i64(2, 2), False)], 21, out_types=[T.BFLOAT16], oracle="reference",
                value=v)
    assert got[0].dtype == BF16 and float(got[0][0, 0]) == 2.5


# --- Range -----------------------------------------------------------------------------------------------------
RANGE_CASES = [(0, 10, 3), (10, 4, -2), (1, 1, 1), (5, 1, 1), (-3, 3, 1), (2, 100, 7)]


@pytest.mark.parametrize("start,limit,delta", RANGE_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.int32, np.int64])
def test_range(start, limit, delta, dtype):
    args = [("a", np.array(start, dtype), False), ("b", np.array(limit, dtype), False),
            ("c", np.array(delta, dtype), False)]
    check("Range", args, 11)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    *[(s, lim, d, t) for s, lim, d in [(0.1, 1000.3, 0.1), (-1.5, 2.7, 0.35), (1.0, -2.0, -0.3), (0.0, 1.0, 0.0)]
      for t in (np.float32, np.float64)],  # delta 0: an error
    (-(2 ** 31) + 5, 2 ** 31 - 1, 2 ** 30, np.int32), (-(2 ** 62), 2 ** 62 + 1, 2 ** 61, np.int64),
    (-30000, 30000, 7, np.int16), (5, 5, 0, np.int64)])
def test_range_count_and_accumulation(start, limit, delta, dtype):
    # onnxruntime adds delta to the previous element (rounding each step): exact equality proves the same order;
    # the element count: (limit - start) / delta in double for floats, exact for integers (no int32/int64 overflow)
    args = [("a", np.array(start, dtype), False), ("b", np.array(limit, dtype), False),
            ("c", np.array(delta, dtype), False)]
    check("Range", args, 11)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.int32])
@pytest.mark.parametrize("stash", [None, T.FLOAT, T.DOUBLE])
def test_range_opset27(dtype, stash):
    # Range-27 (float16/bfloat16, stash_type): onnxruntime where it loads opset 27 (>= 1.32), else the reference
    args = [("a", np.array(1, dtype), False), ("b", np.array(9.5, dtype), False), ("c", np.array(0.75, dtype), False)]
    attrs = {} if stash is None else {"stash_type": stash}
    check("Range", args, 27, **attrs)


# --- DepthToSpace / SpaceToDepth -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("opset,mode", [(1, None), (11, "DCR"), (11, "CRD"), (13, None), (13, "CRD"), (28, "CRD")])
def test_depth_to_space(dtype, opset, mode):
    attrs = {"blocksize": 2} if mode is None else {"blocksize": 2, "mode": mode}
    check("DepthToSpace", [("x", data((2, 8, 2, 3), dtype), False)], opset, **attrs)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("opset,mode", [(1, None), (13, None), (28, "DCR"), (28, "CRD")])
def test_space_to_depth(dtype, opset, mode):
    attrs = {"blocksize": 2} if mode is None else {"blocksize": 2, "mode": mode}
    check("SpaceToDepth", [("x", data((2, 3, 4, 6), dtype), False)], opset, **attrs)


@pytest.mark.parametrize("op,shape", [("DepthToSpace", (1, 6, 2, 2)), ("SpaceToDepth", (1, 2, 3, 4)),
                                      ("DepthToSpace", (6, 2, 2))])
def test_space_depth_errors(op, shape):
    check(op, [("x", data(shape), False)], 13, blocksize=2)


# --- Trilu -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 3), (1, 5), (3, 3), (0, 2), (4,)])  # rank 1: an error
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 5, -5])
def test_trilu(shape, upper, k):
    inputs = [("x", data(shape), False)]
    if k is not None:
        inputs.append(("k", np.array(k, np.int64), False))
    check("Trilu", inputs, 14, upper=upper)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_dtypes(dtype, upper):
    x = data((2, 3, 4), dtype)
    if x.dtype == object:  # no oracle keeps strings (the reference writes int 0): zeroed elements are ""
        drop = np.tri(3, 4, -1 if upper else 0, dtype=bool)
        want = x.copy()
        want[:, drop if upper else ~drop] = ""
        check("Trilu", [("x", x, False), ("k", i64(0), True)], 14, upper=upper, want=[want])
        return
    check("Trilu", [("x", x, False), ("k", i64(1), True)], 14, upper=upper)


# --- views and builders ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,opset,in_types,args,attrs", [
    ("Squeeze", 13, [tt(T.FLOAT), tt(T.INT64)], (i64(0),), {}),
    ("Squeeze", 11, [tt(T.FLOAT)], (), {"axes": [0, 2]}),
    ("Squeeze", 13, [tt(T.FLOAT)], (), {}),
    ("Unsqueeze", 13, [tt(T.FLOAT), tt(T.INT64)], (i64(1, -1),), {}),
    ("Unsqueeze", 1, [tt(T.FLOAT)], (), {"axes": [0]}),
    ("Identity", 21, [tt(T.FLOAT)], (), {}),
])
def test_views_do_not_copy(op, opset, in_types, args, attrs):
    kernel = kernel_of(op, opset, in_types, **attrs)
    x = data((1, 3, 1))
    y = kernel(x, *args)[0]
    assert np.shares_memory(y, x) and y.size == x.size


@pytest.mark.parametrize("op,inputs,opset", [
    ("Squeeze", [("x", data((1, 3, 1)), False), ("axes", i64(0), True)], 13),
    ("Unsqueeze", [("x", data((2, 3)), False), ("axes", i64(0), True)], 13),
    ("Identity", [("x", data((2, 3)), False)], 19),
])
def test_views_through_session_are_the_callers_own(op, inputs, opset):
    """The kernels return views (above), but a graph output that is one of a feed comes back as a copy, as
    onnxruntime's: writing it must not change the caller's input."""
    sess = cpu_session(make_model(op, inputs, opset))
    x = inputs[0][1]
    y = sess.run(None, {"x": x})[0]
    assert not np.shares_memory(y, x) and y.flags.writeable
    np.testing.assert_array_equal(y.reshape(-1), x.reshape(-1))


def test_slice_and_split_views_when_contiguous():
    x = data((4, 3))
    y = kernel_of("Slice", 13, [tt(T.FLOAT)] * 3)(x, i64(1), i64(3))[0]
    assert np.shares_memory(y, x) and y.flags.c_contiguous
    y = kernel_of("Slice", 13, [tt(T.FLOAT)] * 5)(x, i64(0), i64(2), i64(1), i64(1))[0]
    assert not np.shares_memory(y, x) and y.flags.c_contiguous  # strided: a contiguous copy
    a, b = kernel_of("Split", 18, [tt(T.FLOAT)], n_out=2, axis=1, num_outputs=2)(x)
    assert a.flags.c_contiguous and b.flags.c_contiguous and a.shape == (4, 2) and b.shape == (4, 1)


def test_identity_sequence_is_a_new_list():
    seq = [data((2,))]
    out = kernel_of("Identity", 16, [None])(seq)[0]
    assert out == seq and out is not seq and out[0] is seq[0]


def test_builders_decline():
    # wrap mode before Pad-19, Range over float16 before Range-27, an unknown DepthToSpace mode, sequence inputs
    assert kernel_of("Pad", 18, [tt(T.FLOAT), tt(T.INT64)], mode="wrap") is None
    assert kernel_of("Pad", 19, [tt(T.FLOAT), tt(T.INT64)], mode="wrap") is not None
    assert kernel_of("Pad", 11, [tt(T.FLOAT), tt(T.INT64)], mode="bogus") is None
    assert kernel_of("Range", 11, [tt(T.FLOAT16)] * 3) is None
    assert kernel_of("Range", 27, [tt(T.FLOAT16)] * 3) is not None
    assert kernel_of("DepthToSpace", 13, [tt(T.FLOAT)], blocksize=2, mode="XYZ") is None
    from onnxjit.ir.types import SequenceType
    assert kernel_of("Transpose", 13, [SequenceType(tt(T.FLOAT))]) is None
    assert kernel_of("Identity", 16, [SequenceType(tt(T.FLOAT))]) is not None
