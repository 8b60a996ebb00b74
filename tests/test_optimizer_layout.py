"""The layout pass of ORT_ENABLE_ALL (channels-last depthwise convolutions, for the dtypes other than float32, which
conv_depthwise_blocked runs channels-last inside one kernel) and com.onnxjit NhwcConv's kernel."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import assert_all_same, make_model, native_session, ort_run, ref_run
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.optimizer.layout import NHWC_MAX_PIXELS, NHWC_MIN_CHANNELS

F = TensorProto.FLOAT
D = TensorProto.DOUBLE
L = onnxjit.GraphOptimizationLevel


def _dw_model(c: int, hw: int, steps: list[str], elem=D, **conv_attrs):
    """x [1, c, hw, hw] through `steps`: "dw" a depthwise 3x3 conv (with a bias), or an elementwise op."""
    rng = np.random.default_rng(0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    nodes, inits, prev = [], [], "x"
    attrs = {"pads": [1, 1, 1, 1], **conv_attrs}
    for i, step in enumerate(steps):
        out = f"v{i}"
        if step == "dw":
            inits += [numpy_helper.from_array(rng.standard_normal((c, 1, 3, 3)).astype(dtype), f"w{i}"),
                      numpy_helper.from_array(rng.standard_normal(c).astype(dtype), f"b{i}")]
            nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [out], group=c, **attrs))
        else:
            nodes.append(helper.make_node(step, [prev], [out]))
        prev = out
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return make_model(nodes, [helper.make_tensor_value_info("x", elem, [1, c, hw, hw])],
                      [helper.make_tensor_value_info("y", elem, None)], initializers=inits)


def _run(model, level=L.ORT_ENABLE_ALL, atol=None):
    """The optimization report after running `model` at `level`, its output checked against onnxruntime, or
    onnx.reference for float64 (onnxruntime has no float64 Conv), within `atol` where given (the dense case's
    576-term sums cancel beyond the default float32 tolerance)."""
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    tensor_type = model.graph.input[0].type.tensor_type
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in tensor_type.shape.dim])
    x = x.astype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    got = sess.run(None, {"x": x})
    want = ref_run(model, {"x": x}) if tensor_type.elem_type == D else ort_run(model, {"x": x})
    if atol is None:
        assert_all_same(got, want)
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=atol)
    return sess.optimization_report.after


def test_depthwise_chain_runs_channels_last_with_conversions_at_its_edges():
    # Conv + Relu becomes FusedConv (extended), then both convs NhwcConv, sharing the channels-last value
    after = _run(_dw_model(NHWC_MIN_CHANNELS, 7, ["dw", "Relu", "dw"]))
    assert after["com.onnxjit::NhwcConv"] == 2 and after["Transpose"] == 2, dict(after)
    assert after["Conv"] == after["com.onnxjit::FusedConv"] == 0


def test_extended_level_keeps_nchw():
    after = _run(_dw_model(NHWC_MIN_CHANNELS, 7, ["dw"]), L.ORT_ENABLE_EXTENDED)
    assert after["com.onnxjit::NhwcConv"] == 0 and after["Transpose"] == 0


def test_conversions_around_an_op_that_stays_nchw():
    after = _run(_dw_model(NHWC_MIN_CHANNELS, 7, ["dw", "Sigmoid", "Exp", "dw"], strides=[2, 2]))
    assert after["com.onnxjit::NhwcConv"] == 2 and after["Transpose"] == 4, dict(after)


@pytest.mark.parametrize("case", ["few_channels", "large_plane", "dense", "float32"])
def test_layout_stays_where_it_does_not_pay(case, monkeypatch):
    c = NHWC_MIN_CHANNELS // 2 if case == "few_channels" else NHWC_MIN_CHANNELS
    hw = int(NHWC_MAX_PIXELS ** 0.5) + 1 if case == "large_plane" else 7
    model = _dw_model(c, hw, ["dw"], elem=F if case in ("dense", "float32") else D)
    if case == "dense":  # group 1
        conv = model.graph.node[0]
        del conv.attribute[:]
        conv.attribute.extend([helper.make_attribute("pads", [1, 1, 1, 1])])
        w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((c, c, 3, 3)).astype(np.float32), "w0")
        model.graph.initializer[0].CopyFrom(w)
    if case == "float32":  # channels-last inside conv_depthwise_blocked instead
        from onnxjit.kernels import conv as kconv
        calls = []
        kernel = kconv.conv_depthwise_blocked
        monkeypatch.setattr(kconv, "conv_depthwise_blocked", lambda *a: calls.append(1) or kernel(*a))
    after = _run(model, atol=1e-4 if case == "dense" else None)
    assert after["com.onnxjit::NhwcConv"] == 0 and after["Transpose"] == 0, dict(after)
    if case == "float32":
        assert calls


def test_optimized_model_file_with_nhwc_conv_loads_back(tmp_path):
    model = _dw_model(NHWC_MIN_CHANNELS, 7, ["dw", "dw"])
    path = tmp_path / "optimized.onnx"
    so = onnxjit.SessionOptions()
    so.optimized_model_filepath = str(path)
    x = np.random.default_rng(3).standard_normal((1, NHWC_MIN_CHANNELS, 7, 7))
    want = onnxjit.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert [n.op_type for n in saved.graph.node].count("NhwcConv") == 2
    so2 = onnxjit.SessionOptions()
    so2.graph_optimization_level = L.ORT_DISABLE_ALL
    assert_all_same(onnxjit.InferenceSession(str(path), so2).run(None, {"x": x}), want)


# --- the NhwcConv kernel against its reference implementation ---------------------------------------------------
NHWC_CASES = {
    "plain": ((2, 5, 6, 8), dict(pads=[1, 1, 1, 1]), True, np.float32),
    "strided_dilated": ((1, 9, 8, 6), dict(strides=[2, 3], dilations=[2, 1], pads=[2, 0, 1, 2]), False, np.float32),
    "same_upper_relu": ((1, 7, 7, 5), dict(auto_pad="SAME_UPPER", strides=[2, 2], activation="Relu"), True,
                        np.float32),
    "valid_clip_double": ((1, 6, 5, 3), dict(auto_pad="VALID", activation="Clip", activation_params=[-0.5, 0.5]),
                          True, np.float64),
    "kernel_1x2": ((1, 4, 5, 4), dict(kernel_shape=[1, 2]), False, np.float32),
}


@pytest.mark.parametrize("case", list(NHWC_CASES))
def test_nhwc_conv_kernel_equals_reference(case):
    shape, attrs, bias, dtype = NHWC_CASES[case]
    c = shape[3]
    kernel = attrs.get("kernel_shape", [3, 3])
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal(shape).astype(dtype),
             "w": rng.standard_normal((c, 1, *kernel)).astype(dtype)}
    if bias:
        feeds["b"] = rng.standard_normal(c).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("NhwcConv", list(feeds), ["y"], domain="com.onnxjit", group=c, **attrs)
    model = make_model([node], [helper.make_tensor_value_info(n, elem, a.shape) for n, a in feeds.items()],
                       [helper.make_tensor_value_info("y", elem, None)], extra_opsets={"com.onnxjit": 1})
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = L.ORT_DISABLE_ALL
    want = onnxjit.InferenceSession(model.SerializeToString(), so,
                                    providers=["FallbackExecutionProvider"]).run(None, feeds)
    assert_all_same(native_session(model).run(None, feeds), want)


def test_nhwc_conv_kernel_names_what_it_cannot_run():
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, 4, 4, 6)).astype(np.float32),
             "w": rng.standard_normal((6, 3, 3, 3)).astype(np.float32)}
    node = helper.make_node("NhwcConv", ["x", "w"], ["y"], domain="com.onnxjit", group=2, pads=[1, 1, 1, 1])
    model = make_model([node], [helper.make_tensor_value_info(n, F, a.shape) for n, a in feeds.items()],
                       [helper.make_tensor_value_info("y", F, None)], extra_opsets={"com.onnxjit": 1})
    with pytest.raises(Exception, match="depthwise"):
        native_session(model).run(None, feeds)
