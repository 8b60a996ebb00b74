"""onnxruntime's com.microsoft contrib ops on the CPU provider, over kernels onnxjit already has.

Each builder reads the op as its reference does (onnxjit/contrib/microsoft: the same input checks and the same
canonical form) and runs the arithmetic on the Numba kernels:

  SkipLayerNormalization            com.onnxjit SkipLayerNormalization's kernel (the same op: `skip_layer_norm`)
  SkipSimplifiedLayerNormalization  the residual sum, then RMSNormalization's row kernel (`rms_norm`)
  SimplifiedLayerNormalization      RMSNormalization's kernel; also registered in the ai.onnx domain, where
                                    onnxruntime registers it (its optimizer writes it there)
  EmbedLayerNormalization           the embedding gathers (numpy), then LayerNormalization's row kernel
  FusedMatMul                       MatMul's GEMMs over the transposed operand views, then alpha
  FusedConv                         com.onnxjit FusedConv's builder (the same op)
  NhwcConv                          Conv's builder between channels-last <-> channels-first copies
  RotaryEmbedding                   RotaryEmbedding-23's rotation kernel
  Attention, MultiHeadAttention,    the references' input handling (contrib.microsoft.attention) with `Compute`:
  GroupQueryAttention,              the attention kernel of Attention-23 (scores, softmax and P V per head, the
  DecoderMaskedMultiHeadAttention   masks as an additive bias), RotaryEmbedding's kernel, and MatMul's GEMM
                                    (Attention's QKV projection, its constant weights packed once)
  MatMulNBits                       the weights dequantized once (when constant), then MatMul's GEMM

Gelu, FastGelu, BiasGelu, QuickGelu and BiasAdd are elementwise: the fuser renders them (fuser/exprs.py
OP_DOMAINS). BiasSplitGelu and DynamicQuantizeLSTM run on the fallback provider.

Builders return None (the node goes to the next provider) for element types the kernels do not take: float32 (and
float64 where the kernel has it; float16 only where RMSNormalization's kernel takes it), GroupQueryAttention's
smooth softmax / head_sink (the attention kernel has no sink logit), and the forms the references raise
NotImplementedError for.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from onnxjit.contrib.microsoft import DOMAIN, type_outputs
from onnxjit.contrib.microsoft import attention as ms_attention
from onnxjit.contrib.microsoft import fused as ms_fused
from onnxjit.contrib.microsoft import nbits as ms_nbits
from onnxjit.contrib.microsoft import normalization as ms_norm
from onnxjit.kernels import packed_gemm
from onnxjit.ops import attention as onnx_attention
from onnxjit.ops import normalization as onnx_norm
from onnxjit.ops.linalg import matmul
from onnxjit.ops.nn import (
    FUSED_DOMAIN,
    NO_ACTIVATION,
    ConstantDerived,
    build_conv,
    constant_input,
    rank_of,
    ro,
    wanted_outputs,
)
from onnxjit.ops.reduce import F32, F64, input_elem
from onnxjit.ops.registry import attr, register_op

_F32_ONLY = frozenset({T.FLOAT})
_F32_F64 = frozenset({T.FLOAT, T.DOUBLE})


class NodeAs:
    """A view of an IR node as another op (op_type, domain, opset), everything else the node's own: the builder of
    an op that com.microsoft defines as an existing one runs on it."""

    __slots__ = ("_node", "domain", "op_type", "opset")

    def __init__(self, node, op_type: str, domain: str, opset: int):
        self._node, self.op_type, self.domain, self.opset = node, op_type, domain, opset

    def __getattr__(self, name):
        return getattr(self._node, name)


def register_microsoft(op_type: str, domain: str = DOMAIN):
    """Register `build` for domain::op_type (since 1), typing the node's unknown outputs first
    (contrib.microsoft.type_outputs: the session types them at load, this covers nodes made later)."""
    def deco(build):
        def typed_build(node):
            type_outputs(node)
            return build(node)
        register_op(op_type, since=1, domain=domain)(typed_build)
        return build
    return deco


def _no_native_kernel(node):
    return None


# the fuser runs the elementwise ones (its groups are formed before builders are asked); these register to type
# their outputs, and leave a node the fuser did not take to the fallback's reference
for _op in ("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", "BiasSplitGelu", "DynamicQuantizeLSTM"):
    register_microsoft(_op)(_no_native_kernel)


def _elems(node, indices) -> set:
    """The known element types of the present inputs at `indices`. An input of unknown type is left out: each op's
    type constraint gives it the type of the known ones (ONNX inference leaves the values computed from
    com.microsoft outputs untyped, a MatMul of an Attention's output say), and the builders need one known type."""
    return {input_elem(node, i) for i in indices if i < len(node.inputs) and node.inputs[i] is not None} - {None}


def _present(node, i: int) -> bool:
    return i < len(node.inputs) and node.inputs[i] is not None


def _attrs(node, names: dict) -> dict:
    """The node's attributes among `names` (name -> default), strings decoded, absent ones left out so the
    functions' defaults apply."""
    out = {}
    for name in names:
        value = attr(node, name)
        if value is not None:
            out[name] = value
    return out


# --- normalization ----------------------------------------------------------------------------------------------
def _skip_norm_params(node, n_inputs: int, allowed) -> tuple[float, int] | None:
    """(epsilon, outputs wanted) of a Skip*LayerNormalization node whose inputs are one known type of `allowed`."""
    if len(node.inputs) < 3 or not all(_present(node, i) for i in range(3)):
        return None
    elems = _elems(node, range(n_inputs))
    if len(elems) != 1 or not elems <= allowed:
        return None
    return float(attr(node, "epsilon", 1e-5)), max(wanted_outputs(node), 1)


@register_microsoft("SkipLayerNormalization")
def build_skip_layer_norm(node):
    """com.onnxjit SkipLayerNormalization's kernel (onnx_norm.skip_layer_norm), onnxruntime's shape checks."""
    params = _skip_norm_params(node, 5, onnx_norm.FLOATS)
    if params is None:
        return None
    eps, n_out = params

    def run(x, skip, gamma, beta=None, bias=None):
        ms_norm.check_skip_inputs("SkipLayerNormalization", x, skip, {"gamma": gamma, "beta": beta, "bias": bias})
        return onnx_norm.skip_layer_norm(x, skip, gamma, beta, bias, eps, n_out, n_out >= 4)[:n_out]
    return run


@register_microsoft("SkipSimplifiedLayerNormalization")
def build_skip_simplified_layer_norm(node):
    params = _skip_norm_params(node, 4, onnx_norm.RMS_FLOATS)
    if params is None:
        return None
    eps, n_out = params

    def run(x, skip, gamma, bias=None):
        ms_norm.check_skip_inputs("SkipSimplifiedLayerNormalization", x, skip, {"gamma": gamma, "bias": bias})
        total = np.add(x, skip)
        if bias is not None:
            np.add(total, bias, out=total, casting="unsafe")
        outs = [onnx_norm.rms_norm(total, gamma, -1, eps, F32)]
        if n_out > 1:  # onnxruntime's mean output is zeros: an RMS norm takes no mean
            inv = ms_norm.inv_rms(total, -1, eps, F32)
            outs += [np.zeros_like(inv), inv, total]
        return outs[:n_out]
    return run


def build_simplified_layer_norm(node):
    if len(node.inputs) != 2 or not all(_present(node, i) for i in range(2)):
        return None
    elems = _elems(node, range(2))
    if len(elems) != 1 or not elems <= onnx_norm.RMS_FLOATS:
        return None
    stash = int(attr(node, "stash_type", T.FLOAT))
    if stash not in (T.FLOAT, T.DOUBLE):
        return None
    stash_dtype = F64 if stash == T.DOUBLE else F32
    axis, eps = int(attr(node, "axis", -1)), float(attr(node, "epsilon", 1e-5))
    n_out = max(wanted_outputs(node), 1)

    def run(x, scale):
        y = onnx_norm.rms_norm(x, scale, axis, eps, stash_dtype)
        if n_out == 1:
            return (y,)
        compute = F64 if x.dtype == F64 else stash_dtype
        return y, ms_norm.inv_rms(x, axis, eps, compute).astype(stash_dtype, copy=False)
    return run


register_microsoft("SimplifiedLayerNormalization")(build_simplified_layer_norm)
register_microsoft("SimplifiedLayerNormalization", domain="")(build_simplified_layer_norm)


@register_microsoft("EmbedLayerNormalization")
def build_embed_layer_norm(node):
    if len(node.inputs) < 7 or not all(_present(node, i) for i in (0, 2, 3, 5, 6)):
        return None
    if _elems(node, (2, 3, 4, 5, 6)) != {T.FLOAT} or not _elems(node, (0, 1, 7, 8)) <= {T.INT32}:
        return None
    eps = float(attr(node, "epsilon", 1e-12))
    n_out = max(wanted_outputs(node), 1)
    op = "EmbedLayerNormalization"

    def run(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None, gamma=None,
            beta=None, mask=None, position_ids=None):
        total = ms_norm.embedding_sum(op, input_ids, segment_ids, word_embedding, position_embedding,
                                      segment_embedding, position_ids)
        if mask is not None and mask.shape != input_ids.shape:
            raise ValueError(f"{op}: mask must have input_ids' shape {input_ids.shape}, got {mask.shape}")
        y = onnx_norm.layer_norm(total, gamma, beta, -1, eps, F32, 1, inplace=n_out < 3)[0]
        return [y, ms_norm.mask_index_of(mask, input_ids.shape[0]), total][:n_out]
    return run


# --- FusedMatMul, FusedConv, NhwcConv -----------------------------------------------------------------------------
def _packed(b):
    return ro(packed_gemm.pack_blocks(b))


@register_microsoft("FusedMatMul")
def build_fused_matmul(node):
    elems = _elems(node, (0, 1))
    if len(node.inputs) != 2 or len(elems) != 1 or not elems <= _F32_F64 or 0 in (rank_of(node, 0), rank_of(node, 1)):
        return None
    trans = tuple(int(attr(node, name, 0)) for name in ("transA", "transB", "transBatchA", "transBatchB"))
    alpha = float(attr(node, "alpha", 1.0))
    const_b = constant_input(node, 1)
    op_b = None  # op(B) of a constant 2-D B, contiguous, and its packed form, made once
    if const_b is not None and const_b.ndim == 2:
        op_b = ro(const_b.T if trans[1] else const_b)
    packed, constant = ConstantDerived(op_b, _packed), ConstantDerived(const_b, None)

    def run(a, b):
        a2, b2 = ms_fused.fused_matmul_operands(a, b, trans[0], trans[1], trans[2], trans[3])
        if op_b is not None and b2.ndim == 2 and constant.holds(b):
            b2 = op_b
        y = matmul(a2, b2, None, NO_ACTIVATION, packed)
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        return (y,)
    return run


@register_microsoft("FusedConv")
def build_fused_conv(node):
    return build_conv(NodeAs(node, "FusedConv", FUSED_DOMAIN, 1))


@register_microsoft("NhwcConv")
def build_nhwc_conv(node):
    conv = build_conv(NodeAs(node, "Conv", "", 11))
    if conv is None or rank_of(node, 0) not in (None, 4):
        return None

    def run(x, w, b=None):
        if x.ndim != 4:
            raise ValueError(f"NhwcConv: X must be [N, H, W, C], got shape {x.shape}")
        y = conv(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), w, b)[0]
        return (np.ascontiguousarray(y.transpose(0, 2, 3, 1)),)
    return run


