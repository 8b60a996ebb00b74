"""Device functions the CUDA target of the fuser calls: the names the CPU target's kernels take from `vmath`
(transcendental functions), `fuser/scalar.py` (ONNX integer and NaN semantics) and numpy (np.sqrt, np.floor,
np.float32, np.inf, ...), written for the GPU.

A generated CUDA kernel imports this module as `vmath`, `S` and `np`, so one expression table (fuser/exprs.py)
renders the same text for both targets: numba-cuda compiles no numpy ufunc in a kernel (np.sqrt of a scalar fails
to type there), so the numpy names here are device functions over Python's math module (libdevice on the GPU),
and numpy's scalar types and constants themselves.
"""
import math as _gpu_math
import types

import numpy as _np
from numba import cuda

from onnxjit.fuser import scalar as _cpu
from onnxjit.kernels.cuda.device import SIMULATED

# numpy's scalar types (a call is a cast in a kernel) and constants, as the CPU target's sources use them
bool_, float32, float64 = _np.bool_, _np.float32, _np.float64
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
inf, nan = _np.inf, _np.nan


def _ieee(fn):
    """numpy's scalar function for the simulator: it gives inf and NaN where IEEE arithmetic does (as the GPU),
    where Python's math raises (math.log(0), math.fmod(x, 0), math.sqrt(-1))."""
    def call(*args):
        with _np.errstate(all="ignore"):
            return fn(*args)
    return call


# the math functions the device functions below call: Python's math module on a GPU (numba-cuda compiles it to
# libdevice), numpy's scalar functions under the simulator
_NUMPY_OF = {"acos": "arccos", "asin": "arcsin", "atan": "arctan", "acosh": "arccosh", "asinh": "arcsinh",
             "atanh": "arctanh"}
math = types.SimpleNamespace(**{
    name: _ieee(getattr(_np, _NUMPY_OF.get(name, name)))
    for name in ("exp", "expm1", "log", "log1p", "tanh", "fmod", "copysign", "sqrt", "floor", "ceil", "sin", "cos",
                 "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")},
    erf=_gpu_math.erf) if SIMULATED else _gpu_math


# --- numpy's names -------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def sqrt(x):
    return math.sqrt(x)


@cuda.jit(device=True)
def floor(x):
    return math.floor(x)  # a float, as numba-cuda's math.floor (and numpy's) gives


@cuda.jit(device=True)
def ceil(x):
    return math.ceil(x)


@cuda.jit(device=True)
def rint(x):
    """Round half to even, as numpy.rint."""
    r = math.floor(x + 0.5)
    if r - x == 0.5 and r - 2 * math.floor(r * 0.5) != 0:
        r -= 1
    return math.copysign(r, x) if r == 0 else r  # -0.4 and -0.0 round to -0.0


@cuda.jit(device=True)
def sign(x):
    return 1 if x > 0 else (-1 if x < 0 else (x if x != x else 0))  # NaN stays NaN; -0.0 gives 0, as onnxruntime


@cuda.jit(device=True)
def fmod(a, b):
    return math.fmod(a, b)


@cuda.jit(device=True)
def sin(x):
    return math.sin(x)


@cuda.jit(device=True)
def cos(x):
    return math.cos(x)


@cuda.jit(device=True)
def tan(x):
    return math.tan(x)


@cuda.jit(device=True)
def arcsin(x):
    return math.asin(x)


@cuda.jit(device=True)
def arccos(x):
    return math.acos(x)


@cuda.jit(device=True)
def arctan(x):
    return math.atan(x)


@cuda.jit(device=True)
def sinh(x):
    return math.sinh(x)


@cuda.jit(device=True)
def cosh(x):
    return math.cosh(x)


@cuda.jit(device=True)
def arcsinh(x):
    return math.asinh(x)


@cuda.jit(device=True)
def arccosh(x):
    return math.acosh(x)


@cuda.jit(device=True)
def arctanh(x):
    return math.atanh(x)


# --- vmath's names -------------------------------------------------------------------------------------------
@cuda.jit(device=True)
def exp(x):
    return math.exp(x)


@cuda.jit(device=True)
def expm1(x):
    return math.expm1(x)


@cuda.jit(device=True)
def log(x):
    return math.log(x)


@cuda.jit(device=True)
def log1p(x):
    return math.log1p(x)


@cuda.jit(device=True)
def tanh(x):
    return math.tanh(x)


@cuda.jit(device=True)
def sigmoid(x):
    # exp of a non-positive argument only: no overflow for large |x|
    if x >= 0:
        return 1 / (1 + math.exp(-x))
    e = math.exp(x)
    return e / (1 + e)


@cuda.jit(device=True)
def softplus(x):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|)
    return (x if x > 0 else 0.0) + math.log1p(math.exp(-abs(x)))


@cuda.jit(device=True)
def erf(x):
    return math.erf(x)


# --- fuser/scalar.py's names ----------------------------------------------------------------------------------
# the same Python functions as the CPU target's, compiled for the device; those calling numpy (pymod) or another
# helper (ifmod) are written here
_device = cuda.jit(device=True)
idiv, ipow, fmax, fmin, shift_left, shift_right = (
    _device(f.py_func) for f in (_cpu.idiv, _cpu.ipow, _cpu.fmax, _cpu.fmin, _cpu.shift_left, _cpu.shift_right))
fmaximum, fminimum = fmax, fmin  # the CPU target's LLVM intrinsics (for its vectorizer): fmax's NaN rule here


@cuda.jit(device=True)
def ifmod(a, b):
    """C fmod on integers: the remainder takes the sign of the dividend."""
    return a - b * idiv(a, b)


@cuda.jit(device=True)
def pymod(a, b):
    """Float modulo with the divisor's sign, as numpy.mod."""
    m = math.fmod(a, b)
    if m != 0:
        if (b < 0) != (m < 0):
            m += b
    else:
        m = math.copysign(m * 0, b)
    return m


@cuda.jit(device=True)
def quantize(x, scale, zero_point, lo, hi):
    """fuser/scalar.py's quantize (which calls numpy's rint): QuantizeLinear's value before its integer cast."""
    v = rint(float32(x) / scale) + zero_point
    return hi if v > hi else (v if v >= lo else lo)
