"""Indexing ops on the CPU provider: Gather, GatherElements, GatherND, ScatterElements (and the deprecated
Scatter), ScatterND, TopK, CumSum, OneHot, NonZero, Unique, Compress.

Data movement is numpy over index arrays computed here, so every ONNX tensor dtype works (strings as object
arrays, bfloat16 through ml_dtypes, complex). The loops that need them run in `onnxjit.kernels.indexing`: TopK's
selection and Unique's ordered map follow onnxruntime's algorithms (ties, NaN, and the order of sorted=0 outputs
come out as onnxruntime gives them), and scatter reductions apply updates in order. Indices may be negative
(counted from the end); out-of-range indices raise as in onnxruntime.

Builders decline (the next provider runs the node) when an input's dtype is known and not one the op allows, a
reduction is unknown or meaningless for the dtype (mul/max/min on strings, max/min on bool or complex), or a
required attribute is missing (TopK-1's k).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onnxjit.kernels import indexing as kix
from onnxjit.ops.nn import constant_input
from onnxjit.ops.registry import attr, input_tensor_types, register_op

T = TensorProto
INTS = frozenset({T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64})
FLOATS = frozenset({T.FLOAT16, T.BFLOAT16, T.FLOAT, T.DOUBLE})
REAL = INTS | FLOATS
ALL = REAL | frozenset({T.BOOL, T.STRING, T.COMPLEX64, T.COMPLEX128})
INDEX = frozenset({T.INT32, T.INT64})


# --- helpers -------------------------------------------------------------------------------------------------------
def _types_ok(node, allowed) -> bool:
    """Each input i with a known type has a dtype in allowed[i] (None: anything)."""
    types = input_tensor_types(node)
    for i, ok in enumerate(allowed):
        if ok is None or i >= len(types) or types[i] is None:
            continue
        if types[i].elem_type not in ok:
            return False
    return True


def _elem(node, i):
    types = input_tensor_types(node)
    return types[i].elem_type if i < len(types) and types[i] is not None else None


def _n_out(node) -> int:
    return len(node.outputs)


def _axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {rank}")
    return axis + rank if axis < 0 else axis


def _indices(idx: np.ndarray, n: int, op: str) -> np.ndarray:
    """int64 indices into a dim of size n with negatives counted from the end; out of range raises."""
    idx = np.asarray(idx)
    if idx.dtype != np.int64:
        idx = idx.astype(np.int64)
    if idx.size:
        lo, hi = idx.min(), idx.max()
        if lo < -n or hi >= n:
            bad = lo if lo < -n else hi
            raise IndexError(f"{op}: indices element out of data bounds, idx={bad} must be within the inclusive "
                             f"range [{-n},{n - 1}]")
        if lo < 0:
            idx = np.where(idx < 0, idx + n, idx)
    return idx


def _grid(shape):
    """Open index grids over shape (broadcastable to it), one per dim."""
    return [np.arange(s, dtype=np.int64).reshape((1,) * d + (s,) + (1,) * (len(shape) - d - 1))
            for d, s in enumerate(shape)]


def _last_writes(rows: np.ndarray) -> np.ndarray:
    """Positions of the last occurrence of each distinct value in rows (the writes that survive)."""
    n = rows.shape[0]
    if n < 2:
        return np.arange(n)
    _, first_in_rev = np.unique(rows[::-1], return_index=True)
    return n - 1 - first_in_rev


def _is_real_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name == "bfloat16"


# --- Gather ------------------------------------------------------------------------------------------------------
def build_gather(node):
    if len(node.inputs) != 2 or not _types_ok(node, (ALL, INDEX)):
        return None
    axis = int(attr(node, "axis", 0))
    const = constant_input(node, 1)
    checked: dict = {}  # the gathered dim's size -> the constant indices checked against it, made non-negative

    def run(data, indices):
        a = _axis(axis, data.ndim, "Gather")
        if indices is const:  # a column selection: its checks once per size, not per run (2-3 us at batch 1)
            idx = checked.get(data.shape[a])
            if idx is None:
                idx = checked[data.shape[a]] = _indices(indices, data.shape[a], "Gather")
        else:
            idx = _indices(indices, data.shape[a], "Gather")
        if idx.size == 1 and math.prod(data.shape[:a]) == 1:
            # one index behind unit dims (q, k and v taken from a stacked projection; a column of a one-row
            # batch): a contiguous block, its view
            i = int(idx.reshape(-1)[0])
            block = data[(0,) * a + (slice(i, i + 1),)].reshape(data.shape[:a] + idx.shape + data.shape[a + 1:])
            return (block if block.flags.c_contiguous else block.copy(),)  # (of a fed array with other strides)
        out = np.take(data, idx.reshape(-1), axis=a)
        return (out.reshape(data.shape[:a] + idx.shape + data.shape[a + 1:]),)
    return run


for _v in (1, 11, 13):
    register_op("Gather", since=_v)(build_gather)


def build_gather_elements(node):
    if len(node.inputs) != 2 or not _types_ok(node, (ALL, INDEX)):
        return None
    axis = int(attr(node, "axis", 0))

    def run(data, indices):
        if data.ndim != indices.ndim or data.ndim == 0:
            raise ValueError(f"GatherElements: data (rank {data.ndim}) and indices (rank {indices.ndim}) must have "
                             "the same rank >= 1")
        a = _axis(axis, data.ndim, "GatherElements")
        for d in range(data.ndim):
            if d != a and indices.shape[d] > data.shape[d]:
                raise ValueError(f"GatherElements: indices shape {list(indices.shape)} exceeds data shape "
                                 f"{list(data.shape)} at dim {d}")
        idx = _indices(indices, data.shape[a], "GatherElements")
        g = _grid(idx.shape)
        g[a] = idx
        return (np.ascontiguousarray(data[tuple(g)]),)
    return run


for _v in (11, 13):
    register_op("GatherElements", since=_v)(build_gather_elements)


def _nd_rows(data_shape, ind, op):
    """Row numbers into data_shape[:m] (C order) of the index tuples ind (..., m), negatives allowed."""
    m = ind.shape[-1]
    dims = data_shape[:m]
    flat = ind.reshape(math.prod(ind.shape[:-1]), m)
    if flat.dtype != np.int64:
        flat = flat.astype(np.int64)
    rows = np.zeros(flat.shape[0], np.int64)
    for j, n in enumerate(dims):
        col = flat[:, j]
        if col.size:
            lo, hi = col.min(), col.max()
            if lo < -n or hi >= n:
                raise IndexError(f"{op}: invalid index found, index = {lo if lo < -n else hi}")
            if lo < 0:
                col = np.where(col < 0, col + n, col)
        rows = rows * n + col
    return rows


def build_gather_nd(node):
    if len(node.inputs) != 2 or not _types_ok(node, (ALL, frozenset({T.INT64}))):
        return None
    b = int(attr(node, "batch_dims", 0)) if node.opset >= 12 else 0

    def run(data, indices):
        if indices.ndim < 1 or data.ndim < 1:
            raise ValueError("GatherND: data and indices must have rank >= 1")
        m = indices.shape[-1]
        if not 0 <= b < min(data.ndim, indices.ndim) or b + m > data.ndim:
            raise ValueError(f"GatherND: batch_dims {b} and index length {m} do not fit data of rank {data.ndim} "
                             f"and indices of rank {indices.ndim}")
        if indices.shape[:b] != data.shape[:b]:
            raise ValueError(f"GatherND: batch dims differ: data {list(data.shape)}, indices {list(indices.shape)}")
        nb = math.prod(data.shape[:b])
        per = math.prod(indices.shape[b:-1])
        rest = data.shape[b + m:]
        d2 = data.reshape((nb, math.prod(data.shape[b:b + m])) + rest)
        rows = _nd_rows(data.shape[b:], indices.reshape(nb * per, m), "GatherND").reshape(nb, per)
        out = d2[np.arange(nb, dtype=np.int64)[:, None], rows]
        return (out.reshape(indices.shape[:-1] + rest),)
    return run


for _v in (11, 12, 13):
    register_op("GatherND", since=_v)(build_gather_nd)


# --- ScatterElements / ScatterND ---------------------------------------------------------------------------------
REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}


def _reduction(node):
    """The reduction code of a Scatter* node, or None when this opset lacks it or it does not fit the dtype."""
    red = attr(node, "reduction", "none") if node.opset >= 16 else "none"
    if red not in REDUCTIONS or (red in ("max", "min") and node.opset < 18):
        return None
    code = REDUCTIONS[red]
    et = _elem(node, 0)
    if et == T.STRING and code >= 2:
        return None
    if et in (T.BOOL, T.COMPLEX64, T.COMPLEX128) and code >= 3:
        return None
    return code


def _reduce_rows(out2, rows, upd2, code, op):
    """out2[rows[i]] <op>= upd2[i] in order (code 1 add, 2 mul, 3 max, 4 min)."""
    dt = out2.dtype
    if dt.kind == "O" or dt.kind == "c" or (dt.kind == "f" and dt.itemsize == 2 and code <= 2) or (
            dt.name == "bfloat16" and code <= 2):
        if dt.kind == "O" and code != 1:
            raise TypeError(f"{op}: reduction on strings supports only 'add'")
        if dt.kind == "c" and code > 2:
            raise TypeError(f"{op}: max/min reductions are not defined for complex data")
        # per-update rounding in the data's dtype, in order (ufunc.at is unbuffered)
        ufunc = np.add if code == 1 else np.multiply
        ufunc.at(out2, rows, upd2)
        return out2
    if dt.kind == "b":
        w = out2.astype(np.int64)
        kix.scatter_reduce(w, rows, upd2.astype(np.int64), 3 if code == 1 else 2)  # or / and
        return w.astype(np.bool_)
    if dt.kind in "iu" and dt.itemsize < 8:
        w = out2.astype(np.int64)  # add/mul wrap the same modulo 2**bits; max/min keep the order
        kix.scatter_reduce(w, rows, upd2.astype(np.int64), code)
        return w.astype(dt)
    if dt.kind in "iu" or dt in (np.float32, np.float64):
        w = np.ascontiguousarray(out2)
        kix.scatter_reduce(w, rows, np.ascontiguousarray(upd2, dtype=dt), code)
        return w
    # float16 / bfloat16 max/min: exact in float32
    w = out2.astype(np.float32)
    kix.scatter_reduce(w, rows, upd2.astype(np.float32), code)
    return w.astype(dt)


def _scatter_rows(data, rows, upd2, code, op):
    """A copy of data viewed as (rows, slice) with upd2's rows written (or reduced) at rows, in order."""
    slice_ = upd2.shape[1]
    out = np.array(data, copy=True, order="C")
    if rows.size == 0 or slice_ == 0:
        return out
    out2 = out.reshape(-1, slice_)
    if code == 0:
        keep = _last_writes(rows)
        out2[rows[keep]] = upd2[keep]
        return out
    return _reduce_rows(out2, rows, upd2, code, op).reshape(data.shape)


