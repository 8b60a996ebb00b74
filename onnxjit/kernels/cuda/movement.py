"""Data-movement ops of the CUDA provider: Transpose, Concat, Slice, Gather, Reshape, Flatten, Squeeze, Unsqueeze,
Expand, Identity, Split, Pad, Tile. (Shape and Size, which read no device memory: shape.py.)

Elements are moved as unsigned integers of their size (bool, int8-int64, uint8-uint64, float16, float32, float64:
four compiled variants per kernel). One strided-copy kernel serves Transpose, Concat, Slice, Split and Expand:
it walks an iteration shape of up to MAXR dims (passed as tuples, size-1 dims dropped and dims contiguous in both
source and destination merged first, so higher ranks work when they merge down to MAXR), reading at
src_off + sum(c * src_strides) and writing at dst_off + sum(c * dst_strides) (element strides, negative for
Slice's negative steps, 0 for Expand's broadcast dims). Pad (every mode, negative pads crop) and Tile map output
coordinates to input ones in their own kernels; Gather reads per-index rows.

Shapes, starts, axes, pads and repeats are host inputs (read when the step runs). Reshape, Flatten, Squeeze,
Unsqueeze and Identity return views of their C-contiguous input, no kernel.

Builders decline (None) an input whose type is unknown or not a fixed-size numeric/bool tensor (strings,
bfloat16, float8, int4, complex, sequences), Gather indices that are not int32/int64, a Pad mode the opset does
not define, a known rank above MAXR where a kernel runs, and the attribute forms the CPU provider declines too.
Gather indices out of range raise when the indices are a constant (checked on the host); computed ones cannot
raise on the device: their output rows are zeros (onnxruntime raises).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda
from onnx import TensorProto as T

from onnxjit.ir.types import TensorType
from onnxjit.kernels.cuda.device import launch_1d
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.movement import (_ints, _squeeze, _unsqueeze, expand_shape, merged_transpose, slice_indexer,
                                  split_attributes, split_sizes, tile1_repeats, tile_repeats)
from onnxjit.ops.nn import wanted_outputs
from onnxjit.ops.registry import attr, input_tensor_types
from onnxjit.ops.shape import reshape_target

MAXR = 6  # most dims of a kernel's iteration shape
DATA_TYPES = frozenset({T.BOOL, T.INT8, T.INT16, T.INT32, T.INT64, T.UINT8, T.UINT16, T.UINT32, T.UINT64,
                        T.FLOAT16, T.FLOAT, T.DOUBLE})
INDEX_TYPES = frozenset({T.INT32, T.INT64})
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


# --- helpers ---------------------------------------------------------------------------------------------------
def _data_ok(node, indices=(0,)) -> bool:
    """The inputs at `indices` are present tensors of a known DATA_TYPES dtype."""
    types = input_tensor_types(node)
    return all(i < len(types) and types[i] is not None and types[i].elem_type in DATA_TYPES for i in indices)


def _rank_ok(node, i=0) -> bool:
    """Input i's rank is unknown or at most MAXR."""
    t = node.inputs[i].type if i < len(node.inputs) and node.inputs[i] is not None else None
    return not isinstance(t, TensorType) or t.shape is None or len(t.shape) <= MAXR


def _shape(a) -> tuple:
    return tuple(int(d) for d in a.shape)


def _c_strides(shape) -> list[int]:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= shape[d]
    return out


def _bits(a):
    """A flat view of device array `a` as unsigned integers of its element size."""
    uint = _UINT.get(a.dtype.itemsize)
    if uint is None or a.dtype.kind not in "biuf":
        raise TypeError(f"CUDAExecutionProvider: cannot move elements of dtype {a.dtype}")
    return a.reshape((int(a.size),)).view(uint)


def _pad_tuple(values, fill) -> tuple:
    values = [int(v) for v in values]
    if len(values) > MAXR:
        raise ValueError(f"CUDAExecutionProvider: a data-movement kernel handles at most {MAXR} dims, got "
                         f"{len(values)}")
    return tuple([fill] * (MAXR - len(values)) + values)


