"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier/Regressor 1 and 3, TreeEnsemble 5) on the CPU provider against
onnxruntime: hand-built trees over every node mode, missing-value tracking, aggregate function, post transform,
base values, the binary-classifier rules, label types, input dtypes and ranks, the double (`*_as_tensor`)
attributes, set membership; a few real skl2onnx and onnxmltools (LightGBM) exports; the errors. Sessions run
with the fallback provider disabled (`native_session` asserts every step ran on the CPU provider).

Two places where onnxruntime leaves memory unwritten are not compared: the second probability of a two-class
classifier whose row ends with one score under PROBIT, or with one base value and weights for both classes.
PROBIT is compared to 3e-5: onnxruntime's erfinv approximation loses digits near 0.5 in its own way."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit

from conftest import assert_all_same, native_session, ort_run

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
_ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int64): T.INT64,
         np.dtype(np.int32): T.INT32}


def ml_model(op, attrs, x_elem, out_elems, ml_opset=3, x_shape=None):
    outs = ["label", "Y"] if len(out_elems) == 2 else ["Y"]
    node = helper.make_node(op, ["X"], outs, domain="ai.onnx.ml", name="trees", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", x_elem, x_shape)],
                              [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, out_elems)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17 if ml_opset < 5 else 21),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8 if ml_opset < 5 else 10
    return model


def random_trees(rng, n_trees, n_features, modes, depth=3, values=None, stop=0.3):
    """Nodes [tree, id, feature, mode, threshold, true id, false id, missing tracks true] and the leaves."""
    nodes, leaves = [], []
    for t in range(n_trees):
        count = [0]

        def grow(d):
            me = count[0]
            count[0] += 1
            if d == depth or (d and rng.random() < stop):
                nodes.append([t, me, 0, "LEAF", 0.0, 0, 0, 0])
                leaves.append((t, me))
                return me
            threshold = float(rng.choice(values)) if values is not None else float(np.float32(rng.normal()))
            rec = [t, me, int(rng.integers(n_features)), str(rng.choice(modes)), threshold, 0, 0,
                   int(rng.random() < 0.5)]
            nodes.append(rec)
            rec[5] = grow(d + 1)
            rec[6] = grow(d + 1)
            return me
        grow(0)
    return nodes, leaves


def tree_attrs(nodes, missing=True):
    a = dict(nodes_treeids=[n[0] for n in nodes], nodes_nodeids=[n[1] for n in nodes],
             nodes_featureids=[n[2] for n in nodes], nodes_modes=[n[3] for n in nodes],
             nodes_values=[n[4] for n in nodes], nodes_truenodeids=[n[5] for n in nodes],
             nodes_falsenodeids=[n[6] for n in nodes])
    if missing:
        a["nodes_missing_value_tracks_true"] = [n[7] for n in nodes]
    return a


def leaf_weights(rng, leaves, prefix, n_targets, per_leaf, classes=None, positive=False):
    """Weights of the leaves: every target (per_leaf='all'), one or two random ones ('some'), or `classes`."""
    tt, tn, ti, tw = [], [], [], []
    for t, n in leaves:
        if classes is not None:
            ids = classes
        elif per_leaf == "all":
            ids = range(n_targets)
        else:
            ids = sorted(set(rng.integers(n_targets, size=int(rng.integers(1, 3))).tolist()))
        for c in ids:
            w = float(np.float32(rng.normal()))
            tt.append(t)
            tn.append(n)
            ti.append(int(c))
            tw.append(abs(w) if positive else w)
    return {f"{prefix}_treeids": tt, f"{prefix}_nodeids": tn, f"{prefix}_ids": ti, f"{prefix}_weights": tw}


def features(rng, n, dtype, values=None, n_features=3):
    x = rng.normal(size=(n, n_features)) if values is None else rng.choice(values, size=(n, n_features))
    x[rng.random(x.shape) < 0.15] = np.nan
    if np.dtype(dtype).kind == "i":
        x = np.nan_to_num(np.round(x * 2))
    return x.astype(dtype)


