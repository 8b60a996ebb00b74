"""Reference implementation of com.onnxjit Attention (numpy)."""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib import reference_op


FULLY_MASKED_ROWS = ("zeros", "uniform", "nan")  # values of the fully_masked_rows attribute, in kernel code order


def attention_reference(q, k, v, attn_mask=None, scale=None, is_causal=0, fully_masked_rows="zeros"):
    """Y of Attention-23 for 4-D Q [B, Hq, S, D], K [B, Hkv, L, D], V [B, Hkv, L, Dv]; a row whose keys are all
    masked gives zeros, or with fully_masked_rows the average of V ("uniform") or NaN ("nan")."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("Attention: Q, K and V must be 4-D [batch, heads, sequence, head_size]")
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"Attention: {heads} query heads are not a multiple of {kv_heads} key/value heads")
    k = np.repeat(k, heads // kv_heads, axis=1)
    v = np.repeat(v, heads // kv_heads, axis=1)
    s, total = q.shape[2], k.shape[2]
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    bias = np.zeros((s, total), q.dtype)
    if is_causal:
        bias[np.triu_indices(s, 1, total)] = -np.inf
    if attn_mask is not None:
        if attn_mask.shape[-1] < total:  # a shorter mask is padded with masked positions
            pad = [(0, 0)] * (attn_mask.ndim - 1) + [(0, total - attn_mask.shape[-1])]
            attn_mask = np.pad(attn_mask, pad, constant_values=False if attn_mask.dtype == np.bool_ else -np.inf)
        if attn_mask.dtype == np.bool_:
            attn_mask = np.where(attn_mask, q.dtype.type(0), q.dtype.type(-np.inf))
        bias = bias + attn_mask.astype(q.dtype)
    scores = (q @ np.swapaxes(k, -1, -2)) * q.dtype.type(scale) + bias
    row_max = scores.max(axis=-1, keepdims=True)
    masked = np.isneginf(np.broadcast_to(bias, scores.shape).max(axis=-1, keepdims=True))
    e = np.exp(scores - np.where(np.isneginf(row_max), 0, row_max))
    p = e / np.where(masked, 1, e.sum(axis=-1, keepdims=True))
    if fully_masked_rows not in FULLY_MASKED_ROWS:
        raise ValueError(f"Attention: fully_masked_rows must be one of {FULLY_MASKED_ROWS}, not {fully_masked_rows!r}")
    fill = {"zeros": 0, "uniform": 1 / total, "nan": np.nan}[fully_masked_rows]
    p = np.where(masked, q.dtype.type(fill), p)
    return (p @ v).astype(q.dtype)


@reference_op
class Attention(OpRun):
    """Attention of ai.onnx opset 23 in its 4-D form, for models whose ai.onnx opset is older.

    Inputs: Q [batch, q_heads, q_seq, head_size], K [batch, kv_heads, kv_seq, head_size],
    V [batch, kv_heads, kv_seq, v_head_size] (one float dtype; q_heads a multiple of kv_heads, each key/value
    head serving q_heads / kv_heads consecutive query heads), attn_mask (optional): bool (True attends) or
    additive float of Q's dtype, broadcastable to [batch, q_heads, q_seq, kv_seq] (a shorter last dim is padded
    with masked positions).
    Output: Y [batch, q_heads, q_seq, v_head_size].
    Attributes: scale (float, default 1 / sqrt(head_size)); is_causal (int, default 0): query i attends key j
    only where j <= i (top-left aligned), composed with attn_mask; fully_masked_rows (string, default "zeros"):
    what a row where every key is masked (bias -inf everywhere) gives: "zeros" (Attention-23's rule), "uniform"
    (the average of V over the keys) or "nan". The optimizer sets the latter two when it fuses a decomposition
    that computes them: a softmax over scores a Where mask replaced by one finite constant, or by -inf.
    Y = softmax(Q K^T * scale + bias) V over the last axis.
    """

    def _run(self, q, k, v, attn_mask=None, scale=None, is_causal=0, fully_masked_rows="zeros", **_unused):
        if isinstance(fully_masked_rows, bytes):
            fully_masked_rows = fully_masked_rows.decode()
        return (attention_reference(q, k, v, attn_mask, scale, is_causal, fully_masked_rows),)
