"""The `onnxjit` command line."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from onnxjit.benchmarking import settle
from onnxjit.session.options import LEVEL_NAMES
from onnxjit.testing.zoo import LIGHT_MODELS, light_model_case, light_model_dir


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
    print("onnxjit: first run (on a new machine the kernels compile, most of them in the background after it, "
          "numpy standing in meanwhile; they are cached for later processes) ...", flush=True)
    t0 = time.perf_counter()
    got = sess.run(None, feeds)
    print(f"onnxjit: first run {1e3 * (time.perf_counter() - t0):.1f} ms (includes kernel compilation or loading)")
    ok = all(np.allclose(g, e, rtol=1e-3, atol=1e-7) for g, e in zip(got, expected))
    worst = max(float(np.max(np.abs(g.astype(np.float64) - e))) for g, e in zip(got, expected))
    print(f"output vs the expected output shipped with the model: {'OK' if ok else 'MISMATCH'} "
          f"(max abs diff {worst:.3g})")
    t0 = time.perf_counter()
    settle(sess, feeds)
    print(f"onnxjit: steady after {time.perf_counter() - t0:.2f} s more (kernels the first run left to the background, "
          f"native segments)")
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


def _dims(items: list[str]) -> dict[str, int]:
    """--dim name=value pairs as a dict, or SystemExit naming the bad one."""
    dims = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit() or int(value) < 0:
            raise SystemExit(f"onnxjit: --dim {item!r} is not NAME=SIZE with a size >= 0")
        dims[name] = int(value)
    return dims


def random_feeds(inputs, dims: dict[str, int], seed: int = 0, skip=()) -> dict[str, np.ndarray]:
    """Random tensors for each of the `inputs` (values with a name and an IR type: a session's, or those of
    onnxjit.benchmarking.model_inputs) but those in `skip`: symbolic dims from `dims` (else 1), unknown dims 1;
    floats standard normal, integers in [0, 4), booleans and strings random. Other input kinds (sequences, maps)
    raise SystemExit naming the input."""
    from onnxjit.ir.types import TensorType
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in inputs:
        if value.name in skip:
            continue
        t = value.type
        if not isinstance(t, TensorType) or t.shape is None:
            raise SystemExit(f"onnxjit: input {value.name!r} is {t}: random inputs are made for tensors of known "
                             f"rank only")
        shape = [d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1 for d in t.shape]
        dtype = t.dtype
        if dtype.kind == "f":
            arr = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            arr = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.random(shape) < 0.5
        elif dtype.kind == "O":
            arr = rng.choice(np.array(["a", "b", "c"], dtype=object), shape)
        else:
            arr = rng.standard_normal(shape).astype(dtype)
        feeds[value.name] = arr
    return feeds


def _cpu_refusal(node) -> str:
    """Why the CPU provider does not run `node` (it went to a provider after it)."""
    from onnxjit.ops.registry import builder_for
    if builder_for(node) is None:
        return f"no CPU kernel for {node.domain or 'ai.onnx'}::{node.op_type} at opset {node.opset}"
    return "the CPU kernel does not take this node's input types or attributes"


def cmd_inspect(args) -> int:
    import onnx

    model = onnx.load(args.model, load_external_data=False)
    t0 = time.perf_counter()
    sess = _session(args)
    created = time.perf_counter() - t0
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"model: {args.model} (IR version {model.ir_version}; opsets {opsets}; producer "
          f"{model.producer_name or '-'} {model.producer_version})")
    for kind, args_ in (("input", sess.get_inputs()), ("output", sess.get_outputs())):
        for a in args_:
            print(f"  {kind} {a.name}: {a.type} {a.shape}")
    report = sess.optimization_report
    if report is not None:
        print(f"\nnodes per op type, before and after optimization at level {args.level} "
              f"(session created in {created:.2f} s):")
        from onnxjit.optimizer import format_counts
        print(format_counts(report))
    if not args.no_run:
        feeds, _ = _feeds(args, sess._inputs)
        t0 = time.perf_counter()
        sess.run(None, feeds)
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
        print(f"\nran once on given or random inputs ({shapes}) in {time.perf_counter() - t0:.2f} s (kernels "
              f"compiled or loaded)")
    print("\nsteps per provider (a fused step runs several nodes as one kernel):")
    steps = sess._compiled.steps
    for provider in sess.get_providers():
        mine = [st for st in steps if st.provider == provider]
        print(f"  {provider}: {len(mine)} steps, {sum(len(st.nodes) for st in mine)} nodes")
    cpu_first = sess.get_providers() and sess.get_providers()[0] == "CPUExecutionProvider"
    for st in steps:
        if st.provider == "FallbackExecutionProvider":
            for node in st.nodes:
                why = f": {_cpu_refusal(node)}" if cpu_first else ""
                print(f"  fallback: {node.label}{why}")
    kernels = sess.kernels()
    print(f"\ngenerated kernels: {len(kernels)}" + ("" if kernels or not args.no_run else
                                                     " (run the model to generate them: leave out --no-run)"))
    for info in kernels:
        print(f"  {info.name} ({info.provider}): {len(info.nodes)} nodes [{', '.join(info.nodes)}]; "
              f"specializations {', '.join(info.sources) or '-'}")
    if args.source:
        sources = {name: src for info in kernels for name, src in info.sources.items()}
        sources.update({info.name: next(iter(info.sources.values())) for info in kernels if info.sources})
        if args.source not in sources:
            print(f"onnxjit: no generated kernel named {args.source!r}; kernels with a source so far: "
                  f"{', '.join(sorted(sources)) or 'none'}", file=sys.stderr)
            return 1
        print(f"\nsource of {args.source}:\n{sources[args.source]}")
    return 0


def _given_inputs(items: list[str]) -> dict[str, np.ndarray]:
    """--input name=file.npy pairs, loaded; SystemExit naming a bad item or an unreadable file."""
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"onnxjit: --input {item!r} is not NAME=FILE.npy")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SystemExit(f"onnxjit: --input {name}: cannot read {path!r} as a .npy file: {e}") from e
    return feeds


def _summary(value) -> str:
    """An output's dtype, shape and a few statistics (numbers) or first values (others)."""
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (f" {type(value[0]).__name__}" if value else "")
    a = np.asarray(value)
    head = f"{a.dtype} {list(a.shape)}"
    if a.size and a.dtype.kind in "fiub":
        f = a.astype(np.float64)
        return (f"{head}  min {np.nanmin(f):.6g}  max {np.nanmax(f):.6g}  mean {np.nanmean(f):.6g}"
                + (f"  ({int(np.isnan(f).sum())} NaN)" if np.isnan(f).any() else ""))
    return f"{head}  first {a.reshape(-1)[:3].tolist()}"


