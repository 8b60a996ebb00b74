"""Operator-format quantization: each quantized node becomes its integer operator, values flow quantized between
them, and DequantizeLinear appears only where a float consumer (or a graph output) needs a float value.

- Dynamic (quantize_dynamic, integer ops): activations are quantized at run time by DynamicQuantizeLinear
  (uint8: scale and zero point from each run's own min and max), weights offline; MatMul becomes MatMulInteger,
  Conv ConvInteger, each followed by Cast to float and a Mul by the product of the two scales (and the Conv bias
  added back in float); Gemm is first rewritten as MatMul (+ Add), as onnxruntime does; LSTM becomes
  com.microsoft DynamicQuantizeLSTM (int8 W and R), com.microsoft Attention QAttention; Gather reads its
  quantized table, Transpose moves quantized values; com.microsoft EmbedLayerNormalization becomes
  QEmbedLayerNormalization (quantized tables; in static QOperator format too).
- Static QOperator (quantize_static, quant_format=QOperator): calibrated scales; Conv -> QLinearConv, MatMul ->
  QLinearMatMul, Gemm -> com.microsoft QGemm (int32 biases), Add/Mul -> com.microsoft QLinearAdd/QLinearMul, and
  QLinearLeakyRelu, QLinearSigmoid, QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat, QLinearSoftmax;
  Relu and Clip vanish into their producer's range; Transpose, Reshape, Squeeze, Unsqueeze, Flatten, MaxPool,
  Resize, Split, Pad, Gather and ArgMax move (or read) quantized values as they are; Where becomes
  com.microsoft QLinearWhere with ForceQuantizeNoInputCheck.
Node and tensor names are onnxruntime's.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxjit.errors import InvalidGraph
from onnxjit.quantization import params as P
from onnxjit.quantization.model import MS_DOMAIN, QuantModel
from onnxjit.quantization.options import Options
from onnxjit.quantization.qdq import activation_params
from onnxjit.quantization.types import TensorsData

log = logging.getLogger("onnxjit")


@dataclass
class QValue:
    """A float tensor's quantized stand-in: its values and the scale and zero point tensors that decode it."""

    q: str
    scale: str
    zp: str
    axis: int | None = None


