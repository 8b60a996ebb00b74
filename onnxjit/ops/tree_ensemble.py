"""ai.onnx.ml tree ensembles on the CPU provider: TreeEnsembleClassifier and TreeEnsembleRegressor (1 and 3: the
`*_as_tensor` double attributes) and TreeEnsemble (5: integer modes, set membership, leaf weights as tensors).

At session creation the builder turns the node's attributes into flat node arrays (vectorized numpy: 0.2 s for
500 trees of 255 leaves) that one Numba kernel, onnxjit.kernels.tree_ensemble.predict, walks. The arrays are
runtime arguments, so that kernel compiles once per compare dtype (float32, float64) for every ensemble, and
Numba's on-disk cache keeps it: the builder runs it once on a zero row so that this happens at session creation.
Blocks of BLOCK rows go to onnxjit's threads (the step's CallSite) when the work is large enough; a few rows run
on the calling thread, and a single row walks 32 trees at once. With int64 labels the step says how it calls the
kernel (`run.native`), so a small model's plan runs it in a native segment (onnxjit.session.native_plan).

Designs measured (benchmarks/ml_trees.py --designs; Intel Xeon Sapphire Rapids VM, 2 cores, one thread, 10,000
rows x 20 features; batch 10,000 in ms / batch 1 in us, the kernel alone):
                                   GB 200 x 8 leaves  LightGBM 200 x 31  XGBoost 200 d6  RF clf 200 deep  RF reg d12
  (a) lockstep block walk (kept)      6.8 / 2.5-2.7     21.7 / 4.5        11.3 / 3.2      42.7 / 5.8      37.0 / 4.3
  (a') early exit, one row at a time 11.0 / 2.3         70.1 / 3.8        33.4 / 3.5     203.9 / 8.6     186.4 / 5.4
  (b) nested if/else source           5.8 / 0.7         (not compiled)
(b) (every tree as nested if/else, compiled by Numba as one function, as lleaves does with LLVM IR) took 156 s
to compile GB's 2,946 nodes: Numba's front end grows faster than linearly with a function's branches, so the
500-tree 255-leaf ensemble (255,000 nodes) could never be ready in 10 s, and (b) is not used at any size.
(a') loses to (a) at batch 10,000 by 1.6-5x (a branch miss per tree and row, and one chain of dependent loads);
at batch 1 (a) walks 32 trees at once, refilling a lane with the next tree when its tree reaches a leaf for
lopsided trees (REFILL_BELOW). QuickScorer was not tried: (a) walks GB's depth-3 trees in 3 branch-free steps.
Against onnxruntime 1.32 (benchmarks/ml_trees.py, 2 threads each, same machine, best of 3 blocks of runs, two
runs on a machine other sessions also used): batch 10,000 RF classifier 27.9-28.9 vs 71.7-72.6 ms (0.39-0.40x),
RF regressor 19.8-22.9 vs 89.6-93.5 ms (0.22-0.24x), GB 6.7-9.0 vs 15.7-18.6 ms (0.43-0.48x), LightGBM
14.8-15.9 vs 28.9-31.1 ms (0.51x), XGBoost 8.5 vs 27.6 ms (0.31x); geometric mean 0.37x. Batch 1: 12-21 us vs
7-11 us (1.5-1.9x), of which ~8 us is the session's own run() around any one-node model (a Neg: 7.8 us vs
onnxruntime's 4.3-8 us) and, for LightGBM, its exporter's trailing Mul (on the fallback provider then: the
classifier's outputs had no inferred type; builders declare them now). AMD Zen 3 VM, same benchmark: batch 10,000
0.43-0.71x, batch 1 1.55-2.68x (README). 500 trees x 255 leaves: session 5.2-5.4 s over empty caches (compiling
the float32 kernel), 1.9 s from the cache, of which 1.3 s is the optimizer walking the node's big list attributes
(ir/graph.py Node.subgraphs looks at every list element; 0.37-0.50 s when it checks the attribute type instead;
0.45 s with graph optimization off).

Semantics follow onnxruntime 1.32 (tree_ensemble_common.h / tree_ensemble_aggregator.h, and experiments where it
differs from its source), checked against it in tests/test_ops_tree_ensemble.py:
  - a tree is a run of nodes with the same tree id; its first node is the root; children are found by
    (tree id, node id); a node test is `x[feature] MODE threshold`, NaN fails every test but NEQ, and goes to
    the true child where nodes_missing_value_tracks_true says so;
  - thresholds compare in float32 for float and integer inputs (integers converted to float32, as C++ does)
    and in float64 for double input or double (`*_as_tensor`) attributes; scores accumulate in that dtype;
  - one target (regressor n_targets=1): each leaf adds its first weight (a leaf without one adds its
    nodes_values entry), base_values[0] when there is exactly one, and only PROBIT is applied;
  - several targets: every weight adds to its target; base_values when there is one per target; MIN/MAX take
    the extreme of the weights a row reached; a target no weight reached is written as 0 (before the post
    transform), whatever its base value;
  - classifiers: SUM of class weights; more than 2 classes: base values, label = the first highest scored class
    among those a weight reached; 2 classes: onnxruntime's binary rules (a single weighted class: probability
    above 0.5 with all weights positive, else the sign; the second score written as 1-p, -s or logistic(s));
    where onnxruntime leaves the second score unwritten (one score left under PROBIT, or one base value and
    both classes weighted) it is 0 here, as in onnxruntime's fresh output memory;
  - TreeEnsemble-5: set membership is X equal to one of the node's values; over a big set (31 values or more,
    or one outside [0, 30]) X and the values are truncated to integers first; post_transform 1 is LOGISTIC and
    2 SOFTMAX (onnxruntime's reading; the ONNX spec swaps them); Y has X's dtype;
  - PROBIT uses onnxruntime's erfinv approximation in float32, but onnxruntime's log rounds differently near
    1: scores near 0.5 come out up to ~1e-3 apart there (probit(0.5): 0 here, 0.00098 in onnxruntime).
Errors: malformed attributes raise onnxjit.Fail naming the node at session creation; an input of rank other
than 1 or 2, or with fewer columns than a feature id needs, raises at run time naming the node, the input and the
expected shape. Classifiers with a single class label are left to the next provider.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from onnxjit.kernels import tree_ensemble as k
from onnxjit.ops.ml_common import Attrs, declare_outputs
from onnxjit.ops.nn import ro
from onnxjit.ops.registry import input_tensor_types, register_op
from onnxjit.session.native_plan import NATIVE_GRAIN, In, NativeCall, Out
from onnxjit.worker_pool import PARALLEL_GRAIN, CallSite

DOMAIN = "ai.onnx.ml"
_INPUT_TYPES = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.INT64: np.int64, T.INT32: np.int32}
_MODES = {"BRANCH_LEQ": k.LEQ, "BRANCH_LT": k.LT, "BRANCH_GTE": k.GTE, "BRANCH_GT": k.GT, "BRANCH_EQ": k.EQ,
          "BRANCH_NEQ": k.NEQ, "LEAF": k.LEAF}
_POSTS = {"NONE": k.NONE, "SOFTMAX": k.SOFTMAX, "LOGISTIC": k.LOGISTIC, "SOFTMAX_ZERO": k.SOFTMAX_ZERO,
          "PROBIT": k.PROBIT}
# TreeEnsemble-5's post_transform as onnxruntime 1.32 reads it: through its own enum (NONE, LOGISTIC, SOFTMAX,
# SOFTMAX_ZERO, PROBIT), so 1 is LOGISTIC and 2 SOFTMAX where the ONNX spec says 1 SOFTMAX and 2 LOGISTIC
_V5_POSTS = {0: k.NONE, 1: k.LOGISTIC, 2: k.SOFTMAX, 3: k.SOFTMAX_ZERO, 4: k.PROBIT}
_AGGS = {"AVERAGE": k.AVERAGE, "SUM": k.SUM, "MIN": k.MIN, "MAX": k.MAX}
# a single row walks with lanes refilled tree by tree when the mean path to a leaf (each split halving the rows)
# is below this share of the mean tree depth; path/depth: LightGBM and RF 0.34 (one thread, batch 1: 5.3 -> 4.3 us
# and 6.5 -> 5.6 us), XGBoost depth 6 0.69, RF depth 12 0.87, GB 0.99 (refilled lanes: 1.2-1.4x slower there)
REFILL_BELOW = 0.5
BLOCK = 256  # rows a block walks each tree with (RF one thread: 64 rows 1.4x the time, 128 1.15x, 512 the same)


# --- attributes ------------------------------------------------------------------------------------------------
class _Form:
    """An ensemble in TreeEnsembleRegressor-3's shape: node lists, leaf weights (targets), settings."""
    treeids: np.ndarray
    nodeids: np.ndarray
    featureids: np.ndarray
    modes: np.ndarray  # int codes
    values: np.ndarray  # thresholds (float32 or float64)
    trueids: np.ndarray
    falseids: np.ndarray
    missing: np.ndarray  # 0/1 per node
    members: list | None = None  # per node: sorted membership values of MEMBER nodes (TreeEnsemble-5)
    t_tree: np.ndarray
    t_node: np.ndarray
    t_id: np.ndarray
    t_weight: np.ndarray
    n_targets: int
    base: np.ndarray
    agg: int
    post: int
    double: bool  # thresholds/weights given as double tensors


