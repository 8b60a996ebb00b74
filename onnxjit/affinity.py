"""Pinning onnxjit's own worker threads to cores, one core each: never the caller's thread, nor BLAS's.

Why: on a 2-core VM a worker thread of the parallel kernels drifted onto the core of the thread that calls `run`
and stayed there (Linux places a thread woken by another near its waker), and every parallel kernel then ran at
half speed for seconds to minutes (Softmax+LayerNormalization 1.4 -> 3.1 ms, in spells, on an Intel Sapphire
Rapids VM, when those kernels ran on Numba's OpenMP threads). Binding the whole process (OMP_PROC_BIND=true)
avoids that but binds the caller's thread too, and the BLAS threads it starts inherit its single core (3x
Gemm+Relu 20x slower). Pinned, a worker cannot be pulled onto its waker's core; the caller stays free, and the
scheduler moves it to the core left idle.

Worker k (k >= 1; the caller is 0) of onnxjit's pool (onnxjit.worker_pool) goes to the k-th core the process may
use, modulo their number. Off when the process may use a single core, when the user chose OpenMP placement
(OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY, KMP_AFFINITY: a sign they place threads themselves), or with
ONNXJIT_PIN_THREADS=0.
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


def pin_this_thread_as_worker(k: int) -> None:
    """Pin the calling thread, worker k of a pool whose caller is worker 0."""
    if pinning_enabled():
        cores = allowed_cores()
        os.sched_setaffinity(0, {core_of_worker(k, cores)})  # pid 0: the calling thread (Linux)
