"""com.onnxjit FusedConv, FusedGemm, FusedMatMul: a Conv / Gemm / MatMul with the activation that followed it
(and, for FusedConv, the residual Add before it), which the CPU kernels apply as they write each output row.
The optimizer's activation fusion (onnxjit/optimizer/activation_fusion.py, ORT_ENABLE_EXTENDED) writes them.

The activation is named by the string attribute `activation`, an ONNX op type, with its parameters, in this
order, in the floats attribute `activation_params`:

  ============== ================= ================================================================
  activation     activation_params y = activation(x)
  ============== ================= ================================================================
  Identity       (none)            x (the default when the attribute is absent)
  Relu           (none)            max(x, 0)
  LeakyRelu      alpha             x if x >= 0 else alpha * x
  Sigmoid        (none)            1 / (1 + exp(-x))
  Tanh           (none)            tanh(x)
  Clip           min, max          min(max(x, min), max) (-inf / inf for a bound Clip does not have)
  HardSigmoid    alpha, beta       max(0, min(1, alpha * x + beta))
  Elu            alpha             x if x >= 0 else alpha * (exp(x) - 1)
  Selu           alpha, gamma      gamma * (x if x > 0 else alpha * (exp(x) - 1))
  HardSwish      (none)            x * max(0, min(1, x / 6 + 1 / 2))
  Softplus       (none)            log(1 + exp(x))
  ThresholdedRelu alpha            x if x > alpha else 0
  Swish          alpha             x * sigmoid(alpha * x) (ONNX Swish-24; with alpha 1, SiLU: the optimizer
                                   also fuses a Mul of x by Sigmoid(x), which every opset has)
  ============== ================= ================================================================

Types: float (float32) and double (float64); every input and the output have the same one.
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_conv import _conv_implementation
from onnx.reference.ops.op_gemm import Gemm_7

from onnxjit.contrib import reference_op

ACTIVATION_PARAM_COUNTS = {"Identity": 0, "Relu": 0, "LeakyRelu": 1, "Sigmoid": 0, "Tanh": 0, "Clip": 2,
                           "HardSigmoid": 2, "Elu": 1, "Selu": 2, "HardSwish": 0, "Softplus": 0,
                           "ThresholdedRelu": 1, "Swish": 1}


def apply_activation(x: np.ndarray, activation: str, params) -> np.ndarray:
    """`activation` (with its `activation_params`) of x, computed in x's dtype (see the table above)."""
    params = [x.dtype.type(p) for p in (params or [])]
    if ACTIVATION_PARAM_COUNTS.get(activation) != len(params):
        raise ValueError(f"activation {activation!r} with activation_params {params} is not supported")
    zero, one = x.dtype.type(0), x.dtype.type(1)
    if activation == "Identity":
        return x
    if activation == "Relu":
        return np.where(x > zero, x, zero)
    if activation == "LeakyRelu":
        return np.where(x >= zero, x, x * params[0])
    if activation == "Sigmoid":
        with np.errstate(over="ignore"):
            return (one / (one + np.exp(-x))).astype(x.dtype)
    if activation == "Tanh":
        return np.tanh(x)
    if activation == "Clip":
        return np.minimum(np.maximum(x, params[0]), params[1])
    if activation == "HardSigmoid":
        return np.maximum(zero, np.minimum(one, params[0] * x + params[1]))
    if activation == "Elu":
        return np.where(x >= zero, x, params[0] * np.expm1(x))
    if activation == "Selu":
        return params[1] * np.where(x > zero, x, params[0] * np.expm1(x))
    if activation == "HardSwish":
        return x * np.maximum(zero, np.minimum(one, x.dtype.type(1 / 6) * x + x.dtype.type(0.5)))
    if activation == "Softplus":
        return np.logaddexp(zero, x).astype(x.dtype)
    if activation == "Swish":
        with np.errstate(over="ignore"):
            return (x * (one / (one + np.exp(-(params[0] * x))))).astype(x.dtype)
    return np.where(x > params[0], x, zero)  # ThresholdedRelu


@reference_op
class FusedConv(OpRun):
    """FusedConv(X, W, B?, Z?) -> Y = activation(Conv(X, W, B) + Z).

    Inputs: X, W, B as ONNX Conv (B optional); Z (optional): a tensor of Y's shape, added to the convolution
    (bias included) before the activation, a residual connection.
    Attributes: Conv's (auto_pad, dilations, group, kernel_shape, pads, strides, with Conv's defaults), plus
    `activation` (string, default "Identity") and `activation_params` (floats), see the module docstring.
    """

    def _run(self, X, W, B=None, Z=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None, activation="Identity", activation_params=None):
        y = _conv_implementation(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides).astype(X.dtype)
        if Z is not None:
            if Z.shape != y.shape:
                raise ValueError(f"FusedConv: Z of shape {Z.shape} is not the output's shape {y.shape}")
            y = y + Z
        return (apply_activation(y, activation, activation_params),)


@reference_op
class FusedGemm(OpRun):
    """FusedGemm(A, B, C?) -> Y = activation(alpha * A' @ B' + beta * C).

    Inputs and attributes alpha, beta, transA, transB as ONNX Gemm (13); plus `activation` and
    `activation_params`, see the module docstring.
    """

    def _run(self, A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0, activation="Identity",
             activation_params=None):
        (y,) = Gemm_7._run(self, A, B, C, alpha=alpha, beta=beta, transA=transA, transB=transB)
        return (apply_activation(y.astype(A.dtype), activation, activation_params),)


@reference_op
class FusedMatMul(OpRun):
    """FusedMatMul(A, B, C?) -> Y = activation(A @ B + C), MatMul's numpy semantics (batch broadcast, 1-D
    operands).

    Inputs: A, B as ONNX MatMul; C (optional): a bias that broadcasts to Y without changing its shape (in
    practice [N], a MatMul's bias Add over N-D activations), added before the activation.
    Attributes: `activation` and `activation_params`, see the module docstring. (Not onnxruntime's
    com.microsoft FusedMatMul, which scales and transposes instead.)
    """

    def _run(self, A, B, C=None, activation="Identity", activation_params=None):
        y = np.matmul(A, B)
        if C is not None:
            if np.broadcast_shapes(y.shape, C.shape) != y.shape:
                raise ValueError(f"FusedMatMul: C of shape {C.shape} does not broadcast to the output's {y.shape}")
            y = (y + C).astype(y.dtype)
        return (apply_activation(y, activation, activation_params),)
