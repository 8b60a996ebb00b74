"""Data-movement and shape ops on the CPU provider: Transpose, Split, Slice, Squeeze, Unsqueeze, Identity, Expand,
Tile, Pad, Shape, Size, ConstantOfShape, Range, DepthToSpace, SpaceToDepth, Trilu.

They do no arithmetic on the data (Range aside), so every tensor dtype numpy holds runs here, strings (object
arrays), bool, float16 and the ml_dtypes types (bfloat16, float8, int4) included. Squeeze, Unsqueeze and Identity
return views of their input (never a copy); Slice and Split return a view when it is already C-contiguous, else a
contiguous copy; the others return new C-contiguous arrays (a graph output that is a view of a feed reaches the
caller as a copy: session.run's outputs are its own). Index semantics (clamping, negative pads, the uneven
split of Split-18, Range's accumulation) follow onnxruntime's CPU kernels, including their error cases; opset 27
and 28 versions, which onnxruntime 1.31 does not load yet, follow the ONNX spec and reference implementation.

Builders decline (return None) only for nodes no kernel here can run: an input whose known type is not a tensor
(Identity excepted: it passes sequences and optionals through), a Pad mode the opset does not define, a Range
dtype the opset does not allow, and DepthToSpace/SpaceToDepth modes other than DCR/CRD.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from onnx import TensorProto, numpy_helper

from onnxjit.ir.types import TensorType, np_dtype
from onnxjit.kernels import movement as kmove
from onnxjit.ops.registry import attr, register_op
from onnxjit.worker_pool import PARALLEL_GRAIN, run_units

T = TensorProto
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


# --- helpers ---------------------------------------------------------------------------------------------------
def _tensor_inputs(node) -> bool:
    """Every present input is a tensor (or of unknown type)."""
    return all(v is None or v.type is None or isinstance(v.type, TensorType) for v in node.inputs)


def _present(node, i) -> bool:
    return i < len(node.inputs) and node.inputs[i] is not None


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1).tolist()]


def _contig(a: np.ndarray) -> np.ndarray:
    """`a` itself when C-contiguous, else a C-contiguous copy (0-d stays 0-d, unlike np.ascontiguousarray)."""
    return a if a.flags.c_contiguous else a.copy(order="C")


def _axis(axis: int, rank: int, op: str) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {rank}")
    return a


def _zero(dtype: np.dtype):
    """The fill value of a dtype: "" for strings, else 0 / False."""
    return "" if np.dtype(dtype).kind == "O" else np.zeros((), dtype)


def _scalar_of(a, what: str):
    a = np.asarray(a)
    if a.size != 1:
        raise ValueError(f"{what} must be a scalar (one element), got shape {list(a.shape)}")
    return a.reshape(-1)[0]


# --- Transpose -------------------------------------------------------------------------------------------------
def build_transpose(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    perm = attr(node, "perm")
    perm = None if perm is None else tuple(int(p) for p in perm)

    def run(x):
        p = tuple(range(x.ndim - 1, -1, -1)) if perm is None else perm
        if sorted(p) != list(range(x.ndim)):
            raise ValueError(f"Transpose: perm {list(p)} is not a permutation of the {x.ndim} axes of the input")
        return (transpose(x, p),)
    return run


# elements from which Transpose runs its own kernels: a (4, 197, 3, 64) head transpose (151,296 elements) took
# 33 us in numpy's copy, 40 us in the row kernel on one thread and 68 on two
TRANSPOSE_GRAIN = 4 * PARALLEL_GRAIN
_SAME_SIZE_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def merged_transpose(shape, perm):
    """(shape, perm) of the same transpose with input axes that stay adjacent and in order merged, and size-1
    axes dropped: NCHW -> NHWC is (C, HW) -> (HW, C), (B, S, H, D) -> (B, H, S, D) is (B, S, H, D) with perm
    (0, 2, 1, 3)."""
    keep = [a for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for a in keep:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # input order of the groups
    sizes = [math.prod(shape[a] for a in groups[g]) for g in order]
    rank = {g: i for i, g in enumerate(order)}
    return sizes, [rank[g] for g in range(len(groups))]


def transpose(x: np.ndarray, perm) -> np.ndarray:
    """x.transpose(perm), C-contiguous. The two forms real models use run as parallel kernels (numpy's copy of
    a transposed view is single-threaded and walks the strided side element by element): a batched 2-D transpose
    (NCHW <-> NHWC, the last two axes swapped) in L1-sized tiles, and a transpose that keeps the last axis (the
    heads of attention, (B, S, H, D) -> (B, H, S, D)) as contiguous row copies; other forms, and sizes under
    TRANSPOSE_GRAIN, are numpy's copy. AMD Zen 3, float32: (8, 128, 12, 64) -> (0, 2, 1, 3) 201 us numpy, 152 us
    rows on one thread, 122 on two; the tiles ran 0.8-1.35x numpy's time on one thread (scalar either way), so
    they run only on two threads or more (about 1.6x faster there)."""
    t = x.transpose(perm)
    bits = _SAME_SIZE_UINT.get(x.dtype.itemsize) if x.dtype.kind != "O" else None
    if t.flags.c_contiguous or x.size < TRANSPOSE_GRAIN or bits is None:
        return _contig(t)
    sizes, p = merged_transpose(x.shape, perm)
    out = np.empty(t.shape, dtype=x.dtype)
    # moved as unsigned integers of the element's size: any dtype (float16, bfloat16, float8, bool), 4 kernels
    xb, ob = np.ascontiguousarray(x).view(bits), out.view(bits)
    if p in ([1, 0], [0, 2, 1]) and numba.get_num_threads() > 1:
        x3 = xb.reshape([1] * (3 - len(sizes)) + sizes)
        units = x3.shape[0] * -(-x3.shape[1] // kmove.TILE)
        run_units(kmove.transpose_tiles, (x3, ob.reshape(x3.shape[0], x3.shape[2], x3.shape[1])), units, x.size)
        return out
    if p[-1] == len(sizes) - 1 and len(sizes) <= 5 and sizes[-1] >= 16:
        in_strides = [math.prod(sizes[a + 1:]) for a in range(len(sizes))]
        outer = [sizes[a] for a in p[:-1]]
        strides = [in_strides[a] for a in p[:-1]]
        pad = 4 - len(outer)
        rows = math.prod(outer)
        run_units(kmove.transpose_rows, (xb.reshape(-1), ob.reshape(rows, sizes[-1]),
                                         np.array([1] * pad + outer, np.int64), np.array([0] * pad + strides,
                                                                                         np.int64)),
                  rows, x.size)
        return out
    return _contig(t)


for _v in (1, 13, 21, 23, 24, 25):
    register_op("Transpose", since=_v)(build_transpose)


# --- Split -----------------------------------------------------------------------------------------------------
def split_attributes(node):
    """(axis, the `split` attribute, num_outputs or None, whether `split` comes as an input) of a Split node."""
    split_attr = [int(s) for s in attr(node, "split", [])] if node.opset < 13 else []
    num_outputs = attr(node, "num_outputs") if node.opset >= 18 else None
    # Split-1 and Split-13+ take `split` as an optional input. Split-18 with neither `split` nor num_outputs (the
    # spec wants one) splits equally as onnxruntime's kernel does, where onnxruntime's loader lets it through
    return (int(attr(node, "axis", 0)), split_attr, None if num_outputs is None else int(num_outputs),
            node.opset >= 13 or node.opset < 2)


def split_sizes(dim: int, n: int, split: list[int] | None, num_outputs: int | None) -> list[int]:
    if split:
        sizes = split
    elif num_outputs is not None:
        if num_outputs != n:
            raise ValueError(f"Split: num_outputs {num_outputs} differs from the node's {n} outputs")
        if num_outputs > dim:
            raise ValueError(f"Split: invalid num_outputs value of {num_outputs}; the split dimension is {dim}")
        chunk = -(-dim // num_outputs)
        sizes = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
        if sizes[-1] <= 0:
            raise ValueError(f"Split: cannot split a dimension of {dim} into {num_outputs} outputs of {chunk}")
    else:
        if dim % n:
            raise ValueError(f"Split: the input cannot be split evenly into {n} outputs along a dimension of {dim}")
        sizes = [dim // n] * n
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ValueError(f"Split: invalid split {sizes} of a dimension of {dim} into {n} outputs")
    return sizes


def build_split(node):
    if not _tensor_inputs(node) or not node.outputs:
        return None
    n = len(node.outputs)
    axis, split_attr, num_outputs, split_input = split_attributes(node)

    def run(x, split=None):
        a = _axis(axis, x.ndim, "Split")
        given = _ints(split) if split_input and split is not None else []
        if split is not None and num_outputs is not None:
            raise ValueError("Split: the input 'split' and the attribute 'num_outputs' cannot both be given")
        sizes = split_sizes(x.shape[a], n, given or split_attr, num_outputs)
        outs, start = [], 0
        index = [slice(None)] * x.ndim
        for s in sizes:
            index[a] = slice(start, start + s)
            outs.append(_contig(x[tuple(index)]))
            start += s
        return tuple(outs)
    return run


for _v in (1, 2, 11, 13, 18):
    register_op("Split", since=_v)(build_split)


# --- Slice -----------------------------------------------------------------------------------------------------
def slice_index(shape, starts, ends, axes, steps, with_steps: bool) -> tuple:
    """The numpy index of an ONNX Slice, clamped as onnxruntime does (SliceOp::PrepareForCompute)."""
    rank = len(shape)
    if len(ends) != len(starts) or (axes is not None and len(axes) != len(starts)) or \
            (steps is not None and len(steps) != len(starts)):
        raise ValueError("Slice: starts, ends, axes and steps must have the same length")
    if axes is None:
        axes = list(range(len(starts)))
    index = [slice(None)] * rank
    seen = set()
    for i, ax in enumerate(axes):
        a = ax + rank if ax < 0 else ax
        if not 0 <= a < rank:
            raise ValueError(f"Slice: axis {ax} is outside of the tensor's {rank} dimensions")
        if a in seen:
            raise ValueError(f"Slice: axes {list(axes)} have duplicates")
        seen.add(a)
        dim = shape[a]
        step = steps[i] if steps is not None else 1
        if step == 0:
            raise ValueError("Slice: a step cannot be 0")
        start, end = starts[i], ends[i]
        if start < 0:
            start += dim
        if not with_steps:  # Slice-1: no steps, start and end clamped to [0, dim]
            start = min(max(start, 0), dim)
            end = min(max(end + dim if end < 0 else end, 0), dim)
            index[a] = slice(start, max(end, start))
            continue
        start = min(max(start, 0), dim - 1) if step < 0 else min(max(start, 0), dim)
        if end in (INT32_MAX, INT64_MAX):  # onnxruntime: slice to the end in the step's direction
            end = -1 if step < 0 else dim
        else:
            if end < 0:
                end += dim
            end = min(max(end, -1), dim) if step < 0 else min(max(end, 0), dim)
        count = (end - start + step - 1) // step if step > 0 else (start - end - step - 1) // (-step)
        if count <= 0:
            index[a] = slice(0, 0)
        else:
            stop = start + count * step
            index[a] = slice(start, stop if stop >= 0 else None, step)
    return tuple(index)


def slice1_attributes(node):
    """(starts, ends, axes or None) of a Slice-1 node (attributes, one input), or None when they are missing."""
    if len(node.inputs) != 1 or attr(node, "starts") is None or attr(node, "ends") is None:
        return None
    axes = attr(node, "axes")
    return ([int(s) for s in attr(node, "starts")], [int(s) for s in attr(node, "ends")],
            None if axes is None else [int(a) for a in axes])


def slice_indexer(node):
    """A Slice node's (any opset) `index(shape, *inputs after the data)`: slice_index's index of the part it takes of
    a tensor of `shape`; None where the node lacks what it needs (the CPU and CUDA providers' Slice)."""
    if node.opset < 10:  # Slice-1: starts/ends/axes attributes
        given = slice1_attributes(node)
        if given is None:
            return None
        starts, ends, axes = given
        return lambda shape: slice_index(shape, starts, ends, axes, None, False)
    if len(node.inputs) < 3:
        return None

    def index(shape, starts, ends, axes=None, steps=None):
        return slice_index(shape, _ints(starts), _ints(ends), None if axes is None else _ints(axes),
                           None if steps is None else _ints(steps), True)
    return index


def build_slice(node):
    index = slice_indexer(node) if _tensor_inputs(node) else None
    if index is None:
        return None
    return lambda x, *bounds: (_contig(x[index(x.shape, *bounds)]),)


for _v in (1, 10, 11, 13):
    register_op("Slice", since=_v)(build_slice)


# --- Squeeze / Unsqueeze (views) -------------------------------------------------------------------------------
def _squeeze(x, axes):
    if not axes:  # no (or empty) axes: every dimension of size 1
        return np.squeeze(x)
    norm = [_axis(a, x.ndim, "Squeeze") for a in axes]
    for a in norm:
        if x.shape[a] != 1:
            raise ValueError(f"Squeeze: dimension {a} of the input {list(x.shape)} is not 1")
    if len(set(norm)) != len(norm):
        raise ValueError(f"Squeeze: axes {list(axes)} have duplicates")
    return np.squeeze(x, axis=tuple(norm))


def build_squeeze(node):
    if not _tensor_inputs(node):
        return None
    if node.opset < 13:
        axes = attr(node, "axes")
        axes = [] if axes is None else [int(a) for a in axes]
        return lambda x: (_squeeze(x, axes),)
    return lambda x, axes=None: (_squeeze(x, [] if axes is None else _ints(axes)),)


def _unsqueeze(x, axes):
    out_rank = x.ndim + len(axes)
    norm = [_axis(a, out_rank, "Unsqueeze") for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"Unsqueeze: axes {list(axes)} have a duplicate axis")
    return np.expand_dims(x, tuple(norm)) if norm else x.view()


def build_unsqueeze(node):
    if not _tensor_inputs(node):
        return None
    if node.opset < 13:
        axes = attr(node, "axes")
        if axes is None:
            return None
        axes = [int(a) for a in axes]
        return lambda x: (_unsqueeze(x, axes),)
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    return lambda x, axes: (_unsqueeze(x, _ints(axes)),)


for _v in (1, 11, 13, 21, 23, 24, 25):
    register_op("Squeeze", since=_v)(build_squeeze)
    register_op("Unsqueeze", since=_v)(build_unsqueeze)


# --- Identity --------------------------------------------------------------------------------------------------
def build_identity(node):
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        return None

    def run(x):
        # tensors pass as they are (no copy); a sequence as a new list of the same tensors (a later op that
        # appends to one list must not change the other); an empty optional (None) stays None
        return (list(x) if isinstance(x, list) else x,)
    # of a tensor, the output is the input: the executor's straight-line runner names it so without a call
    run.passes_through = isinstance(node.inputs[0].type if node.inputs[0] is not None else None, TensorType)
    return run


for _v in (1, 13, 14, 16, 19, 21, 23, 24, 25):
    register_op("Identity", since=_v)(build_identity)


# --- Expand / Tile ---------------------------------------------------------------------------------------------
def build_expand(node):
    if not _tensor_inputs(node) or len(node.inputs) != 2:
        return None

    def run(x, shape):
        return (np.broadcast_to(x, expand_shape(x.shape, _ints(shape))).copy(),)
    return run


def expand_shape(shape, target) -> tuple[int, ...]:
    """Expand's output shape: `shape` (the input's) broadcast with `target` (ints); ValueError naming the problem."""
    target = tuple(target)
    if any(s < 0 for s in target):
        raise ValueError(f"Expand: invalid shape {list(target)}")
    try:
        return np.broadcast_shapes(tuple(shape), target)
    except ValueError:
        raise ValueError(f"Expand: the input shape {list(shape)} cannot broadcast to {list(target)}") from None


for _v in (8, 13):
    register_op("Expand", since=_v)(build_expand)


def build_tile(node):
    if not _tensor_inputs(node):
        return None
    if node.opset < 6:  # Tile-1: (input, tiles, axis), repeats one axis
        if len(node.inputs) != 3:
            return None

        def run1(x, tiles, axis):
            return (_tile(x, tile1_repeats(x.ndim, tiles, axis)),)
        return run1
    if len(node.inputs) != 2:
        return None
    return lambda x, repeats: (_tile(x, _ints(repeats)),)


def tile1_repeats(rank: int, tiles, axis) -> list[int]:
    """Tile-1's (tiles, axis) inputs as the repeats of each axis of a tensor of `rank`."""
    reps = [1] * rank
    reps[_axis(int(_scalar_of(axis, "Tile: axis")), rank, "Tile")] = int(_scalar_of(tiles, "Tile: tiles"))
    return reps


def tile_repeats(rank: int, reps: list[int]) -> list[int]:
    """`reps`, checked as Tile's repeats of a tensor of `rank`: one per axis, none negative."""
    if len(reps) != rank:
        raise ValueError(f"Tile: 'repeats' has {len(reps)} values for an input of rank {rank}")
    if any(r < 0 for r in reps):
        raise ValueError(f"Tile: repeats {reps} must be non-negative")
    return reps


def _tile(x, reps):
    reps = tile_repeats(x.ndim, reps)
    return np.tile(x, reps) if x.ndim else x.copy()


for _v in (1, 6, 13):
    register_op("Tile", since=_v)(build_tile)


# --- Pad -------------------------------------------------------------------------------------------------------
PAD_MODES = ("constant", "reflect", "edge")


def pad(x, pads, mode, value, axes=None):
    """onnxruntime's Pad: negative pads crop first, then the remaining pads are added by `mode`."""
    rank = x.ndim
    if rank == 0:
        raise ValueError("Pad: the input tensor has no dimensions")
    if axes is None:
        axes = list(range(rank))
    else:
        axes = [_axis(a, rank, "Pad") for a in axes]  # a repeated axis takes its last pads, as in onnxruntime
    k = len(axes)
    if len(pads) != 2 * k:
        raise ValueError(f"Pad: 'pads' has {len(pads)} values, expected {2 * k}")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + k]
    crop = []
    for a in range(rank):
        lo, hi = max(-begin[a], 0), x.shape[a] - max(-end[a], 0)
        if hi < lo:
            raise ValueError(f"Pad: pads {list(pads)} crop more than the input's dimension {a} ({x.shape[a]})")
        crop.append(slice(lo, hi))
    begin = [max(b, 0) for b in begin]
    end = [max(e, 0) for e in end]
    empty_input = x.size == 0
    x = x[tuple(crop)]
    if mode == "constant":
        out = np.full([x.shape[a] + begin[a] + end[a] for a in range(rank)], value, dtype=x.dtype)
        out[tuple(slice(begin[a], begin[a] + x.shape[a]) for a in range(rank))] = x
        return out
    if mode == "wrap" and empty_input:
        raise ValueError("Pad: 'wrap' mode cannot pad an empty input")
    if not empty_input and x.size == 0:
        raise ValueError(f"Pad: '{mode}' mode cannot pad an input cropped to nothing")
    for a in range(rank):
        b, e, n = begin[a], end[a], x.shape[a]
        if b == 0 and e == 0:
            continue
        if n == 0:
            raise ValueError(f"Pad: cannot use '{mode}' mode to pad dimension {a}, which is empty "
                             f"(after cropping)")
        idx = np.arange(-b, n + e)
        if mode == "edge":
            idx = np.clip(idx, 0, n - 1)
        elif mode == "wrap":
            idx = idx % n
        else:  # reflect, without repeating the edge: the pads cannot exceed n - 1
            if b > n - 1 or e > n - 1:
                raise ValueError(f"Pad: 'reflect' pads ({b}, {e}) exceed the most allowed ({n - 1}) along "
                                 f"axis {a}")
            idx = np.abs(idx)
            idx = np.where(idx > n - 1, 2 * (n - 1) - idx, idx)
        x = np.take(x, idx, axis=a)
    return _contig(x)


