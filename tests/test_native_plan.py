"""Native segments (onnxjit/session/native_plan.py): small steps that follow each other run as one compiled
function once a plan has run; results equal onnxruntime's and the step-by-step run's, and a segment steps aside
where the shapes or types it was built for do not hold."""
import logging

import numpy as np
import onnx
import onnxruntime
import pytest
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


def _sessions(model, mode="inline"):
    """onnxruntime's session and onnxjit's, whose segments compile in the run that builds them ("inline") unless
    `mode` says otherwise."""
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    ref = onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    jo = onnxjit.SessionOptions()
    jo.add_session_config_entry("session.onnxjit.native_segments", mode)
    return ref, onnxjit.InferenceSession(model, jo, providers=["CPUExecutionProvider"])


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
    assert steps >= 4 and (seg.start, seg.stop) == (0, steps) and seg.source.count("failed += ") == steps
    assert sorted(seg.outputs) == ["s0", "y"]


def test_segments_compile_in_the_background_while_runs_go_on_step_by_step():
    nodes, inits = _chain()
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                   [helper.make_tensor_value_info("y", F, [1, 16])], inits)
    ref, jit = _sessions(model, mode="background")
    x = np.random.default_rng(9).standard_normal((1, 16)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(jit.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    jit._compiled.wait_for_segments()
    (plan,) = _plans(jit)
    assert len(plan.segments) == 1 and plan.native
    np.testing.assert_allclose(jit.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_segments_can_be_turned_off_and_a_wrong_mode_is_refused():
    nodes, inits = _chain()
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16])],
                   [helper.make_tensor_value_info("y", F, [1, 16])], inits)
    _, jit = _sessions(model, mode="off")
    x = np.ones((1, 16), np.float32)
    for _ in range(3):
        jit.run(None, {"x": x})
    assert not any(p.segments for p in _plans(jit))
    with pytest.raises(onnxjit.InvalidArgument, match="native_segments"):
        _sessions(model, mode="sometimes")


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


def test_a_scan_body_of_small_products_runs_as_a_segment_iterated_natively():
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
    from onnxjit.session.executor import CompiledGraph
    (body,) = _found_in(jit._compiled.steps[0].fn, CompiledGraph)
    (plan,) = _plans_of(body)
    assert len(plan.segments) == 1 and plan.segments[0].source.count("failed += ") == 2
    assert len(_drivers(jit)) == 1  # and the Scan iterates it natively


def _plans_of(compiled):
    return list(compiled._plans.values())


def _found_in(fn, cls, seen=None):
    """The objects of `cls` a step's function holds through its closures (a Loop's NativeIterations, a control-flow
    step's bodies)."""
    seen = set() if seen is None else seen
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, cls):
            found.append(v)
        elif isinstance(v, dict):  # (a control-flow step's bodies by attribute)
            found += [x for x in v.values() if isinstance(x, cls)]
        elif callable(v):
            found += _found_in(v, cls, seen)
    return found


def _drivers(sess):
    from onnxjit.session.native_loops import NativeIterations
    (natives,) = _found_in(sess._compiled.steps[0].fn, NativeIterations)
    return [d for d in natives.drivers.values() if d is not False]


def _rnn_body(extra_nodes, cond_out, n=8):
    """h = tanh(h @ W + b + float(i)) with `extra_nodes` computing the condition `cond_out`; h also scanned."""
    return helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Add", ["hw", "b"], ["hb"]), helper.make_node("Add", ["hb", "fi"], ["hi"]),
         helper.make_node("Tanh", ["hi"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["h_scan"])]
        + extra_nodes,
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", F, [1, n])],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, [1, n]), helper.make_tensor_value_info("h_scan", F, [1, n])])


def _loop_model(body, trips, n=8, w_is_input=False):
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((n, n)) / 3).astype(np.float32), "W"),
             numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(trips, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go")]
    inputs = [helper.make_tensor_value_info("h0", F, [1, n])]
    if w_is_input:  # an initializer a feed may override
        inputs.append(helper.make_tensor_value_info("W", F, [n, n]))
    return _model([helper.make_node("Loop", ["trips", "go", "h0"], ["h", "hs"], body=body)], inputs,
                  [helper.make_tensor_value_info("h", F, [1, n]), helper.make_tensor_value_info("hs", F, None)], inits)


def _check_runs(ref, jit, feeds_list):
    for k, feeds in enumerate(feeds_list):
        got, want = jit.run(None, feeds), ref.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape, k
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"run {k}")


