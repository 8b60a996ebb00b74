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
  * `nearest_2d`, `bilinear_2d_cols_first`, `bilinear_2d_rows_first`: both of the last two axes at once, for a
    tensor viewed as (planes, H, W), units of output rows, no intermediate array. Nearest gathers a row once and
    copies it to the output rows repeating it; linear keeps the two W-resampled input rows an output row blends
    and reuses them for the next rows (upscaling), or blends two input rows first (downscaling H). A 2x downscale
    along W reads with a stride of 2 rather than through the index table: LLVM vectorizes strided loads but
    leaves gathers scalar on this hardware.
Hot loops index with unsigned integers (`_u`): numba then skips its negative-index wraparound.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels.views import u64 as _u


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


@njit(cache=True, nogil=True)
def nearest_2d(x, yi, xi, halving, out, u0, u1):
    """out[p, i, j] = x[p, yi[i], xi[j]], units [u0, u1) of output rows (p, i). An output row reading the same
    input row as the one before it (an upscaled axis) copies that row instead of gathering again. `halving` >= 0
    says xi[j] = halving + 2 * j (a 2x downscale): a strided copy, which vectorizes where a gather does not."""
    oh = out.shape[1]
    ow = out.shape[2]
    for u in range(u0, u1):
        p = u // oh
        i = u - p * oh
        dst = out[p, i]
        if u > u0 and i > 0 and yi[i] == yi[i - 1]:
            prev = out[p, i - 1]
            for j in range(ow):
                dst[_u(j)] = prev[_u(j)]
        elif halving >= 0:
            src = x[p, yi[i], halving:]
            for j in range(ow):
                dst[_u(j)] = src[_u(2 * j)]
        else:
            src = x[p, yi[i]]
            for j in range(ow):
                dst[_u(j)] = src[_u(xi[_u(j)])]


@njit(cache=True, forceinline=True)
def _lerp_row(src, xi, xw, halving, dst):
    """dst[j] = xw[0, j] * src[xi[0, j]] + xw[1, j] * src[xi[1, j]]: a row resampled along W. `halving` >= 0 says
    xi[0, j] = halving + 2 * j and xi[1, j] = xi[0, j] + 1 (a 2x downscale): strided loads, which vectorize."""
    w0, w1 = xw[0], xw[1]
    if halving >= 0:
        pairs = src[halving:]
        for j in range(dst.size):
            dst[_u(j)] = w0[_u(j)] * pairs[_u(2 * j)] + w1[_u(j)] * pairs[_u(2 * j + 1)]
    else:
        i0, i1 = xi[0], xi[1]
        for j in range(dst.size):
            dst[_u(j)] = w0[_u(j)] * src[_u(i0[_u(j)])] + w1[_u(j)] * src[_u(i1[_u(j)])]


@njit(cache=True, nogil=True)
def bilinear_2d_cols_first(x, yi, yw, xi, xw, halving, out, u0, u1):
    """Linear over the last two axes, W first: out[p, i] = yw[0, i] * r(yi[0, i]) + yw[1, i] * r(yi[1, i]), r(y)
    the input row y resampled along W, units [u0, u1) of output rows (p, i). Two resampled rows are kept and
    reused by the next output rows (an upscaled H reads each input row for about 1/scale output rows)."""
    h = x.shape[1]
    oh = out.shape[1]
    ow = out.shape[2]
    held = np.empty((2, ow), dtype=out.dtype)
    tag0 = -1  # the input row (p * h + y) each buffer holds
    tag1 = -1
    for u in range(u0, u1):
        p = u // oh
        i = u - p * oh
        a = p * h + yi[0, i]
        b = p * h + yi[1, i]
        if tag0 != a and tag1 != a:  # row a goes where row b is not
            if tag0 == b:
                _lerp_row(x[p, yi[0, i]], xi, xw, halving, held[1])
                tag1 = a
            else:
                _lerp_row(x[p, yi[0, i]], xi, xw, halving, held[0])
                tag0 = a
        if tag0 != b and tag1 != b:
            if tag0 == a:
                _lerp_row(x[p, yi[1, i]], xi, xw, halving, held[1])
                tag1 = b
            else:
                _lerp_row(x[p, yi[1, i]], xi, xw, halving, held[0])
                tag0 = b
        ra = held[0] if tag0 == a else held[1]
        rb = held[0] if tag0 == b else held[1]
        w0 = yw[0, i]
        w1 = yw[1, i]
        dst = out[p, i]
        for j in range(ow):
            dst[_u(j)] = w0 * ra[_u(j)] + w1 * rb[_u(j)]


@njit(cache=True, nogil=True)
def bilinear_2d_rows_first(x, yi, yw, xi, xw, halving, out, u0, u1):
    """Linear over the last two axes, H first: each output row (p, i), units [u0, u1), blends its two input rows
    (a contiguous, vectorized pass over W) then resamples the blend along W. For a downscaled H, where each
    output row has input rows of its own."""
    oh = out.shape[1]
    w = x.shape[2]
    blend = np.empty(w, dtype=out.dtype)
    for u in range(u0, u1):
        p = u // oh
        i = u - p * oh
        ra = x[p, yi[0, i]]
        rb = x[p, yi[1, i]]
        w0 = yw[0, i]
        w1 = yw[1, i]
        for k in range(w):
            blend[_u(k)] = w0 * ra[_u(k)] + w1 * rb[_u(k)]
        _lerp_row(blend, xi, xw, halving, out[p, i])
