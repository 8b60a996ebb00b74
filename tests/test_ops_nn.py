"""CPU kernels of the NN ops (Conv, pooling, Gemm, MatMul, BatchNormalization, Softmax, Concat, Flatten,
Reshape, Dropout) against onnxruntime, one-node models over attribute combinations and opset versions.

Every model runs with the fallback provider disabled and each step is checked to be on CPUExecutionProvider,
so a pass proves the Numba kernel ran. Where onnxruntime has no kernel for a case (float64 AveragePool, ...),
onnx's reference evaluator is the oracle.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxjit
from conftest import feeds_of, kernel_options, native_session as cpu_session, one_node_model as make_model  # noqa: E402
import onnxjit.ops.linalg  # noqa: F401  (registers the ops, as onnxjit.ops will)
import onnxjit.ops.nn  # noqa: F401
import onnxjit.ops.shape  # noqa: F401

F32, F64 = np.float32, np.float64
CPU = "CPUExecutionProvider"
ort.set_default_logger_severity(3)


def _rand(shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _counted(monkeypatch, module, name):
    """A list that gets one entry per call of the kernel module.name from here on."""
    calls = []
    kernel = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or kernel(*a))
    return calls


def _check_conv(xs, ws, attrs, bias, opset=11, dtype=F32):
    """Conv over random X, a constant random W and (with `bias`) B, checked against onnxruntime."""
    b = _rand(ws[0], dtype, seed=2) if bias else None
    check("Conv", [("x", _rand(xs, dtype), False), ("w", _rand(ws, dtype, seed=1), True), ("b", b, True)], opset,
          **attrs)




def expected(model, feeds, oracle="ort"):
    if oracle == "reference":
        return onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    except Exception as e:  # noqa: BLE001 - onnxruntime lacks this kernel: the ONNX reference decides
        if "NOT_IMPLEMENTED" not in str(e) and "Could not find an implementation" not in str(e):
            raise
        return onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    return sess.run(None, feeds)


def check(op, inputs, opset, n_out=1, out_types=None, oracle="ort", want=None, **attrs):
    """Run the one-node model on onnxjit's CPU provider and compare with `want`, or else the oracle's outputs."""
    model = make_model(op, inputs, opset, n_out, out_types, **attrs)
    feeds = feeds_of(inputs)
    got = cpu_session(model).run(None, feeds)
    if want is None:
        want = expected(model, feeds, oracle)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if g.dtype in (F32, F64):  # absolute slack relative to the output's scale (sums cancel)
            tol = 1e-10 if g.dtype == F64 else 1e-5
            scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def providers_of(model):
    """The providers the steps run on, fallback allowed, for the graph as given."""
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=[CPU])
    return [s.provider for s in sess._compiled.steps]


# --- Conv ------------------------------------------------------------------------------------------------------
CONV_CASES = [
    # x shape, w shape, attrs, bias
    ((1, 3, 7, 7), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    ((2, 3, 7, 8), (4, 3, 3, 3), dict(strides=[2, 2], pads=[0, 1, 1, 0]), False),
    ((1, 2, 9, 9), (3, 2, 3, 3), dict(dilations=[2, 2], pads=[2, 1, 0, 2]), True),
    ((1, 2, 7, 8), (3, 2, 3, 2), dict(auto_pad="SAME_UPPER", strides=[2, 2]), True),
    ((1, 2, 7, 8), (3, 2, 3, 2), dict(auto_pad="SAME_LOWER", strides=[2, 3]), False),
    ((1, 2, 7, 8), (3, 2, 3, 3), dict(auto_pad="VALID", strides=[2, 1], dilations=[1, 2]), True),
    ((1, 3, 6, 6), (4, 3, 3, 3), dict(kernel_shape=[3, 3], strides=[1, 2]), False),
    ((1, 8, 6, 6), (12, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),  # grouped, im2col + GEMM
    ((1, 4, 6, 6), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2]), True),  # depthwise, direct
    ((2, 4, 5, 6), (6, 2, 2, 3), dict(group=2, dilations=[2, 1], pads=[1, 0, 0, 1]), False),  # direct
    ((1, 4, 5, 5), (6, 4, 1, 1), dict(), True),  # 1x1
    ((1, 4, 5, 5), (6, 4, 1, 1), dict(strides=[2, 2]), False),  # 1x1 strided
    ((1, 3, 9), (4, 3, 3), dict(pads=[1, 2], strides=[2]), True),  # 1-D
    ((2, 2, 8), (4, 1, 3), dict(group=2, dilations=[3], pads=[2, 1]), True),  # 1-D grouped
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 1], strides=[1, 2, 2]), True),  # 3-D
    ((1, 2, 4, 5, 6), (4, 1, 2, 2, 2), dict(group=2, auto_pad="SAME_LOWER"), False),  # 3-D grouped
    ((1, 8, 16, 16), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # enough work for the thread pool
    ((1, 32, 4, 4), (64, 32, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # one tile: output channels split
    ((2, 16, 12, 12), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1]), True),  # parallel depthwise
    ((1, 4, 7, 7), (8, 1, 3, 3), dict(group=4, pads=[2, 2, 2, 2], dilations=[2, 2]), True),  # x2 depthwise
    ((1, 3, 8, 9), (3, 1, 3, 2), dict(group=3, pads=[0, 1, 2, 0], strides=[3, 2]), False),  # rows unread
    ((1, 2, 1, 9), (2, 1, 1, 4), dict(group=2, pads=[0, 3, 0, 0]), True),  # taps past the input's end
    # Winograd (float32 from 7x7 tiles of 4x4 pixels, float64 from 4x4 tiles)
    ((1, 16, 28, 28), (48, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # 7x7 tiles
    ((2, 16, 29, 31), (40, 16, 3, 3), dict(pads=[0, 2, 1, 1]), False),  # partial tiles, uneven pads
    ((1, 32, 36, 26), (16, 32, 3, 3), dict(auto_pad="SAME_UPPER"), True),  # several tile-row blocks
    ((1, 16, 4, 200), (40, 16, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # one tile row: output channels split
]
WINOGRAD_CASES = CONV_CASES[-4:]
# float32 GEMM-like convs on kernels.packed_gemm (pointwise ones, and the im2col of 1-D and 3-D ones): pixel counts
# off the lanes' blocks, channels off the panels, several column chunks (deep inputs), grouped, batched, and
# enough work to be cut for the threads
PACKED_CASES = [
    ((1, 24, 7, 7), (30, 24, 1, 1), dict(), True),
    ((2, 6, 9, 5), (5, 6, 1, 1), dict(), False),
    ((1, 12, 5, 5), (18, 4, 1, 1), dict(group=3), True),
    ((1, 700, 6, 6), (9, 700, 1, 1), dict(), True),
    ((1, 96, 14, 14), (144, 96, 1, 1), dict(), True),
    ((1, 8, 40, 40), (24, 8, 1, 1), dict(), False),
    ((2, 6, 37), (30, 6, 3), dict(strides=[2], pads=[1, 1]), True),  # a 1-D conv's im2col
    # strided 1x1 (resnets' projection shortcuts): an im2col that picks every other pixel, and one with pads
    ((1, 40, 14, 14), (48, 40, 1, 1), dict(strides=[2, 2]), True),
    ((2, 9, 11, 7), (13, 9, 1, 1), dict(strides=[3, 2], pads=[1, 0, 0, 1]), False),
    ((1, 24, 40, 41), (32, 24, 1, 1), dict(strides=[2, 2]), True),  # rows of 21: runs across the lanes' blocks
]


@pytest.mark.parametrize("xs,ws,attrs,bias,opset",
                         [c + (11,) for c in CONV_CASES] + [c + (1,) for c in CONV_CASES[:8]])
def test_conv_f32(xs, ws, attrs, bias, opset):
    _check_conv(xs, ws, attrs, bias, opset)


# which kernel each family of float32 convs runs on (cases over its edges), and that it matches onnxruntime
KERNEL_CASES = {
    "conv_packed": PACKED_CASES,  # GEMM-like convs on packed_gemm
    # grouped convs: a padded, phase-split copy per group, no im2col
    "conv_padded": [
        ((1, 16, 7, 7), (16, 8, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),
        ((2, 24, 9, 6), (12, 8, 3, 3), dict(group=3, pads=[0, 2, 1, 0]), False),  # uneven pads, a smaller output
        ((1, 12, 5, 11), (24, 4, 5, 3), dict(group=3, auto_pad="SAME_UPPER"), True),
        ((1, 10, 6, 6), (10, 5, 2, 2), dict(group=2), True),  # no pads, an even kernel
        ((1, 16, 14, 14), (16, 8, 3, 3), dict(group=2, pads=[1, 1, 1, 1], strides=[2, 2]), True),
        ((2, 12, 9, 10), (24, 4, 3, 3), dict(group=3, pads=[1, 0, 0, 1], strides=[2, 3]), False),  # odd sizes
        ((1, 8, 11, 9), (16, 4, 5, 5), dict(group=2, pads=[2, 2, 2, 2], strides=[3, 2]), True),
    ],
    # dense 2-D convs neither pointwise nor Winograd's: vectors over the output channels, no im2col
    "conv_broadcast": [
        ((2, 3, 33, 31), (30, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),  # more channels than taps
        ((1, 40, 7, 7), (48, 40, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # two passes of taps, two channel blocks
        ((1, 64, 9, 9), (40, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), False),  # three passes, strided
        ((1, 8, 50, 1), (16, 8, 5, 1), dict(pads=[2, 0, 2, 0]), True),  # a 1-D conv written as 2-D: rows of 1
        ((1, 24, 14, 14), (24, 24, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # below Winograd's tiles (float32)
        ((1, 3, 32, 32), (40, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),  # a stem, 40 channels
        ((2, 3, 30, 27), (20, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3]), False),  # a partial block, images
        ((1, 4, 9, 11), (7, 4, 3, 3), dict(pads=[0, 2, 1, 0], strides=[1, 2]), True),  # uneven pads
        ((1, 2, 12, 12), (5, 2, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True),
        ((1, 3, 6, 5), (8, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), False),  # rows of 3 pixels
        ((1, 32, 40, 40), (64, 32, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),  # enough for the threads
        # few output channels (densenet's 128->32 over 7x7); bands for the threads
        ((1, 48, 7, 7), (32, 48, 3, 3), dict(pads=[1, 1, 1, 1]), True),
        ((2, 64, 9, 9), (24, 64, 3, 3), dict(pads=[1, 1, 1, 1]), False),
    ],
    # stems (at most 4 input channels, at most a vector of output channels) over rows of a vector or more: output
    # pixels as the lanes
    "conv_rows": [
        ((1, 3, 66, 70), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),  # a last vector overlapping
        ((2, 3, 20, 64), (12, 3, 3, 3), dict(pads=[1, 1, 1, 1]), False),  # a partial panel, images
        ((1, 2, 9, 70), (5, 2, 5, 5), dict(strides=[2, 2], pads=[2, 1, 0, 2]), True),  # uneven pads
        ((1, 4, 12, 40), (8, 4, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), True),
        ((1, 1, 5, 96), (3, 1, 1, 3), dict(pads=[0, 1, 0, 1]), False),  # one channel, a 1x3 kernel
        ((1, 3, 64, 64), (16, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),  # enough work for the threads
    ],
    # depthwise with output rows narrower than 3/4 of a vector (7/16 for 3x3 kernels), or column strides over 2:
    # channels-last in registers (every case here, with 16 lanes or 32)
    "conv_depthwise_blocked": [
        ((1, 16, 6, 6), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1]), True),  # one whole block of channels
        ((2, 20, 7, 9), (20, 1, 5, 5), dict(group=20, pads=[2, 2, 2, 2]), False),  # a partial block, images
        ((1, 40, 12, 12), (40, 1, 3, 3), dict(group=40, pads=[1, 1, 1, 1], strides=[2, 2]), True),
        ((1, 24, 11, 10), (24, 1, 5, 5), dict(group=24, pads=[2, 1, 0, 2], strides=[2, 3]), True),  # uneven pads
        ((1, 8, 9, 9), (8, 1, 3, 3), dict(group=8, pads=[2, 2, 2, 2], dilations=[2, 2]), False),
        ((1, 12, 6, 3), (12, 1, 3, 3), dict(group=12, auto_pad="SAME_UPPER"), True),  # rows narrower than 4 pixels
        ((1, 5, 8, 8), (5, 1, 2, 3), dict(group=5), True),  # no pads, uneven kernel
        ((1, 96, 10, 10), (96, 1, 5, 5), dict(group=96, pads=[2, 2, 2, 2]), True),  # enough work for the threads
    ],
    # depthwise 3x3, undilated, strides 1 or 2, output rows of 7/16 of a vector and more: input rows loaded once
    "conv_depthwise_3x3": [
        ((1, 4, 30, 30), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), True),
        ((1, 3, 26, 75), (3, 1, 3, 3), dict(group=3, pads=[0, 1, 2, 1]), True),  # rows of several vectors, uneven
        ((1, 3, 26, 28), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1]), False),  # rows under a vector (AVX-512)
        ((2, 3, 33, 61), (3, 1, 3, 3), dict(group=3, pads=[1, 1, 1, 1], strides=[2, 2]), False),  # images
        ((1, 2, 41, 70), (2, 1, 3, 3), dict(group=2, pads=[1, 0, 0, 1], strides=[2, 1]), True),  # row stride 2
        ((1, 2, 40, 67), (2, 1, 3, 3), dict(group=2, pads=[0, 1, 1, 2], strides=[1, 2]), True),  # column stride 2
        ((1, 2, 2, 64), (2, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),  # 2 rows: most taps outside
        ((1, 5, 3, 300), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]), True),  # a 1-D conv written as 2-D
        ((1, 24, 56, 56), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1]), True),  # enough work for the threads
    ],
    # other depthwise kernels over output rows of 3/4 of a vector and more, column stride 1 or 2: a vector of a
    # row's pixels
    "conv_depthwise_rows": [
        ((2, 3, 33, 61), (3, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2], strides=[2, 2]), False),
        ((1, 2, 40, 63), (2, 1, 3, 3), dict(group=2, pads=[1, 1, 1, 1], strides=[1, 2], dilations=[2, 1]), True),
        ((1, 3, 26, 75), (3, 1, 5, 5), dict(group=3, pads=[0, 2, 2, 1]), True),  # rows of several vectors, uneven
        ((1, 3, 26, 28), (3, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2]), False),  # rows under a vector (AVX-512)
        ((1, 2, 5, 130), (2, 1, 2, 4), dict(group=2, strides=[3, 2]), False),  # 2 rows, a row stride of 3
        ((1, 5, 3, 300), (5, 1, 1, 3), dict(group=5, pads=[0, 1, 0, 1]), True),  # a 1-D conv written as 2-D
    ],
    # grouped convs of few channels, depthwise ones with a channel multiplier
    "conv_direct": [
        ((1, 4, 30, 30), (4, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), True),
        ((2, 3, 33, 29), (6, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2], strides=[2, 2]), False),
    ],
}


@pytest.mark.parametrize("kernel,xs,ws,attrs,bias", [(k, *c) for k, cases in KERNEL_CASES.items() for c in cases])
def test_conv_runs_on_its_kernel_and_matches(kernel, xs, ws, attrs, bias, monkeypatch):
    from onnxjit.kernels import conv as kconv
    calls = _counted(monkeypatch, kconv, kernel)
    _check_conv(xs, ws, attrs, bias)
    assert calls


@pytest.mark.parametrize("xs,ws,bias", [((1, 37, 1, 1), (19, 37, 1, 1), True), ((3, 144, 1, 1), (40, 144, 1, 1), False),
                                         ((2, 5, 1), (7, 5, 1), True)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv_one_pixel_as_dot_products(xs, ws, bias, dtype, monkeypatch):
    """A 1x1 conv over one pixel (a squeeze-excitation block's) runs as dot products (kernels.linalg.dot_cols)."""
    from onnxjit.kernels import linalg as klinalg
    calls = _counted(monkeypatch, klinalg, "dot_cols_f32" if dtype == F32 else "dot_cols")
    _check_conv(xs, ws, {}, bias, dtype=dtype)
    assert calls


@pytest.mark.parametrize("xs,ws", [((0, 3, 5, 5), (4, 3, 1, 1)), ((0, 3, 5, 5), (4, 3, 3, 3)),
                                   ((1, 3, 5, 5), (0, 3, 1, 1)), ((1, 3, 5, 5), (0, 3, 3, 3))])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv_empty_output(xs, ws, dtype):
    """No images or no output channels: an empty output of the right shape."""
    out = (xs[0], ws[0], xs[2] - ws[2] + 1, xs[3] - ws[3] + 1)
    check("Conv", [("x", _rand(xs, dtype), False), ("w", _rand(ws, dtype, 1), True)], 11,
          want=[np.zeros(out, dtype)])


def test_conv_no_input_channels():
    """A float32 conv over 0 input channels (depth 0: not for the packed GEMM) gives its bias."""
    b = _rand(4, seed=2)
    check("Conv", [("x", np.zeros((1, 0, 3, 3), F32), False), ("w", np.zeros((4, 0, 1, 1), F32), True),
                   ("b", b, True)], 11, want=[np.broadcast_to(b[None, :, None, None], (1, 4, 3, 3))])


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES[::3])
def test_conv_f64(xs, ws, attrs, bias):
    b = _rand(ws[0], F64, seed=2) if bias else None
    check("Conv", [("x", _rand(xs, F64), False), ("w", _rand(ws, F64, 1), True), ("b", b, True)], 11, **attrs)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_with_dilations(auto_pad):
    # onnxruntime refuses auto_pad SAME with dilations; the ONNX reference pads for the dilated kernel
    check("Conv", [("x", _rand((1, 2, 7, 8)), False), ("w", _rand((3, 2, 3, 2), seed=1), True)], 11,
          oracle="reference", auto_pad=auto_pad, dilations=[2, 3], strides=[2, 1])


