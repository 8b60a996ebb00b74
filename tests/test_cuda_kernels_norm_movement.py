"""CUDA kernels of the normalization ops (Softmax, LogSoftmax, LayerNormalization, BatchNormalization,
InstanceNormalization, LRN) and the data-movement ops (Transpose, Concat, Slice, Gather, Reshape, Flatten,
Squeeze, Unsqueeze, Expand, Identity, Split, Pad, Tile) against onnxruntime's CPU provider: one-node models,
each kernel built by its CUDA builder and run on device arrays (Numba's CUDA simulator unless
NUMBA_ENABLE_CUDASIM=0 is set, where a GPU runs them)."""
from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before numba.cuda loads; set it to 0 to run on a GPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("numba_cuda")

import onnxruntime as ort  # noqa: E402
from onnx import helper  # noqa: E402

import onnxjit.kernels.cuda.movement  # noqa: E402,F401  (registers the ops)
import onnxjit.kernels.cuda.normalization  # noqa: E402,F401
from onnxjit.ir.serde import from_onnx  # noqa: E402
from onnxjit.ir.types import elem_type_of  # noqa: E402
from onnxjit.kernels.cuda.device import Device  # noqa: E402
from onnxjit.kernels.cuda.registry import cuda_builder_for, host_inputs_of  # noqa: E402

ort.set_default_logger_severity(4)


@pytest.fixture(scope="module")
def device():
    return Device()


def i64(*v):
    return np.array(v, dtype=np.int64)


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def data(shape, dtype=np.float32):
    n = int(np.prod(shape))
    base = (np.arange(n) * 7) % 23
    if np.dtype(dtype) == np.bool_:
        return (base % 3 == 0).reshape(shape)
    return (base - 5).astype(dtype).reshape(shape)


def to_device(device, a):
    """device.to_device(a), keeping a 0-d array 0-d (Device.to_device's np.ascontiguousarray makes it (1,))."""
    out = device.empty(a.shape, a.dtype)
    if a.size:
        out.copy_to_device(np.ascontiguousarray(a).reshape(a.shape), stream=device.stream)
    return out


def make(op, inputs, opset=17, n_out=1, out_names=None, out_type=None, **attrs):
    """A one-node model; `inputs` is a list of (name, array or None for an absent input). Trailing absent inputs
    are left out of the node (onnxruntime 1.32 crashes on LayerNormalization(x, s, ""))."""
    inputs = list(inputs)
    while inputs and inputs[-1][1] is None:
        inputs.pop()
    vis = [helper.make_tensor_value_info(n, elem_type_of(a.dtype), a.shape) for n, a in inputs if a is not None]
    names = [n if a is not None else "" for n, a in inputs]
    outs = out_names or [f"y{i}" for i in range(n_out)]
    first = next(a for _, a in inputs if a is not None)
    et = out_type if out_type is not None else elem_type_of(first.dtype)
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info(o, et, None) for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def build(device, model):
    node = from_onnx(model).graph.nodes[0]
    builder = cuda_builder_for(node)
    assert builder is not None, f"no CUDA builder for {node.op_type}"
    return node, builder(node, device)


