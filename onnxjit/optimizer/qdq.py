"""QDQ node groups on the integer kernels (ORT_ENABLE_EXTENDED and above, CPU provider first), as onnxruntime's QDQ
selectors and actions rewrite them: the same groups (as on ARM: see int8 activations below), so that a QDQ model's
outputs equal onnxruntime's.

A group is a target node whose inputs are DequantizeLinear outputs and whose output's only reader is a
QuantizeLinear (or a Relu or Clip whose only reader is one and which that QuantizeLinear makes redundant: its bounds
lie outside the range the QuantizeLinear writes, (lowest - zero point) * scale to (highest - zero point) * scale, so
saturation clamps as they would). The target's output is neither a graph output nor read by a subgraph. The
rewrite reads the quantized tensors and writes the QuantizeLinear's output:
- Conv -> QLinearConv (X, W and an optional int32 bias B dequantized; see _conv);
- MatMul -> QLinearMatMul, or with no QuantizeLinear after it at all, com.microsoft MatMulIntegerToFloat;
- Gemm -> com.microsoft QGemm (quantized out with the QuantizeLinear, float32 without one);
- Softmax, Sigmoid, LeakyRelu, AveragePool, GlobalAveragePool -> com.microsoft QLinear<op>;
- Add, Mul -> com.microsoft QLinearAdd / QLinearMul; Concat -> com.microsoft QLinearConcat;
- Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Gather, GatherElements, Slice, Expand, Tile, Split (a
  QuantizeLinear after each output), Resize (nearest), and MaxPool, ReduceMax and ReduceMin (with a positive
  scale) run on the quantized tensor itself where the DequantizeLinear and QuantizeLinear have one and the same
  scale and zero point (then they only move or pick values); ArgMax reads the quantized tensor (a positive scale).
Scales and zero points are float32 scales and constants, one value each (per channel where said). A
DequantizeLinear that other nodes read stays for them: onnxruntime gives each group a copy of it first.

int8 activations: onnxruntime's Conv and MatMul groups take them on ARM; on x86 they take uint8 only (MLAS's
u8s8 products could overflow there), and onnxruntime first turns an int8 QuantizeLinear -> DequantizeLinear pair
into uint8 where one node reads it, so an int8 tensor that several nodes read keeps their Convs and MatMuls in float
(and a group whose ends convert differently). onnxjit's integer kernels have no such overflow: it rewrites every
group whose quantized tensors have one type, as onnxruntime on ARM, and where onnxruntime on x86 keeps one in float
the two results differ where a product lands within float rounding of a half step (measured: resnet50 static QDQ
with int8 activations gave the same outputs both ways, and ran 1.14x onnxruntime's time with x86's groups against
0.80-0.93x with these).

Each rewrite's result is the integer op's (one rounding at the end), where the float path rounded each dequantized
product: within one quantization step of it, and equal to onnxruntime's where it runs the same group. The pass runs
in the basic tier, before constant folding turns the weights' DequantizeLinear into float weights, and only when
the session's level is extended or above; a model at ORT_ENABLE_BASIC stays in float, as onnxruntime's. Groups are
decided on the graph as it came (a rewrite changes who reads what), once per graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.optimizer import BASIC, CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (attr_value, const_value, fresh_name, make_attr, only_consumer,
                                       remove_dead_producers)

EIGHT_BIT = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
SIXTEEN_BIT = {TensorProto.UINT16: np.uint16, TensorProto.INT16: np.int16}
MS_DOMAIN = "com.microsoft"
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
MOVEMENT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Gather", "GatherElements", "Slice",
                "Expand", "Tile", "Split", "Resize", "MaxPool", "ReduceMax", "ReduceMin")


def _dq(v: Value | None) -> Node | None:
    """The DequantizeLinear computing `v`, without block_size and with a float32 output."""
    p = v.producer if v is not None else None
    if p is None or p.op_type != "DequantizeLinear" or p.domain != "":
        return None
    if attr_value(p, "block_size", 0) or attr_value(p, "output_dtype", 0) not in (0, TensorProto.FLOAT):
        return None
    return p


def _params(node: Node, graph: Graph, channels: int | None = None, axes: tuple[int, ...] = (0,)) \
        -> tuple[np.ndarray, np.ndarray | None] | None:
    """(scale, zero point or None where absent) of a DequantizeLinear / QuantizeLinear, both constants: a float32
    scale, one value each, or with `channels` one per channel of that many along one of `axes`."""
    scale = const_value(node.inputs[1] if len(node.inputs) > 1 else None, graph)
    if scale is None or scale.dtype != np.float32:
        return None
    zp_in = node.inputs[2] if len(node.inputs) > 2 else None
    zp = const_value(zp_in, graph) if zp_in is not None else None
    if zp_in is not None and zp is None:
        return None
    if scale.size == 1 and scale.ndim <= 1:
        if zp is not None and zp.size != 1:
            return None
    elif channels is None or scale.shape != (channels,) or int(attr_value(node, "axis", 1)) not in axes \
            or (zp is not None and zp.shape != scale.shape):
        return None
    return scale, zp


def _scalar_params(node: Node, graph: Graph, dtype) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor Q / DQ as Python numbers (an absent zero point is 0), its zero point
    (where given) of `dtype`."""
    p = _params(node, graph)
    if p is None or (p[1] is not None and p[1].dtype != dtype):
        return None
    return float(p[0].reshape(-1)[0]), 0 if p[1] is None else int(p[1].reshape(-1)[0])