def check(model, x, atol=None):
    feeds = {"X": x}
    got, want = native_session(model).run(None, feeds), ort_run(model, feeds)
    if atol is None:
        assert_all_same(got, want)
    else:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


# --- regressors ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES + ["mixed"])
@pytest.mark.parametrize("missing", [False, True])
def test_node_modes_and_missing_values(mode, missing):
    rng = np.random.default_rng(MODES.index(mode) if mode in MODES else 9)
    integral = mode in ("BRANCH_EQ", "BRANCH_NEQ", "mixed")  # equality needs values that occur in X
    values = [-1.0, 0.0, 1.0, 2.0] if integral else None
    nodes, leaves = random_trees(rng, 4, 3, MODES if mode == "mixed" else [mode], values=values)
    attrs = dict(tree_attrs(nodes, missing), n_targets=1, **leaf_weights(rng, leaves, "target", 1, "all"))
    check(ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT]), features(rng, 50, np.float32, values))


@pytest.mark.parametrize("rows", [1, 50])
@pytest.mark.parametrize("missing", [False, True])
def test_leq_and_eq_nodes_alone_take_a_loop_of_their_own(rows, missing):
    """An ensemble of LEQ and EQ nodes alone (LightGBM's categorical splits as onnxmltools writes them) walks
    through its own loop (same_mode LEQ_EQ) over a block of rows, and a single row's lopsided trees refill their
    lanes tree by tree: outputs as onnxruntime's, NaN included."""
    from onnxjit.ir.serde import from_onnx
    from onnxjit.kernels import tree_ensemble as k
    from onnxjit.ops import tree_ensemble as te
    from onnxjit.ops.ml_common import Attrs
    rng = np.random.default_rng(21)
    values = [-1.0, 0.0, 1.0, 2.0]
    nodes, leaves = random_trees(rng, 40, 3, ["BRANCH_LEQ", "BRANCH_EQ"], depth=8, values=values, stop=0.45)
    attrs = dict(tree_attrs(nodes, missing), n_targets=1, **leaf_weights(rng, leaves, "target", 1, "all"))
    model = ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT])
    node = next(n for n in from_onnx(model, None).graph.nodes if n.domain == "ai.onnx.ml")
    a = Attrs(node)
    ens = te.Ensemble(a, te._form_v3(a, False), np.float32, k.REGRESSOR_1, np.zeros(1, np.int64), one_output=True)
    assert ens.same_mode == k.LEQ_EQ and ens.refill
    check(model, features(rng, rows, np.float32, values))


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets,per_leaf", [(1, "all"), (3, "all"), (3, "some")])
@pytest.mark.parametrize("base", [False, True])
def test_aggregates_targets_and_base_values(aggregate, n_targets, per_leaf, base):
    rng = np.random.default_rng(n_targets)
    nodes, leaves = random_trees(rng, 5, 3, ["BRANCH_LEQ"])
    attrs = dict(tree_attrs(nodes), n_targets=n_targets, aggregate_function=aggregate,
                 **leaf_weights(rng, leaves, "target", n_targets, per_leaf))
    if base:
        attrs["base_values"] = rng.normal(size=n_targets).astype(np.float32).tolist()
    check(ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT]), features(rng, 40, np.float32))


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("n_targets", [1, 3])
def test_post_transforms(post, n_targets):
    rng = np.random.default_rng(3)
    nodes, leaves = random_trees(rng, 3, 3, ["BRANCH_LT"])
    weights = leaf_weights(rng, leaves, "target", n_targets, "some")
    weights["target_weights"] = [w * 0.2 for w in weights["target_weights"]]  # PROBIT needs scores in (0, 1)
    attrs = dict(tree_attrs(nodes), n_targets=n_targets, post_transform=post, **weights)
    model = ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT])
    check(model, features(rng, 40, np.float32), atol=3e-5 if post == "PROBIT" else None)


def test_leaf_without_weight_and_first_weight_of_a_leaf():
    """One target: a leaf adds its first weight only, and a leaf with none adds its nodes_values entry."""
    attrs = dict(n_targets=1, nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
                 nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 5.0, 7.0],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
                 target_nodeids=[1, 1], target_ids=[0, 0], target_weights=[1.5, 10.0])
    x = np.array([[0.0, -1.0], [0.0, 1.0], [0.0, np.nan]], np.float32)
    check(ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT]), x)


