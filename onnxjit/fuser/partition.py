"""Grouping a provider partition's fusable nodes into kernels.

Nodes are visited in topological order. A fusable node joins the groups that produced its inputs when they
compute over the same (inferred, possibly symbolic) output shape and are still open; a group closes once a node
outside it reads one of its values, so merging can never create a cycle. A single node is a group of size one:
there is one code path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from onnx import TensorProto

from onnxjit.fuser.exprs import fusable, reduction_spec
from onnxjit.ir.graph import Node


_HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


@dataclass(eq=False)
class Group:
    nodes: list[Node] = field(default_factory=list)
    shape: tuple | None = None  # the iteration shape (for a reduction stage, its input's shape)
    closed: bool = False
    reduction: Node | None = None  # the last node, when the group ends in a reduction

    @property
    def inputs(self) -> list[str]:
        """Names the group reads from outside, in first-use order."""
        made = {v.name for n in self.nodes for v in n.outputs}
        seen: list[str] = []
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v.name not in made and v.name not in seen:
                    seen.append(v.name)
        return seen

    def outputs(self, external: set[str]) -> list[str]:
        """Values used outside the group (by other nodes, subgraphs or as graph outputs)."""
        members = set(self.nodes)
        outs = []
        for n in self.nodes:
            for v in n.outputs:
                if v.name in external or any(user not in members for user, _ in v.uses):
                    outs.append(v.name)
        return outs


def _value_shape_key(v) -> tuple | None:
    shape = getattr(v.type, "shape", None)
    return None if shape is None or any(d is None for d in shape) else tuple(shape)


def _shape_key(node: Node) -> tuple | None:
    if node.outputs[0].type.elem_type in _HALF:
        return None  # kernels compute halves in float32: alone, a node rounds its output as ONNX says it does
    return _value_shape_key(node.outputs[0])


def group_nodes(nodes: list[Node]) -> list[Group | Node]:
    """The partition as a list, in a valid execution order, of fused Groups and the other (non-fusable) nodes."""
    group_of: dict[str, Group] = {}  # value name -> group that produced it
    order: list[Group | Node] = []
    for node in nodes:
        # a node reads its inputs and, through its subgraphs, values captured by name
        reads = [v.name for v in node.inputs if v is not None] + [n for g in node.subgraphs() for n in g.outer_names]
        producers = {group_of[name] for name in reads if name in group_of}
        is_reduction = reduction_spec(node) is not None
        if is_reduction or fusable(node):
            if is_reduction:
                # a reduction ends the group computing its input, saving that value's round trip through memory
                key = _value_shape_key(node.inputs[0])
                candidates = [group_of[node.inputs[0].name]] if node.inputs[0].name in group_of else []
            else:
                key = _shape_key(node)
                candidates = list(producers)
            joinable = [g for g in candidates if not g.closed and key is not None and g.shape == key]
            if joinable:
                group = joinable[0]
                for other in joinable[1:]:  # open groups have no outside readers: merging is safe
                    group.nodes.extend(other.nodes)
                    for n in other.nodes:
                        for v in n.outputs:
                            group_of[v.name] = group
                    order.remove(other)
                group.nodes.append(node)
                # an open group has no outside readers, so it may run later: run it after this node's inputs
                order.remove(group)
                order.append(group)
            else:
                group = Group([node], key)
                order.append(group)
            if is_reduction:
                group.reduction = node
                group.closed = True
            for g in producers:
                if g is not group:
                    g.closed = True
            for v in node.outputs:
                group_of[v.name] = group
        else:
            for g in producers:
                g.closed = True
            order.append(node)
    position = {n: i for i, n in enumerate(nodes)}
    for item in order:
        if isinstance(item, Group):
            item.nodes.sort(key=position.__getitem__)
    return order
