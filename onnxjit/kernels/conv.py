"""Convolution kernels over 3 spatial dims (1-D and 2-D convs come in with unit leading spatial dims).

Layouts: x (N, C, D, H, W), w (M, C/group, KD, KH, KW), all C-contiguous. Geometry comes as 3-tuples: kernel k,
strides s, dilations d, head pads p; `taps` is the per-tap table along W (`tap_table`). Each kernel fills its
share [u0, u1) of the work units into a preallocated output and releases the GIL, so the caller can spread the
units over threads. Strategies:
  * `conv_gemm`: units (image, group, tile of output rows, block of output channels); per unit the group's
    weights times the tile's im2col matrix with BLAS (float32 stays float32; BLAS runs single-threaded here, the
    parallelism being over units); 1x1 unpadded stride-1 convs read the input as it is, no im2col.
  * `conv_winograd`: 3x3 stride-1 2-D convs with enough channels and tiles, by Winograd F(4x4, 3x3);
    `conv_winograd_packed` for float32, its GEMMs on kernels.packed_gemm.
  * `conv_direct`: units (image, output channel), accumulating shifted zero-padded input planes; for grouped
    convs with few channels per group (depthwise), where a GEMM per group would be tiny.
  * `conv_broadcast`: float32 dense 2-D convs other than pointwise and Winograd's (stems, strided convs, deep
    convs over small planes), units (image, band of output rows, group of output-channel blocks), vectors over
    the output channels times broadcast input values: no im2col, the raw weights.
  * `conv_packed`: float32 pointwise convs (and the im2col of 1-D and 3-D ones) on kernels.packed_gemm.
  * `conv_padded`: float32 grouped 2-D convs, packed_gemm's microkernel over a padded copy of each group.
  * `conv_depthwise_blocked`: float32 depthwise 2-D convs over small planes, units (image, block of LANES
    channels), channels-last in vector registers inside the kernel.
  * `conv_depthwise_rows`: float32 depthwise 2-D convs over wider planes, units (image, channel), 4 output rows
    at a time in vector registers, read with masked loads (the padding masked off).
  * `conv_depthwise_nhwc`: depthwise convs on channels-last images (com.onnxjit NhwcConv, written by the
    optimizer's layout pass), vectorized over channels.
Hot loops index with unsigned integers (`_u`): numba then skips its negative-index wraparound, which would
otherwise keep LLVM from vectorizing them.

Epilogue (com.onnxjit FusedConv): each kernel adds the bias and, when `z` is not empty, the residual z (the
output's shape: the sum is rounded as Conv then Add would), then applies the activation `kind` with its
constants `act` (see `onnxjit.kernels.linalg.activate`) to each output row as it writes it.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.core.extending import overload

from onnxjit.cache.jit import njit
from onnxjit.kernels.blas import gemm
from onnxjit.kernels.linalg import IDENTITY, activate, activate_rows, matmul_on_this_thread, register_clamp
from onnxjit.kernels.packed_gemm import (MR, add_rows, aligned_start, bias_rows, gemm_blocked, gemm_packed, pack_panels,
                                         panel_fma, scratch_size, store_rows, tile_at_offsets)
from onnxjit.kernels.simd import (LANES, LINE_FLOATS, aligned_array, aligned_empty, aligned_full, columns,
                                  into_window, prefetch_l2, to_planes, vclamp, vfma, vload, vload_cols,
                                  vload_even_cols, vsplat, vstore, vstore_first)
from onnxjit.kernels.views import read_only
from onnxjit.kernels.views import u64 as _u


def valid_range(off, stride, size, n_out):
    """[j0, j1): the outputs j whose input j*stride + off falls inside [0, size)."""
    j0 = 0 if off >= 0 else (-off + stride - 1) // stride
    rem = size - off
    j1 = min((rem + stride - 1) // stride if rem > 0 else 0, n_out)
    return min(j0, j1), j1


def tap_table(kw, dw, pw, sw, in_w, ow):
    """Per kernel tap e along W: its input offset and the outputs [j0, j1) it reaches inside the input."""
    tab = np.empty((3, kw), dtype=np.int64)
    for e in range(kw):
        off = e * dw - pw
        tab[0, e] = off
        tab[1, e], tab[2, e] = valid_range(off, sw, in_w, ow)
    return tab


# output rows narrower than this are gathered element by element (see _im2col); from 8 on, in runs: resnets'
# stride-2 1x1 projections over 56x56 and 28x28 inputs, output rows of 28 and 14, gathered 64 channels' im2col in
# 56 us element by element and 35 in runs (256 channels 301 -> 195 us; one Intel Xeon AVX-512 core)
SHORT_ROW = 8


@njit(cache=True, nogil=True, forceinline=True)
def _col_index(dst0, r, col, rows, npx, blocked):
    """Where element (r, col) of a rows x npx im2col matrix lies in its buffer from dst0 (see _put_run)."""
    if blocked:
        return _u(dst0 + ((col // LANES) * rows + r) * LANES + col % LANES)
    return _u(dst0 + r * npx + col)


@njit(cache=True, nogil=True, forceinline=True)
def _put_run(dst, dst0, r, col, n, rows, npx, blocked, src, s0, sw):
    """Elements (r, col + t), t < n, of a rows x npx im2col matrix in its buffer from dst0 = src[s0 + t * sw]
    (zeros where src is empty): row-major, or `blocked` as packed_gemm's blocks of LANES columns ((col //
    LANES, r, col % LANES)), written in runs that stay inside one block so each is a plain loop LLVM
    vectorizes (a strided one with shuffles): element by element, with the block arithmetic in the loop, the
    im2col of a 3->16-channel stride-2 stem conv took three times its GEMM."""
    zero = dst.dtype.type(0)
    t = 0
    while t < n:
        c = col + t
        if blocked:
            lane = c % LANES
            m = min(n - t, LANES - lane)
            d = _u(dst0 + ((c // LANES) * rows + r) * LANES + lane)
        else:
            m = n - t
            d = _u(dst0 + r * npx + c)
        if src.size == 0:
            for i in range(m):
                dst[d + _u(i)] = zero
        elif sw == 1:
            a = _u(s0 + t)
            for i in range(m):
                dst[d + _u(i)] = src[a + _u(i)]
        elif sw == 2:  # a constant stride: de-interleaving shuffles (a run-time one stays scalar)
            a = _u(s0 + t * 2)
            for i in range(m):
                dst[d + _u(i)] = src[a + _u(2 * i)]
        else:
            a = _u(s0 + t * sw)
            for i in range(m):
                dst[d + _u(i)] = src[a + _u(i * sw)]
        t += m


@njit(cache=True, nogil=True, forceinline=True)
def im2col_row(r, kvol, kh, kw):
    """(channel, tap along D, H, W) of im2col row r: rows run over the channels, each over its kvol taps."""
    c = r // kvol
    rem = r - c * kvol
    a = rem // (kh * kw)
    rem -= a * (kh * kw)
    b = rem // kw
    return c, a, b, rem - b * kw


@njit(cache=True, nogil=True)
def _im2col(x, n, c0, k, s, d, p, taps, r0, r1, cw0, cw1, oh, ow, rows, dst, dst0, blocked):
    """The im2col matrix (rows = cg * kvol, (r1 - r0) * (cw1 - cw0)) of image n's channels from c0, output
    columns [cw0, cw1) of rows [r0, r1) (of od * oh, each ow wide), into dst from dst0, row-major or `blocked`
    (see _put_run)."""
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    pd, ph = p[0], p[1]
    in_d, in_h, in_w = x.shape[2], x.shape[3], x.shape[4]
    kvol = kd * kh * kw
    width = cw1 - cw0
    npx = (r1 - r0) * width
    xf = x.reshape(-1)
    nothing = xf[:0]
    no_start, no_step = np.int64(0), np.int64(1)  # int64, not literals: _put_run compiles once for all its calls
    zero = dst.dtype.type(0)
    for r in range(rows):
        c, a, b, e = im2col_row(r, kvol, kh, kw)
        plane = (n * x.shape[1] + c0 + c) * in_d
        off = taps[0, e]
        j0 = min(max(taps[1, e], cw0), cw1)  # the tap's columns inside the input, within the window
        j1 = min(max(taps[2, e], cw0), cw1)
        for q in range(r0, r1):
            i = q // oh
            h = q - i * oh
            zd = i * sd - pd + a * dd
            zh = h * sh - ph + b * dh
            base = (q - r0) * width - cw0  # where column cw0 of row q goes
            if zd < 0 or zd >= in_d or zh < 0 or zh >= in_h:
                if width < SHORT_ROW:
                    for j in range(cw0, cw1):
                        dst[_col_index(dst0, r, base + j, rows, npx, blocked)] = zero
                else:
                    _put_run(dst, dst0, r, base + cw0, width, rows, npx, blocked, nothing, no_start, no_step)
                continue
            row0 = ((plane + zd) * in_h + zh) * in_w
            if width < SHORT_ROW:  # element by element: the runs' set-up would cost more than they save
                for j in range(cw0, j0):
                    dst[_col_index(dst0, r, base + j, rows, npx, blocked)] = zero
                src = row0 + off
                if sw == 1:
                    for j in range(j0, j1):
                        dst[_col_index(dst0, r, base + j, rows, npx, blocked)] = xf[_u(src + j)]
                else:
                    for j in range(j0, j1):
                        dst[_col_index(dst0, r, base + j, rows, npx, blocked)] = xf[_u(src + j * sw)]
                for j in range(j1, cw1):
                    dst[_col_index(dst0, r, base + j, rows, npx, blocked)] = zero
                continue
            _put_run(dst, dst0, r, base + cw0, j0 - cw0, rows, npx, blocked, nothing, no_start, no_step)
            _put_run(dst, dst0, r, base + j0, j1 - j0, rows, npx, blocked, xf, row0 + j0 * sw + off, sw)
            _put_run(dst, dst0, r, base + j1, cw1 - j1, rows, npx, blocked, nothing, no_start, no_step)


@njit(cache=True, nogil=True)
def _finish_rows(out3, z3, bias, n, m0, m1, p0, npx, kind, act):
    """The epilogue over out3[n, m0:m1, p0:p0 + npx]: + bias (where not empty), + z (where not empty), then the
    activation."""
    has_bias = bias.size > 0
    zero = out3.dtype.type(0)
    if z3.size > 0 or has_bias:
        for mo in range(m0, m1):
            orow = out3[n, mo]
            bv = bias[mo] if has_bias else zero  # a float 0 of out's dtype: an int 0 made the sums float64
            if z3.size > 0:
                zrow = z3[n, mo]
                for j in range(p0, p0 + npx):
                    orow[_u(j)] = (orow[_u(j)] + bv) + zrow[_u(j)]
            else:
                for j in range(p0, p0 + npx):
                    orow[_u(j)] += bv
    if kind != IDENTITY:  # whole rows (a small plane's tile) in one call
        plane = out3.shape[2]
        activate_rows(out3.reshape(-1), (n * out3.shape[1] + m0) * plane, plane, m1 - m0, p0, npx, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def work_unit(u, n_mb, ntiles, group):
    """(channel block, tile, group, image) of work unit u, channel blocks varying fastest: the units of conv_gemm,
    conv_packed and conv_transpose's kernel."""
    mblk = u % n_mb
    rest = u // n_mb
    tile = rest % ntiles
    rest //= ntiles
    return mblk, tile, rest % group, rest // group