def test_double_input_and_as_tensor_attributes():
    """Double X compares in float64; the *_as_tensor attributes give double thresholds, weights, base values."""
    rng = np.random.default_rng(5)
    nodes, leaves = random_trees(rng, 4, 3, ["BRANCH_LEQ", "BRANCH_GT"])
    attrs = dict(tree_attrs(nodes), n_targets=2, **leaf_weights(rng, leaves, "target", 2, "all"))
    x = features(rng, 40, np.float64)
    x[:4, :] = np.float64(np.float32(attrs["nodes_values"][0])) + 1e-9  # between the float32 threshold and above
    check(ml_model("TreeEnsembleRegressor", attrs, T.DOUBLE, [T.FLOAT]), x)
    as_tensor = dict(attrs)
    as_tensor["nodes_values_as_tensor"] = numpy_helper.from_array(
        np.array(as_tensor.pop("nodes_values"), np.float64) + 1e-10, "v")
    as_tensor["target_weights_as_tensor"] = numpy_helper.from_array(
        np.array(as_tensor.pop("target_weights"), np.float64) / 3, "w")
    as_tensor["base_values_as_tensor"] = numpy_helper.from_array(np.array([0.1, -0.2], np.float64), "b")
    check(ml_model("TreeEnsembleRegressor", as_tensor, T.DOUBLE, [T.FLOAT]), x)


def test_one_dimensional_input_is_one_row():
    """A 1-D X is one row; onnxruntime then accepts feature id 0 only (it counts the row as one feature)."""
    rng = np.random.default_rng(6)
    nodes, leaves = random_trees(rng, 3, 1, ["BRANCH_LEQ"])
    attrs = dict(tree_attrs(nodes), n_targets=2, **leaf_weights(rng, leaves, "target", 2, "all"))
    model = ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT])
    for x in (np.array([0.3, 9.0, 9.0], np.float32), np.array([-0.7], np.float32)):
        check(model, x)
    nodes[0][2] = 1
    with pytest.raises(onnxjit.RuntimeException, match="feature 1"):
        native_session(ml_model("TreeEnsembleRegressor", dict(attrs, nodes_featureids=[n[2] for n in nodes]),
                                T.FLOAT, [T.FLOAT])).run(None, {"X": np.zeros(3, np.float32)})


@pytest.mark.parametrize("shape", ["lopsided", "balanced", "mixed_modes"])
def test_single_rows(shape):
    """A single row walks several trees at once (lanes refilled tree by tree for lopsided trees, fixed groups for
    balanced ones or mixed modes); 70 trees span more than one group of lanes."""
    rng = np.random.default_rng(13)
    modes = MODES if shape == "mixed_modes" else ["BRANCH_LEQ", "BRANCH_GT"]
    values = [-1.0, 0.0, 1.0, 2.0] if shape == "mixed_modes" else None
    nodes, leaves = random_trees(rng, 70, 3, modes, depth=8, values=values, stop=0.4)
    if shape == "balanced":
        nodes, leaves = [], []
        for t in range(70):  # complete trees of depth 4
            for i in range(31):
                leaf = i >= 15
                nodes.append([t, i, int(rng.integers(3)), "LEAF" if leaf else "BRANCH_LEQ",
                              float(np.float32(rng.normal())), 0 if leaf else 2 * i + 1, 0 if leaf else 2 * i + 2,
                              int(rng.random() < 0.5)])
                if leaf:
                    leaves.append((t, i))
    attrs = dict(tree_attrs(nodes), n_targets=2, **leaf_weights(rng, leaves, "target", 2, "some"))
    model = ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT])
    x = features(rng, 6, np.float32, values)
    sess = native_session(model)
    for row in x:
        assert_all_same(sess.run(None, {"X": row[None]}), ort_run(model, {"X": row[None]}))


