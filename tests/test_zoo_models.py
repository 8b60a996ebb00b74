"""The benchmark zoo's parts that need no torch (benchmarks/zoo/): the light models with random weights written
into the cache, the export cache's file names and the table (its comparison and statistics are
onnxjit.benchmarking's: tests/test_benchmarking.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.zoo import export as zoo_export  # noqa: E402
from benchmarks.zoo import run as zoo_run  # noqa: E402


def test_light_model_random_weights_are_written_once_and_do_real_work(tmp_path):
    case = zoo_export.write_light_model("squeezenet", str(tmp_path))
    model = onnx.load(case.path)
    inits = {i.name for i in model.graph.initializer}
    assert not [n for n in model.graph.node if n.op_type == "ConstantOfShape" and n.input[0] in inits]
    conv_weights = [n.input[1] for n in model.graph.node if n.op_type == "Conv"]
    assert conv_weights and all(w in inits for w in conv_weights)
    (x,) = case.load_inputs()
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    mtime = os.path.getmtime(case.path)
    assert zoo_export.write_light_model("squeezenet", str(tmp_path)).path == case.path
    assert os.path.getmtime(case.path) == mtime  # not written again
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onnxruntime.InferenceSession(case.path, so, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, zoo_run.feeds_for(sess, [x]))
    assert np.isfinite(y).all() and np.ptp(y) > 1e-3  # uniform weights would give equal class scores


def test_export_cache_names_carry_model_exporter_and_torch_version_and_failures_are_remembered(tmp_path):
    case = zoo_export.torch_case("resnet18", "dynamo", str(tmp_path))
    name = os.path.basename(case.path)
    assert name.startswith("resnet18-dynamo-torch") and name.endswith(".onnx") and case.error is None
    assert zoo_export.torch_case("resnet18", "torchscript", str(tmp_path)).path != case.path
    with open(case.path[:-len(".onnx")] + ".failed", "w") as f:
        f.write("UnsupportedOperatorError: aten::foo\n")
    failed = zoo_export.torch_case("resnet18", "dynamo", str(tmp_path))
    assert failed.error == "UnsupportedOperatorError: aten::foo"
    assert zoo_run.ensure_exported("resnet18", ["dynamo"], str(tmp_path), False)[0].error == failed.error
    row = zoo_run.measure(failed, "ResNet-18", 1, 1, 0.0, False, False)  # a row, not an exception
    assert row.error == "export failed: UnsupportedOperatorError: aten::foo" and row.onnxjit_ms is None


def test_table_has_a_row_per_case_errors_included_and_the_geometric_mean_of_matching_rows():
    Row = zoo_run.Row
    rows = [Row("resnet18", "dynamo", "ResNet-18", ok=True, max_abs_err=3e-7, onnxjit_ms=30.0, onnxruntime_ms=15.0,
                first_run_s=1.5, kernels_compiled=3, onnxjit_rss_mb=250, onnxruntime_rss_mb=200, fallback_nodes=0),
            Row("gpt2", "torchscript", "GPT-2", ok=False, max_abs_err=0.5, onnxjit_ms=10.0, onnxruntime_ms=1.0,
                first_run_s=0.2, fallback_nodes=2, fallback_ops={"Trilu": 2}),
            Row("vit_tiny", "dynamo", "ViT", onnxruntime_ms=5.0, error="onnxjit: NotImplemented: op Foo"),
            Row("vit_tiny", "torchscript", "ViT", ok=True, max_abs_err=0.0, onnxjit_ms=4.0, onnxruntime_ms=8.0,
                top_ops=[("Conv", 2.0, 1.0)], profiled_ms=(3.0, 2.5))]
    md = zoo_run.format_table(rows, markdown=True).splitlines()
    assert md[0] == "| " + " | ".join(zoo_run.COLUMNS) + " |"
    assert md[2] == ("| resnet18 | dynamo | yes (3.0e-07) | 30.0 | 15.0 | 2.00 | 1.50 (3 new kernels) | 250 | 200 "
                     "| 0 |")
    assert md[3].startswith("| gpt2 | torchscript | NO (5.0e-01) | 10.0 | 1.00 | 10.00 |")
    assert md[3].endswith("| 2: Trilu x2 |")
    assert md[4].startswith("| vit_tiny | dynamo | ERROR: onnxjit: NotImplemented: op Foo | - | 5.00 | - |")
    geo = [line for line in md if line.startswith("geometric mean")]
    assert geo and geo[0].endswith("over the 2 rows whose outputs matched: 1.00")  # sqrt(2.0 * 0.5)
    assert "| vit_tiny | ViT |" in md
    assert md[-1] == "- vit_tiny torchscript: Conv 2.0/1.0 (all ops 3.0/2.5)"
    text = zoo_run.format_table(rows).splitlines()
    assert text[0].split()[:2] == ["model", "exporter"]
    assert len({len(line) for line in text[:5]}) == 1  # aligned columns
