"""The `onnxjit` command line."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

LIGHT_MODELS = ("squeezenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                "shufflenet", "vgg19", "zfnet512")


def light_model_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_case(name: str):
    """(model path, feeds, expected outputs) of one of onnx's model-zoo light models, with the input the onnx
    backend test feeds it (arange(n)/n in the input's shape)."""
    import onnx
    from onnx import numpy_helper
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
    t0 = time.perf_counter()
    got = sess.run(None, feeds)
    print(f"onnxjit: first run {1e3 * (time.perf_counter() - t0):.1f} ms (includes kernel compilation)")
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="onnxjit", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a model-zoo light model shipped with onnx, check it, time it")
    demo.add_argument("--model", default="squeezenet", choices=LIGHT_MODELS)
    demo.add_argument("--runs", type=int, default=10)
    demo.set_defaults(func=cmd_demo)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
