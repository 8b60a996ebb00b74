"""Constant runs on the CPU provider for every attribute form, matching onnxruntime."""
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxjit

from conftest import kernel_options  # noqa: E402

NATIVE = kernel_options()

FORMS = [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3)), TensorProto.FLOAT, 13),
    ("value_float", 2.5, TensorProto.FLOAT, 13),
    ("value_floats", [1.0, -2.0], TensorProto.FLOAT, 13),
    ("value_int", 7, TensorProto.INT64, 13),
    ("value_ints", [3, 4, 5], TensorProto.INT64, 13),
    ("value_string", "hello", TensorProto.STRING, 13),
    ("value_strings", ["a", "bc"], TensorProto.STRING, 13),
    ("sparse_value", helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "v"),
                                               numpy_helper.from_array(np.array([1, 4], np.int64), "i"), [2, 3]),
     TensorProto.FLOAT, 13),
]


@pytest.mark.parametrize("attr,value,elem,opset", FORMS, ids=[f[0] for f in FORMS])
def test_constant_forms(attr, value, elem, opset):
    node = helper.make_node("Constant", [], ["y"], **{attr: value})
    g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10).SerializeToString()
    sess = onnxjit.InferenceSession(model, NATIVE)
    got = sess.run(None, {})[0]
    if attr == "sparse_value":  # onnxruntime and onnx.reference hand back sparse objects; the spec's is dense
        want = np.zeros(6, np.float32)
        want[[1, 4]] = [1.5, 2.5]
        want = want.reshape(2, 3)
    else:
        want = onnxruntime.InferenceSession(model).run(None, {})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert [s.provider for s in sess._compiled.steps] == ["CPUExecutionProvider"]
