"""Views inside njit kernels that change only a value's Numba type.

`read_only(arr)`: arr typed as a read-only array (the same data, a new reference). A helper that reads from both
a kernel's read-only input and its own scratch buffers then compiles once, for the read-only type, instead of
once per source type (each specialization of a loop-heavy helper costs seconds of compilation).

`u64(i)`: the integer i as an unsigned 64-bit index (np.uint64(i)). Hot loops index with it so that Numba skips
its negative-index wraparound, which would otherwise keep LLVM from vectorizing them. Typed and lowered as a
builtin (a cast), so that nothing is compiled for it: as an njit helper it was compiled once per integer type,
24 specializations in resnet50's kernels, about 0.06 s each of a cold start. From Python it is np.uint64.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.core.extending import intrinsic, lower_builtin, type_callable
from numba.core.imputils import impl_ret_borrowed


def u64(i):
    return np.uint64(i)


@type_callable(u64)
def _type_u64(context):
    return lambda i: types.uint64 if isinstance(i, types.Integer) else None


@lower_builtin(u64, types.Integer)
def _lower_u64(context, builder, signature, args):
    return context.cast(builder, args[0], signature.args[0], types.uint64)


@intrinsic
def read_only(typingctx, arr):
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, signature.return_type, args[0])

    return arr.copy(readonly=True)(arr), codegen
