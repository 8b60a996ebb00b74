"""Parallel compilation of a session's first run: helper processes fill the kernel caches while the run compiles.

Over an empty cache, a session's first run compiles every kernel it meets, one after another, on one core (light
resnet50: 13 kernel signatures and their launchers, 25-34 s on a 2-core Intel Emerald Rapids VM; Numba's compiler
holds a process-wide lock, so threads cannot share the work). Processes can. START_DELAY (0.3 s) after a first run
meets its first cache miss (unless it has ended: a few small kernels), the session starts `compile_processes` helpers
(default: one per other core the process may run on, at most MAX_PROCESSES). Each helper builds the same session and
runs it once on the same inputs in *recording* mode: every call of a cached Numba dispatcher (a kernel of
onnxjit/kernels, a thread-pool launcher) that has no compiled code for its argument types, and every generated
kernel the run binds, is noted and skipped, leaving the step's outputs as they were allocated; a call over scalars
alone is compiled and made (a helper computing a plan, as a conv's tile count: skipped, its None stopped the
recording of light resnet50 at its fifth node, and the helper compiled 6 of its signatures). It then compiles the
noted signatures from the last one back: helper i of n takes the (i+1)-th from the end and every n-th before it,
each marked by a file in the job's folder while it compiles. The session compiles from the first, as its run meets
them, and Numba looks in its disk cache before each compile (re-reading the index), so what a helper finished first
is loaded instead; a signature a helper is compiling now is waited for, not compiled a second time
(`wait_for_helper`). When the first run ends the session terminates the helpers: what they had not compiled, the
run has; but where the run deferred kernels (deferred_compile.py), which the helpers' recording runs note too (and
every launcher), the helpers go on to compile those after their share, and are stopped once the session's
background thread has them. light resnet50's first run over empty caches, 2-core Intel Xeon VM, one helper:
16.8-16.9 s before these two, 12.4-12.7 with the whole recording, 10.9-11.2 with the wait too.

Nothing a helper does reaches a result: it only writes cache entries, through the same caches and keys as the
session (Numba writes each file to a temporary name and renames it, so a helper killed mid-write leaves no partial
entry), and a recording run's outputs are dropped. A helper that fails (a step that cannot run on skipped
outputs, a signature that does not compile) stops helping or skips that signature; the session compiles what it
needs either way. Helpers run at a lower priority (nice 10) and exit when the session's process is gone.

Settings: session config entry ``session.onnxjit.compile_processes`` or the environment variable
``ONNXJIT_COMPILE_PROCESSES`` (``0``: no helpers). Helpers start only for sessions whose providers are all
on the host (CPU, fallback), whose inputs pickle within MAX_FEEDS_BYTES and whose model serializes; by default
none for a session held to one intra-op thread (its process is likely one of several sharing the cores, as Dask
workers are) and none in a frozen (bundled) application.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from onnxjit import config
from onnxjit.errors import InvalidArgument

log = logging.getLogger("onnxjit")

PROCESSES_KEY = "session.onnxjit.compile_processes"
PROCESSES_ENV = "ONNXJIT_COMPILE_PROCESSES"
MAX_PROCESSES = 4  # each helper holds the model and recompiles nothing the others do; more rarely pays
MAX_FEEDS_BYTES = 256 << 20  # inputs are handed to the helpers through a file
NICE = 10
START_DELAY = 0.3  # seconds a first run compiles before its helpers start (1.0: light resnet50 0.9 s slower)
HELPER_MAIN = ("import sys; from onnxjit.cache.parallel_compile import helper_main; "
               "helper_main(*sys.argv[1:])")
RECORDING_SECONDS = 10.0  # a recording run taking longer is stopped (its noted kernels are compiled)
COMPILING = "compiling"  # in a job's folder: a file per kernel signature a helper is compiling now
WAIT_POLL_SECONDS = 0.02
WAIT_LIMIT_SECONDS = 600.0  # a helper's compile taking longer than this is compiled by the session too

_armed = threading.local()  # .first_run: the FirstRun whose run is on this thread, if any
_recording = threading.local()  # .recorder: the _Recorder of a helper's recording run on this thread, if any


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_count(entries: dict, threads: int = 0) -> int:
    """Helpers a session starts at its first run's first cache miss: its config `entries`' one, else the environment
    variable, else one per other usable core (at most MAX_PROCESSES), none for a session limited to one intra-op
    thread (`threads`; 0: all cores), whose process is likely one of several sharing the cores (Dask workers)."""
    raw = entries.get(PROCESSES_KEY)
    where = f"session config entry {PROCESSES_KEY!r}"
    if raw is None:
        raw, where = os.environ.get(PROCESSES_ENV, "").strip(), f"environment variable {PROCESSES_ENV}"
    if not raw:
        if getattr(sys, "frozen", False) or threads == 1:  # frozen: sys.executable is the app, not a Python
            return 0
        return max(0, min(MAX_PROCESSES, usable_cores() - 1))
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if count < 0:
        raise InvalidArgument(f"{where} must be a number of processes (0 or more), got {raw!r}")
    return count


def compiling_marker(py_func, argtypes) -> str:
    """The file name a helper marks its compile of `py_func` for `argtypes` with (the same in every process)."""
    from numba.core import sigutils, typing
    # a tuple of argument types, or a Signature (a kernel compiled for explicit signatures: the fused ones)
    args = sigutils.normalize_signature(argtypes if isinstance(argtypes, typing.Signature) else tuple(argtypes))[0]
    key = f"{py_func.__module__}.{py_func.__qualname__}{tuple(args)!r}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def wait_for_helper(py_func, argtypes) -> bool:
    """At a cache miss on the thread of a session's first run: while a helper is compiling this signature, wait
    for it instead of compiling it too (the two would otherwise both compile the kernel where the run's order and
    the helper's meet, up to the largest kernel's time); True when there was one to wait for (the cache then
    holds its code, unless the helper failed)."""
    first_run = getattr(_armed, "first_run", None)
    return first_run is not None and first_run.wait_for_marker(compiling_marker(py_func, argtypes))


def armed_first_run() -> FirstRun | None:
    """The FirstRun whose run is on this thread, if any."""
    return getattr(_armed, "first_run", None)


def recording() -> bool:
    """Whether a helper's recording run is on this thread."""
    return getattr(_recording, "recorder", None) is not None


