"""onnxjit.benchmarking and `onnxjit bench`: outputs checked against onnxruntime's, runtimes timed in turns, a
runtime that fails or disagrees reported (and the command exiting 1), the table, JSON and plot."""
import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxjit import benchmarking
from onnxjit.cli import main


def test_compare_outputs_tolerance_shapes_dtypes_and_nan():
    w = np.array([1.0, -2.0, 1000.0], np.float32)
    ok, err = benchmarking.compare_outputs([w + np.float32(5e-5)], [w])
    assert ok and err == pytest.approx(5e-5, abs=2e-5)
    assert benchmarking.compare_outputs([w * np.float32(1.0005)], [w])[0]  # within rtol 1e-3
    ok, err = benchmarking.compare_outputs([w + np.float32(0.01)], [w])
    assert not ok and err == pytest.approx(0.01, rel=0.1)
    assert benchmarking.compare_outputs([w[:2]], [w]) == (False, math.inf)
    assert benchmarking.compare_outputs([w.astype(np.float64)], [w]) == (False, math.inf)
    assert benchmarking.compare_outputs([w], [w, w]) == (False, math.inf)
    nan = np.array([np.nan, 1.0], np.float32)
    assert not benchmarking.compare_outputs([nan], [np.array([0.0, 1.0], np.float32)])[0]
    assert benchmarking.compare_outputs([np.array([np.inf], np.float32)], [np.array([np.inf], np.float32)]) == (True, 0)
    ints = np.array([1, 2, 3], np.int64)
    assert benchmarking.compare_outputs([ints], [ints]) == (True, 0.0)
    assert not benchmarking.compare_outputs([ints + 1], [ints])[0]


def test_geometric_mean_skips_missing_ratios():
    assert benchmarking.geometric_mean([2.0, 0.5, None]) == pytest.approx(1.0)
    assert benchmarking.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    assert benchmarking.geometric_mean([None]) is None


