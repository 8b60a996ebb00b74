"""The CUDA provider's MatMul, Gemm, Conv and pooling kernels (onnxjit.kernels.cuda.gemm / conv / pool) against
onnxruntime's CPU provider, one-node models of small shapes.

They run under Numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM is set otherwise before this module loads
(NUMBA_ENABLE_CUDASIM=0 runs the same tests on a GPU)."""
import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("numba_cuda")

import onnxruntime as ort

# importing the kernel modules registers their ops
import onnxjit.kernels.cuda.conv
import onnxjit.kernels.cuda.gemm
import onnxjit.kernels.cuda.pool  # noqa: F401
from onnxjit.ir.serde import from_onnx
from onnxjit.kernels.cuda.device import Device
from onnxjit.kernels.cuda.registry import cuda_builder_for

F32, F64 = np.float32, np.float64
_ELEM = {np.dtype(F32): TensorProto.FLOAT, np.dtype(F64): TensorProto.DOUBLE, np.dtype(np.float16): TensorProto.FLOAT16}
_DEVICE = []


def device():
    if not _DEVICE:
        _DEVICE.append(Device())
    return _DEVICE[0]


def rand(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape).astype(dtype)


def make_model(op, inputs, attrs=None, n_outputs=1, opset=17):
    """A one-node model: `inputs` a list of (name, array or None for an absent optional input)."""
    names = [name if a is not None else "" for name, a in inputs]
    outs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    elem = _ELEM[np.dtype(inputs[0][1].dtype)]
    vis = [helper.make_tensor_value_info(name, _ELEM[np.dtype(a.dtype)], list(a.shape)) for name, a in inputs
           if a is not None]
    out_vis = [helper.make_tensor_value_info("y", elem, None)]
    out_vis += [helper.make_tensor_value_info(o, TensorProto.INT64, None) for o in outs[1:]]
    graph = helper.make_graph([node], "g", vis, out_vis)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def build(model):
    node = from_onnx(model).graph.nodes[0]
    builder = cuda_builder_for(node)
    assert builder is not None, node
    return builder(node, device())


def to_device(a):
    """A device copy of `a` keeping its shape (a 0-d array stays 0-d)."""
    dev = device()
    out = dev.empty(a.shape, a.dtype)
    if a.size:
        out.copy_to_device(np.ascontiguousarray(a).reshape(a.shape), stream=dev.stream)
    return out


def check(op, inputs, attrs=None, rtol=None, atol=None, reference=False):
    """Run the node's CUDA kernel and compare with onnxruntime (with onnx's reference evaluator where
    `reference`: onnxruntime's CPU provider has no float64 Conv or GlobalAveragePool)."""
    model = make_model(op, inputs, attrs)
    feeds = {name: a for name, a in inputs if a is not None}
    if reference:
        from onnx.reference import ReferenceEvaluator
        (expected,) = ReferenceEvaluator(model).run(None, feeds)
    else:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (expected,) = sess.run(None, feeds)
    fn = build(model)
    assert fn is not None, f"{op} {attrs}: the builder refused the node"
    outs = fn(*[to_device(a) if a is not None else None for _, a in inputs])
    assert isinstance(outs, tuple) and len(outs) == 1
    got = device().to_host(outs[0])
    assert got.shape == expected.shape and got.dtype == expected.dtype
    f32 = expected.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=rtol or (1e-4 if f32 else 1e-10),
                               atol=atol or (1e-5 if f32 else 1e-12))
    return got


# --- MatMul ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 5)),
    ((10, 9), (9, 11)),  # several tiles, a depth not a multiple of the tile's
    ((2, 3, 4), (4, 5)),
    ((2, 5, 6), (2, 6, 3)),
    ((2, 1, 3, 4), (1, 3, 4, 5)),
    ((2, 1, 2, 1, 3, 5), (1, 2, 1, 2, 5, 3)),  # four batch dims that do not coalesce: a host loop of launches
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 5)),
    ((6,), (6,)),
    ((3, 0), (0, 4)),  # an empty depth: zeros
])
def test_matmul(sa, sb):
    check("MatMul", [("a", rand(sa)), ("b", rand(sb, seed=1))])


def test_matmul_float64():
    check("MatMul", [("a", rand((2, 7, 9), F64)), ("b", rand((9, 10), F64, 1))])


# --- Gemm ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c_shape", [
    (0, 0, 1.0, 1.0, (4,)),
    (1, 0, 1.0, 1.0, (3, 4)),
    (0, 1, 0.5, 2.0, (1,)),
    (1, 1, 1.5, -0.5, ()),
    (0, 0, 2.0, 1.0, (3, 1)),
    (1, 1, 1.0, 1.0, (1, 4)),
    (0, 1, 1.0, 1.0, None),
    (0, 0, 1.0, 0.0, (3, 4)),  # beta 0: C unread
])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    m, k, n = 3, 5, 4
    a = rand((k, m) if trans_a else (m, k))
    b = rand((n, k) if trans_b else (k, n), seed=1)
    inputs = [("a", a), ("b", b)] + ([("c", rand(c_shape, seed=2))] if c_shape is not None else [])
    check("Gemm", inputs, {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta})


