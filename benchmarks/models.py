"""Benchmark models built with onnx.helper: the cases the issues state speed targets for."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def _vi(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def _c(name, arr):
    return nh.from_array(np.asarray(arr, dtype=np.float32), name)


def ew_chain(rng):
    """8 elementwise nodes onnxruntime has no fusion pattern for, over 4M float32."""
    n = 4 * 1024 * 1024
    nodes = [h.make_node("Mul", ["x", "k1"], ["a"]), h.make_node("Add", ["a", "k2"], ["b"]),
             h.make_node("Tanh", ["b"], ["c"]), h.make_node("Mul", ["c", "x"], ["d"]),
             h.make_node("Sigmoid", ["d"], ["e"]), h.make_node("Sub", ["e", "k3"], ["f"]),
             h.make_node("Abs", ["f"], ["g"]), h.make_node("Sqrt", ["g"], ["y"])]
    m = _model(nodes, [_vi("x", [n])], [_vi("y", [n])], [_c("k1", 0.7), _c("k2", 0.1), _c("k3", -0.5)])
    return m, {"x": rng.standard_normal(n).astype(np.float32)}


def tiny_adds(rng):
    """200 chained Adds on [1,16]: per-node overhead."""
    nodes, prev = [], "x"
    for i in range(200):
        nodes.append(h.make_node("Add", [prev, "k"], [f"t{i}" if i < 199 else "y"]))
        prev = f"t{i}"
    m = _model(nodes, [_vi("x", [1, 16])], [_vi("y", [1, 16])], [_c("k", np.ones((1, 16)))])
    return m, {"x": rng.standard_normal((1, 16)).astype(np.float32)}


def softmax_ln(rng):
    """Softmax then LayerNormalization on [64,128,768]."""
    nodes = [h.make_node("Softmax", ["x"], ["s"], axis=-1),
             h.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    m = _model(nodes, [_vi("x", [64, 128, 768])], [_vi("y", [64, 128, 768])],
               [_c("g", rng.standard_normal(768)), _c("b", rng.standard_normal(768))])
    return m, {"x": rng.standard_normal((64, 128, 768)).astype(np.float32)}


CASES = {"ew_chain": ew_chain, "tiny_adds": tiny_adds, "softmax_ln": softmax_ln}
