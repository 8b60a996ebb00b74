"""Kernels of the ai.onnx.ml preprocessing and encoding ops (onnxjit.ops.ml_preprocess, onnxjit.ops.ml_encoders):
one pass over the data each, in the arithmetic onnxruntime 1.32 uses (scaler.cc, normalizer.cc, imputer.cc,
binarizer.cc, onehotencoder.cc, label_encoder.h).

Row kernels take the rows [r0, r1) of a 2-D view, the share `run_units` hands out; the lookups are single calls
(a binary search per element over sorted keys, NaN handled apart).
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.cache.jit import njit

MAX, L1, L2 = range(3)
NORMS = {"MAX": MAX, "L1": L1, "L2": L2}

_0 = np.float32(0.0)
_1 = np.float32(1.0)
_LOWEST = np.float32(-np.finfo(np.float32).max)
_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def scale_rows(x, offset, scale, out, r0, r1):
    """out[r, j] = (x[r, j] - offset[j]) * scale[j] for r in [r0, r1): in x's dtype (offset and scale in it too),
    rounded to out's float32 at the store, as onnxruntime's Scaler does for float and double input."""
    f = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        o = out[r]
        for j in range(f):
            o[j] = (xr[j] - offset[j]) * scale[j]


@njit(**_JIT)
def normalize_rows(x, norm, out, r0, r1):
    """out[r] = x[r] normalized by its MAX (the largest value, not magnitude), L1 or L2 norm for r in [r0, r1), in
    float32; a row whose norm is 0 is copied. L2 writes sign(x) sqrt(x^2 / sum x^2), squares taken in x's dtype."""
    f = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        o = out[r]
        if norm == MAX:
            top = _LOWEST
            for j in range(f):
                v = np.float32(xr[j])
                if top < v:
                    top = v
            if top != _0:
                for j in range(f):
                    o[j] = np.float32(xr[j]) / top
            else:
                for j in range(f):
                    o[j] = np.float32(xr[j])
        elif norm == L1:
            total = _0
            for j in range(f):
                total += np.float32(abs(xr[j]))
            if total != _0:
                for j in range(f):
                    o[j] = np.float32(xr[j]) / total
            else:
                for j in range(f):
                    o[j] = np.float32(xr[j])
        else:
            total = _0
            for j in range(f):
                v = xr[j]
                sq = np.float32(v * v)
                o[j] = sq
                total += sq
            if total != _0:
                for j in range(f):
                    t = np.float32(math.sqrt(o[j] / total))
                    o[j] = -t if xr[j] < 0 else t
            else:
                for j in range(f):
                    o[j] = np.float32(xr[j])


@njit(**_JIT)
def binarize(x, threshold, out):
    """out = 1 where x > threshold else 0 (x flat float32/float64, threshold of its dtype). Returns the index of
    the first NaN (onnxruntime refuses those), or -1."""
    one = out.dtype.type(1)
    zero = out.dtype.type(0)
    for i in range(x.shape[0]):
        v = x[i]
        if v != v:
            return i
        out[i] = one if v > threshold else zero
    return -1


@njit(**_JIT)
def impute_rows(x, replaced, replace_nan, values, out, r0, r1):
    """out[r, j] = values[j] where x[r, j] equals `replaced` (or is NaN when replace_nan), else x[r, j]."""
    f = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        o = out[r]
        for j in range(f):
            v = xr[j]
            if (replace_nan and v != v) or v == replaced:
                o[j] = values[j]
            else:
                o[j] = v


@njit(**_JIT)
def _find(keys, v):
    """Position of v in the sorted keys, or len(keys) when absent."""
    lo, hi = 0, keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < keys.shape[0] and keys[lo] == v else keys.shape[0]


@njit(**_JIT)
def lookup(keys, x, nan_at, out):
    """out[i] = position of x[i] among the sorted keys (no NaN among them), len(keys) where absent; a NaN x[i]
    gets nan_at (len(keys) when NaN is no key). x flat, of the keys' dtype."""
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = nan_at if v != v else _find(keys, v)


@njit(**_JIT)
def one_hot(keys, columns, x, out):
    """out[i, columns[p]] = 1 where x[i] (int64) is keys[p] (sorted); out zeroed before. Returns the index of the
    first value that is no category, or -1."""
    missing = -1
    for i in range(x.shape[0]):
        p = _find(keys, x[i])
        if p < keys.shape[0]:
            out[i, columns[p]] = _1
        elif missing < 0:
            missing = i
    return missing
