"""onnxjit's worker threads: `run_units(kernel, args, n_units, work)` runs a kernel over ranges of work units on
the calling thread and the pool's workers.

The kernels are serial `nogil` Numba functions over a range [u0, u1) of units. Compared with numba's prange this
compiles several times faster (no parfor lowering, no second copy of the kernel linked into a driver: +75% cold
compile time measured on conv_gemm; a prange driver around an already compiled conv_packed took 4.7 s more).

The cost to beat is the hand-off. Waking a sleeping thread (a futex wait, an idle vCPU) took 30-50 us each way on
the 2-core VMs, so, as onnxruntime's and OpenMP's pools do, the workers spin (polling with `pause`, yielding the
core every YIELD_SECONDS) for SPIN_SECONDS after their last share before they sleep on a condition. And a
worker never takes the GIL to run a share: when workers called the kernel's dispatcher, each share waited for
the GIL (the caller holds it until its own share's kernel starts) and paid the dispatch, and a 2-share job cost
10-13 us more than one call (AMD Zen 3 VM), most of a small conv's gain from the second thread.

So a job is published as native values in the `_state` array: `_launch`, compiled once per argument-tuple type,
stores the unboxed arguments in its own stack frame and publishes their address, the kernel's native entry point
and a share entry (`_share_entry`, emitted into `_launch`'s module) that loads the arguments and calls the
kernel through that pointer, with the kernel's own calling convention. Every participant, the caller included,
claims shares with one compare-and-swap on the _CLAIM word (job number, shares, next share: a worker late for a
job can never claim a share of the next one) and runs them through the share entry; `_launch` returns when all
shares are done, so its frame outlives every use of the arguments. The same 2-share job costs 2-4 us more than
one call. A share that raises is counted, and the job runs again on the caller through the dispatcher, which
raises the kernel's exception with its message.

A kernel's entry point is looked up once per kernel and argument fingerprint (Numba's, in C: 2 us for 18
arguments) after the dispatcher has compiled it: the first call of each signature runs on the caller alone, and
`_launch` is compiled for its argument types right after (0.3 s each over an empty cache, 5 for resnet50;
loaded from Numba's cache afterwards).
Plain Python callables (and a caller finding the pool busy with another thread's job) run on the caller too.

Workers are pinned one to a core (onnxjit.affinity); the caller's thread is never pinned.
"""
from __future__ import annotations

import hashlib
import platform
import threading
import time

import numba
import numpy as np
from llvmlite import ir
from numba import typeof, types
from numba._dispatcher import compute_fingerprint
from numba.core import callconv, cgutils
from numba.core.dispatcher import Dispatcher
from numba.core.extending import intrinsic
from numba.np.ufunc import parallel as numba_parallel

from onnxjit import affinity
from onnxjit.cache import deferred_compile
from onnxjit.cache.jit import njit

# a kernel call doing less work than this (element operations) runs on the calling thread alone: handing work to
# other threads costs more than it saves
PARALLEL_GRAIN = 1 << 17
CHUNKS_PER_THREAD = 4  # blocks some ops cut their work into, per thread (linalg, conv_transpose)
SPIN_SECONDS = 2e-3  # a worker polls this long after its last share before it sleeps
YIELD_SECONDS = 20e-6  # a polling thread yields its core this often
CORE_CHECK_SECONDS = 1e-3  # how often a job may check that no pinned worker shares the caller's core
MAX_SHARES = 0xFFFF  # shares of one job: a 16-bit field of the _CLAIM word

# the state array: _CLAIM = job number << 32 | shares << 16 | next share; shares done and failed; the job's share
# entry, argument block and kernel addresses and its unit count (written before _CLAIM publishes the job)
_CLAIM, _DONE, _FAILED, _ENTRY, _ARGS, _FN, _UNITS = range(7)
_STATE_SIZE = 8
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_I8P = ir.IntType(8).as_pointer()
_SHARE_ENTRY_TYPE = ir.FunctionType(ir.IntType(32), [_I8P, _I8P, ir.IntType(64), ir.IntType(64)])