@pytest.mark.parametrize("op", ["TreeEnsembleRegressor", "TreeEnsembleClassifier"])
def test_no_rows(op):
    rng = np.random.default_rng(8)
    nodes, leaves = random_trees(rng, 2, 3, ["BRANCH_LEQ"])
    if op == "TreeEnsembleRegressor":
        attrs = dict(tree_attrs(nodes), n_targets=2, **leaf_weights(rng, leaves, "target", 2, "all"))
        outs = [T.FLOAT]
    else:
        attrs = dict(tree_attrs(nodes), classlabels_strings=["a", "b", "c"],
                     **leaf_weights(rng, leaves, "class", 3, "all"))
        outs = [T.STRING, T.FLOAT]
    check(ml_model(op, attrs, T.FLOAT, outs), np.zeros((0, 3), np.float32))


def test_many_rows_run_on_threads():
    """Enough rows and trees that the blocks go to onnxjit's threads; results equal a single-threaded run."""
    rng = np.random.default_rng(7)
    nodes, leaves = random_trees(rng, 60, 8, ["BRANCH_LEQ"], depth=6)
    attrs = dict(tree_attrs(nodes, missing=False), n_targets=1, aggregate_function="AVERAGE",
                 **leaf_weights(rng, leaves, "target", 1, "all"))
    model = ml_model("TreeEnsembleRegressor", attrs, T.FLOAT, [T.FLOAT])
    x = features(rng, 3000, np.float32, n_features=8)
    check(model, x)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 1
    one = onnxjit.InferenceSession(model.SerializeToString(), so).run(None, {"X": x})[0]
    np.testing.assert_array_equal(native_session(model).run(None, {"X": x})[0], one)


# --- classifiers -----------------------------------------------------------------------------------------------
BINARY = [  # (weighted classes, all weights positive, base values)
    ([0], True, []), ([0], False, []), ([1], True, []), ([1], False, []), ([0], True, [0.25, 0.5]),
    ([1], False, [0.25, 0.5]), ([0, 1], False, []), ([0, 1], True, [0.25, 0.5]), ([0], True, [0.3])]


@pytest.mark.parametrize("classes,positive,base", BINARY)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_binary_classifier_rules(classes, positive, base, post):
    rng = np.random.default_rng(len(classes) * 10 + len(base))
    nodes, leaves = random_trees(rng, 3, 3, ["BRANCH_LEQ"])
    attrs = dict(tree_attrs(nodes), classlabels_int64s=[3, 8], post_transform=post,
                 **leaf_weights(rng, leaves, "class", 2, "some", classes=classes, positive=positive))
    if base:
        attrs["base_values"] = base
    check(ml_model("TreeEnsembleClassifier", attrs, T.FLOAT, [T.INT64, T.FLOAT]), features(rng, 40, np.float32))


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("per_leaf,base", [("all", False), ("some", False), ("some", True)])
def test_multiclass_classifier(post, per_leaf, base):
    rng = np.random.default_rng(11)
    nodes, leaves = random_trees(rng, 4, 3, ["BRANCH_LEQ", "BRANCH_LT"])
    attrs = dict(tree_attrs(nodes), classlabels_int64s=[5, 1, 7, 2], post_transform=post,
                 **leaf_weights(rng, leaves, "class", 4, per_leaf))
    if base:
        attrs["base_values"] = rng.normal(size=4).astype(np.float32).tolist()
    check(ml_model("TreeEnsembleClassifier", attrs, T.FLOAT, [T.INT64, T.FLOAT]), features(rng, 40, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("strings", [False, True])
def test_classifier_labels_and_input_dtypes(dtype, strings):
    rng = np.random.default_rng(12)
    nodes, leaves = random_trees(rng, 4, 3, ["BRANCH_LEQ", "BRANCH_GTE"], values=[-1.5, 0.0, 0.5, 2.0])
    attrs = dict(tree_attrs(nodes), **leaf_weights(rng, leaves, "class", 3, "all"))
    if strings:
        attrs["classlabels_strings"] = ["cat", "dog", "eel"]
    else:
        attrs["classlabels_int64s"] = [0, 1, 2]
    model = ml_model("TreeEnsembleClassifier", attrs, _ELEM[np.dtype(dtype)], [T.STRING if strings else T.INT64,
                                                                               T.FLOAT])
    x = features(rng, 30, dtype, values=[-2.0, -1.5, 0.0, 0.5, 1.0, 2.0, 3.0])
    check(model, x)
    if strings:
        labels = native_session(model).run(None, {"X": x})[0]
        assert labels.dtype == object and isinstance(labels[0], str)


def test_integer_thresholds_round_as_float32():
    """An int64 feature compares as float32 (as C++ converts it): 16777217 rounds to 16777216."""
    attrs = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                 nodes_modes=["BRANCH_LT", "LEAF", "LEAF"], nodes_values=[16777217.0, 0, 0],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0],
                 class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0], classlabels_int64s=[0, 1])
    x = np.array([[16777216], [16777217], [16777218]], np.int64)
    check(ml_model("TreeEnsembleClassifier", attrs, T.INT64, [T.INT64, T.FLOAT]), x)


