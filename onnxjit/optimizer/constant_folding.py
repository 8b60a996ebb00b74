"""Constant folding (basic level): nodes whose inputs are all constants become initializers.

Constant nodes (every attribute form) turn into initializers; any other node whose inputs are all constants
(`const_value`: initializers no feed can override) is evaluated once with the fallback provider's reference
implementation (onnx.reference plus onnxjit's fixes), its outputs becoming initializers under the same names, so
graph outputs keep their names (the executor returns initializers as outputs). Shape and Size of values whose
shapes are static fold too, so the Shape->Gather->Unsqueeze->Concat chains exporters write in front of a Reshape
fold when shapes are static.

Never folded: random ops (each run draws anew), nodes with subgraphs, domains other than ai.onnx and ai.onnx.ml,
outputs that are not tensors, and outputs above both MAX_FOLDED_ELEMENTS and every constant input's size.
DequantizeLinear of a constant folds: onnxruntime keeps it for its QDQ fusions, which onnxjit does not have, so
folding only saves the per-run work.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from onnxjit.ir.graph import Graph, Node, Value
from onnxjit.ir.types import TensorType, elem_type_of
from onnxjit.optimizer import BASIC, PassContext, graph_pass
from onnxjit.optimizer.pattern import attr_value, const_value, static_shape, tensor_type

log = logging.getLogger("onnxjit")

# A folded value stays resident for the session's life (and in a saved optimized model, which protobuf caps at
# 2 GiB), while computed at run time it lives only until its last reader. Past 16M elements (64 MiB of float32)
# that costs more than it saves: ConstantOfShape/Expand/Tile/Range of small constants stay computed. An output no
# larger than a constant it reads folds whatever its size (a tied 50257x768 embedding's Transpose for the LM head
# was recomputed at every run, 0.4-0.7 s of a GPT-2 step): it costs no more than what is resident already.
MAX_FOLDED_ELEMENTS = 1 << 24

FOLDABLE_DOMAINS = frozenset({"", "ai.onnx.ml"})
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                              "Multinomial", "Bernoulli", "Dropout"})  # Dropout: random in training mode
# ops whose output can be far larger than their inputs, in ways the input shapes alone do not tell
GROWING = frozenset({"Resize", "Upsample", "Pad", "OneHot", "MaxUnpool", "Col2Im", "ConvTranspose",
                     "CenterCropPad", "Einsum"})


def _constant_node_value(node: Node) -> np.ndarray | None:
    from onnxjit.ops.constant import constant_value
    try:
        return constant_value(node)
    except Exception:  # noqa: BLE001 - a malformed Constant stays for the runtime to report
        return None


def _static_shape_value(node: Node) -> np.ndarray | None:
    """Shape's or Size's output when its input's shape is static."""
    shape = static_shape(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
    if shape is None:
        return None
    if node.op_type == "Size":
        return np.array(math.prod(shape), dtype=np.int64)
    start, end = attr_value(node, "start", 0), attr_value(node, "end", None)
    return np.array(shape[start:end], dtype=np.int64)  # Python slicing clamps as Shape-15's start/end do


def _elements(shape) -> int:
    return math.prod(int(d) for d in shape)


def _estimated_elements(node: Node, args: list[np.ndarray | None]) -> int | None:
    """An estimate of the largest output's element count, before evaluating (None: no estimate)."""
    shapes = [static_shape(v) for v in node.outputs if v.name]
    if shapes and all(s is not None for s in shapes):
        return max(_elements(s) for s in shapes)
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            return _elements(args[0].reshape(-1))
        if op == "Expand":
            return _elements(np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1].reshape(-1))))
        if op == "Tile":
            return _elements(np.array(args[0].shape, dtype=np.int64) * args[1].reshape(-1))
        if op == "Range":
            start, limit, delta = (float(a.reshape(-1)[0]) for a in args[:3])
            return max(math.ceil((limit - start) / delta), 0)
        if op in GROWING:
            return None
        # elementwise ops broadcast their inputs (Add of [N,1] and [1,N] is N*N); others have no larger output
        # than this bound in practice, and their result is checked after evaluation
        return _elements(np.broadcast_shapes(*(a.shape for a in args if a is not None)))
    except Exception:  # noqa: BLE001 - shapes that do not broadcast: the bound is checked after evaluating
        return 0 if op not in ("ConstantOfShape", "Expand", "Tile", "Range") else None


