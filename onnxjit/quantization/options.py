"""The quantizers' settings: quantize_dynamic/quantize_static's arguments and their `extra_options`, checked once.

extra_options takes onnxruntime's keys. Those onnxjit implements are in SUPPORTED_KEYS; those onnxruntime has and
onnxjit does not (subgraphs, SmoothQuant, tensor overrides, blocked weights, ...) raise NotImplemented when set to
anything but their default, and unknown keys raise InvalidArgument, so a misspelt option is not silently ignored.
The session config entry `session.onnxjit.show_progress` = "0" (as a key here) turns the calibration progress
bar off, as it turns off the kernel compilation bar.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from onnxjit.errors import InvalidArgument, NotImplemented
from onnxjit.providers.cpu import SHOW_PROGRESS_KEY
from onnxjit.quantization.params import check_quant_type
from onnxjit.quantization.types import QuantType

SUPPORTED_KEYS = {
    "ActivationSymmetric": "activation ranges made symmetric about 0",
    "WeightSymmetric": "weights quantized symmetrically (default: for signed weight types)",
    "MinimumRealRange": "the narrowest float range a scale is computed from",
    "ForceQuantizeNoInputCheck": "quantize Transpose/Reshape/MaxPool/... even when their input is not quantized",
    "MatMulConstBOnly": "only MatMuls whose B is a weight (default True in dynamic mode)",
    "OpTypesToExcludeOutputQuantization": "op types whose outputs get no QuantizeLinear/DequantizeLinear (QDQ)",
    "AddQDQPairToWeight": "keep float weights behind a QuantizeLinear/DequantizeLinear pair (QDQ)",
    "QuantizeBias": "quantize Conv/Gemm biases to int32 (QDQ; default True)",
    "QDQOpTypePerChannelSupportToAxis": "per-channel axis by op type, e.g. {'MatMul': 1} (QDQ)",
    "UseQDQContribOps": "write QuantizeLinear/DequantizeLinear in the com.microsoft domain (QDQ)",
    "QDQKeepRemovableActivations": "keep Relu/Clip after a quantized producer (QDQ)",
    "QDQDisableWeightAdjustForInt32Bias": "never widen a weight's scale so its bias fits int32 (QDQ)",
    "CalibTensorRangeSymmetric": "calibrated ranges made symmetric about 0",
    "CalibMovingAverage": "MinMax: the mean of the batches' minima and maxima",
    "CalibMovingAverageConstant": "accepted for compatibility (onnxruntime uses it only across strided calls)",
    "CalibPercentile": "Percentile calibration's percentile (default 99.999)",
    SHOW_PROGRESS_KEY: '"0": no calibration progress bar',
}
NOT_IMPLEMENTED_KEYS = ("EnableSubgraph", "DedicatedQDQPair", "TensorQuantOverrides", "SmoothQuant",
                        "SmoothQuantAlpha", "SmoothQuantFolding", "CalibStridedMinMax", "CalibMaxIntermediateOutputs",
                        "BlockSize", "ActivationRestrictedAsymmetric", "DefaultTensorType", "extra.Sigmoid.nnapi")
SIGNED_WEIGHT_TYPES = (TensorProto.INT4, TensorProto.INT8, TensorProto.INT16)


@dataclass
class Options:
    per_channel: bool
    reduce_range: bool
    weight_type: int  # ONNX element types
    activation_type: int
    op_types: tuple[str, ...]
    nodes_to_quantize: frozenset[str]
    nodes_to_exclude: frozenset[str]
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.weight_symmetric: bool | None = self.extra.get("WeightSymmetric")
        self.activation_symmetric = bool(self.extra.get("ActivationSymmetric", False))
        self.min_real_range = self.extra.get("MinimumRealRange")
        self.force_quantize = bool(self.extra.get("ForceQuantizeNoInputCheck", False))
        self.matmul_const_b_only = bool(self.extra.get("MatMulConstBOnly", False))
        self.exclude_output_ops = frozenset(self.extra.get("OpTypesToExcludeOutputQuantization", ()))
        self.qdq_pair_on_weights = bool(self.extra.get("AddQDQPairToWeight", False))
        self.quantize_bias = bool(self.extra.get("QuantizeBias", True))
        self.axis_by_op = dict(self.extra.get("QDQOpTypePerChannelSupportToAxis", {}))
        self.qdq_domain = "com.microsoft" if self.extra.get("UseQDQContribOps", False) else ""
        self.keep_removable_activations = bool(self.extra.get("QDQKeepRemovableActivations", False))
        self.adjust_weight_for_bias = not self.extra.get("QDQDisableWeightAdjustForInt32Bias", False)
        self.show_progress = str(self.extra.get(SHOW_PROGRESS_KEY, "1")) != "0"

    def is_weight_symmetric(self, qtype: int) -> bool:
        return self.weight_symmetric if self.weight_symmetric is not None else qtype in SIGNED_WEIGHT_TYPES

    def should_quantize(self, node: onnx.NodeProto) -> bool:
        if self.nodes_to_quantize and node.name not in self.nodes_to_quantize:
            return False
        return node.op_type in self.op_types and node.op_type not in ("QuantizeLinear", "DequantizeLinear") \
            and node.name not in self.nodes_to_exclude

    def calibration(self) -> dict:
        """The calibrator's settings from the Calib* keys."""
        keys = {"CalibTensorRangeSymmetric": "symmetric", "CalibMovingAverage": "moving_average",
                "CalibMovingAverageConstant": "averaging_constant", "CalibPercentile": "percentile"}
        return {name: self.extra[key] for key, name in keys.items() if key in self.extra}


def check_extra_options(extra_options) -> dict:
    if extra_options is None:
        return {}
    if not isinstance(extra_options, dict):
        raise InvalidArgument(f"onnxjit.quantization: extra_options must be a dict, not {type(extra_options).__name__}")
    for key, value in extra_options.items():
        if key in NOT_IMPLEMENTED_KEYS:
            if value:
                raise NotImplemented(f"onnxjit.quantization: extra_options[{key!r}] is not implemented")  # noqa: F901
        elif key not in SUPPORTED_KEYS:
            raise InvalidArgument(f"onnxjit.quantization: unknown extra_options key {key!r}; onnxjit takes "
                                  f"{sorted(SUPPORTED_KEYS)}")
    return dict(extra_options)


def quant_type(value, what: str) -> int:
    """The ONNX element type of a QuantType argument (or of the element type itself)."""
    if isinstance(value, QuantType):
        qtype = value.tensor_type
    elif isinstance(value, int) and value in TensorProto.DataType.values():
        qtype = value
    else:
        raise InvalidArgument(f"onnxjit.quantization: {what} must be a QuantType, not {value!r}")
    check_quant_type(qtype, what)
    return qtype


def names(value, what: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument(f"onnxjit.quantization: {what} must be a list of node names, got {value!r}")
    return frozenset(value)
