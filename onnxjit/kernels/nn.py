"""BatchNormalization (inference) and Softmax kernels."""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def batchnorm(x, scale, bias, mean, var, eps):
    """x (N, C, S); parameters (C, P) with P 1 (per channel) or S (per element, BatchNormalization-7 spatial=0).
    y = (x - mean) / sqrt(var + eps) * scale + bias."""
    n_img, n_ch, size = x.shape
    per_elem = scale.shape[1]
    a = np.empty((n_ch, per_elem), dtype=np.float64)
    b = np.empty((n_ch, per_elem), dtype=np.float64)
    for c in range(n_ch):
        for j in range(per_elem):
            a[c, j] = scale[c, j] / np.sqrt(var[c, j] + eps)
            b[c, j] = bias[c, j] - mean[c, j] * a[c, j]
    at = a.astype(x.dtype)
    bt = b.astype(x.dtype)
    out = np.empty_like(x)
    for t in prange(n_img * n_ch):
        n = t // n_ch
        c = t - n * n_ch
        xr = x[n, c]
        yr = out[n, c]
        if per_elem == 1:
            av = at[c, 0]
            bv = bt[c, 0]
            for j in range(size):
                yr[j] = xr[j] * av + bv
        else:
            ar = at[c]
            br = bt[c]
            for j in range(size):
                yr[j] = xr[j] * ar[j] + br[j]
    return out


@njit(cache=True, parallel=True)
def softmax_rows(x):
    """Softmax along the last axis of x (rows, n)."""
    rows, n = x.shape
    out = np.empty_like(x)
    for r in prange(rows):
        xr = x[r]
        yr = out[r]
        m = xr[0]
        for j in range(1, n):
            if xr[j] > m:
                m = xr[j]
        acc = 0.0
        for j in range(n):
            e = np.exp(xr[j] - m)
            yr[j] = e
            acc += e
        inv = 1.0 / acc
        for j in range(n):
            yr[j] = yr[j] * inv
    return out


@njit(cache=True, parallel=True)
def softmax_axis(x):
    """Softmax along axis 1 of x (outer, n, inner)."""
    outer, n, inner = x.shape
    out = np.empty_like(x)
    for o in prange(outer):
        xo = x[o]
        yo = out[o]
        mx = xo[0].copy()
        for j in range(1, n):
            for i in range(inner):
                if xo[j, i] > mx[i]:
                    mx[i] = xo[j, i]
        acc = np.zeros(inner, dtype=np.float64)
        for j in range(n):
            for i in range(inner):
                e = np.exp(xo[j, i] - mx[i])
                yo[j, i] = e
                acc[i] += e
        for i in range(inner):
            acc[i] = 1.0 / acc[i]
        for j in range(n):
            for i in range(inner):
                yo[j, i] = yo[j, i] * acc[i]
    return out
