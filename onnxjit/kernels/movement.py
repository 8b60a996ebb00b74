"""Numba kernels for the data-movement ops that need a loop (the rest is numpy indexing in onnxjit.ops.movement)."""
from __future__ import annotations

from onnxjit.cache.jit import njit


@njit(cache=True)
def range_accumulate(out, start, delta):
    """onnxruntime's Range: out[0] = start, then each element is the previous one plus delta, rounded to the
    output's dtype at every step (not start + i * delta)."""
    v = start
    for i in range(out.shape[0]):
        out[i] = v
        v += delta
