"""onnxjit: an ONNX inference runtime whose kernels are Numba-compiled; a drop-in for onnxruntime's Python API.

    import onnxjit as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})
"""
__version__ = "0.1.0"

from onnxjit import providers as _providers  # noqa: F401  (registers the providers)
from onnxjit.dataframe import feeds_from_dataframe  # noqa: F401
from onnxjit.errors import (EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded,  # noqa: F401
                            NoModel, NoSuchFile, NotImplemented, OnnxJitError, RuntimeException)
from onnxjit.session.iobinding import IOBinding, OrtValue  # noqa: F401
from onnxjit.session.options import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions,  # noqa: F401
                                     SessionOptions)
from onnxjit.session.session import (InferenceSession, ModelMetadata, NodeArg, get_all_providers,  # noqa: F401
                                     get_available_providers, get_device)
