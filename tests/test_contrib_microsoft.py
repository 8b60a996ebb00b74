"""onnxruntime's com.microsoft contrib ops on onnxjit, against onnxruntime's own output: one-node models (opset
imports ai.onnx 17 and com.microsoft 1) run on the fallback provider alone (the numpy references of
onnxjit/contrib/microsoft) and, for the ops the CPU provider has native builders for (onnxjit/ops/microsoft.py), on
the CPU provider with the fallback disabled; their optional inputs, outputs and attributes; bad inputs raise typed
errors naming the op. Last, a tiny BERT encoder optimized by onnxruntime's transformer optimizer and by
onnxruntime's own graph optimizations runs on onnxjit as on onnxruntime."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from conftest import native_session
from onnx import TensorProto, helper

import onnxjit

MS = "com.microsoft"
F32 = np.float32


def ms_model(op, inputs, n_out=1, out_types=None, domain=MS, **attrs):
    """One `domain` node over `inputs` [(name, array or None, is_initializer)], outputs y0..y{n_out-1} (None in
    out_types: an absent output); outputs typed like the first input unless out_types says."""
    names, vis, inits = [], [], []
    for name, arr, is_init in inputs:
        if arr is None:
            names.append("")
        elif is_init:
            names.append(name)
            inits.append(onnx.numpy_helper.from_array(arr, name))
        else:
            names.append(name)
            vis.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
    while names and not names[-1]:
        names.pop()
    first = next(a for _, a, _ in inputs if a is not None)
    types = out_types or [helper.np_dtype_to_tensor_dtype(first.dtype)] * n_out
    out_names = [f"y{i}" if t is not None else "" for i, t in enumerate(types)]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in zip(out_names, types) if n]
    node = helper.make_node(op, names, out_names, domain=domain, **attrs)
    graph = helper.make_graph([node], "g", vis, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10)


def feeds(inputs):
    return {name: arr for name, arr, is_init in inputs if arr is not None and not is_init}


def ort_outputs(model, inputs):
    import onnxruntime
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds(inputs))


def reference_session(model):
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=["FallbackExecutionProvider"])
    assert [s.provider for s in sess._compiled.steps] == ["FallbackExecutionProvider"]
    return sess


def assert_close(got, want, rtol=1e-4, atol=1e-5, check=None):
    assert len(got) == len(want), f"{len(got)} outputs != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if check is not None and i not in check:
            continue
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape} != {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


def check_op(op, inputs, n_out=1, out_types=None, native=False, rtol=1e-4, atol=1e-5, check=None, **attrs):
    """The op's outputs on the fallback provider (and, with `native`, on the CPU provider alone) match
    onnxruntime's."""
    model = ms_model(op, inputs, n_out, out_types, **attrs)
    want = ort_outputs(model, inputs)
    assert_close(reference_session(model).run(None, feeds(inputs)), want, rtol, atol, check)
    if native:
        assert_close(native_session(model).run(None, feeds(inputs)), want, rtol, atol, check)
    return want


def randn(rng, *shape, dtype=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# --- activations ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu(rng, dtype):
    x = randn(rng, 2, 3, 8, dtype=dtype, scale=2)
    check_op("Gelu", [("x", x, False)], native=dtype == np.float32, rtol=1e-3 if dtype == np.float16 else 1e-5)


@pytest.mark.parametrize("with_bias", [True, False])
def test_fast_gelu(rng, with_bias):
    x, b = randn(rng, 2, 3, 8, scale=2), randn(rng, 8)
    check_op("FastGelu", [("x", x, False), ("b", b if with_bias else None, False)], native=True)


def test_bias_gelu(rng):
    check_op("BiasGelu", [("a", randn(rng, 2, 3, 8, scale=2), False), ("b", randn(rng, 8), True)], native=True)


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5])
def test_quick_gelu(rng, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    check_op("QuickGelu", [("x", randn(rng, 4, 8, scale=3), False)], native=True, **attrs)


def decomposed_expected(nodes, inputs, n_out=1, opset=20):
    """onnxruntime's output of a decomposition into ai.onnx ops (for contrib ops onnxruntime runs only on CUDA):
    `nodes` read the input names and write y0.."""
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a, _ in inputs]
    outs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    model = helper.make_model(helper.make_graph(nodes, "g", vis, outs), ir_version=10,
                              opset_imports=[helper.make_opsetid("", opset)])
    return ort_outputs(model, inputs)


def test_bias_add(rng):
    inputs = [("x", randn(rng, 2, 3, 8), False), ("b", randn(rng, 8), False), ("s", randn(rng, 2, 3, 8), False)]
    want = decomposed_expected([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Add", ["t", "s"],
                                                                                              ["y0"])], inputs)
    model = ms_model("BiasAdd", inputs)
    assert_close(reference_session(model).run(None, feeds(inputs)), want)
    assert_close(native_session(model).run(None, feeds(inputs)), want)


def test_bias_split_gelu(rng):
    inputs = [("x", randn(rng, 2, 4, 16, scale=2), False), ("b", randn(rng, 16), False)]
    want = decomposed_expected([
        helper.make_node("Add", ["x", "b"], ["t"]),
        helper.make_node("Split", ["t"], ["left", "right"], axis=-1, num_outputs=2),
        helper.make_node("Gelu", ["right"], ["g"]), helper.make_node("Mul", ["left", "g"], ["y0"])], inputs)
    assert_close(reference_session(ms_model("BiasSplitGelu", inputs)).run(None, feeds(inputs)), want)


def test_activation_errors_name_the_op(rng):
    inputs = [("a", randn(rng, 2, 8), False), ("b", randn(rng, 4), False)]
    with pytest.raises(onnxjit.RuntimeException, match=r"BiasGelu: B must be 1-D of the input's last dimension") \
            as info:
        reference_session(ms_model("BiasGelu", inputs)).run(None, feeds(inputs))
    assert isinstance(info.value.__cause__, ValueError)


# --- normalization ----------------------------------------------------------------------------------------------
SKIP_SHAPES = [((2, 4, 8), (2, 4, 8)), ((2, 4, 8), (1, 4, 8)), ((2, 4, 8), (4, 8)), ((6, 8), (6, 8))]


