"""The execution-provider interface and its registry.

A provider says which nodes it can run (`can_run`), turns a partition of nodes into Steps (`compile`), and says
where its values live (`device`, `to_host`, `from_host`). The session assigns nodes greedily in the user's
priority order and inserts copies where a value crosses from one device to another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol, Sequence

from onnxjit.ir.graph import Graph, Node


class GraphCompiler(Protocol):
    """What a provider may ask of the session while compiling: control-flow nodes compile their bodies."""

    def compile_subgraph(self, graph: Graph) -> Any: ...


@dataclass
class Step:
    """One callable unit of an execution plan: `fn(*values of inputs) -> values of outputs`.

    `inputs` lists explicit inputs ('' for an absent optional one) followed by `implicit` names a subgraph reads
    from the enclosing scope. `nodes` are the IR nodes the step runs (more than one for a fused kernel).
    """

    nodes: list[Node]
    provider: str
    inputs: list[str]
    outputs: list[str]
    fn: Callable[..., Sequence[Any]]
    implicit: list[str] = field(default_factory=list)
    name: str = ""
    # Optional `bind(arg_signatures) -> kernel` for steps that specialize on dtypes/shapes (see ExecutionPlan).
    bind: Callable[[list], Callable[..., Sequence[Any]]] | None = None
    # on a device provider: positions of inputs the kernel reads on the host (shapes, axes), and whether its
    # outputs are host values (Shape of a device tensor); the session places copies accordingly
    host_inputs: frozenset[int] = frozenset()
    host_outputs: bool = False

    def __post_init__(self):
        if not self.name:
            self.name = (self.nodes[0].name or self.nodes[0].op_type) if self.nodes else "copy"


class ExecutionProvider:
    name: ClassVar[str]
    device: ClassVar[str] = "cpu"

    def __init__(self, options: dict[str, str] | None = None, session_config: dict[str, str] | None = None):
        self.options = dict(options or {})
        self.session_config = dict(session_config or {})

    @classmethod
    def is_available(cls) -> bool:
        return True

    def can_run(self, node: Node) -> bool:
        raise NotImplementedError

    def compile(self, nodes: list[Node], compiler: GraphCompiler) -> list[Step]:
        """Steps running `nodes` (a partition, in topological order) on this provider."""
        raise NotImplementedError

    def to_host(self, value: Any) -> Any:
        return value

    def from_host(self, value: Any) -> Any:
        return value


PROVIDERS: dict[str, type[ExecutionProvider]] = {}

# Every provider name onnxruntime knows: naming one of these that onnxjit lacks is a warning, as in onnxruntime.
KNOWN_PROVIDER_NAMES = (
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider", "ROCMExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
    "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider",
    "ArmNNExecutionProvider", "ACLExecutionProvider", "DmlExecutionProvider", "RknpuExecutionProvider",
    "WebNNExecutionProvider", "WebGpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider",
    "AzureExecutionProvider", "NvTensorRTRTXExecutionProvider", "CPUExecutionProvider",
    "FallbackExecutionProvider",
)


def register_provider(cls: type[ExecutionProvider]) -> type[ExecutionProvider]:
    if cls.name in PROVIDERS:
        raise ValueError(f"execution provider {cls.name!r} registered twice")
    PROVIDERS[cls.name] = cls
    return cls
