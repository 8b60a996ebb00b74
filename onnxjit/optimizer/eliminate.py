"""Node elimination (basic level): nodes that pass their input through unchanged, and nodes no one reads.

`eliminate_noops` removes Identity; Dropout in inference (training_mode absent or a constant false, mask output
unread; any ratio, and Dropout-1/6's is_test ignored, as onnxruntime does); Cast to the input's own type (and
CastLike); Reshape to the input's static shape; Transpose with the identity perm; Pad with all-zero pads (any mode:
nothing is added); Slice covering the whole tensor; Expand to a shape that does not change the input's;
Unsqueeze/Squeeze pairs over the same axes; and multiplying or dividing by constant ones or subtracting constant
(+)zeros that do not broadcast the input larger (LightGBM's exports multiply their probabilities by 1). Readers of the
removed node's output read its input instead; where
that output is a graph output (or read by a subgraph) the input takes over its name, which a graph input,
initializer or another pinned value cannot: then the node stays.

`eliminate_dead_nodes` removes nodes none of whose outputs is read (by a node, as a graph output, or by name from a
subgraph), and initializers no one reads.
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import (attr_value, can_replace, const_value, constant_ints, pinned_names,
                                       rank_of, replace_value, static_shape, tensor_type)


def _dropout_is_identity(node: Node, graph: Graph, pinned: set[str]) -> bool:
    if len(node.outputs) > 1 and node.outputs[1].name and (node.outputs[1].uses or node.outputs[1].name in pinned):
        return False  # the mask is read
    training = node.inputs[2] if node.opset >= 12 and len(node.inputs) > 2 else None
    if training is None:
        return True
    mode = const_value(training, graph)
    return mode is not None and mode.size == 1 and not bool(mode.reshape(-1)[0])


def _reshaped(shape: tuple[int, ...], target: tuple[int, ...], allowzero: bool) -> tuple[int, ...] | None:
    """Reshape's output shape for an input of static `shape`, None when the target is invalid."""
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                return None
            d = shape[i]
        out.append(d)
    total = math.prod(shape)
    if out.count(-1) == 1:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            return None
        out[out.index(-1)] = total // known
    if any(d < 0 for d in out) or math.prod(out) != total:
        return None
    return tuple(out)


def _reshape_is_identity(node: Node, graph: Graph) -> bool:
    shape = static_shape(node.inputs[0])
    known, target = constant_ints(node, graph, "shape", 1, since=5)
    return (shape is not None and known and target is not None
            and _reshaped(shape, target, bool(attr_value(node, "allowzero", 0))) == shape)


def _transpose_is_identity(node: Node) -> bool:
    perm = attr_value(node, "perm")
    if perm is None:
        rank = rank_of(node.inputs[0])
        return rank is not None and rank <= 1
    return list(perm) == list(range(len(perm)))


def _pad_is_identity(node: Node, graph: Graph) -> bool:
    if node.opset < 2:
        known, pads = True, attr_value(node, "paddings")
    else:
        known, pads = constant_ints(node, graph, "pads", 1, since=11)
    return known and pads is not None and not any(pads)


def _slice_is_identity(node: Node, graph: Graph) -> bool:
    shape = static_shape(node.inputs[0])
    operands = [constant_ints(node, graph, name, i, since=10) for i, name in
                enumerate(("starts", "ends", "axes", "steps"), start=1)]
    if shape is None or not all(known for known, _ in operands):
        return False
    starts, ends, axes, steps = (values for _, values in operands)
    if starts is None or ends is None or len(starts) != len(ends):
        return False
    axes = axes if axes is not None else tuple(range(len(starts)))
    steps = steps if steps is not None else (1,) * len(starts)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if not -len(shape) <= axis < len(shape) or step != 1:
            return False
        dim = shape[axis]
        start = min(max(start + dim if start < 0 else start, 0), dim)
        end = min(max(end + dim if end < 0 else end, 0), dim)
        if start != 0 or end != dim:
            return False
    return True


def _expand_is_identity(node: Node, graph: Graph) -> bool:
    shape = static_shape(node.inputs[0])
    target = const_value(node.inputs[1], graph) if len(node.inputs) > 1 else None
    if shape is None or target is None or target.dtype.kind not in "iu":
        return False
    try:
        return np.broadcast_shapes(shape, tuple(int(d) for d in target.reshape(-1))) == shape
    except ValueError:
        return False


