"""Pooling kernels over 3 spatial dims (1-D and 2-D pools come in with unit leading spatial dims).

x is (N*C, D, H, W) C-contiguous; geometry as 3-tuples: kernel k, strides s, dilations d, head pads p, tail
pads q (AveragePool's count_include_pad window ends at size + tail pad), output sizes o. One loop nest per
kernel, parallel over the N*C planes.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


@njit(cache=True, inline="always")
def _taps(start, dil, k, size):
    """[t0, t1): kernel taps t whose input start + t*dil falls inside [0, size)."""
    if start >= 0:
        t0 = 0
    else:
        t0 = (-start + dil - 1) // dil
    rem = size - start
    if rem > 0:
        t1 = (rem + dil - 1) // dil
    else:
        t1 = 0
    if t1 > k:
        t1 = k
    if t0 > t1:
        t0 = t1
    return t0, t1


@njit(cache=True)
def _table(n_out, stride, pad, dil, k, size, tail):
    """Per output index along one dim: its first input index, its first and end valid taps, and the tap count
    AveragePool's count_include_pad divides by (taps up to the end of the tail padding)."""
    tab = np.empty((4, n_out), dtype=np.int64)
    for i in range(n_out):
        start = i * stride - pad
        t0, t1 = _taps(start, dil, k, size)
        tab[0, i] = start
        tab[1, i] = t0
        tab[2, i] = t1
        tab[3, i] = min(k, (size + tail - start + dil - 1) // dil)
    return tab


@njit(cache=True)
def _col_table(n_out, stride, pad, dil, k, size):
    """Per kernel tap e along the last dim: its input offset and the outputs [j0, j1) it reaches inside the
    input."""
    tab = np.empty((3, k), dtype=np.int64)
    for e in range(k):
        off = e * dil - pad
        if off >= 0:
            j0 = 0
        else:
            j0 = (-off + stride - 1) // stride
        rem = size - off
        j1 = (rem + stride - 1) // stride if rem > 0 else 0
        j1 = min(j1, n_out)
        tab[0, e] = off
        tab[1, e] = min(j0, j1)
        tab[2, e] = j1
    return tab


@njit(cache=True, parallel=True)
def max_pool(x, k, s, d, p, o, init):
    """Max over each window; a window with no input element (all padding) gives `init` (the dtype's lowest).
    Per output row, each tap's input row is folded into the row (vectorizable across the row)."""
    planes, in_d, in_h, in_w = x.shape
    kd, kh, kw = k
    dd, dh, dw = d
    od, oh, ow = o
    sw = s[2]
    td = _table(od, s[0], p[0], dd, kd, in_d, 0)
    th = _table(oh, s[1], p[1], dh, kh, in_h, 0)
    tc = _col_table(ow, sw, p[2], dw, kw, in_w)
    out = np.empty((planes, od, oh, ow), dtype=x.dtype)
    for c in prange(planes):
        xc = x[c]
        oc = out[c]
        for i in range(od):
            zd, a0, a1 = td[0, i], td[1, i], td[2, i]
            for h in range(oh):
                zh, b0, b1 = th[0, h], th[1, h], th[2, h]
                orow = oc[i, h]
                for j in range(ow):
                    orow[_u(j)] = init
                for a in range(a0, a1):
                    for b in range(b0, b1):
                        srow = xc[zd + a * dd, zh + b * dh]
                        for e in range(kw):
                            off, j0, j1 = tc[0, e], tc[1, e], tc[2, e]
                            if sw == 1:
                                for j in range(j0, j1):
                                    v = srow[_u(j + off)]
                                    m = orow[_u(j)]
                                    orow[_u(j)] = v if v > m else m
                            else:
                                for j in range(j0, j1):
                                    v = srow[_u(j * sw + off)]
                                    m = orow[_u(j)]
                                    orow[_u(j)] = v if v > m else m
    return out


@njit(cache=True, parallel=True)
def avg_pool(x, k, s, d, p, q, o, count_include_pad):
    """Average over each window. With count_include_pad the divisor counts the window's taps up to the end of
    the tail padding (not past it, as a ceil_mode window may reach); otherwise only the taps inside the input.
    A window with no input element gives 0."""
    planes, in_d, in_h, in_w = x.shape
    kd, kh, kw = k
    dd, dh, dw = d
    od, oh, ow = o
    sw = s[2]
    td = _table(od, s[0], p[0], dd, kd, in_d, q[0])
    th = _table(oh, s[1], p[1], dh, kh, in_h, q[1])
    tw = _table(ow, sw, p[2], dw, kw, in_w, q[2])
    tc = _col_table(ow, sw, p[2], dw, kw, in_w)
    # per output column: the divisor's last-dim factor, 0 where the window has no input element
    colw = np.empty(ow, dtype=np.float64)
    for j in range(ow):
        e0, e1 = tw[1, j], tw[2, j]
        if e1 <= e0:
            colw[j] = 0.0
        else:
            colw[j] = 1.0 / (tw[3, j] if count_include_pad else e1 - e0)
    out = np.empty((planes, od, oh, ow), dtype=x.dtype)
    for c in prange(planes):
        xc = x[c]
        oc = out[c]
        acc = np.empty(ow, dtype=np.float64)
        for i in range(od):
            zd, a0, a1 = td[0, i], td[1, i], td[2, i]
            nd = td[3, i] if count_include_pad else a1 - a0
            for h in range(oh):
                zh, b0, b1 = th[0, h], th[1, h], th[2, h]
                nh = th[3, h] if count_include_pad else b1 - b0
                orow = oc[i, h]
                if a1 <= a0 or b1 <= b0:
                    for j in range(ow):
                        orow[_u(j)] = 0
                    continue
                for j in range(ow):
                    acc[_u(j)] = 0.0
                for a in range(a0, a1):
                    for b in range(b0, b1):
                        srow = xc[zd + a * dd, zh + b * dh]
                        for e in range(kw):
                            off, j0, j1 = tc[0, e], tc[1, e], tc[2, e]
                            if sw == 1:
                                for j in range(j0, j1):
                                    acc[_u(j)] += srow[_u(j + off)]
                            else:
                                for j in range(j0, j1):
                                    acc[_u(j)] += srow[_u(j * sw + off)]
                inv = 1.0 / (nd * nh)
                for j in range(ow):
                    orow[_u(j)] = acc[_u(j)] * (inv * colw[_u(j)])
    return out


@njit(cache=True, parallel=True, fastmath={"nnan", "nsz", "reassoc"})
def global_max(x):
    """Max over each row of x (rows, size)."""
    rows, size = x.shape
    out = np.empty(rows, dtype=x.dtype)
    for r in prange(rows):
        xr = x[r]
        m = xr[0]
        for j in range(1, size):
            v = xr[_u(j)]
            m = v if v > m else m
        out[r] = m
    return out


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def global_avg(x):
    """Mean over each row of x (rows, size), accumulated in float64."""
    rows, size = x.shape
    out = np.empty(rows, dtype=x.dtype)
    for r in prange(rows):
        xr = x[r]
        acc = 0.0
        for j in range(size):
            acc += xr[_u(j)]
        out[r] = acc / size
    return out
