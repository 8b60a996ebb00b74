"""Reference implementations of com.onnxjit LayerNormalization and SkipLayerNormalization (numpy)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx.reference.op_run import OpRun

from onnxjit.contrib import reference_op


def layer_norm_reference(x, scale, bias, axis: int, epsilon: float, stash_dtype):
    """(Y, Mean, InvStdDev) of LayerNormalization-17: statistics over the dims from `axis` on, computed in
    `stash_dtype`; Y in x's dtype."""
    axis = axis + x.ndim if axis < 0 else axis
    dims = tuple(range(axis, x.ndim))
    xs = x.astype(stash_dtype)
    mean = xs.mean(axis=dims, keepdims=True)
    centered = xs - mean
    inv_std = 1 / np.sqrt((centered * centered).mean(axis=dims, keepdims=True) + stash_dtype.type(epsilon))
    y = centered * inv_std * scale.astype(stash_dtype)
    if bias is not None:
        y = y + bias.astype(stash_dtype)
    return y.astype(x.dtype), mean, inv_std


def _stash_dtype(stash_type: int) -> np.dtype:
    return np.dtype(np.float64 if stash_type == TensorProto.DOUBLE else np.float32)


@reference_op
class LayerNormalization(OpRun):
    """LayerNormalization of ai.onnx opset 17, for models whose ai.onnx opset is older.

    Inputs: X (float tensor), Scale (broadcastable to X.shape[axis:]), B (optional, as Scale).
    Outputs: Y (X's shape and dtype); Mean and InvStdDev (optional, shape X.shape[:axis] + [1] * (rank - axis),
    dtype of stash_type).
    Attributes: axis (int, default -1): the first normalized dim; epsilon (float, default 1e-5);
    stash_type (int, default 1 = float): the precision the statistics are computed in.
    Y = (X - mean) / sqrt(var + epsilon) * Scale + B, mean and (biased) var over the dims axis..rank-1.
    """

    def _run(self, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=TensorProto.FLOAT):
        stash = _stash_dtype(stash_type)
        y, mean, inv_std = layer_norm_reference(x, scale, bias, axis, epsilon, stash)
        return y, mean.astype(stash), inv_std.astype(stash)


@reference_op
class SkipLayerNormalization(OpRun):
    """A residual add and a LayerNormalization over the last axis, as onnxruntime's com.microsoft op.

    Inputs: input, skip (float tensors of one dtype; numpy broadcasting, the sum has the output's shape), gamma
    (shape [hidden] or broadcastable to it), beta (optional, as gamma), bias (optional, shape [hidden]).
    Outputs: output (the sum's shape, input's dtype); mean and inv_std_var (optional, shape sum.shape[:-1] + [1],
    float32, float64 for double inputs); input_skip_bias_sum (optional, the sum itself).
    Attributes: epsilon (float, default 1e-5).
    sum = input + skip + bias, computed in the input dtype (bias added last); output =
    LayerNormalization(sum, gamma, beta, axis=-1, epsilon) with the statistics computed in float32 (float64 for
    double inputs).
    """

    def _run(self, x, skip, gamma, beta=None, bias=None, epsilon=1e-5):
        total = x + skip
        if bias is not None:
            total = total + bias
        stash = _stash_dtype(TensorProto.DOUBLE if x.dtype == np.float64 else TensorProto.FLOAT)
        y, mean, inv_std = layer_norm_reference(total, gamma, beta, -1, epsilon, stash)
        return y, mean, inv_std, total
