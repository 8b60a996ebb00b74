"""Resize (opsets 10 to 19) and Upsample (7, 9) on the CPU provider.

Resize is separable: for each resized axis, a table of taps per output coordinate (source index, weight) is
computed here once per geometry (input shape, scales or sizes, roi) and cached, and the kernels in
`onnxjit.kernels.resize` apply one axis at a time (downscaled axes first, so later passes move less data). Every
mode, coordinate transformation, nearest rounding and antialias filter is then only a different table, for any
rank and any set of resized axes.

The common case, nearest or (non-antialiased) linear over exactly the last two axes (FPN upsampling, image
downscaling), runs instead as one fused pass over output rows (`PlanePass`), from the same tables: separate passes
would write and reread a full-size intermediate array, and a row pass gathers where a fused one copies rows.

The tables follow onnxruntime's CPU kernels to the float: source coordinates in float32 (in double where it
computes in double), its rounding of nearest indices, its linear weights (coordinate clamped into the input),
its cubic coefficients (taps clamped to the edge; exclude_outside renormalizes) and its antialias filter windows
(Pillow's). Output sizes from scales truncate a float32 product; an axis whose scale is 1 is not resampled, and
an output of the input's shape is the input itself (onnxruntime skips both, even for tf_crop_and_resize). One
exception: align_corners from scales maps onto scale * input length, not the truncated output size, as the ONNX
reference and conformance suite do (onnxruntime differs there). tf_crop_and_resize writes extrapolation_value,
after the passes, over each output element one of whose coordinates falls outside the input. Nearest copies
elements (any dtype, viewed as an unsigned integer of its width: exact). Separate passes round linear and cubic
results once per axis where onnxruntime sums all taps at once: equal up to float rounding.

onnxruntime has no kernel for float64 or float16, nor for linear or cubic over other layouts than its 2-D/3-D
ones; the same tables apply there (tests compare with onnx.reference). Linear and cubic over integer types,
which onnxruntime rounds in fixed point differently per layout, are left to the next provider.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from onnxjit.kernels import resize as kresize
from onnxjit.ops.nn import ro, run_units
from onnxjit.ops.registry import attr, input_tensor_types, register_op

F32 = np.float32
FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})
MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TRUNCATE_OR_CEIL = "truncate_or_ceil"  # the nearest rounding before opset 11: ceil when downscaling, else truncate
POLICIES = ("stretch", "not_larger", "not_smaller")
UINT_OF_WIDTH = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
ANTIALIAS_SUPPORT = {"linear": 2.0, "cubic": 4.0}  # the filters' widths at scale 1


@dataclass(frozen=True)
class ResizeAttributes:
    op: str  # "Resize" or "Upsample", for messages
    mode: str
    coordinate_mode: str
    nearest_mode: str
    cubic_coeff_a: float
    exclude_outside: bool
    antialias: bool
    extrapolation_value: float
    axes: tuple | None  # the axes scales/sizes/roi give values for (opset 18), None: all
    policy: str
    min_scale_inclusive: bool  # Upsample: scales >= 1; Resize: scales > 0


@dataclass(frozen=True)
class AxisPass:
    axis: int
    n_out: int
    idx: np.ndarray  # nearest: (n_out,); else (n_out, taps)
    wts: np.ndarray | None  # (n_out, taps) in the data's dtype, None for nearest
    count: np.ndarray | None  # taps used per output coordinate


@dataclass(frozen=True)
class PlanePass:
    """Both of the last two axes resized in one pass (`kernel` over units of output rows): `tables` are the
    kernel's row then column tables (linear: indices and weights as (2, n) arrays, one row per tap)."""
    kernel: object
    tables: tuple
    work_per_element: int


@dataclass(frozen=True)
class ResizePlan:
    out_shape: tuple
    passes: tuple  # AxisPass, in the order they run
    outside: tuple  # (axis, bool mask of the output coordinates outside the input) for tf_crop_and_resize
    plane: PlanePass | None = None  # replaces `passes` where both resized axes are the last two


