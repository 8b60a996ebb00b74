"""ConvTranspose kernel over 3 spatial dims (1-D inputs come as (1, 1, W), 2-D ones as (H, 1, W), so the first
spatial dim is always the one output tiles are cut along).

Layouts: x (N, C, D, H, W); wt (group, M/group * KD*KH*KW, C/group), the packed transposed weight (row m*kvol +
tap); out (N, M, OD, OH, OW); all C-contiguous. Geometry as 3-tuples: kernel k, strides s, dilations d, head
pads p; `taps` gives per tap e along W its offset e*dw - pw and the input columns [j0, j1) it maps inside the
output.

A transposed convolution scatters: input pixel (z, y, x) adds W[c, m, a, b, e] * x to output pixel
(z*sd - pd + a*dd, ...). Per work unit (image, group, tile of output planes along D, block of output channels)
the kernel takes the input planes that reach its tile, a few at a time (columns of about 128 KB, so that the
GEMM and the scatter stay in L2): multiplies the packed weight rows of its channels by them with BLAS
(`blas.gemm` on the input in place: a group's channels are rows lying apart; BLAS should run single-threaded,
the parallelism being over units) into columns (channels*taps, pixels) (for few rows, as a 64 -> 1 channel
layer, a plain loop), and adds each column row into the output planes of its tile (col2im; for a 2x2 stride-2
kernel both W taps of an output row in one vectorized loop). Units own disjoint output elements, so they run on
any threads without locks; neighbouring tiles recompute the GEMM columns of the input planes both reach (a
kernel taller than its stride), a small share when tiles span several planes.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels.blas import gemm
from onnxjit.kernels.conv import work_unit
from onnxjit.kernels.views import u64 as _u


def tap_table(kw, dw, pw, sw, in_w, ow):
    """Per kernel tap e along W: its output offset e*dw - pw, and the input columns [j0, j1) whose output column
    j*sw + offset falls inside [0, ow)."""
    tab = np.empty((3, kw), dtype=np.int64)
    for e in range(kw):
        off = e * dw - pw
        j0 = 0 if off >= 0 else (-off + sw - 1) // sw
        j1 = min(in_w, (ow - off + sw - 1) // sw if ow > off else 0)
        tab[0, e], tab[1, e], tab[2, e] = off, j0, max(j0, j1)
    return tab


PAIR_MIN_WIDTH = 64  # narrower input rows add tap pairs singly: the vectorized pair loop then costs more


@njit(cache=True, forceinline=True)
def _add_strided(of, o0, row, i0, j0, j1, sw):
    """of[o0 + j * sw] += row[i0 + j] for j in [j0, j1)."""
    if sw == 1:
        for j in range(j0, j1):
            of[_u(o0 + j)] += row[_u(i0 + j)]
    else:
        for j in range(j0, j1):
            of[_u(o0 + j * sw)] += row[_u(i0 + j)]


@njit(cache=True, forceinline=True)
def _add_pair(of, o0, row_e, row_f, i0, taps):
    """Stride 2, taps e = 0 and f = 1 along W (offsets one apart) added in one loop over the input columns both
    reach, whose stores then fill whole pairs of output columns (LLVM vectorizes that interleave, not a lone
    stride-2 one); the columns only one reaches are added singly."""
    e, f = 0, 1
    off = taps[0, e]
    lo = max(taps[1, e], taps[1, f])
    hi = min(taps[2, e], taps[2, f])
    if lo >= hi:
        _add_strided(of, o0 + off, row_e, i0, taps[1, e], taps[2, e], 2)
        _add_strided(of, o0 + taps[0, f], row_f, i0, taps[1, f], taps[2, f], 2)
        return
    _add_strided(of, o0 + off, row_e, i0, taps[1, e], lo, 2)
    _add_strided(of, o0 + off, row_e, i0, hi, taps[2, e], 2)
    _add_strided(of, o0 + taps[0, f], row_f, i0, taps[1, f], lo, 2)
    _add_strided(of, o0 + taps[0, f], row_f, i0, hi, taps[2, f], 2)
    dst = of[o0 + off + 2 * lo:]
    src_e = row_e[i0 + lo:]
    src_f = row_f[i0 + lo:]
    for j in range(hi - lo):
        dst[_u(2 * j)] += src_e[_u(j)]
        dst[_u(2 * j + 1)] += src_f[_u(j)]


@njit(cache=True, nogil=True)
def conv_transpose(x, wt, bias, k, s, d, p, taps, tile_planes, m_blocks, chunk_planes, use_blas, out, u0, u1):
    """Units [u0, u1) of (image, group, tile of `tile_planes` output planes, block of output channels); input
    planes are taken `chunk_planes` at a time. `bias` is a length-M array or empty. Without `use_blas` the
    columns are computed by a loop over input channels (for few rows, where copying the input for BLAS costs
    more than the product)."""
    n_img, n_ch, in_d, in_h, in_w = x.shape
    group = wt.shape[0]
    m_out, od, oh, ow = out.shape[1], out.shape[2], out.shape[3], out.shape[4]
    cg = n_ch // group
    mg = m_out // group
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    pd, ph = p[0], p[1]
    kvol = kd * kh * kw
    plane = in_h * in_w
    n_tiles = (od + tile_planes - 1) // tile_planes
    mb = (mg + m_blocks - 1) // m_blocks
    has_bias = bias.size > 0
    # a 2x2 stride-2 kernel (upsampling): both taps along W fill one output row's column pairs, added in one loop
    paired = sw == 2 and kw == 2 and dw == 1 and in_w >= PAIR_MIN_WIDTH
    xf = x.reshape(-1)
    of = out.reshape(-1)
    colbuf = np.empty(mb * kvol * chunk_planes * plane, dtype=out.dtype)
    for u in range(u0, u1):
        mblk, tile, g, n = work_unit(u, m_blocks, n_tiles, group)
        r0 = tile * tile_planes
        r1 = min(od, r0 + tile_planes)
        m0 = mblk * mb
        m1 = min(mg, m0 + mb)
        if m0 >= m1:
            continue
        out_plane = oh * ow
        for m in range(m0, m1):  # the tile's output starts as the bias
            base = ((n * m_out + g * mg + m) * od + r0) * out_plane
            bv = bias[g * mg + m] if has_bias else out.dtype.type(0)
            for q in range((r1 - r0) * out_plane):
                of[_u(base + q)] = bv
        # input planes z reaching output planes [r0, r1): r0 <= z*sd - pd + a*dd < r1 for some tap a
        z0 = max(0, -((-(r0 + pd - (kd - 1) * dd)) // sd))
        z1 = min(in_d, (r1 - 1 + pd) // sd + 1)
        rows = (m1 - m0) * kvol
        wblk = wt[g, m0 * kvol:m1 * kvol]
        group_start = (n * n_ch + g * cg) * in_d * plane
        xgroup = xf[group_start:group_start + cg * in_d * plane].reshape((cg, in_d * plane))
        for c0 in range(z0, z1, chunk_planes):
            c1 = min(z1, c0 + chunk_planes)
            npx = (c1 - c0) * plane
            cols = colbuf[:rows * npx].reshape((rows, npx))
            if use_blas:  # the group's input planes [c0, c1) as a (C/group, pixels) matrix of lying-apart rows
                gemm(wblk, xgroup[:, c0 * plane:c1 * plane], cols, 1.0, 0.0)
            else:  # few rows: a product row by row, reading the input in place
                cols[:] = 0
                for c in range(cg):
                    src = ((n * n_ch + g * cg + c) * in_d + c0) * plane
                    for t in range(rows):
                        wv = wblk[t, c]
                        dst = cols[t]
                        for q in range(npx):
                            dst[_u(q)] += wv * xf[_u(src + q)]
            for t in range(rows // kw):  # (channel, a, b): rows t * kw + e, e along W
                m = m0 + t // (kd * kh)
                a = (t // kh) % kd
                b = t % kh
                obase = (n * m_out + g * mg + m) * od
                for z in range(c0, c1):
                    oz = z * sd - pd + a * dd
                    if oz < r0 or oz >= r1:
                        continue
                    for y in range(in_h):
                        oy = y * sh - ph + b * dh
                        if oy < 0 or oy >= oh:
                            continue
                        o0 = ((obase + oz) * oh + oy) * ow
                        i0 = ((z - c0) * in_h + y) * in_w
                        if paired:
                            _add_pair(of, o0, cols[t * 2], cols[t * 2 + 1], i0, taps)
                        else:
                            for e in range(kw):
                                _add_strided(of, o0 + taps[0, e], cols[t * kw + e], i0, taps[1, e], taps[2, e], sw)
