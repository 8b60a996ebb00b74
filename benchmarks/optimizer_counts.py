"""Node counts at each graph optimization level: the nine model-zoo light models (as shipped with onnx) and the
BERT / GPT-2 layers of onnxjit.testing.transformer. Optimizes only (no kernels are compiled).

    python benchmarks/optimizer_counts.py [--markdown] [--ops] [--random-weights]
"""
import argparse
import time

import onnx

from onnxjit.optimizer import format_counts, optimize_model
from onnxjit.session.options import LEVEL_NAMES
from onnxjit.testing import transformer
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, with_random_weights

LEVELS = {name: LEVEL_NAMES[name] for name in ("disable", "basic", "extended", "all")}


def models(random_weights: bool):
    for name in LIGHT_MODELS:
        proto = onnx.load(light_model_case(name)[0])
        yield name, with_random_weights(proto) if random_weights else proto
    yield "bert_layer", transformer.bert_layer()
    yield "gpt2_layer", transformer.gpt2_layer()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true", help="one table row per model")
    ap.add_argument("--ops", action="store_true", help="print per-op counts at ORT_ENABLE_ALL")
    ap.add_argument("--random-weights", action="store_true",
                    help="light models with stored random weights (as benchmarks/test_optimizer.py runs them) instead "
                         "of their in-graph ConstantOfShape weights, which are graph inputs and so never constant")
    a = ap.parse_args()
    if a.markdown:
        print("| model | " + " | ".join(LEVELS) + " | fused ops at all | optimize s |")
        print("|---" * (len(LEVELS) + 3) + "|")
    for name, proto in models(a.random_weights):
        counts, fused, seconds = [], "", 0.0
        for level, value in LEVELS.items():
            t0 = time.perf_counter()
            _, report = optimize_model(proto, value)
            seconds = time.perf_counter() - t0
            counts.append(sum(report.after.values()))
            if level == "all":
                fused = ", ".join(f"{n} {op.split('::')[-1]}" for op, n in sorted(report.after.items())
                                  if op.startswith("com.onnxjit") or op in ("Gemm", "LayerNormalization", "Gelu",
                                                                             "Attention"))
                if a.ops:
                    print(f"== {name}\n{format_counts(report)}")
        if a.markdown:
            print(f"| {name} | " + " | ".join(map(str, counts)) + f" | {fused or '-'} | {seconds:.2f} |")
        else:
            print(name, dict(zip(LEVELS, counts)), fused)


if __name__ == "__main__":
    main()