# --- geometry --------------------------------------------------------------------------------------------------
def _round_half_away(v):
    """std::round of float values (half away from zero), as integers."""
    v = np.asarray(v, dtype=np.float64)
    return (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)


def _full_axes(spec, rank):
    if spec.axes is None:
        return list(range(rank))
    axes = [a + rank if a < 0 else a for a in spec.axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"{spec.op}: axes {list(spec.axes)} are not distinct axes of an input of rank {rank}")
    return axes


def output_geometry(spec, shape, scales, sizes):
    """(output shape, float32 scale per axis, float32 resized length per axis) from scales or sizes (one value per
    axis in `axes`), as onnxruntime computes them: sizes give scales out/in, narrowed to one scale by
    keep_aspect_ratio_policy. The resized length is scale * input length before truncation when scales are given
    (align_corners maps onto it, as the ONNX reference and conformance suite do; onnxruntime uses the truncated
    output size there)."""
    rank = len(shape)
    axes = _full_axes(spec, rank)
    given = scales if scales is not None else sizes
    name = "scales" if scales is not None else "sizes"
    if len(given) != len(axes):
        per = "per axis in axes" if spec.axes is not None else f"per dimension of the rank-{rank} input"
        raise ValueError(f"{spec.op}: {name} has {len(given)} values, expected {len(axes)} (one {per})")
    full = [F32(1)] * rank
    if scales is not None:
        for a, s in zip(axes, scales):
            full[a] = F32(s)
        for s in full:
            if not (s >= 1 if spec.min_scale_inclusive else s > 0):
                bound = ">= 1" if spec.min_scale_inclusive else "> 0"
                raise ValueError(f"{spec.op}: scales must be {bound}, got {[float(v) for v in scales]}")
        out = [int(full[i] * F32(shape[i])) for i in range(rank)]
        return tuple(out), full, [full[i] * F32(shape[i]) for i in range(rank)]
    out = list(shape)
    for a, n in zip(axes, sizes):
        if n < 0:
            raise ValueError(f"{spec.op}: sizes must be >= 0, got {list(sizes)}")
        out[a] = int(n)
    for i in range(rank):
        if shape[i] == 0:
            if out[i] != 0:
                raise ValueError(f"{spec.op}: input dimension {i} is 0, so its output size must be 0, got {out[i]}")
        else:
            full[i] = F32(out[i]) / F32(shape[i])
    if spec.policy != "stretch":
        chosen = [full[a] for a in axes]
        scale = min(chosen) if spec.policy == "not_larger" else max(chosen)
        for a in axes:
            full[a] = scale
            out[a] = int(_round_half_away(scale * F32(shape[a])))
    return tuple(out), full, [F32(n) for n in out]


def full_roi(spec, rank, roi):
    """(starts, ends) per axis from the roi input: 2 values per axis in `axes` (default 0 and 1)."""
    starts, ends = [F32(0)] * rank, [F32(1)] * rank
    if roi is None or roi.size == 0 or spec.coordinate_mode != "tf_crop_and_resize":
        return starts, ends
    axes = _full_axes(spec, rank)
    vals = roi.astype(F32).reshape(-1)
    if vals.size != 2 * len(axes):
        raise ValueError(f"{spec.op}: roi has {vals.size} values, expected {2 * len(axes)} (starts then ends of "
                         f"the {len(axes)} resized axes)")
    for i, a in enumerate(axes):
        starts[a], ends[a] = vals[i], vals[len(axes) + i]
    return starts, ends


