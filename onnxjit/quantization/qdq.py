"""QDQ format: the float graph kept, with QuantizeLinear -> DequantizeLinear pairs on the activations each quantized
node reads and writes, DequantizeLinear on its quantized weights (per channel along `axis` with per_channel) and
on its int32 bias. A runtime fuses DQ -> op -> Q into an integer kernel; any runtime runs the file as it is.

Two phases, as onnxruntime's QDQ quantizer: each node to quantize marks the tensors it wants quantized (by op
type, MARKERS below), then the marks are turned into nodes and initializers: weights first (their parameters
from their own values; a weight's scale widens where its bias would overflow int32), then activations (their
calibrated ranges), then tensors that share an input's parameters (Transpose, Reshape, MaxPool, ... outputs:
these ops move values without changing them, so no new range is needed), then biases. Relu and Clip after a
quantized producer disappear: the asymmetric range of their output already clips what they would. Names follow
onnxruntime's (`w_quantized`, `w_scale`, `w_zero_point`, `x_QuantizeLinear`, `x_DequantizeLinear_Output`, ...).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxjit.errors import Fail
from onnxjit.quantization import params as P
from onnxjit.quantization.model import QuantModel, set_opset
from onnxjit.quantization.options import Options
from onnxjit.quantization.types import TensorsData

log = logging.getLogger("onnxjit")

WEIGHT, ACTIVATION = "weight", "activation"


def activation_params(qm: QuantModel, opts: Options, ranges: TensorsData | None) -> dict[str, P.QuantParams]:
    """Scale and zero point of every calibrated tensor. A Relu/Clip's input, read by it alone, takes its output's
    range (the values it clips away need no codes); a Softmax output's range is [0, 1]."""
    if ranges is None:
        return {}
    bounds = {name: td.range_value for name, td in ranges.items()}
    readers: dict[str, int] = {}
    for n in qm.graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    for n in qm.graph.node:
        if not opts.should_quantize(n):
            continue
        if n.op_type in ("Relu", "Clip"):
            if readers.get(n.input[0]) == 1 and n.input[0] in bounds and n.output[0] in bounds:
                bounds[n.input[0]] = bounds[n.output[0]]
        elif n.op_type == "Softmax" and n.output[0] in bounds:
            bounds[n.output[0]] = (np.float32(0.0), np.float32(1.0))
    return {name: P.scale_zero_point(lo, hi, opts.activation_type, opts.activation_symmetric, False,
                                     opts.min_real_range) for name, (lo, hi) in bounds.items()}


@dataclass
class Mark:
    kind: str  # WEIGHT or ACTIVATION: which quantization type an initializer gets
    axis: int | None = None  # per-channel weights
    share: tuple[str, str] | None = None  # (input, node): take that input's parameters


@dataclass
class BiasUse:
    node: str
    input: str
    weight: str
    beta: float


def scale_zp_initializers(qm: QuantModel, name: str, p: P.QuantParams, scale_type: int) -> tuple[str, str]:
    """`<name>_scale` and `<name>_zero_point`, shaped as the parameters (0-d, or [channels])."""
    qm.add_initializer(P.scalar_or_vector(f"{name}_zero_point", p.qtype, p.zero_point))
    qm.add_initializer(P.scalar_or_vector(f"{name}_scale", scale_type, p.scale))
    return f"{name}_scale", f"{name}_zero_point"