# --- attention ---------------------------------------------------------------------------------------------------
class NativeCompute(ms_attention.ReferenceCompute):
    """The attention ops' arithmetic on the CPU provider's kernels (see the module docstring); `weights` is a
    constant projection weight (Attention's) to pack once, or None."""

    def __init__(self, weights=None):
        self.packed = ConstantDerived(weights, _packed)

    def matmul(self, a, b, bias=None):
        return matmul(a, b, None, NO_ACTIVATION, self.packed, bias)  # the bias added in the GEMM's epilogue

    def sdpa(self, p, q, k, v, bias):
        if p.sink is not None:
            raise AssertionError("the attention kernel has no sink logit: the builder declines such nodes")
        attrs = onnx_attention.AttentionAttrs(scale=p.scale, causal=False, softcap=p.softcap, qk_mode=p.qk_stage)
        out, _, _, qk = onnx_attention.attention(attrs, q, k, v, bias)
        return out, qk

    def rotate(self, x, cos, sin, interleaved, rotary_dim):
        # x [B, S, N, H] seen as RotaryEmbedding-23's 4-D [B, N, S, H], caches already gathered per position
        out = onnx_attention.rotary_embedding(x.transpose(0, 2, 1, 3), cos, sin, None, interleaved, rotary_dim, None)
        return out.transpose(0, 2, 1, 3)


