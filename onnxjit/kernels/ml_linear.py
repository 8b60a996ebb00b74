"""Kernels of the ai.onnx.ml linear models and SVMs (onnxjit.ops.ml_linear): LinearClassifier, LinearRegressor,
SVMClassifier, SVMRegressor, in float32 as onnxruntime computes them.

`linear_rows` serves every linear model (a GEMM through BLAS on each block of rows, then the op's label rule and
post transform per row while the block is in cache); `svm_rows` the support-vector ones (the kernel values of a
block of rows against every support vector, then the pairwise decisions, votes and probabilities, or the
regression sum). Both work over the row blocks [b0, b1) that `run_units` hands out, and write preallocated
outputs. Labels come out as `classes[i]` for the class index i: the int64 class labels themselves, or the
indices (classes = 0, 1, ...) which the op layer maps to string labels.

Rounding follows onnxruntime 1.32's CPU kernels (onnxruntime/core/providers/cpu/ml/ml_common.h, svmclassifier.cc):
the RBF kernel sums squared differences over the features in their order in float32, the pairwise SVM decisions
accumulate float32 products in float64, and the probability coupling (`multiclass_probability`, libsvm's
method 2) runs the same float32 operations in the same order, so these match bit for bit where the exponentials
do; softmax and the logistic use the vectorizable `vmath` functions (within an ulp or two of onnxruntime's MLAS).
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import blas, vmath
from onnxjit.kernels.ml_preprocess import normalize_rows
from onnxjit.kernels.tree_ensemble import probit  # onnxruntime's ComputeProbit, one copy for the ml kernels

# post_transform codes (the ONNX names)
NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT = range(5)
POSTS = {"NONE": NONE, "LOGISTIC": LOGISTIC, "SOFTMAX": SOFTMAX, "SOFTMAX_ZERO": SOFTMAX_ZERO, "PROBIT": PROBIT}
# SVM kernel codes
LINEAR, POLY, RBF, SIGMOID = range(4)
KERNELS = {"LINEAR": LINEAR, "POLY": POLY, "RBF": RBF, "SIGMOID": SIGMOID}
# linear_rows modes: LinearClassifier, SVMClassifier without support vectors, a regressor (Linear or SVM)
LINEAR_CLASSIFIER, SVM_LINEAR, REGRESSOR = range(3)
# SVMClassifier's rule for two classes without support vectors (onnxruntime's ChooseClass)
ARGMAX, POSITIVE_WEIGHTS, MIXED_WEIGHTS = range(3)

_0 = np.float32(0.0)
_1 = np.float32(1.0)
_2 = np.float32(2.0)
_HALF = np.float32(0.5)
_NEAR_ZERO = np.float32(1e-7)
_PROB_MIN = np.float32(1e-7)
_LOWEST = np.float32(-np.finfo(np.float32).max)
_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def logistic(v):
    e = _1 / (_1 + vmath.exp(-abs(v)))
    return _1 - e if v < _0 else e


@njit(**_JIT)
def _logistic_libm(v):
    """The scalar logistic onnxruntime's SVM probabilities use (std::exp), for bit-equal couplings."""
    e = _1 / (_1 + np.float32(math.exp(-abs(v))))
    return _1 - e if v < _0 else e


@njit(**_JIT)
def post_row(s, post):
    """The post transform of one row of two or more scores, in place."""
    c = s.shape[0]
    if post == LOGISTIC:
        for j in range(c):
            s[j] = logistic(s[j])
    elif post == PROBIT:
        for j in range(c):
            s[j] = probit(s[j])
    elif post == SOFTMAX or post == SOFTMAX_ZERO:
        top = _LOWEST
        for j in range(c):
            if s[j] > top:
                top = s[j]
        total = _0
        if post == SOFTMAX:
            for j in range(c):
                e = vmath.exp(s[j] - top)
                s[j] = e
                total += e
        else:  # scores of (almost) zero stay zero: exp(0) would count them
            scale = vmath.exp(-top)
            for j in range(c):
                v = s[j]
                if v > _NEAR_ZERO or v < -_NEAR_ZERO:
                    e = vmath.exp(v - top)
                    s[j] = e
                    total += e
                else:
                    s[j] = v * scale
        for j in range(c):
            s[j] = s[j] / total


