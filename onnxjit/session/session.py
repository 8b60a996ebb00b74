"""InferenceSession: onnxruntime's Python API over onnxjit's loader, providers and executor."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numba
import numpy as np
from numba.core.runtime.nrt import MemInfo

from onnxjit.cache import deferred_compile, parallel_compile
from onnxjit.errors import InvalidArgument, InvalidGraph
from onnxjit.ir.graph import Graph, Model
from onnxjit.ir.serde import from_onnx, to_onnx
from onnxjit.ir.types import (MapType, OptionalType, SequenceType, SparseTensorType, TensorType, ValueType,
                              elem_type_of, shape_list, type_string)
from onnxjit.providers.base import KNOWN_PROVIDER_NAMES, PROVIDERS, ExecutionProvider
from onnxjit.session.executor import CompiledGraph
from onnxjit.session.iobinding import IOBinding, OrtValue, is_device_value
from onnxjit.session.loader import check_versions, checker_complaint, load_model_proto
from onnxjit.worker_pool import thread_count
from onnxjit.optimizer import OptimizationReport, OptimizerError, optimize
from onnxjit.session.options import GraphOptimizationLevel, RunOptions, SessionOptions
from onnxjit.session.partition import compile_graph

log = logging.getLogger("onnxjit")

FALLBACK = "FallbackExecutionProvider"
DISABLE_FALLBACK_KEY = "session.disable_fallback_provider"


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list

    def __str__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


def get_available_providers() -> list[str]:
    """Providers that can run on this machine, in onnxruntime's priority order (CUDA before CPU)."""
    return [name for name in KNOWN_PROVIDER_NAMES if name in PROVIDERS and PROVIDERS[name].is_available()]


def get_all_providers() -> list[str]:
    return list(KNOWN_PROVIDER_NAMES)


def get_device() -> str:
    return "CPU"


def _normalize_providers(providers, provider_options) -> list[tuple[str, dict[str, str]]]:
    if providers is None or len(providers) == 0:
        # the host providers: a GPU is used when asked for, so a script written for the CPU runs as it did (and
        # no device provider is asked whether it is available: that imports its toolkit)
        return [(n, {}) for n in KNOWN_PROVIDER_NAMES if n != FALLBACK and n in PROVIDERS
                and PROVIDERS[n].device == "cpu" and PROVIDERS[n].is_available()]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given")
    result: list[tuple[str, dict[str, str]]] = []
    for i, p in enumerate(providers):
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], dict):
                raise ValueError(f"a provider given as a tuple must be (name, options dict), got {p!r}")
            if provider_options is not None:
                raise ValueError("give provider options either in (name, options) tuples or in "
                                 "'provider_options', not both")
            name, opts = p
        elif isinstance(p, str):
            name, opts = p, (provider_options[i] if provider_options is not None else {})
        else:
            raise ValueError(f"providers must be names or (name, options) tuples, got {p!r}")
        if name in (n for n, _ in result):
            raise ValueError(f"'{name}' appears more than once in providers")
        if name not in KNOWN_PROVIDER_NAMES:
            raise ValueError(f"Unknown execution provider {name!r}; known: {', '.join(KNOWN_PROVIDER_NAMES)}")
        cls = PROVIDERS.get(name)
        if cls is None or not cls.is_available():
            warnings.warn(f"Specified provider '{name}' is not in available provider names. Available providers: "
                          f"'{', '.join(get_available_providers())}'", stacklevel=3)
            continue
        result.append((name, {str(k): str(v) for k, v in opts.items()}))
    return result


def _optimization_level(level: Any) -> GraphOptimizationLevel:
    try:
        return GraphOptimizationLevel(level)
    except ValueError:
        raise InvalidArgument(f"SessionOptions.graph_optimization_level must be one of "
                              f"{[f'{e.name} ({e.value})' for e in GraphOptimizationLevel]}, got {level!r}") from None