def _pick(a: Attrs, plain: str, tensor: str):
    """`plain` (float list) or `tensor` (double tensor) as (array, is_double); both set is an error."""
    p, t = a.get(plain), a.get(tensor)
    if p is not None and len(p) and t is not None and np.asarray(t).size:
        a.fail(f"{plain} and {tensor} cannot both be set")
    if t is not None and np.asarray(t).size:
        return np.asarray(t).reshape(-1).astype(np.float64), True
    return a.floats(plain), False


def _form_v3(a: Attrs, classifier: bool) -> _Form:
    f = _Form()
    f.treeids, f.nodeids = a.ints("nodes_treeids"), a.ints("nodes_nodeids")
    f.featureids, f.trueids, f.falseids = a.ints("nodes_featureids"), a.ints("nodes_truenodeids"), \
        a.ints("nodes_falsenodeids")
    n = f.treeids.size
    f.missing = a.ints("nodes_missing_value_tracks_true")
    if f.missing.size not in (0, n):
        a.fail(f"nodes_missing_value_tracks_true has {f.missing.size} entries for {n} nodes")
    f.missing = np.pad(f.missing, (0, n - f.missing.size)) != 0
    # mode names -> codes through the distinct names (a forest has hundreds of thousands of nodes)
    names, inverse = np.unique(np.asarray(a.get("nodes_modes", []), dtype=object).astype(bytes), return_inverse=True)
    codes = []
    for name in names:
        if name.decode() not in _MODES:
            a.fail(f"unknown node mode {name.decode()!r}")
        codes.append(_MODES[name.decode()])
    f.modes = np.asarray(codes, np.int64)[inverse.reshape(-1)] if names.size else np.zeros(0, np.int64)
    f.values, d1 = _pick(a, "nodes_values", "nodes_values_as_tensor")
    prefix = "class" if classifier else "target"
    f.t_tree, f.t_node, f.t_id = a.ints(f"{prefix}_treeids"), a.ints(f"{prefix}_nodeids"), a.ints(f"{prefix}_ids")
    f.t_weight, d2 = _pick(a, f"{prefix}_weights", f"{prefix}_weights_as_tensor")
    f.base, d3 = _pick(a, "base_values", "base_values_as_tensor")
    f.double = d1 or d2 or d3
    for name, arr in (("nodes_nodeids", f.nodeids), ("nodes_featureids", f.featureids),
                      ("nodes_modes", f.modes), ("nodes_values", f.values), ("nodes_truenodeids", f.trueids),
                      ("nodes_falsenodeids", f.falseids)):
        if arr.size != n:
            a.fail(f"{name} has {arr.size} entries, nodes_treeids {n}")
    for name, arr in ((f"{prefix}_nodeids", f.t_node), (f"{prefix}_ids", f.t_id),
                      (f"{prefix}_weights", f.t_weight)):
        if arr.size != f.t_tree.size:
            a.fail(f"{name} has {arr.size} entries, {prefix}_treeids {f.t_tree.size}")
    if classifier:
        f.agg = k.SUM
    else:
        name = a.get("aggregate_function", "SUM")
        if name not in _AGGS:
            a.fail(f"unknown aggregate_function {name!r}")
        f.agg = _AGGS[name]
        f.n_targets = int(a.get("n_targets", 0))
    post = a.get("post_transform", "NONE")
    if post not in _POSTS:
        a.fail(f"unknown post_transform {post!r}")
    f.post = _POSTS[post]
    return f


