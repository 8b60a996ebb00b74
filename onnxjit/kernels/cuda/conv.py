"""Conv on the CUDA provider (float32/float64, 1-D and 2-D; a 1-D conv is a 2-D one of height 1).

A conv is an implicit GEMM per group: out[oc, p] = sum_k W[oc, k] * patch[k, p] over output pixels p of every
image (N*OH*OW) and k over (input channel, kh, kw) of the group, the patches read from X on the fly as the B
tiles are staged in shared memory (no im2col buffer), by the tiled kernel of kernels.cuda.gemm (each thread a
register tile, strided so that the stores of a warp are consecutive output pixels of one NCHW channel row). The
patch loads find each depth position's tap through a table (conv_taps_kernel: its offset in X and its row and
column steps) made on the device once per input shape, instead of dividing by the kernel's sizes per element.
Depthwise convs (group = C = OC) run one thread per output element over its kernel window instead, a block a tile
of output pixels of one plane.
Output sizes and auto_pad follow the CPU provider (onnxjit.ops.nn.conv_geometry).
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from numba import cuda

from onnxjit.kernels.cuda.device import SIMULATED, launch_1d
from onnxjit.kernels.cuda.gemm import MAX_GRID_YZ, grid_for, pick_tiling, tiled_kernel
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.nn import conv_geometry, conv_kernel_of, conv_node_attributes, float_type, wanted_outputs

_KNOWN_ATTRS = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}


@functools.cache
def conv_taps_kernel():
    """Per position gk of the GEMM's depth (input channel ci, kernel row ki, column kj of a group): the tap's
    offset in X from a pixel's window origin (ci*H*W + ki*dh*W + kj*dw) and its row and column steps."""
    @cuda.jit
    def kernel(toff, tdh, tdw, k, khw, kw_n, hw, wd, dh, dw):
        for gk in range(cuda.grid(1), k, cuda.gridsize(1)):
            ci = gk // khw
            r = gk - ci * khw
            ki = r // kw_n
            kj = r - ki * kw_n
            toff[gk] = ci * hw + ki * dh * wd + kj * dw
            tdh[gk] = ki * dh
            tdw[gk] = kj * dw
    return kernel


TILE_W, TILE_H = (4, 2) if SIMULATED else (32, 8)  # output pixels (threads) of a depthwise / pooling block


@functools.cache
def conv_depthwise_kernel(dtype):
    """Depthwise conv (group = C = OC) for `dtype`: x (N, C, H, W), w (C, 1, KH, KW), y (N, C, OH, OW), all
    flat. A block is a tile of output pixels (a thread each, looping over its window) of one plane; grid
    (tiles of the plane, planes), both grid-strided."""
    nbt = numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, w, bias, y, has_bias, planes, c_in, h, wd, oh_n, ow_n, kh_n, kw_n, sh, sw, dh, dw, ph, pw,
               tiles_w, tiles):
        for plane in range(cuda.blockIdx.y, planes, cuda.gridDim.y):
            ch = plane % c_in
            xbase = plane * h * wd
            ybase = plane * oh_n * ow_n
            wbase = ch * kh_n * kw_n
            b = bias[ch] if has_bias else nbt(0)
            for tile in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
                th = tile // tiles_w
                oh = th * cuda.blockDim.y + cuda.threadIdx.y
                ow = (tile - th * tiles_w) * cuda.blockDim.x + cuda.threadIdx.x
                if oh < oh_n and ow < ow_n:
                    ih0 = oh * sh - ph
                    iw0 = ow * sw - pw
                    zero = nbt(0)
                    acc = zero
                    # every tap loads (clamped into the plane) and the ones outside are masked after by a select:
                    # loads no branch guards can be in flight together (guarded ones ran one memory latency each)
                    for ki in range(kh_n):
                        ih = ih0 + ki * dh
                        row_ok = (ih >= 0) & (ih < h)
                        row = xbase + min(max(ih, 0), h - 1) * wd
                        for kj in range(kw_n):
                            iw = iw0 + kj * dw
                            v = x[row + min(max(iw, 0), wd - 1)]
                            acc += w[wbase + ki * kw_n + kj] * cuda.selp(row_ok & (iw >= 0) & (iw < wd), v, zero)
                    y[ybase + oh * ow_n + ow] = acc + b

    return kernel