def build_scatter_elements(node):
    if len(node.inputs) != 3 or not _types_ok(node, (ALL, INDEX, ALL)):
        return None
    code = _reduction(node)
    if code is None:
        return None
    axis = int(attr(node, "axis", 0))
    op = node.op_type

    def run(data, indices, updates):
        if data.ndim != indices.ndim or indices.shape != updates.shape or data.ndim == 0:
            raise ValueError(f"{op}: data {list(data.shape)}, indices {list(indices.shape)} and updates "
                             f"{list(updates.shape)} must have the same rank >= 1, indices the shape of updates")
        if updates.dtype != data.dtype:
            raise TypeError(f"{op}: updates ({updates.dtype}) must have the data's dtype ({data.dtype})")
        a = _axis(axis, data.ndim, op)
        for d in range(data.ndim):
            if d != a and indices.shape[d] > data.shape[d]:
                raise ValueError(f"{op}: indices dim={indices.shape[d]} at pos={d} is greater than input "
                                 f"dim={data.shape[d]}")
        idx = _indices(indices, data.shape[a], op)
        g = _grid(idx.shape)
        g[a] = idx
        flat = np.zeros(idx.shape, np.int64)
        for d in range(data.ndim):
            flat = flat * data.shape[d] + g[d]
        return (_scatter_rows(data, flat.reshape(-1), updates.reshape(-1, 1), code, op),)
    return run


