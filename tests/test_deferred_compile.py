"""Kernels a session's first run defers (onnxjit.cache.deferred_compile): the first run's convs on the general
kernel where their own has no code, compiled after it in the background, then used; native segments waiting for
them; a helper's recording run noting them; claims between a session and its helpers."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxjit
from onnxjit.cache import deferred_compile, parallel_compile
from onnxjit.kernels import conv as kconv
from onnxjit.ops import nn
from onnxjit.worker_pool import CallSite

from conftest import make_model, ort_run, tensor


def _close(got, want):
    """Within the Winograd kernel's rounding (its transforms add a few float32 steps)."""
    (g,), (w,) = got, want
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def _convs(rng):
    """A 3->8 3x3 conv (conv_rows), a 1x1 8->16 (conv_packed), a 16->16 3x3 over 24x64 (Winograd) and a 16->32 3x3
    of stride 2 (conv_broadcast), with random weights."""
    def conv(name, x, m, c, k, **attrs):
        w = nh.from_array((rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32), f"{name}_w")
        b = nh.from_array(rng.standard_normal(m).astype(np.float32) * 0.1, f"{name}_b")
        return h.make_node("Conv", [x, w.name, b.name], [name], **attrs), [w, b]
    layers = [conv("c1", "x", 8, 3, 3, pads=[1, 1, 1, 1]), conv("c2", "r1", 16, 8, 1),
              conv("c3", "c2", 16, 16, 3, pads=[1, 1, 1, 1]), conv("y", "r3", 32, 16, 3, pads=[1, 1, 1, 1],
                                                                   strides=[2, 2])]
    nodes = [layers[0][0], h.make_node("Relu", ["c1"], ["r1"]), layers[1][0], layers[2][0],
             h.make_node("Relu", ["c3"], ["r3"]), layers[3][0]]
    model = make_model(nodes, [tensor("x", T.FLOAT, [1, 3, 24, 64])], [tensor("y", T.FLOAT, [1, 32, 12, 32])],
                       initializers=[i for _, inits in layers for i in inits])
    return model, {"x": rng.standard_normal((1, 3, 24, 64)).astype(np.float32)}


def test_a_first_run_runs_deferred_convs_on_the_general_kernel_then_their_own(monkeypatch):
    monkeypatch.setattr(parallel_compile, "START_DELAY", 1e6)  # no helper process here
    monkeypatch.setattr(deferred_compile, "available", lambda kernel, types: False)  # as over empty caches
    deferred, ran = [], []
    defer, call = deferred_compile.defer, CallSite.run
    monkeypatch.setattr(deferred_compile, "defer", lambda k, t, on_ready: (deferred.append(k), defer(k, t, on_ready)))
    monkeypatch.setattr(CallSite, "run", lambda site, *a: (ran.append(site.kernel), call(site, *a))[1])
    model, feeds = _convs(np.random.default_rng(0))
    want = ort_run(model, feeds)
    so = onnxjit.SessionOptions()
    so.add_session_config_entry(parallel_compile.PROCESSES_KEY, "1")  # a first run armed
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)

    _close(sess.run(None, feeds), want)
    assert set(deferred) == nn.DEFERRABLE  # Winograd, conv_broadcast, conv_rows
    assert set(ran) == {kconv.conv_packed}  # every conv on the im2col + packed-GEMM kernel
    sess.wait_for_compilation()
    assert not deferred_compile.pending()

    ran.clear()
    _close(sess.run(None, feeds), want)  # each conv prepared again, on its own kernel
    assert set(ran) == nn.DEFERRABLE | {kconv.conv_packed}
    for _ in range(2):  # the native segments, built from the specialized kernels
        sess.wait_for_compilation()
        _close(sess.run(None, feeds), want)
    assert len(deferred) == 3  # later runs defer nothing


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
    monkeypatch.setattr(deferred_compile, "available", lambda kernel, types: False)
    model, feeds = _convs(np.random.default_rng(2))
    sess = onnxjit.InferenceSession(model.SerializeToString())
    recorder = parallel_compile._Recorder()
    with recorder.active():
        assert deferred_compile.deferring()
        sess.run(None, feeds)
    assert not deferred_compile.deferring()
    markers = [marker for marker, _ in recorder.deferred]
    assert len(markers) == len(set(markers)) == 3  # each kernel once
    assert not deferred_compile.pending()  # a helper's deferrals are its own to compile


def test_claims_are_exclusive(tmp_path):
    first_run = parallel_compile.FirstRun(1, (b"", {}))
    assert first_run.claim("m") == ""  # no job folder: nothing to share
    first_run._dir = str(tmp_path)
    mine = first_run.claim("m")
    assert mine and first_run.claim("m") is None  # held: a helper leaves it to the session, and back
    assert parallel_compile._claim(str(tmp_path), "m") is None