def _axes(node: Node, graph: Graph, rank: int | None) -> tuple[int, ...] | None:
    """Squeeze's or Unsqueeze's explicit axes, non-negative in a tensor of `rank` (Squeeze's input, Unsqueeze's
    output)."""
    known, axes = constant_ints(node, graph, "axes", 1, since=13)
    if not known or not axes:
        return None
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = tuple(a + rank for a in axes)
    return tuple(sorted(axes))


def _cancelled_pair(node: Node, graph: Graph) -> Value | None:
    """The input of an Unsqueeze that `node`, a Squeeze over the same axes, undoes (or the other way around)."""
    first = node.inputs[0].producer if node.inputs and node.inputs[0] is not None else None
    want = {"Squeeze": "Unsqueeze", "Unsqueeze": "Squeeze"}[node.op_type]
    if first is None or first.op_type != want or first.domain != "" or not first.inputs:
        return None
    x = first.inputs[0]
    # both node's axes are counted in the larger of the two ranks: Squeeze's input, Unsqueeze's output
    rank = rank_of(node.inputs[0]) if node.op_type == "Squeeze" else rank_of(x)
    a, b = _axes(first, graph, rank), _axes(node, graph, rank)
    return x if a is not None and a == b else None


def _arithmetic_identity(node: Node, graph: Graph) -> Value | None:
    """x of x * 1, 1 * x, x / 1 or x - 0 (+0 only), where the constant's every element is the identity and it
    broadcasts without changing x's shape. These are exact in IEEE arithmetic, NaN, infinities and -0 included;
    x + 0 and x - (-0) are not (-0 + 0 is +0), and stay."""
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    op, (a, b) = node.op_type, node.inputs
    unit = 0 if op == "Sub" else 1
    for x, c in ([(a, b), (b, a)] if op == "Mul" else [(a, b)]):
        k = const_value(c, graph)
        if k is None or k.size == 0 or not np.all(k == unit) or (unit == 0 and np.any(np.signbit(k))):
            continue
        shape, rank = static_shape(x), rank_of(x)
        if shape is not None:
            try:
                if np.broadcast_shapes(shape, k.shape) == shape:
                    return x
            except ValueError:
                continue
        elif k.ndim == 0 or (rank is not None and k.ndim <= rank and all(d == 1 for d in k.shape)):
            return x  # (a 0-d constant broadcasts over any shape without changing it)
    return None


def passed_through(node: Node, graph: Graph, pinned: set[str]) -> Value | None:
    """The input `node` outputs unchanged, when it is a no-op."""
    if node.domain != "" or not node.inputs or node.inputs[0] is None or not node.outputs:
        return None
    op, x = node.op_type, node.inputs[0]
    if op == "Identity":
        same = True
    elif op == "Dropout":
        same = _dropout_is_identity(node, graph, pinned)
    elif op in ("Cast", "CastLike"):
        t = tensor_type(x)
        to = attr_value(node, "to") if op == "Cast" else (
            tensor_type(node.inputs[1]).elem_type if len(node.inputs) > 1 and tensor_type(node.inputs[1]) else None)
        same = t is not None and to is not None and t.elem_type == to
    elif op == "Reshape":
        same = _reshape_is_identity(node, graph)
    elif op == "Transpose":
        same = _transpose_is_identity(node)
    elif op == "Pad":
        same = _pad_is_identity(node, graph)
    elif op == "Slice":
        same = _slice_is_identity(node, graph)
    elif op == "Expand":
        same = _expand_is_identity(node, graph)
    elif op in ("Squeeze", "Unsqueeze"):
        return _cancelled_pair(node, graph)
    elif op in ("Mul", "Div", "Sub"):
        return _arithmetic_identity(node, graph)
    else:
        same = False
    return x if same else None


@graph_pass(BASIC)
def eliminate_noops(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    removed = 0
    for node in list(graph.nodes):
        x = passed_through(node, graph, pinned)
        out = node.outputs[0]
        if x is None or not can_replace(graph, out, x, pinned):
            continue
        replace_value(graph, out, x)
        graph.remove(node)
        removed += 1
    return removed


@graph_pass(BASIC)
def eliminate_dead_nodes(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    removed = 0
    for node in reversed(list(graph.nodes)):  # readers before producers: a chain of dead nodes goes in one sweep
        if not any(v.name and (v.uses or v.name in pinned) for v in node.outputs):
            graph.remove(node)
            removed += 1
    inputs = {v.name for v in graph.inputs}
    for name, v in list(graph.initializers.items()):
        if not v.uses and name not in pinned and name not in inputs:
            del graph.initializers[name]
            removed += 1
    return removed
