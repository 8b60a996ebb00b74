"""CPUExecutionProvider: nodes run as Numba-compiled kernels on the host.

It claims a node when the op registry (`onnxjit.ops`) has a builder for the node's op and opset and the
builder accepts the node (dtypes, attributes); control flow runs here too, as in onnxruntime.
"""
from __future__ import annotations

from onnxjit import ops as _ops  # noqa: F401  (registers the op builders)
from onnxjit.ir.graph import Node
from onnxjit.ops.registry import Kernel, builder_for
from onnxjit.providers.base import ExecutionProvider, GraphCompiler, Step, register_provider
from onnxjit.session.control_flow import CONTROL_FLOW_OPS, control_flow_step


@register_provider
class CPUExecutionProvider(ExecutionProvider):
    name = "CPUExecutionProvider"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernels: dict[Node, Kernel | None] = {}

    def _kernel(self, node: Node) -> Kernel | None:
        if node not in self._kernels:
            build = builder_for(node)
            self._kernels[node] = build(node) if build is not None else None
        return self._kernels[node]

    def can_run(self, node: Node) -> bool:
        if node.domain == "" and node.op_type in CONTROL_FLOW_OPS:
            return True
        return self._kernel(node) is not None

    def compile(self, nodes: list[Node], compiler: GraphCompiler) -> list[Step]:
        steps = []
        for node in nodes:
            if node.domain == "" and node.op_type in CONTROL_FLOW_OPS:
                steps.append(control_flow_step(node, compiler, self.name))
            else:
                steps.append(Step([node], self.name, [v.name if v is not None else "" for v in node.inputs],
                                  [v.name for v in node.outputs], self._kernel(node)))
        return steps
