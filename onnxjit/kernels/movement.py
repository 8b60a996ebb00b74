"""Numba kernels for the data-movement ops that need a loop (the rest is numpy indexing in onnxjit.ops.movement)."""
from __future__ import annotations

from onnxjit.cache.jit import njit
from onnxjit.kernels.views import u64 as _u


@njit(cache=True)
def range_accumulate(out, start, delta):
    """onnxruntime's Range: out[0] = start, then each element is the previous one plus delta, rounded to the
    output's dtype at every step (not start + i * delta)."""
    v = start
    for i in range(out.shape[0]):
        out[i] = v
        v += delta


@njit(cache=True, nogil=True)
def copy_columns(src, out, start, u0, u1):
    """out[r, start:start + src.shape[1]] = src[r] for the rows [u0, u1): one input of a Concat copied into its
    output, both viewed as (the dims before the axis, the rest), C-contiguous (a native segment's Concat)."""
    w = src.shape[1]
    for r in range(u0, u1):
        for c in range(w):
            out[r, start + c] = src[r, c]


# --- Transpose ---------------------------------------------------------------------------------------------------
TILE = 32  # a transposed tile: 32 x 32 elements of both sides stay in L1


@njit(cache=True, nogil=True)
def transpose_tiles(x, out, u0, u1):
    """out[b] = x[b].T for x (B, R, C) and out (B, C, R), both C-contiguous, units [u0, u1) of (b, band of TILE
    rows of x): each band is transposed TILE columns at a time, so the strided side of each tile stays in L1.
    Flat unsigned indices: numba's wraparound checks kept the loops scalar and slower than numpy's copy."""
    n_b, n_r, n_c = x.shape
    bands = (n_r + TILE - 1) // TILE
    xf = x.reshape(-1)
    of = out.reshape(-1)
    for u in range(u0, u1):
        b = u // bands
        r0 = (u - b * bands) * TILE
        r1 = min(n_r, r0 + TILE)
        base = b * n_r * n_c
        for c0 in range(0, n_c, TILE):
            c1 = min(n_c, c0 + TILE)
            for c in range(c0, c1):
                dst = _u(base + c * n_r)
                src = _u(base + c)
                for r in range(r0, r1):
                    of[dst + _u(r)] = xf[src + _u(r * n_c)]


@njit(cache=True, nogil=True)
def transpose_rows(xf, out, shape, strides, u0, u1):
    """Rows of a transpose whose last axis stays last: out (rows, inner) C-contiguous, xf the input flat; `shape`
    the output's outer dims and `strides` the input's strides (in elements) along them, 4 of each (leading 1s).
    Units [u0, u1) are rows, walked with a running multi-index (no division per row); each is one contiguous
    copy."""
    inner = out.shape[1]
    of = out.reshape(-1)
    s1, s2, s3 = shape[1], shape[2], shape[3]
    t0, t1, t2, t3 = strides[0], strides[1], strides[2], strides[3]
    i3 = u0 % s3
    q = u0 // s3
    i2 = q % s2
    q //= s2
    i1 = q % s1
    i0 = q // s1
    src = i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3
    dst = u0 * inner
    for _ in range(u0, u1):
        a = _u(src)
        b = _u(dst)
        for t in range(_u(0), _u(inner)):
            of[b + t] = xf[a + t]
        dst += inner
        i3 += 1
        src += t3
        if i3 == s3:
            i3 = 0
            src -= s3 * t3
            i2 += 1
            src += t2
            if i2 == s2:
                i2 = 0
                src -= s2 * t2
                i1 += 1
                src += t1
                if i1 == s1:
                    i1 = 0
                    src -= s1 * t1
                    i0 += 1
                    src += t0
