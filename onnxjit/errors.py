"""Exception hierarchy, named like onnxruntime's so `except ort.InvalidArgument` keeps working.

onnxruntime raises these from `onnxruntime.capi.onnxruntime_pybind11_state`; onnxjit defines them here and
re-exports them from `onnxjit` and from `onnxjit.capi.onnxruntime_pybind11_state`.
"""


class OnnxJitError(Exception):
    """Base class of every error onnxjit raises on purpose."""


class Fail(OnnxJitError):
    """A generic failure (onnxruntime's FAIL status)."""


class InvalidArgument(OnnxJitError, ValueError):
    """A bad argument from the caller: a feed, an output name, an option."""


class NoSuchFile(OnnxJitError, FileNotFoundError):
    """The model file does not exist."""


class NoModel(OnnxJitError):
    """No model was given."""


class InvalidGraph(OnnxJitError):
    """The model is not a valid ONNX graph."""


class InvalidProtobuf(InvalidGraph):
    """The bytes given are not a parsable ModelProto."""


class ModelLoaded(OnnxJitError):
    """The model was already loaded."""


class NotImplemented(OnnxJitError, NotImplementedError):  # noqa: A001 - onnxruntime's name
    """No provider can run a node (op type, domain and opset are named in the message)."""


class RuntimeException(OnnxJitError, RuntimeError):
    """A kernel failed while running."""


class EPFail(OnnxJitError):
    """An execution provider failed."""


__all__ = [
    "OnnxJitError", "Fail", "InvalidArgument", "NoSuchFile", "NoModel", "InvalidGraph", "InvalidProtobuf",
    "ModelLoaded", "NotImplemented", "RuntimeException", "EPFail",
]