def _model(path):
    """Gemm + Relu + Sigmoid over a symbolic batch."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return str(path)


def test_bench_compares_runtimes_and_writes_json_and_plot(tmp_path, capsys):
    path = _model(tmp_path / "m.onnx")
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    assert main(["bench", path, "--compare", "onnxruntime,reference", "--dim", "batch=5", "--repeat", "3",
                 "--rounds", "2", "--rest", "0", "--no-rss", "--json", str(out_json), "--plot", str(out_png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["model", "runtime", "outputs"]
    rows = {line.split()[1]: line for line in lines[1:4]}
    assert set(rows) == {"onnxjit", "onnxruntime", "reference"}
    assert "ok (abs" in rows["onnxjit"] and "(baseline)" in rows["onnxruntime"] and "ok (abs" in rows["reference"]
    (result,) = json.loads(out_json.read_text())
    assert result["validated_against"] == "onnxruntime"
    for name, r in result["results"].items():
        assert r["ok"] is True and r["error"] is None and r["runs"] == 6, name
        assert 0 < r["median_ms"] <= r["p90_ms"] and r["create_s"] >= 0 and r["first_run_s"] > 0
        assert r["ratio_to_onnxruntime"] == pytest.approx(r["median_ms"] / result["results"]["onnxruntime"]
                                                          ["median_ms"])
    assert result["results"]["onnxjit"]["fallback_ops"] == {}
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_reports_a_mismatch_and_a_failing_runtime_and_exits_1(tmp_path, capsys, monkeypatch):
    """A runtime whose outputs are off the tolerance is a MISMATCH row with its differences; one that fails to
    start is an ERROR row; the others are still measured, and the command exits 1."""
    path = _model(tmp_path / "m.onnx")
    make = benchmarking.make_session

    class Off:  # onnx.reference's outputs, 1% high
        def __init__(self, sess):
            self.sess = sess

        def run(self, names, feeds):
            return [y * np.float32(1.01) for y in self.sess.run(names, feeds)]

    monkeypatch.setattr(benchmarking, "make_session",
                        lambda runtime, *a, **k: Off(make(runtime, *a, **k)) if runtime == "reference"
                        else make(runtime, *a, **k))
    assert main(["bench", path, "--compare", "onnxruntime,reference", "--repeat", "2", "--rounds", "1",
                 "--rest", "0", "--no-rss", "--quiet"]) == 1
    captured = capsys.readouterr()
    row = next(line for line in captured.out.splitlines() if line.split()[1:2] == ["reference"])
    assert "MISMATCH (abs" in row and "rel 1.0e-02" in row
    assert "failed or outputs off the tolerance: m.onnx on reference" in captured.err

    def broken(runtime, *a, **k):
        if runtime == "reference":
            raise RuntimeError("cannot load")
        return make(runtime, *a, **k)

    monkeypatch.setattr(benchmarking, "make_session", broken)
    result = benchmarking.bench_model(path, {"x": np.ones((2, 8), np.float32)},
                                      ("onnxjit", "onnxruntime", "reference"), repeat=2, rounds=1, rest=0, rss=False)
    assert result.results["reference"].error == "RuntimeError: cannot load"
    assert result.results["onnxjit"].ok and result.results["onnxjit"].median_ms > 0
    assert "ERROR: RuntimeError: cannot load" in benchmarking.format_table([result])


def test_bench_peak_rss_of_each_runtime_in_a_child_process(tmp_path):
    path = _model(tmp_path / "m.onnx")
    result = benchmarking.bench_model(path, {"x": np.ones((3, 8), np.float32)}, repeat=1, rounds=1, rest=0)
    rss = {name: r.peak_rss_mb for name, r in result.results.items()}
    assert all(mb is not None and mb > 20 for mb in rss.values()), rss


def test_bench_several_models_one_table_with_the_geometric_mean(tmp_path, capsys):
    a, b = _model(tmp_path / "a.onnx"), _model(tmp_path / "b.onnx")
    assert main(["bench", a, b, "--repeat", "2", "--rounds", "1", "--rest", "0", "--no-rss", "--markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| model | runtime |") and len([line for line in out if line.startswith("| ")]) == 5
    assert out[-1].startswith("geometric mean of onnxjit / onnxruntime over the 2 models whose outputs matched")


def test_bench_rejects_an_unknown_runtime_and_a_bad_input(tmp_path):
    path = _model(tmp_path / "m.onnx")
    with pytest.raises(SystemExit, match="unknown runtime 'tvm'"):
        main(["bench", path, "--compare", "tvm"])
    np.save(tmp_path / "z.npy", np.zeros(3, np.float32))
    with pytest.raises(SystemExit, match=r"\['z'\] are not inputs of"):
        main(["bench", path, "--input", f"z={tmp_path / 'z.npy'}"])


def test_commands_take_a_light_models_name(tmp_path, capsys):
    """run, inspect, profile and bench take the name of a light model the onnx package ships as MODEL (the
    README's demo model here: its outputs do not hinge on rounding), and name the choices for a wrong one."""
    assert main(["run", "inception_v1"]) == 0
    assert "output prob_1: float32 [1, 1000]" in capsys.readouterr().out
    assert main(["inspect", "light_inception_v1", "--no-run"]) == 0
    assert "CPUExecutionProvider:" in capsys.readouterr().out
    assert main(["profile", "inception_v1", "--runs", "2", "--trace", str(tmp_path / "t.json")]) == 0
    assert "op type" in capsys.readouterr().out
    assert main(["bench", "inception_v1", "--repeat", "2", "--rounds", "1", "--rest", "0", "--no-rss"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:3]
    assert rows[0].split()[:3] == ["light_inception_v1.onnx", "onnxjit", "ok"]
    with pytest.raises(SystemExit):
        main(["run", "inception_v9"])
    assert "neither a file nor a light model's name (squeezenet, resnet50" in capsys.readouterr().err
