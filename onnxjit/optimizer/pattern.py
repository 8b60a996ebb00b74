"""Helpers passes use to match and rewrite patterns in the IR."""
from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.ir.graph import Attr, Graph, Node, Value
from onnxjit.ir.types import TensorType


# Facts about a graph that passes ask for per node, so computing them each time made a pass quadratic (0.85 of
# the 2.3 s densenet121 took to optimize): its input Values, and the names it must keep. Passes never add graph
# inputs, outputs or subgraphs, and keep the names of the outputs they replace, so within one `optimize` run the
# facts can only grow stale by removing a subgraph, which leaves extra names pinned: conservative. `optimize`
# forgets them when it starts and ends; the graph itself is kept with them so an id is never mistaken.
_FACTS: dict[int, tuple[Graph, frozenset[int], frozenset[str]]] = {}


def _facts(graph: Graph) -> tuple[frozenset[int], frozenset[str]]:
    entry = _FACTS.get(id(graph))
    if entry is None or entry[0] is not graph:
        entry = _FACTS[id(graph)] = (graph, frozenset(id(v) for v in graph.inputs),
                                     frozenset(graph.external_names()))
    return entry[1], entry[2]


def forget_graph_facts() -> None:
    _FACTS.clear()


def const_value(v: Value | None, graph: Graph) -> np.ndarray | None:
    """The value of `v` when it is a constant: an initializer that no feed can override. (Constant nodes become
    initializers in constant folding, the first basic pass.)"""
    if v is None or v.const is None or v.producer is not None:
        return None
    if graph.initializers.get(v.name) is not v or id(v) in _facts(graph)[0]:
        return None
    return v.const


def pinned_names(graph: Graph) -> frozenset[str]:
    """Names a rewrite must keep: graph outputs and values read by name from subgraphs."""
    return _facts(graph)[1]


def only_consumer(v: Value, graph: Graph) -> Node | None:
    """The single node reading `v`, when there is exactly one and `v` is not a graph output or read by a
    subgraph (so the value may disappear into a fusion)."""
    if len(v.uses) != 1 or v.name in pinned_names(graph):
        return None
    return v.uses[0][0]


def clip_bound_inputs(clip: Node, graph: Graph) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """Clip's (min, max) inputs (opset 11 on) as 0-d arrays, None for one left out; None when a given bound is
    not a constant scalar."""
    bounds = []
    for i in (1, 2):
        v = clip.inputs[i] if len(clip.inputs) > i else None
        c = const_value(v, graph) if v is not None else None
        if v is not None and (c is None or c.size != 1):
            return None
        bounds.append(None if c is None else c.reshape(()))
    return bounds[0], bounds[1]


def is_op(node: Node | None, op_type: str, n_inputs: int | None = None) -> bool:
    """Whether `node` is an ai.onnx `op_type` with one output (and `n_inputs` inputs, when given)."""
    return node is not None and node.op_type == op_type and node.domain == "" and len(node.outputs) == 1 \
        and (n_inputs is None or len(node.inputs) == n_inputs)


def replace_value(graph: Graph, old: Value, new: Value) -> None:
    """Make every reader of `old` read `new`. Where `old` is a graph output or read by a subgraph by name,
    `new` takes over its name (so outputs keep their names), which needs `new` to be a node output no one
    else names."""
    old.replace_all_uses_with(new)
    if old.name in pinned_names(graph):
        if new.producer is None or new.name in pinned_names(graph):
            raise ValueError(f"cannot replace pinned value {old.name!r} by {new.name!r}")
        new.name = old.name
        if new.type is None or (old.type is not None and any(o is old for o in graph.outputs)):
            new.type = old.type  # a graph output's declared type is what callers see (get_outputs)
        graph.outputs = [new if o is old else o for o in graph.outputs]


def fresh_name(graph: Graph, base: str, taken: set[str] | None = None) -> str:
    taken = taken if taken is not None else graph.names()
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def make_attr(name: str, value: Any) -> Attr:
    """An Attr from a Python value, typed as onnx.helper would type it."""
    from onnx import helper
    p = helper.make_attribute(name, value)
    return Attr(name, p.type, value.encode() if isinstance(value, str) else value)


def tensor_type(v: Value | None) -> TensorType | None:
    return v.type if v is not None and isinstance(v.type, TensorType) else None


def static_shape(v: Value | None) -> tuple[int, ...] | None:
    t = tensor_type(v)
    if t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(t.shape)


def remove_nodes(graph: Graph, nodes: list[Node]) -> None:
    for n in nodes:
        graph.remove(n)