@pytest.mark.parametrize("xs,ws,attrs,bias", WINOGRAD_CASES)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv_winograd_runs_and_matches(xs, ws, attrs, bias, dtype, monkeypatch):
    """3x3 stride-1 convs with enough channels and tiles run as Winograd F(4x4, 3x3) (kernels.conv): float32's
    GEMMs on packed_gemm, float64's on BLAS."""
    from onnxjit.kernels import conv as kconv
    calls = _counted(monkeypatch, kconv, "conv_winograd_packed" if dtype == F32 else "conv_winograd")
    _check_conv(xs, ws, attrs, bias, dtype=dtype)
    assert calls


@pytest.mark.parametrize("tile_rows,m_block", [(1, 8), (2, 40), (3, 16), (8, 24)])
def test_conv_winograd_any_blocking(tile_rows, m_block, monkeypatch):
    """Every blocking ops.nn._winograd_blocks may pick computes the same conv: one tile row a unit or several, the
    output channels whole or split in panels (batched, partial tiles, uneven pads)."""
    from onnxjit.ops import nn as ops_nn
    monkeypatch.setattr(ops_nn, "_winograd_blocks",
                        lambda n_img, cg, m_out, th, wq, itemsize, nth: (min(tile_rows, th), min(m_block, m_out)))
    _check_conv(*WINOGRAD_CASES[1], dtype=F32)


