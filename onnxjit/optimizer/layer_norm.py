"""LayerNormalization and SkipLayerNormalization fusions (extended level, CPU provider).

fuse_layer_norm: the decomposition torch exports before opset 17,
  mean = ReduceMean(x); d = x - mean; var = ReduceMean(d^2 | d * d); std = Sqrt(var + eps);
  y = d / std | d * Reciprocal(std); [y * gamma]; [+ beta]
both means over the last axis alone with keepdims (axes an attribute before opset 18, an input from 18),
becomes one LayerNormalization (axis -1, epsilon eps): ai.onnx's at opset >= 17, else com.onnxjit's (the same
op). gamma and beta must be vectors over the last axis (a one-element constant is widened); without them the
scale is ones. Every intermediate must be read by the pattern alone (d by its two readers). The statistics are
computed in float32 (float64 for double) where the decomposition rounds each step in the input dtype.

fuse_skip_layer_norm: a LayerNormalization over the last axis whose input is a residual Add (with an optional
bias Add of a constant [hidden] vector folded in) becomes com.onnxjit SkipLayerNormalization; other readers of
the sum read its fourth output. It also takes LayerNormalization nodes the model had.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ops.registry import attr
from onnxjit.optimizer import CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (const_value, fresh_name, is_op, only_consumer, other_input, pinned_names,
                                       rank_of, replace_with_node, scalar_const, static_shape, tensor_type)

FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})
LAYER_NORM_SINCE = 17
_REDUCE_AXES_INPUT_SINCE = 18


def _mean_over_last_axis(node: Node | None, graph: Graph) -> bool:
    """Whether `node` is a ReduceMean of its input over the last axis alone, keeping dims."""
    if not is_op(node, "ReduceMean") or not node.inputs or node.inputs[0] is None or not attr(node, "keepdims", 1):
        return False
    if node.opset >= _REDUCE_AXES_INPUT_SINCE:
        axes_v = node.inputs[1] if len(node.inputs) > 1 else None
        axes = const_value(axes_v, graph) if axes_v is not None else None
        axes = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    else:
        axes = attr(node, "axes")
        axes = None if axes is None else [int(a) for a in axes]
    rank = rank_of(node.inputs[0])
    return axes is not None and len(axes) == 1 and (axes[0] == -1 or (rank is not None and axes[0] == rank - 1))


def _last_dim(x: Value) -> int | None:
    t = tensor_type(x)
    if t is None or not t.shape or not isinstance(t.shape[-1], int):
        return None
    return t.shape[-1]


def _param_vector(v: Value, n: int, rank: int, dtype: np.dtype, graph: Graph) -> Value | None:
    """`v` as a [n] vector that multiplies or adds over the last axis of a rank-`rank` tensor without changing
    its shape: v itself when it has shape [n]; a new initializer when it is a constant of shape [1..., n] or a
    one-element constant; None otherwise."""
    shape = static_shape(v)
    if shape is None or len(shape) > rank or any(d != 1 for d in shape[:-1]) or (shape and shape[-1] not in (1, n)):
        return None
    if shape == (n,):
        return v
    c = const_value(v, graph)
    if c is None or c.dtype != dtype:
        return None
    return graph.add_initializer(fresh_name(graph, f"{v.name}_vector"), np.ascontiguousarray(
        np.broadcast_to(c.reshape(-1), (n,))))


def _match_layer_norm(r1: Node, graph: Graph):
    """(x, eps, matched nodes in order, the normalized value, gamma and beta Values or None) or None."""
    x = r1.inputs[0]
    mean = r1.outputs[0]
    sub = only_consumer(mean, graph)
    if not is_op(sub, "Sub", 2) or sub.inputs[0] is not x or sub.inputs[1] is not mean:
        return None
    d = sub.outputs[0]
    readers = list(dict.fromkeys(n for n, _ in d.uses))
    if len(readers) != 2 or d.name in pinned_names(graph):
        return None
    sq = next((n for n in readers if (is_op(n, "Pow", 2) and n.inputs[0] is d
                                      and scalar_const(n.inputs[1], graph, rank_of(d)) == 2.0)
               or (is_op(n, "Mul", 2) and n.inputs[0] is d and n.inputs[1] is d)), None)
    norm = next((n for n in readers if n is not sq), None)
    if sq is None or norm is None:
        return None
    r2 = only_consumer(sq.outputs[0], graph)
    if r2 is None or r2.inputs[0] is not sq.outputs[0] or not _mean_over_last_axis(r2, graph):
        return None
    add_eps = only_consumer(r2.outputs[0], graph)
    if not is_op(add_eps, "Add", 2):
        return None
    eps = scalar_const(other_input(add_eps, r2.outputs[0]), graph, rank_of(x))
    sqrt = only_consumer(add_eps.outputs[0], graph)
    if eps is None or eps < 0 or not is_op(sqrt, "Sqrt", 1):
        return None
    std = sqrt.outputs[0]
    nodes = [r1, sub, sq, r2, add_eps, sqrt]
    if is_op(norm, "Div", 2) and norm.inputs[0] is d and norm.inputs[1] is std and only_consumer(std, graph) is norm:
        nodes.append(norm)
    elif is_op(norm, "Mul", 2):
        rstd = other_input(norm, d)
        recip = rstd.producer if rstd is not None and rstd is not d else None
        is_recip = is_op(recip, "Reciprocal", 1) or (is_op(recip, "Div", 2) and recip.inputs[1] is std
                                                   and scalar_const(recip.inputs[0], graph, rank_of(x)) == 1.0)
        if not is_recip or recip.inputs[-1] is not std or only_consumer(std, graph) is not recip \
                or only_consumer(rstd, graph) is not norm:
            return None
        nodes += [recip, norm]
    else:
        return None
    return x, eps, nodes, norm.outputs[0]


def _trailing_param(y: Value, op_type: str, n: int, rank: int, dtype: np.dtype,
                    graph: Graph) -> tuple[Value | None, Node | None]:
    """(p, node) when y's only reader is op_type(y, p) with p a per-feature constant (gamma's Mul, beta's Add),
    else (None, None)."""
    node = only_consumer(y, graph)
    if is_op(node, op_type, 2) and other_input(node, y) is not y:
        p = _param_vector(other_input(node, y), n, rank, dtype, graph)
        if p is not None:
            return p, node
    return None, None


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_layer_norm(graph: Graph, ctx: PassContext) -> int:
    count = 0
    for node in list(graph.nodes):
        if node.graph is not graph or not _mean_over_last_axis(node, graph):
            continue
        match = _match_layer_norm(node, graph)
        t = tensor_type(node.inputs[0])
        n, rank = _last_dim(node.inputs[0]), rank_of(node.inputs[0])
        if match is None or t is None or t.elem_type not in FLOAT_TYPES or n is None or not rank:
            continue
        x, eps, nodes, y = match
        if tensor_type(y) is None or tensor_type(y).elem_type != t.elem_type:
            continue
        beta = None
        gamma, mul = _trailing_param(y, "Mul", n, rank, t.dtype, graph)
        if gamma is not None:
            nodes.append(mul)
            y = mul.outputs[0]
            beta, add = _trailing_param(y, "Add", n, rank, t.dtype, graph)
            if beta is not None:
                nodes.append(add)
                y = add.outputs[0]
        if gamma is None:
            gamma = graph.add_initializer(fresh_name(graph, f"{x.name}_ln_scale"), np.ones(n, t.dtype))
        attrs = {"axis": -1, "epsilon": eps}
        if t.elem_type == TensorProto.DOUBLE:
            attrs["stash_type"] = TensorProto.DOUBLE  # statistics in double, as the decomposition computes them
        replace_with_node(graph, ctx, nodes, "LayerNormalization", [x, gamma, beta] if beta is not None else
                          [x, gamma], [y], attrs, standard=ctx.opset("") >= LAYER_NORM_SINCE)
        count += 1
    return count


def _is_layer_norm(node: Node) -> bool:
    return node.op_type == "LayerNormalization" and (
        (node.domain == "" and node.opset >= LAYER_NORM_SINCE) or node.domain == "com.onnxjit")


def _bias_split(v: Value, add: Node, n: int, graph: Graph) -> tuple[Value, Value] | None:
    """(u, bias) when `v` = u + bias for a constant [n] bias and the residual `add` is v's only reader."""
    p = v.producer
    if not is_op(p, "Add", 2) or only_consumer(v, graph) is not add:
        return None
    for u, b in (p.inputs, p.inputs[::-1]):
        if u is not b and static_shape(b) == (n,) and const_value(b, graph) is not None:
            return u, b
    return None


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_skip_layer_norm(graph: Graph, ctx: PassContext) -> int:
    count = 0
    for ln in list(graph.nodes):
        if ln.graph is not graph or not _is_layer_norm(ln) or len(ln.inputs) < 2 or ln.inputs[1] is None:
            continue
        total, gamma = ln.inputs[0], ln.inputs[1]
        beta = ln.inputs[2] if len(ln.inputs) > 2 else None
        t, rank, n = tensor_type(total), rank_of(total), _last_dim(total) if total is not None else None
        residual = total.producer if total is not None else None
        if t is None or t.elem_type not in FLOAT_TYPES or not rank or n is None or not is_op(residual, "Add", 2):
            continue
        axis = int(attr(ln, "axis", -1))
        stash = int(attr(ln, "stash_type", TensorProto.FLOAT))
        wanted_stash = TensorProto.DOUBLE if t.elem_type == TensorProto.DOUBLE else TensorProto.FLOAT
        stats_used = any(v is not None and v.name for v in ln.outputs[1:])
        if axis not in (-1, rank - 1) or (stash != wanted_stash and stats_used):
            continue
        if stash != wanted_stash and t.elem_type == TensorProto.DOUBLE:
            continue  # a double LayerNormalization computing in float: SkipLayerNormalization would compute in double
        if any(p is not None and (static_shape(p) is None or len(static_shape(p)) > 1) for p in (gamma, beta)):
            continue
        if any(tensor_type(v) is None or tensor_type(v).elem_type != t.elem_type for v in residual.inputs):
            continue
        x, skip = residual.inputs
        bias = None
        nodes = []
        for i, v in enumerate((x, skip)):
            split = _bias_split(v, residual, n, graph)
            if split is not None:
                (x, bias), skip = split, residual.inputs[1 - i]
                nodes.append(v.producer)
                break
        nodes += [residual, ln]
        sum_elsewhere = any(user is not ln for user, _ in total.uses) or total.name in pinned_names(graph)
        outs = list(ln.outputs[:3]) + [None] * (3 - len(ln.outputs[:3]))
        outs = [v if v is not None and v.name else None for v in outs]
        if sum_elsewhere:
            outs.append(total)
        inputs = [x, skip, gamma, beta, bias]
        while inputs[-1] is None:
            inputs.pop()
        replace_with_node(graph, ctx, nodes, "SkipLayerNormalization", inputs, outs,
                          {"epsilon": float(attr(ln, "epsilon", 1e-5))}, standard=False)
        count += 1
    return count
