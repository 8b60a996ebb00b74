"""Comparing runtimes on a model: outputs checked against onnxruntime's, then latency timed one runtime at a time.

The machinery of `onnxjit bench` and of the benchmark zoo (benchmarks/zoo/run.py). For each model and runtime
(`onnxjit`, `onnxruntime`, `reference`: onnx.reference's evaluator) it measures:
  session creation and first run (onnxjit compiles or loads its kernels in the first run);
  agreement      every output within |got - want| <= atol + rtol * |want| of onnxruntime's (or, without
                 onnxruntime among the runtimes, of the first runtime's), the largest abs and rel differences;
  latency        the median and p90 of each runtime's runs, the runtimes timed in turns, each in its own block of
                 runs after a rest: interleaved single runs would let onnxruntime's spinning thread pool take the
                 cores onnxjit's workers need, and distort both;
  peak RSS       each runtime alone in a fresh child process (imports, session, two runs): its VmHWM;
  for onnxjit    the nodes left to its fallback provider and the generated kernels it compiled.
A runtime that fails (at creation or in a run) is a result with its error; the others go on.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

import numpy as np

# a '-cuda' runtime puts CUDAExecutionProvider first (onnxjit's on numba-cuda, onnxruntime's with onnxruntime-gpu)
RUNTIMES = ("onnxjit", "onnxjit-cuda", "onnxruntime", "onnxruntime-cuda", "reference")
RTOL, ATOL = 1e-3, 1e-4
FALLBACK = "FallbackExecutionProvider"


# --- statistics and comparison (no runtime needed) ----------------------------------------------------------
def geometric_mean(values) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def compare_outputs(got, want, rtol: float = RTOL, atol: float = ATOL) -> tuple[bool, float]:
    """(all outputs within |got - want| <= atol + rtol * |want|, the largest abs error). Shapes and dtypes must
    match; non-float outputs must be equal."""
    ok, worst, _ = _agreement(got, want, rtol, atol)
    return ok, worst


def _agreement(got, want, rtol, atol) -> tuple[bool, float, float]:
    """compare_outputs' (ok, largest abs error) and the largest error relative to |want| (where want != 0)."""
    if len(got) != len(want):
        return False, math.inf, math.inf
    ok, worst, worst_rel = True, 0.0, 0.0
    for g, w in zip(got, want):
        if isinstance(w, list) or isinstance(g, list):  # sequences and maps (ZipMap): equal or not
            same = _same_value(g, w)
            ok &= same
            worst = worst if same else math.inf
            continue
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return False, math.inf, math.inf
        if g.size == 0:
            continue
        if not np.issubdtype(w.dtype, np.number):
            same = bool(np.array_equal(g, w))
            ok &= same
            worst = worst if same else math.inf
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        diff = np.abs(g64 - w64)
        if np.issubdtype(w.dtype, np.floating):
            same_nonfinite = (~np.isfinite(w64)) & (g64 == w64)
            diff = np.where(same_nonfinite, 0.0, diff)
            ok &= bool(np.all(np.where(same_nonfinite, True, diff <= atol + rtol * np.abs(w64))))
        else:
            ok &= bool(np.array_equal(g, w))
        if np.isnan(diff).any():
            return False, math.inf, math.inf
        worst = max(worst, float(diff.max()))
        nonzero = w64 != 0
        if nonzero.any():
            worst_rel = max(worst_rel, float((diff[nonzero] / np.abs(w64[nonzero])).max()))
    return ok, worst, worst_rel


def _same_value(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL)) if np.asarray(a).dtype.kind in "fc" else bool(
            np.array_equal(a, b))
    except (TypeError, ValueError):
        return a == b


def percentile(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times), q))


def model_inputs(path: str) -> list:
    """The graph inputs of the model at `path` that are not initializers, as values with a name and an IR type
    (for onnxjit.cli.random_feeds), read without building a session."""
    import onnx

    from onnxjit.ir.types import from_type_proto
    graph = onnx.load(path, load_external_data=False).graph
    inits = {i.name for i in graph.initializer} | {i.values.name for i in graph.sparse_initializer}
    return [SimpleNamespace(name=v.name, type=from_type_proto(v.type)) for v in graph.input
            if v.name not in inits]


