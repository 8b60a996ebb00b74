"""CPU kernels of the indexing ops (Gather, GatherElements, GatherND, ScatterElements, Scatter, ScatterND, TopK,
CumSum, OneHot, NonZero, Unique, Compress) against onnxruntime: one-node models over dtypes, attributes, input
variants and opset versions.

Every model runs with the fallback provider disabled and each step is checked to be on CPUExecutionProvider, so a
pass proves the CPU kernel ran. Outputs must match exactly (dtype, shape and values; NaN equal to NaN). Where
onnxruntime has no kernel for a case (bfloat16, complex, some integer dtypes, opsets past 26), onnx's reference
evaluator is the oracle.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxjit
from conftest import kernel_options, native_session as cpu_session  # noqa: E402
import onnxjit.ops.indexing  # noqa: F401  (registers the ops, as onnxjit.ops will)
from onnxjit.errors import OnnxJitError

CPU = "CPUExecutionProvider"
ORT_MAX_OPSET = 26
ort.set_default_logger_severity(3)
BF16 = np.dtype(ml_dtypes.bfloat16)
STR = np.dtype(object)
ALL_DTYPES = [np.dtype(d) for d in (np.float32, np.float64, np.float16, BF16, np.int8, np.int16, np.int32,
                                    np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64,
                                    np.complex128, STR)]
REAL_DTYPES = [d for d in ALL_DTYPES if d.kind in "iuf" or d == BF16]
INT64 = TensorProto.INT64


def _elem(dt) -> int:
    dt = np.dtype(dt)
    return TensorProto.STRING if dt.kind in "OU" else helper.np_dtype_to_tensor_dtype(dt)


def _ids(dts):
    return [np.dtype(d).name if np.dtype(d) != STR else "string" for d in dts]


def arr(shape, dt, seed=0, lo=0, hi=10):
    """Small values of dtype dt (strings: their decimal spelling; bool: a mix)."""
    dt = np.dtype(dt)
    v = np.random.default_rng(seed).integers(lo, hi, size=shape)
    if dt == STR:
        return np.array([f"s{x}" for x in v.reshape(-1)], dtype=object).reshape(shape)
    if dt.kind == "b":
        return (v % 2).astype(bool)
    if dt.kind == "c":
        return (v + 1j * (v % 3)).astype(dt)
    if dt.kind == "u":
        v = np.abs(v)
    return v.astype(dt)


def make_model(op, inputs, opset, out_types, **attrs):
    """One-node model. `inputs`: (name, array, is_initializer) in node order; a None array is an absent input."""
    names, vis, inits = [], [], []
    for name, a, is_init in inputs:
        if a is None:
            names.append("")
            continue
        names.append(name)
        if is_init:
            inits.append(helper.make_tensor(name, _elem(a.dtype), a.shape,
                                            vals=a.reshape(-1).tolist() if a.dtype == STR else a.reshape(-1)))
        else:
            vis.append(helper.make_tensor_value_info(name, _elem(a.dtype), a.shape))
    outs = [helper.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)]
    node = helper.make_node(op, names, [o.name for o in outs], **attrs)
    graph = helper.make_graph([node], "g", vis, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)



def expected(model, feeds, opset):
    """onnxruntime's outputs, or onnx.reference's where onnxruntime has no kernel for the case. Past the opsets
    onnxruntime knows, the model runs at its newest: the ops here changed only their type lists since."""
    if opset > ORT_MAX_OPSET:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.opset_import[0].version = ORT_MAX_OPSET
    try:
        return ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if not any(s in msg for s in ("NOT_IMPLEMENTED", "Could not find an implementation", "not supported",
                                      "can't be converted", "not currently registered", "INVALID_GRAPH")):
            raise
    if opset > ORT_MAX_OPSET:
        model.opset_import[0].version = opset
    return onnx.reference.ReferenceEvaluator(model).run(None, feeds)


def expected_via(op, inputs, opset, out_types, casts, out_dtypes, **attrs):
    """The oracle's outputs for the inputs cast to `casts` (name -> dtype, an order- and value-preserving widening
    onnxruntime has a kernel for), cast back to `out_dtypes`."""
    cast = [(n, a if n not in casts or a is None else a.astype(casts[n]), i) for n, a, i in inputs]
    types = [_elem(casts[f"y{j}"]) if f"y{j}" in casts else t for j, t in enumerate(out_types)]
    model = make_model(op, cast, opset, types, **attrs)
    outs = expected(model, {n: a for n, a, i in cast if a is not None and not i}, opset)
    return [o.astype(d) for o, d in zip(outs, out_dtypes)]


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind == "U":
            w = w.astype(object)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype == BF16:
            g, w = g.astype(np.float32), w.astype(np.float32)
        if g.dtype.kind in "fc":
            np.testing.assert_array_equal(g, w)  # NaN equals NaN here
        else:
            assert np.array_equal(g, w), (g, w)


def check(op, inputs, opset, out_types, want=None, **attrs):
    """Run the one-node model on onnxjit's CPU provider and compare with `want`, or else the oracle's outputs."""
    model = make_model(op, inputs, opset, out_types, **attrs)
    feeds = {name: a for name, a, is_init in inputs if a is not None and not is_init}
    got = cpu_session(model).run(None, feeds)
    assert_same(got, want if want is not None else expected(model, feeds, opset))
    return got


def declined(op, inputs, opset, out_types, **attrs) -> bool:
    """Whether the CPU provider refuses the node (session creation fails with the fallback disabled)."""
    model = make_model(op, inputs, opset, out_types, **attrs)
    so = kernel_options()
    try:
        onnxjit.InferenceSession(model.SerializeToString(), so, providers=[CPU])
    except Exception:  # noqa: BLE001
        return True
    return False


def run_error(op, inputs, opset, out_types, **attrs):
    model = make_model(op, inputs, opset, out_types, **attrs)
    feeds = {name: a for name, a, is_init in inputs if a is not None and not is_init}
    with pytest.raises(OnnxJitError):
        cpu_session(model).run(None, feeds)


# --- Gather ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_gather_dtypes(dt):
    x = arr((3, 4), dt)
    check("Gather", [("x", x, False), ("i", np.array([[0, -1], [2, 1]], np.int64), False)], 13, [_elem(dt)], axis=1)


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis,ishape,ind_dt", [(0, (2,), np.int64), (1, (), np.int32), (-1, (2, 3), np.int32),
                                               (-3, (1, 1), np.int64), (2, (0,), np.int64)])
def test_gather_variants(opset, axis, ishape, ind_dt):
    x = arr((2, 3, 4), np.float32)
    n = x.shape[axis]
    idx = np.random.default_rng(1).integers(-n, n, size=ishape).astype(ind_dt)
    check("Gather", [("x", x, False), ("i", idx, False)], opset, [TensorProto.FLOAT], axis=axis)


def test_gather_initializer_indices_and_scalar_string():
    x = arr((5,), STR)
    check("Gather", [("x", x, False), ("i", np.array(-2, np.int64), True)], 13, [TensorProto.STRING])


@pytest.mark.parametrize("shape,axis,index", [((3, 5, 1, 4), 0, -1), ((1, 3, 4), 1, 2), ((1, 1, 5), 2, 0),
                                              ((0, 3), 1, 1), ((1, 3), 1, [2]), ((4, 2), 0, [[1]])])
def test_gather_one_index_behind_unit_dims(shape, axis, index):
    """One index (a scalar or a one-element tensor) behind dims of size 1 (q, k and v taken from a stacked
    projection, a column of a one-row batch) is a block of the input, which the kernel hands out as a view: values
    and shapes as onnxruntime's, an out-of-range index still an error."""
    x = arr(shape, np.float32)
    check("Gather", [("x", x, False), ("i", np.array(index, np.int64), True)], 13, [TensorProto.FLOAT], axis=axis)
    run_error("Gather", [("x", x, False), ("i", np.array(shape[axis], np.int64), False)], 13, [TensorProto.FLOAT],
              axis=axis)


