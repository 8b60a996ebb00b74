"""Pooling on the CUDA provider (float32/float64): MaxPool (its first output only) and AveragePool over 1 or 2
spatial dims (a 1-D pool is a 2-D one of height 1), GlobalAveragePool and GlobalMaxPool over any spatial rank.

MaxPool / AveragePool: one thread per output element over its window, a block a tile of output pixels of one
plane. Output sizes, pads and auto_pad come from the CPU provider's onnxjit.ops.nn.pool_geometry (onnxruntime's
rules, ceil_mode included); an average divides by the taps inside the input, or with count_include_pad by the
taps up to the end of the tail padding (as onnxruntime: a ceil_mode window that passes the padding counts only
what it covers of it).
Global pools: small planes one thread per plane, larger ones one block per plane reducing in shared memory.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import cuda

from onnxjit.kernels.cuda.conv import plane_launch
from onnxjit.kernels.cuda.device import SIMULATED, launch_1d
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.nn import float_type, pool_attributes, pool_geometry, rank_of, wanted_outputs

REDUCE_THREADS = 32 if SIMULATED else 256  # threads of a global pool's block per plane (a power of two)
SMALL_PLANE = 64  # planes of at most this many elements: one thread each
MAX_BLOCKS = 1 if SIMULATED else 65535
_MAX_ATTRS = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}
_AVG_ATTRS = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}


@functools.cache
def pool_kernel(dtype):
    """Max (is_max) or average pooling for `dtype`: x (planes, H, W), y (planes, OH, OW), flat; `init` the max's
    start (the dtype's lowest value, what a window with no tap inside the input gives). A block is a tile of
    output pixels (a thread each) of one plane; grid (tiles of the plane, planes), both grid-strided."""
    nbt = numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, y, planes, h, wd, oh_n, ow_n, kh_n, kw_n, sh, sw, dh, dw, ph, pw, th, tw, is_max, cip, init,
               tiles_w, tiles):
        for plane in range(cuda.blockIdx.y, planes, cuda.gridDim.y):
            xbase = plane * h * wd
            ybase = plane * oh_n * ow_n
            for tile in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
                trow = tile // tiles_w
                oh = trow * cuda.blockDim.y + cuda.threadIdx.y
                ow = (tile - trow * tiles_w) * cuda.blockDim.x + cuda.threadIdx.x
                if oh < oh_n and ow < ow_n:
                    ih0 = oh * sh - ph
                    iw0 = ow * sw - pw
                    zero = nbt(0)
                    acc = init if is_max else zero
                    vh = 0
                    # every tap loads (clamped into the plane) and the ones outside are masked after by a select:
                    # loads no branch guards can be in flight together (guarded ones ran one memory latency each)
                    for ki in range(kh_n):
                        ih = ih0 + ki * dh
                        row_ok = (ih >= 0) & (ih < h)
                        if row_ok:
                            vh += 1
                        row = xbase + min(max(ih, 0), h - 1) * wd
                        for kj in range(kw_n):
                            iw = iw0 + kj * dw
                            v = x[row + min(max(iw, 0), wd - 1)]
                            ok = row_ok & (iw >= 0) & (iw < wd)
                            if is_max:
                                acc = max(acc, cuda.selp(ok, v, init))
                            else:
                                acc += cuda.selp(ok, v, zero)
                    if not is_max:
                        vw = 0
                        for kj in range(kw_n):
                            iw = iw0 + kj * dw
                            if 0 <= iw < wd:
                                vw += 1
                        if vh == 0 or vw == 0:
                            acc = nbt(0)
                        else:
                            if cip:  # taps up to the end of the tail padding
                                ch = min(kh_n, (h + th - ih0 + dh - 1) // dh)
                                cw = min(kw_n, (wd + tw - iw0 + dw - 1) // dw)
                            else:
                                ch = vh
                                cw = vw
                            acc = acc / nbt(ch * cw)
                    y[ybase + oh * ow_n + ow] = acc

    return kernel


@functools.cache
def global_pool_kernels(dtype):
    """(per-thread kernel, per-block kernel) of global max (is_max) / average pooling for `dtype` over x
    (planes, size) flat into y (planes)."""
    nbt = numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def per_thread(x, y, planes, size, is_max):
        for p in range(cuda.grid(1), planes, cuda.gridsize(1)):
            base = p * size
            acc = x[base]
            for i in range(1, size):
                v = x[base + i]
                if is_max:
                    acc = max(acc, v)
                else:
                    acc += v
            y[p] = acc if is_max else acc / nbt(size)

    @cuda.jit
    def per_block(x, y, planes, size, is_max):
        sh = cuda.shared.array(REDUCE_THREADS, nbt)
        t = cuda.threadIdx.x
        for p in range(cuda.blockIdx.x, planes, cuda.gridDim.x):
            base = p * size
            acc = x[base + t] if t < size else x[base]  # size >= 1
            if not is_max and t >= size:
                acc = nbt(0)
            acc1 = acc
            acc2 = acc
            acc3 = acc
            if not is_max:
                acc1 = acc2 = acc3 = nbt(0)
            i = t + REDUCE_THREADS
            while i + 3 * REDUCE_THREADS < size:  # four loads in flight
                v0 = x[base + i]
                v1 = x[base + i + REDUCE_THREADS]
                v2 = x[base + i + 2 * REDUCE_THREADS]
                v3 = x[base + i + 3 * REDUCE_THREADS]
                if is_max:
                    acc = max(acc, v0)
                    acc1 = max(acc1, v1)
                    acc2 = max(acc2, v2)
                    acc3 = max(acc3, v3)
                else:
                    acc += v0
                    acc1 += v1
                    acc2 += v2
                    acc3 += v3
                i += 4 * REDUCE_THREADS
            while i < size:
                v = x[base + i]
                if is_max:
                    acc = max(acc, v)
                else:
                    acc += v
                i += REDUCE_THREADS
            if is_max:
                acc = max(max(acc, acc1), max(acc2, acc3))
            else:
                acc = (acc + acc1) + (acc2 + acc3)
            sh[t] = acc
            cuda.syncthreads()
            s = REDUCE_THREADS // 2
            while s > 0:
                if t < s:
                    a = sh[t]
                    b = sh[t + s]
                    if is_max:
                        sh[t] = max(a, b)
                    else:
                        sh[t] = a + b
                cuda.syncthreads()
                s //= 2
            if t == 0:
                y[p] = sh[0] if is_max else sh[0] / nbt(size)
            cuda.syncthreads()

    return per_thread, per_block


def _planned(device, plan):
    """The kernel `fn(x)` of a pool: `plan(shape, dtype) -> (output shape, configured launcher or None, scalar
    arguments)`, made once per input shape and dtype, then a launch over x and a new output."""
    cache = {}

    def run(x):
        key = (x.shape, x.dtype)
        p = cache.get(key)
        if p is None:
            p = cache[key] = plan(tuple(x.shape), x.dtype)
        out_shape, launcher, scalars = p
        y = device.empty(out_shape, x.dtype)
        if launcher is not None:
            launcher(x.reshape(x.size), y.reshape(y.size), *scalars)
        return (y,)
    return run


def _pool_builder(is_max):
    def build(node, device):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None:
            return None
        if is_max and wanted_outputs(node) != 1:
            return None  # the Indices output: left to the next provider
        if any(name not in (_MAX_ATTRS if is_max else _AVG_ATTRS) for name in node.attributes):
            return None
        attrs = pool_attributes(node, 2)
        if attrs is None:
            return None
        auto_pad, kernel, strides, dilations, pads, ceil_mode, cip = attrs
        r = len(kernel)
        def plan(xs, dtype):
            """(output shape, the configured kernel, its scalar arguments) for an input of shape xs."""
            if len(xs) != r + 2:
                raise ValueError(f"pooling: input of shape {xs} does not have rank {r + 2}")
            out, head, tail = pool_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
            pad2 = lambda v, f: [f] * (2 - r) + list(v)
            (h, wd), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (ph, pw), (th, tw) = (
                pad2(v, f) for v, f in ((xs[2:], 1), (out, 1), (kernel, 1), (strides, 1), (dilations, 1), (head, 0),
                                        (tail, 0)))
            out_shape = xs[:2] + tuple(out)
            planes = xs[0] * xs[1]
            if planes * oh * ow == 0:
                return out_shape, None, ()
            grid, block, tiles_w, tiles = plane_launch(planes, oh, ow)
            init = dtype.type(np.finfo(dtype).min)
            return out_shape, pool_kernel(dtype.str)[grid, block, device.stream], (
                planes, h, wd, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, th, tw, is_max, cip, init, tiles_w, tiles)

        return _planned(device, plan)
    return build


build_max_pool = register_cuda_op("MaxPool", since=1)(_pool_builder(True))
build_avg_pool = register_cuda_op("AveragePool", since=1)(_pool_builder(False))


def _global_pool_builder(is_max):
    def build(node, device):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None or node.attributes:
            return None
        rk = rank_of(node, 0)
        if rk is not None and rk < 2:
            return None

        def plan(xs, dtype):
            """(output shape, the configured kernel or None, its scalar arguments) for an input of shape xs."""
            if len(xs) < 2:
                raise ValueError(f"global pooling needs an input of rank >= 2, got shape {xs}")
            planes = xs[0] * xs[1]
            size = math.prod(xs[2:])
            out_shape = xs[:2] + (1,) * (len(xs) - 2)
            if planes == 0:
                return out_shape, None, ()
            if size == 0:
                raise ValueError(f"global pooling over an empty input of shape {xs}")
            per_thread, per_block = global_pool_kernels(dtype.str)
            if size <= SMALL_PLANE:
                launcher = per_thread[launch_1d(planes) + (device.stream,)]
            else:
                launcher = per_block[max(1, min(planes, MAX_BLOCKS)), REDUCE_THREADS, device.stream]
            return out_shape, launcher, (planes, size, is_max)

        return _planned(device, plan)
    return build


build_global_avg_pool = register_cuda_op("GlobalAveragePool", since=1)(_global_pool_builder(False))
build_global_max_pool = register_cuda_op("GlobalMaxPool", since=1)(_global_pool_builder(True))