def _compact(shape, *stride_lists):
    """The iteration shape with size-1 dims dropped and neighbouring dims merged where every stride list walks
    them as one."""
    dims = [(shape[d], [s[d] for s in stride_lists]) for d in range(len(shape)) if shape[d] != 1]
    merged: list = []
    for size, strides in dims:
        if merged and all(ps == s * size for ps, s in zip(merged[-1][1], strides)):
            merged[-1] = (merged[-1][0] * size, strides)
        else:
            merged.append((size, strides))
    return [m[0] for m in merged], [[m[1][k] for m in merged] for k in range(len(stride_lists))]


@cuda.jit
def _strided_copy(src, dst, total, shape, sstr, soff, dstr, doff):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        rem = i
        s = soff
        d = doff
        for ax in range(MAXR - 1, -1, -1):
            c = rem % shape[ax]
            rem //= shape[ax]
            s += c * sstr[ax]
            d += c * dstr[ax]
        dst[d] = src[s]


@cuda.jit
def _tile(src, dst, total, oshape, ishape, sstr):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        rem = i
        s = 0
        for ax in range(MAXR - 1, -1, -1):
            c = rem % oshape[ax]
            rem //= oshape[ax]
            s += (c % ishape[ax]) * sstr[ax]
        dst[i] = src[s]


@cuda.jit
def _pad(src, dst, total, oshape, begin, inner, crop, sstr, mode, value):
    """Output coordinate c of dim ax is c - begin[ax] in the cropped input (inner[ax] long, starting at crop[ax]):
    outside it, `value` (mode 0) or the edge (1), the reflection without the edge (2), the wrap-around (3)."""
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        rem = i
        s = 0
        inside = True
        for ax in range(MAXR - 1, -1, -1):
            c = rem % oshape[ax]
            rem //= oshape[ax]
            j = c - begin[ax]
            n = inner[ax]
            if j < 0 or j >= n:
                if mode == 0:
                    inside = False
                elif mode == 1:
                    j = 0 if j < 0 else n - 1
                elif mode == 2:
                    if j < 0:
                        j = -j
                    if j > n - 1:
                        j = 2 * (n - 1) - j
                else:
                    j = j % n
            s += (j + crop[ax]) * sstr[ax]
        if inside:
            dst[i] = src[s]
        else:
            dst[i] = value


@cuda.jit
def _gather(src, dst, total, n_idx, inner, dim, idx):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        o = i // (n_idx * inner)
        rem = i - o * n_idx * inner
        j = rem // inner
        t = rem - j * inner
        v = idx[j]
        if v < 0:
            v += dim
        if v >= 0 and v < dim:
            dst[i] = src[(o * dim + v) * inner + t]
        else:
            dst[i] = 0


def strided_copy(device, src, dst, shape, sstr, soff, dstr, doff) -> None:
    """dst[doff + c . dstr] = src[soff + c . sstr] for every coordinate c of `shape` (flat element offsets)."""
    total = math.prod(shape)
    if not total:
        return
    shape, (sstr, dstr) = _compact(list(shape), list(sstr), list(dstr))
    _strided_copy[launch_1d(total) + (device.stream,)](
        _bits(src), _bits(dst), total, _pad_tuple(shape, 1), _pad_tuple(sstr, 0), int(soff), _pad_tuple(dstr, 0),
        int(doff))


def expand_on_device(device, x, shape):
    """x broadcast (numpy rules) to `shape`, as a new C-contiguous device array."""
    shape = tuple(int(d) for d in shape)
    out = device.empty(shape, x.dtype)
    xs = _shape(x)
    xstr = _c_strides(xs)
    pad = len(shape) - len(xs)
    sstr = [0 if d < pad or xs[d - pad] == 1 else xstr[d - pad] for d in range(len(shape))]
    strided_copy(device, x, out, shape, sstr, 0, _c_strides(shape), 0)
    return out


