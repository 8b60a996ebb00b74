"""Normalization ops of the CUDA provider: Softmax, LogSoftmax, LayerNormalization, BatchNormalization
(inference), InstanceNormalization, LRN. float32 and float64 only, computed in the input's dtype.

Row-wise reductions (Softmax, LogSoftmax, LayerNormalization, InstanceNormalization) run one block per row (rows
looped over the grid) with a shared-memory tree reduction of BLOCK threads; a row is `n` elements `inner` apart,
so Softmax-13 along a middle axis needs no transposed copy. Softmax is numerically stable (the row max is
subtracted first); variances are the mean of squared deviations (two passes over the row).
BatchNormalization and LRN are element-wise grid-stride kernels.

Builders decline (None): an input dtype other than float32/float64 (or unknown), LayerNormalization asking for
Mean/InvStdDev or with stash_type double on float32 input, BatchNormalization in training mode or with more than
one output (or is_test=0 before opset 7), InstanceNormalization/LRN with extra outputs, LRN size < 1.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda
from onnx import TensorProto as T

from onnxjit.kernels.cuda.device import SIMULATED, launch_1d
from onnxjit.kernels.cuda.movement import expand_on_device
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.nn import float_type, wanted_outputs
from onnxjit.ops.normalization import softmax_geometry
from onnxjit.ops.registry import attr

BLOCK = 4 if SIMULATED else 128  # threads of a row-reduction block (a power of two)
SHORT_ROW = 32  # rows of at most this many elements take a thread each
MAX_ROW_BLOCKS = 1 if SIMULATED else 65535
FLOATS = {T.FLOAT: np.float32, T.DOUBLE: np.float64}


def _float_dtype(node, indices):
    """The numpy dtype all present inputs at `indices` share (float32/float64), else None."""
    elem = float_type(node, indices)
    return None if elem is None else np.dtype(FLOATS[elem])


def _flat(a):
    return a.reshape((int(a.size),))


def _shape(a) -> tuple:
    return tuple(int(d) for d in a.shape)


def _row_launch(rows: int):
    return max(1, min(MAX_ROW_BLOCKS, rows)), BLOCK


# --- block reductions (BLOCK threads, shared scratch `sm` of BLOCK elements) -----------------------------------
@cuda.jit(device=True)
def _block_sum(sm, v, tid):
    sm[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            sm[tid] = sm[tid] + sm[tid + s]
        cuda.syncthreads()
        s //= 2
    r = sm[0]
    cuda.syncthreads()
    return r


@cuda.jit(device=True)
def _block_max(sm, v, tid):
    sm[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            sm[tid] = max(sm[tid], sm[tid + s])
        cuda.syncthreads()
        s //= 2
    r = sm[0]
    cuda.syncthreads()
    return r


def _make_row_kernels(np_dt):
    """(softmax, norm) kernels whose shared scratch and constants are of `np_dt`."""
    nb_dt = np_dt  # cuda.shared.array accepts a numpy scalar type
    zero, one, neg_inf = np_dt(0), np_dt(1), np_dt(-np.inf)

    @cuda.jit
    def softmax_rows(x, y, rows, n, inner, log):
        """Row r = (o, i) of a (outer, n, inner) tensor: elements x[o*n*inner + i + k*inner], k < n."""
        sm = cuda.shared.array(BLOCK, nb_dt)
        tid = cuda.threadIdx.x
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            o = r // inner
            base = o * n * inner + (r - o * inner)
            m = neg_inf
            for k in range(tid, n, BLOCK):
                m = max(m, x[base + k * inner])
            m = _block_max(sm, m, tid)
            s = zero
            for k in range(tid, n, BLOCK):
                s += math.exp(x[base + k * inner] - m)
            s = _block_sum(sm, s, tid)
            if log:
                shift = m + math.log(s)
                for k in range(tid, n, BLOCK):
                    y[base + k * inner] = x[base + k * inner] - shift
            else:
                for k in range(tid, n, BLOCK):
                    y[base + k * inner] = math.exp(x[base + k * inner] - m) / s

    @cuda.jit
    def norm_rows(x, y, rows, n, eps, scale, s_rows, s_row_stride, s_k_stride, bias, b_rows, b_row_stride,
                  b_k_stride, has_bias):
        """y = (x - mean) / sqrt(var + eps) * scale + bias over contiguous rows of n; the parameter of element
        k of row r is p[(r % p_rows) * p_row_stride + k * p_k_stride]."""
        sm = cuda.shared.array(BLOCK, nb_dt)
        tid = cuda.threadIdx.x
        nf = np_dt(n)
        for r in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            base = r * n
            s = zero
            for k in range(tid, n, BLOCK):
                s += x[base + k]
            mean = _block_sum(sm, s, tid) / nf
            s = zero
            for k in range(tid, n, BLOCK):
                d = x[base + k] - mean
                s += d * d
            var = _block_sum(sm, s, tid) / nf
            inv = one / math.sqrt(var + eps)
            srow = (r % s_rows) * s_row_stride
            brow = (r % b_rows) * b_row_stride
            for k in range(tid, n, BLOCK):
                v = (x[base + k] - mean) * inv * scale[srow + k * s_k_stride]
                if has_bias:
                    v += bias[brow + k * b_k_stride]
                y[base + k] = v

    @cuda.jit
    def softmax_short_rows(x, y, rows, n, inner, log):
        """softmax_rows for rows of at most SHORT_ROW elements: a thread per row, no block reduction."""
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            o = r // inner
            base = o * n * inner + (r - o * inner)
            m = neg_inf
            for k in range(n):
                m = max(m, x[base + k * inner])
            s = zero
            for k in range(n):
                s += math.exp(x[base + k * inner] - m)
            shift = m + math.log(s)
            for k in range(n):
                v = x[base + k * inner] - m
                y[base + k * inner] = x[base + k * inner] - shift if log else math.exp(v) / s

    @cuda.jit
    def norm_short_rows(x, y, rows, n, eps, scale, s_rows, s_row_stride, s_k_stride, bias, b_rows, b_row_stride,
                        b_k_stride, has_bias):
        """norm_rows for rows of at most SHORT_ROW elements: a thread per row."""
        nf = np_dt(n)
        for r in range(cuda.grid(1), rows, cuda.gridsize(1)):
            base = r * n
            s = zero
            for k in range(n):
                s += x[base + k]
            mean = s / nf
            s = zero
            for k in range(n):
                d = x[base + k] - mean
                s += d * d
            inv = one / math.sqrt(s / nf + eps)
            srow = (r % s_rows) * s_row_stride
            brow = (r % b_rows) * b_row_stride
            for k in range(n):
                v = (x[base + k] - mean) * inv * scale[srow + k * s_k_stride]
                if has_bias:
                    v += bias[brow + k * b_k_stride]
                y[base + k] = v

    return softmax_rows, norm_rows, softmax_short_rows, norm_short_rows


def _row_kernel(kernels, n: int, rows: int):
    """(kernel, launch) for `rows` rows of `n`: a block per row, or a thread per row when rows are short (a block
    of threads would idle over them, and under the simulator each block reduction is thread synchronizations)."""
    if n <= SHORT_ROW:
        return kernels[1], launch_1d(rows)
    return kernels[0], _row_launch(rows)


_ROW_KERNELS = {np.dtype(np.float32): _make_row_kernels(np.float32),
                np.dtype(np.float64): _make_row_kernels(np.float64)}


@cuda.jit
def _batchnorm(x, y, total, c, size, per_element, scale, bias, mean, var, eps):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, total, step):
        if per_element:  # spatial=0: the parameters span (C, D1, ...)
            p = i % (c * size)
        else:
            p = (i // size) % c
        y[i] = (x[i] - mean[p]) / math.sqrt(var[p] + eps) * scale[p] + bias[p]


@cuda.jit
def _lrn(x, y, total, c, plane, size, alpha_over_size, beta, bias):
    start, step = cuda.grid(1), cuda.gridsize(1)
    lo_off = (size - 1) // 2
    hi_off = size - 1 - lo_off
    for i in range(start, total, step):
        ch = (i // plane) % c
        base = i - ch * plane
        lo = max(ch - lo_off, 0)
        hi = min(ch + hi_off, c - 1)
        s = x[i] - x[i]  # zero of x's dtype
        for j in range(lo, hi + 1):
            v = x[base + j * plane]
            s += v * v
        y[i] = x[i] / math.pow(bias + alpha_over_size * s, beta)


# --- Softmax / LogSoftmax ----------------------------------------------------------------------------------------
def _softmax_builder(log: bool, per_axis: bool):
    def build(node, device):
        if len(node.inputs) != 1 or node.inputs[0] is None or wanted_outputs(node) != 1:
            return None
        dtype = _float_dtype(node, (0,))
        if dtype is None:
            return None
        axis = int(attr(node, "axis", -1 if per_axis else 1))
        kernels = _ROW_KERNELS[dtype][0::2]
        name = "LogSoftmax" if log else "Softmax"

        def run(x):
            outer, n, inner = softmax_geometry(_shape(x), axis, per_axis, name)
            y = device.empty(_shape(x), x.dtype)
            if x.size:
                rows = outer * inner
                kernel, launch = _row_kernel(kernels, n, rows)
                kernel[launch + (device.stream,)](_flat(x), _flat(y), rows, n, inner, log)
            return (y,)
        return run
    return build


for _v in (1, 11, 13):
    register_cuda_op("Softmax", since=_v)(_softmax_builder(False, _v >= 13))
    register_cuda_op("LogSoftmax", since=_v)(_softmax_builder(True, _v >= 13))


# --- LayerNormalization / InstanceNormalization ------------------------------------------------------------------
def _param_layout(device, p, shape: tuple, a: int, rows: int, n: int, keep: list):
    """(flat array, rows, row_stride, k_stride) addressing LayerNormalization's Scale or B: it broadcasts to the
    normalized dims shape[a:] (or to X's whole shape when it has more dims); a layout that is not the full
    target is expanded on the device first."""
    pshape = _shape(p)
    while len(pshape) > len(shape) - a and pshape[0] == 1:  # leading 1s say nothing
        pshape = pshape[1:]
    target = shape[a:] if len(pshape) <= len(shape) - a else shape
    try:
        ok = np.broadcast_shapes(pshape, target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"LayerNormalization: Scale/B of shape {_shape(p)} does not broadcast to the normalized "
                         f"dims {shape[a:]} (or to X's shape {shape})")
    if p.size == 1:
        return _flat(p), 1, 0, 0
    if math.prod(pshape) != math.prod(target):
        p = expand_on_device(device, p.reshape(pshape), target)
        keep.append(p)
    if len(target) == len(shape):  # spans the leading dims too: (rows, n)
        return _flat(p), rows, n, 1
    return _flat(p), 1, 0, 1


@register_cuda_op("LayerNormalization", since=17)
def build_layer_norm(node, device):
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None or wanted_outputs(node) != 1:
        return None
    dtype = _float_dtype(node, range(min(len(node.inputs), 3)))
    if dtype is None:
        return None
    stash = int(attr(node, "stash_type", T.FLOAT))
    if stash not in (T.FLOAT, T.DOUBLE) or (stash == T.DOUBLE and dtype != np.float64):
        return None
    axis, eps = int(attr(node, "axis", -1)), dtype.type(float(attr(node, "epsilon", 1e-5)))
    kernels = _ROW_KERNELS[dtype][1::2]

    def run(x, scale, bias=None):
        shape = _shape(x)
        r = len(shape)
        if not -r <= axis < r:
            raise ValueError(f"LayerNormalization: axis {axis} is out of range for an input of rank {r}")
        a = axis + r if axis < 0 else axis
        rows, n = math.prod(shape[:a]), math.prod(shape[a:])
        y = device.empty(shape, x.dtype)
        if not x.size:
            return (y,)
        params = []
        keep = []  # expanded parameters: alive until the launch is queued (the pool reuses a dropped buffer)
        for p in (scale, bias):
            if p is None:
                params.append((_flat(scale), 1, 0, 0))
                continue
            params.append(_param_layout(device, p, shape, a, rows, n, keep))
        (s, sr, srs, sks), (b, br, brs, bks) = params
        kernel, launch = _row_kernel(kernels, n, rows)
        kernel[launch + (device.stream,)](_flat(x), _flat(y), rows, n, eps, s, sr, srs, sks, b, br, brs, bks,
                                          bias is not None)
        return (y,)
    return run


@register_cuda_op("InstanceNormalization", since=1)
@register_cuda_op("InstanceNormalization", since=6)
def build_instance_norm(node, device):
    if len(node.inputs) != 3 or any(v is None for v in node.inputs) or wanted_outputs(node) != 1:
        return None
    dtype = _float_dtype(node, range(3))
    if dtype is None:
        return None
    eps = dtype.type(float(attr(node, "epsilon", 1e-5)))
    kernels = _ROW_KERNELS[dtype][1::2]

    def run(x, scale, bias):
        shape = _shape(x)
        if len(shape) < 2 or _shape(scale) != (shape[1],) or _shape(bias) != (shape[1],):
            raise ValueError(f"InstanceNormalization: input of shape {shape} needs scale and B of shape "
                             f"({shape[1] if len(shape) >= 2 else 'C'},), got {_shape(scale)} and {_shape(bias)}")
        c = shape[1]
        rows = shape[0] * c
        n = math.prod(shape[2:])
        y = device.empty(shape, x.dtype)
        if x.size:
            kernel, launch = _row_kernel(kernels, n, rows)
            kernel[launch + (device.stream,)](_flat(x), _flat(y), rows, n, eps, scale, c, 1, 0, bias, c, 1, 0, True)
        return (y,)
    return run


# --- BatchNormalization (inference) ------------------------------------------------------------------------------
def build_batchnorm(node, device):
    if len(node.inputs) != 5 or any(v is None for v in node.inputs) or wanted_outputs(node) != 1:
        return None
    dtype = _float_dtype(node, range(5))
    if dtype is None:
        return None
    if node.opset < 7 and int(attr(node, "is_test", 0)) == 0:
        return None
    if int(attr(node, "training_mode", 0)) != 0:
        return None
    eps = dtype.type(float(attr(node, "epsilon", 1e-5)))
    spatial = int(attr(node, "spatial", 1)) if node.opset < 9 else 1

    def run(x, scale, bias, mean, var):
        shape = _shape(x)
        if len(shape) < 2:
            raise ValueError(f"BatchNormalization needs an input of rank >= 2, got shape {shape}")
        c = shape[1]
        size = math.prod(shape[2:])
        want = c if spatial else c * size
        for name, p in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
            if p.size != want:
                raise ValueError(f"BatchNormalization: {name} has {p.size} elements, expected {want}")
        y = device.empty(shape, x.dtype)
        total = int(x.size)
        if total:
            _batchnorm[launch_1d(total) + (device.stream,)](_flat(x), _flat(y), total, c, size, not spatial,
                                                            _flat(scale), _flat(bias), _flat(mean), _flat(var), eps)
        return (y,)
    return run


for _v in (6, 7, 9, 14, 15):
    register_cuda_op("BatchNormalization", since=_v)(build_batchnorm)


# --- LRN -----------------------------------------------------------------------------------------------------------
@register_cuda_op("LRN", since=1)
@register_cuda_op("LRN", since=13)
def build_lrn(node, device):
    if len(node.inputs) != 1 or wanted_outputs(node) != 1:
        return None
    dtype = _float_dtype(node, (0,))
    if dtype is None:
        return None
    size = int(attr(node, "size", 0))
    if size < 1:
        return None
    f = dtype.type
    alpha_over_size = f(float(attr(node, "alpha", 1e-4)) / size)
    beta, bias = f(float(attr(node, "beta", 0.75))), f(float(attr(node, "bias", 1.0)))

    def run(x):
        shape = _shape(x)
        if len(shape) < 2:
            raise ValueError(f"LRN needs an input of rank >= 2 (N, C, ...), got shape {shape}")
        c, plane = shape[1], math.prod(shape[2:])
        y = device.empty(shape, x.dtype)
        total = int(x.size)
        if total:
            _lrn[launch_1d(total) + (device.stream,)](_flat(x), _flat(y), total, c, plane, size, alpha_over_size,
                                                      beta, bias)
        return (y,)
    return run