# --- helpers of the transformer fusions (layer_norm, gelu, attention) --------------------------------------------
def scalar_const(v: Value | None, graph: Graph, rank: int | None) -> float | None:
    """The value of `v` when it is a one-element float constant that broadcasts into a tensor of rank `rank`
    without changing its shape (its rank is at most `rank`; an unknown rank allows only 0-D)."""
    c = const_value(v, graph)
    if c is None or c.size != 1 or c.dtype.kind != "f" or c.ndim > (rank if rank is not None else 0):
        return None
    return float(c.reshape(-1)[0])


def close_to(value: float | None, expected: float, rtol: float = 1e-4) -> bool:
    return value is not None and abs(value - expected) <= rtol * abs(expected)


def other_input(node: Node, v: Value) -> Value | None:
    """The other input of a two-input node that reads `v` (v itself for x op x), None when it does not read v."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    return b if a is v else a if b is v else None


def rank_of(v: Value | None) -> int | None:
    t = tensor_type(v)
    return None if t is None or t.shape is None else len(t.shape)


def replace_with_node(graph: Graph, ctx: Any, matched: list[Node], op_type: str, inputs: list[Value | None],
                      olds: list[Value | None], attrs: dict[str, Any], standard: bool) -> Node:
    """Put one node computing the values `olds` (None for an unused output) in place of the `matched` nodes:
    ai.onnx `op_type` at the model's opset when `standard`, else com.onnxjit's (declared in ctx). The new node
    goes before the last matched node; `olds`' readers read its outputs; the matched nodes are removed."""
    from onnxjit.contrib import DOMAIN, VERSION
    taken = graph.names()
    outs = [Value(fresh_name(graph, f"{old.name}_{op_type.lower()}" if old is not None else "", taken),
                  old.type) if old is not None else Value("") for old in olds]
    while outs and not outs[-1].name:
        outs.pop()
    if not standard:
        ctx.use_domain(DOMAIN, VERSION)
    node = Node(op_type, inputs, outs, domain="" if standard else DOMAIN,
                name=fresh_name(graph, f"{op_type}_{matched[-1].name or 'fused'}", {n.name for n in graph.nodes}),
                attributes={k: make_attr(k, v) for k, v in attrs.items()},
                opset=ctx.opset("") if standard else VERSION)
    graph.insert_before(matched[-1], node)
    for old, new in zip(olds, outs):
        if old is not None:
            replace_value(graph, old, new)
    read = [v for n in matched for v in n.inputs if v is not None]
    remove_nodes(graph, matched)
    remove_dead_producers(graph, read)
    return node


def remove_dead_producers(graph: Graph, values: list[Value]) -> None:
    """Remove the nodes that computed `values` when no one reads any of their outputs any more (say a mask's
    computation after the fusion that read it), and so on up the chain."""
    pinned = pinned_names(graph)
    stack = list(values)
    while stack:
        p = stack.pop().producer
        if p is None or p.graph is not graph or any(v.uses or v.name in pinned for v in p.outputs) \
                or any(True for _ in p.subgraphs()):
            continue
        stack.extend(v for v in p.inputs if v is not None)
        graph.remove(p)


def attr_value(node: Node, name: str, default: Any = None) -> Any:
    """The Python value of attribute `name`, or `default` when the node does not set it."""
    a = node.attributes.get(name)
    return default if a is None or a.ref_attr_name else a.value


def set_input(node: Node, i: int, value: Value | None) -> None:
    """Make input `i` of `node` read `value`, adding absent inputs up to `i` where the node has fewer."""
    while len(node.inputs) <= i:
        node.inputs.append(None)
    node.set_input(i, value)


def can_replace(graph: Graph, old: Value, new: Value, pinned: set[str] | None = None) -> bool:
    """Whether `replace_value(graph, old, new)` can keep every pinned name: `old` is not pinned, or `new` is a node
    output that is itself not pinned (so it can take `old`'s name)."""
    pinned = pinned if pinned is not None else pinned_names(graph)
    return old.name not in pinned or (new.producer is not None and new.name not in pinned)


def constant_ints(node: Node, graph: Graph, name: str, index: int, since: int) -> tuple[bool, tuple[int, ...] | None]:
    """An int-list operand that opset `since` moved from attribute `name` to input `index` (Squeeze's axes,
    Slice's starts, Pad's pads...): (known, values), values None when the node leaves it out, known False when it
    is an input that is not a constant."""
    if node.opset < since:
        value = attr_value(node, name)
        return True, None if value is None else tuple(int(x) for x in value)
    v = node.inputs[index] if index < len(node.inputs) else None
    if v is None:
        return True, None
    c = const_value(v, graph)
    if c is None or c.dtype.kind not in "iu":
        return False, None
    return True, tuple(int(x) for x in c.reshape(-1))