# 1-D convs over rows longer than a tile (CONV_TILE_BYTES made small here): the packed GEMM's im2col, BLAS's
# (PACKED_IM2COL_MAX_K 0), a pointwise one; strides, dilations and pads that put taps outside the input at both
# ends of the row, in the first and the last tile; batched
COLUMN_TILE_CASES = [
    ((1, 6, 300), (10, 6, 3), dict(strides=[2], pads=[1, 2]), True, 1024),
    ((2, 5, 260), (7, 5, 4), dict(dilations=[3], pads=[5, 4]), False, 1024),
    ((1, 6, 300), (10, 6, 3), dict(strides=[2], pads=[1, 2]), True, 0),
    ((1, 4, 270), (9, 4, 5), dict(strides=[3], dilations=[2], pads=[6, 1]), False, 0),
    ((1, 8, 200), (12, 8, 1), dict(), True, 1024),
]


@pytest.mark.parametrize("xs,ws,attrs,bias,packed_max_k", COLUMN_TILE_CASES)
def test_conv_long_rows_cut_into_tiles_of_columns(xs, ws, attrs, bias, packed_max_k, monkeypatch):
    """A long row (a 1-D conv's only one) is cut into tiles of columns for the threads, each with its own im2col,
    instead of into blocks of output channels that each repeat the whole row's im2col."""
    from onnxjit.ops import nn as ops_nn
    monkeypatch.setattr(ops_nn, "CONV_TILE_BYTES", 2048)
    monkeypatch.setattr(ops_nn, "CONV_TILE_MIN_PIXELS", 16)
    monkeypatch.setattr(ops_nn, "CONV_UNITS_PER_THREAD", 4)  # more units than two images' rows, on any machine
    monkeypatch.setattr(ops_nn, "PACKED_IM2COL_MAX_K", packed_max_k)
    cuts = []
    column_tiles = ops_nn._column_tiles
    monkeypatch.setattr(ops_nn, "_column_tiles", lambda *a: cuts.append((a[2], column_tiles(*a))) or cuts[-1][1])
    _check_conv(xs, ws, attrs, bias)
    assert cuts and all(cols < ow for ow, cols in cuts)