def cmd_run(args) -> int:
    sess = _session(args)
    feeds, given = _feeds(args, sess._inputs, args.seed)
    for name, value in feeds.items():
        print(f"input {name}: {'given' if name in given else 'random'} {value.dtype} {list(value.shape)}")
    t0 = time.perf_counter()
    outputs = sess.run(None, feeds)
    print(f"ran in {time.perf_counter() - t0:.3f} s (the first run compiles or loads the kernels)")
    names = [o.name for o in sess.get_outputs()]
    for name, value in zip(names, outputs):
        print(f"output {name}: {_summary(value)}")
    if args.output:
        arrays = {n: np.asarray(v) for n, v in zip(names, outputs) if not isinstance(v, list)}
        np.savez(args.output, **arrays)
        print(f"wrote {len(arrays)} outputs to {args.output}")
    return 0


def cmd_profile(args) -> int:
    import collections
    import json

    warm = _session(args)
    feeds, _ = _feeds(args, warm._inputs)
    warm.run(None, feeds)  # compiles or loads the kernels, unprofiled
    prefix = os.path.splitext(args.trace)[0] + "_" if args.trace else "onnxjit_profile_"
    sess = _session(args, enable_profiling=True, profile_file_prefix=prefix)
    sess.run(None, feeds)  # its plans and prepared kernels: not timed
    t0 = time.perf_counter()
    for _ in range(args.runs):
        sess.run(None, feeds)
    per_run = (time.perf_counter() - t0) / args.runs
    path = sess.end_profiling()
    if args.trace:
        os.replace(path, args.trace)
        path = args.trace
    with open(path) as f:
        events = json.load(f)
    steps = len(events) // (args.runs + 1)
    timed = events[steps:]  # the runs after the untimed one
    by_op, by_node = collections.Counter(), collections.Counter()
    counts = collections.Counter()
    for e in timed:
        nodes = e["args"].get("nodes", [])
        # a fused step runs several nodes as one kernel: named after their op types
        op = e["args"]["op_name"] if len(nodes) <= 1 else f"fused[{'+'.join(n.split(':')[0] for n in nodes)}]"
        by_op[op] += e["dur"] / args.runs
        counts[op] += 1
        by_node[(e["name"], op)] += e["dur"] / args.runs
    total = sum(by_op.values()) or 1.0
    print(f"{args.model}: {per_run * 1e3:.3f} ms a run (mean of {args.runs}); {steps} steps, "
          f"{total / 1e3:.3f} ms of it in them")
    print(f"\n{'op type':32s} {'steps':>6s} {'us a run':>10s} {'share':>7s}")
    for op, us in by_op.most_common():
        print(f"{op:32s} {counts[op] // args.runs:6d} {us:10.1f} {100 * us / total:6.1f}%")
    print(f"\n{'step':48s} {'op type':24s} {'us a run':>10s} {'share':>7s}")
    for (name, op), us in by_node.most_common(args.top):
        print(f"{name[:48]:48s} {op[:24]:24s} {us:10.1f} {100 * us / total:6.1f}%")
    print(f"\nChrome trace (chrome://tracing, https://ui.perfetto.dev): {path}")
    return 0