def _int64_array(arr):
    return isinstance(arr, types.Array) and arr.dtype == types.int64


def _slot(context, builder, arrty, arr, i):
    a = context.make_array(arrty)(context, builder, value=arr)
    return builder.gep(a.data, [i])


@intrinsic
def _load_acquire(typingctx, arr, i):
    """arr[i] of an int64 array, read with an atomic acquire load: a poll loop sees other threads' stores."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_slot(context, builder, signature.args[0], args[0], args[1]), "acquire", 8)

    return types.int64(arr, types.intp), codegen


@intrinsic
def _store_release(typingctx, arr, i, v):
    """arr[i] = v on an int64 array, an atomic release store: the stores before it are seen by whoever reads it."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, signature, args):
        v = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(v, _slot(context, builder, signature.args[0], args[0], args[1]), "release", 8)
        return context.get_dummy_value()

    return types.void(arr, types.intp, types.int64), codegen


@intrinsic
def _fetch_add(typingctx, arr, i, v):
    """arr[i] += v on an int64 array as one atomic read-modify-write (acquire-release)."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, signature, args):
        v = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", _slot(context, builder, signature.args[0], args[0], args[1]), v, "acq_rel")

    return types.int64(arr, types.intp, types.intp), codegen


@intrinsic
def _compare_swap(typingctx, arr, i, expected, new):
    """Atomically: if arr[i] == expected, arr[i] = new; whether it did (acquire-release)."""
    if not _int64_array(arr):
        return None

    def codegen(context, builder, signature, args):
        pair = builder.cmpxchg(_slot(context, builder, signature.args[0], args[0], args[1]), args[2], args[3],
                               "acq_rel", "acquire")
        return builder.extract_value(pair, 1)

    return types.boolean(arr, types.intp, types.int64, types.int64), codegen


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
    """sched_yield(): a thread waiting to run on this core (a BLAS thread, another process's) gets it now rather
    than when the scheduler would preempt the poll loop."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        return builder.call(fn, [])

    return types.int32(), codegen


def _share_entry(context, module, tuple_type):
    """`i32 entry(i8* arguments, i8* kernel, i64 u0, i64 u1)` in `module`: loads the argument tuple (a
    `tuple_type` value) from `arguments` and calls `kernel`, a Numba function compiled for the tuple's member
    types and u0, u1, with Numba's calling convention; returns 1 where the kernel raised, else 0."""
    name = "onnxjit_share_" + hashlib.sha256(str(tuple_type).encode()).hexdigest()[:24]
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, _SHARE_ENTRY_TYPE, name)
    fn.linkage = "internal"
    builder = ir.IRBuilder(fn.append_basic_block())
    arguments, kernel, u0, u1 = fn.args
    tup = builder.load(builder.bitcast(arguments, context.get_value_type(tuple_type).as_pointer()))
    argtys = tuple(tuple_type.types) + (types.int64, types.int64)
    values = [builder.extract_value(tup, i) for i in range(len(tuple_type.types))] + [u0, u1]
    conv = context.call_conv
    callee = builder.bitcast(kernel, conv.get_function_type(types.none, argtys).as_pointer())
    retty = conv.get_return_type(types.none).pointee
    ret = cgutils.alloca_once(builder, retty)
    builder.store(cgutils.get_null_value(retty), ret)
    excinfo = cgutils.alloca_once(builder, ir.PointerType(callconv.excinfo_t))
    code = builder.call(callee, [ret, excinfo] + list(conv._get_arg_packer(argtys).as_arguments(builder, values)))
    status = conv._get_return_status(builder, code, builder.load(excinfo))
    builder.ret(builder.zext(status.is_error, ir.IntType(32)))
    return fn


def _without_meminfos(context, builder, ty, value):
    """`value` (of Numba type `ty`) with every array's meminfo (its NRT reference count) null, in tuples too."""
    if isinstance(ty, types.Array):
        ary = context.make_array(ty)(context, builder, value=value)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        return ary._getvalue()
    if isinstance(ty, types.BaseTuple):
        for i, member in enumerate(ty.types):
            value = builder.insert_value(value, _without_meminfos(context, builder, member,
                                                                  builder.extract_value(value, i)), i)
    return value


