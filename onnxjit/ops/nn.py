"""Neural-network ops on the CPU provider (float32/float64): Conv, pooling, BatchNormalization (inference),
Softmax, Dropout (inference).

Attributes become static arguments here; the output geometry (pads, output sizes) is computed per input shape in
Python, cached, and handed to the Numba kernels in `onnxjit.kernels.conv` / `.pool` / `.nn`, which work over 3
spatial dims (1-D and 2-D inputs get unit leading spatial dims, a free reshape). Output sizes and auto_pad follow
onnxruntime's CPU kernels, including where they differ from the ONNX reference (pooling with auto_pad SAME and
dilations, ceil_mode together with auto_pad).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from onnx import TensorProto

from onnxjit.kernels import conv as kconv
from onnxjit.kernels import nn as knn
from onnxjit.kernels import pool as kpool
from onnxjit.kernels.linalg import single_threaded_blas
from onnxjit.ops.registry import attr, input_tensor_types, register_op

FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# grouped convs with at most this many (input channels x output channels) per group run as direct loops
DIRECT_CONV_MAX_CHANNELS = 16
CONV_TILE_BYTES = 1 << 19  # most bytes of one im2col tile
CONV_TILE_MIN_PIXELS = 128  # fewest output pixels of a tile, where the budget allows (GEMM efficiency)
# a kernel call doing less work than this (element operations) runs on the calling thread alone: waking the
# thread pool costs more than it saves
PARALLEL_GRAIN = 1 << 16


def call(kernel, work, *args):
    """kernel(*args), on the calling thread alone when `work` is below PARALLEL_GRAIN."""
    if work >= PARALLEL_GRAIN:
        return kernel(*args)
    prev = numba.get_num_threads()
    if prev == 1:
        return kernel(*args)
    numba.set_num_threads(1)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(prev)


# --- helpers ---------------------------------------------------------------------------------------------------
def float_type(node, indices):
    """The common float elem type of the node's inputs at `indices` (absent optional inputs skipped), or None
    when one is unknown, not a tensor, or the dtypes differ."""
    types = input_tensor_types(node)
    elem = None
    for i in indices:
        if i >= len(node.inputs) or node.inputs[i] is None:
            continue
        t = types[i]
        if t is None or t.elem_type not in FLOATS or (elem is not None and t.elem_type != elem):
            return None
        elem = t.elem_type
    return elem


def wanted_outputs(node) -> int:
    """How many leading outputs are requested (an absent optional output has an empty name)."""
    n = 0
    for i, v in enumerate(node.outputs):
        if v is not None and v.name:
            n = i + 1
    return n


def rank_of(node, i):
    v = node.inputs[i] if i < len(node.inputs) else None
    t = v.type if v is not None else None
    shape = getattr(t, "shape", None)
    return None if shape is None else len(shape)


def _ints(value, n, default):
    v = list(value) if value is not None else []
    return [default] * n if not v else [int(x) for x in v]


def _pad3(vals, fill):
    """A per-spatial-dim list padded in front to 3 dims."""
    return tuple([fill] * (3 - len(vals)) + list(vals))


def _as5d(x, r):
    """(N, C, *spatial[r]) -> (N, C, D, H, W) view."""
    return x.reshape(x.shape[:2] + (1,) * (3 - r) + x.shape[2:])


def conv_geometry(in_sizes, kernel, strides, dilations, pads, auto_pad):
    """onnxruntime's Conv output sizes and head pads; auto_pad SAME uses the dilated kernel (the ONNX spec)."""
    out, head = [], []
    r = len(in_sizes)
    for i in range(r):
        n, k, s, d = in_sizes[i], kernel[i], strides[i], dilations[i]
        dk = d * (k - 1) + 1
        if auto_pad == "NOTSET":
            ph, pt = pads[i], pads[i + r]
            o = (n + ph + pt - dk) // s + 1
        elif auto_pad == "VALID":
            ph = 0
            o = (n - dk) // s + 1
        else:
            o = (n + s - 1) // s
            need = max(0, (o - 1) * s + dk - n)
            ph = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
        if o <= 0:
            raise ValueError(f"Conv: invalid input spatial shape {tuple(in_sizes)} for kernel {tuple(kernel)}")
        out.append(o)
        head.append(ph)
    return out, head


