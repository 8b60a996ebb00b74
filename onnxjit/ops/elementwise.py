"""Elementwise ops over element types the fuser does not compute in, run with numpy: Equal and Where over
strings (numpy object arrays, which Numba cannot compile), IsNaN and IsInf over float8 (through float32, which
holds every float8 value exactly). Every other elementwise op and dtype is the fuser's (onnxjit/fuser/exprs.py)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxjit.ops.cast import FLOAT8
from onnxjit.ops.registry import attr, input_tensor_types, register_op


def _elems(node) -> list[int | None]:
    return [t.elem_type if t is not None else None for t in input_tensor_types(node)]


@register_op("Equal", since=19)
def build_string_equal(node):
    if _elems(node) != [TensorProto.STRING, TensorProto.STRING]:
        return None
    return lambda a, b: (np.asarray(np.equal(a, b), dtype=np.bool_),)  # numpy broadcasting, as ONNX's


def build_string_where(node):
    if _elems(node) != [TensorProto.BOOL, TensorProto.STRING, TensorProto.STRING]:
        return None
    return lambda c, x, y: (np.where(c, x, y).astype(object),)


for _v in (9, 16):
    register_op("Where", since=_v)(build_string_where)


def _float8_input(node) -> bool:
    elems = _elems(node)
    return bool(elems) and elems[0] in FLOAT8


@register_op("IsNaN", since=20)
def build_float8_isnan(node):
    if not _float8_input(node):
        return None
    return lambda x: (np.isnan(x.astype(np.float32)),)


@register_op("IsInf", since=20)
def build_float8_isinf(node):
    if not _float8_input(node):
        return None
    detect_pos, detect_neg = bool(attr(node, "detect_positive", 1)), bool(attr(node, "detect_negative", 1))

    def run(x):
        f = x.astype(np.float32)
        return ((np.isposinf(f) & detect_pos) | (np.isneginf(f) & detect_neg),)
    return run
