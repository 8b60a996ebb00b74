"""The value types ONNX's whole-model inference leaves unknown, completed node by node.

onnx.shape_inference types nothing past an op it has no schema for: after one com.microsoft node (a model that
onnxruntime's optimizer saved starts with EmbedLayerNormalization) every value downstream is untyped, and the CPU
provider's builders, which choose kernels by type, leave those nodes to the fallback provider (a tiny BERT so
saved ran 14 of its MatMuls there). Here each node whose outputs are untyped but whose inputs are typed gets its
outputs typed, in topological order so that the types flow on: an op of a domain with its own rules
(com.microsoft: contrib.microsoft.type_outputs) by those, any op ONNX has a schema for by that schema's inference
function on the node alone (onnx.shape_inference.infer_node_outputs), with the values of small constant inputs
(a Reshape's shape) as data; onnxruntime's own ops in the ai.onnx domain (LayerNormalization before opset 17,
contrib.microsoft.ONNX_DOMAIN_OPS) by the definition they follow. Nodes with subgraphs are left as they are; their
bodies are completed as graphs.
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from onnxjit.ir.graph import Graph, Node
from onnxjit.ir.types import TensorType, from_type_proto, to_type_proto

CONSTANT_DATA_MAX_ELEMENTS = 64  # constant inputs passed to a node's inference as data (shape-like values)


def _domain_rules(domain: str):
    if domain == "com.microsoft":
        from onnxjit.contrib.microsoft import type_outputs
        return type_outputs
    return None


def complete_types(graph: Graph, opset_imports: dict[str, int]) -> int:
    """Type the untyped outputs of `graph`'s nodes (and its subgraphs') that their inputs' types determine;
    returns how many values got a type."""
    typed = 0
    imports = [onnx.helper.make_opsetid(d, v) for d, v in opset_imports.items()]
    for node in graph.nodes:
        for g in node.subgraphs():
            typed += complete_types(g, opset_imports)
        if all(v.type is not None for v in node.outputs if v is not None):
            continue
        before = sum(v.type is None for v in node.outputs if v is not None)
        rules = _domain_rules(node.domain)
        if rules is not None:
            rules(node)
        elif not any(True for _ in node.subgraphs()):
            _infer_from_schema(node, imports)
        typed += before - sum(v.type is None for v in node.outputs if v is not None)
    return typed


def _infer_from_schema(node: Node, imports: list) -> None:
    inputs = [v for v in node.inputs if v is not None]
    if not all(isinstance(v.type, TensorType) for v in inputs):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset, node.domain)
    except onnx.defs.SchemaError:
        # onnxruntime's ops in the ai.onnx domain at opsets where ONNX has none (LayerNormalization before 17)
        from onnxjit.contrib.microsoft import ONNX_DOMAIN_OPS, type_outputs
        if node.domain or node.op_type not in ONNX_DOMAIN_OPS:
            return
        version = ONNX_DOMAIN_OPS[node.op_type]
        if version is None:
            type_outputs(node)
            return
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
    from onnxjit.ir.serde import node_to_proto
    types = {v.name: to_type_proto(v.type) for v in inputs}
    data = {v.name: numpy_helper.from_array(v.const, v.name) for v in inputs
            if v.const is not None and v.const.size <= CONSTANT_DATA_MAX_ELEMENTS and v.const.dtype != object}
    try:
        found = onnx.shape_inference.infer_node_outputs(schema, node_to_proto(node), types, data,
                                                        opset_imports=imports)
    except Exception:  # noqa: BLE001 - inference is an aid: the kernel reports what is wrong when it runs
        return
    for v in node.outputs:
        if v is not None and v.type is None and v.name in found:
            v.type = from_type_proto(found[v.name])