def build_pad(node):
    if not _tensor_inputs(node) or not node.inputs:
        return None
    mode = attr(node, "mode", "constant")
    if mode not in PAD_MODES and not (mode == "wrap" and node.opset >= 19):
        return None
    if node.opset < 11:  # pads (Pad-1: paddings) and value are attributes
        pads = attr(node, "paddings" if node.opset < 2 else "pads")
        if pads is None or len(node.inputs) != 1:
            return None
        pads = [int(p) for p in pads]
        fval = float(attr(node, "value", 0.0))

        def run_attr(x):
            value = _zero(x.dtype) if x.dtype == object else np.array(fval).astype(x.dtype)
            return (pad(x, pads, mode, value),)
        return run_attr
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    with_axes = node.opset >= 18

    def run(x, pads, constant_value=None, axes=None):
        value = _zero(x.dtype)
        if constant_value is not None and mode == "constant":
            cv = np.asarray(constant_value)
            if cv.size > 1:
                raise ValueError("Pad: constant_value must be a scalar (one element)")
            if cv.size == 1:
                value = cv.reshape(-1)[0]
        return (pad(x, _ints(pads), mode, value, _ints(axes) if with_axes and axes is not None else None),)
    return run


for _v in (1, 2, 11, 13, 18, 19, 21, 23, 24, 25):
    register_op("Pad", since=_v)(build_pad)


