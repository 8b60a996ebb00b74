"""Reading a model from a path, bytes or a ModelProto, with typed errors for everything a user can get wrong."""
from __future__ import annotations

import os

import onnx
from google.protobuf.message import DecodeError

from onnxjit.errors import Fail, InvalidGraph, InvalidProtobuf, NoModel, NoSuchFile

_TWO_GB = 2**31 - 1024


def load_model_proto(model) -> tuple[onnx.ModelProto, str | None]:
    """The ModelProto and the folder its external data is relative to (None when not loaded from a path)."""
    if model is None:
        raise NoModel("no model given: pass a path, the model's bytes or an onnx.ModelProto")
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(bytes(model), "the given bytes"), None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise NoSuchFile(f"Load model from {path} failed: file does not exist")
        if os.path.isdir(path):
            raise NoSuchFile(f"Load model from {path} failed: it is a directory, not a model file")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise Fail(f"Load model from {path} failed: {e}") from e
        return _parse(data, path), os.path.dirname(os.path.abspath(path))
    raise InvalidGraph(f"cannot load a model from a {type(model).__name__}: pass a path, bytes or an onnx.ModelProto")


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidProtobuf(f"Load model from {where} failed: not an ONNX model (protobuf parsing failed: {e})") \
            from None
    if not proto.HasField("graph") or proto.ir_version == 0:
        raise InvalidProtobuf(f"Load model from {where} failed: the data parsed but holds no ONNX model "
                              f"(no graph or no IR version)")
    return proto


def check_versions(proto: onnx.ModelProto) -> None:
    """Reject IR versions and opsets newer than onnx knows."""
    if proto.ir_version > onnx.IR_VERSION:
        raise InvalidGraph(f"the model's IR version {proto.ir_version} is newer than the newest this onnx "
                           f"({onnx.__version__}) knows, {onnx.IR_VERSION}")
    newest = onnx.defs.onnx_opset_version()
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise InvalidGraph(f"the model imports opset {o.version} of the ai.onnx domain; the newest this onnx "
                               f"({onnx.__version__}) knows is {newest}")


def checker_complaint(proto: onnx.ModelProto) -> str | None:
    """What onnx.checker objects to, if anything. The checker is stricter than onnxruntime (it refuses, say, an
    output declared without a shape), so its complaint is not fatal: it is quoted when a model fails to load.
    (It serializes the model, seconds for a large one: sessions only ask when they need the explanation.)"""
    if proto.ByteSize() > _TWO_GB:
        return None  # the checker cannot serialize it; loading still checks names and types
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None