@pytest.mark.parametrize("threads", [1, 2, 4, 16])
def test_winograd_blocks_read_large_weights_once_per_thread(threads):
    """Transformed weights far over any L2 (512->512 over 28x28 pixels: 38 MB) are read once per thread, each
    thread a unit or none: no more units than threads (one tile row a unit read them 7 times, 4x the time)."""
    from onnxjit.ops import nn as ops_nn
    tile_rows, m_block = ops_nn._winograd_blocks(1, 512, 512, 7, 8, 4, threads)
    assert -(-7 // tile_rows) * -(-512 // m_block) <= threads


@pytest.mark.parametrize("op,ws", [("Conv", (16, 16, 3, 3)), ("Conv", (8, 16, 1, 1)),
                                   ("ConvTranspose", (16, 8, 2, 2))])
def test_fed_weights_written_in_place_between_runs(op, ws):
    """A weight derived once (Winograd-transformed, packed) is kept for the node's constant only: a fed W that
    the caller rewrites between runs is derived anew."""
    model = make_model(op, [("x", _rand((1, 16, 16, 16)), False), ("w", _rand(ws, seed=1), False)], 17,
                       **({"pads": [ws[-1] // 2] * 4} if op == "Conv" else {"strides": [2, 2]}))
    x, w = _rand((1, 16, 16, 16)), _rand(ws, seed=1)
    sess = cpu_session(model)
    sess.run(None, {"x": x, "w": w})
    w *= 2
    got = sess.run(None, {"x": x, "w": w})[0]
    np.testing.assert_allclose(got, expected(model, {"x": x, "w": w})[0], rtol=1e-4, atol=1e-4 * np.abs(got).max())


def test_conv_weights_fed():
    check("Conv", [("x", _rand((1, 3, 6, 6)), False), ("w", _rand((4, 3, 3, 3), seed=1), False),
                   ("b", _rand(4, seed=2), False)], 11, pads=[1, 1, 1, 1])


# --- pooling ---------------------------------------------------------------------------------------------------
POOL_CASES = [
    # x shape, attrs, lowest opset
    ((1, 3, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 1),
    ((2, 2, 7, 8), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 2]), 1),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"), 1),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 3], auto_pad="SAME_LOWER"), 1),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID"), 1),
    ((1, 2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 10),
    ((1, 2, 5, 7), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[0, 0, 2, 2], ceil_mode=1), 10),  # drops a window
    ((1, 2, 9, 9), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 0]), 10),
    ((1, 2, 9, 9), dict(kernel_shape=[2, 2], dilations=[2, 1], strides=[2, 2], ceil_mode=1), 10),
    ((1, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 2]), 1),  # 1-D
    ((1, 3, 11), dict(kernel_shape=[2], strides=[2], auto_pad="SAME_LOWER"), 1),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1]), 1),  # 3-D
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1), 10),
    ((1, 16, 24, 24), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 1),  # thread pool
    ((2, 3, 6, 6), dict(kernel_shape=[7, 7], pads=[0, 0, 1, 1]), 1),  # one window over the whole input
    ((1, 4, 6, 6), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]), 1),  # more taps than 3
]


# every case at the newest opset, a few at each older one (the semantics do not change, the attributes allowed do)
OLD_POOL_CASES = [POOL_CASES[i] for i in (0, 2, 5, 7, 9, 11)]


@pytest.mark.parametrize("xs,attrs,since,opset", [c + (12,) for c in POOL_CASES] +
                         [c + (v,) for v in (1, 8, 10, 11) for c in OLD_POOL_CASES if c[2] <= v])
def test_maxpool(xs, attrs, since, opset):
    check("MaxPool", [("x", _rand(xs), False)], opset, **attrs)


