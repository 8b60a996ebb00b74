"""The CUDA provider through the session API, against onnxruntime (CPU) on the same models.

Run on Numba's CUDA simulator (conftest.py sets NUMBA_ENABLE_CUDASIM=1 unless the environment says otherwise), so
shapes stay small: the simulator runs every CUDA thread as a Python thread.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit
from tests.conftest import assert_all_same, make_model, ort_run, tensor

pytest.importorskip("numba_cuda")

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _placement(sess, feeds) -> dict[str, set[str]]:
    """op type -> providers its nodes ran on, from the session's profile."""
    sess.run(None, feeds)
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    placed: dict[str, set[str]] = {}
    for e in events:
        for node in e["args"]["nodes"]:
            placed.setdefault(node.split(":")[0], set()).add(e["args"]["provider"])
    return placed


def _profiled(model, **kw):
    so = onnxjit.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"onnxjit_cuda_{os.getpid()}_")
    return onnxjit.InferenceSession(model.SerializeToString(), so, providers=CUDA, **kw)


def _close(got, want, rtol=1e-4, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_provider_is_listed_first_and_used():
    assert onnxjit.get_available_providers()[0] == "CUDAExecutionProvider"
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", T.FLOAT, [2, 3])],
                       [tensor("y", T.FLOAT, [2, 3])])
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=CUDA)
    assert sess.get_providers()[0] == "CUDAExecutionProvider"
    assert sess.get_provider_options()["CUDAExecutionProvider"] == {}


