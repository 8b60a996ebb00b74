"""BLAS GEMM on strided row-major views, from inside kernels: `gemm(a, b, c, alpha, beta, trans_a, trans_b)` is
c = alpha * op(a) @ op(b) + beta * c (op: transposed where asked, read as it lies) for 2-D float32/float64 arrays
whose rows are contiguous (last stride one) but may lie apart, as a block of columns of a larger matrix does.

numba's np.dot takes only contiguous arrays (it copies the others); BLAS itself takes a leading dimension per
operand and a transpose flag. Through this, a kernel multiplies a block of columns of an image in place (a 1x1
conv over a share of the pixels, no copy), or reads a weight stored (N, K) as it lies. It calls numba_xxgemm,
the helper numba's own np.dot calls (scipy's BLAS, whose thread count `onnxjit.kernels.linalg.blas_threads`
sets), with the row-major product written as the column-major c^T = op(b)^T op(a)^T.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.core.extending import intrinsic, overload

from onnxjit.cache.jit import njit


def _xxgemm(dtype):
    sig = types.intc(types.char, types.char, types.char, types.intp, types.intp, types.intp,
                     types.CPointer(dtype), types.CPointer(dtype), types.intp, types.CPointer(dtype), types.intp,
                     types.CPointer(dtype), types.CPointer(dtype), types.intp)
    return types.ExternalFunction("numba_xxgemm", sig)


_sgemm = _xxgemm(types.float32)
_dgemm = _xxgemm(types.float64)


@intrinsic
def _data(typingctx, arr):
    """A pointer to arr's first element."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.make_array(signature.args[0])(context, builder, value=args[0]).data

    return types.CPointer(arr.dtype)(arr), codegen


@njit(cache=True, nogil=True, forceinline=True)
def _row_stride(x):
    return x.strides[0] // x.itemsize if x.shape[0] > 1 else max(1, x.shape[1])


def _xgemm(c, *args):
    """numba_xxgemm of c's dtype (a stub: the overload below picks it while typing)."""


@overload(_xgemm)
def _xgemm_of(c, *args):
    fn = _sgemm if c.dtype == types.float32 else _dgemm
    kind = np.int8(ord("s" if c.dtype == types.float32 else "d"))
    return lambda c, *args: fn(kind, *args)


@njit(cache=True, nogil=True)
def gemm(a, b, c, alpha, beta, trans_a=False, trans_b=False):
    """c = alpha * op(a) @ op(b) + beta * c, op(x) being x.T where trans_x; op(a) (M, K), op(b) (K, N), c (M, N),
    float32 or float64, each with unit stride along its rows. Returns BLAS's status (0: done)."""
    m, k = (a.shape[1], a.shape[0]) if trans_a else (a.shape[0], a.shape[1])
    n = b.shape[0] if trans_b else b.shape[1]
    if a.strides[1] != a.itemsize or b.strides[1] != b.itemsize or c.strides[1] != c.itemsize:
        raise ValueError("gemm: operands need contiguous rows")
    if m == 0 or n == 0:
        return 0
    scalars = np.empty(2, dtype=c.dtype)
    scalars[0] = alpha
    scalars[1] = beta
    if k == 0:  # BLAS would leave c as it is; beta 0 means c is not read (it may be uninitialized)
        for i in range(m):
            for j in range(n):
                c[i, j] = 0 if beta == 0 else scalars[1] * c[i, j]
        return 0
    op_a = np.int8(ord("T" if trans_a else "N"))
    op_b = np.int8(ord("T" if trans_b else "N"))
    status = _xgemm(c, op_b, op_a, n, m, k, _data(scalars[0:]), _data(b), _row_stride(b), _data(a),
                    _row_stride(a), _data(scalars[1:]), _data(c), _row_stride(c))
    # a use of scalars after the call: Numba frees an array after its last use, and the pointers taken above
    # are not uses, so BLAS read freed alpha and beta (garbage in a process's first call, which loads scipy's
    # BLAS and reuses that memory: tests/test_ops_ml_linear.py)
    scalars[0] = 0
    return status