def source_coordinates(mode, n_in, n_out, scale, roi_start, roi_end, resized_length=None):
    """Each output coordinate's position in the input (float32), by onnxruntime's formulas and arithmetic;
    align_corners maps onto `resized_length` (default n_out)."""
    x = np.arange(n_out, dtype=F32)
    s, li, lo = F32(scale), F32(n_in), F32(n_out)
    half, one = F32(0.5), F32(1)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + half) / s - half if n_out > 1 else np.zeros(n_out, F32)
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if mode == "align_corners":
        lr = lo if resized_length is None else F32(resized_length)
        return x * (li - one) / (lr - one) if lr != one else np.zeros(n_out, F32)
    if mode == "tf_crop_and_resize":
        if n_out > 1:
            return roi_start * (li - one) + (x * (roi_end - roi_start) * (li - one)) / (lo - one)
        return np.full(n_out, 0.5 * np.float64(F32(roi_start + roi_end)) * np.float64(li - one), dtype=F32)
    if mode == "half_pixel_symmetric":
        adjustment = lo / (s * li)
        offset = (li / F32(2)) * (one - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(F32)
    return (x + half) / s - half  # half_pixel


def nearest_taps(rounding, coords, n_in, downscale):
    c = coords.astype(np.float64)
    if rounding == TRUNCATE_OR_CEIL:
        idx = np.ceil(c) if downscale else np.trunc(c)
    elif rounding == "floor":
        idx = np.floor(c)
    elif rounding == "ceil":
        idx = np.ceil(c)
    else:
        idx = _round_half_away(c)
        if rounding == "round_prefer_floor":
            idx = np.where(c == np.trunc(c) + 0.5, np.floor(c), idx)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def linear_taps(coords, n_in):
    c = np.clip(coords, F32(0), F32(n_in - 1))
    x1 = np.minimum(c.astype(np.int64), n_in - 1)
    x2 = np.minimum(x1 + 1, n_in - 1)
    d1, d2 = np.abs(c - x1.astype(F32)), np.abs(c - x2.astype(F32))
    same = x1 == x2
    d1[same] = d2[same] = F32(0.5)
    return np.stack([x1, x2], axis=1), np.stack([d2, d1], axis=1)


def cubic_coefficients(s, a):
    """Keys' cubic convolution weights of the 4 taps around a point at fraction s (onnxruntime's float32)."""
    one, two = F32(1), F32(2)
    s = np.abs(s)
    return np.stack([
        ((a * (s + one) - F32(5) * a) * (s + one) + F32(8) * a) * (s + one) - F32(4) * a,
        ((a + two) * s - (a + F32(3))) * s * s + one,
        ((a + two) * (one - s) - (a + F32(3))) * (one - s) * (one - s) + one,
        ((a * (two - s) - F32(5) * a) * (two - s) + F32(8) * a) * (two - s) - F32(4) * a,
    ], axis=1)


def cubic_taps(coords, n_in, a, exclude_outside):
    base = np.floor(coords)
    taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)
    coeffs = cubic_coefficients(coords - base, F32(a))
    if exclude_outside:
        coeffs = np.where((taps < 0) | (taps >= n_in), F32(0), coeffs)
        total = ((coeffs[:, 0] + coeffs[:, 1]) + coeffs[:, 2]) + coeffs[:, 3]
        coeffs = coeffs / total[:, None]
    return np.clip(taps, 0, n_in - 1), coeffs


def _filter(kind, a):
    if kind == "linear":
        def linear(v):
            v = abs(v)
            return F32(1) - v if v < F32(1) else F32(0)
        return linear

    def cubic(v):
        v = abs(v)
        if v < F32(1):
            return ((a + F32(2)) * v - (a + F32(3))) * v * v + F32(1)
        if v < F32(2):
            return (((v - F32(5)) * v + F32(8)) * v - F32(4)) * a
        return F32(0)
    return cubic


