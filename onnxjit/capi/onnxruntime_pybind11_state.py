"""`from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument` works with onnxjit too."""
from onnxjit.errors import *  # noqa: F401,F403
from onnxjit.errors import __all__  # noqa: F401
