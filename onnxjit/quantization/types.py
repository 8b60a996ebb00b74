"""The enums and small data types of onnxruntime.quantization's API, with onnxruntime's names and values, so scripts
that pass `QuantType.QInt8` or subclass `CalibrationDataReader` run unchanged."""
from __future__ import annotations

import abc
import enum

import numpy as np
from onnx import TensorProto


class _NamedEnum(enum.Enum):
    """str() is the member's name, and from_string its inverse, as onnxruntime's enums (argparse uses both)."""

    def __str__(self) -> str:
        return self.name

    @classmethod
    def from_string(cls, name: str):
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"unknown {cls.__name__} {name!r}; one of {[m.name for m in cls]}") from None


class QuantType(_NamedEnum):
    """The integer type a tensor is quantized to (onnxruntime's values; QFLOAT8E4M3FN is not supported here)."""

    QInt8 = 0
    QUInt8 = 1
    QFLOAT8E4M3FN = 2
    QInt16 = 3
    QUInt16 = 4
    QInt4 = 5
    QUInt4 = 6

    @property
    def tensor_type(self) -> int:
        """The ONNX element type (TensorProto.INT8, ...)."""
        return _TENSOR_TYPES[self]


_TENSOR_TYPES = {
    QuantType.QInt8: TensorProto.INT8, QuantType.QUInt8: TensorProto.UINT8,
    QuantType.QFLOAT8E4M3FN: TensorProto.FLOAT8E4M3FN, QuantType.QInt16: TensorProto.INT16,
    QuantType.QUInt16: TensorProto.UINT16, QuantType.QInt4: TensorProto.INT4, QuantType.QUInt4: TensorProto.UINT4,
}


class QuantFormat(_NamedEnum):
    """QOperator: quantized operators (QLinearConv, QLinearMatMul, com.microsoft QLinearAdd, ...); QDQ: the float
    operators between QuantizeLinear/DequantizeLinear pairs."""

    QOperator = 0
    QDQ = 1


class QuantizationMode(_NamedEnum):
    """IntegerOps: dynamic quantization (ConvInteger, MatMulInteger); QLinearOps: static, with calibrated ranges."""

    IntegerOps = 0
    QLinearOps = 1


class CalibrationMethod(enum.Enum):
    """How calibration turns the values it sees into a range (onnxjit.quantization.calibrate says how each does)."""

    MinMax = 0
    Entropy = 1
    Percentile = 2
    Distribution = 3


class CalibrationDataReader(metaclass=abc.ABCMeta):
    """Feeds the calibration batches: `get_next()` returns one feed dict ({input name: array}) per call, then None.
    `rewind()`, where a reader has it, restarts the batches (quantize_static reads them once and does not call it).
    Any object with a `get_next` method counts as a reader, as in onnxruntime."""

    @classmethod
    def __subclasshook__(cls, subclass):
        return (hasattr(subclass, "get_next") and callable(subclass.get_next)) or NotImplemented

    @abc.abstractmethod
    def get_next(self) -> dict | None:
        """The next feed dict, or None after the last one."""

    def rewind(self) -> None:
        """Start over from the first batch (optional)."""
        raise NotImplementedError(f"{type(self).__name__} cannot rewind")

    def __iter__(self):
        return self

    def __next__(self):
        batch = self.get_next()
        if batch is None:
            raise StopIteration
        return batch

    def __len__(self):
        raise NotImplementedError


class TensorData:
    """What calibration found for one tensor: `lowest`/`highest` (its range), and for the histogram methods `hist`
    and `bins` (Entropy, Percentile) or `avg`, `std`, `hist`, `hist_edges` (Distribution)."""

    _fields = ("avg", "std", "lowest", "highest", "hist", "hist_edges", "bins")

    def __init__(self, **fields):
        for k, v in fields.items():
            if k not in self._fields:
                raise ValueError(f"TensorData has no field {k!r}; fields: {self._fields}")
            setattr(self, k, v)

    @property
    def range_value(self) -> tuple[np.ndarray, np.ndarray]:
        return self.lowest, self.highest

    @property
    def avg_std(self) -> tuple[np.ndarray, np.ndarray]:
        return self.avg, self.std

    def __repr__(self) -> str:
        return f"TensorData(lowest={getattr(self, 'lowest', None)!r}, highest={getattr(self, 'highest', None)!r})"


class TensorsData:
    """The calibration result: {tensor name: TensorData} and the method that computed it."""

    def __init__(self, calibration_method: CalibrationMethod, data: dict[str, TensorData]):
        self.calibration_method = calibration_method
        self.data = dict(data)

    def __iter__(self):
        return iter(self.data)

    def __contains__(self, name) -> bool:
        return name in self.data

    def __getitem__(self, name) -> TensorData:
        return self.data[name]

    def __setitem__(self, name, value: TensorData) -> None:
        if name not in self.data:
            raise KeyError(f"only a calibrated tensor's data can be replaced; {name!r} was not calibrated")
        self.data[name] = value

    def __len__(self) -> int:
        return len(self.data)

    def keys(self):
        return self.data.keys()

    def values(self):
        return self.data.values()

    def items(self):
        return self.data.items()
