"""CPU layout choice (ORT_ENABLE_ALL, CPU provider): depthwise convolutions on small planes run channels-last.

onnxjit's convolutions are NCHW: im2col + BLAS GEMMs for dense ones, which a trial blocked-channel (NCHWc)
kernel did not beat (19.4 vs 5.5 ms on resnet's 3x3 256->256 at 14x14), so dense convolutions keep NCHW. A
depthwise convolution has no GEMM: in NCHW its loops run over one channel's plane, short for a 7x7 or 14x14
plane, while channels-last loops over the channels, whole vectors however small the plane. Measured (one
thread, 3x3, stride 1, NHWC kernel plus both layout conversions against the NCHW kernel): 7x7x544 70 vs 221 us,
14x14x272 146 vs 198 us, but 28x28x136 344 vs 222 us and 112x112x32 2956 vs 1016 us. Since the NCHW kernel adds
a 3x3 kernel's taps in one pass (kernels/conv.py conv_direct), on the AMD Zen 3 VM (one session per case, one
thread, with Relu): 14x14x576 306 us (NHWC 143 + conversions 163) vs 184 us NCHW, 7x7x960 123 us (65 + 58) vs
185 us: only 7x7 planes still gain. Since float32 depthwise convs over small planes run channels-last inside
one kernel instead (kernels/conv.py conv_depthwise_blocked: a 16-channel block copied into a channels-last window
in L1), faster than NhwcConv with both conversions (AMD Zen 3 VM, one thread: 7x7x576 5x5 86 vs 127 us,
7x7x960 3x3 92 vs 147 us, 14x14x672 5x5 stride 2 143 vs 229 us), the rule is left for the other dtypes: a
depthwise Conv / FusedConv (2-D, group = channels = outputs, no residual input, not float32) whose output plane
has at most NHWC_MAX_PIXELS pixels and at least NHWC_MIN_CHANNELS channels becomes com.onnxjit NhwcConv between
two Transposes. A Conv whose input is such a Transpose back to NCHW reads the channels-last value directly, so a
chain of them converts only at its edges.
"""
from __future__ import annotations

from onnx import TensorProto

from onnxjit.contrib import DOMAIN, VERSION
from onnxjit.contrib.layout import TO_NCHW, TO_NHWC
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import TensorType
from onnxjit.ops.nn import conv_attributes, conv_geometry
from onnxjit.ops.registry import attr
from onnxjit.optimizer import CPU_PROVIDER, LAYOUT, PassContext, graph_pass
from onnxjit.optimizer.pattern import fresh_name, make_attr, remove_dead_producers, replace_value, static_shape

NHWC_MAX_PIXELS = 7 * 7
NHWC_MIN_CHANNELS = 64
CHANNELS_LAST_TYPES = frozenset({TensorProto.DOUBLE})  # float32 has conv_depthwise_blocked
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "activation",
               "activation_params")


def _nhwc_output_shape(node: Node) -> tuple[int, ...] | None:
    """The NHWC output shape when `node` is a depthwise 2-D conv the NHWC kernel runs faster (see the module
    docstring), else None."""
    if not ((node.domain == "" and node.op_type == "Conv") or (node.domain == DOMAIN and node.op_type == "FusedConv")):
        return None
    if len(node.inputs) > 3 or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None  # a residual input Z stays with FusedConv
    x, w = node.inputs[0], node.inputs[1]
    xs, ws = static_shape(x), static_shape(w)
    if xs is None or ws is None or len(xs) != 4 or len(ws) != 4 or x.type.elem_type not in CHANNELS_LAST_TYPES:
        return None
    c = xs[1]
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    geometry = conv_attributes(node, 2, auto_pad)
    if geometry is None or geometry[0] != c or ws[:2] != (c, 1) or c < NHWC_MIN_CHANNELS \
            or list(attr(node, "kernel_shape", None) or ws[2:]) != list(ws[2:]):
        return None
    try:
        (oh, ow), _ = conv_geometry(xs[2:], ws[2:], *geometry[1:], auto_pad)
    except ValueError:
        return None  # left to the Conv kernel, which reports it
    return (xs[0], oh, ow, c) if oh * ow <= NHWC_MAX_PIXELS else None


def _transpose(graph: Graph, ctx: PassContext, anchor: Node, x: Value, perm: tuple[int, ...], name: str) -> Value:
    shape = static_shape(x)
    out = Value(fresh_name(graph, name), TensorType(x.type.elem_type, tuple(shape[i] for i in perm)))
    graph.insert_before(anchor, Node("Transpose", [x], [out], name=fresh_name(graph, name, {n.name for n in
                                     graph.nodes}), attributes={"perm": make_attr("perm", list(perm))},
                                     opset=ctx.opset("")))
    return out


@graph_pass(LAYOUT, providers=(CPU_PROVIDER,))
def nhwc_depthwise_conv(graph: Graph, ctx: PassContext) -> int:
    count = 0
    for node in list(graph.nodes):
        out_shape = None if node.graph is not graph else _nhwc_output_shape(node)
        if out_shape is None:
            continue
        x = node.inputs[0]
        back = x.producer
        if back is not None and back.op_type == "Transpose" and back.domain == "" and \
                [int(a) for a in attr(back, "perm", [])] == list(TO_NCHW):
            xn = back.inputs[0]  # already channels-last: the chain continues
        else:
            xn = _transpose(graph, ctx, node, x, TO_NHWC, f"{x.name}_nhwc")
        y = node.outputs[0]
        yn = Value(fresh_name(graph, f"{y.name}_nhwc"), TensorType(x.type.elem_type, out_shape))
        attrs = {k: node.attributes[k] for k in _CONV_ATTRS if k in node.attributes}
        ctx.use_domain(DOMAIN, VERSION)
        conv = Node("NhwcConv", [xn, *node.inputs[1:]], [yn], domain=DOMAIN, attributes=attrs, opset=VERSION,
                    name=fresh_name(graph, f"{node.name or 'conv'}_nhwc", {n.name for n in graph.nodes}))
        graph.insert_before(node, conv)
        y_new = _transpose(graph, ctx, node, yn, TO_NCHW, f"{y.name}_nchw")
        y_new.type = y.type if isinstance(y.type, TensorType) and y.type.shape is not None else y_new.type
        replace_value(graph, y, y_new)
        graph.remove(node)
        remove_dead_producers(graph, [x])
        count += 1
    return count
