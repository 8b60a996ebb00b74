"""Attention fusion (extended level, CPU provider): scores -> softmax -> context becomes one Attention node.

Matched (what torch exports for BERT and GPT-2 attention):
  scores = MatMul(Q, Kt), Kt = Transpose(K, perm [0, 1, 3, 2]) (composed with the Transpose that made it, if
           any; otherwise a Transpose of Kt is added), Q and Kt 4-D with equal [batch, heads] dims
  scale:   Mul/Div by one-element constants on the scores, on Q or on Kt (their product is `scale`)
  mask:    Add of a float mask that broadcasts into the scores without enlarging them (last dim the key length),
           or Where(bool mask, scores, c) with a constant c <= -1e4; a mask that is exactly causal (a constant
           lower triangle, or a Slice from 0 to the sequence length of a constant lower-triangular buffer) becomes
           is_causal = 1, any other is kept as attn_mask
  Softmax over the last axis, then MatMul(probabilities, V).
The Q/K/V projections and head reshapes stay as they are. The fused node is ai.onnx Attention (23) when the
model's opset has it, else com.onnxjit Attention (the same op), both run by the CPU provider's attention kernel.
A row whose keys are all masked gives zeros in Attention, where the decomposition gives the average of V (Where
with a finite c: the softmax of equal scores) or NaN (Where with -inf, or an additive mask -inf on the whole
row); a fused node with a mask is therefore com.onnxjit Attention with fully_masked_rows saying which. Masked
keys of other rows get weight exp(c - max) = 0 in float, as with the decomposition for any score above c + 745.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ops.registry import attr
from onnxjit.optimizer import CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (const_value, fresh_name, is_op, make_attr, only_consumer, rank_of,
                                       replace_with_node, scalar_const, tensor_type)

ATTENTION_SINCE = 23
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})  # the CPU kernel's
MASKED_BELOW = -1e4  # a Where fill at or below this gives masked keys a softmax weight of 0 in float


def _shape(v: Value | None) -> tuple | None:
    t = tensor_type(v)
    return None if t is None or t.shape is None else tuple(t.shape)


def _unscaled(v: Value, graph: Graph) -> tuple[Value, float, list[Node]]:
    """(u, factor, nodes) with v = u * factor through Mul/Div by one-element constants read by nothing else."""
    factor, nodes = 1.0, []
    while True:
        p = v.producer
        if not (is_op(p, "Mul", 2) or is_op(p, "Div", 2)) or only_consumer(v, graph) is None:
            return v, factor, nodes
        u = p.inputs[0]
        c = scalar_const(p.inputs[1], graph, rank_of(v))
        if c is None and p.op_type == "Mul":
            u, c = p.inputs[1], scalar_const(p.inputs[0], graph, rank_of(v))
        if c is None or c == 0 or scalar_const(u, graph, rank_of(v)) is not None:
            return v, factor, nodes
        factor *= c if p.op_type == "Mul" else 1 / c
        nodes.append(p)
        v = u


def _broadcasts_into(mask: Value, scores_shape: tuple) -> bool:
    """Whether `mask` broadcasts into the scores' shape without enlarging it, its last dim the key length."""
    shape = _shape(mask)
    if shape is None or not shape or len(shape) > len(scores_shape):
        return False
    for m, s in zip(shape[::-1], scores_shape[::-1]):
        if not (m == 1 or (m is not None and m == s)):
            return False
    return shape[-1] is not None and shape[-1] == scores_shape[-1]


def _is_lower_triangle(c: np.ndarray, allowed) -> bool:
    """Whether constant c is [1..., n, n] with allowed(c) exactly on and below the diagonal."""
    if c.ndim < 2 or c.shape[-1] != c.shape[-2] or any(d != 1 for d in c.shape[:-2]):
        return False
    square = c.reshape(c.shape[-2:])
    return bool(np.array_equal(allowed(square), np.tril(np.ones(square.shape, bool))))


