"""If, Loop, Scan, SequenceMap, sequence and optional values, compared with onnxruntime (onnx.reference where
onnxruntime cannot run the model)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxjit
from conftest import assert_all_same, jit_run, make_model, ort_run, ref_run, tensor


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def check(model: onnx.ModelProto, feeds: dict, output_names=None) -> list:
    """onnxjit's outputs equal onnxruntime's; returns them."""
    got = jit_run(model, feeds, output_names)
    assert_all_same(got, ort_run(model, feeds, output_names))
    return got


# --- If ----------------------------------------------------------------------------------------------------------
def if_model() -> onnx.ModelProto:
    """Both branches read values of the main graph: a node output (sq), an initializer (W) and an input (x)."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "sq"], ["then_out"]),
                                helper.make_node("Mul", ["then_out", "W"], ["then_out2"])],
                               "then_g", [], [tensor("then_out2", TP.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "W"], ["else_out"]),
                                helper.make_node("Relu", ["else_out"], ["else_out2"])],
                               "else_g", [], [tensor("else_out2", TP.FLOAT, [3])])
    w = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "W")
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["y", "sq"], ["z"])]
    return make_model(nodes, [tensor("c", TP.BOOL, []), tensor("x", TP.FLOAT, [3])],
                      [tensor("z", TP.FLOAT, [3]), tensor("y", TP.FLOAT, [3])], initializers=[w])


@pytest.mark.parametrize("cond", [True, False])
def test_if_reads_outer_scope(cond, rng):
    check(if_model(), {"c": np.array(cond), "x": rng.standard_normal(3, dtype=np.float32)})


def test_if_cond_as_one_element_tensor(rng):
    model = if_model()
    model.graph.input[0].CopyFrom(tensor("c", TP.BOOL, [1]))
    for cond in (True, False):
        check(model, {"c": np.array([cond]), "x": rng.standard_normal(3, dtype=np.float32)})


def test_nested_if_reads_two_levels_up(rng):
    inner_then = helper.make_graph([helper.make_node("Add", ["x", "b"], ["it"])], "inner_then", [],
                                   [tensor("it", TP.FLOAT, [2])])
    inner_else = helper.make_graph([helper.make_node("Sub", ["x", "b"], ["ie"])], "inner_else", [],
                                   [tensor("ie", TP.FLOAT, [2])])
    outer_then = helper.make_graph([helper.make_node("If", ["c2"], ["ot"], then_branch=inner_then,
                                                     else_branch=inner_else)], "outer_then", [],
                                   [tensor("ot", TP.FLOAT, [2])])
    outer_else = helper.make_graph([helper.make_node("Mul", ["x", "b"], ["oe"])], "outer_else", [],
                                   [tensor("oe", TP.FLOAT, [2])])
    model = make_model([helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)],
                       [tensor("c1", TP.BOOL, []), tensor("c2", TP.BOOL, []), tensor("x", TP.FLOAT, [2]),
                        tensor("b", TP.FLOAT, [2])], [tensor("y", TP.FLOAT, [2])])
    for c1 in (True, False):
        for c2 in (True, False):
            check(model, {"c1": np.array(c1), "c2": np.array(c2), "x": rng.standard_normal(2, dtype=np.float32),
                          "b": rng.standard_normal(2, dtype=np.float32)})


