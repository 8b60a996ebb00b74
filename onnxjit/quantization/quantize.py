"""quantize_dynamic, quantize_static, quant_pre_process and quantize (with a StaticQuantConfig or
DynamicQuantConfig): onnxruntime.quantization's entry points, their
arguments checked up front (typed errors naming the argument), then the model loaded with onnx shape inference,
calibrated on onnxjit (static), rewritten by the QDQ or operator-format quantizer, and saved."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import onnx

from onnxjit.errors import InvalidArgument, NoSuchFile, NotImplemented
from onnxjit.quantization.calibrate import Calibrator, load_tensors_data, save_tensors_data
from onnxjit.quantization.model import (INFER_METADATA, PRE_PROCESS_METADATA, QuantModel, default_opset,
                                        has_metadata, load_model, save_model, set_metadata)
from onnxjit.quantization.options import Options, check_extra_options, names, quant_type
from onnxjit.quantization.qdq import QDQ_OP_TYPES, QDQQuantizer
from onnxjit.quantization.qoperator import (DYNAMIC_OP_TYPES, QOPERATOR_OP_TYPES, QOperatorQuantizer,
                                            gemm_to_matmul)
from onnxjit.quantization.types import CalibrationMethod, QuantFormat, QuantType

log = logging.getLogger("onnxjit")

STATIC_OP_TYPES = tuple(dict.fromkeys((*QOPERATOR_OP_TYPES, *QDQ_OP_TYPES)))
SIXTEEN_BIT = (QuantType.QInt16, QuantType.QUInt16)
FOUR_BIT = (QuantType.QInt4, QuantType.QUInt4)
# contrib op types onnxruntime's lists name (onnx.defs does not know them)
CONTRIB_OP_TYPES = ("Attention", "EmbedLayerNormalization")


def _op_types(op_types, defaults: tuple[str, ...], mode: str) -> tuple[str, ...]:
    """The op types to quantize: `defaults` when none are given; a name that is no operator is an error (one
    that this mode does not quantize is accepted and left float, as onnxruntime does)."""
    if not op_types:
        return defaults
    if isinstance(op_types, str) or not all(isinstance(t, str) for t in op_types):
        raise InvalidArgument(f"onnxjit.quantization: op_types_to_quantize must be a list of op type names, "
                              f"got {op_types!r}")
    for t in op_types:
        if not onnx.defs.has(t) and t not in CONTRIB_OP_TYPES:
            raise InvalidArgument(f"onnxjit.quantization: op_types_to_quantize names {t!r}, which is not an ONNX "
                                  f"operator; {mode} quantization quantizes {sorted(defaults)}")
    return tuple(op_types)


def _update_opset(model: onnx.ModelProto, types) -> onnx.ModelProto:
    """Opset 11 at least (no quantization operators before); 21 for 16-bit types (QuantizeLinear's int16)."""
    opset = default_opset(model)
    target = 21 if opset < 21 and any(t in SIXTEEN_BIT for t in types) else 11 if opset < 10 else opset
    if target == opset:
        return model
    log.warning("onnxjit.quantization: converting the model from opset %d to %d for quantization", opset, target)
    try:
        model = onnx.version_converter.convert_version(model, target)
    except Exception as e:  # noqa: BLE001 - named
        raise NotImplemented(f"onnxjit.quantization: the model needs opset {target} to be quantized "  # noqa: F901
                             f"so, and onnx's version converter failed: {e}") from e
    model = onnx.shape_inference.infer_shapes(model)
    set_metadata(model, *INFER_METADATA)
    return model


def _flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"onnxjit.quantization: {what} must be True or False, got {value!r}")
    return value


def _warn_not_pre_processed(model: onnx.ModelProto) -> None:
    if not has_metadata(model, *PRE_PROCESS_METADATA):
        log.info("onnxjit.quantization: the model did not go through quant_pre_process; consider running it first")


