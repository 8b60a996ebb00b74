"""The ONNX backend conformance suite (node, simple, pytorch-converted, pytorch-operator and light model cases)
run through `onnxjit.backend` with the default providers.

EXPECTED_FAILURES is the one list of cases known to fail, each with its reason. It only ever shrinks: the cases
are marked as expected failures, so one that starts passing fails the suite until it is removed from the list.
"""
import onnx.backend.test

import onnxjit.backend

_RANDOM = "random op: its outputs are drawn at run time and cannot equal the stored expected outputs"
EXPECTED_FAILURES = {
    "test_bernoulli": _RANDOM,
    "test_bernoulli_double": _RANDOM,
    "test_bernoulli_double_expanded": _RANDOM,
    "test_bernoulli_expanded": _RANDOM,
    "test_bernoulli_seed": _RANDOM + " (numpy's generator, not onnxruntime's, for the seed)",
    "test_bernoulli_seed_expanded": _RANDOM + " (numpy's generator, not onnxruntime's, for the seed)",
    # onnx's runner recurses into a sequence output and calls len() on each element; the first element here is
    # 0-d, so the runner itself raises TypeError. tests/test_control_flow.py checks this model against onnxruntime.
    "test_loop16_seq_none": "onnx runner cannot compare a sequence whose element is a 0-d tensor",
}

backend_test = onnx.backend.test.BackendTest(onnxjit.backend, __name__)
for case in EXPECTED_FAILURES:
    backend_test.xfail(f"^{case}_cpu$")

test_cases = backend_test.test_cases
if not onnxjit.backend.supports_device("CUDA"):
    # no CUDA device here: the suite is the CPU variants; the CUDA ones are not generated rather than skipped
    for cls in test_cases.values():
        for name in [n for n in vars(cls) if n.endswith("_cuda")]:
            delattr(cls, name)
globals().update(test_cases)
