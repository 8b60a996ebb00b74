"""Concat's inputs computed in place (onnxjit/providers/placement.py): the convs and pools producing a channel
concat's inputs write into its output, nested concats fill one array, the other inputs are copied; outputs equal
onnxruntime's, at every run and from concurrent runs."""
from __future__ import annotations

import threading

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxjit
from conftest import assert_all_same, make_model, ort_run, tensor

BUFFER = "::concat_buffer"


def _conv(name, x, cin, cout, rng, k=3):
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) / (cin * k)).astype(np.float32), name + "_w")
    return helper.make_node("Conv", [x, w.name], [name], pads=[k // 2] * 4), w


def _dense_block(rng):
    """A densenet-like block: each layer's conv reads the concat so far and is concatenated to it; the first
    concat also takes a MaxPool's output and the graph input, a conv output is read by a Relu besides its
    concat, and the last concat is a graph output."""
    nodes, inits = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], []
    prev, channels = "x", 4
    for i in range(3):
        conv, w = _conv(f"c{i}", prev, channels, 4, rng)
        nodes.append(conv)
        inits.append(w)
        ins = ["p", "x", f"c{i}"] if i == 0 else [prev, f"c{i}"]
        nodes.append(helper.make_node("Concat", ins, [f"cat{i}"], axis=1))
        prev, channels = f"cat{i}", channels + (8 if i == 0 else 4)
    nodes.append(helper.make_node("Relu", ["c1"], ["r"]))
    return make_model(nodes, [tensor("x", TP.FLOAT, [1, 4, 6, 5])],
                      [tensor(prev, TP.FLOAT, [1, channels, 6, 5]), tensor("r", TP.FLOAT, [1, 4, 6, 5])],
                      initializers=inits)


def test_dense_block_fills_one_array_and_matches_onnxruntime(rng):
    model = _dense_block(rng)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    steps = sess._compiled.steps
    assert sum(s.name.startswith("allocate") for s in steps) == 1  # the three concats share the last one's array
    concats = [s for s in steps if s.nodes and s.nodes[0].op_type == "Concat"]
    # only the graph input is copied: the pool and the convs write in place, the inner concats are views
    assert [[n for n in s.inputs if not n.endswith(BUFFER)] for s in concats] == [["x"], [], []]
    x = rng.standard_normal((1, 4, 6, 5), dtype=np.float32)
    for _ in range(2):  # every run fills a new array
        assert_all_same(sess.run(None, {"x": x}), ort_run(model, {"x": x}))


def test_concurrent_runs_fill_their_own_arrays(rng):
    model = _dense_block(rng)
    sess = onnxjit.InferenceSession(model.SerializeToString())
    xs = [rng.standard_normal((1, 4, 6, 5), dtype=np.float32) for _ in range(4)]
    want = [ort_run(model, {"x": x}) for x in xs]
    got: dict[int, list] = {}

    def run(i):
        for _ in range(20):
            got[i] = sess.run(None, {"x": xs[i]})
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert_all_same(got[i], want[i])


def test_concat_of_batched_or_unknown_shapes_copies(rng):
    """A concat along channels of two images is not one run per input: it copies, as before."""
    conv_a, wa = _conv("a", "x", 3, 4, rng)
    conv_b, wb = _conv("b", "x", 3, 2, rng, k=1)
    model = make_model([conv_a, conv_b, helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
                       [tensor("x", TP.FLOAT, [2, 3, 5, 5])], [tensor("y", TP.FLOAT, [2, 6, 5, 5])],
                       initializers=[wa, wb])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    assert not any(s.name.startswith("allocate") for s in sess._compiled.steps)
    x = rng.standard_normal((2, 3, 5, 5), dtype=np.float32)
    assert_all_same(sess.run(None, {"x": x}), ort_run(model, {"x": x}))


def test_a_placed_value_that_is_also_a_graph_output_is_not_placed(rng):
    conv_a, wa = _conv("a", "x", 3, 4, rng)
    conv_b, wb = _conv("b", "x", 3, 2, rng)
    model = make_model([conv_a, conv_b, helper.make_node("Concat", ["a", "b"], ["y"], axis=-3)],
                       [tensor("x", TP.FLOAT, [1, 3, 5, 5])],
                       [tensor("y", TP.FLOAT, [1, 6, 5, 5]), tensor("a", TP.FLOAT, [1, 4, 5, 5])],
                       initializers=[wa, wb])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    concat = next(s for s in sess._compiled.steps if s.nodes and s.nodes[0].op_type == "Concat")
    assert [n for n in concat.inputs if not n.endswith(BUFFER)] == ["a"]  # the output is copied, b placed
    x = rng.standard_normal((1, 3, 5, 5), dtype=np.float32)
    got = sess.run(None, {"x": x})
    assert_all_same(got, ort_run(model, {"x": x}))
    assert not np.shares_memory(got[0], got[1])  # an array of its own, not a view of y
