"""Scalar helpers the generated kernels call for ONNX semantics numpy/Python operators do not give directly.

Plain math, inlined into the kernel's loop by Numba.
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from onnxjit.cache.jit import njit


@njit(inline="always", cache=True)
def idiv(a, b):
    """Integer division truncating toward zero (C, and onnxruntime), not Python's floor division."""
    q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q += 1
    return q


@njit(inline="always", cache=True)
def ifmod(a, b):
    """C fmod on integers: the remainder takes the sign of the dividend."""
    return a - b * idiv(a, b)


@njit(inline="always", cache=True)
def ipow(a, b):
    """Integer power by squaring; a negative exponent gives 0 unless |a| == 1 (as integer pow in C++)."""
    if b < 0:
        if a == 1:
            return a
        if a == -1:
            return a if (-b) % 2 else -a
        return a * 0
    result = a * 0 + 1
    base = a
    e = b
    while e > 0:
        if e & 1:
            result = result * base
        base = base * base
        e >>= 1
    return result


@njit(inline="always", cache=True)
def fmax(a, b):
    """max that propagates NaN, as numpy.maximum and onnxruntime's Max."""
    return a if (a > b or a != a) else b


@njit(inline="always", cache=True)
def fmin(a, b):
    return a if (a < b or a != a) else b


@njit(inline="always", cache=True)
def round_half_even(x):
    return np.rint(x)


@njit(inline="always", cache=True)
def pymod(a, b):
    """Float modulo with the divisor's sign, as numpy.mod (its npy_divmod, signed zeros included)."""
    m = np.fmod(a, b)
    if m != 0:
        if (b < 0) != (m < 0):
            m += b
    else:
        m = np.copysign(m * 0, b)
    return m


@njit(inline="always", cache=True)
def shift_left(a, b, bits):
    """a << b, 0 when the shift is negative or not below the bit width (BitShift-28)."""
    return a * 0 if (b < 0 or b >= bits) else a << b


@njit(inline="always", cache=True)
def shift_right(a, b, bits):
    """a >> b (arithmetic for signed a); past the width: the sign fill (-1 or 0)."""
    if b < 0 or b >= bits:
        return a * 0 - 1 if a < 0 else a * 0
    return a >> b


@njit(inline="always", cache=True)
def quantize(x, scale, zero_point, lo, hi):
    """QuantizeLinear's value before its cast to the integer type: rint(x / scale) + zero_point in float32,
    saturated to [lo, hi], NaN to lo (as kernels.quantize.quantize computes it)."""
    v = np.rint(np.float32(x) / scale) + zero_point
    return hi if v > hi else (v if v >= lo else lo)


def _nan_propagating(name):
    """LLVM's `llvm.maximum` / `llvm.minimum` (NaN if either operand is NaN) on two floats of one type."""

    @intrinsic
    def call(typingctx, a, b):
        if not (isinstance(a, types.Float) and a == b):
            return None

        def codegen(context, builder, sig, args):
            t = context.get_value_type(sig.args[0])
            suffix = {ir.FloatType(): "f32", ir.DoubleType(): "f64"}[t]
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t, t]), f"llvm.{name}.{suffix}")
            return builder.call(fn, args)

        return a(a, b), codegen

    return call


# ReduceMax's and ReduceMin's update: a reduction LLVM vectorizes, where fmax's compare and select carried from
# one element to the next kept it scalar (a ReduceMax over 225,792 floats, one Emerald Rapids thread: 567 -> 39
# us; onnxruntime 47). NaN propagates as in fmax; of two zeros the max is +0 and the min -0.
fmaximum = _nan_propagating("maximum")
fminimum = _nan_propagating("minimum")