@njit(**_JIT)
def gemm_nt(a, b, c):
    """c = a @ b.T through BLAS (blas.gemm), a (M, K), b (N, K), c (M, N) float32 with contiguous rows; plain
    loops where BLAS reports a failure."""
    if blas.gemm(a, b, c, 1.0, 0.0, False, True) != 0:
        for i in range(a.shape[0]):
            for j in range(b.shape[0]):
                total = _0
                for t in range(a.shape[1]):
                    total += a[i, t] * b[j, t]
                c[i, j] = total


@njit(**_JIT)
def linear_rows(x, offset, scale, coef, bias, mode, post, rule, classes, labels, raw, out, norm, normed, rows, b0,
                b1):
    """raw = x @ coef.T + bias over the row blocks [b0, b1) of `rows` rows (one BLAS GEMM per block), then per row:

    LINEAR_CLASSIFIER: one target: label 1 where the score is > 0, else 0; scores [1 - s, s] when `rule` (two
      class labels; s = logistic(s) first under LOGISTIC; PROBIT: probit(s) packed into the first N entries, as
      onnxruntime's buffer has them), else [s] (PROBIT applied); several: label = first highest score, post
      transform over the row;
    SVM_LINEAR (SVMClassifier without support vectors): label = first highest score, for two classes with the
      `rule` onnxruntime's ChooseClass applies before the post transform; post transform as for the scores;
    REGRESSOR: one target: PROBIT only; several: the post transform; `rule` 1: each output's sign (one-class SVM).
    x (N, F), coef (T, F), raw (N, T) float32; out is raw but for a one-target LinearClassifier, (N, 1 or 2).
    With `offset` and `scale` (F values each; empty: none) x is first a Scaler's input: each block's rows become
    (x - offset) * scale as Scaler's kernel rounds them (ml_preprocess.scale_rows), the pipeline in one step.
    With `norm` >= 0 (a Normalizer after a LinearClassifier: ml_preprocess's MAX, L1, L2) each block's rows of `out`
    are normalized into `normed` as Normalizer's kernel does (normalize_rows), while they are in cache.
    Each step is its own loop over the block (bias, labels, transform), so the plain ones vectorize."""
    n = x.shape[0]
    t = coef.shape[0]
    f = x.shape[1]
    flat = out.reshape(-1)
    for b in range(b0, b1):
        r0 = b * rows
        r1 = min(n, r0 + rows)
        m = r1 - r0
        y = raw[r0:r1]
        if offset.size > 0:
            scaled = np.empty((m, f), np.float32)
            for i in range(m):
                for j in range(f):
                    scaled[i, j] = (x[r0 + i, j] - offset[j]) * scale[j]
            gemm_nt(scaled, coef, y)
        else:
            gemm_nt(x[r0:r1], coef, y)
        for i in range(m):
            for j in range(t):
                y[i, j] += bias[j]
        if mode == LINEAR_CLASSIFIER and t == 1:
            for i in range(m):
                v = y[i, 0]
                r = r0 + i
                labels[r] = classes[1 if v > _0 else 0]
                if post == PROBIT:
                    flat[r] = probit(v)
                elif rule:
                    if post == LOGISTIC:  # onnxruntime 1.32 takes the logistic first (the other posts: none)
                        v = logistic(v)
                    out[r, 0] = _1 - v
                    out[r, 1] = v
                else:
                    out[r, 0] = v
            if norm >= 0:
                normalize_rows(out, norm, normed, r0, r1)
            continue
        if mode != REGRESSOR:
            for i in range(m):
                best = 0
                top = y[i, 0]
                for j in range(1, t):
                    if y[i, j] > top:
                        top = y[i, j]
                        best = j
                if mode == SVM_LINEAR and t == 2:
                    if rule == POSITIVE_WEIGHTS and top >= _HALF:
                        best = 1
                    elif rule == MIXED_WEIGHTS and top > _0:
                        best = 1
                labels[r0 + i] = classes[best]
        if t >= 2:
            if post != NONE:
                for i in range(m):
                    post_row(y[i], post)
        elif post == PROBIT:
            for i in range(m):
                y[i, 0] = probit(y[i, 0])
        if mode == REGRESSOR and rule == 1:
            for i in range(m):
                for j in range(t):
                    y[i, j] = _1 if y[i, j] > _0 else -_1
        if norm >= 0:
            normalize_rows(out, norm, normed, r0, r1)


