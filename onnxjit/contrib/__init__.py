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

REFERENCE_OPS: dict[str, type[OpRun]] = {}


def reference_op(cls: type[OpRun]) -> type[OpRun]:
    """Register an OpRun subclass (named as the op) as the reference implementation of com.onnxjit::<name>."""
    cls.op_domain = DOMAIN
    if cls.__name__ in REFERENCE_OPS:
        raise ValueError(f"{DOMAIN}::{cls.__name__} registered twice")
    REFERENCE_OPS[cls.__name__] = cls
    return cls


def load_reference_ops() -> dict[str, type[OpRun]]:
    for m in CONTRIB_MODULES:
        importlib.import_module(f"onnxjit.contrib.{m}")
    return REFERENCE_OPS
