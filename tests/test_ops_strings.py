"""String tensors on the CPU provider alone: Equal (opset 19), with numpy broadcasting, against onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from conftest import make_model, native_session, ort_run, tensor  # noqa: E402


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
