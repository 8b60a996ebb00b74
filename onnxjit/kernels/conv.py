"""Convolution kernels over 3 spatial dims (1-D and 2-D convs come in with unit leading spatial dims).

Layouts: x (N, C, D, H, W), w (M, C/group, KD, KH, KW), out (N, M, OD, OH, OW), all C-contiguous. Geometry is
passed as 3-tuples: kernel k, strides s, dilations d, head pads p, output sizes o. Two strategies:
  * `conv_gemm`: tiles of output rows, each an im2col buffer times the group's weights with BLAS (`np.dot`,
    float32 stays float32), parallel over (image, group, tile, block of output channels).
  * `conv_direct`: parallel over (image, output channel), accumulating shifted input rows; for grouped convs
    with few channels per group (depthwise), where a GEMM per group would be tiny.
Hot loops index with unsigned integers (`_u`): numba then skips its negative-index wraparound, which would
otherwise keep LLVM from vectorizing them.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, inline="always")
def _valid_range(off, stride, size, n_out):
    """[j0, j1): the outputs j whose input j*stride + off falls inside [0, size)."""
    if off >= 0:
        j0 = 0
    else:
        j0 = (-off + stride - 1) // stride
    rem = size - off
    if rem > 0:
        j1 = (rem + stride - 1) // stride
    else:
        j1 = 0
    if j1 > n_out:
        j1 = n_out
    if j0 > j1:
        j0 = j1
    return j0, j1


@njit(cache=True)
def _tap_table(kw, dw, pw, sw, in_w, ow):
    """Per kernel tap e along W: its input offset and the valid output range [j0, j1)."""
    tab = np.empty((3, kw), dtype=np.int64)
    for e in range(kw):
        off = e * dw - pw
        j0, j1 = _valid_range(off, sw, in_w, ow)
        tab[0, e] = off
        tab[1, e] = j0
        tab[2, e] = j1
    return tab


@njit(cache=True, inline="always")
def _gather_row(dst, base, src, off, sw, j0, j1, ow):
    """dst[base + j] = src[j*sw + off] for j in [j0, j1), zero for the rest of [0, ow)."""
    for j in range(j0):
        dst[_u(base + j)] = 0
    if sw == 1:
        for j in range(j0, j1):
            dst[_u(base + j)] = src[_u(j + off)]
    else:
        for j in range(j0, j1):
            dst[_u(base + j)] = src[_u(j * sw + off)]
    for j in range(j1, ow):
        dst[_u(base + j)] = 0


@njit(cache=True, parallel=True)
def conv_gemm(x, w, bias, group, k, s, d, p, o, tile_rows, m_blocks, nthreads):
    """Conv as im2col + GEMM over work units (image, group, tile of `tile_rows` output rows, block of output
    channels), spread round-robin over `nthreads` threads; each thread builds a tile's im2col buffer and
    multiplies it with BLAS (`np.dot`, which should run single-threaded here: the parallelism is over units).
    `bias` is a length-M array or empty."""
    n_img, n_ch, in_d, in_h, in_w = x.shape
    m_out = w.shape[0]
    cg = n_ch // group
    mg = m_out // group
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    pd, ph, pw = p
    od, oh, ow = o
    kvol = kd * kh * kw
    kk = cg * kvol
    nrows = od * oh
    npix = nrows * ow
    wm = w.reshape((group, mg, kk))
    out = np.empty((n_img, m_out, npix), dtype=x.dtype)
    ntiles = (nrows + tile_rows - 1) // tile_rows
    mb = (mg + m_blocks - 1) // m_blocks
    units = n_img * group * ntiles * m_blocks
    nth = max(1, min(nthreads, units))
    has_bias = bias.size > 0
    taps = _tap_table(kw, dw, pw, sw, in_w, ow)
    for t in prange(nth):
        colbuf = np.empty(kk * tile_rows * ow, dtype=x.dtype)
        resbuf = np.empty(mb * tile_rows * ow, dtype=x.dtype)
        for u in range(t, units, nth):
            mblk = u % m_blocks
            rest = u // m_blocks
            tile = rest % ntiles
            rest //= ntiles
            g = rest % group
            n = rest // group
            r0 = tile * tile_rows
            r1 = min(nrows, r0 + tile_rows)
            npx = (r1 - r0) * ow
            m0 = mblk * mb
            m1 = min(mg, m0 + mb)
            if m0 >= m1:
                continue
            cols = colbuf[:kk * npx].reshape((kk, npx))
            for r in range(kk):
                c = r // kvol
                rem = r - c * kvol
                a = rem // (kh * kw)
                rem -= a * (kh * kw)
                b = rem // kw
                e = rem - b * kw
                xc = x[n, g * cg + c]
                row = cols[r]
                off_w, j0, j1 = taps[0, e], taps[1, e], taps[2, e]
                for q in range(r0, r1):
                    i = q // oh
                    h = q - i * oh
                    zd = i * sd - pd + a * dd
                    zh = h * sh - ph + b * dh
                    base = (q - r0) * ow
                    if zd < 0 or zd >= in_d or zh < 0 or zh >= in_h:
                        for j in range(ow):
                            row[_u(base + j)] = 0
                    else:
                        _gather_row(row, base, xc[zd, zh], off_w, sw, j0, j1, ow)
            res = resbuf[:(m1 - m0) * npx].reshape((m1 - m0, npx))
            np.dot(wm[g, m0:m1], cols, res)
            p0 = r0 * ow
            for m in range(m0, m1):
                mo = g * mg + m
                bv = bias[mo] if has_bias else 0
                orow = out[n, mo]
                rrow = res[m - m0]
                for j in range(npx):
                    orow[_u(p0 + j)] = rrow[_u(j)] + bv
    return out.reshape((n_img, m_out, od, oh, ow))


@njit(cache=True, parallel=True)
def conv_direct(x, w, bias, group, k, s, d, p, o):
    """Conv as direct accumulation, parallel over (image, output channel): per output row, the taps' shifted
    input rows are accumulated into it."""
    n_img, n_ch, in_d, in_h, in_w = x.shape
    m_out = w.shape[0]
    cg = n_ch // group
    mg = m_out // group
    kd, kh, kw = k
    sd, sh, sw = s
    dd, dh, dw = d
    pd, ph, pw = p
    od, oh, ow = o
    out = np.empty((n_img, m_out, od, oh, ow), dtype=x.dtype)
    has_bias = bias.size > 0
    taps = _tap_table(kw, dw, pw, sw, in_w, ow)
    for t in prange(n_img * m_out):
        n = t // m_out
        m = t - n * m_out
        g = m // mg
        om = out[n, m]
        bv = bias[m] if has_bias else 0
        for i in range(od):
            for h in range(oh):
                orow = om[i, h]
                for j in range(ow):
                    orow[_u(j)] = bv
                for a in range(kd):
                    zd = i * sd - pd + a * dd
                    if zd < 0 or zd >= in_d:
                        continue
                    for b in range(kh):
                        zh = h * sh - ph + b * dh
                        if zh < 0 or zh >= in_h:
                            continue
                        for c in range(cg):
                            srow = x[n, g * cg + c, zd, zh]
                            for e in range(kw):
                                wv = w[m, c, a, b, e]
                                off_w, j0, j1 = taps[0, e], taps[1, e], taps[2, e]
                                if sw == 1:
                                    for j in range(j0, j1):
                                        orow[_u(j)] += wv * srow[_u(j + off_w)]
                                else:
                                    for j in range(j0, j1):
                                        orow[_u(j)] += wv * srow[_u(j * sw + off_w)]
    return out
