"""onnxjit: an ONNX inference runtime whose kernels are Numba-compiled; a drop-in for onnxruntime's Python API.

    import onnxjit as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})
"""
__version__ = "0.1.0"

import os as _os


def _prefer_512_bit_vectors() -> None:
    """LLVM tunes AVX-512 CPUs to 256-bit vectors ("prefer-256-bit"); the fused kernels are compute-bound and
    ran 5.9 instead of 8.3 ms on the 8-op chain with 512-bit ones. Numba has no per-function switch, so this sets
    its CPU features for the process, before Numba is imported, unless the user set
    NUMBA_CPU_FEATURES. The artifact cache keys on these features."""
    import sys

    if "NUMBA_CPU_FEATURES" in _os.environ or "numba" in sys.modules:
        return
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    if features.get("avx512f") and features.get("avx512vl"):
        _os.environ["NUMBA_CPU_FEATURES"] = features.flatten() + ",-prefer-256-bit"


_prefer_512_bit_vectors()

# the environment above must be set before these import Numba
from onnxjit import providers as _providers  # noqa: F401, E402  (registers the providers)
from onnxjit.errors import (EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded,  # noqa: F401, E402
                            NoModel, NoSuchFile, NotImplemented, OnnxJitError, RuntimeException)
from onnxjit.session.iobinding import IOBinding, OrtValue  # noqa: F401, E402
from onnxjit.session.options import (ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions,  # noqa: F401, E402
                                     SessionOptions)
from onnxjit.session.session import (InferenceSession, ModelMetadata, NodeArg, get_all_providers,  # noqa: F401, E402
                                     get_available_providers, get_device)
