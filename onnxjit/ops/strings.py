"""Ops over string tensors (numpy object arrays of str), which Numba cannot compile: Equal (opset 19 allows
strings). The numeric forms of these ops are the fuser's (onnxjit/fuser/exprs.py)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxjit.ops.registry import input_tensor_types, register_op


@register_op("Equal", since=19)
def build_string_equal(node):
    types = input_tensor_types(node)
    if len(types) != 2 or any(t is None or t.elem_type != TensorProto.STRING for t in types):
        return None

    def run(a, b):
        return (np.asarray(np.equal(a, b), dtype=np.bool_),)  # numpy broadcasting, as ONNX's
    return run
