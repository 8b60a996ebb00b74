"""Benchmarks: onnxjit beside onnxruntime in one process (`pytest benchmarks/ --benchmark-group-by=param:case`).

Each runtime is timed in its own block of rounds (pytest-benchmark runs one benchmark at a time) after a short
rest: interleaving single runs lets onnxruntime's spinning thread pool take the cores Numba's threads need.
Outputs are checked against onnxruntime before timing. Speed is never asserted: read the ratios.
"""
import time

import numpy as np
import pytest

from onnxjit.session.options import LEVEL_NAMES  # GraphOptimizationLevel values: the same in onnxruntime


def make_runner(runtime: str, model_bytes: bytes, level: str = "all", threads: int = 0):
    """A run function for `runtime` ("onnxruntime" or "onnxjit") at graph optimization `level` (disable, basic,
    extended, all) with `threads` intra-op threads (0: all cores)."""
    if runtime == "onnxruntime":
        import onnxruntime
        so = onnxruntime.SessionOptions()
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel(int(LEVEL_NAMES[level]))
        so.intra_op_num_threads = threads
        sess = onnxruntime.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    else:
        import onnxjit
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = LEVEL_NAMES[level]
        so.intra_op_num_threads = threads
        sess = onnxjit.InferenceSession(model_bytes, so)
    return lambda feeds: sess.run(None, feeds)


@pytest.fixture
def rested():
    time.sleep(0.5)


def check_against_onnxruntime(model_bytes, feeds, got, rtol=1e-4, atol=1e-5):
    want = make_runner("onnxruntime", model_bytes)(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
