"""Pooling kernels over 3 spatial dims (1-D and 2-D pools come in with unit leading spatial dims).

x is (planes = N*C, D, H, W) C-contiguous, out (planes, OD, OH, OW); each kernel fills planes [c0, c1) and
releases the GIL, so the caller can spread the planes over threads.

MaxPool and AveragePool are separable: a window's max (or sum) is the max over its rows of each row's max. So
`pool` reduces a plane one axis at a time, each pass a loop over many positions at once: out[i] = max over
taps t of src[i + t * step] (step the tap's distance along the axis in the flat plane), loops LLVM vectorizes.
A plane is copied first, into a plane padded with the padding value, only where windows reach outside it. The
kernel it replaced reduced each output row's input rows, then looped over the tap columns: rows of 6 to 55
values, mostly loop overhead and scalar remainders (squeezenet's 3x3 stride-2 pools took 2.6-3x onnxruntime's
time). Same process, one thread, AMD Zen 3: 0.37-0.73x the old kernel's time over inception's, squeezenet's,
resnet's and densenet's pools.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels.normalization import row_sum
from onnxjit.kernels.simd import (LANES, aligned_empty, aligned_full, into_window, to_planes, vfma, vload, vmax, vsplat,
                                  vstore)
from onnxjit.kernels.views import read_only
from onnxjit.kernels.views import u64 as _u


def dim_table(n_out, stride, pad, dil, k, size, tail):
    """Per output index along one dim: its first input index, its first and end valid taps, and the tap count
    AveragePool's count_include_pad divides by (taps up to the end of the tail padding, which a ceil_mode
    window may pass)."""
    tab = np.empty((4, n_out), dtype=np.int64)
    for i in range(n_out):
        start = i * stride - pad
        t0 = 0 if start >= 0 else (-start + dil - 1) // dil
        rem = size - start
        t1 = min((rem + dil - 1) // dil if rem > 0 else 0, k)
        tab[:, i] = start, min(t0, t1), t1, min(k, (size + tail - start + dil - 1) // dil)
    return tab


def padded_plane(in_sizes, out_sizes, k, s, d, head):
    """The padded plane's (D, H, W) for windows of kernel k, stride s, dilation d, `head` padding: the input
    after its head padding, and every window's last tap."""
    return tuple(max(h + n, (o - 1) * st + (kk - 1) * dd + 1)
                 for n, o, kk, st, dd, h in zip(in_sizes, out_sizes, k, s, d, head))


@njit(cache=True, nogil=True, inline="always")
def _op(is_max, m, v):
    return (v if v > m else m) if is_max else m + v


@njit(cache=True, nogil=True)
def _taps(is_max, src, s0, dst, d0, n, k, step):
    """dst[d0 + i] = max (is_max) or sum over taps t < k of src[s0 + i + t * step], for i < n. The common loops
    come once per is_max, so that none tests it per element; the offsets come as uint64 from every caller (a
    literal 0 would compile another specialization)."""
    step = _u(step)
    if k == 2 and is_max:
        for i in range(n):
            dst[d0 + _u(i)] = _op(True, src[s0 + _u(i)], src[s0 + _u(i) + step])
    elif k == 2:
        for i in range(n):
            dst[d0 + _u(i)] = src[s0 + _u(i)] + src[s0 + _u(i) + step]
    elif k == 3 and is_max:
        for i in range(n):
            m = _op(True, src[s0 + _u(i)], src[s0 + _u(i) + step])
            dst[d0 + _u(i)] = _op(True, m, src[s0 + _u(i) + _u(2) * step])
    elif k == 3:
        for i in range(n):
            dst[d0 + _u(i)] = src[s0 + _u(i)] + src[s0 + _u(i) + step] + src[s0 + _u(i) + _u(2) * step]
    else:  # a pass over all positions per tap, loops LLVM vectorizes: each position's taps in an inner loop took
        # 2.5x as long (a 5x5 MaxPool over 512 planes of 6x6 pixels, AMD Zen 3)
        for i in range(n):
            dst[d0 + _u(i)] = src[s0 + _u(i)]
        zero = dst.dtype.type(0)  # + zero: a plain store, not a masked one (see linalg.activate)
        for t in range(1, k):
            off = s0 + _u(t) * step
            for i in range(n):
                dst[d0 + _u(i)] = _op(is_max, dst[d0 + _u(i)], src[off + _u(i)]) + zero


@njit(cache=True, nogil=True)
def _rows(is_max, src, s0, dst, od, oh, sd, sh, kh, dh, hp, wp):
    """The pass along H, at the rows output windows start on only: dst row (i, h) (at (i * oh + h) * wp) from
    src's padded rows i * sd * hp + h * sh + t * dh (s0 the plane's start in src). Consecutive rows (stride 1)
    run as one loop."""
    for i in range(od):
        r0 = s0 + i * sd * hp * wp
        if sh == 1:
            _taps(is_max, src, _u(r0), dst, _u(i * oh * wp), oh * wp, kh, dh * wp)
            continue
        for h in range(oh):
            _taps(is_max, src, _u(r0 + h * sh * wp), dst, _u((i * oh + h) * wp), wp, kh, dh * wp)