def test_gather_constant_indices_checked_per_size():
    """Constant indices (a column selection) are checked once per size of the gathered dim, not per run: runs
    over two sizes match onnxruntime, repeated; a size the indices fall outside of still raises."""
    from onnx import numpy_helper
    idx = numpy_helper.from_array(np.array([0, -1, 2], np.int64), "i")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [idx]),
        opset_imports=[helper.make_opsetid("", 13)])
    sess = cpu_session(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 5, 3, 5):
        x = arr((2, n), np.float32)
        assert_same(sess.run(None, {"x": x}), ref.run(None, {"x": x}))
    with pytest.raises(OnnxJitError, match="out of data bounds"):
        sess.run(None, {"x": arr((2, 2), np.float32)})


def test_gather_out_of_range():
    run_error("Gather", [("x", arr((4,), np.float32), False), ("i", np.array([4], np.int64), False)], 13,
              [TensorProto.FLOAT])
    run_error("Gather", [("x", arr((4,), np.float32), False), ("i", np.array([-5], np.int64), False)], 13,
              [TensorProto.FLOAT])


# --- GatherElements ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_gather_elements_dtypes(dt):
    idx = np.array([[0, -1, 2], [1, 1, -3]], np.int64)
    check("GatherElements", [("x", arr((2, 3), dt), False), ("i", idx, False)], 13, [_elem(dt)], axis=1)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis,ishape,ind_dt", [(0, (4, 3, 2), np.int64), (1, (2, 5, 4), np.int32),
                                               (-1, (1, 2, 6), np.int64), (2, (2, 3, 0), np.int64)])