# --- sessions --------------------------------------------------------------------------------------------------
class ReferenceSession:
    """onnx.reference's evaluator behind InferenceSession's `run(output_names, feeds)`."""

    def __init__(self, path: str):
        from onnx.reference import ReferenceEvaluator
        self._evaluator = ReferenceEvaluator(path)

    def run(self, output_names, feeds):
        return list(self._evaluator.run(output_names, feeds))


def providers_of(runtime: str) -> list[str]:
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if runtime.endswith("-cuda") else ["CPUExecutionProvider"]


def make_session(runtime: str, path: str, threads: int = 0, profile_prefix: str | None = None):
    """A session of `runtime` (one of RUNTIMES) over the model at `path`, with `threads` intra-op threads (0: the
    runtime's default)."""
    if runtime == "reference":
        return ReferenceSession(path)
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    module_name = runtime.removesuffix("-cuda")
    if module_name == "onnxruntime":
        import onnxruntime
        so = onnxruntime.SessionOptions()
        so.log_severity_level = 3
    else:
        import onnxjit
        from onnxjit.providers.cpu import SHOW_PROGRESS_KEY
        so = onnxjit.SessionOptions()
        so.add_session_config_entry(SHOW_PROGRESS_KEY, "0")
    if threads:
        so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    module = onnxruntime if module_name == "onnxruntime" else onnxjit
    providers = providers_of(runtime)
    if module_name == "onnxruntime" and providers[0] not in onnxruntime.get_available_providers():
        raise RuntimeError(f"{runtime}: this onnxruntime has no {providers[0]} (onnxruntime-gpu has)")
    return module.InferenceSession(path, so, providers=providers)


def fallback_nodes(sess) -> Counter:
    """Op types of the nodes an onnxjit session's plan runs on the fallback provider."""
    steps = getattr(getattr(sess, "_compiled", None), "steps", [])
    return Counter(n.op_type for s in steps if s.provider == FALLBACK for n in s.nodes)


def settle(sess, feeds) -> None:
    """After a session's first run: onnxjit's background compilation waited for, so that timing sees the steady
    state: the kernels a first run over an empty cache deferred, then the native segments the next run starts."""
    wait = getattr(sess, "wait_for_compilation", None)
    if wait is not None:
        for _ in range(2):
            sess.run(None, feeds)
            wait()