def _elem(v: Value | None) -> int | None:
    return getattr(v.type, "elem_type", None) if v is not None else None


@dataclass
class Group:
    target: Node
    dqs: list[Node | None]  # per input of the target: its DequantizeLinear, None where it has none
    act: Node | None  # a Relu / Clip the QuantizeLinear makes redundant
    qs: list[Node]  # the QuantizeLinear reading each output; none where no QuantizeLinear reads the one output

    @property
    def q(self) -> Node | None:
        return self.qs[0] if self.qs else None


def _group(target: Node, graph: Graph, dequantized: tuple[int, ...] | None) -> Group | None:
    """The group around `target` whose inputs `dequantized` (all present ones when None) are DequantizeLinear
    outputs (and no others are), as onnxruntime's selectors find it; None where the QuantizeLinear after it is not
    the only reader, or a Relu / Clip before it is not redundant."""
    dqs = [_dq(v) for v in target.inputs]
    present = [i for i, v in enumerate(target.inputs) if v is not None]
    wanted = present if dequantized is None else [i for i in dequantized if i in present]
    if not wanted or any((dqs[i] is not None) != (i in wanted) for i in present):
        return None
    if len(target.outputs) != 1:  # (Split) a QuantizeLinear the only reader of each output
        qs = [only_consumer(y, graph) for y in target.outputs]
        return Group(target, dqs, None, qs) if all(_is_q(q, y) for q, y in zip(qs, target.outputs)) else None
    y = target.outputs[0]
    act = only_consumer(y, graph)
    if act is not None and act.op_type in ("Relu", "Clip") and act.domain == "" and len(act.outputs) == 1 \
            and only_consumer(act.outputs[0], graph) is not None:
        q = only_consumer(act.outputs[0], graph)
        if not _is_q(q, act.outputs[0]) or not _made_redundant(act, q, graph):
            return None
        return Group(target, dqs, act, [q])
    if not any(n.op_type == "QuantizeLinear" and n.domain == "" for n, _ in y.uses):
        return Group(target, dqs, None, [])
    q = only_consumer(y, graph)  # (None where y is also a graph output or read by others)
    return Group(target, dqs, None, [q]) if _is_q(q, y) else None


def _is_q(q: Node | None, v: Value) -> bool:
    return q is not None and q.op_type == "QuantizeLinear" and q.domain == "" and q.inputs[0] is v \
        and not attr_value(q, "block_size", 0) and attr_value(q, "saturate", 1) == 1 and len(q.outputs) == 1


