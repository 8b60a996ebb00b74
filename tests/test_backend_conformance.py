"""The ONNX backend conformance suite (node, simple, pytorch-converted, pytorch-operator and light model cases)
run through `onnxjit.backend` with the default providers.

EXPECTED_FAILURES is the one list of cases known to fail, each with its reason. It only ever shrinks: the cases
are marked as expected failures, so one that starts passing fails the suite until it is removed from the list.
One entry depends on the machine: on a CPU whose BLAS rounds equal output channels differently (probed below),
the light squeezenet's ill-conditioned stored output cannot be met.
"""
import numpy as np
import onnx.backend.test
import scipy.linalg.blas

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


def _blas_rounds_rows_alike() -> bool:
    """Whether the BLAS that Numba's np.dot calls (scipy's) gives identical rows of W @ X for identical rows of W.
    OpenBLAS's Haswell/Zen sgemm kernels round the columns of one micro-tile in different orders, so equal filters
    give outputs one ulp apart; its SkylakeX kernels (and onnxruntime's MLAS) do not."""
    rng = np.random.default_rng(0)
    x = (rng.random((32, 100)) * 6).astype(np.float32)
    w = np.full((48, 32), 0.02, np.float32)
    y = scipy.linalg.blas.sgemm(1.0, w, x)
    return bool((y == y[0]).all())


if not _blas_rounds_rows_alike():
    # The light squeezenet's placeholder weights make its 1000 logits all equal at about 1e10, where one ulp is
    # 1024: Softmax turns an ulp of difference between channels into a different class. Its stored output needs
    # every channel rounded alike, which this machine's BLAS does not do (see above); outputs otherwise agree.
    EXPECTED_FAILURES["test_squeezenet"] = "BLAS rounds equal output channels differently on this CPU"

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
