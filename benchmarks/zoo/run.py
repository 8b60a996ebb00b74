"""The benchmark zoo: onnxjit against onnxruntime on real architectures, one table row per model and exporter.

The measurements are onnxjit.benchmarking's (as `onnxjit bench`'s). For each model (the torch ones in `models.py`,
exported by `export.py` into the cache, and the nine light models shipped inside the onnx package, with random
weights) it measures, in this process and with 2 intra-op threads for both runtimes:
  ok         every output of onnxjit within rtol 1e-3, atol 1e-4 of onnxruntime's (float32); the max abs error
  latency    the median of each runtime's runs, each runtime timed in its own blocks with a rest between blocks,
             and their ratio onnxjit / onnxruntime (below 1: onnxjit is faster)
  first run  onnxjit's session creation plus its first run, over the kernel cache as it is (how many generated
             kernels had to be compiled is in parentheses)
  peak RSS   each runtime alone in a fresh child process (imports, session, two runs): its VmHWM
  fallback   nodes onnxjit left to its fallback provider (onnx.reference ops), by op type
A model that fails in onnxjit (an error, or outputs outside the tolerance) is a row saying so; the run goes on.
--profile adds, per row, the op types taking most of onnxjit's time beside onnxruntime's time for them.

usage: python3 benchmarks/zoo/run.py [--models a,b] [--exporters dynamo,torchscript] [--repeat N] [--markdown]
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from onnxjit import benchmarking
from onnxjit.benchmarking import geometric_mean

try:
    from . import export as zoo_export
except ImportError:  # run as a script: this folder is sys.path[0]
    import export as zoo_export

THREADS = 2
LIGHT_MODELS = ("squeezenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                "shufflenet", "vgg19", "zfnet512")  # as onnxjit.testing.zoo.LIGHT_MODELS
LIGHT_DESCRIPTION = ("onnx's model-zoo light model (opset 9; its ConstantOfShape weights replaced by random "
                     "stored ones), 1x3x224x224")


@dataclass
class Row:
    model: str
    exporter: str
    description: str = ""
    ok: bool | None = None
    max_abs_err: float | None = None
    onnxjit_ms: float | None = None
    onnxruntime_ms: float | None = None
    first_run_s: float | None = None
    kernels_compiled: int | None = None
    onnxjit_rss_mb: float | None = None
    onnxruntime_rss_mb: float | None = None
    fallback_nodes: int | None = None
    fallback_ops: dict[str, int] = field(default_factory=dict)
    top_ops: list[tuple[str, float, float]] = field(default_factory=list)  # (op type, onnxjit ms, onnxruntime ms)
    profiled_ms: tuple[float, float] | None = None  # the profiles' totals per run: onnxjit, onnxruntime
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.onnxjit_ms is None or not self.onnxruntime_ms:
            return None
        return self.onnxjit_ms / self.onnxruntime_ms


# --- the table -----------------------------------------------------------------------------------------------
COLUMNS = ("model", "exporter", "ok (max abs err)", "onnxjit ms", "onnxruntime ms", "ratio", "first run s",
           "onnxjit peak RSS MB", "onnxruntime peak RSS MB", "fallback nodes")


def _num(v, digits=1) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}f}"


def row_cells(row: Row) -> list[str]:
    if row.ok is None:
        ok = "-"
    else:
        err = "inf" if row.max_abs_err is None or math.isinf(row.max_abs_err) else f"{row.max_abs_err:.1e}"
        ok = f"{'yes' if row.ok else 'NO'} ({err})"
    if row.error:
        ok = f"ERROR: {row.error}" if row.ok is None else f"{ok}; ERROR: {row.error}"
    first = "-" if row.first_run_s is None else f"{row.first_run_s:.2f}"
    if row.first_run_s is not None and row.kernels_compiled:
        first += f" ({row.kernels_compiled} new kernel{'s' if row.kernels_compiled > 1 else ''})"
    if row.fallback_nodes is None:
        fallback = "-"
    elif row.fallback_nodes == 0:
        fallback = "0"
    else:
        fallback = f"{row.fallback_nodes}: " + ", ".join(f"{op} x{n}" for op, n in sorted(row.fallback_ops.items()))
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
    return [row.model, row.exporter, ok, _num(row.onnxjit_ms, 2 if (row.onnxjit_ms or 0) < 10 else 1),
            _num(row.onnxruntime_ms, 2 if (row.onnxruntime_ms or 0) < 10 else 1), ratio, first,
            _num(row.onnxjit_rss_mb, 0), _num(row.onnxruntime_rss_mb, 0), fallback]


def format_table(rows: list[Row], markdown: bool = False) -> str:
    """The rows as a markdown table or aligned text, then the geometric mean of the ratios of the rows whose
    outputs matched, a legend of the models and, when profiled, each row's heaviest op types."""
    cells = [row_cells(r) for r in rows]
    lines = []
    if markdown:
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "|".join("---" for _ in COLUMNS) + "|")
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cs) + " |" for cs in cells]
    else:
        widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(COLUMNS)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(cs, widths)) for cs in cells]
    matched = [r.ratio for r in rows if r.ok and r.ratio is not None]
    gm = geometric_mean(matched)
    lines.append("")
    lines.append(f"geometric mean of the ratios (onnxjit / onnxruntime) over the {len(matched)} rows whose outputs "
                 f"matched: {'-' if gm is None else f'{gm:.2f}'}")
    described = {}
    for r in rows:
        described.setdefault(r.model, r.description)
    if any(described.values()):
        lines.append("")
        lines += ["| model | what it is |", "|---|---|"] if markdown else ["models:"]
        for m, d in described.items():
            lines.append(f"| {m} | {d} |" if markdown else f"  {m}: {d}")
    profiled = [r for r in rows if r.top_ops]
    if profiled:
        lines.append("")
        lines.append("heaviest op types in onnxjit's profile, ms per run in onnxjit / onnxruntime (summed over the "
                     "op's nodes; a fused step counts as its first node's op, Fused* as the op it fuses):")
        for r in profiled:
            ops = ", ".join(f"{op} {a:.1f}/{b:.1f}" for op, a, b in r.top_ops)
            total = f" (all ops {r.profiled_ms[0]:.1f}/{r.profiled_ms[1]:.1f})" if r.profiled_ms else ""
            lines.append(f"{'- ' if markdown else '  '}{r.model} {r.exporter}: {ops}{total}")
    return "\n".join(lines)