# --- Transpose -------------------------------------------------------------------------------------------------
def build_transpose(node, device):
    if len(node.inputs) != 1 or not _data_ok(node):
        return None
    perm = attr(node, "perm")
    perm = None if perm is None else tuple(int(p) for p in perm)

    def run(x):
        shape = _shape(x)
        p = tuple(range(len(shape) - 1, -1, -1)) if perm is None else perm
        if sorted(p) != list(range(len(shape))):
            raise ValueError(f"Transpose: perm {list(p)} is not a permutation of the {len(shape)} axes of the input")
        out = device.empty(tuple(shape[a] for a in p), x.dtype)
        sizes, mp = merged_transpose(shape, p)
        in_str = _c_strides(sizes)
        oshape = [sizes[a] for a in mp]
        strided_copy(device, x, out, oshape, [in_str[a] for a in mp], 0, _c_strides(oshape), 0)
        return (out,)
    return run


for _v in (1, 13, 21, 23, 24, 25):
    register_cuda_op("Transpose", since=_v)(build_transpose)


# --- Concat ----------------------------------------------------------------------------------------------------
def build_concat(node, device):
    n = len(node.inputs)
    if not n or any(v is None for v in node.inputs) or not _data_ok(node, range(n)) or wanted_outputs(node) != 1:
        return None
    types = input_tensor_types(node)
    if len({t.elem_type for t in types}) != 1:
        return None
    axis = attr(node, "axis", 1 if node.opset < 4 else None)
    if axis is None:
        return None
    axis = int(axis)

    def run(*xs):
        shapes = [_shape(x) for x in xs]
        r = len(shapes[0])
        if not -r <= axis < r:
            raise ValueError(f"Concat: axis {axis} is out of range for inputs of rank {r}")
        a = axis + r if axis < 0 else axis
        for s in shapes:
            if len(s) != r or s[:a] != shapes[0][:a] or s[a + 1:] != shapes[0][a + 1:]:
                raise ValueError(f"Concat: input shapes {[list(s) for s in shapes]} differ outside axis {axis}")
        out_shape = shapes[0][:a] + (sum(s[a] for s in shapes),) + shapes[0][a + 1:]
        out = device.empty(out_shape, xs[0].dtype)
        ostr = _c_strides(out_shape)
        offset = 0
        for x, s in zip(xs, shapes):
            strided_copy(device, x, out, s, _c_strides(s), 0, ostr, offset * ostr[a])
            offset += s[a]
        return (out,)
    return run


for _v in (1, 4, 11, 13):
    register_cuda_op("Concat", since=_v)(build_concat)


# --- Slice -----------------------------------------------------------------------------------------------------
def _slice(device, x, index):
    shape = _shape(x)
    in_str = _c_strides(shape)
    oshape, sstr, soff = [], [], 0
    for d, s in enumerate(index):
        start, stop, step = s.indices(shape[d])
        count = len(range(start, stop, step))
        oshape.append(count)
        sstr.append(in_str[d] * step)
        if count:
            soff += start * in_str[d]
    out = device.empty(tuple(oshape), x.dtype)
    strided_copy(device, x, out, oshape, sstr, soff, _c_strides(oshape), 0)
    return out


def build_slice(node, device):
    if not node.inputs or not _data_ok(node) or not _rank_ok(node):
        return None
    index = slice_indexer(node)
    if index is None:
        return None
    return lambda x, *bounds: (_slice(device, x, index(_shape(x), *bounds)),)


for _v in (1, 10, 11, 13):
    register_cuda_op("Slice", since=_v, host_inputs=(1, 2, 3, 4))(build_slice)


