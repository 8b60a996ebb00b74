"""The `onnxjit` command line."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from onnxjit.session.options import LEVEL_NAMES
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case

def time_runs(run, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def cmd_demo(args) -> int:
    import onnxjit
    path, feeds, expected = light_model_case(args.model)
    print(f"model: {path}")
    t0 = time.perf_counter()
    sess = onnxjit.InferenceSession(path)
    print(f"onnxjit: session created in {time.perf_counter() - t0:.2f} s, providers {sess.get_providers()}")
    print("onnxjit: first run (on a new machine this compiles the kernels, for about half a minute; they are cached "
          "for later processes) ...", flush=True)
    t0 = time.perf_counter()
    got = sess.run(None, feeds)
    print(f"onnxjit: first run {1e3 * (time.perf_counter() - t0):.1f} ms (includes kernel compilation or loading)")
    ok = all(np.allclose(g, e, rtol=1e-3, atol=1e-7) for g, e in zip(got, expected))
    worst = max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))
    print(f"output vs the expected output shipped with the model: {'OK' if ok else 'MISMATCH'} "
          f"(max abs diff {worst:.3g})")
    jit_ms = 1e3 * statistics.median(time_runs(lambda: sess.run(None, feeds), args.runs))
    print(f"onnxjit latency: {jit_ms:.2f} ms (median of {args.runs})")
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime is not installed: no comparison")
        return 0 if ok else 1
    time.sleep(0.5)  # each runtime in its own block: onnxruntime's spinning pool would steal Numba's cores
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref.run(None, feeds)
    ort_ms = 1e3 * statistics.median(time_runs(lambda: ref.run(None, feeds), args.runs))
    print(f"onnxruntime {onnxruntime.__version__} latency: {ort_ms:.2f} ms (median of {args.runs}); "
          f"onnxjit / onnxruntime = {jit_ms / ort_ms:.2f}")
    return 0 if ok else 1


def cmd_optimize(args) -> int:
    import onnx

    from onnxjit.optimizer import format_counts, optimize_model
    t0 = time.perf_counter()
    proto, report = optimize_model(args.input, LEVEL_NAMES[args.level], args.providers.split(","))
    seconds = time.perf_counter() - t0
    onnx.save(proto, args.output)
    print(format_counts(report))
    print(f"optimized at level {args.level} in {seconds:.2f} s; wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="onnxjit", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a model-zoo light model shipped with onnx, check it, time it")
    # not squeezenet: its placeholder weights make the stored output hinge on every channel rounding alike, which
    # some CPUs' BLAS does not do (see tests/test_backend_conformance.py)
    demo.add_argument("--model", default="inception_v1", choices=LIGHT_MODELS)
    demo.add_argument("--runs", type=int, default=10)
    demo.set_defaults(func=cmd_demo)
    opt = sub.add_parser("optimize", help="optimize a model offline and save it; prints node counts per op type")
    opt.add_argument("input", help="the model to optimize (.onnx)")
    opt.add_argument("output", help="where to write the optimized model")
    opt.add_argument("--level", default="all", choices=list(LEVEL_NAMES),
                     help="graph optimization level, as SessionOptions.graph_optimization_level (default: all)")
    opt.add_argument("--providers", default="CPUExecutionProvider",
                     help="comma-separated providers the model will run on (fusions depend on them)")
    opt.set_defaults(func=cmd_optimize)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
