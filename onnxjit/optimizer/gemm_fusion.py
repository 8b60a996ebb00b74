"""MatMul + Add -> Gemm (basic level), as onnxruntime's MatMulAddFusion.

A MatMul of 2-D float or double tensors whose output's only reader is an Add of a tensor C that broadcasts
unidirectionally to the MatMul's [M, N] output ([N], [1, N], [M, 1], [M, N], a scalar: what Gemm's C accepts)
becomes Gemm(A, B, C) with alpha = beta = 1. Before opset 7 Gemm broadcasts C only with broadcast=1.
"""
from __future__ import annotations

from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import fresh_name, make_attr, pinned_names, tensor_type

GEMM_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})


def _broadcasts_to(shape, out) -> bool:
    """Whether a tensor of `shape` broadcasts to `out` without changing it (unknown dims never match)."""
    if shape is None or len(shape) > len(out):
        return False
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    return all(d == 1 or (d is not None and d == o) for d, o in zip(padded, out))


@graph_pass(BASIC)
def fuse_matmul_add(graph: Graph, ctx: PassContext) -> int:
    pinned = pinned_names(graph)
    names: set[str] | None = None
    fused = 0
    for matmul in list(graph.nodes):
        if matmul.op_type != "MatMul" or matmul.domain != "" or len(matmul.inputs) != 2:
            continue
        y = matmul.outputs[0]
        if len(y.uses) != 1 or y.name in pinned:
            continue
        add: Node = y.uses[0][0]
        if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2 or add.inputs[0] is add.inputs[1]:
            continue
        a, b = matmul.inputs
        c = add.inputs[1] if add.inputs[0] is y else add.inputs[0]
        ta, tb, tc = tensor_type(a), tensor_type(b), tensor_type(c)
        if ta is None or tb is None or tc is None or ta.elem_type not in GEMM_TYPES \
                or not ta.elem_type == tb.elem_type == tc.elem_type:
            continue
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
