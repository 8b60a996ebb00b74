"""Op definitions for the CPU provider, one module per op family; importing registers them.

Elementwise ops and activations are not here: the fuser renders them (onnxjit/fuser/exprs.py)."""
from onnxjit.ops import (attention, cast, constant, indexing, linalg, movement, nn, normalization, reduce,  # noqa: F401
                         shape, strings)
