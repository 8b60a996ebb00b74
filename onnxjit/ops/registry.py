"""The op registry of the CPU provider: (domain, op_type) -> builders by since-version.

A builder takes an IR node and returns a kernel `fn(*inputs) -> tuple of outputs`, with the node's attributes
already turned into static arguments, or None when it cannot run this node (say an unsupported dtype); the
node then goes to the next provider. The builder registered with the newest `since` <= the node's opset wins.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType

Kernel = Callable[..., Sequence[Any]]
Builder = Callable[[Node], "Kernel | None"]

OPS: dict[tuple[str, str], dict[int, Builder]] = {}


def register_op(op_type: str, since: int = 1, domain: str = "") -> Callable[[Builder], Builder]:
    def deco(build: Builder) -> Builder:
        versions = OPS.setdefault((domain, op_type), {})
        if since in versions:
            raise ValueError(f"op {domain or 'ai.onnx'}::{op_type} since {since} registered twice")
        versions[since] = build
        return build
    return deco


# Op modules imported when a node first needs one of their ops, not with onnxjit: their kernels and references
# serve few models and cost 60 ms of `import onnxjit`. Keys: (domain, op type), or (domain, None) for all of a
# domain's ops; tests/test_ops_quantize.py checks the table against what the modules register.
QUANTIZE_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
                "ConvInteger", "QLinearConv")
LAZY_MODULES: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("com.microsoft", None): ("onnxjit.ops.microsoft", "onnxjit.ops.quantize"),
    ("", "SimplifiedLayerNormalization"): ("onnxjit.ops.microsoft",),
    **{("", op): ("onnxjit.ops.quantize",) for op in QUANTIZE_OPS},
}


def _import_lazy(domain: str, op_type: str) -> bool:
    """Import the modules LAZY_MODULES names for this op; whether there were any."""
    modules = LAZY_MODULES.get((domain, op_type)) or LAZY_MODULES.get((domain, None))
    if not modules:
        return False
    import importlib
    for m in modules:
        importlib.import_module(m)
    return True


def builder_for(node: Node) -> Builder | None:
    versions = OPS.get((node.domain, node.op_type))
    if not versions and _import_lazy(node.domain, node.op_type):
        versions = OPS.get((node.domain, node.op_type))
    if not versions:
        return None
    since = max((v for v in versions if v <= node.opset), default=None)
    return None if since is None else versions[since]


# --- chains run as one kernel --------------------------------------------------------------------------------
# A chain builder takes the nodes of a chain (each node's input 0 an output of the node before it, read by nothing
# else and not a graph output) and returns a kernel computing them all in one step, or None. The kernel takes the
# first node's inputs, then each later node's inputs after the first, and returns the outputs of every node but
# the values linking them, in node order (Softmax -> LayerNormalization in one pass over memory; a Scaler, a
# LinearClassifier and a Normalizer as one kernel over each block of rows).
ChainBuilder = Callable[..., "Kernel | None"]
CHAINS: dict[tuple[tuple[str, str], ...], ChainBuilder] = {}
CHAIN_ENDS: set[tuple[str, str]] = set()  # the (domain, op_type) some chain ends with


def register_chain(*op_types: str | tuple[str, str], domain: str = "") -> Callable[[ChainBuilder], ChainBuilder]:
    """Register a chain builder for nodes of `op_types` in that order, each of `domain` unless given as (domain,
    op_type) (any opsets; the builder checks them)."""
    key = tuple(op if isinstance(op, tuple) else (domain, op) for op in op_types)

    def deco(build: ChainBuilder) -> ChainBuilder:
        CHAINS[key] = build
        CHAIN_ENDS.add(key[-1])
        return build
    return deco


def chain_builder_for(nodes: list[Node]) -> ChainBuilder | None:
    return CHAINS.get(tuple((n.domain, n.op_type) for n in nodes))


# A Concat builder for chains takes a Concat node and the chains computing its inputs (each a chain of the
# registered op types, as register_chain joins them, whose output the Concat alone reads) and returns a kernel
# computing the Concat's output in one step, or None. The kernel takes the chains' inputs, chain after chain
# (a OneHotEncoder per categorical column, written straight into the concatenated output).
CONCATS_OF: dict[tuple[tuple[str, str], ...], Callable[..., "Kernel | None"]] = {}


def register_concat_of(*op_types: str | tuple[str, str], domain: str = "") -> Callable:
    """Register a Concat builder for chains of `op_types` (as register_chain names them)."""
    key = tuple(op if isinstance(op, tuple) else (domain, op) for op in op_types)

    def deco(build):
        CONCATS_OF[key] = build
        return build
    return deco


# --- helpers builders use ------------------------------------------------------------------------------------
def attr(node: Node, name: str, default: Any = None) -> Any:
    a = node.attributes.get(name)
    if a is None or a.ref_attr_name:
        return default
    v = a.value
    return v.decode() if isinstance(v, bytes) else v


def input_tensor_types(node: Node) -> list[TensorType | None]:
    """The input TensorTypes (None for an absent input or an unknown/non-tensor type)."""
    return [v.type if v is not None and isinstance(v.type, TensorType) else None for v in node.inputs]


def all_of_dtype(node: Node, allowed: frozenset, count: int | None = None) -> TensorType | None:
    """The common type of the node's first `count` inputs when each is a known tensor of one allowed dtype."""
    types = input_tensor_types(node)[:count] if count is not None else input_tensor_types(node)
    if not types or any(t is None for t in types):
        return None
    elems = {t.elem_type for t in types}
    if len(elems) != 1 or next(iter(elems)) not in allowed:
        return None
    return types[0]
