"""Every graph optimization level gives the same outputs, end to end.

The onnx backend's pytorch-converted and pytorch-operator cases run at each level against their stored expected
outputs (within each case's tolerance), and the nine model-zoo light models, with random weights (their shipped
weights are uniform), run at each level against onnxruntime. Graph inputs and outputs keep their names and
types. tests/test_backend_conformance.py runs every case at the default level (ORT_ENABLE_ALL) as well.
"""
from __future__ import annotations

import functools
import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

import onnxjit
from onnxjit.ir.types import from_type_proto, type_string
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, with_random_weights

from conftest import ort_session

L = onnxjit.GraphOptimizationLevel
LEVELS = [L.ORT_DISABLE_ALL, L.ORT_ENABLE_BASIC, L.ORT_ENABLE_EXTENDED, L.ORT_ENABLE_ALL]
PYTORCH_CASES = [c for kind in ("pytorch-converted", "pytorch-operator") for c in load_model_tests(kind=kind)]


def session_at(model, level: L) -> onnxjit.InferenceSession:
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    return onnxjit.InferenceSession(model, so)


def assert_interface_kept(sess: onnxjit.InferenceSession, model: onnx.ModelProto) -> None:
    """Graph inputs and outputs keep their names and types, as the model declares them."""
    inits = {i.name for i in model.graph.initializer}
    declared = [[(v.name, type_string(from_type_proto(v.type))) for v in vs]
                for vs in ([v for v in model.graph.input if v.name not in inits], model.graph.output)]
    assert [[(a.name, a.type) for a in args] for args in (sess.get_inputs(), sess.get_outputs())] == declared


def _data_sets(case) -> list[tuple[dict, list]]:
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    sets = []
    for d in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set_*"))):
        ins = [numpy_helper.to_array(_tensor(f)) for f in sorted(glob.glob(os.path.join(d, "input_*.pb")))]
        outs = [numpy_helper.to_array(_tensor(f)) for f in sorted(glob.glob(os.path.join(d, "output_*.pb")))]
        sets.append((dict(zip(names, ins)), outs))
    return sets


def _tensor(path: str) -> onnx.TensorProto:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.name)
@pytest.mark.parametrize("case", PYTORCH_CASES, ids=lambda c: c.name)
def test_pytorch_case_at_every_level(case, level):
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    sess = session_at(model, level)
    assert_interface_kept(sess, model)
    for feeds, expected in _data_sets(case):
        got = sess.run(None, feeds)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)


# vgg19, bvlc_alexnet and zfnet512 carry 60-140M weights, mostly in their fully connected layers: generating,
# serializing and loading random ones at every level costs minutes on CI, so they keep their shipped weights.
RANDOM_WEIGHTS = {"squeezenet", "resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet"}


@functools.lru_cache(maxsize=1)
def _light(name: str):
    path, feeds, _ = light_model_case(name)
    model = onnx.load(path)
    if name in RANDOM_WEIGHTS:
        model = with_random_weights(model)
    ref = ort_session(model)
    return model, feeds, ref.run(None, feeds)


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.name)
# one xdist worker per model (pyproject sets --dist loadgroup), so each loads and runs onnxruntime once
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(n)) for n in LIGHT_MODELS])
def test_light_model_at_every_level(name, level):
    model, feeds, want = _light(name)
    sess = session_at(model, level)
    assert_interface_kept(sess, model)
    got = sess.run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        # deep float32 networks: reassociated sums (folded BN, blocked layouts) differ from onnxruntime's
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


def test_a_failing_pass_leaves_the_model_running_unoptimized(monkeypatch):
    from onnxjit import optimizer

    def broken(graph, ctx):
        if graph.nodes:
            graph.remove(graph.nodes[0])  # half a rewrite, then a crash
        raise KeyError("boom")
    optimizer._load_passes()
    monkeypatch.setattr(optimizer, "PASSES", [*optimizer.PASSES, optimizer.RegisteredPass("broken", 1, broken)])
    case = next(c for c in PYTORCH_CASES if c.name == "test_operator_basic")
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    with pytest.warns(RuntimeWarning, match="pass 'broken' failed .*KeyError.*boom.*without graph optimization"):
        sess = session_at(model, L.ORT_ENABLE_ALL)
    assert sess.optimization_report is None
    for feeds, expected in _data_sets(case):
        for g, e in zip(sess.run(None, feeds), expected):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
