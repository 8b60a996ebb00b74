"""Cast / CastLike to the types the fuser does not compute in, on the CPU provider alone: float8 (saturating or
not) against onnxruntime, FLOAT8E8M0 (which onnxruntime cannot run) against onnx.reference, for each round_mode."""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import onnxjit
from conftest import kernel_options, make_model, native_session, ort_run, ref_run, tensor  # noqa: E402

VALUES = np.array([0.0, -0.0, 0.124, 0.25, -0.5, 1.1, 1.5, 3.0, 448.0, 500.0, -1e6, 3e38, 1e-40, 1.17549435e-38,
                   np.inf, -np.inf, np.nan], np.float32)


def _cast_model(src, to, opset, **attrs):
    return make_model([helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)], [tensor("x", src, [VALUES.size])],
                      [tensor("y", to, [VALUES.size])], opset=opset)


@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8_matches_onnxruntime(saturate):
    model = _cast_model(TP.FLOAT, TP.FLOAT8E4M3FN, 19, saturate=saturate)
    got = native_session(model).run(None, {"x": VALUES})[0]
    want = ort_run(model, {"x": VALUES})[0]
    assert got.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))


@pytest.mark.parametrize("src", [TP.FLOAT, TP.FLOAT16, TP.DOUBLE])
@pytest.mark.parametrize("round_mode", [None, "up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8e8m0(src, round_mode, saturate):
    attrs = {"saturate": saturate} | ({"round_mode": round_mode} if round_mode else {})
    model = _cast_model(src, TP.FLOAT8E8M0, 25, **attrs)
    x = VALUES.astype(helper.tensor_dtype_to_np_dtype(src))
    got = native_session(model).run(None, {"x": x})[0]
    want = ref_run(model, {"x": x})[0]
    assert got.dtype == ml_dtypes.float8_e8m0fnu and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))


def test_cast_to_float8e8m0_unknown_round_mode_is_not_native():
    """The CPU provider declines a round_mode the spec does not define (the session names the op it cannot run)."""
    model = _cast_model(TP.FLOAT, TP.FLOAT8E8M0, 25, round_mode="sideways")
    with pytest.raises(onnxjit.errors.NotImplemented, match="Cast"):
        onnxjit.InferenceSession(model.SerializeToString(), kernel_options(), providers=["CPUExecutionProvider"])


STRING_SOURCES = [
    (TP.FLOAT, np.array([0.1, 1.0, -2.5, -0.0, 1e20, 3.4028235e38, 1e-45, 123456789.0, np.nan, np.inf, -np.inf],
                        np.float32)),
    (TP.DOUBLE, np.array([0.1, 1 / 3, 1e-7, 2.0**70, np.nan, -np.inf], np.float64)),
    (TP.FLOAT16, np.array([0.1, 65504, 1e-7, np.nan], np.float16)),
    (TP.INT8, np.array([-128, 0, 127], np.int8)),
    (TP.UINT64, np.array([0, 2**64 - 1], np.uint64)),
    (TP.INT64, np.array([-(2**63), 5], np.int64)),
    (TP.BOOL, np.array([True, False])),
    (TP.STRING, np.array(["a", "", "1.5"], dtype=object)),
]


@pytest.mark.parametrize("src,x", STRING_SOURCES, ids=[TP.DataType.Name(s) for s, _ in STRING_SOURCES])
@pytest.mark.parametrize("op", ["Cast", "CastLike"])
def test_cast_to_string_matches_onnxruntime(op, src, x):
    """Numbers written as onnxruntime writes them ("%.8g", NaN/INF, booleans as 1/0), not as numpy does."""
    if op == "Cast":
        node = helper.make_node("Cast", ["x"], ["y"], to=TP.STRING)
        inputs, feeds = [tensor("x", src, [x.size])], {"x": x}
    else:
        node = helper.make_node("CastLike", ["x", "like"], ["y"])
        inputs = [tensor("x", src, [x.size]), tensor("like", TP.STRING, [1])]
        feeds = {"x": x, "like": np.array(["z"], dtype=object)}
    model = make_model([node], inputs, [tensor("y", TP.STRING, [x.size])], opset=21)
    got = native_session(model).run(None, feeds)[0]
    want = ort_run(model, feeds)[0]
    assert got.dtype == object and got.tolist() == want.tolist()