def quantize_dynamic(model_input, model_output, op_types_to_quantize=None, per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8, nodes_to_quantize=None, nodes_to_exclude=None,
                     use_external_data_format=False, extra_options=None) -> None:
    """Weights quantized offline, activations at run time (DynamicQuantizeLinear, uint8): MatMul and Gemm ->
    MatMulInteger, Conv -> ConvInteger, Gather reads a quantized table. Writes the model to `model_output`."""
    extra = check_extra_options(extra_options)
    extra.setdefault("MatMulConstBOnly", True)
    wtype = quant_type(weight_type, "weight_type")
    if weight_type not in (QuantType.QInt8, QuantType.QUInt8):
        raise InvalidArgument(f"onnxjit.quantization: dynamic quantization takes weight_type QInt8 or QUInt8 "
                              f"(MatMulInteger and ConvInteger have 8-bit operands), not {weight_type}")
    opts = Options(_flag(per_channel, "per_channel"), _flag(reduce_range, "reduce_range"), wtype,
                   onnx.TensorProto.UINT8, _op_types(op_types_to_quantize, DYNAMIC_OP_TYPES, "dynamic"),
                   names(nodes_to_quantize, "nodes_to_quantize"), names(nodes_to_exclude, "nodes_to_exclude"), extra)
    model = load_model(model_input)
    _warn_not_pre_processed(model)
    model = _update_opset(model, (weight_type,))
    gemm_to_matmul(model)  # every Gemm, as onnxruntime: there is no integer Gemm
    model = onnx.shape_inference.infer_shapes(model)
    quantized = QOperatorQuantizer(QuantModel(model), opts, integer_ops=True, ranges=None).quantize()
    save_model(quantized, model_output, use_external_data_format)


def quantize_static(model_input, model_output, calibration_data_reader=None, quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=None, per_channel=False, reduce_range=False,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, nodes_to_quantize=None,
                    nodes_to_exclude=None, use_external_data_format=False,
                    calibrate_method=CalibrationMethod.MinMax, calibration_providers=None, extra_options=None,
                    calibration_cache_path=None) -> None:
    """Activations quantized with ranges calibrated over `calibration_data_reader`'s batches (run on onnxjit),
    weights offline; QDQ (QuantizeLinear/DequantizeLinear pairs) or QOperator (QLinearConv, QLinearMatMul, ...)
    format. Writes the model to `model_output`."""
    extra = check_extra_options(extra_options)
    if not isinstance(quant_format, QuantFormat):
        raise InvalidArgument(f"onnxjit.quantization: quant_format must be a QuantFormat, not {quant_format!r}")
    if not isinstance(calibrate_method, CalibrationMethod):
        raise InvalidArgument(f"onnxjit.quantization: calibrate_method must be a CalibrationMethod, "
                              f"not {calibrate_method!r}")
    atype, wtype = quant_type(activation_type, "activation_type"), quant_type(weight_type, "weight_type")
    if activation_type == QuantType.QInt8 and weight_type == QuantType.QUInt8:
        raise InvalidArgument("onnxjit.quantization: activation_type QInt8 with weight_type QUInt8 is not a "
                              "supported combination (as in onnxruntime)")
    if quant_format == QuantFormat.QOperator and (activation_type in SIXTEEN_BIT + FOUR_BIT
                                                  or weight_type in SIXTEEN_BIT + FOUR_BIT):
        raise InvalidArgument("onnxjit.quantization: 16-bit and 4-bit types need quant_format=QuantFormat.QDQ "
                              "(the QLinear operators are 8-bit)")
    cache = Path(calibration_cache_path) if calibration_cache_path is not None else None
    if cache is not None and cache.exists() and not cache.is_file():
        raise InvalidArgument(f"onnxjit.quantization: calibration_cache_path {str(cache)!r} is not a file")
    cached = cache is not None and cache.is_file()
    mode = "QOperator" if quant_format == QuantFormat.QOperator else "QDQ"
    opts = Options(_flag(per_channel, "per_channel"), _flag(reduce_range, "reduce_range"), wtype, atype,
                   _op_types(op_types_to_quantize, STATIC_OP_TYPES, mode),
                   names(nodes_to_quantize, "nodes_to_quantize"), names(nodes_to_exclude, "nodes_to_exclude"), extra)
    model = load_model(model_input)
    _warn_not_pre_processed(model)
    model = _update_opset(model, (weight_type, activation_type))
    if opts.qdq_domain == "" and mode == "QDQ" and default_opset(model) < 21 and \
            (activation_type in FOUR_BIT or weight_type in FOUR_BIT):
        opts.qdq_domain = "com.microsoft"  # no 4-bit QuantizeLinear in the ONNX domain before opset 21
    if cached:  # ranges computed before (by onnxjit or onnxruntime): no calibration run
        ranges = load_tensors_data(cache)
        if ranges.calibration_method != calibrate_method:
            raise InvalidArgument(f"onnxjit.quantization: the calibration cache {str(cache)!r} holds "
                                  f"{ranges.calibration_method} ranges, and calibrate_method is {calibrate_method}")
    else:
        calibrator = Calibrator(model, opts.op_types, calibrate_method, opts.calibration(), opts.show_progress,
                                providers=calibration_providers)
        ranges = calibrator.collect(calibration_data_reader)
        if cache is not None:
            save_tensors_data(ranges, cache)
    qm = QuantModel(model)
    if quant_format == QuantFormat.QOperator:
        quantized = QOperatorQuantizer(qm, opts, integer_ops=False, ranges=ranges).quantize()
    else:
        quantized = QDQQuantizer(qm, opts, ranges).quantize()
    save_model(quantized, model_output, use_external_data_format)