def pool_geometry(in_sizes, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """onnxruntime's pooling output sizes, head and tail pads.

    auto_pad SAME pads for the undilated kernel (as onnxruntime does); ceil_mode applies to every auto_pad, and a
    ceil_mode window that would start past the input and the head pad is dropped."""
    out, head, tail = [], [], []
    r = len(in_sizes)
    for i in range(r):
        n, k, s, d = in_sizes[i], kernel[i], strides[i], dilations[i]
        if auto_pad == "NOTSET":
            ph, pt = pads[i], pads[i + r]
        elif auto_pad == "VALID":
            ph = pt = 0
        else:
            need = ((n + s - 1) // s - 1) * s + k - n
            ph = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            if need < 0:  # onnxruntime's C++ division truncates toward zero
                ph = -((-need) // 2) if auto_pad == "SAME_UPPER" else -((-need - 1) // 2)
            pt = need - ph
        span = n + ph + pt - d * (k - 1) - 1
        if ceil_mode:
            o = int(math.ceil(span / s)) + 1
            if (o - 1) * s >= n + ph:
                o -= 1
        else:
            o = int(span / s) + 1  # truncation, as onnxruntime
        if o <= 0:
            raise ValueError(f"pooling: invalid input spatial shape {tuple(in_sizes)} for kernel {tuple(kernel)}")
        out.append(o)
        head.append(ph)
        tail.append(pt)
    return out, head, tail


# --- Conv ------------------------------------------------------------------------------------------------------
@register_op("Conv", since=1)
@register_op("Conv", since=11)
def build_conv(node):
    if len(node.inputs) < 2 or float_type(node, (0, 1, 2)) is None or wanted_outputs(node) != 1:
        return None
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        return None
    kernel_attr = attr(node, "kernel_shape")
    r = len(kernel_attr) if kernel_attr else None
    for i in (1, 0):
        rk = rank_of(node, i)
        if rk is not None:
            if r is None:
                r = rk - 2
            elif rk - 2 != r:
                return None
    if r is None or not 1 <= r <= 3:
        return None
    group = int(attr(node, "group", 1))
    strides = _ints(attr(node, "strides"), r, 1)
    dilations = _ints(attr(node, "dilations"), r, 1)
    pads = _ints(attr(node, "pads"), 2 * r, 0)
    if len(strides) != r or len(dilations) != r or len(pads) != 2 * r or group < 1:
        return None
    if min(strides) < 1 or min(dilations) < 1 or (auto_pad == "NOTSET" and min(pads) < 0):
        return None
    kernel_attr = [int(k) for k in kernel_attr] if kernel_attr else None
    cache = {}

    def plan(xs, ws, itemsize):
        key = (xs, ws, itemsize)
        p = cache.get(key)
        if p is not None:
            return p
        if len(xs) != r + 2 or len(ws) != r + 2:
            raise ValueError(f"Conv: X {xs} and W {ws} must both have rank {r + 2}")
        kernel = list(ws[2:])
        if kernel_attr is not None and kernel_attr != kernel:
            raise ValueError(f"Conv: kernel_shape {kernel_attr} does not match W {ws}")
        if xs[1] != ws[1] * group or ws[0] % group:
            raise ValueError(f"Conv: X {xs} and W {ws} do not fit group={group}")
        out, head = conv_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad)
        n_img, m_out, cg = xs[0], ws[0], ws[1]
        mg = m_out // group
        o3 = _pad3(out, 1)
        kk = cg * math.prod(kernel)
        work = n_img * m_out * math.prod(out) * kk
        direct = group > 1 and cg * mg <= DIRECT_CONV_MAX_CHANNELS
        tile_rows = m_blocks = 1
        if not direct:
            ow, nrows = o3[2], o3[0] * o3[1]
            nth = numba.get_num_threads()
            # tiles of whole output rows: an im2col buffer of at most CONV_TILE_BYTES, and a few units per thread
            budget = max(ow, CONV_TILE_BYTES // (kk * itemsize))
            share = -(-nrows * ow * n_img * group // (4 * nth))
            tile_rows = max(1, min(nrows, min(budget, max(share, CONV_TILE_MIN_PIXELS)) // ow))
            units = n_img * group * -(-nrows // tile_rows)
            if units < nth:  # few, large tiles (small late-stage maps): split the output channels too
                m_blocks = max(1, min(nth, mg // 16))
        p = cache[key] = ((n_img, m_out) + tuple(out), _pad3(kernel, 1), _pad3(strides, 1), _pad3(dilations, 1),
                          _pad3(head, 0), o3, direct, tile_rows, m_blocks, work)
        return p

    def run(x, w, b=None):
        shape, k, s, d, p, o, direct, tile_rows, m_blocks, work = plan(x.shape, w.shape, x.dtype.itemsize)
        x5 = _as5d(np.ascontiguousarray(x), r)
        w5 = _as5d(np.ascontiguousarray(w), r)
        bias = np.ascontiguousarray(b).reshape(-1) if b is not None else np.empty(0, dtype=x.dtype)
        if direct:
            y = call(kconv.conv_direct, work, x5, w5, bias, group, k, s, d, p, o)
        else:
            with single_threaded_blas:
                y = call(kconv.conv_gemm, work, x5, w5, bias, group, k, s, d, p, o, tile_rows, m_blocks,
                         numba.get_num_threads() if work >= PARALLEL_GRAIN else 1)
        return (y.reshape(shape),)

    return run


# --- pooling ---------------------------------------------------------------------------------------------------
def _pool_builder(kind):
    def build(node):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None:
            return None
        if kind == "max" and (wanted_outputs(node) != 1 or int(attr(node, "storage_order", 0)) != 0):
            return None  # the Indices output (and column-major indices) are left to the fallback
        auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
        kernel = attr(node, "kernel_shape")
        if auto_pad not in AUTO_PADS or not kernel or not 1 <= len(kernel) <= 3:
            return None
        r = len(kernel)
        kernel = [int(k) for k in kernel]
        rk = rank_of(node, 0)
        if rk is not None and rk != r + 2:
            return None
        strides = _ints(attr(node, "strides"), r, 1)
        dilations = _ints(attr(node, "dilations"), r, 1)
        pads = _ints(attr(node, "pads"), 2 * r, 0)
        ceil_mode = int(attr(node, "ceil_mode", 0))
        cip = int(attr(node, "count_include_pad", 0)) != 0
        if len(strides) != r or len(dilations) != r or len(pads) != 2 * r:
            return None
        if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
            return None
        cache = {}

        def plan(xs):
            p = cache.get(xs)
            if p is None:
                if len(xs) != r + 2:
                    raise ValueError(f"pooling: input of shape {xs} does not have rank {r + 2}")
                out, head, tail = pool_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
                p = cache[xs] = (xs[:2] + tuple(out), (xs[0] * xs[1],) + _pad3(xs[2:], 1), _pad3(kernel, 1),
                                 _pad3(strides, 1), _pad3(dilations, 1), _pad3(head, 0), _pad3(tail, 0),
                                 _pad3(out, 1))
            return p

        if kind == "max":
            def run(x):
                shape, xs, k, s, d, p, _, o = plan(x.shape)
                lowest = np.finfo(x.dtype).min
                work = xs[0] * math.prod(o) * math.prod(k)
                y = call(kpool.max_pool, work, np.ascontiguousarray(x).reshape(xs), k, s, d, p, o,
                         x.dtype.type(lowest))
                return (y.reshape(shape),)
        else:
            def run(x):
                shape, xs, k, s, d, p, q, o = plan(x.shape)
                work = xs[0] * math.prod(o) * math.prod(k)
                y = call(kpool.avg_pool, work, np.ascontiguousarray(x).reshape(xs), k, s, d, p, q, o, cip)
                return (y.reshape(shape),)
        return run
    return build


build_max_pool = _pool_builder("max")
build_avg_pool = _pool_builder("avg")
for _v in (1, 8, 10, 11, 12):
    register_op("MaxPool", since=_v)(build_max_pool)
for _v in (1, 7, 10, 11, 19):
    register_op("AveragePool", since=_v)(build_avg_pool)


def _global_pool_builder(kernel):
    def build(node):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None:
            return None
        rk = rank_of(node, 0)
        if rk is not None and rk < 2:
            return None

        def run(x):
            if x.ndim < 2:
                raise ValueError(f"global pooling needs an input of rank >= 2, got shape {x.shape}")
            rows = x.shape[0] * x.shape[1]
            size = x.size // rows if rows else 0
            if size == 0:
                raise ValueError(f"global pooling over an empty input of shape {x.shape}")
            y = call(kernel, x.size, np.ascontiguousarray(x).reshape(rows, size))
            return (y.reshape(x.shape[:2] + (1,) * (x.ndim - 2)),)
        return run
    return build


register_op("GlobalAveragePool", since=1)(_global_pool_builder(kpool.global_avg))
register_op("GlobalMaxPool", since=1)(_global_pool_builder(kpool.global_max))


# --- BatchNormalization (inference) ----------------------------------------------------------------------------
def build_batchnorm(node):
    if len(node.inputs) != 5 or float_type(node, range(5)) is None or wanted_outputs(node) != 1:
        return None  # mean/var/saved outputs only exist in training mode
    if node.opset < 7 and int(attr(node, "is_test", 0)) == 0:
        return None
    if int(attr(node, "training_mode", 0)) != 0:
        return None
    eps = float(attr(node, "epsilon", 1e-5))
    spatial = int(attr(node, "spatial", 1)) if node.opset < 9 else 1

    def run(x, scale, bias, mean, var):
        if x.ndim < 2:
            raise ValueError(f"BatchNormalization needs an input of rank >= 2, got shape {x.shape}")
        n, c = x.shape[:2]
        size = x.size // (n * c) if n * c else 0
        per = 1 if spatial else size
        params = [np.ascontiguousarray(a).reshape(c, per) for a in (scale, bias, mean, var)]
        y = call(knn.batchnorm, x.size, np.ascontiguousarray(x).reshape(n, c, size), *params, eps)
        return (y.reshape(x.shape),)
    return run


for _v in (6, 7, 9, 14, 15):
    register_op("BatchNormalization", since=_v)(build_batchnorm)


# --- Softmax ---------------------------------------------------------------------------------------------------
def _softmax_builder(per_axis):
    def build(node):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None:
            return None
        axis = int(attr(node, "axis", -1 if per_axis else 1))
        rk = rank_of(node, 0)
        if rk is not None and not -rk <= axis < rk:
            return None

        def run(x):
            nd = x.ndim
            a = axis + nd if axis < 0 else axis
            if not 0 <= a < max(nd, 1):
                raise ValueError(f"Softmax: axis {axis} is out of range for an input of rank {nd}")
            if x.size == 0 or nd == 0:
                return (np.array(x, copy=True) if nd else np.ones_like(x),)
            xc = np.ascontiguousarray(x)
            outer = math.prod(x.shape[:a])
            if per_axis:
                n, inner = x.shape[a], math.prod(x.shape[a + 1:])
            else:
                n, inner = math.prod(x.shape[a:]), 1
            if inner == 1:
                y = call(knn.softmax_rows, 8 * x.size, xc.reshape(outer, n))
            else:
                y = call(knn.softmax_axis, 8 * x.size, xc.reshape(outer, n, inner))
            return (y.reshape(x.shape),)
        return run
    return build


register_op("Softmax", since=1)(_softmax_builder(per_axis=False))
register_op("Softmax", since=13)(_softmax_builder(per_axis=True))


# --- Dropout (inference) ---------------------------------------------------------------------------------------
def build_dropout(node):
    if not node.inputs or float_type(node, (0,)) is None:
        return None
    if node.opset < 7 and int(attr(node, "is_test", 0)) == 0:
        return None  # training mode: random
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        v = node.inputs[2]
        tm = None if v.const is None else np.asarray(v.const)
        feedable = node.graph is not None and any(g is v for g in node.graph.inputs)
        if tm is None or feedable or tm.size != 1 or bool(tm.reshape(-1)[0]):
            return None  # training_mode unknown at build time, or true: random
    n_out = wanted_outputs(node)
    if n_out == 2:
        mt = node.outputs[1].type
        elem = getattr(mt, "elem_type", None)
        if elem is not None:
            mask_dtype = mt.dtype
        else:
            mask_dtype = np.dtype(bool) if node.opset >= 10 else node.inputs[0].type.dtype

        def run(x, *_):
            return (x, np.ones(x.shape, dtype=mask_dtype))
        return run
    return lambda x, *_: (x,)


for _v in (1, 6, 7, 10, 12, 13, 22):
    register_op("Dropout", since=_v)(build_dropout)
