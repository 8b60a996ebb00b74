"""Op definitions for the CPU provider, one module per op family; importing registers them."""
from onnxjit.ops import elementwise  # noqa: F401
