"""com.microsoft fused MatMul and Conv (numpy references): FusedMatMul, FusedConv, NhwcConv.

FusedMatMul(A, B) -> Y = alpha * op(A) @ op(B), numpy.matmul's semantics (batch broadcast, 1-D operands), where
  op transposes the last two dims when transA / transB is 1, and with transBatchA / transBatchB moves dim 0 to
  the second-to-last place first (A [d0, d1, ..., dn-2, dn-1] is read as [d1, ..., dn-2, d0, dn-1]): onnxruntime
  folds a Transpose of the batch into the product this way. Attributes alpha (float, default 1), transA, transB,
  transBatchA, transBatchB (ints, default 0). (com.onnxjit FusedMatMul is a different op: a bias and an
  activation.)
FusedConv(X, W, B?, Z?) -> Y = activation(Conv(X, W, B) + Z): com.onnxjit FusedConv's definition (Conv's
  attributes, `activation` and `activation_params`; see onnxjit.contrib.fused).
NhwcConv(X, W, B?) -> Y: Conv over channels-last X [N, H, W, C], W [M, C / group, KH, KW] as Conv's, Y
  [N, OH, OW, M] (com.onnxjit NhwcConv without an activation; see onnxjit.contrib.layout).
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib import fused as onnxjit_fused
from onnxjit.contrib import layout as onnxjit_layout
from onnxjit.contrib.microsoft import reference_op


def _batch_transposed(x: np.ndarray) -> np.ndarray:
    """x with dim 0 moved to the second-to-last place (FusedMatMul's transBatch)."""
    return np.moveaxis(x, 0, -2) if x.ndim >= 3 else x


def fused_matmul_operands(a: np.ndarray, b: np.ndarray, trans_a: int, trans_b: int, trans_batch_a: int,
                          trans_batch_b: int) -> tuple[np.ndarray, np.ndarray]:
    """The views of A and B whose numpy.matmul is FusedMatMul's product (before alpha), with the shapes checked."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"FusedMatMul: A and B must have rank >= 1, got shapes {a.shape} and {b.shape}")
    if trans_batch_a:
        a = _batch_transposed(a)
    if trans_batch_b:
        b = _batch_transposed(b)
    if trans_a and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if trans_b and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    k_a, k_b = a.shape[-1], b.shape[-2] if b.ndim >= 2 else b.shape[0]
    try:
        batch_ok = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) is not None
    except ValueError:
        batch_ok = False
    if k_a != k_b or not batch_ok:
        raise ValueError(f"FusedMatMul: op(A) of shape {a.shape} and op(B) of shape {b.shape} do not multiply "
                         f"(transA={trans_a}, transB={trans_b}, transBatchA={trans_batch_a}, "
                         f"transBatchB={trans_batch_b})")
    return a, b


@reference_op
class FusedMatMul(OpRun):
    """See the module docstring."""

    def _run(self, a, b, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
        a2, b2 = fused_matmul_operands(a, b, transA, transB, transBatchA, transBatchB)
        y = np.matmul(a2, b2)
        return ((y * y.dtype.type(alpha)).astype(a.dtype) if alpha != 1.0 else y.astype(a.dtype),)


@reference_op
class FusedConv(onnxjit_fused.FusedConv):
    __doc__ = onnxjit_fused.FusedConv.__doc__


@reference_op
class NhwcConv(onnxjit_layout.NhwcConv):
    """NhwcConv(X, W, B?) -> Y: Conv on channels-last images (com.onnxjit NhwcConv with no activation)."""