def _form_v5(a: Attrs) -> _Form:
    """TreeEnsemble-5 in the v3 shape: its leaves become LEAF nodes after the branch nodes (node ids: branch i is
    i, leaf j is n_branches + j, one tree id per tree root), a single-leaf tree's root index names its leaf."""
    f = _Form()
    feat, true_ids, false_ids = a.ints("nodes_featureids"), a.ints("nodes_truenodeids"), a.ints("nodes_falsenodeids")
    true_leaf, false_leaf = a.ints("nodes_trueleafs"), a.ints("nodes_falseleafs")
    modes = a.get("nodes_modes")
    modes = np.asarray(modes if modes is not None else [], np.int64).reshape(-1)
    splits = np.asarray(a.get("nodes_splits", []))
    leaf_t, leaf_w = a.ints("leaf_targetids"), np.asarray(a.get("leaf_weights", [])).reshape(-1)
    roots = a.ints("tree_roots")
    nb, nl = feat.size, leaf_t.size
    for name, arr in (("nodes_truenodeids", true_ids), ("nodes_falsenodeids", false_ids),
                      ("nodes_trueleafs", true_leaf), ("nodes_falseleafs", false_leaf), ("nodes_modes", modes),
                      ("nodes_splits", splits.reshape(-1))):
        if arr.size != nb:
            a.fail(f"{name} has {arr.size} entries, nodes_featureids {nb}")
    if leaf_w.size != nl:
        a.fail(f"leaf_weights has {leaf_w.size} entries, leaf_targetids {nl}")
    if np.any((modes < 0) | (modes > k.MEMBER)):
        a.fail(f"nodes_modes must be in [0, {k.MEMBER}], got {modes[(modes < 0) | (modes > k.MEMBER)][0]}")
    f.double = splits.dtype == np.float64 or leaf_w.dtype == np.float64
    dt = np.float64 if f.double else np.float32
    missing = a.ints("nodes_missing_value_tracks_true")
    if missing.size not in (0, nb):
        a.fail(f"nodes_missing_value_tracks_true has {missing.size} entries for {nb} nodes")
    missing = np.pad(missing, (0, nb - missing.size)) != 0
    for name, ids, leafs in (("nodes_truenodeids", true_ids, true_leaf), ("nodes_falsenodeids", false_ids,
                                                                          false_leaf)):
        bad = np.where(leafs != 0, (ids < 0) | (ids >= nl), (ids < 0) | (ids >= nb))
        if bad.any():
            a.fail(f"{name}[{int(np.argmax(bad))}] = {ids[bad][0]} names no {'leaf' if leafs[bad][0] else 'node'}")
    if np.any((roots < 0) | (roots >= max(nb, nl))):
        a.fail("tree_roots names a node that does not exist")
    # a root is a leaf when both its children are the same leaf (onnxruntime); it then names that leaf
    root_leaf = np.zeros(roots.size, bool)
    ok = roots < nb
    r = roots[ok]
    root_leaf[ok] = (true_ids[r] == false_ids[r]) & (true_leaf[r] != 0) & (false_leaf[r] != 0)
    if np.any(~ok & (roots >= nl)):
        a.fail("tree_roots names a node that does not exist")
    # assign every branch and leaf to its tree by walking from the roots (nodes may be shared or unordered)
    frontier = [(t, int(r), bool(root_leaf[t]) or int(r) >= nb) for t, r in enumerate(roots)]
    order_b, order_l = [], []
    seen_b, seen_l = {}, {}
    stack = frontier[::-1]
    while stack:
        t, i, is_leaf = stack.pop()
        if is_leaf:
            if (t, i) in seen_l:
                continue
            seen_l[(t, i)] = len(order_l)
            order_l.append((t, i))
            continue
        if (t, i) in seen_b:
            continue
        seen_b[(t, i)] = len(order_b)
        order_b.append((t, i))
        stack.append((t, int(false_ids[i]), bool(false_leaf[i])))
        stack.append((t, int(true_ids[i]), bool(true_leaf[i])))
    n_b = len(order_b)
    bt = np.array([t for t, _ in order_b], np.int64)
    bi = np.array([i for _, i in order_b], np.int64)
    lt = np.array([t for t, _ in order_l], np.int64)
    li = np.array([i for _, i in order_l], np.int64)

    def target_id(t, i, is_leaf):
        return n_b + seen_l[(t, i)] if is_leaf else seen_b[(t, i)]
    # nodes: branches first in walk order, then leaves; the first node of each tree must be its root
    tree_of = np.concatenate([bt, lt])
    local = np.arange(tree_of.size, dtype=np.int64)
    trueids = np.array([target_id(t, int(true_ids[i]), bool(true_leaf[i])) for t, i in order_b] + [0] * len(lt),
                       np.int64)
    falseids = np.array([target_id(t, int(false_ids[i]), bool(false_leaf[i])) for t, i in order_b] + [0] * len(lt),
                        np.int64)
    # put each tree's nodes together, root first (stable sort by tree keeps the walk order)
    rootpos = np.array([target_id(t, int(r), bool(root_leaf[t]) or int(r) >= nb) for t, r in enumerate(roots)],
                       np.int64)
    key = np.where(np.isin(local, rootpos), -1, local)
    order = np.lexsort((key, tree_of))
    f.treeids, f.nodeids = tree_of[order], local[order]
    f.trueids, f.falseids = trueids[order], falseids[order]
    is_branch = order < n_b
    src = np.where(is_branch, bi[np.minimum(order, n_b - 1)] if n_b else 0, 0)
    f.featureids = np.where(is_branch, feat[src] if nb else 0, 0)
    f.modes = np.where(is_branch, modes[src] if nb else 0, k.LEAF).astype(np.int64)
    f.values = np.where(is_branch, splits.reshape(-1).astype(dt)[src] if nb else 0, 0).astype(dt)
    f.missing = np.where(is_branch, missing[src] if nb else False, False)
    # set membership: values per MEMBER node, NaN-separated in order of the MEMBER nodes
    mv = np.asarray(a.get("membership_values", []), np.float64).reshape(-1)
    per_node, cur = [], []
    for v in mv:
        if math.isnan(v):
            per_node.append(cur)
            cur = []
        else:
            cur.append(v)
    if cur:
        per_node.append(cur)
    member_nodes = np.flatnonzero(modes == k.MEMBER)
    if len(per_node) < member_nodes.size:
        a.fail(f"membership_values hold {len(per_node)} sets for {member_nodes.size} BRANCH_MEMBER nodes")
    sets = {}
    for i, vals in zip(member_nodes, per_node):
        vals = np.asarray(vals, dt)
        if vals.size >= 31 or vals.size and (vals.min() < 0 or vals.max() > 30):
            # onnxruntime's "big set": integers, the value truncated before the lookup
            sets[int(i)] = (k.MEMBER_INT, np.unique(np.trunc(vals)))
        else:
            sets[int(i)] = (k.MEMBER, np.unique(vals))
    f.members = [sets.get(int(src[j])) if is_branch[j] and modes[src[j]] == k.MEMBER else None
                 for j in range(order.size)]
    for j, m in enumerate(f.members):
        if m is not None:
            f.modes[j] = m[0]
    leaf_pos = np.flatnonzero(~is_branch)
    leaf_src = li[order[leaf_pos] - n_b]
    f.t_tree, f.t_node = f.treeids[leaf_pos], f.nodeids[leaf_pos]
    f.t_id, f.t_weight = leaf_t[leaf_src], leaf_w[leaf_src].astype(dt)
    f.n_targets = int(a.get("n_targets", 0))
    f.base = np.zeros(0, dt)
    agg, post = int(a.get("aggregate_function", 1)), int(a.get("post_transform", 0))
    if agg not in (k.AVERAGE, k.SUM, k.MIN, k.MAX):
        a.fail(f"unknown aggregate_function {agg}")
    if post not in _V5_POSTS:
        a.fail(f"unknown post_transform {post}")
    f.agg, f.post = agg, _V5_POSTS[post]
    return f