# --- shape expressions: the values of small int64 tensors computed from shapes ------------------------------------
def _dims_of(v: Value | None, graph: Graph, depth: int = 0) -> list | None:
    """The elements (ints or symbolic dim names) of a 0-D/1-D int tensor computed from Shape/Gather/Unsqueeze/
    Concat/Cast/constants, or None."""
    if v is None or depth > 8:
        return None
    c = const_value(v, graph)
    if c is not None:
        return [int(a) for a in c.reshape(-1)] if c.dtype.kind in "iu" and c.ndim <= 1 else None
    p = v.producer
    if p is None or p.domain != "":
        return None
    if p.op_type == "Shape":
        shape = _shape(p.inputs[0])
        if shape is None or any(d is None for d in shape):
            return None
        start, end = int(attr(p, "start", 0)), attr(p, "end")
        return list(shape[start:None if end is None else int(end)])
    if p.op_type in ("Cast", "Unsqueeze", "Squeeze", "Identity"):
        return _dims_of(p.inputs[0], graph, depth + 1)
    if p.op_type == "Gather" and int(attr(p, "axis", 0)) == 0:
        src, idx = _dims_of(p.inputs[0], graph, depth + 1), const_value(p.inputs[1], graph)
        if src is None or idx is None or idx.ndim > 1:
            return None
        return [src[int(i)] for i in idx.reshape(-1)] if all(-len(src) <= i < len(src) for i in idx.reshape(-1)) \
            else None
    if p.op_type == "Concat":
        out = []
        for u in p.inputs:
            d = _dims_of(u, graph, depth + 1)
            if d is None:
                return None
            out += d
        return out
    return None


def _is_causal_slice(cond: Value, graph: Graph, scores_shape: tuple) -> bool:
    """Whether cond = Slice(lower-triangular constant buffer)[..., :S, :S] with S the scores' (square) sequence
    length: the causal mask GPT-2 exports."""
    p = cond.producer
    if not is_op(p, "Slice") or p.opset < 10 or len(p.inputs) < 4:
        return False
    buffer = const_value(p.inputs[0], graph)
    starts, axes = const_value(p.inputs[1], graph), const_value(p.inputs[3], graph)
    steps = const_value(p.inputs[4], graph) if len(p.inputs) > 4 and p.inputs[4] is not None else None
    ends = _dims_of(p.inputs[2], graph)
    if buffer is None or starts is None or axes is None or ends is None or buffer.dtype != np.bool_:
        return False
    if len(p.inputs) > 4 and p.inputs[4] is not None and (steps is None or np.any(steps != 1)):
        return False
    rank = buffer.ndim
    axes = sorted((int(a) % rank, int(s), e) for a, s, e in zip(axes.reshape(-1), starts.reshape(-1), ends))
    s, total = scores_shape[-2:]
    return [a[0] for a in axes] == [rank - 2, rank - 1] and all(a[1] == 0 for a in axes) \
        and s is not None and s == total and all(a[2] == s for a in axes) \
        and _is_lower_triangle(buffer, lambda m: m)


def _mask(z: Value, graph: Graph, dtype: int):
    """(scores value, attn_mask Value or None, is_causal, what a fully masked row gives (see module doc), nodes)
    for the value z fed to the softmax."""
    p = z.producer
    if is_op(p, "Add", 2) and only_consumer(z, graph) is not None:
        for scores, mask in (p.inputs, p.inputs[::-1]):
            shape = _shape(scores)
            if scores is mask or shape is None or len(shape) != 4 or tensor_type(mask) is None \
                    or tensor_type(mask).elem_type != dtype or not _broadcasts_into(mask, shape):
                continue
            c = const_value(mask, graph)
            if c is not None and c.shape[-2:] == tuple(shape[-2:]) and _is_lower_triangle(c, lambda m: m == 0) \
                    and np.all(c[..., ~np.tril(np.ones(c.shape[-2:], bool))] <= MASKED_BELOW):
                return scores, None, True, "zeros", [p]
            return scores, mask, False, "nan", [p]
        return None
    if is_op(p, "Where", 3) and only_consumer(z, graph) is not None:
        cond, scores, fill = p.inputs
        shape = _shape(scores)
        c = scalar_const(fill, graph, 4)
        t = tensor_type(cond)
        if c is None or c > MASKED_BELOW or t is None or t.elem_type != TensorProto.BOOL or shape is None \
                or len(shape) != 4:
            return None
        cc = const_value(cond, graph)
        if cc is not None and cc.shape[-2:] == tuple(shape[-2:]) and _is_lower_triangle(cc, lambda m: m):
            return scores, None, True, "zeros", [p]
        if _is_causal_slice(cond, graph, shape):
            return scores, None, True, "zeros", [p]
        rows = "nan" if c == -np.inf else "uniform"
        return (scores, cond, False, rows, [p]) if _broadcasts_into(cond, shape) else None
    return z, None, False, "zeros", []


