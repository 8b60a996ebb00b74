"""Elementwise ops on the CPU provider (float32/float64). The fuser (a later stage) generates these per group."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxjit.kernels import elementwise as k
from onnxjit.ops.registry import all_of_dtype, register_op

FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})


def _unary(kernel):
    def build(node):
        t = all_of_dtype(node, FLOATS)
        if t is None or len(node.inputs) != 1 or not t.shape:
            return None
        return lambda x: (np.asarray(kernel(x)),)
    return build


def _binary(kernel):
    def build(node):
        t = all_of_dtype(node, FLOATS)
        if t is None or len(node.inputs) != 2 or any(not v.type.shape for v in node.inputs):
            return None
        return lambda a, b: (np.asarray(kernel(a, b)),)
    return build


register_op("Relu", since=6)(_unary(k.relu))
register_op("Sigmoid", since=6)(_unary(k.sigmoid))
register_op("Tanh", since=6)(_unary(k.tanh))
register_op("Add", since=7)(_binary(k.add))
register_op("Sub", since=7)(_binary(k.sub))
register_op("Mul", since=7)(_binary(k.mul))
register_op("Div", since=7)(_binary(k.div))