def model_path(arg: str) -> str:
    """A command's MODEL: an ONNX file's path, or the name of one of the model-zoo light models the onnx package
    ships (squeezenet or light_squeezenet, ...), as its path."""
    if os.path.exists(arg):
        return arg
    name = arg[len("light_"):] if arg.startswith("light_") else arg
    if name in LIGHT_MODELS:
        return os.path.join(light_model_dir(), f"light_{name}.onnx")
    raise argparse.ArgumentTypeError(f"{arg!r} is neither a file nor a light model's name ({', '.join(LIGHT_MODELS)})")


MODEL_HELP = "the model: an .onnx file, or a light model the onnx package ships (e.g. squeezenet)"


def _model_arguments(parser) -> None:
    """The arguments of the commands that run a model: the model, its inputs, level, providers, threads."""
    parser.add_argument("model", type=model_path, help=MODEL_HELP)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input's value from a .npy file (inputs not given are random)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                        help="size of a symbolic dim of the random inputs (default 1)")
    parser.add_argument("--level", default="all", choices=list(LEVEL_NAMES), help="graph optimization level")
    parser.add_argument("--providers", default="CPUExecutionProvider",
                        help="comma-separated providers in priority order (the fallback comes last on its own)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: the machine's cores)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar while kernels compile (there is none when stderr is not a terminal)")


def _session(args, **options):
    """The session `_model_arguments` describe, with these SessionOptions attributes set too."""
    import onnxjit
    from onnxjit.providers.cpu import SHOW_PROGRESS_KEY
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = LEVEL_NAMES[args.level]
    if args.threads:
        so.intra_op_num_threads = args.threads
    if args.quiet:
        so.add_session_config_entry(SHOW_PROGRESS_KEY, "0")
    for name, value in options.items():
        setattr(so, name, value)
    return onnxjit.InferenceSession(args.model, so, providers=args.providers.split(","))


def _feeds(args, inputs, seed: int = 0, given=None, where: str = "the model",
           strict: bool = True) -> tuple[dict[str, np.ndarray], set[str]]:
    """(the feeds of `inputs` (values with a name and an IR type): --input files (`given` when loaded already),
    random tensors for the other inputs; the names given). A --input name none of the inputs has is a SystemExit,
    unless not `strict` (bench's --input may name another model's input)."""
    given = _given_inputs(args.input) if given is None else given
    known = {v.name for v in inputs}
    unknown = sorted(set(given) - known)
    if unknown and strict:
        raise SystemExit(f"onnxjit: --input names {unknown} are not inputs of {where}; its inputs: {sorted(known)}")
    mine = {k: v for k, v in given.items() if k in known}
    return {**random_feeds(inputs, _dims(args.dim), seed, skip=mine), **mine}, set(mine)


