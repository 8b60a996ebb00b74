"""BatchNormalization (inference) and Softmax kernels. Each fills its share [start, end) of rows into a
preallocated output and releases the GIL, so the caller can spread the rows over threads. exp is `vmath.exp`
(vectorizable, about 1 ulp)."""
from __future__ import annotations

import numpy as np
from numba import njit

from onnxjit.kernels import vmath


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, nogil=True)
def batchnorm(x, a, b, out, t0, t1):
    """out = x * a + b for x (N, C, S) over the (image, channel) rows [t0, t1); a and b are (C, P) with P 1
    (per channel) or S (per element, BatchNormalization-7 spatial=0)."""
    n_ch, size = x.shape[1], x.shape[2]
    per_elem = a.shape[1] > 1
    for t in range(t0, t1):
        n = t // n_ch
        c = t - n * n_ch
        xr = x[n, c]
        yr = out[n, c]
        if per_elem:
            ar = a[c]
            br = b[c]
            for j in range(size):
                yr[_u(j)] = xr[_u(j)] * ar[_u(j)] + br[_u(j)]
        else:
            av = a[c, 0]
            bv = b[c, 0]
            for j in range(size):
                yr[_u(j)] = xr[_u(j)] * av + bv


@njit(cache=True)
def _row_max(x):
    """max(x) of a non-empty contiguous 1-D x, over 16 lanes (numba leaves a plain max loop serial)."""
    n = x.shape[0]
    m = x[0]
    nb = n // 16 * 16
    if nb >= 32:
        acc = x[:16].copy()
        for j in range(16, nb, 16):
            for t in range(16):
                v = x[_u(j + t)]
                a = acc[_u(t)]
                acc[_u(t)] = v if v > a else a
        for t in range(16):
            a = acc[_u(t)]
            m = a if a > m else m
    else:
        nb = 1
    for j in range(nb, n):
        v = x[_u(j)]
        m = v if v > m else m
    return m


@njit(cache=True, fastmath={"reassoc", "contract"})
def _row_sum(x):
    acc = 0.0
    for j in range(x.shape[0]):
        acc += x[_u(j)]
    return acc


@njit(cache=True, nogil=True)
def softmax_rows(x, out, r0, r1):
    """Softmax along the last axis of x (rows, n), rows [r0, r1)."""
    n = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        yr = out[r]
        m = _row_max(xr)
        for j in range(n):
            yr[_u(j)] = vmath.exp(xr[_u(j)] - m)
        inv = 1.0 / _row_sum(yr)
        for j in range(n):
            yr[_u(j)] = yr[_u(j)] * inv


@njit(cache=True, nogil=True)
def softmax_axis(x, out, o0, o1):
    """Softmax along axis 1 of x (outer, n, inner), outer indices [o0, o1)."""
    n, inner = x.shape[1], x.shape[2]
    mx = np.empty(inner, dtype=x.dtype)
    acc = np.empty(inner, dtype=np.float64)
    for o in range(o0, o1):
        xo = x[o]
        yo = out[o]
        for i in range(inner):
            mx[_u(i)] = xo[0, i]
        for j in range(1, n):
            xr = xo[j]
            for i in range(inner):
                v = xr[_u(i)]
                m = mx[_u(i)]
                mx[_u(i)] = v if v > m else m
        for i in range(inner):
            acc[_u(i)] = 0.0
        for j in range(n):
            xr = xo[j]
            yr = yo[j]
            for i in range(inner):
                e = vmath.exp(xr[_u(i)] - mx[_u(i)])
                yr[_u(i)] = e
                acc[_u(i)] += e
        for i in range(inner):
            acc[_u(i)] = 1.0 / acc[_u(i)]
        for j in range(n):
            yr = yo[j]
            for i in range(inner):
                yr[_u(i)] = yr[_u(i)] * acc[_u(i)]