class QDQQuantizer:
    def __init__(self, qm: QuantModel, opts: Options, ranges: TensorsData | None):
        self.qm, self.opts = qm, opts
        self.params = activation_params(qm, opts, ranges)
        self.marks: dict[str, Mark] = {}
        self.biases: dict[str, BiasUse] = {}
        self.removed: list[onnx.NodeProto] = []
        self.quantized: dict[str, tuple[str, str]] = {}  # tensor -> (scale, zero point) initializer names
        self.weight_params: dict[str, P.QuantParams] = {}
        self.new_nodes: list[onnx.NodeProto] = []

    # marking
    def quantizable(self, name: str) -> bool:
        return bool(name) and self.qm.is_float(name)

    def is_marked(self, name: str) -> bool:
        return name in self.marks or name in self.biases

    def mark(self, name: str, kind: str = ACTIVATION) -> None:
        if self.quantizable(name) and name not in self.marks:
            self.marks[name] = Mark(kind)

    def mark_per_channel(self, name: str, axis: int) -> None:
        if self.qm.is_float_initializer(name):
            self.marks[name] = Mark(WEIGHT, axis)

    def mark_shared(self, name: str, source: str, node: onnx.NodeProto) -> None:
        if self.quantizable(name):
            self.marks[name] = Mark(ACTIVATION, share=(source, node.name))

    def mark_weight(self, name: str, default_axis: int, op_type: str | None = None) -> None:
        axis = self.channel_axis(name, default_axis, op_type)
        if axis is None:
            self.mark(name, WEIGHT)
        else:
            self.mark_per_channel(name, axis)

    def channel_axis(self, name: str, default_axis: int, op_type: str | None = None) -> int | None:
        """The per-channel axis of weight `name`, or None (per tensor: per_channel off, or not an initializer)."""
        if not self.opts.per_channel or name not in self.qm.initializers:
            return None
        axis = self.opts.axis_by_op.get(op_type, default_axis) if op_type else default_axis
        rank = len(self.qm.initializers[name].dims)
        if not -rank <= axis < rank:
            log.warning("onnxjit.quantization: axis %d is out of range for weight %r of rank %d; quantized per "
                        "tensor", axis, name, rank)
            return None
        return axis % rank

    def mark_bias(self, node: onnx.NodeProto, bias: str, source: str, weight: str, beta: float = 1.0) -> None:
        if not self.qm.is_float_initializer(bias):
            log.warning("onnxjit.quantization: bias %r of %s %r is not a float initializer; left float",
                        bias, node.op_type, node.name)
            return
        if bias in self.biases:  # another node's bias too: each gets its own copy, quantized at its own scale
            pattern = re.compile(re.escape(bias) + r"(\d+)$")
            suffixes = [int(m.group(1)) for m in map(pattern.match, self.qm.initializers) if m]
            copy_name = f"{bias}{max(suffixes, default=0) + 1}"
            dup = onnx.TensorProto()
            dup.CopyFrom(self.qm.initializers[bias])
            dup.name = copy_name
            self.qm.add_initializer(dup)
            for n in self.qm.graph.node:
                if n.name == node.name:
                    self.qm.rename_input(bias, copy_name, [n])
            bias = copy_name
        self.biases[bias] = BiasUse(node.name, source, weight, beta)

    def output_excluded(self, node: onnx.NodeProto) -> bool:
        return node.op_type in self.opts.exclude_output_ops

    # the pass
    def quantize(self) -> onnx.ModelProto:
        for node in list(self.qm.graph.node):
            if self.opts.should_quantize(node):
                MARKERS.get(node.op_type, mark_all)(self, node)
        self.weight_params = {name: self._weight_params(name, m) for name, m in self.marks.items()
                              if name in self.qm.initializers}
        if self.opts.adjust_weight_for_bias:
            self._widen_weights_for_biases()
        for name, m in list(self.marks.items()):
            if m.share is None:
                self._quantize_tensor(name)
        self._quantize_shared()
        if self.opts.quantize_bias:
            for bias, use in self.biases.items():
                self._quantize_bias(bias, use)
        for node in self.removed:
            self.qm.graph.node.remove(node)
        self.qm.graph.node.extend(self.new_nodes)
        if self.opts.qdq_domain:
            set_opset(self.qm.model, self.opts.qdq_domain, 1)
        return self.qm.finish()

    def _weight_params(self, name: str, m: Mark) -> P.QuantParams:
        data = self.qm.array(name)
        is_weight = m.kind == WEIGHT
        qtype = self.opts.weight_type if is_weight else self.opts.activation_type
        if m.axis is not None:  # per-channel weights are symmetric whatever the type
            return P.channel_params(data, m.axis, qtype, True, self.opts.reduce_range, self.opts.min_real_range)
        symmetric = self.opts.is_weight_symmetric(qtype) if is_weight else self.opts.activation_symmetric
        return P.data_params(data.ravel(), qtype, symmetric, self.opts.reduce_range, self.opts.min_real_range)

    def _widen_weights_for_biases(self) -> None:
        for bias, use in self.biases.items():
            if use.input not in self.params or use.input not in self.marks or use.weight not in self.weight_params:
                continue
            wp = self.weight_params[use.weight]
            if wp.qtype not in (TensorProto.INT8, TensorProto.INT16) or wp.zero_point.any():
                continue
            in_dtype = helper.tensor_dtype_to_np_dtype(self.qm.elem_type(use.input))
            wider = P.widen_weight_scale_for_bias(np.asarray(self.params[use.input].scale, dtype=in_dtype),
                                                  wp.scale, self.qm.array(bias), wp.axis is not None)
            if wider is not None:
                log.info("onnxjit.quantization: widened the scale of %r so that bias %r fits int32", use.weight, bias)
                wp.scale = wider

    def _node(self, op: str, inputs, output: str, name: str, axis: int | None = None) -> None:
        self.new_nodes.append(helper.make_node(op, list(inputs), [output], name, axis=axis,
                                               domain=self.opts.qdq_domain or None))

    def _quantize_tensor(self, name: str) -> None:
        if name in self.qm.initializers:
            self._quantize_initializer(name)
            return
        p = self.params.get(name)
        if p is None:
            raise Fail(f"onnxjit.quantization: tensor {name!r} is to be quantized but calibration gave it no range")
        scale, zp = scale_zp_initializers(self.qm, name, p, self.qm.elem_type(name))
        self._qdq_pair(name, scale, zp)

    def _quantize_initializer(self, name: str) -> None:
        p = self.weight_params[name]
        init = self.qm.initializers[name]
        scale, zp = scale_zp_initializers(self.qm, name, p, init.data_type)
        dq_out = f"{name}_DequantizeLinear_Output"
        self.qm.rename_input(name, dq_out)
        if self.opts.qdq_pair_on_weights:
            self._node("QuantizeLinear", [name, scale, zp], f"{name}_QuantizeLinear_Output", f"{name}_QuantizeLinear",
                       p.axis)
            self._node("DequantizeLinear", [f"{name}_QuantizeLinear_Output", scale, zp], dq_out,
                       f"{name}_DequantizeLinear", p.axis)
        else:
            q = P.quantized_initializer(f"{name}_quantized", P.quantize_weight(self.qm.array(name), p), p.qtype)
            self.qm.add_initializer(q)
            self._node("DequantizeLinear", [q.name, scale, zp], dq_out, f"{name}_DequantizeLinear", p.axis)
        self.quantized[name] = (scale, zp)

    def _qdq_pair(self, name: str, scale: str, zp: str) -> None:
        """x -> QuantizeLinear -> DequantizeLinear -> x's readers (a graph output keeps its name: the producer
        writes `x_QuantizeLinear_Input` instead)."""
        if name in self.qm.graph_outputs:
            q_in, dq_out = f"{name}_QuantizeLinear_Input", name
            self.qm.rename_output(name, q_in)
        else:
            q_in, dq_out = name, f"{name}_DequantizeLinear_Output"
            self.qm.rename_input(name, dq_out)
        self._node("QuantizeLinear", [q_in, scale, zp], f"{name}_QuantizeLinear_Output", f"{name}_QuantizeLinear")
        self._node("DequantizeLinear", [f"{name}_QuantizeLinear_Output", scale, zp], dq_out,
                   f"{name}_DequantizeLinear")
        self.quantized[name] = (scale, zp)

    def _quantize_shared(self) -> None:
        pending = {n: m.share for n, m in self.marks.items() if m.share is not None}
        while pending:
            ready = [n for n, (source, _) in pending.items() if source in self.quantized]
            if not ready:  # their sources were never quantized: nothing to share
                log.warning("onnxjit.quantization: %s left float: the inputs they share parameters with are not "
                            "quantized", sorted(pending))
                return
            for n in ready:
                self._qdq_pair(n, *self.quantized[pending.pop(n)[0]])

    def _scale_of(self, name: str) -> np.ndarray:
        if name not in self.quantized:
            raise Fail(f"onnxjit.quantization: {name!r} has no quantization scale to derive a bias scale from")
        return self.qm.array(self.quantized[name][0])

    def _quantize_bias(self, bias: str, use: BiasUse) -> None:
        q, scale = P.quantize_bias(self.qm.array(bias), self._scale_of(use.input), self._scale_of(use.weight),
                                   use.beta)
        init = self.qm.initializers[bias]
        qname = f"{bias}_quantized"
        self.qm.add_initializer(onnx.numpy_helper.from_array(q, qname))
        self.qm.add_initializer(P.scalar_or_vector(f"{qname}_scale", init.data_type, scale))
        zero = np.zeros(scale.shape, dtype=np.int32) if scale.size > 1 else np.zeros((), dtype=np.int32)
        self.qm.add_initializer(P.scalar_or_vector(f"{qname}_zero_point", TensorProto.INT32, zero))
        self.qm.remove_initializer(bias)
        self._node("DequantizeLinear", [qname, f"{qname}_scale", f"{qname}_zero_point"], bias,
                   f"{bias}_DequantizeLinear", 0 if scale.size > 1 else None)


