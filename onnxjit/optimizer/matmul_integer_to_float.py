"""MatMulInteger -> Cast -> Mul by the scales' product -> com.microsoft MatMulIntegerToFloat: what
onnxruntime.quantization.quantize_dynamic writes for each MatMul (ORT_ENABLE_EXTENDED and above, CPU provider
first), as onnxruntime's MatMulIntegerToFloat fusion rewrites it.

quantize_dynamic quantizes each MatMul's input at run time (DynamicQuantizeLinear) and its constant weights once,
multiplies them as integers, and turns the int32 product back into float: Cast to float, then Mul by
`a_scale * b_scale` (a Mul of the input's scale and the weights', per tensor or per column). MatMulIntegerToFloat
takes both scales and scales the product in the integer GEMM's epilogue (ops/quantize.py), so the int32 product is
never written out and read back by two more steps: float32(product) * float32(a_scale * b_scale), the same
rounding as the Cast and the Mul. Taken where the MatMulInteger's only reader is a Cast to float, the Cast's only
reader a Mul by a value made by a Mul of two float32 scales, one of them a single value and the other a single
value or one per column of B; neither intermediate may be a graph output or read by a subgraph.

A bias Add after it (a float32 constant, one value per column) becomes MatMulIntegerToFloat's bias, added in the
GEMM's epilogue (the rounding of onnxruntime's, which folds it the same way), unless an elementwise op the fuser
takes reads the Add's output: that kernel adds it at no cost (a BERT's FFN bias before its Gelu). Folded there as
numpy's addition after the GEMM, it had made quantized MiniLM 11.8 -> 13.4 ms; the Q, K and V projections' Adds
were steps of their own.

A DynamicQuantizeLinear whose three outputs only one MatMulIntegerToFloat reads (as its A, A's scale and A's zero
point) goes into it as com.microsoft DynamicQuantizeMatMul, as onnxruntime's DynamicQuantizeMatMul fusion does:
the float input is quantized straight into the GEMM's packed A (one pass and one step where there were two of
each). One read by several products (a BERT's Q, K and V) stays, quantized once for them.
"""
from __future__ import annotations

from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import TensorType
from onnxjit.optimizer import CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (attr_value, const_value, fresh_name, is_op, only_consumer,
                                       remove_dead_producers, set_input)

MS_DOMAIN = "com.microsoft"


def _size(v: Value) -> int | None:
    """The number of values of a float32 tensor of static shape, else None."""
    t = v.type
    if not isinstance(t, TensorType) or t.elem_type != TensorProto.FLOAT or t.shape is None \
            or not all(isinstance(d, int) for d in t.shape):
        return None
    size = 1
    for d in t.shape:
        size *= d
    return size


def _scales(scale_product: Value, columns: int | None) -> tuple[Value, Value] | None:
    """(A's scale, B's scale) whose product `scale_product` is (a Mul of them): A's a single value, B's a single
    value or one per column of B (`columns`, where known)."""
    mul = scale_product.producer
    if not is_op(mul, "Mul", 2) or any(v is None for v in mul.inputs):
        return None
    first, second = mul.inputs
    sizes = _size(first), _size(second)
    if None in sizes:
        return None
    if sizes[0] == 1 and (sizes[1] == 1 or sizes[1] == columns):
        return first, second
    if sizes[1] == 1 and sizes[0] == columns:
        return second, first
    return None


