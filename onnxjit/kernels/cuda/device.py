"""A CUDA device as a session uses it: one stream, a pool of device memory, launch sizes.

Every kernel of a session is launched on the session's stream, so the kernels of one run execute in order without
synchronizing the host; copies to the host synchronize that stream. Memory comes from a pool: a buffer goes back
to the pool when the last array viewing it is dropped (the executor drops each value after its last reader), and
a later request of the same size class takes it without a cudaMalloc.
"""
from __future__ import annotations

import ctypes
import threading
import weakref
from collections import defaultdict
from typing import Any

import numpy as np
from numba import cuda
from numba.core import config as numba_config

from onnxjit.errors import InvalidArgument, RuntimeException

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 refers to it when it compiles a kernel; numpy 2.5 removed it
    np.row_stack = np.vstack

SIMULATED = bool(numba_config.ENABLE_CUDASIM)  # NUMBA_ENABLE_CUDASIM, as Numba read it when it was imported
_DeviceArray = cuda.cudadrv.devicearray.FakeCUDAArray if SIMULATED else cuda.cudadrv.devicearray.DeviceNDArrayBase
# threads per block of a one-dimensional launch, and a cap on blocks (grid-stride loops cover the rest). The
# simulator runs each thread as a Python thread: there a launch is one small block, which every grid-stride kernel
# handles the same way
THREADS = 32 if SIMULATED else 256
MAX_BLOCKS = 1 if SIMULATED else 65535


