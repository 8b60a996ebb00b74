"""Run by tests/test_cache.py in a new process: a few models that between them call many kinds of kernel (generated
parallel and serial ones, a fused reduction, the row kernels, conv and pools over BLAS, indexing kernels with
hashing and heaps, batch normalization, Range, attention: each module of onnxjit/kernels), each compared with
onnxruntime, then the kernels its first run deferred waited for. With `--no-numba-compiler` Numba's target-context
refresh (the start-up of its compiler) raises: the process must load every kernel from the caches without it.

usage: python warm_process_child.py [--no-numba-compiler] [--models=convnet,bert,...]
(prints one JSON line: per model, how many generated kernels it compiled)
"""
import json
import sys

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from conftest import assert_all_same, make_model, ort_run, tensor

import onnxjit
from onnxjit.testing.transformer import bert_layer, example_feeds


def _const(name, arr):
    return nh.from_array(np.asarray(arr), name)


def elementwise(rng):
    """A parallel staged chain with transcendentals (1 << 17 elements), and a serial one with a ReduceSum stage."""
    n = 1 << 17
    nodes = [h.make_node("Mul", ["x", "k"], ["a"]), h.make_node("Tanh", ["a"], ["b"]),
             h.make_node("Sigmoid", ["b"], ["c"]), h.make_node("Sqrt", ["c"], ["y"]),
             h.make_node("Exp", ["s"], ["e"]), h.make_node("ReduceSum", ["e", "axes"], ["r"], keepdims=0)]
    model = make_model(nodes, [tensor("x", T.FLOAT, [n]), tensor("s", T.FLOAT, [4, 8])],
                       [tensor("y", T.FLOAT, [n]), tensor("r", T.FLOAT, [4])], opset=17,
                       initializers=[_const("k", np.float32(0.7)), _const("axes", np.array([1], np.int64))])
    return model, {"x": rng.standard_normal(n).astype(np.float32), "s": rng.standard_normal((4, 8)).astype(np.float32)}


def softmax_layernorm(rng):
    nodes = [h.make_node("Softmax", ["x"], ["s"], axis=-1),
             h.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    model = make_model(nodes, [tensor("x", T.FLOAT, [4, 16, 64])], [tensor("y", T.FLOAT, [4, 16, 64])], opset=17,
                       initializers=[_const("g", rng.standard_normal(64).astype(np.float32)),
                                     _const("b", rng.standard_normal(64).astype(np.float32))])
    return model, {"x": rng.standard_normal((4, 16, 64)).astype(np.float32)}


def convnet(rng):
    nodes = [h.make_node("Conv", ["x", "w", "wb"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Conv", ["p", "dw"], ["d"], group=8, pads=[1, 1, 1, 1]),
             h.make_node("GlobalAveragePool", ["d"], ["g"]), h.make_node("Flatten", ["g"], ["f"]),
             h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits = [_const("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
             _const("wb", rng.standard_normal(8).astype(np.float32)),
             _const("dw", rng.standard_normal((8, 1, 3, 3)).astype(np.float32)),
             _const("fw", rng.standard_normal((5, 8)).astype(np.float32)),
             _const("fb", rng.standard_normal(5).astype(np.float32))]
    model = make_model(nodes, [tensor("x", T.FLOAT, [2, 3, 32, 32])], [tensor("y", T.FLOAT, [2, 5])], opset=17,
                       initializers=inits)
    return model, {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}  # (its first conv on the threads)


def indexing(rng):
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
             h.make_node("Unique", ["u"], ["uy", "ui", "uinv", "uc"], sorted=0),
             h.make_node("CumSum", ["x", "axis"], ["cs"]), h.make_node("ArgMax", ["x"], ["am"], axis=1)]
    model = make_model(nodes, [tensor("x", T.FLOAT, [3, 10]), tensor("u", T.INT64, [12])],
                       [tensor("v", T.FLOAT, None), tensor("i", T.INT64, None), tensor("uy", T.INT64, None),
                        tensor("ui", T.INT64, None), tensor("uinv", T.INT64, None), tensor("uc", T.INT64, None),
                        tensor("cs", T.FLOAT, None), tensor("am", T.INT64, None)], opset=17,
                       initializers=[_const("k", np.array([4], np.int64)), _const("axis", np.array(1, np.int64))])
    return model, {"x": rng.standard_normal((3, 10)).astype(np.float32), "u": rng.integers(0, 5, 12)}


def batchnorm_range(rng):
    """BatchNormalization on a graph input (nothing to fold it into) and a float Range over graph inputs."""
    c = 4
    nodes = [h.make_node("BatchNormalization", ["z", "s", "b", "m", "v"], ["n"], epsilon=1e-5),
             h.make_node("Range", ["start", "limit", "delta"], ["r"])]
    inits = [_const(name, (rng.random(c) + 0.5).astype(np.float32)) for name in ("s", "b", "m", "v")]
    model = make_model(nodes, [tensor("z", T.FLOAT, [2, c, 5, 5]), tensor("start", T.FLOAT, []),
                               tensor("limit", T.FLOAT, []), tensor("delta", T.FLOAT, [])],
                       [tensor("n", T.FLOAT, [2, c, 5, 5]), tensor("r", T.FLOAT, None)], opset=17,
                       initializers=inits)
    return model, {"z": rng.standard_normal((2, c, 5, 5)).astype(np.float32), "start": np.array(-1.5, np.float32),
                   "limit": np.array(2.25, np.float32), "delta": np.array(0.3, np.float32)}


def bert(rng):
    model = bert_layer(batch=2, seq=8, hidden=32, heads=4)
    return model, example_feeds(model, batch=2, seq=8)


MODELS = {"elementwise": elementwise, "softmax_layernorm": softmax_layernorm, "convnet": convnet,
          "indexing": indexing, "batchnorm_range": batchnorm_range, "bert": bert}


def main():
    if "--no-numba-compiler" in sys.argv:
        from numba.core import base

        def refresh(self):
            raise AssertionError("Numba's compiler started (its target context was refreshed)")
        base.BaseContext.refresh = refresh
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.disable_fallback_provider", "1")  # every node on a Numba kernel
    compiled = {}
    chosen = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--models=")), list(MODELS))
    for name in chosen:
        make = MODELS[name]
        model, feeds = make(np.random.default_rng(0))
        sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        assert_all_same(sess.run(None, feeds), ort_run(model, feeds))
        sess.wait_for_compilation()  # what a first run with compile helpers deferred (numpy standing in)
        compiled[name] = sum(k.compiled for k in sess.kernels())
    print(json.dumps(compiled))


if __name__ == "__main__":
    main()