def _match(matmul: Node, graph: Graph) -> tuple[Node, Node, Value, Value] | None:
    """(the Cast, the Mul, A's scale, B's scale) of a MatMulInteger that becomes MatMulIntegerToFloat, or None."""
    if not is_op(matmul, "MatMulInteger") or not 2 <= len(matmul.inputs) <= 4:
        return None
    cast = only_consumer(matmul.outputs[0], graph)
    if not is_op(cast, "Cast", 1) or attr_value(cast, "to", 0) != TensorProto.FLOAT:
        return None
    mul = only_consumer(cast.outputs[0], graph)
    if not is_op(mul, "Mul", 2):
        return None
    other = mul.inputs[1] if mul.inputs[0] is cast.outputs[0] else mul.inputs[0]
    if other is None or other is cast.outputs[0]:
        return None
    b_type = matmul.inputs[1].type
    columns = b_type.shape[-1] if isinstance(b_type, TensorType) and b_type.shape and \
        isinstance(b_type.shape[-1], int) else None
    scales = _scales(other, columns)
    if scales is None:
        return None
    return cast, mul, scales[0], scales[1]


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_matmul_integer_to_float(graph: Graph, ctx: PassContext) -> int:
    fused = 0
    for matmul in list(graph.nodes):
        found = _match(matmul, graph) if matmul.graph is graph else None
        if found is None:
            continue
        cast, mul, a_scale, b_scale = found
        a, b = matmul.inputs[0], matmul.inputs[1]
        a_zp = matmul.inputs[2] if len(matmul.inputs) > 2 else None
        b_zp = matmul.inputs[3] if len(matmul.inputs) > 3 else None
        ctx.use_domain(MS_DOMAIN, 1)
        inputs = [a, b, a_scale, b_scale, a_zp, b_zp]
        while inputs[-1] is None:  # (absent zero points at the end)
            inputs.pop()
        node = Node("MatMulIntegerToFloat", inputs, [mul.outputs[0]], domain=MS_DOMAIN,
                    name=mul.name or fresh_name(graph, "MatMulIntegerToFloat"), opset=1)
        graph.insert_before(matmul, node)
        read = [v for v in mul.inputs if v is not None]
        graph.remove(mul)
        graph.remove(cast)
        graph.remove(matmul)
        remove_dead_producers(graph, read)  # the scales' Mul where nothing else reads it
        fused += 1
    return fused


_BIAS_SLOTS = {"MatMulIntegerToFloat": 6, "DynamicQuantizeMatMul": 4}  # the bias input of the float products


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fold_float_product_bias(graph: Graph, ctx: PassContext) -> int:
    from onnxjit.fuser.exprs import fusable  # (the fuser imports the optimizer)
    folded = 0
    for node in list(graph.nodes):
        slot = _BIAS_SLOTS.get(node.op_type) if node.domain == MS_DOMAIN else None
        if slot is None or node.graph is not graph or (len(node.inputs) > slot and node.inputs[slot] is not None):
            continue
        add = only_consumer(node.outputs[0], graph)
        if not is_op(add, "Add", 2) or any(fusable(n) for n, _ in add.outputs[0].uses):
            continue
        bias = add.inputs[1] if add.inputs[0] is node.outputs[0] else add.inputs[0]
        value, b_type = const_value(bias, graph), node.inputs[1].type
        columns = b_type.shape[-1] if isinstance(b_type, TensorType) and b_type.shape else None
        if value is None or value.dtype.name != "float32" or not isinstance(columns, int) \
                or value.shape != (columns,) or bias is node.outputs[0]:
            continue
        set_input(node, slot, bias)
        y = add.outputs[0]
        graph.remove(add)
        node.outputs = [y]
        y.producer = node
        folded += 1
    return folded


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def fuse_dynamic_quantize_matmul(graph: Graph, ctx: PassContext) -> int:
    fused = 0
    for node in list(graph.nodes):
        if node.op_type != "MatMulIntegerToFloat" or node.domain != MS_DOMAIN or node.graph is not graph \
                or len(node.inputs) < 5:
            continue
        dql = node.inputs[0].producer
        if dql is None or dql.op_type != "DynamicQuantizeLinear" or dql.domain != "" or len(dql.outputs) != 3 \
                or any(node.inputs[i] is not v for i, v in zip((0, 2, 4), dql.outputs)) \
                or any(only_consumer(v, graph) is not node for v in dql.outputs) \
                or getattr(dql.inputs[0].type, "elem_type", None) != TensorProto.FLOAT:
            continue
        b, b_scale = node.inputs[1], node.inputs[3]
        b_zp = node.inputs[5] if len(node.inputs) > 5 else None
        bias = node.inputs[6] if len(node.inputs) > 6 else None
        inputs = [dql.inputs[0], b, b_scale, b_zp, bias]
        while inputs[-1] is None:
            inputs.pop()
        fused_node = Node("DynamicQuantizeMatMul", inputs, [node.outputs[0]], domain=MS_DOMAIN,
                          name=node.name or fresh_name(graph, "DynamicQuantizeMatMul"), opset=1)
        graph.insert_before(node, fused_node)
        graph.remove(node)
        graph.remove(dql)
        fused += 1
    return fused