@intrinsic
def _publish(typingctx, args):
    """(address of a copy of the tuple `args` in this function's frame, address of its share entry). The copy's
    arrays have no NRT meminfo: every view a kernel takes of an argument would otherwise count references on
    the caller's meminfo, one cache line that all threads then write in turn (a grouped conv, whose im2col takes
    a view per channel and row, ran its two shares in twice the time of one thread running both). The caller
    holds the arrays until `_launch` returns, and kernels return nothing, so nothing outlives that."""
    if not isinstance(args, types.BaseTuple):
        return None

    def codegen(context, builder, signature, cargs):
        copy = cgutils.alloca_once(builder, context.get_value_type(signature.args[0]))
        builder.store(_without_meminfos(context, builder, signature.args[0], cargs[0]), copy)
        entry = _share_entry(context, builder.module, signature.args[0])
        i64 = ir.IntType(64)
        return context.make_tuple(builder, signature.return_type,
                                  [builder.ptrtoint(copy, i64), builder.ptrtoint(entry, i64)])

    return types.UniTuple(types.int64, 2)(args), codegen


@intrinsic
def _call_share_entry(typingctx, entry, arguments, kernel, u0, u1):
    """entry(arguments, kernel, u0, u1), all int64 (addresses and units): 1 where the kernel raised."""
    def codegen(context, builder, signature, cargs):
        fn = builder.inttoptr(cargs[0], _SHARE_ENTRY_TYPE.as_pointer())
        return builder.call(fn, [builder.inttoptr(cargs[1], _I8P), builder.inttoptr(cargs[2], _I8P), cargs[3],
                                 cargs[4]])

    return types.int32(types.int64, types.int64, types.int64, types.int64, types.int64), codegen


