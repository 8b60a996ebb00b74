"""com.microsoft attention ops (numpy references): RotaryEmbedding, Attention, MultiHeadAttention,
GroupQueryAttention, DecoderMaskedMultiHeadAttention.

Each op is a function of its inputs and attributes that brings them to one canonical form, Q [B, N, S, H],
K [B, Nkv, T, H], V [B, Nkv, T, Hv] (past keys concatenated), an additive bias viewed as [B, N, S, T] (masks
become it: mask_filter_value, default -10000, at masked keys for Attention, MultiHeadAttention and
DecoderMaskedMultiHeadAttention, as onnxruntime fills them; -inf for GroupQueryAttention's causal and padding
limits), and runs scaled dot-product attention through a `Compute` object: `REFERENCE` here (numpy), the CPU
provider's one in onnxjit/ops/microsoft.py (the Numba attention, rotary and GEMM kernels) — so both providers
share one reading of each op's inputs, and differ only in the arithmetic. Query head h reads key/value head
h // (N / Nkv).

Semantics, as onnxruntime documents them (docs/ContribOperators.md) and its CPU kernels compute:

RotaryEmbedding(input, position_ids, cos_cache, sin_cache) -> output: input [B, S, N * H] (num_heads, or H taken
  from the caches when rotary_embedding_dim is 0) or [B, N, S, H]; position_ids int64 [B, S], or [1] holding the
  offset of position 0 (positions offset..offset+S-1); caches [max_position, rotary_dim / 2]; the first
  rotary_dim features of each head rotated in halves (or interleaved pairs): x1 cos - x2 sin, x1 sin + x2 cos.
Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?) -> (output, present?)
  Q|K|V = input @ weights + bias, split by qkv_hidden_sizes (default three equal parts) into num_heads heads;
  past [2, B, N, P, H] before the keys and values, present their concatenation [2, B, N, P + S, H]; mask_index:
  [B] key lengths (right padding), [2B] ends then starts (left padding), [B, T] or [B, S, T] of 1 (attend) / 0,
  or [B, 1, M, M] (rows P..P+S-1, columns 0..T-1 of it); unidirectional=1 masks keys after i + P entirely (-inf,
  not mask_filter_value: a query whose causal keys are all padded attends them alike, as onnxruntime computes it).
  attention_bias
  [B or 1, N or 1, S, T] is added. scale defaults to 1 / sqrt(H).
MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?, ...)
  -> (output, present_key?, present_value?, qk?): query [B, S, D] with key [B, L, D], value [B, L, Dv] (bias
  [D + D + Dv] added to the three), or key [B, L, N, 2, H] (packed K and V), or query [B, S, N, 3, H] (packed Q, K,
  V), or key/value [B, N, L, H] (already projected, cross attention: no bias on them, no past); past_key/value
  [B, N, P, H] before K and V, present_key/value the concatenation. key_padding_mask: [B] lengths, [B, T] or
  [B, S, T] of 1 / 0. unidirectional=1 masks keys after i + P (-inf: only the keys up to i + P count, as in
  Attention). qk is the scores Q K^T * scale + bias (the lowest float at causally hidden keys).
GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k, total_sequence_length, cos_cache?,
  sin_cache?, position_ids?, attention_bias?, head_sink?, ...) -> (output, present_key, present_value,
  output_qk?): query [B, S, N * H] or packed [B, S, (N + 2 Nkv) * H]; batch b holds seqlens_k[b] + 1 keys in all,
  the first seqlens_k[b] + 1 - S from past_key [B, Nkv, C, H] (none in a first prompt, where S equals
  total_sequence_length); present is [B, Nkv, max(C, total_sequence_length), H] with the new keys at their
  positions (rows past a batch's length are zeros here; onnxruntime leaves them unspecified). causal (default 1)
  masks keys after each query's position, local_window_size W >= 0 keeps only the W keys up to it
  (j > position - W). do_rotary
  rotates Q and K (positions from position_ids, else past + s), q_norm_weight / k_norm_weight RMS-normalize each
  head first (epsilon q_norm_epsilon / k_norm_epsilon, else qk_norm_epsilon, default 1e-6). softcap c > 0:
  scores c * tanh(s / c); smooth_softmax=1 adds exp(0) (head_sink: exp(head_sink[h])) to each row's
  denominator. qk_output 1 gives the scores before the softmax (after softcap and bias), 2 after.
  Quantized KV caches (k_scale, v_scale), sliding_window_cache and query_seqlens raise NotImplementedError.
DecoderMaskedMultiHeadAttention(query, key?, value?, mask_index?, attention_bias?, past_key?, past_value?,
  past_sequence_length?, beam_width?, cache_indirection?, bias?) -> (output, present_key?, present_value?, qk?):
  one query token. Self attention: key/value [B, 1, D] (or packed in query), appended to past_key/past_value
  [B, N, P, H] (with past_present_share_buffer=1 the buffers are [B, N, M, H], the first past_sequence_length rows
  valid, and present is that buffer with row past_sequence_length written); cross attention: key/value
  [B, N, L, H] as they are. mask_index [B, T] of 1 / 0. With cache_indirection [B / beam_width, beam_width, M]
  batch row b = i * beam_width + j reads past position t from batch row i * beam_width +
  cache_indirection[i, j, t]. output_qk=1 gives qk, the scaled scores (with mask and bias).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib.microsoft import reference_op

# the stage of the scores an op's qk output takes (the values of onnxjit.kernels.attention's QK_* codes)
QK_NONE, QK_SCALED, QK_SOFTCAPPED, QK_BIASED, QK_SOFTMAX = -1, 0, 1, 2, 3
MASK_FILTER_VALUE = -10000.0


class AttentionInputError(ValueError):
    """An input of a com.microsoft attention op with a shape or value the op does not take."""


def _fail(op: str, message: str):
    raise AttentionInputError(f"{op}: {message}")


# --- the arithmetic: numpy here, kernels on the CPU provider ----------------------------------------------------
@dataclass(frozen=True)
class Sdpa:
    """One scaled dot-product attention: softmax(softcap(Q K^T * scale) + bias) V per head, with an optional
    extra logit per head in each softmax's denominator (`sink`, GroupQueryAttention's smooth softmax)."""

    scale: float
    softcap: float = 0.0
    sink: np.ndarray | None = None  # [N] float, or None
    qk_stage: int = QK_NONE


class ReferenceCompute:
    """The numpy arithmetic of the attention ops (the CPU provider subclasses it with kernels)."""

    def matmul(self, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """a @ b (+ bias over the last axis)."""
        y = np.matmul(a, b)
        return y if bias is None else (y + bias).astype(y.dtype)

    def sdpa(self, p: Sdpa, q, k, v, bias) -> tuple[np.ndarray, np.ndarray | None]:
        """(out [B, N, S, Hv], the qk scores at p.qk_stage or None); q [B, N, S, H], k/v [B, Nkv, T, *], bias None
        or broadcastable to [B, N, S, T]."""
        dtype = q.dtype
        group = q.shape[1] // k.shape[1]
        k64 = np.repeat(k, group, axis=1).astype(np.float64)
        v64 = np.repeat(v, group, axis=1).astype(np.float64)
        scores = (q.astype(np.float64) @ np.swapaxes(k64, -1, -2)) * p.scale
        stages = {QK_SCALED: scores}
        if p.softcap > 0:
            scores = p.softcap * np.tanh(scores / p.softcap)
        stages[QK_SOFTCAPPED] = scores
        if bias is not None:
            scores = scores + bias.astype(np.float64)
        stages[QK_BIASED] = scores
        row_max = scores.max(axis=-1, keepdims=True)
        if p.sink is not None:
            sink = np.asarray(p.sink, np.float64).reshape(1, -1, 1, 1)
            row_max = np.maximum(row_max, sink)
        row_max = np.where(np.isfinite(row_max), row_max, 0)
        e = np.exp(scores - row_max)
        total = e.sum(axis=-1, keepdims=True)
        if p.sink is not None:
            total = total + np.exp(sink - row_max)
        probs = e / np.where(total > 0, total, 1)
        stages[QK_SOFTMAX] = probs
        out = (probs @ v64).astype(dtype)
        return out, None if p.qk_stage == QK_NONE else stages[p.qk_stage].astype(dtype)

    def rotate(self, x, cos, sin, interleaved: bool, rotary_dim: int) -> np.ndarray:
        """x [B, S, N, H] (any strides) with the first rotary_dim features of each head rotated; cos/sin
        [B, S, rotary_dim / 2]."""
        half = rotary_dim // 2
        xd = x.astype(np.float64)
        out = xd.copy()
        if interleaved:
            x1, x2 = xd[..., 0:rotary_dim:2], xd[..., 1:rotary_dim:2]
        else:
            x1, x2 = xd[..., :half], xd[..., half:rotary_dim]
        c, s = cos[:, :, None, :].astype(np.float64), sin[:, :, None, :].astype(np.float64)
        r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
        if interleaved:
            out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2] = r1, r2
        else:
            out[..., :half], out[..., half:rotary_dim] = r1, r2
        return out.astype(x.dtype)


REFERENCE = ReferenceCompute()


# --- shared pieces ----------------------------------------------------------------------------------------------
def split_heads(op: str, x: np.ndarray, heads: int, name: str) -> np.ndarray:
    """[B, S, heads * H] -> [B, heads, S, H] (a view)."""
    if x.ndim != 3 or heads <= 0 or x.shape[2] % heads:
        _fail(op, f"{name} of shape {x.shape} is not [batch, sequence, {heads} * head_size]")
    b, s, d = x.shape
    return x.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """[B, N, S, H] -> [B, S, N * H]."""
    b, n, s, h = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(b, s, n * h)


def _scale(scale, head_size: int) -> float:
    return 1 / math.sqrt(head_size) if scale is None or scale == 0.0 else float(scale)


def key_mask(op: str, mask, batch: int, s: int, total: int, past: int, name: str) -> np.ndarray:
    """The keys a mask input hides, as bool [B, S, T] (True: masked), from any of its onnxruntime formats."""
    m = np.asarray(mask)
    keys = np.arange(total)
    if m.shape == (batch,):  # key lengths (right padding)
        hidden = keys[None, :] >= m[:, None]
        return np.broadcast_to(hidden[:, None, :], (batch, s, total))
    if m.shape == (2 * batch,):  # exclusive ends, then inclusive starts (left padding)
        hidden = (keys[None, :] >= m[:batch, None]) | (keys[None, :] < m[batch:, None])
        return np.broadcast_to(hidden[:, None, :], (batch, s, total))
    if m.shape == (batch, total):
        return np.broadcast_to((m == 0)[:, None, :], (batch, s, total))
    if m.shape == (batch, s, total):
        return m == 0
    if m.ndim == 4 and m.shape[:2] == (batch, 1) and m.shape[2] >= past + s and m.shape[3] >= total:
        return m[:, 0, past:past + s, :total] == 0
    _fail(op, f"{name} of shape {m.shape} is none of [{batch}], [{2 * batch}], [{batch}, {total}], "
              f"[{batch}, {s}, {total}] or [{batch}, 1, M, M] (M >= {past + s})")


def causal_mask(s: int, total: int, offset) -> np.ndarray:
    """bool [B or 1, S, T], True where key j comes after query i's position i + offset (offset scalar or [B])."""
    offsets = np.reshape(offset, (-1, 1, 1))
    return np.arange(total).reshape(1, 1, total) > np.arange(s).reshape(1, s, 1) + offsets