def _made_redundant(act: Node, q: Node, graph: Graph) -> bool:
    """Whether the Relu or Clip `act` changes nothing the QuantizeLinear `q` after it writes (see the module
    docstring)."""
    from onnxjit.optimizer.activation_fusion import clip_bounds  # (here: importing it registers its passes)
    bounds = [0.0, math.inf] if act.op_type == "Relu" and len(act.inputs) == 1 else \
        clip_bounds(act, graph, np.dtype(np.float32)) if act.op_type == "Clip" else None
    params = _params(q, graph)
    elem = _elem(q.outputs[0])
    if bounds is None or params is None or elem not in EIGHT_BIT:
        return False
    scale = float(params[0].reshape(-1)[0])
    zp = 0 if params[1] is None else int(params[1].reshape(-1)[0])
    info = np.iinfo(EIGHT_BIT[elem])
    return scale > 0 and bounds[0] <= (int(info.min) - zp) * scale and bounds[1] >= (int(info.max) - zp) * scale


def _zero_point(graph: Graph, node: Node, dtype) -> Value:
    """The zero point input of the Q/DQ `node`, or where it has none, a new constant 0 of `dtype`."""
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        return node.inputs[2]
    return graph.add_initializer(fresh_name(graph, f"{node.name or node.op_type}_zero_point"), np.zeros((), dtype))


def _triple(graph: Graph, node: Node) -> list[Value]:
    """(quantized tensor, scale, zero point) of a Q / DQ."""
    v = _quantized_side(node)
    return [v, node.inputs[1], _zero_point(graph, node, v.type.dtype)]


@dataclass
class Rewrite:
    op_type: str
    domain: str
    inputs: list[Value | None]
    attributes: dict


def _quantized_side(node: Node) -> Value:
    """The quantized tensor of a DequantizeLinear (its input) or QuantizeLinear (its output)."""
    return node.inputs[0] if node.op_type == "DequantizeLinear" else node.outputs[0]


def _one_type(values: list[Value]) -> int | None:
    """The element type of `values`, where they have one, else None."""
    declared = {_elem(v) for v in values}
    return next(iter(declared)) if len(declared) == 1 else None


def _per_tensor_params(g: Group, graph: Graph, types: dict) -> list[tuple[float, int]] | None:
    """(scale, zero point) of each DQ then each Q of `g` (_scalar_params), where all are per tensor with constant
    parameters and their quantized tensors have one type (_one_type) of `types`; else None."""
    nodes = [n for n in g.dqs if n is not None] + g.qs
    if _one_type([_quantized_side(n) for n in nodes]) not in types:
        return None
    params = [_scalar_params(n, graph, _np_of(n)) for n in nodes]
    return None if any(p is None for p in params) else params


def _np_of(node: Node):
    """The numpy type of a Q / DQ's quantized tensor."""
    return (EIGHT_BIT | SIXTEEN_BIT)[_elem(_quantized_side(node))]