def plane_launch(planes, oh, ow):
    """(grid, block, tiles along W, tiles) of a launch over `planes` output planes of oh x ow pixels in tiles of
    a block's threads (a 1-row output gets blocks of one row)."""
    bw, bh = (TILE_W * TILE_H, 1) if oh == 1 else (TILE_W, TILE_H)
    tiles_w = -(-ow // bw)
    tiles = tiles_w * -(-oh // bh)
    return (max(1, min(tiles, 1 << 30)), max(1, min(planes, MAX_GRID_YZ))), (bw, bh), tiles_w, tiles


@register_cuda_op("Conv", since=1)
def build_conv(node, device):
    """Conv of 1 or 2 spatial dims with groups, strides, dilations, pads / auto_pad and an optional bias."""
    if not 2 <= len(node.inputs) <= 3 or float_type(node, range(3)) is None or wanted_outputs(node) != 1:
        return None
    if any(name not in _KNOWN_ATTRS for name in node.attributes):
        return None
    attributes = conv_node_attributes(node)
    if attributes is None or attributes[1] not in (1, 2):
        return None
    auto_pad, r, kernel_attr, (group, strides, dilations, pads) = attributes
    cache = {}

    def plan(xs, ws, has_bias, dtype):
        """(output shape, the configured kernel, the taps table or None, its scalar arguments) for inputs of these
        shapes; the taps table is made on the device here (conv_taps_kernel), once per shape."""
        kernel = conv_kernel_of(xs, ws, r, kernel_attr, group)
        out, head = conv_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad)
        pad2 = lambda v, f: [f] * (2 - r) + list(v)
        h, wd = pad2(xs[2:], 1)
        oh, ow = pad2(out, 1)
        kh, kw = pad2(kernel, 1)
        sh, sw = pad2(strides, 1)
        dh, dw = pad2(dilations, 1)
        ph, pw = pad2(head, 0)
        n_img, c_in, oc = xs[0], xs[1], ws[0]
        out_shape = (n_img, oc) + tuple(out)
        if n_img * oc * oh * ow == 0:
            return out_shape, None, None, ()
        if group > 1 and group == c_in == oc:  # depthwise
            grid, block, tiles_w, tiles = plane_launch(n_img * c_in, oh, ow)
            return out_shape, conv_depthwise_kernel(dtype.str)[grid, block, device.stream], None, (
                has_bias, n_img * c_in, c_in, h, wd, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, tiles_w, tiles)
        k = (c_in // group) * kh * kw
        tab = tuple(device.empty((k,), np.int32) for _ in range(3))
        blocks, threads = launch_1d(k)
        conv_taps_kernel()[blocks, threads, device.stream](*tab, k, kh * kw, kw, h * wd, wd, dh, dw)
        m, n = oc // group, n_img * oh * ow
        t = pick_tiling(m, n, group)
        launcher = tiled_kernel(dtype.str, t.name, "conv")[grid_for(t, m, n, group), (t.tx, t.ty), device.stream]
        return out_shape, launcher, tab, (has_bias, n_img, c_in, h, wd, oc, oh, ow, sh, sw, ph, pw, group, k)

    def run(x, w, b=None):
        has_bias = b is not None
        key = (x.shape, w.shape, has_bias, x.dtype)
        p = cache.get(key)
        if p is None:
            p = cache[key] = plan(tuple(x.shape), tuple(w.shape), has_bias, x.dtype)
        out_shape, launcher, tab, scalars = p
        if has_bias and tuple(b.shape) != (out_shape[1],):
            raise ValueError(f"Conv: B of shape {tuple(b.shape)}, expected ({out_shape[1]},)")
        y = device.empty(out_shape, x.dtype)
        if launcher is None:
            return (y,)
        xf, wf, yf = x.reshape(x.size), w.reshape(w.size), y.reshape(y.size)
        bf = b.reshape(b.size) if has_bias else yf
        if tab is None:
            launcher(xf, wf, bf, yf, *scalars)
        else:
            launcher(wf, xf, *tab, bf, yf, *scalars)
        return (y,)
    return run
