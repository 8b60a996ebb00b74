"""Control flow with small bodies, and a tiny model: onnxjit against onnxruntime, where per-step and per-iteration
overhead is the whole cost (issue 12's target: within 1.5x of onnxruntime).

Cases (float32, fixed-seed weights):
  if_matmul     an If whose branches hold a [1,64]x[64,64] MatMul + Relu (then) or an Add (else)
  loop_rnn      a Loop of 32 trips over a [1,64] state: h = tanh(h @ W + b), h also a scan output
  scan_rnn      a Scan over 32 steps of [1,64] inputs: h = tanh(h @ W + x_t @ U), h a scan output
  tiny_chain    24 small elementwise and MatMul nodes on [1,16] values (no control flow)

Each runtime is timed in blocks of runs with a rest between them (benchmarks/ml_timing.py), 2 intra-op threads
each unless --threads says otherwise; outputs are checked against onnxruntime's first.

usage: python benchmarks/control_flow.py [--cases if_matmul,loop_rnn] [--rounds 5] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ml_timing import compare_blocks, cpu_name  # noqa: E402

H = 64
STEPS = 32
F = TensorProto.FLOAT


def _weights(rng, *names, n=H):
    return [numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), name)
            for name in names]


def _model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def if_matmul():
    rng = np.random.default_rng(0)
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t0"]),
                                helper.make_node("Relu", ["t0"], ["y_then"])], "then", [],
                               [helper.make_tensor_value_info("y_then", F, [1, H])])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y_else"])], "else", [],
                               [helper.make_tensor_value_info("y_else", F, [1, H])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "if_matmul",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", F, [1, H])],
                          [helper.make_tensor_value_info("y", F, [1, H])], _weights(rng, "W"))
    return _model(g), {"c": np.array(True), "x": rng.standard_normal((1, H)).astype(np.float32)}


def loop_rnn():
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("Add", ["hw", "b"], ["hb"]),
         helper.make_node("Tanh", ["hb"], ["h_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", F, [1, H])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, [1, H]), helper.make_tensor_value_info("h_scan", F, [1, H])])
    inits = _weights(rng, "W") + [numpy_helper.from_array((0.1 * rng.standard_normal(H)).astype(np.float32), "b"),
                                  numpy_helper.from_array(np.array(STEPS, np.int64), "trips"),
                                  numpy_helper.from_array(np.array(True), "go")]
    g = helper.make_graph([helper.make_node("Loop", ["trips", "go", "h0"], ["h", "hs"], body=body)], "loop_rnn",
                          [helper.make_tensor_value_info("h0", F, [1, H])],
                          [helper.make_tensor_value_info("h", F, [1, H]), helper.make_tensor_value_info("hs", F, None)],
                          inits)
    return _model(g), {"h0": rng.standard_normal((1, H)).astype(np.float32)}


def scan_rnn():
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("MatMul", ["x_t", "U"], ["xu"]),
         helper.make_node("Add", ["hw", "xu"], ["s"]), helper.make_node("Tanh", ["s"], ["h_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [helper.make_tensor_value_info("h_in", F, [1, H]), helper.make_tensor_value_info("x_t", F, [1, H])],
        [helper.make_tensor_value_info("h_out", F, [1, H]), helper.make_tensor_value_info("h_scan", F, [1, H])])
    g = helper.make_graph([helper.make_node("Scan", ["h0", "xs"], ["h", "hs"], body=body, num_scan_inputs=1)],
                          "scan_rnn", [helper.make_tensor_value_info("h0", F, [1, H]),
                                       helper.make_tensor_value_info("xs", F, [STEPS, 1, H])],
                          [helper.make_tensor_value_info("h", F, [1, H]), helper.make_tensor_value_info("hs", F, None)],
                          _weights(rng, "W", "U"))
    return _model(g), {"h0": rng.standard_normal((1, H)).astype(np.float32),
                       "xs": rng.standard_normal((STEPS, 1, H)).astype(np.float32)}


def tiny_chain():
    rng = np.random.default_rng(0)
    nodes, prev = [], "x"
    for i in range(8):  # MatMul -> Add -> Sigmoid, three steps the fuser cannot merge into one
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", "b"], [f"a{i}"]), helper.make_node("Sigmoid", [f"a{i}"], [f"s{i}"])]
        prev = f"s{i}"
    inits = _weights(rng, *[f"W{i}" for i in range(8)], n=16) + [
        numpy_helper.from_array((0.1 * rng.standard_normal(16)).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "tiny_chain", [helper.make_tensor_value_info("x", F, [1, 16])],
                          [helper.make_tensor_value_info(prev, F, [1, 16])], inits)
    return _model(g), {"x": rng.standard_normal((1, 16)).astype(np.float32)}


CASES = {"if_matmul": if_matmul, "loop_rnn": loop_rnn, "scan_rnn": scan_rnn, "tiny_chain": tiny_chain}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import onnxruntime as ort

    import onnxjit
    print(f"{cpu_name()}, onnxruntime {ort.__version__}, {a.threads} intra-op threads each")
    ratios = {}
    for name in a.cases.split(","):
        model, feeds = CASES[name]()
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.log_severity_level = 3
        ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        jo = onnxjit.SessionOptions()
        jo.intra_op_num_threads = a.threads
        jit = onnxjit.InferenceSession(model, jo, providers=["CPUExecutionProvider"])
        for want, got in zip(ref.run(None, feeds), jit.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        print(name)
        ratios[name] = compare_blocks(ref, jit, feeds, 1, a.rounds)
    print("ratios (best blocks): " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
