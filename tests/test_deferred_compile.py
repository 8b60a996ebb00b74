"""Kernels a session's first run defers (onnxjit.cache.deferred_compile): the first run's convs, pools, softmax and
products with a constant B on numpy (onnxjit.ops.stand_ins) where their kernels have no code, compiled after it in
the background, then used; native segments waiting for them; a helper's recording run noting them; claims between a
session and its helpers."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
from onnxjit.cache import deferred_compile, parallel_compile
from onnxjit.kernels import conv as kconv
from onnxjit.kernels import linalg as klinalg
from onnxjit.kernels import normalization as knorm
from onnxjit.kernels import pool as kpool
from onnxjit import worker_pool
from onnxjit.ops import linalg
from onnxjit.worker_pool import _DEFERRED, CallSite

from conftest import make_model, ort_run, tensor


def _close(got, want):
    """Within the Winograd kernel's rounding (its transforms add a few float32 steps)."""
    (g,), (w,) = got, want
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def _convs(rng):
    """A 3->8 3x3 conv (conv_rows where a vector's lanes fit the row), a 1x1 8->16 (conv_packed), a 16->16 3x3 over
    24x64 (Winograd), a depthwise 3x3 and a 16->32 3x3 of stride 2 (conv_broadcast), with random weights."""
    def conv(name, x, m, c, k, group=1, **attrs):
        shape = (m, c // group, k, k)
        w = nh.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), f"{name}_w")
        b = nh.from_array(rng.standard_normal(m).astype(np.float32) * 0.1, f"{name}_b")
        return h.make_node("Conv", [x, w.name, b.name], [name], group=group, **attrs), [w, b]
    pad = dict(pads=[1, 1, 1, 1])
    layers = [conv("c1", "x", 8, 3, 3, **pad), conv("c2", "r1", 16, 8, 1), conv("c3", "c2", 16, 16, 3, **pad),
              conv("c4", "r3", 16, 16, 3, group=16, **pad), conv("y", "c4", 32, 16, 3, strides=[2, 2], **pad)]
    nodes = [layers[0][0], h.make_node("Relu", ["c1"], ["r1"]), layers[1][0], layers[2][0],
             h.make_node("Relu", ["c3"], ["r3"]), layers[3][0], layers[4][0]]
    model = make_model(nodes, [tensor("x", T.FLOAT, [1, 3, 24, 64])], [tensor("y", T.FLOAT, [1, 32, 12, 32])],
                       initializers=[i for _, inits in layers for i in inits])
    return model, {"x": rng.standard_normal((1, 3, 24, 64)).astype(np.float32)}


def _kernels_run(monkeypatch) -> list:
    """The kernels the convs' call sites run from now on (appended as they run)."""
    ran, call = [], CallSite.run
    monkeypatch.setattr(CallSite, "run", lambda site, *a: (ran.append(site.kernel), call(site, *a))[1])
    return ran


def _armed_session(monkeypatch, model):
    """(a session of `model` whose first run is armed as over empty caches, with no helper process; the kernels it
    defers, appended as they are)."""
    monkeypatch.setattr(parallel_compile, "START_DELAY", 1e6)
    monkeypatch.setattr(deferred_compile, "available", lambda kernel, types: False)
    deferred, defer = [], deferred_compile.defer
    monkeypatch.setattr(deferred_compile, "defer", lambda k, *a, **kw: (deferred.append(k), defer(k, *a, **kw)))
    so = onnxjit.SessionOptions()
    so.add_session_config_entry(parallel_compile.PROCESSES_KEY, "1")
    return onnxjit.InferenceSession(model.SerializeToString(), so), deferred


