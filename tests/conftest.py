"""Shared helpers for the session-API and control-flow tests: tiny models built with onnx.helper, run through
onnxruntime (or onnx.reference) for the expected outputs, and a dtype-aware comparison."""
from __future__ import annotations

import os

# the CUDA provider's tests run on Numba's CUDA simulator unless the environment says otherwise (on a machine with a
# GPU, NUMBA_ENABLE_CUDASIM=0 runs them there); Numba reads it when it is first imported, so before any import of it
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# no compile helper processes (onnxjit/cache/parallel_compile.py): pytest-xdist keeps every core busy already
os.environ.setdefault("ONNXJIT_COMPILE_PROCESSES", "0")

from typing import Any, Sequence  # noqa: E402

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import helper

import onnxjit

IR_VERSION = 8  # every onnxruntime release this project supports reads IR 8


def pytest_configure(config):
    # with -n, keep each xdist_group (one light model at every level) on one worker, so it loads the model and runs
    # onnxruntime once; set here rather than in addopts, where --dist would switch pytest-benchmark off
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], *, opset: int = 17, initializers=(),
               extra_opsets: dict[str, int] | None = None, functions=(), name: str = "g",
               ir_version: int = IR_VERSION, **model_kw) -> onnx.ModelProto:
    """A ModelProto around one graph; `extra_opsets` adds domains (say {'ai.onnx.ml': 3})."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions), **model_kw)
    model.ir_version = ir_version
    return model


def tensor(name: str, elem_type: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def ort_session(model: onnx.ModelProto, **kw):
    import onnxruntime
    kw.setdefault("providers", ["CPUExecutionProvider"])
    return onnxruntime.InferenceSession(model.SerializeToString(), **kw)


def ort_run(model: onnx.ModelProto, feeds: dict[str, Any], output_names=None) -> list[Any]:
    """onnxruntime's outputs for `feeds`: the expected values every test compares with."""
    return ort_session(model).run(output_names, feeds)


def ref_run(model: onnx.ModelProto, feeds: dict[str, Any], output_names=None) -> list[Any]:
    """onnx.reference's outputs, for what onnxruntime cannot run."""
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(output_names, feeds)


def jit_run(model: onnx.ModelProto, feeds: dict[str, Any], output_names=None, **kw) -> list[Any]:
    return onnxjit.InferenceSession(model, **kw).run(output_names, feeds)


_TOL = {np.dtype(np.float16): (1e-3, 1e-3), np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-12, 1e-14)}


def assert_same(got: Any, want: Any, where: str = "output") -> None:
    """`got` (onnxjit) equals `want` (onnxruntime): same structure, dtypes and shapes; floats within a per-dtype
    tolerance, everything else exactly."""
    if want is None:
        assert got is None, f"{where}: expected None, got {type(got).__name__}"
        return
    if isinstance(want, list):
        assert isinstance(got, list), f"{where}: expected a list (sequence), got {type(got).__name__}"
        assert len(got) == len(want), f"{where}: sequence length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
        return
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: expected a dict (map), got {type(got).__name__}"
        assert set(got) == set(want), f"{where}: map keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_same(np.asarray(got[k]), np.asarray(want[k]), f"{where}[{k!r}]")
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), f"{where}: expected a numpy array, got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    if want.dtype in _TOL:
        rtol, atol = _TOL[want.dtype]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def assert_all_same(got: Sequence[Any], want: Sequence[Any]) -> None:
    assert len(got) == len(want), f"{len(got)} outputs != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {i}")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def kernel_options() -> onnxjit.SessionOptions:
    """Options for testing the CPU provider's kernels on a graph as given: fallback disabled, and no graph
    optimization (constant folding would otherwise evaluate a node with constant inputs at load, on the
    reference implementation, and the kernel would never run)."""
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def native_session(model):
    """A session on the CPU provider alone (fallback disabled) over the graph as given, asserting every step of it
    runs there."""
    so = kernel_options()
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert sess._compiled.steps and all(s.provider == "CPUExecutionProvider" for s in sess._compiled.steps)
    return sess


def feeds_of(inputs):
    """The feeds of a one-node test model: `inputs` as (name, array, is_initializer), None for absent."""
    return {name: arr for name, arr, is_init in inputs if arr is not None and not is_init}


def one_node_model(op, inputs, opset, n_out=1, out_types=None, **attrs):
    """One-node model. `inputs`: (name, array, is_initializer) in node order; a None array is an absent input
    (trailing absent inputs are left out: onnxruntime crashes on some). Outputs take the first input's type
    unless `out_types` gives theirs."""
    names, vis, inits = [], [], []
    for name, arr, is_init in inputs:
        if arr is None:
            names.append("")
            continue
        names.append(name)
        if is_init:
            inits.append(onnx.numpy_helper.from_array(arr, name))
        else:
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
    while names and not names[-1]:
        names.pop()
    first = next(a for _, a, _ in inputs if a is not None)
    types = out_types or [helper.np_dtype_to_tensor_dtype(first.dtype)] * n_out
    out_names = [f"y{i}" for i in range(n_out)]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(out_names, types)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph([node], "g", vis, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
