"""Attention on the CPU provider: ai.onnx Attention (23) in its 4-D form, and com.onnxjit Attention (the same op
for older opsets, written by the optimizer's attention fusion).

The builder takes float32/float64 Q, K, V of one dtype, rank 4, with an optional bool or same-dtype float
attn_mask, `scale` and `is_causal`; it declines 3-D inputs, past key/value, softcap, softmax_precision other than
the input's, qk_matmul_output and the present outputs (the fallback provider runs those). The mask becomes an
additive bias broadcast (by strides) to [B, Hq, S, L]; a bool mask turns into 0 / -inf, a mask shorter than L is
padded with masked positions, as ONNX specifies. com.onnxjit Attention's fully_masked_rows picks what a row
with every key masked gives (see contrib.attention).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from onnxjit.contrib.attention import FULLY_MASKED_ROWS
from onnxjit.kernels import attention as ka
from onnxjit.kernels import linalg as kl
from onnxjit.ops.nn import run_units
from onnxjit.ops.registry import attr, input_tensor_types, register_op

_FLOATS = frozenset({T.FLOAT, T.DOUBLE})


def attention(q, k, v, mask, scale: float | None, causal: bool, fully_masked: int = 0) -> np.ndarray:
    q, k, v = (np.ascontiguousarray(a) for a in (q, k, v))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("Attention: Q, K and V must be 4-D [batch, heads, sequence, head_size]")
    batch, heads, s, d = q.shape
    kv_heads, total = k.shape[1], k.shape[2]
    if kv_heads == 0 or heads % kv_heads or k.shape[0] != batch or v.shape[:3] != k.shape[:3] or k.shape[3] != d:
        raise ValueError(f"Attention: incompatible shapes Q {q.shape}, K {k.shape}, V {v.shape}")
    dtype = q.dtype
    out = np.empty((batch, heads, s, v.shape[3]), dtype)
    if out.size == 0:
        return out
    if total == 0:
        out.fill(0)  # no key at all: an empty softmax times an empty V, whatever fully_masked says
        return out
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape[-1:] != (total,) and mask.ndim and mask.shape[-1] < total:
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, total - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
        if mask.dtype == np.bool_:
            mask = np.where(mask, dtype.type(0), dtype.type(-np.inf))
        bias = np.broadcast_to(mask.astype(dtype, copy=False), (batch, heads, s, total))
    else:
        bias = np.zeros((1, 1, 1, 1), dtype)
        bias = np.broadcast_to(bias, (batch, heads, s, total))
    scale = 1 / math.sqrt(d) if scale is None else scale
    work = 2 * batch * heads * s * total * (d + v.shape[3])
    with kl.single_threaded_blas:
        run_units(ka.attention, (q, k, v, bias, mask is not None, bool(causal), dtype.type(scale), fully_masked,
                                  out),
                  batch * heads, work)
    return out


def build_attention(node):
    types = input_tensor_types(node)
    if len(node.inputs) < 3 or any(t is None for t in types[:3]):
        return None
    if len({t.elem_type for t in types[:3]}) != 1 or types[0].elem_type not in _FLOATS:
        return None
    if any(t.shape is not None and len(t.shape) != 4 for t in types[:3]):
        return None
    if any(v is not None for v in node.inputs[4:]):
        return None  # past key/value, nonpad_kv_seqlen
    if any(v is not None and v.name for v in node.outputs[1:]):
        return None  # present key/value, qk_matmul_output
    has_mask = len(node.inputs) > 3 and node.inputs[3] is not None
    if has_mask and (types[3] is None or types[3].elem_type not in (T.BOOL, types[0].elem_type)):
        return None
    if float(attr(node, "softcap", 0.0) or 0.0) != 0.0:
        return None
    precision = attr(node, "softmax_precision")
    if precision is not None and int(precision) != types[0].elem_type:
        return None
    if attr(node, "q_num_heads") is not None or attr(node, "kv_num_heads") is not None:
        return None
    if any(attr(node, a) not in (None, -1) for a in ("left_window_size", "right_window_size")):
        return None
    scale = attr(node, "scale")
    scale = None if scale is None else float(scale)
    causal = bool(attr(node, "is_causal", 0))
    rows = attr(node, "fully_masked_rows", "zeros")
    rows = rows.decode() if isinstance(rows, bytes) else rows
    if rows not in FULLY_MASKED_ROWS:
        return None  # the fallback's reference raises the error that names it
    fully_masked = FULLY_MASKED_ROWS.index(rows)

    def run(q, k, v, mask=None, *_absent):
        return (attention(q, k, v, mask, scale, causal, fully_masked),)
    return run


register_op("Attention", since=23)(build_attention)
register_op("Attention", since=1, domain="com.onnxjit")(build_attention)
