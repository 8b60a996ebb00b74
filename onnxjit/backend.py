"""onnx.backend implementation, so onnx's own BackendTest (the spec's conformance suite) runs through onnxjit."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from onnxjit.session.options import SessionOptions
from onnxjit.session.session import InferenceSession, get_available_providers


class OnnxJitRep(BackendRep):
    def __init__(self, session: InferenceSession):
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs) -> tuple:
        if isinstance(inputs, dict):
            feeds = inputs
        elif isinstance(inputs, (list, tuple)):
            feeds = dict(zip(self.input_names, inputs))
        else:
            feeds = {self.input_names[0]: inputs}
        return tuple(self.session.run(None, feeds))


class OnnxJitBackend(Backend):
    """Options: `providers` (list of names) and `sess_options` (a SessionOptions) pass through to the session."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        d = Device(device)
        if d.type == DeviceType.CPU:
            return True
        return d.type == DeviceType.CUDA and "CUDAExecutionProvider" in get_available_providers()

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> OnnxJitRep:
        super().prepare(model, device, **kwargs)
        providers = kwargs.get("providers")
        if providers is None and Device(device).type == DeviceType.CUDA:
            providers = ["CUDAExecutionProvider"]
        so = kwargs.get("sess_options") or SessionOptions()
        return OnnxJitRep(InferenceSession(model, so, providers=providers))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None,
                 **kwargs) -> tuple:
        """Run one node: wrap it in a model whose inputs take the given arrays' types."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, dict(zip(names, arrays)), device, **kwargs)


prepare = OnnxJitBackend.prepare
run_model = OnnxJitBackend.run_model
run_node = OnnxJitBackend.run_node
supports_device = OnnxJitBackend.supports_device
is_compatible = OnnxJitBackend.is_compatible
