"""The graph IR: Graph, Node, Value, and conversion from and to ONNX."""
from onnxjit.ir.graph import Attr, Graph, Model, Node, Value  # noqa: F401
from onnxjit.ir.serde import from_onnx, to_onnx  # noqa: F401