@pytest.mark.parametrize("x_shape,skip_shape", SKIP_SHAPES)
@pytest.mark.parametrize("optional", ["none", "beta", "beta_bias"])
def test_skip_layer_normalization(rng, x_shape, skip_shape, optional):
    inputs = [("x", randn(rng, *x_shape), False), ("skip", randn(rng, *skip_shape), False),
              ("gamma", randn(rng, 8), True), ("beta", randn(rng, 8) if optional != "none" else None, True),
              ("bias", randn(rng, 8) if optional == "beta_bias" else None, True)]
    check_op("SkipLayerNormalization", inputs, n_out=4, native=True, epsilon=1e-4)


def test_skip_layer_normalization_first_output_only(rng):
    inputs = [("x", randn(rng, 2, 4, 8), False), ("skip", randn(rng, 2, 4, 8), False),
              ("gamma", randn(rng, 8), True), ("beta", randn(rng, 8), True)]
    check_op("SkipLayerNormalization", inputs, native=True)


@pytest.mark.parametrize("with_bias", [True, False])
def test_skip_simplified_layer_normalization(rng, with_bias):
    inputs = [("x", randn(rng, 2, 4, 8), False), ("skip", randn(rng, 2, 4, 8), False),
              ("gamma", randn(rng, 8), True), ("bias", randn(rng, 8) if with_bias else None, True)]
    check_op("SkipSimplifiedLayerNormalization", inputs, n_out=4, native=True, epsilon=1e-4)
    check_op("SkipSimplifiedLayerNormalization", inputs, n_out=1, native=True)


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("n_out", [1, 2])
def test_simplified_layer_normalization(rng, axis, n_out):
    x = randn(rng, 2, 3, 8)
    scale = randn(rng, *x.shape[axis:])
    inputs = [("x", x, False), ("scale", scale, True)]
    # onnxruntime registers this op in the ai.onnx domain; onnxjit runs the com.microsoft spelling too
    model = ms_model("SimplifiedLayerNormalization", inputs, n_out, domain="", axis=axis, epsilon=1e-3)
    want = ort_outputs(model, inputs)
    ms = ms_model("SimplifiedLayerNormalization", inputs, n_out, axis=axis, epsilon=1e-3)
    assert_close(reference_session(ms).run(None, feeds(inputs)), want)
    assert_close(native_session(ms).run(None, feeds(inputs)), want)
    assert_close(native_session(model).run(None, feeds(inputs)), want)


def _embed_inputs(rng, segment=True, mask=True, position_ids=None):
    batch, seq, hidden = 2, 5, 8
    return [("ids", rng.integers(0, 11, (batch, seq)).astype(np.int32), False),
            ("seg", rng.integers(0, 2, (batch, seq)).astype(np.int32) if segment else None, False),
            ("we", randn(rng, 11, hidden), True), ("pe", randn(rng, 7, hidden), True),
            ("se", randn(rng, 2, hidden) if segment else None, True),
            ("gamma", randn(rng, hidden), True), ("beta", randn(rng, hidden), True),
            ("mask", np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32) if mask else None, False),
            ("pos", position_ids, False)]


@pytest.mark.parametrize("segment,mask", [(True, True), (False, False), (True, False)])
def test_embed_layer_normalization(rng, segment, mask):
    inputs = _embed_inputs(rng, segment, mask)
    check_op("EmbedLayerNormalization", inputs, n_out=3, out_types=[TensorProto.FLOAT, TensorProto.INT32,
                                                                    TensorProto.FLOAT], native=True, epsilon=1e-5)


@pytest.mark.parametrize("pos_shape", [(2, 5), (1, 5)])
def test_embed_layer_normalization_position_ids(rng, pos_shape):
    inputs = _embed_inputs(rng, position_ids=rng.integers(0, 7, pos_shape).astype(np.int32))
    check_op("EmbedLayerNormalization", inputs, n_out=3, out_types=[TensorProto.FLOAT, TensorProto.INT32,
                                                                    TensorProto.FLOAT], native=True)


# --- fused MatMul / Conv ----------------------------------------------------------------------------------------
FUSED_MATMUL_CASES = [  # A shape, B shape, attributes
    ((3, 4), (4, 5), {}),
    ((3, 4), (4, 5), {"alpha": 0.5}),
    ((4, 3), (5, 4), {"transA": 1, "transB": 1, "alpha": 2.0}),
    ((2, 3, 4), (4, 5), {"alpha": 0.125}),
    ((2, 3, 4), (2, 5, 4), {"transB": 1}),
    ((2, 4, 3), (1, 4, 5), {"transA": 1}),
    ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
    ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
    ((3, 2, 4), (5, 2, 4), {"transBatchA": 1, "transBatchB": 1, "transB": 1}),
    ((4, 2, 3), (2, 4, 5), {"transBatchA": 1, "transA": 1, "alpha": 0.5}),
    ((4,), (4, 5), {}),
]


@pytest.mark.parametrize("a_shape,b_shape,attrs", FUSED_MATMUL_CASES)
def test_fused_matmul(rng, a_shape, b_shape, attrs):
    check_op("FusedMatMul", [("a", randn(rng, *a_shape), False), ("b", randn(rng, *b_shape), False)], native=True,
             **attrs)


def test_fused_matmul_constant_b(rng):
    check_op("FusedMatMul", [("a", randn(rng, 2, 3, 16), False), ("b", randn(rng, 32, 16), True)], native=True,
             transB=1, alpha=0.25)