def test_gather_elements_variants(opset, axis, ishape, ind_dt):
    x = arr((2, 3, 4), np.float64)
    n = x.shape[axis]
    idx = np.random.default_rng(2).integers(-n, n, size=ishape).astype(ind_dt)
    check("GatherElements", [("x", x, False), ("i", idx, False)], opset, [TensorProto.DOUBLE], axis=axis)


# --- GatherND ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_gather_nd_dtypes(dt):
    idx = np.array([[[0, -1]], [[1, 0]]], np.int64)
    check("GatherND", [("x", arr((2, 3, 2), dt), False), ("i", idx, False)], 13, [_elem(dt)], batch_dims=1)


# batch_dims arrived in GatherND-12: opset 11 cases with batch_dims are not generated
@pytest.mark.parametrize("opset,ishape,batch_dims", [
    (o, i, b) for o in (11, 12, 13)
    for i, b in [((4, 1), 0), ((2, 2), 0), ((3, 3), 0), ((2, 2, 0), 0), ((2, 3, 1), 1), ((2, 2), 1), ((2, 3, 1), 2),
                 ((2, 3, 2, 1), 2)] if not (b and o < 12)])
def test_gather_nd_variants(opset, ishape, batch_dims):
    x = arr((2, 3, 4), np.float32)
    m = ishape[-1]
    dims = x.shape[batch_dims:batch_dims + m]
    rng = np.random.default_rng(3)
    idx = np.stack([rng.integers(-d, d, size=ishape[:-1]) for d in dims], axis=-1) if m else \
        np.zeros(ishape, np.int64)
    attrs = {"batch_dims": batch_dims} if opset >= 12 else {}
    check("GatherND", [("x", x, False), ("i", idx.astype(np.int64), False)], opset, [TensorProto.FLOAT], **attrs)


def test_gather_nd_out_of_range():
    run_error("GatherND", [("x", arr((2, 3), np.float32), False), ("i", np.array([[2]], np.int64), False)], 13,
              [TensorProto.FLOAT])


# --- ScatterElements / Scatter / ScatterND -----------------------------------------------------------------------
def _red_ok(dt, red):
    dt = np.dtype(dt)
    if red in ("mul", "max", "min") and dt == STR:
        return False
    return not (red in ("max", "min") and dt.kind in "bc")