@njit(cache=True, nogil=True, forceinline=True)
def _tile_span(tile, tile_rows, tile_cols, nrows, ow):
    """(first row, end row, first column, end column, first pixel, pixels) of output tile `tile`: `tile_rows`
    whole rows of ow pixels, or, where tile_cols < ow (tile_rows 1), `tile_cols` columns of one row."""
    if tile_cols >= ow:
        r0 = tile * tile_rows
        r1 = min(nrows, r0 + tile_rows)
        return r0, r1, 0, ow, r0 * ow, (r1 - r0) * ow
    per_row = -(-ow // tile_cols)
    r0 = tile // per_row
    c0 = (tile - r0 * per_row) * tile_cols
    c1 = min(ow, c0 + tile_cols)
    return r0, r0 + 1, c0, c1, r0 * ow + c0, c1 - c0


@njit(cache=True, nogil=True, forceinline=True)
def tile_count(nrows, tile_rows, tile_cols, ow):
    """How many tiles _tile_span cuts the output rows into."""
    if tile_cols >= ow:
        return -(-nrows // tile_rows)
    return nrows * -(-ow // tile_cols)


@njit(cache=True, nogil=True)
def conv_gemm(x, w, bias, z, group, k, s, d, p, taps, tile_rows, tile_cols, m_block, pointwise, kind, act, out,
              u0, u1):
    """Conv as GEMMs, units [u0, u1) of (image, group, tile of `tile_rows` output rows or of `tile_cols` columns
    of one (see _tile_span), block of `m_block` output channels): the group's weights times the tile's im2col
    matrix, or, for a pointwise conv (`pointwise`: 1x1, stride 1, unpadded), times the tile's block of input
    columns as it lies in x. The GEMM writes its block of output rows in place (blas.gemm on strided views), and
    the epilogue runs over those rows while they are in cache. out is (N, M, OD, OH, OW); `bias` a length-M array
    or empty; z is out's shape or empty."""
    n_img, n_ch = x.shape[0], x.shape[1]
    m_out = w.shape[0]
    od, oh, ow = out.shape[2], out.shape[3], out.shape[4]
    cg = n_ch // group
    mg = m_out // group
    kk = cg * k[0] * k[1] * k[2]
    nrows = od * oh
    wm = w.reshape((group, mg, kk))
    x3 = x.reshape((n_img, n_ch, x.shape[2] * x.shape[3] * x.shape[4]))
    out3 = out.reshape((n_img, m_out, nrows * ow))
    z3 = z.reshape((z.shape[0], z.shape[1], z.shape[2] * z.shape[3] * z.shape[4]))
    ntiles = tile_count(nrows, tile_rows, tile_cols, ow)
    n_mb = (mg + m_block - 1) // m_block
    colbuf = np.empty(0 if pointwise else kk * tile_rows * min(ow, tile_cols), dtype=out.dtype)
    for u in range(u0, u1):
        mblk, tile, g, n = work_unit(u, n_mb, ntiles, group)
        r0, r1, cw0, cw1, p0, npx = _tile_span(tile, tile_rows, tile_cols, nrows, ow)
        m0 = g * mg + mblk * m_block
        m1 = min(g * mg + mg, m0 + m_block)
        if pointwise:
            operand = x3[n, g * cg:(g + 1) * cg, p0:p0 + npx]
        else:
            _im2col(x, n, g * cg, k, s, d, p, taps, r0, r1, cw0, cw1, oh, ow, kk, colbuf, 0, False)
            operand = colbuf[:kk * npx].reshape((kk, npx))
        gemm(wm[g, m0 - g * mg:m1 - g * mg], operand, out3[n, m0:m1, p0:p0 + npx], 1.0, 0.0)
        _finish_rows(out3, z3, bias, n, m0, m1, p0, npx, kind, act)


@njit(cache=True, nogil=True)
def conv_packed(x, wp, m_out, bias, z, group, k, s, d, p, taps, tile_rows, tile_cols, m_block, chunk, pointwise, kind,
                act, out, u0, u1):
    """conv_gemm for float32 with the weights packed (`packed_gemm.pack_panels` of (group, M / group, kk)) and
    multiplied by packed_gemm's microkernel: the same units, `m_block` a multiple of packed_gemm.MR; the bias,
    the residual and a Relu or Clip are applied in the microkernel's registers (a 16->96-channel 1x1 conv over
    112x112 pixels wrote 4.8 MB, which a second pass read and wrote again; resnet's 128->512 over 28x28 with its
    residual and Relu took 660 us on two Intel Xeon threads against 396 without them, each a pass over 1.6 MB);
    other activations by the same epilogue as conv_gemm's; `chunk`: columns of a GEMM pass (see
    packed_gemm.gemm_packed)."""
    n_img, n_ch = x.shape[0], x.shape[1]
    od, oh, ow = out.shape[2], out.shape[3], out.shape[4]
    cg = n_ch // group
    mg = m_out // group
    kk = cg * k[0] * k[1] * k[2]
    nrows = od * oh
    npix_in = x.shape[2] * x.shape[3] * x.shape[4]
    xf = x.reshape(-1)
    out3 = out.reshape((n_img, m_out, nrows * ow))
    of = out.reshape(-1)
    zf = z.reshape(-1)  # the residual, laid out as the output (or empty): added in registers
    no_z = zf[:0]
    z3 = no_z.reshape((0, 0, 0))
    no_bias = bias[:0]
    ntiles = tile_count(nrows, tile_rows, tile_cols, ow)
    n_mb = (mg + m_block - 1) // m_block
    # the im2col matrix is written straight into packed_gemm's blocks of columns, 64-byte aligned
    colbuf = np.empty(0 if pointwise else kk * (-(-tile_rows * min(ow, tile_cols) // LANES) + 1) * LANES,
                      dtype=np.float32)
    col0 = 0 if pointwise else aligned_start(colbuf)
    scratch = np.empty(scratch_size(kk, chunk), dtype=np.float32)
    lo, hi, kind = register_clamp(kind, act, False)  # the residual is added in registers, before the clamp
    for u in range(u0, u1):
        mblk, tile, g, n = work_unit(u, n_mb, ntiles, group)
        r0, r1, cw0, cw1, p0, npx = _tile_span(tile, tile_rows, tile_cols, nrows, ow)
        i0 = mblk * m_block
        i1 = min(mg, i0 + m_block)
        c0 = (n * m_out + g * mg + i0) * nrows * ow + p0
        gbias = bias[g * mg:(g + 1) * mg] if bias.size > 0 else no_bias
        if pointwise:
            gemm_packed(wp, g, i0 // MR, -(-i1 // MR), mg, gbias, xf, (n * n_ch + g * cg) * npix_in + p0, npix_in,
                        npx, of, c0, nrows * ow, zf, chunk, scratch, lo, hi)
        else:
            _im2col(x, n, g * cg, k, s, d, p, taps, r0, r1, cw0, cw1, oh, ow, kk, colbuf, col0, True)
            gemm_blocked(wp, g, i0 // MR, -(-i1 // MR), mg, gbias, colbuf, col0, npx, of, c0, nrows * ow, zf,
                         scratch, lo, hi)
        if kind != IDENTITY:
            _finish_rows(out3, z3, no_bias, n, g * mg + i0, g * mg + i1, p0, npx, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def _phase_row(xf, src, in_w, pw, sw, wq, dst, d0, plane):
    """One input row (xf[src:src + in_w]) padded by pw in front, into its sw column phases: phase px's row, wq
    wide at dst[d0 + px * plane], gets padded columns px, px + sw, ... (the padding's places left as they are),
    each a plain strided loop."""
    if sw == 1:  # one phase: a contiguous copy, which vectorizes (the strided loop below does not)
        c1 = min(wq, in_w + pw)
        s = _u(src - pw)
        for q in range(_u(pw), _u(c1)):
            dst[_u(d0) + q] = xf[s + q]
        return
    for px in range(sw):
        c0 = max(0, -(-(pw - px) // sw))  # phase columns inside the input
        c1 = min(wq, -(-(in_w + pw - px) // sw))
        s = src + px - pw
        d = d0 + px * plane
        for q in range(c0, c1):
            dst[_u(d + q)] = xf[_u(s + q * sw)]


@njit(cache=True, nogil=True)
def conv_padded(x, wp, m_out, bias, z, group, k, s, p, tile_rows, kind, act, out, u0, u1):
    """An undilated 2-D conv of few channels per group (regnet's 8) with packed_gemm's microkernel and no im2col:
    units [u0, u1) of (image, group, `tile_rows` output rows). Each unit copies the input rows its output rows
    read, of its group's channels, into a zero-padded buffer split into sh x sw phase planes as conv_direct does
    (phase (py, px) holds the padded rows py, py + sh, ... and columns px, px + sw, ...), each wq = ow + (kw - 1)
    // sw wide. Output pixel (r, c) is then at flat position r * wq + c of a phase plane, and the input of tap
    (ch, ky, kx) for it at that position plus the tap's fixed offset (its channel, phase plane, and (ky // sh) *
    wq + kx // sw), so every tap of a run of LANES positions is one vector load (`tile_at_offsets`). The columns
    past the output's width are computed and dropped. The im2col it replaces wrote each input value once per
    tap, element by element: same session, two Zen 3 threads, 13 groups of 8 channels over 28x28 616 -> 189 us,
    55 groups over 7x7 301 -> 102 us, 6 groups over 112x112 stride 2 769 -> 377 us."""
    n_img, n_ch, in_h, in_w = x.shape[0], x.shape[1], x.shape[3], x.shape[4]
    oh, ow = out.shape[3], out.shape[4]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    ph, pw = p[1], p[2]
    cg = n_ch // group
    mg = m_out // group
    kk = cg * kh * kw
    wq = ow + (kw - 1) // sw  # a phase plane: every output column's taps inside it
    hq = oh + (kh - 1) // sh
    plane = hq * wq
    chan = sh * sw * plane
    npos = oh * wq  # flat output positions, past-width columns included
    nblk = -(-npos // LANES)
    buf = np.zeros(cg * chan + nblk * LANES + plane, dtype=np.float32)  # slack: the last run reads past npos
    offs = np.empty(kk, dtype=np.int64)
    for ch in range(cg):
        for a in range(kh):
            for b in range(kw):
                offs[(ch * kh + a) * kw + b] = ch * chan + ((a % sh) * sw + b % sw) * plane + (a // sh) * wq + b // sw
    tile = np.empty(MR * LANES + LANES, dtype=np.float32)
    t0 = aligned_start(tile)
    lo, hi, kind = register_clamp(kind, act, z.size > 0)
    xf = x.reshape(-1)
    of = out.reshape(-1)
    apf = wp.reshape(-1)
    out3 = out.reshape((n_img, m_out, oh * ow))
    z3 = z.reshape((z.shape[0], z.shape[1], z.shape[2] * z.shape[3] * z.shape[4]))
    no_bias = bias[:0]
    panels = -(-mg // MR)
    ntiles = -(-oh // tile_rows)
    for u in range(u0, u1):
        t = u % ntiles
        g = (u // ntiles) % group
        n = u // (ntiles * group)
        or0 = t * tile_rows
        or1 = min(oh, or0 + tile_rows)
        qr1 = or1 + (kh - 1) // sh  # the phase rows [or0, qr1) these output rows read
        for ch in range(cg):  # the padded copy: the zeros around are never written, so they stay
            src = (n * n_ch + g * cg + ch) * in_h * in_w
            for r in range(max(0, or0 * sh - ph), in_h):
                gr = r + ph
                qr = gr // sh
                if qr < or0:
                    continue
                if qr >= qr1:
                    break
                _phase_row(xf, src + r * in_w, in_w, pw, sw, wq, buf, ch * chan + (gr - qr * sh) * sw * plane + qr * wq,
                           plane)
        a_base = g * wp.shape[1] * kk * MR
        for pnl in range(panels):
            i0 = pnl * MR
            rows = min(MR, mg - i0)
            sums = bias_rows(bias, g * mg + i0, g * mg + mg)
            a0 = _u(a_base + pnl * kk * MR)
            for blk in range(or0 * wq // LANES, -(-or1 * wq // LANES)):
                q0 = blk * LANES
                tile_at_offsets(apf, a0, kk, buf, _u(q0), offs, tile, _u(t0), sums, lo, hi)
                r = q0 // wq
                c = q0 - r * wq
                o = ((n * m_out + g * mg + i0) * oh + r) * ow + c  # where lane l's output goes, when c < ow
                if c + LANES <= ow and or0 <= r < or1:  # all lanes in one output row: copied as whole rows
                    for i in range(rows):
                        for l in range(LANES):
                            of[_u(o + i * oh * ow + l)] = tile[_u(t0 + i * LANES + l)]
                    continue
                for l in range(LANES):
                    if c < ow and or0 <= r < or1:
                        for i in range(rows):
                            of[_u(o + i * oh * ow)] = tile[_u(t0 + i * LANES + l)]
                    c += 1
                    o += 1
                    if c == wq:
                        c = 0
                        r += 1
                        o += ow - wq
        if z3.size > 0 or kind != IDENTITY:
            _finish_rows(out3, z3, no_bias, n, g * mg, g * mg + mg, or0 * ow, (or1 - or0) * ow, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def _phase_geometry(oh, ow, kh, kw, sh, sw, dh, dw):
    """(rows hq and columns wq of a phase plane, elements per phase plane, each tap's phase plane and shift in it)
    for conv_direct's and conv_depthwise_rows' phase planes. A plane has room past its rows for a vector read
    from any tap's shift at any output position (LANES more than the last one)."""
    hq = -(-((oh - 1) * sh + (kh - 1) * dh + 1) // sh)
    wq = -(-((ow - 1) * sw + (kw - 1) * dw + 1) // sw)
    most = ((kh - 1) * dh // sh) * wq + (kw - 1) * dw // sw  # largest tap shift
    phase = max(hq * wq, most + oh * wq + LANES)
    offs = np.empty(kh * kw, dtype=np.int64)
    for b in range(kh):
        for e in range(kw):
            offs[b * kw + e] = ((b * dh) % sh * sw + (e * dw) % sw) * phase + (b * dh // sh) * wq + e * dw // sw
    return hq, wq, phase, offs


@njit(cache=True, nogil=True, forceinline=True)
def _fill_phases(xf, src, in_h, in_w, sh, sw, ph, pw, hq, wq, phase, planes):
    """The input plane at xf[src:], zero-padded, into its sh * sw phase planes: phase (py, px) holds the padded
    plane's rows py, py + sh, ... and columns px, px + sw, ... (only the places inside the input are written:
    the padding's stay as the zeroed buffer has them)."""
    for py in range(sh):
        if sw == 2:  # both column phases of a row in one pass (a de-interleave, vectorized)
            _split_pairs(xf, planes, src, py, sh, ph, pw, hq, wq, in_h, in_w, phase)
            continue
        for r in range(hq):
            row = r * sh + py - ph
            if 0 <= row < in_h:
                _phase_row(xf, src + row * in_w, in_w, pw, sw, wq, planes, py * sw * phase + r * wq, phase)


@njit(cache=True, nogil=True)
def conv_direct(x, w, bias, z, group, k, s, d, p, kind, act, out, u0, u1):
    """Conv as direct accumulation, units [u0, u1) of (image, output channel). out is (N, M, OD, OH, OW); z is
    out's shape or empty.

    Each input plane the unit reads is first copied, zero-padded, into sh*sw phase planes: phase (py, px) holds
    the padded plane's rows py, py+sh, ... and columns px, px+sw, ... Every tap then reads one phase plane at a
    fixed shift with unit stride, so a tap is one loop over the flattened plane: the output is accumulated `wq`
    (the phase width) columns wide and the extra columns are dropped. That is a loop of about oh*wq elements
    per tap instead of oh loops of ow (7 to 56 for depthwise convs), and it vectorizes; its length is rounded up
    to a whole number of vector iterations (the buffers have room), since the scalar remainder of short loops
    cost as much as the vector part. `add_taps` adds a plane's taps (in vector registers for float32), and
    stride 2 fills both column phases of a row in one de-interleaving pass (`_split_pairs`). AMD Zen 3 VM, one
    thread, 3x3 depthwise with Relu, with the activation's masked store gone too (linalg.activate): 32 channels
    at 112x112 620 -> 270 us, 96 at 112x112 stride 2 930 -> 440 us, 144 at 56x56 600 -> 320 us, 576 at 14x14
    245 -> 180-195 us."""
    n_img, n_ch, in_d, in_h, in_w = x.shape
    m_out = w.shape[0]
    od, oh, ow = out.shape[2], out.shape[3], out.shape[4]
    cg = n_ch // group
    mg = m_out // group
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    pd, ph, pw = p
    hq, wq, phase, offs = _phase_geometry(oh, ow, kh, kw, sh, sw, dh, dw)
    span = -(-((oh - 1) * wq + ow) // LANES) * LANES  # accumulator elements a tap updates
    zero = out.dtype.type(0)
    planes = np.zeros(sh * sw * phase, dtype=out.dtype)
    acc = np.empty(span, dtype=out.dtype)
    has_z = z.size > 0
    xf, of, zf = x.reshape(-1), out.reshape(-1), z.reshape(-1)  # flat indices: no per-row views
    for t in range(u0, u1):
        n = t // m_out
        m = t - n * m_out
        g = m // mg
        bv = bias[m] if bias.size > 0 else zero
        for i in range(od):
            for q in range(span):
                acc[_u(q)] = bv
            for a in range(kd):
                zd = i * sd - pd + a * dd
                if zd < 0 or zd >= in_d:
                    continue
                for c in range(cg):
                    _fill_phases(xf, ((n * n_ch + g * cg + c) * in_d + zd) * in_h * in_w, in_h, in_w, sh, sw, ph,
                                 pw, hq, wq, phase, planes)
                    add_taps(acc, planes, span, w[m, c, a].reshape(-1), offs)
            o0 = ((n * m_out + m) * od + i) * oh * ow
            for h in range(oh):
                orow = o0 + h * ow
                arow = h * wq
                for j in range(ow):
                    of[_u(orow + j)] = acc[_u(arow + j)]
                if has_z:
                    for j in range(ow):
                        of[_u(orow + j)] += zf[_u(orow + j)]
            if kind != IDENTITY:
                activate(of, o0, o0 + oh * ow, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def _load_columns(xf, at, bits, sw):
    """The LANES columns sw apart from xf[at] that `bits` (simd.columns) allows, zeros elsewhere (sw 1 or 2; a
    branch the compiler takes out of the loops)."""
    return vload_cols(xf, at, bits) if sw == 1 else vload_even_cols(xf, at, bits)


@njit(cache=True, nogil=True)
def conv_depthwise_rows(x, w, bias, z, k, s, d, p, kind, act, out, u0, u1):
    """A depthwise 2-D conv (group = channels = outputs) of float32 NCHW images with column stride 1 or 2, units
    [u0, u1) of (image, channel); x, w, z and out 5-D as conv_direct's. 4 output rows at a time, one vector of
    LANES columns each, straight from the input: a tap is a masked load per row (simd.vload_cols; stride 2 the
    even columns of two vectors, vload_even_cols) and an FMA, the padding being the lanes masked off and the rows
    outside the input skipped. The sums stay in registers until bias, residual and a Relu or Clip are applied
    and they are stored: whole vectors (a row's last one ending at its end, overlapping the one before), or
    masked where a row is narrower than a vector (other activations run over the 4 rows while they are in
    cache).

    Why: copying each plane into zero-padded phase planes first (conv_direct's way, and this kernel's before)
    cost as much as the taps at stride 2, and rows narrower than a vector went out through a scratch block element
    by element. Emerald Rapids VM, one thread, 3x3 with Relu, the kernel alone, phase planes -> masked loads: 72
    channels at 56x56 stride 2 112 -> 58 us, 16 at 112x112 stride 2 102 -> 49, 88 at 28x28 65 -> 39, 32 at
    112x112 251 -> 223, 144 at 56x56 260 -> 250 (onnxruntime's NCHWc kernel, its layout copies not counted:
    42, 29, 25, 144 and 156)."""
    n_ch, in_h, in_w = x.shape[1], x.shape[3], x.shape[4]
    oh, ow = out.shape[3], out.shape[4]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    one = vsplat(np.float32(1))
    lo, hi, kind = register_clamp(kind, act, False)  # the residual is added in registers, before the clamp
    has_z = z.size > 0
    taps = kh * kw
    plane, oplane = in_h * in_w, oh * ow
    xf, wf, of, zf = x.reshape(-1), w.reshape(-1), out.reshape(-1), z.reshape(-1)
    masks = np.empty(kw, dtype=np.uint64)
    step = sh * in_w  # from one output row's input row to the next's
    for u in range(u0, u1):
        c = u % n_ch
        src = u * plane
        b0 = vsplat(bias[c] if bias.size > 0 else np.float32(0))
        w0 = c * taps
        for i in range(0, oh, 4):
            for j in range(0, ow, LANES):
                if ow >= LANES:  # the last vector ends at the row's end, overlapping the one before (recomputed):
                    j = min(j, ow - LANES)  # whole-vector stores; only rows narrower than a vector store masked
                for e in range(kw):  # each column shift's mask, for every row it reads
                    masks[e] = columns(j * sw + e * dw - pw, in_w, sw)
                a0, a1, a2, a3 = b0, b0, b0, b0
                for ta in range(kh):
                    r = i * sh + ta * dh - ph  # the input row of output row i
                    ok0 = 0 <= r < in_h
                    ok1 = 0 <= r + sh < in_h and i + 1 < oh
                    ok2 = 0 <= r + 2 * sh < in_h and i + 2 < oh
                    ok3 = 0 <= r + 3 * sh < in_h and i + 3 < oh
                    at = src + r * in_w + j * sw - pw
                    for e in range(kw):
                        wv = vsplat(wf[_u(w0 + ta * kw + e)])
                        m = masks[e]
                        if ok0:
                            a0 = vfma(wv, _load_columns(xf, at, m, sw), a0)
                        if ok1:
                            a1 = vfma(wv, _load_columns(xf, at + step, m, sw), a1)
                        if ok2:
                            a2 = vfma(wv, _load_columns(xf, at + 2 * step, m, sw), a2)
                        if ok3:
                            a3 = vfma(wv, _load_columns(xf, at + 3 * step, m, sw), a3)
                        at += dw
                # stored from registers (the stores written out here: helpers taking the arrays made Numba count
                # references to them around every call, atomics that took most of the time)
                o = u * oplane + i * ow
                if has_z:  # an FMA by 1: one rounding, as the sum's
                    m = columns(j, ow, 1)
                    a0 = vfma(one, vload_cols(zf, o + j, m), a0)
                    if i + 1 < oh:
                        a1 = vfma(one, vload_cols(zf, o + ow + j, m), a1)
                    if i + 2 < oh:
                        a2 = vfma(one, vload_cols(zf, o + 2 * ow + j, m), a2)
                    if i + 3 < oh:
                        a3 = vfma(one, vload_cols(zf, o + 3 * ow + j, m), a3)
                if ow >= LANES:
                    vstore(of, _u(o + j), vclamp(a0, lo, hi))
                    if i + 1 < oh:
                        vstore(of, _u(o + ow + j), vclamp(a1, lo, hi))
                    if i + 2 < oh:
                        vstore(of, _u(o + 2 * ow + j), vclamp(a2, lo, hi))
                    if i + 3 < oh:
                        vstore(of, _u(o + 3 * ow + j), vclamp(a3, lo, hi))
                else:
                    vstore_first(of, _u(o), vclamp(a0, lo, hi), ow)
                    if i + 1 < oh:
                        vstore_first(of, _u(o + ow), vclamp(a1, lo, hi), ow)
                    if i + 2 < oh:
                        vstore_first(of, _u(o + 2 * ow), vclamp(a2, lo, hi), ow)
                    if i + 3 < oh:
                        vstore_first(of, _u(o + 3 * ow), vclamp(a3, lo, hi), ow)
            if kind != IDENTITY:
                o = u * oplane + i * ow
                activate(of, o, o + min(4, oh - i) * ow, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def _row_taps3(xf, at, m0, m1, m2, inside, sw):
    """An input row's three column shifts for a vector of output columns (from xf[at], at + 1 and at + 2; the
    columns sw apart), as masked loads (`columns` masks m0-m2 allow the columns inside the input); zeros for a
    row outside the input."""
    if not inside:
        zero = vsplat(np.float32(0))
        return zero, zero, zero
    if sw == 1:
        return vload_cols(xf, at, m0), vload_cols(xf, at + 1, m1), vload_cols(xf, at + 2, m2)
    return vload_even_cols(xf, at, m0), vload_even_cols(xf, at + 1, m1), vload_even_cols(xf, at + 2, m2)


@njit(cache=True, nogil=True, forceinline=True)
def _dot_taps3(k0, k1, k2, v0, v1, v2, start):
    """start + k0 v0 + k1 v1 + k2 v2: one row of a 3x3 kernel's taps, a chain of three FMAs."""
    return vfma(k2, v2, vfma(k1, v1, vfma(k0, v0, start)))


@njit(cache=True, nogil=True)
def conv_depthwise_3x3(x, w, bias, z, s, p, kind, act, out, u0, u1):
    """conv_depthwise_rows for a 3x3 kernel, undilated, strides 1 or 2: units [u0, u1) of (image, channel), x, w,
    z and out 5-D as conv_direct's. Down each vector of LANES output columns, row after row, each input row is
    loaded once (its three column shifts, masked loads as conv_depthwise_rows') and kept in registers for the
    output rows that read it: the next one (stride 1) or the next two (stride 2) load one or two new rows. The
    nine weights stay in registers, and each output row sums its three tap rows as three short FMA chains.

    Why: conv_depthwise_rows loads each input row once per tap row that reads it (three times at stride 1), and
    its taps, loops of run-time length, read each weight from memory: it ran at a third of this one's speed.
    One Intel Xeon AVX-512 core, the kernel alone: 16 planes of 56x56 1.8 -> 0.8 us a plane."""
    n_ch, in_h, in_w = x.shape[1], x.shape[3], x.shape[4]
    oh, ow = out.shape[3], out.shape[4]
    sh, sw = s[1], s[2]
    ph, pw = p[1], p[2]
    one = vsplat(np.float32(1))
    zero = vsplat(np.float32(0))
    lo, hi, kind = register_clamp(kind, act, False)  # the residual is added in registers, before the clamp
    has_z = z.size > 0
    plane, oplane = in_h * in_w, oh * ow
    xf, wf, of, zf = x.reshape(-1), w.reshape(-1), out.reshape(-1), z.reshape(-1)
    for u in range(u0, u1):
        c = u % n_ch
        src = u * plane
        b0 = vsplat(bias[c] if bias.size > 0 else np.float32(0))
        w0 = c * 9
        k00, k01, k02 = vsplat(wf[w0]), vsplat(wf[w0 + 1]), vsplat(wf[w0 + 2])
        k10, k11, k12 = vsplat(wf[w0 + 3]), vsplat(wf[w0 + 4]), vsplat(wf[w0 + 5])
        k20, k21, k22 = vsplat(wf[w0 + 6]), vsplat(wf[w0 + 7]), vsplat(wf[w0 + 8])
        for j in range(0, ow, LANES):
            if ow >= LANES:  # the last vector ends at the row's end, overlapping the one before (recomputed)
                j = min(j, ow - LANES)
            m0 = columns(j * sw - pw, in_w, sw)
            m1 = columns(j * sw + 1 - pw, in_w, sw)
            m2 = columns(j * sw + 2 - pw, in_w, sw)
            zmask = columns(j, ow, 1)  # the residual's columns of this vector
            col = src + j * sw - pw
            r = -ph  # the first input row of output row 0
            # rows r and r + 1 (stride 1) or r (stride 2): what the first output row shares with the one before
            t0, t1, t2 = _row_taps3(xf, col + r * in_w, m0, m1, m2, 0 <= r < in_h, sw)
            c0, c1, c2 = zero, zero, zero
            if sh == 1:
                c0, c1, c2 = _row_taps3(xf, col + (r + 1) * in_w, m0, m1, m2, 0 <= r + 1 < in_h, sw)
            for i in range(oh):
                r = i * sh - ph
                if sh == 2:
                    c0, c1, c2 = _row_taps3(xf, col + (r + 1) * in_w, m0, m1, m2, 0 <= r + 1 < in_h, sw)
                n0, n1, n2 = _row_taps3(xf, col + (r + 2) * in_w, m0, m1, m2, 0 <= r + 2 < in_h, sw)
                a = _dot_taps3(k00, k01, k02, t0, t1, t2, b0)
                a1 = _dot_taps3(k10, k11, k12, c0, c1, c2, zero)
                a2 = _dot_taps3(k20, k21, k22, n0, n1, n2, zero)
                a = vfma(one, a2, vfma(one, a1, a))  # an FMA by 1: one rounding, as an add
                o = u * oplane + i * ow
                if has_z:
                    a = vfma(one, vload_cols(zf, o + j, zmask), a)
                if ow >= LANES:
                    vstore(of, _u(o + j), vclamp(a, lo, hi))
                else:
                    vstore_first(of, _u(o), vclamp(a, lo, hi), ow)
                if sh == 1:
                    t0, t1, t2 = c0, c1, c2
                    c0, c1, c2 = n0, n1, n2
                else:
                    t0, t1, t2 = n0, n1, n2
        if kind != IDENTITY:
            activate(of, u * oplane, (u + 1) * oplane, kind, act)


@njit(cache=True, nogil=True)
def conv_rows(x, wp, m_out, bias, z, k, s, d, p, tile_rows, kind, act, out, u0, u1):
    """A dense 2-D float32 conv over few input channels (a stem: 3 channels to 16 or 32) with output pixels as
    the vector lanes, units [u0, u1) of (image, band of `tile_rows` output rows); x, z and out 5-D as
    conv_direct's, wp the weights as packed_gemm panels (`pack_panels` of (1, M, C x KH x KW)): per output row, a
    vector of LANES output pixels at a time (a row's last one ending at its end, overlapping the one before) and a
    panel of MR output channels, each tap one masked load of the input row straight from NCHW (simd.vload_cols;
    column stride 2 the even columns of two vectors) shared by the panel's MR FMAs, its weights broadcast. The sums
    stay in registers until the bias, residual and a Relu or Clip are applied and the MR rows are stored as they
    lie in NCHW; other activations run over each channel's band of rows.

    Why: conv_broadcast puts output channels in the lanes, which a stem of 16 channels fills half of (AVX-512) and
    whose 27 taps a pixel cost a channels-last tile turned back to NCHW; as an im2col GEMM a stem is mostly its
    im2col."""
    n_ch, in_h, in_w = x.shape[1], x.shape[3], x.shape[4]
    oh, ow = out.shape[3], out.shape[4]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    kk = n_ch * kh * kw
    panels = wp.shape[1]
    wf = wp.reshape(-1)
    lo, hi, kind = register_clamp(kind, act, False)  # the residual is added in registers, before the clamp
    has_z = z.size > 0
    plane, oplane = in_h * in_w, oh * ow
    xf, of, zf = x.reshape(-1), out.reshape(-1), z.reshape(-1)
    n_vec = -(-ow // LANES)
    masks = np.empty((n_vec, kw), dtype=np.uint64)  # each vector's column shifts, for every row and channel
    for jv in range(n_vec):
        j = min(jv * LANES, ow - LANES)  # (ow >= LANES: whole-vector stores, the last ending at the row's end)
        for e in range(kw):
            masks[jv, e] = columns(j * sw + e * dw - pw, in_w, sw)
    bands = -(-oh // tile_rows)
    for u in range(u0, u1):
        n = u // bands
        r0 = (u - n * bands) * tile_rows
        r1 = min(oh, r0 + tile_rows)
        for i in range(r0, r1):
            for jv in range(n_vec):
                j = min(jv * LANES, ow - LANES)
                for pn in range(panels):
                    m0 = pn * MR
                    rows = min(MR, m_out - m0)
                    s0, s1, s2, s3, s4, s5, s6, s7 = bias_rows(bias, m0, m_out)
                    a0, a1, a2, a3 = vsplat(s0), vsplat(s1), vsplat(s2), vsplat(s3)
                    a4, a5, a6, a7 = vsplat(s4), vsplat(s5), vsplat(s6), vsplat(s7)
                    w0 = pn * kk * MR
                    for c in range(n_ch):
                        for b in range(kh):
                            r = i * sh + b * dh - ph
                            if r < 0 or r >= in_h:
                                continue
                            at = (n * n_ch + c) * plane + r * in_w + j * sw - pw
                            wa = w0 + (c * kh + b) * kw * MR
                            for e in range(kw):
                                xv = _load_columns(xf, at + e * dw, masks[jv, e], sw)
                                a0, a1, a2, a3, a4, a5, a6, a7 = panel_fma(wf, _u(wa + e * MR), xv, a0, a1, a2, a3,
                                                                           a4, a5, a6, a7)
                    o = (n * m_out + m0) * oplane + i * ow + j
                    if has_z:
                        a0, a1, a2, a3, a4, a5, a6, a7 = add_rows(zf, _u(o), _u(oplane), rows, a0, a1, a2, a3, a4,
                                                                  a5, a6, a7)
                    store_rows(of, _u(o), _u(oplane), rows, lo, hi, a0, a1, a2, a3, a4, a5, a6, a7)
        if kind != IDENTITY:
            activate_rows(of, n * m_out * oplane, oplane, m_out, r0 * ow, (r1 - r0) * ow, kind, act)


@njit(cache=True, nogil=True)
def conv_depthwise_blocked(x, wt, bias, z, k, s, d, p, kind, act, out, u0, u1):
    """A depthwise 2-D conv (group = channels = outputs) of float32 NCHW images, units [u0, u1) of (image, block
    of LANES channels), x, w, z and out 5-D as conv_direct's. Each unit copies its channels of the input,
    channels-last, into a zero-padded window (simd.into_window; in L1 for a 14x14 plane), then accumulates 4
    output pixels at a time in vector registers, one vector of LANES channels each: a tap is one weight vector
    and four loads and FMAs, whatever the plane's size, stride or dilation. The result goes back to NCHW as the
    unit stores it.

    Why: over a 7x7 or 14x14 plane conv_direct's loops are short and its copies dominate (a 3x3 conv over 960
    channels at 7x7 took 363 us on one AMD Zen 3 thread, onnxruntime 112); the channels-last kernel
    (conv_depthwise_nhwc) needs a Transpose on each side."""
    n_img, n_ch, in_h, in_w = x.shape[0], x.shape[1], x.shape[3], x.shape[4]
    oh, ow = out.shape[3], out.shape[4]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    hp = (oh - 1) * sh + (kh - 1) * dh + 1  # rows and columns of the padded window the taps read
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    lanes = _u(LANES)
    window = aligned_full(hp * wp * LANES, np.float32(0))  # its padding stays zero: units write the inside only
    acc = aligned_empty(oh * ow * LANES)
    flat = aligned_empty(in_h * in_w * LANES)
    bv = np.zeros(LANES, dtype=np.float32)
    lo, hi, kind = register_clamp(kind, act, z.size > 0)
    n_blocks = -(-n_ch // LANES)
    taps = kh * kw
    plane, oplane = in_h * in_w, oh * ow
    r1, c1 = min(hp, in_h + ph), min(wp, in_w + pw)  # the window's rows and columns inside the input
    xf, wf, of = x.reshape(-1), wt.reshape(-1), out.reshape(-1)
    out3 = out.reshape((n_img, n_ch, oplane))
    z3 = z.reshape((z.shape[0], z.shape[1], z.shape[2] * z.shape[3] * z.shape[4]))
    no_bias = bias[:0]
    step = _u(sw) * lanes  # from one output pixel's window position to the next
    for u in range(u0, u1):
        n = u // n_blocks
        cb = (u - n * n_blocks) * LANES
        nc = min(LANES, n_ch - cb)
        into_window(xf, (n * n_ch + cb) * plane, plane, nc, in_w, flat, window, wp, ph, pw, r1, c1)
        w0 = cb * taps  # the block's weight vectors
        for c in range(nc):
            bv[c] = bias[cb + c] if bias.size > 0 else np.float32(0)
        b0 = vload(bv, 0)
        for i in range(oh):
            j = 0
            while j < ow:
                if ow >= 4:  # 4 pixels; the last group overlaps the one before where ow is not a multiple of 4
                    j = min(j, ow - 4)
                    a0, a1, a2, a3 = b0, b0, b0, b0
                    for b in range(kh):
                        row = _u(((i * sh + b * dh) * wp + j * sw) * LANES)
                        for e in range(kw):
                            wv = vload(wf, _u(w0 + (b * kw + e) * LANES))
                            o = row + _u(e * dw) * lanes
                            a0 = vfma(wv, vload(window, o), a0)
                            a1 = vfma(wv, vload(window, o + step), a1)
                            a2 = vfma(wv, vload(window, o + _u(2) * step), a2)
                            a3 = vfma(wv, vload(window, o + _u(3) * step), a3)
                    dst = _u((i * ow + j) * LANES)
                    vstore(acc, dst, vclamp(a0, lo, hi))
                    vstore(acc, dst + lanes, vclamp(a1, lo, hi))
                    vstore(acc, dst + _u(2) * lanes, vclamp(a2, lo, hi))
                    vstore(acc, dst + _u(3) * lanes, vclamp(a3, lo, hi))
                    j += 4
                else:
                    a0 = b0
                    for b in range(kh):
                        row = _u(((i * sh + b * dh) * wp + j * sw) * LANES)
                        for e in range(kw):
                            a0 = vfma(vload(wf, _u(w0 + (b * kw + e) * LANES)), vload(window, row + _u(e * dw) * lanes),
                                      a0)
                    vstore(acc, _u((i * ow + j) * LANES), vclamp(a0, lo, hi))
                    j += 1
        to_planes(acc, nc, oplane, of, (n * n_ch + cb) * oplane, oplane)
        if z3.size > 0 or kind != IDENTITY:
            _finish_rows(out3, z3, no_bias, n, cb, cb + nc, 0, oplane, kind, act)


def broadcast_weight_vectors(w):
    """conv_broadcast's and conv_depthwise_blocked's weights: (M, C, KH, KW) as (blocks of LANES output channels,
    taps, LANES) float32, a vector per block and tap, zeros past M; read-only. Made once per weight: packed inside
    each call, it took a third of a 128->32-channel 3x3 conv over 7x7 pixels (and gathered tap by tap in each
    unit, a quarter of a 576-channel 5x5 depthwise conv over 7x7). Block by block, with no zero-padded copy of
    the whole weight: 1.2 ms for a 512x512x3x3 weight against 6 ms through one."""
    m_out = w.shape[0]
    n_mb = -(-m_out // LANES)
    rows = w.reshape(m_out, -1)
    wt = aligned_array((n_mb, rows.shape[1], LANES))  # each vector whole cache lines
    for b in range(n_mb):
        block = rows[b * LANES:(b + 1) * LANES]
        if len(block) < LANES:
            wt[b] = 0
        wt[b, :, :len(block)] = block.T
    wt.flags.writeable = False
    return wt


# taps of a conv_broadcast pass: their weight vectors (LANES floats each: 32 KB with AVX-512) stay in L1 while
# every pixel group of the unit's rows passes over them
BROADCAST_TAPS_PER_PASS = 256


@njit(cache=True, nogil=True)
def conv_broadcast(x, wt, bias, z, k, s, d, p, tile_rows, m_blocks, kind, act, out, u0, u1):
    """A 2-D float32 conv with vectors over its output channels and no im2col: units [u0, u1) of (image, band of
    `tile_rows` output rows, group of `m_blocks` blocks of LANES output channels), groups fastest; x, z and out
    5-D as conv_direct's; wt the weights as vectors (`broadcast_weight_vectors`).

    Each unit copies its band's input rows into a zero-padded buffer. The band's output pixels, taken row after
    row as one sequence, go in groups of packed_gemm.MR (a last partial group computes into spare slots); per
    block of LANES output channels and pass of BROADCAST_TAPS_PER_PASS taps, each group adds every tap as one
    weight vector times the group's MR input values broadcast, MR vector accumulators held in registers and
    kept between passes in a channels-last tile, which goes back to NCHW through `simd.to_planes`; while a pass
    runs, its groups bring the next pass's weights into L2, a share each (prefetch_l2: the first group of a pass
    had waited for its weights from memory; 512->512 3x3 over 7x7, 16 convs' weights streamed, two threads:
    1.33-1.35x onnxruntime's time -> 1.25x). That is packed_gemm's
    microkernel with the roles turned: the weights are the vectors, the input the broadcast side, read in place
    at each tap's offset, and the tile's width is the output channels, not the pixels (of which a 7x7 or 14x14
    plane has few).

    Why: as a GEMM a stem (3 channels 3x3 to 16, 3 channels 7x7 to 64) is mostly its im2col (27 rows copied out
    of 3 strided planes for 16 or 32 output rows), and a deep conv over a small plane (256 -> 256 channels 3x3
    over 14x14 pixels: an im2col of 2,304 rows for 196 columns) copies as much as it multiplies; Winograd's
    transformed weights are 4x the raw ones, which a network streams from memory once per run."""
    n_img, n_ch, in_h, in_w = x.shape[0], x.shape[1], x.shape[3], x.shape[4]
    m_out = out.shape[1]
    oh, ow = out.shape[3], out.shape[4]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    taps = n_ch * kh * kw
    wp = (ow - 1) * sw + (kw - 1) * dw + 1  # the padded row width the taps read
    band_h = (tile_rows - 1) * sh + (kh - 1) * dh + 1
    buf = np.zeros(n_ch * band_h * wp, dtype=np.float32)
    n_mb = wt.shape[0]
    wt = wt.reshape(-1)
    bv = np.zeros(n_mb * LANES, dtype=np.float32)
    for m in range(m_out):
        bv[m] = bias[m] if bias.size > 0 else np.float32(0)
    offs = np.empty(taps, dtype=np.int64)  # each tap's place in buf, from the pixel's first
    for c in range(n_ch):
        for b in range(kh):
            for e in range(kw):
                offs[(c * kh + b) * kw + e] = (c * band_h + b * dh) * wp + e * dw
    slots = -(-tile_rows * ow // MR) * MR
    pix = np.zeros(slots, dtype=np.int64)  # each output pixel's place in buf (spare slots: 0, any place)
    acc = aligned_empty(slots * LANES)
    lo, hi, kind = register_clamp(kind, act, z.size > 0)
    no_lo, no_hi = np.float32(-np.inf), np.float32(np.inf)
    xf, of = x.reshape(-1), out.reshape(-1)
    out3 = out.reshape((n_img, m_out, oh * ow))
    z3 = z.reshape((z.shape[0], z.shape[1], z.shape[2] * z.shape[3] * z.shape[4]))
    no_bias = bias[:0]
    bands = -(-oh // tile_rows)
    groups = -(-n_mb // m_blocks)
    c1 = min(wp, in_w + pw)  # the buffer's columns inside the input (the others stay zero)
    for u in range(u0, u1):
        grp = u % groups
        band = u // groups
        n = band // bands
        r0 = (band - n * bands) * tile_rows
        nr = min(oh, r0 + tile_rows) - r0
        npx = nr * ow
        for c in range(n_ch):
            for q in range((nr - 1) * sh + (kh - 1) * dh + 1):
                ih = r0 * sh + q - ph
                dst = (c * band_h + q) * wp
                if 0 <= ih < in_h:
                    src = ((n * n_ch + c) * in_h + ih) * in_w - pw
                    for col in range(pw, c1):
                        buf[_u(dst + col)] = xf[_u(src + col)]
                else:
                    for col in range(wp):
                        buf[_u(dst + col)] = np.float32(0)
        for q in range(npx):
            i = q // ow
            pix[q] = i * sh * wp + (q - i * ow) * sw
        for mb in range(grp * m_blocks, min(n_mb, grp * m_blocks + m_blocks)):
            b0 = vload(bv, _u(mb * LANES))
            wb = mb * taps * LANES
            for t0 in range(0, taps, BROADCAST_TAPS_PER_PASS):
                t1 = min(taps, t0 + BROADCAST_TAPS_PER_PASS)
                last = t1 == taps
                ahead = wb + t1 * LANES  # the next pass's weights (the next block's first), into L2 meanwhile
                lines = (min(wt.size, ahead + BROADCAST_TAPS_PER_PASS * LANES) - ahead) // LINE_FLOATS
                for q0 in range(0, npx, MR):
                    for line in range(lines * q0 // npx, lines * min(npx, q0 + MR) // npx):
                        prefetch_l2(wt, _u(ahead + line * LINE_FLOATS))
                    _broadcast_tile(buf, pix, q0, offs, t0, t1, wt, wb, acc, t0 == 0, b0, lo if last else no_lo,
                                    hi if last else no_hi)
            m0 = mb * LANES
            nm = min(LANES, m_out - m0)
            to_planes(acc, nm, npx, of, (n * m_out + m0) * oh * ow + r0 * ow, oh * ow)
            if z3.size > 0 or kind != IDENTITY:
                _finish_rows(out3, z3, no_bias, n, m0, m0 + nm, r0 * ow, npx, kind, act)


@njit(cache=True, nogil=True, forceinline=True)
def _broadcast_tile(buf, pix, q0, offs, t0, t1, wt, wb, acc, first, b0, lo, hi):
    """acc's MR pixel slots from q0 (LANES channels each) += the taps [t0, t1): weight vector wt[wb + t * LANES]
    times the pixel's input value buf[pix[q] + offs[t]] (starting from the bias b0 when `first`), clamped to
    [lo, hi] as they are stored."""
    a = _u(q0 * LANES)
    lanes = _u(LANES)
    if first:
        a0, a1, a2, a3, a4, a5, a6, a7 = b0, b0, b0, b0, b0, b0, b0, b0
    else:
        a0, a1 = vload(acc, a), vload(acc, a + lanes)
        a2, a3 = vload(acc, a + _u(2) * lanes), vload(acc, a + _u(3) * lanes)
        a4, a5, a6, a7 = b0, b0, b0, b0
        if MR > 4:
            a4, a5 = vload(acc, a + _u(4) * lanes), vload(acc, a + _u(5) * lanes)
            a6, a7 = vload(acc, a + _u(6) * lanes), vload(acc, a + _u(7) * lanes)
    p0, p1, p2, p3 = _u(pix[q0]), _u(pix[q0 + 1]), _u(pix[q0 + 2]), _u(pix[q0 + 3])
    p4, p5, p6, p7 = p0, p0, p0, p0
    if MR > 4:
        p4, p5, p6, p7 = _u(pix[q0 + 4]), _u(pix[q0 + 5]), _u(pix[q0 + 6]), _u(pix[q0 + 7])
    for t in range(t0, t1):
        wv = vload(wt, _u(wb + t * LANES))
        o = _u(offs[t])
        a0 = vfma(wv, vsplat(buf[p0 + o]), a0)
        a1 = vfma(wv, vsplat(buf[p1 + o]), a1)
        a2 = vfma(wv, vsplat(buf[p2 + o]), a2)
        a3 = vfma(wv, vsplat(buf[p3 + o]), a3)
        if MR > 4:
            a4 = vfma(wv, vsplat(buf[p4 + o]), a4)
            a5 = vfma(wv, vsplat(buf[p5 + o]), a5)
            a6 = vfma(wv, vsplat(buf[p6 + o]), a6)
            a7 = vfma(wv, vsplat(buf[p7 + o]), a7)
    store_rows(acc, a, lanes, MR, lo, hi, a0, a1, a2, a3, a4, a5, a6, a7)


@njit(cache=True, nogil=True, forceinline=True)
def _split_pairs(xf, planes, src, py, sh, ph, pw, hq, wq, in_h, in_w, phase):
    """conv_direct's phase planes (py, 0) and (py, 1) of a stride-2 conv: input columns 2q - pw and
    2q + 1 - pw of each phase row, for the q where both lie inside the input, read as pairs; the others one by
    one."""
    base0 = (py * 2) * phase
    base1 = base0 + phase
    c00, c10 = max(0, -(-pw // 2)), min(wq, -(-(in_w + pw) // 2))  # phase 0's columns inside the input
    c01, c11 = max(0, -(-(pw - 1) // 2)), min(wq, -(-(in_w + pw - 1) // 2))
    q0, q1 = max(c00, c01), min(c10, c11)
    for r in range(hq):
        row = r * sh + py - ph
        if row < 0 or row >= in_h:
            continue
        d0, d1 = _u(base0 + r * wq), _u(base1 + r * wq)
        srow = src + row * in_w - pw
        for q in range(c00, q0):
            planes[d0 + _u(q)] = xf[_u(srow + 2 * q)]
        for q in range(c01, q0):
            planes[d1 + _u(q)] = xf[_u(srow + 2 * q + 1)]
        if q1 > q0:
            s0 = _u(srow + 2 * q0)
            for u in range(_u(0), _u(q1 - q0)):
                planes[d0 + _u(q0) + u] = xf[s0 + u + u]
                planes[d1 + _u(q0) + u] = xf[s0 + u + u + _u(1)]
        for q in range(max(q1, c00), c10):
            planes[d0 + _u(q)] = xf[_u(srow + 2 * q)]
        for q in range(max(q1, c01), c11):
            planes[d1 + _u(q)] = xf[_u(srow + 2 * q + 1)]


def add_taps(acc, planes, span, wt, offs):
    """acc[q] += sum over taps t of wt[t] * planes[offs[t] + q], for q < span (a multiple of LANES): conv_direct's
    taps of one input plane. A typing stub: the overload below picks the loop for the dtype."""


@overload(add_taps)
def _add_taps_of(acc, planes, span, wt, offs):
    fn = _taps_in_registers if acc.dtype == types.float32 else _taps_in_memory
    return lambda acc, planes, span, wt, offs: fn(acc, planes, span, wt, offs)


@njit(cache=True, nogil=True, forceinline=True)
def _taps_in_registers(acc, planes, span, wt, offs):
    """float32: 4 vectors of acc (8 ymm registers with AVX2, as many FMA chains as two 4-cycle pipes need) take
    every tap before they are stored, so a tap costs one load and one FMA per vector, and no store: a pass per
    tap over memory loaded and stored acc once per tap. AMD Zen 3 VM, one thread, the kernel alone: 5x5
    depthwise convs 0.60-0.79x the time of the passes per tap (240 channels at 14x14, 72 at 56x56 stride 2); 3x3
    ones about even with the 9-tap pass of `_taps_in_memory`."""
    n = wt.size
    step = _u(LANES)
    q = 0
    while q + 4 * LANES <= span:
        u = _u(q)
        a0 = vload(acc, u)
        a1 = vload(acc, u + step)
        a2 = vload(acc, u + _u(2) * step)
        a3 = vload(acc, u + _u(3) * step)
        for t in range(n):
            wv = vsplat(wt[t])
            o = _u(offs[t]) + u
            a0 = vfma(wv, vload(planes, o), a0)
            a1 = vfma(wv, vload(planes, o + step), a1)
            a2 = vfma(wv, vload(planes, o + _u(2) * step), a2)
            a3 = vfma(wv, vload(planes, o + _u(3) * step), a3)
        vstore(acc, u, a0)
        vstore(acc, u + step, a1)
        vstore(acc, u + _u(2) * step, a2)
        vstore(acc, u + _u(3) * step, a3)
        q += 4 * LANES
    while q < span:
        u = _u(q)
        a0 = vload(acc, u)
        for t in range(n):
            a0 = vfma(vsplat(wt[t]), vload(planes, _u(offs[t]) + u), a0)
        vstore(acc, u, a0)
        q += LANES


@njit(cache=True, nogil=True, forceinline=True)
def _taps_in_memory(acc, planes, span, wt, offs):
    """Other dtypes: a loop over acc per tap (LLVM vectorizes it), the 9 taps of a 3x3 kernel in one pass, their
    sum in registers (one pass per tap loaded and stored acc 9 times; a 3x3 depthwise conv is bound by those
    loads and stores)."""
    if wt.size == 9:
        w0, w1, w2, w3, w4, w5, w6, w7, w8 = wt[0], wt[1], wt[2], wt[3], wt[4], wt[5], wt[6], wt[7], wt[8]
        o0, o1, o2, o3, o4 = _u(offs[0]), _u(offs[1]), _u(offs[2]), _u(offs[3]), _u(offs[4])
        o5, o6, o7, o8 = _u(offs[5]), _u(offs[6]), _u(offs[7]), _u(offs[8])
        for q in range(span):
            u = _u(q)
            acc[u] += (w0 * planes[o0 + u] + w1 * planes[o1 + u] + w2 * planes[o2 + u]) + \
                (w3 * planes[o3 + u] + w4 * planes[o4 + u] + w5 * planes[o5 + u]) + \
                (w6 * planes[o6 + u] + w7 * planes[o7 + u] + w8 * planes[o8 + u])
        return
    for t in range(wt.size):
        wv = wt[t]
        off = offs[t]
        for q in range(span):
            acc[_u(q)] += wv * planes[_u(off + q)]


@njit(cache=True, nogil=True)
def conv_depthwise_nhwc(x, w, bias, k, s, d, p, kind, act, out, u0, u1):
    """Depthwise conv on channels-last images (com.onnxjit NhwcConv), units [u0, u1) of (image, output row):
    x (N, H, W, C), w (KH, KW, C), bias (C) or empty, out (N, OH, OW, C). Each output pixel accumulates its
    taps' input pixels, whole channel vectors at a time: the loop over channels vectorizes however small the
    plane is, where the NCHW kernel's loops over a 7x7 plane are short."""
    n_img, in_h, in_w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    zero = out.dtype.type(0)
    has_bias = bias.size > 0
    of = out.reshape(-1)
    for t in range(u0, u1):
        n = t // oh
        h = t - n * oh
        for j in range(ow):
            o0 = ((n * oh + h) * ow + j) * c
            o = of[o0:o0 + c]
            for q in range(c):
                o[_u(q)] = bias[_u(q)] if has_bias else zero
            for b in range(kh):
                ih = h * sh - ph + b * dh
                if ih < 0 or ih >= in_h:
                    continue
                for e in range(kw):
                    iw = j * sw - pw + e * dw
                    if iw < 0 or iw >= in_w:
                        continue
                    xi = x[n, ih, iw]
                    wt = w[b, e]
                    for q in range(c):
                        o[_u(q)] += wt[_u(q)] * xi[_u(q)]
            if kind != IDENTITY:
                activate(of, o0, o0 + c, kind, act)


# --- Winograd F(4x4, 3x3) ----------------------------------------------------------------------------------------
# Y = A^T [(G g G^T) . (B^T d B)] A over 6x6 input tiles d giving 4x4 output tiles: 36 multiplies per tile and
# channel pair where the direct conv needs 144. The weight transform G g G^T is done once (`winograd_weights`);
# the kernel transforms input tiles (B^T d B), multiplies each of the 36 tile positions as one GEMM over channels,
# and transforms back (A^T m A).
WINOGRAD_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                       [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def winograd_weights(w, dtype):
    """(36, M, C) transformed weights of w (M, C, 3, 3), computed in float64: G w G^T of every 3x3 kernel, as one
    GEMM of kron(G, G) (36 x 9) by the kernels as columns (an einsum took 0.35 s for 512 x 512 kernels, 7x
    longer, of a warm process's session creation)."""
    m, c = w.shape[0], w.shape[1]
    u = matmul_on_this_thread(np.kron(WINOGRAD_G, WINOGRAD_G), w.reshape(m * c, 9).T.astype(np.float64))
    return np.ascontiguousarray(u.reshape(36, m, c).astype(dtype))


@njit(cache=True, forceinline=True)
def _bt(d0, d1, d2, d3, d4, d5, k):
    """B^T d: the input transform of a column of 6; k = (2, 4, 5, 8) in the data's dtype (an integer
    constant would make numba compute a float32 in float64)."""
    two, four, five = k[0], k[1], k[2]
    return (four * d0 - five * d2 + d4, d3 + d4 - four * (d1 + d2), four * (d1 - d2) - d3 + d4,
            two * (d3 - d1) - d2 + d4, two * (d1 - d3) - d2 + d4, four * d1 - five * d3 + d5)


@njit(cache=True, forceinline=True)
def _at(m0, m1, m2, m3, m4, m5, k):
    """A^T m: the output transform of a column of 6 (k as for `_bt`)."""
    s, t = m1 + m2, m1 - m2
    u, v = m3 + m4, m3 - m4
    return m0 + s + u, t + k[0] * v, s + k[1] * u, t + k[3] * v + m5


@njit(cache=True, nogil=True, forceinline=True)
def _winograd_unit(u, n_ch, oh, ow, tile_rows, m_block, m_out):
    """(image, first tile row, tile rows, first and end output channel) of conv_winograd's unit u."""
    th = -(-oh // 4)
    n_tb = -(-th // tile_rows)
    n_mb = -(-m_out // m_block)
    mb = u % n_mb
    rest = u // n_mb
    tb = rest % n_tb
    tr0 = tb * tile_rows
    m0 = mb * m_block
    return rest // n_tb, tr0, min(th, tr0 + tile_rows) - tr0, m0, min(m_out, m0 + m_block)


@njit(cache=True, nogil=True, forceinline=True)
def _winograd_input(xf, n, n_ch, in_h, in_w, tr0, nr, wq, ph, pw, rows, cols, kc, vf, v0, c_step, p_step,
                    block_step):
    """V = B^T d B of every input channel's tiles of a block (nr tile rows of wq tiles from tile row tr0): tile t
    of channel c at position p goes to vf[v0 + c * c_step + p * p_step + (t // LANES) * block_step + t % LANES]
    (block_step LANES: t's place in a plain row of tiles; larger: blocks of LANES tiles, packed_gemm's layout)."""
    wp = 4 * wq  # a padded input row
    zero = vf.dtype.type(0)
    c_lo = min(wp, pw)  # padded columns [c_lo, c_hi) hold input columns
    c_hi = min(wp, pw + in_w)
    nt = nr * wq
    plane = nr * wp  # one of the six row sets
    for c in range(n_ch):
        xc = (n * n_ch + c) * in_h * in_w
        for i in range(6):
            for k in range(nr):
                r = 4 * (tr0 + k) - ph + i
                d0 = i * plane + k * wp
                if r < 0 or r >= in_h:
                    for e in range(wp):
                        rows[_u(d0 + e)] = zero
                    continue
                for e in range(c_lo):
                    rows[_u(d0 + e)] = zero
                src = xc + r * in_w - pw
                for e in range(c_lo, c_hi):
                    rows[_u(d0 + e)] = xf[_u(src + e)]
                for e in range(c_hi, wp):
                    rows[_u(d0 + e)] = zero
        for e in range(plane):  # B^T down the columns
            b0, b1, b2, b3, b4, b5 = _bt(rows[_u(e)], rows[_u(plane + e)], rows[_u(2 * plane + e)],
                                         rows[_u(3 * plane + e)], rows[_u(4 * plane + e)],
                                         rows[_u(5 * plane + e)], kc)
            cols[_u(e)] = b0
            cols[_u(plane + e)] = b1
            cols[_u(2 * plane + e)] = b2
            cols[_u(3 * plane + e)] = b3
            cols[_u(4 * plane + e)] = b4
            cols[_u(5 * plane + e)] = b5
        for a in range(6):  # then along the rows: tile t reads columns 4t .. 4t + 5
            s0 = a * plane
            d0 = v0 + c * c_step + a * 6 * p_step
            for t0 in range(0, nt, LANES):
                d = d0 + (t0 // LANES) * block_step
                for t in range(t0, min(nt, t0 + LANES)):
                    e = s0 + 4 * t
                    b0, b1, b2, b3, b4, b5 = _bt(cols[_u(e)], cols[_u(e + 1)], cols[_u(e + 2)], cols[_u(e + 3)],
                                                 cols[_u(e + 4)], cols[_u(e + 5)], kc)
                    q = _u(d + t - t0)
                    vf[q] = b0
                    vf[q + _u(p_step)] = b1
                    vf[q + _u(2 * p_step)] = b2
                    vf[q + _u(3 * p_step)] = b3
                    vf[q + _u(4 * p_step)] = b4
                    vf[q + _u(5 * p_step)] = b5


@njit(cache=True, nogil=True, forceinline=True)
def _winograd_output(mf, n, tr0, nr, wq, m0, m1, bias, zf, kind, act, res, ybuf, kc, out):
    """Y = A^T M A of output channels [m0, m1) of a block (M: mf as (36, m1 - m0, tiles)), plus bias, residual
    and activation, into out's rows of the block's tiles."""
    m_out, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    of = out.reshape(-1)
    zero = out.dtype.type(0)
    nt = nr * wq
    mb_n = m1 - m0
    step = mb_n * nt
    for m in range(m0, m1):
        bv = bias[m] if bias.size > 0 else zero
        for a in range(6):  # A^T along the tiles' rows
            s0 = (a * 6 * mb_n + m - m0) * nt
            d0 = a * 4 * nt
            for t in range(nt):
                y0, y1, y2, y3 = _at(mf[_u(s0 + t)], mf[_u(s0 + step + t)], mf[_u(s0 + 2 * step + t)],
                                     mf[_u(s0 + 3 * step + t)], mf[_u(s0 + 4 * step + t)],
                                     mf[_u(s0 + 5 * step + t)], kc)
                res[_u(d0 + t)] = y0
                res[_u(d0 + nt + t)] = y1
                res[_u(d0 + 2 * nt + t)] = y2
                res[_u(d0 + 3 * nt + t)] = y3
        q4 = 4 * nt
        for e in range(q4):  # then down the columns: ybuf[i, j, tile] is the tile's row i, column j
            y0, y1, y2, y3 = _at(res[_u(e)], res[_u(q4 + e)], res[_u(2 * q4 + e)], res[_u(3 * q4 + e)],
                                 res[_u(4 * q4 + e)], res[_u(5 * q4 + e)], kc)
            ybuf[_u(e)] = y0 + bv
            ybuf[_u(q4 + e)] = y1 + bv
            ybuf[_u(2 * q4 + e)] = y2 + bv
            ybuf[_u(3 * q4 + e)] = y3 + bv
        full = ow // 4
        for k in range(nr):
            for i in range(min(4, oh - 4 * (tr0 + k))):
                o0 = ((n * m_out + m) * oh + 4 * (tr0 + k) + i) * ow
                s0 = i * q4 + k * wq
                for t in range(full):
                    of[_u(o0 + 4 * t)] = ybuf[_u(s0 + t)]
                    of[_u(o0 + 4 * t + 1)] = ybuf[_u(s0 + nt + t)]
                    of[_u(o0 + 4 * t + 2)] = ybuf[_u(s0 + 2 * nt + t)]
                    of[_u(o0 + 4 * t + 3)] = ybuf[_u(s0 + 3 * nt + t)]
                for j in range(ow - 4 * full):
                    of[_u(o0 + 4 * full + j)] = ybuf[_u(s0 + j * nt + full)]
        r0 = ((n * m_out + m) * oh + 4 * tr0) * ow
        r1 = ((n * m_out + m) * oh + min(oh, 4 * (tr0 + nr))) * ow
        if zf.size > 0:
            for j in range(r0, r1):
                of[_u(j)] += zf[_u(j)]
        if kind != IDENTITY:
            activate(of, r0, r1, kind, act)


@njit(cache=True, nogil=True)
def conv_winograd(x, uw, bias, z, ph, pw, tile_rows, m_block, kind, act, out, u0, u1):
    """3x3, stride-1 conv by Winograd F(4x4, 3x3), units [u0, u1) of (image, block of `tile_rows` rows of 4x4
    output tiles, block of `m_block` output channels). x (N, C, H, W), uw (36, M, C) from `winograd_weights`,
    out (N, M, OH, OW), z out's shape or empty; ph, pw the head pads. The 36 GEMMs are BLAS calls (float64;
    float32 runs `conv_winograd_packed`).

    A block's tiles are numbered tr * wq + t (wq = tiles per row + 1, the extra one unused), so that each
    transform is one long loop over all the block's tiles that vectorizes (tile rows alone are 2 to 56 tiles
    long, shorter than a few vectors): the input's rows are copied zero-padded, B^T runs down the columns
    elementwise, then along the rows reading every fourth column (an interleaved load LLVM vectorizes); the
    output transform mirrors it. The 36 GEMMs include the unused tiles (one per tile row)."""
    n_img, n_ch, in_h, in_w = x.shape
    m_out = uw.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    wq = -(-ow // 4) + 1
    dt = out.dtype
    kc = (dt.type(2), dt.type(4), dt.type(5), dt.type(8))
    span = tile_rows * wq  # tiles of a full block
    rows = np.zeros(6 * span * 4 + 8, dtype=dt)  # [i, tile row, column]: the input rows each tile row reads
    cols = np.zeros(6 * span * 4 + 8, dtype=dt)
    res = np.empty(24 * span, dtype=dt)  # [a, j, tile]
    ybuf = np.empty(16 * span, dtype=dt)  # [i, j, tile]
    xf, zf = x.reshape(-1), z.reshape(-1)
    for u in range(u0, u1):
        n, tr0, nr, m0, m1 = _winograd_unit(u, n_ch, oh, ow, tile_rows, m_block, m_out)
        nt = nr * wq
        v = np.empty((36, n_ch, nt), dtype=dt)
        _winograd_input(xf, n, n_ch, in_h, in_w, tr0, nr, wq, ph, pw, rows, cols, kc, v.reshape(-1), 0, nt,
                        n_ch * nt, LANES)
        mx = np.empty((36, m1 - m0, nt), dtype=dt)
        for p in range(36):
            np.dot(uw[p, m0:m1], v[p], mx[p])
        _winograd_output(mx.reshape(-1), n, tr0, nr, wq, m0, m1, bias, zf, kind, act, res, ybuf, kc, out)


def winograd_packed_weights(w):
    """conv_winograd_packed's weights: winograd_weights(w) (36, M, C) as packed_gemm panels, one group per
    position (36, ceil(M / MR), C, MR); read-only."""
    u = pack_panels(winograd_weights(w, np.float32))
    u.flags.writeable = False
    return u


@njit(cache=True, nogil=True)
def conv_winograd_packed(x, up, m_out, bias, z, ph, pw, tile_rows, m_block, kind, act, out, u0, u1):
    """conv_winograd for float32 with its 36 GEMMs on packed_gemm's microkernel: up from
    `winograd_packed_weights`, m_block a multiple of packed_gemm.MR (or all the output channels). The input
    transform writes V straight into packed_gemm's blocks of (channels, LANES tiles), 64-byte aligned, so the
    GEMMs pack nothing. Why: OpenBLAS ran the 36 small GEMMs of each block through its small-matrix kernels, a
    call each, 9% of squeezenet's time on one Emerald Rapids thread, and the first BLAS call of a process
    imports scipy.linalg (numba's BLAS), 0.2 s of a warm process's first run; with this no CNN whose other
    kernels avoid BLAS loads it."""
    n_img, n_ch, in_h, in_w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    wq = -(-ow // 4) + 1
    kc = (np.float32(2), np.float32(4), np.float32(5), np.float32(8))
    span = tile_rows * wq  # tiles of a full block
    blocks = -(-span // LANES)
    rows = np.zeros(6 * span * 4 + 8, dtype=np.float32)
    cols = np.zeros(6 * span * 4 + 8, dtype=np.float32)
    res = np.empty(24 * span, dtype=np.float32)
    ybuf = np.empty(16 * span, dtype=np.float32)
    vbuf = np.zeros(36 * blocks * n_ch * LANES + LANES, dtype=np.float32)
    v0 = aligned_start(vbuf)
    vb = vbuf[v0:]
    mx = np.empty(36 * min(m_block, m_out) * span, dtype=np.float32)
    scratch = np.empty(MR * LANES, dtype=np.float32)
    no_bias = bias[:0]
    lo, hi = np.float32(-np.inf), np.float32(np.inf)
    xf, zf = x.reshape(-1), z.reshape(-1)
    # the residual is added by the output transform; read-only, as conv_packed's, so that gemm_blocked compiles
    # once for both (a writable one was a second signature: ~1 s of a cold start)
    no_z = read_only(mx[:0])
    for u in range(u0, u1):
        n, tr0, nr, m0, m1 = _winograd_unit(u, n_ch, oh, ow, tile_rows, m_block, m_out)
        nt = nr * wq
        nb = -(-nt // LANES)
        p_step = nb * n_ch * LANES  # from one position's blocks to the next
        _winograd_input(xf, n, n_ch, in_h, in_w, tr0, nr, wq, ph, pw, rows, cols, kc, vb, 0, LANES, p_step,
                        n_ch * LANES)
        mb_n = m1 - m0
        for p in range(36):
            gemm_blocked(up, p, m0 // MR, -(-m1 // MR), m1, no_bias, vb, p * p_step, nt, mx, p * mb_n * nt, nt, no_z,
                         scratch, lo, hi)
        _winograd_output(mx, n, tr0, nr, wq, m0, m1, bias, zf, kind, act, res, ybuf, kc, out)
