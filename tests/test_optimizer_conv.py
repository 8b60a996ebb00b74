"""Conv/Gemm/MatMul + activation fusion (com.onnxjit FusedConv/FusedGemm/FusedMatMul): the fused ops appear
where every precondition holds and not otherwise, results equal onnxruntime's, and each fused op's CPU kernel
equals its reference implementation (the fallback provider's)."""
from __future__ import annotations


import numpy as np
import onnx
import pytest
from conftest import assert_same, make_model, ort_run, tensor
from onnx import TensorProto, helper, numpy_helper

import onnxjit
from onnxjit.contrib import DOMAIN
from onnxjit.testing.zoo import light_model_case, with_random_weights

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def _init(name, arr):
    return numpy_helper.from_array(arr, name)


def _session(model, level=onnxjit.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, fallback=True):
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = level
    if not fallback:
        so.add_session_config_entry("session.disable_fallback_provider", "1")
    return onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _check(model, feeds, fused_op=None, count=1):
    """Run at the extended level: `fused_op` appears `count` times (none when None) and outputs equal
    onnxruntime's."""
    sess = _session(model)
    ops = sess.optimization_report.after
    for op in ("FusedConv", "FusedGemm", "FusedMatMul"):
        want = count if op == fused_op else 0
        assert ops[f"{DOMAIN}::{op}"] == want, dict(ops)
    for got, want in zip(sess.run(None, feeds), ort_run(model, feeds)):
        assert_same(got, want)
    return ops


