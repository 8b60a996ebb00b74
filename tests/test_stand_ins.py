"""The numpy stand-ins a first run uses for the kernels it defers (onnxjit.ops.stand_ins): the conv, pool, softmax,
attention, ConvTranspose and layer norm cases of the kernels' own tests run on them, against onnxruntime; the
activations against the kernels'."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from onnxjit.cache import deferred_compile
from onnxjit.kernels import linalg as klinalg
from onnxjit.ops import nn, stand_ins

from conftest import tensor
from onnx import TensorProto, helper, numpy_helper
import test_contrib_microsoft
import test_ops_attention as attention_cases
import test_ops_conv_transpose as conv_transpose_cases
import test_ops_reduce as reduce_cases
import test_optimizer_transformer
from test_ops_nn import CONV_CASES, PACKED_CASES, POOL_CASES, _check_conv, _rand, check
from test_optimizer_conv import ACTIVATIONS, _check, _conv_model


@pytest.fixture
def standing_in(monkeypatch):
    """Every conv, pool and softmax kernel stood in for, as in a first run over empty caches; the list of the
    stand-ins that ran."""
    ran = []
    monkeypatch.setattr(deferred_compile, "deferring", lambda: True)
    monkeypatch.setattr(deferred_compile, "defer_unless_available", lambda kernel, args, on_ready: True)
    monkeypatch.setattr(deferred_compile, "stands_in", lambda kernel, args: True)
    conv_call = stand_ins.NumpyConv.__call__
    monkeypatch.setattr(stand_ins.NumpyConv, "__call__", lambda self, *a: (ran.append("conv"), conv_call(self, *a))[1])
    for name in ("pool", "global_pool", "softmax_rows", "attention", "conv_transpose", "layer_norm_rows",
                 "skip_layer_norm_rows"):
        fn = getattr(stand_ins, name)
        monkeypatch.setattr(stand_ins, name,
                            lambda *a, _fn=fn, _name=name, **kw: (ran.append(_name), _fn(*a, **kw))[1])
    return ran


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES + PACKED_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv(xs, ws, attrs, bias, dtype, standing_in):
    _check_conv(xs, ws, attrs, bias, dtype=dtype)
    assert standing_in == ["conv"]


def test_conv_in_blocks_of_rows(standing_in, monkeypatch):
    monkeypatch.setattr(stand_ins, "COLUMN_BYTES", 1)  # a block per output row
    _check_conv((2, 4, 9, 10), (6, 2, 3, 3), dict(group=2, pads=[1, 0, 2, 1], strides=[2, 1]), True)
    assert standing_in == ["conv"]


@pytest.mark.parametrize("act", [a for a, _ in ACTIVATIONS] + ["Clip"])
def test_fused_conv_with_residual_and_activation(act, standing_in):
    """FusedConv (Conv + Add + the activation, fused by the optimizer): the conv, its bias, Z, then the activation."""
    node = helper.make_node(act, ["s", "lo", "hi"] if act == "Clip" else ["s"], ["y"], **dict(ACTIVATIONS).get(act, {}))
    bounds = (numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
              numpy_helper.from_array(np.array(1.5, np.float32), "hi"))
    model, feeds = _conv_model([helper.make_node("Add", ["c", "z"], ["s"]), node], extra_inits=bounds,
                               extra_inputs=(tensor("z", TensorProto.FLOAT, [2, 4, 6, 5]),))
    _check(model, feeds, "FusedConv")
    assert standing_in == ["conv"]


@pytest.mark.parametrize("xs,attrs,since", POOL_CASES)
@pytest.mark.parametrize("op,extra", [("MaxPool", {}), ("AveragePool", dict(count_include_pad=0)),
                                      ("AveragePool", dict(count_include_pad=1))])
def test_pool(xs, attrs, since, op, extra, standing_in):
    check(op, [("x", _rand(xs), False)], 19 if op == "AveragePool" else 12, **attrs, **extra)
    assert set(standing_in) <= {"pool", "global_pool"} and standing_in


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_max_pool_8bit(dtype, standing_in):
    x = np.random.default_rng(5).integers(-128 if dtype == np.int8 else 0, 128, (1, 3, 9, 9)).astype(dtype)
    check("MaxPool", [("x", x, False)], 12, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert standing_in == ["pool"]


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 7), (1, 3, 4, 5), (2, 2, 3, 4, 5)])
def test_global_pool(op, xs, standing_in):
    check(op, [("x", _rand(xs), False)], 13)
    assert standing_in == ["global_pool"]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("xs,axis,opset", [((3, 5), -1, 13), ((2, 4, 3), 1, 13), ((2, 3, 4), 1, 11),
                                           ((4, 6), 0, 13)])
def test_softmax(op, xs, axis, opset, standing_in):
    x = _rand(xs) * 10
    check(op, [("x", x, False)], opset, axis=axis)
    assert standing_in == ["softmax_rows"]


@pytest.mark.parametrize("rank,kv_heads,mask,causal,past",
                         [c for c in itertools.product((4, 3), (4, 2), (None, "bool", "float"), (0, 1), (False, True))
                          if not (c[2] == "bool" and c[1] == 2)])
def test_attention(rank, kv_heads, mask, causal, past, standing_in):
    feeds = attention_cases._feeds(rank, kv_heads, mask, past=past)
    attention_cases._check(feeds, n_out=3 if past else 1, is_causal=causal,
                           **attention_cases._heads(rank, kv_heads))
    assert standing_in == ["attention"]


@pytest.mark.parametrize("cache", [None, "past", "nonpad"])
def test_attention_windows_and_padding(cache, standing_in):
    feeds = attention_cases._feeds(4, 2, "float", past=cache == "past")
    if cache == "nonpad":
        feeds["nonpad"] = np.array([4, attention_cases.L], np.int64)
    attention_cases._check(feeds, opset=25, n_out=3 if cache == "past" else 1, is_causal=1, left_window_size=2)
    assert standing_in == ["attention"]


@pytest.mark.parametrize("case", [c for c in test_optimizer_transformer._contrib_cases() if c.startswith("attention")])
def test_contrib_attention_fully_masked_rows(case, standing_in):
    """com.onnxjit Attention (zeros, the average of V or NaN for a row whose keys are all masked) on the stand-in,
    against the fallback provider's reference."""
    test_optimizer_transformer.test_contrib_kernel_equals_reference(case)
    assert standing_in == ["attention"]


