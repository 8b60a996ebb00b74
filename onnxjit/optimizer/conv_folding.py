"""Folding into Conv (basic level), and Relu/Clip merging.

`fold_conv_scale_bias`: a Conv with constant weights (and constant bias, or none) whose output's only reader is
  - BatchNormalization in inference (opset 7+, spatial; constant 1-D scale/bias/mean/var of the output channels):
    W' = W * s per output channel, B' = (B - mean) * s + bias, with s = scale / sqrt(var + epsilon);
  - Add of a constant that varies only along the output channels ([M], [M,1,1], [1,M,1,1], a scalar...):
    B' = B + c;
  - Mul of such a constant: W' = W * c per output channel, B' = B * c;
becomes the Conv alone with new weight and bias initializers (the old ones stay for their other readers, and go
with dead-node elimination otherwise). The arithmetic is done in float64 and cast back to the weights' dtype.

`batchnorm_as_affine`: a BatchNormalization in inference that is left (its input is no Conv's to fold into: after
a Concat or a pooling, as in DenseNet's pre-activation blocks) becomes Mul(x, s) then Add(., bias - mean * s) with
per-channel constants [C, 1, ...]: the elementwise fuser then computes it in one kernel with the Mul/Add/Relu
around it, one pass over memory where the BatchNormalization kernel was a pass of its own.

`merge_relu_clip`: Relu then Clip is Clip with min = max(min, 0); Clip then Relu is Clip with min = max(min, 0)
and max = max(max, 0). Clip's bounds are attributes before opset 11 and constant inputs since.
"""
from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import TensorType
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import (attr_value, clip_bound_inputs, const_value, fresh_name, make_attr,
                                       pinned_names, replace_value, set_input, tensor_type)

FLOAT_DTYPES = frozenset({np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)})


def _sole_reader(v: Value, pinned: set[str]) -> Node | None:
    return v.uses[0][0] if len(v.uses) == 1 and v.name not in pinned else None


def _unread(values: list[Value], pinned: set[str]) -> bool:
    return all(not v.name or (not v.uses and v.name not in pinned) for v in values)


def _batch_norm_params(bn: Node, graph: Graph, channels: int, pinned: set[str]):
    """(scale, bias, mean, var, epsilon) of a BatchNormalization in inference, None when it is not one."""
    if bn.opset < 7 or len(bn.inputs) != 5 or not _unread(bn.outputs[1:], pinned):
        return None
    if attr_value(bn, "spatial", 1) != 1 or attr_value(bn, "training_mode", 0) != 0:
        return None
    params = [const_value(v, graph) for v in bn.inputs[1:]]
    if any(p is None or p.shape != (channels,) or p.dtype.kind != "f" for p in params):
        return None
    return (*(p.astype(np.float64) for p in params), float(attr_value(bn, "epsilon", 1e-5)))


def _per_channel(c: np.ndarray | None, rank: int, channels: int, dtype: np.dtype) -> np.ndarray | None:
    """`c` as one float64 value per output channel, when adding or multiplying it into a Conv output of `rank`
    only varies along the channels (and does not broadcast the output to a larger shape)."""
    if c is None or c.dtype != dtype or c.ndim > rank:
        return None
    padded = (1,) * (rank - c.ndim) + c.shape
    if padded[0] != 1 or padded[1] not in (1, channels) or any(d != 1 for d in padded[2:]):
        return None
    return np.broadcast_to(c.astype(np.float64).reshape(-1), (channels,))