@pytest.mark.parametrize("mode", ["inline", "background"])
def test_a_loop_reading_its_iteration_number_iterates_natively(caplog, mode):
    ref, jit = _sessions(_loop_model(_rnn_body([helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                                               "cond_out"), trips=6), mode=mode)
    rng = np.random.default_rng(6)
    with caplog.at_level(logging.WARNING, logger="onnxjit"):
        _check_runs(ref, jit, [{"h0": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(3)])
        jit.wait_for_compilation()  # the body's segment (background); the driver is made in the next run
        _check_runs(ref, jit, [{"h0": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(2)])
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert len(_drivers(jit)) == 1


def test_a_while_loop_stops_on_its_computed_condition_natively():
    """A trip count of INT64_MAX (as exporters write while loops): the scan output grows as it goes."""
    limit = numpy_helper.from_array(np.array(11, np.int64), "limit")
    body = _rnn_body([helper.make_node("Add", ["i", "one"], ["next_i"]),
                      helper.make_node("Less", ["next_i", "limit"], ["cond_out"])], "cond_out")
    body.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
    m = onnx.load_from_string(_loop_model(body, trips=np.iinfo(np.int64).max))
    m.graph.initializer.append(limit)
    model = m.SerializeToString()
    ref, jit = _sessions(model)
    rng = np.random.default_rng(7)
    _check_runs(ref, jit, [{"h0": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(4)])
    assert jit.run(None, {"h0": np.zeros((1, 8), np.float32)})[1].shape == (11, 1, 8)
    assert len(_drivers(jit)) == 1


def test_a_loop_whose_weight_a_feed_may_override_uses_the_fed_weight():
    """W is an initializer listed among the inputs: runs feeding another W between runs that do not must use it
    (no kernel, segment or driver may hold the initializer as a constant)."""
    ref, jit = _sessions(_loop_model(_rnn_body([helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                                               "cond_out"), trips=4, w_is_input=True))
    rng = np.random.default_rng(8)
    h0 = rng.standard_normal((1, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    _check_runs(ref, jit, [{"h0": h0}, {"h0": h0}, {"h0": h0}, {"h0": h0, "W": w}, {"h0": h0}, {"h0": h0, "W": w}])


def test_a_small_conv_net_runs_as_segments_split_over_threads():
    """Convs (one large enough to split over the pool's two threads, one depthwise, one adding a residual), a
    global average pool, a Flatten viewed in place and a Gemm: joined into a segment, results as onnxruntime's and
    bit-equal to the step-by-step run."""
    rng = np.random.default_rng(10)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32),
                                       name)
    inits = [w("W1", 16, 8, 3, 3), w("W2", 16, 1, 3, 3), w("W3", 16, 16, 1, 1), w("G", 16, 10),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "B1")]
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Conv", ["c2", "W3"], ["c3"]), helper.make_node("Add", ["c3", "r1"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "G"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 8, 24, 24])],
                   [helper.make_tensor_value_info("y", F, [1, 10])], inits)
    ref, jit = _sessions(model)
    feeds = [{"x": rng.standard_normal((1, 8, 24, 24)).astype(np.float32)} for _ in range(4)]
    _check_runs(ref, jit, feeds)
    (plan,) = _plans(jit)
    assert sum(seg.stop - seg.start for seg in plan.segments) == len(jit._compiled.steps)
    assert any(seg.parallel for seg in plan.segments), [seg.source for seg in plan.segments]
    step_by_step = jit._compiled.run(feeds[0], profile=[])
    np.testing.assert_array_equal(jit.run(None, feeds[0])[0], step_by_step[0])


def test_runs_from_several_threads_share_segments_and_the_pool():
    """run() is thread-safe with segments too: threads running one session while its segments compile in the
    background and after, each getting onnxruntime's outputs for its own inputs (a segment splits a conv over the
    pool's threads where it holds them, and runs on its caller's thread alone where another run does)."""
    import threading
    rng = np.random.default_rng(11)
    w = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) / 8).astype(np.float32), "W")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32), "W2")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "W2"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 8, 24, 24])],
                   [helper.make_tensor_value_info("y", F, [1, 16, 24, 24])], [w, w2])
    ref, jit = _sessions(model, mode="background")
    xs = [rng.standard_normal((1, 8, 24, 24)).astype(np.float32) for _ in range(4)]
    want = [ref.run(None, {"x": x})[0] for x in xs]
    errors = []

    def work(k):
        try:
            for _ in range(15):
                np.testing.assert_allclose(jit.run(None, {"x": xs[k]})[0], want[k], rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jit.wait_for_compilation()
    assert not errors, errors[0]
    (plan,) = _plans(jit)
    assert plan.segments and plan.segments[0].parallel
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_a_concat_joins_a_segment_as_copies_into_its_output(dtype):
    """A Concat of computed values along a middle axis (three rows before it, so each input is three runs of the
    output) and of a feed, with a Concat of one input between: its copies (movement.copy_columns, which its step
    does not call) run in the segment with the steps around it, results equal onnxruntime's."""
    elem = F if dtype == np.float32 else TensorProto.INT64
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["x", "x"], ["m"]),
             helper.make_node("Concat", ["a", "z", "m"], ["c"], axis=1),
             helper.make_node("Concat", ["c"], ["c1"], axis=0), helper.make_node("Sub", ["c1", "x0"], ["y"])]
    inits = [numpy_helper.from_array(np.arange(3 * 9 * 2).reshape(3, 9, 2).astype(dtype), "x0")]
    model = _model(nodes, [helper.make_tensor_value_info("x", elem, [3, 4, 2]),
                           helper.make_tensor_value_info("z", elem, [3, 1, 2])],
                   [helper.make_tensor_value_info("y", elem, [3, 9, 2])], inits)
    ref, jit = _sessions(model)
    feeds = [{"x": rng.integers(-9, 9, (3, 4, 2)).astype(dtype), "z": rng.integers(-9, 9, (3, 1, 2)).astype(dtype)}
             for _ in range(4)]
    for f in feeds:
        np.testing.assert_array_equal(jit.run(None, f)[0], ref.run(None, f)[0])
    (plan,) = _plans(jit)
    (seg,) = plan.segments
    assert (seg.start, seg.stop) == (0, len(jit._compiled.steps)) and seg.source.count("failed += ") >= 5