def _evaluate(node: Node, args: list[np.ndarray | None], ctx: PassContext) -> list[Any] | None:
    """The node's outputs computed by the fallback provider's reference implementation, None when it fails."""
    from onnx.reference import ReferenceEvaluator

    from onnxjit.providers.fallback import reference_op_class, versioned_node_proto
    cls = reference_op_class(node)
    if cls is None:
        return None
    run_params = {"log": lambda *a: None, "opsets": dict(ctx.model.opset_imports), "verbose": 0, "new_ops": {},
                  "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}
    try:
        with np.errstate(all="ignore"):
            outs = cls(versioned_node_proto(node), run_params).run(*args)
    except Exception as e:  # noqa: BLE001 - left for the runtime, which reports the error with the node
        log.debug("constant folding: %s not folded: %s: %s", node.label, type(e).__name__, e)
        return None
    return [np.asarray(v) if isinstance(v, np.generic) else v for v in outs]


def _fits(v: Value, array: Any, limit: int) -> bool:
    """Whether `array` can stand for `v`: a tensor of v's element type and (where known) static shape, of at
    most `limit` elements."""
    if not isinstance(array, np.ndarray) or array.size > limit:
        return False
    t = tensor_type(v)
    if v.type is not None and t is None:  # a sequence, map or optional
        return False
    try:
        elem = elem_type_of(array.dtype)
    except Exception:  # noqa: BLE001
        return False
    shape = static_shape(v)
    return (t is None or t.elem_type == elem) and (shape is None or shape == array.shape)


def _matmul_weight_view(v, array: np.ndarray) -> bool:
    """Whether the folded `array` (not C-contiguous) may stay a view: a transposed 2-D weight that only MatMuls read
    as their B, which pack it, or read it as B's transpose, once (ops/linalg.py). A tied embedding's Transpose into
    GPT-2's output MatMul was a 154 MB copy (0.4-1.8 s of its session creation, with the new memory)."""
    return (array.ndim == 2 and array.flags.f_contiguous and bool(v.uses)
            and all(n.op_type == "MatMul" and n.domain == "" and i == 1 for n, i in v.uses))


def _to_initializers(graph: Graph, node: Node, values: list[np.ndarray]) -> None:
    """Replace `node` by initializers named as its outputs."""
    output_names = {v.name for v in graph.outputs}
    graph.remove(node)
    for v, array in zip(node.outputs, values):
        if not v.name:
            continue
        v.producer = None
        if not array.flags.c_contiguous and not _matmul_weight_view(v, array):
            array = array.copy(order="C")  # kernels take initializers C-contiguous, as loaded ones are
        v.const = array
        if v.name in output_names:
            array.flags.writeable = False  # returned to callers on every run: no one may write into it
        if v.name not in output_names or v.type is None:  # a graph output keeps its declared type
            v.type = TensorType(elem_type_of(array.dtype), tuple(array.shape))
        graph.initializers[v.name] = v


def _folded(node: Node, graph: Graph, ctx: PassContext) -> list[np.ndarray] | None:
    if node.domain == "" and node.op_type == "Constant":
        value = _constant_node_value(node)
        return None if value is None else [value]
    if node.domain == "" and node.op_type in ("Shape", "Size"):
        value = _static_shape_value(node)
        if value is not None:
            return [value]
    if (node.domain not in FOLDABLE_DOMAINS or node.op_type in NONDETERMINISTIC
            or any(True for _ in node.subgraphs())):
        return None
    args = [None if v is None else const_value(v, graph) for v in node.inputs]
    if any(a is None for v, a in zip(node.inputs, args) if v is not None):
        return None
    # a node that did not fold would not fold in the next round either: evaluate it once per optimize()
    unfoldable = ctx.__dict__.setdefault("unfoldable_nodes", set())
    estimate = _estimated_elements(node, args)
    limit = max([MAX_FOLDED_ELEMENTS] + [a.size for a in args if isinstance(a, np.ndarray)])
    if node in unfoldable or estimate is None or estimate > limit:
        return None
    while args and args[-1] is None:
        args.pop()
    outs = _evaluate(node, args, ctx)
    if (outs is None or len(outs) < len(node.outputs)
            or not all(_fits(v, a, limit) for v, a in zip(node.outputs, outs) if v.name)):
        unfoldable.add(node)
        return None
    return outs[:len(node.outputs)]


@graph_pass(BASIC)
def constant_folding(graph: Graph, ctx: PassContext) -> int:
    folded = 0
    for node in list(graph.nodes):  # in topological order, so a chain of constant nodes folds in one sweep
        values = _folded(node, graph, ctx)
        if values is not None:
            _to_initializers(graph, node, values)
            folded += 1
    return folded
