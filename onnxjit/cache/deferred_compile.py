"""Kernels a session's first run defers: compiled in the background after it, while a general kernel stands in.

Over an empty cache a first run compiles every kernel it meets, and the specialized ones cost the most: for light
resnet50's 20 s of compiling on one core, the Winograd conv kernel with its transforms 5 s and conv_broadcast 2 s,
where its 1x1 convs' im2col + packed-GEMM kernel (conv_packed) computes every one of those convs too. So while a
session's first run is armed (parallel_compile.FirstRun: a machine with cores to spare, compile helpers started)
or a helper records it, an op whose specialized kernel has no code for its argument types (compiled in this process,
or in the disk cache: `available`) runs on its general kernel, and `defer`s the specialized one (the convs of
ops/nn.py on conv_packed or conv_direct; the float32 products with a constant B of ops/linalg.py on numpy's matmul,
which compiles nothing: vit_tiny's packed GEMM and its microkernel took 1.9 s of 16). When the run ends,
a background thread compiles what was deferred, then calls each one's `on_ready` (the op drops its prepared call: its
next run prepares it again, on the specialized kernel). The helpers, which defer the same kernels in their recording
runs, compile them after their share of the run's kernels, from the front of the list, the thread from the back;
each claims a kernel with a marker file before compiling it and leaves one claimed by the other side to it
(`claim`). Native segments (native_plan) wait until nothing is pending (`pending`), so they call the specialized
kernels; InferenceSession.wait_for_compilation waits for them (`wait`).

A deferred kernel that fails to compile leaves its op on the general kernel (logged). Sessions without a first run
armed (one intra-op thread, no helpers: ONNXJIT_COMPILE_PROCESSES=0) compile every kernel in the run, as before.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable

import numba

from onnxjit.cache import parallel_compile
from onnxjit.cache.jit import load_cached

log = logging.getLogger("onnxjit")

_pending = 0  # deferred kernels not compiled yet, in this process
_done = threading.Condition()
_compiling: set = set()  # the FirstRuns whose deferred kernels compile now


def deferring() -> bool:
    """Whether this thread runs a first run that defers kernels (armed, or a helper's recording run)."""
    return parallel_compile.armed_first_run() is not None or parallel_compile.recording()


def available(kernel, argtypes: tuple) -> bool:
    """Whether `kernel` (a cached dispatcher) has code for `argtypes` now: compiled in this process, or loaded from
    its disk cache here (never compiled by this call)."""
    return load_cached(kernel, argtypes)


def defer(kernel, argtypes: tuple, on_ready: Callable[[], None], job: Callable[[], None] | None = None) -> None:
    """Note `kernel` for `argtypes` to compile after the first run on this thread (see `deferring`), and call
    `on_ready` once it has code. `job` compiles it; by default `compile_kernel` (a kernel of worker_pool.run_units,
    with its launcher)."""
    global _pending
    if job is None:
        job = lambda: compile_kernel(kernel, argtypes)  # noqa: E731
    if parallel_compile.recording():  # a helper: compiled after its share of the run's kernels
        parallel_compile.note_deferred(kernel, argtypes, job)
        return
    entry = parallel_compile.armed_first_run().deferred.setdefault((kernel, argtypes), (job, []))
    if not entry[1]:
        with _done:
            _pending += 1
    entry[1].append(on_ready)


def defer_unless_available(kernel, args: tuple, on_ready: Callable[[], None]) -> bool:
    """For a kernel of worker_pool.run_units called with `args` (its range of units added): where it has no code for
    their types (`available`), `defer` it and return True; False where it has."""
    argtypes = tuple(kernel.typeof_pyval(a) for a in args) + (numba.types.int64, numba.types.int64)
    if available(kernel, argtypes):
        return False
    defer(kernel, argtypes, on_ready)
    return True


def pending() -> bool:
    return _pending > 0


def wait(timeout: float | None = None) -> None:
    """Wait until every deferred kernel of this process is compiled (or `timeout` seconds have passed)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _done:
        while _pending > 0:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            _done.wait(left)


def compile_in_background(first_run) -> None:
    """At the end of `first_run` (a parallel_compile.FirstRun that deferred kernels): compile them on a daemon
    thread, which stops the run's helpers when it is done (or the interpreter, exiting before)."""
    with _done:
        if not _compiling:
            atexit.register(_stop_all)
        _compiling.add(first_run)
    threading.Thread(target=_compile_deferred, args=(first_run,), name="onnxjit-deferred", daemon=True).start()


def _stop_all() -> None:
    """At exit: the helpers of first runs whose deferred kernels are still compiling terminated, their files gone."""
    for first_run in list(_compiling):
        first_run.stop()


def _compile_deferred(first_run) -> None:
    global _pending
    deferred = list(first_run.deferred.items())
    try:
        for (kernel, argtypes), (job, callbacks) in reversed(deferred):  # the helpers take them from the front
            try:
                _compile(first_run, kernel, argtypes, job)
                for on_ready in callbacks:
                    on_ready()
            except Exception as e:  # noqa: BLE001 - the op stays on its general kernel, which is correct
                log.warning("onnxjit: deferred kernel %s not compiled (%s: %s); its op keeps the general kernel",
                            getattr(kernel, "__name__", kernel), type(e).__name__, e)
    finally:
        first_run.deferred = {}
        first_run.stop()  # before `wait` returns: a process exiting then would kill this thread mid-cleanup
        with _done:
            _compiling.discard(first_run)
            _pending -= len(deferred)
            _done.notify_all()


def _compile(first_run, kernel, argtypes, job) -> None:
    """Compile (or load: `job`) `kernel` for `argtypes`, unless a helper has claimed it: then wait for the helper,
    and load what it wrote (or compile it here, if the helper failed or is gone)."""
    marker = parallel_compile.compiling_marker(kernel.py_func, argtypes)
    claimed = first_run.claim(marker)
    try:
        if claimed is None:
            first_run.wait_for_marker(marker)
        job()
    finally:
        if claimed:
            try:
                os.remove(claimed)
            except OSError:
                pass


def compile_kernel(kernel, argtypes: tuple) -> None:
    """Compile (or load) a deferred kernel and its launcher over the worker pool."""
    from onnxjit import worker_pool
    kernel.compile(argtypes)
    worker_pool.compile_launcher(argtypes[:-2])