for _v in (11, 13, 16, 18):
    register_op("ScatterElements", since=_v)(build_scatter_elements)
for _v in (9, 11):
    register_op("Scatter", since=_v)(build_scatter_elements)


def build_scatter_nd(node):
    if len(node.inputs) != 3 or not _types_ok(node, (ALL, frozenset({T.INT64}), ALL)):
        return None
    code = _reduction(node)
    if code is None:
        return None

    def run(data, indices, updates):
        if indices.ndim < 1 or data.ndim < 1:
            raise ValueError("ScatterND: data and indices must have rank >= 1")
        k = indices.shape[-1]
        if k > data.ndim or updates.shape != indices.shape[:-1] + data.shape[k:]:
            raise ValueError(f"ScatterND: updates {list(updates.shape)} must have shape indices.shape[:-1] + "
                             f"data.shape[{k}:] (data {list(data.shape)}, indices {list(indices.shape)})")
        if updates.dtype != data.dtype:
            raise TypeError(f"ScatterND: updates ({updates.dtype}) must have the data's dtype ({data.dtype})")
        rows = _nd_rows(data.shape, indices, "ScatterND")
        upd2 = updates.reshape(rows.shape[0], math.prod(data.shape[k:]))
        return (_scatter_rows(data, rows, upd2, code, "ScatterND"),)
    return run


