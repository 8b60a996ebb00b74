"""One BERT encoder layer and one GPT-2 decoder layer as ONNX models, spelled as torch exports them before the
fused operators existed (decomposed LayerNorm and GELU, attention from MatMul/Softmax), with random weights as
initializers. The optimizer's transformer fusions turn them back into LayerNormalization/SkipLayerNormalization,
Gelu and Attention; tests and benchmarks use them.

Inputs have named dims "batch" and "seq" (or the given sizes when dynamic=False); `example_feeds` makes inputs.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8


class GraphBuilder:
    """Nodes and initializers of one graph, with the opset-dependent spellings (Reduce axes, Unsqueeze axes,
    Split sizes: attributes before, inputs after)."""

    def __init__(self, opset: int, seed: int, dtype=np.float32):
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def const(self, base: str, value) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def scalar(self, value: float) -> str:
        return self.const("c", np.array(value, self.dtype))

    def weight(self, base: str, shape, std: float | None = None, mean: float = 0.0) -> str:
        std = 1 / math.sqrt(shape[0]) if std is None else std
        return self.const(base, (mean + std * self.rng.standard_normal(shape)).astype(self.dtype))

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def reduce_mean_last(self, x: str) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const("axes", np.array([-1], np.int64)), keepdims=1)
        return self.op("ReduceMean", x, axes=[-1], keepdims=1)

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.const("axes", np.array(axes, np.int64)))
        return self.op("Unsqueeze", x, axes=axes)

    def split3(self, x: str, size: int) -> list[str]:
        if self.opset >= 13:
            return self.op("Split", x, self.const("split", np.array([size] * 3, np.int64)), n_out=3, axis=-1)
        return self.op("Split", x, n_out=3, axis=-1, split=[size] * 3)

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        y = self.op("MatMul", x, self.weight("w", (n_in, n_out)))
        return self.op("Add", y, self.weight("b", (n_out,), std=0.1))

    def layer_norm(self, x: str, hidden: int, form: str) -> str:
        """The decomposition: form 'pow-div', 'mul-div' or 'pow-reciprocal' (variance and normalize spellings)."""
        mean = self.reduce_mean_last(x)
        d = self.op("Sub", x, mean)
        sq = self.op("Mul", d, d) if form.startswith("mul") else self.op("Pow", d, self.scalar(2.0))
        var = self.reduce_mean_last(sq)
        std = self.op("Sqrt", self.op("Add", var, self.scalar(1e-5)))
        norm = self.op("Mul", d, self.op("Reciprocal", std)) if form.endswith("reciprocal") \
            else self.op("Div", d, std)
        y = self.op("Mul", norm, self.weight("gamma", (hidden,), std=0.1, mean=1.0))
        return self.op("Add", y, self.weight("beta", (hidden,), std=0.1))

    def gelu_erf(self, x: str) -> str:
        """x * 0.5 * (1 + erf(x / 1.4142)), torch's order."""
        e = self.op("Erf", self.op("Div", x, self.scalar(1.4142135381698608)))
        return self.op("Mul", self.op("Mul", x, self.scalar(0.5)), self.op("Add", e, self.scalar(1.0)))

    def gelu_tanh(self, x: str) -> str:
        """0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x^3)))."""
        cube = self.op("Pow", x, self.scalar(3.0))
        inner = self.op("Add", x, self.op("Mul", self.scalar(0.044715), cube))
        t = self.op("Tanh", self.op("Mul", self.scalar(math.sqrt(2 / math.pi)), inner))
        return self.op("Mul", self.op("Mul", self.scalar(0.5), x), self.op("Add", self.scalar(1.0), t))

    def heads(self, x: str, heads: int, head_size: int, perm: list[int]) -> str:
        """[B, S, heads * head_size] -> Transpose(perm) of [B, S, heads, head_size]."""
        r = self.op("Reshape", x, self.const("shape", np.array([0, 0, heads, head_size], np.int64)))
        return self.op("Transpose", r, perm=perm)

    def merge_heads(self, x: str, hidden: int) -> str:
        t = self.op("Transpose", x, perm=[0, 2, 1, 3])
        return self.op("Reshape", t, self.const("shape", np.array([0, 0, hidden], np.int64)))

    def model(self, inputs, outputs, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="onnxjit.testing")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def _dims(batch: int, seq: int, dynamic: bool) -> tuple:
    return ("batch", "seq") if dynamic else (batch, seq)


