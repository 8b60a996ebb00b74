"""What the ai.onnx.ml op builders share (ml_linear, ml_preprocess, ml_encoders): attribute access, input checks
that raise typed errors naming the node, the input and what was expected, and the element types onnxruntime
accepts per op.

Attribute errors (a missing or inconsistent attribute) raise onnxjit.Fail at session creation, as onnxruntime
does when it builds the kernel; input errors (a wrong dtype, rank or width) raise onnxjit.InvalidArgument when
the node runs. Both name the node (`Node.label`).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import numpy_helper

from onnxjit.errors import Fail, InvalidArgument
from onnxjit.ir.types import MapType, SequenceType, TensorType

DOMAIN = "ai.onnx.ml"
NUMERIC = frozenset({np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.int32)})
ELEM_DTYPES = {T.FLOAT: np.dtype(np.float32), T.DOUBLE: np.dtype(np.float64), T.INT64: np.dtype(np.int64),
               T.INT32: np.dtype(np.int32), T.INT16: np.dtype(np.int16), T.STRING: np.dtype(object)}


class Attrs:
    """A node's attributes as Python values: strings decoded, lists as lists, tensors as numpy arrays."""

    def __init__(self, node):
        self.node = node
        self.values = {}
        for name, a in node.attributes.items():
            if a.ref_attr_name:
                continue
            v = a.value
            if hasattr(v, "dims") and hasattr(v, "data_type"):  # a TensorProto
                v = numpy_helper.to_array(v)
                if v.dtype.kind in "SU":
                    v = np.array([s.decode() if isinstance(s, bytes) else s for s in v.reshape(-1)],
                                 dtype=object).reshape(v.shape)
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, (list, tuple)) and v and isinstance(v[0], bytes):  # one type per list attribute
                v = [s.decode() for s in v]
            self.values[name] = v

    def has(self, name) -> bool:
        v = self.values.get(name)
        return v is not None and not (isinstance(v, (list, np.ndarray)) and len(v) == 0)

    def get(self, name, default=None):
        return self.values.get(name, default)

    def ints(self, name) -> np.ndarray:
        return np.asarray(self.values.get(name, []), np.int64).reshape(-1)

    def floats(self, name, dtype=np.float32) -> np.ndarray:
        return np.asarray(self.values.get(name, []), dtype).reshape(-1)

    def strings(self, name) -> list:
        return list(self.values.get(name, []))

    def fail(self, message):
        raise Fail(f"{self.node.label}: {message}")


def declare_outputs(node, *elem_types) -> None:
    """Set the element types of the node's outputs that ONNX's type inference left unknown (it types none of
    Scaler's, Normalizer's, Imputer's, OneHotEncoder's, FeatureVectorizer's, the regressors' outputs, nor
    SVMClassifier's scores). Builders run as the provider assigns nodes in graph order, so a consumer assigned
    after this node (a Cast the fuser compiles, a Concat) sees the type; shapes stay unknown."""
    for v, elem in zip(node.outputs, elem_types):
        if v is not None and v.name and v.type is None and elem is not None:
            v.type = TensorType(elem)


def elem_of(dtype) -> int:
    """ONNX element type of a numpy dtype (object: string)."""
    return next(e for e, d in ELEM_DTYPES.items() if d == np.dtype(dtype))


def input_type(node, i=0):
    """The IR type of input i, or None when absent or unknown."""
    v = node.inputs[i] if i < len(node.inputs) else None
    return v.type if v is not None else None


def tensor_dtype(node, i=0):
    """numpy dtype of tensor input i (object for strings), or None when unknown or not a tensor."""
    t = input_type(node, i)
    if not isinstance(t, TensorType):
        return None
    return ELEM_DTYPES.get(t.elem_type, np.dtype(t.dtype) if t.elem_type != T.STRING else np.dtype(object))


def output_elem(node, i=0):
    """ONNX elem type of tensor output i when the graph declares it, else None."""
    v = node.outputs[i] if i < len(node.outputs) else None
    t = v.type if v is not None else None
    return t.elem_type if isinstance(t, TensorType) else None


def map_type(node, i=0):
    """The MapType of input i (a map, or the element of a sequence of maps), or None."""
    t = input_type(node, i)
    if isinstance(t, SequenceType):
        t = t.elem
    return t if isinstance(t, MapType) else None


def input_name(node, i=0) -> str:
    v = node.inputs[i] if i < len(node.inputs) else None
    return v.name if v is not None else f"#{i}"


def bad_input(node, i, expected, got):
    raise InvalidArgument(f"{node.label}: input {i} ({input_name(node, i)!r}) must be {expected}, got {got}")


def describe(x) -> str:
    if isinstance(x, np.ndarray):
        kind = "string" if x.dtype.kind in "OUS" else str(x.dtype)
        return f"a {kind} tensor of shape {list(x.shape)}"
    return f"a {type(x).__name__}"


def checked_tensor(node, x, allowed, i=0, what=None):
    """x as an ndarray whose dtype is among `allowed` (a frozenset of numpy dtypes; object for strings), else
    InvalidArgument. String tensors come back as object arrays."""
    if type(x) is np.ndarray and x.dtype in allowed:  # the common case first: this runs once per op per run
        return x
    if not isinstance(x, np.ndarray):
        if isinstance(x, np.generic):
            x = np.asarray(x)
        else:
            bad_input(node, i, what or _dtypes_text(allowed), describe(x))
    if x.dtype.kind in "US":
        x = x.astype(object)
    if x.dtype not in allowed:
        bad_input(node, i, what or _dtypes_text(allowed), describe(x))
    return x


def _dtypes_text(allowed) -> str:
    names = sorted("string" if np.dtype(d) == np.dtype(object) else str(np.dtype(d)) for d in allowed)
    return "a tensor of " + " or ".join(names)


def rows_of(node, x, i=0):
    """(N, F) of a rank-1 ([F], one row) or rank-2 input, else InvalidArgument."""
    shape = x.shape
    if len(shape) == 2:
        return shape
    if len(shape) == 1:
        return 1, shape[0]
    bad_input(node, i, "of rank 1 [features] or 2 [N, features]", f"shape {list(shape)}")