@pytest.mark.parametrize("xs,attrs,since", POOL_CASES[::2])
def test_maxpool_f64(xs, attrs, since):
    check("MaxPool", [("x", _rand(xs, F64), False)], 12, **attrs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("xs,attrs,since", POOL_CASES[::3])
def test_maxpool_8bit(xs, attrs, since, dtype):
    """MaxPool-12 over int8 / uint8 (a QOperator-quantized resnet's first pool; on the fallback it took 450 ms),
    padding windows with the type's lowest value, as onnxruntime."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(3).integers(info.min, info.max + 1, xs).astype(dtype)
    check("MaxPool", [("x", x, False)], 12, out_types=[helper.np_dtype_to_tensor_dtype(np.dtype(dtype))], **attrs)


@pytest.mark.parametrize("attrs", [dict(storage_order=1), dict()])
def test_maxpool_indices_or_column_major_left_to_fallback(attrs):
    n_out = 1 if attrs else 2
    model = make_model("MaxPool", [("x", _rand((1, 2, 5, 5)), False)], 12, n_out=n_out,
                       out_types=[TensorProto.FLOAT, TensorProto.INT64][:n_out], kernel_shape=[2, 2], **attrs)
    assert CPU not in providers_of(model)


@pytest.mark.parametrize("xs,attrs,since,opset", [c + (19,) for c in POOL_CASES] +
                         [c + (v,) for v in (7, 10, 11) for c in OLD_POOL_CASES
                          if c[2] <= v and "dilations" not in c[1]])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool(xs, attrs, since, count_include_pad, opset):
    check("AveragePool", [("x", _rand(xs), False)], opset, count_include_pad=count_include_pad, **attrs)


@pytest.mark.parametrize("op,extra", [("MaxPool", {}), ("AveragePool", dict(count_include_pad=0)),
                                      ("AveragePool", dict(count_include_pad=1))])
@pytest.mark.parametrize("xs,attrs,kernel", [
    # float32 2-D pools over small planes run channels-last, LANES planes a unit: planes of several images in one
    # unit and a partial last one; strided windows with a tail pad; ceil_mode windows past the input
    ((3, 40, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), "pool_blocked"),
    ((1, 70, 14, 14), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]), "pool_blocked"),
    ((1, 33, 13, 13), dict(kernel_shape=[5, 5], strides=[3, 3], ceil_mode=1), "pool_blocked"),
    ((1, 8, 56, 56), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), "pool"),  # large: separable
])
def test_pool_runs_on_its_kernel_and_matches(op, extra, xs, attrs, kernel, monkeypatch):
    from onnxjit.kernels import pool as kpool
    calls = _counted(monkeypatch, kpool, kernel)
    check(op, [("x", _rand(xs), False)], 19 if op == "AveragePool" else 12, **attrs, **extra)
    assert calls


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 2], dilations=[2, 3], strides=[2, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_dilations(attrs, count_include_pad):
    check("AveragePool", [("x", _rand((1, 2, 9, 9)), False)], 19, count_include_pad=count_include_pad, **attrs)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER")])
def test_averagepool_opset1(attrs):
    # AveragePool-1 excludes pads (its spec); onnxruntime has no AveragePool-1, so opset 7 is the oracle
    x = _rand((1, 2, 7, 7))
    want = expected(make_model("AveragePool", [("x", x, False)], 7, **attrs), {"x": x})
    check("AveragePool", [("x", x, False)], 1, want=want, **attrs)


@pytest.mark.parametrize("xs,attrs", [
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0])),
    ((1, 2, 9), dict(kernel_shape=[3], strides=[2])),
])
def test_averagepool_f64(xs, attrs):
    check("AveragePool", [("x", _rand(xs, F64), False)], 11, **attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 7), (1, 3, 4, 5), (2, 2, 3, 4, 5), (1, 64, 32, 32)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_global_pool(op, xs, dtype):
    x = _rand(xs, dtype)
    axes = tuple(range(2, len(xs)))
    want = None
    if dtype == F64:  # no float64 kernels in onnxruntime
        want = [x.mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else x.max(axis=axes, keepdims=True)]
    check(op, [("x", x, False)], 13, want=want)


# --- Gemm / MatMul ---------------------------------------------------------------------------------------------
GEMM_CASES = [(ta, tb, c, 13) for ta in (0, 1) for tb in (0, 1) for c in (None, (), (5,), (1, 5), (3, 1), (3, 5))]
GEMM_CASES += [(ta, ta, c, v) for v in (7, 9, 11) for ta in (0, 1) for c in ((5,), (3, 1))] + [(0, 1, None, 11)]


@pytest.mark.parametrize("ta,tb,cshape,opset", GEMM_CASES)
def test_gemm(ta, tb, cshape, opset):
    a = _rand((4, 3) if ta else (3, 4))
    b = _rand((5, 4) if tb else (4, 5), seed=1)
    c = None if cshape is None else _rand(cshape, seed=2)
    check("Gemm", [("a", a, False), ("b", b, True), ("c", c, True)], opset, alpha=0.5, beta=2.0,
          transA=ta, transB=tb)


@pytest.mark.parametrize("opset,attrs,cshape", [
    (1, dict(broadcast=1), (5,)), (1, dict(), (3, 5)), (6, dict(broadcast=1), (1, 5)), (6, dict(), (3, 5)),
    (6, dict(broadcast=1, transA=1, transB=1), ()),
])
def test_gemm_old_broadcast(opset, attrs, cshape):
    a = _rand((4, 3) if attrs.get("transA") else (3, 4))
    b = _rand((5, 4) if attrs.get("transB") else (4, 5), seed=1)
    c = _rand(cshape, seed=2)
    want = 1.5 * ((a.T if attrs.get("transA") else a) @ (b.T if attrs.get("transB") else b)) + c
    check("Gemm", [("a", a, False), ("b", b, False), ("c", c, False)], opset, alpha=1.5,
          want=[want] if opset == 1 else None, **attrs)  # no Gemm-1 in onnxruntime


@pytest.mark.parametrize("m", [1, 2, 64])
@pytest.mark.parametrize("tb", [0, 1])
@pytest.mark.parametrize("b_init", [True, False])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_gemm_fully_connected(m, tb, b_init, dtype):
    b = _rand((300, 256) if tb else (256, 300), dtype, 1)
    check("Gemm", [("a", _rand((m, 256), dtype), False), ("b", b, b_init), ("c", _rand(300, dtype, 2), True)],
          13, transB=tb)


@pytest.mark.parametrize("k", [5, 37, 300])
@pytest.mark.parametrize("n", [1, 13])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_gemm_few_rows_any_depth(k, n, dtype):
    """The few-rows dot products (kernels.linalg.dot_cols, float32 in vectors of LANES): depths shorter than a
    vector, with a tail after whole vectors, and column counts that leave a partial group of four."""
    check("Gemm", [("a", _rand((3, k), dtype), False), ("b", _rand((k, n), dtype, 1), True),
                   ("c", _rand(n, dtype, 2), True)], 13)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 1)])
@pytest.mark.parametrize("cshape", [None, (), (37,), (1, 37), (13, 1), (13, 37)])
def test_gemm_packed_runs_and_matches(ta, tb, cshape, monkeypatch):
    """float32 Gemm with a constant B on kernels.packed_gemm (B packed once): alpha folded into A's packing, C
    broadcast after it; rows off its 4-row panels, columns off its 16 lanes."""
    from onnxjit.kernels import linalg as klinalg
    calls = _counted(monkeypatch, klinalg, "gemm_packed_blocks")
    a = _rand((20, 13) if ta else (13, 20))
    b = _rand((37, 20) if tb else (20, 37), seed=1)
    c = None if cshape is None else _rand(cshape, seed=2)
    check("Gemm", [("a", a, False), ("b", b, True), ("c", c, True)], 13, alpha=0.5, beta=2.0, transA=ta, transB=tb)
    assert calls


@pytest.mark.parametrize("m,n", [(70, 300), (300, 70)])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_gemm_packed_split_over_threads(m, n, alpha, monkeypatch):
    """A packed GEMM large enough for the threads, cut along B's columns (A read in place, B the larger) or A's
    rows, with a bias row added in registers and a partial last panel and block."""
    from onnxjit.kernels import linalg as klinalg
    calls = _counted(monkeypatch, klinalg, "gemm_packed_blocks")
    check("Gemm", [("a", _rand((m, 64)), False), ("b", _rand((64, n), seed=1), True),
                   ("c", _rand(n, seed=2), True)], 13, alpha=alpha)
    assert calls


def test_gemm_beta_zero_ignores_c():
    c = np.full((3, 5), np.nan, F32)
    check("Gemm", [("a", _rand((3, 4)), False), ("b", _rand((4, 5), seed=1), False), ("c", c, False)], 13,
          beta=0.0)


MATMUL_SHAPES = [
    ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 4), (4, 3)), ((5, 2, 4), (4, 3)), ((2, 4), (5, 4, 3)),
    ((2, 1, 3, 4), (1, 5, 4, 2)), ((3, 2, 4), (3, 4, 6)), ((5, 2, 4), (4,)), ((64, 128), (128, 96)),
    ((1, 256), (256, 100)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_matmul(sa, sb, dtype):
    check("MatMul", [("a", _rand(sa, dtype), False), ("b", _rand(sb, dtype, 1), False)], 13)


@pytest.mark.parametrize("sa,sb", [((1, 256), (256, 100)), ((3, 7, 64), (64, 10)), ((64, 32), (32, 16)),
                                   ((2, 9, 700), (700, 33))])
@pytest.mark.parametrize("opset", [1, 9, 13])
def test_matmul_constant_b(sa, sb, opset):
    check("MatMul", [("a", _rand(sa), False), ("b", _rand(sb, seed=1), True)], opset)


@pytest.mark.parametrize("op,attrs,sa,sb,sc", [
    ("Gemm", {}, (3, 40), (40, 9), (9,)), ("Gemm", {"transB": 1, "alpha": 0.5, "beta": 2.0}, (1, 40), (9, 40), (1, 9)),
    ("Gemm", {}, (2, 40), (40, 9), None), ("MatMul", {}, (1, 2, 40), (40, 9), None),
    ("MatMul", {}, ("n", 40), (40, 9), None), ("Gemm", {}, ("n", 40), (40, 9), "fed"),
    ("Gemm", {"beta": 0.0}, (2, 40), (40, 9), "fed"),
    # more rows: the packed GEMM's calls
    ("Gemm", {}, (70, 40), (40, 9), (9,)), ("Gemm", {"transB": 1, "alpha": 0.5, "beta": 2.0}, ("m", 40), (37, 40),
                                                                         (1, 37)),
    ("MatMul", {}, (2, "m", 40), (40, 33), None), ("Gemm", {}, ("m", 40), (40, 9), "fed")])
def test_products_prepared_once_match_every_run(op, attrs, sa, sb, sc):
    """Products with a constant B (and C) are prepared at their first run per A's shape (and a fed C's) and called
    directly after (ops.linalg.PreparedProducts; few rows as dot products, more as the packed GEMM): new values of
    A and C, runs of A with other rows and a Relu after (fused) match onnxruntime on every run."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(sb).astype(F32), "b")]
    ins = ["a", "b"]
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [{"m": "n"}.get(d, d) for d in sa])]
    if sc == "fed":  # computed in the run (a Scan body's h @ W + x @ U), its shape as A's rows
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [{"m": "n"}.get(sa[0], sa[0]), sb[1]]))
        ins.append("c")
    elif sc is not None:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(sc).astype(F32), "c"))
        ins.append("c")
    nodes = [helper.make_node(op, ins, ["p"], **attrs), helper.make_node("Relu", ["p"], ["y"])]
    graph = helper.make_graph(nodes, "few", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    sess = onnxjit.InferenceSession(model)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    shapes = [tuple({"n": 3, "m": 70}.get(d, d) for d in sa)] * 3 + [tuple({"n": 1, "m": 40}.get(d, d) for d in sa)] * 2
    for shape in shapes:
        feeds = {"a": rng.standard_normal(shape).astype(F32)}
        if sc == "fed":
            feeds["c"] = rng.standard_normal((shape[0], sb[1])).astype(F32)
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


# --- BatchNormalization ----------------------------------------------------------------------------------------
def _bn_inputs(xs, dtype=F32, per_elem=False):
    c = xs[1]
    ps = xs[1:] if per_elem else (c,)
    rng = np.random.default_rng(3)
    return [("x", _rand(xs, dtype), False), ("scale", rng.standard_normal(ps).astype(dtype), True),
            ("bias", rng.standard_normal(ps).astype(dtype), True),
            ("mean", rng.standard_normal(ps).astype(dtype), True),
            ("var", rng.random(ps).astype(dtype) + 0.5, True)]


@pytest.mark.parametrize("xs", [(2, 3), (2, 3, 5), (1, 4, 5, 6), (2, 3, 2, 3, 4), (1, 32, 40, 40)])
@pytest.mark.parametrize("opset,dtype", [(7, F32), (9, F32), (14, F32), (15, F32), (9, F64), (15, F64)])
def test_batchnorm(xs, opset, dtype):
    check("BatchNormalization", _bn_inputs(xs, dtype), opset, epsilon=1e-3)


def test_batchnorm_opset6_test_mode():
    check("BatchNormalization", _bn_inputs((2, 3, 4, 5)), 6, oracle="reference", is_test=1)  # none in ORT


def test_batchnorm_non_spatial_opset7():
    check("BatchNormalization", _bn_inputs((2, 3, 4, 5), per_elem=True), 7, spatial=0)


def test_batchnorm_training_left_to_fallback():
    model = make_model("BatchNormalization", _bn_inputs((2, 3, 4)), 15, training_mode=1)
    assert CPU not in providers_of(model)
    model = make_model("BatchNormalization", _bn_inputs((2, 3, 4)), 9, n_out=3)
    assert CPU not in providers_of(model)


# --- Softmax ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset,axis", [(1, None), (1, 0), (1, 2), (11, -1), (11, -2), (11, 3), (13, None),
                                        (13, 0), (13, 1), (13, -2)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_softmax(opset, axis, dtype):
    attrs = {} if axis is None else {"axis": axis}
    check("Softmax", [("x", _rand((2, 3, 4, 5), dtype) * 4, False)], opset, **attrs)


def test_softmax_large_rows():
    check("Softmax", [("x", _rand((64, 1000)) * 10, False)], 13)
    check("Softmax", [("x", _rand((8, 300, 40)) * 10, False)], 13, axis=1)


# --- Concat / Flatten / Reshape --------------------------------------------------------------------------------
@pytest.mark.parametrize("opset,axis", [(4, 0), (4, 1), (11, -1), (13, 2), (13, -3)])
@pytest.mark.parametrize("dtype", [F32, F64, np.int64])
def test_concat(opset, axis, dtype):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for s, n in zip(shapes, (1, 2, 3)):
        s[axis] = n
    inputs = [(f"x{i}", (_rand(s, F64, i) * 10).astype(dtype), i == 1) for i, s in enumerate(shapes)]
    check("Concat", inputs, opset, axis=axis)


# Flatten-1 takes float types only: its int64 cases are not generated
@pytest.mark.parametrize("opset,axis,dtype", [(o, a, d) for o, a in [(1, None), (1, 0), (9, 2), (11, -1), (13, 4),
                                                                     (13, -4)]
                                              for d in (F32, np.int64) if o >= 9 or d == F32])
def test_flatten(opset, axis, dtype):
    attrs = {} if axis is None else {"axis": axis}
    check("Flatten", [("x", (_rand((2, 3, 4, 5)) * 10).astype(dtype), False)], opset, **attrs)


def _kernel(model):
    """The CPU kernel the registry builds for the model's one node."""
    from onnxjit.ir.serde import from_onnx
    from onnxjit.ops.registry import builder_for
    node = from_onnx(model).graph.nodes[0]
    return builder_for(node)(node)


def test_flatten_reshape_dropout_are_views():
    x = _rand((2, 3, 4))
    (y,) = _kernel(make_model("Flatten", [("x", x, False)], 13, axis=2))(x)
    assert y.shape == (6, 4) and np.shares_memory(x, y)
    shape = np.array([4, -1], np.int64)
    (y,) = _kernel(make_model("Reshape", [("x", x, False), ("shape", shape, True)], 14))(x, shape)
    assert y.shape == (4, 6) and np.shares_memory(x, y)
    (y,) = _kernel(make_model("Dropout", [("x", x, False)], 13))(x)
    assert y is x


@pytest.mark.parametrize("opset,shape,allowzero", [
    (5, [0, -1], 0), (5, [4, 0, -1], 0), (13, [-1], 0), (13, [2, 3, 5, 4], 0), (14, [0, 0, 20], 0),
    (14, [6, -1], 1), (19, [1, 1, -1], 0),
])
@pytest.mark.parametrize("dtype", [F32, F64, np.int64])
def test_reshape(opset, shape, allowzero, dtype):
    attrs = {"allowzero": allowzero} if opset >= 14 else {}
    check("Reshape", [("x", (_rand((2, 3, 20)) * 10).astype(dtype), False),
                      ("shape", np.array(shape, np.int64), True)], opset, **attrs)


def _data_of(dtype, shape, seed=0):
    x = _rand(shape, F64, seed) * 10
    if dtype is object:
        return np.array([f"s{v:.1f}" for v in x.ravel()], dtype=object).reshape(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.int4, object],
                         ids=["bfloat16", "float8e4m3fn", "int4", "string"])