def quant_pre_process(input_model=None, output_model_path=None, skip_optimization=False, skip_onnx_shape=False,
                      skip_symbolic_shape=False, auto_merge=False, int_max=2**31 - 1, guess_output_rank=False,
                      verbose=0, save_as_external_data=False, all_tensors_to_one_file=False,
                      external_data_location=None, external_data_size_threshold=1024, **deprecated_kwargs) -> None:
    """Prepare a model for quantization: opset 11 at least, onnxjit's basic-level graph optimizations (constant
    folding, Identity/Dropout removal, duplicate nodes, Conv+BatchNormalization/Add/Mul folding, MatMul+Add ->
    Gemm, Transpose/Reshape merges) in place of onnxruntime's, and onnx's shape inference with data propagation in
    place of onnxruntime's symbolic shape inference (auto_merge, int_max and guess_output_rank are accepted and
    unused). Writes the model tagged as pre-processed, as onnxruntime does."""
    if input_model is None:
        input_model = deprecated_kwargs.pop("input_model_path", None)
    if deprecated_kwargs:
        raise InvalidArgument(f"onnxjit.quantization: quant_pre_process got unknown arguments "
                              f"{sorted(deprecated_kwargs)}")
    if input_model is None:
        raise InvalidArgument("onnxjit.quantization: quant_pre_process needs an input_model")
    if output_model_path is None:
        raise InvalidArgument("onnxjit.quantization: quant_pre_process needs an output_model_path")
    if isinstance(input_model, (str, os.PathLike)) and not Path(input_model).is_file():
        raise NoSuchFile(f"onnxjit.quantization: input_model {str(input_model)!r} does not exist")
    model = input_model if isinstance(input_model, onnx.ModelProto) else load_model(input_model, "input_model")
    if default_opset(model) <= 10:
        model = onnx.version_converter.convert_version(model, 11)
    if not skip_optimization:
        from onnxjit.optimizer import optimize_model
        from onnxjit.session.options import GraphOptimizationLevel
        model, _ = optimize_model(model, GraphOptimizationLevel.ORT_ENABLE_BASIC)
    if not (skip_onnx_shape and skip_symbolic_shape):
        model = onnx.shape_inference.infer_shapes(model, data_prop=not skip_symbolic_shape)
    set_metadata(model, *PRE_PROCESS_METADATA)
    path = Path(output_model_path)
    if not path.parent.is_dir():
        raise NoSuchFile(f"onnxjit.quantization: the folder of output_model_path {str(path)!r} does not exist")
    if save_as_external_data:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=all_tensors_to_one_file,
                        location=external_data_location, size_threshold=external_data_size_threshold)
    else:
        onnx.save_model(model, str(path))


@dataclass(kw_only=True)
class QuantConfig:
    """The arguments quantize_dynamic and quantize_static share (keywords)."""

    weight_type: QuantType = QuantType.QInt8
    op_types_to_quantize: list | None = None
    nodes_to_quantize: list | None = None
    nodes_to_exclude: list | None = None
    per_channel: bool = False
    reduce_range: bool = False
    use_external_data_format: bool = False
    extra_options: dict | None = None


@dataclass
class DynamicQuantConfig(QuantConfig):
    """quantize_dynamic's arguments, for `quantize`."""


@dataclass
class StaticQuantConfig(QuantConfig):
    """quantize_static's arguments, for `quantize`."""

    calibration_data_reader: object
    calibrate_method: CalibrationMethod = CalibrationMethod.MinMax
    quant_format: QuantFormat = QuantFormat.QDQ
    activation_type: QuantType = QuantType.QInt8
    calibration_providers: list | None = None


def quantize(model_input, model_output, quant_config) -> None:
    """quantize_static or quantize_dynamic, by the type of `quant_config`."""
    if isinstance(quant_config, StaticQuantConfig):
        quantize_static(model_input, model_output, **vars(quant_config))
    elif isinstance(quant_config, DynamicQuantConfig):
        quantize_dynamic(model_input, model_output, **vars(quant_config))
    else:
        raise InvalidArgument(f"onnxjit.quantization: quant_config must be a StaticQuantConfig or a "
                              f"DynamicQuantConfig, not {type(quant_config).__name__} (weight-only configs are not "
                              f"implemented)")
