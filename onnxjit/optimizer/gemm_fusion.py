"""MatMul + Add -> Gemm (basic level), as onnxruntime's MatMulAddFusion; MatMul + bias Add over N-D activations ->
com.onnxjit FusedMatMul (extended level, CPU provider).

A MatMul of 2-D float or double tensors whose output's only reader is an Add of a tensor C that broadcasts
unidirectionally to the MatMul's [M, N] output ([N], [1, N], [M, 1], [M, N], a scalar: what Gemm's C accepts)
becomes Gemm(A, B, C) with alpha = beta = 1. Before opset 7 Gemm broadcasts C only with broadcast=1.

A MatMul of A of another rank (a transformer's [batch, sequence, features] activations) by a 2-D B whose only
reader adds a bias along the output's last axis (C of shape [N] or [1, ..., 1, N], or one value) becomes
FusedMatMul(A, B, C): the CPU kernel folds A's batch into the rows of one GEMM and adds C in its epilogue, where
the Add was a second pass over the product (24 Adds over [197, 576] and [197, 768], 1.2 ms of a ViT-Tiny run of
~25 on two Emerald Rapids threads). onnxruntime's fusion reshapes A to 2-D around a Gemm instead.
"""
from __future__ import annotations

from onnx import TensorProto

from onnxjit.contrib import DOMAIN, VERSION
from onnxjit.ir.graph import Graph, Node
from onnxjit.optimizer import BASIC, CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import fresh_name, make_attr, pinned_names, tensor_type

GEMM_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})


def _broadcasts_to(shape, out) -> bool:
    """Whether a tensor of `shape` broadcasts to `out` without changing it (unknown dims never match)."""
    if shape is None or len(shape) > len(out):
        return False
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    return all(d == 1 or (d is not None and d == o) for d, o in zip(padded, out))


def _matmul_add(matmul: Node, pinned) -> tuple[Node, object] | None:
    """(the Add, its other input C) when `matmul` is a MatMul whose output's only reader is an Add, else None."""
    if matmul.op_type != "MatMul" or matmul.domain != "" or len(matmul.inputs) != 2:
        return None
    y = matmul.outputs[0]
    if len(y.uses) != 1 or y.name in pinned:
        return None
    add: Node = y.uses[0][0]
    if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2 or add.inputs[0] is add.inputs[1]:
        return None
    return add, add.inputs[1] if add.inputs[0] is y else add.inputs[0]


def _same_float_types(*values):
    types = [tensor_type(v) for v in values]
    if any(t is None for t in types) or types[0].elem_type not in GEMM_TYPES \
            or any(t.elem_type != types[0].elem_type for t in types):
        return None
    return types


def _rewrite_matmul_adds(graph: Graph, replacement) -> int:
    """Each MatMul whose output's only reader is an Add, all three operands float or double of one type, replaced
    together with the Add by `replacement(a, b, c, types, out, name)` where that gives a node (out the Add's
    output, which the node takes over, and name the Add's, which it frees; `name(prefix)` a fresh one)."""
    pinned = pinned_names(graph)
    taken: set[str] | None = None
    fused = 0

    def fresh(prefix: str) -> str:
        nonlocal taken
        taken = taken if taken is not None else {n.name for n in graph.nodes}
        return fresh_name(graph, prefix, taken)

    for matmul in list(graph.nodes):
        found = _matmul_add(matmul, pinned)
        if found is None:
            continue
        add, c = found
        a, b = matmul.inputs
        types = _same_float_types(a, b, c)
        node = None if types is None else replacement(a, b, c, types, add.outputs[0],
                                                       lambda prefix, own=add.name: own or fresh(prefix))
        if node is None:
            continue
        graph.insert_before(add, node)
        graph.remove(add)
        graph.remove(matmul)
        fused += 1
    return fused


@graph_pass(BASIC)
def fuse_matmul_add(graph: Graph, ctx: PassContext) -> int:
    def gemm(a, b, c, types, out, name):
        ta, tb, tc = types
        if ta.shape is None or tb.shape is None or len(ta.shape) != 2 or len(tb.shape) != 2 or \
                not _broadcasts_to(tc.shape, (ta.shape[0], tb.shape[1])):
            return None
        attrs = {"broadcast": make_attr("broadcast", 1)} if ctx.opset("") < 7 else {}
        return Node("Gemm", [a, b, c], [out], name=name("MatMulAdd"), attributes=attrs, opset=ctx.opset(""))
    return _rewrite_matmul_adds(graph, gemm)


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_matmul_bias(graph: Graph, ctx: PassContext) -> int:
    def fused_matmul(a, b, c, types, out, name):
        ta, tb, tc = types
        if ta.shape is None or tb.shape is None or tc.shape is None or len(ta.shape) in (0, 2) or len(tb.shape) != 2:
            return None
        bias_shape = (1,) * (len(ta.shape) - 1) + (tb.shape[1],)  # a 1-D A gives [N]
        if not _broadcasts_to(tc.shape, bias_shape):
            return None  # not a bias along the output's last axis alone
        ctx.use_domain(DOMAIN, VERSION)
        return Node("FusedMatMul", [a, b, c], [out], domain=DOMAIN, opset=VERSION, name=name("MatMulBias"))
    return _rewrite_matmul_adds(graph, fused_matmul)
