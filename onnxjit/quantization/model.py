"""The ModelProto the quantizers rewrite: loading (with onnx shape inference, as onnxruntime's quantizer loads),
lookups the rewrites need (initializers, element types, consumers), and the final clean-up and save."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxjit.errors import InvalidArgument, InvalidGraph, NoSuchFile

MS_DOMAIN = "com.microsoft"
PRODUCER = "onnxjit.quantization"
INFER_METADATA = ("onnx.infer", "onnxruntime.quant")  # onnxruntime tags the models its quantizer loaded so
PRE_PROCESS_METADATA = ("onnx.quant.pre_process", "onnxruntime.quant")  # and those quant_pre_process wrote


def load_model(model_input, what: str = "model_input") -> onnx.ModelProto:
    """A copy of `model_input` (a path or a ModelProto), external data loaded, with onnx's inferred types."""
    if isinstance(model_input, onnx.ModelProto):
        model = copy.deepcopy(model_input)
    elif isinstance(model_input, (str, os.PathLike)):
        path = Path(model_input)
        if not path.is_file():
            raise NoSuchFile(f"onnxjit.quantization: {what} {str(path)!r} does not exist")
        try:
            model = onnx.load(str(path))
        except Exception as e:  # noqa: BLE001 - a file that does not parse as a model
            raise InvalidGraph(f"onnxjit.quantization: {what} {str(path)!r} is not an ONNX model: {e}") from e
    else:
        raise InvalidArgument(f"onnxjit.quantization: {what} must be a path or an onnx.ModelProto, "
                              f"not {type(model_input).__name__}")
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # noqa: BLE001 - onnx's checker-level complaint, named
        raise InvalidGraph(f"onnxjit.quantization: shape inference failed on {what}: {e}") from e
    set_metadata(model, *INFER_METADATA)
    return model


def set_metadata(model: onnx.ModelProto, key: str, value: str) -> None:
    for p in model.metadata_props:
        if p.key == key:
            p.value = value
            return
    model.metadata_props.add(key=key, value=value)


def has_metadata(model: onnx.ModelProto, key: str, value: str) -> bool:
    return any(p.key == key and p.value == value for p in model.metadata_props)


def default_opset(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if len(versions) != 1:
        raise InvalidGraph("onnxjit.quantization: the model does not import the default ONNX domain exactly once")
    return versions[0]


def set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    for o in model.opset_import:
        if o.domain == domain:
            return
    model.opset_import.add(domain=domain, version=version)


class QuantModel:
    """The graph under rewrite, with what the rewrites look up: initializers by name, element types (from the
    inferred value infos), and the nodes reading each value."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.opset = default_opset(model)
        self.initializers: dict[str, TensorProto] = {t.name: t for t in self.graph.initializer}
        self.value_types: dict[str, int] = {}
        for vi in (*self.graph.value_info, *self.graph.output, *self.graph.input):
            if vi.type.HasField("tensor_type"):
                self.value_types[vi.name] = vi.type.tensor_type.elem_type
        self.graph_inputs = {i.name for i in self.graph.input} - set(self.initializers)
        self.graph_outputs = {o.name for o in self.graph.output}

    # lookups
    def elem_type(self, name: str) -> int | None:
        if name in self.initializers:
            return self.initializers[name].data_type
        return self.value_types.get(name)

    def is_float(self, name: str) -> bool:
        return self.elem_type(name) in (TensorProto.FLOAT, TensorProto.FLOAT16)

    def is_float_initializer(self, name: str) -> bool:
        init = self.initializers.get(name)
        return init is not None and init.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializers[name])

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.graph.node if name in n.input]

    def add_initializer(self, tensor: TensorProto) -> None:
        if tensor.name not in self.initializers:
            self.graph.initializer.append(tensor)
            self.initializers[tensor.name] = self.graph.initializer[-1]

    def remove_initializer(self, name: str) -> None:
        init = self.initializers.pop(name, None)
        if init is not None:
            self.graph.initializer.remove(init)

    # rewiring
    def rename_input(self, old: str, new: str, nodes=None) -> None:
        for n in (self.graph.node if nodes is None else nodes):
            for i, name in enumerate(n.input):
                if name == old:
                    n.input[i] = new

    def rename_output(self, old: str, new: str) -> None:
        for n in self.graph.node:
            for i, name in enumerate(n.output):
                if name == old:
                    n.output[i] = new

    def set_nodes(self, nodes: list[onnx.NodeProto]) -> None:
        del self.graph.node[:]
        self.graph.node.extend(nodes)

    # finishing
    def finish(self) -> onnx.ModelProto:
        """Drop initializers (and their graph inputs) nothing reads, sort the nodes topologically, declare
        com.microsoft when a node uses it, and stamp the producer."""
        read = {i for n in self.graph.node for i in n.input if i} | self.graph_outputs
        read |= {i for n in self.graph.node for a in n.attribute for g in _subgraphs(a) for i in _outer_reads(g)}
        for name in [t.name for t in self.graph.initializer if t.name not in read]:
            self.remove_initializer(name)
        # an initializer's graph input (IR < 4 lists them) goes with it: unread, or now a node's output (a
        # dequantized bias), which a graph input may not also be
        produced = {o for n in self.graph.node for o in n.output}
        stale = [i for i in self.graph.input if i.name not in self.graph_inputs
                 and (i.name not in read or i.name in produced) and i.name not in self.initializers]
        for i in stale:
            self.graph.input.remove(i)
        self.set_nodes(_topological(list(self.graph.node), set(self.initializers) | self.graph_inputs))
        if any(n.domain == MS_DOMAIN for n in self.graph.node):
            set_opset(self.model, MS_DOMAIN, 1)
        from onnxjit import __version__
        self.model.producer_name, self.model.producer_version = PRODUCER, __version__
        return self.model


def _subgraphs(attr: onnx.AttributeProto):
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from its enclosing scopes (those it neither defines nor receives)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output}
    reads = {i for n in graph.node for i in n.input if i} | {o.name for o in graph.output}
    reads |= {i for n in graph.node for a in n.attribute for g in _subgraphs(a) for i in _outer_reads(g)}
    return reads - defined


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Kahn's order, stable: each node as early as its inputs allow, ties in the given order."""
    produced = {o for n in nodes for o in n.output if o}
    ready = set(available) | {""}
    out, pending = [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            needs = [i for i in n.input if i in produced] + \
                [i for a in n.attribute for g in _subgraphs(a) for i in _outer_reads(g) if i in produced]
            if all(i in ready for i in needs):
                out.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            names = ", ".join(f"{n.op_type}({n.name})" for n in rest[:5])
            raise InvalidGraph(f"onnxjit.quantization: the rewritten graph has a cycle or a missing value at {names}")
        pending = rest
    return out


def save_model(model: onnx.ModelProto, model_output, use_external_data_format: bool) -> None:
    if not isinstance(model_output, (str, os.PathLike)):
        raise InvalidArgument(f"onnxjit.quantization: model_output must be a path, not {type(model_output).__name__}")
    path = Path(model_output)
    if not path.parent.is_dir():
        raise NoSuchFile(f"onnxjit.quantization: the folder of model_output {str(path)!r} does not exist")
    if use_external_data_format:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", convert_attribute=True)
    else:
        onnx.save_model(model, str(path))