# --- Loop --------------------------------------------------------------------------------------------------------
def loop_body() -> onnx.GraphProto:
    """acc += step (outer); scan out acc * i; keep going while sum(acc) < limit (outer)."""
    nodes = [helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
             helper.make_node("Cast", ["i"], ["i_f"], to=TP.FLOAT),
             helper.make_node("Mul", ["acc_out", "i_f"], ["scan_out"]),
             helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
             helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    return helper.make_graph(nodes, "body",
                             [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
                              tensor("acc_in", TP.FLOAT, [2])],
                             [tensor("cond_out", TP.BOOL, []), tensor("acc_out", TP.FLOAT, [2]),
                              tensor("scan_out", TP.FLOAT, [2])])


def loop_model(with_trip_count: bool = True, with_cond: bool = True) -> onnx.ModelProto:
    inputs = [tensor("acc0", TP.FLOAT, [2]), tensor("step", TP.FLOAT, [2]), tensor("limit", TP.FLOAT, [])]
    loop_inputs = ["M" if with_trip_count else "", "cond" if with_cond else "", "acc0"]
    if with_trip_count:
        inputs.append(tensor("M", TP.INT64, []))
    if with_cond:
        inputs.append(tensor("cond", TP.BOOL, []))
    nodes = [helper.make_node("Loop", loop_inputs, ["acc_final", "scans"], body=loop_body())]
    return make_model(nodes, inputs, [tensor("acc_final", TP.FLOAT, [2]), tensor("scans", TP.FLOAT, [None, 2])],
                      opset=13)


LOOP_FEEDS = {"acc0": np.array([0.5, 1.0], np.float32), "step": np.array([1.0, 0.25], np.float32)}


@pytest.mark.parametrize("trips, limit, cond", [(5, 1e6, True),   # runs all 5 trips
                                                (10, 6.0, True),  # stops early on the body's condition
                                                (4, 1e6, False),  # the initial condition is false: no trip
                                                (0, 1e6, True)])  # zero trips
def test_loop_trip_count_cond_carried_and_scan_outputs(trips, limit, cond):
    feeds = dict(LOOP_FEEDS, limit=np.array(limit, np.float32), M=np.array(trips, np.int64), cond=np.array(cond))
    check(loop_model(), feeds)


def test_loop_without_trip_count_runs_until_cond_false():
    feeds = dict(LOOP_FEEDS, limit=np.array(9.0, np.float32), cond=np.array(True))
    got = check(loop_model(with_trip_count=False), feeds)
    assert got[1].shape[0] > 1


def test_loop_without_cond_runs_trip_count_times():
    feeds = dict(LOOP_FEEDS, limit=np.array(1e6, np.float32), M=np.array(3, np.int64))
    got = check(loop_model(with_cond=False), feeds)
    assert got[1].shape[0] == 3


def test_loop_without_cond_input_body_cond_false():
    """No cond input, and the body's cond output is false after the first trip. The ONNX spec's pseudo-code
    calls the body's cond "ignored" here; onnxruntime stops the loop on it. onnxjit must match onnxruntime."""
    feeds = dict(LOOP_FEEDS, limit=np.array(0.0, np.float32), M=np.array(3, np.int64))
    check(loop_model(with_cond=False), feeds)


def test_loop_inside_if(rng):
    """A Loop in the then-branch; its body reads 'step' and 'limit' from the main graph, two scopes up."""
    then_g = helper.make_graph([helper.make_node("Loop", ["M", "", "acc0"], ["l_acc", "l_scan"], body=loop_body()),
                                helper.make_node("ReduceSum", ["l_scan"], ["then_out"], keepdims=0,)],
                               "then_g", [], [tensor("then_out", TP.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Mul", ["acc0", "step"], ["else_out"])], "else_g", [],
                               [tensor("else_out", TP.FLOAT, None)])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       [tensor("c", TP.BOOL, []), tensor("M", TP.INT64, []), tensor("acc0", TP.FLOAT, [2]),
                        tensor("step", TP.FLOAT, [2]), tensor("limit", TP.FLOAT, [])],
                       [tensor("y", TP.FLOAT, None)], opset=13)
    for c in (True, False):
        check(model, {"c": np.array(c), "M": np.array(4, np.int64), "limit": np.array(0.0, np.float32),
                      "acc0": rng.standard_normal(2, dtype=np.float32),
                      "step": rng.standard_normal(2, dtype=np.float32)})


def rnn_loop_model(w_overridable: bool) -> onnx.ModelProto:
    """A Loop whose body multiplies its state by W and adds b, both initializers of the main graph; W is also
    listed among the graph inputs (a feed may override it) when `w_overridable`."""
    body = helper.make_graph([helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
                              helper.make_node("Add", ["hw", "b"], ["h_out"]),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                             "body", [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
                                      tensor("h_in", TP.FLOAT, [1, 4])],
                             [tensor("cond_out", TP.BOOL, []), tensor("h_out", TP.FLOAT, [1, 4])])
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 4)) / 2).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(3, np.int64), "trips")]
    inputs = [tensor("h0", TP.FLOAT, [1, 4])] + ([tensor("W", TP.FLOAT, [4, 4])] if w_overridable else [])
    return make_model([helper.make_node("Loop", ["trips", "", "h0"], ["h"], body=body)], inputs,
                      [tensor("h", TP.FLOAT, [1, 4])], initializers=inits)