def cmd_bench(args) -> int:
    from onnxjit import benchmarking
    runtimes = ["onnxjit"] + [r for r in args.compare.split(",") if r and r != "onnxjit"]
    unknown = [r for r in runtimes if r not in benchmarking.RUNTIMES]
    if unknown:
        raise SystemExit(f"onnxjit bench: unknown runtime {unknown[0]!r} in --compare; known: "
                         f"{', '.join(r for r in benchmarking.RUNTIMES if r != 'onnxjit')}")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - before the measurements, not after them
        except ImportError:
            raise SystemExit("onnxjit bench: --plot draws with matplotlib: pip install 'onnxjit[plot]'") from None
    given = _given_inputs(args.input)
    progress = _progress(args.quiet)
    results = []
    for i, path in enumerate(args.model):
        feeds, _ = _feeds(args, benchmarking.model_inputs(path), args.seed, given=given, where=path,
                          strict=len(args.model) == 1)
        name = os.path.basename(path)
        results.append(benchmarking.bench_model(
            path, feeds, runtimes, threads=args.threads, repeat=args.repeat, rounds=args.rounds, rest=args.rest,
            rss=not args.no_rss, rtol=args.rtol, atol=args.atol, name=name,
            progress=lambda msg, i=i, name=name: progress(f"[{i + 1}/{len(args.model)}] {name}: {msg}")))
    progress(None)
    print(benchmarking.format_table(results, args.markdown))
    if args.json:
        benchmarking.write_json(results, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        benchmarking.plot(results, args.plot)
        print(f"wrote {args.plot}")
    failed = [f"{m.model} on {r.runtime}" for m in results for r in m.results.values() if r.error or r.ok is False]
    if failed:
        print(f"onnxjit bench: failed or outputs off the tolerance: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _progress(quiet: bool):
    """A one-line status on stderr, rewritten in place, when stderr is a terminal and not `quiet`; call with
    None to clear it."""
    if quiet or not sys.stderr.isatty():
        return lambda message: None

    def show(message):
        sys.stderr.write("\r\033[K" + (message or ""))
        sys.stderr.flush()
    return show


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
    run = sub.add_parser("run", help="run a model once on given or random inputs and summarize its outputs")
    _model_arguments(run)
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--output", metavar="FILE.npz", help="write the tensor outputs to this .npz file")
    run.set_defaults(func=cmd_run)
    prof = sub.add_parser("profile", help="time each step of a model over several runs: a table per op type and "
                                          "per step, and the Chrome trace")
    _model_arguments(prof)
    prof.add_argument("--runs", type=int, default=10, help="profiled runs (after an untimed one)")
    prof.add_argument("--top", type=int, default=20, help="steps listed, slowest first")
    prof.add_argument("--trace", metavar="FILE.json", help="where to write the Chrome trace")
    prof.set_defaults(func=cmd_profile)
    ins = sub.add_parser("inspect", help="a model's inputs and outputs, node counts before and after optimization, "
                                         "which provider runs which nodes (and why a node went to the fallback), "
                                         "the fused kernels and their generated source")
    _model_arguments(ins)
    ins.add_argument("--no-run", action="store_true",
                     help="do not run the model (kernels are generated when a run first meets input shapes)")
    ins.add_argument("--source", metavar="KERNEL", help="print the generated source of this kernel (a name the "
                                                         "listing shows)")
    ins.set_defaults(func=cmd_inspect)
    bench = sub.add_parser(
        "bench", help="check a model's outputs on onnxjit and other runtimes against onnxruntime's, then time each "
                      "runtime in its own blocks of runs: session creation, first run, median and p90 latency, "
                      "peak RSS, ratio to onnxruntime",
        description="Each model runs on onnxjit and the --compare runtimes with the same inputs (given with "
                    "--input or random). Outputs are checked against onnxruntime's (|diff| <= atol + rtol * |ref|); "
                    "then the runtimes are timed in turns, each in its own block of --repeat runs after a rest, "
                    "--rounds times; peak RSS is measured for each runtime alone in a child process. Exits 1 "
                    "when a runtime fails or its outputs are off the tolerance.")
    bench.add_argument("model", nargs="+", type=model_path, help=MODEL_HELP + "; several: one table for all")
    bench.add_argument("--compare", default="onnxruntime",
                       help="comma-separated runtimes beside onnxjit: onnxruntime, reference (onnx.reference's "
                            "evaluator), onnxjit-cuda and onnxruntime-cuda (CUDAExecutionProvider first); default "
                            "onnxruntime")
    bench.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                       help="an input's value from a .npy file (inputs not given are random)")
    bench.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                       help="size of a symbolic dim of the random inputs (default 1)")
    bench.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    bench.add_argument("--threads", type=int, default=0,
                       help="intra-op threads of every runtime (default: each runtime's own default)")
    bench.add_argument("--repeat", type=int, default=10, help="runs per timing block")
    bench.add_argument("--rounds", type=int, default=3, help="timing blocks per runtime, in turns")
    bench.add_argument("--rest", type=float, default=0.5, help="seconds of rest before each block")
    bench.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of the output check")
    bench.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of the output check")
    bench.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    bench.add_argument("--json", metavar="FILE.json", help="also write the results to this file")
    bench.add_argument("--plot", metavar="FILE.png", help="also draw the latencies as a bar chart (matplotlib)")
    bench.add_argument("--markdown", action="store_true", help="print the table as markdown")
    bench.add_argument("--quiet", action="store_true", help="no progress line")
    bench.set_defaults(func=cmd_bench)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