@njit(cache=True, nogil=True)
def pool(is_max, x, k, s, d, p, padded, pad_value, fd, fh, fw, out, c0, c1):
    """MaxPool (is_max) or AveragePool over planes [c0, c1): output (i, h, j) is the max over its window, or the
    sum times fd[i] * fh[h] * fw[j] (the reciprocals of the taps counted along each axis, see `pool_divisors`, 0
    where a window holds no input element; unread for max). k, s, d, p: kernel, strides, dilations and
    head pads (D, H, W); padded: the padded plane's (D, H, W) (padded_plane); pad_value: the dtype's lowest for
    max (a window of padding alone gives it), 0 for sums.

    Where windows reach outside the input, the plane is first copied into a padded plane whose border holds
    pad_value; then it is reduced along D (at every position), along H (at the rows windows start on, into rows
    of b) and along W: as one pass over b's rows (then copied out), or at stride 2 straight into each output row,
    reading each output's taps at 2j + t * dw (strided loads LLVM vectorizes as de-interleaving shuffles: a
    flat pass over every position and a strided copy of every other one after took twice as long, a 3x3
    stride-2 pool over 112x112 planes, AMD Zen 3).

    One kernel for both ops, is_max tested outside the loops: two thin kernels calling it with a literal is_max
    compiled a chain of specializations each, 3.2-3.6 s apiece over an empty cache, against 3.4-3.9 s for this
    one with its helpers."""
    in_d, in_h, in_w = x.shape[1], x.shape[2], x.shape[3]
    od, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    kd, kh, kw = k
    sw, dw = s[2], d[2]
    dp, hp, wp = padded
    hw = hp * wp
    no_pad = p[0] == 0 and p[1] == 0 and p[2] == 0 and padded == (in_d, in_h, in_w)
    fill = np.full(0 if no_pad else dp * hw, pad_value, dtype=x.dtype)
    a = np.empty(dp * hw, dtype=x.dtype)
    b = np.empty(dp * hw, dtype=x.dtype)
    n1 = ((od - 1) * s[0] + 1) * hw  # the D pass: every padded plane up to the last window's first
    xf = read_only(x.reshape(-1))
    bf = read_only(b)
    of = out.reshape(-1)
    q0, q1 = max(0, p[2]), min(wp, p[2] + in_w)
    for c in range(c0, c1):
        src = read_only(fill)  # the passes' source: the padded plane, or the input's plane where none is needed
        s0 = 0
        if no_pad:
            src = xf
            s0 = c * in_d * in_h * in_w
        else:  # the border is never written: it keeps pad_value
            for z in range(max(0, p[0]), min(dp, p[0] + in_d)):
                for y in range(max(0, p[1]), min(hp, p[1] + in_h)):
                    i0 = c * in_d * in_h * in_w + ((z - p[0]) * in_h + y - p[1]) * in_w - p[2]
                    i1 = (z * hp + y) * wp
                    for q in range(q0, q1):
                        fill[_u(i1 + q)] = xf[_u(i0 + q)]
        if kd > 1:
            _taps(is_max, src, _u(s0), a, _u(0), n1, kd, d[0] * hw)
            src = read_only(a)
            s0 = 0
        _rows(is_max, src, s0, b, od, oh, s[0], s[1], kh, d[1], hp, wp)
        if sw != 2:  # the W pass over b's rows as one loop, up to the last window's first position
            _taps(is_max, bf, _u(0), a, _u(0), (od * oh - 1) * wp + (ow - 1) * sw + 1, kw, dw)
        for i in range(od):
            for h in range(oh):
                i0 = _u((i * oh + h) * wp)
                i1 = _u(((c * od + i) * oh + h) * ow)
                if sw != 2:
                    for j in range(ow):
                        of[i1 + _u(j)] = a[i0 + _u(j * sw)]
                elif kw == 3 and dw == 1 and is_max:  # the common strided windows, each taps' offset a constant
                    for j in range(ow):
                        q = i0 + _u(2 * j)
                        of[i1 + _u(j)] = _op(True, _op(True, b[q], b[q + _u(1)]), b[q + _u(2)])
                elif kw == 3 and dw == 1:
                    for j in range(ow):
                        q = i0 + _u(2 * j)
                        of[i1 + _u(j)] = b[q] + b[q + _u(1)] + b[q + _u(2)]
                elif kw == 2 and dw == 1 and is_max:
                    for j in range(ow):
                        q = i0 + _u(2 * j)
                        of[i1 + _u(j)] = _op(True, b[q], b[q + _u(1)])
                elif kw == 2 and dw == 1:
                    for j in range(ow):
                        q = i0 + _u(2 * j)
                        of[i1 + _u(j)] = b[q] + b[q + _u(1)]
                else:
                    for j in range(ow):
                        q = i0 + _u(2 * j)
                        m = b[q]
                        for t in range(1, kw):
                            m = _op(is_max, m, b[q + _u(t * dw)])
                        of[i1 + _u(j)] = m
                if not is_max:
                    f = fd[i] * fh[h]
                    for j in range(ow):
                        of[i1 + _u(j)] *= f * fw[_u(j)]


