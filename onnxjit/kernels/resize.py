"""Resize kernels: one pass resamples one axis of a tensor viewed as (outer, n_in, inner) into
(outer, n_out, inner), from a table of taps per output coordinate (source index, weight), which the caller
builds once per geometry (`onnxjit.ops.resize`). Resize is separable, so a whole Resize is one pass per resized
axis; nearest, linear, cubic and antialiased filters differ only in their tables.

  * `resample_rows` / `resample_last`: weighted taps (linear, cubic, antialias), float32/float64; `count[j]` taps
    of row j of the tables are used (an antialiasing filter's width varies at the borders). `resample_rows`
    works on inner > 1, units (outer, output coordinate), each a vectorized loop over `inner`; `resample_last`
    on the last axis (inner = 1), units `outer` rows.
  * `gather_rows` / `gather_last`: nearest, a pure copy of the source index's elements. The caller passes any
    dtype viewed as the unsigned integer of its width, so four compiled versions cover every dtype and the copy
    is exact.
Hot loops index with unsigned integers (`_u`): numba then skips its negative-index wraparound.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, nogil=True)
def resample_rows(x, idx, wts, count, out, u0, u1):
    """out[o, j, :] = sum over t < count[j] of wts[j, t] * x[o, idx[j, t], :], units [u0, u1) of (o, j)."""
    n_out = out.shape[1]
    inner = out.shape[2]
    for u in range(u0, u1):
        o = u // n_out
        j = u - o * n_out
        dst = out[o, j]
        src = x[o, idx[j, 0]]
        wt = wts[j, 0]
        for k in range(inner):
            dst[_u(k)] = wt * src[_u(k)]
        for t in range(1, count[j]):
            src = x[o, idx[j, t]]
            wt = wts[j, t]
            for k in range(inner):
                dst[_u(k)] += wt * src[_u(k)]


@njit(cache=True, nogil=True)
def resample_last(x, idx, wts, count, out, u0, u1):
    """out[o, j] = sum over t < count[j] of wts[j, t] * x[o, idx[j, t]], units [u0, u1) of rows o."""
    n_out = out.shape[1]
    for o in range(u0, u1):
        src = x[o]
        dst = out[o]
        for j in range(n_out):
            acc = wts[j, 0] * src[idx[j, 0]]
            for t in range(1, count[j]):
                acc += wts[j, t] * src[idx[j, t]]
            dst[_u(j)] = acc


@njit(cache=True, nogil=True)
def gather_rows(x, idx, out, u0, u1):
    """out[o, j, :] = x[o, idx[j], :], units [u0, u1) of (o, j)."""
    n_out = out.shape[1]
    inner = out.shape[2]
    for u in range(u0, u1):
        o = u // n_out
        j = u - o * n_out
        dst = out[o, j]
        src = x[o, idx[j]]
        for k in range(inner):
            dst[_u(k)] = src[_u(k)]


@njit(cache=True, nogil=True)
def gather_last(x, idx, out, u0, u1):
    """out[o, j] = x[o, idx[j]], units [u0, u1) of rows o."""
    n_out = out.shape[1]
    for o in range(u0, u1):
        src = x[o]
        dst = out[o]
        for j in range(n_out):
            dst[_u(j)] = src[idx[j]]
