"""Tree-ensemble kernel (ai.onnx.ml TreeEnsembleClassifier / TreeEnsembleRegressor / TreeEnsemble) over flat node
arrays; onnxjit/ops/tree_ensemble.py builds the arrays, and its docstring says why this design and what it costs.

The arrays, one record per node of every tree (the trees' nodes side by side):
  nodes[4n: 4n + 4]  (feature << 1 | missing_tracks_true, threshold bits, true child, false child), int32
                     records for float32 thresholds, int64 for float64 ones; `thr` is the same memory viewed as
                     the thresholds' dtype, so one 16- or 32-byte record holds all a step reads. A leaf names
                     itself as both children: walking past a leaf stays on it, which the lockstep walk relies on;
                     its threshold word holds its row in lval/lhas (its aggregated weight per target, and whether
                     it has one), read from the record the walk ends on (a separate array of rows, 4 MB for the
                     extra-trees, cost a cache miss per tree)
  aux[n]             (mode, first member, end of members): read only when the ensemble mixes modes or has set
                     membership (`same_mode` MIXED), or has EQ nodes among LEQ ones (LEQ_EQ: a loop of its own,
                     LightGBM's categorical splits; through MIXED's, lgb_cat ran 1.6x onnxruntime's time)
Per tree: trees[t] = (root, depth: the longest root-to-leaf path in tests).

`predict` runs the blocks [u0, u1) of `block` rows (the units onnxjit.worker_pool.run_units hands out; serial and
nogil): for each tree, every row of the block steps once per tree level in turn (lockstep, branch-free),
so the rows' walks are independent chains of loads that overlap, and the block's rows and the tree's nodes stay
in cache; then the block adds its leaves. A single row walks GROUP trees in lockstep instead. Aggregation and
finalization follow onnxruntime's TreeAggregator* (see _finalize).
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.cache.jit import njit

# node modes (ai.onnx.ml TreeEnsemble-5's numbering; LEAF is ours)
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = 0, 1, 2, 3, 4, 5, 6, 7
# MEMBER over a big set (31 values or more, or one outside [0, 30]): onnxruntime compares the value truncated to an
# integer with the set's values truncated (the members here are stored truncated)
MEMBER_INT = 8
# aggregate functions and post transforms (TreeEnsemble-5's numbering)
AVERAGE, SUM, MIN, MAX = 0, 1, 2, 3
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = 0, 1, 2, 3, 4
# what the outputs are
REGRESSOR_1, REGRESSOR_N, CLASSIFIER_N = 0, 1, 2
MIXED = -1  # `same_mode` when nodes of several modes (or MEMBER) are present
LEQ_EQ = -2  # `same_mode` when LEQ and EQ nodes are (LightGBM's categorical splits, as onnxmltools writes them)
# the entries of predict's `params`
P_SAME_MODE, P_MISSING, P_AGG, P_TRACK_HAS, P_BLOCK, P_KIND, P_POST, P_BINARY, P_POSITIVE, P_REFILL = range(10)
N_PARAMS = 10
_PI = np.float32(math.pi)
_SQRT2 = np.float32(math.sqrt(2.0))
GROUP = 32  # trees a single row walks at once (16: RF 7.1 us, 32: 6.7, 64: 7.2, 256: 8.7; GB/RF regressor alike)


@njit(cache=True, nogil=True)
def probit(v):
    """sqrt(2) * erfinv(2v - 1) with onnxruntime's approximation of erfinv (ml_common.h ComputeProbit), in float32
    as there; one copy for the ai.onnx.ml kernels (ml_linear imports it). pi and sqrt(2) are float32's nearest
    (3.14159 and 1.41421356 put linear-model scores near 0 1e-4 from onnxruntime's); the logarithm and square roots
    are libm's, rounded to float32."""
    f = np.float32
    x = f(2) * f(v) - f(1)
    sgn = f(-1) if x < 0 else f(1)
    x = (f(1) - x) * (f(1) + x)
    lg = f(math.log(x))
    a = f(2) / (_PI * f(0.147)) + f(0.5) * lg
    b = f(1) / f(0.147) * lg
    return _SQRT2 * (sgn * f(math.sqrt(-a + f(math.sqrt(a * a - b)))))


@njit(cache=True, nogil=True)
def _logistic(v):
    e = math.exp(-abs(v))
    p = 1.0 / (1.0 + e)
    return 1.0 - p if v < 0 else p


@njit(cache=True, nogil=True)
def _transform(sc, n_scores, nb, post, z, b0):
    """z[b0 + r, :k] = post_transform(sc[r, :k]) for the block's rows r < nb with k = n_scores[r] scores, two or
    more (onnxruntime's write_scores); rows with 0 are written already. sc is overwritten."""
    for r in range(nb):
        k = n_scores[r]
        if k == 0:
            continue
        row = b0 + r
        if post == SOFTMAX or post == SOFTMAX_ZERO:
            vmax = -np.inf
            for c in range(k):
                if sc[r, c] > vmax:
                    vmax = sc[r, c]
            total = 0.0
            for c in range(k):
                v = sc[r, c]
                e = math.exp(v - vmax) if post == SOFTMAX or v > 1e-7 or v < -1e-7 else v * math.exp(-vmax)
                sc[r, c] = e
                total += e
            for c in range(k):
                z[row, c] = sc[r, c] / total
        else:
            for c in range(k):
                v = sc[r, c]
                if post == LOGISTIC:
                    v = _logistic(v)
                elif post == PROBIT:
                    v = probit(v)
                z[row, c] = v


@njit(cache=True, nogil=True)
def _finalize(kind, agg, post, n_trees, acc, has, nb, base, binary_case, all_positive, labels, n_scores, z, b0,
              label):
    """Scores (and labels) of the block's rows b0 + r, r < nb, from their accumulators acc[r, :] and has[r, :]
    (onnxruntime's FinalizeScores): written to z here, or left in acc[r, :n_scores[r]] for _transform. Where several
    scores are written, one that no weight reached (has False) is written as 0 whatever the base values added to
    it: onnxruntime converts its scores to float through `has_score ? score : 0`.
    One call per block, the rows looped here: a call to a jitted function that takes arrays pays their atomic
    reference counts (this function's per row: 60-100 ns, more than the decision tree's whole walk of a row)."""
    c_out = acc.shape[1]
    nbase = base.shape[0]
    for r in range(nb):
        row = b0 + r
        n_scores[r] = 0
        if kind == REGRESSOR_1:
            v = acc[r, 0]
            if agg == AVERAGE:
                v = v / n_trees
            if nbase == 1:
                v += base[0]
            z[row, 0] = probit(v) if post == PROBIT else v
            continue
        if kind == REGRESSOR_N:
            for c in range(c_out):
                v = acc[r, c]
                if agg == AVERAGE:
                    v = v / n_trees
                if nbase == c_out:
                    v += base[c]
                acc[r, c] = v if has[r, c] else 0
            n_scores[r] = c_out
            continue
        # CLASSIFIER_N
        if c_out > 2:
            best = -1
            for c in range(min(nbase, c_out)):
                if not has[r, c]:
                    has[r, c] = True
                    acc[r, c] = base[c]
                else:
                    acc[r, c] += base[c]
            for c in range(c_out):
                if has[r, c] and (best == -1 or acc[r, c] > acc[r, best]):
                    best = c
                if not has[r, c]:
                    acc[r, c] = 0
            label[row] = labels[best] if best >= 0 else labels[0]
            n_scores[r] = c_out
            continue
        k = 2
        extra = -1  # onnxruntime's write_additional_scores
        if nbase == 2:
            if has[r, 1]:
                acc[r, 1] = base[1] + acc[r, 0]
                acc[r, 0] = -acc[r, 1]
            else:
                acc[r, 1] += base[1]
                acc[r, 0] += base[0]
        elif nbase == 1:
            acc[r, 0] += base[0]
            if not has[r, 1]:
                k = 1
        else:
            extra = 3
            if not has[r, 1]:
                k = 1
        if k == 2 and has[r, 1]:
            pos = acc[r, 1]
        elif has[r, 0]:
            pos = acc[r, 0]
        else:
            pos = acc[r, 0] * 0
        # onnxruntime's _set_score_binary: the label, and how the second score is written (extra)
        if binary_case:
            if all_positive:
                lab, e = (labels[1], 0) if pos > 0.5 else (labels[0], 1)
            else:
                lab, e = (labels[1], 2) if pos > 0 else (labels[0], 3)
        else:
            lab, e = (np.int64(1), -1) if pos > 0 else (np.int64(0), -1)
        label[row] = lab
        if e >= 0:
            extra = e
        if k == 2:
            for c in range(2):
                if not has[r, c]:
                    acc[r, c] = 0
            n_scores[r] = 2
            continue
        # one score: onnxruntime writes the second from the rule that picked the label, or leaves it unwritten
        # (the output's fresh memory; 0 here)
        v = acc[r, 0]
        if post == PROBIT:
            z[row, 0] = probit(v)
            z[row, 1] = 0.0
        elif extra >= 0 and post == LOGISTIC:
            z[row, 0] = _logistic(-v)
            z[row, 1] = _logistic(v)
        elif extra == 0 or extra == 1:
            z[row, 0] = 1.0 - v
            z[row, 1] = v
        elif extra == 2 or extra == 3:
            z[row, 0] = -v
            z[row, 1] = v
        else:
            z[row, 0] = v
            z[row, 1] = 0.0
    _transform(acc, n_scores, nb, post, z, b0)


@njit(cache=True, nogil=True)
def _walk_row(xf, o, nodes, thr, trees, missing, aux, with_eq):
    """The leaf of every tree for the row at xf[o:] (LEQ nodes, and EQ ones where `with_eq`, their modes in
    aux[:, 0]): GROUP lanes walk trees in lockstep, and a lane whose tree reaches its leaf takes the next tree,
    so no step is spent past a leaf and the lanes' loads overlap (a lockstep group pays its deepest tree; one
    tree at a time is one chain of dependent loads)."""
    u1, u2, u3, u4 = np.uint32(1), np.uint32(2), np.uint32(3), np.uint32(4)
    n_trees = trees.shape[0]
    leaf_of = np.empty(n_trees, np.uint32)
    lanes = min(GROUP, n_trees)
    lane_tree = np.empty(lanes, np.int64)
    cur = np.empty(lanes, np.uint32)
    for j in range(lanes):
        lane_tree[j] = j
        cur[j] = np.uint32(trees[j, 0])
    next_tree = lanes
    active = lanes
    while active > 0:
        for i in range(lanes):
            t = lane_tree[i]
            if t < 0:
                continue
            n = cur[i]
            q = u4 * n
            f = nodes[q]
            v = xf[o + np.uint32(f >> 1)]
            ok = v == thr[q + u1] if with_eq and aux[n, 0] == EQ else v <= thr[q + u1]
            if missing:
                ok = ok | (((f & 1) == 1) & (v != v))
            m = np.uint32(nodes[q + (u2 if ok else u3)])
            if m != n:
                cur[i] = m
                continue
            leaf_of[t] = n
            if next_tree < n_trees:
                lane_tree[i] = next_tree
                cur[i] = np.uint32(trees[next_tree, 0])
                next_tree += 1
            else:
                lane_tree[i] = -1
                active -= 1
    return leaf_of


@njit(cache=True, nogil=True)
def predict(x, nodes, thr, aux, members, trees, lval, lhas, base, labels, params, z, label, u0, u1):
    """Scores z[r] (float32 [N, outputs]) and labels label[r] (int64, classifiers) of the rows of x in the blocks
    [u0, u1) of params[P_BLOCK] rows (x [N, F] C-contiguous, in the compare dtype). nodes: [4 * n] records (fc,
    threshold bits or a leaf's row of lval, true child, false child), int32 for float32 thresholds and int64 for
    float64 ones, and thr the same memory viewed as the thresholds' dtype (one record, 16 or 32 bytes, holds all a
    step reads); trees: int32 [T, 2] (root, depth); params: the P_* settings.

    Lanes walk in lockstep: a block of rows through one tree, or for a single row, a group of `block` trees at
    once (otherwise its walk is one chain of dependent loads, a cache miss each on a big forest). Everything is
    written out in this one function: a call to a jitted function that takes arrays pays atomic reference
    counts for each of them, more than a tree level costs. Indices are unsigned, so Numba emits no
    negative-index wraparound (half the time of the walk)."""
    same_mode, missing, agg, track_has = params[P_SAME_MODE], params[P_MISSING] != 0, params[P_AGG], \
        params[P_TRACK_HAS] != 0
    block, kind, post = params[P_BLOCK], params[P_KIND], params[P_POST]
    binary_case, all_positive = params[P_BINARY] != 0, params[P_POSITIVE] != 0
    fast = same_mode == LEQ and not missing
    n_trees = trees.shape[0]
    n_cols = x.shape[1]
    xf = x.reshape(x.size)
    c_out = lval.shape[1]
    acc = np.zeros((block, c_out), lval.dtype)
    has = np.zeros((block, c_out), np.bool_)
    n_scores = np.empty(block, np.int64)  # per row of a block: the scores _finalize leaves to _transform
    cur = np.empty(block, np.uint32)  # each lane's node
    lane_off = np.empty(block, np.uint32)  # where each lane's row starts in xf
    lane_row = np.zeros(block, np.int64)  # each lane's row in the block
    r0, r1 = u0 * block, min(x.shape[0], u1 * block)
    u1, u2, u3, u4 = np.uint32(1), np.uint32(2), np.uint32(3), np.uint32(4)
    for b0 in range(r0, r1, block):
        nb = min(block, r1 - b0)
        acc[:nb] = 0
        has[:nb] = False
        single = nb == 1
        if single:
            lane_off[:] = np.uint32(b0 * n_cols)
            lane_row[:] = 0
        else:
            for r in range(nb):
                lane_off[r] = np.uint32((b0 + r) * n_cols)
                lane_row[r] = r
        walked = single and (same_mode == LEQ or same_mode == LEQ_EQ) and params[P_REFILL] != 0
        if walked:
            leaf_of = _walk_row(xf, lane_off[0], nodes, thr, trees, missing, aux, same_mode == LEQ_EQ)
        for p in range((n_trees + GROUP - 1) // GROUP if single else n_trees):
            if single:  # lanes: the trees [t0, t0 + lanes)
                t0 = p * GROUP
                lanes = min(GROUP, n_trees - t0)
                steps = 0
                for j in range(lanes):
                    if walked:
                        cur[j] = leaf_of[t0 + j]
                    else:
                        cur[j] = np.uint32(trees[t0 + j, 0])
                        steps = max(steps, trees[t0 + j, 1])
            else:  # lanes: the block's rows in tree p
                lanes = nb
                steps = trees[p, 1]
                root = np.uint32(trees[p, 0])
                for r in range(nb):
                    cur[r] = root
            for _ in range(steps):
                if fast:  # the common case, kept free of other tests
                    for i in range(lanes):
                        n = cur[i]
                        q = u4 * n
                        go = u2 if xf[lane_off[i] + np.uint32(nodes[q] >> 1)] <= thr[q + u1] else u3
                        cur[i] = np.uint32(nodes[q + go])
                elif same_mode == LEQ or same_mode == LEQ_EQ:  # missing values tracked, categorical splits (LightGBM)
                    with_eq = same_mode == LEQ_EQ  # (loop-invariant: LLVM makes two loops of this one)
                    for i in range(lanes):
                        n = cur[i]
                        q = u4 * n
                        f = nodes[q]
                        v = xf[lane_off[i] + np.uint32(f >> 1)]
                        ok = ((v == thr[q + u1]) if with_eq and aux[n, 0] == EQ else (v <= thr[q + u1])) | \
                            (((f & 1) == 1) & (v != v))
                        cur[i] = np.uint32(nodes[q + (u2 if ok else u3)])
                else:
                    for i in range(lanes):
                        n = cur[i]
                        q = u4 * n
                        f = nodes[q]
                        v = xf[lane_off[i] + np.uint32(f >> 1)]
                        th = thr[q + u1]
                        if same_mode == LT:
                            ok = v < th
                        else:
                            m = aux[n, 0]
                            if m == LEQ:
                                ok = v <= th
                            elif m == LT:
                                ok = v < th
                            elif m == GTE:
                                ok = v >= th
                            elif m == GT:
                                ok = v > th
                            elif m == EQ:
                                ok = v == th
                            elif m == NEQ:
                                ok = v != th
                            else:
                                if m == MEMBER_INT:
                                    v = math.trunc(v) if v == v else v
                                ok = False
                                for mi in range(aux[n, 1], aux[n, 2]):
                                    if v == members[mi]:
                                        ok = True
                        if missing and (f & 1) == 1 and v != v:
                            ok = True
                        cur[i] = np.uint32(nodes[q + (u2 if ok else u3)])
            # the leaves, lane by lane (in tree order for a single row, as onnxruntime sums); a leaf's row of lval
            # is in its record (the threshold's word), which the walk has just read
            if agg == MIN or agg == MAX:
                for i in range(lanes):
                    r = lane_row[i]
                    sl = np.uint32(nodes[u4 * cur[i] + u1])
                    for c in range(c_out):
                        if lhas[sl, c]:
                            w = lval[sl, c]
                            if not has[r, c] or (w < acc[r, c] if agg == MIN else w > acc[r, c]):
                                acc[r, c] = w
                            has[r, c] = True
            elif single:  # one row: each score summed in a register (through acc, each add waited on the last)
                for c in range(c_out):
                    v = acc[0, c]
                    h = has[0, c]
                    for i in range(lanes):
                        sl = np.uint32(nodes[u4 * cur[i] + u1])
                        v += lval[sl, c]  # 0 where the leaf has no weight for c
                        h |= lhas[sl, c]
                    acc[0, c] = v
                    has[0, c] = h
            elif c_out == 1:
                for i in range(lanes):
                    acc[lane_row[i], 0] += lval[np.uint32(nodes[u4 * cur[i] + u1]), 0]
            else:
                for i in range(lanes):
                    r = lane_row[i]
                    sl = np.uint32(nodes[u4 * cur[i] + u1])
                    for c in range(c_out):
                        acc[r, c] += lval[sl, c]  # 0 where the leaf has no weight for c
                    if track_has:
                        for c in range(c_out):
                            has[r, c] |= lhas[sl, c]
        _finalize(kind, agg, post, n_trees, acc, has, nb, base, binary_case, all_positive, labels, n_scores, z, b0,
                  label)
