"""CPU kernels of NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime: one-node models over
input ranks, reductions, class weights, ignore_index (in range, negative, absent), target dtypes and the
log_prob output, run with the fallback provider disabled (so a pass proves the Numba kernels ran). A bad
target is a ValueError, which the session raises as onnxjit.RuntimeException naming the node."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import onnxjit

from conftest import assert_all_same, feeds_of, native_session, one_node_model, ort_run

SHAPES = [(3, 5), (2, 4, 3), (2, 3, 2, 3)]  # [N, C, d1, ...]
REDUCTIONS = ["none", "sum", "mean"]
IGNORE = [None, 1, -1]


def _inputs(shape, dtype, target_dtype, weighted, ignore_index, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(target_dtype)
    if ignore_index is not None:
        target.flat[::3] = ignore_index  # some targets ignored, the others not
    weight = rng.random(shape[1]).astype(dtype) + 0.5 if weighted else None
    return [("x", x, False), ("target", target, False), ("weight", weight, False)]


CASES = [(op, shape, reduction, weighted, ii)
         for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
         for shape, reduction, weighted, ii in itertools.product(SHAPES, REDUCTIONS, (False, True), IGNORE)]


@pytest.mark.parametrize("op,shape,reduction,weighted,ignore_index", CASES)
def test_loss_matches_onnxruntime(op, shape, reduction, weighted, ignore_index):
    inputs = _inputs(shape, np.float32, np.int64, weighted, ignore_index)
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    x = inputs[0][1]
    if op == "NegativeLogLikelihoodLoss":  # NLL takes log-probabilities
        inputs[0] = ("x", (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(x.dtype), False)
    model = one_node_model(op, inputs, 13, **attrs)
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("dtype,target_dtype", [(np.float64, np.int64), (np.float32, np.int32),
                                                (np.float64, np.int32)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_softmax_cross_entropy_log_prob_and_dtypes(dtype, target_dtype, reduction):
    inputs = _inputs((3, 4, 5), dtype, target_dtype, True, 2)
    model = one_node_model("SoftmaxCrossEntropyLoss", inputs, 13, n_out=2, reduction=reduction, ignore_index=2)
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("dtype,target_dtype", [(np.float64, np.int64), (np.float32, np.int32)])
@pytest.mark.parametrize("opset", [12, 13, 22])
def test_nll_loss_dtypes_and_opsets(dtype, target_dtype, opset):
    inputs = _inputs((4, 3, 2), dtype, target_dtype, True, None)
    model = one_node_model("NegativeLogLikelihoodLoss", inputs, opset, reduction="mean")
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_target_out_of_range_is_a_value_error(op):
    inputs = _inputs((2, 3), np.float32, np.int64, False, None)
    inputs[1][1][0] = 3
    model = one_node_model(op, inputs, 13, reduction="sum")
    with pytest.raises(onnxjit.RuntimeException, match=f"{op}: target value 3 is outside the classes") as info:
        native_session(model).run(None, feeds_of(inputs))
    assert isinstance(info.value.__cause__, ValueError)


def test_target_shape_mismatch_is_a_value_error():
    x = np.zeros((2, 3, 4), np.float32)
    target = np.zeros((2, 3), np.int64)
    inputs = [("x", x, False), ("target", target, False)]
    model = one_node_model("SoftmaxCrossEntropyLoss", inputs, 13)
    with pytest.raises(onnxjit.RuntimeException,
                       match=r"SoftmaxCrossEntropyLoss: the target must have shape \(2, 4\)") as info:
        native_session(model).run(None, feeds_of(inputs))
    assert isinstance(info.value.__cause__, ValueError)
