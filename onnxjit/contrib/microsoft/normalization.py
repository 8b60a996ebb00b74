"""com.microsoft normalizations (numpy references): SkipLayerNormalization, SkipSimplifiedLayerNormalization,
SimplifiedLayerNormalization, EmbedLayerNormalization.

SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> (output, mean?, inv_std_var?, input_skip_bias_sum?)
  sum = input + skip (+ bias), output = LayerNormalization(sum) over the last axis; input [B, S, H] or [T, H],
  skip of input's shape or [1, S, H] / [S, H], gamma, beta, bias [H]. Attribute epsilon (default 1e-5).
  mean and inv_std_var are float32 of shape sum.shape[:-1] + [1]. (com.onnxjit SkipLayerNormalization is this
  op; its reference is reused.)
SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) -> (output, mean?, inv_std_var?, sum?)
  the same residual sum, then RMS normalization: output = sum / sqrt(mean(sum^2) + epsilon) * gamma; onnxruntime's
  `mean` output is zeros (no mean is taken), inv_std_var = 1 / sqrt(mean(sum^2) + epsilon).
SimplifiedLayerNormalization(X, scale) -> (Y, inv_std_var?)
  RMS normalization over the dims from `axis` (default -1) on, epsilon (default 1e-5), computed in float32 (float64
  for double inputs or stash_type 11); inv_std_var has the stash_type's dtype (float32 by default) and shape
  X.shape[:axis] + [1] * (rank - axis). onnxruntime registers this op in the ai.onnx domain at version 1; it is
  here for models that name com.microsoft.
EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding, segment_embedding?, gamma,
                        beta, mask?, position_ids?) -> (output, mask_index?, embedding_sum?)
  embedding_sum = word_embedding[input_ids] + position_embedding[position_ids] (+ segment_embedding[segment_ids]),
  ids int32 [B, S]; position_ids [B, S] or [1, S] (default: 0..S-1 for every batch); output = LayerNormalization
  of the sum over H with gamma, beta, epsilon (default 1e-12); mask_index [B] int32 = the count of nonzero mask
  values in each row (0 without a mask). Ids out of their table's range raise ValueError.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx.reference.op_run import OpRun

from onnxjit.contrib import normalization as onnxjit_norm
from onnxjit.contrib.microsoft import reference_op


def check_skip_inputs(op: str, x: np.ndarray, skip: np.ndarray, params: dict) -> None:
    """onnxruntime's shape rules for the Skip*LayerNormalization family (ValueError naming op and input)."""
    if x.ndim not in (2, 3):
        raise ValueError(f"{op}: input must be 3-D [batch, sequence, hidden] or 2-D [tokens, hidden], got {x.shape}")
    if skip.shape != x.shape and skip.shape not in (x.shape[-2:], (1,) + x.shape[-2:]):
        raise ValueError(f"{op}: skip must have input's shape {x.shape} or [1, sequence, hidden], got {skip.shape}")
    for name, p in params.items():
        if p is not None and p.shape != (x.shape[-1],):
            raise ValueError(f"{op}: {name} must be 1-D [hidden] = {[x.shape[-1]]}, got {list(p.shape)}")


def inv_rms(x: np.ndarray, axis: int, epsilon: float, compute: np.dtype) -> np.ndarray:
    """1 / sqrt(mean(x^2) + epsilon) over the dims from `axis` on (kept as 1s), computed in `compute`: the
    inv_std_var output of the RMS normalizations."""
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise ValueError(f"SimplifiedLayerNormalization: axis {axis} is out of range for an input of rank {x.ndim}")
    xs = x.astype(compute, copy=False)
    return 1 / np.sqrt((xs * xs).mean(axis=tuple(range(axis, x.ndim)), keepdims=True) + compute.type(epsilon))


def rms_norm_reference(x: np.ndarray, scale: np.ndarray, axis: int, epsilon: float, compute: np.dtype):
    """(Y in x's dtype, inv_std_var in `compute`) of an RMS normalization over the dims from `axis` on."""
    inv = inv_rms(x, axis, epsilon, compute)
    return (x.astype(compute) * inv * scale.astype(compute)).astype(x.dtype), inv