def _conv_model(after, *, dtype=np.float32, opset=17, extra_inits=(), extra_inputs=(), outputs=("y",), cin=4,
                cout=4, seed=0, hw=(6, 5), k=3, **conv_attrs):
    """x [2, cin, *hw] -> Conv k x k (pads k // 2) -> c, then the `after` nodes (ending in y)."""
    rng = np.random.default_rng(seed)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    conv_attrs.setdefault("pads", [k // 2] * 4)
    w_shape = (cout, cin // conv_attrs.get("group", 1), k, k)
    # weights scaled to outputs of about unit size: rounding then stays within the float32 tolerance
    inits = [_init("w", (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)),
             _init("b", rng.standard_normal(cout).astype(dtype)), *extra_inits]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **conv_attrs), *after]
    inputs = [tensor("x", elem, [2, cin, *hw]), *extra_inputs]
    model = make_model(nodes, inputs, [tensor(o, elem, None) for o in outputs], opset=opset, initializers=inits)
    feeds = {"x": rng.standard_normal((2, cin, *hw)).astype(dtype)}
    for vi in extra_inputs:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return model, feeds


ACTIVATIONS = [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
               ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
               ("HardSwish", {}), ("Softplus", {}), ("ThresholdedRelu", {"alpha": 0.5})]


@pytest.mark.parametrize("act,attrs", ACTIVATIONS, ids=[a for a, _ in ACTIVATIONS])
def test_conv_activation(act, attrs):
    model, feeds = _conv_model([helper.make_node(act, ["c"], ["y"], **attrs)])
    _check(model, feeds, "FusedConv")


@pytest.mark.parametrize("opset", [6, 11, 13])
def test_conv_clip(opset):
    if opset < 11:
        clip = helper.make_node("Clip", ["c"], ["y"], min=-0.5, max=1.5)
        inits = ()
    else:
        clip = helper.make_node("Clip", ["c", "lo", "hi"], ["y"])
        inits = (_init("lo", np.array(-0.5, np.float32)), _init("hi", np.array(1.5, np.float32)))
    model, feeds = _conv_model([clip], opset=opset, extra_inits=inits)
    _check(model, feeds, "FusedConv")


def test_conv_clip_only_max():
    clip = helper.make_node("Clip", ["c", "", "hi"], ["y"])
    model, feeds = _conv_model([clip], extra_inits=(_init("hi", np.array(0.25, np.float32)),))
    _check(model, feeds, "FusedConv")


def test_conv_clip_bounds_not_constant():
    clip = helper.make_node("Clip", ["c", "lo", "hi"], ["y"])
    model, feeds = _conv_model([clip], extra_inits=(_init("hi", np.array(1.5, np.float32)),),
                               extra_inputs=(tensor("lo", F32, []),))
    _check(model, feeds, None)


def test_conv_clip_float64_bound_not_a_float():
    clip = helper.make_node("Clip", ["c", "lo"], ["y"])
    model, feeds = _conv_model([clip], dtype=np.float64, extra_inits=(_init("lo", np.array(0.1, np.float64)),))
    sess = _session(model)
    assert sess.optimization_report.after[f"{DOMAIN}::FusedConv"] == 0
    want = np.maximum(_session(model, onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)[0], 0.1)
    assert_same(sess.run(None, feeds)[0], want)


def test_conv_float64_depthwise_relu():
    model, feeds = _conv_model([helper.make_node("Relu", ["c"], ["y"])], dtype=np.float64, group=4)
    sess = _session(model)
    assert sess.optimization_report.after[f"{DOMAIN}::FusedConv"] == 1
    plain = _session(model, onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert_same(sess.run(None, feeds)[0], plain.run(None, feeds)[0])


def test_conv_residual_add_relu():
    """Conv -> Add(shortcut) -> Relu: one FusedConv with Z, in either Add operand order; pointwise conv too."""
    for order in (["c", "z"], ["z", "c"]):
        model, feeds = _conv_model([helper.make_node("Add", order, ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                                   extra_inputs=(tensor("z", F32, [2, 4, 6, 5]),))
        ops = _check(model, feeds, "FusedConv")
        assert ops["Add"] == 0 and ops["Relu"] == 0
    model, feeds = _conv_model([helper.make_node("Add", ["c", "z"], ["y"])], pads=[0, 0, 0, 0],
                               extra_inputs=(tensor("z", F32, [2, 4, 4, 3]),))
    _check(model, feeds, "FusedConv")


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
def test_conv_winograd_residual_activation(act):
    """A FusedConv large enough for Winograd (kernels.conv.conv_winograd) adds Z and activates in its epilogue.
    Winograd's transforms round differently from a direct sum: within 1e-5 of the output's scale."""
    model, feeds = _conv_model([helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node(act, ["s"], ["y"])],
                               cin=16, cout=24, hw=(18, 17), extra_inputs=(tensor("z", F32, [2, 24, 18, 17]),))
    sess = _session(model)
    assert sess.optimization_report.after[f"{DOMAIN}::FusedConv"] == 1
    got, want = sess.run(None, feeds)[0], ort_run(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


# FusedConvs on each kernel whose epilogue adds Z and activates (Relu in registers only without Z), as
# _conv_model's arguments: grouped (kernels.conv.conv_padded), more taps than output channels (conv_broadcast),
# depthwise over a small plane (conv_depthwise_blocked), 3x3 over larger planes (conv_depthwise_3x3: rows narrower
# than an AVX-512 vector, and rows of more than one vector with an odd number of rows), dilated over a larger plane
# (conv_depthwise_rows), a stem over rows of more than a vector (conv_rows), 1x1 convs with few output channels (the
# packed GEMM reading its input in place) and more (packing it), each with a partial block of columns
EPILOGUE_CASES = [(dict(cin=16, cout=24, group=4), act) for act in ("Relu", "Sigmoid")] + \
    [(dict(cin=3, cout=12, hw=(9, 40)), act) for act in ("Relu", "HardSwish")] + \
    [(dict(cin=3, cout=20), act) for act in ("Relu", "HardSwish")] + \
    [(dict(cin=20, cout=20, group=20), act) for act in ("Relu", "HardSwish")] + \
    [(dict(cin=3, cout=3, group=3, hw=hw), act) for hw in ((30, 29), (27, 70)) for act in ("Clip", "Sigmoid")] + \
    [(dict(cin=3, cout=3, group=3, hw=(27, 70), dilations=[2, 2], pads=[2, 2, 2, 2]), act)
     for act in ("Clip", "Elu")] + \
    [(dict(cin=cin, cout=cout, hw=(9, 11), k=1), act) for cin, cout in ((40, 20), (12, 44))
     for act in ("Relu", "HardSwish")]


@pytest.mark.parametrize("conv,act", EPILOGUE_CASES)
def test_conv_kernel_residual_activation(conv, act):
    model, feeds = _conv_model([helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node(act, ["s"], ["y"])],
                               extra_inputs=(tensor("z", F32, [2, conv["cout"], *conv.get("hw", (6, 5))]),), **conv)
    _check(model, feeds, "FusedConv")
    model, feeds = _conv_model([helper.make_node(act, ["c"], ["y"])], **conv)
    _check(model, feeds, "FusedConv")


@pytest.mark.parametrize("order", ["x_sigmoid", "sigmoid_x"])
def test_conv_silu_fuses_as_swish(order):
    """Conv -> Mul(c, Sigmoid(c)) (SiLU as exporters write it) is one FusedConv with activation Swish."""
    mul_inputs = ["c", "s"] if order == "x_sigmoid" else ["s", "c"]
    model, feeds = _conv_model([helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", mul_inputs, ["y"])])
    ops = _check(model, feeds, "FusedConv")
    assert ops["Sigmoid"] == 0 and ops["Mul"] == 0


def test_silu_not_fused_when_the_conv_output_has_another_reader():
    model, feeds = _conv_model([helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])],
                               outputs=("y", "c"))
    ops = _check(model, feeds, None)
    assert ops["Sigmoid"] == 1 and ops["Mul"] == 1


def test_gemm_silu_fuses_as_swish():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Gemm", ["a", "w", "b"], ["g"], transB=1), helper.make_node("Sigmoid", ["g"], ["s"]),
             helper.make_node("Mul", ["g", "s"], ["y"])]
    model = make_model(nodes, [tensor("a", F32, [8, 6])], [tensor("y", F32, None)],
                       initializers=[_init("w", rng.standard_normal((5, 6)).astype(np.float32)),
                                     _init("b", rng.standard_normal(5).astype(np.float32))])
    _check(model, {"a": rng.standard_normal((8, 6)).astype(np.float32)}, "FusedGemm")


def test_sum_residual_fuses_once_folded_weights_give_shapes():
    """Weights computed by ConstantOfShape (as the model-zoo light models ship them) leave the Conv outputs'
    shapes unknown at load; after folding, inference finds them, and Conv -> Sum(shortcut) -> Relu (a Sum of two
    is an Add) becomes one FusedConv."""
    model, feeds = _conv_model([helper.make_node("Sum", ["c", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                               extra_inputs=(tensor("z", F32, [2, 4, 6, 5]),))
    w = next(i for i in model.graph.initializer if i.name == "w")
    model.graph.initializer.remove(w)
    model.graph.initializer.append(_init("w_shape", np.array(w.dims, np.int64)))
    model.graph.node.insert(0, helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                                                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.05])))
    ops = _check(model, feeds, "FusedConv")
    assert ops["Sum"] == 0 and ops["Relu"] == 0


def test_conv_add_broadcast_not_fused():
    model, feeds = _conv_model([helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                               extra_inputs=(tensor("z", F32, [1, 4, 6, 5]),))
    ops = _check(model, feeds, None)
    assert ops["Conv"] == 1 and ops["Add"] == 1


def test_conv_output_used_twice():
    model, feeds = _conv_model([helper.make_node("Relu", ["c"], ["y"]), helper.make_node("Neg", ["c"], ["y2"])],
                               outputs=("y", "y2"))
    _check(model, feeds, None)


def test_conv_output_is_graph_output():
    model, feeds = _conv_model([helper.make_node("Relu", ["c"], ["y"])], outputs=("y", "c"))
    _check(model, feeds, None)


def test_unsupported_activation():
    model, feeds = _conv_model([helper.make_node("Softsign", ["c"], ["y"])])
    _check(model, feeds, None)


def test_not_for_other_providers():
    model, feeds = _conv_model([helper.make_node("Relu", ["c"], ["y"])])
    sess = onnxjit.InferenceSession(model.SerializeToString(), providers=["FallbackExecutionProvider"])
    assert sess.optimization_report.after[f"{DOMAIN}::FusedConv"] == 0
    assert_same(sess.run(None, feeds)[0], ort_run(model, feeds)[0])


def _gemm_model(after, *, trans_b=1, rows=5, dtype=np.float32, seed=1):
    rng = np.random.default_rng(seed)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = rng.standard_normal((7, 6) if trans_b else (6, 7)).astype(dtype)
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["g"], transB=trans_b, alpha=0.5, beta=2.0), *after]
    model = make_model(nodes, [tensor("a", elem, [rows, 6])], [tensor("y", elem, None)],
                       initializers=[_init("w", w), _init("c", rng.standard_normal(7).astype(dtype))])
    return model, {"a": rng.standard_normal((rows, 6)).astype(dtype)}


@pytest.mark.parametrize("trans_b,rows", [(1, 5), (0, 5), (1, 2), (0, 1)])
def test_gemm_activation(trans_b, rows):
    model, feeds = _gemm_model([helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.1)], trans_b=trans_b,
                               rows=rows)
    _check(model, feeds, "FusedGemm")


@pytest.mark.parametrize("act", [("Relu", {}), ("Clip", {}), ("Tanh", {})], ids=["relu", "clip", "tanh"])
@pytest.mark.parametrize("with_c", [True, False])
def test_matmul_activation_packed(act, with_c):
    """float32 MatMul / Gemm with a constant B on kernels.packed_gemm: Relu and Clip in its registers where
    there is no C, the others (and any with C) after it; rows off its 4-row panels, columns off its 16 lanes."""
    rng = np.random.default_rng(3)
    op, attrs = act
    inits = [_init("b", rng.standard_normal((40, 37)).astype(np.float32) / 6)]
    after_inputs = ["m"]
    if op == "Clip":
        inits += [_init("lo", np.array(-0.3, np.float32)), _init("hi", np.array(0.4, np.float32))]
        after_inputs += ["lo", "hi"]
    if with_c:
        inits.append(_init("c", rng.standard_normal(37).astype(np.float32)))
        first = helper.make_node("Gemm", ["a", "b", "c"], ["m"], alpha=0.75, beta=1.5)
    else:
        first = helper.make_node("MatMul", ["a", "b"], ["m"])
    nodes = [first, helper.make_node(op, after_inputs, ["y"], **attrs)]
    model = make_model(nodes, [tensor("a", F32, [23, 40])], [tensor("y", F32, None)], initializers=inits)
    _check(model, {"a": rng.standard_normal((23, 40)).astype(np.float32)}, "FusedGemm" if with_c else "FusedMatMul")


def test_gemm_output_used_twice():
    model, feeds = _gemm_model([helper.make_node("Relu", ["g"], ["r"]), helper.make_node("Add", ["r", "g"], ["y"])])
    _check(model, feeds, None)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 6), (6, 7)), ((2, 3, 6), (6, 7)), ((2, 3, 6), (2, 6, 7)),
                                             ((6,), (6, 7))])
