"""Resize and Upsample on the CPU provider against onnxruntime: one-node models over modes, coordinate
transformations, nearest roundings, antialias, axes, keep_aspect_ratio_policy, scales or sizes, ranks, dtypes and
opsets, run with the fallback provider disabled (each step checked to be on CPUExecutionProvider).

Nearest results must be equal; linear and cubic ones within float rounding (the kernels resample one axis at a
time). onnxruntime has no Resize over float64, float16 or int64: those run against onnxruntime's float32 / int32
output (nearest copies elements, so the cast is exact), and linear/cubic float64 against onnx.reference. Layouts
onnxruntime refuses for linear/cubic (resizing an outer axis) compare with onnx.reference too.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import onnxjit
from conftest import native_session, ref_run

ort.set_default_logger_severity(3)
CPU = "CPUExecutionProvider"
COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize"]
CROP = dict(roi=[0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], extrapolation_value=3.5)


def resize_model(shape, dtype, opset, scales=None, sizes=None, roi=None, op="Resize", **attrs):
    """One Resize (or Upsample) node; scales/sizes/roi are initializers, None for an absent input."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names, inits = ["x"], []
    optional = (("roi", roi, np.float32), ("scales", scales, np.float32), ("sizes", sizes, np.int64))
    for name, value, vdtype in (optional if opset >= 11 else optional[1:2]):
        if value is None:
            names.append("")
        else:
            names.append(name)
            inits.append(numpy_helper.from_array(np.array(value, vdtype), name))
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check(shape, dtype=np.float32, opset=19, oracle="ort", tol=1e-5, **kw):
    if kw.get("coordinate_transformation_mode") == "align_corners" and kw.get("scales") is not None:
        # from scales, align_corners follows the ONNX reference (test_align_corners_from_scales); onnxruntime's
        # mapping is the one from sizes
        kw["sizes"] = [int(np.float32(s) * np.float32(n)) for s, n in zip(kw.pop("scales"), shape)]
    model = resize_model(shape, dtype, opset, **kw)
    x = sample(shape, dtype)
    got = native_session(model).run(None, {"x": x})[0]
    if oracle == "reference":
        want = ref_run(model, {"x": x})[0]
    else:
        want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if kw.get("mode", "nearest") == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("coord", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.7], [1, 1, 1.7, 0.5]])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_nearest(coord, scales, nearest_mode):
    crop = CROP if coord == "tf_crop_and_resize" else {}
    check((2, 3, 5, 7), scales=scales, mode="nearest", coordinate_transformation_mode=coord,
          nearest_mode=nearest_mode, **crop)


@pytest.mark.parametrize("coord", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.7], [1, 1, 1.7, 0.6], [1, 1, 1, 2.5]])
@pytest.mark.parametrize("mode,extra", [("linear", {}), ("cubic", {}),
                                        ("cubic", dict(exclude_outside=1, cubic_coeff_a=-0.5))])
def test_linear_cubic(coord, scales, mode, extra):
    crop = CROP if coord == "tf_crop_and_resize" else {}
    check((2, 3, 5, 7), scales=scales, mode=mode, coordinate_transformation_mode=coord, **crop, **extra)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.3], [1, 1, 0.7, 1.6], [1, 1, 0.25, 0.45]])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "tf_crop_and_resize"])
def test_antialias(mode, scales, exclude_outside, coord):
    crop = CROP if coord == "tf_crop_and_resize" else {}
    check((2, 2, 12, 15), scales=scales, mode=mode, antialias=1, exclude_outside=exclude_outside,
          coordinate_transformation_mode=coord, **crop)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_nhwc(mode):
    check((2, 9, 11, 3), scales=[1, 0.5, 0.4, 1], mode=mode, antialias=1)


def test_antialias_trilinear():
    check((2, 3, 8, 9, 7), scales=[1, 1, 0.5, 0.5, 0.7], mode="linear", antialias=1)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_sizes_axes_policy(policy, mode):
    if policy == "stretch":  # else the policy's scale applies to N and C too, which onnxruntime refuses
        check((1, 2, 6, 9), sizes=[1, 2, 4, 13], mode=mode, keep_aspect_ratio_policy=policy)
    check((1, 2, 6, 9), sizes=[4, 13], axes=[2, 3], mode=mode, keep_aspect_ratio_policy=policy)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_scales_with_axes(mode):
    check((1, 2, 6, 9), scales=[1.5, 0.5], axes=[2, 3], mode=mode)
    check((1, 2, 6, 9), scales=[0.5], axes=[3], mode=mode)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_ranks(mode):
    check((5, 7), scales=[0.6, 2.0], mode=mode)
    check((2, 3, 4, 5), scales=[1, 1.5, 2, 1], mode=mode)  # NHWC
    if mode != "cubic":
        check((3, 5, 7), scales=[1.5, 0.6, 2.0], mode=mode)
        check((2, 3, 4, 5, 6), scales=[1, 1, 2, 0.5, 1.5], mode=mode)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_layouts_onnxruntime_refuses(mode):
    # resizing every axis of a 4-D input (or cubic over a 3-D one): onnx.reference decides
    oracle = "ort" if mode == "nearest" else "reference"
    check((2, 3, 4, 5), scales=[2, 1.5, 0.5, 1.5], mode=mode, oracle=oracle)
    check((7,), scales=[2.3], mode=mode, oracle="ort" if mode == "nearest" else "reference")
    check((3, 5, 7), scales=[2.0, 0.6, 1.5], mode=mode, oracle=oracle)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("crop", [False, True])
