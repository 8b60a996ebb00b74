"""onnxjit: an ONNX inference runtime whose kernels are Numba-compiled; a drop-in for onnxruntime's Python API.

    import onnxjit as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})
"""
__version__ = "0.1.0"

import os as _os

# Numba's OpenMP threads spin after each parallel kernel by default and starve the next op (a Relu measured
# 70 ms instead of 5 ms inside squeezenet); sleeping waiters cost microseconds per kernel. Set before Numba
# starts OpenMP; a value the user set wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from onnxjit import providers as _providers  # noqa: F401  (registers the providers)
from onnxjit.errors import (EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded,  # noqa: F401
                            NoModel, NoSuchFile, NotImplemented, OnnxJitError, RuntimeException)
from onnxjit.session.iobinding import IOBinding, OrtValue  # noqa: F401
from onnxjit.session.options import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions,  # noqa: F401
                                     SessionOptions)
from onnxjit.session.session import (InferenceSession, ModelMetadata, NodeArg, get_all_providers,  # noqa: F401
                                     get_available_providers, get_device)
