"""Reductions on the CPU provider: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin.

Attributes (keepdims, noop_with_empty_axes, axis, select_last_index, the `axes` attribute of the older opsets)
are static; the `axes` input of the newer opsets (ReduceSum-13, the others from 18) is read on every call, so a
computed axes tensor works too. Any set of axes becomes a C-contiguous [outer, n, inner] view (a transposed copy
only when the reduced axes are not adjacent once size-1 dims are ignored), reduced by the generic kernels of
`onnxjit.kernels.reduce`: one compiled function per dtype whatever the axes.

Dtypes and values follow onnxruntime's CPU kernels:
  * float16/bfloat16 are computed in float32 and rounded once; float32/float64 accumulate in their own dtype;
  * integer sums, means, norms, products and logs are computed in float64 and saturated to the integer range
    (onnxruntime 1.2x+: no wrap-around; log of a non-positive sum gives the type's minimum); integer
    ReduceLogSumExp is log(count of the max) + max;
  * max/min/argmax/argmin of ints are exact (uint64 through an order-preserving flip to int64), bool max/min
    is any/all;
  * an empty reduced set gives 0 (sum, mean, sumsquare, L1, L2), 1 (prod), -inf / the integer minimum (max,
    logsum, logsumexp), +inf / the integer maximum (min); ArgMax/ArgMin over an empty axis is an error;
  * noop_with_empty_axes with empty axes reduces every element alone: the identity for sum/mean/max/min/prod/
    logsumexp, |x| for L1/L2, x*x for sumsquare, log(x) for logsum.
Builders decline only nodes whose input dtype is known and not one the op allows.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from onnxjit.ir.types import np_dtype
from onnxjit.kernels import reduce as kr
from onnxjit.ops.nn import ro
from onnxjit.ops.registry import attr, input_tensor_types, register_op

SUM, MEAN, MAX, MIN, PROD, L1, L2, LOGSUM, LOGSUMEXP, SUMSQ = range(10)

NUMERIC = frozenset({T.UINT32, T.UINT64, T.INT32, T.INT64, T.FLOAT16, T.FLOAT, T.DOUBLE, T.BFLOAT16})
MINMAX_TYPES = NUMERIC | {T.UINT8, T.INT8, T.BOOL}
ARG_TYPES = NUMERIC | {T.UINT8, T.UINT16, T.INT8, T.INT16}

BF16 = np_dtype(T.BFLOAT16)
F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
_SIGN = np.int64(-(2 ** 63))


# --- helpers shared with onnxjit.ops.normalization ----------------------------------------------------------
def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BF16


def compute_float(dtype: np.dtype) -> np.dtype:
    """The dtype a float input is computed in: float32 for float16/bfloat16, itself otherwise."""
    return F64 if dtype == F64 else F32


def input_elem(node, i: int = 0):
    types = input_tensor_types(node)
    return types[i].elem_type if i < len(types) and types[i] is not None else None


# --- integer helpers -------------------------------------------------------------------------------------------
def _as_ordered_int64(x: np.ndarray) -> np.ndarray:
    """An int64 array ordered as x (ints and bool); uint64 is flipped at the sign bit."""
    if x.dtype == np.uint64:
        return np.ascontiguousarray(x).view(np.int64) ^ _SIGN
    return np.ascontiguousarray(x, dtype=I64)


def _from_ordered_int64(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == np.uint64:
        return (v ^ _SIGN).view(np.uint64)
    if dtype == np.bool_:
        return v != 0
    return v.astype(dtype)


def _saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 -> integer dtype, truncating toward zero and clamping to the type's range (onnxruntime)."""
    info = np.iinfo(dtype)
    hi = v >= float(info.max)
    lo = v <= float(info.min)
    r = np.where(hi | lo, 0.0, v).astype(dtype)
    r[hi] = info.max
    r[lo] = info.min
    return r


def _empty_value(kind: int, dtype: np.dtype):
    if kind == PROD:
        return 1
    if kind in (SUM, MEAN, SUMSQ, L1, L2):
        return 0
    if dtype == np.bool_:
        return kind == MIN
    if is_float(dtype):
        return np.inf if kind == MIN else -np.inf
    info = np.iinfo(dtype)
    return info.max if kind == MIN else info.min


