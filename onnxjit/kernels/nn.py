"""BatchNormalization (inference), InstanceNormalization and LRN kernels. Each fills its share [start, end) of rows
into a preallocated output and releases the GIL, so the caller can spread the rows over threads. (Softmax lives
in kernels/normalization.py.)"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels.normalization import row_sum, row_sum_sq_dev
from onnxjit.kernels.views import u64 as _u



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


@njit(cache=True, nogil=True)
def instance_norm(x, scale, bias, eps, out, t0, t1):
    """InstanceNormalization over the (image, channel) rows [t0, t1) of x (N, C, S): out = scale[c] * (x - mean)
    / sqrt(var + eps) + bias[c], mean and (biased) variance over the row, accumulated in float64 (onnxruntime
    normalizes in the input's float type; a float64 sum keeps long rows from drifting). The sums are vectorized
    (reassociated): one sequential float64 sum ran at an add per 4 cycles, wav2vec's group norm over 512 x 3,199
    took 1.5 ms on two threads against onnxruntime's 0.95."""
    n_ch, size = x.shape[1], x.shape[2]
    zero = np.float64(0)
    for t in range(t0, t1):
        n = t // n_ch
        c = t - n * n_ch
        xr = x[n, c]
        yr = out[n, c]
        mean = row_sum(xr, zero) / size
        inv = 1.0 / np.sqrt(row_sum_sq_dev(xr, mean, zero) / size + eps)
        a = out.dtype.type(scale[c] * inv)
        b = out.dtype.type(bias[c] - mean * scale[c] * inv)
        for j in range(size):
            yr[_u(j)] = xr[_u(j)] * a + b


@njit(cache=True, nogil=True)
def lrn(x, size, alpha, beta, bias, out, t0, t1):
    """LRN over the (image, channel) rows [t0, t1) of x (N, C, S): out = x / (bias + alpha / size * sum of x^2
    over the channels [c - (size - 1) // 2, c + size // 2]) ** beta, the sum and the power in float64."""
    n_ch, plane = x.shape[1], x.shape[2]
    lo_off = (size - 1) // 2
    hi_off = size // 2
    acc = np.empty(plane, dtype=np.float64)
    k = alpha / size
    for t in range(t0, t1):
        n = t // n_ch
        c = t - n * n_ch
        for j in range(plane):
            acc[_u(j)] = 0.0
        for cc in range(max(0, c - lo_off), min(n_ch, c + hi_off + 1)):
            xr = x[n, cc]
            for j in range(plane):
                v = np.float64(xr[_u(j)])
                acc[_u(j)] += v * v
        xr = x[n, c]
        yr = out[n, c]
        for j in range(plane):
            yr[_u(j)] = xr[_u(j)] / (bias + k * acc[_u(j)]) ** beta