FUSED_CONV_CASES = [
    ({}, False),
    ({"activation": "Relu"}, False),
    ({"activation": "Relu"}, True),
    ({"activation": "LeakyRelu", "activation_params": [0.2]}, False),
    ({"activation": "Clip", "activation_params": [-0.5, 0.5], "pads": [1, 1, 1, 1]}, False),
    ({"activation": "HardSigmoid", "activation_params": [0.3, 0.4], "strides": [2, 2]}, False),
    ({"activation": "Sigmoid", "group": 2}, False),
    ({"activation": "Tanh", "dilations": [2, 1], "pads": [2, 1, 2, 1]}, True),
    ({"activation": "Relu", "auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
]


@pytest.mark.parametrize("attrs,with_z", FUSED_CONV_CASES)
def test_fused_conv(rng, attrs, with_z):
    group = attrs.get("group", 1)
    x, w, b = randn(rng, 1, 4, 6, 6), randn(rng, 4, 4 // group, 3, 3, scale=0.3), randn(rng, 4)
    model = ms_model("Conv", [("x", x, False), ("w", w, True), ("b", b, True)], domain="",
                     **{k: v for k, v in attrs.items() if not k.startswith("activation")})
    z = None
    if with_z:  # Z is the output's shape
        z = randn(rng, *ort_outputs(model, [("x", x, False), ("w", w, True), ("b", b, True)])[0].shape)
    check_op("FusedConv", [("x", x, False), ("w", w, True), ("b", b, True), ("z", z, False)], native=True, **attrs)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 4, "pads": [1, 0, 1, 0]},
                                   {"group": 2, "dilations": [1, 2], "auto_pad": "VALID"}])