for _v in (11, 13, 16, 18):
    register_op("ScatterND", since=_v)(build_scatter_nd)


# --- TopK --------------------------------------------------------------------------------------------------------
def _order_keys(x: np.ndarray) -> np.ndarray:
    """float64 keys with x's order and equalities, NaN above every number (onnxruntime >= 1.32; all NaN equal):
    the values, or their dense ranks where a NaN is present or 64-bit integers pass 2**53 (which float64 would
    round)."""
    if x.dtype.kind in "iu":
        if x.dtype.itemsize == 8 and x.size and (int(x.min()) < -(1 << 53) or int(x.max()) > (1 << 53)):
            return np.unique(x, return_inverse=True)[1].reshape(x.shape).astype(np.float64)
        return x.astype(np.float64)
    keys = x.astype(np.float64)  # also float16/bfloat16, which np.unique does not sort
    if np.isnan(keys).any():  # np.unique sorts NaN last and folds all NaN into one value
        return np.unique(keys, return_inverse=True)[1].reshape(x.shape).astype(np.float64)
    return keys


def build_topk(node):
    if not _types_ok(node, (REAL, frozenset({T.INT64}))):
        return None
    axis = int(attr(node, "axis", -1))
    largest = bool(int(attr(node, "largest", 1))) if node.opset >= 11 else True
    sorted_ = bool(int(attr(node, "sorted", 1))) if node.opset >= 11 else True
    if node.opset < 10:
        if len(node.inputs) != 1 or attr(node, "k") is None:
            return None
        k_attr = int(attr(node, "k"))
    elif len(node.inputs) != 2:
        return None

    def topk(x, k):
        if x.dtype.kind not in "iuf" and x.dtype.name != "bfloat16":
            raise TypeError(f"TopK: unsupported dtype {x.dtype}")
        if x.ndim == 0:
            raise ValueError("TopK: the input must have rank >= 1")
        a = _axis(axis, x.ndim, "TopK")
        n = x.shape[a]
        if k < 0:
            raise ValueError("TopK: value of k must not be negative")
        if k > n:
            raise ValueError(f"TopK: k argument [{k}] should not be greater than specified axis dim value [{n}]")
        out_shape = x.shape[:a] + (k,) + x.shape[a + 1:]
        if k == 0 or x.size == 0:
            return np.empty(out_shape, x.dtype), np.empty(out_shape, np.int64)
        keys = _order_keys(x)
        if not largest:  # LesserValueCmp(a, b) == GreaterValueCmp on negated keys
            keys = np.negative(keys, out=keys)
        keys = np.ascontiguousarray(np.moveaxis(keys, a, -1)).reshape(-1, n)
        pos = np.empty((keys.shape[0], k), np.int64)
        kix.topk(keys, k, sorted_, pos)
        idx = np.moveaxis(pos.reshape(np.moveaxis(x, a, -1).shape[:-1] + (k,)), -1, a)
        idx = np.ascontiguousarray(idx)
        return np.take_along_axis(x, idx, axis=a), idx

    if node.opset < 10:
        return lambda x: topk(x, k_attr)

    def run(x, k):
        if k.size != 1:
            raise ValueError("TopK: k tensor should be a 1D tensor of size 1")
        return topk(x, int(k.reshape(-1)[0]))
    return run