# --- layout -----------------------------------------------------------------------------------------------------
def _layout(shape: tuple, axes: tuple):
    """(perm, outer, n, inner) for reducing `axes` (sorted, unique) of `shape`: perm is None when the reduced
    axes are adjacent (ignoring size-1 dims) and the input reshapes to [outer, n, inner] as is; else the kept
    axes go first, the reduced ones last (inner = 1)."""
    r = len(shape)
    n = math.prod(shape[a] for a in axes)
    red = [a for a in axes if shape[a] != 1]
    if not red:
        return None, math.prod(shape), 1, 1
    lo, hi = red[0], red[-1]
    if all(shape[a] == 1 or a in axes for a in range(lo, hi + 1)):
        return None, math.prod(shape[:lo]), n, math.prod(shape[hi + 1:])
    kept = [a for a in range(r) if a not in axes]
    return tuple(kept) + tuple(axes), math.prod(shape[a] for a in kept), n, 1


def _normalize_axes(axes, rank: int, op: str) -> tuple:
    out = set()
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"{op}: axis {a} is out of range for an input of rank {rank}")
        out.add(a + rank if a < 0 else a)
    return tuple(sorted(out))


# --- compute ----------------------------------------------------------------------------------------------------
def _reduce_float(kind, x3, out):
    if kind in (MAX, MIN):
        kr.minmax(x3, kind == MAX, out)
    elif kind == LOGSUMEXP:
        outer, n, inner = x3.shape
        rows = x3.reshape(outer, n) if inner == 1 else ro(x3.transpose(0, 2, 1)).reshape(outer * inner, n)
        kr.logsumexp(rows, out.reshape(-1))
    elif kind == PROD:
        kr.accumulate(x3, kr.PRE_NONE, True, out)
    else:
        pre = kr.PRE_SQUARE if kind in (SUMSQ, L2) else kr.PRE_ABS if kind == L1 else kr.PRE_NONE
        kr.accumulate(x3, pre, False, out)
        if kind == MEAN:
            out /= out.dtype.type(x3.shape[1])
        elif kind == L2:
            np.sqrt(out, out=out)
        elif kind == LOGSUM:
            with np.errstate(divide="ignore", invalid="ignore"):
                np.log(out, out=out)
    return out


def _reduce_int(kind, src, dtype, outer, n, inner):
    if kind in (MAX, MIN, LOGSUMEXP):
        x3 = ro(_as_ordered_int64(src).reshape(outer, n, inner))
        m = np.empty((outer, inner), I64)
        kr.minmax(x3, kind != MIN, m)
        if kind != LOGSUMEXP:
            return _from_ordered_int64(m, dtype)
        count = (x3 == m[:, None, :]).sum(axis=1)
        return _saturate(np.log(count) + _from_ordered_int64(m, dtype).astype(F64), dtype)
    x3 = ro(np.ascontiguousarray(src, dtype=F64).reshape(outer, n, inner))
    s = np.empty((outer, inner), F64)
    if kind == PROD:
        kr.accumulate(x3, kr.PRE_NONE, True, s)
    else:
        pre = kr.PRE_SQUARE if kind in (SUMSQ, L2) else kr.PRE_ABS if kind == L1 else kr.PRE_NONE
        kr.accumulate_kahan(x3, pre, s)
    if kind == MEAN:
        s /= n
    elif kind == L2:
        np.sqrt(s, out=s)
    elif kind == LOGSUM:
        s = np.where(s > 0, np.log(np.where(s > 0, s, 1.0)), -np.inf)
    return _saturate(s, dtype)


def reduce(kind: int, x: np.ndarray, axes, keepdims: bool, noop: bool, op: str) -> np.ndarray:
    """The reduction `kind` of x over `axes` (None or empty: all axes, or none with `noop`)."""
    x = np.asarray(x)
    shape, dtype = x.shape, x.dtype
    if not axes:
        if noop:
            perm, outer, n, inner = None, x.size, 1, 1
            out_shape = shape
        else:
            axes = tuple(range(x.ndim))
    if axes:
        axes = _normalize_axes(axes, x.ndim, op)
        perm, outer, n, inner = _layout(shape, axes)
        out_shape = tuple(1 if a in axes else d for a, d in enumerate(shape)) if keepdims else \
            tuple(d for a, d in enumerate(shape) if a not in axes)
    elif not noop:  # rank 0, no axes
        perm, outer, n, inner = None, 1, 1, 1
        out_shape = shape
    if outer * inner == 0:
        return np.empty(out_shape, dtype)
    if n == 0:
        return np.full(out_shape, _empty_value(kind, dtype), dtype)
    src = x.transpose(perm) if perm is not None else x
    if is_float(dtype):
        cdt = compute_float(dtype)
        x3 = ro(np.ascontiguousarray(src, dtype=cdt).reshape(outer, n, inner))
        res = _reduce_float(kind, x3, np.empty((outer, inner), cdt))
        if cdt != dtype:
            res = res.astype(dtype)
    elif dtype.kind in "iub":
        res = _reduce_int(kind, src, dtype, outer, n, inner)
    else:
        raise TypeError(f"{op}: unsupported input dtype {dtype}")
    return res.reshape(out_shape)