SCATTER_CASES = [(dt, red) for red in ("none", "add", "mul", "max", "min") for dt in ALL_DTYPES if _red_ok(dt, red)]


@pytest.mark.parametrize("dt,red", SCATTER_CASES, ids=[f"{i}-{r}" for (_, r), i in
                                                       zip(SCATTER_CASES, _ids([c[0] for c in SCATTER_CASES]))])
def test_scatter_elements_dtypes(dt, red):
    x = arr((3, 4), dt, seed=4, lo=-3, hi=5)
    idx = np.array([[1, -1, 0], [1, 3, 0]], np.int64)  # repeats: updates apply in order
    upd = arr((2, 3), dt, seed=5, lo=-3, hi=5)
    check("ScatterElements", [("x", x, False), ("i", idx, False), ("u", upd, False)], 18, [_elem(dt)], axis=1,
          reduction=red)


@pytest.mark.parametrize("dt,red", SCATTER_CASES, ids=[f"{i}-{r}" for (_, r), i in
                                                       zip(SCATTER_CASES, _ids([c[0] for c in SCATTER_CASES]))])
def test_scatter_nd_dtypes(dt, red):
    x = arr((3, 2, 2), dt, seed=6, lo=-3, hi=5)
    idx = np.array([[[1, 0]], [[-1, 1]], [[1, 0]]], np.int64)  # (3, 1, 2): slices of shape (2,), one repeated
    upd = arr((3, 1, 2), dt, seed=7, lo=-3, hi=5)
    check("ScatterND", [("x", x, False), ("i", idx, False), ("u", upd, False)], 18, [_elem(dt)], reduction=red)


@pytest.mark.parametrize("op,opset", [("ScatterElements", 11), ("ScatterElements", 13), ("ScatterElements", 16),
                                      ("Scatter", 9), ("Scatter", 10)])
@pytest.mark.parametrize("axis,ishape", [(0, (2, 3)), (1, (3, 2)), (-1, (1, 5)), (0, (0, 2))])
def test_scatter_elements_variants(op, opset, axis, ishape):
    x = arr((3, 4), np.float32)
    n = x.shape[axis]
    idx = np.random.default_rng(8).integers(-n, n, size=ishape).astype(np.int32)
    upd = arr(ishape, np.float32, seed=9)
    attrs = {"reduction": "add"} if opset == 16 else {}
    check(op, [("x", x, False), ("i", idx, False), ("u", upd, False)], opset, [TensorProto.FLOAT], axis=axis,
          **attrs)


def test_scatter_max_min_nan():
    x = np.array([np.nan, 1, 2, 3], np.float32)
    idx = np.array([0, 1, 2, 2], np.int64)
    upd = np.array([5, np.nan, 1, 7], np.float32)
    for red in ("max", "min"):
        for dt in (np.float32, np.float16, np.float64):
            check("ScatterElements", [("x", x.astype(dt), False), ("i", idx, False), ("u", upd.astype(dt), False)],
                  18, [_elem(dt)], reduction=red)
        check("ScatterND", [("x", x, False), ("i", idx[:, None], False), ("u", upd, False)], 18,
              [TensorProto.FLOAT], reduction=red)


def test_scatter_reductions_wrap_and_round():
    x = np.array([100, -100, 7], np.int8)
    idx = np.array([0, 0, 1, 2], np.int64)
    upd = np.array([100, 27, -100, 100], np.int8)
    for red in ("add", "mul"):
        check("ScatterElements", [("x", x, False), ("i", idx, False), ("u", upd, False)], 16, [TensorProto.INT8],
              reduction=red)
    f = np.array([0.1, 0.2], np.float32)
    check("ScatterElements", [("x", f, False), ("i", np.zeros(5, np.int64), False),
                              ("u", np.full(5, 0.1, np.float32), False)], 16, [TensorProto.FLOAT], reduction="add")


