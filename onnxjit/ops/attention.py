"""Attention on the CPU provider: ai.onnx Attention (23, 24, 25), and com.onnxjit Attention (the same op for older
opsets, written by the optimizer's attention fusion).

The builder takes float32/float64 Q, K, V of one dtype, 4-D [batch, heads, sequence, head_size] or 3-D [batch,
sequence, heads * head_size] (with q_num_heads and kv_num_heads; split into heads by a transposed copy, and the
output joined back), with an optional bool or same-dtype float attn_mask, past_key/past_value (concatenated before
the new keys: the present_key/present_value outputs), nonpad_kv_seqlen (24), `scale`, `is_causal`, `softcap`,
left/right_window_size (25) and the qk_matmul_output output. The mask becomes an additive bias broadcast (by
strides) to [B, Hq, S, L]; a bool mask turns into 0 / -inf, a mask shorter than L is padded with masked positions,
as ONNX specifies. Causal masking is aligned bottom-right: with a past cache of P keys, query i sees keys j <= i + P;
with nonpad_kv_seqlen (no past) the offset is nonpad_kv_seqlen[b] - S per batch, and keys from nonpad_kv_seqlen[b]
on are masked. The plain causal mask (one offset) is the kernel's; per-batch offsets and windows are folded into
the bias here. com.onnxjit Attention's fully_masked_rows picks what a row with every key masked gives (see
contrib.attention); ai.onnx Attention gives zeros.

qk_matmul_output follows onnxruntime's stages: 0 the scaled scores, 1 after softcap, 2 after the bias, 3 the
softmax. Mode 2 writes -inf at masked keys as ONNX's reference does (onnxruntime writes the lowest float where the
mask is its own: bool or causal). Mode 0 together with softcap, where onnxruntime and ONNX's reference disagree
(its reference gives the softcapped scores), is declined, as are 16-bit floats (onnxruntime computes them in
float32, ONNX's conformance data per step in float16), q_num_heads/kv_num_heads on 4-D inputs, and
softmax_precision narrower than the input (float32 inputs with softmax_precision double run in float32, as
onnxruntime's kernel does).

RotaryEmbedding (23), the rotary position encoding of attention's inputs, also lives here: float32 (ONNX allows
float16/bfloat16 too, left to the next provider), 4-D [batch, heads, sequence, head_size] or 3-D [batch, sequence,
hidden] input (num_heads), the cos/sin caches indexed by position_ids or given per [batch, sequence], halves or
interleaved pairs, a partial rotary_embedding_dim. Its kernel runs over the (batch, position) pairs on
`run_units`' threads, through strides (no transposed copy).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto as T

from onnxjit.cache import deferred_compile
from onnxjit.contrib.attention import FULLY_MASKED_ROWS
from onnxjit.kernels import attention as ka
from onnxjit.kernels import linalg as kl
from onnxjit.ops import stand_ins
from onnxjit.ops.nn import run_units, wanted_outputs
from onnxjit.ops.registry import attr, input_tensor_types, register_op
from onnxjit.worker_pool import threads_for

_FLOATS = frozenset({T.FLOAT, T.DOUBLE})
_QK_MODES = (ka.QK_SCALED, ka.QK_SOFTCAPPED, ka.QK_BIASED, ka.QK_SOFTMAX)


@dataclass(frozen=True)
class AttentionAttrs:
    scale: float | None
    causal: bool
    fully_masked: int = 0  # a FULLY_MASKED_ROWS index
    q_num_heads: int | None = None  # for 3-D inputs
    kv_num_heads: int | None = None
    softcap: float = 0.0
    qk_mode: int = ka.QK_NONE
    left_window: int = -1  # -1: unbounded
    right_window: int = -1


def _split_heads(x: np.ndarray, heads: int | None, name: str) -> np.ndarray:
    """3-D [B, S, heads * D] -> 4-D [B, heads, S, D]."""
    if heads is None:
        raise ValueError("Attention: 3-D Q, K and V need the q_num_heads and kv_num_heads attributes")
    if heads <= 0 or x.shape[2] % heads:
        raise ValueError(f"Attention: {name} of shape {x.shape} does not split into {heads} heads")
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _window_bias(s: int, total: int, offset, causal: bool, left: int, right: int, dtype) -> np.ndarray:
    """0 / -inf over [B or 1, 1, S, L] for key j of query i at position p = i + offset (offset a scalar or per batch
    [B]): allowed when j <= p (causal), p - left <= j (left >= 0) and j <= p + right (right >= 0)."""
    offsets = np.reshape(offset, (-1, 1, 1))
    diff = np.arange(s).reshape(1, s, 1) + offsets - np.arange(total).reshape(1, 1, total)  # p - j
    allowed = np.ones(diff.shape, np.bool_)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))[:, None]


def _bias(mask, nonpad_kv_seqlen, a: AttentionAttrs, shape: tuple, past: int, dtype) -> tuple:
    """(additive bias [B, Hq, S, L] by strides or None, whether the kernel's causal mask applies, its offset)."""
    batch, heads, s, total = shape
    bias = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.ndim and mask.shape[-1] < total:
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, total - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
        bias = np.where(mask, dtype.type(0), dtype.type(-np.inf)) if mask.dtype == np.bool_ else \
            mask.astype(dtype, copy=False)
    offset = past
    if nonpad_kv_seqlen is not None:
        lens = np.asarray(nonpad_kv_seqlen).astype(np.int64, copy=False).reshape(-1)
        if lens.shape != (batch,):
            raise ValueError(f"Attention: nonpad_kv_seqlen must have shape ({batch},), got "
                             f"{np.shape(nonpad_kv_seqlen)}")
        offset = lens - s
        padding = np.where(np.arange(total) < lens[:, None], dtype.type(0), dtype.type(-np.inf))
        bias = padding.reshape(batch, 1, 1, total) if bias is None else bias + padding.reshape(batch, 1, 1, total)
    kernel_causal = a.causal and nonpad_kv_seqlen is None and a.left_window < 0 and a.right_window < 0
    if (a.causal and not kernel_causal) or a.left_window >= 0 or a.right_window >= 0:
        window = _window_bias(s, total, offset, a.causal, a.left_window, a.right_window, dtype)
        bias = window if bias is None else bias + window
    if bias is not None:
        try:
            bias = np.broadcast_to(bias, shape)
        except ValueError:
            raise ValueError(f"Attention: attn_mask of shape {np.shape(mask)} does not broadcast to "
                             f"[batch, q_heads, q_sequence, kv_sequence] {list(shape)}") from None
    return bias, kernel_causal, past


def attention(a: AttentionAttrs, q, k, v, mask=None, past_key=None, past_value=None,
              nonpad_kv_seqlen=None) -> tuple:
    """(Y, present_key, present_value, qk_matmul_output or None) of Attention."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (3, 4):
        raise ValueError("Attention: Q, K and V must all be 4-D [batch, heads, sequence, head_size] or 3-D "
                         f"[batch, sequence, heads * head_size], got {q.shape}, {k.shape}, {v.shape}")
    three_d = q.ndim == 3
    if three_d:
        q = _split_heads(q, a.q_num_heads, "Q")
        k = _split_heads(k, a.kv_num_heads, "K")
        v = _split_heads(v, a.kv_num_heads, "V")
    past = 0
    if past_key is not None:
        past_key, past_value = np.asarray(past_key), np.asarray(past_value)
        if past_key.ndim != 4 or past_key.shape[:2] + past_key.shape[3:] != k.shape[:2] + k.shape[3:] \
                or past_value.ndim != 4 or past_value.shape[:2] + past_value.shape[3:] != v.shape[:2] + v.shape[3:]:
            raise ValueError(f"Attention: past_key {past_key.shape} and past_value {past_value.shape} must be "
                             f"[batch, kv_heads, past_sequence, head_size] matching K {k.shape} and V {v.shape}")
        past = past_key.shape[2]
        k = np.concatenate((past_key, k), axis=2)
        v = np.concatenate((past_value, v), axis=2)
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    batch, heads, s, d = q.shape
    kv_heads, total = k.shape[1], k.shape[2]
    if kv_heads == 0 or heads % kv_heads or k.shape[0] != batch or v.shape[:3] != k.shape[:3] or k.shape[3] != d:
        raise ValueError(f"Attention: incompatible shapes Q {q.shape}, K {k.shape}, V {v.shape}")
    dtype = q.dtype
    out = np.empty((batch, heads, s, v.shape[3]), dtype)
    want_qk = a.qk_mode != ka.QK_NONE
    qk = np.empty((batch, heads, s, total), dtype) if want_qk else np.empty((1, 1, 1, 1), dtype)
    if out.size and total == 0:
        out.fill(0)  # no key at all: an empty softmax times an empty V, whatever fully_masked says
    elif out.size or (want_qk and qk.size):
        bias, causal, offset = _bias(mask, nonpad_kv_seqlen, a, (batch, heads, s, total), past, dtype)
        has_bias = bias is not None
        # the bias as the kernel reads it: C-contiguous, its broadcast dims (zero strides) of size 1
        bias = np.ascontiguousarray(bias[tuple(slice(0, 1) if st == 0 else slice(None) for st in bias.strides)]) \
            if has_bias else np.zeros((1, 1, 1, 1), dtype)
        scale = 1 / math.sqrt(d) if a.scale is None else a.scale
        work = 2 * batch * heads * s * total * (d + v.shape[3])
        q_rows = -(-s // query_blocks(batch * heads, s, work))
        args = (q, k, v, bias, has_bias, causal, offset, dtype.type(scale), dtype.type(a.softcap), a.fully_masked,
                a.qk_mode, qk, q_rows, out)
        if not want_qk and not a.softcap and deferred_compile.stands_in(ka.attention, args):
            out[...] = stand_ins.attention(q, k, v, bias if has_bias else None, causal, offset, scale,
                                           a.fully_masked)
        else:
            with kl.single_threaded_blas_for(work):
                run_units(ka.attention, args, batch * heads * -(-s // q_rows), work)
    if three_d:
        out = out.transpose(0, 2, 1, 3).reshape(batch, s, heads * v.shape[3])
    return out, k, v, qk if want_qk else None


ATTENTION_MIN_Q_ROWS = 32  # fewest query rows of a unit cut from a head (the width of its two GEMMs)


def query_blocks(heads: int, s: int, work: int) -> int:
    """Into how many blocks of query rows each of `heads` (batch x heads) attention heads is cut, so that the
    units spread evenly over the threads (the fewest blocks that keep them 90% busy): ViT-Tiny's 3 heads on 2
    threads ran as 2 + 1 heads, cut in two as 3 + 3 halves (one Attention over [1, 3, 197, 64], two Emerald
    Rapids threads, same process, best of 50 runs: 276 -> 233 us; [1, 1, 256, 64] 196 -> 132 us)."""
    threads = threads_for(heads * s, work)  # the threads run_units would give a job this size
    most = max(1, s // ATTENTION_MIN_Q_ROWS)
    best, best_balance = 1, 0.0
    for n in range(1, min(most, 4 * threads) + 1):
        units = heads * n
        balance = units / (threads * -(-units // threads))  # the threads' busy share
        if balance > best_balance + 1e-9:
            best, best_balance = n, balance
        if balance >= 0.9:
            break
    return best


def _attention_attrs(node, types) -> AttentionAttrs | None:
    """The static arguments of an Attention node this module runs, else None."""
    rank = None if types[0].shape is None else len(types[0].shape)
    heads = attr(node, "q_num_heads"), attr(node, "kv_num_heads")
    if rank == 4 and heads != (None, None):
        return None
    softcap = float(attr(node, "softcap", 0.0) or 0.0)
    qk_mode = ka.QK_NONE
    if len(node.outputs) > 3 and node.outputs[3] is not None and node.outputs[3].name:
        qk_mode = int(attr(node, "qk_matmul_output_mode", 0))
        if qk_mode not in _QK_MODES or (qk_mode == ka.QK_SCALED and softcap != 0.0):
            return None
    precision = attr(node, "softmax_precision")
    if precision is not None and int(precision) != types[0].elem_type \
            and not (types[0].elem_type == T.FLOAT and int(precision) == T.DOUBLE):
        return None
    windows = int(attr(node, "left_window_size", -1)), int(attr(node, "right_window_size", -1))
    if min(windows) < -1:
        return None  # the fallback's reference raises the error that names it
    rows = attr(node, "fully_masked_rows", "zeros")
    if rows not in FULLY_MASKED_ROWS:
        return None
    scale = attr(node, "scale")
    return AttentionAttrs(scale=None if scale is None else float(scale), causal=bool(attr(node, "is_causal", 0)),
                          fully_masked=FULLY_MASKED_ROWS.index(rows),
                          q_num_heads=None if heads[0] is None else int(heads[0]),
                          kv_num_heads=None if heads[1] is None else int(heads[1]),
                          softcap=softcap, qk_mode=qk_mode, left_window=windows[0], right_window=windows[1])


def build_attention(node):
    types = input_tensor_types(node)
    present = [i < len(node.inputs) and node.inputs[i] is not None for i in range(7)]
    if not all(present[:3]) or any(t is None for t in types[:3]):
        return None
    elem = types[0].elem_type
    if len({t.elem_type for t in types[:3]}) != 1 or elem not in _FLOATS:
        return None
    if any(t.shape is not None and len(t.shape) not in (3, 4) for t in types[:3]):
        return None
    if present[3] and (types[3] is None or types[3].elem_type not in (T.BOOL, elem)):
        return None
    if present[4] != present[5] or (present[4] and (types[4] is None or types[5] is None
                                                    or {types[4].elem_type, types[5].elem_type} != {elem})):
        return None  # past_key and past_value go together
    if present[6] and (present[4] or types[6] is None or types[6].elem_type != T.INT64):
        return None  # nonpad_kv_seqlen, which ONNX forbids with a past cache
    a = _attention_attrs(node, types)
    if a is None:
        return None
    n_out = max(wanted_outputs(node), 1)

    def run(q, k, v, mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        return attention(a, q, k, v, mask, past_key, past_value, nonpad_kv_seqlen)[:n_out]
    return run


register_op("Attention", since=23)(build_attention)
register_op("Attention", since=1, domain="com.onnxjit")(build_attention)


# --- RotaryEmbedding ------------------------------------------------------------------------------------------------
def rotary_embedding(x, cos_cache, sin_cache, position_ids, interleaved: bool, rotary_dim: int,
                     num_heads: int | None) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 4:  # [B, H, S, D], seen as [B, S, H, D] through strides
        heads_last = x.transpose(0, 2, 1, 3)
    elif x.ndim == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise ValueError(f"RotaryEmbedding: a 3-D input [batch, sequence, hidden] needs num_heads dividing its "
                             f"hidden size, got shape {x.shape} and num_heads {num_heads}")
        heads_last = x.reshape(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads)
    else:
        raise ValueError(f"RotaryEmbedding: the input must be 4-D [batch, heads, sequence, head_size] or 3-D "
                         f"[batch, sequence, hidden], got shape {x.shape}")
    batch, positions, _, size = heads_last.shape
    rotary_dim = rotary_dim or size
    if rotary_dim > size or rotary_dim % 2:
        raise ValueError(f"RotaryEmbedding: rotary_embedding_dim {rotary_dim} must be even and at most the head "
                         f"size {size}")
    cos_cache, sin_cache = np.asarray(cos_cache), np.asarray(sin_cache)
    if position_ids is not None:
        ids = np.asarray(position_ids)
        if ids.shape != (batch, positions) or cos_cache.ndim != 2 or ((ids < 0) | (ids >= len(cos_cache))).any():
            raise ValueError(f"RotaryEmbedding: position_ids must be [{batch}, {positions}] rows of the 2-D caches "
                             f"{cos_cache.shape}")
        cos_cache, sin_cache = cos_cache[ids], sin_cache[ids]
    want = (batch, positions, rotary_dim // 2)
    if cos_cache.shape != want or sin_cache.shape != want:
        raise ValueError(f"RotaryEmbedding: cos_cache and sin_cache must give {list(want)} [batch, sequence, "
                         f"rotary_embedding_dim / 2], got {cos_cache.shape} and {sin_cache.shape}")
    out = np.empty(x.shape, x.dtype)
    out_heads_last = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(heads_last.shape)
    cos_c, sin_c = (np.ascontiguousarray(c, dtype=x.dtype) for c in (cos_cache, sin_cache))
    run_units(ka.rotary, (heads_last, cos_c, sin_c, interleaved, rotary_dim, out_heads_last),
              batch * positions, 2 * x.size)
    return out


@register_op("RotaryEmbedding", since=23)
def build_rotary_embedding(node):
    types = input_tensor_types(node)
    if len(node.inputs) < 3 or any(v is None for v in node.inputs[:3]) or any(t is None for t in types[:3]):
        return None
    if {t.elem_type for t in types[:3]} != {T.FLOAT}:
        return None  # halves are left to the next provider
    if len(node.inputs) > 3 and node.inputs[3] is not None and (types[3] is None or types[3].elem_type != T.INT64):
        return None
    interleaved = bool(attr(node, "interleaved", 0))
    rotary_dim = int(attr(node, "rotary_embedding_dim", 0))
    num_heads = attr(node, "num_heads")
    num_heads = None if num_heads is None else int(num_heads)

    def run(x, cos_cache, sin_cache, position_ids=None):
        return (rotary_embedding(x, cos_cache, sin_cache, position_ids, interleaved, rotary_dim, num_heads),)
    return run