def test_matmul_activation(a_shape, b_shape):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])]
    model = make_model(nodes, [tensor("a", F32, a_shape)], [tensor("y", F32, None)],
                       initializers=[_init("b", rng.standard_normal(b_shape).astype(np.float32))])
    _check(model, {"a": rng.standard_normal(a_shape).astype(np.float32)}, "FusedMatMul")


@pytest.mark.parametrize("a_shape,c_shape,act", [((2, 3, 6), (7,), None), ((3, 1, 6), (1, 1, 7), None),
                                                 ((2, 3, 6), (7,), "Relu"), ((4, 2, 3, 6), (1, 7), "Tanh"),
                                                 ((6,), (7,), None), ((2, 3, 6), (), "Relu")])
@pytest.mark.parametrize("bias_first", [False, True])
def test_matmul_bias_over_nd_activations(a_shape, c_shape, act, bias_first):
    """MatMul of N-D A by a 2-D B, then a bias Add along the last axis (either operand order; a transformer's
    projections): one FusedMatMul(A, B, C), the activation after it folded in too."""
    rng = np.random.default_rng(4)
    add_inputs = ["c", "m"] if bias_first else ["m", "c"]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Add", add_inputs, ["s" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["s"], ["y"]))
    inits = [_init("b", rng.standard_normal((6, 7)).astype(np.float32)),
             _init("c", rng.standard_normal(c_shape).astype(np.float32))]
    model = make_model(nodes, [tensor("a", F32, a_shape)], [tensor("y", F32, None)], initializers=inits)
    ops = _check(model, {"a": rng.standard_normal(a_shape).astype(np.float32)}, "FusedMatMul")
    assert ops["Add"] == 0 and ops[act or "Relu"] == 0


