"""Reduction kernels (ReduceSum ... ReduceLogSumExp, ArgMax/ArgMin) over a C-contiguous [outer, n, inner] view.

The op layer (onnxjit.ops.reduce) turns any set of reduced axes into that view (reduced axes merged into `n`,
with a transposed copy only when they are not adjacent), so one function per dtype serves every axis/keepdims
combination; the op is a runtime code, not a separate specialization. Every kernel needs n >= 1 (empty sets
are filled by the caller) and writes its (outer, inner) result into a preallocated `out`.

Semantics follow onnxruntime's CPU aggregators:
  * max/min keep the first element and replace it by a later one only when strictly greater (smaller): a NaN
    first element sticks, a later NaN is skipped (onnxruntime's `v > acc ? v : acc`);
  * argmax/argmin likewise (`>=`/`<=` with select_last_index);
  * logsumexp subtracts the largest finite element (0 when there is none): +inf gives +inf, all -inf gives -inf;
  * integer sums are computed in float64 (`accumulate_kahan`, Kahan-compensated as onnxruntime does for
    64-bit ints) and saturated back by the caller.
Float sums accumulate in the input dtype with reassociation allowed, so LLVM vectorizes them (like Eigen's
packet sums in onnxruntime).
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath
from onnxjit.kernels.views import u64 as _u

# pre-ops of accumulate / accumulate_kahan
PRE_NONE, PRE_SQUARE, PRE_ABS = 0, 1, 2


@njit(cache=True, inline="always")
def _pre(v, pre):
    # branch-free so that the loops stay vectorizable
    sq = v * v
    ab = -v if v < 0 else v
    return sq if pre == PRE_SQUARE else (ab if pre == PRE_ABS else v)


@njit(cache=True, fastmath={"reassoc", "contract"})
def accumulate(x, pre, prod, out):
    """out[o, i] = sum_j pre(x[o, j, i]) (pre: PRE_NONE / PRE_SQUARE / PRE_ABS), or prod_j x[o, j, i] when
    `prod`; accumulates in x's dtype."""
    outer, n, inner = x.shape
    if inner == 1:
        x2 = x.reshape(outer, n)
        for o in range(outer):
            xr = x2[o]
            if prod:
                acc = xr[0]
                for j in range(1, n):
                    acc = acc * xr[_u(j)]
            else:
                acc = _pre(xr[0], pre)
                for j in range(1, n):
                    acc = acc + _pre(xr[_u(j)], pre)
            out[o, 0] = acc
        return
    for o in range(outer):
        acc = out[o]
        xr = x[o, 0]
        for i in range(inner):
            acc[_u(i)] = xr[_u(i)] if prod else _pre(xr[_u(i)], pre)
        for j in range(1, n):
            xr = x[o, j]
            if prod:
                for i in range(inner):
                    acc[_u(i)] = acc[_u(i)] * xr[_u(i)]
            else:
                for i in range(inner):
                    acc[_u(i)] = acc[_u(i)] + _pre(xr[_u(i)], pre)


@njit(cache=True)
def accumulate_kahan(x, pre, out):
    """out[o, i] = sum_j pre(x[o, j, i]) with Kahan compensation (float64; the integer path)."""
    outer, n, inner = x.shape
    for o in range(outer):
        for i in range(inner):
            s = 0.0
            c = 0.0
            for j in range(n):
                y = _pre(x[o, j, i], pre) - c
                t = s + y
                c = (t - s) - y
                s = t
            out[o, i] = s


@njit(cache=True)
def minmax(x, is_max, out):
    """out[o, i] = max_j (or min_j) x[o, j, i], onnxruntime's NaN behaviour (see the module docstring)."""
    outer, n, inner = x.shape
    if inner == 1:
        x2 = x.reshape(outer, n)
        for o in range(outer):
            xr = x2[o]
            m = xr[0]
            if is_max:
                for j in range(1, n):
                    v = xr[_u(j)]
                    m = v if v > m else m
            else:
                for j in range(1, n):
                    v = xr[_u(j)]
                    m = v if v < m else m
            out[o, 0] = m
        return
    zero = x.dtype.type(0)  # a + zero: a plain store, not a masked one (see linalg.activate)
    for o in range(outer):
        acc = out[o]
        xr = x[o, 0]
        for i in range(inner):
            acc[_u(i)] = xr[_u(i)]
        for j in range(1, n):
            xr = x[o, j]
            if is_max:
                for i in range(inner):
                    v = xr[_u(i)]
                    a = acc[_u(i)]
                    acc[_u(i)] = v if v > a else a + zero
            else:
                for i in range(inner):
                    v = xr[_u(i)]
                    a = acc[_u(i)]
                    acc[_u(i)] = v if v < a else a + zero


@njit(cache=True, inline="always")
def _better(v, best, is_max, last):
    if is_max:
        return v >= best if last else v > best
    return v <= best if last else v < best


@njit(cache=True)
def argminmax(x, is_max, last, out):
    """out[o, i] = the index j of the max (min) of x[o, :, i]: the first one, or the last with `last`."""
    outer, n, inner = x.shape
    if inner == 1:
        x2 = x.reshape(outer, n)
        for o in range(outer):
            xr = x2[o]
            best = xr[0]
            k = 0
            for j in range(1, n):
                v = xr[_u(j)]
                if _better(v, best, is_max, last):
                    best = v
                    k = j
            out[o, 0] = k
        return
    best = np.empty(inner, dtype=x.dtype)
    for o in range(outer):
        idx = out[o]
        xr = x[o, 0]
        for i in range(inner):
            best[_u(i)] = xr[_u(i)]
            idx[_u(i)] = 0
        for j in range(1, n):
            xr = x[o, j]
            for i in range(inner):
                v = xr[_u(i)]
                if _better(v, best[_u(i)], is_max, last):
                    best[_u(i)] = v
                    idx[_u(i)] = j


@njit(cache=True, inline="always")
def _finite_max(v, m):
    # the larger of m and a finite v (inf and NaN are skipped)
    return v if (v > m and abs(v) < np.inf) else m


@njit(cache=True, fastmath={"reassoc", "contract"})
def logsumexp(x, out):
    """out[o] = log(sum_j exp(x[o, j] - m)) + m for x (outer, n), m the largest finite x[o, :] (0 if none).
    Rows only: the caller moves a strided reduced axis last (a rare op; one layout halves its compile time)."""
    outer, n = x.shape
    c = np.empty(2, dtype=x.dtype)  # typed constants, so that the sums stay in x's dtype
    c[0] = -np.inf
    c[1] = 0
    ninf, zero = c[0], c[1]
    for o in range(outer):
        xr = x[o]
        m = ninf
        for j in range(n):
            m = _finite_max(xr[_u(j)], m)
        m = zero if m == ninf else m
        s = zero
        for j in range(n):
            s += vmath.exp(xr[_u(j)] - m)
        out[o] = vmath.log(s) + m
