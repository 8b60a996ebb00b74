"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the CPU provider (float32/float64 input, int32/int64
target, optional class weights of the input's dtype).

Both see the input as [N, C, D] (every dim after the class axis flattened into D, a free reshape) and the target
as [N, D]. SoftmaxCrossEntropyLoss first takes the log-softmax along C (its optional second output), then both
gather -logp at the target class times its weight (onnxjit.kernels.loss), over the samples on `run_units`'
threads. Reductions follow ONNX and onnxruntime: 'none' keeps the target's shape, 'sum' adds the losses, 'mean'
divides that sum by the sum of the gathered weights (the count of targets not ignored when there are no weights).
A target outside [0, C) that is not ignore_index is a ValueError. Other dtypes (float16, bfloat16) are left to
the next provider.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from onnxjit.kernels import loss as kloss
from onnxjit.ops.nn import float_type, ro, run_units, wanted_outputs
from onnxjit.ops.registry import attr, input_tensor_types, register_op

_INDEX_TYPES = frozenset({T.INT32, T.INT64})
_REDUCTIONS = ("none", "sum", "mean")


def _as_ncd(op: str, x: np.ndarray, target: np.ndarray, weight) -> tuple:
    """x as [N, C, D], target as int64 [N, D] and the class weights [C] (ones when absent), checked."""
    if x.ndim < 2:
        raise ValueError(f"{op}: the input must have rank >= 2 [N, C, d1, ...], got shape {x.shape}")
    n, classes = x.shape[:2]
    if target.shape != (n,) + x.shape[2:]:
        raise ValueError(f"{op}: the target must have shape {(n,) + x.shape[2:]} (the input's without dim 1), "
                         f"got {target.shape}")
    if weight is None:
        weight = np.ones(classes, x.dtype)
    else:
        weight = np.asarray(weight)
        if weight.shape != (classes,) or weight.dtype != x.dtype:
            raise ValueError(f"{op}: the weight must be {x.dtype} of shape ({classes},), got {weight.dtype} "
                             f"{weight.shape}")
    inner = math.prod(x.shape[2:])
    return (ro(x.reshape(n, classes, inner)), ro(target.astype(np.int64, copy=False).reshape(n, inner)),
            ro(weight))


def _check_targets(op: str, target: np.ndarray, classes: int, ignore_index: int | None) -> None:
    bad = (target < 0) | (target >= classes)
    if ignore_index is not None:
        bad &= target != ignore_index
    if bad.any():
        raise ValueError(f"{op}: target value {int(target[bad][0])} is outside the classes [0, {classes}) "
                         f"and is not ignore_index")


def class_loss(op: str, logp: np.ndarray, target: np.ndarray, weight: np.ndarray, target_shape: tuple,
               reduction: str, ignore_index: int | None) -> np.ndarray:
    """The reduced loss of -logp[n, target[n, d], d] (logp [N, C, D], target [N, D], weight [C])."""
    n, classes, inner = logp.shape
    _check_targets(op, target, classes, ignore_index)
    loss = np.empty((n, inner), logp.dtype)
    picked_weight = np.empty((n, inner), logp.dtype)
    run_units(kloss.pick_class, (logp, target, weight, ignore_index is not None,
                                 0 if ignore_index is None else ignore_index, loss, picked_weight),
              n, n * inner * 4)
    if reduction == "none":
        return loss.reshape(target_shape)
    total = loss.sum(dtype=logp.dtype)
    if reduction == "mean":
        total = total / picked_weight.sum(dtype=logp.dtype)
    return np.asarray(total, logp.dtype)


def nll_loss(x, target, weight, reduction: str, ignore_index: int | None) -> np.ndarray:
    op = "NegativeLogLikelihoodLoss"
    x, target = np.asarray(x), np.asarray(target)
    logp, target2, weight = _as_ncd(op, x, target, weight)
    return class_loss(op, logp, target2, weight, target.shape, reduction, ignore_index)


def softmax_cross_entropy(x, target, weight, reduction: str, ignore_index: int | None) -> tuple:
    """(loss, log_prob) of SoftmaxCrossEntropyLoss."""
    op = "SoftmaxCrossEntropyLoss"
    x, target = np.asarray(x), np.asarray(target)
    x3, target2, weight = _as_ncd(op, x, target, weight)
    logp = np.empty(x3.shape, x3.dtype)
    run_units(kloss.log_softmax_classes, (x3, logp), x3.shape[0], x3.size * 8)
    loss = class_loss(op, ro(logp), target2, weight, target.shape, reduction, ignore_index)
    return loss, logp.reshape(x.shape)


def _loss_params(node):
    """(reduction, ignore_index) of a loss node this module runs, else None."""
    if len(node.inputs) < 2 or any(v is None for v in node.inputs[:2]) or float_type(node, (0, 2)) is None:
        return None
    types = input_tensor_types(node)
    if types[1] is None or types[1].elem_type not in _INDEX_TYPES:
        return None
    reduction = attr(node, "reduction", "mean")
    if reduction not in _REDUCTIONS:
        return None  # the fallback's reference names the bad attribute
    ignore_index = attr(node, "ignore_index")
    return reduction, None if ignore_index is None else int(ignore_index)


def build_nll_loss(node):
    params = _loss_params(node)
    if params is None:
        return None
    reduction, ignore_index = params

    def run(x, target, weight=None):
        return (nll_loss(x, target, weight, reduction, ignore_index),)
    return run


def build_softmax_cross_entropy(node):
    params = _loss_params(node)
    if params is None:
        return None
    reduction, ignore_index = params
    want_log_prob = wanted_outputs(node) > 1

    def run(x, target, weight=None):
        loss, log_prob = softmax_cross_entropy(x, target, weight, reduction, ignore_index)
        return (loss, log_prob) if want_log_prob else (loss,)
    return run


for _v in (12, 13, 22):
    register_op("NegativeLogLikelihoodLoss", since=_v)(build_nll_loss)
for _v in (12, 13):
    register_op("SoftmaxCrossEntropyLoss", since=_v)(build_softmax_cross_entropy)
