"""The elementwise ops over types the fuser does not compute in, on the CPU provider alone: Equal and Where over
strings (against onnxruntime), IsNaN and IsInf over float8 (against onnx.reference)."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from conftest import make_model, native_session, ort_run, ref_run, tensor  # noqa: E402


@pytest.mark.parametrize("shape_a,shape_b", [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((0, 3), (3,))])
def test_string_equal(shape_a, shape_b):
    rng = np.random.default_rng(0)
    words = np.array(["", "a", "ab", "b", "é", "a\\0"], dtype=object)
    a = rng.choice(words, size=shape_a)
    b = rng.choice(words, size=shape_b)
    model = make_model([helper.make_node("Equal", ["a", "b"], ["y"])],
                       [tensor("a", TP.STRING, shape_a), tensor("b", TP.STRING, shape_b)],
                       [tensor("y", TP.BOOL, None)], opset=19)
    got = native_session(model).run(None, {"a": a, "b": b})[0]
    want = ort_run(model, {"a": a, "b": b})[0]
    assert got.dtype == np.bool_ and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [9, 16])
def test_string_where(opset):
    rng = np.random.default_rng(1)
    c = rng.random((2, 3)) > 0.5
    x = np.array([["a", "b", "c"], ["d", "", "f"]], dtype=object)
    y = np.array(["x", "y", "zz"], dtype=object)
    model = make_model([helper.make_node("Where", ["c", "x", "y"], ["o"])],
                       [tensor("c", TP.BOOL, [2, 3]), tensor("x", TP.STRING, [2, 3]), tensor("y", TP.STRING, [3])],
                       [tensor("o", TP.STRING, None)], opset=opset)
    feeds = {"c": c, "x": x, "y": y}
    got = native_session(model).run(None, feeds)[0]
    want = ort_run(model, feeds)[0]
    assert got.dtype == object and got.tolist() == want.tolist()


F8_VALUES = np.array([0.0, -0.0, 1.5, -448.0, np.inf, -np.inf, np.nan, 1e-3], np.float32)


@pytest.mark.parametrize("elem", [TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ],
                         ids=["e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz"])
@pytest.mark.parametrize("op,attrs", [("IsNaN", {}), ("IsInf", {}), ("IsInf", {"detect_negative": 0}),
                                      ("IsInf", {"detect_positive": 0})])
def test_isnan_isinf_float8(elem, op, attrs):
    """onnxruntime's Python API cannot feed float8, so onnx.reference is the oracle (infinities become NaN or
    saturate in the formats without them, as ml_dtypes converts)."""
    x = F8_VALUES.astype(helper.tensor_dtype_to_np_dtype(elem))
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", elem, [x.size])],
                       [tensor("y", TP.BOOL, [x.size])], opset=20)
    got = native_session(model).run(None, {"x": x})[0]
    want = ref_run(model, {"x": x})[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)