# --- TreeEnsemble-5 ----------------------------------------------------------------------------------------------
def v5_attrs(rng, n_targets, dtype, members):
    """Two trees over 3 features with every mode, MEMBER nodes over `members`, leaves as tensors."""
    feats, modes, splits, true_ids, false_ids, true_leaf, false_leaf, missing = ([] for _ in range(8))
    leaf_targets, leaf_w, roots, membership = [], [], [], []

    def leaf():
        leaf_targets.append(int(rng.integers(n_targets)))
        leaf_w.append(float(rng.normal()))
        return len(leaf_w) - 1

    def grow(d):
        i = len(feats)
        mode = int(rng.integers(0, 7))
        feats.append(int(rng.integers(3)))
        modes.append(mode)
        splits.append(float(rng.choice([-1.0, 0.0, 1.0, 0.5])))
        missing.append(int(rng.random() < 0.5))
        if mode == 6:
            membership.extend(members[len(membership) % len(members)] + [np.nan])
        for ids, leafs in ((true_ids, true_leaf), (false_ids, false_leaf)):
            ids.append(0)
            leafs.append(0)
        for ids, leafs in ((true_ids, true_leaf), (false_ids, false_leaf)):
            if d == 3 or rng.random() < 0.25:
                ids[i], leafs[i] = leaf(), 1
            else:
                ids[i], leafs[i] = grow(d + 1), 0
        return i
    for _ in range(2):
        roots.append(grow(0))
    attrs = dict(n_targets=n_targets, tree_roots=roots, nodes_featureids=feats,
                 nodes_modes=numpy_helper.from_array(np.array(modes, np.uint8), "m"),
                 nodes_splits=numpy_helper.from_array(np.array(splits, dtype), "s"), nodes_truenodeids=true_ids,
                 nodes_falsenodeids=false_ids, nodes_trueleafs=true_leaf, nodes_falseleafs=false_leaf,
                 nodes_missing_value_tracks_true=missing, leaf_targetids=leaf_targets,
                 leaf_weights=numpy_helper.from_array(np.array(leaf_w, dtype), "w"))
    if membership:
        attrs["membership_values"] = numpy_helper.from_array(np.array(membership, dtype), "mv")
    return attrs


SMALL_SETS = [[1.0, 3.0], [0.5, 2.0], [0.0]]
BIG_SETS = [[-3.0, 5.0, 45.0], [1.0, 3.0, 40.0]]  # onnxruntime truncates X to an integer for these


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sets", [SMALL_SETS, BIG_SETS])
@pytest.mark.parametrize("aggregate,post", [(1, 0), (0, 1), (2, 2), (3, 3)])
def test_tree_ensemble_5(dtype, sets, aggregate, post):
    rng = np.random.default_rng(aggregate * 7 + len(sets[0]))
    attrs = v5_attrs(rng, 2, dtype, sets)
    attrs.update(aggregate_function=aggregate, post_transform=post)
    elem = T.FLOAT if dtype == np.float32 else T.DOUBLE
    x = features(rng, 60, dtype, values=[-3.0, -2.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.5, 40.0, 45.0, 45.5])
    model = ml_model("TreeEnsemble", attrs, elem, [elem], ml_opset=5)
    # onnxruntime's transforms of double scores round like float32 ones
    check(model, x, atol=None if post == 0 or dtype == np.float32 else 1e-6)


