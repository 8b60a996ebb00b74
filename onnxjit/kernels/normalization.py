"""Softmax / LogSoftmax and LayerNormalization kernels over the rows of a C-contiguous (rows, n) array, the
normalized axis last.

`rows` runs blocks of rows [u0, u1) (the units onnxjit.worker_pool.run_units hands its threads), each row in a few
passes that
stay in L1: max, exp-and-sum, scale (softmax); sum, centered sum of squares, normalize-scale-shift (layer norm),
the streaming pass of the next row fused into the compute pass of the current one.
exp and log are `vmath` (vectorizable, ~1 ulp), the per-row sums may be reassociated so that they vectorize, and
the row max runs over order-preserving integer keys of the floats (it vectorizes; a NaN anywhere in a row still
makes the whole row NaN). All arithmetic stays in the input dtype (float32 or float64). Layer norm also has an
in-place form (the op layer uses it over a dead softmax buffer). Softmax alone has its own driver
(`softmax_rows`): a network whose only normalization is its classifier's softmax then compiles none of the layer
norm code (about 3.5 s of a cold start); the layer norm forms share `rows`. RMS normalization has its own row
kernel.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath
from onnxjit.kernels.views import u64 as _u


def _flip_codegen(builder, bits, width):
    # bits ^ ((bits >>arith (width - 1)) & INT_MAX): an involution, monotonic from float order to signed order
    ity = ir.IntType(width)
    sign = builder.ashr(bits, ir.Constant(ity, width - 1))
    return builder.xor(bits, builder.and_(sign, ir.Constant(ity, (1 << (width - 1)) - 1)))


@intrinsic
def _key(typingctx, v):
    """A signed integer of v's width ordered as the float v (a positive NaN above +inf): a max over keys
    vectorizes, a float max reduction does not (LLVM will not reassociate its selects)."""
    if isinstance(v, types.Float) and v.bitwidth in (32, 64):
        width = v.bitwidth

        def codegen(context, builder, sig, args):
            return _flip_codegen(builder, builder.bitcast(args[0], ir.IntType(width)), width)
        return (types.int32 if width == 32 else types.int64)(v), codegen
    return None


@intrinsic
def _from_key(typingctx, k):
    """The float whose key (see `_key`) is k."""
    if isinstance(k, types.Integer) and k.bitwidth in (32, 64):
        width = k.bitwidth

        def codegen(context, builder, sig, args):
            fty = ir.FloatType() if width == 32 else ir.DoubleType()
            return builder.bitcast(_flip_codegen(builder, args[0], width), fty)
        return (types.float32 if width == 32 else types.float64)(k), codegen
    return None


@njit(cache=True, inline="always")
def row_max(xr):
    """max of a non-empty contiguous float row, through the ordered integer keys (a positive NaN wins, so a
    NaN row stays NaN; a negative NaN is caught by the caller's exp sum)."""
    k = _key(xr[0])
    for j in range(1, xr.shape[0]):
        kj = _key(xr[_u(j)])
        k = kj if kj > k else k
    return _from_key(k)


# The sums may be reassociated (so that they vectorize), but only in these helpers: with `reassoc` on a row
# function LLVM turns its final `y * (1 / s)` back into a division per element (several times slower).
#
# Rows are processed in blocks, skewed by one row: the pass that streams the next row in from memory (its max, or
# its sum) runs fused with the compute-heavy pass of the current row (exp, or normalize), so that the core
# computes while the next row's loads are in flight (15-20% faster than row after row).
@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _exp_sum_next_max(xr, yr, m, xn, zero, store):
    """(sum_j exp(xr[j] - m), max of the row xn): each exp term stored into yr when `store`; xn has xr's length
    (it may be xr itself)."""
    s = zero
    k = _key(xn[0])
    if store:
        for j in range(xr.shape[0]):
            e = vmath.exp(xr[_u(j)] - m)
            yr[_u(j)] = e
            s += e
            kj = _key(xn[_u(j)])
            k = kj if kj > k else k
    else:
        for j in range(xr.shape[0]):
            s += vmath.exp(xr[_u(j)] - m)
            kj = _key(xn[_u(j)])
            k = kj if kj > k else k
    return s, _from_key(k)


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def row_sum(xr, zero):
    s = zero
    for j in range(xr.shape[0]):
        s += xr[_u(j)]
    return s


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def row_sum_sq_dev(xr, mu, zero):
    q = zero
    for j in range(xr.shape[0]):
        d = xr[_u(j)] - mu
        q += d * d
    return q


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _normalize_sum_next(xr, yr, sr, br, mu, iv, xn, zero):
    """yr = (xr - mu) * iv * sr + br, returning the sum of the row xn (the next row, never yr)."""
    s = zero
    for j in range(xr.shape[0]):
        yr[_u(j)] = (xr[_u(j)] - mu) * iv * sr[_u(j)] + br[_u(j)]
        s += xn[_u(j)]
    return s


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _normalize_inplace_sum_next(yr, sr, br, mu, iv, yn, zero):
    """`_normalize_sum_next` over yr in place (one array for the row, so that LLVM vectorizes without
    aliasing checks failing); yn is another row (for the last row of a block any other row: the sum is unused)."""
    s = zero
    for j in range(yr.shape[0]):
        yr[_u(j)] = (yr[_u(j)] - mu) * iv * sr[_u(j)] + br[_u(j)]
        s += yn[_u(j)]
    return s


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _normalize_inplace(yr, sr, br, mu, iv):
    for j in range(yr.shape[0]):
        yr[_u(j)] = (yr[_u(j)] - mu) * iv * sr[_u(j)] + br[_u(j)]


@njit(cache=True, nogil=True, forceinline=True, fastmath={"contract"})
def _softmax_block(x, y, r0, r1, log, zero, one):
    """y[r] = softmax(x[r]) (log: log_softmax) for the rows [r0, r1) of x, y (rows, n), n >= 1."""
    m = row_max(x[r0])
    for r in range(r0, r1):
        xr = x[r]
        yr = y[r]
        xn = x[r + 1] if r + 1 < r1 else xr
        n = xr.shape[0]
        if log:
            s, m_next = _exp_sum_next_max(xr, yr, m, xn, zero, False)
            ls = vmath.log(s)
            for j in range(n):
                yr[_u(j)] = (xr[_u(j)] - m) - ls
        else:
            s, m_next = _exp_sum_next_max(xr, yr, m, xn, zero, True)
            inv = one / s
            for j in range(n):
                yr[_u(j)] = yr[_u(j)] * inv
        m = m_next


@njit(cache=True, nogil=True, forceinline=True, fastmath={"contract"})
def _layernorm_block(x, y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std):
    """y[r] = (x[r] - mean) * inv_std * scale + bias for the rows [r0, r1); the variance comes from a second,
    centered pass over the row (in L1 by then). mean[r], inv_std[r] receive the statistics."""
    scale_rows = scale.shape[0] > 1
    bias_rows = bias.shape[0] > 1
    s = row_sum(x[r0], zero)
    for r in range(r0, r1):
        xr = x[r]
        mu = s / nf
        iv = one / np.sqrt(row_sum_sq_dev(xr, mu, zero) / nf + eps)
        s = _normalize_sum_next(xr, y[r], scale[r] if scale_rows else scale[0], bias[r] if bias_rows else bias[0],
                                mu, iv, x[r + 1] if r + 1 < r1 else xr, zero)
        mean[r] = mu
        inv_std[r] = iv


@njit(cache=True, nogil=True, forceinline=True, fastmath={"contract"})
def _layernorm_block_inplace(y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std):
    """`_layernorm_block` over y in place."""
    scale_rows = scale.shape[0] > 1
    bias_rows = bias.shape[0] > 1
    s = row_sum(y[r0], zero)
    for r in range(r0, r1):
        yr = y[r]
        mu = s / nf
        iv = one / np.sqrt(row_sum_sq_dev(yr, mu, zero) / nf + eps)
        s = _normalize_inplace_sum_next(yr, scale[r] if scale_rows else scale[0],
                                        bias[r] if bias_rows else bias[0], mu, iv,
                                        y[r + 1] if r + 1 < r1 else y[r0], zero)
        mean[r] = mu
        inv_std[r] = iv


@njit(cache=True, nogil=True, forceinline=True, fastmath={"contract"})
def _softmax_layernorm_block(x, y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std):
    """y[r] = layer norm of softmax(x[r]) for the rows [r0, r1), in three passes over each row: exp terms e
    and their sum s (with the next row's max), centered sum of squares, normalize. Layer norm is scale-invariant
    but for its epsilon: LN(e / s) with epsilon is LN(e) with epsilon * s**2, so the softmax's division pass is
    not needed, and the exp pass gives the mean. mean[r], inv_std[r] are those of the softmax row."""
    scale_rows = scale.shape[0] > 1
    bias_rows = bias.shape[0] > 1
    m = row_max(x[r0])
    for r in range(r0, r1):
        xr = x[r]
        yr = y[r]
        s, m_next = _exp_sum_next_max(xr, yr, m, x[r + 1] if r + 1 < r1 else xr, zero, True)
        mu = s / nf
        iv = one / np.sqrt(row_sum_sq_dev(yr, mu, zero) / nf + eps * s * s)
        _normalize_inplace(yr, scale[r] if scale_rows else scale[0], bias[r] if bias_rows else bias[0], mu, iv)
        mean[r] = mu / s
        inv_std[r] = iv * s
        m = m_next


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _sum_sq(xr, zero):
    q = zero
    for j in range(xr.shape[0]):
        q += xr[_u(j)] * xr[_u(j)]
    return q


@njit(cache=True, nogil=True, fastmath={"contract"})
def rms_norm_rows(x, scale, eps, y, r0, r1):
    """y[r] = x[r] / sqrt(mean(x[r] ** 2) + eps) * scale for the rows [r0, r1) of x, y (rows, n), n >= 1; scale
    is (1, n), shared, or (rows, n). Serial over its rows (ops.nn.run_units spreads ranges of them), outside the
    parallel `rows` driver so as not to grow its one parfor."""
    scale_rows = scale.shape[0] > 1
    zero = y.dtype.type(0)
    nf = y.dtype.type(x.shape[1])
    for r in range(r0, r1):
        xr = x[r]
        yr = y[r]
        sr = scale[r] if scale_rows else scale[0]
        iv = y.dtype.type(1) / np.sqrt(_sum_sq(xr, zero) / nf + eps)
        for j in range(xr.shape[0]):
            yr[_u(j)] = xr[_u(j)] * iv * sr[_u(j)]


@njit(cache=True, nogil=True, forceinline=True)
def _add_rows(xr, sr, ar, tr):
    """tr = (xr + sr) + ar, in that order: the sum numpy's adds make (ar zeros where there is no bias)."""
    for j in range(tr.shape[0]):
        tr[_u(j)] = (xr[_u(j)] + sr[_u(j)]) + ar[_u(j)]


@njit(cache=True, nogil=True, forceinline=True, fastmath={"reassoc", "contract"})
def _normalize_into(tr, yr, sr, br, mu, iv):
    for j in range(tr.shape[0]):
        yr[_u(j)] = (tr[_u(j)] - mu) * iv * sr[_u(j)] + br[_u(j)]


@njit(cache=True, nogil=True, fastmath={"contract"})
def skip_rows(x, skip, addend, total, y, in_place, scale, bias, eps, mean, inv_std, block, u0, u1):
    """SkipLayerNormalization over (rows, n) arrays, the blocks [u0, u1) of `block` rows: total[r] = x[r] +
    skip[r % len(skip)] + addend (n,), then y[r] = its layer norm with scale and bias (1, n) (over total in
    place when `in_place`: y is total); mean[r] and inv_std[r] receive the statistics. The sum, its two reductions
    and the normalization pass over each row while it is in L1 (a separate numpy add wrote the whole sum to
    memory first)."""
    nrows = y.shape[0]
    zero, one, nf = _constants(y)
    period = skip.shape[0]
    sr, br = scale[0], bias[0]
    for b in range(u0, u1):
        r0 = b * block
        for r in range(r0, min(nrows, r0 + block)):
            tr = total[r]
            _add_rows(x[r], skip[r % period], addend, tr)
            mu = row_sum(tr, zero) / nf
            iv = one / np.sqrt(row_sum_sq_dev(tr, mu, zero) / nf + eps)
            if in_place:
                _normalize_inplace(tr, sr, br, mu, iv)
            else:
                _normalize_into(tr, y[r], sr, br, mu, iv)
            mean[r] = mu
            inv_std[r] = iv


SOFTMAX, LOG_SOFTMAX, LAYER_NORM, LAYER_NORM_INPLACE, SOFTMAX_LAYER_NORM, LOG_SOFTMAX_LAYER_NORM = range(6)


@njit(cache=True, nogil=True, forceinline=True)
def _constants(y):
    """zero, one and the row length n in y's dtype."""
    c = np.zeros(3, dtype=y.dtype)
    c[1] = 1
    c[2] = y.shape[1]
    return c[0], c[1], c[2]


@njit(cache=True, nogil=True)
def softmax_rows(x, y, log, block, u0, u1):
    """Softmax (LogSoftmax when `log`) of each row of x (rows, n), n >= 1, into y, the blocks [u0, u1) of
    `block` rows."""
    zero, one, _ = _constants(y)
    for b in range(u0, u1):
        r0 = b * block
        _softmax_block(x, y, r0, min(y.shape[0], r0 + block), log, zero, one)


@njit(cache=True, nogil=True)
def rows(x, y, op, scale, bias, eps, mean, inv_std, block, u0, u1):
    """The layer norm row kernels over (rows, n) arrays, n >= 1, the blocks [u0, u1) of `block` rows: op
    LAYER_NORM (y[r] from x[r]; scale and bias are
    (1, n), shared, or (rows, n); eps has the arrays' dtype; mean[r] and inv_std[r] receive the statistics) or
    LAYER_NORM_INPLACE (the same over y in place; x is unused), or SOFTMAX_LAYER_NORM (layer norm of each
    row's exp terms, see `_softmax_layernorm_block`) / LOG_SOFTMAX_LAYER_NORM (the log-softmax of each block of
    rows, then layer norm over it while it is still in cache): one pass over memory instead of two. One driver
    serves them all, so each dtype compiles one kernel for them."""
    nrows = y.shape[0]
    zero, one, nf = _constants(y)
    for b in range(u0, u1):
        r0 = b * block
        r1 = min(nrows, r0 + block)
        if op == LAYER_NORM:
            _layernorm_block(x, y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std)
        elif op == LAYER_NORM_INPLACE:
            _layernorm_block_inplace(y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std)
        elif op == SOFTMAX_LAYER_NORM:
            _softmax_layernorm_block(x, y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std)
        else:
            _softmax_block(x, y, r0, r1, True, zero, one)  # LOG_SOFTMAX_LAYER_NORM
            _layernorm_block_inplace(y, r0, r1, scale, bias, eps, nf, zero, one, mean, inv_std)
