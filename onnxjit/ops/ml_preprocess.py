"""ai.onnx.ml preprocessing on the CPU provider: Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor,
FeatureVectorizer (opset 1, the only one).

Scaler, Normalizer, Imputer and Binarizer are one pass each (onnxjit.kernels.ml_preprocess), spread over rows on
onnxjit's threads when large; ArrayFeatureExtractor and FeatureVectorizer are copies that numpy's indexing and
slicing already do in one pass (strings too). Semantics are onnxruntime 1.32's (scaler.cc, normalizer.cc,
binarizer.cc, imputer.cc, array_feature_extractor.cc, feature_vectorizer.cc):

  - Scaler: (x - offset) * scale per column (offset and scale of length 1 or the input's dim 1) computed in
    double for double input and in float32 otherwise (integers converted first), output float32;
  - Normalizer: per row of a rank-1 or rank-2 input, MAX divides by the largest value, L1 by the sum of
    magnitudes, L2 gives sign(x) sqrt(x^2 / sum x^2); a row whose norm is 0 is copied; output float32;
  - Binarizer: 1 where x > threshold else 0, in x's type; NaN is an error;
  - Imputer: values equal to the replaced value (NaN matching NaN) become the imputed value of their column, or
    the first imputed value when there is not one per column; float inputs use the float attributes, integer
    inputs the int64 ones;
  - ArrayFeatureExtractor: the given indices of the last axis (a rank-1 input gives [1, k]);
  - FeatureVectorizer: the inputs' rows side by side, each cut or zero-padded to its inputdimensions entry; every
    input must have input 0's batch size (onnxruntime 1.32 checks this; the spec does not say).

The spec's input types are all accepted where onnxruntime registers fewer (Binarizer and Imputer: float only, or
float and int64): the others follow the same rules. Wrong input types, ranks or widths raise
onnxjit.InvalidArgument naming the node, malformed attributes onnxjit.Fail at session creation.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from onnxjit.errors import InvalidArgument
from onnxjit.kernels import ml_preprocess as k
from onnxjit.ops.ml_common import (DOMAIN, NUMERIC, Attrs, bad_input, checked_tensor, declare_outputs, describe,
                                   input_type)
from onnxjit.ops.nn import ro
from onnxjit.ops.registry import register_op
from onnxjit.session.native_plan import NATIVE_GRAIN, In, NativeCall, Out
from onnxjit.worker_pool import PARALLEL_GRAIN, CallSite, CallSites

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_STRING = np.dtype(object)


def _per_column(node, values: np.ndarray, width: int, what: str) -> np.ndarray:
    if values.size == width:
        return values
    if values.size == 1:
        return np.full(width, values[0], values.dtype)
    raise InvalidArgument(f"{node.label}: {what} must have 1 value or one per column ({width}), has {values.size}")


def _rows_2d(x: np.ndarray) -> np.ndarray:
    """x as (rows, dim 1) with the column index cycling fastest, as onnxruntime indexes `i % stride` with stride
    the input's dim 1 (its dim 0 when rank 1)."""
    if x.ndim == 2:
        return x
    stride = x.shape[0] if x.ndim == 1 else x.shape[1]
    return x.reshape(-1, stride) if stride else x.reshape(0, 0)


def _same_type_output(node):
    t = input_type(node)
    declare_outputs(node, getattr(t, "elem_type", None))


# --- Scaler ----------------------------------------------------------------------------------------------------
def scaler_attributes(node) -> tuple[np.ndarray, np.ndarray]:
    """A Scaler's (offset, scale), checked (Fail naming the node)."""
    a = Attrs(node)
    scale, offset = a.floats("scale"), a.floats("offset")
    if scale.size == 0:
        a.fail("scale is required")
    if scale.size != offset.size:
        a.fail(f"scale ({scale.size} values) and offset ({offset.size}) must have the same size")
    return offset, scale


