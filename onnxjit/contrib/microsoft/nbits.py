"""com.microsoft MatMulNBits (numpy reference): a MatMul by a weight matrix quantized block-wise to 2-8 bits.

MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?) -> Y = A @ dequantize(B)^T + bias, Y [..., N].
  Attributes K, N (the logical weight [N, K]), bits (default 4), block_size (a power of two >= 16),
  accuracy_level (a precision hint: the reference computes in float64 whatever it says), weight_prepacked (must
  be 0 on CPU).
  B uint8 [N, k_blocks, blob_size], k_blocks = ceil(K / block_size), blob_size = block_size * bits / 8: each
  block's values packed along K, low bits first (4 bits: the first value in the low nibble of a byte).
  scales [N, k_blocks] (or flat N * k_blocks) of A's dtype; zero_points either packed uint8 [N, ceil(k_blocks *
  bits / 8)] (same packing as B, flat allowed) or unpacked of A's dtype [N, k_blocks]; absent: 2^(bits - 1).
  g_idx [K] int32 (deprecated): the block of each k, instead of k // block_size. bias [N].
  dequantize(B)[n, k] = (q[n, k] - zero_point[n, block]) * scale[n, block].
  A B with a zero-size dimension (an omitted projection) gives Y = bias broadcast (or zeros).
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib.microsoft import reference_op

OP = "MatMulNBits"


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` unsigned `bits`-wide values along the last axis of uint8 `packed`, low bits first."""
    flat = packed.astype(np.uint8)
    bit_rows = np.unpackbits(flat[..., None], axis=-1, bitorder="little").reshape(flat.shape[:-1] + (-1,))
    values = bit_rows[..., :(bit_rows.shape[-1] // bits) * bits].reshape(flat.shape[:-1] + (-1, bits))
    weights = (1 << np.arange(bits)).astype(np.int32)
    return (values.astype(np.int32) * weights).sum(axis=-1)[..., :count]


def dequantize_weights(b, scales, zero_points, g_idx, n: int, k: int, bits: int, block_size: int) -> np.ndarray:
    """The float weight [N, K] (float64) that B, scales and zero_points encode (see the module docstring)."""
    if not 2 <= bits <= 8:
        raise ValueError(f"{OP}: bits must be 2 to 8, got {bits}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"{OP}: block_size must be a power of two >= 16, got {block_size}")
    k_blocks = -(-k // block_size)
    blob = block_size * bits // 8
    if b.dtype != np.uint8 or b.size != n * k_blocks * blob:
        raise ValueError(f"{OP}: B must be uint8 [{n}, {k_blocks}, {blob}] (N, k_blocks, blob_size), got "
                         f"{b.dtype} {list(b.shape)}")
    q = unpack_bits(b.reshape(n, k_blocks, blob), bits, block_size).reshape(n, k_blocks * block_size)[:, :k]
    scales = np.asarray(scales)
    if scales.size != n * k_blocks:
        raise ValueError(f"{OP}: scales must hold [{n}, {k_blocks}] values, got {list(scales.shape)}")
    scales = scales.reshape(n, k_blocks).astype(np.float64)
    if zero_points is None:
        zeros = np.full((n, k_blocks), float(1 << (bits - 1)))
    elif zero_points.dtype == np.uint8:
        per_row = -(-k_blocks * bits // 8)
        if zero_points.size != n * per_row:
            raise ValueError(f"{OP}: packed zero_points must be uint8 [{n}, {per_row}], got "
                             f"{list(zero_points.shape)}")
        zeros = unpack_bits(zero_points.reshape(n, per_row), bits, k_blocks).astype(np.float64)
    else:
        if zero_points.size != n * k_blocks:
            raise ValueError(f"{OP}: unpacked zero_points must be [{n}, {k_blocks}], got {list(zero_points.shape)}")
        zeros = zero_points.reshape(n, k_blocks).astype(np.float64)
    if g_idx is not None:
        blocks = np.asarray(g_idx).astype(np.int64).reshape(-1)
        if blocks.shape != (k,) or blocks.min(initial=0) < 0 or blocks.max(initial=0) >= k_blocks:
            raise ValueError(f"{OP}: g_idx must be [{k}] block indices below {k_blocks}, got {list(np.shape(g_idx))}")
    else:
        blocks = np.arange(k) // block_size
    return (q - zeros[:, blocks]) * scales[:, blocks]


def check_a(a: np.ndarray, k: int) -> None:
    if a.ndim < 1 or a.shape[-1] != k:
        raise ValueError(f"{OP}: A's last dimension must be K = {k}, got shape {a.shape}")


def omitted(b: np.ndarray) -> bool:
    """Whether B is an omitted projection (a zero-size dimension)."""
    return b.size == 0


@reference_op
class MatMulNBits(OpRun):
    """See the module docstring."""

    def _run(self, a, b, scales, zero_points=None, g_idx=None, bias=None, K=None, N=None, bits=4, block_size=None,
             accuracy_level=0, weight_prepacked=0):
        if K is None or N is None or block_size is None:
            raise ValueError(f"{OP}: attributes K, N and block_size are required")
        if weight_prepacked:
            raise NotImplementedError(f"{OP}: weight_prepacked={weight_prepacked} (a CUDA layout) is not supported")
        check_a(a, K)
        if bias is not None and bias.shape != (N,):
            raise ValueError(f"{OP}: bias must be [{N}], got {list(bias.shape)}")
        if omitted(b):
            y = np.zeros(a.shape[:-1] + (N,), np.float64)
        else:
            w = dequantize_weights(b, scales, zero_points, g_idx, N, K, bits, block_size)
            y = a.astype(np.float64) @ w.T
        if bias is not None:
            y = y + bias
        return (y.astype(a.dtype),)