# --- Shape / Size ----------------------------------------------------------------------------------------------
def build_shape(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    start, end = (int(attr(node, "start", 0)), attr(node, "end")) if node.opset >= 15 else (0, None)
    end = None if end is None else int(end)
    # Python slicing clamps exactly as Shape-15 does (negative indices count from the back, then clamp)
    return lambda x: (np.array(x.shape[start:end], dtype=np.int64),)


for _v in (1, 13, 15, 19, 21, 23, 24, 25):
    register_op("Shape", since=_v)(build_shape)


def build_size(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    return lambda x: (np.array(x.size, dtype=np.int64),)


for _v in (1, 13, 19, 21, 23, 24, 25):
    register_op("Size", since=_v)(build_size)


# --- ConstantOfShape -------------------------------------------------------------------------------------------
def build_constant_of_shape(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    proto = attr(node, "value")
    if proto is None:
        value = np.zeros(1, np.float32)
    elif isinstance(proto, TensorProto):
        value = numpy_helper.to_array(proto).reshape(-1)
        if value.size != 1:
            return None
    else:
        return None
    fill = value[0]

    def run(shape):
        dims = _ints(shape)
        if any(d < 0 for d in dims):
            raise ValueError(f"ConstantOfShape: invalid shape {dims}")
        return (np.full(dims, fill, dtype=value.dtype),)
    return run


for _v in (9, 20, 21, 23, 24, 25):
    register_op("ConstantOfShape", since=_v)(build_constant_of_shape)


# --- Range -----------------------------------------------------------------------------------------------------
RANGE_TYPES = frozenset({T.FLOAT, T.DOUBLE, T.INT16, T.INT32, T.INT64})
RANGE27_TYPES = RANGE_TYPES | {T.FLOAT16, T.BFLOAT16}
_STASH = {T.FLOAT: np.dtype(np.float32), T.DOUBLE: np.dtype(np.float64)}


def _range_args(start, limit, delta, allowed):
    s, lim, d = (np.asarray(start), np.asarray(limit), np.asarray(delta))
    for name, a in (("start", s), ("limit", lim), ("delta", d)):
        if a.size != 1 or a.ndim > 1:
            raise ValueError(f"Range: {name} must be a scalar, got shape {list(a.shape)}")
    if not s.dtype == lim.dtype == d.dtype or s.dtype not in allowed:
        raise ValueError(f"Range: unsupported or mixed input dtypes {s.dtype}, {lim.dtype}, {d.dtype}")
    s, lim, d = s.reshape(-1)[0], lim.reshape(-1)[0], d.reshape(-1)[0]
    if d == 0:
        raise ValueError("Range: delta cannot be zero")
    return s, lim, d


def build_range(node):
    if not _tensor_inputs(node) or len(node.inputs) != 3:
        return None
    elems = {v.type.elem_type for v in node.inputs if v is not None and isinstance(v.type, TensorType)}
    if node.opset >= 27:
        if elems - RANGE27_TYPES:
            return None
        stash = _STASH.get(int(attr(node, "stash_type", T.FLOAT)))
        if stash is None:
            return None
        allowed = {np_dtype(t) for t in RANGE27_TYPES}

        def run27(start, limit, delta):
            # as the ONNX reference computes it: start + i * delta in the stash precision for float16/bfloat16
            s, lim, d = _range_args(start, limit, delta, allowed)
            dtype = s.dtype
            if dtype.itemsize == 2 and dtype.kind != "i":
                return (np.arange(s.astype(stash).item(), float(lim), float(d), dtype=stash).astype(dtype),)
            return (np.arange(s.item(), lim.item(), d.item()).astype(dtype),)
        return run27
    if elems - RANGE_TYPES:
        return None
    allowed = {np_dtype(t) for t in RANGE_TYPES}

    def run(start, limit, delta):
        s, lim, d = _range_args(start, limit, delta, allowed)
        dtype = s.dtype
        # n = ceil((limit - start) / delta): in double for floats (as onnxruntime), exactly for integers (a double
        # quotient of int64 bounds can round down past a whole step)
        if dtype.kind == "f":
            out = np.empty(max(math.ceil((float(lim) - float(s)) / float(d)), 0), dtype)
            kmove.range_accumulate(out, s, d)  # each element the previous plus delta, rounded
            return (out,)
        n = max(-((int(s) - int(lim)) // int(d)), 0)
        # integers: the running sum wraps as start + i * delta does
        return ((int(s) + np.arange(n, dtype=np.int64) * int(d)).astype(dtype),)
    return run


for _v in (11, 27):
    register_op("Range", since=_v)(build_range)


# --- DepthToSpace / SpaceToDepth -------------------------------------------------------------------------------
def build_depth_to_space(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    bs = attr(node, "blocksize")
    mode = attr(node, "mode", "DCR") if node.opset >= 11 else "DCR"
    if bs is None or mode not in ("DCR", "CRD"):
        return None
    bs = int(bs)

    def run(x):
        if x.ndim != 4:
            raise ValueError(f"DepthToSpace: the input must have rank 4, got {list(x.shape)}")
        b, c, h, w = x.shape
        if bs <= 0 or c % (bs * bs):
            raise ValueError(f"DepthToSpace: {c} channels are not divisible by blocksize {bs} squared")
        if mode == "DCR":
            t = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        return (np.ascontiguousarray(t).reshape(b, c // (bs * bs), h * bs, w * bs),)
    return run


for _v in (1, 11, 13, 28):
    register_op("DepthToSpace", since=_v)(build_depth_to_space)


def build_space_to_depth(node):
    if not _tensor_inputs(node) or len(node.inputs) != 1:
        return None
    bs = attr(node, "blocksize")
    mode = attr(node, "mode", "DCR") if node.opset >= 28 else "DCR"
    if bs is None or mode not in ("DCR", "CRD"):
        return None
    bs = int(bs)

    def run(x):
        if x.ndim != 4:
            raise ValueError(f"SpaceToDepth: the input must have rank 4, got {list(x.shape)}")
        b, c, h, w = x.shape
        if bs <= 0 or h % bs or w % bs:
            raise ValueError(f"SpaceToDepth: spatial dims {h}x{w} are not divisible by blocksize {bs}")
        t = x.reshape(b, c, h // bs, bs, w // bs, bs)
        t = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
        return (np.ascontiguousarray(t).reshape(b, c * bs * bs, h // bs, w // bs),)
    return run


for _v in (1, 13, 28):
    register_op("SpaceToDepth", since=_v)(build_space_to_depth)


# --- Trilu -----------------------------------------------------------------------------------------------------
@register_op("Trilu", since=14)
def build_trilu(node):
    if not _tensor_inputs(node) or not node.inputs:
        return None
    upper = int(attr(node, "upper", 1)) != 0

    def run(x, k=None):
        if x.ndim < 2:
            raise ValueError(f"Trilu: the input must have rank >= 2, got {list(x.shape)}")
        kk = 0 if k is None else int(_scalar_of(k, "Trilu: k"))
        n, m = x.shape[-2:]
        diag = np.arange(m)[None, :] - np.arange(n)[:, None]  # column - row
        drop = diag < kk if upper else diag > kk
        out = x.copy(order="C")
        out[..., drop] = _zero(x.dtype)
        return (out,)
    return run