@njit(**_JIT)
def _rbf_row(x, svt, gamma, exact_exp, acc, out):
    """out[v] = exp(-gamma |x - sv_v|^2), the squared differences summed over the features in order, each a
    product then a sum (onnxruntime's plain C++ loop: no fused multiply-add here)."""
    acc[:] = _0
    for t in range(x.shape[0]):
        xv = x[t]
        row = svt[t]
        for j in range(acc.shape[0]):
            d = xv - row[j]
            acc[j] += d * d
    if exact_exp:
        for j in range(acc.shape[0]):
            out[j] = np.float32(math.exp(-gamma * acc[j]))
    else:
        for j in range(acc.shape[0]):
            out[j] = vmath.exp(-gamma * acc[j])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _dot_row(x, svt, alpha, c, kstride, acc, out):
    """out[v] = c + alpha * x . sv_v as MLAS's SGEMM computes it: per slice of `kstride` features a chain of
    multiply-adds from zero in feature order, added to the output as out + alpha * acc (fused where the CPU has
    FMA, as MLAS's kernels are; `contract` lets LLVM fuse exactly there)."""
    f = x.shape[0]
    out[:] = c
    for k0 in range(0, f, kstride):
        acc[:] = _0
        for t in range(k0, min(f, k0 + kstride)):
            xv = x[t]
            row = svt[t]
            for j in range(acc.shape[0]):
                acc[j] = acc[j] + xv * row[j]
        for j in range(acc.shape[0]):
            out[j] = out[j] + alpha * acc[j]


@njit(**_JIT)
def svm_kernel_row(x, svt, ktype, gamma, coef0, degree, kstride, exact_exp, acc, out):
    """out[v] = K(x, sv_v) for the SVM kernel `ktype`: LINEAR x.sv, POLY (gamma x.sv + coef0)^degree, SIGMOID
    tanh(gamma x.sv + coef0), RBF exp(-gamma |x - sv|^2); svt is the support vectors transposed (F, V), so the
    inner loops run over support vectors and vectorize. The exponential is libm's (bit-equal to onnxruntime's
    std::exp) where `exact_exp`, else vmath's (an ulp or two apart, vectorized)."""
    if ktype == RBF:
        _rbf_row(x, svt, gamma, exact_exp, acc, out)
        return
    if ktype == LINEAR:
        _dot_row(x, svt, _1, _0, kstride, acc, out)
        return
    _dot_row(x, svt, gamma, coef0, kstride, acc, out)
    for j in range(out.shape[0]):
        s = out[j]
        if ktype == SIGMOID:
            s = vmath.tanh(s)
        elif degree == _2:
            s = s * s
        elif degree == np.float32(3.0):
            s = s * s * s
        else:
            s = np.float32(s ** degree)
        out[j] = s


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def mlas_dot(a, b, c, kstride):
    """c + a . b as MLAS's SGEMM computes one output (see _dot_row), in float32."""
    total = c
    n = a.shape[0]
    for k0 in range(0, n, kstride):
        acc = _0
        for j in range(k0, min(n, k0 + kstride)):
            acc = acc + a[j] * b[j]
        total = total + acc
    return total


@njit(**_JIT)
def multiclass_probability(r, p, q, qp):
    """Pairwise coupling of the probabilities r (C x C, r[i, j] = P(i | i or j)) into p (libsvm's method 2), in
    the float32 operations onnxruntime runs (ml_common.h multiclass_probability)."""
    c = p.shape[0]
    fc = np.float32(c)
    eps = np.float32(0.005) / fc
    for i in range(c):
        p[i] = _1 / fc
        q[i, i] = _0
        for j in range(i):
            q[i, i] += r[j, i] * r[j, i]
            q[i, j] = q[j, i]
        for j in range(i + 1, c):
            q[i, i] += r[j, i] * r[j, i]
            q[i, j] = -r[j, i] * r[i, j]
    for _loop in range(100):
        pqp = _0
        for i in range(c):
            qp[i] = _0
            for j in range(c):
                qp[i] += q[i, j] * p[j]
            pqp += p[i] * qp[i]
        max_error = _0
        for i in range(c):
            error = abs(qp[i] - pqp)
            if error > max_error:
                max_error = error
        if max_error < eps:
            break
        for i in range(c):
            diff = (-qp[i] + pqp) / q[i, i]
            p[i] += diff
            pqp = (pqp + diff * (diff * q[i, i] + _2 * qp[i])) / (_1 + diff) / (_1 + diff)
            for j in range(c):
                qp[j] = (qp[j] + diff * q[i, j]) / (_1 + diff)
                p[j] /= (_1 + diff)


