"""The machine code of the hand-written kernels' hot loops: the activation epilogue every Conv/Gemm kernel inlines
stores unconditionally. A loop that writes a loaded value back unchanged on one branch (Relu's `v`) lets LLVM
drop that store and predicate the other, and the vectorized loop then stores with vmaskmovps, which on AMD Zen 3
ran Relu 4x slower than a plain vector store (kernels/linalg.py activate)."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from onnxjit.kernels import linalg

HAS_AVX = "avx" in llvm.get_host_cpu_features().flatten()


# AVX/AVX2 masked moves, and AVX-512 stores under a mask register (x86's backend turns a vector store of
# select(mask, x, the loaded value) into one; it is not in the IR). Only a memory destination counts: a masked
# move between registers (`vmovaps %ymm6, %ymm25 {%k2}`) is AVX-512's blend, a select that costs a plain move
MASKED_STORE = re.compile(r"vmaskmovp[sd]|vmov\w+\s+%[xyz]mm\d+, [-\w]*\([^)\n]*\)\s*\{%k\d\}")


def _asm(function, *args):
    """Machine code of a fresh (uncached: cached code cannot be inspected) compile of `function`."""
    fresh = numba.njit(function)
    fresh(*args)
    return "\n".join(fresh.inspect_asm().values())


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_activation_epilogue_has_no_masked_stores(dtype):
    y = np.linspace(-2, 2, 64).astype(dtype)
    act = np.array([0.1, 0.5, 0, 1], dtype)
    asm = _asm(linalg.activate.py_func, y, 0, y.size, linalg.RELU, act)
    assert not MASKED_STORE.search(asm)


@pytest.mark.skipif(not HAS_AVX, reason="LLVM emits masked vector stores only for AVX targets")
def test_masked_store_check_detects_the_pattern():
    # control: the form activate avoided does give a masked store where the target has them
    def relu_in_place(y):
        zero = y.dtype.type(0)
        for j in range(y.size):
            v = y[j]
            y[j] = zero if v < zero else v

    assert MASKED_STORE.search(_asm(relu_in_place, np.linspace(-2, 2, 64).astype(np.float32)))


@pytest.mark.parametrize("kind", range(len(linalg.ACTIVATIONS)), ids=linalg.ACTIVATIONS)
def test_activations_keep_their_values(kind):
    """The + zero that keeps the stores plain changes no value but the sign of a zero (NaN stays NaN)."""
    x = np.array([-3, -1, -0.0, 0, 0.25, 1, 7, np.nan, np.inf, -np.inf], np.float32)
    act = np.array([0.2, 0.6, 0, 1], np.float32)
    if linalg.ACTIVATIONS[kind] == "Clip":
        act = np.array([-1, 2, 0, 1], np.float32)
    got = x.copy()
    linalg.activate(got, 0, got.size, kind, act)
    want = x.copy()
    linalg.activate.py_func(want, 0, want.size, kind, act)  # the same source run by Python
    np.testing.assert_array_equal(got, want)


def test_network_kernels_have_no_masked_stores():
    """Every hand-written kernel a small CNN runs (convs with activations, pools, a reduction, a Gemm, LogSoftmax),
    compiled for the signatures it ran with: no masked stores (max-style loops keep their value as m + zero)."""
    import onnxjit
    from numba.core.dispatcher import Dispatcher
    from onnx import TensorProto as T, helper, numpy_helper
    from onnxjit.kernels import conv, loss, pool, reduce

    rng = np.random.default_rng(0)
    weights = {"W1": rng.standard_normal((16, 3, 3, 3)), "W2": rng.standard_normal((16, 1, 3, 3)),
               "W3": rng.standard_normal((32, 16, 1, 1)), "G": rng.standard_normal((32, 10))}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "W2"], ["c2"], group=16, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
             helper.make_node("Conv", ["r2", "W3"], ["c3"]),
             helper.make_node("LeakyRelu", ["c3"], ["r3"], alpha=0.1),
             helper.make_node("ReduceMax", ["r3", "axes"], ["m"], keepdims=0),
             helper.make_node("Gemm", ["m", "G"], ["g"]),
             helper.make_node("LogSoftmax", ["g"], ["y"], axis=1),
             helper.make_node("ReduceMax", ["r3", "axis1"], ["channel_max"], keepdims=0)]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6, np.float32), "hi"),
              numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
              numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 10]),
                               helper.make_tensor_value_info("channel_max", T.FLOAT, [2, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnxjit.InferenceSession(model.SerializeToString()).run(None, {"x": rng.standard_normal((2, 3, 16, 16),
                                                                                          dtype=np.float32)})
    # a 1-D conv deeper than the packed GEMM takes (kk = 1,200 > PACKED_IM2COL_MAX_K) runs on conv_gemm (BLAS)
    deep = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1])], "deep",
                             [helper.make_tensor_value_info("x", T.FLOAT, [1, 400, 9])],
                             [helper.make_tensor_value_info("y", T.FLOAT, [1, 40, 9])],
                             [numpy_helper.from_array(rng.standard_normal((40, 400, 3)).astype(np.float32), "W")])
    onnxjit.InferenceSession(helper.make_model(deep, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
                             ).run(None, {"x": rng.standard_normal((1, 400, 9), dtype=np.float32)})
    # depthwise convs over rows wider than conv_depthwise_blocked takes (3x3: conv_depthwise_3x3, 5x5:
    # conv_depthwise_rows), and a grouped one with a channel multiplier (conv_direct)
    for outs, rows, k in ((2, 2, 3), (2, 30, 3), (2, 30, 5), (4, 30, 3)):
        plane = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"], group=2, pads=[k // 2] * 4)], "plane",
                                  [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, rows, 300])],
                                  [helper.make_tensor_value_info("y", T.FLOAT, [1, outs, rows, 300])],
                                  [numpy_helper.from_array(rng.standard_normal((outs, 1, k, k)).astype(np.float32),
                                                           "W")])
        onnxjit.InferenceSession(helper.make_model(plane, opset_imports=[helper.make_opsetid("", 18)])
                                 .SerializeToString()).run(None, {"x": rng.standard_normal((1, 2, rows, 300),
                                                                                          dtype=np.float32)})
    # the CNN's pool runs on pool_blocked (small planes, channels last); a larger plane takes the generic pool
    wide = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])], "wide",
                             [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 40, 40])],
                             [helper.make_tensor_value_info("y", T.FLOAT, [1, 2, 19, 19])])
    onnxjit.InferenceSession(helper.make_model(wide, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
                             ).run(None, {"x": rng.standard_normal((1, 2, 40, 40), dtype=np.float32)})
    checked = []
    for module in (conv, pool, reduce, loss, linalg):
        for name, d in vars(module).items():
            if not isinstance(d, Dispatcher) or d.__module__ != module.__name__ or not d.signatures:
                continue
            if name in ("argminmax",):  # keeps an index and a value per lane: both stores stay predicated
                continue
            opts = {k: v for k, v in d.targetoptions.items() if k != "cache"}
            fresh = numba.njit(**opts)(d.py_func)
            for sig in d.signatures:
                if any(getattr(a, "dtype", None) == numba.float32 for a in sig):
                    fresh.compile(sig)
            for sig, asm in fresh.inspect_asm().items():
                checked.append(name)
                if name in ("conv_depthwise_rows", "conv_depthwise_3x3"):  # rows narrower than a vector:
                    # simd.vstore_first's, on purpose
                    continue
                assert not MASKED_STORE.search(asm), f"{module.__name__}.{name}{sig} has a masked store"
    assert {"conv_gemm", "conv_packed", "conv_broadcast", "conv_direct", "conv_depthwise_blocked",
            "conv_depthwise_rows", "conv_depthwise_3x3", "pool", "pool_blocked", "minmax",
            "activate"} <= set(checked), checked


def test_onnxjit_functions_prefer_the_cpus_vector_width():
    """onnxjit's functions carry LLVM's prefer-vector-width=512 where the CPU has AVX-512 (kernels/vector_width.py),
    and then vectorize the activation loop on zmm registers; a function of another module keeps Numba's default."""
    from onnxjit.kernels.simd import HAS_AVX512

    def relu_elsewhere(y):  # this test module's: not onnxjit's
        for j in range(y.size):
            y[j] = max(y[j], np.float32(0))

    y = np.linspace(-2, 2, 256).astype(np.float32)
    act = np.array([0.1, 0.5, 0, 1], np.float32)
    ours = numba.njit(linalg.activate.py_func)
    ours(y, 0, y.size, linalg.SIGMOID, act)
    elsewhere = numba.njit(relu_elsewhere)
    elsewhere(y)
    attribute = '"prefer-vector-width"="512"'
    assert (attribute in "".join(ours.inspect_llvm().values())) == HAS_AVX512
    assert attribute not in "".join(elsewhere.inspect_llvm().values())
    assert ("zmm" in "".join(ours.inspect_asm().values())) == HAS_AVX512


@pytest.mark.skipif(not HAS_AVX, reason="checks x86 AVX machine code")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_max_and_min_reductions_are_vector_loops(dtype):
    """The fused kernels' ReduceMax and ReduceMin update (fuser/scalar.py fmaximum, fminimum: LLVM's NaN-propagating
    maximum and minimum) compiles to packed max/min instructions, where fmax's compare-and-select carried from one
    element to the next stayed scalar; the result keeps a NaN."""
    from onnxjit.fuser import scalar as S

    def reduce_both(x):
        hi, lo = x.dtype.type(-np.inf), x.dtype.type(np.inf)
        for i in range(x.size):
            hi = S.fmaximum(hi, x[i])
            lo = S.fminimum(lo, x[i])
        return hi, lo

    x = np.linspace(-3, 5, 1001).astype(dtype)
    asm = _asm(reduce_both, x)
    assert re.search(r"\bvmaxp[sd]\s+%[yz]mm", asm) and re.search(r"\bvminp[sd]\s+%[yz]mm", asm)
    fresh = numba.njit(reduce_both)
    assert fresh(x) == (5, -3)
    x[500] = np.nan
    assert all(np.isnan(v) for v in fresh(x))