# --- the flat arrays ---------------------------------------------------------------------------------------------
class Ensemble:
    """The kernel's arrays for one ensemble and compare dtype (see onnxjit.kernels.tree_ensemble)."""

    def __init__(self, a: Attrs, f: _Form, dtype, kind: int, labels: np.ndarray, one_output: bool):
        n = f.treeids.size
        if n == 0:
            a.fail("the ensemble has no nodes")
        self.dtype = dtype
        tid, nid = f.treeids, f.nodeids
        # (tree id, node id) -> position, through one sorted int64 key when the ids allow it
        tmin, nmin = int(tid.min()), int(nid.min())
        span = int(max(nid.max(), f.trueids.max(initial=0), f.falseids.max(initial=0))) - nmin + 1
        if (int(tid.max()) - tmin + 1) * span >= 1 << 62:
            a.fail("tree or node ids span too wide a range")

        def keys(t, i):
            return (t - tmin) * span + (i - nmin)
        node_key = keys(tid, nid)
        order = np.argsort(node_key, kind="stable")
        sorted_keys = node_key[order]
        dup = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        if dup.size:
            j = order[dup[0]]
            a.fail(f"node {nid[j]} of tree {tid[j]} is defined twice")

        def find(t, i, what):
            kk = keys(t, i)
            pos = np.searchsorted(sorted_keys, kk)
            pos = np.minimum(pos, n - 1)
            missing = (sorted_keys[pos] != kk) | (i < nmin)
            if missing.any():
                j = int(np.argmax(missing))
                a.fail(f"{what}: node {i[j]} of tree {t[j]} does not exist")
            return order[pos]
        leaf = f.modes == k.LEAF
        branch = np.flatnonzero(~leaf)
        child = np.empty((n, 2), np.int64)
        child[:, 0] = child[:, 1] = np.arange(n)
        if branch.size:
            child[branch, 0] = find(tid[branch], f.trueids[branch], "nodes_truenodeids")
            child[branch, 1] = find(tid[branch], f.falseids[branch], "nodes_falsenodeids")
            selfish = (child[branch, 0] == branch) | (child[branch, 1] == branch)
            if selfish.any():
                j = branch[int(np.argmax(selfish))]
                a.fail(f"node {nid[j]} of tree {tid[j]} names itself as a child")
        feats = np.where(leaf, 0, f.featureids)
        if np.any(feats < 0):
            a.fail("nodes_featureids has a negative feature id")
        # onnxruntime checks the input against every node's feature id, leaves' included
        self.max_feature = int(f.featureids.max())
        self.n_features = max(self.max_feature, 0) + 1
        # trees: runs of one tree id in node order, rooted at their first node (as onnxruntime)
        starts = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1]])
        depth, mean_path = self._depths(a, child, leaf, starts)
        # a single row refills the lanes of its lockstep walk tree by tree when its path to a leaf is much shorter
        # than the trees' depth (random forests, LightGBM's leaf-wise trees); balanced trees walk in fixed groups
        self.refill = mean_path < REFILL_BELOW * max(float(depth.mean()), 1.0)
        # leaf weights: onnxruntime keeps those of leaves, in (tree, node, position) order
        nt = f.n_targets
        if f.t_id.size and (f.t_id.min() < 0 or f.t_id.max() >= nt):
            a.fail(f"target/class ids must be in [0, {nt}), got {int(f.t_id.min())}..{int(f.t_id.max())}")
        wpos = find(f.t_tree, f.t_node, "leaf weights") if f.t_tree.size else np.zeros(0, np.int64)
        on_leaf = leaf[wpos]
        wpos, wid, ww = wpos[on_leaf], f.t_id[on_leaf], f.t_weight[on_leaf].astype(dtype)
        slot = np.full(n, 0, np.int64)
        leaves = np.flatnonzero(leaf)
        slot[leaves] = np.arange(leaves.size)
        c = 1 if one_output else nt
        lval = np.zeros((max(leaves.size, 1), c), dtype)
        lhas = np.zeros((max(leaves.size, 1), c), np.bool_)
        if one_output:
            # the first weight of each leaf in (tree id, node id, position) order; else its nodes_values entry
            lval[slot[leaves], 0] = f.values[leaves].astype(dtype)
            worder = np.lexsort((np.arange(wpos.size), node_key[wpos]))
            first = np.r_[True, wpos[worder][1:] != wpos[worder][:-1]] if wpos.size else np.zeros(0, bool)
            lval[slot[wpos[worder][first]], 0] = ww[worder][first]
            lhas[:] = True
        elif f.agg == k.MIN or f.agg == k.MAX:
            extreme = np.minimum if f.agg == k.MIN else np.maximum
            lval[:] = np.inf if f.agg == k.MIN else -np.inf
            extreme.at(lval, (slot[wpos], wid), ww)
            lhas[slot[wpos], wid] = True
            lval[~lhas] = 0
        else:
            np.add.at(lval, (slot[wpos], wid), ww)
            lhas[slot[wpos], wid] = True
        self.weights_positive = bool(np.all(f.t_weight >= 0))
        self.weight_classes = np.unique(f.t_id).size
        modes, thr, missing = _as_leq(f.modes, np.where(leaf, 0, f.values).astype(dtype), f.missing & ~leaf, child)
        self.nodes = np.zeros((n, 4), np.int32 if dtype == np.float32 else np.int64)
        self.nodes[:, 0] = (feats << 1) | missing
        self.nodes[:, 2:4] = child
        self.nodes.view(dtype)[:, 1] = thr
        self.nodes[leaves, 1] = slot[leaves]  # a leaf's threshold word: its row of lval (the kernel's docstring)
        self.has_missing = bool(np.any(missing))
        branch_modes = np.unique(modes[~leaf])
        self.same_mode = int(branch_modes[0]) if branch_modes.size == 1 and branch_modes[0] < k.MEMBER else \
            (k.LEQ if branch_modes.size == 0 else k.LEQ_EQ if set(branch_modes.tolist()) == {k.LEQ, k.EQ} else
             k.MIXED)
        self.aux = np.zeros((n, 3), np.int32)
        self.aux[:, 0] = modes
        members = [np.zeros(0, dtype)]
        if f.members is not None:
            total = 0
            for j, m in enumerate(f.members):
                if m is not None:
                    values = m[1]
                    self.aux[j, 1], self.aux[j, 2] = total, total + values.size
                    total += values.size
                    members.append(values.astype(dtype))
        self.members = np.concatenate(members)
        self.trees = np.stack([starts, depth], axis=1).astype(np.int32)
        self.lval, self.lhas = lval, lhas
        self.labels = labels
        self.kind = kind
        self.n_nodes_walked = max(1, int(self.trees[:, 1].sum()))

    @staticmethod
    def _depths(a, child, leaf, starts):
        """The longest root-to-leaf path of each tree (in tests), level by level from the roots; a cycle fails.
        Every node is reached from the roots of its own run of nodes (children are looked up in the parent's
        tree), so each level's nodes are a set: marking them dedupes shared subtrees."""
        n = child.shape[0]
        run_of = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))
        inner = np.flatnonzero(~leaf)
        if np.any(run_of[child[inner]] != run_of[inner, None]):
            a.fail("a node's child lies in another run of the same tree id (tree nodes must be contiguous)")
        depth = np.zeros(starts.size, np.int64)
        frontier = starts
        mark = np.zeros(n, bool)
        level, path = 0, 0.0  # path: the sum of the trees' mean root-to-leaf paths, each split halving the rows
        while True:
            at_leaf = leaf[frontier]
            path += level * int(at_leaf.sum()) * 0.5 ** level
            frontier = frontier[~at_leaf]
            if not frontier.size:
                return depth, path / starts.size
            level += 1
            if level > n:
                a.fail("a tree has a cycle")
            depth[run_of[frontier]] = level
            mark[child[frontier].reshape(-1)] = True
            frontier = np.flatnonzero(mark)
            mark[frontier] = False


