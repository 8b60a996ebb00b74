"""Numba kernels, plain math over arrays, one module per op family."""
from onnxjit.cache import kernel_locator

# before any kernel module defines a cached function: their cache entries must also depend on their callees
kernel_locator.install()