def _conv(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """X's DequantizeLinear and the QuantizeLinear per tensor, of one 8-bit type (int8 with int8 weights only,
    onnxruntime's rule); W's DequantizeLinear of an 8-bit constant, per tensor or per
    output channel (axis 0); B's, where there is one, of an int32 constant with zero point 0 whose scale is
    x_scale * w_scale as float32 computes it (what quantizers write; a bias of another scale would be rounded
    differently by QLinearConv, so that Conv stays)."""
    conv = g.target
    if g.q is None or not 2 <= len(conv.inputs) <= 3:
        return None
    dq_x, dq_w = g.dqs[0], g.dqs[1]
    dq_b = g.dqs[2] if len(conv.inputs) == 3 else None
    x_type, w = _one_type([dq_x.inputs[0], g.q.outputs[0]]), const_value(dq_w.inputs[0], graph)
    if x_type not in EIGHT_BIT or w is None \
            or w.dtype not in (np.uint8, np.int8) or w.ndim < 3 \
            or (x_type == TensorProto.INT8 and w.dtype != np.int8):
        return None
    xp, wp, yp = _params(dq_x, graph), _params(dq_w, graph, channels=w.shape[0]), _params(g.q, graph)
    if xp is None or wp is None or yp is None:
        return None
    for (scale, zp), dtype in ((xp, _np_of(dq_x)), (wp, w.dtype), (yp, _np_of(g.q))):
        if zp is not None and zp.dtype != dtype:
            return None
    inputs = _triple(graph, dq_x) + _triple(graph, dq_w) + _triple(graph, g.q)[1:]
    if dq_b is not None:
        b = const_value(dq_b.inputs[0], graph)
        bp = _params(dq_b, graph, channels=w.shape[0])
        if b is None or b.dtype != np.int32 or b.shape != (w.shape[0],) or bp is None \
                or (bp[1] is not None and np.any(bp[1] != 0)):
            return None
        got, expected = np.broadcast_arrays(bp[0].reshape(-1), (xp[0].reshape(()) * wp[0]).reshape(-1))
        if not np.array_equal(got, expected):
            return None
        inputs.append(dq_b.inputs[0])
    return Rewrite("QLinearConv", "", inputs, {k: a for k, a in conv.attributes.items() if k in _CONV_ATTRS})


def _matmul(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """A and its DequantizeLinear per tensor; B 8-bit (int8 where A is), per tensor, or per column where it is a
    constant matrix (axis 1 or -1); QLinearMatMul with the QuantizeLinear (per tensor), MatMulIntegerToFloat
    (float32 out) without one."""
    dq_a, dq_b = g.dqs
    a_type = _one_type([dq_a.inputs[0]] + ([g.q.outputs[0]] if g.q is not None else []))
    b_type = _elem(dq_b.inputs[0])
    if a_type not in EIGHT_BIT or b_type not in EIGHT_BIT \
            or (a_type == TensorProto.INT8 and b_type != TensorProto.INT8):
        return None
    b = const_value(dq_b.inputs[0], graph)
    columns = b.shape[1] if b is not None and b.ndim == 2 else None
    ap, bp = _params(dq_a, graph), _params(dq_b, graph, channels=columns, axes=(1, -1))
    yp = _params(g.q, graph) if g.q is not None else None
    if ap is None or bp is None or (g.q is not None and yp is None):
        return None
    pairs = [(ap, _np_of(dq_a)), (bp, EIGHT_BIT[b_type])] + ([(yp, _np_of(g.q))] if yp else [])
    if any(zp is not None and zp.dtype != dtype for (_, zp), dtype in pairs):
        return None
    a, b = _triple(graph, dq_a), _triple(graph, dq_b)
    if g.q is not None:
        return Rewrite("QLinearMatMul", "", a + b + _triple(graph, g.q)[1:], {})
    return Rewrite("MatMulIntegerToFloat", MS_DOMAIN, [a[0], b[0], a[1], b[1], a[2], b[2]], {})


def _gemm(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """QGemm (com.microsoft): A per tensor, B an 8-bit constant matrix (int8 where A is), per tensor or per output
    column; C, where there is one (beta 1), an int32 constant with zero point 0 and scale a_scale * b_scale, alpha
    1 (what quantizers write); with the QuantizeLinear (per tensor, A's type) quantized, else float32."""
    node = g.target
    dq_a, dq_b = g.dqs[0], g.dqs[1]
    dq_c = g.dqs[2] if len(node.inputs) == 3 else None
    a_type = _one_type([dq_a.inputs[0]] + ([g.q.outputs[0]] if g.q is not None else []))
    b = const_value(dq_b.inputs[0], graph)
    if a_type not in EIGHT_BIT or b is None or b.dtype not in (np.uint8, np.int8) or b.ndim != 2 \
            or (a_type == TensorProto.INT8 and b.dtype != np.int8) or int(attr_value(node, "transA", 0)):
        return None
    trans_b = int(attr_value(node, "transB", 0))
    columns = b.shape[0] if trans_b else b.shape[1]
    ap, bp = _params(dq_a, graph), _params(dq_b, graph, channels=columns, axes=(0,) if trans_b else (1, -1))
    yp = _params(g.q, graph) if g.q is not None else None
    if ap is None or bp is None or (g.q is not None and yp is None):
        return None
    pairs = [(ap, _np_of(dq_a)), (bp, b.dtype)] + ([(yp, _np_of(g.q))] if yp else [])
    if any(zp is not None and zp.dtype != dtype for (_, zp), dtype in pairs):
        return None
    inputs = _triple(graph, dq_a) + _triple(graph, dq_b) + [None]
    if dq_c is not None:
        c, cp = const_value(dq_c.inputs[0], graph), _params(dq_c, graph, channels=columns)
        unit = float(attr_value(node, "alpha", 1.0)) == 1.0 and float(attr_value(node, "beta", 1.0)) == 1.0
        if c is None or c.dtype != np.int32 or c.shape != (columns,) or cp is None or not unit \
                or (cp[1] is not None and np.any(cp[1] != 0)):
            return None
        got, expected = np.broadcast_arrays(cp[0].reshape(-1), (ap[0].reshape(()) * bp[0]).reshape(-1))
        if not np.array_equal(got, expected):
            return None
        inputs[-1] = dq_c.inputs[0]
    if g.q is not None:
        inputs += _triple(graph, g.q)[1:]
    while inputs[-1] is None:
        inputs.pop()
    return Rewrite("QGemm", MS_DOMAIN, inputs, {k: a for k, a in node.attributes.items()
                                                if k in ("alpha", "transA", "transB")})


def _unary(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """QLinear<op> (com.microsoft) of X's DequantizeLinear and the QuantizeLinear, per tensor, one 8-bit type."""
    node = g.target
    if g.q is None or _per_tensor_params(g, graph, EIGHT_BIT) is None:
        return None
    attrs = {}
    if node.op_type == "Softmax":
        since = 13 if node.opset >= 13 else 11 if node.opset >= 11 else 1
        attrs = {"axis": make_attr("axis", int(attr_value(node, "axis", -1 if since >= 13 else 1))),
                 "opset": make_attr("opset", since)}
    elif node.op_type == "LeakyRelu":
        attrs = {"alpha": make_attr("alpha", float(attr_value(node, "alpha", 0.01)))}
    elif node.op_type == "AveragePool":
        if any(int(d) != 1 for d in attr_value(node, "dilations", ()) or ()):
            return None  # (QLinearAveragePool has no dilations)
        attrs = {k: a for k, a in node.attributes.items() if k in _POOL_ATTRS}
    return Rewrite(f"QLinear{node.op_type}", MS_DOMAIN,
                   _triple(graph, g.dqs[0]) + _triple(graph, g.q)[1:], attrs)


def _binary(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """QLinearAdd / QLinearMul (com.microsoft): both inputs' DequantizeLinear and the QuantizeLinear per tensor,
    one 8-bit type."""
    if g.q is None or len(g.target.inputs) != 2 or _per_tensor_params(g, graph, EIGHT_BIT) is None:
        return None
    return Rewrite(f"QLinear{g.target.op_type}", MS_DOMAIN,
                   _triple(graph, g.dqs[0]) + _triple(graph, g.dqs[1]) + _triple(graph, g.q)[1:], {})


def _concat(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """QLinearConcat (com.microsoft): every input's DequantizeLinear and the QuantizeLinear per tensor, one 8-bit
    type."""
    if g.q is None or _per_tensor_params(g, graph, EIGHT_BIT) is None:
        return None
    inputs = _triple(graph, g.q)[1:]
    for dq in g.dqs:
        inputs += _triple(graph, dq)
    axis = int(attr_value(g.target, "axis", 0))
    return Rewrite("QLinearConcat", MS_DOMAIN, inputs, {"axis": make_attr("axis", axis)})


def _movement(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """The op itself on the quantized tensor, where its DequantizeLinear and each QuantizeLinear have one scale and
    zero point (8- or 16-bit; MaxPool, ReduceMax, ReduceMin: 8-bit and a positive scale; Resize: 8-bit, nearest
    mode, whose values are copies)."""
    node = g.target
    if not g.qs or g.act is not None:
        return None
    eight_bit_only = node.op_type in ("MaxPool", "ReduceMax", "ReduceMin", "Resize")
    params = _per_tensor_params(g, graph, EIGHT_BIT if eight_bit_only else EIGHT_BIT | SIXTEEN_BIT)
    if params is None or len(set(params)) != 1:
        return None
    if node.op_type == "Resize" and attr_value(node, "mode", "nearest") not in ("nearest", b"nearest"):
        return None
    if node.op_type in ("MaxPool", "ReduceMax", "ReduceMin") and not params[0][0] > 0:
        return None
    return Rewrite(node.op_type, node.domain, [g.dqs[0].inputs[0]] + node.inputs[1:], dict(node.attributes))


def _argmax(g: Group, graph: Graph, ctx: PassContext) -> Rewrite | None:
    """ArgMax of the quantized tensor (onnxruntime drops its DequantizeLinear): the same index where the scale is
    positive (8-bit, per tensor)."""
    dq = g.dqs[0]
    params = _scalar_params(dq, graph, _np_of(dq)) if _elem(dq.inputs[0]) in EIGHT_BIT else None
    if g.qs or params is None or not params[0] > 0:
        return None
    return Rewrite("ArgMax", "", [dq.inputs[0]], dict(g.target.attributes))


# op type -> (the inputs that are dequantized, None for all present ones; the rewrite)
RULES = {"Conv": (None, _conv), "MatMul": ((0, 1), _matmul), "Gemm": (None, _gemm), "Add": ((0, 1), _binary),
         "Mul": ((0, 1), _binary), "Concat": (None, _concat), "ArgMax": ((0,), _argmax)}
RULES.update({op: ((0,), _unary) for op in ("Softmax", "Sigmoid", "LeakyRelu", "AveragePool", "GlobalAveragePool")})
RULES.update({op: ((0,), _movement) for op in MOVEMENT_OPS})


def _found(node: Node, graph: Graph, ctx: PassContext) -> tuple[Group, Rewrite] | None:
    rule = RULES.get(node.op_type) if node.domain == "" else None
    if rule is None or (node.op_type == "MaxPool" and (node.opset < 12 or len(node.outputs) != 1)):
        return None
    group = _group(node, graph, rule[0])
    rewrite = rule[1](group, graph, ctx) if group is not None else None
    return (group, rewrite) if rewrite is not None else None


@graph_pass(BASIC, providers=(CPU_PROVIDER,))
def fuse_qdq_groups(graph: Graph, ctx: PassContext) -> int:
    if ctx.level < EXTENDED or not ctx.first_visit("fuse_qdq_groups", graph):
        return 0
    found = [f for f in (_found(n, graph, ctx) for n in list(graph.nodes)) if f is not None]
    for g, r in found:
        outputs = [q.outputs[0] for q in g.qs] or g.target.outputs
        if r.domain == MS_DOMAIN:
            ctx.use_domain(MS_DOMAIN, 1)
        node = Node(r.op_type, r.inputs, outputs, domain=r.domain,
                    name=g.target.name or fresh_name(graph, r.op_type), attributes=r.attributes,
                    opset=1 if r.domain == MS_DOMAIN else g.target.opset)
        # (after every input of the group, the QuantizeLinear's included)
        graph.insert_before(min(g.qs, key=graph.nodes.index) if g.qs else g.target, node)
        read = [v for v in g.target.inputs if v is not None]
        for n in g.qs + [g.act, g.target]:
            if n is not None:
                graph.remove(n)
        remove_dead_producers(graph, read)  # the DequantizeLinear nodes no one else reads
    return len(found)
