"""onnxjit's worker threads: `run_units(kernel, args, n_units, work)` runs a kernel over ranges of work units on
the calling thread and the pool's workers.

The kernels are serial `nogil` Numba functions over a range [u0, u1) of units. Compared with numba's prange this
compiles several times faster (no parfor lowering, no second copy of the kernel linked into a driver: +75% cold
compile time measured on conv_gemm). The cost to beat is the hand-off: on the 2-core Sapphire Rapids VM, waking a
sleeping thread (a futex wait, an idle vCPU) took 30-50 us each way; a ThreadPoolExecutor round trip with no work
took 80 us, and models ran slower on 2 threads than on 1 (mobilenet_v2 15.1 vs 12.6 ms, shufflenet 11.0 vs 5.9
ms). So, as onnxruntime's and OpenMP's pools do, the workers spin:

* A worker waits in native code, the GIL released, polling a generation counter (an atomic load and a `pause` per
  poll) for SPIN_SECONDS after its last share of work, then sleeps on a condition until the next job.
* Every share is one dispatch of the kernel, and a dispatch needs the GIL; a thread that finds the GIL taken
  sleeps on it and is woken as slowly as above. Hence one contiguous share per thread (not many small chunks),
  and a worker that sees a new job lingers LINGER_SECONDS in native code first: by then the caller has entered
  its own share's kernel, which releases the GIL. The caller waits for the others' shares in native code too,
  and a worker reports its finished shares from native code, after releasing the GIL (`_report_and_wait`): the
  caller, seeing them, takes a free GIL. With the count bumped in Python, the caller woke while the worker
  still held the GIL and slept on it: two 47 us shares of a 2-unit job took 65-75 us on the AMD Zen 3 VM, 55-59
  reported natively (4 us of linger; 10 us, tuned before on Sapphire Rapids, 59-62; 1 us, 62, the worker then
  reaching for the GIL while the caller was still unboxing a 17-argument kernel's arguments).
* The caller takes shares first and then any share no worker has claimed yet, so a worker descheduled on a busy
  machine delays nothing but its own claimed share.
* One job at a time: a thread calling `run_units` while another thread's job runs runs its kernel alone.

Workers are pinned one to a core (onnxjit.affinity); the caller's thread is never pinned.
"""
from __future__ import annotations

import itertools
import platform
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from onnxjit import affinity
from onnxjit.cache.jit import njit

# a kernel call doing less work than this (element operations) runs on the calling thread alone: handing work to
# other threads costs more than it saves
PARALLEL_GRAIN = 1 << 17
CHUNKS_PER_THREAD = 4  # blocks some ops cut their work into, per thread (linalg, conv_transpose)
SPIN_SECONDS = 2e-3  # a worker polls this long after its last share before it sleeps
LINGER_SECONDS = 4e-6  # a worker that sees a new job waits this long, GIL released, before taking the GIL
WAIT_BURST_SECONDS = 1e-3  # the caller's native wait for others' shares, between checks from Python
YIELD_SECONDS = 20e-6  # a polling thread yields its core this often

_GENERATION, _DONE = 0, 1
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def _load_acquire(typingctx, arr, i):
    """arr[i] of an int64 array, read with an atomic acquire load: a poll loop sees other threads' stores."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        return builder.load_atomic(builder.gep(a.data, [args[1]]), "acquire", 8)

    return types.int64(arr, types.intp), codegen


@intrinsic
def _fetch_add(typingctx, arr, i, v):
    """arr[i] += v on an int64 array as one atomic read-modify-write (acquire-release)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, value=args[0])
        v = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", builder.gep(a.data, [args[1]]), v, "acq_rel")

    return types.int64(arr, types.intp, types.intp), codegen


