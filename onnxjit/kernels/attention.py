"""Scaled dot-product attention over 4-D Q [B, Hq, S, D], K [B, Hkv, L, D], V [B, Hkv, L, Dv].

Units of (batch, head, block of query rows) one after another; the op layer hands ranges of them to its thread pool
(`ops.nn.run_units`, with BLAS single-threaded meanwhile: BLAS threads nested in a parallel loop
oversubscribed the cores, ~9x slower measured, and left spinning threads that halved the speed of later MatMuls):
scores = softcap(Q K^T * scale) + bias (BLAS through np.dot; softcap c * tanh(x / c) when c > 0), a stable
softmax per row, then P V (np.dot into the output). The bias is an additive float mask viewed as [B, Hq, S, L]
(broadcast strides allowed) plus, with `causal`, -inf for keys j > i + causal_offset (the offset is the length of
a past key cache: bottom-right alignment). The scores at one stage (scaled, softcapped, biased, softmaxed) can be
copied out for Attention's qk_matmul_output; with it the scores of the causally masked keys are computed too. A
row whose bias is -inf everywhere gives `fully_masked`: 0 zeros (ONNX Attention's rule), 1 the average of V over
all keys, 2 NaN (codes of contrib.attention.FULLY_MASKED_ROWS).

`rotary` is RotaryEmbedding's rotation of the head features, per (batch, position) pair.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath
from onnxjit.kernels.normalization import row_max

# the stage of the scores the qk output gets (ONNX Attention's qk_matmul_output_mode, as onnxruntime orders them)
QK_NONE, QK_SCALED, QK_SOFTCAPPED, QK_BIASED, QK_SOFTMAX = -1, 0, 1, 2, 3


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _exp_sum(row, m, stop, zero):
    """row[j] <- exp(row[j] - m) for j < stop, returning their sum (reassociated, so that it vectorizes)."""
    total = zero
    for j in range(stop):
        e = vmath.exp(row[j] - m)
        row[j] = e
        total += e
    return total


@njit(cache=True, nogil=True, fastmath={"contract"})
def _softmax_rows(scores, bias, bias_row0, has_bias, causal, causal_offset, scale, softcap, fully_masked, qk_mode,
                  qk_out):
    """scores[i] <- softmax(softcap(scores[i] * scale) + bias[(bias_row0 + i) % its rows], with -inf for
    j > i + causal_offset when causal) in place; qk_out[i] <- the scores at stage qk_mode (QK_* codes) unless it is
    QK_NONE. bias C-contiguous (1 or the query rows, keys), so that its rows' loops vectorize."""
    s, total = scores.shape
    neg_inf = scores.dtype.type(-np.inf)
    zero = scores.dtype.type(0)
    inv_cap = scores.dtype.type(1) / softcap if softcap > zero else zero
    for i in range(s):
        row = scores[i]
        # keys at and after `stop` are masked
        stop = min(max(i + 1 + causal_offset, 0), total) if causal else total
        width = total if qk_mode != QK_NONE else stop  # the keys whose scores are computed
        for j in range(width):
            row[j] = row[j] * scale
        if qk_mode == QK_SCALED:
            qk_out[i] = row
        if softcap > zero:
            for j in range(width):
                row[j] = softcap * vmath.tanh(row[j] * inv_cap)
        if qk_mode == QK_SOFTCAPPED:
            qk_out[i] = row
        b = bias[(bias_row0 + i) % bias.shape[0]]
        if has_bias:
            for j in range(stop):
                row[j] += b[j]
        if qk_mode == QK_BIASED:
            qk_out[i, :stop] = row[:stop]
            qk_out[i, stop:] = neg_inf
        m = row_max(row[:stop]) if stop > 0 else neg_inf  # a NaN score makes the row NaN (m, or the sum below)
        all_masked = False
        if not m > neg_inf:  # (-inf or NaN) every key masked by the bias, or scores of -inf?
            all_masked = True
            if has_bias:
                for j in range(stop):
                    if b[j] != neg_inf:
                        all_masked = False
                        break
            else:
                all_masked = stop == 0
        if all_masked:  # fully_masked: 0 zeros, 1 the average of V over every key, 2 NaN
            row[:] = zero if fully_masked == 0 else scores.dtype.type(1) / total if fully_masked == 1 else \
                scores.dtype.type(np.nan)
        else:
            if m == neg_inf:
                m = zero  # every score -inf where the bias is not: exp gives zeros, as ONNX's reference
            row_sum = _exp_sum(row, m, stop, zero)
            inv = scores.dtype.type(1) / row_sum if row_sum > zero or row_sum != row_sum else zero
            for j in range(stop):
                row[j] *= inv
            row[stop:] = zero
        if qk_mode == QK_SOFTMAX:
            qk_out[i] = row