def check(device, op, inputs, opset=17, n_out=1, exact=True, rtol=1e-4, atol=1e-5, **attrs):
    model = make(op, inputs, opset, n_out, **attrs)
    node, fn = build(device, model)
    assert fn is not None, f"{op} declined"
    host = host_inputs_of(node)
    # absent optional inputs are passed as None (trailing ones too, though the node leaves them out)
    args = [None if a is None else (a if i in host else to_device(device, a)) for i, (_, a) in enumerate(inputs)]
    outs = fn(*args)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, {n: a for n, a in inputs if a is not None})
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        got = device.to_host(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return outs


def declines(device, op, inputs, opset=17, n_out=1, out_names=None, out_type=None, **attrs):
    model = make(op, inputs, opset, n_out, out_names=out_names, out_type=out_type, **attrs)
    node = from_onnx(model).graph.nodes[0]
    builder = cuda_builder_for(node)
    return builder is None or builder(node, device) is None


# --- normalization ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(13, None), (13, 1), (13, -3), (11, None), (11, 2), (11, -1), (1, 0)])
def test_softmax(device, op, opset, axis):
    x = rand(2, 3, 5) * 4
    attrs = {} if axis is None else {"axis": axis}
    check(device, op, [("x", x)], opset, exact=False, **attrs)


def test_softmax_float64_long_rows(device):
    x = rand(3, 37, dtype=np.float64) * 10  # rows longer than a block
    check(device, "Softmax", [("x", x)], 13, exact=False, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("axis,scale_shape,with_bias", [(-1, (6,), True), (-2, (4, 6), False), (-2, (6,), True),
                                                        (1, (1, 4, 6), True), (0, (3, 4, 6), True)])
def test_layer_norm(device, axis, scale_shape, with_bias):
    x = rand(3, 4, 6) * 3 + 1
    s, b = rand(*scale_shape, seed=1), rand(*scale_shape, seed=2) if with_bias else None
    check(device, "LayerNormalization", [("x", x), ("s", s), ("b", b)], 17, exact=False, axis=axis, epsilon=1e-3)


@pytest.mark.parametrize("axis,scale_shape", [(-1, (40,)), (1, (3, 40))])
def test_layer_norm_long_rows(device, axis, scale_shape):
    # rows longer than SHORT_ROW: a block of threads per row
    x = rand(2, 3, 40) * 3 + 1
    s, b = rand(*scale_shape, seed=1), rand(*scale_shape, seed=2)
    check(device, "LayerNormalization", [("x", x), ("s", s), ("b", b)], 17, exact=False, axis=axis, epsilon=1e-3)


def test_layer_norm_float64(device):
    x = rand(2, 9, dtype=np.float64)
    check(device, "LayerNormalization", [("x", x), ("s", rand(9, dtype=np.float64, seed=3))], 17, exact=False,
          rtol=1e-10, atol=1e-12)


def test_batchnorm(device):
    c = 3
    x = rand(2, c, 4, 5)
    params = [("s", rand(c, seed=1)), ("b", rand(c, seed=2)), ("m", rand(c, seed=3)),
              ("v", np.abs(rand(c, seed=4)) + 0.5)]
    check(device, "BatchNormalization", [("x", x)] + params, 15, exact=False, epsilon=1e-4)
    check(device, "BatchNormalization", [("x", rand(4, c))] + params, 9, exact=False)  # (N, C): no spatial dims


@pytest.mark.parametrize("plane", [(4, 5), (6, 7)])  # rows of 20 (a thread each) and of 42 (a block each)
def test_instance_norm(device, plane):
    x = rand(2, 3, *plane) * 2 + 1
    check(device, "InstanceNormalization", [("x", x), ("s", rand(3, seed=1)), ("b", rand(3, seed=2))], 17,
          exact=False, epsilon=1e-4)


@pytest.mark.parametrize("size", [3, 5, 1])  # onnxruntime takes odd sizes only
def test_lrn(device, size):
    x = rand(2, 5, 3, 4)
    check(device, "LRN", [("x", x)], 13, exact=False, size=size, alpha=0.01, beta=0.6, bias=2.0)


def test_normalization_declines(device):
    x, s = rand(2, 4), rand(4)
    # LayerNormalization asked for Mean / InvStdDev
    assert declines(device, "LayerNormalization", [("x", x), ("s", s)], 17, out_names=["y", "mean"])
    # BatchNormalization in training mode (opset 14: three outputs)
    p = [("s", s[:2]), ("b", s[:2]), ("m", s[:2]), ("v", s[:2] ** 2)]
    assert declines(device, "BatchNormalization", [("x", rand(2, 2, 3))] + p, 15, training_mode=1)
    assert declines(device, "BatchNormalization", [("x", rand(2, 2, 3))] + p, 15, n_out=3, training_mode=1)
    # float16 is left to another provider
    assert declines(device, "Softmax", [("x", x.astype(np.float16))], 13)
    assert declines(device, "LRN", [("x", rand(1, 2, 2, 2).astype(np.float16))], 13, size=3)


# --- data movement ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,perm,dtype", [((2, 3, 4), None, np.float32), ((2, 3, 4, 5), (0, 2, 1, 3), np.int64),
                                              ((2, 3, 4), (1, 2, 0), np.bool_), ((4, 5), (1, 0), np.float16),
                                              ((2, 1, 3, 2, 2, 3), (5, 3, 1, 0, 4, 2), np.int8),
                                              ((2, 3, 2, 2, 2, 2, 2), (6, 0, 1, 2, 3, 5, 4), np.uint16)])