# what each op type marks (onnxruntime's QDQ registry); other op types mark every input and output
def mark_all(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    names = list(node.input) + ([] if qz.output_excluded(node) else list(node.output))
    for name in names:
        qz.mark(name)


def mark_conv(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    qz.mark(node.input[0])
    if not qz.output_excluded(node):
        qz.mark(node.output[0])
    qz.mark_weight(node.input[1], 0 if node.op_type == "Conv" else 1)
    if len(node.input) == 3:
        qz.mark_bias(node, node.input[2], node.input[0], node.input[1])


def mark_gemm(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    qz.mark(node.input[0])
    if not qz.output_excluded(node):
        qz.mark(node.output[0])
    qz.mark_weight(node.input[1], 0 if attrs.get("transB", 0) else 1)
    if len(node.input) == 3:
        if node.input[2] in qz.qm.initializers:
            qz.mark_bias(node, node.input[2], node.input[0], node.input[1], attrs.get("beta", 1.0))
            for a in node.attribute:  # beta now lives in the bias's scale
                if a.name == "beta":
                    a.f = 1.0
        else:
            log.warning("onnxjit.quantization: the bias of Gemm %r is not constant; left float", node.name)


def mark_matmul(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    names = list(node.input) + ([] if qz.output_excluded(node) else list(node.output))
    for name in names:
        if name in qz.qm.initializers:
            qz.mark_weight(name, 1, node.op_type)
        else:
            qz.mark(name)


def mark_removable(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    """Relu/Clip after a quantized tensor: removed (its producer writes its output) when the quantized range
    does the clipping, that is with asymmetric activations."""
    source, out = node.input[0], node.output[0]
    if not qz.is_marked(source):
        return
    qm = qz.qm
    if not qz.opts.activation_symmetric and not qz.opts.keep_removable_activations and out in qz.params \
            and len(qm.consumers(source)) == 1 and source not in qm.graph_outputs \
            and source not in {i.name for i in qm.graph.input}:
        qm.rename_output(source, out)
        qz.marks.pop(source, None)
        qz.removed.append(node)
    else:
        qz.mark(source)
    if not qz.output_excluded(node):
        qz.mark(out)


def mark_same_as_input(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    """Ops that move values (Transpose, Reshape, MaxPool, ...): the output shares the input's parameters."""
    if node.op_type == "MaxPool" and qz.qm.opset < 12 or node.op_type == "Resize" and qz.qm.opset < 11:
        return  # no 8-bit MaxPool before opset 12, Resize before 11
    if qz.opts.force_quantize:
        qz.mark(node.input[0])
        if not qz.output_excluded(node):
            qz.mark_shared(node.output[0], node.input[0], node)
    elif qz.is_marked(node.input[0]) and not qz.output_excluded(node):
        qz.mark_shared(node.output[0], node.input[0], node)


def mark_gather(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    if qz.qm.is_float_initializer(node.input[0]) or qz.opts.force_quantize:
        qz.mark(node.input[0])
        qz.mark_shared(node.output[0], node.input[0], node)
    elif qz.is_marked(node.input[0]):
        qz.mark_shared(node.output[0], node.input[0], node)


def mark_split(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    if not qz.is_marked(node.input[0]):
        qz.mark(node.input[0])
    if not qz.output_excluded(node):
        for out in node.output:
            qz.mark_shared(out, node.input[0], node)


def mark_where(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    if qz.opts.force_quantize:
        for name in node.input[1:3]:
            if not qz.is_marked(name):
                qz.mark(name)
    elif not (qz.is_marked(node.input[1]) and qz.is_marked(node.input[2])):
        return
    if not qz.output_excluded(node):
        for out in node.output:
            qz.mark(out)


def mark_pad(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    for name in node.input:
        qz.mark(name)
    if qz.output_excluded(node):
        return
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"constant")
    if mode in (b"reflect", b"edge", b"wrap"):
        same = True  # the padding repeats input values
    elif mode == b"constant":  # padding with 0 stays in range: every range holds 0
        if qz.qm.opset < 11:
            value = attrs.get("value", 0.0)
        elif len(node.input) >= 3 and node.input[2]:
            value = _constant(qz.qm, node.input[2])
        else:
            value = 0.0
        same = value is not None and float(np.asarray(value).item()) == 0
    else:
        same = False
    if same:
        qz.mark_shared(node.output[0], node.input[0], node)
    else:
        qz.mark(node.output[0])


def _constant(qm: QuantModel, name: str):
    if name in qm.initializers:
        return qm.array(name)
    for n in qm.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            if "value" in attrs:
                return onnx.numpy_helper.to_array(attrs["value"])
    return None


def mark_normalization(qz: QDQQuantizer, node: onnx.NodeProto) -> None:
    qz.mark(node.input[0])
    scale = node.input[1]
    axis = qz.channel_axis(scale, 1, node.op_type)
    if axis is not None:
        qz.mark_per_channel(scale, axis)
    else:
        qz.mark(scale, WEIGHT if scale in qz.qm.initializers else ACTIVATION)
    if len(node.input) > 2 and node.input[2]:
        qz.mark_bias(node, node.input[2], node.input[0], node.input[1])
    if not qz.output_excluded(node):
        for out in node.output:
            qz.mark(out)


MARKERS = {
    "Conv": mark_conv, "ConvTranspose": mark_conv, "Gemm": mark_gemm, "MatMul": mark_matmul,
    "Relu": mark_removable, "Clip": mark_removable,
    **dict.fromkeys(("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "AveragePool", "Slice", "TopK",
                     "MaxPool", "Resize"), mark_same_as_input),
    "Gather": mark_gather, "GatherElements": mark_gather, "Split": mark_split, "Where": mark_where,
    "Pad": mark_pad, **dict.fromkeys(("InstanceNormalization", "LayerNormalization", "BatchNormalization"),
                                     mark_normalization),
}
# onnxruntime's static default op list: its QOperator and QDQ registries together
QDQ_OP_TYPES = (*MARKERS, "CumSum")