@pytest.mark.parametrize("a_shape,b_shape,c_shape", [((2, 3, 6), (6, 7), (3, 1)), ((2, 3, 6), (6, 7), (2, 3, 7)),
                                                     ((2, 3, 6), (2, 6, 7), (7,))])
def test_matmul_add_not_a_bias_not_fused(a_shape, b_shape, c_shape):
    """An Add that is no bias along the last axis, or a batched B, stays a MatMul and an Add."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "c"], ["y"])]
    inits = [_init("b", rng.standard_normal(b_shape).astype(np.float32)),
             _init("c", rng.standard_normal(c_shape).astype(np.float32))]
    model = make_model(nodes, [tensor("a", F32, a_shape)], [tensor("y", F32, None)], initializers=inits)
    ops = _check(model, {"a": rng.standard_normal(a_shape).astype(np.float32)}, None)
    assert ops["MatMul"] == 1 and ops["Add"] == 1


def test_matmul_integer_not_fused():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = make_model(nodes, [tensor("a", TensorProto.INT32, [3, 4]), tensor("b", TensorProto.INT32, [4, 2])],
                       [tensor("y", TensorProto.INT32, None)])
    rng = np.random.default_rng(3)
    _check(model, {"a": rng.integers(-5, 5, (3, 4)).astype(np.int32),
                   "b": rng.integers(-5, 5, (4, 2)).astype(np.int32)}, None)


# --- each com.onnxjit op: CPU kernel == reference implementation ------------------------------------------------
def _fused_model(op, inputs, attrs, dtype):
    """One com.onnxjit node; `inputs` (name, array or None, is_initializer)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = [n if a is not None else "" for n, a, _ in inputs]
    node = helper.make_node(op, names, ["y"], domain=DOMAIN, **attrs)
    vis = [tensor(n, elem, a.shape) for n, a, init in inputs if a is not None and not init]
    inits = [_init(n, a) for n, a, init in inputs if a is not None and init]
    model = make_model([node], vis, [tensor("y", elem, None)], initializers=inits, extra_opsets={DOMAIN: 1})
    return model, {n: a for n, a, init in inputs if a is not None and not init}


