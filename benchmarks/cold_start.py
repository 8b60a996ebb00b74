"""Cold start: what a new process spends creating each benchmark session and running it once, with empty kernel
caches and then with the caches the first process filled.

Each case runs in its own new process, twice: first over empty caches (a temporary ONNXJIT_CACHE_DIR for the
generated kernels and a temporary NUMBA_CACHE_DIR for the hand-written ones, so both compile), then over the
caches that run filled. Per process it reports the import of onnxjit, the session's creation plus its first run, the
time until the kernels that first run deferred are compiled too (onnxjit/cache/deferred_compile.py: the specialized
conv kernels, compiled after the run while it used conv_packed), and within the first the start-up of Numba's
compiler (the refresh of its target context, which imports and registers Numba's implementations; with warm caches
onnxjit loads kernels without it, see onnxjit/cache/jit.py) and the generated kernels' compile or load time. Cases:
the micro cases of benchmarks/models.py (the default), and the light models the onnx package ships as
`light_<name>` (light_inception_v1 is the README's demo), as shipped.

A first run over empty caches starts compile helper processes (onnxjit/cache/parallel_compile.py: one per other
core by default); `--compile-processes N` sets their number for the children (0: none, the whole compile on the
session's process).

usage: python benchmarks/cold_start.py [--rounds N] [--cases light_inception_v1,light_resnet50,ew_chain,...]
                                       [--compile-processes N]
       (one line per case and cache state; N rounds, default 3)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import onnxjit
import_s = time.perf_counter() - t0
from numba.core import base

compiler_start = {"s": 0.0, "depth": 0}
_refresh = base.BaseContext.refresh


def timed_refresh(self):  # the outermost call's wall time (the target context refreshes its typing context)
    compiler_start["depth"] += 1
    t = time.perf_counter()
    try:
        return _refresh(self)
    finally:
        compiler_start["depth"] -= 1
        if not compiler_start["depth"]:
            compiler_start["s"] += time.perf_counter() - t


base.BaseContext.refresh = timed_refresh
sys.path.insert(0, sys.argv[1])
if sys.argv[2].startswith("light_"):
    from onnxjit.testing.zoo import light_model_case
    source, feeds, _ = light_model_case(sys.argv[2][len("light_"):])
else:
    from models import CASES
    model, feeds = CASES[sys.argv[2]](np.random.default_rng(0))
    source = model.SerializeToString()
t0 = time.perf_counter()
sess = onnxjit.InferenceSession(source)
sess.run(None, feeds)
first_s = time.perf_counter() - t0
infos = sess.kernels()
sess.wait_for_compilation()  # the kernels the first run deferred (and no segments yet: they start at run 2)
print(json.dumps({"import_s": import_s, "create_and_first_run_s": first_s,
                  "deferred_done_s": time.perf_counter() - t0,
                  "numba_compiler_start_s": compiler_start["s"],
                  "generated_kernel_s": sum(i.compile_seconds for i in infos),
                  "compiled": sum(i.compiled for i in infos), "kernels": sum(len(i.sources) for i in infos)}))
"""


def run_child(case: str, env: dict) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run([sys.executable, "-c", CHILD, here, case], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=None, help="comma-separated (default: the micro cases)")
    ap.add_argument("--compile-processes", default=None,
                    help="compile helpers per first run (ONNXJIT_COMPILE_PROCESSES; default: onnxjit's)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models import CASES

    cases = args.cases.split(",") if args.cases else sorted(CASES)
    unknown = [c for c in cases if c not in CASES and not c.startswith("light_")]
    if unknown:
        ap.error(f"unknown cases {unknown}: the micro cases are {sorted(CASES)}, light models light_<name>")
    for rnd in range(args.rounds):
        for case in cases:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, ONNXJIT_CACHE_DIR=os.path.join(cache, "onnxjit"),
                           NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
                if args.compile_processes is not None:
                    env["ONNXJIT_COMPILE_PROCESSES"] = args.compile_processes
                for state in ("empty cache", "warm cache"):
                    r = run_child(case, env)
                    print(f"round {rnd + 1} {case:18s} {state:11s} import onnxjit {r['import_s']:.2f} s, "
                          f"session + first run {r['create_and_first_run_s']:.2f} s, its deferred kernels "
                          f"compiled at {r['deferred_done_s']:.2f} s (Numba compiler start-up "
                          f"{r['numba_compiler_start_s']:.2f} s, generated kernels {r['kernels']} compiled "
                          f"{r['compiled']}: {r['generated_kernel_s']:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