def test_transpose(device, shape, perm, dtype):
    attrs = {} if perm is None else {"perm": list(perm)}
    check(device, "Transpose", [("x", data(shape, dtype))], 17, **attrs)


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_concat(device, axis):
    xs = [("a", data((2, 3, 4))), ("b", data((2, 3, 4)) + 100), ("c", data((2, 3, 4)) - 100)]
    if axis == 1:
        xs = [("a", data((2, 1, 4))), ("b", data((2, 3, 4)) + 100), ("c", data((2, 2, 4)) - 100)]
    check(device, "Concat", xs, 13, axis=axis)


def test_concat_int8_and_empty(device):
    check(device, "Concat", [("a", data((2, 3), np.int8)), ("b", np.zeros((0, 3), np.int8))], 13, axis=0)


@pytest.mark.parametrize("x,starts,ends,axes,steps", [
    (data((5, 6)), i64(1, -1), i64(4, 0), i64(0, 1), i64(1, -2)),         # negative step
    (data((5, 6)), i64(10, 2), i64(-100, 100), i64(0, -1), i64(-1, 2)),   # clamped ends, negative axes
    (data((4, 5, 6), np.int8), i64(-3), i64(1000), i64(2), None),          # steps absent
    (data((4, 5)), i64(0, 0), i64(2, 3), None, None),                      # axes absent
    (data((4, 5)), i64(3), i64(3), i64(0), i64(1)),                        # empty
    (data((7,), np.uint64), i64(-1), i64(-(1 << 63)), i64(0), i64(-3)),    # from the end, to the start
])
def test_slice(device, x, starts, ends, axes, steps):
    inputs = [("x", x), ("st", starts), ("en", ends), ("ax", axes), ("sp", steps)]
    check(device, "Slice", inputs, 13)


def test_slice_opset9_attributes(device):
    check(device, "Slice", [("x", data((4, 5, 6)))], 9, starts=[1, -4], ends=[3, 100], axes=[0, -1])


@pytest.mark.parametrize("axis,indices", [(1, np.array([[0, -1], [-3, 2]], np.int64)),
                                          (0, np.array([2, 0, -1, 1], np.int32)),
                                          (-1, np.array(-2, np.int64))])
def test_gather(device, axis, indices):
    check(device, "Gather", [("x", data((3, 4, 5), np.float32)), ("i", indices)], 13, axis=axis)


def test_gather_int64_data(device):
    check(device, "Gather", [("x", data((4, 3), np.int64)), ("i", np.array([[3, 0]], np.int32))], 13)


@pytest.mark.parametrize("shape,target,allowzero", [((2, 3, 4), (0, -1), 0), ((2, 3, 4), (4, 1, -1, 3), 0),
                                                    ((2, 0, 3), (0, 6), 1), ((6,), (2, 3), 0)])
def test_reshape(device, shape, target, allowzero):
    x = data(shape)
    outs = check(device, "Reshape", [("x", x), ("s", i64(*target))], 17, allowzero=allowzero)
    assert outs[0].size == x.size


@pytest.mark.parametrize("axis", [0, 2, -1, 3])
def test_flatten(device, axis):
    check(device, "Flatten", [("x", data((2, 3, 4)))], 13, axis=axis)


