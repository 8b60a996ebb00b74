"""Op definitions for the CPU provider, one module per op family; importing registers them.

Elementwise ops and activations are not here: the fuser renders them (onnxjit/fuser/exprs.py); elementwise.py
holds the few over element types the fuser does not compute in (strings, float8). The quantization ops
(quantize.py) and onnxruntime's com.microsoft ops (microsoft.py) are imported when a model first needs them
(registry.LAZY_MODULES)."""
from onnxjit.ops import (attention, cast, constant, conv_transpose, elementwise, indexing, linalg,  # noqa: F401
                         loss, movement, nn, normalization, reduce, resize, rnn, shape)
from onnxjit.ops import tree_ensemble  # noqa: F401
from onnxjit.ops import ml_linear, ml_preprocess, ml_encoders  # noqa: F401
