"""Reference implementation of com.onnxjit Gelu (numpy)."""
from __future__ import annotations

import math

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib import reference_op

_ERF = np.vectorize(math.erf, otypes=[np.float64])


@reference_op
class Gelu(OpRun):
    """Gelu of ai.onnx opset 20, for models whose ai.onnx opset is older.

    Input: X (float tensor). Output: Y (X's shape and dtype).
    Attribute: approximate (string, "none" or "tanh", default "none").
    none: Y = 0.5 * X * (1 + erf(X / sqrt(2)));
    tanh: Y = 0.5 * X * (1 + tanh(sqrt(2 / pi) * (X + 0.044715 * X^3))).
    """

    def _run(self, x, approximate="none"):
        if isinstance(approximate, bytes):
            approximate = approximate.decode()
        xd = x.astype(np.float64)
        if approximate == "tanh":
            y = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
        elif approximate == "none":
            y = 0.5 * xd * (1 + _ERF(xd / math.sqrt(2)))
        else:
            raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return (y.astype(x.dtype),)