def test_loop_body_takes_outer_constants_as_its_own(rng):
    """A body's kernels see the main graph's constant initializers as constants (weights transposed once, not
    at every iteration), and an initializer a feed may override as a value: the override reaches the body."""
    sess = onnxjit.InferenceSession(rnn_loop_model(False).SerializeToString())
    loop = next(n for n in sess._model.graph.nodes if n.op_type == "Loop")
    body = loop.attributes["body"].value
    consts = {v.name for n in body.nodes for v in n.inputs if v is not None and v.const is not None}
    assert {"W", "b"} <= consts
    check(rnn_loop_model(False), {"h0": rng.standard_normal((1, 4), dtype=np.float32)})

    model = rnn_loop_model(True)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    body = next(n for n in sess._model.graph.nodes if n.op_type == "Loop").attributes["body"].value
    assert "W" not in {v.name for n in body.nodes for v in n.inputs if v is not None and v.const is not None}
    h0 = rng.standard_normal((1, 4), dtype=np.float32)
    check(model, {"h0": h0})
    check(model, {"h0": h0, "W": rng.standard_normal((4, 4), dtype=np.float32)})


def test_loop_body_reading_its_iteration_number_two_subgraphs_down(rng):
    """A Loop body that reads its iteration number only inside an If within an If (no node of the body itself
    reads it) still gets it: the Loop skips making only the values its body never reads."""
    inner_then = helper.make_graph([helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
                                    helper.make_node("Add", ["h_in", "fi"], ["it"])], "inner_then", [],
                                   [tensor("it", TP.FLOAT, [2])])
    inner_else = helper.make_graph([helper.make_node("Identity", ["h_in"], ["ie"])], "inner_else", [],
                                   [tensor("ie", TP.FLOAT, [2])])
    outer_then = helper.make_graph([helper.make_node("If", ["c"], ["ot"], then_branch=inner_then,
                                                     else_branch=inner_else)], "outer_then", [],
                                   [tensor("ot", TP.FLOAT, [2])])
    outer_else = helper.make_graph([helper.make_node("Neg", ["h_in"], ["oe"])], "outer_else", [],
                                   [tensor("oe", TP.FLOAT, [2])])
    body = helper.make_graph([helper.make_node("If", ["c"], ["h_out"], then_branch=outer_then,
                                               else_branch=outer_else),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                             "body", [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
                                      tensor("h_in", TP.FLOAT, [2])],
                             [tensor("cond_out", TP.BOOL, []), tensor("h_out", TP.FLOAT, [2])])
    model = make_model([helper.make_node("Loop", ["M", "", "h0"], ["h"], body=body)],
                       [tensor("M", TP.INT64, []), tensor("c", TP.BOOL, []), tensor("h0", TP.FLOAT, [2])],
                       [tensor("h", TP.FLOAT, [2])])
    got = check(model, {"M": np.array(4, np.int64), "c": np.array(True),
                        "h0": rng.standard_normal(2, dtype=np.float32)})
    assert got[0].shape == (2,)


def test_loop16_seq_none_backend_model():
    """onnx's backend model test_loop16_seq_none (an optional sequence carried through a Loop, set in an If);
    onnx's own runner cannot compare its output (a sequence whose first element is 0-d), so compare with
    onnxruntime here."""
    import onnx.backend.test.loader as loader
    case = next(c for c in loader.load_model_tests(kind="node") if c.name == "test_loop16_seq_none")
    model = case.model
    names = [i.name for i in model.graph.input]
    for inputs, _ in case.data_sets:
        feeds = dict(zip(names, inputs))
        got = check(model, feeds)
        assert isinstance(got[0], list) and got[0][0].ndim == 0


# --- Scan --------------------------------------------------------------------------------------------------------
def scan_body(n_scan: int = 1) -> onnx.GraphProto:
    """state += x_t (+ y_t); out_t = state * x_t."""
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_mid"])]
    ins = [tensor("s_in", TP.FLOAT, [2]), tensor("x_t", TP.FLOAT, [2])]
    if n_scan == 2:
        ins.append(tensor("y_t", TP.FLOAT, [2]))
        nodes.append(helper.make_node("Add", ["s_mid", "y_t"], ["s_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["s_mid"], ["s_out"]))
    nodes.append(helper.make_node("Mul", ["s_out", "x_t"], ["o_t"]))
    return helper.make_graph(nodes, "scan_body", ins, [tensor("s_out", TP.FLOAT, [2]), tensor("o_t", TP.FLOAT, [2])])


@pytest.mark.parametrize("directions", [[0], [1]])
def test_scan8_batch_axis(directions, rng):
    model = make_model([helper.make_node("Scan", ["", "s0", "xs"], ["s_final", "outs"], body=scan_body(),
                                         num_scan_inputs=1, directions=directions)],
                       [tensor("s0", TP.FLOAT, [3, 2]), tensor("xs", TP.FLOAT, [3, 4, 2])],
                       [tensor("s_final", TP.FLOAT, [3, 2]), tensor("outs", TP.FLOAT, [3, 4, 2])], opset=8,
                       ir_version=4)
    check(model, {"s0": rng.standard_normal((3, 2), dtype=np.float32),
                  "xs": rng.standard_normal((3, 4, 2), dtype=np.float32)})


@pytest.mark.parametrize("lens", [[3, 3], [3, 1]])
def test_scan8_sequence_lens(lens, rng):
    lens = np.array(lens, np.int64)
    model = make_model([helper.make_node("Scan", ["lens", "s0", "xs"], ["s_final", "outs"], body=scan_body(),
                                         num_scan_inputs=1)],
                       [tensor("lens", TP.INT64, [2]), tensor("s0", TP.FLOAT, [2, 2]),
                        tensor("xs", TP.FLOAT, [2, 3, 2])],
                       [tensor("s_final", TP.FLOAT, [2, 2]), tensor("outs", TP.FLOAT, [2, 3, 2])], opset=8,
                       ir_version=4)
    check(model, {"lens": lens, "s0": rng.standard_normal((2, 2), dtype=np.float32),
                  "xs": rng.standard_normal((2, 3, 2), dtype=np.float32)})


@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", [
    ([0, 0], [0, 0], [0], [0]),
    ([1, 0], [1, 0], [1], [0]),
    ([-1, 0], [0, 1], [0], [1]),
    ([1, 0], [0, 0], [-1], [1]),
])
def test_scan11_axes_and_directions(in_axes, in_dirs, out_axes, out_dirs, rng):
    t = 5
    xs_shape = {0: (t, 2), 1: (2, t), -1: (2, t)}[in_axes[0]]
    model = make_model([helper.make_node("Scan", ["s0", "xs", "ys"], ["s_final", "outs"], body=scan_body(2),
                                         num_scan_inputs=2, scan_input_axes=in_axes, scan_input_directions=in_dirs,
                                         scan_output_axes=out_axes, scan_output_directions=out_dirs)],
                       [tensor("s0", TP.FLOAT, [2]), tensor("xs", TP.FLOAT, list(xs_shape)),
                        tensor("ys", TP.FLOAT, [t, 2])],
                       [tensor("s_final", TP.FLOAT, [2]), tensor("outs", TP.FLOAT, None)], opset=16)
    check(model, {"s0": rng.standard_normal(2, dtype=np.float32),
                  "xs": rng.standard_normal(xs_shape, dtype=np.float32),
                  "ys": rng.standard_normal((t, 2), dtype=np.float32)})


def test_scan11_body_reads_outer_scope(rng):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_mid"]),
                              helper.make_node("Mul", ["s_mid", "scale"], ["s_out"]),
                              helper.make_node("Sub", ["s_out", "x_t"], ["o_t"])], "body",
                             [tensor("s_in", TP.FLOAT, [2]), tensor("x_t", TP.FLOAT, [2])],
                             [tensor("s_out", TP.FLOAT, [2]), tensor("o_t", TP.FLOAT, [2])])
    model = make_model([helper.make_node("Scan", ["s0", "xs"], ["s_final", "outs"], body=body, num_scan_inputs=1)],
                       [tensor("s0", TP.FLOAT, [2]), tensor("xs", TP.FLOAT, [4, 2]), tensor("scale", TP.FLOAT, [2])],
                       [tensor("s_final", TP.FLOAT, [2]), tensor("outs", TP.FLOAT, [4, 2])], opset=16)
    check(model, {"s0": rng.standard_normal(2, dtype=np.float32), "xs": rng.standard_normal((4, 2), dtype=np.float32),
                  "scale": np.array([0.5, 2.0], np.float32)})