def timed_block(run, feeds, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        run(None, feeds)
        times.append(time.perf_counter() - t0)
    return times


# --- peak RSS ---------------------------------------------------------------------------------------------------
# The child imports only the runtime it measures (and numpy): `python -m onnxjit.benchmarking` would import
# onnxjit, and with it Numba and LLVM, into onnxruntime's and onnx.reference's children too.
_RSS_CHILD = r"""
import sys
import numpy as np
runtime, path, inputs_path, threads, quiet_key, providers = sys.argv[1:7]
with np.load(inputs_path, allow_pickle=False) as z:
    feeds = {k: z[k] for k in z.files}
if runtime == "reference":
    from onnx.reference import ReferenceEvaluator
    run = ReferenceEvaluator(path).run
else:
    module = __import__(runtime.removesuffix("-cuda"))
    so = module.SessionOptions()
    if int(threads):
        so.intra_op_num_threads = int(threads)
    if runtime.startswith("onnxjit"):
        so.add_session_config_entry(quiet_key, "0")
    run = module.InferenceSession(path, so, providers=providers.split(",")).run
run(None, feeds)
run(None, feeds)
try:  # VmHWM, not getrusage's ru_maxrss: Linux keeps that across execve (a large parent's peak)
    with open("/proc/self/status") as f:
        print(next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:")))
except OSError:
    import resource
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def peak_rss_mb(runtime: str, path: str, inputs_path: str, threads: int = 0) -> float:
    """The peak RSS of a fresh child process that imports only `runtime`, creates the session and
    runs it twice on the feeds saved in `inputs_path` (an .npz of input name -> array)."""
    from onnxjit.providers.cpu import SHOW_PROGRESS_KEY  # (the child may not import onnxjit: passed in)
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD, runtime, path, inputs_path, str(threads),
                          SHOW_PROGRESS_KEY, ",".join(providers_of(runtime))], capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{runtime} child failed: {(out.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    return float(out.stdout.strip().splitlines()[-1])


# --- one model, several runtimes -----------------------------------------------------------------------------
@dataclass
class RuntimeResult:
    runtime: str
    create_s: float | None = None
    first_run_s: float | None = None
    median_ms: float | None = None
    p90_ms: float | None = None
    runs: int = 0
    ok: bool | None = None  # outputs within the tolerance of the validating runtime's (None: not compared)
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    peak_rss_mb: float | None = None
    fallback_ops: dict[str, int] | None = None  # onnxjit: nodes on the fallback provider, by op type
    kernels_compiled: int | None = None  # onnxjit: generated kernels compiled (not loaded from the cache)
    error: str | None = None


@dataclass
class ModelResult:
    model: str
    validated_against: str | None = None
    results: dict[str, RuntimeResult] = field(default_factory=dict)

    def ratio(self, runtime: str, baseline: str = "onnxruntime") -> float | None:
        """runtime's median latency over the baseline's (below 1: faster)."""
        a, b = self.results.get(runtime), self.results.get(baseline)
        if a is None or b is None or a.median_ms is None or not b.median_ms:
            return None
        return a.median_ms / b.median_ms

    def to_json(self) -> dict:
        return {"model": self.model, "validated_against": self.validated_against,
                "results": {k: asdict(v) | {"ratio_to_onnxruntime": self.ratio(k)} for k, v in self.results.items()}}


def _error(e: BaseException) -> str:
    text = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {text}"


def bench_model(path: str, feeds: dict, runtimes=("onnxjit", "onnxruntime"), threads: int = 0, repeat: int = 10,
                rounds: int = 2, rest: float = 0.5, rss: bool = True, rtol: float = RTOL, atol: float = ATOL,
                name: str | None = None, progress=None) -> ModelResult:
    """Every runtime of `runtimes` over the model at `path` on `feeds`: created and run once, its outputs compared
    with onnxruntime's (or the first runtime's), then timed in `rounds` turns of `repeat` runs each (runtimes in
    turn, the order reversed every other round, a rest of `rest` s before each block), then its peak RSS in a
    child process when `rss`. `progress(message)` is called as each stage starts."""
    for r in runtimes:
        if r not in RUNTIMES:
            raise ValueError(f"unknown runtime {r!r}; known: {', '.join(RUNTIMES)}")
    say = progress or (lambda message: None)
    out = ModelResult(name or os.path.basename(path))
    sessions, outputs = {}, {}
    for runtime in runtimes:
        res = out.results[runtime] = RuntimeResult(runtime)
        say(f"{runtime}: session and first run")
        try:
            t0 = time.perf_counter()
            sess = make_session(runtime, path, threads)
            res.create_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            outputs[runtime] = sess.run(None, feeds)
            res.first_run_s = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - a runtime that fails is a result, not the end of the run
            res.error = _error(e)
            continue
        sessions[runtime] = sess
        settle(sess, feeds)
        if runtime.startswith("onnxjit"):
            res.fallback_ops = dict(fallback_nodes(sess))
            res.kernels_compiled = sum(k.compiled for k in sess.kernels())
    baseline = "onnxruntime" if "onnxruntime" in runtimes else runtimes[0]
    if baseline in outputs:
        out.validated_against = baseline
        for runtime, got in outputs.items():
            res = out.results[runtime]
            res.ok, res.max_abs_diff, res.max_rel_diff = _agreement(got, outputs[baseline], rtol, atol)
    times = {r: [] for r in sessions}
    for i in range(rounds):
        order = list(sessions) if i % 2 == 0 else list(sessions)[::-1]
        for runtime in order:
            if runtime not in sessions:
                continue
            say(f"{runtime}: timing, round {i + 1} of {rounds}")
            time.sleep(rest)
            try:
                times[runtime] += timed_block(sessions[runtime].run, feeds, repeat)
            except Exception as e:  # noqa: BLE001
                out.results[runtime].error = _error(e)
                del sessions[runtime]
    for runtime, ts in times.items():
        if ts and runtime in sessions:
            res = out.results[runtime]
            res.median_ms, res.p90_ms, res.runs = 1e3 * statistics.median(ts), 1e3 * percentile(ts, 90), len(ts)
    sessions.clear()
    if rss:
        with tempfile.TemporaryDirectory() as tmp:
            inputs_path = os.path.join(tmp, "inputs.npz")
            np.savez(inputs_path, **feeds)
            for runtime, res in out.results.items():
                if res.error is None:
                    say(f"{runtime}: peak RSS in a child process")
                    try:
                        res.peak_rss_mb = peak_rss_mb(runtime, path, inputs_path, threads)
                    except Exception as e:  # noqa: BLE001
                        print(f"onnxjit bench: peak RSS of {runtime}: {e}", file=sys.stderr)
    return out


# --- reporting -----------------------------------------------------------------------------------------------
COLUMNS = ("model", "runtime", "outputs", "session s", "first run s", "median ms", "p90 ms", "ratio",
           "peak RSS MB", "fallback nodes")


def _num(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.{digits}f}"


def _cells(model: ModelResult, res: RuntimeResult) -> list[str]:
    if res.error:
        outputs = f"ERROR: {res.error}"
    elif res.ok is None:
        outputs = "-"
    elif res.runtime == model.validated_against:
        outputs = "(baseline)"
    else:
        outputs = (f"{'ok' if res.ok else 'MISMATCH'} (abs {res.max_abs_diff:.1e}, rel {res.max_rel_diff:.1e})"
                   if math.isfinite(res.max_abs_diff) else f"{'ok' if res.ok else 'MISMATCH'} (shape, type or NaN)")
    ratio = model.ratio(res.runtime)
    fallback = "-" if res.fallback_ops is None else str(sum(res.fallback_ops.values()))
    return [model.model, res.runtime, outputs, _num(res.create_s), _num(res.first_run_s), _num(res.median_ms),
            _num(res.p90_ms), "-" if ratio is None else f"{ratio:.2f}", _num(res.peak_rss_mb, 0), fallback]


def format_table(models: list[ModelResult], markdown: bool = False) -> str:
    """One row per model and runtime; then, with several models, the geometric mean of each runtime's ratio to
    onnxruntime over the models whose outputs matched."""
    cells = [_cells(m, r) for m in models for r in m.results.values()]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cs) + " |" for cs in cells]
    else:
        widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(COLUMNS)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(cs, widths)).rstrip() for cs in cells]
    if len(models) > 1:
        runtimes = [r for r in RUNTIMES if r != "onnxruntime" and any(r in m.results for m in models)]
        for runtime in runtimes:
            ratios = [m.ratio(runtime) for m in models if runtime in m.results and m.results[runtime].ok]
            gm = geometric_mean(ratios)
            if gm is not None:
                lines.append(f"geometric mean of {runtime} / onnxruntime over the {len(ratios)} models whose "
                             f"outputs matched: {gm:.2f}")
    return "\n".join(lines)


def plot(models: list[ModelResult], path: str) -> None:
    """A bar chart of the median latencies: a group of bars per model, one bar per runtime (log scale when they
    span more than 20x), written to `path` (any format matplotlib writes). Needs matplotlib (the `plot` extra)."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("--plot draws with matplotlib: pip install 'onnxjit[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runtimes = [r for r in RUNTIMES if any(r in m.results for m in models)]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(models) * len(runtimes)), 4))
    width = 0.8 / len(runtimes)
    values = []
    for i, runtime in enumerate(runtimes):
        ms = [m.results[runtime].median_ms if runtime in m.results and m.results[runtime].median_ms else 0.0
              for m in models]
        values += [v for v in ms if v > 0]
        ax.bar([j + i * width for j in range(len(models))], ms, width, label=runtime)
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")
    ax.set_xticks([j + width * (len(runtimes) - 1) / 2 for j in range(len(models))])
    ax.set_xticklabels([m.model for m in models], rotation=20, ha="right")
    ax.set_ylabel("median latency, ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_json(models: list[ModelResult], path: str) -> None:
    with open(path, "w") as f:
        json.dump([m.to_json() for m in models], f, indent=1)
