"""The in-memory graph the optimizer and fuser rewrite.

A Value knows its producer and its uses, so a rewrite stays local (`replace_all_uses_with`). A Graph holds its
nodes in topological order; subgraphs (If/Loop/Scan bodies) are Graphs owned by a node attribute and may read
values of enclosing graphs by name (`Graph.outer_names`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from onnx import AttributeProto

from onnxjit.ir.types import ValueType


class Value:
    """A named value: a graph input, an initializer (`const` set), or a node output."""

    __slots__ = ("name", "type", "producer", "uses", "const")

    def __init__(self, name: str, type: ValueType | None = None, const: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.uses: list[tuple[Node, int]] = []  # (consumer, input index)
        self.const = const

    def replace_all_uses_with(self, other: "Value") -> None:
        for node, i in list(self.uses):
            node.set_input(i, other)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


@dataclass
class Attr:
    """A node attribute. `value` is the Python value (a Graph for GRAPH, a list of Graphs for GRAPHS, the
    proto for TENSOR/SPARSE_TENSOR/TYPE_PROTO); `ref_attr_name` is set inside function bodies."""

    name: str
    type: int  # onnx.AttributeProto.AttributeType
    value: Any
    ref_attr_name: str = ""
    doc_string: str = ""


class Node:
    __slots__ = ("op_type", "domain", "name", "inputs", "outputs", "attributes", "opset", "doc_string", "graph")

    def __init__(self, op_type: str, inputs: list[Value | None], outputs: list[Value], *, domain: str = "",
                 name: str = "", attributes: dict[str, Attr] | None = None, opset: int = 0, doc_string: str = ""):
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self.inputs: list[Value | None] = []
        self.outputs = outputs
        self.attributes = attributes or {}
        self.opset = opset  # the model's opset version for this node's domain
        self.doc_string = doc_string
        self.graph: Graph | None = None
        for v in inputs:
            self.inputs.append(v)
            if v is not None:
                v.uses.append((self, len(self.inputs) - 1))
        for v in outputs:
            v.producer = self

    def set_input(self, i: int, value: Value | None) -> None:
        old = self.inputs[i]
        if old is not None:
            old.uses.remove((self, i))
        self.inputs[i] = value
        if value is not None:
            value.uses.append((self, i))

    def subgraphs(self) -> Iterator["Graph"]:
        for a in self.attributes.values():
            if isinstance(a.value, Graph):
                yield a.value
            elif a.type == AttributeProto.GRAPHS:  # (by type, not by scanning: a tree ensemble's lists hold
                # 800,000 numbers, and this runs hundreds of times a session creation: 30 s for a random forest)
                yield from (g for g in a.value if isinstance(g, Graph))

    @property
    def label(self) -> str:
        """How errors name this node: `Add (node 'add_1', ai.onnx opset 17)`."""
        dom = self.domain or "ai.onnx"
        return f"{self.op_type} (node {self.name!r}, domain {dom} opset {self.opset})"

    def __repr__(self) -> str:
        return f"Node({self.op_type}, {[v.name if v else '' for v in self.inputs]} -> {[v.name for v in self.outputs]})"


@dataclass
class Graph:
    name: str = ""
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    initializers: dict[str, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    doc_string: str = ""
    parent: "Graph | None" = None
    outer_names: list[str] = field(default_factory=list)  # names read from enclosing graphs, in first-use order

    def append(self, node: Node) -> Node:
        node.graph = self
        self.nodes.append(node)
        return node

    def remove(self, node: Node) -> None:
        for i in range(len(node.inputs)):
            node.set_input(i, None)
        self.nodes.remove(node)
        node.graph = None

    def insert_before(self, anchor: Node, node: Node) -> Node:
        """Put `node` just before `anchor` (where its inputs are already computed in a topological order)."""
        node.graph = self
        self.nodes.insert(self.nodes.index(anchor), node)
        return node

    def add_initializer(self, name: str, array: np.ndarray) -> Value:
        from onnxjit.ir.types import TensorType, elem_type_of
        v = Value(name, TensorType(elem_type_of(array.dtype), tuple(array.shape)), array)
        self.initializers[name] = v
        return v

    def outer_constant(self, name: str) -> np.ndarray | None:
        """The constant that the enclosing graph defining `name` (this graph reads it from outside) holds under
        it: an initializer no feed can override (not among that graph's inputs), else None."""
        g = self.parent
        while g is not None:
            v = g.initializers.get(name)
            if v is not None:
                return None if any(i.name == name for i in g.inputs) else v.const
            if name not in g.outer_names:
                return None  # an input or a node output of that graph
            g = g.parent
        return None

    def bind_outer_constants(self) -> None:
        """Give the Values this graph reads from enclosing graphs the constants they are there (`outer_constant`),
        so its kernels treat them as the main graph's treat its own: weights transposed or packed once, not at
        every iteration of a Loop or Scan body. Done when the body is compiled, after the optimizer: a captured
        constant is not one of this graph's initializers, so no pass folds or rewrites it."""
        captured = set(self.outer_names)
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v.const is None and v.name in captured:
                    v.const = self.outer_constant(v.name)

    def external_names(self) -> set[str]:
        """Names read outside the node-to-node edges: the graph's outputs and the values its nodes' subgraphs
        capture by name (a value a nested subgraph reads is captured by each graph between, so the direct
        subgraphs name them all)."""
        names = {v.name for v in self.outputs}
        for n in self.nodes:
            for g in n.subgraphs():
                names.update(g.outer_names)
        return names

    def names(self) -> set[str]:
        """Every name defined in this graph and the graphs nested in it (fresh names must avoid all of them)."""
        names = {v.name for v in self.inputs} | set(self.initializers) | set(self.outer_names)
        for n in self.nodes:
            names.update(v.name for v in n.outputs)
            for g in n.subgraphs():
                names |= g.names()
        return names

    def sort(self) -> None:
        """Restore topological order after a rewrite, keeping the current order wherever it is already valid."""
        ready = {v.name for v in self.inputs} | set(self.initializers) | set(self.outer_names) | {""}
        pending, ordered = list(self.nodes), []
        while pending:
            rest = []
            for n in pending:
                needs = [v.name for v in n.inputs if v is not None] + [
                    name for g in n.subgraphs() for name in g.outer_names]
                if all(name in ready for name in needs):
                    ordered.append(n)
                    ready.update(v.name for v in n.outputs)
                else:
                    rest.append(n)
            if len(rest) == len(pending):  # a cycle or a read of an undefined name: keep the remainder as it was
                ordered.extend(rest)
                break
            pending = rest
        self.nodes = ordered

    def all_nodes(self) -> Iterator[Node]:
        """Every node, including those inside subgraphs."""
        for n in self.nodes:
            yield n
            for g in n.subgraphs():
                yield from g.all_nodes()


@dataclass
class Model:
    graph: Graph
    ir_version: int
    opset_imports: dict[str, int]
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    metadata_props: dict[str, str] = field(default_factory=dict)