def test_loop_carried_value_grows_every_iteration(rng):
    """A carried value whose shape changes each iteration (a Concat), read by fused elementwise kernels that bind
    per shape: each iteration runs with the kernels for its shapes."""
    body = helper.make_graph([helper.make_node("Concat", ["h_in", "one"], ["grown"], axis=0),
                              helper.make_node("Add", ["grown", "grown"], ["twice"]),
                              helper.make_node("Tanh", ["twice"], ["h_out"]),
                              helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                             [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
                              tensor("h_in", TP.FLOAT, None)],
                             [tensor("cond_out", TP.BOOL, []), tensor("h_out", TP.FLOAT, None)])
    model = make_model([const("one", np.ones(1, np.float32)), const("trips", np.array(5, np.int64)),
                        helper.make_node("Loop", ["trips", "", "h0"], ["h"], body=body)],
                       [tensor("h0", TP.FLOAT, [2])], [tensor("h", TP.FLOAT, None)])
    got = check(model, {"h0": rng.standard_normal(2, dtype=np.float32)})
    assert got[0].shape == (7,)


@pytest.mark.parametrize("op", ["Loop", "Scan"])
def test_failure_in_a_body_names_the_step_and_the_node(op):
    """A kernel failing inside a body (a MatMul of [1, 3] by an outer [4, 2]) raises RuntimeException naming the
    control-flow node, the body's node and its inputs' shapes."""
    mm = helper.make_node("MatMul", ["h_in", "W"], ["h_out"], name="body_matmul")
    if op == "Loop":
        body = helper.make_graph([mm, helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                                 [tensor("i", TP.INT64, []), tensor("cond_in", TP.BOOL, []),
                                  tensor("h_in", TP.FLOAT, [1, 3])],
                                 [tensor("cond_out", TP.BOOL, []), tensor("h_out", TP.FLOAT, None)])
        node = helper.make_node("Loop", ["trips", "", "h0"], ["h"], body=body, name="the_loop")
        extra = [const("trips", np.array(2, np.int64))]
        inputs = [tensor("h0", TP.FLOAT, [1, 3])]
        feeds = {"h0": np.ones((1, 3), np.float32)}
    else:
        body = helper.make_graph([mm], "body", [tensor("h_in", TP.FLOAT, [1, 3])],
                                 [tensor("h_out", TP.FLOAT, None)])
        node = helper.make_node("Scan", ["xs"], ["h"], body=body, num_scan_inputs=1, name="the_loop")
        extra = []
        inputs = [tensor("xs", TP.FLOAT, [2, 1, 3])]
        feeds = {"xs": np.ones((2, 1, 3), np.float32)}
    model = make_model([*extra, node], inputs + [tensor("W", TP.FLOAT, [4, 2])], [tensor("h", TP.FLOAT, None)],
                       opset=17)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(onnxjit.RuntimeException) as info:
        sess.run(None, {**feeds, "W": np.ones((4, 2), np.float32)})
    message = str(info.value)
    assert "the_loop" in message and "body_matmul" in message and "float32[1, 3]" in message, message

# --- SequenceMap -------------------------------------------------------------------------------------------------
def test_sequence_map_with_extra_inputs_and_outer_scope(rng):
    """Body: (x_i, y_i from a second sequence, b a tensor shared by every iteration, k from the outer scope)."""
    body = helper.make_graph([helper.make_node("Add", ["xi", "yi"], ["s"]),
                              helper.make_node("Mul", ["s", "b"], ["m"]),
                              helper.make_node("Add", ["m", "k"], ["out1"]),
                              helper.make_node("Shape", ["xi"], ["out2"])], "body",
                             [tensor("xi", TP.FLOAT, ["n"]), tensor("yi", TP.FLOAT, ["n"]), tensor("b", TP.FLOAT, [1])],
                             [tensor("out1", TP.FLOAT, ["n"]), tensor("out2", TP.INT64, [1])])
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, ["n"]))
    model = make_model([helper.make_node("SequenceMap", ["xs", "ys", "b"], ["o1", "o2"], body=body)],
                       [helper.make_value_info("xs", seq_t), helper.make_value_info("ys", seq_t),
                        tensor("b", TP.FLOAT, [1]), tensor("k", TP.FLOAT, [])],
                       [helper.make_value_info("o1", seq_t),
                        helper.make_value_info("o2", helper.make_sequence_type_proto(
                            helper.make_tensor_type_proto(TP.INT64, [1])))], opset=17)
    lens = [3, 1, 4]
    feeds = {"xs": [rng.standard_normal(n, dtype=np.float32) for n in lens],
             "ys": [rng.standard_normal(n, dtype=np.float32) for n in lens],
             "b": np.array([2.0], np.float32), "k": np.array(0.5, np.float32)}
    got = check(model, feeds)
    assert [a.shape for a in got[0]] == [(n,) for n in lens]


