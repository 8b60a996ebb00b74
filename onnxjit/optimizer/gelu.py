"""GELU fusion (extended level, CPU provider): the erf and tanh decompositions torch exports become one Gelu.

  erf:  x * 0.5 * (1 + erf(x / sqrt(2)))                          (x / 1.4142 or x * 0.7071)
  tanh: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))  (Pow(x, 3) or x * x * x)

The final product of x, 0.5 (or a division by 2) and (1 + erf/tanh) matches in any association and operand
order. Constants must be one-element floats within 1e-4 (relative) of the exact values; every intermediate must
have the matched node as its only reader. The fused node is ai.onnx Gelu (opset 20) when the model's opset has it,
else com.onnxjit Gelu (the same op); the fuser renders both.
"""
from __future__ import annotations

import math

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import TensorType
from onnxjit.optimizer import CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (close_to, is_op, only_consumer, other_input, rank_of, replace_with_node,
                                       scalar_const, tensor_type)

FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16
GELU_SINCE = 20


def _scaled(node: Node | None, v: Value, graph: Graph, factor: float) -> bool:
    """Whether `node` computes v * factor: Mul by a constant close to factor (either order) or Div by one close
    to 1 / factor."""
    rank = rank_of(v)
    if is_op(node, "Mul", 2):
        other = other_input(node, v)
        return other is not None and other is not v and close_to(scalar_const(other, graph, rank), factor)
    if is_op(node, "Div", 2) and node.inputs[0] is v:
        return close_to(scalar_const(node.inputs[1], graph, rank), 1 / factor)
    return False


def _one_plus(v: Value, graph: Graph) -> Node | None:
    """The Add computing 1 + v, when it is v's only reader."""
    add = only_consumer(v, graph)
    if not is_op(add, "Add", 2):
        return None
    other = other_input(add, v)
    return add if other is not v and close_to(scalar_const(other, graph, rank_of(v)), 1.0) else None


def _half_x_times(a: Value, x: Value, graph: Graph) -> list[Node] | None:
    """The nodes computing x * 0.5 * a (any association and order, 0.5 as Mul or Div by 2), the last node's output
    being the product; None when they do not."""
    m1 = only_consumer(a, graph)
    if m1 is None:
        return None
    if _scaled(m1, a, graph, 0.5):  # (a * 0.5) * x
        m2 = only_consumer(m1.outputs[0], graph)
        return [m1, m2] if is_op(m2, "Mul", 2) and other_input(m2, m1.outputs[0]) is x else None
    if not is_op(m1, "Mul", 2):
        return None
    o1 = other_input(m1, a)
    if o1 is x:  # (x * a) * 0.5
        m2 = only_consumer(m1.outputs[0], graph)
        return [m1, m2] if _scaled(m2, m1.outputs[0], graph, 0.5) else None
    half = o1.producer if o1 is not None else None  # (x * 0.5) * a
    if half is not None and x in half.inputs and only_consumer(o1, graph) is m1 and _scaled(half, x, graph, 0.5):
        return [half, m1]
    return None


def _match_erf(erf: Node, graph: Graph) -> tuple[Value, list[Node]] | None:
    u = erf.inputs[0] if erf.inputs else None
    scale = u.producer if u is not None else None
    if scale is None or only_consumer(u, graph) is not erf or not scale.inputs:
        return None
    x = next((v for v in scale.inputs if v is not None and scalar_const(v, graph, rank_of(v)) is None), None)
    if x is None or not _scaled(scale, x, graph, 1 / math.sqrt(2)):
        return None
    add = _one_plus(erf.outputs[0], graph)
    tail = _half_x_times(add.outputs[0], x, graph) if add is not None else None
    return None if tail is None else (x, [scale, erf, add, *tail])


def _cube_nodes(cube: Value, x: Value, graph: Graph) -> list[Node] | None:
    """The nodes computing x^3 as Pow(x, 3) or x * (x * x) in any order."""
    p = cube.producer
    if is_op(p, "Pow", 2) and p.inputs[0] is x and scalar_const(p.inputs[1], graph, rank_of(x)) == 3.0:
        return [p]
    if not is_op(p, "Mul", 2):
        return None
    sq = other_input(p, x)
    if sq is None or sq is x:
        return None
    q = sq.producer
    if is_op(q, "Mul", 2) and q.inputs[0] is x and q.inputs[1] is x and only_consumer(sq, graph) is p:
        return [q, p]
    return None


def _match_tanh(tanh: Node, graph: Graph) -> tuple[Value, list[Node]] | None:
    t = tanh.inputs[0] if tanh.inputs else None
    k_mul = t.producer if t is not None else None
    if not is_op(k_mul, "Mul", 2) or only_consumer(t, graph) is not tanh:
        return None
    inner = next((v for v in k_mul.inputs if scalar_const(v, graph, rank_of(v)) is None), None)
    if inner is None or not _scaled(k_mul, inner, graph, math.sqrt(2 / math.pi)) \
            or only_consumer(inner, graph) is not k_mul:
        return None
    add = inner.producer
    if not is_op(add, "Add", 2):
        return None
    for w, x in (add.inputs, add.inputs[::-1]):
        c_mul = w.producer
        if w is x or not is_op(c_mul, "Mul", 2) or only_consumer(w, graph) is not add:
            continue
        cube = next((v for v in c_mul.inputs if scalar_const(v, graph, rank_of(v)) is None), None)
        if cube is None or not _scaled(c_mul, cube, graph, 0.044715) or only_consumer(cube, graph) is not c_mul:
            continue
        cube_nodes = _cube_nodes(cube, x, graph)
        one = _one_plus(tanh.outputs[0], graph)
        tail = _half_x_times(one.outputs[0], x, graph) if one is not None and cube_nodes else None
        if tail is not None:
            return x, [*cube_nodes, c_mul, add, k_mul, tanh, one, *tail]
    return None


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_gelu(graph: Graph, ctx: PassContext) -> int:
    count = 0
    for node in list(graph.nodes):
        if node.graph is not graph or node.domain != "" or node.op_type not in ("Erf", "Tanh") \
                or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        match = (_match_erf if node.op_type == "Erf" else _match_tanh)(node, graph)
        if match is None:
            continue
        x, nodes = match
        t = tensor_type(x)
        out = nodes[-1].outputs[0]
        if t is None or t.elem_type not in FLOAT_TYPES or not isinstance(out.type, TensorType) \
                or out.type.elem_type != t.elem_type or rank_of(x) is None:
            continue
        approximate = "none" if node.op_type == "Erf" else "tanh"
        replace_with_node(graph, ctx, nodes, "Gelu", [x], [out], {"approximate": approximate},
                          standard=ctx.opset("") >= GELU_SINCE)
        count += 1
    return count
