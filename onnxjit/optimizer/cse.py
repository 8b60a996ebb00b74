"""Common subexpression elimination (basic level): a node computed twice is computed once.

`merge_equal_initializers` first makes small initializers of equal dtype, shape and bytes one (exporters write a
fresh copy of a shape or an axis for each node), so that the nodes reading them become equal too.
`eliminate_common_subexpressions` then keeps the first of nodes with the same op, domain, attributes and inputs
and makes readers of the others read its outputs. Nodes with subgraphs and random ops are never merged. Where a
duplicate's output is a graph output, the kept node's output takes over its name; when both are pinned (two graph
outputs), both nodes stay.
"""
from __future__ import annotations

from typing import Hashable

from onnxjit.ir.graph import Graph, Node
from onnxjit.ir.serde import attr_to_proto
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import can_replace, pinned_names, replace_value

MAX_SHARED_BYTES = 256  # initializers merged by value: shapes, axes, scalars; large weights are never compared
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli", "Dropout"})


@graph_pass(BASIC)
def merge_equal_initializers(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph) | {v.name for v in graph.inputs}  # read by name, or overridable by a feed
    kept: dict[Hashable, object] = {}
    merged = 0
    for name, v in list(graph.initializers.items()):
        a = v.const
        if name in pinned or a is None or a.dtype.kind not in "biuf" or a.nbytes > MAX_SHARED_BYTES or not v.uses:
            continue
        key = (a.dtype.str, a.shape, a.tobytes())
        first = kept.setdefault(key, v)
        if first is not v:
            v.replace_all_uses_with(first)
            del graph.initializers[name]
            merged += 1
    return merged


def _key(node: Node) -> Hashable | None:
    """What makes two nodes compute the same outputs but their attributes, None for nodes never merged."""
    if node.op_type in NONDETERMINISTIC or any(True for _ in node.subgraphs()) or not node.outputs:
        return None
    inputs = list(node.inputs)
    while inputs and inputs[-1] is None:  # a trailing absent input is the same as one left out
        inputs.pop()
    return (node.domain, node.op_type, node.opset, tuple(id(v) if v is not None else None for v in inputs),
            tuple(bool(v.name) for v in node.outputs))


_UNMERGEABLE = object()  # the attributes of a node that must never be merged


def _attributes(node: Node) -> Hashable:
    """The node's attributes as comparable bytes (_UNMERGEABLE where one does not serialize). Made only for
    nodes whose _key another node shares: serializing a tree ensemble's 800,000-number lists took 0.5 s."""
    try:
        return tuple(sorted((k, attr_to_proto(a).SerializeToString(deterministic=True))
                            for k, a in node.attributes.items()))
    except Exception:  # noqa: BLE001 - an attribute that does not serialize: leave the node alone
        return _UNMERGEABLE


@graph_pass(BASIC)
def eliminate_common_subexpressions(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    # _key -> the nodes kept with it so far, each with its _attributes once a later node needed them
    kept_with: dict[Hashable, list[list]] = {}
    merged = 0
    for node in list(graph.nodes):  # topological order: a merge makes the readers of both equal in turn
        key = _key(node)
        if key is None:
            continue
        kept_nodes = kept_with.get(key)
        if kept_nodes is None:
            kept_with[key] = [[node, None]]
            continue
        attrs = _attributes(node)
        kept = None
        for entry in kept_nodes:
            if entry[1] is None:
                entry[1] = _attributes(entry[0])
            if attrs is not _UNMERGEABLE and entry[1] == attrs:
                kept = entry[0]
                break
        if kept is None:
            kept_nodes.append([node, attrs])
            continue
        pairs = [(dup, out) for dup, out in zip(node.outputs, kept.outputs) if dup.name]
        if not all(can_replace(graph, dup, out, pinned) for dup, out in pairs):
            continue
        for dup, out in pairs:
            replace_value(graph, dup, out)
        graph.remove(node)
        merged += 1
    return merged