@intrinsic
def _pause(typingctx):
    """The x86 spin-wait hint (`pause`: lets the sibling hyperthread run, saves power); nothing elsewhere."""
    def codegen(context, builder, signature, args):
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def _sched_yield(typingctx):
    """sched_yield(): a thread waiting to run on this core (Numba's OpenMP worker, pinned to the same core as
    ours, whose kernel is running) gets it now rather than when the scheduler would preempt the poll loop."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        return builder.call(fn, [])

    return types.int32(), codegen


@njit(cache=True, nogil=True)
def _wait_for_change(state, i, seen, polls, linger, yield_every):
    """Poll state[i] up to `polls` times until it differs from `seen`, yielding the core every `yield_every`
    polls; then pause `linger` times more. Returns the last value read (`seen` when it never changed)."""
    for k in range(polls):
        v = _load_acquire(state, i)
        if v != seen:
            for _ in range(linger):
                _pause()
            return v
        _pause()
        if k % yield_every == yield_every - 1:
            _sched_yield()
    return _load_acquire(state, i)


@njit(cache=True, nogil=True)
def _report_and_wait(state, finished, seen, polls, linger, yield_every):
    """A worker's end of a job: add the shares it `finished` to state[_DONE], then wait for the next generation
    as _wait_for_change does. The add happens here, with the GIL already released: the caller, seeing the job
    done, takes the GIL at once instead of sleeping on it while the worker still ran Python code (a GIL
    hand-off cost 10 us or more on the 2-core VMs)."""
    if finished:
        _fetch_add(state, _DONE, finished)
    return _wait_for_change(state, _GENERATION, seen, polls, linger, yield_every)


@njit(cache=True, nogil=True)
def _wait_for_at_least(state, i, target, polls, yield_every):
    """Poll state[i] up to `polls` times until it reaches `target`; returns the last value read."""
    for k in range(polls):
        v = _load_acquire(state, i)
        if v >= target:
            return v
        _pause()
        if k % yield_every == yield_every - 1:
            _sched_yield()
    return _load_acquire(state, i)


@njit(cache=True, nogil=True)
def _pauses(n):
    for _ in range(n):
        _pause()


class _Job:
    """One run_units call: contiguous shares of the units, claimed one at a time under the GIL."""

    __slots__ = ("kernel", "args", "bounds", "claims", "errors")

    def __init__(self, kernel, args, bounds):
        self.kernel, self.args, self.bounds = kernel, args, bounds
        self.claims = itertools.count()  # next() is atomic under the GIL
        self.errors = []

    def run_shares(self) -> int:
        """Claim and run shares until none is left; returns how many this thread ran."""
        n_shares = len(self.bounds) - 1
        finished = 0
        while True:
            i = next(self.claims)
            if i >= n_shares:
                return finished
            try:
                self.kernel(*self.args, self.bounds[i], self.bounds[i + 1])
            except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
                self.errors.append(e)
            finished += 1


class WorkerPool:
    def __init__(self):
        self._state = np.zeros(2, dtype=np.int64)  # generation of the current job, shares it has finished
        self._job = None
        self._workers = 0
        self._sleepers = 0
        self._cond = threading.Condition()
        self._busy = threading.Lock()
        self._grow_lock = threading.Lock()
        per_pause = self._seconds_per_pause()
        self._spin_polls = max(1, int(SPIN_SECONDS / per_pause))
        self._linger = max(1, int(LINGER_SECONDS / per_pause))
        self._wait_polls = max(1, int(WAIT_BURST_SECONDS / per_pause))
        self._yield_every = max(1, int(YIELD_SECONDS / per_pause))

    @staticmethod
    def _seconds_per_pause() -> float:
        _pauses(1)
        n = 20000
        t0 = time.perf_counter()
        _pauses(n)
        return max(time.perf_counter() - t0, 1e-6) / n

    def _ensure_workers(self, n: int) -> None:
        with self._grow_lock:
            while self._workers < n:
                self._workers += 1
                threading.Thread(target=self._work, args=(self._workers,), name=f"onnxjit-cpu-{self._workers}",
                                 daemon=True).start()

    def _work(self, k: int) -> None:
        affinity.pin_this_thread_as_worker(k)
        state = self._state
        seen = int(state[_GENERATION])
        finished = 0
        while True:
            generation = int(_report_and_wait(state, finished, seen, self._spin_polls, self._linger,
                                              self._yield_every))
            finished = 0
            if generation == seen:
                with self._cond:
                    self._sleepers += 1
                    self._cond.wait_for(lambda: int(state[_GENERATION]) != seen)
                    self._sleepers -= 1
                    generation = int(state[_GENERATION])
            seen = generation
            job = self._job
            if job is not None:
                finished = job.run_shares()

    def run(self, kernel, args, n_units: int, threads: int) -> None:
        if not self._busy.acquire(blocking=False):  # another thread's job holds the workers
            kernel(*args, 0, n_units)
            return
        try:
            self._ensure_workers(threads - 1)
            n_shares = min(threads, n_units)
            job = _Job(kernel, args, [n_units * i // n_shares for i in range(n_shares + 1)])
            state = self._state
            state[_DONE] = 0
            self._job = job
            state[_GENERATION] += 1
            if self._sleepers:
                with self._cond:
                    self._cond.notify_all()
            others = n_shares - job.run_shares()
            while int(_wait_for_at_least(state, _DONE, others, self._wait_polls, self._yield_every)) < others:
                pass
            self._job = None
            if job.errors:
                raise job.errors[0]
        finally:
            self._busy.release()


_pool = None
_pool_lock = threading.Lock()


def _the_pool() -> WorkerPool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = WorkerPool()
    return _pool


def run_units(kernel, args, n_units, work):
    """kernel(*args, start, end) over the units [0, n_units): on the calling thread alone when `work` (element
    operations) is small or one thread is allowed (numba's thread count, which intra_op_num_threads sets), else
    split over the calling thread and the pool's workers. The size test comes first: reading the thread count
    costs a microsecond, much of a batch-1 run's small kernels."""
    if n_units <= 1 or work < PARALLEL_GRAIN:
        kernel(*args, 0, n_units)
        return
    threads = numba.get_num_threads()
    if threads <= 1:
        kernel(*args, 0, n_units)
        return
    _the_pool().run(kernel, args, n_units, threads)