# --- Reduce* builders -------------------------------------------------------------------------------------------
def _reduce_builder(op: str, kind: int, allowed: frozenset, axes_input: bool):
    def build(node):
        if not node.inputs or node.inputs[0] is None:
            return None
        elem = input_elem(node)
        if elem is not None and elem not in allowed:
            return None
        keepdims = int(attr(node, "keepdims", 1)) != 0
        if axes_input:
            noop = int(attr(node, "noop_with_empty_axes", 0)) != 0

            def run(x, axes=None):
                ax = () if axes is None else tuple(np.asarray(axes).reshape(-1).tolist())
                return (reduce(kind, x, ax, keepdims, noop, op),)
            return run
        static_axes = tuple(int(a) for a in (attr(node, "axes", None) or ()))

        def run_attr(x):
            return (reduce(kind, x, static_axes, keepdims, False, op),)
        return run_attr
    return build


_REDUCE_OPS = {
    # op: (kind, allowed dtypes, opset versions, first version with the axes input)
    "ReduceSum": (SUM, NUMERIC, (1, 11, 13), 13),
    "ReduceMean": (MEAN, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceMax": (MAX, MINMAX_TYPES, (1, 11, 12, 13, 18, 20), 18),
    "ReduceMin": (MIN, MINMAX_TYPES, (1, 11, 12, 13, 18, 20), 18),
    "ReduceProd": (PROD, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceL1": (L1, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceL2": (L2, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceLogSum": (LOGSUM, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceLogSumExp": (LOGSUMEXP, NUMERIC, (1, 11, 13, 18), 18),
    "ReduceSumSquare": (SUMSQ, NUMERIC, (1, 11, 13, 18), 18),
}

for _op, (_kind, _allowed, _versions, _input_since) in _REDUCE_OPS.items():
    for _v in _versions:
        register_op(_op, since=_v)(_reduce_builder(_op, _kind, _allowed, _v >= _input_since))


# --- ArgMax / ArgMin --------------------------------------------------------------------------------------------
def argminmax(x: np.ndarray, axis: int, keepdims: bool, is_max: bool, last: bool, op: str) -> np.ndarray:
    x = np.asarray(x)
    r = x.ndim
    if not -r <= axis < r:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {r}")
    a = axis + r if axis < 0 else axis
    shape = x.shape
    outer, n, inner = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
    out_shape = shape[:a] + ((1,) if keepdims else ()) + shape[a + 1:]
    if outer * inner == 0:
        return np.empty(out_shape, I64)
    if n == 0:
        raise ValueError(f"{op}: cannot reduce an empty axis {axis} of shape {shape}")
    if is_float(x.dtype):
        x3 = np.ascontiguousarray(x, dtype=compute_float(x.dtype))
    elif x.dtype.kind in "iub":
        x3 = _as_ordered_int64(x)
    else:
        raise TypeError(f"{op}: unsupported input dtype {x.dtype}")
    out = np.empty((outer, inner), I64)
    kr.argminmax(ro(x3.reshape(outer, n, inner)), is_max, last, out)
    return out.reshape(out_shape)


def _arg_builder(op: str, is_max: bool, has_last: bool):
    def build(node):
        if len(node.inputs) != 1 or node.inputs[0] is None:
            return None
        elem = input_elem(node)
        if elem is not None and elem not in ARG_TYPES:
            return None
        axis = int(attr(node, "axis", 0))
        keepdims = int(attr(node, "keepdims", 1)) != 0
        last = has_last and int(attr(node, "select_last_index", 0)) != 0

        def run(x):
            return (argminmax(x, axis, keepdims, is_max, last, op),)
        return run
    return build


for _op, _is_max in (("ArgMax", True), ("ArgMin", False)):
    for _v in (1, 11, 12, 13):
        register_op(_op, since=_v)(_arg_builder(_op, _is_max, _v >= 12))