def _ml_pipelines():
    """skl2onnx exports at their default options but without ZipMap (labels int64): a ColumnTransformer
    (OneHotEncoder over two string columns, StandardScaler over three numeric ones) + LogisticRegression,
    StandardScaler + LinearRegression, a gradient-boosting classifier and a random-forest regressor."""
    import warnings

    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    import pandas as pd
    rng = np.random.default_rng(13)
    n = 200
    frame = pd.DataFrame({"color": rng.choice(["red", "green", "blue"], n), "size": rng.choice(["S", "M", "L"], n),
                          **{f"v{j}": rng.standard_normal(n) for j in range(3)}})
    y = (frame["v0"] + (frame["color"] == "red") > 0.5).astype(int)
    columns = make_pipeline(ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                               ("num", StandardScaler(), [2, 3, 4])]),
                            LogisticRegression())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns.fit(frame.values, y)
        columns_onnx = to_onnx(columns, initial_types=[("cat", StringTensorType([None, 2])),
                                                       ("num", FloatTensorType([None, 3]))],
                               options={id(columns): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    # skl2onnx wires the two inputs to the ColumnTransformer's column lists itself
    x = rng.standard_normal((n, 4)).astype(np.float32)
    regression = make_pipeline(StandardScaler(), LinearRegression()).fit(x, x @ np.arange(4.0))
    regression_onnx = to_onnx(regression, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
    trees = GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0).fit(x, x[:, 0] + x[:, 1] > 0)
    trees_onnx = to_onnx(trees, x[:1], options={id(trees): {"zipmap": False}},
                         target_opset={"": 17, "ai.onnx.ml": 3})
    forest = RandomForestRegressor(4, max_depth=4, random_state=0).fit(x, x[:, 0] * 2)
    forest_onnx = to_onnx(forest, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})

    def column_feeds(rows):
        return {"cat": np.array([[rng.choice(["red", "green", "blue", "pink"]), rng.choice(["S", "M", "L"])]
                                 for _ in range(rows)], dtype=object),
                "num": rng.standard_normal((rows, 3)).astype(np.float32)}
    def rows_of(rows):
        return {"X": rng.standard_normal((rows, 4)).astype(np.float32)}
    return [(columns_onnx, column_feeds), (regression_onnx, rows_of), (trees_onnx, rows_of), (forest_onnx, rows_of)]


@pytest.mark.parametrize("rows", [1, 3])
def test_classical_ml_pipelines_run_their_numeric_steps_natively(rows, caplog):
    """At batch 1 and 3: the ColumnTransformer's columns encoded in one step (strings, in Python), then its
    Scaler, Reshape, Concat and the classifier (labels written by the kernel) in one segment; StandardScaler +
    LinearRegression (one chained step: a model of few steps takes a segment of one call) and the tree ensembles
    the same. Labels equal onnxruntime's, scores within float32 rounding."""
    for model, feeds_of in _ml_pipelines():
        ref, jit = _sessions(model.SerializeToString())
        with caplog.at_level(logging.WARNING, logger="onnxjit"):
            for run in range(4):
                feeds = feeds_of(rows)
                for got, want in zip(jit.run(None, feeds), ref.run(None, feeds)):
                    if got.dtype == np.int64:
                        np.testing.assert_array_equal(got, want, err_msg=f"run {run}")
                    else:
                        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"run {run}")
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        (plan,) = _plans(jit)
        python_steps = len(jit._compiled.steps) - sum(seg.stop - seg.start for seg in plan.segments)
        assert len(plan.segments) == 1 and python_steps == (1 if len(model.graph.input) == 2 else 0), \
            [[n.op_type for n in s.nodes] for s in jit._compiled.steps]
