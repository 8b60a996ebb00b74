"""com.microsoft activations: Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd, BiasSplitGelu (numpy references).

  Gelu(X)                 0.5 * X * (1 + erf(X / sqrt(2)))  (ai.onnx Gelu-20 with approximate="none")
  FastGelu(X, bias?)      0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), x = X + bias
  BiasGelu(A, B)          Gelu(A + B), B a 1-D bias over A's last axis
  QuickGelu(X)            X * sigmoid(alpha * X), attribute alpha (float, default 1.702)
  BiasAdd(X, bias, skip)  X + bias + skip; X and skip [N, S, C], bias [C]
  BiasSplitGelu(X, bias)  x = X + bias over [N, S, D]; left, right = x[..., :D/2], x[..., D/2:];
                          Y = left * Gelu(right), [N, S, D/2]

Types: float16, bfloat16, float, double (BiasAdd and BiasSplitGelu: float16, float), computed in float64 here and
rounded once to the input's dtype. Bad shapes raise ValueError naming the op and the input.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special
from onnx.reference.op_run import OpRun

from onnxjit.contrib.activation import Gelu as _OnnxGelu
from onnxjit.contrib.microsoft import reference_op

QUICK_GELU_ALPHA = 1.702
SQRT_HALF = math.sqrt(0.5)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """Gelu of x in x's dtype (com.onnxjit Gelu's definition), computed in float64; the exact form through
    scipy's vectorized erf (these run on the fallback provider over whole feed-forward activations)."""
    if approximate == "tanh":
        return _OnnxGelu._run(None, x, approximate)[0]
    xd = x.astype(np.float64)
    return (0.5 * xd * (1 + scipy.special.erf(xd * SQRT_HALF))).astype(x.dtype)


def check_bias(op: str, x: np.ndarray, bias: np.ndarray, name: str = "bias") -> None:
    """A bias over x's last axis: 1-D of x.shape[-1] values."""
    if bias.ndim != 1 or x.ndim == 0 or bias.shape[0] != x.shape[-1]:
        raise ValueError(f"{op}: {name} must be 1-D of the input's last dimension {x.shape[-1:]}, got shape "
                         f"{bias.shape} for an input of shape {x.shape}")


def _added(x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    # a sum in the input dtype, as onnxruntime's kernels add before the activation
    return x if bias is None else (x + bias).astype(x.dtype)


@reference_op
class Gelu(OpRun):
    """com.microsoft Gelu(X) -> Y: the exact (erf) Gelu, X's shape and dtype."""


    def _run(self, x):
        return (gelu(x),)


@reference_op
class FastGelu(OpRun):
    """com.microsoft FastGelu(X, bias?) -> Y: the tanh approximation of Gelu of X + bias (bias 1-D over X's last
    axis)."""

    def _run(self, x, bias=None):
        if bias is not None:
            check_bias("FastGelu", x, bias)
        return (gelu(_added(x, bias), "tanh"),)


@reference_op
class BiasGelu(OpRun):
    """com.microsoft BiasGelu(A, B) -> C = Gelu(A + B), B 1-D over A's last axis."""

    def _run(self, a, b):
        check_bias("BiasGelu", a, b, "B")
        return (gelu(_added(a, b)),)


@reference_op
class QuickGelu(OpRun):
    """com.microsoft QuickGelu(X) -> Y = X * sigmoid(alpha * X), attribute alpha (default 1.702)."""

    def _run(self, x, alpha=QUICK_GELU_ALPHA):
        xd = x.astype(np.float64)
        return ((xd / (1 + np.exp(-float(alpha) * xd))).astype(x.dtype),)


@reference_op
class BiasAdd(OpRun):
    """com.microsoft BiasAdd(X, bias, skip) -> Y = X + bias + skip, X and skip [N, S, C], bias [C]."""

    def _run(self, x, bias, skip):
        if x.ndim != 3 or skip.shape != x.shape:
            raise ValueError(f"BiasAdd: X and skip must both be [N, S, C], got {x.shape} and {skip.shape}")
        check_bias("BiasAdd", x, bias)
        return ((x + bias + skip).astype(x.dtype),)


@reference_op
class BiasSplitGelu(OpRun):
    """com.microsoft BiasSplitGelu(X, bias) -> Y [N, S, D/2] = left * Gelu(right) of the halves of X + bias."""

    def _run(self, x, bias):
        if x.ndim != 3 or x.shape[-1] % 2:
            raise ValueError(f"BiasSplitGelu: X must be [N, S, D] with an even D, got {x.shape}")
        check_bias("BiasSplitGelu", x, bias)
        xd = x.astype(np.float64) + bias
        half = x.shape[-1] // 2
        left, right = xd[..., :half], xd[..., half:]
        return ((left * gelu(right)).astype(x.dtype),)