def test_nearest_integer_types(dtype, crop):
    extra = dict(coordinate_transformation_mode="tf_crop_and_resize", roi=[0, 0, -0.2, 0.1, 1, 1, 1.3, 0.8],
                 extrapolation_value=-2.7) if crop else {}
    check((2, 3, 5, 7), dtype=dtype, scales=[1, 1, 2.5, 0.6], mode="nearest", **extra)


@pytest.mark.parametrize("dtype,like", [(np.float64, np.float32), (np.float16, np.float32), (np.int64, np.int32),
                                        (np.bool_, np.uint8)])
@pytest.mark.parametrize("crop", [False, True])
def test_nearest_types_onnxruntime_lacks(dtype, like, crop):
    extra = dict(coordinate_transformation_mode="tf_crop_and_resize", roi=[0, 0, -0.2, 0.1, 1, 1, 1.3, 0.8],
                 extrapolation_value=-3.0 if dtype != np.bool_ else 1.0) if crop else {}
    kw = dict(scales=[1, 1, 2.5, 0.6], mode="nearest", **extra)
    x = sample((2, 3, 5, 7), like) % (2 if dtype == np.bool_ else 100)
    got = native_session(resize_model(x.shape, dtype, 19, **kw)).run(None, {"x": x.astype(dtype)})[0]
    model = resize_model(x.shape, like, 19, **kw)
    want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_align_corners_from_scales(mode):
    # scale * length is not whole here: the reference maps onto it (the conformance suite's expected outputs),
    # onnxruntime onto the truncated output size
    model = resize_model((2, 3, 5, 7), np.float32, 19, scales=[1, 1, 0.5, 0.7], mode=mode,
                         coordinate_transformation_mode="align_corners")
    x = sample((2, 3, 5, 7), np.float32)
    np.testing.assert_allclose(native_session(model).run(None, {"x": x})[0], ref_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_float64_against_reference(mode):
    # the weights are computed in float32 as onnxruntime does for float32 (onnx.reference: in float64)
    check((2, 3, 5, 8), dtype=np.float64, scales=[1, 1, 2.0, 0.5], mode=mode, oracle="reference", tol=1e-6)


@pytest.mark.parametrize("opset,mode", [(o, m) for o in (10, 11, 13, 18) for m in ("nearest", "linear", "cubic")
                                         if o >= 11 or m != "cubic"])  # Resize-10 has no cubic mode
@pytest.mark.parametrize("scales", [[1, 1, 2.5, 0.6], [1, 1, 2, 2], [1, 1, 0.5, 0.6]])
def test_opsets(opset, mode, scales):
    check((2, 3, 5, 7), opset=opset, scales=scales, mode=mode, roi=[] if opset < 13 else None)


@pytest.mark.parametrize("opset", [11, 13])
def test_sizes_with_empty_scales(opset):
    check((2, 3, 5, 7), opset=opset, roi=[], scales=[], sizes=[2, 3, 3, 11], mode="linear")


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(opset, mode):
    x = sample((1, 2, 3, 4), np.float32)
    if opset == 7:
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5])
        inits = []
    else:
        node = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
        inits = [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "s")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                              [helper.make_tensor_value_info("y", 1, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    got = native_session(model).run(None, {"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_identity_and_parallel():
    check((1, 3, 5, 7), scales=[1, 1, 1, 1], mode="linear")  # the output is the input
    check((2, 16, 40, 48), scales=[1, 1, 2, 2], mode="nearest")  # enough work for the thread pool
    check((2, 16, 40, 48), scales=[1, 1, 2, 2], mode="linear")


@pytest.mark.parametrize("kw,message", [
    (dict(scales=[1, 2]), "scales has 2 values, expected 4"),
    (dict(sizes=[3, 4, 5]), "sizes has 3 values, expected 4"),
    (dict(scales=[1, 1, 0, 2]), "scales must be > 0"),
    (dict(scales=[1, 2], axes=[1, 1]), "axes"),
])
def test_errors(kw, message):
    model = resize_model((1, 2, 3, 4), np.float32, 19, mode="nearest", **kw)
    with pytest.raises(Exception, match=message):
        native_session(model).run(None, {"x": sample((1, 2, 3, 4), np.float32)})


def test_errors_scales_and_sizes():
    model = resize_model((1, 2, 3, 4), np.float32, 13, scales=[1, 1, 2, 2], sizes=[1, 2, 6, 8])
    with pytest.raises(Exception, match="only one of scales and sizes"):
        native_session(model).run(None, {"x": sample((1, 2, 3, 4), np.float32)})


def test_integer_linear_left_to_fallback():
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = resize_model((1, 2, 3, 4), np.uint8, 19, scales=[1, 1, 2, 2], mode="linear")
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=[CPU])
    assert [s.provider for s in sess._compiled.steps] != [CPU]


PLANE_CASES = [
    # shape, scales or sizes, attributes, fused kernel, whether its columns are a 2x downscale
    ((2, 3, 5, 7), dict(scales=[1, 1, 2, 3]), dict(mode="nearest"), "nearest_2d", False),
    ((1, 16, 20, 24), dict(scales=[1, 1, 2, 2]), dict(mode="nearest"), "nearest_2d", False),
    ((1, 4, 9, 10), dict(scales=[1, 1, 0.5, 0.5]), dict(mode="nearest"), "nearest_2d", True),
    ((1, 4, 9, 10), dict(scales=[1, 1, 0.5, 0.5]), dict(mode="nearest", nearest_mode="ceil"), "nearest_2d", True),
    ((2, 3, 5, 7), dict(scales=[1, 1, 1.7, 0.6]), dict(mode="nearest", nearest_mode="floor",
                                                      coordinate_transformation_mode="asymmetric"), "nearest_2d",
     False),
    ((2, 3, 5, 7), dict(scales=[1, 1, 2, 3]), dict(mode="linear"), "bilinear_2d_cols_first", False),
    ((1, 16, 20, 24), dict(scales=[1, 1, 2, 2]), dict(mode="linear"), "bilinear_2d_cols_first", False),
    ((1, 16, 20, 24), dict(sizes=[1, 16, 40, 48]), dict(mode="linear", coordinate_transformation_mode="align_corners"),
     "bilinear_2d_cols_first", False),
    ((1, 16, 20, 24), dict(scales=[1, 1, 2, 2]), dict(mode="linear",
                                                      coordinate_transformation_mode="pytorch_half_pixel"),
     "bilinear_2d_cols_first", False),
    ((1, 3, 64, 48), dict(scales=[1, 1, 0.5, 0.5]), dict(mode="linear"), "bilinear_2d_rows_first", True),
    ((1, 3, 60, 50), dict(sizes=[1, 3, 28, 28]), dict(mode="linear"), "bilinear_2d_rows_first", False),
    ((2, 3, 5, 7), dict(scales=[1, 1, 0.5, 1.7]), dict(mode="linear", coordinate_transformation_mode="asymmetric"),
     "bilinear_2d_rows_first", False),
    ((2, 3, 5, 7), dict(scales=[1, 1, 1.7, 0.6], **CROP), dict(mode="linear",
                                                             coordinate_transformation_mode="tf_crop_and_resize"),
     "bilinear_2d_cols_first", False),
    ((2, 3, 5, 7), dict(scales=[1, 1, 1.7, 0.6], **CROP), dict(mode="nearest",
                                                             coordinate_transformation_mode="tf_crop_and_resize"),
     "nearest_2d", False),
]


@pytest.mark.parametrize("shape,geometry,attrs,kernel,halving", PLANE_CASES)
def test_last_two_axes_fused(shape, geometry, attrs, kernel, halving, monkeypatch):
    """Resizing exactly the last two axes by nearest or linear runs as one fused pass (kernels.resize *_2d);
    a 2x downscale's columns are read with a stride instead of through the index table."""
    from onnxjit.kernels import resize as kresize
    calls = []
    fused = getattr(kresize, kernel)
    monkeypatch.setattr(kresize, kernel, lambda *a: calls.append(a[-4]) or fused(*a))
    check(shape, **geometry, **attrs)
    assert calls and all((h >= 0) == halving for h in calls)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_last_two_axes_fused_other_ranks(mode, monkeypatch):
    from onnxjit.kernels import resize as kresize
    kernels = ("nearest_2d",) if mode == "nearest" else ("bilinear_2d_cols_first", "bilinear_2d_rows_first")
    calls = []
    for name in kernels:
        fused = getattr(kresize, name)
        monkeypatch.setattr(kresize, name, lambda *a, fused=fused: calls.append(1) or fused(*a))
    check((5, 7), scales=[0.6, 2.0], mode=mode, oracle="ort" if mode == "nearest" else "reference")
    check((2, 3, 4, 5, 6), scales=[1, 1, 1, 2, 0.5], mode=mode)
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_last_two_axes_fused_nearest_integers(dtype, monkeypatch):
    from onnxjit.kernels import resize as kresize
    calls = []
    fused = kresize.nearest_2d
    monkeypatch.setattr(kresize, "nearest_2d", lambda *a: calls.append(1) or fused(*a))
    check((2, 3, 8, 10), dtype=dtype, scales=[1, 1, 2, 0.5], mode="nearest")
    assert calls


def test_last_two_axes_fused_float64(monkeypatch):
    from onnxjit.kernels import resize as kresize
    calls = []
    fused = kresize.bilinear_2d_cols_first
    monkeypatch.setattr(kresize, "bilinear_2d_cols_first", lambda *a: calls.append(1) or fused(*a))
    check((2, 3, 5, 8), dtype=np.float64, scales=[1, 1, 2.0, 0.5], mode="linear", oracle="reference", tol=1e-6)
    assert calls
