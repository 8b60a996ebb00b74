"""onnxruntime's `com.microsoft` operator domain: reference implementations (numpy) of the contrib ops that
onnxruntime's optimizer and quantizer write and real exports contain, with the semantics onnxruntime documents
(docs/ContribOperators.md in the onnxruntime repository), checked against onnxruntime's own output in the tests.

The fallback provider runs these (so a model holding any of them loads and runs); the CPU provider runs the ones
it has native kernels for (registered in `onnxjit.ops` with domain `com.microsoft`). Each module documents its
ops; MODULES lists them.
"""
from __future__ import annotations

from onnx import TensorProto as T
from onnx.reference.op_run import OpRun

from onnxjit.contrib import ReferenceOps
from onnxjit.ir.types import TensorType

DOMAIN = "com.microsoft"

MODULES: tuple[str, ...] = ("activation", "normalization", "fused", "attention", "rnn", "nbits", "quantized")

_REFERENCES = ReferenceOps(DOMAIN, __name__, MODULES)
REFERENCE_OPS = _REFERENCES.ops
load_reference_ops = _REFERENCES.load


def reference_op(cls: type[OpRun]) -> type[OpRun]:
    """Register an OpRun subclass (named as the op) as the reference implementation of com.microsoft::<name>
    (contrib ops have one version, 1)."""
    # not the ai.onnx op of the same name (Gelu, Attention, RotaryEmbedding): onnx.reference would fill in that
    # schema's attributes
    cls.op_schema = None
    return _REFERENCES.register(cls)


# onnxruntime's own ops in the ai.onnx domain at opsets where ONNX has none (its optimizer writes them there): the
# ONNX version whose definition they follow, or None for an op of this domain's reference (SimplifiedLayerNormalization)
ONNX_DOMAIN_OPS: dict[str, int | None] = {"LayerNormalization": 17, "SimplifiedLayerNormalization": None}

# --- output types ------------------------------------------------------------------------------------------------
# ONNX's shape inference knows no com.microsoft op: their outputs, and everything computed from them, would be
# untyped, and kernels choose by type. Each output's type follows from the inputs': an int is "input i's type"
# (its whole type, shape included, where the output has that input's shape: SAME_SHAPE, else the element type
# alone), a tuple the first of its entries that is present, a name a fixed element type or an attribute's choice.
_FLOAT, _INT32, _STASH = "float", "int32", "stash"
OUTPUT_TYPES: dict[str, tuple] = {
    "Gelu": (0,), "FastGelu": (0,), "BiasGelu": (0,), "QuickGelu": (0,), "BiasAdd": (0,), "BiasSplitGelu": (0,),
    "SkipLayerNormalization": (0, _FLOAT, _FLOAT, 0), "SkipSimplifiedLayerNormalization": (0, _FLOAT, _FLOAT, 0),
    "SimplifiedLayerNormalization": (0, _STASH), "EmbedLayerNormalization": (2, _INT32, 2),
    "FusedMatMul": (0,), "FusedConv": (0,), "NhwcConv": (0,), "RotaryEmbedding": (0,), "Attention": (0, 0),
    "MultiHeadAttention": (0, 0, 0, 0), "GroupQueryAttention": (0, (3, 0), (3, 0), 0),
    "DecoderMaskedMultiHeadAttention": (0, 0, 0, 0), "DynamicQuantizeLSTM": (0, 0, 0), "MatMulNBits": (0,),
    # the quantized ones (quantized.py): the quantized input's type, QLinearConcat's Y_zero_point's, QGemm's
    # y_zero_point's when it has one (else float), the float scale's for the products dequantized to float
    "QLinearAdd": (0,), "QLinearMul": (0,), "QLinearSigmoid": (0,), "QLinearLeakyRelu": (0,),
    "QLinearGlobalAveragePool": (0,), "QLinearAveragePool": (0,), "QLinearSoftmax": (0,), "QLinearConcat": (1,),
    "QGemm": ((8, _FLOAT),),
    "DynamicQuantizeMatMul": (0,), "MatMulIntegerToFloat": (2,),
}
SAME_SHAPE = {(op, 0) for op in ("Gelu", "QuickGelu", "FastGelu", "BiasGelu", "BiasAdd", "RotaryEmbedding",
                                 "SimplifiedLayerNormalization", "QLinearSigmoid", "QLinearLeakyRelu")} | {
    ("SkipLayerNormalization", 0), ("SkipLayerNormalization", 3)}
_FIXED = {_FLOAT: T.FLOAT, _INT32: T.INT32}


def type_outputs(node) -> None:
    """Give the com.microsoft node's untyped outputs their types from its inputs' (OUTPUT_TYPES)."""
    types = [v.type if v is not None and isinstance(v.type, TensorType) else None for v in node.inputs]
    for i, rule in enumerate(OUTPUT_TYPES.get(node.op_type, ())):
        if i >= len(node.outputs) or node.outputs[i] is None or node.outputs[i].type is not None:
            continue
        for choice in rule if isinstance(rule, tuple) else (rule,):
            if choice == _STASH:
                a = node.attributes.get("stash_type")
                new = TensorType(T.DOUBLE if a is not None and a.value == T.DOUBLE else T.FLOAT)
            elif isinstance(choice, str):
                new = TensorType(_FIXED[choice])
            else:
                src = types[choice] if choice < len(types) else None
                if src is None:
                    continue
                new = src if (node.op_type, i) in SAME_SHAPE else TensorType(src.elem_type)
            node.outputs[i].type = new
            break
