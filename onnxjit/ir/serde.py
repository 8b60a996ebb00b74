"""ModelProto <-> IR.

Loading inlines model-local functions (as onnxruntime does) and runs ONNX shape inference so values carry
types; names a subgraph reads from enclosing graphs become captured Values listed in `Graph.outer_names`.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.inliner
from onnx import AttributeProto, helper, numpy_helper

from onnxjit.errors import InvalidGraph
from onnxjit.ir.graph import Attr, Graph, Model, Node, Value
from onnxjit.ir.node_inference import complete_types
from onnxjit.ir.types import TensorType, from_type_proto, to_type_proto

_TWO_GB = 2**31 - 1024
# the first IR version whose graph inputs list only overridable initializers (IR 3 listed them all)
CONSTANT_INITIALIZERS_IR = 4


def normalize_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def tensor_to_array(t: onnx.TensorProto, base_dir: str | None = None) -> np.ndarray:
    if onnx.external_data_helper.uses_external_data(t):
        if base_dir is None:
            raise InvalidGraph(f"initializer {t.name!r} stores its data in an external file; load the model from "
                               f"its path so the data can be found")
        t = onnx.TensorProto.FromString(t.SerializeToString())
        onnx.external_data_helper.load_external_data_for_tensor(t, base_dir)
    arr = numpy_helper.to_array(t)
    return np.asarray(arr)


def sparse_to_dense(sp: onnx.SparseTensorProto) -> tuple[str, np.ndarray]:
    values = numpy_helper.to_array(sp.values)
    indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    dims = tuple(sp.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:  # linearized indices
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return sp.values.name, dense


class _Scope:
    """Name resolution for one graph; a miss is looked up in the enclosing graph and captured."""

    def __init__(self, graph: Graph, parent: "_Scope | None"):
        self.graph = graph
        self.parent = parent
        self.values: dict[str, Value] = {}
        self.types: dict[str, object] = {}

    def define(self, v: Value) -> Value:
        self.values[v.name] = v
        return v

    def lookup(self, name: str, user: str) -> Value:
        v = self.values.get(name)
        if v is not None:
            return v
        if self.parent is None:
            raise InvalidGraph(f"{user} reads value {name!r}, which no graph input, initializer or earlier node "
                               f"defines")
        outer = self.parent.lookup(name, user)
        v = self.define(Value(name, outer.type))
        self.graph.outer_names.append(name)
        return v


def _attr_from_proto(a: AttributeProto, scope: _Scope, opsets: dict[str, int], base_dir) -> Attr:
    if a.ref_attr_name:
        return Attr(a.name, a.type, None, a.ref_attr_name, a.doc_string)
    if a.type == AttributeProto.GRAPH:
        value = _graph_from_proto(a.g, opsets, scope, base_dir)
    elif a.type == AttributeProto.GRAPHS:
        value = [_graph_from_proto(g, opsets, scope, base_dir) for g in a.graphs]
    else:
        value = helper.get_attribute_value(a)
    return Attr(a.name, a.type, value, "", a.doc_string)


def _graph_from_proto(gp: onnx.GraphProto, opsets: dict[str, int], parent: _Scope | None, base_dir,
                      payloads: dict[str, onnx.TensorProto] | None = None) -> Graph:
    """`payloads`: the initializers whose data `structure_only` left out of gp, by name."""
    g = Graph(name=gp.name, doc_string=gp.doc_string, parent=parent.graph if parent else None)
    scope = _Scope(g, parent)
    types = {vi.name: from_type_proto(vi.type) for vi in gp.value_info}
    types.update({vi.name: from_type_proto(vi.type) for vi in gp.output})
    for t in gp.initializer:
        arr = tensor_to_array(payloads.get(t.name, t) if payloads else t, base_dir)
        g.initializers[t.name] = scope.define(Value(t.name, TensorType(t.data_type, tuple(arr.shape)), arr))
    for sp in gp.sparse_initializer:
        name, arr = sparse_to_dense(sp)
        g.initializers[name] = scope.define(
            Value(name, TensorType(sp.values.data_type, tuple(arr.shape)), arr))
    for vi in gp.input:
        v = g.initializers.get(vi.name)  # an initializer listed as input can be overridden by a feed
        if v is None:
            v = scope.define(Value(vi.name, from_type_proto(vi.type)))
        elif vi.type.WhichOneof("value"):
            v.type = from_type_proto(vi.type)
        g.inputs.append(v)
    for k, np_ in enumerate(gp.node):
        domain = normalize_domain(np_.domain)
        user = f"node {np_.name or k!r} ({np_.op_type})"
        ins = [scope.lookup(n, user) if n else None for n in np_.input]
        outs = []
        for n in np_.output:
            v = Value(n, types.get(n))
            if n:
                if n in scope.values:
                    raise InvalidGraph(f"value {n!r} is produced twice (second time by {user})")
                scope.define(v)
            outs.append(v)
        attrs = {a.name: _attr_from_proto(a, scope, opsets, base_dir) for a in np_.attribute}
        g.append(Node(np_.op_type, ins, outs, domain=domain, name=np_.name, attributes=attrs,
                      opset=opsets.get(domain, 0), doc_string=np_.doc_string))
    for vi in gp.output:
        v = scope.lookup(vi.name, f"graph {gp.name!r} output")
        if vi.type.WhichOneof("value"):  # the declared output type is the contract callers see
            v.type = from_type_proto(vi.type)
        g.outputs.append(v)
    return g


# Initializers with more elements than this are left out of the copy shape inference works on (it needs their
# dims, not their values; the small ones, such as Reshape's shape, it reads).
STRUCTURE_PAYLOAD_ELEMENTS = 1 << 14


def structure_only(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto]]:
    """A copy of the model whose large main-graph initializers keep their name, type and dims but no data, and
    those initializers by name. Shape inference serializes the model it is given, twice: for a 550 MB model
    that was 7 of the 15 s a session took to load, and a model past protobuf's 2 GB could not be inferred."""
    large = {t.name: t for t in proto.graph.initializer
             if math.prod(t.dims) > STRUCTURE_PAYLOAD_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL}
    if not large:
        return proto, {}
    graph = onnx.GraphProto(name=proto.graph.name, doc_string=proto.graph.doc_string)
    graph.node.extend(proto.graph.node)
    for field in ("input", "output", "value_info", "sparse_initializer", "quantization_annotation",
                  "metadata_props"):
        if hasattr(graph, field):
            getattr(graph, field).extend(getattr(proto.graph, field))
    for t in proto.graph.initializer:
        if t.name in large:
            graph.initializer.append(onnx.TensorProto(name=t.name, data_type=t.data_type, dims=t.dims))
        else:
            graph.initializer.append(t)
    copy = onnx.ModelProto(ir_version=proto.ir_version, producer_name=proto.producer_name,
                           producer_version=proto.producer_version, domain=proto.domain,
                           model_version=proto.model_version, doc_string=proto.doc_string)
    copy.opset_import.extend(proto.opset_import)
    copy.functions.extend(proto.functions)
    copy.metadata_props.extend(proto.metadata_props)
    copy.graph.CopyFrom(graph)
    return copy, large


