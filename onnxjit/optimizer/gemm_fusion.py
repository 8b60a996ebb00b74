"""MatMul + Add -> Gemm (basic level), as onnxruntime's MatMulAddFusion; MatMul + bias Add over N-D activations ->
com.onnxjit FusedMatMul (extended level, CPU provider).

A MatMul of 2-D float or double tensors whose output's only reader is an Add of a tensor C that broadcasts
unidirectionally to the MatMul's [M, N] output ([N], [1, N], [M, 1], [M, N], a scalar: what Gemm's C accepts)
becomes Gemm(A, B, C) with alpha = beta = 1. Before opset 7 Gemm broadcasts C only with broadcast=1.

A MatMul of A of another rank (a transformer's [batch, sequence, features] activations) by a 2-D B whose only
reader adds a bias along the output's last axis (C of shape [N] or [1, ..., 1, N], or one value) becomes
FusedMatMul(A, B, C): the CPU kernel folds A's batch into the rows of one GEMM and adds C in its epilogue, where
the Add was a second pass over the product (24 Adds over [197, 576] and [197, 768], 1.2 ms of a ViT-Tiny run of
~25 on two Sapphire Rapids threads). onnxruntime's fusion reshapes A to 2-D around a Gemm instead.
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


@graph_pass(BASIC)
def fuse_matmul_add(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    names: set[str] | None = None
    fused = 0
    for matmul in list(graph.nodes):
        found = _matmul_add(matmul, pinned)
        if found is None:
            continue
        add, c = found
        a, b = matmul.inputs
        types = _same_float_types(a, b, c)
        if types is None:
            continue
        ta, tb, tc = types
        if ta.shape is None or tb.shape is None or len(ta.shape) != 2 or len(tb.shape) != 2:
            continue
        if not _broadcasts_to(tc.shape, (ta.shape[0], tb.shape[1])):
            continue
        if not add.name:
            names = names if names is not None else {n.name for n in graph.nodes}
        attrs = {"broadcast": make_attr("broadcast", 1)} if ctx.opset("") < 7 else {}
        # the Add goes, so its name is free for the node that takes its place
        gemm = Node("Gemm", [a, b, c], [add.outputs[0]], name=add.name or fresh_name(graph, "MatMulAdd", names),
                    attributes=attrs, opset=ctx.opset(""))
        graph.insert_before(add, gemm)
        graph.remove(add)
        graph.remove(matmul)
        fused += 1
    return fused


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_matmul_bias(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    names: set[str] | None = None
    fused = 0
    for matmul in list(graph.nodes):
        found = _matmul_add(matmul, pinned)
        if found is None:
            continue
        add, c = found
        a, b = matmul.inputs
        types = _same_float_types(a, b, c)
        if types is None:
            continue
        ta, tb, tc = types
        if ta.shape is None or tb.shape is None or tc.shape is None or len(ta.shape) in (0, 2) or len(tb.shape) != 2:
            continue
        cols = tb.shape[1]
        out_rank = max(len(ta.shape), 1)  # a 1-D A gives [N]
        if len(tc.shape) > out_rank or any(d != 1 for d in tc.shape[:-1]) or \
                (tc.shape and not (tc.shape[-1] == 1 or (cols is not None and tc.shape[-1] == cols))):
            continue  # not a bias along the output's last axis alone
        if not add.name:
            names = names if names is not None else {n.name for n in graph.nodes}
        ctx.use_domain(DOMAIN, VERSION)
        fused_node = Node("FusedMatMul", [a, b, c], [add.outputs[0]], domain=DOMAIN, opset=VERSION,
                          name=add.name or fresh_name(graph, "MatMulBias", names))
        graph.insert_before(add, fused_node)
        graph.remove(add)
        graph.remove(matmul)
        fused += 1
    return fused
