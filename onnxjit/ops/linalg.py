"""Gemm and MatMul on the CPU provider (float32/float64), BLAS through the kernels in `onnxjit.kernels.linalg`."""
from __future__ import annotations

import numpy as np

from onnxjit.kernels import linalg as k
from onnxjit.ops.nn import call, float_type, rank_of
from onnxjit.ops.registry import attr, register_op


def build_gemm(node):
    n_in = len(node.inputs)
    if n_in < 2 or n_in > 3 or float_type(node, (0, 1, 2)) is None:
        return None
    if any(rank_of(node, i) not in (None, 2) for i in (0, 1)):
        return None
    alpha = float(attr(node, "alpha", 1.0))
    beta = float(attr(node, "beta", 1.0))
    trans_a = int(attr(node, "transA", 0)) != 0
    trans_b = int(attr(node, "transB", 0)) != 0

    def run(a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
        a = a.T if trans_a else a
        b = b.T if trans_b else b
        m, kk = a.shape
        n = b.shape[1]
        if b.shape[0] != kk:
            raise ValueError(f"Gemm: A {a.shape} and B {b.shape} (after transposes) do not multiply")
        has_c = c is not None and beta != 0.0
        cc = np.broadcast_to(c, (m, n)) if has_c else np.zeros((1, 1), dtype=a.dtype)
        if m == 0 or n == 0 or kk == 0:
            y = np.zeros((m, n), dtype=a.dtype)
            if has_c:
                y += (beta * cc).astype(a.dtype)
            return (y,)
        return (k.gemm(a, b, cc, alpha, beta, has_c),)
    return run


for _v in (1, 6, 7, 9, 11, 13):
    register_op("Gemm", since=_v)(build_gemm)


def matmul(a, b):
    """numpy.matmul semantics: 1-D operands promoted and squeezed, batch dims broadcast."""
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = a.reshape(1, -1)
    if b_vec:
        b = b.reshape(-1, 1)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"MatMul needs inputs of rank >= 1, got {a.shape} and {b.shape}")
    m, kk = a.shape[-2:]
    kb, n = b.shape[-2:]
    if kk != kb:
        raise ValueError(f"MatMul: shapes {a.shape} and {b.shape} do not multiply")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if m == 0 or n == 0 or kk == 0 or 0 in batch:
        y = np.zeros(batch + (m, n), dtype=a.dtype)
    elif a.ndim == 2 and b.ndim == 2:
        y = k.matmul2d(a, b)
    elif b.ndim == 2:  # fold the batch of A into its rows: one GEMM
        y = k.matmul2d(np.ascontiguousarray(a).reshape(-1, kk), b).reshape(batch + (m, n))
    else:
        a3 = np.ascontiguousarray(np.broadcast_to(a, batch + (m, kk))).reshape(-1, m, kk)
        b3 = np.ascontiguousarray(np.broadcast_to(b, batch + (kk, n))).reshape(-1, kk, n)
        if a3.shape[0] > 1:  # parallel over the batch, BLAS single-threaded meanwhile
            with k.single_threaded_blas:
                y = call(k.matmul_batched_parallel, a3.size * n, a3, b3)
        else:
            y = k.matmul_batched(a3, b3)
        y = y.reshape(batch + (m, n))
    if a_vec and b_vec:
        return y.reshape(y.shape[:-2])
    if a_vec:
        return y.reshape(y.shape[:-2] + (n,))
    if b_vec:
        return y.reshape(y.shape[:-1])
    return y


def build_matmul(node):
    if len(node.inputs) != 2 or float_type(node, (0, 1)) is None:
        return None
    if any(rank_of(node, i) == 0 for i in (0, 1)):
        return None
    return lambda a, b: (matmul(a, b),)


for _v in (1, 9, 13):
    register_op("MatMul", since=_v)(build_matmul)
