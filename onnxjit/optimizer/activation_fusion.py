"""Conv / Gemm / MatMul + activation fusion (ORT_ENABLE_EXTENDED, CPU provider): the activation, and for a Conv a
residual Add before it, become the epilogue of the producing kernel (com.onnxjit FusedConv / FusedGemm /
FusedMatMul, defined in onnxjit/contrib/fused.py), which applies it to each output row while it is in cache
instead of a second pass over memory.

    Conv(X, W, B?) -> Act            =>  FusedConv(X, W, B?)      activation=Act
    Conv(X, W, B?) -> Add(., Z)      =>  FusedConv(X, W, B?, Z)   activation=Identity   (Z of the output's shape)
    FusedConv[Identity] -> Act       =>  FusedConv[Act]            (so Conv -> Add -> Relu fuses in two steps)
    Gemm(A, B, C?) -> Act            =>  FusedGemm(A, B, C?)      activation=Act
    MatMul(A, B) -> Act              =>  FusedMatMul(A, B)        activation=Act
    FusedMatMul[Identity] -> Act     =>  FusedMatMul[Act]          (a MatMul with its bias, see gemm_fusion)
    P -> Mul(., Sigmoid(.))          =>  Fused<P>                 activation=Swish, alpha 1 (SiLU)

Act is one the kernels have (`ACTIVATION_PARAM_COUNTS`); its parameters come from its attributes (schema
defaults where absent) or, for Clip from opset 11, from constant min/max inputs. Preconditions: the CPU provider
is chosen; the producer's output has a single consumer and is no graph output; the fused node is one the CPU
provider's kernels accept (float32/float64, shapes they support), checked by building it; a float64 Clip's
bounds are exact in float (the attribute type). The fused node takes over the last node's output value.
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from onnxjit.contrib import DOMAIN, VERSION
from onnxjit.contrib.fused import ACTIVATION_PARAM_COUNTS
from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ops.registry import builder_for
from onnxjit.optimizer import CPU_PROVIDER, EXTENDED, PassContext, graph_pass
from onnxjit.optimizer.pattern import (clip_bound_inputs, make_attr, only_consumer, pinned_names, static_shape,
                                       tensor_type)

FUSED_OP = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul"}
KEPT_ATTRIBUTES = {"Conv": ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"),
                   "Gemm": ("alpha", "beta", "transA", "transB"), "MatMul": ()}
# the ONNX attributes of each activation, in activation_params order
PARAM_ATTRIBUTES = {"LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"), "Elu": ("alpha",),
                    "Selu": ("alpha", "gamma"), "ThresholdedRelu": ("alpha",), "Swish": ("alpha",)}


def _float_attr(node: Node, name: str) -> float | None:
    """The float attribute, or its schema default at the node's opset (None when neither exists)."""
    a = node.attributes.get(name)
    if a is not None:
        return None if a.ref_attr_name else float(a.value)
    schema = onnx.defs.get_schema(node.op_type, node.opset, node.domain)
    s = schema.attributes.get(name)
    if s is None or s.default_value.type != onnx.AttributeProto.FLOAT:
        return None
    return float(s.default_value.f)


def clip_bounds(node: Node, graph: Graph, dtype: np.dtype) -> list[float] | None:
    """Clip's [min, max] (-inf / inf where absent), or None when a bound is not a constant scalar or does not
    round-trip through a float attribute."""
    if node.opset < 6:
        return None  # Clip-1: consumed_inputs, legacy
    given = clip_bound_inputs(node, graph) if node.opset >= 11 else None
    if node.opset >= 11 and given is None:
        return None
    bounds = []
    for i, name, absent in ((0, "min", -math.inf), (1, "max", math.inf)):
        if node.opset < 11:
            value = _float_attr(node, name)
            if value is None:
                return None
        else:
            c = given[i]
            if c is None:
                value = absent
            elif c.dtype != dtype:
                return None
            else:
                value = float(c)
        if not math.isnan(value) and float(np.float32(value)) != value:
            return None  # a float64 bound the float32 attribute would round
        bounds.append(value)
    return bounds


def activation_params(node: Node, graph: Graph, dtype: np.dtype) -> list[float] | None:
    """`activation_params` for the activation node, or None when it cannot be an epilogue."""
    if node.domain != "" or node.op_type not in ACTIVATION_PARAM_COUNTS or node.op_type == "Identity":
        return None
    if len(node.outputs) != 1:
        return None
    if node.op_type == "Clip":
        return clip_bounds(node, graph, dtype)
    if sum(v is not None for v in node.inputs) != 1:
        return None
    params = [_float_attr(node, a) for a in PARAM_ATTRIBUTES.get(node.op_type, ())]
    return None if any(p is None for p in params) else params


def _attributes(node: Node) -> dict:
    if node.domain == DOMAIN:
        return dict(node.attributes)
    return {k: a for k, a in node.attributes.items() if k in KEPT_ATTRIBUTES[node.op_type]}


def _fusable_producer(v: Value, graph: Graph, readers: int = 1) -> Node | None:
    """The Conv/Gemm/MatMul (or FusedConv/FusedMatMul with no activation yet) producing v, when v may vanish into
    it: v has `readers` readers (the nodes being fused) and is no graph output."""
    p = v.producer
    if p is None or len(v.uses) != readers or v.name in pinned_names(graph) or len(p.outputs) != 1:
        return None
    if p.domain == "" and p.op_type in FUSED_OP:
        return p
    if p.domain == DOMAIN and p.op_type in ("FusedConv", "FusedMatMul"):
        a = p.attributes.get("activation")
        if a is None or (a.value.decode() if isinstance(a.value, bytes) else a.value) == "Identity":
            return p
    return None


def _replace(graph: Graph, ctx: PassContext, producer: Node, last: Node, inputs: list[Value | None],
             attributes: dict) -> bool:
    """Put one fused node in place of producer..last, taking over last's output; False (graph untouched) when
    the CPU provider would not run it."""
    op = producer.op_type if producer.domain == DOMAIN else FUSED_OP[producer.op_type]
    while inputs and inputs[-1] is None:
        inputs.pop()
    out = last.outputs[0]
    name = producer.name or last.name
    trial = Node(op, inputs, [Value(out.name, out.type)], domain=DOMAIN, name=name, attributes=attributes,
                 opset=VERSION)
    build = builder_for(trial)
    runnable = build is not None and build(trial) is not None
    for i in range(len(trial.inputs)):  # detach the trial node from its inputs
        trial.set_input(i, None)
    if not runnable:
        return False
    ctx.use_domain(DOMAIN, VERSION)
    graph.insert_before(last, Node(op, inputs, [out], domain=DOMAIN, name=name, attributes=attributes,
                                   opset=VERSION))
    graph.remove(last)
    graph.remove(producer)
    return True


def _fuse_activation(graph: Graph, ctx: PassContext, act: Node) -> bool:
    v = act.inputs[0] if act.inputs else None
    p = _fusable_producer(v, graph) if v is not None else None
    t = tensor_type(v)
    if p is None or t is None or t.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
        return False
    params = activation_params(act, graph, t.dtype)
    if params is None:
        return False
    attributes = _attributes(p)
    attributes["activation"] = make_attr("activation", act.op_type)
    attributes.pop("activation_params", None)
    if params:
        attributes["activation_params"] = make_attr("activation_params", [float(x) for x in params])
    return _replace(graph, ctx, p, act, list(p.inputs), attributes)


def _fuse_silu(graph: Graph, ctx: PassContext, mul: Node) -> bool:
    """P -> v; Mul(v, Sigmoid(v)) (either order) -> Fused<P> with activation Swish, alpha 1: SiLU, which exports
    of EfficientNet/YOLO-style nets write so since ONNX had no Swish before opset 24."""
    if len(mul.inputs) != 2 or any(v is None for v in mul.inputs):
        return False
    for i in (0, 1):
        v, s = mul.inputs[i], mul.inputs[1 - i]
        sig = s.producer
        if sig is None or sig.domain != "" or sig.op_type != "Sigmoid" or sig.inputs[0] is not v \
                or only_consumer(s, graph) is not mul:
            continue
        p = _fusable_producer(v, graph, readers=2)
        t = tensor_type(v)
        if p is None or t is None or t.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            continue
        attributes = _attributes(p)
        attributes["activation"] = make_attr("activation", "Swish")
        attributes["activation_params"] = make_attr("activation_params", [1.0])
        if _replace(graph, ctx, p, mul, list(p.inputs), attributes):
            graph.remove(sig)
            return True
    return False


def _fuse_residual(graph: Graph, ctx: PassContext, add: Node) -> bool:
    """Conv(...) + Z -> FusedConv(..., Z), Z of exactly the output's (static) shape and dtype."""
    if len(add.inputs) != 2 or any(v is None for v in add.inputs) or add.inputs[0] is add.inputs[1]:
        return False
    out_shape = static_shape(add.outputs[0])
    for i in (0, 1):
        conv, z = add.inputs[i], add.inputs[1 - i]
        p = _fusable_producer(conv, graph)
        if p is None or p.op_type not in ("Conv", "FusedConv") or (p.domain == DOMAIN and len(p.inputs) > 3):
            continue
        tc, tz = tensor_type(conv), tensor_type(z)
        if out_shape is None or static_shape(conv) != out_shape or static_shape(z) != out_shape or \
                tc.elem_type != tz.elem_type:
            continue
        inputs = list(p.inputs) + [None] * (3 - len(p.inputs)) + [z]
        if _replace(graph, ctx, p, add, inputs, _attributes(p)):
            return True
    return False


@graph_pass(EXTENDED, providers=(CPU_PROVIDER,))
def activation_fusion(graph: Graph, ctx: PassContext) -> int:
    fused = 0
    for node in list(graph.nodes):
        if node.graph is not graph or node.domain != "":
            continue  # removed by an earlier rewrite of this sweep
        if node.op_type == "Add" or (node.op_type == "Sum" and len(node.inputs) == 2):  # Sum of two is Add
            fused += _fuse_residual(graph, ctx, node)
        elif node.op_type == "Mul":
            fused += _fuse_silu(graph, ctx, node)
        elif node.op_type in ACTIVATION_PARAM_COUNTS:
            fused += _fuse_activation(graph, ctx, node)
    return fused