def test_fused_elementwise_broadcast_and_reduction_groups(rng):
    bias = numpy_helper.from_array(rng.standard_normal((3, 1, 1)).astype(np.float32), "bias")
    nodes = [helper.make_node("Add", ["x", "bias"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["a", "s"], ["m"]), helper.make_node("Greater", ["m", "x"], ["g"]),
             helper.make_node("Where", ["g", "m", "x"], ["w"]), helper.make_node("Erf", ["w"], ["e"]),
             helper.make_node("ReduceMean", ["e"], ["r"], axes=[-1], keepdims=1),
             helper.make_node("Sub", ["e", "r"], ["y"]), helper.make_node("Cast", ["y"], ["i"], to=T.INT32),
             helper.make_node("Max", ["y", "x"], ["z"])]
    model = make_model(nodes, [tensor("x", T.FLOAT, [2, 3, 4, 5])],
                       [tensor("y", T.FLOAT, None), tensor("i", T.INT32, None), tensor("z", T.FLOAT, None)],
                       opset=17, initializers=[bias])
    feeds = {"x": rng.standard_normal((2, 3, 4, 5), dtype=np.float32) * 3}
    sess = _profiled(model)
    placed = _placement(sess, feeds)
    for op in ("Add", "Sigmoid", "Mul", "Where", "Erf", "ReduceMean", "Sub", "Cast", "Max"):
        assert placed[op] == {"CUDAExecutionProvider"}, (op, placed)
    infos = [k for k in sess.kernels() if k.provider == "CUDAExecutionProvider"]
    assert infos and all("@cuda.jit" in src for k in infos for src in k.sources.values())
    _close(sess.run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("op", ["Round", "Sign", "Floor", "Ceil", "Sqrt", "Exp", "Log", "Softplus", "Asinh"])
def test_fused_math_edge_values(op):
    # the CUDA target's own versions of numpy's and vmath's functions (numba-cuda compiles no numpy ufunc)
    x = np.array([-np.inf, -2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.7, 1e30, np.inf, np.nan], np.float32)
    model = make_model([helper.make_node(op, ["x"], ["y"])], [tensor("x", T.FLOAT, [x.size])],
                       [tensor("y", T.FLOAT, [x.size])])
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=CUDA)
    assert sess.kernels()[0].provider == "CUDAExecutionProvider"
    got, want = sess.run(None, {"x": x})[0], ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
    assert (np.signbit(got) == np.signbit(want))[np.isfinite(want) & (want == 0)].all()


def _cnn(rng, c=8, side=16):
    """Conv 3x3 + BatchNormalization + Relu + MaxPool 2x2 over c channels of side x side."""
    w = numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")
    bn = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in [
        (rng.uniform(0.5, 1.5, c), "scale"), (rng.standard_normal(c), "shift"), (rng.standard_normal(c), "mean"),
        (rng.uniform(0.5, 2, c), "var")]]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = make_model(nodes, [tensor("x", T.FLOAT, [1, c, side, side])],
                       [tensor("y", T.FLOAT, [1, c, side // 2, side // 2])], initializers=[w, b, *bn])
    return model, {"x": rng.standard_normal((1, c, side, side), dtype=np.float32)}


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_ALL"])
def test_small_cnn_runs_on_cuda(rng, level):
    model, feeds = _cnn(rng)
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = getattr(onnxjit.GraphOptimizationLevel, level)
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"onnxjit_cnn_{os.getpid()}_")
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=CUDA)
    placed = _placement(sess, feeds)
    for op in ("Conv", "MaxPool"):
        assert placed[op] == {"CUDAExecutionProvider"}, placed
    _close(sess.run(None, feeds), ort_run(model, feeds), rtol=1e-4, atol=1e-4)


def _encoder_layer(rng, hidden=32, seq=8, heads=2):
    d = hidden // heads

    def w(name, *shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [w("wq", hidden, hidden), w("wk", hidden, hidden), w("wv", hidden, hidden), w("wo", hidden, hidden),
             w("w1", hidden, 4 * hidden), w("b1", 4 * hidden), w("w2", 4 * hidden, hidden), w("b2", hidden),
             w("g1", hidden, scale=1.0), w("be1", hidden), w("g2", hidden, scale=1.0), w("be2", hidden),
             numpy_helper.from_array(np.array([1, seq, heads, d], np.int64), "split_shape"),
             numpy_helper.from_array(np.array([1, seq, hidden], np.int64), "merge_shape"),
             numpy_helper.from_array(np.array(np.sqrt(d), np.float32), "scale"),
             numpy_helper.from_array(np.array(1 / np.sqrt(2), np.float32), "rsqrt2"),
             numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    n = helper.make_node
    nodes = []
    for p in ("q", "k", "v"):
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}0"]), n("Reshape", [f"{p}0", "split_shape"], [f"{p}1"]),
                  n("Transpose", [f"{p}1"], [f"{p}h"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [n("MatMul", ["qh", "kh"], ["s0"]), n("Div", ["s0", "scale"], ["s1"]),
              n("Softmax", ["s1"], ["p"], axis=-1), n("MatMul", ["p", "vh"], ["o0"]),
              n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "merge_shape"], ["o2"]),
              n("MatMul", ["o2", "wo"], ["o3"]), n("Add", ["o3", "x"], ["r1"]),
              n("LayerNormalization", ["r1", "g1", "be1"], ["h1"], axis=-1, epsilon=1e-5),
              n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
              n("Mul", ["f1", "rsqrt2"], ["f2"]), n("Erf", ["f2"], ["f3"]), n("Add", ["f3", "one"], ["f4"]),
              n("Mul", ["f1", "f4"], ["f5"]), n("Mul", ["f5", "half"], ["f6"]),
              n("MatMul", ["f6", "w2"], ["f7"]), n("Add", ["f7", "b2"], ["f8"]), n("Add", ["f8", "h1"], ["r2"]),
              n("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5)]
    model = make_model(nodes, [tensor("x", T.FLOAT, [1, seq, hidden])], [tensor("y", T.FLOAT, [1, seq, hidden])],
                       initializers=inits)
    return model, {"x": rng.standard_normal((1, seq, hidden), dtype=np.float32)}


def test_transformer_encoder_layer_runs_on_cuda(rng):
    model, feeds = _encoder_layer(rng)
    sess = _profiled(model)
    placed = _placement(sess, feeds)
    for op in ("MatMul", "Softmax", "LayerNormalization", "Transpose", "Erf"):
        assert placed[op] == {"CUDAExecutionProvider"}, (op, placed)
    _close(sess.run(None, feeds), ort_run(model, feeds), rtol=1e-4, atol=1e-4)


def test_constants_are_copied_to_the_device_once(rng):
    model, feeds = _cnn(rng, c=2, side=4)
    sess = _profiled(model)
    copies = [e for e in _events(sess, feeds) if e["args"]["op_name"] == "Copy"]
    # the input in, the output out: no weight crosses per run
    assert sorted(e["name"] for e in copies) == ["copy x -> x@cuda", "copy y -> y@cpu"]


def _events(sess, feeds):
    sess.run(None, feeds)
    path = sess.end_profiling()
    try:
        with open(path) as f:
            return json.load(f)
    finally:
        os.remove(path)


def test_memory_pool_reuses_buffers_across_runs(rng):
    model, feeds = _cnn(rng, c=2, side=4)
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=CUDA)
    pool = next(p for p in sess._providers if p.name == "CUDAExecutionProvider").dev.pool
    first = sess.run(None, feeds)
    allocations = pool.allocations
    for _ in range(3):
        assert_all_same(sess.run(None, feeds), first)
    assert pool.allocations == allocations


def test_provider_options(rng):
    model, feeds = _cnn(rng, c=2, side=4)
    opts = {"device_id": 0, "gpu_mem_limit": 64, "arena_extend_strategy": "kSameAsRequested",
            "do_copy_in_default_stream": 0}
    with pytest.raises(onnxjit.RuntimeException, match="gpu_mem_limit=64"):
        onnxjit.InferenceSession(model.SerializeToString(), providers=[("CUDAExecutionProvider", opts),
                                                                       "CPUExecutionProvider"]).run(None, feeds)
    opts["gpu_mem_limit"] = 1 << 24
    sess = onnxjit.InferenceSession(model.SerializeToString(),
                                    providers=[("CUDAExecutionProvider", opts), "CPUExecutionProvider"])
    assert sess.get_provider_options()["CUDAExecutionProvider"]["arena_extend_strategy"] == "kSameAsRequested"
    _close(sess.run(None, feeds), ort_run(model, feeds), atol=1e-4)
    with pytest.raises(onnxjit.InvalidArgument, match="arena_extend_strategy"):
        onnxjit.InferenceSession(model.SerializeToString(), providers=[
            ("CUDAExecutionProvider", {"arena_extend_strategy": "sometimes"})])
    with pytest.raises(onnxjit.InvalidArgument, match="device_id"):
        onnxjit.InferenceSession(model.SerializeToString(), providers=[
            ("CUDAExecutionProvider", {"device_id": "first"})])


def _unary(op, shape=(2, 3)):
    return make_model([helper.make_node(op, ["x"], ["y"])], [tensor("x", T.FLOAT, list(shape))],
                      [tensor("y", T.FLOAT, list(shape))]).SerializeToString()


def test_iobinding_device_outputs_chain_two_models(rng):
    first = onnxjit.InferenceSession(_unary("Relu"), providers=CUDA)
    second = onnxjit.InferenceSession(_unary("Neg"), providers=CUDA)
    x = rng.standard_normal((2, 3), dtype=np.float32)
    xv = onnxjit.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert xv.device_name() == "cuda"
    io = first.io_binding()
    io.bind_ortvalue_input("x", xv)
    io.bind_output("y", "cuda")
    first.run_with_iobinding(io)
    middle = io.get_outputs()[0]
    assert middle.device_name() == "cuda" and middle.shape() == [2, 3]
    io2 = second.io_binding()
    io2.bind_ortvalue_input("x", middle)
    io2.bind_output("y", "cuda")
    second.run_with_iobinding(io2)
    np.testing.assert_array_equal(io2.copy_outputs_to_cpu()[0], -np.maximum(x, 0))
    # a device array fed through run() directly, and a preallocated device output
    np.testing.assert_array_equal(second.run(None, {"x": middle.value()})[0], -np.maximum(x, 0))
    out = onnxjit.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "cuda", 0)
    io3 = second.io_binding()
    io3.bind_cpu_input("x", x)
    io3.bind_output("y", "cuda", 0, np.float32, [2, 3], out.data_ptr())
    second.run_with_iobinding(io3)
    np.testing.assert_array_equal(out.numpy(), -x)


def test_device_feed_checked_and_copied_to_host_readers(rng):
    # Einsum has no CUDA kernel: it runs on the host and gets a host copy of the device feed
    model = make_model([helper.make_node("Einsum", ["x"], ["t"], equation="ij->ji"),
                        helper.make_node("Relu", ["x"], ["y"])],
                       [tensor("x", T.FLOAT, [2, 3])], [tensor("t", T.FLOAT, [3, 2]), tensor("y", T.FLOAT, [2, 3])])
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=CUDA)
    x = rng.standard_normal((2, 3), dtype=np.float32)
    xv = onnxjit.OrtValue.ortvalue_from_numpy(x, "cuda", 0).value()
    assert_all_same(sess.run(None, {"x": xv}), ort_run(model, {"x": x}))
    bad = onnxjit.OrtValue.ortvalue_from_numpy(x.astype(np.float64), "cuda", 0).value()
    with pytest.raises(onnxjit.InvalidArgument, match="input 'x'.*data type"):
        sess.run(None, {"x": bad})
    wrong = onnxjit.OrtValue.ortvalue_from_numpy(np.zeros((3, 3), np.float32), "cuda", 0).value()
    with pytest.raises(onnxjit.InvalidArgument, match="input 'x'.*index: 0 Got: 3 Expected: 2"):
        sess.run(None, {"x": wrong})


def test_device_outputs_need_the_cuda_provider():
    sess = onnxjit.InferenceSession(_unary("Relu"), providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    io.bind_cpu_input("x", np.ones((2, 3), np.float32))
    io.bind_output("y", "cuda")
    with pytest.raises(onnxjit.InvalidArgument, match="bound to 'cuda'.*CUDAExecutionProvider"):
        sess.run_with_iobinding(io)


def test_gather_with_constant_indices_out_of_range_raises(rng):
    idx = numpy_helper.from_array(np.array([0, 5], np.int64), "idx")
    model = make_model([helper.make_node("Gather", ["x", "idx"], ["y"], axis=0)], [tensor("x", T.FLOAT, [3, 2])],
                       [tensor("y", T.FLOAT, [2, 2])], initializers=[idx])
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=CUDA)
    with pytest.raises(onnxjit.RuntimeException, match=r"CUDAExecutionProvider.*Gather.*idx=5.*\[-3,2\]"):
        sess.run(None, {"x": rng.standard_normal((3, 2), dtype=np.float32)})
