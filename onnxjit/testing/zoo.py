"""The model-zoo "light" models that ship inside the onnx package, as the onnx backend test runs them."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_MODELS = ("squeezenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                "shufflenet", "vgg19", "zfnet512")


def light_model_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_case(name: str) -> tuple[str, dict[str, np.ndarray], list[np.ndarray]]:
    """(model path, feeds, expected outputs) of one light model, with the input the onnx backend test feeds it
    (arange(n)/n in the input's shape)."""
    path = os.path.join(light_model_dir(), f"light_{name}.onnx")
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    expected = []
    for i in range(len(model.graph.output)):
        t = onnx.TensorProto()
        with open(os.path.join(light_model_dir(), f"light_{name}_output_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        expected.append(numpy_helper.to_array(t))
    return path, feeds, expected


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light model with its in-graph ConstantOfShape weights replaced by stored random ones (He-scaled for
    Conv/Gemm/MatMul weights, small for their biases, the original constant elsewhere). The shipped weights are
    uniform, which lets a runtime fold whole convolutions and makes every softmax output equal; random ones
    make the model do real work and its outputs a meaningful comparison."""
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in model.graph.initializer}
    role = {}
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm", "ConvTranspose", "MatMul"):
            for k, name in enumerate(n.input[1:3], start=1):
                role[name] = k
    keep, new = [], []
    for n in model.graph.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]).reshape(-1))
        value = np.zeros(1, np.float32)
        for a in n.attribute:
            if a.name == "value":
                value = numpy_helper.to_array(a.t)
        r = role.get(n.output[0])
        if r == 1 and value.dtype == np.float32:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            arr = (rng.standard_normal(shape) * np.sqrt(2.0 / max(1, fan_in))).astype(np.float32)
        elif r == 2 and value.dtype == np.float32:
            arr = (rng.standard_normal(shape) * 0.01).astype(np.float32)
        else:
            arr = np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
        new.append(numpy_helper.from_array(arr, n.output[0]))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new)
    return m
