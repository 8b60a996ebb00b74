"""Native segments (onnxjit/session/native_plan.py): small steps that follow each other run as one compiled
function once a plan has run; results equal onnxruntime's and the step-by-step run's, and a segment steps aside
where the shapes or types it was built for do not hold."""
import logging

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

import onnxjit

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "native", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _chain(first="x", n=16, rng=None):
    """MatMul -> Add -> Sigmoid twice, a Gemm whose C is computed in the run, and an elementwise group of two
    computed values."""
    rng = rng or np.random.default_rng(0)
    w = [numpy_helper.from_array((rng.standard_normal((n, n)) / 4).astype(np.float32), f"W{i}") for i in range(3)]
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", [first, "W0"], ["m0"]), helper.make_node("Add", ["m0", "b"], ["a0"]),
             helper.make_node("Sigmoid", ["a0"], ["s0"]),
             helper.make_node("MatMul", ["s0", "W1"], ["m1"]), helper.make_node("Add", ["m1", "b"], ["a1"]),
             helper.make_node("Sigmoid", ["a1"], ["s1"]),
             helper.make_node("Gemm", ["s1", "W2", "s0"], ["g"], beta=0.5),
             helper.make_node("Mul", ["g", "s1"], ["p"]), helper.make_node("Tanh", ["p"], ["y"])]
    return nodes, w + [b]


def _sessions(model):
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    ref = onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return ref, onnxjit.InferenceSession(model, providers=["CPUExecutionProvider"])


def _plans(sess):
    return list(sess._compiled._plans.values())



def test_small_steps_run_as_one_segment_and_match_onnxruntime(caplog):
    nodes, inits = _chain()
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                   [helper.make_tensor_value_info("y", F, [1, 16]), helper.make_tensor_value_info("s0", F, [1, 16])],
                   inits)
    ref, jit = _sessions(model)
    rng = np.random.default_rng(1)
    with caplog.at_level(logging.WARNING, logger="onnxjit"):
        for run in range(4):  # the second run builds the segment, the later ones go through it
            x = rng.standard_normal((1, 16)).astype(np.float32)
            for got, want in zip(jit.run(None, {"x": x}), ref.run(None, {"x": x})):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"run {run}")
            if run == 1:
                step_by_step = jit._compiled.run({"x": x}, profile=[])  # the step loop: no segments
                for a, b in zip(jit.run(None, {"x": x}), step_by_step):
                    np.testing.assert_array_equal(a, b)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    (plan,) = _plans(jit)
    assert len(plan.segments) == 1
    seg = plan.segments[0]
    # every step joined, one kernel call each
    steps = len(jit._compiled.steps)
    assert steps >= 4 and (seg.start, seg.stop) == (0, steps) and seg.source.count("\n    k") == steps
    assert sorted(seg.outputs) == ["s0", "y"]


def test_a_segment_steps_aside_where_a_value_it_reads_has_another_shape():
    """Tile's output shape depends on the repeats' values, not on the feeds' shapes: the plan is the same, the
    segment after it was built for one row."""
    nodes, inits = _chain(first="t")
    model = _model([helper.make_node("Tile", ["x", "reps"], ["t"])] + nodes,
                   [helper.make_tensor_value_info("x", F, [1, 16]),
                    helper.make_tensor_value_info("reps", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", F, None)], inits)
    ref, jit = _sessions(model)
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    for reps in ([1, 1], [1, 1], [1, 1], [3, 1], [1, 1]):
        feeds = {"x": x, "reps": np.array(reps, np.int64)}
        (got,), (want,) = jit.run(None, feeds), ref.run(None, feeds)
        assert got.shape == (reps[0], 16)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=str(reps))
    (plan,) = _plans(jit)
    assert len(plan.segments) == 1 and plan.segments[0].shapes == [(1, 16)]


def test_a_segment_steps_aside_for_argument_types_it_was_not_compiled_for():
    nodes, inits = _chain()
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                   [helper.make_tensor_value_info("y", F, [1, 16])], inits)
    ref, jit = _sessions(model)
    x = np.random.default_rng(3).standard_normal((1, 32)).astype(np.float32)
    for feed in (x[:, :16].copy(), x[:, :16].copy(), x[:, ::2], x[:, :16].copy()):  # x[:, ::2]: not contiguous
        (got,), (want,) = jit.run(None, {"x": feed}), ref.run(None, {"x": feed})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(p.segments for p in _plans(jit))


def test_a_scan_body_of_small_products_runs_as_a_segment():
    rng = np.random.default_rng(4)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("MatMul", ["x_t", "U"], ["xu"]),
         helper.make_node("Add", ["hw", "xu"], ["s"]), helper.make_node("Tanh", ["s"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [helper.make_tensor_value_info("h_in", F, [1, 8]), helper.make_tensor_value_info("x_t", F, [1, 8])],
        [helper.make_tensor_value_info("h_out", F, [1, 8]), helper.make_tensor_value_info("h_scan", F, [1, 8])])
    weights = [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), n) for n in "WU"]
    model = _model([helper.make_node("Scan", ["h0", "xs"], ["h", "hs"], body=body, num_scan_inputs=1)],
                   [helper.make_tensor_value_info("h0", F, [1, 8]), helper.make_tensor_value_info("xs", F, [5, 1, 8])],
                   [helper.make_tensor_value_info("h", F, [1, 8]), helper.make_tensor_value_info("hs", F, None)],
                   weights)
    ref, jit = _sessions(model)
    for run in range(3):
        feeds = {"h0": rng.standard_normal((1, 8)).astype(np.float32),
                 "xs": rng.standard_normal((5, 1, 8)).astype(np.float32)}
        for got, want in zip(jit.run(None, feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"run {run}")
    (body,) = _graphs_in(jit._compiled.steps[0].fn)
    (plan,) = _plans_of(body)
    assert len(plan.segments) == 1 and plan.segments[0].source.count("\n    k") == 2


def _graphs_in(fn, seen=None):
    """The CompiledGraphs a step's function holds (a control-flow step's bodies), found through its closures."""
    from onnxjit.session.executor import CompiledGraph
    seen = set() if seen is None else seen
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, CompiledGraph):
            found.append(v)
        elif isinstance(v, dict):
            found += [g for g in v.values() if isinstance(g, CompiledGraph)]
        elif callable(v):
            found += _graphs_in(v, seen)
    return found


def _plans_of(compiled):
    return list(compiled._plans.values())
