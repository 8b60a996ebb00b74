"""The transformer fusions of the extended level (LayerNormalization, SkipLayerNormalization, Gelu, Attention):
each pattern on small graphs against onnxruntime, the cases where it must not fire, the com.onnxjit ops' CPU
kernels against their reference implementations, and whole BERT / GPT-2 layers."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from conftest import assert_all_same, make_model, native_session, ort_run
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.ir.serde import from_onnx
from onnxjit.optimizer import optimize
from onnxjit.testing.transformer import GraphBuilder, bert_layer, example_feeds, gpt2_layer

F = TensorProto.FLOAT


def _session(model, level=onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL, **so_attrs):
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    for k, v in so_attrs.items():
        setattr(so, k, v)
    return onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _check(model, feeds, fused: str | None, absent: tuple[str, ...] = ()):
    """Run optimized; outputs equal onnxruntime's on the original model; `fused` (a report key) is there or,
    when None, none of `absent` is."""
    sess = _session(model)
    assert_all_same(sess.run(None, feeds), ort_run(model, feeds))
    after = sess.optimization_report.after
    if fused is not None:
        assert after[fused] == 1, dict(after)
    for op in absent:
        assert after[op] == 0, dict(after)
    return after


def _builder_model(b: GraphBuilder, out: str, inputs, out_shape):
    b.nodes.append(helper.make_node("Identity", [out], ["y"]))
    return b.model(inputs, [helper.make_tensor_value_info("y", F, out_shape)], "g")


def _x(shape=("n", 5, 16)):
    return helper.make_tensor_value_info("x", F, list(shape))


def _feeds_x(shape=(2, 5, 16), seed=0):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


# --- LayerNormalization ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [11, 17, 18])
@pytest.mark.parametrize("form", ["pow-div", "mul-div", "pow-reciprocal"])
def test_layer_norm_decomposition_fuses(opset, form):
    b = GraphBuilder(opset, seed=1)
    model = _builder_model(b, b.layer_norm("x", 16, form), [_x()], ["n", 5, 16])
    fused = "LayerNormalization" if opset >= 17 else "com.onnxjit::LayerNormalization"
    after = _check(model, _feeds_x(), fused)
    assert after["ReduceMean"] == 0 and after["Sqrt"] == 0


def test_layer_norm_without_affine_fuses_with_unit_scale():
    b = GraphBuilder(17, seed=1)
    mean = b.reduce_mean_last("x")
    d = b.op("Sub", "x", mean)
    std = b.op("Sqrt", b.op("Add", b.reduce_mean_last(b.op("Pow", d, b.scalar(2.0))), b.scalar(1e-6)))
    model = _builder_model(b, b.op("Div", d, std), [_x()], ["n", 5, 16])
    _check(model, _feeds_x(), "LayerNormalization")


def _layer_norm_variant(change: str):
    """The decomposition with one thing changed so that it is no longer a LayerNorm over the last axis (or no
    longer fusable)."""
    b = GraphBuilder(17, seed=1)
    axes = [1] if change == "axis" else [-1]
    mean = b.op("ReduceMean", "x", axes=axes, keepdims=1)
    d = b.op("Sub", "x", mean)
    var = b.op("ReduceMean", b.op("Pow", d, b.scalar(3.0 if change == "power" else 2.0)), axes=axes, keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, "eps" if change == "eps_input" else b.scalar(1e-5)))
    y = b.op("Div", d, std)
    inputs = [_x()] + ([helper.make_tensor_value_info("eps", F, [])] if change == "eps_input" else [])
    outputs = [helper.make_tensor_value_info("y", F, ["n", 5, 16])]
    if change == "used_twice":
        outputs.append(helper.make_tensor_value_info(d, F, ["n", 5, 16]))
    b.nodes.append(helper.make_node("Identity", [y], ["y"]))
    return b.model(inputs, outputs, "g")


@pytest.mark.parametrize("change", ["axis", "power", "eps_input", "used_twice"])
def test_layer_norm_must_not_fuse(change):
    model = _layer_norm_variant(change)
    feeds = _feeds_x()
    if change == "eps_input":
        feeds["eps"] = np.array(1e-5, np.float32)
    _check(model, feeds, None, absent=("LayerNormalization", "com.onnxjit::LayerNormalization"))


# --- SkipLayerNormalization --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("sum_is_output", [False, True])
def test_skip_layer_norm_fuses_residual_add(bias, sum_is_output):
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), n) for n in ("g", "b", "bias")]
    nodes = []
    a = "x"
    if bias:
        nodes.append(helper.make_node("Add", ["x", "bias"], ["xb"]))
        a = "xb"
    nodes += [helper.make_node("Add", [a, "skip"], ["sum"]),
              helper.make_node("LayerNormalization", ["sum", "g", "b"], ["y"], epsilon=1e-3)]
    outputs = [helper.make_tensor_value_info("y", F, ["n", 5, 16])]
    if sum_is_output:
        nodes.append(helper.make_node("Relu", ["sum"], ["r"]))
        outputs += [helper.make_tensor_value_info("sum", F, ["n", 5, 16]),
                    helper.make_tensor_value_info("r", F, ["n", 5, 16])]
    model = make_model(nodes, [_x(), helper.make_tensor_value_info("skip", F, [5, 16])], outputs,
                       initializers=inits)
    feeds = {**_feeds_x(), "skip": rng.standard_normal((5, 16)).astype(np.float32)}
    after = _check(model, feeds, "com.onnxjit::SkipLayerNormalization", absent=("LayerNormalization",))
    assert after["Add"] == 0


def test_skip_layer_norm_not_over_a_leading_axis():
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((5, 16)).astype(np.float32), n) for n in ("g", "b")]
    nodes = [helper.make_node("Add", ["x", "x"], ["sum"]),
             helper.make_node("LayerNormalization", ["sum", "g", "b"], ["y"], axis=1)]
    model = make_model(nodes, [_x()], [helper.make_tensor_value_info("y", F, ["n", 5, 16])], initializers=inits)
    _check(model, _feeds_x(), "LayerNormalization", absent=("com.onnxjit::SkipLayerNormalization",))


# --- Gelu --------------------------------------------------------------------------------------------------------
def _gelu_erf(b: GraphBuilder, order: str, sqrt2_const=1.4142135, half=0.5):
    x = "x"
    u = b.op("Mul", x, b.scalar(1 / sqrt2_const)) if order == "mul_sqrt" else b.op("Div", x, b.scalar(sqrt2_const))
    a = b.op("Add", b.scalar(1.0), b.op("Erf", u))
    if order in ("x_half_first", "mul_sqrt"):
        return b.op("Mul", b.op("Mul", x, b.scalar(half)), a)
    if order == "x_a_first":
        return b.op("Mul", b.op("Mul", a, x), b.scalar(half))
    if order == "half_a_first":
        return b.op("Mul", x, b.op("Mul", b.scalar(half), a))
    if order == "div_two":
        return b.op("Div", b.op("Mul", x, a), b.scalar(1 / half))
    raise ValueError(order)


def _gelu_tanh(b: GraphBuilder, cube: str, k: float | None = None):
    x = "x"
    k = math.sqrt(2 / math.pi) if k is None else k
    c = b.op("Pow", x, b.scalar(3.0)) if cube == "pow" else b.op("Mul", x, b.op("Mul", x, x))
    inner = b.op("Add", b.op("Mul", c, b.scalar(0.044715)), x)
    t = b.op("Tanh", b.op("Mul", inner, b.scalar(k)))
    return b.op("Mul", b.op("Mul", x, b.scalar(0.5)), b.op("Add", t, b.scalar(1.0)))


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("form", ["x_half_first", "x_a_first", "half_a_first", "div_two", "mul_sqrt", "pow",
                                  "mul"])
def test_gelu_decomposition_fuses(opset, form):
    b = GraphBuilder(opset, seed=0)
    y = _gelu_tanh(b, form) if form in ("pow", "mul") else _gelu_erf(b, form)
    model = _builder_model(b, y, [_x()], ["n", 5, 16])
    after = _check(model, _feeds_x(), "Gelu" if opset >= 20 else "com.onnxjit::Gelu")
    assert after["Erf"] == 0 and after["Tanh"] == 0 and after["Mul"] == 0


@pytest.mark.parametrize("change", ["sqrt2", "half", "k", "used_twice"])
def test_gelu_must_not_fuse(change):
    b = GraphBuilder(20, seed=0)
    if change == "k":
        y = _gelu_tanh(b, "pow", k=0.79)
    else:
        y = _gelu_erf(b, "x_half_first", sqrt2_const=1.5 if change == "sqrt2" else 1.4142135,
                      half=0.6 if change == "half" else 0.5)
    outputs = [helper.make_tensor_value_info("y", F, ["n", 5, 16])]
    if change == "used_twice":
        erf = next(n for n in b.nodes if n.op_type == "Erf").output[0]
        outputs.append(helper.make_tensor_value_info(erf, F, ["n", 5, 16]))
    b.nodes.append(helper.make_node("Identity", [y], ["y"]))
    _check(b.model([_x()], outputs, "g"), _feeds_x(), None, absent=("Gelu", "com.onnxjit::Gelu"))


# --- Attention ---------------------------------------------------------------------------------------------------
B, H, S, D = 2, 3, 6, 8


def _qkv_inputs(kt=False):
    k_shape = ["b", H, D, S] if kt else ["b", H, S, D]
    return [helper.make_tensor_value_info("q", F, ["b", H, S, D]), helper.make_tensor_value_info("k", F, k_shape),
            helper.make_tensor_value_info("v", F, ["b", H, S, D])]


def _qkv_feeds(kt=False, seed=3):
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal((B, H, S, D)).astype(np.float32) for n in "qkv"}
    if kt:
        feeds["k"] = np.ascontiguousarray(feeds["k"].transpose(0, 1, 3, 2))
    return feeds


def _attention_model(variant: str, opset: int = 17):
    b = GraphBuilder(opset, seed=0)
    kt = "k" if variant == "k_transposed" else b.op("Transpose", "k", perm=[0, 1, 3, 2])
    q = b.op("Mul", "q", b.scalar(1 / math.sqrt(D))) if variant == "scale_on_q" else "q"
    scores = b.op("MatMul", q, kt)
    if variant != "scale_on_q":
        scores = b.op("Div", scores, b.scalar(math.sqrt(D)))
    inputs = _qkv_inputs(kt=variant == "k_transposed")
    axis = 3
    if variant in ("mask", "mask_inf_batch", "unproven_mask_shape"):
        # a mask of static batch 2 might enlarge scores of batch "b" (were b 1): the fusion cannot prove otherwise
        shape = [B, H, S, S] if variant == "unproven_mask_shape" else ["b", 1, 1, S]
        inputs.append(helper.make_tensor_value_info("mask", F, shape))
        scores = b.op("Add", scores, "mask")
    elif variant == "causal_add":
        tri = np.where(np.tril(np.ones((S, S), bool)), 0, -1e9).astype(np.float32)
        scores = b.op("Add", b.const("tri", tri), scores)
    elif variant in ("causal_where", "bool_where", "where_fully_masked", "where_inf_fully_masked"):
        cond = np.tril(np.ones((1, 1, S, S), bool)) if variant == "causal_where" else \
            np.random.default_rng(0).random((1, 1, S, S)) > 0.3
        cond[..., 0] = True
        if variant.endswith("fully_masked"):
            cond[..., 2, :] = False  # query 2 attends no key
        fill = -1e4 if variant == "where_fully_masked" else -np.inf
        scores = b.op("Where", b.const("cond", cond), scores, b.scalar(fill))
    elif variant == "softmax_axis":
        axis = 2
    probs = b.op("Softmax", scores, axis=axis)
    outputs = [helper.make_tensor_value_info("y", F, ["b", H, S, D])]
    if variant == "scores_used_twice":
        outputs.append(helper.make_tensor_value_info(scores, F, ["b", H, S, S]))
    b.nodes.append(helper.make_node("Identity", [b.op("MatMul", probs, "v")], ["y"]))
    return b.model(inputs, outputs, "g")


MASKED_VARIANTS = ("mask", "mask_inf_batch", "bool_where", "where_fully_masked", "where_inf_fully_masked")


@pytest.mark.parametrize("opset", [17, 23])
@pytest.mark.parametrize("variant", ["plain", "scale_on_q", "k_transposed", "causal_add", "causal_where",
                                     *MASKED_VARIANTS])
def test_attention_fuses(variant, opset):
    # rows whose keys are all masked give what the decomposition gives: the average of V (Where with a finite
    # fill), NaN (Where with -inf, an additive -inf everywhere); ai.onnx Attention would give zeros, so a masked
    # fusion is com.onnxjit Attention with fully_masked_rows
    model = _attention_model(variant, opset)
    feeds = _qkv_feeds(kt=variant == "k_transposed")
    if variant.startswith("mask"):
        mask = np.zeros((B, 1, 1, S), np.float32)
        mask[1, ..., 4:] = -10000.0
        if variant == "mask_inf_batch":
            mask[1] = -np.inf
        feeds["mask"] = mask
    standard = opset >= 23 and variant not in MASKED_VARIANTS
    after = _check(model, feeds, "Attention" if standard else "com.onnxjit::Attention")
    assert after["Softmax"] == 0 and after["MatMul"] == 0


@pytest.mark.parametrize("variant", ["causal_add", "causal_where"])
def test_attention_causal_masks_become_is_causal(variant):
    m = from_onnx(_attention_model(variant))
    optimize(m, onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL)
    att = next(n for n in m.graph.nodes if n.op_type == "Attention")
    assert len(att.inputs) == 3 and att.attributes["is_causal"].value == 1




@pytest.mark.parametrize("variant", ["softmax_axis", "unproven_mask_shape", "scores_used_twice"])
def test_attention_must_not_fuse(variant):
    model = _attention_model(variant)
    feeds = _qkv_feeds()
    if variant == "unproven_mask_shape":
        feeds["mask"] = np.random.default_rng(1).standard_normal((B, H, S, S)).astype(np.float32)
    _check(model, feeds, None, absent=("Attention", "com.onnxjit::Attention"))


# --- com.onnxjit ops: CPU kernels against the reference implementations -------------------------------------------
def _contrib_model(op, inputs, n_out, **attrs):
    """One com.onnxjit node; `inputs` (name, array) with None for an absent input."""
    names = [n if a is not None else "" for n, a in inputs]
    while names and not names[-1]:
        names.pop()
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs if a is not None]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, domain="com.onnxjit", **attrs)
    first = helper.np_dtype_to_tensor_dtype(inputs[0][1].dtype)  # Y has X's type (the fuser needs it known)
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info(o, first if i == 0 else 0, None)
                                                  for i, o in enumerate(outs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.onnxjit", 1)],
                             ir_version=8), {n: a for n, a in inputs if a is not None}


def _contrib_cases():
    rng = np.random.default_rng(5)

    def r(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)
    bool_mask = rng.random((2, 1, 5, 7)) > 0.4
    bool_mask[1, 0, 2] = False  # a fully masked row
    return {
        "ln": ("LayerNormalization", [("x", r(2, 3, 16)), ("g", r(16)), ("b", r(16))], 3, {"epsilon": 1e-3}),
        "ln_double_axis1": ("LayerNormalization",
                            [("x", r(2, 3, 4, dtype=np.float64)), ("g", r(3, 4, dtype=np.float64))],
                            3, {"axis": 1, "stash_type": 11}),
        "skip": ("SkipLayerNormalization", [("x", r(2, 3, 16)), ("s", r(3, 16)), ("g", r(16)), ("b", r(16)),
                                            ("bias", r(16))], 4, {"epsilon": 1e-4}),
        "skip_y_only": ("SkipLayerNormalization", [("x", r(2, 3, 16)), ("s", r(2, 3, 16)), ("g", r(16))], 1,
                        {"epsilon": 1e-5}),
        "gelu": ("Gelu", [("x", r(4, 9) * 3)], 1, {}),
        "gelu_tanh": ("Gelu", [("x", r(4, 9, dtype=np.float64) * 3)], 1, {"approximate": "tanh"}),
        "attention": ("Attention", [("q", r(2, 4, 5, 8)), ("k", r(2, 4, 7, 8)), ("v", r(2, 4, 7, 3))], 1, {}),
        "attention_gqa_bool": ("Attention", [("q", r(2, 4, 5, 8)), ("k", r(2, 2, 7, 8)), ("v", r(2, 2, 7, 3)),
                                             ("m", bool_mask)], 1, {"scale": 0.3}),
        "attention_uniform_rows": ("Attention", [("q", r(2, 4, 5, 8)), ("k", r(2, 2, 7, 8)), ("v", r(2, 2, 7, 3)),
                                                 ("m", bool_mask)], 1, {"fully_masked_rows": "uniform"}),
        "attention_nan_rows": ("Attention", [("q", r(2, 4, 5, 8)), ("k", r(2, 2, 7, 8)), ("v", r(2, 2, 7, 3)),
                                             ("m", bool_mask)], 1, {"fully_masked_rows": "nan"}),
        "attention_causal_float": ("Attention", [("q", r(1, 2, 6, 4, dtype=np.float64)),
                                                 ("k", r(1, 2, 6, 4, dtype=np.float64)),
                                                 ("v", r(1, 2, 6, 4, dtype=np.float64)),
                                                 ("m", r(6, dtype=np.float64))], 1, {"is_causal": 1}),
        "attention_short_mask": ("Attention", [("q", r(1, 2, 3, 4)), ("k", r(1, 2, 6, 4)), ("v", r(1, 2, 6, 4)),
                                               ("m", r(3, 4))], 1, {}),
    }


@pytest.mark.parametrize("case", list(_contrib_cases()))
def test_contrib_kernel_equals_reference(case):
    op, inputs, n_out, attrs = _contrib_cases()[case]
    model, feeds = _contrib_model(op, inputs, n_out, **attrs)
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = onnxjit.InferenceSession(model.SerializeToString(), so,
                                    providers=["FallbackExecutionProvider"]).run(None, feeds)
    got = native_session(model).run(None, feeds)
    assert_all_same(got, want)


# --- whole layers --------------------------------------------------------------------------------------------------
LAYERS = {"bert": bert_layer, "gpt2": gpt2_layer}


@pytest.mark.parametrize("opset", [13, 17, 23])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_fuses_and_matches_onnxruntime(layer, opset, tmp_path):
    model = LAYERS[layer](opset=opset)
    feeds = example_feeds(model, batch=3, seq=7)
    want = ort_run(model, feeds)
    path = tmp_path / "optimized.onnx"
    sess = _session(model, optimized_model_filepath=str(path))
    assert_all_same(sess.run(None, feeds), want)
    after = sess.optimization_report.after
    # BERT's padding mask: com.onnxjit Attention, whose fully masked rows follow the decomposition
    assert after["Attention" if opset >= 23 and layer == "gpt2" else "com.onnxjit::Attention"] == 1
    assert after["Gelu" if opset >= 20 else "com.onnxjit::Gelu"] == 1
    assert after["com.onnxjit::SkipLayerNormalization"] == 2 if layer == "bert" else 1
    if layer == "gpt2":
        assert after["LayerNormalization" if opset >= 17 else "com.onnxjit::LayerNormalization"] == 1
    for op in ("Softmax", "Erf", "Tanh", "ReduceMean", "Sqrt", "Where", "Slice"):
        assert after[op] == 0, dict(after)

    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    reloaded = _session(saved, level=onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert reloaded.optimization_report is None
    assert_all_same(reloaded.run(None, feeds), want)
