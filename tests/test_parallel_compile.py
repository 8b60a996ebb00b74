"""Compile helpers of a session's first run (onnxjit.cache.parallel_compile): how many start, what a recording run
notes and skips, a helper filling the caches a new process then runs from, and a session starting and stopping
its helpers."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
from onnxjit.cache import parallel_compile
from onnxjit.cache.jit import njit
from onnxjit.errors import InvalidArgument

from conftest import assert_all_same, make_model, ort_run, tensor


@njit(cache=True, nogil=True)
def _add_one(x, out):
    for i in range(x.size):
        out[i] = x[i] + 1


@njit(cache=True, nogil=True)
def _times_two(x, out):
    for i in range(x.size):
        out[i] = x[i] * 2


@njit(cache=True, nogil=True)
def _ceil_div(a, b):
    return -(-a // b)


def _convnet(rng):
    """Conv + Relu + MaxPool + Softmax over a small image of a symbolic batch, and a Tanh * Sigmoid chain:
    hand-written kernels, a thread-pool launch, and generated kernels bound when the run meets their shapes."""
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Flatten", ["p"], ["f"]), h.make_node("Softmax", ["f"], ["s"], axis=-1),
             h.make_node("Tanh", ["s"], ["t"]), h.make_node("Sigmoid", ["s"], ["g"]),
             h.make_node("Mul", ["t", "g"], ["y"])]
    model = make_model(nodes, [tensor("x", T.FLOAT, ["N", 3, 16, 16])], [tensor("y", T.FLOAT, ["N", 512])],
                       initializers=[nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
                                     nh.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    return model, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def test_process_count(monkeypatch):
    monkeypatch.delenv(parallel_compile.PROCESSES_ENV, raising=False)
    default = parallel_compile.process_count({})
    assert default == max(0, min(parallel_compile.MAX_PROCESSES, parallel_compile.usable_cores() - 1))
    assert parallel_compile.process_count({}, threads=1) == 0  # a session held to one core
    monkeypatch.setenv(parallel_compile.PROCESSES_ENV, "3")
    assert parallel_compile.process_count({}) == 3
    assert parallel_compile.process_count({parallel_compile.PROCESSES_KEY: "0"}) == 0  # the session's entry wins
    with pytest.raises(InvalidArgument, match="session.onnxjit.compile_processes.*got 'two'"):
        parallel_compile.process_count({parallel_compile.PROCESSES_KEY: "two"})
    monkeypatch.setenv(parallel_compile.PROCESSES_ENV, "-1")
    with pytest.raises(InvalidArgument, match="ONNXJIT_COMPILE_PROCESSES"):
        parallel_compile.process_count({})
    so = onnxjit.SessionOptions()
    so.add_session_config_entry(parallel_compile.PROCESSES_KEY, "many")
    model, _ = _convnet(np.random.default_rng(0))
    with pytest.raises(InvalidArgument, match="compile_processes"):
        onnxjit.InferenceSession(model.SerializeToString(), so)


def test_recording_notes_and_skips_a_call_without_code():
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, dtype=np.float32)
    fresh = njit(cache=True, nogil=True)(_add_one.py_func)  # a dispatcher with nothing compiled in this process
    recorder = parallel_compile._Recorder()
    with recorder.active():
        fresh(x, out)
        fresh(x, out)  # noted once
        fresh(x.astype(np.float64), out)
        # a call over scalars alone (a plan-time helper, as a conv's tile count) is compiled and called: its
        # result decides what the run does next
        assert njit(cache=True, nogil=True)(_ceil_div.py_func)(7, 2) == 4
    assert len(recorder.jobs) == 2 and not fresh.overloads
    np.testing.assert_array_equal(out, 0)  # skipped
    for _, job in recorder.jobs:
        job()
    assert len(fresh.overloads) == 2
    fresh(x, out)
    np.testing.assert_array_equal(out, x + 1)


def test_recording_notes_and_skips_a_generated_kernel(tmp_path):
    from onnxjit.cache.store import KernelStore
    source = textwrap.dedent("""\
        import numba
        from onnxjit.cache.jit import njit

        @njit("void(float32[::1], float32[::1], int64, int64)", cache=CACHE)
        def kernel(x, out, u0, u1):
            for i in range(u0, u1):
                out[i] = x[i] * 3
        """)
    store = KernelStore(tmp_path)
    recorder = parallel_compile._Recorder()
    with recorder.active():
        skipped = store.load(source)
        skipped.kernel(np.ones(2, np.float32), np.zeros(2, np.float32), 0, 2)  # does nothing
    assert skipped.compiled == 0 and len(recorder.jobs) == 1 and not store.entries()
    loaded = recorder.jobs[0][1]()
    assert loaded.compiled == 1 and len(store.entries()) == 1
    out = np.zeros(2, np.float32)
    loaded.kernel(np.ones(2, np.float32), out, 0, 2)
    np.testing.assert_array_equal(out, 3)


HELPER_COMPILING = textwrap.dedent("""\
    import os, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_parallel_compile import _times_two
    time.sleep(1.0)  # the session's run meets the signature first, and waits
    _times_two(np.zeros(4, np.float32), np.zeros(4, np.float32))  # compiled into the cache
    os.remove(sys.argv[2])
    """)


def test_a_first_run_waits_for_a_helper_compiling_the_signature_it_misses(tmp_path, monkeypatch):
    """Where the session's run meets a kernel signature a helper is compiling (its marker file is in the job's
    folder), it waits and loads the helper's code instead of compiling it too."""
    import numba
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    run_side = njit(cache=True, nogil=True)(_times_two.py_func)  # nothing compiled, an empty cache
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    argtypes = tuple(run_side.typeof_pyval(a) for a in (x, out))
    marker = tmp_path / "job" / parallel_compile.COMPILING / parallel_compile.compiling_marker(run_side.py_func,
                                                                                                argtypes)
    marker.parent.mkdir(parents=True)
    marker.touch()
    helper = subprocess.Popen([sys.executable, "-c", HELPER_COMPILING, os.path.dirname(os.path.abspath(__file__)),
                               str(marker)], env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba")))
    first_run = parallel_compile.FirstRun(1, (None, {}))
    first_run._dir, first_run._procs = str(tmp_path / "job"), [helper]
    parallel_compile._armed.first_run = first_run
    try:
        run_side(x, out)
    finally:
        parallel_compile._armed.first_run = None
        helper.wait(timeout=300)
    assert helper.returncode == 0 and not marker.exists()
    np.testing.assert_array_equal(out, x * 2)
    stats = run_side.stats
    assert sum(stats.cache_hits.values()) == 1 and sum(stats.cache_misses.values()) == 0, stats


def test_a_kernel_of_explicit_signatures_missing_the_cache_in_a_first_run_compiles_into_it(tmp_path, monkeypatch):
    """A miss of a kernel compiled for explicit signatures (the fused kernels) while a first run is armed looks
    for a helper's marker of those argument types, and then compiles into the cache. (Its Signature was once
    taken for a tuple of types: TypeError, and the generated kernel ran uncached, compiled anew in every
    process: an IsolationForest's second process took 10 s instead of 0.8.)"""
    import numba
    from numba import types
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    sig = types.void(types.float32[::1], types.float32[::1])
    assert parallel_compile.compiling_marker(_times_two.py_func, sig) == \
        parallel_compile.compiling_marker(_times_two.py_func, sig.args)
    first_run = parallel_compile.FirstRun(1, (None, {}))
    first_run._dir, first_run._stopped = str(tmp_path / "job"), True  # a first run whose helpers are done
    parallel_compile._armed.first_run = first_run
    try:
        kernel = njit(sig, cache=True, nogil=True)(_times_two.py_func)
    finally:
        parallel_compile._armed.first_run = None
    x, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x * 2)
    assert sum(kernel.stats.cache_misses.values()) == 1
    again = njit(sig, cache=True, nogil=True)(_times_two.py_func)  # another process's dispatcher, as it were
    assert sum(again.stats.cache_hits.values()) == 1 and sum(again.stats.cache_misses.values()) == 0


