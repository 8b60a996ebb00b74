"""Latency at ORT_DISABLE_ALL vs ORT_ENABLE_ALL for the light models (random weights) and the transformer
layers, beside onnxruntime at its own ORT_ENABLE_ALL.

    pytest benchmarks/test_optimizer.py --benchmark-group-by=param:model --benchmark-columns=min,median
"""
import onnx
import pytest

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
