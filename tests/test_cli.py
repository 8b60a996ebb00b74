"""The `onnxjit` command: the README's demo runs, checks its output and exits 0."""
from onnxjit.cli import main


def test_demo_runs_the_default_model_and_matches_its_stored_output(capsys):
    assert main(["demo", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "output vs the expected output shipped with the model: OK" in out
    assert "onnxruntime" in out and "onnxjit / onnxruntime" in out


def test_optimize_writes_a_valid_model_and_prints_node_counts(tmp_path, capsys):
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    import onnxjit

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Identity", ["a"], ["i"]), helper.make_node("Relu", ["i"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [w, b])
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), src)
    assert main(["optimize", str(src), str(dst), "--level", "all"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line.strip()}
    assert rows["MatMul"] == ["1", "0"] and rows["Identity"] == ["1", "0"] and rows["total"] == ["4", "1"]
    onnx.checker.check_model(onnx.load(dst))
    x = rng.standard_normal((3, 8)).astype(np.float32)
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = onnxjit.InferenceSession(str(dst), so).run(None, {"x": x})[0]
    want = onnxruntime.InferenceSession(str(src)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
