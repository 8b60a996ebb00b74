"""Imports every module of the CUDA provider's kernels, which registers their ops (registry.py)."""
from onnxjit.kernels.cuda import conv, gemm, movement, normalization, pool, shape  # noqa: F401