@graph_pass(BASIC)
def fold_conv_scale_bias(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    taken: set[str] | None = None
    folded = 0
    for conv in list(graph.nodes):
        if conv.op_type != "Conv" or conv.domain != "" or len(conv.outputs) != 1 or len(conv.inputs) < 2:
            continue
        w = const_value(conv.inputs[1], graph)
        b_in = conv.inputs[2] if len(conv.inputs) > 2 else None
        b = const_value(b_in, graph) if b_in is not None else None
        if w is None or w.dtype not in FLOAT_DTYPES or w.ndim < 3 or (b_in is not None and b is None):
            continue
        y = conv.outputs[0]
        reader = _sole_reader(y, pinned)
        if reader is None or reader.domain != "" or reader.graph is not graph:
            continue
        channels = w.shape[0]
        scale = np.ones(channels)
        bias = np.zeros(channels) if b is None else b.astype(np.float64)
        if reader.op_type == "BatchNormalization" and reader.inputs[0] is y:
            params = _batch_norm_params(reader, graph, channels, pinned)
            if params is None:
                continue
            bn_scale, bn_bias, mean, var, epsilon = params
            scale = bn_scale / np.sqrt(var + epsilon)
            bias = (bias - mean) * scale + bn_bias
        elif reader.op_type in ("Add", "Mul") and len(reader.inputs) == 2:
            other = reader.inputs[1] if reader.inputs[0] is y else reader.inputs[0]
            c = _per_channel(const_value(other, graph), w.ndim, channels, w.dtype)
            if c is None:
                continue
            if reader.op_type == "Add":
                bias = bias + c
            else:
                scale, bias = c, bias * c
        else:
            continue
        taken = taken if taken is not None else graph.names()
        factor = scale.reshape((-1,) + (1,) * (w.ndim - 1))
        # float32 weights scaled in float32 (as onnxruntime's fusion does; a rounding of the factor, one of the
        # product): in float64 the copies took 0.1 s of resnet50's session creation, a tenth in float32
        new_w = w * factor.astype(np.float32) if w.dtype == np.float32 else \
            (w.astype(np.float64) * factor).astype(w.dtype)
        set_input(conv, 1, graph.add_initializer(fresh_name(graph, f"{conv.inputs[1].name}_folded", taken), new_w))
        bias_name = b_in.name if b_in is not None else f"{conv.inputs[1].name}_bias"
        set_input(conv, 2, graph.add_initializer(fresh_name(graph, f"{bias_name}_folded", taken),
                                                 bias.astype(w.dtype)))
        replace_value(graph, reader.outputs[0], y)
        graph.remove(reader)
        folded += 1
    return folded


@graph_pass(BASIC)
def batchnorm_as_affine(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    taken: set[str] | None = None
    rewritten = 0
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain != "" or bn.graph is not graph:
            continue
        x_type = tensor_type(bn.inputs[0])
        scale = const_value(bn.inputs[1], graph) if len(bn.inputs) == 5 else None
        if x_type is None or x_type.shape is None or len(x_type.shape) < 2 or scale is None or scale.ndim != 1 \
                or x_type.dtype not in FLOAT_DTYPES:
            continue
        params = _batch_norm_params(bn, graph, scale.shape[0], pinned)
        if params is None:
            continue
        bn_scale, bn_bias, mean, var, epsilon = params
        s = bn_scale / np.sqrt(var + epsilon)
        shape = (-1,) + (1,) * (len(x_type.shape) - 2)
        taken = taken if taken is not None else graph.names()
        base = bn.name or bn.outputs[0].name
        s_v = graph.add_initializer(fresh_name(graph, f"{base}_scale", taken), s.reshape(shape).astype(x_type.dtype))
        b_v = graph.add_initializer(fresh_name(graph, f"{base}_shift", taken),
                                    (bn_bias - mean * s).reshape(shape).astype(x_type.dtype))
        scaled = Value(fresh_name(graph, f"{base}_scaled", taken), TensorType(x_type.elem_type, x_type.shape))
        node_names = {n.name for n in graph.nodes}
        mul = Node("Mul", [bn.inputs[0], s_v], [scaled], name=fresh_name(graph, f"{base}_mul", node_names),
                   opset=ctx.opset(""))
        add = Node("Add", [scaled, b_v], [bn.outputs[0]], name=fresh_name(graph, f"{base}_add", node_names),
                   opset=ctx.opset(""))
        graph.insert_before(bn, mul)
        graph.insert_before(bn, add)  # takes over the output Value: its name, readers and graph-output place
        graph.remove(bn)
        rewritten += 1
    return rewritten


def _clip_bounds(clip: Node, graph: Graph) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """Clip's (min, max), None for one left out; None when one is an input that is not a constant scalar."""
    if clip.opset < 11:
        lo, hi = attr_value(clip, "min"), attr_value(clip, "max")
        return (None if lo is None else np.float64(lo)), (None if hi is None else np.float64(hi))
    return clip_bound_inputs(clip, graph)


def _set_clip_bounds(clip: Node, graph: Graph, lo, hi, taken: set[str]) -> None:
    if clip.opset < 11:
        for name, bound in (("min", lo), ("max", hi)):
            if bound is not None:
                clip.attributes[name] = make_attr(name, float(bound))
        return
    for i, bound in ((1, lo), (2, hi)):
        if bound is not None:
            name = fresh_name(graph, f"{clip.name or 'clip'}_{'min' if i == 1 else 'max'}", taken)
            set_input(clip, i, graph.add_initializer(name, np.asarray(bound)))


@graph_pass(BASIC)
def merge_relu_clip(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    taken: set[str] | None = None
    merged = 0
    for first in list(graph.nodes):
        if first.domain != "" or first.op_type not in ("Relu", "Clip") or len(first.outputs) != 1 \
                or first.graph is not graph:
            continue
        second = _sole_reader(first.outputs[0], pinned)
        want = "Clip" if first.op_type == "Relu" else "Relu"
        if second is None or second.op_type != want or second.domain != "" or second.inputs[0] is not first.outputs[0]:
            continue
        clip = second if want == "Clip" else first
        bounds = _clip_bounds(clip, graph) if clip.opset >= 6 else None  # Clip-1's bounds have no defaults
        if bounds is None:
            continue
        lo, hi = bounds
        if clip.opset < 11:
            dtype = np.dtype(np.float64)  # attribute bounds are floats
        else:  # input bounds are scalars of the input's type
            x_type = tensor_type(first.inputs[0])
            dtype = next((b.dtype for b in (lo, hi) if b is not None), x_type.dtype if x_type is not None else None)
        if dtype is None:
            continue
        zero = np.zeros((), dtype=dtype)
        new_lo = np.maximum(lo, zero) if lo is not None else zero
        new_hi = hi if hi is None or want == "Clip" else np.maximum(hi, zero)  # Clip then Relu also lifts max
        taken = taken if taken is not None else graph.names()
        _set_clip_bounds(clip, graph, new_lo, new_hi, taken)
        if want == "Clip":  # Relu -> Clip: the Clip reads the Relu's input
            clip.set_input(0, first.inputs[0])
            graph.remove(first)
        else:  # Clip -> Relu: the Clip's output stands for the Relu's
            replace_value(graph, second.outputs[0], first.outputs[0])
            graph.remove(second)
        merged += 1
    return merged
