"""The op registry of the CUDA provider: (domain, op_type) -> builders by since-version, as the CPU provider's
(onnxjit/ops/registry.py).

A builder takes the IR node and the session's `Device` (its stream and memory pool) and returns a kernel
`fn(*inputs) -> tuple of outputs` over device arrays, or None when it cannot run this node (an unsupported dtype,
an attribute it does not implement); the node then goes to the next provider. Inputs a builder needs on the host
(shapes, axes, starts: read when the step runs, not computed on) are listed in `HOST_INPUTS`; the session copies
those to the host instead of to the device.
"""
from __future__ import annotations

from typing import Callable

from onnxjit.ir.graph import Node
from onnxjit.ops.registry import Kernel

CudaBuilder = Callable[[Node, "object"], "Kernel | None"]

CUDA_OPS: dict[tuple[str, str], dict[int, CudaBuilder]] = {}
HOST_INPUTS: dict[tuple[str, str], frozenset[int]] = {}
HOST_OUTPUTS: set[tuple[str, str]] = set()  # ops whose outputs the kernel returns on the host (Shape, Size)


def register_cuda_op(op_type: str, since: int = 1, domain: str = "", host_inputs=(),
                     host_outputs: bool = False) -> Callable:
    """Register a builder of `op_type` from opset `since`; `host_inputs`: positions of inputs it reads on the
    host; `host_outputs`: its outputs are host arrays (metadata of device values, as Shape's)."""
    def deco(build: CudaBuilder) -> CudaBuilder:
        versions = CUDA_OPS.setdefault((domain, op_type), {})
        if since in versions:
            raise ValueError(f"CUDA op {domain or 'ai.onnx'}::{op_type} since {since} registered twice")
        versions[since] = build
        if host_inputs:
            HOST_INPUTS[(domain, op_type)] = frozenset(host_inputs)
        if host_outputs:
            HOST_OUTPUTS.add((domain, op_type))
        return build
    return deco


def cuda_builder_for(node: Node) -> CudaBuilder | None:
    versions = CUDA_OPS.get((node.domain, node.op_type))
    if not versions:
        return None
    since = max((v for v in versions if v <= node.opset), default=None)
    return None if since is None else versions[since]


def host_inputs_of(node: Node) -> frozenset[int]:
    return HOST_INPUTS.get((node.domain, node.op_type), frozenset())


def has_host_outputs(node: Node) -> bool:
    return (node.domain, node.op_type) in HOST_OUTPUTS
