"""Pinning onnxjit's own worker threads to cores, one core each: never the caller's thread, nor BLAS's.

Why: on a 2-core VM a worker thread of the parallel kernels drifted onto the core of the thread that calls `run`
and stayed there (Linux places a thread woken by another near its waker), and every parallel kernel then ran at
half speed for seconds to minutes (Softmax+LayerNormalization 1.4 -> 3.1 ms, in spells, on an Intel Sapphire
Rapids VM, when those kernels ran on Numba's OpenMP threads). Binding the whole process (OMP_PROC_BIND=true)
avoids that but binds the caller's thread too, and the BLAS threads it starts inherit its single core (3x
Gemm+Relu 20x slower). Pinned, a worker cannot be pulled onto its waker's core; the caller stays free, and the
scheduler moves it to the core left idle.

Worker k (k >= 1; the caller is 0) of onnxjit's pool (onnxjit.worker_pool) goes to the k-th core the process may
use, modulo their number. The caller's thread can still land on a worker's core (Linux wakes a thread on an idle
core, and a worker between jobs leaves its core idle): then the two take turns on one core, every parallel kernel
at half speed, until the scheduler moves the caller, which took 5-8 runs of squeezenet after a session's first
(13-14 ms a run instead of 7). So before each parallel job the pool moves a worker off the core the caller is on
(`core_to_step_aside_to`): the worker moves, the caller's thread is never touched.

Off when the process may use a single core, when the user chose OpenMP placement (OMP_PROC_BIND, OMP_PLACES,
GOMP_CPU_AFFINITY, KMP_AFFINITY: a sign they place threads themselves), or with ONNXJIT_PIN_THREADS=0.
"""
from __future__ import annotations

import os

USER_PLACEMENT_VARIABLES = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


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


def pin_this_thread_as_worker(k: int) -> int | None:
    """Pin the calling thread, worker k of a pool whose caller is worker 0; returns its core (None: not pinned)."""
    if not pinning_enabled():
        return None
    core = core_of_worker(k, allowed_cores())
    os.sched_setaffinity(0, {core})  # pid 0: the calling thread (Linux)
    return core


def pin_thread(native_id: int, core: int) -> None:
    """Move a pinned worker (by its native thread id) to another core."""
    os.sched_setaffinity(native_id, {core})


_getcpu = None


def current_cpu() -> int | None:
    """The core the calling thread runs on now (libc's sched_getcpu, 0.3-0.5 us), or None where there is none."""
    global _getcpu
    if _getcpu is None:
        try:
            import ctypes
            fn = ctypes.CDLL(None, use_errno=True).sched_getcpu
            fn.restype = ctypes.c_int
            _getcpu = fn
        except (OSError, AttributeError):
            _getcpu = False
    if _getcpu is False:
        return None
    cpu = _getcpu()
    return cpu if cpu >= 0 else None


def core_to_step_aside_to(caller: int, worker_cores: list[int], cores: list[int]) -> int | None:
    """Where a worker pinned to the caller's core should go: the allowed core with the fewest workers, not the
    caller's, where it has fewer than the caller's core (None: no better place)."""
    counts = {c: 0 for c in cores}
    for c in worker_cores:
        counts[c] = counts.get(c, 0) + 1
    options = [c for c in cores if c != caller]
    if not options:
        return None
    best = min(options, key=lambda c: (counts[c], c))
    return best if counts[best] < counts.get(caller, 0) else None
