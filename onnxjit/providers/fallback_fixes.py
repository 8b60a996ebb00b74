"""Operators where onnx.reference (1.23) disagrees with onnxruntime; the fallback provider uses these instead.

Each class is an onnx.reference OpRun so it plugs into the same machinery; FIXES maps (domain, op_type) to
{since_version: class or None}, None meaning "the reference implementation is right from this version on".
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.ops import stand_ins


def _batch_norm_inference(x, scale, bias, mean, var, epsilon):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape) + bias.reshape(shape)
    return y.astype(x.dtype)


class BatchNormalizationInference(OpRun):
    """BatchNormalization-7..13 in inference. The reference takes any `momentum` attribute (which exporters always
    write) as training mode and normalizes with batch statistics; onnxruntime uses the running mean and var."""

    op_domain = ""

    def _run(self, x, scale, bias, mean, var, epsilon=None, **_unused):
        return (_batch_norm_inference(x, scale, bias, mean, var, 1e-5 if epsilon is None else epsilon),)


class GlobalMaxPool(OpRun):
    """The reference reduces two axes counted from the wrong end, which breaks 3-D (N, C, L) inputs."""

    op_domain = ""

    def _run(self, x):
        return (x.max(axis=tuple(range(2, x.ndim)), keepdims=True),)


def _coerced_2d(fn):
    """Softmax/LogSoftmax/Hardmax before opset 13 work on the input flattened to 2-D at `axis`; the reference
    only has the per-axis opset-13 form."""

    def _run(self, x, axis=1, **_unused):
        axis = axis + x.ndim if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return (fn(x.reshape(rows, -1)).reshape(x.shape).astype(x.dtype),)
    return _run


def _softmax_rows(x):
    return stand_ins.softmax_rows(x, None, log=False)


def _log_softmax_rows(x):
    return stand_ins.softmax_rows(x, None, log=True)


def _hardmax_rows(x):
    y = np.zeros_like(x)
    if x.size:
        y[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1
    return y


class Softmax2D(OpRun):
    op_domain = ""
    _run = _coerced_2d(_softmax_rows)


class LogSoftmax2D(OpRun):
    op_domain = ""
    _run = _coerced_2d(_log_softmax_rows)


class Hardmax2D(OpRun):
    op_domain = ""
    _run = _coerced_2d(_hardmax_rows)


class Optional(OpRun):
    """The reference wraps the value in a list, which then reads as a one-element sequence; an optional is the
    value itself, or None when empty."""

    op_domain = ""

    def run(self, x=None, **_unused):  # OpRun.run's output check would reject the None of an empty optional
        return (x,)

    _run = run


class Identity(OpRun):
    """Identity of an empty optional is an empty optional; OpRun.run's output check rejects None."""

    op_domain = ""

    def run(self, x=None, **_unused):
        return (x,)

    _run = run


class DictVectorizer(OpRun):
    """The reference returns one 1-D float64 row for a single map; onnxruntime returns a [1, N] row of the map's
    value type."""

    op_domain = "ai.onnx.ml"

    def _run(self, x, int64_vocabulary=None, string_vocabulary=None):
        vocab = list(int64_vocabulary) if int64_vocabulary is not None else [
            s.decode() if isinstance(s, bytes) else s for s in string_vocabulary]
        index = {k: i for i, k in enumerate(vocab)}
        rows = x if isinstance(x, list) else [x]
        values = [np.asarray(v) for row in rows for v in row.values()]
        out = np.zeros((len(rows), len(vocab)), dtype=np.result_type(*values) if values else np.float32)
        for r, row in enumerate(rows):
            for key, v in row.items():
                if key in index:
                    out[r, index[key]] = v
        return (out,)


class Scatter(OpRun):
    """Scatter-9/10 (deprecated since 11): ScatterElements without reduction; the reference has none."""

    op_domain = ""

    def _run(self, data, indices, updates, axis=0):
        axis = axis + data.ndim if axis < 0 else axis
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + data.shape[axis], idx)
        where = list(np.indices(idx.shape, sparse=True))
        where[axis] = idx
        out = data.copy()
        out[tuple(where)] = updates
        return (out,)


def _dequantize_linear_before_19() -> type[OpRun]:
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_19

    class DequantizeLinear_10(DequantizeLinear_19):  # noqa: N801 - onnx.reference reads the opset from the name
        """DequantizeLinear-10 and -13 as -19 computes them for their integer inputs: the reference has no
        version before 19, so neither the fallback provider nor constant folding could run them (a QDQ model's
        weights were dequantized at every run, and its convs packed their weights anew each time)."""

        op_domain = ""

    return DequantizeLinear_10


FIXES: dict[tuple[str, str], dict[int, type[OpRun] | None]] = {
    ("", "BatchNormalization"): {7: BatchNormalizationInference, 14: None},
    ("", "GlobalMaxPool"): {1: GlobalMaxPool},
    ("", "Softmax"): {1: Softmax2D, 13: None},
    ("", "LogSoftmax"): {1: LogSoftmax2D, 13: None},
    ("", "Hardmax"): {1: Hardmax2D, 13: None},
    ("", "Optional"): {15: Optional},
    ("", "Identity"): {1: Identity},
    ("ai.onnx.ml", "DictVectorizer"): {1: DictVectorizer},
    ("", "Scatter"): {9: Scatter},
    ("", "DequantizeLinear"): {10: _dequantize_linear_before_19(), 19: None},
}


def _onnxruntime_onnx_domain_op(op_type: str, opset: int) -> type[OpRun] | None:
    """onnxruntime's own ops in the ai.onnx domain where ONNX has none (contrib.microsoft.ONNX_DOMAIN_OPS):
    LayerNormalization before opset 17 runs as com.onnxjit's LayerNormalization (ONNX 17's), and
    SimplifiedLayerNormalization as com.microsoft's. Loaded when such a node is met (the com.microsoft references
    import scipy.special: 0.2 s of `import onnxjit` otherwise)."""
    from onnxjit.contrib.microsoft import ONNX_DOMAIN_OPS
    if op_type not in ONNX_DOMAIN_OPS:
        return None
    version = ONNX_DOMAIN_OPS[op_type]
    if version is None:
        from onnxjit.contrib.microsoft import load_reference_ops as load_microsoft_ops
        return load_microsoft_ops()[op_type]
    if opset >= version:
        return None
    from onnxjit.contrib import load_reference_ops
    return load_reference_ops()[op_type]


def fixed_op(domain: str, op_type: str, opset: int) -> type[OpRun] | None:
    if domain == "":
        found = _onnxruntime_onnx_domain_op(op_type, opset)
        if found is not None:
            return found
    versions = FIXES.get((domain, op_type))
    if not versions:
        return None
    since = max((v for v in versions if v <= opset), default=None)
    return None if since is None else versions[since]