for _v in (1, 10, 11, 24):
    register_op("TopK", since=_v)(build_topk)


# --- CumSum ------------------------------------------------------------------------------------------------------
def build_cumsum(node):
    if len(node.inputs) != 2 or not _types_ok(node, (REAL, INDEX)):
        return None
    exclusive = bool(int(attr(node, "exclusive", 0)))
    reverse = bool(int(attr(node, "reverse", 0)))

    def run(x, axis):
        if x.ndim == 0:
            raise ValueError("CumSum: cannot apply CumSum operator on a scalar")
        if axis.size != 1 or axis.ndim > 1:
            raise ValueError("CumSum: axis must be a 0-D or 1-element tensor")
        a = _axis(int(axis.reshape(-1)[0]), x.ndim, "CumSum")
        dt = x.dtype
        # float16 / bfloat16 accumulate in float32 (onnxruntime), other dtypes in their own (ints wrap)
        acc = np.dtype(np.float32) if dt.itemsize == 2 and _is_real_float(dt) else dt
        y = np.flip(x, a) if reverse else x
        c = np.cumsum(y, axis=a, dtype=acc)
        if exclusive and c.shape[a]:
            shifted = np.zeros_like(c)
            src = [slice(None)] * c.ndim
            dst = [slice(None)] * c.ndim
            src[a] = slice(0, c.shape[a] - 1)
            dst[a] = slice(1, None)
            shifted[tuple(dst)] = c[tuple(src)]
            c = shifted
        if reverse:
            c = np.flip(c, a)
        return (np.ascontiguousarray(c, dtype=dt),)
    return run


for _v in (11, 14):
    register_op("CumSum", since=_v)(build_cumsum)


# --- OneHot ------------------------------------------------------------------------------------------------------
def build_onehot(node):
    if len(node.inputs) != 3 or not _types_ok(node, (REAL, REAL, ALL)):
        return None
    axis = int(attr(node, "axis", -1))

    def run(indices, depth, values):
        if depth.size != 1:
            raise ValueError("OneHot: depth must have exactly one element")
        if values.size != 2:
            raise ValueError("OneHot: values must have exactly two elements [off_value, on_value]")
        d = depth.reshape(-1)[0]
        if _is_real_float(depth.dtype):
            d = float(d)
            if not math.isfinite(d):
                raise ValueError("OneHot: depth is not finite")
        d = int(d)
        if d < 0:
            raise ValueError("OneHot: depth is negative")
        r = indices.ndim
        a = axis + r + 1 if axis < 0 else axis
        if not 0 <= a <= r:
            raise ValueError(f"OneHot: axis {axis} is out of range for an output of rank {r + 1}")
        # the spec casts non-integer indices to int64 before use (truncation toward zero, as onnxruntime >= 1.32);
        # a NaN or infinite index is out of range
        if _is_real_float(indices.dtype):
            f = np.trunc(indices.astype(np.float64))
            ind = np.where(np.abs(f) <= d, f, -(d + 1)).astype(np.int64)
        elif indices.dtype.kind == "u":
            ind = indices.astype(np.uint64)
        else:
            ind = indices.astype(np.int64)
        if ind.dtype.kind != "u":
            ind = np.where(ind < 0, ind + d, ind)
        hit = ind[..., None] == np.arange(d, dtype=ind.dtype)
        v = values.reshape(-1)
        out = np.where(hit, v[1:2], v[0:1])
        if a != r:
            out = np.moveaxis(out, -1, a)
        return (np.ascontiguousarray(out),)
    return run


for _v in (9, 11, 28):
    register_op("OneHot", since=_v)(build_onehot)


# --- NonZero -----------------------------------------------------------------------------------------------------
def build_nonzero(node):
    if len(node.inputs) != 1 or not _types_ok(node, (ALL,)):
        return None

    def run(x):
        mask = x.astype(np.bool_) if x.dtype.kind == "O" else (x != 0)
        if x.ndim == 0:  # onnxruntime: a scalar is a 1-element 1-D tensor
            mask = mask.reshape(1)
        nz = np.nonzero(mask)
        out = np.empty((len(nz), nz[0].shape[0]), np.int64)
        for i, c in enumerate(nz):
            out[i] = c
        return (out,)
    return run


