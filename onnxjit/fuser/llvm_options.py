"""LLVM options scoped to the compilation of one generated kernel.

`vector_interleave(n)` makes LLVM's loop vectorizer run n vector iterations side by side (independent dependency
chains) in each loop it vectorizes. A body around a transcendental function (exp, tanh, sigmoid: ~40 dependent
instructions) otherwise runs one vector at a time and waits on latency; with AVX2's 16 registers LLVM's cost model
does not interleave it on its own. LLVM reads the option from a process-wide setting, so it is set and reset
under Numba's compiler lock: no other compilation sees it. Loading a cached kernel compiles nothing and is not
affected.
"""
from __future__ import annotations

import contextlib

import llvmlite.binding as llvm
from numba.core.compiler_lock import global_compiler_lock


@contextlib.contextmanager
def vector_interleave(count: int):
    with global_compiler_lock:
        llvm.set_option("onnxjit", f"-force-vector-interleave={int(count)}")
        try:
            yield
        finally:
            llvm.set_option("onnxjit", "-force-vector-interleave=0")  # 0: LLVM's cost model decides
