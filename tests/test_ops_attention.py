"""CPU kernel of ai.onnx Attention (23-25) against onnxruntime: 4-D and 3-D inputs, grouped-query heads, bool and
float masks (short ones padded), causal masking with and without a past key/value cache, softcap, scale, every
qk_matmul_output mode, nonpad_kv_seqlen (24) and sliding windows (25), float32 and float64. Every model runs with
the fallback provider disabled, so a pass proves the Numba kernel ran.

onnx.reference is the oracle where onnxruntime differs from the ONNX spec's reference: qk_matmul_output mode 2 at
keys masked by a bool or causal mask (onnxruntime writes the lowest float there, ONNX -inf), float64 inputs
(onnxruntime has no float64 Attention kernel) and a mask shorter than the keys (onnxruntime refuses it, ONNX pads
it).

RotaryEmbedding (23) is tested here too: 4-D and 3-D inputs, halves or interleaved pairs, partial rotation, caches
indexed by position_ids or given per position.
"""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxjit
from conftest import assert_all_same, feeds_of, native_session, one_node_model, ort_run, ref_run

B, HQ, S, L, D, DV, PAST = 2, 4, 3, 5, 6, 4, 2


def _model(feeds: dict, opset: int, n_out: int, **attrs) -> onnx.ModelProto:
    names = [n if n in feeds else "" for n in ("q", "k", "v", "mask", "past_key", "past_value", "nonpad")]
    while not names[-1]:
        names.pop()
    outs = ["y", "present_key", "present_value", "qk"][:n_out]
    if n_out == 4 and "past_key" not in feeds:
        outs[1:3] = ["", ""]
    elem = helper.np_dtype_to_tensor_dtype(feeds["q"].dtype)
    node = helper.make_node("Attention", names, outs, **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in feeds.items()]
    outputs = [helper.make_tensor_value_info(n, elem, None) for n in outs if n]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _feeds(rank=4, kv_heads=HQ, mask=None, mask_len=L, past=False, dtype=np.float32, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    if rank == 4:
        feeds = {"q": r(B, HQ, S, D), "k": r(B, kv_heads, L, D), "v": r(B, kv_heads, L, DV)}
    else:
        feeds = {"q": r(B, S, HQ * D), "k": r(B, L, kv_heads * D), "v": r(B, L, kv_heads * DV)}
    total = L + (PAST if past else 0)
    if mask == "bool":
        feeds["mask"] = rng.random((S, mask_len if mask_len != L else total)) > 0.3
    elif mask == "float":
        feeds["mask"] = r(1, HQ, S, mask_len if mask_len != L else total)
    if past:
        feeds["past_key"] = r(B, kv_heads, PAST, D)
        feeds["past_value"] = r(B, kv_heads, PAST, DV)
    return feeds


def _check(feeds, opset=23, n_out=1, oracle=ort_run, **attrs):
    model = _model(feeds, opset, n_out, **attrs)
    got = native_session(model).run(None, feeds)
    assert_all_same(got, oracle(model, feeds))


def _heads(rank, kv_heads):
    return dict(q_num_heads=HQ, kv_num_heads=kv_heads) if rank == 3 else {}


@pytest.mark.parametrize("rank,kv_heads,mask,causal,past",
                         [c for c in itertools.product((4, 3), (HQ, 2), (None, "bool", "float"), (0, 1), (False, True))
                          if not (c[2] == "bool" and c[1] == 2)])
def test_attention_masks_causal_past(rank, kv_heads, mask, causal, past):
    feeds = _feeds(rank, kv_heads, mask, past=past)
    _check(feeds, n_out=3 if past else 1, is_causal=causal, **_heads(rank, kv_heads))


@pytest.mark.parametrize("rank", [4, 3])
@pytest.mark.parametrize("softcap,scale", [(2.0, None), (0.5, 0.3), (0.0, 0.1)])
def test_attention_softcap_and_scale(rank, softcap, scale):
    attrs = _heads(rank, 2)
    if scale is not None:
        attrs["scale"] = scale
    _check(_feeds(rank, 2, "float"), softcap=softcap, **attrs)


def test_attention_short_mask_is_padded_with_masked_keys():
    # onnxruntime refuses a mask shorter than the keys (ONNX pads it with masked keys)
    _check(_feeds(mask="bool", mask_len=3), oracle=ref_run)
    _check(_feeds(mask="float", mask_len=4, past=True), n_out=3, oracle=ref_run, is_causal=1)


def test_query_blocks_spread_heads_over_threads(monkeypatch):
    from onnxjit import worker_pool
    from onnxjit.ops import attention as oa
    monkeypatch.setattr(worker_pool, "thread_count", lambda: 2)
    big = 1 << 30
    assert oa.query_blocks(3, 197, big) == 2  # 6 units: 3 + 3
    assert oa.query_blocks(12, 128, big) == 1  # 6 + 6 already
    assert oa.query_blocks(1, 256, big) == 2
    assert oa.query_blocks(3, 40, big) == 1  # rows too few to cut (fewer than 2 x ATTENTION_MIN_Q_ROWS)
    assert oa.query_blocks(3, 197, 10) == 1  # too little work for threads


@pytest.mark.parametrize("mode", [None, 3, 2])
def test_attention_heads_cut_into_query_blocks(mode):
    """Heads cut into blocks of query rows (3 heads on 2 threads): causal limits, the mask, the past cache and the
    qk_matmul_output rows all follow each block's first row."""
    rng = np.random.default_rng(7)
    s, past, d = 70, 2, 16
    feeds = {"q": rng.standard_normal((1, 3, s, d)).astype(np.float32),
             "k": rng.standard_normal((1, 3, s, d)).astype(np.float32),
             "v": rng.standard_normal((1, 3, s, d)).astype(np.float32),
             "mask": rng.standard_normal((1, 3, s, s + past)).astype(np.float32),
             "past_key": rng.standard_normal((1, 3, past, d)).astype(np.float32),
             "past_value": rng.standard_normal((1, 3, past, d)).astype(np.float32)}
    attrs = {} if mode is None else {"qk_matmul_output_mode": mode}
    model = _model(feeds, 23, 3 if mode is None else 4, is_causal=1, **attrs)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    got = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_all_same(got, (ref_run if mode == 2 else ort_run)(model, feeds))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_attention_nan_score_makes_its_row_nan(sign):
    # a NaN in Q makes every score of its query row NaN; in K, one key's score in every row. The row max runs over
    # ordered integer keys, where a positive NaN is the largest value and a negative one the smallest: the two
    # signs reach the all-NaN row by different paths (through the max, through the exp sum)
    feeds = _feeds(4, HQ)
    feeds["q"][0, 1, 2, 3] = np.copysign(np.nan, sign)
    feeds["k"][1, 2, 4, 0] = np.copysign(np.nan, sign)
    _check(feeds)


QK_CASES = [(mode, softcap, mask, causal) for mode, softcap, mask, causal in
            itertools.product((0, 1, 2, 3), (0.0, 2.0), (None, "bool", "float"), (0, 1))
            if not (mode == 0 and softcap)]  # declined: onnxruntime and ONNX's reference disagree


@pytest.mark.parametrize("mode,softcap,mask,causal", QK_CASES)
def test_attention_qk_matmul_output(mode, softcap, mask, causal):
    feeds = _feeds(4, 2, mask, past=True)
    ort_own_mask = mask == "bool" or causal  # onnxruntime writes the lowest float at those keys in mode 2
    oracle = ref_run if mode == 2 and ort_own_mask else ort_run
    _check(feeds, n_out=4, oracle=oracle, qk_matmul_output_mode=mode, softcap=softcap, is_causal=causal)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_nonpad_kv_seqlen(causal, mask):
    feeds = _feeds(4, 2, mask)
    feeds["nonpad"] = np.array([L, 3], np.int64)
    _check(feeds, opset=24, is_causal=causal)


@pytest.mark.parametrize("left,right,causal", [(2, -1, 1), (1, 2, 0), (0, 0, 0), (-1, 1, 0)])
@pytest.mark.parametrize("cache", [None, "past", "nonpad"])
def test_attention_sliding_window(left, right, causal, cache):
    feeds = _feeds(4, 2, "float", past=cache == "past")
    if cache == "nonpad":
        feeds["nonpad"] = np.array([4, L], np.int64)
    _check(feeds, opset=25, n_out=3 if cache == "past" else 1, is_causal=causal, left_window_size=left,
           right_window_size=right)


@pytest.mark.parametrize("rank,causal,past", [(4, 1, True), (3, 0, False)])
def test_attention_float64_against_reference(rank, causal, past):
    # onnxruntime has no float64 Attention kernel
    feeds = _feeds(rank, 2, "float", past=past, dtype=np.float64)
    _check(feeds, n_out=3 if past else 1, oracle=ref_run, is_causal=causal, **_heads(rank, 2))


def test_attention_float_inputs_with_double_softmax_precision():
    _check(_feeds(4, 2, "bool"), n_out=4, qk_matmul_output_mode=3, softmax_precision=TensorProto.DOUBLE)


def _providers(model):
    so = onnxjit.SessionOptions()
    so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onnxjit.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [s.provider for s in sess._compiled.steps]


@pytest.mark.parametrize("feeds,attrs,n_out", [
    (_feeds(dtype=np.float16), {}, 1),  # onnxruntime computes halves in float32, ONNX's data per step in float16
    (_feeds(past=True), {"qk_matmul_output_mode": 0, "softcap": 2.0}, 4),  # onnxruntime and ONNX disagree
    (_feeds(), {"q_num_heads": HQ, "kv_num_heads": HQ}, 1),  # head counts on 4-D inputs
])
def test_attention_declined_forms_go_to_the_fallback(feeds, attrs, n_out):
    model = _model(feeds, 23, n_out, **attrs)
    assert _providers(model) == ["FallbackExecutionProvider"]


def test_attention_3d_without_head_counts_is_a_value_error():
    feeds = _feeds(rank=3)
    with pytest.raises(onnxjit.RuntimeException, match="3-D Q, K and V need the q_num_heads") as info:
        native_session(_model(feeds, 23, 1)).run(None, feeds)
    assert isinstance(info.value.__cause__, ValueError)


def test_attention_mask_that_does_not_broadcast_is_a_value_error():
    feeds = _feeds()
    feeds["mask"] = np.zeros((2, S, L), np.float32)  # 2 heads where Q has 4
    with pytest.raises(onnxjit.RuntimeException, match="attn_mask of shape") as info:
        native_session(_model(feeds, 23, 1)).run(None, feeds)
    assert isinstance(info.value.__cause__, ValueError)


# --- RotaryEmbedding ------------------------------------------------------------------------------------------------
def _rotary_inputs(rank, rotary_dim, position_ids, seed=0):
    rng = np.random.default_rng(seed)
    heads, size, positions = 3, 8, 10
    x = rng.standard_normal((B, heads, S, size) if rank == 4 else (B, S, heads * size)).astype(np.float32)
    half = (rotary_dim or size) // 2
    angles = rng.random((positions, half) if position_ids else (B, S, half)) * 6
    inputs = [("x", x, False), ("cos", np.cos(angles).astype(np.float32), False),
              ("sin", np.sin(angles).astype(np.float32), False)]
    if position_ids:
        inputs.append(("ids", rng.integers(0, positions, (B, S)), False))
    return inputs, heads


@pytest.mark.parametrize("rank,interleaved,rotary_dim,position_ids",
                         itertools.product((4, 3), (0, 1), (0, 4), (True, False)))
def test_rotary_embedding(rank, interleaved, rotary_dim, position_ids):
    inputs, heads = _rotary_inputs(rank, rotary_dim, position_ids)
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    if rank == 3:
        attrs["num_heads"] = heads
    model = one_node_model("RotaryEmbedding", inputs, 23, **attrs)
    feeds = feeds_of(inputs)
    assert_all_same(native_session(model).run(None, feeds), ort_run(model, feeds))


def test_rotary_embedding_position_out_of_range_is_a_value_error():
    inputs, _ = _rotary_inputs(4, 0, True)
    inputs[3][1][0, 0] = 10
    model = one_node_model("RotaryEmbedding", inputs, 23)
    with pytest.raises(onnxjit.RuntimeException, match="RotaryEmbedding: position_ids must be") as info:
        native_session(model).run(None, feeds_of(inputs))
    assert isinstance(info.value.__cause__, ValueError)