def launch_1d(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over n items."""
    return max(1, min(MAX_BLOCKS, -(-int(n) // THREADS))), THREADS


def is_device_array(value: Any) -> bool:
    """Whether `value` is a CUDA array: a Numba device array, or (on a GPU) anything with
    __cuda_array_interface__ (CuPy, torch)."""
    return isinstance(value, _DeviceArray) or (not SIMULATED and hasattr(value, "__cuda_array_interface__"))


def as_device_array(value: Any):
    """A Numba device array over `value`'s memory, without a copy."""
    return value if isinstance(value, _DeviceArray) else cuda.as_cuda_array(value)


_POWER_OF_TWO, _SAME_AS_REQUESTED = "kNextPowerOfTwo", "kSameAsRequested"


def _size_class(nbytes: int, strategy: str) -> int:
    nbytes = max(int(nbytes), 1)
    if strategy == _POWER_OF_TWO:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // 256) * 256


class _Lease:
    """Owner of one pooled array's memory: every array viewing it refers to its lease."""

    __slots__ = ("__weakref__",)


def _lease(buf, shape: tuple, dtype: np.dtype):
    """(an array of `shape` and `dtype` over the start of `buf`, the object whose life is that of its views)."""
    if SIMULATED:  # simulated device memory is host memory: numpy views keep their buffer object alive
        lease = (ctypes.c_byte * max(buf.size, 1)).from_address(buf._ary.ctypes.data)
        n = int(np.prod(shape, dtype=np.int64))
        return cuda.cudadrv.devicearray.FakeCUDAArray(np.frombuffer(lease, dtype, count=n).reshape(shape)), lease
    lease = _Lease()
    interface = {"shape": shape, "typestr": dtype.str, "data": (device_pointer(buf), False), "version": 3,
                 "strides": None}
    return cuda.from_cuda_array_interface(interface, owner=lease, sync=False), lease


class DeviceMemoryPool:
    """Device buffers by size class, reused once the arrays over them are dropped.

    `limit` (bytes, 0: none) bounds what the pool holds, free buffers included: onnxruntime's gpu_mem_limit.
    `strategy` is onnxruntime's arena_extend_strategy: size classes are powers of two (kNextPowerOfTwo) or the
    request rounded to 256 bytes (kSameAsRequested).
    """

    def __init__(self, limit: int = 0, strategy: str = _POWER_OF_TWO):
        self.limit = int(limit)
        self.strategy = strategy
        self._free: dict[int, list] = defaultdict(list)
        self._lock = threading.Lock()
        self.held = 0  # bytes allocated from the device and not released
        self.allocations = 0  # cudaMalloc calls, for tests and the profile

    def empty(self, shape, dtype, stream=0):
        """An uninitialized C-contiguous device array of `shape` and `dtype` from the pool."""
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        n = int(np.prod(shape, dtype=np.int64))
        size = _size_class(n * dtype.itemsize, self.strategy)
        with self._lock:
            bucket = self._free.get(size)
            buf = bucket.pop() if bucket else None
        if buf is None:
            buf = self._allocate(size, stream)
        arr, lease = _lease(buf, shape, dtype)
        # the buffer goes back when the lease dies: every view of the array (reshape, slice) holds the lease, so
        # not before the last view is dropped
        weakref.finalize(lease, self._release, size, buf)
        return arr

    def _allocate(self, size: int, stream):
        with self._lock:
            if self.limit and self.held + size > self.limit:
                self.held -= sum(size_ * len(b) for size_, b in self._free.items())
                self._free.clear()  # give cached buffers back before refusing
            if self.limit and self.held + size > self.limit:
                raise RuntimeException(
                    f"CUDAExecutionProvider: out of device memory under gpu_mem_limit={self.limit} bytes: "
                    f"{self.held} held, {size} more requested")
            self.held += size
            self.allocations += 1
        try:
            return cuda.device_array(size, np.uint8, stream=stream)
        except Exception as e:  # noqa: BLE001 - the driver's out-of-memory error, said as onnxruntime says it
            with self._lock:
                self.held -= size
            raise RuntimeException(f"CUDAExecutionProvider: cannot allocate {size} bytes of device memory: "
                                   f"{type(e).__name__}: {e}") from e

    def _release(self, size: int, buf) -> None:
        with self._lock:
            self._free[size].append(buf)


class Device:
    """One GPU as a session uses it: the device id, a stream, a memory pool."""

    def __init__(self, device_id: int = 0, mem_limit: int = 0, strategy: str = _POWER_OF_TWO,
                 copy_in_default_stream: bool = True):
        if not SIMULATED:
            count = len(cuda.gpus)
            if not 0 <= device_id < count:
                raise InvalidArgument(f"CUDAExecutionProvider: device_id {device_id} is out of range: this "
                                      f"machine has {count} CUDA device(s)")
            _select(device_id)
        self.device_id = device_id
        self.stream = cuda.stream()
        # onnxruntime's do_copy_in_default_stream: copies on the default stream (ordered with everything), or on
        # the session's stream
        self.copy_stream = 0 if copy_in_default_stream else self.stream
        self.pool = DeviceMemoryPool(mem_limit, strategy)

    def empty(self, shape, dtype):
        return self.pool.empty(shape, dtype, self.stream)

    def to_device(self, array: np.ndarray):
        array = np.require(array, requirements="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
        out = self.empty(array.shape, array.dtype)
        if array.size:
            out.copy_to_device(array, stream=self.stream)
        return out

    def to_host(self, array) -> np.ndarray:
        out = np.empty(array.shape, array.dtype)
        if out.size:
            array.copy_to_host(out, stream=self.stream)
            self.stream.synchronize()
        return out

    def synchronize(self) -> None:
        self.stream.synchronize()


def device_array_at(ptr: int, shape, dtype):
    """A device array over the device memory at `ptr` (IOBinding's bind_input / bind_output with a buffer)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    if SIMULATED:  # simulated device memory is host memory
        from onnxjit.session.iobinding import _array_at
        return cuda.cudadrv.devicearray.FakeCUDAArray(_array_at(ptr, shape, dtype))
    interface = {"shape": shape, "typestr": dtype.str, "data": (int(ptr), False), "version": 3, "strides": None}
    return cuda.from_cuda_array_interface(interface, owner=None, sync=False)


def device_pointer(array) -> int:
    array = as_device_array(array)
    if SIMULATED:
        return int(array._ary.ctypes.data)
    return int(array.__cuda_array_interface__["data"][0])


def copy_to_host(array) -> np.ndarray:
    """A host copy of any device array (synchronous)."""
    return as_device_array(array).copy_to_host()


def _select(device_id: int) -> None:
    if not SIMULATED and cuda.get_current_device().id != device_id:
        cuda.select_device(device_id)


def to_device(array: np.ndarray, device_id: int = 0):
    """A device copy of a host array, outside any session's pool (OrtValue.ortvalue_from_numpy)."""
    _select(device_id)
    return cuda.to_device(np.require(array, requirements="C"))


def empty(shape, dtype, device_id: int = 0):
    _select(device_id)
    return cuda.device_array(tuple(int(d) for d in shape), np.dtype(dtype))


def synchronize_default() -> None:
    """Wait for the default stream (a copy into a bound buffer runs there)."""
    cuda.synchronize()