def _attention_floats(node, float_inputs, allowed=_F32_ONLY) -> bool:
    """Whether the float inputs at `float_inputs` have one known type, of `allowed`."""
    elems = _elems(node, float_inputs)
    return len(elems) == 1 and elems <= allowed


ROTARY_ATTRS = dict.fromkeys(("interleaved", "num_heads", "rotary_embedding_dim", "is_packed_batching", "scale"))


@register_microsoft("RotaryEmbedding")
def build_rotary_embedding(node):
    if len(node.inputs) != 4 or not _attention_floats(node, (0, 2, 3)) or not _elems(node, (1,)) <= {T.INT64}:
        return None
    attrs = _attrs(node, ROTARY_ATTRS)
    if attrs.get("is_packed_batching"):
        return None
    compute = NativeCompute()

    def run(x, position_ids, cos_cache, sin_cache):
        return (ms_attention.rotary_embedding(compute, x, position_ids, cos_cache, sin_cache, **attrs),)
    return run


ATTENTION_ATTRS = dict.fromkeys(("num_heads", "qkv_hidden_sizes", "scale", "mask_filter_value", "unidirectional",
                                 "do_rotary", "rotary_embedding_dim", "past_present_share_buffer"))


@register_microsoft("Attention")
def build_attention(node):
    if not _attention_floats(node, (0, 1, 2, 4, 5)) or not _elems(node, (3, 6)) <= {T.INT32}:
        return None
    attrs = _attrs(node, ATTENTION_ATTRS)
    if attrs.get("do_rotary") or attrs.get("past_present_share_buffer"):
        return None
    compute = NativeCompute(constant_input(node, 1))
    n_out = max(wanted_outputs(node), 1)

    def run(*inputs):
        return ms_attention.attention(compute, n_out, *inputs, **attrs)[:n_out]
    return run