def _as_leq(modes, thr, missing, child):
    """LT, GT and GTE nodes rewritten as LEQ ones (in place on `child`), so that forests of any one of these modes
    take the kernel's LEQ loops: over the floats of the compare dtype, x < t is x <= t' for t' the float below t;
    x > t is "not x <= t" but for NaN, so GT becomes LEQ with its children swapped and NaN's way flipped
    (missing_tracks_true negated); GTE is GT of t'. Kept as they are when a threshold is -inf (no float below)."""
    lt, gt, gte = modes == k.LT, modes == k.GT, modes == k.GTE
    below = lt | gte
    if not (lt | gt | gte).any() or np.any(thr[below] == -np.inf):
        return modes, thr, missing
    thr, missing, modes = thr.copy(), missing.copy(), modes.copy()
    thr[below] = np.nextafter(thr[below], thr.dtype.type(-np.inf))
    flip = gt | gte
    child[flip] = child[flip][:, ::-1]
    missing[flip] = ~missing[flip]
    modes[lt | flip] = k.LEQ
    return modes, thr, missing


# --- running -----------------------------------------------------------------------------------------------------
def _runner(node, ens: Ensemble, post, agg, base, binary_case, string_labels, out_dtype=np.float32):
    kind, dtype = ens.kind, ens.dtype
    params = np.zeros(k.N_PARAMS, np.int64)
    params[k.P_SAME_MODE] = ens.same_mode
    params[k.P_MISSING] = ens.has_missing
    params[k.P_AGG] = agg
    params[k.P_TRACK_HAS] = kind != k.REGRESSOR_1
    params[k.P_BLOCK] = BLOCK
    params[k.P_KIND] = kind
    params[k.P_POST] = post
    params[k.P_BINARY] = binary_case
    params[k.P_POSITIVE] = ens.weights_positive
    params[k.P_REFILL] = ens.refill
    base = np.ascontiguousarray(base, dtype)
    args = (ens.nodes.reshape(-1), ens.nodes.view(dtype).reshape(-1), ens.aux, ens.members, ens.trees, ens.lval,
            ens.lhas, base, ens.labels, params)
    c_out = ens.lval.shape[1]
    work_per_row = ens.n_nodes_walked * 4 + c_out
    need = ens.n_features
    label_of = node.label
    # X always read-only and C-contiguous in the compare dtype: one argument type for the call site (no type
    # dispatch of thirteen arguments, ~1.5 us a batch-1 run) and for a native segment's call (`native`)
    site = CallSite(k.predict)

    def run(x):
        x = np.asarray(x)
        if x.ndim == 2:
            rows, cols = x.shape
            seen = cols
        elif x.ndim == 1:
            # one row; onnxruntime counts a 1-D X as one feature wide when it checks the feature ids
            rows, cols, seen = 1, x.shape[0], 1
        else:
            raise ValueError(f"{label_of}: input X must be [N, F] with F >= {need} (or [F] with F >= 1 when "
                             f"every feature id is 0), got shape {x.shape}")
        if seen < need:
            raise ValueError(f"{label_of}: a node tests feature {ens.max_feature}, input X must be [N, F] with "
                             f"F >= {need}, got shape {x.shape}")
        if x.dtype != dtype or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype)
        x = ro(x.reshape(rows, cols))
        z = np.empty((rows, c_out), dtype)  # the compare dtype: one compiled kernel per dtype serves all ops
        label = np.empty(rows, np.int64)
        # the kernel's offsets into X are uint32: a bigger X goes in slices of rows
        span = max(rows, 1) if x.size < 1 << 32 else max(1, ((1 << 32) - 1) // max(cols, 1))
        for r0 in range(0, rows, span):
            r1 = min(rows, r0 + span)
            xs, zs, ls = (x, z, label) if r1 - r0 == rows else (x[r0:r1], z[r0:r1], label[r0:r1])
            n = r1 - r0
            work = n * work_per_row
            site.run((xs, *args, zs, ls), (n + BLOCK - 1) // BLOCK, work)
        if z.dtype != out_dtype:
            z = z.astype(out_dtype)
        if kind != k.CLASSIFIER_N:
            return (z,)
        return (string_labels[label] if string_labels is not None else label, z)

    def native(x):
        """The kernel's call as a native_plan.NativeCall, for X of rank 2 in the compare dtype, C-contiguous, in
        one slice, with outputs as the kernel writes them (int64 labels, scores in the output dtype)."""
        if type(x) is not np.ndarray or x.dtype != dtype or x.ndim != 2 or not x.flags.c_contiguous \
                or x.shape[1] < need or out_dtype != dtype or (kind == k.CLASSIFIER_N and string_labels is not None):
            return None
        rows, work = x.shape[0], x.shape[0] * work_per_row
        if not rows or x.size >= 1 << 32 or work >= NATIVE_GRAIN:
            return None
        units = (rows + BLOCK - 1) // BLOCK
        outputs = [(1, (rows,)), (0, (rows, c_out))] if kind == k.CLASSIFIER_N else [(0, (rows, c_out))]
        return NativeCall(k.predict, [In(0, x.shape), *args, Out(0), Out(1)], units,
                          [((rows, c_out), np.dtype(dtype)), ((rows,), np.dtype(np.int64))], outputs,
                          parallel=units > 1 and work >= PARALLEL_GRAIN)
    run.native = native
    return run


def _input_dtype(node):
    types = input_tensor_types(node)
    if not types or types[0] is None or types[0].elem_type not in _INPUT_TYPES:
        return None
    return _INPUT_TYPES[types[0].elem_type]


def _compare_dtype(in_dtype, double_attrs):
    return np.float64 if in_dtype == np.float64 or double_attrs else np.float32


def _warm(run, n_features, in_dtype):
    """Compile (or load from Numba's cache) the kernel for this dtype now, at session creation."""
    run(np.zeros((1, n_features), in_dtype))


def build_classifier(node):
    in_dtype = _input_dtype(node)
    if in_dtype is None or len(node.inputs) != 1:
        return None
    a = Attrs(node)
    f = _form_v3(a, classifier=True)
    ints, strings = a.get("classlabels_int64s"), a.get("classlabels_strings")
    if ints is not None and len(ints) and strings is not None and len(strings):
        a.fail("classlabels_int64s and classlabels_strings cannot both be set")
    if strings is not None and len(strings):
        string_labels = np.empty(len(strings), dtype=object)
        string_labels[:] = [v.decode() if isinstance(v, bytes) else v for v in strings]
        labels = np.arange(len(strings), dtype=np.int64)
    else:
        string_labels = None
        labels = np.asarray(ints if ints is not None else [], np.int64)
    f.n_targets = labels.size
    if f.n_targets < 2:
        return None  # a single class: onnxruntime's own rules index past its labels; the next provider runs it
    if f.n_targets <= 2 and f.base.size > 2 or f.n_targets > 2 and f.base.size not in (0, f.n_targets):
        a.fail(f"base_values has {f.base.size} values for {f.n_targets} classes")
    dtype = _compare_dtype(in_dtype, f.double)
    ens = Ensemble(a, f, dtype, k.CLASSIFIER_N, labels, one_output=False)
    binary_case = f.n_targets == 2 and ens.weight_classes == 1
    run = _runner(node, ens, f.post, k.SUM, f.base, binary_case, string_labels)
    _warm(run, ens.n_features, in_dtype)
    # the exporters' outputs can come without types (onnxmltools' LightGBM probabilities), and an untyped value
    # would send its consumers (LightGBM's trailing Mul) to the fallback provider
    declare_outputs(node, T.STRING if string_labels is not None else T.INT64, T.FLOAT)
    return run


def build_regressor(node, form=None, out_input_dtype=False):
    in_dtype = _input_dtype(node)
    if in_dtype is None or len(node.inputs) != 1:
        return None
    a = Attrs(node)
    f = form(a) if form is not None else _form_v3(a, classifier=False)
    if f.n_targets <= 0:
        a.fail(f"n_targets must be positive, got {f.n_targets}")
    if f.base.size not in (0, f.n_targets):
        a.fail(f"base_values has {f.base.size} values for {f.n_targets} targets")
    dtype = _compare_dtype(in_dtype, f.double)
    one = f.n_targets == 1
    ens = Ensemble(a, f, dtype, k.REGRESSOR_1 if one else k.REGRESSOR_N, np.zeros(1, np.int64), one_output=one)
    out_dtype = in_dtype if out_input_dtype else np.float32  # TreeEnsemble-5's Y has X's dtype
    run = _runner(node, ens, f.post, f.agg, f.base, False, None, out_dtype)
    _warm(run, ens.n_features, in_dtype)
    declare_outputs(node, T.DOUBLE if out_dtype == np.float64 else T.FLOAT)
    return run


def build_tree_ensemble(node):
    if _input_dtype(node) not in (np.float32, np.float64):
        return None  # X is float or double
    return build_regressor(node, _form_v5, out_input_dtype=True)


for _v in (1, 3):
    register_op("TreeEnsembleClassifier", since=_v, domain=DOMAIN)(build_classifier)
    register_op("TreeEnsembleRegressor", since=_v, domain=DOMAIN)(build_regressor)
register_op("TreeEnsemble", since=5, domain=DOMAIN)(build_tree_ensemble)