def test_squeeze_unsqueeze(device):
    x = data((1, 3, 1, 2))
    check(device, "Squeeze", [("x", x), ("a", i64(-2, 0))], 13)
    check(device, "Squeeze", [("x", x)], 13)
    check(device, "Squeeze", [("x", x)], 11, axes=[2])
    check(device, "Unsqueeze", [("x", data((3, 2))), ("a", i64(-1, 0))], 13)
    check(device, "Unsqueeze", [("x", data((3, 2)))], 11, axes=[1])


def test_identity(device):
    x = data((2, 3), np.uint8)
    check(device, "Identity", [("x", x)], 17)


@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 3, 4)), ((1, 4), (3, 1)), ((2, 3), (2, 3)), ((), (2, 2))])
def test_expand(device, xshape, shape):
    check(device, "Expand", [("x", data(xshape, np.int32) if xshape else np.array(7, np.int32)),
                             ("s", i64(*shape))], 13)


def test_split(device):
    x = data((5, 6))
    check(device, "Split", [("x", x), ("s", i64(1, 4))], 13, n_out=2, axis=0)
    check(device, "Split", [("x", x)], 13, n_out=3, axis=-1)
    check(device, "Split", [("x", x)], 18, n_out=3, axis=0, num_outputs=3)  # uneven: 2, 2, 1
    check(device, "Split", [("x", x)], 11, n_out=2, axis=1, split=[4, 2])


@pytest.mark.parametrize("mode,pads,value,axes,opset", [
    ("constant", i64(1, 0, 2, 1), np.array(1.5, np.float32), None, 13),
    ("constant", i64(-1, 2, 1, -2), None, None, 13),                     # negative pads crop
    ("reflect", i64(2, 1, 1, 3), None, None, 13),
    ("edge", i64(0, 3, 2, 0), None, None, 13),
    ("wrap", i64(1, 2, 3, 1), None, None, 19),
    ("constant", i64(2, 1), np.array(-2.0, np.float32), i64(-1), 18),    # axes
])
def test_pad(device, mode, pads, value, axes, opset):
    inputs = [("x", data((3, 4))), ("p", pads), ("v", value), ("a", axes)]
    while inputs[-1][1] is None:
        inputs.pop()
    check(device, "Pad", inputs, opset, mode=mode)


def test_pad_attributes_and_dtypes(device):
    check(device, "Pad", [("x", data((2, 3)))], 2, pads=[0, 1, 1, 0], value=3.0)
    check(device, "Pad", [("x", data((2, 3), np.int32)), ("p", i64(0, 1, 1, 0)), ("v", np.array(-7, np.int32))], 13)
    check(device, "Pad", [("x", data((2, 3), np.bool_)), ("p", i64(1, 1, 0, 2)), ("v", np.array(True))], 13)


def test_tile(device):
    check(device, "Tile", [("x", data((2, 3, 1), np.int16)), ("r", i64(2, 1, 3))], 13)
    check(device, "Tile", [("x", data((2, 3))), ("r", i64(0, 2))], 13)


def test_movement_declines(device):
    strings = np.array([["a", "b"], ["c", "d"]], dtype=object)
    assert declines(device, "Transpose", [("x", strings)], 17)
    assert declines(device, "Gather", [("x", strings), ("i", i64(0))], 13)
    assert declines(device, "Concat", [("a", strings), ("b", strings)], 13, axis=0)
    assert declines(device, "Pad", [("x", data((2, 2))), ("p", i64(1, 1, 1, 1))], 13, mode="wrap")  # wrap from 19


def test_view_outlives_its_input(device):
    """A Reshape output is a view: it must keep its input's pool buffer from being handed out again."""
    import gc
    model = make("Reshape", [("x", data((2, 6))), ("s", i64(3, 4))], 17)
    _, fn = build(device, model)
    x = to_device(device, data((2, 6)))
    (y,) = fn(x, i64(3, 4))
    del x
    gc.collect()
    other = device.to_device(np.full(12, 99, np.float32))  # the same size class
    np.testing.assert_array_equal(device.to_host(y), data((2, 6)).reshape(3, 4))
    del other
