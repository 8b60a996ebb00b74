"""The nine light model-zoo models on the CUDA provider: outputs against the stored ones, then latency against
the other runtimes (onnxruntime on the CPU, and onnxruntime-gpu where it is installed).

usage: python benchmarks/cuda_light.py [--models resnet50,...] [--compare onnxruntime,onnxjit] [--json FILE]

Needs a GPU and numba-cuda (`pip install -e ".[cuda,bench]"`). Timing uses onnxjit.benchmarking (each runtime in
its own blocks of runs, outputs checked against onnxruntime's) on the models with random weights.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx

from onnxjit import benchmarking
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, with_random_weights


def check_stored_outputs(name: str) -> tuple[bool, float, float]:
    """(outputs match the stored ones as the onnx backend test compares them, max |diff|, session seconds)."""
    import onnxjit
    path, feeds, expected = light_model_case(name)
    t0 = time.perf_counter()
    sess = onnxjit.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    seconds = time.perf_counter() - t0
    got = sess.run(None, feeds)
    ok = all(np.allclose(g, w, rtol=1e-3, atol=1e-7) for g, w in zip(got, expected))
    return ok, max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, expected)), seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(LIGHT_MODELS))
    ap.add_argument("--compare", default="onnxruntime,onnxruntime-cuda")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    runtimes = ["onnxjit-cuda"] + [r for r in args.compare.split(",") if r]
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            ok, diff, seconds = check_stored_outputs(name)
            failed += not ok
            print(f"{name}: stored outputs {'match' if ok else 'DIFFER'} (max |diff| {diff:.3g}), session "
                  f"{seconds:.1f} s", flush=True)
            path, feeds, _ = light_model_case(name)
            rw = os.path.join(tmp, f"{name}.onnx")
            onnx.save(with_random_weights(onnx.load(path)), rw)
            results.append(benchmarking.bench_model(rw, feeds, runtimes, repeat=args.repeat, rss=False, name=name))
    print(benchmarking.format_table(results, markdown=True))
    if args.json:
        benchmarking.write_json(results, args.json)
    failed += sum(1 for m in results for r in m.results.values()
                  if r.runtime.startswith("onnxjit") and (r.error or r.ok is False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