@njit(cache=True, nogil=True)
def _run_shares(state, job):
    """Claim and run shares of job number `job` until none is left."""
    while True:
        claim = _load_acquire(state, _CLAIM)
        if claim >> 32 != job:
            return
        n_shares = (claim >> 16) & MAX_SHARES
        share = claim & MAX_SHARES
        if share >= n_shares:
            return
        if not _compare_swap(state, _CLAIM, claim, claim + 1):
            continue
        n_units = state[_UNITS]
        failed = _call_share_entry(state[_ENTRY], state[_ARGS], state[_FN], n_units * share // n_shares,
                                   n_units * (share + 1) // n_shares)
        if failed:
            _fetch_add(state, _FAILED, 1)
        _fetch_add(state, _DONE, 1)


@njit(cache=True, nogil=True)
def _launch(state, args, kernel, n_units, n_shares, yield_every):
    """Run kernel(*args, u0, u1) (`kernel` its native entry point) over n_shares shares of [0, n_units) on this
    thread and the workers polling `state`; returns how many shares raised."""
    arguments, entry = _publish(args)
    job = ((_load_acquire(state, _CLAIM) >> 32) + 1) & 0x7FFFFFFF
    state[_ENTRY] = entry
    state[_ARGS] = arguments
    state[_FN] = kernel
    state[_UNITS] = n_units
    state[_DONE] = 0
    state[_FAILED] = 0
    _store_release(state, _CLAIM, (job << 32) | (n_shares << 16))
    _run_shares(state, job)
    polls = 0
    while _load_acquire(state, _DONE) < n_shares:  # the frame holding the arguments outlives every share
        _pause()
        polls += 1
        if polls % yield_every == 0:
            _sched_yield()
    return state[_FAILED]


@njit(cache=True, nogil=True)
def _serve(state, seen, polls, yield_every):
    """A worker's loop: run the shares of each job newer than `seen`; after `polls` polls without a new job,
    return the last job number seen."""
    idle = 0
    while idle < polls:
        job = _load_acquire(state, _CLAIM) >> 32
        if job != seen:
            seen = job
            _run_shares(state, job)
            idle = 0
            continue
        _pause()
        idle += 1
        if idle % yield_every == 0:
            _sched_yield()
    return seen


@njit(cache=True, nogil=True)
def _pauses(n):
    for _ in range(n):
        _pause()


_launchers: dict = {}
_DEFERRED = object()  # in _launchers: a launcher a first run deferred (onnxjit.cache.deferred_compile)


def _launcher(kernel, args, state):
    """(kernel's native entry point for `args` + (u0, u1), `_launch`'s compiled wrapper for `args`), or None: not
    a Numba dispatcher, an argument Numba's fingerprints do not cover, not compiled for these types yet, or
    compiled only for types these arguments convert to (an explicit signature taking read-only arrays).
    Calling `_launch`'s wrapper directly skips a second type dispatch on the same arguments (1 us)."""
    if not isinstance(kernel, Dispatcher):
        return None
    try:
        key = (kernel, tuple(map(compute_fingerprint, args)))
    except (TypeError, ValueError, NotImplementedError):
        return None
    found = _launchers.get(key)
    if isinstance(found, tuple):
        return found
    if found is _DEFERRED or found == len(kernel.overloads):  # (or not compiled when last looked, nor anything since)
        return None
    argtys = tuple(kernel.typeof_pyval(a) for a in args)
    cres = kernel.overloads.get(argtys + (types.int64, types.int64))
    if cres is None:
        # not compiled for these types yet, or only for types they convert to: looked up again once the kernel
        # has more overloads (remembering None for good kept a kernel compiled for other types first, say
        # another model's, from ever handing these off)
        _launchers[key] = len(kernel.overloads)
        return None
    launch_sig = launch_signature(argtys, state)
    if launch_sig not in _launch.overloads and deferred_compile.deferring() \
            and not deferred_compile.available(_launch, launch_sig):
        # a first run over an empty cache: the kernel runs on the caller alone until its launcher, compiled after
        # the run, is in (0.2 s of compiling each)
        _launchers[key] = _DEFERRED
        deferred_compile.defer(_launch, launch_sig, lambda: _launchers.pop(key, None),
                               job=lambda: compile_launch_ahead(launch_sig))
        return None
    found = _launchers[key] = (cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name),
                               compile_launch(launch_sig))
    return found


def launch_signature(argtys: tuple, state) -> tuple:
    """`_launch`'s argument types for a job over arguments of Numba types `argtys`."""
    return typeof(state), types.Tuple(argtys), types.int64, types.int64, types.int64, types.int64


def compile_launcher(kernel_argtypes: tuple) -> None:
    """Compile (or load) `_launch` for a kernel of argument types `kernel_argtypes` (its range of units left out),
    ahead of the kernel's first launch (deferred_compile: what a first run deferred is ready to run in parallel)."""
    compile_launch_ahead(launch_signature(tuple(kernel_argtypes), np.zeros(_STATE_SIZE, dtype=np.int64)))


def compile_launch_ahead(launch_sig: tuple) -> None:
    """`_launch` compiled (or loaded) for `launch_sig` before any job runs through it, with the workers' loop and the
    pool's timing of a pause, which compile when the first job starts the workers: a first run whose kernels were
    deferred started none, and a later process would compile them (0.3 s, and Numba's compiler started)."""
    compile_launch(launch_sig)
    serve_sig = (launch_sig[0], types.int64, types.int64, types.int64)
    if serve_sig not in _serve.overloads:
        _serve.compile(serve_sig)
    if (types.int64,) not in _pauses.overloads:
        _pauses.compile((types.int64,))


def compile_launch(launch_sig: tuple):
    """`_launch`'s compiled wrapper for `launch_sig` (compiled, or loaded from Numba's cache, on first use)."""
    if launch_sig not in _launch.overloads:
        _launch.compile(launch_sig)
    return _launch.overloads[launch_sig].entry_point