def antialias_taps(kind, a, coords, n_in, scale, exclude_outside):
    """onnxruntime's (Pillow's) antialias windows: the filter stretched by 1/scale when downscaling, centred on
    each coordinate + 0.5, cut to the input (with exclude_outside the cut-off weights are dropped, else added to
    the edge taps), then normalized. Returns (taps, weights, counts)."""
    filt = _filter(kind, F32(a))
    inv_scale = F32(1) / F32(scale)  # onnxruntime's "scale": input pixels per output pixel
    half_support = F32(ANTIALIAS_SUPPORT[kind]) * F32(0.5)
    support = half_support * inv_scale if inv_scale >= F32(1) else half_support
    step = F32(1) / inv_scale if inv_scale >= F32(1) else F32(1)
    centres = F32(0.5) + coords
    rows = []
    for c in centres:
        lo_real = math.floor(float(F32(c - support)) + 0.5)
        hi_real = math.floor(float(F32(c + support)) + 0.5)
        lo_cut, hi_cut = max(lo_real, 0), min(hi_real, n_in)
        lo, hi = (lo_cut, hi_cut) if exclude_outside else (lo_real, hi_real)
        n = hi - lo
        w = [filt((F32(x + lo) - c + F32(0.5)) * step) for x in range(n)]
        total = F32(0)
        for v in w:
            total = F32(total + v)
        w += [F32(0)] * 2  # the folds below may address one past the window
        if not exclude_outside:
            below = -lo if lo < 0 else 0
            for x in range(below):
                w[below] = F32(w[below] + w[x])
            above = hi - n_in if hi > n_in else 0
            for x in range(n - above, n):
                w[n - above - 1] = F32(w[n - above - 1] + w[x])
            if below or above:
                for x in range(hi_cut - lo_cut):
                    w[x] = w[x + below]
        if total != F32(0) and total != F32(1):
            w = [F32(v / total) for v in w]
        rows.append((lo_cut, w[:max(hi_cut - lo_cut, 0)]))
    width = max(1, max(len(w) for _, w in rows))
    taps = np.zeros((len(rows), width), np.int64)
    wts = np.zeros((len(rows), width), F32)
    counts = np.ones(len(rows), np.int64)  # an empty window (a centre outside the input: extrapolated) reads
    for j, (lo, w) in enumerate(rows):    # one tap of weight 0
        if w:
            counts[j] = len(w)
            taps[j, :len(w)] = np.arange(lo, lo + len(w))
            wts[j, :len(w)] = w
    return taps, wts, counts


def axis_pass(spec, axis, n_in, n_out, scale, resized_length, roi_start, roi_end, dtype):
    """The AxisPass of one resized axis and the mask of its output coordinates outside the input (or None)."""
    coords = source_coordinates(spec.coordinate_mode, n_in, n_out, scale, roi_start, roi_end, resized_length)
    if n_in == 0:
        raise ValueError(f"{spec.op}: cannot resize an empty dimension {axis} to {n_out} elements")
    if spec.mode == "nearest":
        taps = nearest_taps(spec.nearest_mode, coords, n_in, scale < 1)
        p = AxisPass(axis, n_out, ro(taps), None, None)
    else:
        if spec.antialias:
            taps, wts, counts = antialias_taps(spec.mode, spec.cubic_coeff_a, coords, n_in, scale,
                                                      spec.exclude_outside)
        else:
            taps, wts = (linear_taps(coords, n_in) if spec.mode == "linear" else
                         cubic_taps(coords, n_in, spec.cubic_coeff_a, spec.exclude_outside))
            counts = np.full(n_out, taps.shape[1], np.int64)
        p = AxisPass(axis, n_out, ro(taps), ro(wts.astype(dtype)), ro(counts))
    outside = None
    if spec.coordinate_mode == "tf_crop_and_resize":
        mask = (coords < 0) | (coords > F32(n_in - 1))
        outside = mask if mask.any() else None
    return p, outside


def make_plan(spec, shape, scales, sizes, roi, dtype):
    out_shape, full, resized = output_geometry(spec, shape, scales, sizes)
    if out_shape == tuple(shape) or 0 in out_shape:
        return ResizePlan(out_shape, (), ())
    starts, ends = full_roi(spec, len(shape), roi)
    passes, outside = [], []
    for axis, (n_in, n_out, s, length) in enumerate(zip(shape, out_shape, full, resized)):
        if s == F32(1) and n_in == n_out:
            continue  # onnxruntime leaves an axis of scale 1 as it is
        p, mask = axis_pass(spec, axis, n_in, n_out, s, length, starts[axis], ends[axis], dtype)
        passes.append((n_out / n_in, -axis, p))
        if mask is not None:
            outside.append((axis, mask))
    passes.sort(key=lambda t: t[:2])  # shrinking axes first; among equals the last axis first
    passes = tuple(p for _, _, p in passes)
    return ResizePlan(out_shape, passes, tuple(outside), plane_pass(passes, len(shape), spec, shape))


