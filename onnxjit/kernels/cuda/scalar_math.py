"""Device functions the CUDA target of the fuser calls: the names of the CPU target's `vmath` (transcendental
functions) and `fuser/scalar.py` (ONNX integer and NaN semantics), written for the GPU.

A generated CUDA kernel imports this module as both `vmath` and `S`, so one expression table (fuser/exprs.py)
renders for both targets.
"""
import math as _gpu_math
import types

import numpy as np
from numba import cuda

from onnxjit.kernels.cuda.device import SIMULATED


def _ieee(fn):
    """numpy's scalar function for the simulator: it gives inf and NaN where IEEE arithmetic does (as the GPU),
    where Python's math raises (math.log(0), math.fmod(x, 0))."""
    def call(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return call


# the math functions the device functions below call: Python's math module on a GPU (numba-cuda compiles it to
# libdevice), numpy's scalar functions under the simulator
math = types.SimpleNamespace(exp=_ieee(np.exp), expm1=_ieee(np.expm1), log=_ieee(np.log), log1p=_ieee(np.log1p),
                             tanh=_ieee(np.tanh), erf=_gpu_math.erf, fmod=_ieee(np.fmod),
                             copysign=_ieee(np.copysign)) if SIMULATED else _gpu_math


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
    return max(x, x * 0) + math.log1p(math.exp(-abs(x)))


@cuda.jit(device=True)
def erf(x):
    return math.erf(x)


@cuda.jit(device=True)
def idiv(a, b):
    """Integer division truncating toward zero (C, and onnxruntime), not Python's floor division."""
    q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q += 1
    return q


@cuda.jit(device=True)
def ifmod(a, b):
    return a - b * idiv(a, b)


@cuda.jit(device=True)
def ipow(a, b):
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


@cuda.jit(device=True)
def fmax(a, b):
    """max that propagates NaN, as numpy.maximum and onnxruntime's Max."""
    return a if (a > b or a != a) else b


@cuda.jit(device=True)
def fmin(a, b):
    return a if (a < b or a != a) else b


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
def shift_left(a, b, bits):
    return a * 0 if (b < 0 or b >= bits) else a << b


@cuda.jit(device=True)
def shift_right(a, b, bits):
    if b < 0 or b >= bits:
        return a * 0 - 1 if a < 0 else a * 0
    return a >> b