def test_gemm_several_tiles_float64():
    m, k, n = 19, 13, 18
    check("Gemm", [("a", rand((k, m), F64)), ("b", rand((n, k), F64, 1)), ("c", rand((n,), F64, 2))],
          {"transA": 1, "transB": 1, "alpha": 0.75, "beta": 1.25})


# --- Conv ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xs,ws,attrs,bias", [
    ((1, 3, 7, 7), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((2, 3, 7, 7), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, False),
    ((1, 3, 9, 8), (5, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}, True),
    ((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, False),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ((1, 6, 5, 5), (6, 2, 3, 3), {"group": 3}, True),  # grouped, not depthwise (2 channels a group)
    ((2, 3, 6, 6), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True),  # depthwise
    ((1, 4, 9, 7), (4, 1, 3, 2), {"group": 4, "strides": [2, 1], "dilations": [2, 1], "pads": [1, 0, 2, 1]}, False),
    ((2, 5, 4, 4), (7, 5, 1, 1), {}, True),  # 1x1
    ((1, 5, 6, 6), (3, 5, 1, 1), {"strides": [2, 2]}, False),
    ((2, 3, 10), (4, 3, 3), {"pads": [1, 1]}, True),  # 1-D
    ((1, 4, 11), (4, 2, 3), {"group": 2, "strides": [2], "dilations": [2]}, False),
    ((1, 4, 11), (4, 1, 3), {"group": 4, "pads": [2, 1]}, True),  # 1-D depthwise
    ((1, 2, 7, 7), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ((1, 2, 6, 6), (3, 2, 4, 4), {"auto_pad": "SAME_UPPER"}, False),
    ((1, 2, 6, 6), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER"}, True),
    ((1, 2, 7, 6), (3, 2, 3, 2), {"auto_pad": "VALID", "strides": [2, 1]}, True),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, False),
])
def test_conv(xs, ws, attrs, bias):
    inputs = [("x", rand(xs)), ("w", rand(ws, seed=1))]
    if bias:
        inputs.append(("b", rand((ws[0],), seed=2)))
    check("Conv", inputs, attrs)


def test_conv_float64():
    check("Conv", [("x", rand((1, 3, 6, 6), F64)), ("w", rand((4, 3, 3, 3), F64, 1)), ("b", rand((4,), F64, 2))],
          {"pads": [1, 1, 1, 1], "strides": [2, 2]}, reference=True)


# --- pooling ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xs,attrs", [
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0]}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 1]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-D
])
def test_max_pool(xs, attrs):
    check("MaxPool", [("x", rand(xs))], attrs)


@pytest.mark.parametrize("xs,attrs", [
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 0, 1, 1],
                    "count_include_pad": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 0]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "count_include_pad": 1}),  # 1-D
])
def test_average_pool(xs, attrs):
    check("AveragePool", [("x", rand(xs))], attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 4, 4), (1, 3, 9, 10), (1, 2, 15, 15), (2, 2, 7), (1, 2, 2, 3, 3)])
def test_global_pool(op, xs):
    check(op, [("x", rand(xs))])


def test_global_pool_float64():
    check("GlobalAveragePool", [("x", rand((2, 2, 9, 9), F64))], reference=True)
    check("GlobalMaxPool", [("x", rand((2, 2, 3, 3), F64))], reference=True)


# --- what the builders refuse ----------------------------------------------------------------------------------
def _builds(model):
    node = from_onnx(model).graph.nodes[0]
    return cuda_builder_for(node)(node, device())


def test_refused_nodes():
    h = np.zeros((2, 3), np.float16)
    assert _builds(make_model("MatMul", [("a", h), ("b", np.zeros((3, 2), np.float16))])) is None
    assert _builds(make_model("Gemm", [("a", h), ("b", np.zeros((3, 2), np.float16))])) is None
    x = rand((1, 2, 6, 6))
    assert _builds(make_model("MaxPool", [("x", x)], {"kernel_shape": [2, 2]}, n_outputs=2)) is None
    assert _builds(make_model("MaxPool", [("x", x.astype(np.float16))], {"kernel_shape": [2, 2]})) is None
    assert _builds(make_model("AveragePool", [("x", rand((1, 2, 4, 4, 4)))], {"kernel_shape": [2, 2, 2]})) is None
    assert _builds(make_model("Conv", [("x", rand((1, 2, 4, 4, 4))), ("w", rand((2, 2, 3, 3, 3)))])) is None
    assert _builds(make_model("Conv", [("x", x.astype(np.float16)), ("w", rand((2, 2, 3, 3)).astype(np.float16))])) \
        is None
    assert _builds(make_model("GlobalMaxPool", [("x", x.astype(np.float16))])) is None
    # the same nodes in float32 are taken
    assert _builds(make_model("MaxPool", [("x", x)], {"kernel_shape": [2, 2]})) is not None
    assert _builds(make_model("Conv", [("x", x), ("w", rand((2, 2, 3, 3)))])) is not None
