"""Timing shared by the classical-ML benchmarks (ml_trees.py, ml_pipelines.py): blocks of runs per runtime with
a rest between them (never interleaved single runs), and the CPU's name for the figures."""
from __future__ import annotations

import time

import numpy as np

from onnxjit.benchmarking import settle


def block(sess, feeds, seconds=1.0, max_runs=5000):
    """Seconds per run over a block of runs (after warm-up runs, and onnxjit's background compilation)."""
    sess.run(None, feeds)
    settle(sess, feeds)
    runs, t0 = 0, time.perf_counter()
    while runs < max_runs and (runs < 3 or time.perf_counter() - t0 < seconds):
        sess.run(None, feeds)
        runs += 1
    return (time.perf_counter() - t0) / runs


def compare_blocks(ort, jit, feeds, batch, rounds) -> float:
    """onnxruntime and onnxjit each timed in `rounds` blocks, alternating, 0.5 s of rest before each; prints a
    line and returns the ratio of the best blocks (onnxjit / onnxruntime)."""
    t_ort, t_jit = [], []
    for _ in range(rounds):
        t_ort.append(block(ort, feeds))
        time.sleep(0.5)
        t_jit.append(block(jit, feeds))
        time.sleep(0.5)
    unit, f = ("ms", 1e3) if batch > 1 else ("us", 1e6)
    print(f"  batch {batch:>5}: onnxruntime {f * min(t_ort):8.3f} {unit} (median {f * np.median(t_ort):.3f})"
          f"  onnxjit {f * min(t_jit):8.3f} {unit} (median {f * np.median(t_jit):.3f})"
          f"  ratio {min(t_jit) / min(t_ort):.2f} (medians {np.median(t_jit) / np.median(t_ort):.2f})")
    return min(t_jit) / min(t_ort)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"