def _job_dir(tmp_path, model, feeds, settings) -> str:
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    job = tmp_path / "job"
    job.mkdir()
    with open(job / "job.pkl", "wb") as f:
        pickle.dump({"model": str(path), "settings": settings, "feeds": feeds, "parent": os.getpid()}, f)
    return str(job)


SETTINGS = {"level": 99, "threads": 2, "config": {}, "providers": [("CPUExecutionProvider", {})]}

COUNT_COMPILES = textwrap.dedent("""\
    import json, pickle, sys
    from numba.core import event
    import onnxjit
    compiled = []
    class Count(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)
        def on_end(self, ev):
            pass
    event.register("numba:compile", Count())
    job = pickle.load(open(sys.argv[1], "rb"))
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(job["model"], so, providers=["CPUExecutionProvider"])
    outputs = sess.run(None, job["feeds"])
    pickle.dump(outputs, open(sys.argv[2], "wb"))
    print(json.dumps(compiled))
    """)


def test_a_helper_fills_the_caches_a_new_process_runs_from(tmp_path):
    model, feeds = _convnet(np.random.default_rng(1))
    job = _job_dir(tmp_path, model, feeds, SETTINGS)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), ONNXJIT_CACHE_DIR=str(tmp_path / "generated"),
               ONNXJIT_COMPILE_PROCESSES="0")
    helper = subprocess.run([sys.executable, "-c", parallel_compile.HELPER_MAIN, job, "0", "1"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert helper.returncode == 0, helper.stderr
    assert os.listdir(tmp_path / "numba") and os.listdir(tmp_path / "generated")  # it filled both kernel caches

    child = tmp_path / "child.py"
    child.write_text(COUNT_COMPILES)
    run = subprocess.run([sys.executable, str(child), os.path.join(job, "job.pkl"), str(tmp_path / "out.pkl")],
                         env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.abspath(__file__)))
    assert run.returncode == 0, run.stderr
    compiled = json.loads(run.stdout.strip().splitlines()[-1])
    # the worker threads' loop starts only in a process whose kernels run on two threads: the helper's do not
    assert set(compiled) <= {"_serve"}, compiled
    with open(tmp_path / "out.pkl", "rb") as f:
        assert_all_same(pickle.load(f), ort_run(model, feeds))


def _started(first_run, seconds=60):
    """first_run's helper processes, once its start timer has spawned them."""
    deadline = time.monotonic() + seconds
    while not first_run._procs and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(first_run._procs)


def test_a_first_run_starts_its_helpers_after_a_miss_and_stops_them_at_its_end(tmp_path):
    model, feeds = _convnet(np.random.default_rng(2))
    first_run = parallel_compile.FirstRun(1, (model.SerializeToString(), SETTINGS), delay=0)
    parallel_compile.cache_missed()  # not armed: nothing starts
    time.sleep(0.1)
    assert first_run._procs == []
    with first_run.armed(feeds):
        parallel_compile.cache_missed()
        parallel_compile.cache_missed()  # started once
        (proc,) = _started(first_run)
        directory = first_run._dir
        assert os.path.exists(os.path.join(directory, "model.onnx"))
        assert proc.wait(timeout=600) == 0  # its kernels are compiled in this process's caches: it ends soon
    assert first_run._procs == [] and not os.path.exists(directory)

    slow = parallel_compile.FirstRun(1, (model.SerializeToString(), SETTINGS), delay=0)
    with slow.armed(feeds):
        parallel_compile.cache_missed()
        (proc,) = _started(slow)
    assert proc.poll() is not None  # terminated with the run


def test_a_first_run_that_ends_within_the_delay_starts_no_helper():
    model, feeds = _convnet(np.random.default_rng(4))
    first_run = parallel_compile.FirstRun(1, (model.SerializeToString(), SETTINGS), delay=0.5)
    with first_run.armed(feeds):
        parallel_compile.cache_missed()
    time.sleep(1.0)
    assert first_run._procs == [] and first_run._dir is None and first_run._job is None


def test_a_session_arms_its_first_run_only(tmp_path):
    model, feeds = _convnet(np.random.default_rng(3))
    so = onnxjit.SessionOptions()
    so.add_session_config_entry(parallel_compile.PROCESSES_KEY, "1")
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    first_run = sess._first_run
    assert isinstance(first_run, parallel_compile.FirstRun) and first_run.count == 1
    assert_all_same(sess.run(None, feeds), ort_run(model, feeds))
    assert sess._first_run is None and first_run._procs == [] and first_run._job is None
    assert_all_same(sess.run(None, feeds), ort_run(model, feeds))
    assert onnxjit.InferenceSession(model.SerializeToString())._first_run is None  # the suite's environment: 0


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGALRM"), reason="the time limit needs SIGALRM (Unix)")
def test_a_recording_run_that_never_ends_is_stopped():
    import time
    t0 = time.perf_counter()
    with parallel_compile._time_limit(0.2):
        while time.perf_counter() - t0 < 30:
            pass
    assert time.perf_counter() - t0 < 5
