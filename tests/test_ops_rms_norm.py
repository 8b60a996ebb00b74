"""CPU kernel of RMSNormalization (23) against onnxruntime: one-node models over ranks, axes (negative too),
Scale shapes (the normalized dims, fewer of them, or X's whole shape), epsilon, stash_type and the float16, float
and double dtypes, run with the fallback provider disabled (so a pass proves the Numba kernel ran)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onnxjit
from conftest import assert_all_same, feeds_of, native_session, one_node_model, ort_run

CASES = [  # x shape, axis, scale shape
    ((3, 8), -1, (8,)),
    ((3, 8), 0, (3, 8)),
    ((2, 3, 5), 1, (3, 5)),
    ((2, 3, 5), -1, (1, 5)),
    ((2, 3, 5), 1, (5,)),
    ((2, 3, 4, 5), 2, (4, 5)),
    ((2, 3, 4, 5), -4, (2, 3, 4, 5)),
    ((4, 2, 3, 1), 1, (2, 3, 1)),
]


@pytest.mark.parametrize("shape,axis,scale_shape", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_rms_norm_matches_onnxruntime(shape, axis, scale_shape, dtype):
    rng = np.random.default_rng(0)
    inputs = [("x", rng.standard_normal(shape).astype(dtype), False),
              ("scale", rng.standard_normal(scale_shape).astype(dtype), False)]
    model = one_node_model("RMSNormalization", inputs, 23, axis=axis, epsilon=1e-3)
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rms_norm_double_stash(dtype):
    rng = np.random.default_rng(1)
    inputs = [("x", (rng.standard_normal((4, 16)) * 30).astype(dtype), False),
              ("scale", rng.standard_normal(16).astype(dtype), True)]
    model = one_node_model("RMSNormalization", inputs, 23, stash_type=TensorProto.DOUBLE)
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


def test_rms_norm_scale_that_does_not_broadcast_is_a_value_error():
    inputs = [("x", np.ones((2, 3, 4), np.float32), False), ("scale", np.ones(3, np.float32), False)]
    model = one_node_model("RMSNormalization", inputs, 23)
    with pytest.raises(onnxjit.RuntimeException, match=r"RMSNormalization: Scale of shape \(3,\)") as info:
        native_session(model).run(None, feeds_of(inputs))
    assert isinstance(info.value.__cause__, ValueError)
