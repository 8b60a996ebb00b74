"""Pooling kernels over 3 spatial dims (1-D and 2-D pools come in with unit leading spatial dims).

x is (planes = N*C, D, H, W) C-contiguous, out (planes, OD, OH, OW). The window geometry comes as tables made
once per input shape (`dim_table`, `col_table`); each kernel fills planes [c0, c1) and releases the GIL, so the
caller can spread the planes over threads. Per output row, the window's valid input rows are reduced first
(contiguous, vectorizable), then the taps along the row.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit


@njit(cache=True, inline="always")
def _u(i):
    return np.uint64(i)


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


def col_table(n_out, stride, pad, dil, k, size):
    """Per kernel tap e along the last dim: its input offset and the outputs [j0, j1) it reaches inside the
    input."""
    tab = np.empty((3, k), dtype=np.int64)
    for e in range(k):
        off = e * dil - pad
        j0 = 0 if off >= 0 else (-off + stride - 1) // stride
        rem = size - off
        j1 = min((rem + stride - 1) // stride if rem > 0 else 0, n_out)
        tab[:, e] = off, min(j0, j1), j1
    return tab


@njit(cache=True, nogil=True, inline="always")
def _split_even_odd(vrow, n, even, odd):
    """even[t] = vrow[2t], odd[t] = vrow[2t + 1] over vrow's first n values: a stride-2 pass then reads each
    phase contiguously (a loop LLVM vectorizes; the strided one gathered element by element)."""
    for t in range(n // 2):
        even[_u(t)] = vrow[_u(2 * t)]
        odd[_u(t)] = vrow[_u(2 * t + 1)]
    if n % 2:
        even[_u(n // 2)] = vrow[_u(n - 1)]


@njit(cache=True, nogil=True)
def max_pool(x, dil, sw, td, th, tc, init, out, c0, c1):
    """Max over each window; a window with no input element (all padding) gives `init` (the dtype's lowest)."""
    in_w = x.shape[3]
    od, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    dd, dh = dil[0], dil[1]
    kw = tc.shape[1]
    vrow = np.empty(in_w, dtype=x.dtype)
    even = np.empty(in_w // 2 + 1, dtype=x.dtype)
    odd = np.empty(in_w // 2 + 1, dtype=x.dtype)
    zero = x.dtype.type(0)  # m + zero: a plain store, not a masked one (see linalg.activate)
    for c in range(c0, c1):
        xc = x[c]
        oc = out[c]
        for i in range(od):
            zd, a0, a1 = td[0, i], td[1, i], td[2, i]
            for h in range(oh):
                zh, b0, b1 = th[0, h], th[1, h], th[2, h]
                orow = oc[i, h]
                for j in range(ow):
                    orow[_u(j)] = init
                if a1 <= a0 or b1 <= b0:
                    continue
                first = True
                for a in range(a0, a1):
                    for b in range(b0, b1):
                        src = xc[zd + a * dd, zh + b * dh]
                        if first:
                            for t in range(in_w):
                                vrow[_u(t)] = src[_u(t)]
                            first = False
                        else:
                            for t in range(in_w):
                                v = src[_u(t)]
                                m = vrow[_u(t)]
                                vrow[_u(t)] = v if v > m else m + zero
                if sw == 2:
                    _split_even_odd(vrow, in_w, even, odd)
                for e in range(kw):
                    off, j0, j1 = tc[0, e], tc[1, e], tc[2, e]
                    if sw == 1:
                        for j in range(j0, j1):
                            v = vrow[_u(j + off)]
                            m = orow[_u(j)]
                            orow[_u(j)] = v if v > m else m + zero
                    elif sw == 2:  # column 2j + off: phase off % 2 at j + off // 2
                        q = off // 2
                        phase = even if off - 2 * q == 0 else odd
                        for j in range(j0, j1):
                            v = phase[_u(j + q)]
                            m = orow[_u(j)]
                            orow[_u(j)] = v if v > m else m + zero
                    else:
                        for j in range(j0, j1):
                            v = vrow[_u(j * sw + off)]
                            m = orow[_u(j)]
                            orow[_u(j)] = v if v > m else m + zero


@njit(cache=True, nogil=True)
def avg_pool(x, dil, sw, td, th, tc, colw, count_include_pad, out, c0, c1):
    """Average over each window. With count_include_pad the divisor counts the window's taps up to the end of
    the tail padding; otherwise only the taps inside the input. A window with no input element gives 0.
    `colw` is 1 / the divisor's last-dim factor per output column (0 for a column without input)."""
    in_w = x.shape[3]
    od, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    dd, dh = dil[0], dil[1]
    kw = tc.shape[1]
    vrow = np.empty(in_w, dtype=x.dtype)
    even = np.empty(in_w // 2 + 1, dtype=x.dtype)
    odd = np.empty(in_w // 2 + 1, dtype=x.dtype)
    acc = np.empty(ow, dtype=x.dtype)
    for c in range(c0, c1):
        xc = x[c]
        oc = out[c]
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
                for t in range(in_w):
                    vrow[_u(t)] = 0
                for a in range(a0, a1):
                    for b in range(b0, b1):
                        src = xc[zd + a * dd, zh + b * dh]
                        for t in range(in_w):
                            vrow[_u(t)] += src[_u(t)]
                for j in range(ow):
                    acc[_u(j)] = 0
                if sw == 2:
                    _split_even_odd(vrow, in_w, even, odd)
                for e in range(kw):
                    off, j0, j1 = tc[0, e], tc[1, e], tc[2, e]
                    if sw == 1:
                        for j in range(j0, j1):
                            acc[_u(j)] += vrow[_u(j + off)]
                    elif sw == 2:  # column 2j + off: phase off % 2 at j + off // 2
                        q = off // 2
                        phase = even if off - 2 * q == 0 else odd
                        for j in range(j0, j1):
                            acc[_u(j)] += phase[_u(j + q)]
                    else:
                        for j in range(j0, j1):
                            acc[_u(j)] += vrow[_u(j * sw + off)]
                inv = 1.0 / (nd * nh)
                for j in range(ow):
                    orow[_u(j)] = acc[_u(j)] * (inv * colw[_u(j)])


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def global_avg(x, out, r0, r1):
    """Mean over each row of x (rows, size), accumulated in float64, for rows [r0, r1)."""
    size = x.shape[1]
    for r in range(r0, r1):
        xr = x[r]
        acc = 0.0
        for j in range(size):
            acc += xr[_u(j)]
        out[r] = acc / size


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