def plane_pass(passes, rank, spec, shape):
    """The fused pass over the last two axes when exactly those are resized, by nearest or by (2-tap) linear;
    else None. Linear blends rows first where H shrinks (each output row then has input rows of its own), else
    columns first, each resampled input row serving the output rows next to it."""
    if sorted(p.axis for p in passes) != [rank - 2, rank - 1] or spec.antialias or spec.mode == "cubic":
        return None
    rows, cols = sorted(passes, key=lambda p: p.axis)
    if spec.mode == "nearest":
        return PlanePass(kresize.nearest_2d, (rows.idx, cols.idx, halving_start(cols.idx)), 1)
    kernel = kresize.bilinear_2d_rows_first if rows.n_out < shape[-2] else kresize.bilinear_2d_cols_first
    col_idx = ro(cols.idx.T)
    halving = halving_start(col_idx[0]) if np.array_equal(col_idx[1], col_idx[0] + 1) else -1
    return PlanePass(kernel, tuple(ro(t.T) for t in (rows.idx, rows.wts)) + (col_idx, ro(cols.wts.T), halving), 4)


def halving_start(idx):
    """s where idx[j] = s + 2 * j for every j (a 2x downscale's source columns), else -1."""
    return int(idx[0]) if np.array_equal(idx, idx[0] + 2 * np.arange(idx.size)) else -1


# --- running ---------------------------------------------------------------------------------------------------
def run_plan(plan, x, extrapolation_value):
    x = np.ascontiguousarray(x)
    if not plan.passes:
        return x if plan.out_shape == x.shape else np.empty(plan.out_shape, dtype=x.dtype)
    nearest = plan.passes[0].wts is None
    cur = x.view(UINT_OF_WIDTH[x.itemsize]) if nearest else x
    if plan.plane is not None:
        cur = _run_plane(plan.plane, cur, plan.out_shape)
    else:
        for p in plan.passes:
            cur = _run_pass(p, cur, nearest)
    y = cur.view(x.dtype) if nearest else cur
    if plan.outside:
        fill = np.array(extrapolation_value).astype(x.dtype)
        for axis, mask in plan.outside:
            y[(slice(None),) * axis + (mask,)] = fill
    return y


def _run_plane(plane, x, out_shape):
    """`plane` over x viewed as (planes, H, W), in parallel over output rows."""
    planes = math.prod(x.shape[:-2])
    oh, ow = out_shape[-2:]
    out = np.empty((planes, oh, ow), dtype=x.dtype)
    run_units(plane.kernel, (ro(x.reshape(planes, x.shape[-2], x.shape[-1])),) + plane.tables + (out,),
              planes * oh, planes * oh * ow * plane.work_per_element)
    return out.reshape(out_shape)


def _run_pass(p, x, nearest):
    """One AxisPass over x (x viewed as (outer, n_in, inner)) into a new array."""
    shape = x.shape
    outer, inner = math.prod(shape[:p.axis]), math.prod(shape[p.axis + 1:])
    args = (p.idx,) if nearest else (p.idx, p.wts, p.count)
    work = outer * p.n_out * inner * (1 if nearest else p.idx.shape[1])
    if inner == 1:
        dst = np.empty((outer, p.n_out), dtype=x.dtype)
        kernel = kresize.gather_last if nearest else kresize.resample_last
        run_units(kernel, (ro(x.reshape(outer, shape[p.axis])),) + args + (dst,), outer, work)
    else:
        dst = np.empty((outer, p.n_out, inner), dtype=x.dtype)
        kernel = kresize.gather_rows if nearest else kresize.resample_rows
        run_units(kernel, (ro(x.reshape(outer, shape[p.axis], inner)),) + args + (dst,), outer * p.n_out, work)
    return dst.reshape(shape[:p.axis] + (p.n_out,) + shape[p.axis + 1:])


