"""ConvTranspose on the CPU provider against onnxruntime: one-node models over auto_pad, pads, strides,
dilations, group, output_padding, output_shape, 1-D to 3-D, with and without bias, run with the fallback provider
disabled (each step checked to be on CPUExecutionProvider). onnxruntime has no float64 ConvTranspose: float64
runs against onnxruntime's float32 output of the same values, within float32 rounding.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from conftest import native_session

ort.set_default_logger_severity(3)
CPU = "CPUExecutionProvider"

CASES = [
    # x shape, w shape, attrs
    ((1, 2, 5, 5), (2, 3, 3, 3), {}),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2], dilations=[2, 2])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 2])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(dilations=[2, 2], pads=[1, 0, 2, 1])),
    ((2, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[16, 11])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[12, 9], auto_pad="SAME_UPPER")),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[12, 9], auto_pad="SAME_LOWER")),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[17, 10])),  # past the full size: bias only
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_padding=[1, 1], pads=[0, 1, 1, 0])),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_padding=[1, 1], auto_pad="SAME_UPPER")),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_padding=[2, 1], auto_pad="SAME_LOWER")),
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(group=2, strides=[2, 2], kernel_shape=[3, 3])),
    ((2, 6, 5, 6), (6, 1, 3, 3), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5, 5, 4), (2, 3, 3, 3, 2), dict(strides=[2, 2, 1])),
    ((1, 2, 5, 5, 4), (2, 3, 3, 3, 2), dict(strides=[2, 2, 1], pads=[1, 0, 1, 1, 0, 1], dilations=[1, 2, 1])),
    ((1, 2, 5), (2, 3, 3), dict(strides=[2])),
    ((2, 4, 7), (4, 2, 4), dict(strides=[3], group=2, pads=[1, 2])),
    ((1, 32, 24, 24), (32, 32, 2, 2), dict(strides=[2, 2])),  # enough work for the thread pool: tiles
    ((1, 32, 12, 12), (32, 16, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),  # tiles overlapping input rows
    ((1, 32, 40, 40), (32, 1, 2, 2), dict(strides=[2, 2])),  # few rows: no BLAS
    ((1, 64, 2, 2), (64, 64, 3, 3), dict(strides=[1, 1])),  # few planes: output channels split over threads
    ((1, 1, 5, 5), (1, 8, 3, 3), dict(strides=[2, 2])),  # one input channel: a (rows, 1) packed weight
    ((1, 16, 24, 80), (16, 4, 2, 2), dict(strides=[2, 2])),  # 2x2 stride 2, wide rows: W taps added in pairs
    ((1, 16, 24, 70), (16, 4, 2, 2), dict(strides=[2, 2], pads=[0, 1, 1, 0], output_padding=[1, 1])),
]


def model_of(xs, ws, dtype, bias, opset=17, **attrs):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(ws).astype(dtype), "w")]
    names = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(ws[1] * attrs.get("group", 1)).astype(dtype), "b"))
        names.append("b")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("ConvTranspose", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, xs)],
                              [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def expected(xs, ws, bias, x, opset=17, **attrs):
    model = model_of(xs, ws, np.float32, bias, opset, **attrs)
    return ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x.astype(np.float32)})[0]


@pytest.mark.parametrize("xs,ws,attrs", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_f32(xs, ws, attrs, bias):
    x = np.random.default_rng(0).standard_normal(xs).astype(np.float32)
    sess = native_session(model_of(xs, ws, np.float32, bias, **attrs))
    got = sess.run(None, {"x": x})[0]
    got_again = sess.run(None, {"x": x})[0]  # the packed weight is reused
    want = expected(xs, ws, bias, x, **attrs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    np.testing.assert_array_equal(got, got_again)


@pytest.mark.parametrize("xs,ws,attrs", CASES[::4])
def test_conv_transpose_f64(xs, ws, attrs):
    x = np.random.default_rng(0).standard_normal(xs).astype(np.float32)
    got = native_session(model_of(xs, ws, np.float64, True, **attrs)).run(None, {"x": x.astype(np.float64)})[0]
    assert got.dtype == np.float64
    want = expected(xs, ws, True, x, **attrs)  # the float64 weights are the float32 ones rounded up
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_opset_1():
    xs, ws, attrs = CASES[1]
    x = np.random.default_rng(0).standard_normal(xs).astype(np.float32)
    got = native_session(model_of(xs, ws, np.float32, True, opset=9, **attrs)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected(xs, ws, True, x, opset=9, **attrs), rtol=1e-5, atol=1e-5)


def test_weight_fed_at_run_time():
    xs, ws = (1, 2, 5, 5), (2, 3, 3, 3)
    rng = np.random.default_rng(0)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, xs),
                                            helper.make_tensor_value_info("w", 1, ws)],
                              [helper.make_tensor_value_info("y", 1, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = native_session(model)
    ref = ort.InferenceSession(model.SerializeToString(), providers=[CPU])
    for _ in range(2):  # a new weight each run
        feeds = {"x": rng.standard_normal(xs).astype(np.float32), "w": rng.standard_normal(ws).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs,ws,attrs,message", [
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[1, 1], output_padding=[1, 1]), "output_padding 1"),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[18, 11]), "cannot come from an input"),
    ((1, 2, 5, 5), (3, 3, 3, 3), {}, "input channels"),
    ((1, 2, 5, 5), (2, 3, 3, 3), dict(kernel_shape=[2, 2]), "kernel_shape"),
])
def test_errors(xs, ws, attrs, message):
    sess = native_session(model_of(xs, ws, np.float32, False, **attrs))
    with pytest.raises(Exception, match=message):
        sess.run(None, {"x": np.zeros(xs, np.float32)})



def test_tap_pair_cases_take_the_paired_loop():
    """The 2x2 stride-2 CASES over rows of 70 and 80 pixels run col2im's paired W taps (kernels.conv_transpose
    adds both taps in one loop from PAIR_MIN_WIDTH input columns up)."""
    from onnxjit.kernels import conv_transpose as kct
    wide = [xs for xs, ws, attrs in CASES if ws[-1] == 2 and attrs.get("strides") == [2, 2]
            and xs[-1] >= kct.PAIR_MIN_WIDTH]
    assert len(wide) == 2