@reference_op
class SkipLayerNormalization(onnxjit_norm.SkipLayerNormalization):
    __doc__ = onnxjit_norm.SkipLayerNormalization.__doc__

    def _run(self, x, skip, gamma, beta=None, bias=None, epsilon=1e-5):
        check_skip_inputs("SkipLayerNormalization", x, skip, {"gamma": gamma, "beta": beta, "bias": bias})
        return super()._run(x, skip, gamma, beta, bias, epsilon)


@reference_op
class SkipSimplifiedLayerNormalization(OpRun):
    """See the module docstring."""

    def _run(self, x, skip, gamma, bias=None, epsilon=1e-5):
        check_skip_inputs("SkipSimplifiedLayerNormalization", x, skip, {"gamma": gamma, "bias": bias})
        total = x + skip
        if bias is not None:
            total = total + bias
        total = total.astype(x.dtype)
        y, inv = rms_norm_reference(total, gamma, -1, epsilon, np.dtype(np.float32))
        return y, np.zeros_like(inv), inv, total


@reference_op
class SimplifiedLayerNormalization(OpRun):
    """See the module docstring."""

    def _run(self, x, scale, axis=-1, epsilon=1e-5, stash_type=TensorProto.FLOAT):
        stash = np.dtype(np.float64 if stash_type == TensorProto.DOUBLE else np.float32)
        compute = np.dtype(np.float64) if x.dtype == np.float64 else stash
        y, inv = rms_norm_reference(x, scale, axis, epsilon, compute)
        return y, inv.astype(stash)


def _lookup(op: str, table: np.ndarray, ids: np.ndarray, name: str) -> np.ndarray:
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"{op}: {name} must lie in [0, {table.shape[0]}), got values from {ids.min()} to "
                         f"{ids.max()}")
    return table[ids]


def embedding_sum(op: str, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
                  position_ids) -> np.ndarray:
    """EmbedLayerNormalization's embedding_sum [B, S, H] (see the module docstring)."""
    if input_ids.ndim != 2:
        raise ValueError(f"{op}: input_ids must be 2-D [batch, sequence], got {input_ids.shape}")
    batch, seq = input_ids.shape
    hidden = word_embedding.shape[-1]
    for name, table in (("position_embedding", position_embedding), ("segment_embedding", segment_embedding)):
        if table is not None and (table.ndim != 2 or table.shape[1] != hidden):
            raise ValueError(f"{op}: {name} must be 2-D [*, {hidden}], got {table.shape}")
    if position_ids is None:
        position_ids = np.arange(seq).reshape(1, seq)
    if position_ids.shape not in ((batch, seq), (1, seq)):
        raise ValueError(f"{op}: position_ids must be [{batch}, {seq}] or [1, {seq}], got {position_ids.shape}")
    total = _lookup(op, word_embedding, input_ids, "input_ids") + np.broadcast_to(
        _lookup(op, position_embedding, position_ids, "position_ids"), (batch, seq, hidden))
    if segment_embedding is not None:
        if segment_ids is None or segment_ids.shape != input_ids.shape:
            raise ValueError(f"{op}: segment_ids must be given with segment_embedding, of input_ids' shape "
                             f"{input_ids.shape}")
        total = total + _lookup(op, segment_embedding, segment_ids, "segment_ids")
    return total.astype(word_embedding.dtype)


def mask_index_of(mask, batch: int) -> np.ndarray:
    """EmbedLayerNormalization's mask_index: the count of nonzero mask values per batch row (zeros without one)."""
    if mask is None:
        return np.zeros(batch, np.int32)
    return np.count_nonzero(mask, axis=1).astype(np.int32)


@reference_op
class EmbedLayerNormalization(OpRun):
    """See the module docstring."""

    def _run(self, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None, gamma=None,
             beta=None, mask=None, position_ids=None, epsilon=1e-12, mask_index_type=1):
        op = "EmbedLayerNormalization"
        total = embedding_sum(op, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
                              position_ids)
        if mask is not None and mask.shape != input_ids.shape:
            raise ValueError(f"{op}: mask must have input_ids' shape {input_ids.shape}, got {mask.shape}")
        y, _, _ = onnxjit_norm.layer_norm_reference(total, gamma, beta, -1, epsilon, np.dtype(np.float32))
        return y, mask_index_of(mask, input_ids.shape[0]), total
