"""Greedy partitioning of a graph over providers, and its lowering to a CompiledGraph.

Each node goes to the first provider, in the caller's priority order, that can run it. Consecutive nodes on the
same provider form one partition, which that provider compiles. Where a value crosses between devices a copy
step is inserted, and graph outputs are always copied back to the host.
"""
from __future__ import annotations

from typing import Sequence

from onnxjit.config import SESSION_NATIVE_SEGMENTS as NATIVE_SEGMENTS_KEY
from onnxjit.errors import InvalidArgument
from onnxjit.errors import NotImplemented as OrtNotImplemented
from onnxjit.ir.graph import Graph, Node
from onnxjit.ir.types import TensorType
from onnxjit.providers.base import ExecutionProvider, GraphCompiler, Step
from onnxjit.session.executor import CompiledGraph
from onnxjit.session.native_plan import MODES as NATIVE_SEGMENT_MODES

HOST = "cpu"


# ops whose output has their inputs' element type: where ONNX's type inference left the output untyped (after an
# ai.onnx.ml node, whose outputs it often does not type and whose builder then declares them: LightGBM exports end
# in Identity and Mul over such a value), it is that type, so the CPU provider can take the node
SAME_TYPE_OPS = frozenset({"Identity", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp",
                           "Log", "Sqrt", "Reciprocal", "Min", "Max", "Sum", "Mean", "LeakyRelu", "HardSigmoid",
                           "HardSwish", "Softplus", "Erf", "Floor", "Ceil", "Round"})


def _type_untyped_output(node: Node) -> None:
    if node.domain or node.op_type not in SAME_TYPE_OPS or len(node.outputs) != 1 or node.outputs[0].type is not None:
        return
    types = {v.type.elem_type if isinstance(v.type, TensorType) else None for v in node.inputs if v is not None}
    if len(types) == 1 and None not in types:
        node.outputs[0].type = TensorType(types.pop())


def assign(graph: Graph, providers: Sequence[ExecutionProvider]) -> list[tuple[ExecutionProvider, list[Node]]]:
    partitions: list[tuple[ExecutionProvider, list[Node]]] = []
    for node in graph.nodes:
        _type_untyped_output(node)
        provider = next((p for p in providers if p.can_run(node)), None)
        if provider is None:
            tried = ", ".join(p.name for p in providers)
            raise OrtNotImplemented(
                f"Could not find an implementation for {node.op_type}({node.opset}) node with name "
                f"{node.name!r}: no provider among [{tried}] runs op {node.op_type!r} of domain "
                f"{node.domain or 'ai.onnx'} at opset {node.opset}")
        if partitions and partitions[-1][0] is provider:
            partitions[-1][1].append(node)
        else:
            partitions.append((provider, [node]))
    return partitions


def _copy_step(name: str, src: ExecutionProvider | None, dst: ExecutionProvider | None, new_name: str) -> Step:
    def copy(v):
        if src is not None:
            v = src.to_host(v)
        return (dst.from_host(v) if dst is not None else v,)
    return Step([], "copy", [name], [new_name], copy, name=f"copy {name} -> {new_name}")


def compile_graph(graph: Graph, providers: Sequence[ExecutionProvider], compiler: GraphCompiler) -> CompiledGraph:
    steps: list[Step] = []
    device_of: dict[str, ExecutionProvider | None] = {}  # None: on the host
    copies: dict[tuple[str, str], str] = {}  # (value, device) -> name of its copy there
    # constants a device reads are copied there once, now: their copies are constants of the compiled graph
    overridable = {v.name for v in graph.inputs}
    fixed = {n for n in graph.initializers if n not in overridable}
    device_constants: dict[str, object] = {}

    def located(name: str, want: ExecutionProvider | None) -> str:
        have = device_of.get(name)
        have_dev = HOST if have is None else have.device
        want_dev = HOST if want is None else want.device
        if not name or have_dev == want_dev:
            return name
        key = (name, want_dev)
        if key not in copies:
            copies[key] = f"{name}@{want_dev}"
            if name in fixed and have is None:
                device_constants[copies[key]] = want.from_host(graph.initializers[name].const)
            else:
                steps.append(_copy_step(name, have, want, copies[key]))
            device_of[copies[key]] = want
        return copies[key]

    for provider, nodes in assign(graph, providers):
        for step in provider.compile(nodes, compiler):
            step.inputs = [located(n, None if k in step.host_inputs else provider) for k, n in enumerate(step.inputs)]
            steps.append(step)
            for n in step.outputs:
                device_of[n] = None if step.host_outputs else provider
    # what a run that leaves its outputs where they were computed (IOBinding to a device) runs: the steps before
    # the outputs' copies to the host
    computed = len(steps)
    device_outputs = [v.name for v in graph.outputs]
    output_names = [located(v.name, None) for v in graph.outputs]
    compiled = CompiledGraph(graph, steps, output_names, device_constants)
    compiled.host_read_inputs = {n for s in steps if s.provider != "copy" for k, n in enumerate(s.inputs)
                                 if n and (k in s.host_inputs or _host_step(s, providers))} | set(output_names)
    cpu = next((p for p in providers if getattr(p, "kernel_store", None) is not None), None)
    mode = cpu.session_config.get(NATIVE_SEGMENTS_KEY, "background") if cpu is not None else "off"
    if mode not in NATIVE_SEGMENT_MODES:
        raise InvalidArgument(f"session config {NATIVE_SEGMENTS_KEY!r} must be one of {NATIVE_SEGMENT_MODES}, "
                              f"got {mode!r}")

    def segmented(g: CompiledGraph) -> CompiledGraph:
        g.native_store = cpu.kernel_store if mode != "off" else None
        g.segment_mode = mode
        return g
    segmented(compiled)

    def without_output_copies() -> CompiledGraph:
        return segmented(CompiledGraph(graph, steps[:computed], device_outputs, device_constants))
    compiled.without_output_copies = without_output_copies
    return compiled


def _host_step(step: Step, providers: Sequence[ExecutionProvider]) -> bool:
    provider = next((p for p in providers if p.name == step.provider), None)
    return provider is None or provider.device == HOST
