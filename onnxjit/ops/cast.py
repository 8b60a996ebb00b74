"""Cast and CastLike between the types the fuser does not compute in: float8, int4/int2, float4, strings.

The fuser renders casts between native numeric types; this kernel converts through numpy/ml_dtypes. With
`saturate` (the default, since opset 19) values beyond a float8 type's range clamp to its largest finite value,
as the spec says; without it they become inf or NaN as the format allows. FLOAT8E8M0 (a power of two: the float32
exponent alone) rounds by the `round_mode` attribute ("up", the default, "down" or "nearest"), as onnx's
`numpy_helper.to_float8e8m0` defines it. To STRING, numbers are written as onnxruntime writes them (the spec
leaves the form open): floats as C's "%.8g" of the value (float16/bfloat16/float8 through float32), "NaN", "INF",
"-INF"; integers in decimal; booleans "1" and "0".
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, numpy_helper

from onnxjit.ir.types import TensorType, np_dtype
from onnxjit.ops.registry import attr, register_op

FLOAT8 = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                    TensorProto.FLOAT8E5M2FNUZ})  # the float8 types with a sign and a mantissa
_UNSUPPORTED_TARGETS = {TensorProto.COMPLEX64, TensorProto.COMPLEX128, TensorProto.UNDEFINED}
_ROUND_MODES = ("up", "down", "nearest")


def _to_strings(x: np.ndarray) -> np.ndarray:
    """An object array of str, written as onnxruntime writes numbers (see the module docstring)."""
    if x.dtype.kind in "OUS":
        return x.astype(object)
    if x.dtype.kind in "biu":
        return x.astype(np.int64 if x.dtype.kind != "u" else np.uint64).astype(str).astype(object)
    f = x.astype(np.float64) if x.dtype.itemsize >= 4 else x.astype(np.float32).astype(np.float64)
    out = np.char.mod("%.8g", f).astype(object)
    out[np.isnan(f)] = "NaN"
    out[f == np.inf] = "INF"
    out[f == -np.inf] = "-INF"
    return out


def _caster(to: int, saturate: bool, round_mode: str = "up"):
    if to in _UNSUPPORTED_TARGETS or (to == TensorProto.FLOAT8E8M0 and round_mode not in _ROUND_MODES):
        return None
    if to == TensorProto.STRING:
        return _to_strings
    target = np_dtype(to)
    limit = float(ml_dtypes.finfo(target).max) if to in FLOAT8 and saturate else None

    def cast(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "OUS":  # numbers written as text
            x = x.astype(np.float64) if target.kind in "fV" else x.astype(np.int64)
        if to == TensorProto.FLOAT8E8M0:
            return numpy_helper.to_float8e8m0(x, saturate, round_mode).astype(target)
        if limit is not None:
            x = np.clip(x.astype(np.float32), -limit, limit)
        return x.astype(target)
    return cast


def _source_ok(node) -> bool:
    t = node.inputs[0].type if node.inputs and node.inputs[0] is not None else None
    return isinstance(t, TensorType) and t.elem_type not in (TensorProto.COMPLEX64, TensorProto.COMPLEX128)


@register_op("Cast", since=6)
def build_cast(node):
    if not _source_ok(node):
        return None
    cast = _caster(int(attr(node, "to", 0)), bool(attr(node, "saturate", 1)), attr(node, "round_mode", "up"))
    return None if cast is None else (lambda x: (cast(x),))


@register_op("CastLike", since=15)
def build_cast_like(node):
    like = node.inputs[1].type if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if not _source_ok(node) or not isinstance(like, TensorType):
        return None
    cast = _caster(like.elem_type, bool(attr(node, "saturate", 1)), attr(node, "round_mode", "up"))
    return None if cast is None else (lambda x, _like: (cast(x),))
