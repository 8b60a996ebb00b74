"""onnxjit.quantization: onnxruntime.quantization's API (quantize_dynamic, quantize_static, quant_pre_process,
quantize with StaticQuantConfig/DynamicQuantConfig, CalibrationDataReader, QuantType, QuantFormat,
CalibrationMethod, the calibration cache's load_tensors_data/save_tensors_data), so `from onnxjit.quantization import
quantize_dynamic, QuantType` runs onnxruntime's quantization scripts, with calibration on onnxjit's own session.

For the same model, data and options the files written carry onnxruntime's quantization parameters: the same
scales and zero points (to float32 rounding: calibration runs on onnxjit, whose float results may differ from
onnxruntime's in the last bits), the same tensor and node names, the same operators; onnxruntime is never
imported here (the tests compare with it).

Modules:
- types: the enums, CalibrationDataReader, TensorData/TensorsData;
- params: scale and zero point from a range, weight/bias quantization, in onnxruntime's float arithmetic;
- calibrate: MinMax, Entropy, Percentile and Distribution calibration on onnxjit, with a progress bar, and the
  calibration cache (onnxruntime's JSON layout: either library reads the other's);
- qdq: the QDQ-format quantizer; qoperator: the operator-format one (dynamic integer ops and static QLinear ops);
- model: loading with shape inference, the rewrite helpers, clean-up and save; options: the settings, checked;
- quantize: the entry points.

What onnxruntime's quantizer does and this one does not: Pad and Where stay float in QOperator format; float8
types, blocked (BlockSize) weights, TensorQuantOverrides, SmoothQuant, subgraph quantization (EnableSubgraph) and
dedicated QDQ pairs raise NotImplemented; quant_pre_process uses onnx shape inference and onnxjit's basic optimizer
passes in place of onnxruntime's symbolic shape inference and optimizer.
"""
from onnxjit.quantization.calibrate import Calibrator, load_tensors_data, save_tensors_data
from onnxjit.quantization.quantize import (DynamicQuantConfig, StaticQuantConfig, quant_pre_process, quantize,
                                           quantize_dynamic, quantize_static)
from onnxjit.quantization.types import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantizationMode,
                                        QuantType, TensorData, TensorsData)

__all__ = ["CalibrationDataReader", "CalibrationMethod", "Calibrator", "DynamicQuantConfig", "QuantFormat", "QuantType",
           "QuantizationMode", "StaticQuantConfig", "TensorData", "TensorsData", "load_tensors_data",
           "quant_pre_process", "quantize", "quantize_dynamic", "quantize_static", "save_tensors_data"]