class WorkerPool:
    def __init__(self):
        self._state = np.zeros(_STATE_SIZE, dtype=np.int64)
        self._workers = 0
        self._sleepers = 0
        self._wakes = 0  # bumped to wake the sleeping workers
        self._cond = threading.Condition()
        self._busy = threading.Lock()
        self._grow_lock = threading.Lock()
        self._pins: dict[int, tuple[int, int]] = {}  # pinned worker k -> (native thread id, core)
        self._pinned_cores: frozenset[int] = frozenset()  # the cores in _pins, for the check before each job
        self._core_checked = 0.0  # when that check last ran (perf_counter)
        self._cores: list[int] = []  # the cores the workers may be pinned to
        self._pins_lock = threading.Lock()
        per_pause = self._seconds_per_pause()
        self._spin_polls = max(1, int(SPIN_SECONDS / per_pause))
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
        cores = affinity.allowed_cores()  # the mask this thread inherited: the cores the workers may use
        core = affinity.pin_this_thread_as_worker(k)
        if core is not None:
            with self._pins_lock:
                self._cores = cores
                self._pin(k, threading.get_native_id(), core)
        state = self._state
        seen = int(state[_CLAIM]) >> 32
        while True:
            seen = int(_serve(state, seen, self._spin_polls, self._yield_every))
            with self._cond:
                wakes = self._wakes
                self._sleepers += 1
                self._cond.wait_for(lambda w=wakes, s=seen: self._wakes != w or int(state[_CLAIM]) >> 32 != s)
                self._sleepers -= 1

    def _pin(self, k: int, tid: int, core: int) -> None:
        """Record worker k's thread and core (under _pins_lock), and the set of pinned cores the jobs check."""
        self._pins[k] = (tid, core)
        self._pinned_cores = frozenset(c for _, c in self._pins.values())

    def step_aside(self, caller: int) -> None:
        """Move a worker pinned to core `caller` (the core a run's caller is on) to a core with fewer workers
        (onnxjit.affinity: the caller's thread is never moved)."""
        if not self._pins or not self._pins_lock.acquire(blocking=False):
            return
        try:
            here = [k for k, (_, core) in self._pins.items() if core == caller]
            if not here:
                return
            target = affinity.core_to_step_aside_to(caller, [core for _, core in self._pins.values()], self._cores)
            if target is not None:
                tid = self._pins[here[0]][0]
                affinity.pin_thread(tid, target)
                self._pin(here[0], tid, target)
        except OSError:  # the thread is gone, or the core no longer allowed: leave the pins as they are
            pass
        finally:
            self._pins_lock.release()

    def run(self, kernel, args, n_units: int, threads: int, found=None) -> None:
        """kernel(*args, u0, u1) over [0, n_units) in `threads` shares; `found`: _launcher's answer for these
        arguments, where the caller has it (CallSite), else looked up here."""
        if found is None:
            found = _launcher(kernel, args, self._state)
        if found is None or not self.hold(threads):  # another thread's job holds the workers
            kernel(*args, 0, n_units)
            if found is None and isinstance(kernel, Dispatcher):
                _launcher(kernel, args, self._state)  # compiled now, with the kernel: the first run pays both
            return
        try:
            entry, launch = found
            failed = launch(self._state, args, entry, n_units, min(threads, n_units, MAX_SHARES), self._yield_every)
        finally:
            self.release()
        if failed:
            kernel(*args, 0, n_units)  # on this thread, through the dispatcher: raises the kernel's error
            raise RuntimeError(f"{kernel.__name__}: a share raised on a worker thread but not when run again on "
                               f"the caller's; its output may be incomplete")

    def hold(self, threads: int) -> bool:
        """Take the workers for this thread's jobs (False where another thread's job has them), readied for
        `threads` threads: started, woken, and none pinned to the caller's core. `release` gives them back."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            if self._pinned_cores:
                # a pinned worker on the caller's core would take turns with it (affinity.py): moved first. Here
                # and not at each run's start, so runs that never split work (batch 1) skip the 0.8 us check; at
                # most once a millisecond (a conv net's run makes 50 jobs)
                now = time.perf_counter()
                if now - self._core_checked > CORE_CHECK_SECONDS:
                    self._core_checked = now
                    cpu = affinity.current_cpu()
                    if cpu in self._pinned_cores:
                        self.step_aside(cpu)
            if self._workers < threads - 1:
                self._ensure_workers(threads - 1)
            if self._sleepers:
                with self._cond:
                    self._wakes += 1
                    self._cond.notify_all()
        except BaseException:
            self._busy.release()
            raise
        return True

    def release(self) -> None:
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


def thread_count() -> int:
    """numba.get_num_threads() (this thread's count) less its launch check, 1 us: the C getter exists once
    Numba's threads are launched."""
    get = getattr(numba_parallel, "_get_num_threads", None)
    return get() if get is not None else numba.get_num_threads()


class CallSite:
    """`run_units` for one call site of `kernel` whose arguments have the same types at every call (the caller
    guarantees it: a conv's prepared arguments, a fused kernel's runner). What run_units looks up per call from
    the arguments, the compiled entry point for their types (the dispatcher's type dispatch: 2.5 us for a conv's
    18 arguments) and _launcher's native entry (its fingerprints: 2-3 us), is looked up once, after the first
    call has compiled the kernel, and reused."""

    __slots__ = ("_found", "_serial", "kernel")

    def __init__(self, kernel):
        self.kernel = kernel
        self._serial = None  # the kernel's compiled entry for these argument types (or the kernel itself)
        self._found = None  # _launcher's (native entry, launch wrapper)

    def run(self, args, n_units, work) -> None:
        if n_units <= 1 or work < PARALLEL_GRAIN:  # threads_for's test, inline: one thread
            serial = self._serial
            if serial is not None:
                serial(*args, 0, n_units)
            else:
                self._run_serial(args, n_units)
            return
        threads = thread_count()
        if threads <= 1:
            self._run_serial(args, n_units)
            return
        pool = _the_pool()
        if self._found is None:  # not compiled for these types yet, or no native entry: looked up in the pool
            self._found = _launcher(self.kernel, args, pool._state)
        pool.run(self.kernel, args, n_units, threads, self._found)

    def _run_serial(self, args, n_units) -> None:
        serial = self._serial
        if serial is not None:
            serial(*args, 0, n_units)
            return
        self.kernel(*args, 0, n_units)
        self._serial = self.kernel
        if isinstance(self.kernel, Dispatcher):
            cres = self.kernel.overloads.get(tuple(self.kernel.typeof_pyval(a) for a in args) +
                                             (types.int64, types.int64))
            if cres is not None:  # else compiled for types the arguments convert to: the dispatcher converts them
                self._serial = cres.entry_point


class CallSites:
    """CallSites of one kernel by a key that fixes its arguments' types (say an input's dtype), for a call site
    whose types vary only with that key: `sites[key].run(args, n_units, work)`."""

    __slots__ = ("_sites", "kernel")

    def __init__(self, kernel):
        self.kernel = kernel
        self._sites: dict = {}

    def __getitem__(self, key) -> CallSite:
        site = self._sites.get(key)
        if site is None:
            site = self._sites[key] = CallSite(self.kernel)
        return site


def threads_for(n_units, work):
    """The threads a kernel call of `n_units` units and `work` element operations runs on: 1 where the work is
    small, else numba's thread count (which intra_op_num_threads sets). The size test comes first: reading the
    thread count costs a microsecond, much of a batch-1 run's small kernels."""
    if n_units <= 1 or work < PARALLEL_GRAIN:
        return 1
    return thread_count()


def run_units(kernel, args, n_units, work):
    """kernel(*args, start, end) over the units [0, n_units): on the calling thread alone when `threads_for`
    gives one thread, else split over the calling thread and the pool's workers."""
    threads = threads_for(n_units, work)
    if threads <= 1:
        kernel(*args, 0, n_units)
        return
    _the_pool().run(kernel, args, n_units, threads)