class InferenceSession:
    def __init__(self, path_or_bytes, sess_options: SessionOptions | None = None, providers=None,
                 provider_options=None, **kwargs):
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        so = self._sess_options
        self._config = so.config_entries
        proto, base_dir = load_model_proto(path_or_bytes)
        self._model_path = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) else None
        check_versions(proto)
        try:
            self._model: Model = from_onnx(proto, base_dir)
        except Exception as e:  # noqa: BLE001 - anything a malformed model trips becomes InvalidGraph
            complaint = checker_complaint(proto)
            why = f" (onnx.checker: {complaint})" if complaint else ""
            if isinstance(e, InvalidGraph):
                raise InvalidGraph(f"{e}{why}") from e
            raise InvalidGraph(f"cannot load the model: {type(e).__name__}: {e}{why}") from e
        chosen = _normalize_providers(providers, provider_options)
        level = _optimization_level(so.graph_optimization_level)
        self.optimization_report: OptimizationReport | None = None
        if level > GraphOptimizationLevel.ORT_DISABLE_ALL:
            try:
                self.optimization_report = optimize(self._model, level, [n for n, _ in chosen])
            except OptimizerError as e:
                # a valid model must still run: drop the half-rewritten graph and run the model as loaded
                warnings.warn(f"{e}; running the model without graph optimization", RuntimeWarning, stacklevel=2)
                self._model = from_onnx(proto, base_dir)
        if so.optimized_model_filepath:
            import onnx
            onnx.save(to_onnx(self._model), os.fspath(so.optimized_model_filepath))

        if self._config.get(DISABLE_FALLBACK_KEY, "0") != "1" and FALLBACK not in (n for n, _ in chosen):
            chosen.append((FALLBACK, {}))
        self._providers: list[ExecutionProvider] = [PROVIDERS[n](opts, self._config) for n, opts in chosen]
        self.opset_imports = dict(self._model.opset_imports)
        self._compiled_graphs: list[CompiledGraph] = []  # the main graph's and its bodies' (wait_for_compilation)
        self._compiled = self.compile_subgraph(self._model.graph)
        self._used = [p.name for p in self._providers]

        g = self._model.graph
        inits = set(g.initializers)
        self._inputs = [v for v in g.inputs if v.name not in inits]
        self._overridable = [v for v in g.inputs if v.name in inits]
        self._feedable = {v.name: v for v in g.inputs}
        self._accepted: dict[str, tuple] = {}  # input -> (dtype, shape) of an array _check_feeds took unchanged
        self._outputs = list(g.outputs)
        self._output_names = [v.name for v in self._outputs]
        self._profile: list | None = [] if so.enable_profiling else None
        self._profile_lock = threading.Lock()
        self._profile_start = time.perf_counter()
        self._threads = int(so.intra_op_num_threads or 0)
        self._device_feeds: set[str] = set()  # inputs a device array was fed to
        self._compiled_on_device: CompiledGraph | None = None  # without the outputs' copies (_run_bound)
        helpers = parallel_compile.process_count(self._config, self._threads)
        self._first_run = None
        if helpers and all(p.name in ("CPUExecutionProvider", FALLBACK) for p in self._providers):
            job = (path_or_bytes, {"level": int(level), "threads": self._threads, "config": dict(self._config),
                                   "providers": [(p.name, dict(p.options)) for p in self._providers]})
            self._first_run = parallel_compile.FirstRun(helpers, job)  # holds the model's source until then

    # --- compiling --------------------------------------------------------------------------------------------
    def compile_subgraph(self, graph: Graph) -> CompiledGraph:
        """Partition `graph` over this session's providers and compile it (used for the main graph and bodies)."""
        graph.bind_outer_constants()
        compiled = compile_graph(graph, self._providers, self)
        self._compiled_graphs.append(compiled)
        return compiled

    def wait_for_compilation(self, timeout: float | None = None) -> None:
        """onnxjit's own: wait for what compiles in the background, the kernels a first run over an empty cache
        deferred (cache/deferred_compile.py) and the native segments a plan's second run starts (native_plan.py);
        runs do not wait for them, they go on meanwhile (on stand-in kernels, step by step). For benchmarks that
        time the steady state: once the deferred kernels are in, the next run starts the segments' compile."""
        deferred_compile.wait(timeout)
        for compiled in list(self._compiled_graphs):
            compiled.wait_for_segments(timeout)

    # --- metadata ---------------------------------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(v.name, v.type) for v in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(v.name, v.type) for v in self._outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [_node_arg(v.name, v.type) for v in self._overridable]

    def get_providers(self) -> list[str]:
        return list(self._used)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {p.name: dict(p.options) for p in self._providers}

    def kernels(self) -> list:
        """The kernels this session generated: for each fused group, its provider, its nodes and the source of each
        specialization compiled so far (kernels are generated when a run first meets an input signature)."""
        return [info for p in self._providers for info in getattr(p, "kernel_infos", [])]

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(producer_name=m.producer_name, graph_name=m.graph.name, domain=m.domain,
                             description=m.doc_string, graph_description=m.graph.doc_string,
                             version=m.model_version, custom_metadata_map=dict(m.metadata_props))

    # --- running ----------------------------------------------------------------------------------------------
    def run(self, output_names: Sequence[str] | None, input_feed: dict[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        if not isinstance(input_feed, dict):
            raise InvalidArgument(f"input_feed must be a dict of input name -> value, got {type(input_feed).__name__}")
        if output_names:
            known = self._output_names
            missing = [n for n in output_names if n not in known]
            if missing:
                raise InvalidArgument(f"Invalid output name(s) {missing}; the model's outputs are {known}")
        feeds = self._check_feeds(input_feed)
        if run_options is None and self._profile is None and self._first_run is None and not self._device_feeds:
            # the common run, inline (each call between here and the kernels costs 0.1-0.3 us: a one-node model's
            # whole run at batch 1 is 6 us in onnxruntime)
            threads = self._threads
            if threads > 0 and thread_count() != threads:
                _set_num_threads(threads)
            values = self._compiled.run(feeds)
        else:
            values = self._run_compiled(self._compiled, feeds, run_options)
        if output_names:
            by_name = dict(zip(self._output_names, values))
            values = [by_name[n] for n in output_names]
        return _independent(values, input_feed)

    def _run_compiled(self, compiled: CompiledGraph, feeds: dict[str, Any], run_options: RunOptions | None):
        if self._device_feeds:
            # a device array fed to an input some host step reads: that step gets a host copy
            for name in self._device_feeds.intersection(feeds).intersection(compiled.host_read_inputs):
                if is_device_value(feeds[name]):
                    from onnxjit.kernels.cuda.device import copy_to_host
                    feeds[name] = copy_to_host(feeds[name])
        if self._threads > 0:
            _set_num_threads(self._threads)
        should_stop = (lambda: run_options.terminate) if run_options is not None else None
        profile = [] if self._profile is not None else None
        first_run = None
        if self._first_run is not None:  # (the lock only until the first run has taken it)
            with self._profile_lock:  # one thread's run is the first
                first_run, self._first_run = self._first_run, None
        if first_run is None:
            values = compiled.run(feeds, profile=profile, should_stop=should_stop)
        else:
            with first_run.armed(feeds):
                values = compiled.run(feeds, profile=profile, should_stop=should_stop)
        if profile:
            with self._profile_lock:
                self._profile.extend(profile)
        return values

    def _run_bound(self, names: list[str], input_feed: dict[str, Any], run_options: RunOptions | None,
                   on_device: set[str]) -> list[Any]:
        """IOBinding's run: the outputs in `on_device` are left on the CUDA device (as device arrays)."""
        if not on_device:
            return self.run(names, input_feed, run_options)
        cuda = next((p for p in self._providers if p.device == "cuda"), None)
        if cuda is None:
            raise InvalidArgument(f"outputs {sorted(on_device)} are bound to 'cuda' but the session does not use "
                                  f"CUDAExecutionProvider (its providers: {self._used})")
        with self._profile_lock:
            if self._compiled_on_device is None:
                self._compiled_on_device = self._compiled.without_output_copies()
        values = self._run_compiled(self._compiled_on_device, self._check_feeds(input_feed), run_options)
        by_name = dict(zip(self._output_names, values))
        return [cuda.from_host(by_name[n]) if n in on_device else _to_output(cuda.to_host(by_name[n]))
                for n in names]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        iobinding._run(run_options)

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: dict[str, OrtValue],
                            run_options: RunOptions | None = None) -> list[OrtValue]:
        feeds = {k: v.value() if isinstance(v, OrtValue) else v for k, v in input_dict_ort_values.items()}
        return [OrtValue(v) for v in self.run(output_names, feeds, run_options)]

    def _check_feeds(self, input_feed: dict[str, Any]) -> dict[str, Any]:
        feeds: dict[str, Any] = {}
        accepted = self._accepted
        for name, value in input_feed.items():
            if type(value) is np.ndarray and accepted.get(name) == (value.dtype, value.shape):
                feeds[name] = value  # an array of a dtype and shape this input took as it is before
                continue
            v = self._feedable.get(name)
            if v is None:
                raise InvalidArgument(f"Invalid input name: {name!r}; the model's inputs are "
                                      f"{[x.name for x in self._inputs]}")
            feeds[name] = checked = _check_value(f"input {name!r}", value, v.type,
                                                 self._sess_options.free_dimension_overrides)
            if checked is value and type(value) is np.ndarray:
                accepted[name] = (value.dtype, value.shape)
            elif is_device_value(checked):
                self._device_feeds.add(name)
        missing = [v.name for v in self._inputs if v.name not in feeds]
        if missing:
            raise InvalidArgument(f"Required inputs ({missing}) are missing from input feed ({list(feeds)})")
        return feeds

    # --- profiling --------------------------------------------------------------------------------------------
    def end_profiling(self) -> str:
        """Write the profile of the runs so far as a Chrome trace (chrome://tracing) and return its path."""
        if self._profile is None:
            return ""
        so = self._sess_options
        path = f"{so.profile_file_prefix}{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        with self._profile_lock:
            events = [{"cat": "Node", "name": step.name, "ph": "X", "pid": os.getpid(), "tid": 0,
                       "ts": round((t0 - self._profile_start) * 1e6, 3), "dur": round((t1 - t0) * 1e6, 3),
                       "args": {"op_name": step.nodes[0].op_type if step.nodes else "Copy",
                                "provider": step.provider,
                                # a fused kernel runs several nodes in one step
                                "nodes": [f"{n.op_type}:{n.name}" for n in step.nodes]}}
                      for step, t0, t1 in self._profile]
            self._profile = []
        with open(path, "w") as f:
            json.dump(events, f)
        return path

    def get_profiling_start_time_ns(self) -> int:
        return int(self._profile_start * 1e9)


def _set_num_threads(n: int) -> None:
    # only when it changes: numba.set_num_threads costs 1.5-2 us a run
    n = min(n, numba.config.NUMBA_NUM_THREADS)
    if thread_count() != n:
        numba.set_num_threads(n)


def _node_arg(name: str, t: ValueType | None) -> NodeArg:
    return NodeArg(name, type_string(t), shape_list(t))


def _independent(outputs: list[Any], feeds: dict[str, Any]) -> list[Any]:
    """The outputs as a caller gets them (a list, numpy scalars as 0-d arrays), with a copy of any that shares
    memory with a feed or an earlier output, or is read-only: kernels hand out views (Reshape, Squeeze, Slice and
    Gather of contiguous blocks) and Identity hands on its input (a graph output may be a feed itself), and as
    onnxruntime's, a caller's outputs are its own, to write without changing its inputs, another output or a
    weight (or a Loop's condition passed on).

    Sharing is decided by the memory's owner (_owner_key), compared as a number: an output shares with a feed or
    an earlier output when their owners are the same (np.may_share_memory against each feed took 1-2 us an
    output). An owner not known to own its memory (a buffer a caller wrapped) is checked with np.may_share_memory
    as well."""
    outputs = list(outputs)
    seen = None  # the owners' keys of the feeds and of the outputs so far
    for i, o in enumerate(outputs):
        if type(o) is not np.ndarray:
            if isinstance(o, np.generic):
                outputs[i] = np.asarray(o)
            continue
        if seen is None:
            seen = set()
            for f in feeds.values():
                if type(f) is np.ndarray:
                    seen.add(id(f) if f.base is None else _owner_key(f)[0])
        base = o.base
        if base is None:  # (the common cases inline: an array numpy allocated, one Numba allocated)
            key, owned = id(o), True
        elif type(base) is MemInfo and base.parent is None:
            key, owned = base.data, True
        else:
            key, owned = _owner_key(o)
        if key in seen or not o.flags.writeable or not owned and (
                any(type(f) is np.ndarray and np.may_share_memory(o, f) for f in feeds.values()) or
                any(type(p) is np.ndarray and np.may_share_memory(o, p) for p in outputs[:i])):
            outputs[i] = o = o.copy()  # (a read-only one: a weight's view, say, which the caller may not write)
            key = id(o)
        seen.add(key)
    return outputs


def _owner_key(a: np.ndarray) -> tuple[int, bool]:
    """(a number naming what owns a's memory, whether that owner is known to own it). numpy points every view's
    `base` at the array owning the memory (or the non-array object that does): named by its id. Numba's arrays
    have a MemInfo for base: its `parent` is the numpy array it wraps; with no parent Numba allocated the memory,
    named by its address (two MemInfo objects can stand for one allocation; an address cannot be a live object's
    id)."""
    base = a.base
    if base is None:
        return id(a), True
    if type(base) is MemInfo:
        parent = base.parent
        if parent is None:
            return base.data, True
        return _owner_key(parent) if type(parent) is np.ndarray else (id(parent), False)
    return id(base), type(base) is np.ndarray and base.flags.owndata


def _to_output(v: Any) -> Any:
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


def _check_value(what: str, value: Any, t: ValueType | None, overrides: dict[str, int]) -> Any:
    """The feed as onnxjit runs it, or InvalidArgument saying what was expected and what was given."""
    if t is None:
        return value
    if isinstance(t, OptionalType):
        return None if value is None else _check_value(what, value, t.elem, overrides)
    if isinstance(t, SequenceType):
        if not isinstance(value, (list, tuple)):
            raise InvalidArgument(f"{what}: expected a list for {type_string(t)}, got {type(value).__name__}")
        return [_check_value(f"{what}[{i}]", x, t.elem, overrides) for i, x in enumerate(value)]
    if isinstance(t, MapType):
        if not isinstance(value, dict):
            raise InvalidArgument(f"{what}: expected a dict for {type_string(t)}, got {type(value).__name__}")
        if isinstance(t.value, TensorType):  # values in the map's declared type, as onnxruntime converts them
            return _map_values_as(what, value, t.value)
        return value
    if isinstance(t, (TensorType, SparseTensorType)):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(t, TensorType) and is_device_value(value):
            return _check_device_value(what, value, t, overrides)
        if not isinstance(value, np.ndarray):
            raise InvalidArgument(f"{what}: expected a numpy array of {type_string(t)}"
                                  f"{_shape_text(t.shape)}, got {type(value).__name__}")
        try:
            given = elem_type_of(value.dtype)
        except Exception:  # noqa: BLE001
            given = None
        if given != t.elem_type:
            raise InvalidArgument(f"{what}: Unexpected input data type. Actual: ({_dtype_text(value.dtype, given)}) "
                                  f", expected: ({type_string(t)})")
        if value.dtype.kind in "US":
            value = value.astype(object)
        _check_dims(what, value, t, overrides)
        return value
    return value


def _map_values_as(what: str, value: dict, t: TensorType) -> dict:
    """The map with its values rounded to t's dtype, all in one array where they are scalars (one conversion at a
    time cost 0.5 us a value: half the run of a batch-1 DictVectorizer pipeline), handed on as Python numbers
    (tolist: 0.3 us less than numpy scalars for ten values; float32 values are exact in a Python float)."""
    dtype = t.dtype
    try:
        values = np.array(list(value.values()), dtype=dtype)
        if values.ndim == 1:
            return dict(zip(value, values.tolist() if values.dtype != object else values))
        return {k: np.asarray(v, dtype=dtype)[()] for k, v in value.items()}
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{what}: the map's values do not convert to {type_string(t)}: {e}") from e


def _check_dims(what: str, value: Any, t: TensorType, overrides: dict[str, int]) -> None:
    """InvalidArgument unless `value` (a numpy or device array) has the rank and dims `t` declares: symbolic dims
    (and negative ones, made symbolic on load) are free unless `overrides` fixes them."""
    if t.shape is None:
        return
    if value.ndim != len(t.shape):
        raise InvalidArgument(f"{what}: Invalid rank. Got: {value.ndim} (shape {list(value.shape)}), "
                              f"expected: {len(t.shape)} (shape {list(t.shape)})")
    for axis, (want, got) in enumerate(zip(t.shape, value.shape)):
        want = overrides.get(want, want) if isinstance(want, str) else want
        if isinstance(want, int) and want != got:
            raise InvalidArgument(f"{what}: Got invalid dimensions. index: {axis} Got: {got} Expected: {want} "
                                  f"(expected shape {list(t.shape)}, got {list(value.shape)})")


def _check_device_value(what: str, value: Any, t: TensorType, overrides: dict[str, int]) -> Any:
    """A CUDA array fed as it is (a Numba device array over its memory), checked as a numpy array would be."""
    from onnxjit.kernels.cuda.device import as_device_array
    value = as_device_array(value)
    given = elem_type_of(np.dtype(value.dtype))
    if given != t.elem_type:
        raise InvalidArgument(f"{what}: Unexpected input data type. Actual: ({type_string(TensorType(given))}) "
                              f", expected: ({type_string(t)})")
    _check_dims(what, value, t, overrides)
    return value


def _shape_text(shape) -> str:
    return "" if shape is None else f" with shape {list(shape)}"


def _dtype_text(dtype: np.dtype, elem: int | None) -> str:
    if elem is None:
        return f"numpy {dtype}"
    return f"{type_string(TensorType(elem))}"