@njit(cache=True, nogil=True)
def attention(q, k, v, bias, has_bias, causal, causal_offset, scale, softcap, fully_masked, qk_mode, qk_out, q_rows,
              out, u0, u1):
    """out[b, h] = softmax(softcap(q[b, h] k[b, h // r]^T * scale) + bias[b, h]) v[b, h // r], r = Hq // Hkv, for
    the units [u0, u1) of (batch, head, block of `q_rows` query rows), blocks fastest; qk_out[b, h] gets the
    scores at stage qk_mode. q, k, v, out, qk_out C-contiguous (qk_out unused with QK_NONE); bias C-contiguous
    (Bb, Hb, Sb, keys), each of Bb, Hb, Sb 1 or the full size (read at index modulo it; unused when not
    has_bias)."""
    heads = q.shape[1]
    group = heads // k.shape[1]
    s = q.shape[2]
    n_qb = -(-s // q_rows)
    for u in range(u0, u1):
        bh = u // n_qb
        r0 = (u - bh * n_qb) * q_rows
        r1 = min(s, r0 + q_rows)
        b = bh // heads
        h = bh - b * heads
        kv = h // group
        # K^T copied C-contiguous first: BLAS's NN product of a head ran 95 us a layer where its NT one ran 133
        # (MiniLM's 12 heads of 128 x 32, one thread)
        scores = np.dot(q[b, h, r0:r1], np.ascontiguousarray(k[b, kv].T))
        # row i of the block is query r0 + i: its causal limit moves by r0
        _softmax_rows(scores, bias[b % bias.shape[0], h % bias.shape[1]], r0, has_bias, causal, causal_offset + r0,
                      scale, softcap, fully_masked, qk_mode, qk_out[b, h, r0:r1] if qk_mode != QK_NONE else scores)
        np.dot(scores, v[b, kv], out[b, h, r0:r1])


@njit(cache=True, nogil=True)
def rotary(x, cos, sin, interleaved, rotary_dim, out, u0, u1):
    """out = x with its first rotary_dim features of each head rotated, for the (batch, position) units [u0, u1):
    x, out [B, S, H, D] (any strides), cos, sin [B, S, rotary_dim / 2]. The rotated pairs are (j, j + half) or,
    interleaved, (2j, 2j + 1): x1 * cos - x2 * sin and x1 * sin + x2 * cos."""
    positions, heads, size = x.shape[1], x.shape[2], x.shape[3]
    half = rotary_dim // 2
    for u in range(u0, u1):
        b = u // positions
        s = u - b * positions
        c, sn = cos[b, s], sin[b, s]
        for h in range(heads):
            xr, yr = x[b, s, h], out[b, s, h]
            for j in range(half):
                i1, i2 = (2 * j, 2 * j + 1) if interleaved else (j, j + half)
                x1, x2 = xr[i1], xr[i2]
                yr[i1] = x1 * c[j] - x2 * sn[j]
                yr[i2] = x1 * sn[j] + x2 * c[j]
            for j in range(rotary_dim, size):
                yr[j] = xr[j]
