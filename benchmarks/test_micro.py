"""The issue's micro cases: 8-node elementwise chain, 200 tiny Adds, Softmax+LayerNormalization."""
import numpy as np
import pytest

from models import CASES
from conftest import check_against_onnxruntime, make_runner


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxjit"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_micro(benchmark, rested, case, runtime):
    model, feeds = CASES[case](np.random.default_rng(0))
    mb = model.SerializeToString()
    run = make_runner(runtime, mb)
    out = run(feeds)  # warm-up: compiles onnxjit's kernels
    if runtime == "onnxjit":
        check_against_onnxruntime(mb, feeds, out)
    benchmark.extra_info["case"] = case
    benchmark.pedantic(run, args=(feeds,), rounds=20, iterations=1, warmup_rounds=3)
