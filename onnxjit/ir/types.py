"""Value types of the IR (tensor, sequence, map, optional, sparse tensor) and their ONNX/numpy spellings."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Union

import numpy as np
from onnx import TensorProto, TypeProto, helper

Dim = Union[int, str, None]  # a static size, a symbolic name, or unknown


@functools.cache  # (onnx's lookup takes 0.6 us; a run's checks ask for it)
def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX element type (bfloat16/float8/int4 come from ml_dtypes, as onnx uses)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


# onnxruntime's spelling of element types inside 'tensor(...)'
_ORT_ELEM_NAMES = {
    TensorProto.FLOAT: "float", TensorProto.DOUBLE: "double", TensorProto.STRING: "string",
    TensorProto.BOOL: "bool",
}


def elem_type_name(elem_type: int) -> str:
    return _ORT_ELEM_NAMES.get(elem_type) or TensorProto.DataType.Name(elem_type).lower()


def elem_type_of(dtype: np.dtype) -> int:
    """ONNX element type of a numpy dtype; strings (object/unicode/bytes) map to STRING."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(dtype)


@dataclass(frozen=True)
class TensorType:
    elem_type: int
    shape: tuple[Dim, ...] | None = None  # None: rank unknown

    @property
    def dtype(self) -> np.dtype:
        return np_dtype(self.elem_type)

    def __str__(self) -> str:
        return f"tensor({elem_type_name(self.elem_type)})"


@dataclass(frozen=True)
class SparseTensorType:
    elem_type: int
    shape: tuple[Dim, ...] | None = None

    def __str__(self) -> str:
        return f"sparse_tensor({elem_type_name(self.elem_type)})"


@dataclass(frozen=True)
class SequenceType:
    elem: "ValueType | None"

    def __str__(self) -> str:
        return f"seq({self.elem})"


@dataclass(frozen=True)
class MapType:
    key_type: int
    value: "ValueType | None"

    def __str__(self) -> str:
        return f"map({elem_type_name(self.key_type)},{self.value})"


@dataclass(frozen=True)
class OptionalType:
    elem: "ValueType | None"

    def __str__(self) -> str:
        return f"optional({self.elem})"


ValueType = Union[TensorType, SparseTensorType, SequenceType, MapType, OptionalType]


def _shape_from_proto(tt) -> tuple[Dim, ...] | None:
    if not tt.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # a negative dim (-1) is free, as in onnxruntime
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def from_type_proto(tp: TypeProto | None) -> ValueType | None:
    """IR type of a TypeProto; None when the proto says nothing."""
    if tp is None:
        return None
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return TensorType(tp.tensor_type.elem_type, _shape_from_proto(tp.tensor_type))
    if which == "sparse_tensor_type":
        return SparseTensorType(tp.sparse_tensor_type.elem_type, _shape_from_proto(tp.sparse_tensor_type))
    if which == "sequence_type":
        return SequenceType(from_type_proto(tp.sequence_type.elem_type))
    if which == "map_type":
        return MapType(tp.map_type.key_type, from_type_proto(tp.map_type.value_type))
    if which == "optional_type":
        return OptionalType(from_type_proto(tp.optional_type.elem_type))
    return None


def _shape_arg(shape):
    return None if shape is None else list(shape)


def to_type_proto(t: ValueType | None) -> TypeProto:
    if t is None:
        return TypeProto()
    if isinstance(t, TensorType):
        return helper.make_tensor_type_proto(t.elem_type, _shape_arg(t.shape))
    if isinstance(t, SparseTensorType):
        return helper.make_sparse_tensor_type_proto(t.elem_type, _shape_arg(t.shape))
    if isinstance(t, SequenceType):
        return helper.make_sequence_type_proto(to_type_proto(t.elem))
    if isinstance(t, MapType):
        return helper.make_map_type_proto(t.key_type, to_type_proto(t.value))
    if isinstance(t, OptionalType):
        return helper.make_optional_type_proto(to_type_proto(t.elem))
    raise TypeError(f"not an IR type: {t!r}")


def type_string(t: ValueType | None) -> str:
    """onnxruntime's NodeArg.type spelling, e.g. 'tensor(float)', 'seq(tensor(int64))'."""
    return "unknown" if t is None else str(t)


def shape_list(t: ValueType | None) -> list:
    """onnxruntime's NodeArg.shape: ints, symbolic names as strings, None for unknown dims."""
    while isinstance(t, OptionalType):
        t = t.elem
    shape = getattr(t, "shape", None)
    return [] if shape is None else list(shape)


__all__ = [
    "Dim", "TensorType", "SparseTensorType", "SequenceType", "MapType", "OptionalType", "ValueType",
    "np_dtype", "elem_type_of", "elem_type_name", "from_type_proto", "to_type_proto", "type_string",
    "shape_list",
]