def test_a_first_run_runs_deferred_convs_on_numpy_then_their_kernels(monkeypatch):
    model, feeds = _convs(np.random.default_rng(0))
    want = ort_run(model, feeds)
    ran = _kernels_run(monkeypatch)
    onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)  # no first run armed: no deferral
    own = set(ran)
    assert {kconv.conv_winograd_packed, kconv.conv_broadcast, kconv.conv_packed} <= own

    sess, deferred = _armed_session(monkeypatch, model)
    ran.clear()
    _close(sess.run(None, feeds), want)
    assert set(deferred) == own  # (each compiled with its launcher)
    assert not ran  # numpy's convs stood in
    sess.wait_for_compilation()
    assert not deferred_compile.pending() and _DEFERRED not in worker_pool._launchers.values()

    ran.clear()
    _close(sess.run(None, feeds), want)  # each conv prepared again, on its own kernel
    assert set(ran) == own
    for _ in range(2):  # the native segments, built from the specialized kernels
        sess.wait_for_compilation()
        _close(sess.run(None, feeds), want)
    assert len([k for k in deferred if k is not worker_pool._launch]) == len(own)  # later: none


def test_pools_and_softmax_stand_in_until_their_kernels_are_compiled(monkeypatch):
    """Ops with no prepared call (pools, softmax) ask `stands_in` in each run: numpy's in the first run and in the
    runs after it until the background thread has compiled the kernels, then the kernels."""
    rng = np.random.default_rng(5)
    nodes = [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], count_include_pad=1, pads=[0, 0, 1, 1]),
             h.make_node("GlobalAveragePool", ["a"], ["g"]), h.make_node("Flatten", ["g"], ["f"]),
             h.make_node("Softmax", ["f"], ["y"])]
    model = make_model(nodes, [tensor("x", T.FLOAT, [2, 6, 9, 9])], [tensor("y", T.FLOAT, [2, 6])])
    feeds = {"x": rng.standard_normal((2, 6, 9, 9)).astype(np.float32)}
    want = ort_run(model, feeds)
    started = []
    monkeypatch.setattr(deferred_compile, "compile_in_background", started.append)  # held back
    sess, deferred = _armed_session(monkeypatch, model)
    kernels = {kpool.pool_blocked, kpool.global_avg, knorm.softmax_rows}  # (small planes: the blocked pool)
    ran = _kernels_run(monkeypatch)
    try:
        for _ in range(2):  # the first run, and one while the kernels are not compiled yet
            np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-5, atol=1e-6)
        assert set(deferred) == kernels and len(started) == 1 and not ran
        assert deferred_compile._waiting and deferred_compile.pending()
    finally:  # (a deferral left pending would hold every later wait)
        monkeypatch.undo()
        for first_run in started:
            deferred_compile.compile_in_background(first_run)
        sess.wait_for_compilation()
    assert not deferred_compile._waiting
    ran = _kernels_run(monkeypatch)
    np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-5, atol=1e-6)
    assert {kpool.pool_blocked, kpool.global_avg} <= set(ran)