# --- sequences and optionals -------------------------------------------------------------------------------------
def sequence_model() -> onnx.ModelProto:
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [None, 2]))
    nodes = [helper.make_node("SequenceLength", ["s"], ["n"]),
             const("zero", np.array(0, np.int64)),
             helper.make_node("SequenceAt", ["s", "zero"], ["first"]),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
             helper.make_node("SequenceInsert", ["s", "extra"], ["s2"]),
             helper.make_node("SequenceErase", ["s2", "zero"], ["s3"])]
    return make_model(nodes, [helper.make_value_info("s", seq_t), tensor("extra", TP.FLOAT, [None, 2])],
                      [tensor("n", TP.INT64, []), tensor("first", TP.FLOAT, [None, 2]),
                       tensor("cat", TP.FLOAT, [None, 2]), helper.make_value_info("s3", seq_t)], opset=17)


def test_sequence_input_list_of_arrays(rng):
    feeds = {"s": [rng.standard_normal((n, 2), dtype=np.float32) for n in (1, 3, 2)],
             "extra": rng.standard_normal((4, 2), dtype=np.float32)}
    got = check(sequence_model(), feeds)
    assert isinstance(got[3], list) and len(got[3]) == 3


def test_sequence_input_rejects_a_bare_array():
    with pytest.raises(onnxjit.InvalidArgument, match="'s'"):
        onnxjit.InferenceSession(sequence_model()).run(None, {"s": np.ones((2, 2), np.float32),
                                                               "extra": np.ones((1, 2), np.float32)})


