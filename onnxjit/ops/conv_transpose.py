"""ConvTranspose (opsets 1 and 11) on the CPU provider, float32/float64, 1-D to 3-D.

The output geometry follows the ONNX spec, which onnxruntime implements: without output_shape the output is
(in - 1) * stride + output_padding + (kernel - 1) * dilation + 1 - pads, or in * stride with auto_pad SAME
(pads then split by SAME_UPPER/LOWER); with output_shape the pads are derived from it (SAME_UPPER puts the
smaller half in front, every other auto_pad the larger), and an output up to stride - 1 past the full size gets
only the bias there. Output sizes onnxruntime rejects (output_padding not below stride or dilation, an
output_shape the input cannot produce) raise ValueError here too.

The kernel (`onnxjit.kernels.conv_transpose`) runs a GEMM of the transposed weight by the input and scatters the
columns into the output (col2im), over units that own disjoint output tiles (about TILES_PER_THREAD per thread:
on a busy machine a thread that stalls then holds back only a small share). The transposed weight is packed
once per session for a constant W (an initializer no feed overrides), at every run for a fed one.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from onnxjit.cache import deferred_compile
from onnxjit.kernels import conv_transpose as kct
from onnxjit.kernels.linalg import single_threaded_blas_for
from onnxjit.ops.nn import (CHUNKS_PER_THREAD, PARALLEL_GRAIN, ConstantDerived, constant_input, conv_node_attributes,
                            float_type, ro, run_units, wanted_outputs)
from onnxjit.ops import stand_ins
from onnxjit.ops.registry import attr, register_op

# input planes per GEMM: columns of at most COLUMN_BYTES (GEMM and col2im then work in L2: 16 -> 4 channels,
# 2x2 stride 2 over 320x320 took 1.0 ms of GEMM in 1 MB blocks, 0.53 ms in 128 KB ones), but at least
# COLUMN_MIN_PIXELS pixels (narrower GEMMs and col2im rows cost more per pixel than the cache misses)
COLUMN_BYTES = 1 << 17
COLUMN_MIN_PIXELS = 1024
BLAS_MIN_ROWS = 16  # fewer GEMM rows (output channels x taps per unit) are computed without BLAS
TILES_PER_THREAD = 4


def _ints(value, n, default):
    v = [int(x) for x in value] if value else []
    return v or [default] * n


def transpose_geometry(in_sizes, kernel, strides, dilations, pads, output_padding, output_shape, auto_pad):
    """(output sizes, head pads) per spatial dim."""
    out, head = [], []
    r = len(in_sizes)
    for i in range(r):
        n, k, s, d, adj = in_sizes[i], kernel[i], strides[i], dilations[i], output_padding[i]
        if adj >= max(s, d):
            raise ValueError(f"ConvTranspose: output_padding {adj} of spatial dim {i} must be less than "
                             f"max(stride, dilation) = {max(s, d)}")
        full = (n - 1) * s + adj + (k - 1) * d + 1
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = output_shape[i] if output_shape is not None else n * s
            total = max(0, full - o)
            ph = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            if o - full >= s:
                raise ValueError(f"ConvTranspose: output_shape {list(output_shape)} cannot come from an input of "
                                 f"spatial shape {list(in_sizes)} (dim {i}: at most {full + s - 1})")
        elif auto_pad == "VALID":
            o, ph = full, 0
        else:
            o, ph = full - pads[i] - pads[i + r], pads[i]
        if o <= 0:
            raise ValueError(f"ConvTranspose: invalid output size {o} for input spatial shape {list(in_sizes)}")
        out.append(o)
        head.append(ph)
    return out, head


def _as_3d(vals, r, fill):
    """A per-spatial-dim list as 3 dims: 1-D (W) -> (1, 1, W), 2-D (H, W) -> (H, 1, W) (see the kernel)."""
    vals = list(vals)
    if r == 1:
        return (fill, fill, vals[0])
    if r == 2:
        return (vals[0], fill, vals[1])
    return tuple(vals)


def _packed_weight(w, group):
    """The kernel's weight layout (group, M/group * kvol, C/group), with plain strides even along unit dims (BLAS
    checks every stride)."""
    c, mg = w.shape[:2]
    rows = mg * math.prod(w.shape[2:])
    packed = np.empty((group, rows, c // group), dtype=w.dtype)
    packed[...] = w.reshape(group, c // group, rows).transpose(0, 2, 1)
    return ro(packed)


@register_op("ConvTranspose", since=1)
@register_op("ConvTranspose", since=11)
def build_conv_transpose(node):
    if not 2 <= len(node.inputs) <= 3 or float_type(node, range(3)) is None or wanted_outputs(node) != 1:
        return None
    found = conv_node_attributes(node, negative_pads=True)
    if found is None:
        return None
    auto_pad, r, kernel_attr, (group, strides, dilations, pads) = found
    output_padding = _ints(attr(node, "output_padding"), r, 0)
    output_shape = attr(node, "output_shape")
    output_shape = [int(v) for v in output_shape][-r:] if output_shape else None
    if len(output_padding) != r or min(output_padding) < 0:
        return None
    packed = ConstantDerived(constant_input(node, 1), lambda w: _packed_weight(w, group))
    cache = {}

    def plan(xs, ws, itemsize):
        key = (xs, ws, itemsize)
        p = cache.get(key)
        if p is not None:
            return p
        if len(xs) != r + 2 or len(ws) != r + 2:
            raise ValueError(f"ConvTranspose: X {xs} and W {ws} must both have rank {r + 2}")
        kernel = list(ws[2:])
        if kernel_attr is not None and kernel_attr != kernel:
            raise ValueError(f"ConvTranspose: kernel_shape {kernel_attr} does not match W {ws}")
        if ws[0] != xs[1] or xs[1] % group:
            raise ValueError(f"ConvTranspose: W {ws} must have X's {xs[1]} input channels first, a multiple of "
                             f"group={group}")
        out, head = transpose_geometry(xs[2:], kernel, strides, dilations, pads, output_padding, output_shape,
                                       auto_pad)
        n_img, mg = xs[0], ws[1]
        m_out = mg * group
        i3, o3, k3 = _as_3d(xs[2:], r, 1), _as_3d(out, r, 1), _as_3d(kernel, r, 1)
        s3, d3, p3 = _as_3d(strides, r, 1), _as_3d(dilations, r, 1), _as_3d(head, r, 0)
        kvol = math.prod(kernel)
        work = n_img * xs[1] * math.prod(xs[2:]) * mg * kvol
        nth = numba.get_num_threads()
        parallel = nth > 1 and work >= PARALLEL_GRAIN
        # about two tiles per thread: tiles spanning several planes keep the recomputed border planes few
        tiles = min(o3[0], -(-TILES_PER_THREAD * nth // (n_img * group))) if parallel else 1
        tile_planes = -(-o3[0] // tiles)
        units = n_img * group * -(-o3[0] // tile_planes)
        m_blocks = min(mg, -(-nth * CHUNKS_PER_THREAD // units)) if parallel and units < nth else 1
        units *= m_blocks
        rows = -(-mg // m_blocks) * kvol
        plane = i3[1] * i3[2]
        chunk = min(i3[0], max(1, COLUMN_BYTES // (rows * plane * itemsize), -(-COLUMN_MIN_PIXELS // plane)))
        taps = kct.tap_table(k3[2], d3[2], p3[2], s3[2], i3[2], o3[2])
        p = cache[key] = ((n_img, m_out) + tuple(out), (n_img, xs[1]) + i3, (n_img, m_out) + o3, k3, s3, d3, p3,
                          taps, tile_planes, m_blocks, chunk, rows >= BLAS_MIN_ROWS, units, work)
        return p

    def run(x, w, b=None):
        shape, x5, y5, k, s, d, p, taps, tile_planes, m_blocks, chunk, use_blas, units, work = \
            plan(x.shape, w.shape, x.dtype.itemsize)
        if b is not None and b.size != shape[1]:
            raise ValueError(f"ConvTranspose: B has {b.size} values, expected {shape[1]} (output channels)")
        bias = ro(b.reshape(-1) if b is not None else np.empty(0, dtype=x.dtype))
        y = np.empty(y5, dtype=x.dtype)
        args = (ro(x.reshape(x5)), packed.of(w), bias, k, s, d, p, taps, tile_planes, m_blocks, chunk, use_blas, y)
        if deferred_compile.stands_in(kct.conv_transpose, args):
            stand_ins.conv_transpose(args[0], w.reshape(w.shape[:2] + k), group, bias, k, s, d, p, y)
        else:
            with single_threaded_blas_for(work):
                run_units(kct.conv_transpose, args, units, work)
        return (y.reshape(shape),)

    return run