MHA_ATTRS = dict.fromkeys(("num_heads", "scale", "mask_filter_value", "unidirectional"))


@register_microsoft("MultiHeadAttention")
def build_multi_head_attention(node):
    if not _attention_floats(node, (0, 1, 2, 3, 5, 6, 7)) or not _elems(node, (4, 8, 9)) <= {T.INT32}:
        return None
    if _present(node, 8) or _present(node, 9):
        return None
    attrs = _attrs(node, MHA_ATTRS)
    compute = NativeCompute()
    n_out = max(wanted_outputs(node), 1)

    def run(*inputs):
        return ms_attention.multi_head_attention(compute, n_out, *inputs, **attrs)[:n_out]
    return run


GQA_ATTRS = dict.fromkeys(("num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "do_rotary",
                           "rotary_interleaved", "smooth_softmax", "qk_output", "causal", "sliding_window_cache",
                           "qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon", "k_quant_type", "v_quant_type",
                           "kv_cache_bit_width"))
_GQA_FLOAT_INPUTS = (0, 1, 2, 3, 4, 7, 8, 10, 14, 15)


@register_microsoft("GroupQueryAttention")
def build_group_query_attention(node):
    if not _attention_floats(node, _GQA_FLOAT_INPUTS) or any(_present(node, i) for i in (11, 12, 13, 16)):
        return None  # head_sink (a sink logit), quantized caches, query_seqlens: the fallback's reference
    attrs = _attrs(node, GQA_ATTRS)
    if attrs.get("smooth_softmax", -1) == 1 or attrs.get("sliding_window_cache") or \
            attrs.get("k_quant_type", "NONE") != "NONE" or attrs.get("v_quant_type", "NONE") != "NONE":
        return None
    compute = NativeCompute()
    n_out = max(wanted_outputs(node), 1)

    def run(*inputs):
        return ms_attention.group_query_attention(compute, n_out, dict(zip(ms_attention.GQA_INPUTS, inputs)),
                                                  **attrs)[:n_out]
    return run