def test_attention_softcap_runs_its_kernel(standing_in):
    attention_cases._check(attention_cases._feeds(4, 2, "float"), softcap=2.0)
    assert not standing_in  # (the reference has no softcap)


@pytest.mark.parametrize("xs,ws,attrs", conv_transpose_cases.CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(xs, ws, attrs, bias, standing_in):
    conv_transpose_cases.test_conv_transpose_f32(xs, ws, attrs, bias)
    assert standing_in == ["conv_transpose"] * 2


@pytest.mark.parametrize("xs,axis,ss,bs", reduce_cases.LN_CASES)
@pytest.mark.parametrize("n_out", [1, 3])
def test_layer_norm(xs, axis, ss, bs, n_out, standing_in):
    reduce_cases.test_layer_norm_f32(xs, axis, ss, bs, n_out)
    assert standing_in == ["layer_norm_rows"]


@pytest.mark.parametrize("case", [0, 1, 2, 3, 4, 5])
def test_softmax_then_layer_norm(case, standing_in):
    """Softmax / LogSoftmax and the LayerNormalization after it as one step (the SOFTMAX_LAYER_NORM forms), or two
    passes where the axes differ."""
    op, sm_axis, ln_axis, dtype, n_out, softmax_is_output = TWO_PASS_CASES[case]
    reduce_cases.test_softmax_then_layer_norm(op, sm_axis, ln_axis, dtype, n_out, softmax_is_output)
    assert "layer_norm_rows" in standing_in


@pytest.mark.parametrize("x_shape,skip_shape", test_contrib_microsoft.SKIP_SHAPES)
@pytest.mark.parametrize("optional", ["none", "beta", "beta_bias"])
def test_skip_layer_norm(x_shape, skip_shape, optional, standing_in):
    test_contrib_microsoft.test_skip_layer_normalization(np.random.default_rng(0), x_shape, skip_shape, optional)
    assert set(standing_in) == {"skip_layer_norm_rows", "layer_norm_rows"}  # (the second called by the first)


TWO_PASS_CASES = [("Softmax", -1, -1, np.float32, 1, False), ("Softmax", -1, -1, np.float32, 3, False),
                  ("LogSoftmax", 2, -1, np.float32, 3, False), ("Softmax", 2, -1, np.float64, 1, False),
                  ("Softmax", 1, -1, np.float32, 1, False), ("Softmax", -1, 1, np.float32, 2, False)]


VALUES = [-200.0, -88.0, -20.0, -3.5, -1.0, -1e-3, -0.0, 0.0, 1e-3, 0.5, 1.0, 2.9, 3.0, 20.0, 88.0, 200.0,
          np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("name", [a for a in klinalg.ACTIVATIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_as_the_kernels_compute_them(name, dtype):
    from onnxjit.contrib.fused import ACTIVATION_PARAM_COUNTS
    params = [0.3, 1.7][:ACTIVATION_PARAM_COUNTS[name]] if name != "Clip" else [-1.5, 2.5]
    params = list(nn._FIXED_PARAMS.get(name, params))  # (HardSwish's, as activation_of gives them)
    act = nn.Activation(klinalg.ACTIVATIONS.index(name), *(params + [0.0, 0.0])[:2])
    y = np.array(VALUES + list(np.linspace(-6, 6, 97)), dtype=dtype)
    want = y.copy()
    klinalg.activate(want, 0, want.size, act.kind, act.consts(dtype))
    got = stand_ins.activate(y.copy(), act)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12  # (the kernel contracts a * v + b into one FMA)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
