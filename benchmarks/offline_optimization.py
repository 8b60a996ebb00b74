"""Offline optimization: session creation from the original model at ORT_ENABLE_ALL vs from the model a session
saved through SessionOptions.optimized_model_filepath, loaded with ORT_DISABLE_ALL. The artifact cache is warm
for both (each is created once first), so the difference is the optimizer's own time.

usage: python benchmarks/offline_optimization.py [--models squeezenet,resnet50,...] [--repeat N]
"""
import argparse
import os
import statistics
import tempfile
import time

import onnx

import onnxjit
from onnxjit.providers.cpu import SHOW_PROGRESS_KEY
from onnxjit.testing import transformer
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, with_random_weights

L = onnxjit.GraphOptimizationLevel


def model(name: str) -> onnx.ModelProto:
    if name == "bert_layer":
        return transformer.bert_layer(hidden=256, heads=4)
    if name == "gpt2_layer":
        return transformer.gpt2_layer(hidden=256, heads=4)
    return with_random_weights(onnx.load(light_model_case(name)[0]))


def create_seconds(path: str, level: L, repeat: int) -> float:
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    so.add_session_config_entry(SHOW_PROGRESS_KEY, "0")
    onnxjit.InferenceSession(path, so)  # fills the kernel cache
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        onnxjit.InferenceSession(path, so)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join((*LIGHT_MODELS, "bert_layer", "gpt2_layer")))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print("| model | create at ALL from the original (s) | create at DISABLE from the optimized file (s) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            original = os.path.join(tmp, f"{name}.onnx")
            optimized = os.path.join(tmp, f"{name}.opt.onnx")
            onnx.save(model(name), original)
            so = onnxjit.SessionOptions()
            so.optimized_model_filepath = optimized
            so.add_session_config_entry(SHOW_PROGRESS_KEY, "0")
            onnxjit.InferenceSession(original, so)
            full = create_seconds(original, L.ORT_ENABLE_ALL, a.repeat)
            saved = create_seconds(optimized, L.ORT_DISABLE_ALL, a.repeat)
            print(f"| {name} | {full:.3f} | {saved:.3f} |", flush=True)


if __name__ == "__main__":
    main()
