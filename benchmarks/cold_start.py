"""Cold start: time a new process spends compiling kernels when it creates the benchmark sessions, with an empty
artifact cache and then with the cache the first process filled.

usage: python benchmarks/cold_start.py     (prints one line per case and cache state)
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
out = {{}}
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
            for name, r in json.loads(res.stdout.strip().splitlines()[-1]).items():
                print(f"{state:11s} {name:10s} kernels {r['kernels']:2d} compiled {r['compiled']:2d} "
                      f"kernel compile/load {r['kernel_load_s']:.2f} s, session+first run "
                      f"{r['create_and_first_run_s']:.2f} s")


if __name__ == "__main__":
    main()