def test_concat_flatten_reshape_any_dtype(dtype):
    """No arithmetic, so every tensor dtype runs on the CPU provider: strings against onnxruntime, the ml_dtypes
    types (which onnxruntime's Python API cannot feed) against onnx.reference, bit for bit."""
    x0, x1 = _data_of(dtype, (2, 3, 4)), _data_of(dtype, (2, 1, 4), 1)
    cases = [("Concat", [("x0", x0, False), ("x1", x1, False)], 13, {"axis": 1}),
             ("Flatten", [("x0", x0, False)], 21, {"axis": 2}),
             ("Reshape", [("x0", x0, False), ("shape", np.array([4, -1], np.int64), True)], 21, {})]
    for op, inputs, opset, attrs in cases:
        model = make_model(op, inputs, opset, **attrs)
        feeds = feeds_of(inputs)
        got = cpu_session(model).run(None, feeds)[0]
        if dtype is object:
            want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, feeds)[0]
            assert got.tolist() == want.tolist(), op
        else:
            want = onnx.reference.ReferenceEvaluator(model).run(None, feeds)[0]
            assert got.dtype == want.dtype and got.shape == want.shape, op
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=op)


def test_reshape_allowzero_keeps_zero():
    check("Reshape", [("x", np.zeros((0, 3), F32), False), ("shape", np.array([3, 0], np.int64), True)], 14,
          allowzero=1)


