"""Which kernel a float32 conv shape should run on: the default plan against each alternative path, as in a network.

Each case is a model of 4 convs of one shape, each with its own weights, all reading one input (their Relu
outputs summed): as in a network, every conv's weights come from memory once per run, which a single conv timed
over and over does not show (Winograd's transformed weights are 4x the raw ones: a chain of 256->256 3x3 convs
over 14x14 pixels ran 1250-1350 us a conv on Winograd, one such conv alone 764-830, on an Emerald Rapids VM).
The paths are forced through ops.nn's planning constants, every session in this one process, timed in
alternating blocks (both orders), the best block per path; outputs are checked against the default's. Prints,
per shape, the kernel each path ran and its time per conv.

usage: python benchmarks/conv_paths.py [--threads 2] [--shapes "cin,cout,hw,k,stride;..."] [--rounds 6]
"""
from __future__ import annotations

import argparse
import time
from typing import ClassVar

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.ops import nn as ops_nn

# resnet/inception/squeezenet/mobilenet-style shapes: (input channels, output channels, plane, kernel, stride)
SHAPES = [(256, 256, 14, 3, 1), (512, 512, 7, 3, 1), (128, 128, 28, 3, 1), (64, 64, 56, 3, 1),
          (128, 256, 28, 3, 2), (256, 512, 14, 3, 2), (160, 224, 7, 3, 1), (64, 256, 13, 3, 1),
          (96, 256, 27, 5, 1), (3, 64, 224, 7, 2), (3, 16, 224, 3, 2), (576, 96, 14, 1, 1), (112, 672, 14, 1, 1)]
BIG = 10 ** 9
# the planning constants that force each path (those a shape does not qualify for leave it on the default)
PATHS = {
    "default": {},
    "no winograd": {"WINOGRAD_MIN_TILES": BIG, "WINOGRAD_MIN_TILES_F32": BIG},
    "winograd from 4x4 tiles": {"WINOGRAD_MIN_TILES_F32": 16},
    "winograd on BLAS": {"WINOGRAD_PACKED": False},
}
CONVS = 4


def model(cin, cout, hw, k, stride):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    for i in range(CONVS):
        w = rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", ["x", f"w{i}", f"b{i}"], [f"c{i}"], pads=[k // 2] * 4,
                                   strides=[stride, stride], kernel_shape=[k, k]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    nodes.append(helper.make_node("Sum", [f"r{i}" for i in range(CONVS)], ["y"]))
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [1, cin, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString(), {"x": rng.standard_normal((1, cin, hw, hw)).astype(np.float32)}


class _KernelSpy(ops_nn.CallSite):
    """The conv kernels' call sites, remembering which kernel ran."""
    seen: ClassVar[list] = []

    def run(self, args, n_units, work):
        _KernelSpy.seen.append(getattr(self.kernel, "__name__", "?"))
        return super().run(args, n_units, work)


def session(model_bytes, feeds, threads, constants):
    saved = {name: getattr(ops_nn, name) for name in constants}
    for name, value in constants.items():
        setattr(ops_nn, name, value)
    try:
        so = onnxjit.SessionOptions()
        so.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        _KernelSpy.seen = []
        y = sess.run(None, feeds)[0]  # the plan is made at the first run, under these constants
        return sess, y, _KernelSpy.seen[0] if _KernelSpy.seen else "?"
    finally:
        for name, value in saved.items():
            setattr(ops_nn, name, value)


def best_block(sess, feeds, runs=8):
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="", help='"cin,cout,hw,k,stride;..." (default: a built-in list)')
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in a.shapes.split(";")] if a.shapes else SHAPES
    ops_nn.CallSite = _KernelSpy
    for shape in shapes:
        model_bytes, feeds = model(*shape)
        runs = {}
        for name, constants in PATHS.items():
            sess, y, kernel = session(model_bytes, feeds, a.threads, constants)
            if runs:
                np.testing.assert_allclose(y, runs["default"][1], rtol=1e-3, atol=1e-3)
            runs[name] = [sess, y, kernel, []]
        for r in range(a.rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                time.sleep(0.05)
                runs[name][3].append(best_block(runs[name][0], feeds))
        cin, cout, hw, k, stride = shape
        cells = "  ".join(f"{name}: {v[2]} {min(v[3]) / CONVS * 1e6:.0f} us" for name, v in runs.items())
        print(f"{cin}->{cout} {k}x{k}/{stride} over {hw}x{hw}: {cells}", flush=True)


if __name__ == "__main__":
    main()