def _kernel_vs_reference(model, feeds):
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    native = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert all(s.provider == "CPUExecutionProvider" for s in native._compiled.steps)
    from onnx.reference import ReferenceEvaluator

    from onnxjit.contrib import load_reference_ops
    ref = ReferenceEvaluator(model, new_ops=list(load_reference_ops().values()))
    assert_same(native.run(None, feeds)[0], ref.run(None, feeds)[0])


REF_ACTIVATIONS = [("Identity", []), ("Relu", []), ("LeakyRelu", [0.1]), ("Sigmoid", []), ("Tanh", []),
                   ("Clip", [-0.5, 0.75]), ("HardSigmoid", [0.2, 0.5]), ("Elu", [1.5]), ("Selu", [1.6, 1.05]),
                   ("HardSwish", []), ("Softplus", []), ("ThresholdedRelu", [0.4]), ("Swish", [1.0]),
                   ("Swish", [0.7])]


def _act_attrs(act, params):
    return {"activation": act, **({"activation_params": params} if params else {})}


@pytest.mark.parametrize("act,params", REF_ACTIVATIONS, ids=[a for a, _ in REF_ACTIVATIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_conv_kernel_equals_reference(act, params, dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 7, 6)).astype(dtype)
    cases = [  # (W shape, B?, Z?, attributes): im2col, pointwise, depthwise (direct), strided 1-D
        ((6, 4, 3, 3), True, True, {"pads": [1, 1, 1, 1]}),
        ((6, 4, 1, 1), True, True, {}),
        ((4, 1, 3, 3), False, True, {"group": 4, "pads": [1, 0, 1, 0]}),
        ((6, 4, 3, 3), True, False, {"strides": [2, 2]}),
    ]
    for w_shape, with_b, with_z, conv_attrs in cases:
        w = rng.standard_normal(w_shape).astype(dtype)
        b = rng.standard_normal(w_shape[0]).astype(dtype) if with_b else None
        y_shape = onnxjit_conv_shape(x.shape, w_shape, conv_attrs)
        z = rng.standard_normal(y_shape).astype(dtype) if with_z else None
        model, feeds = _fused_model("FusedConv", [("x", x, False), ("w", w, True), ("b", b, True), ("z", z, False)],
                                    {**conv_attrs, **_act_attrs(act, params)}, dtype)
        _kernel_vs_reference(model, feeds)


def onnxjit_conv_shape(xs, ws, attrs):
    pads = attrs.get("pads", [0] * 4)
    strides = attrs.get("strides", [1, 1])
    return (xs[0], ws[0]) + tuple((xs[2 + i] + pads[i] + pads[i + 2] - ws[2 + i]) // strides[i] + 1 for i in (0, 1))


@pytest.mark.parametrize("act,params", REF_ACTIVATIONS[:6], ids=[a for a, _ in REF_ACTIVATIONS[:6]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_gemm_matmul_kernel_equals_reference(act, params, dtype):
    rng = np.random.default_rng(5)
    for rows, trans_b in ((6, 0), (2, 1)):
        a = rng.standard_normal((rows, 5)).astype(dtype)
        b = rng.standard_normal((3, 5) if trans_b else (5, 3)).astype(dtype)
        c = rng.standard_normal(3).astype(dtype)
        model, feeds = _fused_model("FusedGemm", [("a", a, False), ("b", b, True), ("c", c, False)],
                                    {"transB": trans_b, "alpha": 0.7, "beta": 1.5, **_act_attrs(act, params)}, dtype)
        _kernel_vs_reference(model, feeds)
    for a_shape, b_shape, c_shape in (((4, 5), (5, 3), None), ((2, 4, 5), (2, 5, 3), None),
                                      ((2, 4, 5), (5, 3), (3,)), ((2, 4, 5), (2, 5, 3), (4, 1)), ((5,), (5, 3), (1,))):
        c = None if c_shape is None else rng.standard_normal(c_shape).astype(dtype)
        model, feeds = _fused_model("FusedMatMul", [("a", rng.standard_normal(a_shape).astype(dtype), False),
                                                    ("b", rng.standard_normal(b_shape).astype(dtype), False),
                                                    ("c", c, False)], _act_attrs(act, params), dtype)
        _kernel_vs_reference(model, feeds)


# --- light models ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_light_model_all_levels(name):
    # random weights: uniform ones make every channel equal and would hide fusion mistakes
    model = with_random_weights(onnx.load(light_model_case(name)[0]))
    rng = np.random.default_rng(6)
    feeds = {i.name: rng.random([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}}
    sess = _session(model, onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL, fallback=False)
    assert sess.optimization_report.after[f"{DOMAIN}::FusedConv"] > 0
    got = sess.run(None, feeds)[0]
    want = ort_run(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
