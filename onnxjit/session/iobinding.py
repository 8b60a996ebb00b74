"""OrtValue and IOBinding: onnxruntime's way to hand a session preallocated inputs and outputs.

All of onnxjit's memory is host memory today, so an OrtValue wraps a numpy array ('cpu' device); the API is the
same one a device provider will use, with copies done by the provider's to_host/from_host.
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from onnxjit.errors import InvalidArgument
from onnxjit.ir.types import TensorType, elem_type_of, type_string

if TYPE_CHECKING:
    from onnxjit.session.options import RunOptions
    from onnxjit.session.session import InferenceSession


def _check_device(device_type: str) -> None:
    if str(device_type).lower() != "cpu":
        raise InvalidArgument(f"device {device_type!r} is not available: onnxjit has host ('cpu') memory only here")


class OrtValue:
    """A value a session reads or writes: a tensor (numpy array), a sequence (list) or a map (dict)."""

    def __init__(self, value: Any):
        self._value = value

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> "OrtValue":
        _check_device(device_type)
        if not isinstance(numpy_obj, np.ndarray):
            raise InvalidArgument(f"ortvalue_from_numpy needs a numpy array, got {type(numpy_obj).__name__}")
        return OrtValue(numpy_obj)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type=np.float32, device_type: str = "cpu",
                                     device_id: int = 0) -> "OrtValue":
        _check_device(device_type)
        return OrtValue(np.empty(tuple(shape), dtype=element_type))

    def numpy(self) -> Any:
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def has_value(self) -> bool:
        return self._value is not None

    def shape(self) -> list[int]:
        return list(self._value.shape)

    def data_type(self) -> str:
        return type_string(TensorType(elem_type_of(self._value.dtype)))

    def element_type(self) -> np.dtype:
        return self._value.dtype

    def device_name(self) -> str:
        return "cpu"

    def data_ptr(self) -> int:
        return int(self._value.ctypes.data)

    def update_inplace(self, np_arr: np.ndarray) -> None:
        np.copyto(self._value, np_arr)


def _array_at(ptr: int, shape: Sequence[int], element_type) -> np.ndarray:
    dtype = np.dtype(element_type)
    n = int(np.prod(shape, dtype=np.int64))
    buf = (ctypes.c_byte * (n * dtype.itemsize)).from_address(int(ptr))
    return np.frombuffer(buf, dtype=dtype, count=n).reshape(tuple(shape))


class IOBinding:
    def __init__(self, session: "InferenceSession"):
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, OrtValue | None] = {}  # None: allocated by the run
        self._results: list[OrtValue] = []

    # inputs
    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: str, device_id: int, element_type, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        _check_device(device_type)
        self._inputs[name] = _array_at(buffer_ptr, shape, element_type)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue.numpy()

    # outputs
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type=None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        _check_device(device_type)
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"output {name!r}: a bound buffer needs its element_type and shape")
            self._outputs[name] = OrtValue(_array_at(buffer_ptr, shape, element_type))
        else:
            self._outputs[name] = None

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        """Host memory only: nothing to wait for."""

    def synchronize_outputs(self) -> None:
        """Host memory only: nothing to wait for."""

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [v.numpy() for v in self._results]

    def _run(self, run_options: "RunOptions | None") -> None:
        names = list(self._outputs) or [o.name for o in self._session.get_outputs()]
        values = self._session.run(names, self._inputs, run_options)
        results = []
        for name, value in zip(names, values):
            bound = self._outputs.get(name)
            if bound is None:
                results.append(OrtValue(value))
                continue
            target = bound.numpy()
            if target.shape != np.shape(value) or target.dtype != np.asarray(value).dtype:
                raise InvalidArgument(f"output {name!r}: the bound buffer is {target.dtype}{list(target.shape)} "
                                      f"but the run produced {np.asarray(value).dtype}{list(np.shape(value))}")
            np.copyto(target, value)
            results.append(bound)
        self._results = results
