"""Chains of layout-only ops collapse (basic level).

`merge_transposes`: Transpose(Transpose(x, p1), p2) is Transpose(x, [p1[i] for i in p2]); where that perm is the
identity, the pair goes altogether. `merge_reshapes`: a Reshape of a Reshape, Squeeze, Unsqueeze or Flatten output
reshapes that op's input directly (row-major reshapes compose), when its target does not copy dims from its input
(no 0 in it, allowzero=1, or the input's static shape to write in for the 0s).

The second node is rewritten to read the first's input, so a first node with other readers stays for them (and is
no more work than before); one read by no one else is removed.
"""
from __future__ import annotations

import numpy as np

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import (attr_value, can_replace, constant_ints, fresh_name, make_attr, pinned_names,
                                       replace_value, set_input, static_shape, tensor_type)

COLLAPSIBLE = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def _feeding(node: Node, op_types) -> Node | None:
    """The default-domain producer of node's first input, when it is one of `op_types`."""
    v = node.inputs[0] if node.inputs else None
    p = v.producer if v is not None else None
    return p if p is not None and p.domain == "" and p.op_type in op_types and len(p.outputs) == 1 else None


def _drop_if_unread(graph: Graph, node: Node, pinned: set[str]) -> None:
    if not node.outputs[0].uses and node.outputs[0].name not in pinned:
        graph.remove(node)


def _perm(node: Node) -> list[int] | None:
    perm = attr_value(node, "perm")
    if perm is not None:
        return [int(p) for p in perm]
    t = tensor_type(node.inputs[0])
    return None if t is None or t.shape is None else list(reversed(range(len(t.shape))))


@graph_pass(BASIC)
def merge_transposes(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    merged = 0
    for second in list(graph.nodes):
        if second.op_type != "Transpose" or second.domain != "" or second.graph is not graph:
            continue
        first = _feeding(second, ("Transpose",))
        if first is None:
            continue
        p1, p2 = _perm(first), _perm(second)
        if p1 is None or p2 is None or sorted(p1) != sorted(p2) or sorted(p2) != list(range(len(p2))):
            continue
        x = first.inputs[0]
        composed = [p1[i] for i in p2]
        if composed == list(range(len(composed))) and can_replace(graph, second.outputs[0], x, pinned):
            replace_value(graph, second.outputs[0], x)
            graph.remove(second)
        else:
            second.set_input(0, x)
            second.attributes["perm"] = make_attr("perm", composed)
        _drop_if_unread(graph, first, pinned)
        merged += 1
    return merged


def _independent_target(node: Node, graph: Graph, middle: Value) -> tuple[int, ...] | None:
    """The Reshape's target shape with its 0s (copies of its input's dims) written out, so it no longer depends on
    its input's shape; None when it does and they cannot be."""
    known, target = constant_ints(node, graph, "shape", 1, since=5)
    if not known or target is None:
        return None
    if attr_value(node, "allowzero", 0) or 0 not in target:
        return target
    shape = static_shape(middle)
    if shape is None or any(d == 0 and i >= len(shape) for i, d in enumerate(target)):
        return None
    return tuple(shape[i] if d == 0 else d for i, d in enumerate(target))


@graph_pass(BASIC)
def merge_reshapes(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    taken: set[str] | None = None
    merged = 0
    for second in list(graph.nodes):
        if second.op_type != "Reshape" or second.domain != "" or second.graph is not graph:
            continue
        first = _feeding(second, COLLAPSIBLE)
        if first is None or not first.inputs or first.inputs[0] is None:
            continue
        target = _independent_target(second, graph, second.inputs[0])
        if target is None and not attr_value(second, "allowzero", 0):  # allowzero: any target is independent
            continue
        if target is not None and target != constant_ints(second, graph, "shape", 1, since=5)[1]:  # 0s written out
            if second.opset < 5:
                second.attributes["shape"] = make_attr("shape", list(target))
            else:
                taken = taken if taken is not None else graph.names()
                name = fresh_name(graph, f"{second.inputs[1].name}_resolved", taken)
                set_input(second, 1, graph.add_initializer(name, np.array(target, dtype=np.int64)))
        second.set_input(0, first.inputs[0])
        _drop_if_unread(graph, first, pinned)
        merged += 1
    return merged