# --- Split -----------------------------------------------------------------------------------------------------
def build_split(node, device):
    if not node.inputs or not node.outputs or not _data_ok(node):
        return None
    n = len(node.outputs)
    axis, split_attr, num_outputs, split_input = split_attributes(node)

    def run(x, split=None):
        shape = _shape(x)
        r = len(shape)
        if not -r <= axis < r:
            raise ValueError(f"Split: axis {axis} is out of range for an input of rank {r}")
        a = axis + r if axis < 0 else axis
        if split is not None and num_outputs is not None:
            raise ValueError("Split: the input 'split' and the attribute 'num_outputs' cannot both be given")
        given = _ints(split) if split_input and split is not None else []
        sizes = split_sizes(shape[a], n, given or split_attr, num_outputs)
        in_str = _c_strides(shape)
        outs, start = [], 0
        for s in sizes:
            oshape = shape[:a] + (s,) + shape[a + 1:]
            out = device.empty(oshape, x.dtype)
            strided_copy(device, x, out, oshape, in_str, start * in_str[a], _c_strides(oshape), 0)
            outs.append(out)
            start += s
        return tuple(outs)
    return run


for _v in (1, 2, 11, 13, 18):
    register_cuda_op("Split", since=_v, host_inputs=(1,))(build_split)


# --- Gather ----------------------------------------------------------------------------------------------------
def build_gather(node, device):
    if len(node.inputs) != 2 or any(v is None for v in node.inputs) or not _data_ok(node):
        return None
    it = input_tensor_types(node)[1]
    if it is None or it.elem_type not in INDEX_TYPES:
        return None
    axis = int(attr(node, "axis", 0))
    # constant indices (embedding lookups, the usual case) are checked on the host as onnxruntime checks them;
    # others cannot raise on the device (their out-of-range rows are zeros)
    const = node.inputs[1].const
    span = (int(const.min()), int(const.max())) if const is not None and const.size else None

    def run(data, indices):
        shape = _shape(data)
        r = len(shape)
        if not -r <= axis < r:
            raise ValueError(f"Gather: axis {axis} is out of range for an input of rank {r}")
        a = axis + r if axis < 0 else axis
        if span is not None and not (-shape[a] <= span[0] and span[1] < shape[a]):
            bad = span[0] if span[0] < -shape[a] else span[1]
            raise ValueError(f"Gather: indices element out of data bounds, idx={bad} must be within the inclusive "
                             f"range [{-shape[a]},{shape[a] - 1}] (axis {axis} of data of shape {list(shape)})")
        ishape = _shape(indices)
        out_shape = shape[:a] + ishape + shape[a + 1:]
        out = device.empty(out_shape, data.dtype)
        total = math.prod(out_shape)
        if total:
            n_idx, inner = math.prod(ishape), math.prod(shape[a + 1:])
            _gather[launch_1d(total) + (device.stream,)](_bits(data), _bits(out), total, n_idx, inner, shape[a],
                                                         indices.reshape((n_idx,)))
        return (out,)
    return run


for _v in (1, 11, 13):
    register_cuda_op("Gather", since=_v)(build_gather)


# --- views: Reshape, Flatten, Squeeze, Unsqueeze, Identity ------------------------------------------------------
def _dummy(shape):
    """A zero-strided numpy array of `shape`: the CPU provider's shape helpers run on it for the output shape."""
    return np.broadcast_to(np.empty((), np.uint8), shape)


def _view(x, shape):
    """x reshaped (a view: it holds the memory pool's lease on the buffer, see device.py)."""
    shape = tuple(int(d) for d in shape)
    return x if _shape(x) == shape else x.reshape(shape)


def build_reshape(node, device):
    if not node.inputs or not _data_ok(node):
        return None
    allowzero = int(attr(node, "allowzero", 0)) != 0
    if node.opset < 5:
        if len(node.inputs) != 1 or attr(node, "shape") is None:
            return None
        shape = [int(s) for s in attr(node, "shape")]
        return lambda x: (_view(x, reshape_target(_shape(x), shape, False)),)
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    st = input_tensor_types(node)[1]
    if st is None or st.elem_type != T.INT64:
        return None
    return lambda x, shape: (_view(x, reshape_target(_shape(x), np.asarray(shape).reshape(-1), allowzero)),)