# --- sessions --------------------------------------------------------------------------------------------------
def feeds_for(sess, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    names = [i.name for i in sess.get_inputs()]
    if len(names) != len(inputs):
        raise ValueError(f"the model takes {len(names)} inputs, the cache has {len(inputs)}")
    return dict(zip(names, inputs))


def op_times_ms(trace_path: str, runs: int, kind: str) -> Counter:
    """Milliseconds per run by op type from a chrome trace: onnxjit's (one event per plan step, named by its
    first node's op) or onnxruntime's (the `*_kernel_time` node events)."""
    with open(trace_path) as f:
        events = json.load(f)
    per_op: Counter = Counter()  # onnxjit's FusedConv is onnxruntime's Conv there: both counted as "Conv"
    for e in events:
        if e.get("cat") != "Node" or "dur" not in e:
            continue
        if kind == "onnxruntime" and not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        per_op[op[len("Fused"):] if op.startswith("Fused") and len(op) > 5 else op] += e["dur"] / 1000.0 / runs
    return per_op


def profile_ops(case: zoo_export.ZooCase, inputs, runs: int = 3, top: int = 4):
    """The `top` op types by onnxjit time with onnxruntime's time for the same op type (both profiled), and the
    two profiles' totals per run."""
    with tempfile.TemporaryDirectory() as tmp:
        traces = {}
        for kind in ("onnxjit", "onnxruntime"):
            sess = benchmarking.make_session(kind, case.path, THREADS, os.path.join(tmp, kind + "_"))
            feeds = feeds_for(sess, inputs)
            sess.run(None, feeds)
            if kind == "onnxjit":  # drop the warm-up runs from onnxjit's trace
                benchmarking.settle(sess, feeds)
                os.remove(sess.end_profiling())
            else:
                sess.end_profiling()
                sess = benchmarking.make_session(kind, case.path, THREADS, os.path.join(tmp, kind + "2_"))
                sess.run(None, feeds)  # onnxruntime's first run is in its trace; one more session, warmed
            for _ in range(runs):
                sess.run(None, feeds)
            traces[kind] = sess.end_profiling()
            del sess
            time.sleep(0.3)
        jit = op_times_ms(traces["onnxjit"], runs, "onnxjit")
        ref = op_times_ms(traces["onnxruntime"], runs + 1, "onnxruntime")
    return [(op, ms, ref.get(op, 0.0)) for op, ms in jit.most_common(top)], (sum(jit.values()), sum(ref.values()))


def measure(case: zoo_export.ZooCase, description: str, repeat: int, rounds: int, rest: float, rss: bool,
            profile: bool) -> Row:
    """The case's row, from onnxjit.benchmarking.bench_model over onnxjit and onnxruntime (THREADS threads)."""
    row = Row(case.model, case.exporter, description)
    if case.error:
        row.error = f"export failed: {case.error}"
        return row
    inputs = case.load_inputs()
    names = [v.name for v in benchmarking.model_inputs(case.path)]
    if len(names) != len(inputs):
        row.error = f"the model takes {len(names)} inputs, the cache has {len(inputs)}"
        return row
    result = benchmarking.bench_model(case.path, dict(zip(names, inputs)), ("onnxjit", "onnxruntime"), THREADS,
                                      repeat, rounds, rest, rss)
    jit, ref = result.results["onnxjit"], result.results["onnxruntime"]
    if ref.error:
        row.error = f"onnxruntime: {ref.error}"
        return row
    if jit.error:
        row.error = f"onnxjit: {jit.error}"
    if jit.first_run_s is not None:
        row.first_run_s = jit.create_s + jit.first_run_s
        row.kernels_compiled = jit.kernels_compiled
        row.fallback_nodes, row.fallback_ops = sum(jit.fallback_ops.values()), jit.fallback_ops
        row.ok, row.max_abs_err = jit.ok, jit.max_abs_diff
    row.onnxjit_ms, row.onnxruntime_ms = jit.median_ms, ref.median_ms
    row.onnxjit_rss_mb, row.onnxruntime_rss_mb = jit.peak_rss_mb, ref.peak_rss_mb
    gc.collect()
    if profile and row.error is None:
        try:
            row.top_ops, row.profiled_ms = profile_ops(case, inputs)
        except Exception as e:  # noqa: BLE001
            print(f"  profiling {case.model} failed: {type(e).__name__}: {e}", file=sys.stderr)
    return row


# --- selecting and exporting -----------------------------------------------------------------------------------
def all_model_names() -> list[str]:
    return list(zoo_export.TORCH_MODELS) + [zoo_export.LIGHT_PREFIX + n for n in LIGHT_MODELS]


def model_descriptions() -> dict[str, str]:
    """Descriptions of the torch models, read from models.py in a child (this process does not import torch)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from models import MODELS; "
            "print(json.dumps({k: m.description for k, m in MODELS.items()}))")
    out = subprocess.run([sys.executable, "-c", code, zoo_export.HERE], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def ensure_exported(model: str, exporters: list[str], cache_dir: str, reexport: bool) -> list[zoo_export.ZooCase]:
    """The model's cases, exporting the missing ones in a child process (torch stays out of this one); the
    exporters' chatter goes to `<cache>/export.log`."""
    cases = [zoo_export.torch_case(model, e, cache_dir) for e in exporters]
    missing = [c.exporter for c in cases if reexport or not (c.error or os.path.exists(c.path))]
    if missing:
        os.makedirs(cache_dir, exist_ok=True)
        cmd = [sys.executable, os.path.join(zoo_export.HERE, "export.py"), "--models", model, "--exporters",
               ",".join(missing), "--cache-dir", cache_dir] + (["--reexport"] if reexport else [])
        with open(os.path.join(cache_dir, "export.log"), "a") as log:
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
            print(f"  exported {model} ({', '.join(missing)}) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        cases = [zoo_export.torch_case(model, e, cache_dir) for e in exporters]
        for c in cases:
            if not c.error and not os.path.exists(c.path):
                c.error = f"the export process exited with {proc.returncode} (see {cache_dir}/export.log)"
    return cases


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: all); 'light' for the light ones, "
                    "'torch' for the exported ones")
    ap.add_argument("--exporters", default=",".join(zoo_export.EXPORTERS))
    ap.add_argument("--repeat", type=int, default=10, help="runs per timing block")
    ap.add_argument("--rounds", type=int, default=2, help="timing blocks per runtime, alternating")
    ap.add_argument("--rest", type=float, default=0.5, help="seconds of rest before each block")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--cache-dir", default=zoo_export.default_cache_dir(),
                    help="exported models (default: $ONNXJIT_ZOO_CACHE or $XDG_CACHE_HOME/onnxjit-zoo)")
    ap.add_argument("--reexport", action="store_true")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    ap.add_argument("--profile", action="store_true", help="also list each row's heaviest op types")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args(argv)
    names = all_model_names()
    if a.models:
        wanted = []
        for m in a.models.split(","):
            if m == "light":
                wanted += [n for n in names if n.startswith(zoo_export.LIGHT_PREFIX)]
            elif m == "torch":
                wanted += list(zoo_export.TORCH_MODELS)
            elif m in names or zoo_export.LIGHT_PREFIX + m in names:
                wanted.append(m if m in names else zoo_export.LIGHT_PREFIX + m)
            else:
                ap.error(f"unknown model {m!r}; known: {', '.join(names)}")
        names = wanted
    exporters = a.exporters.split(",")
    descriptions = model_descriptions() if any(n in zoo_export.TORCH_MODELS for n in names) else {}
    import onnxjit  # noqa: F401 - imported here so the first row's first-run time does not include the imports
    import onnxruntime  # noqa: F401
    rows = []
    for name in names:
        if name.startswith(zoo_export.LIGHT_PREFIX):
            cases = [zoo_export.write_light_model(name[len(zoo_export.LIGHT_PREFIX):], a.cache_dir)]
            description = LIGHT_DESCRIPTION
        else:
            cases = ensure_exported(name, exporters, a.cache_dir, a.reexport)
            description = descriptions.get(name, "")
        for case in cases:
            t0 = time.perf_counter()
            row = measure(case, description, a.repeat, a.rounds, a.rest, not a.no_rss, a.profile)
            rows.append(row)
            print(f"  {' | '.join(row_cells(row))}  [{time.perf_counter() - t0:.0f} s]", file=sys.stderr,
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump([asdict(r) | {"ratio": r.ratio} for r in rows], f, indent=1)
    print(format_table(rows, a.markdown))


if __name__ == "__main__":
    main()
