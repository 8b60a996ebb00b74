"""Pinning onnxjit's own worker threads to cores, one core each: never the caller's thread, nor BLAS's.

Why: on a 2-core VM the OpenMP worker of Numba's parallel kernels would drift onto the core of the thread that
calls `run` and stay there (Linux places a thread woken by another near its waker), and every parallel kernel
then ran at half speed for seconds to minutes (Softmax+LayerNormalization 1.4 -> 3.1 ms, in spells, on an Intel
Sapphire Rapids VM). Binding the whole process (OMP_PROC_BIND=true) avoids that but binds the caller's thread
too, and the BLAS threads it starts inherit its single core (3x Gemm+Relu 20x slower). Pinned, a worker cannot be
pulled onto its waker's core; the caller stays free, and the scheduler moves it to the core left idle.

Worker k (k >= 1; the caller is 0) of Numba's thread pool, and of onnxjit's own pool (`run_units` in
onnxjit.ops.nn), goes to the k-th core the process may use, modulo their number. Off when the process may use a
single core, when the user chose OpenMP placement (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY, KMP_AFFINITY),
or with ONNXJIT_PIN_THREADS=0.
"""
from __future__ import annotations

import os
import threading

import numba
import numpy as np
from llvmlite import ir
from numba import prange
from numba.core import cgutils, types
from numba.core.extending import intrinsic

from onnxjit.cache.jit import njit

USER_PLACEMENT_VARIABLES = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_lock = threading.Lock()
_numba_pool_pinned = False


def allowed_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def pinning_enabled() -> bool:
    if os.environ.get("ONNXJIT_PIN_THREADS", "1") == "0":
        return False
    if any(v in os.environ for v in USER_PLACEMENT_VARIABLES):
        return False
    return len(allowed_cores()) > 1


def core_of_worker(k: int, cores: list[int]) -> int:
    return cores[k % len(cores)]


def pin_this_thread_as_worker(k: int) -> None:
    """Pin the calling thread, worker k of a pool whose caller is worker 0 (a ThreadPoolExecutor initializer)."""
    if pinning_enabled():
        cores = allowed_cores()
        os.sched_setaffinity(0, {core_of_worker(k, cores)})  # pid 0: the calling thread (Linux)


@intrinsic
def _set_thread_affinity(typingctx, mask):
    """sched_setaffinity(0, len(mask), mask): the calling OS thread's CPU mask (a uint8 bit array)."""
    if not (isinstance(mask, types.Array) and mask.dtype == types.uint8 and mask.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, value=args[0])
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_setaffinity")
        size = builder.trunc(arr.nitems, ir.IntType(64)) if arr.nitems.type.width > 64 else arr.nitems
        ptr = builder.bitcast(arr.data, ir.IntType(8).as_pointer())
        return builder.call(fn, [ir.Constant(ir.IntType(32), 0), size, ptr])

    return types.int32(mask), codegen


@njit(cache=True, parallel=True)
def _pin_numba_workers(masks, results):
    """Iteration k runs on thread k of Numba's pool (one iteration per thread): every thread but the caller (0)
    sets its own CPU mask, masks[thread id]. results[k] = (thread id, sched_setaffinity's return)."""
    for k in prange(masks.shape[0]):
        t = numba.get_thread_id()
        results[k, 0] = t
        if t != 0:
            results[k, 1] = _set_thread_affinity(masks[t])


def pin_numba_workers() -> bool:
    """Pin the workers of Numba's thread pool once per process (starting the pool if it is not yet); whether
    they are pinned."""
    global _numba_pool_pinned
    with _lock:
        if _numba_pool_pinned or not pinning_enabled():
            return _numba_pool_pinned
        n = numba.config.NUMBA_NUM_THREADS
        if n < 2:
            return False
        cores = allowed_cores()
        masks = np.zeros((n, max(8, (max(cores) + 64) // 64 * 8)), dtype=np.uint8)
        for t in range(n):
            c = core_of_worker(t, cores)
            masks[t, c // 8] |= np.uint8(1 << (c % 8))
        results = np.zeros((n, 2), dtype=np.int64)
        before = numba.get_num_threads()
        numba.set_num_threads(n)  # the whole pool, whatever intra_op_num_threads chose
        try:
            _pin_numba_workers(masks, results)
        finally:
            numba.set_num_threads(before)
        # one iteration per thread is how Numba schedules n iterations over n threads: every worker was pinned
        _numba_pool_pinned = sorted(results[:, 0].tolist()) == list(range(n)) and not results[:, 1].any()
        return _numba_pool_pinned