def _values(a, dtype):
    """An optional scales/sizes/roi input as a flat array, None when absent or empty."""
    if a is None:
        return None
    a = np.asarray(a).reshape(-1)
    return a.astype(dtype) if a.size else None


def build_resize(node):
    op, opset = node.op_type, node.opset
    types = input_tensor_types(node)
    if not node.inputs or types[0] is None or len(node.outputs) != 1:
        return None
    mode = attr(node, "mode", "nearest")
    if mode not in MODES or (mode == "cubic" and opset < 11):
        return None
    dtype = types[0].dtype
    if mode == "nearest":
        if dtype.kind in "OSU" or dtype.itemsize not in UINT_OF_WIDTH:
            return None
    elif types[0].elem_type not in FLOATS:
        return None  # integer linear/cubic: onnxruntime's fixed-point rounding is not reproduced here
    if opset >= 11:
        coordinate_mode = attr(node, "coordinate_transformation_mode", "half_pixel")
        nearest_mode = attr(node, "nearest_mode", "round_prefer_floor")
    else:
        coordinate_mode, nearest_mode = "asymmetric", TRUNCATE_OR_CEIL
    policy = attr(node, "keep_aspect_ratio_policy", "stretch") if opset >= 18 else "stretch"
    if coordinate_mode not in COORDINATE_MODES or (mode == "nearest" and nearest_mode not in NEAREST_MODES + (
            TRUNCATE_OR_CEIL,)) or policy not in POLICIES:
        return None
    axes = attr(node, "axes") if opset >= 18 else None
    spec = ResizeAttributes(
        op=op, mode=mode, coordinate_mode=coordinate_mode, nearest_mode=nearest_mode,
        cubic_coeff_a=float(attr(node, "cubic_coeff_a", -0.75)),
        exclude_outside=int(attr(node, "exclude_outside", 0)) != 0,
        antialias=opset >= 18 and mode != "nearest" and int(attr(node, "antialias", 0)) != 0,
        extrapolation_value=float(attr(node, "extrapolation_value", 0.0)),
        axes=tuple(int(a) for a in axes) if axes else None, policy=policy,
        min_scale_inclusive=op == "Upsample")
    attr_scales = None
    if op == "Upsample" and opset < 9:
        attr_scales = attr(node, "scales")
        if not attr_scales or len(node.inputs) != 1:
            return None
        attr_scales = tuple(float(s) for s in attr_scales)
    cache = {}

    def run(x, *inputs):
        if attr_scales is not None:
            roi, scales, sizes = None, np.array(attr_scales, F32), None
        elif opset < 11:
            roi, scales, sizes = None, (inputs[0] if inputs else None), None
        else:
            roi, scales, sizes = (list(inputs) + [None] * 3)[:3]
        scales, sizes, roi = _values(scales, F32), _values(sizes, np.int64), _values(roi, F32)
        if scales is not None and sizes is not None:
            raise ValueError(f"{op}: only one of scales and sizes may be given (both are non-empty)")
        if scales is None and sizes is None:
            raise ValueError(f"{op}: either scales or sizes must be given (non-empty)")
        key = (x.shape, x.dtype, None if scales is None else scales.tobytes(),
               None if sizes is None else tuple(sizes.tolist()), None if roi is None else roi.tobytes())
        plan = cache.get(key)
        if plan is None:
            plan = cache[key] = make_plan(spec, x.shape, scales, None if sizes is None else sizes.tolist(), roi,
                                          x.dtype)
        return (run_plan(plan, x, spec.extrapolation_value),)

    return run


for _v in (10, 11, 13, 18, 19):
    register_op("Resize", since=_v)(build_resize)
for _v in (7, 9):
    register_op("Upsample", since=_v)(build_resize)
