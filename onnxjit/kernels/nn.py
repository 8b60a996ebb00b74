"""BatchNormalization (inference) kernel. It fills its share [start, end) of rows into a preallocated output and
releases the GIL, so the caller can spread the rows over threads. (Softmax lives in kernels/normalization.py.)"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit



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