DMMHA_ATTRS = dict.fromkeys(("num_heads", "scale", "mask_filter_value", "past_present_share_buffer", "output_qk"))


@register_microsoft("DecoderMaskedMultiHeadAttention")
def build_decoder_masked_multi_head_attention(node):
    if not _attention_floats(node, (0, 1, 2, 4, 5, 6, 10)) or not _elems(node, (3, 7, 8, 9)) <= {T.INT32}:
        return None
    attrs = _attrs(node, DMMHA_ATTRS)
    compute = NativeCompute()
    n_out = max(wanted_outputs(node), 1)

    def run(*inputs):
        return ms_attention.decoder_masked_multi_head_attention(
            compute, n_out, dict(zip(ms_attention.DMMHA_INPUTS, inputs)), **attrs)[:n_out]
    return run


# --- MatMulNBits -------------------------------------------------------------------------------------------------
@register_microsoft("MatMulNBits")
def build_matmul_nbits(node):
    elems = _elems(node, (0, 2, 5))  # A, scales and bias share A's type
    if len(elems) != 1 or not elems <= _F32_F64:
        return None
    n, k, block_size = attr(node, "N"), attr(node, "K"), attr(node, "block_size")
    bits = int(attr(node, "bits", 4))
    if n is None or k is None or block_size is None or int(attr(node, "weight_prepacked", 0)):
        return None
    n, k, block_size = int(n), int(k), int(block_size)
    quantized = [constant_input(node, i) if _present(node, i) else None for i in range(5)]
    constant = quantized[1] is not None and quantized[2] is not None and \
        all(quantized[i] is not None for i in (3, 4) if _present(node, i))
    dtype = F64 if elems == {T.DOUBLE} else F32

    def weights_of(b, scales, zero_points, g_idx):
        # [K, N]: the dequantized weight, transposed for the GEMM, in A's dtype
        w = ms_nbits.dequantize_weights(b, scales, zero_points, g_idx, n, k, bits, block_size)
        return ro(w.T.astype(dtype))
    const_w = None
    if constant and not ms_nbits.omitted(quantized[1]):
        try:
            const_w = weights_of(*quantized[1:5])
        except ValueError:
            pass  # a malformed constant: each run raises the error that names it
    packed, const_b = ConstantDerived(const_w, _packed), ConstantDerived(quantized[1], None)

    def run(a, b, scales, zero_points=None, g_idx=None, bias=None):
        ms_nbits.check_a(a, k)
        if bias is not None and bias.shape != (n,):
            raise ValueError(f"MatMulNBits: bias must be [{n}], got {list(bias.shape)}")
        if ms_nbits.omitted(b):
            y = np.zeros(a.shape[:-1] + (n,), a.dtype)
            return (y if bias is None else y + bias,)
        w = const_w if const_w is not None and const_b.holds(b) else weights_of(b, scales, zero_points, g_idx)
        return (matmul(a, w, None, NO_ACTIVATION, packed, bias),)  # the bias added in the GEMM's epilogue
    return run