def test_nhwc_conv(rng, attrs):
    # onnxruntime runs NhwcConv on CUDA only: the expected output is its Transpose -> Conv -> Transpose
    group = attrs.get("group", 1)
    x, w, b = randn(rng, 1, 6, 6, 4), randn(rng, 4, 4 // group, 3, 3, scale=0.3), randn(rng, 4)
    inputs = [("x", x, False), ("w", w, False), ("b", b, False)]
    want = decomposed_expected([helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
                                helper.make_node("Conv", ["xt", "w", "b"], ["yt"], **attrs),
                                helper.make_node("Transpose", ["yt"], ["y0"], perm=[0, 2, 3, 1])], inputs)
    inputs = [("x", x, False), ("w", w, True), ("b", b, True)]
    model = ms_model("NhwcConv", inputs, **attrs)
    assert_close(reference_session(model).run(None, feeds(inputs)), want)
    assert_close(native_session(model).run(None, feeds(inputs)), want)


# --- RotaryEmbedding --------------------------------------------------------------------------------------------
def _caches(rng, positions, half):
    angles = rng.uniform(0, 3, (positions, half))
    return np.cos(angles).astype(F32), np.sin(angles).astype(F32)


ROTARY_CASES = [  # input shape, position_ids kind, attributes
    ((2, 3, 16), "offset", {"num_heads": 2}),
    ((2, 3, 16), "ids", {"num_heads": 2, "interleaved": 1}),
    ((2, 2, 3, 8), "ids", {}),
    ((2, 2, 3, 8), "offset", {"interleaved": 1}),
    ((2, 3, 16), "ids", {"num_heads": 2, "rotary_embedding_dim": 4}),
    ((2, 2, 3, 8), "offset", {"rotary_embedding_dim": 4, "interleaved": 1, "num_heads": 2}),
]


@pytest.mark.parametrize("shape,pos_kind,attrs", ROTARY_CASES)
def test_rotary_embedding(rng, shape, pos_kind, attrs):
    head = shape[-1] if len(shape) == 4 else shape[-1] // attrs["num_heads"]
    rotary = attrs.get("rotary_embedding_dim", head)
    cos, sin = _caches(rng, 10, rotary // 2)
    batch, seq = shape[0], shape[-2] if len(shape) == 4 else shape[1]
    ids = np.array([4], np.int64) if pos_kind == "offset" else rng.integers(0, 10, (batch, seq)).astype(np.int64)
    inputs = [("x", randn(rng, *shape), False), ("pos", ids, False), ("cos", cos, True), ("sin", sin, True)]
    check_op("RotaryEmbedding", inputs, native=True, **attrs)


def test_rotary_embedding_position_out_of_range(rng):
    cos, sin = _caches(rng, 4, 4)
    inputs = [("x", randn(rng, 1, 3, 8), False), ("pos", np.array([3], np.int64), False), ("cos", cos, True),
              ("sin", sin, True)]
    model = ms_model("RotaryEmbedding", inputs, num_heads=1)
    for sess in (reference_session(model), native_session(model)):
        with pytest.raises(onnxjit.RuntimeException, match=r"RotaryEmbedding: position_ids must lie in \[0, 4\)"):
            sess.run(None, feeds(inputs))


# --- Attention ----------------------------------------------------------------------------------------------------
def _attention_inputs(rng, batch=2, seq=4, hidden=16, heads=2, mask=None, past=0, attention_bias=False,
                      sizes=None):
    sizes = sizes or [hidden] * 3
    head = sizes[0] // heads
    return [("x", randn(rng, batch, seq, hidden), False),
            ("w", randn(rng, hidden, sum(sizes), scale=0.3), True),
            ("b", randn(rng, sum(sizes), scale=0.1), True),
            ("mask", mask, False),
            ("past", randn(rng, 2, batch, heads, past, head) if past else None, False),
            ("ab", randn(rng, batch, heads, seq, past + seq) if attention_bias else None, False)]


ATTENTION_MASKS = {
    "none": None,
    "lengths": np.array([3, 4], np.int32),
    "ends_starts": np.array([4, 3, 1, 0], np.int32),
    "2d": np.array([[1, 1, 0, 1], [1, 1, 1, 0]], np.int32),
    "3d": np.tile(np.array([[1, 0, 1, 1]], np.int32), (2, 4, 1)),
}


@pytest.mark.parametrize("mask", sorted(ATTENTION_MASKS))
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_masks(rng, mask, unidirectional):
    inputs = _attention_inputs(rng, mask=ATTENTION_MASKS[mask])
    check_op("Attention", inputs, native=True, num_heads=2, unidirectional=unidirectional)


def test_attention_4d_mask(rng):
    # onnxruntime takes the [B, 1, M, M] mask on CUDA only: rows past..past+S-1, keys 0..T-1 of it are the 3-D mask
    # onnxruntime's CPU provider takes
    mask4 = np.tile(np.tril(np.ones((6, 6), np.int32)), (2, 1, 1, 1))
    mask4[1, 0, 3:, 1] = 0
    inputs = _attention_inputs(rng, seq=2, past=2, mask=mask4)
    inputs3 = list(inputs)
    inputs3[3] = ("mask", np.ascontiguousarray(mask4[:, 0, 2:4, :4]), False)
    want = ort_outputs(ms_model("Attention", inputs3, 2, num_heads=2), inputs3)
    model = ms_model("Attention", inputs, 2, num_heads=2)
    assert_close(reference_session(model).run(None, feeds(inputs)), want)
    assert_close(native_session(model).run(None, feeds(inputs)), want)


def test_attention_past_present_and_scale(rng):
    mask = np.ones((2, 5), np.int32)
    mask[0, 1] = 0
    inputs = _attention_inputs(rng, seq=2, past=3, mask=mask)
    check_op("Attention", inputs, n_out=2, native=True, num_heads=2, unidirectional=1, scale=0.3,
             mask_filter_value=-1000.0)


def test_attention_bias_input(rng):
    inputs = _attention_inputs(rng, attention_bias=True, mask=np.array([3, 2], np.int32))
    check_op("Attention", inputs, native=True, num_heads=2)


def test_attention_past_with_attention_bias_is_an_error(rng):
    inputs = _attention_inputs(rng, seq=2, past=3, attention_bias=True)
    model = ms_model("Attention", inputs, 2, num_heads=2)
    for sess in (reference_session(model), native_session(model)):
        with pytest.raises(onnxjit.RuntimeException, match="Attention: past and attention_bias cannot be combined"):
            sess.run(None, feeds(inputs))


def test_attention_qkv_hidden_sizes(rng):
    inputs = _attention_inputs(rng, sizes=[8, 8, 16])
    check_op("Attention", inputs, native=True, num_heads=2, qkv_hidden_sizes=[8, 8, 16])


def test_attention_bad_weights_are_named(rng):
    inputs = _attention_inputs(rng)
    inputs[1] = ("w", randn(rng, 16, 47), True)
    inputs[2] = ("b", randn(rng, 47), True)
    model = ms_model("Attention", inputs, num_heads=2)
    for sess in (reference_session(model), native_session(model)):
        with pytest.raises(onnxjit.RuntimeException, match=r"Attention: qkv_hidden_sizes \[15, 15, 15\]"):
            sess.run(None, feeds(inputs))


# --- MultiHeadAttention -----------------------------------------------------------------------------------------
MHA_MASKS = {"none": None, "lengths": np.array([2, 5], np.int32),
             "2d": np.array([[1, 1, 0, 1, 1], [1, 0, 1, 1, 1]], np.int32),
             "3d": np.tile(np.array([[1, 1, 1, 0, 1]], np.int32), (2, 3, 1))}


@pytest.mark.parametrize("mask", sorted(MHA_MASKS))
@pytest.mark.parametrize("with_bias", [False, True])
def test_multi_head_attention_masks(rng, mask, with_bias):
    inputs = [("q", randn(rng, 2, 3, 16), False), ("k", randn(rng, 2, 5, 16), False),
              ("v", randn(rng, 2, 5, 16), False), ("bias", randn(rng, 48) if with_bias else None, True),
              ("mask", MHA_MASKS[mask], False)]
    check_op("MultiHeadAttention", inputs, native=True, num_heads=2)


def test_multi_head_attention_self_with_past_and_qk(rng):
    mask = np.ones((2, 5), np.int32)
    mask[1, 0] = 0
    inputs = [("q", randn(rng, 2, 3, 16), False), ("k", randn(rng, 2, 3, 16), False),
              ("v", randn(rng, 2, 3, 16), False), ("bias", randn(rng, 48), True), ("mask", mask, False),
              ("ab", randn(rng, 1, 2, 3, 5), False), ("pk", randn(rng, 2, 2, 2, 8), False),
              ("pv", randn(rng, 2, 2, 2, 8), False)]
    check_op("MultiHeadAttention", inputs, n_out=4, native=True, num_heads=2, unidirectional=1, scale=0.2,
             mask_filter_value=-500.0)


def _check_against_unpacked(op, packed_inputs, unpacked_inputs, **attrs):
    """onnxjit on the packed form against onnxruntime on the same tensors unpacked (onnxruntime's CPU provider
    takes only the latter)."""
    want = ort_outputs(ms_model(op, unpacked_inputs, **attrs), unpacked_inputs)
    model = ms_model(op, packed_inputs, **attrs)
    assert_close(reference_session(model).run(None, feeds(packed_inputs)), want)
    assert_close(native_session(model).run(None, feeds(packed_inputs)), want)


def test_multi_head_attention_packed_kv(rng):
    q, kv = randn(rng, 2, 3, 16), randn(rng, 2, 4, 2, 2, 8)
    k, v = (np.ascontiguousarray(kv[:, :, :, i]).reshape(2, 4, 16) for i in range(2))
    _check_against_unpacked("MultiHeadAttention", [("q", q, False), ("kv", kv, False)],
                            [("q", q, False), ("k", k, False), ("v", v, False)], num_heads=2)


def test_multi_head_attention_packed_qkv(rng):
    qkv = randn(rng, 2, 3, 2, 3, 8)
    q, k, v = (np.ascontiguousarray(qkv[:, :, :, i]).reshape(2, 3, 16) for i in range(3))
    _check_against_unpacked("MultiHeadAttention", [("qkv", qkv, False)],
                            [("q", q, False), ("k", k, False), ("v", v, False)], num_heads=2)


def test_multi_head_attention_cross_projected_keys(rng):
    inputs = [("q", randn(rng, 2, 3, 16), False), ("k", randn(rng, 2, 2, 5, 8), False),
              ("v", randn(rng, 2, 2, 5, 8), False), ("bias", randn(rng, 48), True),
              ("mask", np.array([4, 5], np.int32), False)]
    check_op("MultiHeadAttention", inputs, n_out=3, native=True, num_heads=2)


def test_multi_head_attention_bad_mask_is_named(rng):
    inputs = [("q", randn(rng, 2, 3, 16), False), ("k", randn(rng, 2, 5, 16), False),
              ("v", randn(rng, 2, 5, 16), False), ("bias", None, True), ("mask", np.ones((2, 7), np.int32), False)]
    model = ms_model("MultiHeadAttention", inputs, num_heads=2)
    for sess in (reference_session(model), native_session(model)):
        with pytest.raises(onnxjit.RuntimeException, match=r"MultiHeadAttention: key_padding_mask of shape \(2, 7\)"):
            sess.run(None, feeds(inputs))


# --- GroupQueryAttention ----------------------------------------------------------------------------------------
GQA_NAMES = ("q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin", "pos", "ab", "sink", "k_scale", "v_scale",
             "qnw", "knw")


def _gqa_inputs(rng, batch=2, seq=3, past=0, capacity=None, heads=4, kv_heads=2, head=8, lengths=None,
                packed=False, rotary=False, position_ids=False, attention_bias=False, sink=False, norms=False):
    """GroupQueryAttention inputs: a prompt (past 0) or `seq` new tokens after `past` cached ones per batch row (or
    `lengths`, each row's total), the cache `capacity` rows long (past by default)."""
    capacity = past if capacity is None else capacity
    totals = np.array(lengths if lengths is not None else [past + seq] * batch)
    total = int(totals.max()) if past else seq
    q = randn(rng, batch, seq, heads * head)
    k, v = randn(rng, batch, seq, kv_heads * head), randn(rng, batch, seq, kv_heads * head)
    values = {"q": np.concatenate((q, k, v), axis=2) if packed else q, "k": None if packed else k,
              "v": None if packed else v,
              "pk": randn(rng, batch, kv_heads, capacity, head) if capacity else None,
              "pv": randn(rng, batch, kv_heads, capacity, head) if capacity else None,
              "seqlens_k": (totals - 1).astype(np.int32), "total": np.array(total, np.int32)}
    if rotary:
        values["cos"], values["sin"] = _caches(rng, 16, head // 2)
        if position_ids:
            values["pos"] = (np.arange(seq) + totals[:, None] - seq).astype(np.int64)
    if attention_bias:
        values["ab"] = randn(rng, batch, 1, seq, total)
    if sink:
        values["sink"] = randn(rng, heads)
    if norms:
        values["qnw"], values["knw"] = randn(rng, head), randn(rng, head)
    return [(name, values.get(name), name in ("cos", "sin", "sink", "qnw", "knw")) for name in GQA_NAMES]


def _check_gqa(inputs, n_out=3, native=True, valid=None, **attrs):
    """GroupQueryAttention against onnxruntime; present_key/value rows past each batch's length are unspecified
    (onnxruntime leaves them as they were), so they are compared where `valid` (per batch row) says."""
    model = ms_model("GroupQueryAttention", inputs, n_out, **attrs)
    want = ort_outputs(model, inputs)
    sessions = [reference_session(model)] + ([native_session(model)] if native else [])
    for sess in sessions:
        got = sess.run(None, feeds(inputs))
        assert_close(got, want, check={0, 3})
        for i in (1, 2):
            assert got[i].shape == want[i].shape and got[i].dtype == want[i].dtype
            for b, rows in enumerate(valid or [want[i].shape[2]] * want[i].shape[0]):
                np.testing.assert_allclose(got[i][b, :, :rows], want[i][b, :, :rows], rtol=1e-4, atol=1e-5)


GQA_CASES = [  # _gqa_inputs arguments, attributes (onnxruntime takes several new tokens after a past in one batch row
    # only, and rotary heads of 16 features and more)
    ({}, {}),
    ({"packed": True}, {}),
    ({"batch": 1, "past": 4}, {}),
    ({"seq": 1, "past": 4, "capacity": 8}, {}),
    ({"seq": 1, "past": 5, "capacity": 8, "lengths": [4, 6]}, {}),
    ({"seq": 1, "past": 4, "rotary": True, "head": 16}, {"do_rotary": 1}),
    ({"rotary": True, "head": 16}, {"do_rotary": 1, "rotary_interleaved": 1}),
    ({"batch": 1, "past": 2, "rotary": True, "position_ids": True, "head": 16}, {"do_rotary": 1}),
    ({"seq": 5}, {"local_window_size": 2}),
    ({"seq": 1, "past": 4, "capacity": 6}, {"local_window_size": 2}),
    ({"seq": 1, "past": 4}, {"softcap": 2.0, "scale": 0.5}),
    ({"batch": 1, "past": 3, "attention_bias": True}, {}),
    ({"seq": 4}, {"causal": 0}),
]


@pytest.mark.parametrize("make,attrs", GQA_CASES)
def test_group_query_attention(rng, make, attrs):
    inputs = _gqa_inputs(rng, **make)
    lengths = make.get("lengths")
    _check_gqa(inputs, valid=lengths, num_heads=4, kv_num_heads=2, **attrs)


@pytest.mark.parametrize("qk_output", [1, 2])
def test_group_query_attention_qk_output(rng, qk_output):
    _check_gqa(_gqa_inputs(rng, seq=1, past=2), n_out=4, num_heads=4, kv_num_heads=2, qk_output=qk_output)


@pytest.mark.parametrize("make,attrs", [({}, {"smooth_softmax": 1}), ({"seq": 1, "past": 2, "sink": True}, {})])
def test_group_query_attention_sink(rng, make, attrs):
    # the attention kernel has no sink logit: the CPU provider leaves these nodes to the reference
    _check_gqa(_gqa_inputs(rng, **make), native=False, num_heads=4, kv_num_heads=2, **attrs)


def test_group_query_attention_qk_norms(rng):
    # onnxruntime's CPU provider has no q_norm_weight / k_norm_weight: its output for Q and K normalized beforehand
    # (by its SimplifiedLayerNormalization over each head) is the expected one
    inputs = _gqa_inputs(rng, seq=1, past=2, norms=True)
    values = {name: arr for name, arr, _ in inputs}

    def normalized(x, weight, heads):
        arg = [("x", x.reshape(x.shape[0], x.shape[1], heads, -1), False), ("w", weight, False)]
        model = ms_model("SimplifiedLayerNormalization", arg, domain="", epsilon=1e-5)
        return ort_outputs(model, arg)[0].reshape(x.shape)
    plain = [(name, None, False) if name in ("qnw", "knw") else (name, arr, is_init) for name, arr, is_init in inputs]
    plain[0] = ("q", normalized(values["q"], values["qnw"], 4), False)
    plain[1] = ("k", normalized(values["k"], values["knw"], 2), False)
    attrs = {"num_heads": 4, "kv_num_heads": 2}
    want = ort_outputs(ms_model("GroupQueryAttention", plain, 3, **attrs), plain)
    model = ms_model("GroupQueryAttention", inputs, 3, qk_norm_epsilon=1e-5, **attrs)
    for sess in (reference_session(model), native_session(model)):
        assert_close(sess.run(None, feeds(inputs)), want)


# --- DecoderMaskedMultiHeadAttention ------------------------------------------------------------------------------
DMMHA_NAMES = ("q", "k", "v", "mask", "ab", "pk", "pv", "past_len", "beam", "indirection", "bias")


def _dmmha_inputs(rng, batch=2, heads=2, head=8, past=3, max_len=6, share=True, cross=False, mask=False,
                  with_bias=False, attention_bias=False, beam=None):
    hidden = heads * head
    values = {"q": randn(rng, batch, 1, hidden)}
    total = past + 1
    if cross:
        values["k"], values["v"] = randn(rng, batch, heads, 5, head), randn(rng, batch, heads, 5, head)
        total = 5
    else:
        values["k"], values["v"] = randn(rng, batch, 1, hidden), randn(rng, batch, 1, hidden)
        rows = max_len if share else past
        values["pk"], values["pv"] = randn(rng, batch, heads, rows, head), randn(rng, batch, heads, rows, head)
        if share:
            values["past_len"] = np.array(past, np.int32)
    if mask:
        m = np.ones((batch, total), np.int32)
        m[0, 1] = 0
        values["mask"] = m
    if attention_bias:
        values["ab"] = randn(rng, batch, heads, 1, total)
    if with_bias:
        values["bias"] = randn(rng, 3 * hidden)
    if beam:
        values["beam"] = np.array(beam, np.int32)
        values["indirection"] = rng.integers(0, beam, (batch // beam, beam, max_len)).astype(np.int32)
    return [(name, values.get(name), name == "bias") for name in DMMHA_NAMES]


DMMHA_CASES = [  # _dmmha_inputs arguments, outputs, attributes
    ({}, 3, {"past_present_share_buffer": 1}),
    ({"mask": True, "with_bias": True}, 3, {"past_present_share_buffer": 1, "scale": 0.4}),
    ({"attention_bias": True}, 4, {"past_present_share_buffer": 1, "output_qk": 1}),
    ({"batch": 4, "beam": 2}, 3, {"past_present_share_buffer": 1}),
    ({"cross": True, "mask": True}, 1, {}),
    ({"cross": True, "with_bias": True}, 1, {}),
]


@pytest.mark.parametrize("make,n_out,attrs", DMMHA_CASES)
def test_decoder_masked_multi_head_attention(rng, make, n_out, attrs):
    inputs = _dmmha_inputs(rng, **make)
    check_op("DecoderMaskedMultiHeadAttention", inputs, n_out=n_out, native=True, num_heads=2, **attrs)


def test_decoder_masked_multi_head_attention_unshared_past(rng):
    # onnxruntime's CPU provider takes a past only in a shared buffer: a buffer of exactly past + 1 rows gives the
    # output, and the present, of the concatenated form
    inputs = _dmmha_inputs(rng, share=False, mask=True, with_bias=True)
    values = {name: arr for name, arr, _ in inputs}
    shared = [(name, np.concatenate((arr, np.zeros_like(arr[:, :, :1])), axis=2) if name in ("pk", "pv") else arr,
               is_init) for name, arr, is_init in inputs]
    shared[7] = ("past_len", np.array(values["pk"].shape[2], np.int32), False)
    want = ort_outputs(ms_model("DecoderMaskedMultiHeadAttention", shared, 3, num_heads=2,
                                past_present_share_buffer=1), shared)
    model = ms_model("DecoderMaskedMultiHeadAttention", inputs, 3, num_heads=2)
    assert_close(reference_session(model).run(None, feeds(inputs)), want)
    assert_close(native_session(model).run(None, feeds(inputs)), want)


# --- DynamicQuantizeLSTM ----------------------------------------------------------------------------------------
def _quantized(rng, shape, dtype, per_column):
    """(weights, scale, zero point) of random 8-bit weights [D, rows, 4H], quantized per tensor or per column."""
    dirs, gates = shape[0], shape[2]
    info = np.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    scale_shape = (dirs, gates) if per_column else (dirs,)
    scale = rng.uniform(0.002, 0.01, scale_shape).astype(F32)
    # onnxruntime takes int8 weights quantized symmetrically only
    zero = rng.integers(100, 156, scale_shape) if dtype == np.uint8 else np.zeros(scale_shape)
    return q, scale, zero.astype(dtype)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("dtype,per_column", [(np.uint8, False), (np.int8, True)])
def test_dynamic_quantize_lstm(rng, direction, dtype, per_column):
    dirs = 2 if direction == "bidirectional" else 1
    steps, batch, inputs_size, hidden = 4, 2, 6, 5
    w, w_scale, w_zero = _quantized(rng, (dirs, inputs_size, 4 * hidden), dtype, per_column)
    r, r_scale, r_zero = _quantized(rng, (dirs, hidden, 4 * hidden), dtype, per_column)
    inputs = [("x", randn(rng, steps, batch, inputs_size), False), ("w", w, True), ("r", r, True),
              ("b", randn(rng, dirs, 8 * hidden, scale=0.1), True),
              ("lens", np.array([4, 2], np.int32), False),
              ("h0", randn(rng, dirs, batch, hidden, scale=0.5), False),
              ("c0", randn(rng, dirs, batch, hidden, scale=0.5), False),
              ("p", randn(rng, dirs, 3 * hidden, scale=0.1), True),
              ("w_scale", w_scale, True), ("w_zero", w_zero, True), ("r_scale", r_scale, True),
              ("r_zero", r_zero, True)]
    check_op("DynamicQuantizeLSTM", inputs, n_out=3, hidden_size=hidden, direction=direction, rtol=1e-4, atol=1e-5)


def test_dynamic_quantize_lstm_activations_clip_input_forget(rng):
    dirs, steps, batch, inputs_size, hidden = 1, 3, 2, 4, 3
    w, w_scale, w_zero = _quantized(rng, (dirs, inputs_size, 4 * hidden), np.uint8, False)
    r, r_scale, r_zero = _quantized(rng, (dirs, hidden, 4 * hidden), np.uint8, False)
    inputs = [("x", randn(rng, steps, batch, inputs_size), False), ("w", w, True), ("r", r, True),
              ("b", None, True), ("lens", None, False), ("h0", None, False), ("c0", None, False), ("p", None, True),
              ("w_scale", w_scale, True), ("w_zero", w_zero, True), ("r_scale", r_scale, True),
              ("r_zero", r_zero, True)]
    check_op("DynamicQuantizeLSTM", inputs, n_out=3, hidden_size=hidden, clip=0.8, input_forget=1,
             activations=["HardSigmoid", "Tanh", "Tanh"], activation_alpha=[0.3], activation_beta=[0.4])


# --- MatMulNBits --------------------------------------------------------------------------------------------------
def _nbits_inputs(rng, bits, k, n, block, zero_kind, with_bias=False, a_shape=(2, 3), constant=True):
    k_blocks = -(-k // block)
    blob = block * bits // 8
    b = rng.integers(0, 256, (n, k_blocks, blob)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.05, (n * k_blocks,)).astype(F32)
    zero = None
    if zero_kind == "packed":
        zero = rng.integers(0, 256, (n * -(-k_blocks * bits // 8),)).astype(np.uint8)
    elif zero_kind == "float":
        zero = rng.uniform(0, 2 ** bits - 1, (n * k_blocks,)).astype(F32)
    return [("a", randn(rng, *a_shape, k), False), ("b", b, constant), ("scales", scales, constant),
            ("zp", zero, constant), ("g_idx", None, True), ("bias", randn(rng, n) if with_bias else None, True)]


NBITS_CASES = [  # bits, K, N, block_size, zero points, bias
    (4, 32, 8, 16, None, False),
    (4, 48, 8, 32, "packed", True),
    (4, 64, 16, 32, "float", False),
    (8, 32, 8, 16, "packed", True),
    (2, 64, 8, 32, "packed", False),
    (2, 32, 4, 16, None, True),
]


@pytest.mark.parametrize("bits,k,n,block,zero_kind,with_bias", NBITS_CASES)
def test_matmul_nbits(rng, bits, k, n, block, zero_kind, with_bias):
    inputs = _nbits_inputs(rng, bits, k, n, block, zero_kind, with_bias)
    check_op("MatMulNBits", inputs, native=True, K=k, N=n, bits=bits, block_size=block)


def test_matmul_nbits_computed_weights(rng):
    inputs = _nbits_inputs(rng, 4, 32, 8, 16, "packed", constant=False, a_shape=(5,))
    check_op("MatMulNBits", inputs, native=True, K=32, N=8, bits=4, block_size=16)


def test_matmul_nbits_wrong_k_is_named(rng):
    inputs = _nbits_inputs(rng, 4, 32, 8, 16, None)
    inputs[0] = ("a", randn(rng, 2, 31), False)
    model = ms_model("MatMulNBits", inputs, K=32, N=8, bits=4, block_size=16)
    for sess in (reference_session(model), native_session(model)):
        with pytest.raises(onnxjit.RuntimeException, match=r"MatMulNBits: A's last dimension must be K = 32"):
            sess.run(None, feeds(inputs))


# --- end to end: a tiny BERT as onnxruntime's optimizers write it ---------------------------------------------
HIDDEN, HEADS, SEQ = 32, 2, 8


def _tiny_bert(path):
    """The tiny BERT (tests/data/make_tiny_bert.py: a 2-layer BERT, hidden 32, as torch's TorchScript exporter
    writes it) with its weights drawn here (the stored file keeps their dims only), saved to `path`."""
    model = onnx.load(os.path.join(os.path.dirname(__file__), "data", "tiny_bert_structure.onnx"))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        if init.data_type == TensorProto.FLOAT and not init.raw_data and not init.float_data:
            init.CopyFrom(onnx.numpy_helper.from_array(
                (0.2 * rng.standard_normal(tuple(init.dims))).astype(F32), init.name))
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    _tiny_bert(path)
    return path


def _bert_feeds():
    rng = np.random.default_rng(3)
    mask = np.ones((2, SEQ), np.int64)
    mask[1, 5:] = 0  # right padding: EmbedLayerNormalization's mask_index, Attention's key lengths
    return {"input_ids": rng.integers(0, 50, (2, SEQ)).astype(np.int64), "attention_mask": mask,
            "token_type_ids": (np.arange(SEQ) >= 4).astype(np.int64)[None].repeat(2, 0)}


def _ops(path):
    return {(n.domain, n.op_type) for n in onnx.load(str(path)).graph.node}


def _check_bert_on_onnxjit(path, native_ops):
    import onnxruntime
    feeds = _bert_feeds()
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = onnxjit.InferenceSession(str(path))
    np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-4, atol=1e-4)
    on_cpu = {(n.domain, n.op_type) for s in sess._compiled.steps if s.provider == "CPUExecutionProvider"
              for n in s.nodes}
    assert native_ops <= on_cpu, f"not on the CPU provider: {native_ops - on_cpu}"
    # every node natively: the ai.onnx ops after the contrib ones too (typed node by node, ir/node_inference.py),
    # and onnxruntime's LayerNormalization in the ai.onnx domain before opset 17
    fallback = {n.op_type for s in sess._compiled.steps if s.provider != "CPUExecutionProvider" for n in s.nodes}
    assert not fallback, f"on the fallback provider: {fallback}"


def test_bert_optimized_by_transformer_optimizer(tiny_bert, tmp_path):
    from onnxruntime.transformers.optimizer import optimize_model
    optimized = optimize_model(str(tiny_bert), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
    path = tmp_path / "bert_opt.onnx"
    optimized.save_model_to_file(str(path))
    fused = {(MS, op) for op in ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu")}
    assert fused <= _ops(path), f"the optimizer wrote {sorted(_ops(path))}"
    _check_bert_on_onnxjit(path, {(MS, op) for op in ("EmbedLayerNormalization", "Attention",
                                                       "SkipLayerNormalization", "BiasGelu")})


def test_bert_optimized_by_onnxruntime_session(tiny_bert, tmp_path):
    import onnxruntime
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "bert_ort.onnx")
    onnxruntime.InferenceSession(str(tiny_bert), so, providers=["CPUExecutionProvider"])
    ops = _ops(so.optimized_model_filepath)
    assert {(MS, "FusedMatMul"), (MS, "BiasGelu")} <= ops, f"onnxruntime wrote {sorted(ops)}"
    assert not any(op.startswith("Nchwc") or op == "ReorderInput" for _, op in ops)  # no layout-specific ops
    _check_bert_on_onnxjit(so.optimized_model_filepath, {(MS, "FusedMatMul")})


def test_values_after_a_contrib_op_are_typed_and_run_natively(rng):
    """ONNX's inference types nothing after a com.microsoft op; onnxjit types such values node by node
    (ir/node_inference.py), so the ai.onnx ops after one run on the CPU provider: here a MatMul, a Reshape whose
    shape is a constant, and onnxruntime's own LayerNormalization in the ai.onnx domain at opset 14 (ONNX has it
    from 17), with the fallback disabled, against onnxruntime."""
    x, w = randn(rng, 2, 3, 8), randn(rng, 8, 8)
    scale, bias = randn(rng, 4), randn(rng, 4)
    nodes = [helper.make_node("QuickGelu", ["x"], ["g"], domain=MS),
             helper.make_node("MatMul", ["g", "w"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "scale", "bias"], ["y"], epsilon=1e-5)]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in
             (("w", w), ("shape", np.array([2, 3, 2, 4], np.int64)), ("scale", scale), ("bias", bias))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(MS, 1)],
                              ir_version=8)
    sess = native_session(model)
    types = {v.name: v.type for n in sess._model.graph.nodes for v in n.outputs}
    assert types["r"].shape == (2, 3, 2, 4) and types["y"].elem_type == TensorProto.FLOAT
    assert_close(sess.run(None, {"x": x}), ort_outputs(model, [("x", x, False)]))


# --- typed errors naming the op -----------------------------------------------------------------------------------
def _assert_error(model, inputs, pattern, native=True):
    sessions = [reference_session(model)] + ([native_session(model)] if native else [])
    for sess in sessions:
        with pytest.raises(onnxjit.RuntimeException, match=pattern) as info:
            sess.run(None, feeds(inputs))
        assert isinstance(info.value.__cause__, (ValueError, NotImplementedError))


def test_skip_layer_normalization_bad_gamma(rng):
    inputs = [("x", randn(rng, 2, 4, 8), False), ("skip", randn(rng, 2, 4, 8), False), ("gamma", randn(rng, 4), False)]
    _assert_error(ms_model("SkipLayerNormalization", inputs), inputs,
                  r"SkipLayerNormalization: gamma must be 1-D \[hidden\] = \[8\], got \[4\]")


def test_embed_layer_normalization_id_out_of_range(rng):
    inputs = _embed_inputs(rng)
    inputs[0] = ("ids", np.array([[1, 2, 3, 4, 11], [0, 0, 0, 0, 0]], np.int32), False)
    _assert_error(ms_model("EmbedLayerNormalization", inputs, 3, [TensorProto.FLOAT, TensorProto.INT32,
                                                                  TensorProto.FLOAT]), inputs,
                  r"EmbedLayerNormalization: input_ids must lie in \[0, 11\), got values from 0 to 11")


def test_fused_matmul_shapes_that_do_not_multiply(rng):
    inputs = [("a", randn(rng, 3, 4), False), ("b", randn(rng, 5, 4), False)]
    _assert_error(ms_model("FusedMatMul", inputs), inputs,
                  r"FusedMatMul: op\(A\) of shape \(3, 4\) and op\(B\) of shape \(5, 4\) do not multiply")


def test_group_query_attention_quantized_cache_is_not_implemented(rng):
    inputs = _gqa_inputs(rng, seq=1, past=2)
    inputs[12] = ("k_scale", np.ones(1, F32), True)
    inputs[13] = ("v_scale", np.ones(1, F32), True)
    model = ms_model("GroupQueryAttention", inputs, 3, num_heads=4, kv_num_heads=2)
    _assert_error(model, inputs, "GroupQueryAttention: quantized KV caches", native=False)


def test_dynamic_quantize_lstm_int8_needs_symmetric_weights(rng):
    w, w_scale, _ = _quantized(rng, (1, 4, 12), np.int8, False)
    r, r_scale, r_zero = _quantized(rng, (1, 3, 12), np.int8, False)
    inputs = [("x", randn(rng, 2, 1, 4), False), ("w", w, True), ("r", r, True), ("b", None, True),
              ("lens", None, False), ("h0", None, False), ("c0", None, False), ("p", None, True),
              ("w_scale", w_scale, True), ("w_zero", np.ones(1, np.int8), True), ("r_scale", r_scale, True),
              ("r_zero", r_zero, True)]
    _assert_error(ms_model("DynamicQuantizeLSTM", inputs, 3, hidden_size=3), inputs,
                  r"DynamicQuantizeLSTM: int8 W must be quantized symmetrically", native=False)


def test_matmul_nbits_omitted_projection(rng):
    # a B with a zero-size dimension stands for an omitted projection: Y is the bias broadcast
    inputs = [("a", randn(rng, 2, 3, 32), False), ("b", np.zeros((8, 0, 8), np.uint8), False),
              ("scales", np.zeros(0, F32), False), ("zp", None, True), ("g_idx", None, True),
              ("bias", randn(rng, 8), False)]
    check_op("MatMulNBits", inputs, native=True, K=32, N=8, bits=4, block_size=16)


# --- float16 ------------------------------------------------------------------------------------------------------
def test_float16_skip_layer_normalization_and_fast_gelu(rng):
    f16 = np.float16
    inputs = [("x", randn(rng, 2, 4, 8, dtype=f16), False), ("skip", randn(rng, 2, 4, 8, dtype=f16), False),
              ("gamma", randn(rng, 8, dtype=f16), True), ("beta", randn(rng, 8, dtype=f16), True)]
    check_op("SkipLayerNormalization", inputs, n_out=4, out_types=[TensorProto.FLOAT16, TensorProto.FLOAT,
                                                                   TensorProto.FLOAT, TensorProto.FLOAT16],
             native=True, rtol=2e-3, atol=2e-3)
    check_op("FastGelu", [("x", randn(rng, 2, 8, dtype=f16), False), ("b", randn(rng, 8, dtype=f16), True)],
             rtol=2e-3, atol=2e-3)