def infer_types(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference, best effort: a model it cannot infer still loads, only with fewer known types."""
    if proto.ByteSize() > _TWO_GB:
        return proto
    try:
        # data_prop=True can take seconds (8 s on a 4M-element elementwise chain): not worth it at load time
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - inference is an aid, never a gate
        return proto


def from_onnx(proto: onnx.ModelProto, base_dir: str | None = None) -> Model:
    opsets = {normalize_domain(o.domain): o.version for o in proto.opset_import}
    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as e:  # noqa: BLE001
            raise InvalidGraph(f"cannot inline the model's local functions: {e}") from e
    declared = {d.dim_param for vi in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
                for d in vi.type.tensor_type.shape.dim if d.dim_param}
    ir_version = proto.ir_version
    structure, payloads = structure_only(proto)
    if ir_version < CONSTANT_INITIALIZERS_IR:
        # inference under IR 3 types only the initializers listed as inputs: one added to an old model without
        # being listed (as benchmarks' stored weights are) would leave every value after it untyped
        if structure is proto:
            structure = onnx.ModelProto()
            structure.CopyFrom(proto)  # no large initializer here (structure_only copies otherwise): cheap
        structure.ir_version = CONSTANT_INITIALIZERS_IR
    proto = infer_types(structure)
    for vi in proto.graph.output:  # inference names unknown output dims unk__N; onnxruntime reports them as None
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param.startswith("unk__") and d.dim_param not in declared:
                d.ClearField("dim_param")
    graph = _graph_from_proto(proto.graph, opsets, None, base_dir, payloads)
    if ir_version < CONSTANT_INITIALIZERS_IR:
        # before IR 4 every initializer had to be listed among the graph inputs, so being listed there did not
        # make it overridable: onnxruntime treats them as constants (and folds them); so does onnxjit
        graph.inputs = [v for v in graph.inputs if v.name not in graph.initializers]
    complete_types(graph, opsets)
    return Model(graph=graph, ir_version=ir_version, opset_imports=opsets,
                 producer_name=proto.producer_name, producer_version=proto.producer_version,
                 domain=proto.domain, model_version=proto.model_version, doc_string=proto.doc_string,
                 metadata_props={p.key: p.value for p in proto.metadata_props})


def _value_info(v: Value) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = v.name
    if v.type is not None:
        vi.type.CopyFrom(to_type_proto(v.type))
    return vi


def attr_to_proto(a: Attr) -> AttributeProto:
    if a.ref_attr_name:
        p = AttributeProto(name=a.name, ref_attr_name=a.ref_attr_name, type=a.type)
    elif a.type == AttributeProto.GRAPH:
        p = helper.make_attribute(a.name, graph_to_proto(a.value))
    elif a.type == AttributeProto.GRAPHS:
        p = helper.make_attribute(a.name, [graph_to_proto(g) for g in a.value], attr_type=a.type)
    else:
        p = helper.make_attribute(a.name, a.value, attr_type=a.type)
    if a.doc_string:
        p.doc_string = a.doc_string
    return p


def node_to_proto(n: Node) -> onnx.NodeProto:
    p = helper.make_node(n.op_type, [v.name if v is not None else "" for v in n.inputs],
                         [v.name for v in n.outputs], name=n.name or None, domain=n.domain or None)
    if n.doc_string:
        p.doc_string = n.doc_string
    p.attribute.extend(attr_to_proto(a) for a in n.attributes.values())
    return p


def _initializer_proto(v: Value, structure_only: bool) -> onnx.TensorProto:
    if structure_only and v.const.size > STRUCTURE_PAYLOAD_ELEMENTS:  # dims and type are all inference reads
        return onnx.TensorProto(name=v.name, data_type=v.type.elem_type, dims=v.const.shape)
    return numpy_helper.from_array(v.const, v.name)


def graph_to_proto(g: Graph, structure_only: bool = False) -> onnx.GraphProto:
    """`structure_only`: large initializers without their data (see `structure_only`), for shape inference."""
    inputs = {v.name for v in g.inputs}
    gp = onnx.GraphProto(name=g.name, doc_string=g.doc_string)
    gp.input.extend(_value_info(v) for v in g.inputs)
    gp.output.extend(_value_info(v) for v in g.outputs)
    gp.initializer.extend(_initializer_proto(v, structure_only) for v in g.initializers.values())
    gp.node.extend(node_to_proto(n) for n in g.nodes)
    outputs = {v.name for v in g.outputs}
    gp.value_info.extend(_value_info(v) for n in g.nodes for v in n.outputs
                         if v.name and v.type is not None and v.name not in outputs and v.name not in inputs)
    return gp


def to_onnx(m: Model, structure_only: bool = False) -> onnx.ModelProto:
    opsets = [helper.make_opsetid(d, v) for d, v in m.opset_imports.items()]
    gp = graph_to_proto(m.graph, structure_only)
    if m.ir_version < CONSTANT_INITIALIZERS_IR:  # that IR lists every initializer among the inputs (from_onnx)
        listed = {vi.name for vi in gp.input}
        gp.input.extend(_value_info(v) for v in m.graph.initializers.values() if v.name not in listed)
    proto = helper.make_model(gp, opset_imports=opsets, ir_version=m.ir_version,
                              producer_name=m.producer_name, producer_version=m.producer_version,
                              domain=m.domain, model_version=m.model_version, doc_string=m.doc_string)
    helper.set_model_props(proto, m.metadata_props)
    return proto


def infer_model_types(m: Model) -> None:
    """Re-run ONNX type/shape inference over the IR (after a rewrite) and store what it finds on the Values."""
    inferred = infer_types(to_onnx(m, structure_only=True))
    types = {vi.name: from_type_proto(vi.type) for vi in inferred.graph.value_info}
    for node in m.graph.nodes:
        for v in node.outputs:
            if v.name in types and types[v.name] is not None:
                v.type = types[v.name]
    complete_types(m.graph, m.opset_imports)
