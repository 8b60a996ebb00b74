"""DequantizeLinear -> Conv -> QuantizeLinear -> QLinearConv: a QDQ model's convolutions on the integer kernels
(ORT_ENABLE_EXTENDED and above, CPU provider first), as onnxruntime's QDQ Conv selector and action rewrite them.

A Conv is taken when every input it has is the output of a DequantizeLinear, and its output's only reader is a
QuantizeLinear, or a Relu or Clip whose only reader is one and which that QuantizeLinear makes redundant (the
bounds lie outside the range it can write, (lowest - zero point) * scale to (highest - zero point) * scale, so its
saturation clamps as they would: onnxruntime drops them then). The Conv's output is neither a graph output nor read
by a subgraph; a DequantizeLinear that other nodes read stays for them, as onnxruntime duplicates it for each.
- X's DequantizeLinear and the QuantizeLinear per tensor (a one-value scale and zero point, float32), of one 8-bit
  type: uint8 (with uint8 or int8 weights), or int8 with int8 weights (onnxruntime's rule);
- W's DequantizeLinear of an 8-bit constant, per tensor or per output channel (axis 0), no block size;
- B's, where there is one, of an int32 constant with zero point 0 (what quantizers write: B quantized with scale
  x_scale * w_scale), whose scale is x_scale * w_scale as float32 computes it; a bias of any other scale would be
  rounded differently by QLinearConv, so that Conv stays.
Scales and zero points must be constants. The QLinearConv reads the quantized tensors themselves and writes the
QuantizeLinear's output; its result is the integer convolution requantized once (onnxruntime's QLinearConv), where
the float path rounded each product's dequantized value: within one quantization step of it.

The pass runs in the basic tier, before constant folding turns the weights' DequantizeLinear into float weights,
and only when the session's level is extended or above; a model at ORT_ENABLE_BASIC keeps its float Convs, as
onnxruntime's. A Relu or Clip that the QuantizeLinear does not make redundant keeps that Conv in float.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.optimizer import BASIC, CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import attr_value, const_value, fresh_name, only_consumer, remove_dead_producers

EIGHT_BIT = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _dq(v: Value | None) -> Node | None:
    """The DequantizeLinear computing `v`, without block_size and with a float32 output."""
    p = v.producer if v is not None else None
    if p is None or p.op_type != "DequantizeLinear" or p.domain != "":
        return None
    if attr_value(p, "block_size", 0) or attr_value(p, "output_dtype", 0) not in (0, TensorProto.FLOAT):
        return None
    return p


def _params(node: Node, graph: Graph, per_channel: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, zero point or None where absent) of a DequantizeLinear / QuantizeLinear, both constants: a float32
    scale, one value each, or with `per_channel` one per channel of that many along axis 0."""
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
    elif per_channel is None or scale.shape != (per_channel,) or int(attr_value(node, "axis", 1)) != 0 \
            or (zp is not None and zp.shape != scale.shape):
        return None
    return scale, zp


def _quantized(v: Value) -> int | None:
    """The 8-bit element type of `v` (uint8 / int8), else None."""
    elem = getattr(v.type, "elem_type", None)
    return elem if elem in EIGHT_BIT else None


