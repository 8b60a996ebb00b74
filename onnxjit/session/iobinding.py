"""OrtValue and IOBinding: onnxruntime's way to hand a session preallocated inputs and outputs.

An OrtValue wraps a numpy array ('cpu') or a CUDA device array ('cuda': a Numba device array; CuPy and torch
tensors are taken through __cuda_array_interface__ without a copy). Values bound on the device stay there: a
session's output bound to 'cuda' is left on the device, so two models chain with no host round trip.
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


def _check_device(device_type: str) -> str:
    """'cpu' or 'cuda', or InvalidArgument when the device is unknown or unusable here."""
    device = str(device_type).lower()
    if device == "cpu":
        return device
    if device in ("cuda", "gpu"):
        from onnxjit.providers.cuda import CUDAExecutionProvider
        if not CUDAExecutionProvider.is_available():
            raise InvalidArgument(f"device {device_type!r} is not available: it needs numba-cuda (the onnxjit[cuda] "
                                  f"extra) and a CUDA GPU, or NUMBA_ENABLE_CUDASIM=1")
        return "cuda"
    raise InvalidArgument(f"unknown device {device_type!r}: onnxjit has 'cpu' and 'cuda'")


def is_device_value(value: Any) -> bool:
    """Whether `value` lives in CUDA device memory (checked without importing numba-cuda for host values)."""
    if type(value) is np.ndarray:
        return False
    return hasattr(value, "__cuda_array_interface__") or type(value).__name__ == "FakeCUDAArray"


def _cuda():
    from onnxjit.kernels.cuda import device
    return device


class OrtValue:
    """A value a session reads or writes: a tensor (numpy array), a sequence (list) or a map (dict)."""

    def __init__(self, value: Any):
        self._value = value

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> "OrtValue":
        device = _check_device(device_type)
        if not isinstance(numpy_obj, np.ndarray):
            raise InvalidArgument(f"ortvalue_from_numpy needs a numpy array, got {type(numpy_obj).__name__}")
        return OrtValue(numpy_obj if device == "cpu" else _cuda().to_device(numpy_obj, device_id))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type=np.float32, device_type: str = "cpu",
                                     device_id: int = 0) -> "OrtValue":
        device = _check_device(device_type)
        if device == "cuda":
            return OrtValue(_cuda().empty(shape, element_type, device_id))
        return OrtValue(np.empty(tuple(shape), dtype=element_type))

    def numpy(self) -> Any:
        """The value on the host (a copy when it lives on the device)."""
        if is_device_value(self._value):
            return _cuda().copy_to_host(self._value)
        return self._value

    def value(self) -> Any:
        """The value where it lives: a numpy array, or a device array (no copy)."""
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray) or is_device_value(self._value)

    def has_value(self) -> bool:
        return self._value is not None

    def shape(self) -> list[int]:
        return list(self._value.shape)

    def data_type(self) -> str:
        return type_string(TensorType(elem_type_of(self._value.dtype)))

    def element_type(self) -> np.dtype:
        return np.dtype(self._value.dtype)

    def device_name(self) -> str:
        return "cuda" if is_device_value(self._value) else "cpu"

    def data_ptr(self) -> int:
        if is_device_value(self._value):
            return _cuda().device_pointer(self._value)
        return int(self._value.ctypes.data)

    def update_inplace(self, np_arr: np.ndarray) -> None:
        if is_device_value(self._value):
            _cuda().as_device_array(self._value).copy_to_device(np.ascontiguousarray(np_arr))
        else:
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
        self._outputs: dict[str, OrtValue | str] = {}  # a device name: allocated by the run there
        self._results: list[OrtValue] = []

    # inputs
    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: str, device_id: int, element_type, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        if _check_device(device_type) == "cuda":
            self._inputs[name] = _cuda().device_array_at(buffer_ptr, shape, element_type)
        else:
            self._inputs[name] = _array_at(buffer_ptr, shape, element_type)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue.value()

    # outputs
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type=None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        device = _check_device(device_type)
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"output {name!r}: a bound buffer needs its element_type and shape")
            at = _cuda().device_array_at if device == "cuda" else _array_at
            self._outputs[name] = OrtValue(at(buffer_ptr, shape, element_type))
        else:
            self._outputs[name] = device  # allocated by the run, on this device

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: a run reads its inputs in its own order, and device copies synchronize."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: a run returns after its outputs are complete (the session's stream is synchronized
        at every copy to the host, and device outputs are read on that stream's order by later runs)."""

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [v.numpy() for v in self._results]

    def _run(self, run_options: "RunOptions | None") -> None:
        names = list(self._outputs) or [o.name for o in self._session.get_outputs()]
        on_device = {n for n in names if self._outputs.get(n) == "cuda" or
                     (isinstance(self._outputs.get(n), OrtValue) and self._outputs[n].device_name() == "cuda")}
        values = self._session._run_bound(names, self._inputs, run_options, on_device)
        results = []
        for name, value in zip(names, values):
            bound = self._outputs.get(name)
            if not isinstance(bound, OrtValue):
                results.append(OrtValue(value))
                continue
            target = bound.value()
            if tuple(target.shape) != tuple(np.shape(value)) or np.dtype(target.dtype) != np.dtype(value.dtype):
                raise InvalidArgument(f"output {name!r}: the bound buffer is {np.dtype(target.dtype)}"
                                      f"{list(target.shape)} but the run produced {np.dtype(value.dtype)}"
                                      f"{list(np.shape(value))}")
            if is_device_value(target):
                _cuda().as_device_array(target).copy_to_device(value)
                _cuda().synchronize_default()
            else:
                np.copyto(target, value)
            results.append(bound)
        self._results = results