# --- real exports ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def training():
    from sklearn.datasets import make_classification
    x, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=0)
    return x.astype(np.float32), y


def _rows(x):
    x = x.copy()
    x[::7, 2] = np.nan
    x[1::9] *= 50  # outside the training range
    return x


@pytest.mark.parametrize("kind", ["rf_binary", "rf_multi", "rf_regressor", "gb_binary", "gb_multi"])
def test_sklearn_exports(training, kind):
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, RandomForestRegressor
    x, y = training
    if kind.endswith("binary"):
        y = (y == 1).astype(int)
    if kind.startswith("rf_") and kind != "rf_regressor":
        model = RandomForestClassifier(8, max_depth=6, random_state=0).fit(x, y)
    elif kind == "rf_regressor":
        model = RandomForestRegressor(8, max_depth=6, random_state=0).fit(x, x[:, 0] + y)
    else:
        model = GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, y)
    options = None if kind == "rf_regressor" else {"zipmap": False}
    onx = to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    name = onx.graph.input[0].name
    feeds = {name: _rows(x)}
    assert_all_same(native_session(onx).run(None, feeds), ort_run(onx, feeds))


@pytest.mark.parametrize("classes", [2, 3])
def test_lightgbm_exports(training, classes):
    import lightgbm
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType
    x, y = training
    if classes == 2:
        y = (y == 1).astype(int)
    model = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=7, verbose=-1).fit(x, y)
    onx = convert_lightgbm(model, initial_types=[("X", FloatTensorType([None, x.shape[1]]))], zipmap=False,
                           target_opset=15)
    # every node, the exporter's trailing Mul over the untyped probabilities included, on the CPU provider
    sess = native_session(onx)
    feeds = {"X": _rows(x)}
    assert_all_same(sess.run(None, feeds), ort_run(onx, feeds))


# --- errors ------------------------------------------------------------------------------------------------------
def _stump_attrs(**kw):
    attrs = dict(n_targets=1, nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[2, 0, 0],
                 nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0, 0], nodes_truenodeids=[1, 0, 0],
                 nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                 target_weights=[1.0, 2.0])
    attrs.update(kw)
    return attrs


def test_input_errors_name_node_and_expected_shape():
    sess = native_session(ml_model("TreeEnsembleRegressor", _stump_attrs(), T.FLOAT, [T.FLOAT]))
    with pytest.raises(onnxjit.RuntimeException, match=r"trees.*\[N, F\].*F >= 3.*\(4, 2\)"):
        sess.run(None, {"X": np.zeros((4, 2), np.float32)})
    with pytest.raises(onnxjit.RuntimeException, match=r"trees.*\[N, F\].*\(1, 2, 3\)"):
        sess.run(None, {"X": np.zeros((1, 2, 3), np.float32)})


@pytest.mark.parametrize("bad,match", [
    (dict(nodes_truenodeids=[5, 0, 0]), "node 5 of tree 0 does not exist"),
    (dict(nodes_nodeids=[0, 1, 1]), "defined twice"),
    (dict(nodes_modes=["BRANCH_XX", "LEAF", "LEAF"]), "unknown node mode"),
    (dict(target_ids=[0, 3]), r"target/class ids must be in \[0, 1\)"),
    (dict(nodes_values=[0.0]), "nodes_values has 1 entries"),
    (dict(nodes_truenodeids=[0, 0, 0]), "names itself"),
])
def test_malformed_attributes_fail_at_session_creation(bad, match):
    model = ml_model("TreeEnsembleRegressor", _stump_attrs(**bad), T.FLOAT, [T.FLOAT])
    with pytest.raises(onnxjit.Fail, match=f"TreeEnsembleRegressor \\(node 'trees'.*{match}"):
        onnxjit.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