def _match(conv: Node, graph: Graph) -> tuple | None:
    """(X's DequantizeLinear, W's, B's or None, the redundant Relu / Clip or None, the QuantizeLinear, B's quantized
    constant or None) for a Conv the pass rewrites, else None."""
    if conv.op_type != "Conv" or conv.domain != "" or len(conv.outputs) != 1 or not 2 <= len(conv.inputs) <= 3:
        return None
    y = conv.outputs[0]
    q = act = only_consumer(y, graph)
    if act is not None and act.op_type in ("Relu", "Clip") and act.domain == "":
        y = act.outputs[0]
        q = only_consumer(y, graph)
    else:
        act = None
    if q is None or q.op_type != "QuantizeLinear" or q.domain != "" or q.inputs[0] is not y \
            or attr_value(q, "block_size", 0) or attr_value(q, "saturate", 1) != 1:
        return None
    if act is not None and not _made_redundant(act, q, graph):
        return None
    dq_x, dq_w = _dq(conv.inputs[0]), _dq(conv.inputs[1])
    dq_b = _dq(conv.inputs[2]) if len(conv.inputs) == 3 and conv.inputs[2] is not None else None
    if dq_x is None or dq_w is None or (len(conv.inputs) == 3 and conv.inputs[2] is not None and dq_b is None):
        return None
    x_type = _quantized(dq_x.inputs[0])
    w = const_value(dq_w.inputs[0], graph)
    y_type = getattr(q.outputs[0].type, "elem_type", None)
    if x_type is None or w is None or w.dtype not in (np.uint8, np.int8) or w.ndim < 3 or y_type != x_type:
        return None
    if x_type == TensorProto.INT8 and w.dtype != np.int8:
        return None  # onnxruntime's QLinearConv takes int8 activations with int8 weights only
    xp, wp, yp = _params(dq_x, graph), _params(dq_w, graph, per_channel=w.shape[0]), _params(q, graph)
    if xp is None or wp is None or yp is None:
        return None
    for (scale, zp), dtype in ((xp, EIGHT_BIT[x_type]), (wp, w.dtype), (yp, EIGHT_BIT[x_type])):
        if zp is not None and zp.dtype != dtype:
            return None
    bias = None
    if dq_b is not None:
        b = const_value(dq_b.inputs[0], graph)
        bp = _params(dq_b, graph, per_channel=w.shape[0])
        if b is None or b.dtype != np.int32 or b.shape != (w.shape[0],) or bp is None \
                or (bp[1] is not None and np.any(bp[1] != 0)):
            return None
        got, expected = np.broadcast_arrays(bp[0].reshape(-1), (xp[0].reshape(()) * wp[0]).reshape(-1))
        if not np.array_equal(got, expected):
            return None
        bias = dq_b.inputs[0]
    return dq_x, dq_w, dq_b, act, q, bias


def _made_redundant(act: Node, q: Node, graph: Graph) -> bool:
    """Whether the Relu or Clip `act` changes nothing the QuantizeLinear `q` after it writes (see the module
    docstring)."""
    from onnxjit.optimizer.activation_fusion import clip_bounds  # (here: importing it registers its passes)
    bounds = [0.0, math.inf] if act.op_type == "Relu" and len(act.inputs) == 1 else \
        clip_bounds(act, graph, np.dtype(np.float32)) if act.op_type == "Clip" else None
    params = _params(q, graph)
    elem = getattr(q.outputs[0].type, "elem_type", None)
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


@graph_pass(BASIC, providers=(CPU_PROVIDER,))
def fuse_qdq_conv(graph: Graph, ctx: PassContext) -> int:
    if ctx.level < EXTENDED:
        return 0
    fused = 0
    for conv in list(graph.nodes):
        found = _match(conv, graph) if conv.graph is graph else None
        if found is None:
            continue
        dq_x, dq_w, dq_b, act, q, bias = found
        x_q, w_q = dq_x.inputs[0], dq_w.inputs[0]
        inputs = [x_q, dq_x.inputs[1], _zero_point(graph, dq_x, x_q.type.dtype), w_q, dq_w.inputs[1],
                  _zero_point(graph, dq_w, const_value(w_q, graph).dtype), q.inputs[1],
                  _zero_point(graph, q, x_q.type.dtype)] + ([bias] if bias is not None else [])
        node = Node("QLinearConv", inputs, [q.outputs[0]], name=conv.name or fresh_name(graph, "QLinearConv"),
                    attributes={k: a for k, a in conv.attributes.items() if k in _CONV_ATTRS}, opset=ctx.opset(""))
        graph.insert_before(conv, node)
        read = [v for v in conv.inputs if v is not None]
        graph.remove(q)
        if act is not None:
            graph.remove(act)
        graph.remove(conv)
        remove_dead_producers(graph, read)  # the DequantizeLinear nodes no one else reads
        fused += 1
    return fused