def filtered_bias(masks, attention_bias, shape: tuple, dtype, op: str) -> np.ndarray | None:
    """The additive bias [B, 1 or N, S, T]: the sum over `masks`, pairs (bool [B or 1, S, T] hiding keys, the value
    it adds there), plus attention_bias [B or 1, N or 1, S, T]."""
    bias = None
    for masked, value in masks:
        term = np.where(masked, dtype.type(value), dtype.type(0))[:, None]
        bias = term if bias is None else bias + term
    if attention_bias is not None:
        ab = np.asarray(attention_bias)
        b, n, s, t = shape
        if ab.ndim != 4 or ab.shape[0] not in (1, b) or ab.shape[1] not in (1, n) or ab.shape[2:] != (s, t):
            _fail(op, f"attention_bias must be [{b} or 1, {n} or 1, {s}, {t}], got {list(ab.shape)}")
        bias = ab.astype(dtype) if bias is None else bias + ab.astype(dtype)
    return bias


def _concat_past(op: str, past, new: np.ndarray, name: str) -> np.ndarray:
    if past is None:
        return new
    past = np.asarray(past)
    if past.ndim != 4 or past.shape[:2] != new.shape[:2] or past.shape[3] != new.shape[3]:
        _fail(op, f"{name} of shape {past.shape} is not [batch, heads, past_sequence, head_size] matching "
                  f"{list(new.shape[:2]) + ['*', new.shape[3]]}")
    return np.concatenate((past.astype(new.dtype), new), axis=2)


