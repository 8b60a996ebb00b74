"""The vector width of the loops LLVM vectorizes on its own in onnxjit's kernels.

LLVM tunes Intel's AVX-512 server CPUs (skylake-avx512 to emeraldrapids) to prefer 256-bit vectors in the loops
its vectorizers write (`prefer-256-bit`: 512-bit instructions slowed the clock of the first AVX-512 chips), so
every elementwise loop, activation, reduction and generated kernel ran on ymm registers, half the width the
CPU has. onnxjit's explicit vectors (kernels.simd: GEMM tiles, convs) are 512-bit there anyway, so its code
runs at AVX-512's clock whatever this says. `install()` gives each function Numba lowers for an onnxjit module
(onnxjit.* and the generated kernels' onnxjit_kernels.*) the LLVM function attribute
"prefer-vector-width"="512" where the CPU has AVX-512 (what LLVM already does for AMD Zen 4); other code in the
process keeps Numba's defaults, whichever was imported first (onnxjit used to set NUMBA_CPU_FEATURES without
`prefer-256-bit` for the whole process, and only when it was imported before Numba). The attribute is a function
of the CPU's features, which every cache key holds.

Measured on an Emerald Rapids VM, one thread, x * sigmoid(x) over 401,408 float32: 0.96-1.21 ns an element on
ymm, 0.67-0.89 on zmm (three alternations); the microbench's ew_chain and softmax_ln ran as fast with the attribute
as with the process-wide features (ratios to onnxruntime 0.41-0.48 and 0.28-0.47 against 0.44-0.47 and
0.34-0.40, three alternating runs).
"""
from __future__ import annotations

import re

from numba.core import cpu

from onnxjit.kernels.simd import HAS_AVX512

# a function lowered for a module of the onnxjit package or for a generated kernel (cache/store.py)
_ONNXJIT_FUNCTION = re.compile(r"_ZN\d+onnxjit")
_ATTRIBUTE = '"prefer-vector-width"="512"'


def _with_vector_width(apply):
    def apply_target_attributes(self, llvm_func, argtypes=None, restype=None):
        apply(self, llvm_func, argtypes, restype)
        if _ONNXJIT_FUNCTION.match(llvm_func.name):
            # llvmlite's attribute set takes LLVM's keyword attributes only; a string attribute is printed as
            # it is given
            set.add(llvm_func.attributes, _ATTRIBUTE)
    apply_target_attributes.onnxjit_vector_width = True
    return apply_target_attributes


def install() -> None:
    """Make onnxjit's functions prefer 512-bit vectors where the CPU has them (once per process)."""
    apply = cpu.CPUContext.apply_target_attributes
    if HAS_AVX512 and not getattr(apply, "onnxjit_vector_width", False):
        cpu.CPUContext.apply_target_attributes = _with_vector_width(apply)