@pytest.mark.parametrize("opset", [11, 13, 16, 18])
@pytest.mark.parametrize("xshape,ishape", [((4, 3), (2, 1)), ((4, 3), (3, 2)), ((2, 3, 4), (2, 2, 2)),
                                           ((3,), (1, 0)), ((4, 3), (0, 1))])
def test_scatter_nd_variants(opset, xshape, ishape):
    x = arr(xshape, np.int64)
    k = ishape[-1]
    rng = np.random.default_rng(10)
    idx = np.stack([rng.integers(-d, d, size=ishape[:-1]) for d in xshape[:k]], axis=-1) if k else \
        np.zeros(ishape, np.int64)
    upd = arr(ishape[:-1] + xshape[k:], np.int64, seed=11)
    attrs = {"reduction": "mul"} if opset >= 16 else {}
    check("ScatterND", [("x", x, False), ("i", idx.astype(np.int64), False), ("u", upd, False)], opset, [INT64],
          **attrs)


def test_scatter_declines():
    x, i, u = ("x", arr((3,), STR), False), ("i", np.array([0], np.int64), False), ("u", arr((1,), STR), False)
    assert declined("ScatterElements", [x, i, u], 18, [TensorProto.STRING], reduction="mul")
    b = ("x", arr((3,), bool), False), i, ("u", arr((1,), bool), False)
    assert declined("ScatterND", [b[0], ("i", np.array([[0]], np.int64), False), b[2]], 18, [TensorProto.BOOL],
                    reduction="max")
    f = ("x", arr((3,), np.float32), False), i, ("u", arr((1,), np.float32), False)
    assert declined("ScatterElements", list(f), 18, [TensorProto.FLOAT], reduction="sum")
    assert not declined("ScatterElements", list(f), 18, [TensorProto.FLOAT], reduction="max")


def test_scatter_out_of_range():
    run_error("ScatterElements", [("x", arr((4,), np.float32), False), ("i", np.array([4], np.int64), False),
                                  ("u", arr((1,), np.float32), False)], 18, [TensorProto.FLOAT])
    run_error("ScatterND", [("x", arr((4,), np.float32), False), ("i", np.array([[-5]], np.int64), False),
                            ("u", arr((1,), np.float32), False)], 18, [TensorProto.FLOAT])


# --- TopK --------------------------------------------------------------------------------------------------------
TOPK_DTYPES = [d for d in REAL_DTYPES]


@pytest.mark.parametrize("dt", TOPK_DTYPES, ids=_ids(TOPK_DTYPES))
def test_topk_dtypes(dt):
    x = arr((3, 7), dt, seed=12, lo=0, hi=4)  # ties: the lower index comes first
    opset = 24 if dt == BF16 else 11
    for largest in (1, 0):
        check("TopK", [("x", x, False), ("k", np.array([3], np.int64), False)], opset, [_elem(dt), INT64],
              largest=largest)


# TopK-1 needs k > 0: its k == 0 case is not generated
@pytest.mark.parametrize("opset,shape,axis,k", [
    (o, s, a, k) for o in (1, 10, 11, 24)
    for s, a, k in [((9,), 0, 1), ((2, 9), -1, 3), ((9, 2), 0, 5), ((2, 40, 3), 1, 30), ((3, 5), 1, 5),
                    ((3, 5), 0, 0), ((2, 70), 1, 20)] if not (o < 10 and k == 0)])
def test_topk_variants(opset, shape, axis, k):
    x = arr(shape, np.float32, seed=13, lo=0, hi=6)
    inputs = [("x", x, False)] + ([] if opset < 10 else [("k", np.array([k], np.int64), True)])
    attrs = {"k": k} if opset < 10 else {}
    variants = [{}] if opset < 11 else [dict(largest=lg, sorted=s) for lg in (0, 1) for s in (0, 1)]
    for v in variants:  # sorted=0: the order onnxruntime leaves (heap or nth_element)
        check("TopK", inputs, opset, [TensorProto.FLOAT, INT64], axis=axis, **attrs, **v)