def _want(outputs: int, i: int) -> bool:
    return outputs > i


def wanted_outputs(op: OpRun) -> int:
    """How many leading outputs the node of a reference op asks for (an absent optional output has no name)."""
    names = list(op.onnx_node.output)
    while names and not names[-1]:
        names.pop()
    return max(len(names), 1)


# --- RotaryEmbedding ----------------------------------------------------------------------------------------------
def rotary_embedding(compute, x, position_ids, cos_cache, sin_cache, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0) -> np.ndarray:
    op = "RotaryEmbedding"
    if is_packed_batching:
        raise NotImplementedError(f"{op}: is_packed_batching=1 (ragged batches) is not supported")
    cos_cache, sin_cache = np.asarray(cos_cache), np.asarray(sin_cache)
    if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
        _fail(op, f"cos_cache and sin_cache must be 2-D [max_position, rotary_dim / 2] of one shape, got "
                  f"{cos_cache.shape} and {sin_cache.shape}")
    if rotary_embedding_dim and not num_heads:
        _fail(op, "rotary_embedding_dim needs num_heads")
    rotary_dim = rotary_embedding_dim or 2 * cos_cache.shape[1]
    if x.ndim == 4:  # [B, N, S, H]
        heads_last = x.transpose(0, 2, 1, 3)
    elif x.ndim == 3:
        heads = num_heads or (x.shape[2] // rotary_dim if not rotary_embedding_dim else 0)
        if heads <= 0 or x.shape[2] % heads:
            _fail(op, f"a 3-D input {x.shape} needs num_heads dividing its hidden size (num_heads={num_heads})")
        heads_last = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    else:
        _fail(op, f"input must be [batch, sequence, hidden] or [batch, heads, sequence, head_size], got {x.shape}")
    batch, seq, _, head_size = heads_last.shape
    if rotary_dim > head_size or rotary_dim % 2 or cos_cache.shape[1] * 2 < rotary_dim:
        _fail(op, f"rotary_embedding_dim {rotary_dim} must be even, at most head_size {head_size} and covered by "
                  f"the caches {cos_cache.shape}")
    ids = np.asarray(position_ids).astype(np.int64)
    if ids.size == 1 and ids.ndim <= 1:
        ids = np.broadcast_to(ids.reshape(1, 1) + np.arange(seq).reshape(1, seq), (batch, seq))
    elif ids.shape != (batch, seq):
        _fail(op, f"position_ids must be [1] or [{batch}, {seq}], got {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= cos_cache.shape[0]):
        _fail(op, f"position_ids must lie in [0, {cos_cache.shape[0]}) (the caches' rows), got {ids.min()} to "
                  f"{ids.max()}")
    half = rotary_dim // 2
    cos, sin = cos_cache[ids][..., :half], sin_cache[ids][..., :half]
    rotated = compute.rotate(heads_last, cos.astype(x.dtype), sin.astype(x.dtype), bool(interleaved), rotary_dim)
    return np.ascontiguousarray(rotated.transpose(0, 2, 1, 3)) if x.ndim == 4 else rotated.reshape(x.shape)


@reference_op
class RotaryEmbedding(OpRun):
    """See the module docstring."""


    def _run(self, x, position_ids, cos_cache, sin_cache, interleaved=0, num_heads=0, rotary_embedding_dim=0,
             is_packed_batching=0, scale=1.0):
        return (rotary_embedding(REFERENCE, x, position_ids, cos_cache, sin_cache, interleaved, num_heads,
                                 rotary_embedding_dim, is_packed_batching, scale),)


# --- Attention ------------------------------------------------------------------------------------------------------
def attention(compute, outputs: int, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, num_heads=0, qkv_hidden_sizes=None, scale=None,
              mask_filter_value=MASK_FILTER_VALUE, unidirectional=0, do_rotary=0, rotary_embedding_dim=0,
              past_present_share_buffer=0) -> tuple:
    op = "Attention"
    if do_rotary:
        raise NotImplementedError(f"{op}: do_rotary=1 is not supported (onnxruntime's CPU provider has no such "
                                  f"kernel either)")
    if past_present_share_buffer:
        raise NotImplementedError(f"{op}: past_present_share_buffer=1 is not supported")
    if x.ndim != 3 or weights.ndim != 2 or weights.shape[0] != x.shape[2]:
        _fail(op, f"input must be [batch, sequence, input_hidden] and weights [input_hidden, *], got {x.shape} "
                  f"and {weights.shape}")
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [weights.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != weights.shape[1] or sizes[0] != sizes[1] or min(sizes) <= 0 \
            or any(d % num_heads for d in sizes):
        _fail(op, f"qkv_hidden_sizes {sizes} must be 3 positive multiples of num_heads {num_heads}, Q's equal to "
                  f"K's, summing to weights' second dimension {weights.shape[1]}")
    if bias is not None and bias.shape != (weights.shape[1],):
        _fail(op, f"bias must be [{weights.shape[1]}], got {list(bias.shape)}")
    if past is not None and attention_bias is not None:
        _fail(op, "past and attention_bias cannot be combined (as in onnxruntime)")
    batch, s, _ = x.shape
    qkv = compute.matmul(x, weights, bias)
    q, k, v = np.split(qkv, [sizes[0], sizes[0] + sizes[1]], axis=2)
    q, k, v = (split_heads(op, t, num_heads, name) for t, name in ((q, "Q"), (k, "K"), (v, "V")))
    if past is not None:
        past = np.asarray(past)
        if past.ndim != 5 or past.shape[0] != 2:
            _fail(op, f"past must be [2, batch, heads, past_sequence, head_size], got {past.shape}")
        k, v = _concat_past(op, past[0], k, "past"), _concat_past(op, past[1], v, "past")
    total = k.shape[2]
    past_len = total - s
    masks = [] if mask_index is None else [(key_mask(op, mask_index, batch, s, total, past_len, "mask_index"),
                                            mask_filter_value)]
    if unidirectional:
        masks.append((causal_mask(s, total, past_len), -np.inf))
    bias_all = filtered_bias(masks, attention_bias, (batch, num_heads, s, total), q.dtype, op)
    out, _ = compute.sdpa(Sdpa(_scale(scale, q.shape[3])), q, k, v, bias_all)
    results = [merge_heads(out)]
    if _want(outputs, 1):
        if k.shape != v.shape:
            _fail(op, f"present needs Q, K and V of one hidden size, got qkv_hidden_sizes {sizes}")
        results.append(np.stack((k, v)))
    return tuple(results)


@reference_op
class Attention(OpRun):
    """See the module docstring."""


    def _run(self, x, weights, bias=None, mask_index=None, past=None, attention_bias=None,
             past_sequence_length=None, **attrs):
        return attention(REFERENCE, wanted_outputs(self), x, weights, bias, mask_index, past, attention_bias,
                         past_sequence_length, **attrs)


# --- MultiHeadAttention -----------------------------------------------------------------------------------------
def multi_head_attention(compute, outputs: int, query, key=None, value=None, bias=None, key_padding_mask=None,
                         attention_bias=None, past_key=None, past_value=None, past_sequence_length=None,
                         cache_indirection=None, num_heads=0, scale=None, mask_filter_value=MASK_FILTER_VALUE,
                         unidirectional=0) -> tuple:
    op = "MultiHeadAttention"
    if cache_indirection is not None or past_sequence_length is not None:
        raise NotImplementedError(f"{op}: past_sequence_length and cache_indirection (a shared past/present buffer "
                                  f"for beam search) are not supported")
    n = num_heads
    if n <= 0:
        _fail(op, f"num_heads must be positive, got {n}")
    cross = False
    if query.ndim == 5:  # packed Q, K, V [B, S, N, 3, H]
        if key is not None or value is not None or query.shape[2:4] != (n, 3):
            _fail(op, f"packed QKV must be [batch, sequence, {n}, 3, head_size] with no key or value, got "
                      f"{query.shape}")
        q, k, v = (query[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
    elif query.ndim != 3:
        _fail(op, f"query must be [batch, sequence, hidden] or [batch, sequence, {n}, 3, head_size], got "
                  f"{query.shape}")
    elif key is not None and key.ndim == 5:  # packed K, V [B, L, N, 2, H]
        if value is not None or key.shape[2:4] != (n, 2) or key.shape[0] != query.shape[0]:
            _fail(op, f"packed KV must be [batch, kv_sequence, {n}, 2, head_size] with no value, got {key.shape}")
        q = split_heads(op, query, n, "query")
        k, v = (key[:, :, :, i].transpose(0, 2, 1, 3) for i in range(2))
    elif key is not None and key.ndim == 4:  # projected keys and values [B, N, L, H]
        if value is None or value.ndim != 4 or key.shape[:2] != (query.shape[0], n) or value.shape[:3] != key.shape[:3]:
            _fail(op, f"4-D key and value must be [batch, {n}, kv_sequence, head_size], got {key.shape} and "
                      f"{None if value is None else value.shape}")
        q, k, v, cross = split_heads(op, query, n, "query"), key, value, True
    elif key is not None and value is not None:
        if key.ndim != 3 or value.ndim != 3 or key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            _fail(op, f"key and value must be [batch, kv_sequence, hidden], got {key.shape} and {value.shape}")
        q, k, v = (split_heads(op, t, n, name) for t, name in ((query, "query"), (key, "key"), (value, "value")))
    else:
        _fail(op, "key and value must be given unless query packs them")
    if bias is not None:
        dq, dk, dv = q.shape[3] * n, k.shape[3] * n, v.shape[3] * n
        if bias.shape != (dq + dk + dv,):
            _fail(op, f"bias must be [{dq + dk + dv}] (hidden + hidden + v_hidden), got {list(bias.shape)}")
        b = bias.reshape(3, -1) if dq == dk == dv else None
        bq, bk, bv = (b[0], b[1], b[2]) if b is not None else np.split(bias, [dq, dq + dk])
        q = q + bq.reshape(n, 1, -1)
        if not cross:
            k, v = k + bk.reshape(n, 1, -1), v + bv.reshape(n, 1, -1)
    if q.shape[3] != k.shape[3]:
        _fail(op, f"query and key head sizes differ: {q.shape[3]} and {k.shape[3]}")
    if (past_key is None) != (past_value is None):
        _fail(op, "past_key and past_value must be given together")
    if past_key is not None:
        if cross:
            _fail(op, "past_key/past_value cannot be combined with 4-D (already projected) key and value")
        k, v = _concat_past(op, past_key, k, "past_key"), _concat_past(op, past_value, v, "past_value")
    batch, _, s, head_size = q.shape
    total = k.shape[2]
    past_len = 0 if past_key is None else np.asarray(past_key).shape[2]
    masks = [] if key_padding_mask is None else [(key_mask(op, key_padding_mask, batch, s, total, past_len,
                                                           "key_padding_mask"), mask_filter_value)]
    if unidirectional:
        masks.append((causal_mask(s, total, total - s), -np.inf))
    bias_all = filtered_bias(masks, attention_bias, (batch, n, s, total), q.dtype, op)
    qk_stage = QK_BIASED if _want(outputs, 3) else QK_NONE
    out, qk = compute.sdpa(Sdpa(_scale(scale, head_size), qk_stage=qk_stage), np.ascontiguousarray(q),
                           np.ascontiguousarray(k), np.ascontiguousarray(v), bias_all)
    results = [merge_heads(out)]
    if _want(outputs, 1):
        results += [np.ascontiguousarray(k), np.ascontiguousarray(v)]
    if _want(outputs, 3):  # causally hidden keys hold the lowest float there, as onnxruntime writes them
        results.append(np.where(np.isneginf(qk), np.finfo(qk.dtype).min, qk))
    return tuple(results)


@reference_op
class MultiHeadAttention(OpRun):
    """See the module docstring."""

    def _run(self, query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
             past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, **attrs):
        return multi_head_attention(REFERENCE, wanted_outputs(self), query, key, value, bias, key_padding_mask,
                                    attention_bias, past_key, past_value, past_sequence_length, cache_indirection,
                                    **attrs)


# --- GroupQueryAttention ------------------------------------------------------------------------------------------
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache",
              "sin_cache", "position_ids", "attention_bias", "head_sink", "k_scale", "v_scale", "q_norm_weight",
              "k_norm_weight", "query_seqlens")


def _rms_heads(x: np.ndarray, weight: np.ndarray, epsilon: float) -> np.ndarray:
    """RMS normalization of each head vector of x [B, N, S, H] with weight [H], in float32 (float64 inputs: 64)."""
    xs = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    inv = 1 / np.sqrt((xs * xs).mean(axis=-1, keepdims=True) + xs.dtype.type(epsilon))
    return (xs * inv * weight.astype(xs.dtype)).astype(x.dtype)


def group_query_attention(compute, outputs: int, inputs: dict, num_heads=0, kv_num_heads=0, scale=None, softcap=0.0,
                          local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1, qk_output=0,
                          causal=1, sliding_window_cache=0, qk_norm_epsilon=1e-6, q_norm_epsilon=None,
                          k_norm_epsilon=None, k_quant_type="NONE", v_quant_type="NONE",
                          kv_cache_bit_width=0) -> tuple:
    op = "GroupQueryAttention"
    get = inputs.get
    if get("k_scale") is not None or get("v_scale") is not None or k_quant_type not in ("NONE", b"NONE") \
            or v_quant_type not in ("NONE", b"NONE"):
        raise NotImplementedError(f"{op}: quantized KV caches (k_scale, v_scale, k_quant_type, v_quant_type) are "
                                  f"not supported")
    if sliding_window_cache or get("query_seqlens") is not None:
        raise NotImplementedError(f"{op}: sliding_window_cache and query_seqlens are not supported")
    n, nkv = num_heads, kv_num_heads
    if n <= 0 or nkv <= 0 or n % nkv:
        _fail(op, f"num_heads {n} must be a positive multiple of kv_num_heads {nkv}")
    query, key, value = get("query"), get("key"), get("value")
    if query is None or query.ndim != 3:
        _fail(op, f"query must be [batch, sequence, hidden], got {None if query is None else query.shape}")
    batch, s, _ = query.shape
    if key is None and value is None:  # packed Q, K, V
        if query.shape[2] % (n + 2 * nkv):
            _fail(op, f"packed query {query.shape} does not split into {n} + 2 * {nkv} heads")
        h = query.shape[2] // (n + 2 * nkv)
        query, key, value = np.split(query, [n * h, (n + nkv) * h], axis=2)
    elif key is None or value is None or key.shape != value.shape or key.shape[:2] != (batch, s):
        _fail(op, f"key and value must both be [{batch}, {s}, kv_hidden], got "
                  f"{None if key is None else key.shape} and {None if value is None else value.shape}")
    q = split_heads(op, query, n, "query")
    k_new = split_heads(op, key, nkv, "key")
    v_new = split_heads(op, value, nkv, "value")
    head_size = q.shape[3]
    if k_new.shape[3] != head_size:
        _fail(op, f"query and key head sizes differ: {head_size} and {k_new.shape[3]}")
    seqlens = get("seqlens_k")
    total_arg = get("total_sequence_length")
    if seqlens is None or np.shape(seqlens) != (batch,) or total_arg is None or np.size(total_arg) != 1:
        _fail(op, f"seqlens_k must be [{batch}] and total_sequence_length a scalar")
    totals = np.asarray(seqlens).astype(np.int64) + 1
    total_len = int(np.asarray(total_arg).reshape(-1)[0])
    past_key, past_value = get("past_key"), get("past_value")
    capacity = 0 if past_key is None else past_key.shape[2]
    if (past_key is None) != (past_value is None) or (past_key is not None and (
            past_key.shape != past_value.shape or past_key.shape[:2] != (batch, nkv)
            or past_key.shape[3] != head_size)):
        _fail(op, f"past_key and past_value must both be [{batch}, {nkv}, past_sequence, {head_size}]")
    first_prompt = capacity == 0 or s == total_len
    pasts = np.zeros(batch, np.int64) if first_prompt else totals - s
    if (totals > total_len).any() or (pasts < 0).any() or (totals < 1).any() or (not first_prompt and (
            pasts > capacity).any()):
        _fail(op, f"seqlens_k + 1 = {totals.tolist()} must lie in [{s}, total_sequence_length {total_len}] with at "
                  f"most {capacity} past keys")
    if get("q_norm_weight") is not None or get("k_norm_weight") is not None:
        if get("q_norm_weight") is None or get("k_norm_weight") is None:
            _fail(op, "q_norm_weight and k_norm_weight must be given together")
        q = _rms_heads(q, get("q_norm_weight"), qk_norm_epsilon if q_norm_epsilon is None else q_norm_epsilon)
        k_new = _rms_heads(k_new, get("k_norm_weight"), qk_norm_epsilon if k_norm_epsilon is None else k_norm_epsilon)
    if do_rotary:
        cos_cache, sin_cache = get("cos_cache"), get("sin_cache")
        if cos_cache is None or sin_cache is None:
            _fail(op, "do_rotary=1 needs cos_cache and sin_cache")
        ids = get("position_ids")
        if ids is None:
            ids = pasts.reshape(batch, 1) + np.arange(s).reshape(1, s)
        q = rotary_embedding(compute, q, ids, cos_cache, sin_cache, rotary_interleaved)
        k_new = rotary_embedding(compute, k_new, ids, cos_cache, sin_cache, rotary_interleaved)
    present_len = max(capacity, total_len)
    present_k = np.zeros((batch, nkv, present_len, head_size), q.dtype)
    present_v = np.zeros((batch, nkv, present_len, v_new.shape[3]), q.dtype)
    for b in range(batch):
        p = int(pasts[b])
        if p:
            present_k[b, :, :p], present_v[b, :, :p] = past_key[b, :, :p], past_value[b, :, :p]
        present_k[b, :, p:p + s], present_v[b, :, p:p + s] = k_new[b], v_new[b]
    # keys past each batch's length, after each query's position, or out of its window, are hidden
    positions = pasts.reshape(batch, 1, 1) + np.arange(s).reshape(1, s, 1)
    keys = np.arange(present_len).reshape(1, 1, present_len)
    hidden = keys >= totals.reshape(batch, 1, 1)
    if causal:
        hidden = hidden | (keys > positions)
        if local_window_size >= 0:
            hidden = hidden | (keys <= positions - local_window_size)
    bias_all = np.where(hidden, q.dtype.type(-np.inf), q.dtype.type(0))[:, None]
    ab = get("attention_bias")
    if ab is not None:
        ab = np.asarray(ab)
        if ab.ndim != 4 or ab.shape[0] not in (1, batch) or ab.shape[1] not in (1, n) or ab.shape[2] != s \
                or ab.shape[3] < total_len:
            _fail(op, f"attention_bias must be [{batch} or 1, {n} or 1, {s}, {total_len}], got {list(ab.shape)}")
        pad = present_len - ab.shape[3]
        ab = ab[..., :present_len] if pad <= 0 else np.pad(ab, [(0, 0)] * 3 + [(0, pad)])
        bias_all = bias_all + ab.astype(q.dtype)
    sink = get("head_sink")
    if sink is None and smooth_softmax == 1:
        sink = np.zeros(n, np.float32)
    if sink is not None and np.shape(sink) != (n,):
        _fail(op, f"head_sink must be [{n}], got {list(np.shape(sink))}")
    qk_stage = {0: QK_NONE, 1: QK_BIASED, 2: QK_SOFTMAX}.get(int(qk_output))
    if qk_stage is None:
        _fail(op, f"qk_output must be 0, 1 or 2, got {qk_output}")
    out, qk = compute.sdpa(Sdpa(_scale(scale, head_size), float(softcap or 0.0), sink, qk_stage),
                           np.ascontiguousarray(q), present_k, present_v, bias_all)
    results = [merge_heads(out), present_k, present_v]
    if _want(outputs, 3):
        if qk is None:
            _fail(op, "the output_qk output needs qk_output 1 or 2")
        results.append(qk)
    return tuple(results)


@reference_op
class GroupQueryAttention(OpRun):
    """See the module docstring."""

    def _run(self, *args, **attrs):
        return group_query_attention(REFERENCE, wanted_outputs(self), dict(zip(GQA_INPUTS, args)), **attrs)


# --- DecoderMaskedMultiHeadAttention ----------------------------------------------------------------------------
DMMHA_INPUTS = ("query", "key", "value", "mask_index", "attention_bias", "past_key", "past_value",
                "past_sequence_length", "beam_width", "cache_indirection", "bias")


def decoder_masked_multi_head_attention(compute, outputs: int, inputs: dict, num_heads=0, scale=None,
                                        mask_filter_value=MASK_FILTER_VALUE, past_present_share_buffer=0,
                                        output_qk=0) -> tuple:
    op = "DecoderMaskedMultiHeadAttention"
    get = inputs.get
    n = num_heads
    query, key, value, bias = get("query"), get("key"), get("value"), get("bias")
    if n <= 0 or query is None or query.ndim != 3 or query.shape[1] != 1:
        _fail(op, f"query must be [batch, 1, hidden] and num_heads positive, got "
                  f"{None if query is None else query.shape} and {n}")
    batch = query.shape[0]
    cross = key is not None and key.ndim == 4
    if key is None and value is None:  # packed Q, K, V [B, 1, D + D + Dv]
        if query.shape[2] % 3:
            _fail(op, f"packed query {query.shape} does not split into Q, K and V of one size")
        query, key, value = np.split(query, 3, axis=2)
    if cross:
        if value is None or value.shape[:3] != key.shape[:3] or key.shape[:2] != (batch, n):
            _fail(op, f"cross attention's key and value must be [{batch}, {n}, kv_sequence, head_size], got "
                      f"{key.shape} and {None if value is None else value.shape}")
        q = split_heads(op, query, n, "query")
        k, v = key, value
        if bias is not None:
            q = q + bias[:query.shape[2]].reshape(n, 1, -1)
    else:
        if key is None or value is None or key.shape[:2] != (batch, 1) or value.shape[:2] != (batch, 1):
            _fail(op, f"self attention's key and value must be [{batch}, 1, hidden]")
        if bias is not None:
            dq, dk = query.shape[2], key.shape[2]
            if bias.shape != (dq + dk + value.shape[2],):
                _fail(op, f"bias must be [{dq + dk + value.shape[2]}], got {list(bias.shape)}")
            query, key, value = query + bias[:dq], key + bias[dq:dq + dk], value + bias[dq + dk:]
        q, k_new, v_new = (split_heads(op, t, n, name) for t, name in ((query, "query"), (key, "key"),
                                                                       (value, "value")))
        past_key, past_value = get("past_key"), get("past_value")
        if past_key is None or past_value is None:
            k, v = k_new, v_new
        elif past_present_share_buffer:
            if get("past_sequence_length") is None:
                _fail(op, "past_present_share_buffer=1 needs past_sequence_length")
            p = int(np.asarray(get("past_sequence_length")).reshape(-1)[0])
            if past_key.shape[:2] != (batch, n) or not 0 <= p < past_key.shape[2]:
                _fail(op, f"past_key {past_key.shape} must be [{batch}, {n}, max_sequence, head_size] with room "
                          f"after past_sequence_length {p}")
            present_k, present_v = past_key.copy(), past_value.copy()
            present_k[:, :, p:p + 1], present_v[:, :, p:p + 1] = k_new, v_new
            k, v = present_k[:, :, :p + 1], present_v[:, :, :p + 1]
        else:
            present_k = _concat_past(op, past_key, k_new, "past_key")
            present_v = _concat_past(op, past_value, v_new, "past_value")
            k, v = present_k, present_v
        if past_key is None:
            present_k, present_v = k, v
        indirection = get("cache_indirection")
        if indirection is not None and k.shape[2] > 1:
            beam = int(np.asarray(get("beam_width")).reshape(-1)[0]) if get("beam_width") is not None else 1
            if beam <= 0 or batch % beam or indirection.shape[:2] != (batch // beam, beam) \
                    or indirection.shape[2] < k.shape[2] - 1:
                _fail(op, f"cache_indirection must be [{batch} / beam_width, beam_width, max_sequence], got "
                          f"{indirection.shape} with beam_width {beam}")
            t = k.shape[2] - 1  # the past positions; the new key is each row's own
            rows = (np.arange(batch) // beam * beam).reshape(batch, 1) + \
                indirection.reshape(batch, -1)[:, :t].astype(np.int64)
            k = np.concatenate((k[rows, :, np.arange(t)].transpose(0, 2, 1, 3), k[:, :, t:]), axis=2)
            v = np.concatenate((v[rows, :, np.arange(t)].transpose(0, 2, 1, 3), v[:, :, t:]), axis=2)
    total = k.shape[2]
    mask = get("mask_index")
    masks = []
    if mask is not None:
        mask = np.asarray(mask)
        if mask.ndim != 2 or mask.shape[0] != batch or mask.shape[1] < total:
            _fail(op, f"mask_index must be [{batch}, {total}] (or longer), got {list(mask.shape)}")
        masks.append(((mask[:, :total] == 0)[:, None, :], mask_filter_value))
    bias_all = filtered_bias(masks, get("attention_bias"), (batch, n, 1, total), q.dtype, op)
    qk_stage = QK_BIASED if output_qk else QK_NONE
    out, qk = compute.sdpa(Sdpa(_scale(scale, q.shape[3]), qk_stage=qk_stage), np.ascontiguousarray(q),
                           np.ascontiguousarray(k), np.ascontiguousarray(v), bias_all)
    results = [merge_heads(out)]
    if _want(outputs, 1):
        results += [k, v] if cross else [present_k, present_v]
    if _want(outputs, 3) and output_qk:
        results.append(qk)
    return tuple(results)


@reference_op
class DecoderMaskedMultiHeadAttention(OpRun):
    """See the module docstring."""

    def _run(self, *args, **attrs):
        return decoder_masked_multi_head_attention(REFERENCE, wanted_outputs(self), dict(zip(DMMHA_INPUTS, args)),
                                                   **attrs)