def scaler_columns(node, offset, scale, width: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """offset and scale per column of a `width`-wide input, in dtype, read-only (InvalidArgument when neither
    one value nor one per column)."""
    return (ro(_per_column(node, offset, width, "offset").astype(dtype)),
            ro(_per_column(node, scale, width, "scale").astype(dtype)))


@register_op("Scaler", since=1, domain=DOMAIN)
def build_scaler(node):
    offset, scale = scaler_attributes(node)
    declare_outputs(node, T.FLOAT)
    # (width, dtype code) -> offset and scale per column in that dtype, and the kernel's CallSite for that dtype
    # (its arguments' types); keyed by the dtype's one-letter code: hashing a dtype costs 0.3-0.6 us
    cache = {}

    def constants(width, dtype):
        key = (width, dtype.char)
        found = cache.get(key)
        if found is None:
            found = cache[key] = (*scaler_columns(node, offset, scale, width, dtype), CallSite(k.scale_rows))
        return found

    def run(x):
        x = checked_tensor(node, x, NUMERIC)
        if x.ndim == 0:
            bad_input(node, 0, "a tensor of rank >= 1", describe(x))
        if x.dtype != _F64 and x.dtype != _F32:
            x = x.astype(np.float32)  # integers are converted to float before the arithmetic
        x2 = ro(_rows_2d(x))
        off, sc, site = constants(x2.shape[1], x.dtype)
        out = np.empty(x2.shape, np.float32)
        site.run((x2, off, sc, out), x2.shape[0], out.size * 2)
        return (out if x.ndim == 2 else out.reshape(x.shape),)

    def native(x):
        if type(x) is not np.ndarray or (x.dtype != _F64 and x.dtype != _F32) or x.ndim == 0 \
                or not x.flags.c_contiguous or not 0 < x.size * 2 < NATIVE_GRAIN:
            return None
        rows, width = _rows_2d(x).shape
        off, sc, _ = constants(width, x.dtype)
        return NativeCall(k.scale_rows, [In(0, (rows, width)), off, sc, Out(0)], rows, [((rows, width), _F32)],
                          [(0, x.shape)], parallel=rows > 1 and x.size * 2 >= PARALLEL_GRAIN)
    run.native = native
    return run


# --- Normalizer ------------------------------------------------------------------------------------------------
def normalizer_code(node) -> int:
    """The Normalizer's norm as normalize_rows takes it (MAX, L1, L2), its output typed float."""
    a = Attrs(node)
    name = a.get("norm", "MAX")
    if name not in k.NORMS:
        a.fail(f"unknown norm {name!r} (expected MAX, L1 or L2)")
    declare_outputs(node, T.FLOAT)
    return k.NORMS[name]


@register_op("Normalizer", since=1, domain=DOMAIN)
def build_normalizer(node):
    norm = normalizer_code(node)
    sites = CallSites(k.normalize_rows)  # by x's dtype code

    def run(x):
        x = checked_tensor(node, x, NUMERIC)
        if x.ndim not in (1, 2):
            bad_input(node, 0, "of rank 1 or 2", describe(x))
        x2 = ro(x.reshape(1, -1) if x.ndim == 1 else x)
        out = np.empty(x2.shape, np.float32)
        sites[x.dtype.char].run((x2, norm, out), x2.shape[0], out.size * 4)
        return (out.reshape(x.shape),)
    return run


# --- Binarizer -------------------------------------------------------------------------------------------------
@register_op("Binarizer", since=1, domain=DOMAIN)
def build_binarizer(node):
    threshold = float(Attrs(node).get("threshold", 0.0))
    _same_type_output(node)

    def run(x):
        x = checked_tensor(node, x, NUMERIC)
        if x.dtype.kind == "i":  # compared as float, as C++ converts an integer against a float threshold
            return ((x.astype(np.float32) > np.float32(threshold)).astype(x.dtype),)
        out = np.empty(x.shape, x.dtype)
        nan_at = k.binarize(ro(x.reshape(-1)), x.dtype.type(np.float32(threshold)), out.reshape(-1))
        if nan_at >= 0:
            raise InvalidArgument(f"{node.label}: input 0 has NaN at flat index {nan_at}; Binarizer takes no NaN")
        return (out,)
    return run


# --- Imputer ---------------------------------------------------------------------------------------------------
@register_op("Imputer", since=1, domain=DOMAIN)
def build_imputer(node):
    a = Attrs(node)
    floats, ints = a.floats("imputed_value_floats"), a.ints("imputed_value_int64s")
    if (floats.size == 0) == (ints.size == 0):
        a.fail("exactly one of imputed_value_floats and imputed_value_int64s must be given")
    replaced_f = np.float32(a.get("replaced_value_float", 0.0))
    replaced_i = int(a.get("replaced_value_int64", 0))
    _same_type_output(node)
    sites = CallSites(k.impute_rows)  # by x's dtype code

    def run(x):
        x = checked_tensor(node, x, NUMERIC)
        if x.ndim == 0:
            bad_input(node, 0, "a tensor of rank >= 1", describe(x))
        is_float = x.dtype.kind == "f"
        values = floats if is_float else ints
        if values.size == 0:
            raise InvalidArgument(f"{node.label}: input 0 is {describe(x)} but only imputed_value_"
                                  f"{'int64s' if is_float else 'floats'} are given (imputed_value_"
                                  f"{'floats' if is_float else 'int64s'} needed)")
        x2 = ro(_rows_2d(x))
        width = x2.shape[1]
        per_col = values if values.size == width else np.full(width, values[0], values.dtype)
        replaced = x.dtype.type(replaced_f if is_float else replaced_i)
        replace_nan = bool(is_float and np.isnan(replaced_f))
        out = np.empty(x2.shape, x.dtype)
        sites[x.dtype.char].run((x2, replaced, replace_nan, ro(per_col.astype(x.dtype)), out), x2.shape[0],
                           out.size * 2)
        return (out.reshape(x.shape),)
    return run


# --- ArrayFeatureExtractor -------------------------------------------------------------------------------------
_AFE_TYPES = NUMERIC | {_STRING}
_INDEX_TYPES = frozenset({np.dtype(np.int64)})


@register_op("ArrayFeatureExtractor", since=1, domain=DOMAIN)
def build_array_feature_extractor(node):
    _same_type_output(node)

    def run(x, indices):
        x = checked_tensor(node, x, _AFE_TYPES)
        indices = checked_tensor(node, indices, _INDEX_TYPES, i=1)
        if x.ndim == 0:
            bad_input(node, 0, "a tensor of rank >= 1", describe(x))
        idx = indices.reshape(-1)
        width = x.shape[-1]
        if idx.size == 0:
            bad_input(node, 1, "at least one index", "none")
        bad = (idx < 0) | (idx >= width)
        if bad.any():
            i = int(np.argmax(bad))
            bad_input(node, 1, f"indices in [0, {width}) (the size of input 0's last axis)",
                      f"Y[{i}] = {int(idx[i])}")
        y = x[..., idx]
        return (y.reshape(1, -1) if x.ndim == 1 else y,)
    return run


# --- FeatureVectorizer -----------------------------------------------------------------------------------------
@register_op("FeatureVectorizer", since=1, domain=DOMAIN)
def build_feature_vectorizer(node):
    dims = Attrs(node).ints("inputdimensions")
    if dims.size != len(node.inputs):
        Attrs(node).fail(f"inputdimensions has {dims.size} entries for {len(node.inputs)} inputs")
    offsets = np.concatenate([[0], np.cumsum(dims)]).astype(np.int64)
    total = int(offsets[-1])
    declare_outputs(node, T.FLOAT)

    def run(*xs):
        xs = [checked_tensor(node, x, NUMERIC, i=i) for i, x in enumerate(xs)]
        if any(x.ndim == 0 for x in xs):
            i = next(i for i, x in enumerate(xs) if x.ndim == 0)
            bad_input(node, i, "a tensor of rank >= 1", describe(xs[i]))
        n = 1 if xs[0].ndim == 1 else xs[0].shape[0]
        out = np.zeros((n, total), np.float32)
        for i, x in enumerate(xs):
            rows = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
            if rows.shape[0] != n:  # onnxruntime 1.32 requires one batch size (the spec does not say)
                bad_input(node, i, f"of {n} rows (input 0's batch size)", describe(x))
            width = min(rows.shape[1], int(dims[i]))
            out[:rows.shape[0], offsets[i]:offsets[i] + width] = rows[:, :width]
        return (out,)
    return run
