"""FallbackExecutionProvider: every ONNX operator at every opset, on the host, through onnx.reference's ops.

Operators the reference lacks but whose schema defines a function body run that body; operators where the
reference disagrees with onnxruntime are replaced by `fallback_fixes`. Control flow (If/Loop/Scan/SequenceMap)
runs through onnxjit's own executor so bodies are partitioned like any graph.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun, RuntimeContextError

from onnxjit import contrib
from onnxjit.contrib import microsoft
from onnxjit.ir.graph import Node
from onnxjit.ir.serde import node_to_proto
from onnxjit.ir.types import to_type_proto
from onnxjit.providers.base import ExecutionProvider, GraphCompiler, Step, register_provider
from onnxjit.providers.fallback_fixes import fixed_op
from onnxjit.session.control_flow import CONTROL_FLOW_OPS, control_flow_step
from onnxjit.session.gradient import gradient_step

log = logging.getLogger("onnxjit")


def _loader(domain: str):
    if domain == "":
        from onnx.reference.ops import load_op
        return functools.partial(load_op, evaluator_cls=ReferenceEvaluator)
    if domain == "ai.onnx.ml":
        from onnx.reference.ops.aionnxml import load_op
    elif domain == "ai.onnx.preview.training":
        from onnx.reference.ops.aionnx_preview_training import load_op
    elif domain == "ai.onnx.preview":
        from onnx.reference.ops.aionnx_preview import load_op
    elif domain == "experimental":
        from onnx.reference.ops.experimental import load_op
    elif domain == contrib.DOMAIN:
        def load_op(domain, op_type, version, **_kwargs):
            return contrib.load_reference_ops().get(op_type) if version >= contrib.VERSION else None
    elif domain == microsoft.DOMAIN:
        def load_op(domain, op_type, version, **_kwargs):
            return microsoft.load_reference_ops().get(op_type)
    else:
        return None
    return load_op


def reference_op_class(node: Node) -> Any:
    """The OpRun class (or factory) implementing `node`, or None when there is none."""
    fixed = fixed_op(node.domain, node.op_type, node.opset)
    if fixed is not None:
        return fixed
    load = _loader(node.domain)
    if load is None:
        return None
    try:
        return load(node.domain, node.op_type, node.opset)
    except RuntimeContextError:
        # a context-dependent function body: needs the input types
        if any(v is not None and v.type is None for v in node.inputs):
            return None
        types = [to_type_proto(v.type) if v is not None else to_type_proto(None) for v in node.inputs]
        try:
            return load(node.domain, node.op_type, node.opset, node=node_to_proto(node), input_types=types)
        except Exception:  # noqa: BLE001
            return None
    except Exception:  # noqa: BLE001 - the reference raises several types for "no implementation"
        return None


def versioned_node_proto(node: Node) -> onnx.NodeProto:
    """The node as a NodeProto, with the defaults of *its* opset written out where they changed since.

    onnx.reference fills missing attributes from the newest schema, which is wrong where a default changed
    (Softmax's axis was 1 before opset 13, -1 since)."""
    proto = node_to_proto(node)
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset, node.domain)
        newest = onnx.defs.get_schema(node.op_type, node.domain)
    except onnx.defs.SchemaError:
        return proto
    present = {a.name for a in proto.attribute}
    for name, a in schema.attributes.items():
        now = newest.attributes.get(name)
        if (name in present or now is None or a.default_value.type == onnx.AttributeProto.UNDEFINED
                or a.default_value == now.default_value):
            continue
        default = onnx.AttributeProto()
        default.CopyFrom(a.default_value)
        default.name = name
        proto.attribute.append(default)
    return proto


GRADIENT = ("ai.onnx.preview.training", "Gradient")


def _graph_level(node: Node) -> bool:
    """Ops that run other nodes of the graph: control flow, and Gradient."""
    return (node.domain == "" and node.op_type in CONTROL_FLOW_OPS) or (node.domain, node.op_type) == GRADIENT


def _as_output(v: Any) -> Any:
    # the reference returns numpy scalars for 0-d results, and some string ops (StringNormalizer) numpy unicode
    # arrays; callers get arrays, strings as object arrays, as from onnxruntime and onnxjit's other providers
    if isinstance(v, np.generic):
        v = np.asarray(v)
    if isinstance(v, np.ndarray) and v.dtype.kind in "US":
        v = v.astype(object)
    return v


@register_provider
class FallbackExecutionProvider(ExecutionProvider):
    name = "FallbackExecutionProvider"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._resolved: dict[Node, Any] = {}  # resolving may build a function body: do it once per node

    def _op_class(self, node: Node) -> Any:
        if node not in self._resolved:
            self._resolved[node] = reference_op_class(node)
        return self._resolved[node]

    def can_run(self, node: Node) -> bool:
        return _graph_level(node) or self._op_class(node) is not None

    def compile(self, nodes: list[Node], compiler: GraphCompiler) -> list[Step]:
        steps = []
        for node in nodes:
            if node.op_type in CONTROL_FLOW_OPS and node.domain == "":
                steps.append(control_flow_step(node, compiler, self.name))
                continue
            if (node.domain, node.op_type) == GRADIENT:
                steps.append(gradient_step(node, compiler, self))
                continue
            cls = self._op_class(node)
            run_params = {"log": lambda *a: None, "opsets": compiler.opset_imports, "verbose": 0, "new_ops": {},
                          "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}
            op: OpRun = cls(versioned_node_proto(node), run_params)

            def run(*args, op=op):
                return [_as_output(v) for v in op.run(*args)]
            steps.append(Step([node], self.name, [v.name if v is not None else "" for v in node.inputs],
                              [v.name for v in node.outputs], run))
        return steps
