"""Views of arrays inside njit kernels that change only their Numba type.

`read_only(arr)`: arr typed as a read-only array (the same data, a new reference). A helper that reads from both
a kernel's read-only input and its own scratch buffers then compiles once, for the read-only type, instead of
once per source type (each specialization of a loop-heavy helper costs seconds of compilation).
"""
from __future__ import annotations

from numba import types
from numba.core.extending import intrinsic
from numba.core.imputils import impl_ret_borrowed


@intrinsic
def read_only(typingctx, arr):
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, signature.return_type, args[0])

    return arr.copy(readonly=True)(arr), codegen