def optional_model() -> onnx.ModelProto:
    """o: optional(tensor(float)); y = o + 1 when o holds a value, else [-1, -1]."""
    then_g = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["v"]), const("one", np.float32(1)),
                                helper.make_node("Add", ["v", "one"], ["then_out"])], "then_g", [],
                               [tensor("then_out", TP.FLOAT, [2])])
    else_g = helper.make_graph([const("else_out", np.array([-1, -1], np.float32))], "else_g", [],
                               [tensor("else_out", TP.FLOAT, [2])])
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("If", ["has"], ["y"], then_branch=then_g, else_branch=else_g)]
    return make_model(nodes, [helper.make_value_info("o", opt_t)], [tensor("has", TP.BOOL, []),
                                                                    tensor("y", TP.FLOAT, [2])], opset=18)


@pytest.mark.parametrize("value", [None, np.array([1.5, -2.0], np.float32)], ids=["none", "value"])
def test_optional_input(value):
    got = check(optional_model(), {"o": value})
    assert bool(got[0]) is (value is not None)


@pytest.mark.parametrize("value", [None, np.array([1.5, -2.0], np.float32)], ids=["none", "value"])
def test_optional_passed_through_to_an_output(value):
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2]))
    model = make_model([helper.make_node("Identity", ["o"], ["o2"])], [helper.make_value_info("o", opt_t)],
                       [helper.make_value_info("o2", opt_t)], opset=18)
    check(model, {"o": value})


def test_optional_sequence_input_in_reference_and_onnxruntime(rng):
    """An optional(seq(tensor)) input: None and a list, checked against onnxruntime and onnx.reference."""
    opt_t = helper.make_optional_type_proto(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TP.FLOAT, None)))
    model = make_model([helper.make_node("OptionalHasElement", ["o"], ["has"])],
                       [helper.make_value_info("o", opt_t)], [tensor("has", TP.BOOL, [])], opset=18)
    for value in (None, [rng.standard_normal(2, dtype=np.float32)]):
        got = check(model, {"o": value})
        assert_all_same(got, ref_run(model, {"o": value}))


def test_empty_optional_made_in_the_graph():
    """Optional with only its type attribute makes an empty optional (None)."""
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2]))
    model = make_model([helper.make_node("Optional", [], ["e"], type=helper.make_tensor_type_proto(TP.FLOAT, [2])),
                        helper.make_node("OptionalHasElement", ["e"], ["has"]),
                        helper.make_node("Optional", ["x"], ["full"]),
                        helper.make_node("OptionalHasElement", ["full"], ["has_full"])],
                       [tensor("x", TP.FLOAT, [2])],
                       [tensor("has", TP.BOOL, []), tensor("has_full", TP.BOOL, []), helper.make_value_info("e", opt_t),
                        helper.make_value_info("full", opt_t)], opset=18)
    check(model, {"x": np.array([1.0, 2.0], np.float32)})
