"""Cold start: time a new process spends compiling kernels when it creates the benchmark sessions, with an empty
artifact cache and then with the cache the first process filled.

Numba's start-up (its target context: importing and registering its implementations, and the scipy import of its
BLAS check) happens once per process, at the first compiled or cache-loaded function whatever it is. Each child
runs it first and reports it on its own line, so that the per-case figures are the kernels' own compile or load.

usage: python benchmarks/cold_start.py     (prints Numba's start-up, then one line per case, per cache state)
"""
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import numpy as np
import onnxjit
from models import CASES
from numba.core.registry import cpu_target
t0 = time.perf_counter()
cpu_target.target_context.refresh()
out = {{"numba start-up": time.perf_counter() - t0}}
for name, make in sorted(CASES.items()):
    model, feeds = make(np.random.default_rng(0))
    t0 = time.perf_counter()
    sess = onnxjit.InferenceSession(model.SerializeToString())
    sess.run(None, feeds)
    infos = sess.kernels()
    out[name] = {{"create_and_first_run_s": time.perf_counter() - t0,
                 "kernel_load_s": sum(i.compile_seconds for i in infos),
                 "compiled": sum(i.compiled for i in infos), "kernels": sum(len(i.sources) for i in infos)}}
print(json.dumps(out))
"""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ONNXJIT_CACHE_DIR=cache)
        for state in ("empty cache", "warm cache"):
            res = subprocess.run([sys.executable, "-c", CHILD.format(here=here)], env=env, capture_output=True,
                                 text=True, check=True)
            out = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"{state:11s} Numba start-up {out.pop('numba start-up'):.2f} s")
            for name, r in out.items():
                print(f"{state:11s} {name:10s} kernels {r['kernels']:2d} compiled {r['compiled']:2d} "
                      f"kernel compile/load {r['kernel_load_s']:.2f} s, session+first run "
                      f"{r['create_and_first_run_s']:.2f} s")


if __name__ == "__main__":
    main()