@njit(cache=True, nogil=True)
def pool_blocked(is_max, x, k, s, d, p, padded, pad_value, fd, fh, fw, out, u0, u1):
    """`pool` for float32 2-D pools over small planes, channels-last: units [u0, u1) of LANES planes (any images'
    channels side by side). Each unit copies its planes channels-last into a padded window (simd.into_window)
    whose border holds pad_value (written once: units write the inside only), then takes every output's window
    as vectors of LANES planes, one load per tap, and turns the tile back to planes (simd.to_planes). Sums run in
    `pool`'s order (down each window column, then across the columns), so averages equal its results; arguments
    as `pool`'s (x (planes, 1, H, W), D's kernel, stride and pads 1, 1, 0).

    Why: over 7x7 and 14x14 planes `pool`'s passes are rows of a few values, mostly loop overhead; onnxruntime
    pools its NCHWc blocks as vectors of 16 channels (inception_v2's 3x3 stride-1 average pools over 576 planes
    of 14x14: 250 us against onnxruntime's ~65, two Emerald Rapids threads)."""
    planes, in_h, in_w = x.shape[0], x.shape[2], x.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    kh, kw = k[1], k[2]
    sh, sw = s[1], s[2]
    dh, dw = d[1], d[2]
    ph, pw = p[1], p[2]
    hp, wp = padded[1], padded[2]
    lanes = _u(LANES)
    window = aligned_full(hp * wp * LANES, pad_value)
    acc = aligned_empty(oh * ow * LANES)
    flat = aligned_empty(in_h * in_w * LANES)
    one = vsplat(np.float32(1))
    zero = vsplat(np.float32(0))
    plane, oplane = in_h * in_w, oh * ow
    r1, c1 = min(hp, in_h + ph), min(wp, in_w + pw)  # the window's rows and columns inside the input
    xf, of = x.reshape(-1), out.reshape(-1)
    for u in range(u0, u1):
        cb = u * LANES
        nc = min(LANES, planes - cb)
        into_window(xf, cb * plane, plane, nc, in_w, flat, window, wp, ph, pw, r1, c1)
        for i in range(oh):
            for j in range(ow):
                o = _u(((i * sh) * wp + j * sw) * LANES)
                if is_max:
                    m = vload(window, o)
                    for b in range(kh):
                        row = o + _u(b * dh * wp) * lanes
                        for e in range(kw):
                            m = vmax(m, vload(window, row + _u(e * dw) * lanes))
                else:
                    m = zero
                    for e in range(kw):
                        col = vload(window, o + _u(e * dw) * lanes)
                        for b in range(1, kh):
                            col = vfma(one, vload(window, o + _u(b * dh * wp + e * dw) * lanes), col)
                        m = col if e == 0 else vfma(one, col, m)
                    m = vfma(m, vsplat(fd[0] * fh[i] * fw[j]), zero)
                vstore(acc, _u((i * ow + j) * LANES), m)
        to_planes(acc, nc, oplane, of, cb * oplane, oplane)


def pool_divisors(td, count_include_pad, dtype):
    """The reciprocal of each output's taps along one axis (dim_table's `td`): the taps up to the end of the
    tail padding with count_include_pad, else those inside the input; 0 where none is inside."""
    valid = td[2] - td[1]
    counts = td[3] if count_include_pad else valid
    return np.where(valid > 0, 1.0 / np.maximum(counts, 1), 0.0).astype(dtype)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def global_avg(x, out, r0, r1):
    """Mean over each row of x (rows, size), accumulated in float64 (reassociated, so vectorized: the layer
    norms' row_sum), for rows [r0, r1)."""
    size = x.shape[1]
    zero = np.float64(0)
    for r in range(r0, r1):
        out[r] = row_sum(x[r], zero) / size


@njit(cache=True, nogil=True)
def global_max(x, out, r0, r1):
    """Max over each row of x (rows, size), for rows [r0, r1); 16 lanes (a plain max loop stays serial)."""
    n = x.shape[1]
    nb = n // 16 * 16
    acc = np.empty(16, dtype=x.dtype)
    zero = x.dtype.type(0)  # a + zero: a plain store, not a masked one (see linalg.activate)
    for r in range(r0, r1):
        xr = x[r]
        m = xr[0]
        j = 1
        if nb >= 32:
            for t in range(16):
                acc[t] = xr[t]
            for jb in range(16, nb, 16):
                for t in range(16):
                    v = xr[_u(jb + t)]
                    a = acc[_u(t)]
                    acc[_u(t)] = v if v > a else a + zero
            for t in range(16):
                a = acc[_u(t)]
                m = a if a > m else m
            j = nb
        for jj in range(j, n):
            v = xr[_u(jj)]
            m = v if v > m else m
        out[r] = m
