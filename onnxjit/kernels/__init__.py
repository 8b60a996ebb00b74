"""Numba kernels, plain math over arrays, one module per op family.

Helpers that a kernel's loops call are inlined by LLVM (``forceinline=True``), not by Numba's IR inlining
(``inline="always"``): the latter deep-copies the callee's IR, whole variable scope included, at every call
site and again for each level of nesting, which made it most of a cold start. Intel Emerald Rapids VM:
gemm_packed compiled in 7.5 s with IR inlining, 3.4 s with LLVM's; light resnet50's session and first run over
empty caches 47.7-51.0 s -> 37.2-39.6 s, its kernels as fast. IR inlining stays where the caller's flags must
apply to the helper's code: the scalar helpers of generated kernels (error_model="numpy"), and the reduce, pool
and normalization helpers that run inside `fastmath` loops.
"""
from onnxjit.cache import kernel_locator
from onnxjit.kernels import vector_width

# before any kernel module defines a cached function: their cache entries must also depend on their callees
kernel_locator.install()
# before any onnxjit function compiles: the loops LLVM vectorizes use the CPU's widest vectors
vector_width.install()
