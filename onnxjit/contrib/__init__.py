"""The `com.onnxjit` operator domain: the fused ops the optimizer writes into graphs.

ONNX has no operator for some fusions (a Conv with its activation, a residual add with its LayerNormalization),
and models at older opsets cannot use operators that newer ONNX has (Gelu-20, LayerNormalization-17,
Attention-23). The optimizer then writes a node of this domain, opset version 1; a model saved with
`SessionOptions.optimized_model_filepath` keeps them and onnxjit loads them back. The CPU provider runs them
with native kernels (registered in `onnxjit.ops` with domain `com.onnxjit`); the fallback provider runs the
reference implementations registered here, which define what each op computes.

Each op is documented in the module that defines its reference implementation:
  normalization: LayerNormalization, SkipLayerNormalization
  activation:    Gelu
  attention:     Attention
  fused:         FusedConv, FusedGemm, FusedMatMul
  layout:        NhwcConv
"""
from __future__ import annotations

import importlib

from onnx.reference.op_run import OpRun

DOMAIN = "com.onnxjit"
VERSION = 1

CONTRIB_MODULES = ("normalization", "activation", "attention", "fused", "layout")


class ReferenceOps:
    """The reference implementations of one operator domain's ops (numpy OpRun subclasses named as their ops), each
    registered by `register` in one of `modules` (of `package`), which `load` imports on first use."""

    def __init__(self, domain: str, package: str, modules: tuple[str, ...]):
        self.domain, self.package, self.modules = domain, package, modules
        self.ops: dict[str, type[OpRun]] = {}

    def register(self, cls: type[OpRun]) -> type[OpRun]:
        cls.op_domain = self.domain
        if cls.__name__ in self.ops:
            raise ValueError(f"{self.domain}::{cls.__name__} registered twice")
        self.ops[cls.__name__] = cls
        return cls

    def load(self) -> dict[str, type[OpRun]]:
        for m in self.modules:
            importlib.import_module(f"{self.package}.{m}")
        return self.ops


_REFERENCES = ReferenceOps(DOMAIN, __name__, CONTRIB_MODULES)
REFERENCE_OPS = _REFERENCES.ops
reference_op = _REFERENCES.register  # an OpRun subclass named as its op: com.onnxjit::<name>'s reference
load_reference_ops = _REFERENCES.load