for _v in (1, 5, 13, 14, 19, 21):
    register_cuda_op("Reshape", since=_v, host_inputs=(1,))(build_reshape)


def build_flatten(node, device):
    if len(node.inputs) != 1 or not _data_ok(node):
        return None
    axis = int(attr(node, "axis", 1))

    def run(x):
        shape = _shape(x)
        a = axis + len(shape) if axis < 0 else axis
        if not 0 <= a <= len(shape):
            raise ValueError(f"Flatten: axis {axis} is out of range for an input of rank {len(shape)}")
        return (_view(x, (math.prod(shape[:a]), math.prod(shape[a:]))),)
    return run


for _v in (1, 9, 11, 13, 21):
    register_cuda_op("Flatten", since=_v)(build_flatten)


def build_squeeze(node, device):
    if not node.inputs or not _data_ok(node):
        return None
    if node.opset < 13:
        axes = [int(a) for a in attr(node, "axes", None) or []]
        return lambda x: (_view(x, _squeeze(_dummy(_shape(x)), axes).shape),)
    return lambda x, axes=None: (_view(x, _squeeze(_dummy(_shape(x)), [] if axes is None else _ints(axes)).shape),)


def build_unsqueeze(node, device):
    if not node.inputs or not _data_ok(node):
        return None
    if node.opset < 13:
        axes = attr(node, "axes")
        if axes is None:
            return None
        axes = [int(a) for a in axes]
        return lambda x: (_view(x, _unsqueeze(_dummy(_shape(x)), axes).shape),)
    if len(node.inputs) != 2 or node.inputs[1] is None:
        return None
    return lambda x, axes: (_view(x, _unsqueeze(_dummy(_shape(x)), _ints(axes)).shape),)


for _v in (1, 11, 13, 21, 23, 24, 25):
    register_cuda_op("Squeeze", since=_v, host_inputs=(1,))(build_squeeze)
    register_cuda_op("Unsqueeze", since=_v, host_inputs=(1,))(build_unsqueeze)


def build_identity(node, device):
    if len(node.inputs) != 1 or len(node.outputs) != 1 or not _data_ok(node):
        return None
    return lambda x: (x,)


for _v in (1, 13, 14, 16, 19, 21, 23, 24, 25):
    register_cuda_op("Identity", since=_v)(build_identity)


# --- Expand / Tile ---------------------------------------------------------------------------------------------
def build_expand(node, device):
    if len(node.inputs) != 2 or not _data_ok(node):
        return None

    return lambda x, shape: (expand_on_device(device, x, expand_shape(_shape(x), _ints(shape))),)


for _v in (8, 13):
    register_cuda_op("Expand", since=_v, host_inputs=(1,))(build_expand)


def _tile_run(device, x, reps):
    shape = _shape(x)
    reps = tile_repeats(len(shape), reps)
    oshape = tuple(d * r for d, r in zip(shape, reps))
    out = device.empty(oshape, x.dtype)
    total = math.prod(oshape)
    if total:
        _tile[launch_1d(total) + (device.stream,)](_bits(x), _bits(out), total, _pad_tuple(oshape, 1),
                                                   _pad_tuple(shape, 1), _pad_tuple(_c_strides(shape), 0))
    return out


def build_tile(node, device):
    if not node.inputs or not _data_ok(node) or not _rank_ok(node):
        return None
    if node.opset < 6:  # Tile-1: (input, tiles, axis)
        if len(node.inputs) != 3:
            return None

        def run1(x, tiles, axis):
            return (_tile_run(device, x, tile1_repeats(len(x.shape), tiles, axis)),)
        return run1
    if len(node.inputs) != 2:
        return None
    return lambda x, repeats: (_tile_run(device, x, _ints(repeats)),)


