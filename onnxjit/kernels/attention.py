"""Scaled dot-product attention over 4-D Q [B, Hq, S, D], K [B, Hkv, L, D], V [B, Hkv, L, Dv].

The (batch, head) pairs [bh0, bh1) one after another; the op layer hands ranges of them to its thread pool
(`ops.nn.run_units`, with BLAS single-threaded meanwhile: BLAS threads nested in a parallel loop
oversubscribed the cores, ~9x slower measured, and left spinning threads that halved the speed of later MatMuls):
scores = Q K^T * scale + bias (BLAS through np.dot), a stable softmax per row, then P V (np.dot into the
output). The bias is an additive float mask viewed as [B, Hq, S, L] (broadcast strides allowed) plus, with
`causal`, -inf above the diagonal. A row whose bias is -inf everywhere gives `fully_masked`: 0 zeros (ONNX
Attention's rule), 1 the average of V over all keys, 2 NaN (codes of contrib.attention.FULLY_MASKED_ROWS).
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _exp_sum(row, m, stop, zero):
    """row[j] <- exp(row[j] - m) for j < stop, returning their sum (reassociated, so that it vectorizes)."""
    total = zero
    for j in range(stop):
        e = vmath.exp(row[j] - m)
        row[j] = e
        total += e
    return total


@njit(cache=True, nogil=True, fastmath={"contract"})
def _softmax_rows(scores, bias, has_bias, causal, scale, fully_masked):
    """scores[i] <- softmax(scores[i] * scale + bias[i], with -inf for j > i when causal) in place."""
    s, total = scores.shape
    neg_inf = scores.dtype.type(-np.inf)
    zero = scores.dtype.type(0)
    for i in range(s):
        row = scores[i]
        stop = min(i + 1, total) if causal else total  # keys at and after `stop` are masked
        if has_bias:
            b = bias[i]
            for j in range(stop):
                row[j] = row[j] * scale + b[j]
            all_masked = True
            for j in range(stop):
                if b[j] != neg_inf:
                    all_masked = False
                    break
        else:
            for j in range(stop):
                row[j] = row[j] * scale
            all_masked = stop == 0
        if all_masked:  # fully_masked: 0 zeros, 1 the average of V over every key, 2 NaN
            row[:] = zero if fully_masked == 0 else scores.dtype.type(1) / total if fully_masked == 1 else \
                scores.dtype.type(np.nan)
            continue
        m = row[0]
        for j in range(1, stop):
            m = row[j] if row[j] > m or row[j] != row[j] else m
        if m == neg_inf:
            m = zero  # every score -inf where the bias is not: exp gives zeros, as ONNX's reference
        row_sum = _exp_sum(row, m, stop, zero)
        inv = scores.dtype.type(1) / row_sum if row_sum > zero else zero
        for j in range(stop):
            row[j] *= inv
        row[stop:] = zero


@njit(cache=True, nogil=True)
def attention(q, k, v, bias, has_bias, causal, scale, fully_masked, out, bh0, bh1):
    """out[b, h] = softmax(q[b, h] k[b, h // r]^T * scale + bias[b, h]) v[b, h // r], r = Hq // Hkv, for the
    flattened (batch, head) pairs [bh0, bh1). q, k, v, out C-contiguous; bias any strides (unused when not
    has_bias)."""
    heads = q.shape[1]
    group = heads // k.shape[1]
    for bh in range(bh0, bh1):
        b = bh // heads
        h = bh - b * heads
        kv = h // group
        scores = np.dot(q[b, h], k[b, kv].T)
        _softmax_rows(scores, bias[b, h], has_bias, causal, scale, fully_masked)
        np.dot(scores, v[b, kv], out[b, h])