def bert_layer(batch: int = 2, seq: int = 8, hidden: int = 32, heads: int = 4, opset: int = 17, seed: int = 0,
               dynamic: bool = True) -> onnx.ModelProto:
    """A post-LN BERT encoder layer: inputs `input` [batch, seq, hidden] float and `attention_mask`
    [batch, seq] int64 (1 attends, 0 is padding); output `output` [batch, seq, hidden].
    Q/K/V MatMul+Add projections, heads by Reshape/Transpose (K straight to [B, H, D, S]), scores / sqrt(D) +
    (1 - mask) * -10000, Softmax, context, output projection, residual + LayerNorm, FFN (4 * hidden) with
    erf-GELU, residual + LayerNorm (both LayerNorms decomposed)."""
    assert hidden % heads == 0
    b = GraphBuilder(opset, seed)
    d = hidden // heads
    x = "input"
    q = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 1, 3])
    kt = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 3, 1])
    v = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 1, 3])
    mask = b.op("Cast", b.unsqueeze("attention_mask", [1, 2]), to=TensorProto.FLOAT)
    mask = b.op("Mul", b.op("Sub", b.scalar(1.0), mask), b.scalar(-10000.0))
    scores = b.op("Div", b.op("MatMul", q, kt), b.scalar(math.sqrt(d)))
    probs = b.op("Softmax", b.op("Add", scores, mask), axis=3)
    context = b.merge_heads(b.op("MatMul", probs, v), hidden)
    h1 = b.layer_norm(b.op("Add", b.linear(context, hidden, hidden), x), hidden, "pow-div")
    ffn = b.linear(b.gelu_erf(b.linear(h1, hidden, 4 * hidden)), 4 * hidden, hidden)
    out = b.layer_norm(b.op("Add", ffn, h1), hidden, "mul-div")
    b.nodes.append(helper.make_node("Identity", [out], ["output"], name="output"))
    bs = _dims(batch, seq, dynamic)
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [*bs, hidden]),
                    helper.make_tensor_value_info("attention_mask", TensorProto.INT64, list(bs))],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [*bs, hidden])], "bert_layer")


def gpt2_layer(batch: int = 2, seq: int = 8, hidden: int = 32, heads: int = 4, opset: int = 17, seed: int = 0,
               dynamic: bool = True, max_positions: int = 1024) -> onnx.ModelProto:
    """A pre-LN GPT-2 decoder layer: input `input` [batch, seq, hidden] float (seq <= max_positions, GPT-2's 1024 by
    default); output `output` [batch, seq, hidden].
    LayerNorm, fused QKV projection then Split, heads by Reshape/Transpose (K^T by its own Transpose),
    scores * 1/sqrt(D), causal mask as Where(Slice of a lower-triangular bool buffer to [:seq, :seq], scores,
    float32 min), Softmax, context, output projection, residual; LayerNorm, MLP (4 * hidden) with tanh-GELU,
    residual (LayerNorms decomposed)."""
    assert hidden % heads == 0
    b = GraphBuilder(opset, seed)
    d = hidden // heads
    x = "input"
    qkv = b.linear(b.layer_norm(x, hidden, "pow-div"), hidden, 3 * hidden)
    q, k, v = b.split3(qkv, hidden)
    q = b.heads(q, heads, d, [0, 2, 1, 3])
    kt = b.op("Transpose", b.heads(k, heads, d, [0, 2, 1, 3]), perm=[0, 1, 3, 2])
    v = b.heads(v, heads, d, [0, 2, 1, 3])
    scores = b.op("Mul", b.op("MatMul", q, kt), b.scalar(1 / math.sqrt(d)))
    causal = np.tril(np.ones((max_positions, max_positions), bool)).reshape(1, 1, max_positions, max_positions)
    s = b.unsqueeze(b.op("Gather", b.op("Shape", x), b.const("index", np.array(1, np.int64)), axis=0), [0])
    ends = b.op("Concat", s, s, axis=0)
    cond = b.op("Slice", b.const("causal_buffer", causal), b.const("starts", np.array([0, 0], np.int64)), ends,
                b.const("axes", np.array([2, 3], np.int64)))
    scores = b.op("Where", cond, scores, b.scalar(float(np.finfo(np.float32).min)))
    probs = b.op("Softmax", scores, axis=3)
    context = b.merge_heads(b.op("MatMul", probs, v), hidden)
    h1 = b.op("Add", x, b.linear(context, hidden, hidden))
    mlp = b.linear(b.gelu_tanh(b.linear(b.layer_norm(h1, hidden, "pow-reciprocal"), hidden, 4 * hidden)),
                   4 * hidden, hidden)
    out = b.op("Add", h1, mlp)
    b.nodes.append(helper.make_node("Identity", [out], ["output"], name="output"))
    bs = _dims(batch, seq, dynamic)
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [*bs, hidden])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [*bs, hidden])], "gpt2_layer")


def example_feeds(model: onnx.ModelProto, batch: int = 2, seq: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a layer of this module: normal floats; an attention mask with the last positions of
    each row after the first padded."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        shape = [batch if (d.dim_param == "batch" or (not d.dim_param and i == 0)) else
                 seq if (d.dim_param == "seq" or (not d.dim_param and i == 1)) else d.dim_value
                 for i, d in enumerate(vi.type.tensor_type.shape.dim)]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            mask = np.ones(shape, np.int64)
            for row in range(1, shape[0]):
                mask[row, max(1, shape[1] - row):] = 0
            feeds[vi.name] = mask
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds
