"""Constant: the node's attribute as an array, built once when the graph is compiled."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from onnxjit.ir.serde import sparse_to_dense
from onnxjit.ops.registry import register_op

_LISTS = {"value_floats": np.float32, "value_ints": np.int64}
_SCALARS = {"value_float": np.float32, "value_int": np.int64}


def constant_value(node) -> np.ndarray | None:
    for name, a in node.attributes.items():
        if a.ref_attr_name:
            return None
        v = a.value
        if name == "value":
            return np.asarray(numpy_helper.to_array(v))
        if name == "sparse_value":
            return sparse_to_dense(v)[1]
        if name in _SCALARS:
            return np.array(v, dtype=_SCALARS[name])
        if name in _LISTS:
            return np.array(list(v), dtype=_LISTS[name])
        if name == "value_string":
            return np.array(v.decode() if isinstance(v, bytes) else v, dtype=object)
        if name == "value_strings":
            return np.array([s.decode() if isinstance(s, bytes) else s for s in v], dtype=object)
    return None


@register_op("Constant", since=1)
def build_constant(node):
    value = constant_value(node)
    if value is None:
        return None
    value.flags.writeable = False  # shared by every run: no kernel may write into it

    def run():
        return (value,)
    return run