def test_topk_nan_and_unsorted_orders():
    rng = np.random.default_rng(14)
    for n, dt in [(12, np.float32), (33, np.float64), (200, np.float32), (64, np.float16)]:
        x = rng.integers(0, 5, size=(2, n)).astype(dt)
        x[rng.random(x.shape) < 0.25] = np.nan
        for k in sorted({1, 2, 3, 5, n // 2, n - 1, n}):
            for lg in (0, 1):
                for s in (0, 1):
                    check("TopK", [("x", x, False), ("k", np.array([k], np.int64), False)], 11,
                          [_elem(dt), INT64], largest=lg, sorted=s)


def test_topk_errors():
    x = ("x", arr((4,), np.float32), False)
    run_error("TopK", [x, ("k", np.array([5], np.int64), False)], 11, [TensorProto.FLOAT, INT64])
    run_error("TopK", [x, ("k", np.array([-1], np.int64), False)], 11, [TensorProto.FLOAT, INT64])
    assert declined("TopK", [x], 1, [TensorProto.FLOAT, INT64])  # TopK-1 without k


# --- CumSum ------------------------------------------------------------------------------------------------------
CUMSUM_DTYPES = [np.dtype(d) for d in (np.float32, np.float64, np.float16, BF16, np.int32, np.int64, np.uint32,
                                       np.uint64)]


@pytest.mark.parametrize("dt", CUMSUM_DTYPES, ids=_ids(CUMSUM_DTYPES))
def test_cumsum_dtypes(dt):
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((3, 5)) * 100).astype(dt) if dt.kind == "f" or dt == BF16 else arr((3, 5), dt)
    inputs = [("x", x, False), ("a", np.array(1, np.int64), False)]
    for exclusive in (0, 1):
        for reverse in (0, 1):
            # bfloat16 sums in float32, as onnxruntime does float16
            want = expected_via("CumSum", inputs, 14, [_elem(dt)], {"x": np.float32, "y0": np.float32}, [dt],
                                exclusive=exclusive, reverse=reverse) if dt == BF16 else None
            check("CumSum", inputs, 14, [_elem(dt)], want=want, exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("opset", [11, 14])
@pytest.mark.parametrize("axis", [np.array(0, np.int32), np.array([-1], np.int64), np.array([1], np.int32),
                                  np.array(-3, np.int64)])
def test_cumsum_axis_forms(opset, axis):
    x = arr((2, 3, 4), np.int32, lo=-1000, hi=1000)
    x[0, 0, 0] = np.iinfo(np.int32).max  # wraps, as in onnxruntime
    for exclusive, reverse in ((0, 0), (1, 0), (0, 1), (1, 1)):
        check("CumSum", [("x", x, False), ("a", axis, True)], opset, [TensorProto.INT32], exclusive=exclusive,
              reverse=reverse)


# --- OneHot ------------------------------------------------------------------------------------------------------
ONEHOT_DTYPES = [np.dtype(d) for d in (np.float32, np.float16, np.int32, np.int64, np.uint8, np.float64, np.int8)]


@pytest.mark.parametrize("vt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_onehot_value_dtypes(vt):
    values = arr((2,), vt, seed=16)
    if vt != STR and values[0] == values[1]:
        values = np.array([0, 1]).astype(vt)
    inputs = [("i", np.array([[1, -1], [3, -4]], np.int64), False), ("d", np.array(3, np.int64), False),
              ("v", values, False)]
    opset = 28 if vt == BF16 else 11
    want = None
    if vt == BF16 or vt.kind == "b":  # no kernel in onnxruntime, the reference fails on bool
        wide = np.float32 if vt == BF16 else np.int64
        want = expected_via("OneHot", inputs, opset, [_elem(vt)], {"v": wide, "y0": wide}, [vt])
    check("OneHot", inputs, opset, [_elem(vt)], want=want)


@pytest.mark.parametrize("it", ONEHOT_DTYPES, ids=_ids(ONEHOT_DTYPES))
@pytest.mark.parametrize("dt", ONEHOT_DTYPES, ids=_ids(ONEHOT_DTYPES))
def test_onehot_index_depth_dtypes(it, dt):
    ind = np.array([0, 2, 1, 5] if it.kind == "u" else [0, -1, 2, -3, 4], it)
    inputs = [("i", ind, False), ("d", np.array([3], dt), False), ("v", np.array([0, 1], np.float32), False)]
    # whole-number indices: onnxruntime's int64/int64 kernel gives what every index/depth dtype must
    want = expected_via("OneHot", inputs, 11, [TensorProto.FLOAT], {"i": np.int64, "d": np.int64}, [np.float32])
    check("OneHot", inputs, 11, [TensorProto.FLOAT], want=want)


@pytest.mark.parametrize("opset", [9, 11, 28])
@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -3])
def test_onehot_axis(opset, axis):
    ind = np.array([[1, 0, 3], [2, -1, 1]], np.int64) if opset > 9 else np.array([[1, 0, 3], [2, 5, 1]], np.int64)
    check("OneHot", [("i", ind, False), ("d", np.array(4.0, np.float32), True),
                     ("v", np.array([-2, 7], np.int64), True)], opset, [INT64], axis=axis)


def test_onehot_fractional_indices_and_depth():
    # float indices and depth are cast to int64 (truncated) before use, as the spec says (onnxruntime >= 1.32)
    ind = np.array([-1.5, 0.7, 2.9, 3.0, -3.2, -4.0, 1.0, -1.0, 0.0, np.nan, np.inf, -np.inf, 3.9, -3.9], np.float32)
    check("OneHot", [("i", ind, False), ("d", np.array(3.7, np.float32), False),
                     ("v", np.array([0, 1], np.float32), False)], 11, [TensorProto.FLOAT])


# --- NonZero -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_nonzero_dtypes(dt):
    x = arr((3, 4), dt, seed=17, lo=0, hi=3)
    if dt == STR:
        x[x == "s0"] = ""
    check("NonZero", [("x", x, False)], 13, [INT64])


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("x", [np.array(3.0, np.float32), np.array(0.0, np.float32), np.zeros((2, 0, 3), np.float32),
                               np.array([np.nan, -0.0, 0.0, 1.0], np.float32), np.zeros((2, 3), np.float32)],
                         ids=["scalar", "zero-scalar", "empty", "nan-negzero", "all-zero"])
def test_nonzero_shapes(opset, x):
    check("NonZero", [("x", x, False)], opset, [INT64])


# --- Unique ------------------------------------------------------------------------------------------------------
U_OUTS = [INT64, INT64, INT64]


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_unique_dtypes(dt):
    x = arr((4, 3), dt, seed=18, lo=0, hi=4)
    opset = 28 if dt == BF16 else 11
    inputs = [("x", x, False)]
    types = [_elem(dt)] + U_OUTS
    for attrs in (dict(sorted=1), dict(sorted=0), dict(sorted=1, axis=1), dict(sorted=0, axis=1)):
        want = None
        if dt.kind in "iub" and dt not in (np.int8, np.int64):  # no kernel in onnxruntime: widen
            want = expected_via("Unique", inputs, opset, types, {"x": np.int64, "y0": np.int64},
                                [dt] + [np.int64] * 3, **attrs)
        elif dt == BF16:
            want = expected_via("Unique", inputs, opset, types, {"x": np.float32, "y0": np.float32},
                                [dt] + [np.int64] * 3, **attrs)
        elif dt.kind == "c" and attrs["sorted"] == 0:  # the reference's unsorted Unique fails: reorder sorted
            y, first, inv, counts = expected(make_model("Unique", inputs, opset, types, sorted=1,
                                                        **{k: v for k, v in attrs.items() if k == "axis"}),
                                             {"x": x}, opset)
            perm = np.argsort(first, kind="stable")
            rank = np.empty_like(perm)
            rank[perm] = np.arange(perm.size)
            want = [np.take(y, perm, axis=attrs.get("axis", 0)), first[perm], rank[inv], counts[perm]]
        check("Unique", inputs, opset, types, want=want, **attrs)


@pytest.mark.parametrize("opset", [11, 28])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
@pytest.mark.parametrize("n_out", [1, 2, 4])
def test_unique_variants(opset, axis, n_out):
    x = arr((3, 4, 2), np.int64, seed=19, lo=0, hi=2)
    x[1] = x[0]
    attrs = {} if axis is None else {"axis": axis}
    for s in (1, 0):
        check("Unique", [("x", x, False)], opset, ([INT64] + U_OUTS)[:n_out], sorted=s, **attrs)


@pytest.mark.parametrize("x,axis", [(np.zeros((0,), np.float32), None), (np.zeros((2, 0), np.float32), 1),
                                    (np.array(5.0, np.float32), None)], ids=["empty", "empty-axis", "scalar"])
def test_unique_edges(x, axis):
    attrs = {} if axis is None else {"axis": axis}
    check("Unique", [("x", x, False)], 11, [TensorProto.FLOAT] + U_OUTS, **attrs)


def test_unique_empty_slices():
    # onnxruntime crashes on this one: the slices are all empty, hence all equal
    want = [np.zeros((1, 0), np.float32), np.array([0]), np.array([0, 0, 0]), np.array([3])]
    check("Unique", [("x", np.zeros((3, 0), np.float32), False)], 11, [TensorProto.FLOAT] + U_OUTS, want=want,
          axis=0)


def test_unique_nan_and_signed_zero():
    # onnxruntime keeps keys in a std::map: with NaN among them what counts as equal follows the tree's shape
    rng = np.random.default_rng(20)
    for trial in range(12):
        x = rng.integers(0, 5, size=int(rng.integers(1, 30))).astype(np.float32)
        x[rng.random(x.shape) < 0.3] = np.nan
        x[rng.random(x.shape) < 0.2] = -0.0
        x2 = rng.integers(0, 3, size=(int(rng.integers(1, 20)), 2)).astype(np.float64)
        x2[rng.random(x2.shape) < 0.2] = np.nan
        for s in (0, 1):
            check("Unique", [("x", x, False)], 11, [TensorProto.FLOAT] + U_OUTS, sorted=s)
            check("Unique", [("x", x2, False)], 11, [TensorProto.DOUBLE] + U_OUTS, sorted=s, axis=0)
            check("Unique", [("x", x.astype(np.float16), False)], 11, [TensorProto.FLOAT16] + U_OUTS, sorted=s)


# --- Compress ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=_ids(ALL_DTYPES))
def test_compress_dtypes(dt):
    x = arr((3, 4), dt, seed=21)
    cond = np.array([1, 0, 1], bool)
    opset = 28 if dt == BF16 else 11
    check("Compress", [("x", x, False), ("c", cond, False)], opset, [_elem(dt)], axis=0)
    check("Compress", [("x", x, False), ("c", np.array([0, 1, 1, 0, 1], bool), False)], opset, [_elem(dt)])


# negative axis arrived in Compress-11: opset 9 cases with one are not generated
@pytest.mark.parametrize("opset,axis,cond", [
    (o, a, c) for o in (9, 11, 28)
    for a, c in [(None, [1, 0, 1]), (None, [1] * 30), (0, [0, 1]), (1, [1, 0, 1, 1, 1, 1]), (-1, [0, 0]), (2, [1, 1]),
                 (None, [])] if not (o < 11 and a is not None and a < 0)])
def test_compress_variants(opset, axis, cond):
    x = arr((2, 3, 2), np.float32, seed=22)
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", [("x", x, False), ("c", np.array(cond, bool), False)], opset, [TensorProto.FLOAT], **attrs)