@njit(**_JIT)
def svm_rows(x, svt, ktype, gamma, coef0, degree, kstride, coef, starts, counts, rho, prob_a, prob_b, post,
             classify, one_class, sum_kstride, classes, labels, out, rows, b0, b1):
    """SVMs with support vectors over the row blocks [b0, b1) of `rows` rows: per row the kernel values against
    every support vector (svm_kernel_row; `kstride` is MLAS's slice of the features), then

    classify: for each pair of classes i < j, the decision d = sum of coef[j-1, sv of i] K + coef[i, sv of j] K
      + rho (float32 products summed in float64), a vote for i where d > 0 else for j; label = the first class
      with the most votes; scores: with prob_a/prob_b, the pairwise probabilities 1 - logistic(d a + b) (clipped
      to [1e-7, 1 - 1e-7]) coupled into one per class, then the post transform; without, the decisions and the
      post transform (two classes: [-d, d] under NONE, [probit(d), 0] under PROBIT, [1 - logistic(d),
      logistic(d)] under LOGISTIC, else [1 - d, d]);
    else (SVMRegressor): rho[0] + coef . K as MLAS's GEMM sums it (slices of `sum_kstride`), with libm's exp
      for RBF: the sum often cancels (one-class SVMs), so its rounding is reproduced; its sign where one_class.
    x (N, F), svt (F, V), coef (C-1, V) (regressor: (1, V)), out (N, scores) float32; starts/counts: each
    class's support vectors."""
    n = x.shape[0]
    nv = svt.shape[1]
    nc = starts.shape[0]
    k = np.empty(nv, np.float32)
    acc = np.empty(nv, np.float32)
    votes = np.zeros(max(nc, 1), np.int64)
    npairs = nc * (nc - 1) // 2
    dec = np.empty(max(npairs, 1), np.float32)
    have_proba = prob_a.shape[0] > 0
    r = np.zeros((max(nc, 1), max(nc, 1)), np.float32)
    q = np.empty_like(r)
    qp = np.empty(max(nc, 1), np.float32)
    for b in range(b0, b1):
        for row in range(b * rows, min(n, (b + 1) * rows)):
            svm_kernel_row(x[row], svt, ktype, gamma, coef0, degree, kstride, not classify, acc, k)
            if not classify:
                y = mlas_dot(coef[0], k, rho[0], sum_kstride)
                if one_class:
                    y = _1 if y > _0 else -_1
                out[row, 0] = y
                continue
            votes[:] = 0
            idx = 0
            for ci in range(nc - 1):
                si, ni = starts[ci], counts[ci]
                for cj in range(ci + 1, nc):
                    sj, nj = starts[cj], counts[cj]
                    d = 0.0
                    cr = coef[cj - 1]
                    for m in range(si, si + ni):
                        d += np.float64(cr[m] * k[m])
                    cr = coef[ci]
                    for m in range(sj, sj + nj):
                        d += np.float64(cr[m] * k[m])
                    d += np.float64(rho[idx])
                    dec[idx] = np.float32(d)
                    if d > 0:
                        votes[ci] += 1
                    else:
                        votes[cj] += 1
                    idx += 1
            best = 0
            for c in range(1, nc):
                if votes[c] > votes[best]:
                    best = c
            labels[row] = classes[best]
            s = out[row]
            if have_proba:
                idx = 0
                for ci in range(nc - 1):
                    for cj in range(ci + 1, nc):
                        v = _1 - _logistic_libm(dec[idx] * prob_a[idx] + prob_b[idx])
                        v = min(max(v, _PROB_MIN), _1 - _PROB_MIN)
                        r[ci, cj] = v
                        r[cj, ci] = _1 - v
                        idx += 1
                multiclass_probability(r, s, q, qp)
                post_row(s, post)
            elif nc > 2:
                for j in range(npairs):
                    s[j] = dec[j]
                post_row(s, post)
            else:
                d = dec[0]
                if post == PROBIT:  # onnxruntime leaves the second slot unwritten
                    s[0] = probit(d)
                    s[1] = _0
                elif post == NONE:
                    s[0] = -d
                    s[1] = d
                else:
                    if post == LOGISTIC:
                        d = logistic(d)
                    s[0] = _1 - d
                    s[1] = d