def test_reshape_shape_fed():
    check("Reshape", [("x", _rand((2, 3, 4)), False), ("shape", np.array([4, -1], np.int64), False)], 13)


# --- Dropout ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset,n_out", [(7, 1), (7, 2), (10, 1), (10, 2), (12, 1), (12, 2), (13, 2)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_dropout(opset, n_out, dtype):
    mask_type = TensorProto.BOOL if opset >= 10 else helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [("x", _rand((2, 3, 4), dtype), False)]
    attrs = {"ratio": 0.3} if opset < 12 else {}
    if opset >= 12:
        inputs += [("ratio", np.array(0.3, dtype), True), ("training_mode", np.array(False), True)]
    check("Dropout", inputs, opset, n_out=n_out,
          out_types=[helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), mask_type][:n_out], **attrs)


@pytest.mark.parametrize("opset", [1, 6])
def test_dropout_old_test_mode(opset):
    x = _rand((2, 3))  # no Dropout before 7 in onnxruntime nor onnx.reference: identity is the spec
    check("Dropout", [("x", x, False)], opset, want=[x], is_test=1, ratio=0.3)


def test_dropout_old_training_declined():
    assert _kernel(make_model("Dropout", [("x", _rand((2, 3)), False)], 6, is_test=0)) is None