for _v in (9, 13):
    register_op("NonZero", since=_v)(build_nonzero)


# --- Unique ------------------------------------------------------------------------------------------------------
def _unique_groups(rows: np.ndarray):
    """The distinct rows of rows (n, m) with no NaN, in ascending lexicographic order: (first: the first row
    holding each, ids: each row's number in that order, counts)."""
    n, m = rows.shape
    if n == 0:
        e = np.empty(0, np.int64)
        return e, e, e
    if m == 0:
        return np.zeros(1, np.int64), np.zeros(n, np.int64), np.array([n], np.int64)
    if m == 1:
        perm = np.argsort(rows[:, 0], kind="stable")
    else:
        perm = np.lexsort(tuple(rows[:, j] for j in range(m - 1, -1, -1)))
    s = rows[perm]
    new = np.empty(n, np.bool_)
    new[0] = True
    new[1:] = np.any(s[1:] != s[:-1], axis=1) if m > 1 else (s[1:, 0] != s[:-1, 0])
    starts = np.flatnonzero(new)
    first = perm[starts]  # stable sort: the first row of each group is its first occurrence
    group = np.cumsum(new) - 1
    ids = np.empty(n, np.int64)
    ids[perm] = group
    counts = np.diff(np.append(starts, n)).astype(np.int64)
    return first.astype(np.int64), ids, counts


def build_unique(node):
    if len(node.inputs) != 1 or not _types_ok(node, (ALL,)):
        return None
    sorted_ = bool(int(attr(node, "sorted", 1)))
    axis = attr(node, "axis", None)
    n_out = _n_out(node)

    def run(x):
        if axis is None:
            data = x.reshape(-1)
            rows = data.reshape(-1, 1)
        else:
            a = _axis(int(axis), x.ndim, "Unique")
            rows = np.moveaxis(x, a, 0).reshape(x.shape[a], x.size // x.shape[a] if x.shape[a] else
                                                math.prod(x.shape[:a] + x.shape[a + 1:]))
        keys = rows
        if x.dtype.name in ("float16", "bfloat16"):
            keys = rows.astype(np.float32)
        if _is_real_float(x.dtype) and keys.size and np.isnan(keys).any():
            ids, first, counts, order = kix.unique_map(np.ascontiguousarray(keys, dtype=np.float64))
            nu = first.shape[0]
            if order.shape[0] != nu:  # the map lost track of keys (inconsistent NaN ordering): keep insertion
                order = np.arange(nu, dtype=np.int64)
            # ids count in order of first occurrence; order is the map's (sorted) order of ids
            if sorted_:
                rank = np.empty(nu, np.int64)
                rank[order] = np.arange(nu, dtype=np.int64)
                first, counts, ids = first[order], counts[order], rank[ids]
        else:
            first, ids, counts = _unique_groups(keys)
            if not sorted_:  # order of first occurrence
                perm = np.argsort(first, kind="stable")
                rank = np.empty(perm.shape[0], np.int64)
                rank[perm] = np.arange(perm.shape[0], dtype=np.int64)
                first, counts, ids = first[perm], counts[perm], rank[ids]
        if axis is None:
            y = data[first]
        else:
            y = np.take(x, first, axis=a)
        outs = (np.ascontiguousarray(y), np.asarray(first, np.int64), np.asarray(ids, np.int64),
                np.asarray(counts, np.int64))
        return outs[:n_out]
    return run


for _v in (11, 28):
    register_op("Unique", since=_v)(build_unique)


# --- Compress ----------------------------------------------------------------------------------------------------
def build_compress(node):
    if len(node.inputs) != 2 or not _types_ok(node, (ALL, frozenset({T.BOOL}))):
        return None
    axis = attr(node, "axis", None)

    def run(x, condition):
        c = condition.reshape(-1).astype(np.bool_, copy=False)
        if axis is None:
            flat = x.reshape(-1)
            n = min(c.shape[0], flat.shape[0])
            return (flat[:n][c[:n]],)
        a = _axis(int(axis), x.ndim, "Compress")
        n = min(c.shape[0], x.shape[a])
        return (np.take(x, np.flatnonzero(c[:n]), axis=a),)
    return run


for _v in (9, 11, 28):
    register_op("Compress", since=_v)(build_compress)
