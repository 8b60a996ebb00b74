"""Kernels a session's first run defers: compiled in the background after it, while numpy stands in for them.

Over an empty cache a first run compiles every kernel it meets, and the conv and product kernels cost the most
(light resnet50 on one core of a 2-core Intel Emerald Rapids VM: 26 s of compiling, conv_packed 6 s, the Winograd
kernel 7 s, conv_broadcast 6 s, pools and softmax 4 s). So while a session's first run is armed
(parallel_compile.FirstRun: a machine with cores to spare, compile helpers started) or a helper records it, an op
whose kernel has no code for its argument types (compiled in this process, or in the disk cache: `available`)
`defer`s it and computes on its numpy stand-in (onnxjit.ops.stand_ins), which compiles nothing: the convs of
ops/nn.py, their pools and global pools, softmax, attention, and the float32 products with a constant B of
ops/linalg.py.
When the run ends, a background thread compiles what was deferred, then calls each one's `on_ready` (the conv or
product drops its prepared call: its next run prepares it again, on the kernel); the ops with nothing prepared
(pools, softmax, attention) ask `stands_in` in each run, which answers from the kernels still waiting. The helpers,
which defer the same kernels in their recording runs, compile them after their share of the run's kernels, from the
front of the list, the thread from the back; each claims a kernel with a marker file before compiling it and leaves
one claimed by the other side to it (`claim`). Native segments (native_plan) wait until nothing is pending
(`pending`), so they call the kernels; InferenceSession.wait_for_compilation waits for them (`wait`).

Measured over empty caches (same VM, one helper, session creation and first run, two rounds in alternating
processes with the commit before, whose convs ran on a general kernel compiled in the run, conv_packed: 9 s with its
epilogue): light_resnet50 10.3-12.3 -> 1.2-1.3 s, light_vgg19 14.9-16.0 -> 2.0-2.2 s, gpt2 8.1 -> 2.9-4.4 s,
vit_tiny 10.2-10.6 -> 2.1-2.2 s (docs/design.md has the rest). Runs until the kernels are compiled are numpy's;
those were all in no later than before (resnet50 19.2-22.6 -> 16.4-18.0 s after the session's start).

A deferred kernel that fails to compile leaves its op on the stand-in (logged). Sessions without a first run armed
(one intra-op thread, no helpers: ONNXJIT_COMPILE_PROCESSES=0) compile every kernel in the run, as before.
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
_waiting: set = set()  # their (kernel, argument types)
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
            _waiting.add((kernel, argtypes))
    entry[1].append(on_ready)


def _run_units_types(kernel, args: tuple) -> tuple:
    """The argument types of a kernel of worker_pool.run_units called with `args` (its range of units added)."""
    return tuple(kernel.typeof_pyval(a) for a in args) + (numba.types.int64, numba.types.int64)


def defer_unless_available(kernel, args: tuple, on_ready: Callable[[], None]) -> bool:
    """For a kernel of worker_pool.run_units called with `args`: where it has no code for their types (`available`),
    `defer` it and return True; False where it has."""
    argtypes = _run_units_types(kernel, args)
    if available(kernel, argtypes):
        return False
    defer(kernel, argtypes, on_ready)
    return True


def stands_in(kernel, args: tuple) -> bool:
    """Whether an op with no prepared call to drop (pools, softmax, attention) runs its stand-in instead of its
    worker_pool.run_units kernel with `args`: in a first run that defers, where the kernel has no code (it is
    deferred here), and after it, until the kernel is compiled (for good where it failed to, as the prepared calls
    keep theirs). A check of one set in every other run."""
    if not _waiting and not deferring():
        return False
    argtypes = _run_units_types(kernel, args)
    if (kernel, argtypes) in _waiting:
        return True
    if not deferring() or available(kernel, argtypes):
        return False
    defer(kernel, argtypes, _nothing)
    return True


def _nothing() -> None:
    pass


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
                _waiting.discard((kernel, argtypes))
                for on_ready in callbacks:
                    on_ready()
            except Exception as e:  # noqa: BLE001 - the op stays on its stand-in, which is correct
                log.warning("onnxjit: deferred kernel %s not compiled (%s: %s); its op keeps the numpy stand-in",
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
