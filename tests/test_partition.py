"""Greedy partitioning over providers, and copies where values cross devices."""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import onnxjit
from onnxjit.ir.serde import from_onnx
from onnxjit.providers.base import ExecutionProvider, Step
from onnxjit.providers.fallback import FallbackExecutionProvider
from onnxjit.session.partition import assign, compile_graph


class DeviceArray:
    """A value living on the fake device: only the provider that owns it may look inside."""

    def __init__(self, array):
        self.array = array


class FakeDeviceProvider(ExecutionProvider):
    """Runs Neg on a pretend device: its values must be copied in and out."""

    name = "FakeDeviceProvider"
    device = "fake"

    def __init__(self):
        super().__init__()
        self.copies_in = self.copies_out = 0

    def can_run(self, node):
        return node.op_type == "Neg"

    def compile(self, nodes, compiler):
        def neg(x):
            assert isinstance(x, DeviceArray), "a host value reached the device kernel without a copy"
            return (DeviceArray(-x.array),)
        return [Step([n], self.name, [n.inputs[0].name], [n.outputs[0].name], neg) for n in nodes]

    def from_host(self, value):
        self.copies_in += 1
        return DeviceArray(value)

    def to_host(self, value):
        self.copies_out += 1
        return value.array


class _Compiler:
    opset_imports = {"": 17}

    def __init__(self, providers):
        self.providers = providers

    def compile_subgraph(self, graph):
        return compile_graph(graph, self.providers, self)


def _model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Abs", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["d"])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("b", "d")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=10)  # onnxruntime 1.31 reads IR <= 13


def test_greedy_assignment_follows_priority_order():
    graph = from_onnx(_model()).graph
    device, fallback = FakeDeviceProvider(), FallbackExecutionProvider()
    parts = assign(graph, [device, fallback])
    assert [(p.name, [n.op_type for n in nodes]) for p, nodes in parts] == [
        ("FakeDeviceProvider", ["Neg", "Neg"]), ("FallbackExecutionProvider", ["Abs"]),
        ("FakeDeviceProvider", ["Neg"])]
    parts = assign(graph, [fallback, device])
    assert [p.name for p, _ in parts] == ["FallbackExecutionProvider"]


def test_copies_at_device_boundaries_and_for_outputs():
    model = _model()
    graph = from_onnx(model).graph
    device = FakeDeviceProvider()
    providers = [device, FallbackExecutionProvider()]
    compiled = compile_graph(graph, providers, _Compiler(providers))
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    got = compiled.run({"x": x})
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # x in; b out (graph output and Abs's input: one copy serves both); c in; d out
    assert device.copies_in == 2 and device.copies_out == 2
    assert sum(s.provider == "copy" for s in compiled.steps) == 4


def test_fallback_off_names_the_op_no_provider_runs():
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    node = helper.make_node("Det", ["x"], ["y"], name="det_1")
    model = helper.make_model(helper.make_graph([node], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])]),
                              opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(onnxjit.NotImplemented, match=r"Det.*det_1.*ai\.onnx.*13"):
        onnxjit.InferenceSession(model.SerializeToString(), so)


def test_fallback_string_outputs_are_object_arrays():
    """A string op on the fallback provider (onnx.reference's StringNormalizer gives numpy unicode) hands out an
    object array, as onnxruntime does for string tensors (its own StringNormalizer needs the en_US.UTF-8 locale:
    the values are checked against onnx.reference's)."""
    node = helper.make_node("StringNormalizer", ["s"], ["t"], case_change_action="UPPER")
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TensorProto.STRING,
                                                                                            [3])],
                                                [helper.make_tensor_value_info("t", TensorProto.STRING, [3])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = onnxjit.InferenceSession(model.SerializeToString())
    assert [s.provider for s in sess._compiled.steps] == ["FallbackExecutionProvider"]
    feeds = {"s": np.array(["ab", "c", "dE"], dtype=object)}
    (got,) = sess.run(None, feeds)
    (want,) = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    assert got.dtype == object and got.tolist() == want.tolist()


def test_values_are_dropped_after_their_last_use():
    graph = from_onnx(_model()).graph
    providers = [FallbackExecutionProvider()]
    compiled = compile_graph(graph, providers, _Compiler(providers))
    dropped = {n for names in compiled.frees for n in names}
    assert dropped == {"x", "a", "c"}  # b and d are graph outputs and stay
    assert compiled.frees[[s.outputs[0] for s in compiled.steps].index("c") + 1] == ["c"]


def test_model_saves_back_as_valid_onnx(tmp_path):
    from onnxjit.ir.serde import to_onnx
    model = _model()
    back = to_onnx(from_onnx(model))
    onnx.checker.check_model(back)
    x = np.ones((2, 3), np.float32)
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = onnxruntime.InferenceSession(back.SerializeToString()).run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _recording(compiled, seen):
    """Each step's kernel wrapped to record, as it starts, which of the run's values are still alive."""
    import weakref
    values = {}

    def wrap(step):
        fn = step.fn

        def run(*args):
            seen.append({n for n, ref in values.items() if ref() is not None})
            outs = fn(*args)
            for n, v in zip(step.outputs, outs):
                values[n] = weakref.ref(v)
            return outs
        return run
    for step in compiled.steps:
        step.fn = wrap(step)


def test_the_straight_line_runner_drops_values_after_their_last_use_and_matches_the_loop():
    """A run without profiling goes through the generated straight-line runner: intermediates are released after
    their last reader as the step loop releases them, and the outputs equal the loop's (the profiled run)."""
    graph = from_onnx(_model()).graph
    providers = [FallbackExecutionProvider()]
    compiled = compile_graph(graph, providers, _Compiler(providers))
    seen = []
    _recording(compiled, seen)  # before the first run: the runner is generated then
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    got = compiled.run({"x": x})
    order = [s.outputs[0] for s in compiled.steps]
    # when the step computing d starts: a (read only by b's step) is gone; b (an output) and c (d's input) live
    alive_at_d = seen[order.index("d")]
    assert "a" not in alive_at_d and {"b", "c"} <= alive_at_d
    want = compiled.run({"x": x}, profile=[])  # the loop
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_failing_step_is_reported_alike_by_the_runner_and_the_loop():
    graph = from_onnx(_model()).graph
    providers = [FallbackExecutionProvider()]
    compiled = compile_graph(graph, providers, _Compiler(providers))
    abs_step = next(s for s in compiled.steps if s.nodes and s.nodes[0].op_type == "Abs")

    def broken(v):
        raise ValueError("no luck")
    abs_step.fn = broken
    x = np.ones((2, 3), np.float32)
    messages = []
    for profile in (None, []):
        with pytest.raises(onnxjit.RuntimeException) as e:
            compiled.run({"x": x}, profile=profile)
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert "Abs" in messages[0] and "float32[2, 3]" in messages[0] and "ValueError: no luck" in messages[0]