def _products(rng):
    """A MatMul of a 3-D input with a constant B followed by a Relu, a batch-1 Gemm (transB, alpha, beta and C: one
    dot product per output) and a 6-row Gemm with C followed by a Relu (the packed GEMM, the Relu its epilogue)."""
    def const(name, *shape):
        return nh.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)
    inits = [const("w1", 16, 24), const("w2", 32, 16), const("c2", 32), const("w3", 16, 40), const("c3", 40)]
    nodes = [h.make_node("MatMul", ["x1", "w1"], ["m1"]), h.make_node("Relu", ["m1"], ["y1"]),
             h.make_node("Gemm", ["x2", "w2", "c2"], ["y2"], transB=1, alpha=0.5, beta=2.0),
             h.make_node("Gemm", ["x3", "w3", "c3"], ["m3"]), h.make_node("Relu", ["m3"], ["y3"])]
    shapes = {"x1": [2, 8, 16], "x2": [1, 16], "x3": [6, 16]}
    model = make_model(nodes, [tensor(n, T.FLOAT, s) for n, s in shapes.items()],
                       [tensor("y1", T.FLOAT, [2, 8, 24]), tensor("y2", T.FLOAT, [1, 32]),
                        tensor("y3", T.FLOAT, [6, 40])], initializers=inits)
    return model, {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def test_a_first_run_runs_deferred_products_on_numpy_then_their_kernels(monkeypatch):
    model, feeds = _products(np.random.default_rng(3))
    want = ort_run(model, feeds)
    ran = _kernels_run(monkeypatch)
    sess, deferred = _armed_session(monkeypatch, model)
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    assert not set(ran) & linalg.DEFERRABLE
    assert set(deferred) - {worker_pool._launch} == linalg.DEFERRABLE == {klinalg.gemm_packed_blocks,
                                                                          klinalg.dot_cols_f32}
    sess.wait_for_compilation()
    assert not deferred_compile.pending()
    for _ in range(3):  # each product prepared again, on its kernel, then in native segments
        for got, w in zip(sess.run(None, feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
        sess.wait_for_compilation()
    assert set(ran) & linalg.DEFERRABLE == linalg.DEFERRABLE


def test_segments_wait_for_deferred_kernels(monkeypatch):
    monkeypatch.setattr(deferred_compile, "_pending", 1)  # a kernel some first run deferred, still compiling
    model, feeds = _convs(np.random.default_rng(1))
    sess = onnxjit.InferenceSession(model.SerializeToString())
    for _ in range(3):
        sess.run(None, feeds)
    sess.wait_for_compilation(timeout=0.01)
    (plan,) = sess._compiled._plans.values()
    assert plan.native is None and plan.runs == 3  # not built while it compiles
    monkeypatch.setattr(deferred_compile, "_pending", 0)
    sess.run(None, feeds)
    sess.wait_for_compilation()
    assert plan.native


def test_a_recording_run_notes_the_kernels_it_defers(monkeypatch):
    model, feeds = _convs(np.random.default_rng(2))
    ran = _kernels_run(monkeypatch)
    onnxjit.InferenceSession(model.SerializeToString()).run(None, feeds)
    monkeypatch.setattr(deferred_compile, "available", lambda kernel, types: False)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    recorder = parallel_compile._Recorder()
    with recorder.active():
        assert deferred_compile.deferring()
        sess.run(None, feeds)
    assert not deferred_compile.deferring()
    markers = [marker for marker, _ in recorder.deferred]
    assert len(markers) == len(set(markers)) >= len(set(ran))  # each kernel once, and launchers
    assert not deferred_compile.pending()  # a helper's deferrals are its own to compile


def test_claims_are_exclusive(tmp_path):
    first_run = parallel_compile.FirstRun(1, (b"", {}))
    assert first_run.claim("m") == ""  # no job folder: nothing to share
    first_run._dir = str(tmp_path)
    mine = first_run.claim("m")
    assert mine and first_run.claim("m") is None  # held: a helper leaves it to the session, and back
    assert parallel_compile._mark(str(tmp_path), "m", exclusive=True) is None


def test_wait_returns_once_the_helpers_are_stopped_and_their_files_gone(tmp_path):
    """A process may exit as soon as `wait` returns, killing the background thread: it cleans up first."""
    from numba import types

    class Kernel:  # what the thread reads of a dispatcher: its Python function (the marker's name)
        py_func = staticmethod(_convs)
        __name__ = "k"
    first_run = parallel_compile.FirstRun(1, (b"", {}))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    first_run._dir = str(job_dir)
    compiled, ready = [], []
    kernel = Kernel()
    with deferred_compile._done:
        deferred_compile._pending += 1
    first_run.deferred[(kernel, (types.int64,))] = (lambda: compiled.append(1), [lambda: ready.append(1)])
    deferred_compile.compile_in_background(first_run)
    deferred_compile.wait(timeout=60)
    assert compiled == ready == [1] and not deferred_compile.pending()
    assert not job_dir.exists() and first_run._dir is None


def test_a_first_run_that_deferred_kernels_and_started_no_helper_starts_them_at_its_end(monkeypatch):
    """A run whose kernels all stood in can end before its helpers' delay, or meet no cache miss at all: where it
    deferred more than one kernel, its helpers start as it ends, to share their compiling with the thread."""
    spawned, background = [], []
    monkeypatch.setattr(parallel_compile.FirstRun, "_spawn", lambda self, after_run=False: spawned.append(after_run))
    monkeypatch.setattr(deferred_compile, "compile_in_background", background.append)
    for n_deferred, want in ((2, [True]), (1, [])):
        spawned.clear()
        first_run = parallel_compile.FirstRun(1, (b"", {}))
        with first_run.armed({}):
            for i in range(n_deferred):
                first_run.deferred[(i, ())] = (None, [])
        assert spawned == want and background[-1] is first_run
