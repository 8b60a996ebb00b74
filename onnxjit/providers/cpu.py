"""CPUExecutionProvider: nodes run as Numba-compiled kernels on the host.

Elementwise ops and activations are fused into generated kernels (onnxjit/fuser), one per group, and groups of
the same pattern (ops, dtypes, broadcast pattern; any sizes) share one kernel: it compiles once per session, or
loads from the artifact cache. Kernels compile when the session is created if type inference knows the shapes,
else when a plan first meets an input signature. Other ops run the kernels the op registry (onnxjit/ops)
builds. Control flow runs here too, as in onnxruntime.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from onnxjit import config
from onnxjit import ops as _ops  # noqa: F401  (registers the op builders)
from onnxjit.cache.store import KernelStore
from onnxjit.fuser.codegen import KernelSpec, render
from onnxjit.fuser.exprs import fusable, reduction_spec
from onnxjit.fuser.partition import Group, group_nodes
from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType
from onnxjit.ops.nn import ro_reshaped
from onnxjit.ops.registry import CHAIN_ENDS, CONCATS_OF, Kernel, builder_for, chain_builder_for
from onnxjit.progress import progress_bar
from onnxjit.providers.base import ExecutionProvider, GraphCompiler, Step, register_provider
from onnxjit.providers.placement import place_concat_inputs
from onnxjit.session.control_flow import CONTROL_FLOW_OPS, control_flow_step
from onnxjit.session.native_plan import NATIVE_GRAIN, In, NativeCall, Out
from onnxjit.worker_pool import PARALLEL_GRAIN, CallSite

log = logging.getLogger("onnxjit")

SHOW_PROGRESS_KEY = "session.onnxjit.show_progress"  # "0" silences the compile progress bar


@dataclass
class KernelInfo:
    """A fused group as users can inspect it: its nodes and the source of each kernel it ran (a kernel serves every
    group of its pattern: `compile_seconds` and `compiled` count it in the group that first loaded it)."""

    name: str
    provider: str
    nodes: list[str]
    sources: dict[str, str] = field(default_factory=dict)  # kernel name -> generated source
    compile_seconds: float = 0.0  # spent compiling or loading these kernels from the artifact cache
    compiled: int = 0  # how many of them had to be compiled (not served from the cache)


def _static_signature(group: Group) -> list | None:
    """(dtype, shape) of each group input when type inference knows them all, else None."""
    values = {v.name: v for n in group.nodes for v in n.inputs if v is not None}
    sig = []
    for name in group.inputs:
        t = values[name].type
        if not isinstance(t, TensorType) or t.shape is None or not all(isinstance(d, int) for d in t.shape):
            return None
        sig.append((t.dtype, tuple(t.shape)))
    return sig


def _runner(spec: KernelSpec, kernel: Callable) -> Kernel:
    """The group's step: its kernel over flat read-only views of the loaded inputs (converted to their compute
    dtypes), new outputs, and the loop sizes. What stays the same from run to run is made here: in a chain of
    small steps the step's own Python was most of its time (4.4 us a step, onnxruntime's 0.3)."""
    site = CallSite(kernel)  # the arguments' types are fixed: the spec's dtypes, flat read-only inputs
    loaded = tuple(zip(spec.loaded, spec.in_dtypes))
    outs_made = tuple((int(np.prod(shape, dtype=np.int64)), dt) for shape, dt in zip(spec.out_shapes, spec.out_dtypes))
    finals = tuple(zip(spec.out_shapes, spec.final_dtypes))
    converted = any(dt != f for dt, f in zip(spec.out_dtypes, spec.final_dtypes))
    sizes, n_units, work = tuple(spec.sizes), spec.n_units, spec.work

    def run(*args: Any) -> list[np.ndarray]:
        # read-only, exactly the kernel's signature: worker_pool then hands the arrays to the threads natively
        # (a writable array converts at the dispatcher, and runs on the caller alone)
        ins = tuple([ro_reshaped(args[i], -1, dt) for i, dt in loaded])
        outs = tuple([np.empty(n, dt) for n, dt in outs_made])
        # zero-size loops run no iterations; a reduction then gives its start
        site.run(ins + outs + sizes, n_units, work)
        if converted:
            return [o.reshape(shape) if o.dtype == f else o.reshape(shape).astype(f)
                    for o, (shape, f) in zip(outs, finals)]
        return [o.reshape(shape) for o, (shape, _) in zip(outs, finals)]

    def native(*args: Any) -> NativeCall | None:
        if converted or work >= NATIVE_GRAIN:
            return None
        if any(type(args[i]) is not np.ndarray or args[i].dtype != dt for i, dt in loaded):
            return None
        return NativeCall(kernel, [In(i, (args[i].size,)) for i, _ in loaded] + [Out(j) for j in range(len(outs_made))]
                          + list(sizes), n_units, [((n,), dt) for n, dt in outs_made],
                          [(j, shape) for j, (shape, _) in enumerate(finals)],
                          parallel=n_units > 1 and work >= PARALLEL_GRAIN)
    run.native = native
    return run


@register_provider
class CPUExecutionProvider(ExecutionProvider):
    name = "CPUExecutionProvider"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernels: dict[Node, Kernel | None] = {}
        self._loaded: dict[str, Callable] = {}  # kernel name -> compiled kernel, shared by this session's plans
        self._lock = threading.Lock()
        self.kernel_infos: list[KernelInfo] = []
        self.kernel_store = KernelStore.default(
            enabled=self.session_config.get(config.SESSION_DISABLE_KERNEL_CACHE, "0") != "1")

    def _kernel(self, node: Node) -> Kernel | None:
        if node not in self._kernels:
            build = builder_for(node)
            self._kernels[node] = build(node) if build is not None else None
        return self._kernels[node]

    def can_run(self, node: Node) -> bool:
        if node.domain == "" and node.op_type in CONTROL_FLOW_OPS:
            return True
        return fusable(node) or reduction_spec(node) is not None or self._kernel(node) is not None

    def compile(self, nodes: list[Node], compiler: GraphCompiler) -> list[Step]:
        external = nodes[0].graph.external_names() if nodes and nodes[0].graph is not None else set()
        steps = []
        static: list[tuple[Step, list]] = []
        for item in group_nodes(nodes):
            if isinstance(item, Group):
                step = self._group_step(item, item.outputs(external))
                steps.append(step)
                sig = _static_signature(item)
                if sig is not None:
                    static.append((step, sig))
            elif item.domain == "" and item.op_type in CONTROL_FLOW_OPS:
                steps.append(control_flow_step(item, compiler, self.name))
            else:
                if self._join_chain(steps, item, external) or self._join_concat(steps, item, external):
                    continue
                steps.append(Step([item], self.name, [v.name if v is not None else "" for v in item.inputs],
                                  [v.name for v in item.outputs], self._kernel(item)))
        self._precompile(static)
        return place_concat_inputs(steps, external)

    def _join_chain(self, steps: list[Step], node: Node, external: set[str]) -> bool:
        """Join `node` to the op step that computes its input 0 when the op registry has a kernel for their chain
        of nodes (registry.register_chain) and that value is read by `node` alone (it then never exists in
        memory). The step may be an earlier one (a Gather per column, then a OneHotEncoder per column): `node`
        moves up to it when its other inputs are ready there."""
        v = node.inputs[0] if node.inputs else None
        if v is None or v.producer is None or len(v.uses) != 1 or v.name in external \
                or (node.domain, node.op_type) not in CHAIN_ENDS:
            return False
        at = next((i for i in range(len(steps) - 1, -1, -1) if v.name in steps[i].outputs), None)
        if at is None:
            return False
        prev = steps[at]
        if prev.bind is not None or not prev.nodes or prev.nodes[-1] is not v.producer:
            return False
        later = {n for s in steps[at + 1:] for n in s.outputs}
        if any(u is not None and u.name in later for u in node.inputs[1:]):
            return False  # an input computed after that step
        nodes = prev.nodes + [node]
        build = chain_builder_for(nodes)
        kernel = build(*nodes) if build is not None else None
        if kernel is None:
            return False
        inputs = prev.inputs + [u.name if u is not None else "" for u in node.inputs[1:]]
        outputs = [n for n in prev.outputs if n != v.name] + [u.name for u in node.outputs]
        steps[at] = Step(nodes, self.name, inputs, outputs, kernel)
        return True

    def _join_concat(self, steps: list[Step], node: Node, external: set[str]) -> bool:
        """Make a Concat and the chain steps computing its inputs one step where the op registry has a kernel for
        that (registry.register_concat_of) and the Concat alone reads each input: the step takes the place of the
        last chain's step (where every chain's inputs are computed), and the others are dropped (what reads the
        Concat comes after it; the steps between them then sit next to its readers, in a native segment)."""
        if node.domain or node.op_type != "Concat" or len(node.outputs) != 1 or len(node.inputs) < 2:
            return False
        at = []
        for v in node.inputs:
            if v is None or v.producer is None or len(v.uses) != 1 or v.name in external \
                    or node.inputs.count(v) != 1:
                return False
            i = next((i for i in range(len(steps) - 1, -1, -1) if v.name in steps[i].outputs), None)
            if i is None or steps[i].bind is not None or steps[i].outputs != [v.name] \
                    or steps[i].nodes[-1] is not v.producer:
                return False
            at.append(i)
        keys = {tuple((n.domain, n.op_type) for n in steps[i].nodes) for i in at}
        build = CONCATS_OF.get(keys.pop()) if len(keys) == 1 else None
        kernel = build(node, [steps[i].nodes for i in at]) if build is not None else None
        if kernel is None:
            return False
        nodes = [n for i in at for n in steps[i].nodes] + [node]
        inputs = [name for i in at for name in steps[i].inputs]
        last = max(at) - (len(at) - 1)  # where the last chain's step is, once the others are gone
        for i in sorted(at, reverse=True):
            del steps[i]
        steps.insert(last, Step(nodes, self.name, inputs, [node.outputs[0].name], kernel))
        return True

    def _precompile(self, static: list[tuple[Step, list]]) -> None:
        """Compile (or load from the artifact cache) the kernels whose shapes are known now, with a progress bar
        on a terminal when it takes a while; the rest compile when a run first meets their shapes."""
        bar = progress_bar(self.session_config.get(SHOW_PROGRESS_KEY, "1") != "0" and bool(static), len(static),
                           "onnxjit: compiling kernels", "kernel")
        try:
            for step, sig in static:
                step.bind(sig)
                bar.update(1)
        finally:
            bar.close()

    def _group_step(self, group: Group, outputs: list[str]) -> Step:
        info = KernelInfo(f"group{len(self.kernel_infos)}", self.name,
                          [f"{n.op_type}({n.name})" if n.name else n.op_type for n in group.nodes])
        self.kernel_infos.append(info)

        def bind(sig: list) -> Kernel:
            spec = render(group, outputs, sig)
            with self._lock:
                kernel = self._loaded.get(spec.name)
                if kernel is None:  # groups of the same pattern render the same source: the first one loads it
                    if config.DEBUG >= 3:
                        log.info("onnxjit kernel %s for %s:\n%s", spec.name, ", ".join(info.nodes), spec.source)
                    loaded = self.kernel_store.load(spec.source)
                    kernel = self._loaded[spec.name] = loaded.kernel
                    info.compile_seconds += loaded.seconds
                    info.compiled += loaded.compiled > 0
                info.sources[spec.name] = spec.source
            return _runner(spec, kernel)

        def unbound(*_args):
            raise AssertionError("fused steps run through ExecutionPlan.bind")
        return Step(group.nodes, self.name, group.inputs, outputs, unbound, bind=bind)