def test_dropout_training_left_to_fallback():
    inputs = [("x", _rand((2, 3)), False), ("ratio", np.array(0.3, F32), True),
              ("training_mode", np.array(True), True)]
    assert CPU not in providers_of(make_model("Dropout", inputs, 13))
    inputs[2] = ("training_mode", np.array(False), False)  # a feed: unknown at build time
    assert CPU not in providers_of(make_model("Dropout", inputs, 13))


def test_matmul_reads_a_transposed_b_without_copying_it(monkeypatch):
    """A column-major B (a transposed view, as a folded Transpose of a weight can be) goes to the GEMM as its
    (N, K) rows with transB; a read-only view of a constant B counts as the constant (its transposed copy kept)."""
    from onnxjit.ops import linalg as L
    a, w = _rand((2, 40, 24)), _rand((64, 24), seed=1)
    b = w.T  # (24, 64), F-contiguous
    copies = []
    real = np.ascontiguousarray
    monkeypatch.setattr(L.np, "ascontiguousarray", lambda x, *k: copies.append(x.shape) or real(x, *k))
    np.testing.assert_allclose(L.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert (24, 64) not in copies
    const = _rand((24, 64), seed=2)
    const.flags.writeable = False
    cache = L.ConstantDerived(const, L._transposed)
    view = const.view()
    assert cache.holds(view) and not cache.holds(const.copy())
    np.testing.assert_allclose(L.matmul(a[:, :1], view, cache), a[:, :1] @ const, rtol=1e-5, atol=1e-5)
    assert cache.of(view) is cache.of(const)


# --- InstanceNormalization, LRN --------------------------------------------------------------------------------
@pytest.mark.parametrize("xs,opset,eps", [((2, 3, 5, 4), 6, 1e-5), ((1, 4, 300), 6, 1e-3), ((2, 3, 2, 3, 2), 1, 1e-5)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_instance_normalization(xs, opset, eps, dtype):
    c = xs[1]
    x = _rand(xs, dtype) * 3 + 1
    check("InstanceNormalization", [("x", x, False), ("s", _rand(c, dtype, 1), True), ("b", _rand(c, dtype, 2), True)],
          opset, oracle="ort" if dtype == F32 else "reference", epsilon=eps)  # onnxruntime: float32 only


def _lrn_spec(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the ONNX spec writes it, for what no oracle runs: onnxruntime takes 4-D inputs and odd sizes only,
    and onnx.reference sums the wrong axis (it loops over the batch)."""
    sq = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + -(-(size - 1) // 2) + 1)
        sq[:, c] = np.sum(x[:, lo:hi] ** 2, axis=1)
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("xs,attrs,opset", [((2, 5, 4, 3), dict(size=3), 13),
                                            ((1, 7, 6, 6), dict(size=5, alpha=2e-3, beta=0.6, bias=2.0), 1)])
def test_lrn_against_onnxruntime(xs, attrs, opset):
    check("LRN", [("x", _rand(xs) * 4, False)], opset, **attrs)


@pytest.mark.parametrize("xs,attrs", [((1, 7, 6, 6), dict(size=4, alpha=2e-3, beta=0.6, bias=2.0)),  # even size
                                      ((1, 3, 5), dict(size=5, alpha=1e-2))])  # 3-D, a window wider than C
@pytest.mark.parametrize("dtype", [F32, F64])
def test_lrn_against_the_spec(xs, attrs, dtype):
    x = _rand(xs, dtype) * 4
    exact = {k: v if k == "size" else float(np.float32(v)) for k, v in attrs.items()}  # float attributes: float32
    check("LRN", [("x", x, False)], 13, want=[_lrn_spec(x.astype(F64), **exact).astype(dtype)], **attrs)


# --- declines --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,inputs,attrs", [
    ("Conv", [("x", np.ones((1, 1, 3, 3), np.float16), False), ("w", np.ones((1, 1, 1, 1), np.float16), True)], {}),
    ("MaxPool", [("x", np.ones((1, 1, 3, 3), np.float16), False)], {"kernel_shape": [2, 2]}),
])
def test_other_dtypes_left_to_fallback(op, inputs, attrs):
    assert CPU not in providers_of(make_model(op, inputs, 13, **attrs))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_few_rows_equal_weight_rows_give_equal_outputs(trans_b):
    """A classifier whose weight rows are equal must give bit-equal logits, as onnxruntime does: the model-zoo
    light models (constant weights) end in such a Gemm plus Softmax, which turns a 1-ulp split into a wrong
    answer."""
    from onnx import TensorProto, helper
    import onnxjit
    rng = np.random.default_rng(5)
    w = np.full((1000, 1024) if trans_b else (1024, 1000), 0.02, np.float32)
    x = (rng.random((1, 1024)) * 1e18).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=trans_b)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1000])],
                          [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    so = kernel_options()
    y = onnxjit.InferenceSession(m.SerializeToString(), so).run(None, {"x": x})[0]
    assert np.unique(y).size == 1


def test_weight_preparation_matmul_in_blocks_equals_one_product(rng):
    """kernels.linalg.matmul_on_this_thread (numpy's OpenBLAS kept on the calling thread, in blocks of columns
    below its threading threshold) gives the one product's result: Winograd's weight transform uses it."""
    from onnxjit.kernels.linalg import BLAS_SERIAL_WORK, matmul_on_this_thread
    a = rng.standard_normal((36, 9))
    for n in (5, BLAS_SERIAL_WORK // (36 * 9), BLAS_SERIAL_WORK // (36 * 9) * 3 + 7):
        b = rng.standard_normal((9, n))
        np.testing.assert_allclose(matmul_on_this_thread(a, b), a @ b, rtol=1e-12, atol=1e-12)
