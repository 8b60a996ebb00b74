"""Latency at ORT_DISABLE_ALL vs ORT_ENABLE_ALL for the light models (random weights) and the transformer
layers, beside onnxruntime at its own ORT_ENABLE_ALL; and the layout choice of ORT_ENABLE_ALL (extended vs all)
on depthwise convolutions, one thread and two.

    pytest benchmarks/test_optimizer.py --benchmark-group-by=param:model --benchmark-columns=min,median
"""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import check_against_onnxruntime, make_runner
from onnxjit.testing import transformer
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, with_random_weights


def _light(name):
    path, feeds, _ = light_model_case(name)
    return with_random_weights(onnx.load(path)), feeds


def _layer(build, batch=4, seq=128):
    def make():
        model = build(batch=batch, seq=seq, hidden=256, heads=4)
        return model, transformer.example_feeds(model, batch=batch, seq=seq)
    return make


MODELS = {name: (lambda name=name: _light(name)) for name in LIGHT_MODELS}
MODELS["bert_layer"] = _layer(transformer.bert_layer)
MODELS["gpt2_layer"] = _layer(transformer.gpt2_layer)
RUNS = [("onnxruntime", "all"), ("onnxjit", "disable"), ("onnxjit", "all")]


@pytest.mark.parametrize("runtime,level", RUNS, ids=[f"{r}-{lv}" for r, lv in RUNS])
@pytest.mark.parametrize("model", list(MODELS))
def test_levels(benchmark, rested, model, runtime, level):
    proto, feeds = MODELS[model]()
    mb = proto.SerializeToString()
    run = make_runner(runtime, mb, level)
    out = run(feeds)  # warm-up: compiles onnxjit's kernels
    if runtime == "onnxjit":
        check_against_onnxruntime(mb, feeds, out, rtol=1e-3, atol=1e-4)
    benchmark.extra_info.update(model=model, level=level)
    benchmark.pedantic(run, args=(feeds,), rounds=10, iterations=1, warmup_rounds=2)


def _depthwise(channels, size, convs):
    """`convs` depthwise 3x3 convs (with a Relu after each but the last) on [1, channels, size, size]."""
    def make():
        rng = np.random.default_rng(0)
        nodes, inits, prev = [], [], "x"
        for i in range(convs):
            inits.append(numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), f"w{i}"))
            nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], group=channels, pads=[1, 1, 1, 1]))
            prev = f"c{i}"
            if i < convs - 1:
                nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
                prev = f"r{i}"
        nodes.append(helper.make_node("Identity", [prev], ["y"]))
        shape = [1, channels, size, size]
        graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return model, {"x": rng.standard_normal(shape).astype(np.float32)}
    return make


LAYOUT_MODELS = {"dw_7x7x544": _depthwise(544, 7, 1), "dw_14x14x272": _depthwise(272, 14, 1),
                 "dw_chain3_14x14x272": _depthwise(272, 14, 3)}
LAYOUT_RUNS = [("onnxruntime", "all", 0), ("onnxjit", "extended", 1), ("onnxjit", "all", 1),
               ("onnxjit", "extended", 0), ("onnxjit", "all", 0)]


@pytest.mark.parametrize("runtime,level,threads", LAYOUT_RUNS, ids=[f"{r}-{lv}-{t or 'all'}threads"
                                                                      for r, lv, t in LAYOUT_RUNS])
@pytest.mark.parametrize("model", list(LAYOUT_MODELS))
def test_layout(benchmark, rested, model, runtime, level, threads):
    proto, feeds = LAYOUT_MODELS[model]()
    mb = proto.SerializeToString()
    run = make_runner(runtime, mb, level, threads)
    out = run(feeds)
    if runtime == "onnxjit":
        check_against_onnxruntime(mb, feeds, out, rtol=1e-4, atol=1e-4)
    benchmark.extra_info.update(model=model, level=level, threads=threads)
    benchmark.pedantic(run, args=(feeds,), rounds=200, iterations=1, warmup_rounds=5)