def _key_for(kt: Value, graph: Graph, anchor: Node) -> tuple[Value, list[Node]] | None:
    """K ([B, H, L, D]) for K^T = kt: the input of the Transpose that made kt when that one swaps the last two
    axes, else a Transpose of that input with the composed permutation, else a new Transpose of kt. Returns the
    value and the nodes that disappear."""
    p = kt.producer
    swap = [0, 1, 3, 2]
    if is_op(p, "Transpose", 1) and only_consumer(kt, graph) is not None and attr(p, "perm") is not None:
        perm = [int(a) for a in attr(p, "perm")]
        composed = [perm[i] for i in swap]
        if composed == [0, 1, 2, 3]:
            return p.inputs[0], [p]
        p.attributes["perm"] = make_attr("perm", composed)  # reused: it now makes K instead of K^T
        out = p.outputs[0]
        out.type = None if tensor_type(out) is None or tensor_type(out).shape is None else type(out.type)(
            out.type.elem_type, tuple(out.type.shape[i] for i in swap))
        return out, []
    shape = _shape(kt)
    if shape is None or len(shape) != 4:
        return None
    k = Value(fresh_name(graph, f"{kt.name}_key"), type(kt.type)(kt.type.elem_type, tuple(shape[i] for i in swap)))
    graph.insert_before(anchor, Node("Transpose", [kt], [k], name=fresh_name(graph, f"{kt.name}_transpose",
                                     {n.name for n in graph.nodes}), attributes={"perm": make_attr("perm", swap)},
                                     opset=anchor.opset))
    return k, []


def _softmax_last_axis(sm: Node) -> bool:
    rank = rank_of(sm.inputs[0])
    if rank is None or len(sm.inputs) != 1:
        return False
    axis = int(attr(sm, "axis", -1 if sm.opset >= 13 else 1))
    return axis in (-1, rank - 1)


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_attention(graph: Graph, ctx: PassContext) -> int:
    count = 0
    for sm in list(graph.nodes):
        if sm.graph is not graph or not is_op(sm, "Softmax", 1) or not _softmax_last_axis(sm):
            continue
        p = sm.outputs[0]
        pv = only_consumer(p, graph)
        if not is_op(pv, "MatMul", 2) or pv.inputs[0] is not p:
            continue
        v = pv.inputs[1]
        t = tensor_type(sm.inputs[0])
        if t is None or t.elem_type not in FLOAT_TYPES:
            continue
        masked = _mask(sm.inputs[0], graph, t.elem_type)
        if masked is None:
            continue
        scaled, mask, causal, fully_masked_rows, mask_nodes = masked
        scores, factor, scale_nodes = _unscaled(scaled, graph)
        qk = scores.producer
        if not is_op(qk, "MatMul", 2) or only_consumer(scores, graph) is None:
            continue
        q, q_factor, q_nodes = _unscaled(qk.inputs[0], graph)
        kt, k_factor, k_nodes = _unscaled(qk.inputs[1], graph)
        shapes = [_shape(q), _shape(kt), _shape(v)]
        if any(s is None or len(s) != 4 or None in s[:2] for s in shapes) or not (
                shapes[0][:2] == shapes[1][:2] == shapes[2][:2]):
            continue  # MatMul would broadcast batch or heads; Attention does not
        if any(tensor_type(a) is None or tensor_type(a).elem_type != t.elem_type for a in (q, kt, v)):
            continue
        key = _key_for(kt, graph, qk)
        if key is None:
            continue
        k, k_dead = key
        nodes = [*q_nodes, *k_nodes, *k_dead, qk, *scale_nodes, *mask_nodes, sm, pv]
        inputs = [q, k, v] + ([mask] if mask is not None else [])
        attrs = {"scale": factor * q_factor * k_factor}
        if causal:
            attrs["is_causal"] = 1
        if fully_masked_rows != "zeros":
            attrs["fully_masked_rows"] = fully_masked_rows
        replace_with_node(graph, ctx, nodes, "Attention", inputs, [pv.outputs[0]], attrs,
                          standard=ctx.opset("") >= ATTENTION_SINCE and fully_masked_rows == "zeros")
        count += 1
    return count
