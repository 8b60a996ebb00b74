"""Writes tiny_bert_structure.onnx, the tiny BERT of tests/test_contrib_microsoft.py: a 2-layer BERT (hidden 32, 2
heads, vocabulary 50) spelled as Hugging Face's BertModel, exported by torch's TorchScript exporter (the graph
onnxruntime's transformer optimizer matches), its float weights left out (dims kept): the test draws them. Needs
torch (`pip install -e ".[bench]"`); run from this folder: python make_tiny_bert.py"""
import os

import onnx
from onnx import numpy_helper

HIDDEN, HEADS, SEQ = 32, 2, 8
WEIGHT_MIN_ELEMENTS = 17  # float initializers this large are weights: their data is left out


def _export_tiny_bert(path):
    """A 2-layer BERT (hidden 32, 2 heads, vocabulary 50), spelled as Hugging Face's BertModel, exported by torch's
    TorchScript exporter (the graphs onnxruntime's transformer optimizer matches)."""
    import math
    import warnings

    import torch

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(HIDDEN, eps=1e-12), torch.nn.LayerNorm(HIDDEN, eps=1e-12)
            self.up, self.down = torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.Linear(4 * HIDDEN, HIDDEN)

        def heads(self, x):
            return x.view(x.shape[0], x.shape[1], HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS) + mask
            context = torch.matmul(torch.softmax(scores, -1), v).permute(0, 2, 1, 3).contiguous()
            h = self.ln1(self.o(context.view(context.shape[0], context.shape[1], HIDDEN)) + x)
            return self.ln2(self.down(torch.nn.functional.gelu(self.up(h))) + h)

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.words, self.positions = torch.nn.Embedding(50, HIDDEN), torch.nn.Embedding(16, HIDDEN)
            self.segments = torch.nn.Embedding(2, HIDDEN)
            self.ln = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(2))
            self.register_buffer("position_ids", torch.arange(16).unsqueeze(0))

        def forward(self, input_ids, attention_mask, token_type_ids):
            x = self.words(input_ids) + self.positions(self.position_ids[:, :input_ids.shape[1]])
            x = self.ln(x + self.segments(token_type_ids))
            mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    torch.manual_seed(0)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = (torch.randint(0, 50, (2, SEQ)), torch.ones(2, SEQ, dtype=torch.int64),
               torch.zeros(2, SEQ, dtype=torch.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Bert().eval(), example, str(path), input_names=names, output_names=["last_hidden_state"],
                          opset_version=14, dynamo=False, dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_bert_structure.onnx")
    _export_tiny_bert(path)
    model = onnx.load(path)
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and numpy_helper.to_array(init).size >= WEIGHT_MIN_ELEMENTS:
            init.ClearField("raw_data")
            init.ClearField("float_data")
    for node in model.graph.node:
        node.ClearField("doc_string")
    onnx.save(model, path)