class QOperatorQuantizer:
    def __init__(self, qm: QuantModel, opts: Options, integer_ops: bool, ranges: TensorsData | None):
        self.qm, self.opts = qm, opts
        self.static = ranges is not None
        self.params = activation_params(qm, opts, ranges)
        self.handlers = INTEGER_OPS if integer_ops else QLINEAR_OPS
        self.values: dict[str, QValue] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.produced: set[str] = set(qm.graph_inputs)  # float values some node of the new graph writes

    def quantize(self) -> onnx.ModelProto:
        for node in list(self.qm.graph.node):
            handler = self.handlers.get(node.op_type)
            if handler is None or not self.opts.should_quantize(node) or not handler.applies(self, node) \
                    or not handler.rewrite(self, node):
                self.keep(node)
        for out in self.qm.graph.output:
            self.dequantize(out.name)
        self.qm.set_nodes(self.nodes)
        return self.qm.finish()

    # building blocks
    def emit(self, node: onnx.NodeProto) -> None:
        self.nodes.append(node)
        self.produced.update(node.output)

    def keep(self, node: onnx.NodeProto) -> None:
        """A node left float: its quantized inputs are dequantized first."""
        for name in node.input:
            self.dequantize(name)
        self.emit(node)

    def dequantize(self, name: str) -> None:
        v = self.values.get(name)
        if v is not None and name not in self.produced:
            self.emit(helper.make_node("DequantizeLinear", [v.q, v.scale, v.zp], [name], f"{name}_DequantizeLinear",
                                       axis=v.axis))

    def can_quantize(self, node: onnx.NodeProto, indices) -> bool:
        """Whether each of these inputs has (or can get) a quantized form: static mode needs a calibrated range."""
        for i in indices:
            name = node.input[i]
            if name and name not in self.values and name not in self.qm.initializers and self.static \
                    and name not in self.params:
                return False
        return True

    def output_params(self, name: str, fixed: tuple[float, int] | None = None) -> tuple[str, str] | None:
        """(scale, zero point) initializer names of a quantized op's output: calibrated, or `fixed` values."""
        p = self.params.get(name)
        if p is None:
            return None
        scale, zp = (p.scale, p.zero_point) if fixed is None else \
            (np.asarray(fixed[0], dtype=p.scale.dtype), np.asarray(fixed[1]))
        self.qm.add_initializer(P.scalar_or_vector(f"{name}_zero_point", p.qtype, zp, dims=[]))
        scale_type = TensorProto.FLOAT16 if scale.dtype == np.float16 else TensorProto.FLOAT
        self.qm.add_initializer(P.scalar_or_vector(f"{name}_scale", scale_type, scale, dims=[]))
        return f"{name}_scale", f"{name}_zero_point"

    def activation(self, name: str) -> QValue:
        """`name` quantized with the activation type: an initializer offline, a tensor by a node before its reader."""
        if name in self.values:
            return self.values[name]
        if not name:
            return QValue("", "", "")
        if name in self.qm.initializers:
            return self.initializer(name, self.opts.activation_type, False)
        v = QValue(f"{name}_quantized", f"{name}_scale", f"{name}_zero_point")
        if self.static:
            scale, zp = self.output_params(name)
            v = QValue(v.q, scale, zp)
            self.emit(helper.make_node("QuantizeLinear", [name, scale, zp], [v.q], f"{name}_QuantizeLinear"))
        elif self.qm.opset > 10:
            self.emit(helper.make_node("DynamicQuantizeLinear", [name], [v.q, v.scale, v.zp],
                                       f"{name}_QuantizeLinear"))
        else:  # opset 10 has no DynamicQuantizeLinear: its arithmetic spelled out
            self._dynamic_uint8_params(name)
            self.emit(helper.make_node("QuantizeLinear", [name, v.scale, v.zp], [v.q], f"{name}_QuantizeLinear"))
        self.values[name] = v
        return v

    def _dynamic_uint8_params(self, name: str) -> None:
        """`<name>_scale` = (max - min) / 255 and `<name>_zero_point` = floor((0 - min) / scale) as uint8, from
        the run's values (onnxruntime's opset-10 form, range not widened to hold 0)."""
        ftype = self.qm.elem_type(name)
        self.qm.add_initializer(helper.make_tensor("fixed_quantization_range_uint8", ftype, [], [255.0]))
        self.qm.add_initializer(helper.make_tensor("fixed_zero", ftype, [], [0.0]))
        steps = [("ReduceMin", [name], f"{name}_ReduceMin", {"keepdims": 0}),
                 ("ReduceMax", [name], f"{name}_ReduceMax", {"keepdims": 0}),
                 ("Sub", [f"{name}_ReduceMax:0", f"{name}_ReduceMin:0"], f"{name}_scale_Sub", {}),
                 ("Div", [f"{name}_scale_Sub:0", "fixed_quantization_range_uint8"], f"{name}_scale_Div", {}),
                 ("Sub", ["fixed_zero", f"{name}_ReduceMin:0"], f"{name}_zero_point_Sub", {}),
                 ("Div", [f"{name}_zero_point_Sub:0", f"{name}_scale"], f"{name}_zero_point_Div", {}),
                 ("Floor", [f"{name}_zero_point_Div:0"], f"{name}_zero_point_Floor", {}),
                 ("Cast", [f"{name}_zero_point_Floor:0"], f"{name}_zero_point_Cast", {"to": TensorProto.UINT8})]
        outputs = {f"{name}_scale_Div": f"{name}_scale", f"{name}_zero_point_Cast": f"{name}_zero_point"}
        for op, inputs, node_name, attrs in steps:
            self.emit(helper.make_node(op, inputs, [outputs.get(node_name, f"{node_name}:0")], node_name, **attrs))

    def weight(self, name: str, reduce_range: bool, channel_axis: int | None = None,
               qtype: int | None = None) -> QValue:
        """`name` quantized with the weight type: per channel along `channel_axis` when per_channel is on and it is
        an initializer; a tensor that is not one is quantized as an activation."""
        if name in self.values or name not in self.qm.initializers:
            return self.activation(name)
        qtype = self.opts.weight_type if qtype is None else qtype
        if self.opts.per_channel and channel_axis is not None:
            return self.initializer(name, qtype, reduce_range, channel_axis)
        return self.initializer(name, qtype, reduce_range)

    def initializer(self, name: str, qtype: int, reduce_range: bool, channel_axis: int | None = None) -> QValue:
        init = self.qm.initializers[name]
        if init.data_type not in P.FLOAT_TYPES:
            raise InvalidGraph(f"onnxjit.quantization: initializer {name!r} is not float; it cannot be quantized")
        data = self.qm.array(name)
        reduce_range = self.opts.reduce_range and reduce_range
        if channel_axis is not None:
            axis = P.normalize_axis(channel_axis, data.ndim, f"weight {name!r}")
            p = P.channel_params(data, axis, qtype, self.opts.is_weight_symmetric(qtype), reduce_range,
                                 self.opts.min_real_range)
            dims = [data.shape[axis]]
        else:
            symmetric = self.opts.is_weight_symmetric(qtype) if qtype == self.opts.weight_type \
                else self.opts.activation_symmetric
            p = P.data_params(data.ravel(), qtype, symmetric, reduce_range, self.opts.min_real_range)
            dims = []
        v = QValue(f"{name}_quantized", f"{name}_scale", f"{name}_zero_point", p.axis)
        self.qm.add_initializer(P.scalar_or_vector(v.scale, init.data_type, p.scale, dims))
        self.qm.add_initializer(P.scalar_or_vector(v.zp, qtype, p.zero_point, dims))
        self.qm.add_initializer(P.quantized_initializer(v.q, P.quantize_weight(data, p), qtype))
        self.values[name] = v
        return v

    def bias(self, bias: str, source: str, weight: str, beta: float = 1.0) -> str:
        """The int32 bias of a QLinearConv/QGemm: scale input_scale * weight_scale (the weight's scale widened
        first, and the weight requantized, where the bias would not fit int32)."""
        if bias in self.values:
            return self.values[bias].q
        wv, iv = self.values[weight], self.values[source]
        w_scale, in_scale = self.qm.array(wv.scale), self.qm.array(iv.scale)
        w_zp = numpy_helper.to_array(self.qm.initializers[wv.zp]) if wv.zp in self.qm.initializers else None
        data = self.qm.array(bias)
        if w_zp is not None and w_zp.size and not w_zp.any() and self.opts.weight_type == TensorProto.INT8 \
                and (not self.opts.per_channel or w_scale.ndim == 1):
            wider = P.widen_weight_scale_for_bias(in_scale, w_scale, data, self.opts.per_channel)
            if wider is not None and weight in self.qm.initializers:
                log.info("onnxjit.quantization: widened the scale of %r so that bias %r fits int32", weight, bias)
                self._requantize(weight, wv, wider, w_zp)
                w_scale = wider
        q, _ = P.quantize_bias(data, in_scale, w_scale, beta)
        self.qm.add_initializer(numpy_helper.from_array(q, f"{bias}_quantized"))
        self.values[bias] = QValue(f"{bias}_quantized", "", "")
        return f"{bias}_quantized"

    def _requantize(self, weight: str, v: QValue, scale: np.ndarray, zp: np.ndarray) -> None:
        init = self.qm.initializers[weight]
        qtype = self.qm.initializers[v.zp].data_type
        self.qm.remove_initializer(v.scale)
        self.qm.remove_initializer(v.q)
        dims = list(self.qm.array(weight).shape[v.axis:v.axis + 1]) if v.axis is not None else []
        self.qm.add_initializer(P.scalar_or_vector(v.scale, init.data_type, scale, dims))
        p = P.QuantParams(scale, zp, qtype, v.axis)
        self.qm.add_initializer(P.quantized_initializer(v.q, P.quantize_weight(self.qm.array(weight), p), qtype))

    def quantized_node(self, node: onnx.NodeProto, op_type: str, inputs, output: str, domain: str = "",
                       drop_attrs=(), **extra_attrs) -> None:
        """`op_type` in place of `node`, with node's attributes (but `drop_attrs`), named `<node>_quant`."""
        new = helper.make_node(op_type, list(inputs), [output], f"{node.name}_quant" if node.name else "",
                               domain=domain or None, **extra_attrs)
        new.attribute.extend(a for a in node.attribute if a.name not in drop_attrs)
        self.emit(new)


