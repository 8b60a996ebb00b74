"""The `onnxjit` command: the README's demo runs, checks its output and exits 0; optimize writes a valid model;
inspect reports a model's counts, partition, fallback reasons and generated kernels."""
import pytest

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


def _inspect_model(path, strings=True):
    """MatMul + Add + Relu (one FusedGemm), Mul + Sigmoid (a generated kernel) over a symbolic batch, and (with
    `strings`) a StringNormalizer, which only the fallback provider runs (onnxruntime cannot create it without the
    en_US.UTF-8 locale)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Mul", ["r", "r"], ["q"]),
             helper.make_node("Sigmoid", ["q"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])]
    if strings:
        nodes.append(helper.make_node("StringNormalizer", ["s"], ["t"], case_change_action="UPPER"))
        inputs.append(helper.make_tensor_value_info("s", TensorProto.STRING, [3]))
        outputs.append(helper.make_tensor_value_info("t", TensorProto.STRING, [3]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def test_inspect_lists_counts_partition_fallback_reason_and_kernels(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    _inspect_model(path)
    assert main(["inspect", str(path), "--dim", "batch=5"]) == 0
    out = capsys.readouterr().out
    assert "input x: tensor(float) ['batch', 8]" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:1].isalpha() and
            len(line.split()) == 3 and line.split()[1].isdigit()}
    assert rows["MatMul"] == ["1", "0"] and rows["com.onnxjit::FusedGemm"] == ["0", "1"] and rows["total"] == ["6", "4"]
    assert "x [5, 8]" in out  # the random input took the --dim size
    assert "CPUExecutionProvider: 2 steps, 3 nodes" in out
    assert "FallbackExecutionProvider: 1 steps, 1 nodes" in out
    assert "no CPU kernel for ai.onnx::StringNormalizer at opset 17" in out
    assert "generated kernels: 1" in out and "[Mul, Sigmoid]" in out


def test_inspect_prints_a_kernels_source_and_names_the_known_ones(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    _inspect_model(path)
    assert main(["inspect", str(path), "--source", "group0"]) == 0
    out = capsys.readouterr().out
    source = out.split("source of group0:", 1)[1]
    assert "def kernel(" in source and "# Mul" in source and "vmath.sigmoid" in source
    assert main(["inspect", str(path), "--source", "nope"]) == 1
    err = capsys.readouterr().err
    assert "no generated kernel named 'nope'" in err and "group0" in err


def test_inspect_rejects_a_bad_dim(tmp_path):
    path = tmp_path / "m.onnx"
    _inspect_model(path)
    with pytest.raises(SystemExit, match="batch=x"):
        main(["inspect", str(path), "--dim", "batch=x"])


def test_run_takes_given_and_random_inputs_and_writes_outputs(tmp_path, capsys):
    import numpy as np
    import onnxruntime

    path = tmp_path / "m.onnx"
    _inspect_model(path)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_file = tmp_path / "out.npz"
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "input x: given float32 [2, 8]" in out and "input s: random object [3]" in out
    assert "output y: float32 [2, 4]  min" in out and "output t: " in out
    saved = np.load(out_file, allow_pickle=True)
    _inspect_model(tmp_path / "numbers.onnx", strings=False)  # the same weights, without the string node
    want = onnxruntime.InferenceSession(str(tmp_path / "numbers.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(saved["y"], want, rtol=1e-5, atol=1e-6)


def test_run_names_a_bad_input(tmp_path):
    import numpy as np

    path = tmp_path / "m.onnx"
    _inspect_model(path)
    np.save(tmp_path / "z.npy", np.zeros(3, np.float32))
    with pytest.raises(SystemExit, match=r"\['z'\] are not inputs of the model"):
        main(["run", str(path), "--input", f"z={tmp_path / 'z.npy'}"])
    with pytest.raises(SystemExit, match="cannot read"):
        main(["run", str(path), "--input", f"x={tmp_path / 'missing.npy'}"])


def test_profile_tables_per_op_type_and_step_and_writes_the_trace(tmp_path, capsys):
    import json

    path = tmp_path / "m.onnx"
    _inspect_model(path, strings=False)
    trace = tmp_path / "trace.json"
    assert main(["profile", str(path), "--dim", "batch=16", "--runs", "3", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    ops = {line.split()[0]: line.split()[1:] for line in out.split("op type", 1)[1].split("\n\n")[0].splitlines()[1:]}
    assert set(ops) == {"FusedGemm", "fused[Mul+Sigmoid]"}
    assert all(row[0] == "1" for row in ops.values())  # one step each per run
    assert abs(sum(float(row[2].rstrip("%")) for row in ops.values()) - 100) < 0.5
    events = json.loads(trace.read_text())
    assert len(events) == (3 + 1) * 2 and all(e["ph"] == "X" for e in events)  # an untimed run, then 3


def test_quiet_turns_the_compile_progress_bar_off(tmp_path):
    """--quiet on the commands that build a session: the session config entry that silences the compile progress
    bar (it shows only on a terminal; under pytest stderr is not one)."""
    import argparse

    from onnxjit.cli import _session
    from onnxjit.providers.cpu import SHOW_PROGRESS_KEY

    path = tmp_path / "m.onnx"
    _inspect_model(path, strings=False)
    for quiet, want in ((True, "0"), (False, None)):
        args = argparse.Namespace(model=str(path), level="all", threads=0, quiet=quiet,
                                  providers="CPUExecutionProvider")
        assert _session(args).get_session_options().config_entries.get(SHOW_PROGRESS_KEY) == want
    assert main(["run", str(path), "--quiet"]) == 0