def note_deferred(kernel, argtypes: tuple, job: Callable[[], Any]) -> None:
    """In a helper's recording run: `kernel` for `argtypes`, deferred by the run (deferred_compile), to compile
    (`job`) after the helper's share of the run's kernels."""
    recorder = _recording.recorder
    recorder._note(("deferred", kernel, argtypes), job, compiling_marker(kernel.py_func, argtypes), recorder.deferred)


def cache_missed() -> None:
    """Called by onnxjit's Numba caches when a lookup misses (a compile follows): starts the helpers of the first
    run on this thread, if one is armed and they have not started."""
    first_run = getattr(_armed, "first_run", None)
    if first_run is not None:
        first_run.start()


class FirstRun:
    """A session's first run, with helpers to start once it has compiled for START_DELAY seconds. `job`: (the
    model as the session was given it: a path, bytes or a ModelProto; the session's settings: optimization level,
    intra-op threads, config entries, [(provider, options)]), what a helper needs to build the same session."""

    def __init__(self, count: int, job: tuple[Any, dict], delay: float | None = None):
        self.count = count
        self.delay = START_DELAY if delay is None else delay
        self._job: tuple[Any, dict] | None = job
        self._feeds: Any = None
        self._lock = threading.Lock()  # start's timer thread against stop
        self._started = self._stopped = self._run_over = False
        self._timer: threading.Timer | None = None
        self._procs: list[subprocess.Popen] = []
        self._dir: str | None = None
        self.deferred: dict = {}  # (kernel, argument types) -> (job, [on_ready]) the run deferred (deferred_compile)

    @contextlib.contextmanager
    def armed(self, feeds: dict):
        """Around the first run on this thread: helpers start at its first miss and stop when it ends."""
        self._feeds = feeds
        _armed.first_run = self
        try:
            yield
        finally:
            _armed.first_run = None
            if self.deferred:  # compiled in the background, the helpers helping; stopped after
                from onnxjit.cache import deferred_compile
                with self._lock:
                    self._run_over = True
                    if self._timer is not None:
                        self._timer.cancel()
                    # a run whose kernels all stood in can end before its helpers' delay, or meet no miss at all
                    # (convnext_tiny's first run: 0.3 s), leaving its deferred kernels to one thread (20 s)
                    late = not self._procs and not self._stopped and len(self.deferred) > 1
                if late:
                    self._spawn(after_run=True)
                deferred_compile.compile_in_background(self)
            else:
                self.stop()

    def start(self) -> None:
        """At a cache miss: the helpers start `delay` seconds later, unless the run has ended by then (a model
        whose few kernels compile in a moment is not worth a helper's start, 1.5-2 s of another core)."""
        with self._lock:
            if self._started or self._stopped:
                return
            self._started = True
            self._timer = threading.Timer(self.delay, self._spawn)
            self._timer.daemon = True
            self._timer.start()

    def _spawn(self, after_run: bool = False) -> None:
        """Start the helpers: `delay` after the run's first miss while it goes on, or at its end where it deferred
        kernels and started none (`after_run`)."""
        with self._lock:
            if self._stopped or (self._run_over and not after_run) or self._procs:
                return
            try:
                self._write_job()
            except Exception as e:  # noqa: BLE001 - no helpers is always a correct answer
                log.debug("onnxjit: no compile helpers: %s: %s", type(e).__name__, e)
                return
            if self._dir is None:
                return
            # the helpers must import this onnxjit (its kernels' cache entries are keyed by their files' place):
            # they start in the folder that holds it, with relative cache folders made absolute first
            env = dict(os.environ, **{PROCESSES_ENV: "0"})
            for name in ("ONNXJIT_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
                if env.get(name):
                    env[name] = os.path.abspath(os.path.expanduser(env[name]))
            package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
            for i in range(self.count):
                try:
                    self._procs.append(subprocess.Popen(
                        [sys.executable, "-c", HELPER_MAIN, self._dir, str(i), str(self.count)], env=env,
                        cwd=package_root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=None if config.DEBUG else subprocess.DEVNULL))  # ONNXJIT_DEBUG: their errors show
                except OSError as e:
                    log.debug("onnxjit: compile helper %d did not start: %s", i, e)

    def helpers_alive(self) -> bool:
        return any(proc.poll() is None for proc in self._procs)

    def wait_for_marker(self, marker: str) -> bool:
        """While a helper is compiling the signature `marker` names (its marker file exists), wait for it; True
        when there was one to wait for."""
        directory = self._dir
        if directory is None:
            return False
        path = os.path.join(directory, COMPILING, marker)
        if not os.path.exists(path):
            return False
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while os.path.exists(path) and time.monotonic() < deadline and self.helpers_alive():
            time.sleep(WAIT_POLL_SECONDS)
        return True

    def claim(self, marker: str) -> str | None:
        """Claim the compile of the signature `marker` names against the helpers: the marker file made here (remove
        it when done), None where a helper holds it, "" where there is no job folder (no helpers to share with)."""
        directory = self._dir
        return _mark(directory, marker, exclusive=True) if directory is not None else ""

    def _write_job(self) -> None:
        """The job's files in a new temporary folder (self._dir), unless the inputs are too large to hand over."""
        (model, settings), self._job = self._job, None
        feeds = self._feeds
        if _nbytes(feeds) > MAX_FEEDS_BYTES:
            return
        self._dir = tempfile.mkdtemp(prefix="onnxjit-compile-")
        if isinstance(model, (str, os.PathLike)):
            model = os.path.abspath(model)  # its external data, if any, stays beside it
        else:
            data = model.SerializeToString() if hasattr(model, "SerializeToString") else bytes(model)
            model = os.path.join(self._dir, "model.onnx")
            with open(model, "wb") as f:
                f.write(data)
        with open(os.path.join(self._dir, "job.pkl"), "wb") as f:
            pickle.dump({"model": model, "settings": settings, "feeds": feeds, "parent": os.getpid()}, f,
                        protocol=5)

    def stop(self) -> None:
        """Cancels a pending start, terminates the helpers and removes the job's files."""
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            procs, self._procs = self._procs, []
            directory, self._dir = self._dir, None
            self._job = self._feeds = None
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _nbytes(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


# --- the helper process ---------------------------------------------------------------------------------------


class _Recorder:
    """While active: a call (on this thread) of a cached Numba dispatcher without code for its argument types, a
    thread-pool launch without a launcher for them, and a generated kernel's load, are noted (in order, once each,
    as `jobs` that compile or load them) and skipped."""

    def __init__(self):
        self.jobs: list[tuple[str | None, Callable[[], Any]]] = []  # (compiling_marker or None, job)
        self.deferred: list[tuple[str, Callable[[], Any]]] = []  # the kernels the run deferred (note_deferred)
        self._seen: set = set()

    def _note(self, key, job, marker=None, into: list | None = None) -> None:
        """`job` (with its marker) appended to `jobs`, or to `into`, unless `key` was noted before."""
        if key not in self._seen:
            self._seen.add(key)
            (self.jobs if into is None else into).append((marker, job))

    @contextlib.contextmanager
    def active(self):
        from numba.core import caching
        from numba.core.dispatcher import Dispatcher

        from onnxjit import worker_pool
        from onnxjit.cache.store import KernelStore

        compile_for_args, launcher, store_load = Dispatcher._compile_for_args, worker_pool._launcher, KernelStore.load

        def cached(dispatcher) -> bool:
            return not isinstance(getattr(dispatcher, "_cache", None), (type(None), caching.NullCache))

        recording_thread = threading.get_ident()  # the pool's worker threads compile their loop as usual

        def skip_compile(dispatcher, *args, **kws):
            if kws or not cached(dispatcher) or threading.get_ident() != recording_thread \
                    or not any(isinstance(a, np.ndarray) for a in args):
                # (a call over scalars alone is a small helper whose result the run's Python uses, as a conv's
                # tile count: compiled and called, else the recording run stopped there)
                return compile_for_args(dispatcher, *args, **kws)
            argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
            self._note((dispatcher, argtypes), lambda: dispatcher.compile(argtypes),
                       compiling_marker(dispatcher.py_func, argtypes))
            return _skipped  # Numba calls what this returns with the arguments

        def note_launcher(kernel, args, state):
            found = launcher(kernel, args, state)
            if found is None and isinstance(kernel, Dispatcher) and cached(kernel):
                # deferred, as the session's first run defers it (worker_pool._launcher): after the run's kernels
                sig = worker_pool.launch_signature(tuple(kernel.typeof_pyval(a) for a in args), state)
                note_deferred(worker_pool._launch, sig, lambda: worker_pool.compile_launch_ahead(sig))
            return found

        def note_generated(store, source):  # a generated kernel the run binds: compiled (or loaded) at import
            self._note(("generated", source), lambda: store_load(store, source))
            return _SKIPPED_LOAD

        Dispatcher._compile_for_args, worker_pool._launcher, KernelStore.load = \
            skip_compile, note_launcher, note_generated
        _recording.recorder = self
        try:
            yield self
        finally:
            _recording.recorder = None
            Dispatcher._compile_for_args, worker_pool._launcher, KernelStore.load = \
                compile_for_args, launcher, store_load


class _OutOfTime(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raises _OutOfTime in this (the main) thread after `seconds`, where signals allow: a recording run's Loop
    whose condition a skipped kernel should have computed may never end."""
    import signal
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def out_of_time(signum, frame):
        raise _OutOfTime()

    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _OutOfTime:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _report() -> None:
    """The exception being handled, on a helper's stderr where ONNXJIT_DEBUG lets it through (FirstRun.start)."""
    if config.DEBUG:
        import traceback
        traceback.print_exc()


def _skipped(*args, **kws) -> None:
    return None


# what KernelStore.load returns while recording: a kernel that does nothing (see cache/store.py's LoadResult)
_SKIPPED_LOAD = SimpleNamespace(kernel=_skipped, seconds=0.0, compiled=0, loaded=0)


def helper_main(directory: str, index: str, count: str) -> None:
    """A helper process (started as HELPER_MAIN): the job in `directory`, its share `index` of `count`."""
    index, count = int(index), int(count)
    try:
        os.nice(NICE)
    except (AttributeError, OSError):
        pass
    with open(os.path.join(directory, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    parent, settings = job["parent"], job["settings"]

    import onnxjit
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel(settings["level"])
    so.intra_op_num_threads = settings["threads"]
    for key, value in settings["config"].items():
        so.add_session_config_entry(key, value)
    so.add_session_config_entry(PROCESSES_KEY, "0")
    providers = settings["providers"]
    sess = onnxjit.InferenceSession(job["model"], so, providers=[name for name, _ in providers],
                                    provider_options=[options for _, options in providers])
    recorder = _Recorder()
    with recorder.active(), _time_limit(RECORDING_SECONDS):
        try:
            sess.run(None, job["feeds"])
        except Exception:  # noqa: BLE001 - a step that cannot run on skipped outputs: help with what was noted
            _report()
    mine = recorder.jobs[::-1][index::count]
    if config.DEBUG:
        print(f"onnxjit compile helper {index} of {count}: {len(recorder.jobs)} kernel signatures noted, "
              f"compiling {len(mine)}", file=sys.stderr, flush=True)
    # the run's kernels marked as they compile (the session's run waits for one instead of compiling it too); then
    # the kernels the run deferred, from the front (the session's own thread takes them from the back), each claimed
    # first, and one the session (or another helper) has claimed left to it
    work = [(marker, job, False) for marker, job in mine] + \
        [(marker, job, True) for marker, job in recorder.deferred[index::count]]
    for marker, compile_job, deferred in work:
        if os.getppid() != parent:  # the session's process is gone
            if config.DEBUG:
                print(f"onnxjit compile helper {index}: parent {parent} gone ({os.getppid()})", file=sys.stderr)
            return
        marked = _mark(directory, marker, exclusive=deferred)
        if deferred and not marked:
            continue
        try:
            compile_job()
        except Exception:  # noqa: BLE001 - the session compiles (and reports) it itself
            _report()
        finally:
            if marked:
                with contextlib.suppress(OSError):
                    os.remove(marked)


def _mark(directory: str, marker: str | None, exclusive: bool = False) -> str | None:
    """The marker file of a compile starting now (see wait_for_helper), or None where there is none; `exclusive`:
    made only if no process holds it (O_EXCL), None where one does."""
    if not marker:
        return None
    try:
        os.makedirs(os.path.join(directory, COMPILING), exist_ok=True)
        path = os.path.join(directory, COMPILING, marker)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | (os.O_EXCL if exclusive else os.O_TRUNC)))
        return path
    except OSError:
        return None