@dataclass(frozen=True)
class Handler:
    rewrite: callable  # (quantizer, node) -> bool: False leaves the node float
    applies: callable = lambda qz, node: qz.qm.is_float(node.input[0])


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _matmul_applies(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    if not (qz.qm.is_float(node.input[0]) or qz.qm.is_float(node.input[1])):
        return False
    return not qz.opts.matmul_const_b_only or node.input[1] in qz.qm.initializers


def _integer_product(qz: QOperatorQuantizer, node: onnx.NodeProto, op_type: str, x: QValue, w: QValue,
                     output: str) -> None:
    """op_type(x, w) in integers, cast to float and multiplied by x's and w's scales into `output`."""
    y = node.output[0]
    name = f"{node.name}_quant" if node.name else ""
    integer_out = f"{y}_output_quantized"
    qz.quantized_node(node, op_type, [x.q, w.q, x.zp, w.zp], integer_out)
    out_type = qz.qm.elem_type(y)
    if out_type is None:
        raise InvalidGraph(f"onnxjit.quantization: the type of {node.op_type} {node.name!r}'s output {y!r} is "
                           f"unknown (shape inference could not find it)")
    qz.emit(helper.make_node("Cast", [integer_out], [f"{integer_out}_cast_output"], f"{integer_out}_cast",
                             to=out_type))
    scales = f"{name}_scales_mul" if name else f"{x.scale}_{w.scale}_mul"
    if not any(n.name == scales for n in qz.nodes):
        qz.emit(helper.make_node("Mul", [x.scale, w.scale], [f"{scales}:0"], scales))
    qz.emit(helper.make_node("Mul", [f"{integer_out}_cast_output", f"{scales}:0"], [output],
                             f"{name}_output_scale_mul" if name else ""))


def matmul_integer(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    x = qz.activation(node.input[0])
    w = qz.weight(node.input[1], True, channel_axis=-1)
    _integer_product(qz, node, "MatMulInteger", x, w, node.output[0])
    return True


def conv_integer(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    x = qz.activation(node.input[0])
    w = qz.weight(node.input[1], qz.opts.reduce_range)
    y = node.output[0]
    has_bias = len(node.input) == 3 and node.input[2]
    _integer_product(qz, node, "ConvInteger", x, w, f"{y}quant_scaled_output" if has_bias else y)
    if has_bias:  # the float bias, shaped [1, C, 1, ...] to broadcast over the output
        rank = len(qz.qm.initializers[node.input[1]].dims) if node.input[1] in qz.qm.initializers else None
        if rank is None:
            raise InvalidGraph(f"onnxjit.quantization: Conv {node.name!r} has a bias but its weight "
                               f"{node.input[1]!r} is not an initializer")
        shape = np.ones(rank, dtype=np.int64)
        shape[1] = -1
        qz.qm.add_initializer(numpy_helper.from_array(shape, f"{y}_bias_reshape_shape"))
        qz.emit(helper.make_node("Reshape", [node.input[2], f"{y}_bias_reshape_shape"], [f"{y}_bias_reshape_output"]))
        qz.emit(helper.make_node("Add", [f"{y}quant_scaled_output", f"{y}_bias_reshape_output"], [y], f"{y}_bias_add"))
    return True


def qlinear_conv(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    has_bias = len(node.input) == 3 and node.input[2]
    if not qz.can_quantize(node, [0, 1]) or node.output[0] not in qz.params \
            or has_bias and not qz.qm.is_float_initializer(node.input[2]):
        return False
    out = qz.output_params(node.output[0])
    x = qz.activation(node.input[0])
    if node.input[1] in qz.qm.initializers and qz.opts.per_channel:
        w = qz.initializer(node.input[1], TensorProto.INT8, True, channel_axis=0) \
            if node.input[1] not in qz.values else qz.values[node.input[1]]
    else:
        w = qz.weight(node.input[1], qz.opts.reduce_range)
    inputs = [x.q, x.scale, x.zp, w.q, w.scale, w.zp, *out]
    if has_bias:
        inputs.append(qz.bias(node.input[2], node.input[0], node.input[1]))
    y = node.output[0]
    qz.quantized_node(node, "QLinearConv", inputs, f"{y}_quantized")
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def qlinear_matmul(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    if not qz.can_quantize(node, [0, 1]) or node.output[0] not in qz.params:
        return False
    out = qz.output_params(node.output[0])
    a = qz.activation(node.input[0])
    b = qz.weight(node.input[1], True, channel_axis=-1)
    y = node.output[0]
    qz.quantized_node(node, "QLinearMatMul", [a.q, a.scale, a.zp, b.q, b.scale, b.zp, *out], f"{y}_quantized")
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def qgemm(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    has_bias = len(node.input) == 3
    if not qz.can_quantize(node, [0, 1]) or node.output[0] not in qz.params \
            or has_bias and node.input[2] not in qz.qm.initializers:
        return False
    attrs = _attrs(node)
    out = qz.output_params(node.output[0])
    a = qz.activation(node.input[0])
    b = qz.weight(node.input[1], qz.opts.reduce_range, channel_axis=0 if attrs.get("transB", 0) else 1) \
        if qz.opts.per_channel else qz.weight(node.input[1], qz.opts.reduce_range)
    bias = qz.bias(node.input[2], node.input[0], node.input[1], attrs.get("beta", 1.0)) if has_bias else ""
    y = node.output[0]
    qz.quantized_node(node, "QGemm", [a.q, a.scale, a.zp, b.q, b.scale, b.zp, bias, *out], f"{y}_quantized",
                      domain=MS_DOMAIN, drop_attrs=("beta",))
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def qlinear_elementwise(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """com.microsoft QLinear<Op> over all inputs: (x, x_scale, x_zp)... then y_scale, y_zp (Add, Mul); for the
    unary ones (LeakyRelu, Sigmoid, AveragePool, Softmax) x's triple then y's pair."""
    indices = list(range(len(node.input)))
    if not qz.can_quantize(node, indices) or node.output[0] not in qz.params:
        return False
    fixed, extra = None, {}
    if node.op_type == "Softmax":  # probabilities: a fixed 1/256 grid
        fixed = (1 / 256.0, 0 if qz.opts.activation_type == TensorProto.UINT8 else -128)
        extra = {"opset": qz.qm.opset}
    out = qz.output_params(node.output[0], fixed)
    triples = [x for i in indices for x in _triple(qz.activation(node.input[i]))]
    y = node.output[0]
    qz.quantized_node(node, f"QLinear{node.op_type}", [*triples, *out], f"{y}_quantized", domain=MS_DOMAIN, **extra)
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def _triple(v: QValue) -> tuple[str, str, str]:
    return v.q, v.scale, v.zp


def qlinear_concat(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    indices = list(range(len(node.input)))
    if not qz.can_quantize(node, indices) or node.output[0] not in qz.params:
        return False
    out = qz.output_params(node.output[0])
    triples = [x for i in indices for x in _triple(qz.activation(node.input[i]))]
    y = node.output[0]
    qz.quantized_node(node, "QLinearConcat", [*out, *triples], f"{y}_quantized", domain=MS_DOMAIN)
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def qlinear_global_average_pool(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    v = qz.values.get(node.input[0])
    if v is None:
        return False
    out = qz.output_params(node.output[0]) or (v.scale, v.zp)
    y = node.output[0]
    qz.quantized_node(node, "QLinearGlobalAveragePool", [v.q, v.scale, v.zp, *out], f"{y}_quantized",
                      domain=MS_DOMAIN, channels_last=0)
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def same_as_input(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """Ops that move values (Transpose, Reshape, MaxPool, ...): run on the quantized input, the output decoded
    by the input's scale and zero point."""
    if node.op_type == "MaxPool" and qz.qm.opset < 12 or node.op_type == "Resize" and qz.qm.opset < 11:
        return False
    if qz.opts.force_quantize:
        if not qz.qm.is_float_initializer(node.input[0]):
            return False
        v = qz.activation(node.input[0])
    else:
        v = qz.values.get(node.input[0])
        if v is None:
            qz.emit(node)
            return True
    _on_quantized_input(qz, node, v)
    return True


def gather(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """A Gather from a weight table reads the quantized table."""
    _on_quantized_input(qz, node, qz.activation(node.input[0]))
    return True


def _on_quantized_input(qz: QOperatorQuantizer, node: onnx.NodeProto, v: QValue) -> None:
    """`node` as it is, reading v's codes as input 0 and writing `<y>_quantized`, which v's parameters decode."""
    y = node.output[0]
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    moved.input[0], moved.output[0] = v.q, f"{y}_quantized"
    qz.emit(moved)
    qz.values[y] = QValue(f"{y}_quantized", v.scale, v.zp)


def pad(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """Pad on the quantized input; a constant pad value is quantized with the input's parameters (none given:
    the zero point, which decodes to 0)."""
    v = qz.values.get(node.input[0])
    if qz.qm.opset < 11 or v is None:
        return False
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    if _attrs(node).get("mode", b"constant") == b"constant":
        if len(node.input) > 2 and node.input[2]:
            if v.scale not in qz.qm.initializers or v.zp not in qz.qm.initializers:
                return False
            value = node.input[2]
            if value in qz.qm.initializers:
                scale, zp = qz.qm.array(v.scale).ravel()[0], qz.qm.array(v.zp).ravel()[0]
                q = P.quantize_values(qz.qm.array(value), scale, zp, qz.opts.activation_type)
                qz.qm.add_initializer(numpy_helper.from_array(q, f"{value}_quantized"))
            else:
                qz.emit(helper.make_node("QuantizeLinear", [value, v.scale, v.zp], [f"{value}_quantized"],
                                         f"{value}_QuantizeLinear"))
                qz.values[value] = QValue(f"{value}_quantized", v.scale, v.zp)
            moved.input[2] = f"{value}_quantized"
        elif len(node.input) == 2:
            moved.input.append(v.zp)
        else:
            moved.input[2] = v.zp
    _on_quantized_input(qz, moved, v)
    return True


def qlinear_where(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """Where -> com.microsoft QLinearWhere, with ForceQuantizeNoInputCheck only (as in onnxruntime)."""
    if not qz.opts.force_quantize or not qz.can_quantize(node, [1, 2]) or node.output[0] not in qz.params:
        return False
    out = qz.output_params(node.output[0])
    a, b = qz.activation(node.input[1]), qz.activation(node.input[2])
    y = node.output[0]
    qz.quantized_node(node, "QLinearWhere", [node.input[0], *_triple(a), *_triple(b), *out], f"{y}_quantized",
                      domain=MS_DOMAIN)
    qz.values[y] = QValue(f"{y}_quantized", *out)
    return True


def lstm(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """LSTM -> com.microsoft DynamicQuantizeLSTM: W and R int8, transposed to [directions, input, 4 * hidden],
    scaled per direction (per_channel: per row of each direction's gates); X stays float."""
    w, r = node.input[1], node.input[2]
    if not (qz.qm.is_float_initializer(w) and qz.qm.is_float_initializer(r)) \
            or len(qz.qm.initializers[w].dims) != 3 or len(qz.qm.initializers[r].dims) != 3:
        return False
    wv, rv = _lstm_weight(qz, w), _lstm_weight(qz, r)
    optional = [node.input[i] if len(node.input) > i else "" for i in range(3, 8)]
    qz.dequantize(node.input[0])
    new = helper.make_node("DynamicQuantizeLSTM", [node.input[0], wv.q, rv.q, *optional, wv.scale, wv.zp, rv.scale,
                                                   rv.zp], list(node.output),
                           f"{node.name}_quant" if node.name else "", domain=MS_DOMAIN)
    new.attribute.extend(a for a in node.attribute if a.name != "layout")
    qz.emit(new)
    return True


def attention(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """com.microsoft Attention -> QAttention: the input quantized at run time, the packed QKV weight offline."""
    if "qkv_hidden_sizes" in _attrs(node):
        return False
    x = qz.activation(node.input[0])
    w = qz.weight(node.input[1], True, channel_axis=-1)
    optional = [node.input[i] if len(node.input) > i else "" for i in (3, 4)]
    new = helper.make_node("QAttention", [x.q, w.q, node.input[2], x.scale, w.scale, optional[0], x.zp, w.zp,
                                          optional[1]], list(node.output), f"{node.name}_quant" if node.name else "",
                           domain=MS_DOMAIN)
    new.attribute.extend(node.attribute)
    qz.emit(new)
    return True


def embed_layer_normalization(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """com.microsoft EmbedLayerNormalization -> QEmbedLayerNormalization: the three embedding tables, gamma and
    beta quantized (the activation type); the ids stay int32. Not with the third (embedding sum) output."""
    if len(node.output) > 2 or not qz.can_quantize(node, range(2, 7)):
        return False
    tables = [qz.activation(node.input[i]) for i in range(2, 7)]
    inputs = [node.input[0], node.input[1], *(v.q for v in tables), node.input[7] if len(node.input) > 7 else "",
              *(v.scale for v in tables), *(v.zp for v in tables)]
    new = helper.make_node("QEmbedLayerNormalization", inputs, list(node.output),
                           f"{node.name}_quant" if node.name else "", domain=MS_DOMAIN)
    new.attribute.extend(node.attribute)
    qz.emit(new)
    return True


def _lstm_weight(qz: QOperatorQuantizer, name: str) -> QValue:
    if name in qz.values:
        return qz.values[name]
    init = qz.qm.initializers[name]
    data = qz.qm.array(name)
    directions, rows, cols = data.shape
    rows_of = data.reshape(directions * rows, cols) if qz.opts.per_channel else data
    p = P.channel_params(rows_of, 0, TensorProto.INT8, qz.opts.is_weight_symmetric(TensorProto.INT8),
                         qz.opts.reduce_range, qz.opts.min_real_range)
    q = P.quantize_weight(rows_of, p).reshape(directions, rows, cols).transpose(0, 2, 1)
    dims = [directions, rows] if qz.opts.per_channel else [directions]
    v = QValue(f"{name}_quantized", f"{name}_scale", f"{name}_zero_point", 0)
    qz.qm.add_initializer(P.scalar_or_vector(v.scale, init.data_type, p.scale, dims))
    qz.qm.add_initializer(P.scalar_or_vector(v.zp, TensorProto.INT8, p.zero_point, dims))
    qz.qm.add_initializer(P.quantized_initializer(v.q, q, TensorProto.INT8))
    qz.values[name] = v
    return v


def alias_input(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    """Relu/Clip after a quantized tensor: dropped; the (asymmetric) quantized range clips as they would."""
    v = qz.values.get(node.input[0])
    if v is None or qz.opts.activation_symmetric:
        return False
    qz.values[node.output[0]] = v
    return True


def split(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    if not qz.can_quantize(node, [0]):
        return False
    v = qz.activation(node.input[0])
    outs = [f"{o}quantized" for o in node.output]
    new = helper.make_node(node.op_type, [v.q, *node.input[1:]], outs, f"{node.name}_quant" if node.name else "")
    new.attribute.extend(node.attribute)
    qz.emit(new)
    for o, q in zip(node.output, outs):
        qz.values[o] = QValue(q, v.scale, v.zp)
    return True


def argmax(qz: QOperatorQuantizer, node: onnx.NodeProto) -> bool:
    v = qz.values.get(node.input[0])
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    if v is not None:  # the largest code is the largest value
        moved.input[0] = v.q
    qz.emit(moved)
    return True


_direct = Handler(same_as_input)
INTEGER_OPS = {
    "Conv": Handler(conv_integer), "MatMul": Handler(matmul_integer, _matmul_applies),
    "Gather": Handler(gather, lambda qz, node: qz.qm.is_float_initializer(node.input[0])), "Transpose": _direct,
    "LSTM": Handler(lstm), "Attention": Handler(attention, lambda qz, node: True),
    "EmbedLayerNormalization": Handler(embed_layer_normalization, lambda qz, node: True),
}
QLINEAR_OPS = {
    "Conv": Handler(qlinear_conv), "MatMul": Handler(qlinear_matmul, _matmul_applies),
    "Gemm": Handler(qgemm, _matmul_applies),
    **dict.fromkeys(("Add", "Mul", "LeakyRelu", "Sigmoid", "AveragePool", "Softmax"), Handler(qlinear_elementwise)),
    "Concat": Handler(qlinear_concat), "GlobalAveragePool": Handler(qlinear_global_average_pool),
    "Relu": Handler(alias_input), "Clip": Handler(alias_input),
    **dict.fromkeys(("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "MaxPool", "Resize"), _direct),
    "Gather": INTEGER_OPS["Gather"], "Split": Handler(split), "ArgMax": Handler(argmax),
    "EmbedLayerNormalization": INTEGER_OPS["EmbedLayerNormalization"], "Pad": Handler(pad),
    "Where": Handler(qlinear_where, lambda qz, node: True),
}
# onnxruntime's default op lists, with what it quantizes and onnxjit does not (those stay float here)
DYNAMIC_OP_TYPES = ("Conv", "MatMul", "Attention", "LSTM", "Gather", "Transpose", "EmbedLayerNormalization")
QOPERATOR_OP_TYPES = tuple(QLINEAR_OPS)


def gemm_to_matmul(model: onnx.ModelProto) -> None:
    """Gemm (alpha = beta = 1, A not transposed) -> MatMul (+ Add of C), in place: dynamic quantization has an
    integer MatMul, no integer Gemm. A transposed constant B becomes a new `<B>_Transposed` initializer."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    taken = {t.name for t in g.initializer} | {v.name for v in (*g.input, *g.output, *g.value_info)}
    taken |= {x for n in g.node for x in (*n.input, *n.output)}
    transposed: dict[str, str] = {}
    nodes = []
    for node in g.node:
        attrs = _attrs(node)
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or attrs.get("alpha", 1.0) != 1.0 \
                or attrs.get("beta", 1.0) != 1.0 or attrs.get("transA", 0):
            nodes.append(node)
            continue
        b = node.input[1]
        if attrs.get("transB", 0):
            if b in inits:
                if b not in transposed:
                    name, k = f"{b}_Transposed", 0
                    while any(name + s in taken for s in ("", "_quantized", "_scale", "_zero_point")):
                        k += 1
                        name = f"{b}_Transposed_{k}"
                    taken.update(name + s for s in ("", "_quantized", "_scale", "_zero_point"))
                    g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(inits[b]).T, name))
                    transposed[b] = name
                b = transposed[b]
            else:
                nodes.append(helper.make_node("Transpose", [b], [f"{b}_Transposed"],
                                              f"{node.name}_Transpose" if node.name else ""))
                b = f"{b}_Transposed"
        has_c = len(node.input) > 2
        y = node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], b], [f"{y}_MatMul" if has_c else y],
                                      f"{node.name}_MatMul" if node.name else ""))
        if has_c:
            nodes.append(helper.make_node("Add", [f"{y}_MatMul", node.input[2]], [y],
                                          f"{node.name}_Add" if node.name else ""))
    del g.node[:]
    g.node.extend(nodes)
