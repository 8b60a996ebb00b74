"""CUDAExecutionProvider: nodes run as Numba `@cuda.jit` kernels on an NVIDIA GPU (numba-cuda, the `.[cuda]`
extra), or on Numba's CUDA simulator when NUMBA_ENABLE_CUDASIM=1 (how the tests run it without a GPU).

It shares the CPU provider's fuser: the same groups of elementwise nodes and trailing reductions, rendered by the
fuser's CUDA target (fuser/codegen.py `render_cuda`) as one `@cuda.jit` kernel each, compiled once per pattern
and kept in the artifact cache. Other ops run the kernels onnxjit/kernels/cuda registers. What it cannot run goes
to the next provider in the session's list; the session copies values at each device boundary, and copies
constant inputs to the device once, when the session is created.

Options, as onnxruntime names them: device_id, gpu_mem_limit (bytes; 0: none), arena_extend_strategy
(kNextPowerOfTwo / kSameAsRequested, or 0 / 1), do_copy_in_default_stream (1 / 0).
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import sys
import threading
from typing import Any, Callable

import numpy as np
from onnx import TensorProto

from onnxjit import config
from onnxjit.cache.store import KernelStore
from onnxjit.errors import InvalidArgument
from onnxjit.fuser.exprs import fusable, reduction_spec
from onnxjit.fuser.partition import Group, group_nodes
from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType
from onnxjit.providers.base import ExecutionProvider, GraphCompiler, Step, register_provider
from onnxjit.providers.cpu import KernelInfo, _static_signature

# element types the fused CUDA kernels compute in as they are (half types would need conversions on the device)
_FUSED_ELEM_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BOOL, TensorProto.INT8,
                               TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                               TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
_STRATEGIES = {"0": "kNextPowerOfTwo", "1": "kSameAsRequested", "kNextPowerOfTwo": "kNextPowerOfTwo",
               "kSameAsRequested": "kSameAsRequested"}


@functools.lru_cache(maxsize=1)
def _usable() -> bool:
    """numba-cuda is installed and a GPU answers (or the simulator is on). Asked once per process."""
    if importlib.util.find_spec("numba_cuda") is None:
        return False
    from numba.core import config as numba_config
    if numba_config.ENABLE_CUDASIM:  # NUMBA_ENABLE_CUDASIM=1 when Numba was imported
        return True
    if sys.platform == "linux" and not (glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/dxg")):
        return False  # no NVIDIA device node (nor WSL's): no GPU, known without importing numba-cuda (0.3 s)
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver, no device: not available
        return False


def _types_fuse(node: Node) -> bool:
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    return all(isinstance(v.type, TensorType) and v.type.elem_type in _FUSED_ELEM_TYPES for v in values)


@register_provider
class CUDAExecutionProvider(ExecutionProvider):
    name = "CUDAExecutionProvider"
    device = "cuda"

    @classmethod
    def is_available(cls) -> bool:
        return _usable()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from onnxjit.kernels.cuda import ops  # noqa: F401  (imports numba-cuda, registers the op builders)
        from onnxjit.kernels.cuda.device import Device
        opts = self.options
        try:
            device_id = int(opts.get("device_id", 0))
            mem_limit = int(opts.get("gpu_mem_limit", 0))
        except ValueError as e:
            raise InvalidArgument(f"CUDAExecutionProvider: device_id and gpu_mem_limit must be integers: {e}") \
                from None
        strategy = _STRATEGIES.get(str(opts.get("arena_extend_strategy", "kNextPowerOfTwo")))
        if strategy is None:
            raise InvalidArgument(f"CUDAExecutionProvider: arena_extend_strategy must be kNextPowerOfTwo (0) or "
                                  f"kSameAsRequested (1), got {opts['arena_extend_strategy']!r}")
        copy_default = str(opts.get("do_copy_in_default_stream", "1")) not in ("0", "False", "false")
        self.dev = Device(device_id, mem_limit, strategy, copy_default)
        self._kernels: dict[Node, Callable | None] = {}
        self._loaded: dict[str, Callable] = {}
        self._lock = threading.Lock()
        self.kernel_infos: list[KernelInfo] = []
        self._store = KernelStore.default(
            enabled=self.session_config.get(config.SESSION_DISABLE_KERNEL_CACHE, "0") != "1")
        self._target_tag = self._compute_capability()

    def _compute_capability(self) -> str:
        from onnxjit.kernels.cuda.device import SIMULATED
        if SIMULATED:
            return "the CUDA simulator"
        from numba import cuda
        major, minor = cuda.get_current_device().compute_capability
        return f"compute capability {major}.{minor}"

    # --- which nodes -----------------------------------------------------------------------------------------
    def _kernel(self, node: Node) -> Callable | None:
        if node not in self._kernels:
            from onnxjit.kernels.cuda.registry import cuda_builder_for
            build = cuda_builder_for(node)
            self._kernels[node] = build(node, self.dev) if build is not None else None
        return self._kernels[node]

    def can_run(self, node: Node) -> bool:
        if (fusable(node) or reduction_spec(node) is not None) and _types_fuse(node):
            return True
        return self._kernel(node) is not None

    # --- compiling -------------------------------------------------------------------------------------------
    def compile(self, nodes: list[Node], compiler: GraphCompiler) -> list[Step]:
        from onnxjit.kernels.cuda.registry import has_host_outputs, host_inputs_of
        external = nodes[0].graph.external_names() if nodes and nodes[0].graph is not None else set()
        steps = []
        for item in group_nodes(nodes):
            if isinstance(item, Group):
                step = self._group_step(item, item.outputs(external))
                steps.append(step)
                sig = _static_signature(item)
                if sig is not None:
                    step.bind(sig)  # compile (or load) now; the plan binds it again, from this provider's table
                continue
            kernel = self._kernel(item)
            steps.append(Step([item], self.name, [v.name if v is not None else "" for v in item.inputs],
                              [v.name for v in item.outputs], kernel, host_inputs=host_inputs_of(item),
                              host_outputs=has_host_outputs(item)))
        return steps

    def _group_step(self, group: Group, outputs: list[str]) -> Step:
        from onnxjit.fuser.codegen import render_cuda
        info = KernelInfo(f"cuda_group{len(self.kernel_infos)}", self.name,
                          [f"{n.op_type}({n.name})" if n.name else n.op_type for n in group.nodes])
        self.kernel_infos.append(info)

        def bind(sig: list) -> Callable:
            spec = render_cuda(group, outputs, sig, self._target_tag)
            with self._lock:
                kernel = self._loaded.get(spec.name)
                if kernel is None:
                    loaded = self._store.load(spec.source)
                    kernel = self._loaded[spec.name] = loaded.kernel
                    info.compile_seconds += loaded.seconds
                    info.compiled += loaded.compiled > 0
                info.sources[spec.name] = spec.source
            return self._fused_runner(spec, kernel)

        def unbound(*_args):
            raise AssertionError("fused steps run through ExecutionPlan.bind")
        return Step(group.nodes, self.name, group.inputs, outputs, unbound, bind=bind)

    def _fused_runner(self, spec, kernel) -> Callable:
        from onnxjit.kernels.cuda.device import launch_1d
        dev = self.dev
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in spec.out_shapes]
        blocks, threads = launch_1d(spec.n_units)
        launch = kernel[blocks, threads, dev.stream]
        run_it = spec.n_units > 0 and all(sizes)

        def run(*args: Any) -> list:
            ins = [args[i].reshape(-1) if args[i].ndim != 1 else args[i] for i in spec.loaded]
            outs = [dev.empty((n,), dt) for n, dt in zip(sizes, spec.out_dtypes)]
            if run_it:
                launch(*ins, *outs, *spec.sizes)
            return [o.reshape(shape) for o, shape in zip(outs, spec.out_shapes)]
        return run

    # --- moving values -----------------------------------------------------------------------------------------
    def to_host(self, value: Any) -> Any:
        from onnxjit.kernels.cuda.device import is_device_array
        return self.dev.to_host(value) if is_device_array(value) else value

    def from_host(self, value: Any) -> Any:
        from onnxjit.kernels.cuda.device import as_device_array, is_device_array
        if is_device_array(value):
            return as_device_array(value)
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
            return self.dev.to_device(value)
        return value
