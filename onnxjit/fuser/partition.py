"""Grouping a provider partition's fusable nodes into kernels.

Nodes are visited in topological order. A fusable node joins the groups that produced its inputs when they
compute over the same (inferred, possibly symbolic) output shape and are still open; a group closes once a node
outside it reads one of its values, so merging can never create a cycle. A single node is a group of size one:
there is one code path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from onnxjit.fuser.exprs import fusable
from onnxjit.ir.graph import Node


@dataclass(eq=False)
class Group:
    nodes: list[Node] = field(default_factory=list)
    shape: tuple | None = None
    closed: bool = False

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


def _shape_key(node: Node) -> tuple | None:
    shape = node.outputs[0].type.shape
    return None if shape is None or any(d is None for d in shape) else tuple(shape)


def group_nodes(nodes: list[Node]) -> list[Group | Node]:
    """The partition as a list, in a valid execution order, of fused Groups and the other (non-fusable) nodes."""
    group_of: dict[str, Group] = {}  # value name -> group that produced it
    order: list[Group | Node] = []
    for node in nodes:
        # a node reads its inputs and, through its subgraphs, values captured by name
        reads = [v.name for v in node.inputs if v is not None] + [n for g in node.subgraphs() for n in g.outer_names]
        producers = {group_of[name] for name in reads if name in group_of}
        if fusable(node):
            key = _shape_key(node)
            joinable = [g for g in producers if not g.closed and key is not None and g.shape == key]
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
