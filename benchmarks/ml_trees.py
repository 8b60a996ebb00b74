"""Tree ensembles (ai.onnx.ml TreeEnsembleClassifier/Regressor) against onnxruntime, and the designs compared
when choosing onnxjit's kernel (onnxjit/ops/tree_ensemble.py).

Models (MODELS) are exported on the fly, 20 features trained on 10,000 rows: scikit-learn's random forest and
extra-trees (classifier and regressor), decision tree, gradient boosting, HistGradientBoosting and IsolationForest
(skl2onnx); LightGBM binary, 3-class, regressor and with categorical features, XGBoost classifier and regressor
(onnxmltools; XGBoost's when xgboost is installed). `synthetic500` is 500 random trees of 255 leaves each
(leaf-wise growth, as LightGBM's).

usage:
  python benchmarks/ml_trees.py [--models rf,gb,...] [--rounds N] [--threads T]
      each model at batch 10,000 and 1: onnxruntime and onnxjit (its fallback provider disabled) each timed in its
      own block of runs with a rest between (never interleaved single runs), best and median of N rounds, their
      ratio; the outputs over 10,000 new rows (some with a NaN, some 25x outside the training range) against
      onnxruntime's (labels must be equal) and against the library's own predict (float64 there)
  python benchmarks/ml_trees.py --designs [--models lgb,rf]
      design (a), the kernel onnxjit runs (a block of rows walks each tree in lockstep) against an early-exit
      walk per row and design (b), every tree generated as nested if/else source and compiled by Numba (compile
      time included), one thread
  python benchmarks/ml_trees.py --compile
      the 500-tree 255-leaf ensemble's session creation in new processes: over empty caches, then from them
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
from ml_timing import compare_blocks, cpu_name

ROWS, FEATURES, TREES = 10_000, 20, 200
MAX_IF_ELSE_NODES = 3_000  # design (b) compiles for minutes beyond this


def _data(seed=0, classes=2):
    from sklearn.datasets import make_classification
    x, y = make_classification(ROWS, FEATURES, n_informative=10, n_classes=classes, random_state=seed)
    return x.astype(np.float32), y


def _categorical(x):
    """x with features 0 and 1 made categories 0..9 (LightGBM's categorical splits)."""
    x = x.copy()
    x[:, :2] = np.floor(np.abs(x[:, :2]) * 3) % 10
    return x


# name -> what it is (the README's rows)
MODELS = {
    "rf": "random forest classifier, 200 trees, no depth limit (scikit-learn)",
    "rfr": "random forest regressor, 200 trees of depth 12",
    "et": "extra-trees classifier, 200 trees, no depth limit",
    "etr": "extra-trees regressor, 200 trees of depth 12",
    "dt": "decision tree classifier, no depth limit",
    "gb": "gradient boosting classifier, 200 trees of depth 3",
    "hgb": "HistGradientBoosting classifier, 200 iterations (NaN learned as missing)",
    "iso": "IsolationForest, 200 trees",
    "lgb": "LightGBM binary classifier, 200 trees of 31 leaves (onnxmltools)",
    "lgb_multi": "LightGBM 3-class classifier, 200 rounds of 31 leaves",
    "lgb_reg": "LightGBM regressor, 200 trees of 31 leaves",
    "lgb_cat": "LightGBM binary classifier with two categorical features",
    "xgb": "XGBoost binary classifier, 200 trees of depth 6",
    "xgb_reg": "XGBoost regressor, 200 trees of depth 6",
}
DEFAULT_MODELS = ",".join(MODELS)


@contextlib.contextmanager
def _bool_lists_as_ints():
    """skl2onnx 1.20.0 passes HistGradientBoosting's missing-value directions as numpy bools among the ints of
    nodes_missing_value_tracks_true, which onnx's make_attribute refuses: converted to ints while exporting."""
    import onnx.helper
    make_attribute = onnx.helper.make_attribute

    def converted(key, value, *args, **kwargs):
        if isinstance(value, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in value):
            value = [int(v) for v in value]
        return make_attribute(key, value, *args, **kwargs)
    onnx.helper.make_attribute = converted
    try:
        yield
    finally:
        onnx.helper.make_attribute = make_attribute


def export(name: str):
    """(ModelProto, input name, native) of a benchmark model; native(x) is the library's own prediction, (labels or
    None, scores or None) as the ONNX model's outputs give them."""
    warnings.filterwarnings("ignore")
    classes = 3 if name == "lgb_multi" else 2
    x, y = _data(classes=classes)
    target = {"": 17, "ai.onnx.ml": 3}
    if name == "synthetic500":
        return synthetic(500, 255), "X", None
    if name in ("rf", "rfr", "et", "etr", "dt", "gb", "hgb", "iso"):
        from skl2onnx import to_onnx
        from sklearn import ensemble, tree
        models = {"rf": lambda: ensemble.RandomForestClassifier(TREES, n_jobs=2, random_state=0),
                  "rfr": lambda: ensemble.RandomForestRegressor(TREES, max_depth=12, n_jobs=2, random_state=0),
                  "et": lambda: ensemble.ExtraTreesClassifier(TREES, n_jobs=2, random_state=0),
                  "etr": lambda: ensemble.ExtraTreesRegressor(TREES, max_depth=12, n_jobs=2, random_state=0),
                  "dt": lambda: tree.DecisionTreeClassifier(random_state=0),
                  "gb": lambda: ensemble.GradientBoostingClassifier(n_estimators=TREES, max_depth=3, random_state=0),
                  "hgb": lambda: ensemble.HistGradientBoostingClassifier(max_iter=TREES, random_state=0),
                  "iso": lambda: ensemble.IsolationForest(n_estimators=TREES, random_state=0)}
        regression = name in ("rfr", "etr")
        fit_x = x.copy()
        if name == "hgb":
            fit_x[::53, 3] = np.nan  # missing values it learns a direction for
        model = models[name]().fit(fit_x, x[:, 0] * 3 + y if regression else y)
        options = {id(model): {"zipmap": False}} if not regression and name != "iso" else None
        with _bool_lists_as_ints():
            onx = to_onnx(model, x[:1], options=options, target_opset=target)
        if regression:
            return onx, onx.graph.input[0].name, lambda v: (None, model.predict(v))
        if name == "iso":
            return onx, onx.graph.input[0].name, lambda v: (model.predict(v), model.decision_function(v))
        return onx, onx.graph.input[0].name, lambda v: (model.predict(v), model.predict_proba(v))
    from onnxmltools.convert.common.data_types import FloatTensorType
    initial = [("X", FloatTensorType([None, FEATURES]))]
    if name.startswith("lgb"):
        import lightgbm
        from onnxmltools import convert_lightgbm
        if name == "lgb_reg":
            model = lightgbm.LGBMRegressor(n_estimators=TREES, num_leaves=31, verbose=-1).fit(x, x[:, 0] * 3 + y)
            onx = convert_lightgbm(model, initial_types=initial, target_opset=15)
            return onx, "X", lambda v: (None, model.predict(v))
        fit_x = _categorical(x) if name == "lgb_cat" else x
        model = lightgbm.LGBMClassifier(n_estimators=TREES, num_leaves=31, verbose=-1)
        model.fit(fit_x, y, categorical_feature=[0, 1] if name == "lgb_cat" else "auto")
        onx = convert_lightgbm(model, initial_types=initial, zipmap=False, target_opset=15)
        native = (lambda v: (model.predict(_categorical(v)), model.predict_proba(_categorical(v)))) \
            if name == "lgb_cat" else (lambda v: (model.predict(v), model.predict_proba(v)))
        return onx, "X", native
    if name.startswith("xgb"):
        import xgboost
        from onnxmltools import convert_xgboost
        if name == "xgb_reg":
            model = xgboost.XGBRegressor(n_estimators=TREES, max_depth=6).fit(x, x[:, 0] * 3 + y)
            return convert_xgboost(model, initial_types=initial, target_opset=15), "X", \
                lambda v: (None, model.predict(v))
        model = xgboost.XGBClassifier(n_estimators=TREES, max_depth=6).fit(x, y)
        return convert_xgboost(model, initial_types=initial, target_opset=15), "X", \
            lambda v: (model.predict(v), model.predict_proba(v))
    raise ValueError(f"unknown model {name!r}")


def synthetic(n_trees: int, n_leaves: int, seed: int = 0):
    """A TreeEnsembleRegressor of n_trees random trees with n_leaves leaves each, grown leaf-wise."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("tree", "node", "feat", "mode", "value", "true", "false")}
    tt, tn, tw = [], [], []
    for t in range(n_trees):
        # node 0 is the root; split a random leaf until there are n_leaves
        feat, value, true, false = [0], [0.0], [-1], [-1]
        leaves = [0]
        while len(leaves) < n_leaves:
            i = leaves.pop(int(rng.integers(len(leaves))))
            feat[i], value[i] = int(rng.integers(FEATURES)), float(rng.normal())
            true[i], false[i] = len(feat), len(feat) + 1
            for _ in range(2):
                feat.append(0)
                value.append(0.0)
                true.append(-1)
                false.append(-1)
            leaves += [true[i], false[i]]
        for i in range(len(feat)):
            leaf = true[i] < 0
            cols["tree"].append(t)
            cols["node"].append(i)
            cols["feat"].append(feat[i])
            cols["mode"].append("LEAF" if leaf else "BRANCH_LEQ")
            cols["value"].append(value[i])
            cols["true"].append(0 if leaf else true[i])
            cols["false"].append(0 if leaf else false[i])
            if leaf:
                tt.append(t)
                tn.append(i)
                tw.append(float(rng.normal()))
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1, nodes_treeids=cols["tree"],
        nodes_nodeids=cols["node"], nodes_featureids=cols["feat"], nodes_modes=cols["mode"],
        nodes_values=cols["value"], nodes_truenodeids=cols["true"], nodes_falsenodeids=cols["false"],
        target_ids=[0] * len(tt), target_treeids=tt, target_nodeids=tn, target_weights=tw)
    graph = helper.make_graph([node], "synthetic", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                                  [None, FEATURES])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


# --- onnxjit against onnxruntime ---------------------------------------------------------------------------------
def _difference(want, got) -> str:
    """How far `got` is from `want`: labels that differ, or the largest difference of scores."""
    want, got = np.asarray(want), np.asarray(got).reshape(np.shape(want))
    if want.dtype.kind in "fc":
        scale = max(1.0, float(np.nanmax(np.abs(want))))
        return f"max |diff| {float(np.nanmax(np.abs(want - got))):.2e} (scale {scale:.3g})"
    return f"labels differ: {int((want != got).sum())}"


def compare(names, rounds, threads):
    import onnxruntime

    import onnxjit
    x, _ = _data(1)  # rows the models were not trained on
    x[::97, 3] = np.nan  # missing values
    x[1::89] *= 25  # and rows far outside the training range
    print(f"threads {threads}, {os.cpu_count()} cores: {cpu_name()}")
    for name in names:
        try:
            model, iname, native = export(name)
        except Exception as e:  # noqa: BLE001 - an exporter that cannot convert this model: a row saying so
            print(f"{name}: export failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
            continue
        xm = _categorical(x) if name == "lgb_cat" else x
        data = model.SerializeToString()
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3  # skl2onnx/onnxmltools declare the label [1]: a warning per run otherwise
        ort = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        jo = onnxjit.SessionOptions()
        jo.intra_op_num_threads = threads
        jo.add_session_config_entry("session.disable_fallback_provider", "1")  # every node on the CPU provider
        t0 = time.perf_counter()
        jit = onnxjit.InferenceSession(data, jo, providers=["CPUExecutionProvider"])
        created = time.perf_counter() - t0
        want, got = ort.run(None, {iname: xm}), jit.run(None, {iname: xm})
        line = f"{name}: session {created:.2f}s; vs onnxruntime: " + "; ".join(map(_difference, want, got))
        if native is not None:
            # the label output comes first where there is one, a score output last (IsolationForest: the score
            # of decision_function; the exporters' float32 against the library's float64), on the rows with a NaN
            # and on the others: an exporter may not carry the library's handling of missing values over
            nan_rows = np.isnan(x).any(axis=1)
            for what, rows in (("rows without NaN", ~nan_rows), ("rows with NaN", nan_rows)):
                try:
                    labels, scores = native(x[rows])
                except ValueError as e:  # the library refuses NaN
                    line += f"; vs its library's predict, {what}: refused ({str(e)[:60]})"
                    continue
                ours = [g[rows] for g in got]
                mine = ([_difference(labels, ours[0])] if labels is not None else []) + \
                    ([_difference(scores, ours[-1])] if scores is not None else [])
                line += f"; vs its library's predict, {what}: " + ", ".join(mine)
        print(line)
        for batch in (ROWS, 1):
            feeds = {iname: xm[:batch]}
            compare_blocks(ort, jit, feeds, batch, rounds)


# --- designs -----------------------------------------------------------------------------------------------------
def _ensemble(model):
    from onnxjit.ir.serde import from_onnx
    from onnxjit.ops import tree_ensemble as te
    from onnxjit.ops.ml_common import Attrs
    node = next(n for n in from_onnx(model, None).graph.nodes if n.domain == "ai.onnx.ml")
    a = Attrs(node)
    classifier = node.op_type == "TreeEnsembleClassifier"
    f = te._form_v3(a, classifier)
    if classifier:
        f.n_targets = 2
    return te.Ensemble(a, f, np.float32, 0, np.zeros(2, np.int64), one_output=True)


def _early_exit_source():
    return '''
import numpy as np
from numba import njit

@njit(nogil=True)
def kernel(x, nodes, thr, slot, roots, lval, out):
    xf = x.reshape(x.size)
    cols = x.shape[1]
    for r in range(x.shape[0]):
        acc = lval.dtype.type(0) if False else np.float32(0)
        o = np.uint32(r * cols)
        for t in range(roots.shape[0]):
            n = np.uint32(roots[t])
            while True:
                q = np.uint32(4) * n
                nxt = np.uint32(nodes[q + (np.uint32(2) if xf[o + np.uint32(nodes[q] >> 1)] <= thr[q + np.uint32(1)]
                                           else np.uint32(3))])
                if nxt == n:
                    break
                n = nxt
            acc += lval[slot[n], 0]
        out[r] = acc
'''


def _if_else_source(ens):
    """Design (b): one function whose body has every tree as nested if/else on x[r, feature]."""
    nodes = ens.nodes
    thr = ens.nodes.view(np.float32)[:, 1]
    lines = ["import numpy as np", "from numba import njit", "", "@njit(nogil=True)", "def kernel(x, out):",
             "    for r in range(x.shape[0]):", "        acc = np.float32(0)"]

    def emit(n, indent):
        pad = " " * indent
        if nodes[n, 2] == n:  # a leaf
            lines.append(f"{pad}acc += np.float32({float(ens.lval[nodes[n, 1], 0])!r})")  # its row of lval
            return
        lines.append(f"{pad}if x[r, {nodes[n, 0] >> 1}] <= np.float32({float(thr[n])!r}):")
        emit(int(nodes[n, 2]), indent + 4)
        lines.append(f"{pad}else:")
        emit(int(nodes[n, 3]), indent + 4)
    sys.setrecursionlimit(100_000)
    for root in ens.trees[:, 0]:
        emit(int(root), 8)
    lines.append("        out[r] = acc")
    return "\n".join(lines) + "\n"


def designs(names):
    from onnxjit.kernels import tree_ensemble as k
    x, _ = _data(1)
    print(f"one thread, {ROWS} rows x {FEATURES} features: {cpu_name()}")
    for name in names:
        model, _, _ = export(name)
        ens = _ensemble(model)
        n_nodes = ens.nodes.shape[0]
        print(f"{name}: {ens.trees.shape[0]} trees, {n_nodes} nodes, max depth {ens.trees[:, 1].max()}, "
              f"mean max depth {ens.trees[:, 1].mean():.1f}")
        params = np.zeros(k.N_PARAMS, np.int64)
        params[[k.P_SAME_MODE, k.P_AGG, k.P_BLOCK, k.P_KIND, k.P_POST]] = [ens.same_mode, k.SUM, 256,
                                                                           k.REGRESSOR_1, k.NONE]
        params[k.P_MISSING] = ens.has_missing
        params[k.P_REFILL] = ens.refill
        args = (ens.nodes.reshape(-1), ens.nodes.view(np.float32).reshape(-1), ens.aux, ens.members, ens.trees,
                ens.lval, ens.lhas, np.zeros(0, np.float32), np.zeros(1, np.int64), params)
        z = np.empty((ROWS, 1), np.float32)
        label = np.empty(ROWS, np.int64)

        def lockstep(xb):
            k.predict(xb, *args, z, label, 0, len(xb))
        ref = np.empty(ROWS, np.float32)
        lockstep(x)
        ref[:] = z[:, 0]
        results = [("(a) lockstep block walk (kept)", 0.0, lockstep)]
        namespace = {}
        exec(_early_exit_source(), namespace)
        early = namespace["kernel"]
        out = np.empty(ROWS, np.float32)
        t0 = time.perf_counter()
        early(x[:2], *args[:3], ens.trees[:, 0].copy(), ens.lval, out[:2])
        results.append(("(a') early exit per row", time.perf_counter() - t0,
                        lambda xb: early(xb, *args[:3], ens.trees[:, 0].copy(), ens.lval, out[:len(xb)])))
        if n_nodes <= MAX_IF_ELSE_NODES:
            source = _if_else_source(ens)
            namespace = {}
            t0 = time.perf_counter()
            exec(compile(source, f"<if-else {name}>", "exec"), namespace)
            gen = namespace["kernel"]
            gen(x[:2], out[:2])
            results.append((f"(b) nested if/else ({len(source) // 1024} KB source)", time.perf_counter() - t0,
                            lambda xb: gen(xb, out[:len(xb)])))
        else:
            print(f"  (b) nested if/else: not compiled (over {MAX_IF_ELSE_NODES} nodes: gb's 2,946 took 156 s)")
        for label_, compile_s, fn in results:
            fn(x)
            if label_.startswith("(a)"):
                ok = True
            else:
                ok = np.allclose(out, ref, rtol=1e-5, atol=1e-5)
            t10k = min(_timed(fn, x) for _ in range(3))
            t1 = min(_timed(fn, x[:1], 2000) for _ in range(3))
            print(f"  {label_:42s} compile {compile_s:6.2f}s  batch 10000 {1e3 * t10k:7.2f} ms  "
                  f"batch 1 {1e6 * t1:7.2f} us  {'same sums' if ok else 'DIFFERENT SUMS'}")


def _timed(fn, xb, runs=3):
    fn(xb)
    t0 = time.perf_counter()
    for _ in range(runs):
        fn(xb)
    return (time.perf_counter() - t0) / runs


# --- compile time ------------------------------------------------------------------------------------------------
CHILD = r"""
import sys, time
t0 = time.perf_counter()
import numpy as np
import onnxjit
t1 = time.perf_counter()
sess = onnxjit.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t2 = time.perf_counter()
sess.run(None, {"X": np.zeros((1, 20), np.float32)})
t3 = time.perf_counter()
print(f"import {t1 - t0:.2f}s, session {t2 - t1:.2f}s, first run {1e3 * (t3 - t2):.1f} ms")
"""


def compile_times(rounds):
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "synthetic500.onnx")
        onnx.save(synthetic(500, 255), path)
        for r in range(rounds):
            env = dict(os.environ, ONNXJIT_CACHE_DIR=os.path.join(tmp, f"oj{r}"),
                       NUMBA_CACHE_DIR=os.path.join(tmp, f"nb{r}"))
            for state in ("empty caches", "warm caches "):
                out = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True, text=True)
                print(f"500 trees x 255 leaves, {state}: {out.stdout.strip() or out.stderr.strip()[-300:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--designs", action="store_true")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    try:
        import xgboost  # noqa: F401
    except ImportError:
        if any(n.startswith("xgb") for n in names):
            print("xgboost is not installed: its models are skipped (pip install xgboost)")
        names = [n for n in names if not n.startswith("xgb")]
    if args.compile:
        compile_times(args.rounds)
    elif args.designs:
        designs(names)
    else:
        compare(names, args.rounds, args.threads)


if __name__ == "__main__":
    main()