for _v in (1, 6, 13):
    register_cuda_op("Tile", since=_v, host_inputs=(1, 2))(build_tile)


# --- Pad -------------------------------------------------------------------------------------------------------
def _pad_run(device, x, pads, mode: str, value, axes=None):
    """onnxruntime's Pad (see onnxjit.ops.movement.pad): negative pads crop first, then pads are added."""
    shape = _shape(x)
    rank = len(shape)
    if rank == 0:
        raise ValueError("Pad: the input tensor has no dimensions")
    if axes is None:
        axes = list(range(rank))
    else:
        for a in axes:
            if not -rank <= a < rank:
                raise ValueError(f"Pad: axis {a} is out of range for an input of rank {rank}")
        axes = [a + rank if a < 0 else a for a in axes]
    k = len(axes)
    if len(pads) != 2 * k:
        raise ValueError(f"Pad: 'pads' has {len(pads)} values, expected {2 * k}")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + k]
    crop = [max(-b, 0) for b in begin]
    inner = [shape[a] - crop[a] - max(-end[a], 0) for a in range(rank)]
    if any(n < 0 for n in inner):
        raise ValueError(f"Pad: pads {list(pads)} crop more than the input's dimensions {list(shape)}")
    begin = [max(b, 0) for b in begin]
    end = [max(e, 0) for e in end]
    if mode != "constant":
        if mode == "wrap" and x.size == 0:
            raise ValueError("Pad: 'wrap' mode cannot pad an empty input")
        if x.size and math.prod(inner) == 0:
            raise ValueError(f"Pad: '{mode}' mode cannot pad an input cropped to nothing")
        for a in range(rank):
            b, e, n = begin[a], end[a], inner[a]
            if (b or e) and n == 0:
                raise ValueError(f"Pad: cannot use '{mode}' mode to pad dimension {a}, which is empty")
            if mode == "reflect" and (b > n - 1 or e > n - 1):
                raise ValueError(f"Pad: 'reflect' pads ({b}, {e}) exceed the most allowed ({n - 1}) along axis {a}")
    oshape = tuple(inner[a] + begin[a] + end[a] for a in range(rank))
    out = device.empty(oshape, x.dtype)
    total = math.prod(oshape)
    if total:
        bits = np.asarray(value).astype(x.dtype).reshape(()).view(_UINT[x.dtype.itemsize])[()]
        _pad[launch_1d(total) + (device.stream,)](
            _bits(x), _bits(out), total, _pad_tuple(oshape, 1), _pad_tuple(begin, 0), _pad_tuple(inner, 1),
            _pad_tuple(crop, 0), _pad_tuple(_c_strides(shape), 0), PAD_MODES[mode], bits)
    return out


def build_pad(node, device):
    if not node.inputs or not _data_ok(node) or not _rank_ok(node):
        return None
    mode = attr(node, "mode", "constant")
    if mode not in ("constant", "reflect", "edge") and not (mode == "wrap" and node.opset >= 19):
        return None
    if node.opset < 11:
        pads = attr(node, "paddings" if node.opset < 2 else "pads")
        if pads is None or len(node.inputs) != 1:
            return None
        pads = [int(p) for p in pads]
        fval = float(attr(node, "value", 0.0))
        return lambda x: (_pad_run(device, x, pads, mode, fval),)
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    with_axes = node.opset >= 18

    def run(x, pads, constant_value=None, axes=None):
        value = 0
        if constant_value is not None and mode == "constant":
            cv = np.asarray(constant_value)
            if cv.size > 1:
                raise ValueError("Pad: constant_value must be a scalar (one element)")
            if cv.size == 1:
                value = cv.reshape(-1)[0]
        return (_pad_run(device, x, _ints(pads), mode, value, _ints(axes) if with_axes and axes is not None
                         else None),)
    return run


for _v in (1, 2, 11, 13, 18, 19, 21, 23, 24, 25):
    register_cuda_op("Pad", since=_v, host_inputs=(1, 2, 3))(build_pad)
