"""scikit-learn pipelines of the non-tree ai.onnx.ml ops (onnxjit/ops/ml_linear.py, ml_preprocess.py,
ml_encoders.py) against onnxruntime.

Models are exported on the fly with skl2onnx (their default options, so the classifiers end in ZipMap as users get
them, and again without it where the export has one): StandardScaler + LogisticRegression (4 classes, 20
features), an RBF SVC with probabilities (3 classes, 20 features, trained on 2,000 rows), LinearSVC, a
ColumnTransformer (OneHotEncoder over 3 string columns, StandardScaler over 5 numeric ones; two inputs) +
LogisticRegression,
and DictVectorizer + LogisticRegression (its input is one map(string, float) per run in onnxruntime, so it runs at
batch 1 only).

usage:
  python benchmarks/ml_pipelines.py [--models lr,svc,...] [--rounds N] [--threads T]
      each model at batch 10,000 and 1: onnxruntime and onnxjit each timed in its own block of runs with a rest
      between (never interleaved single runs), best and median of N rounds, their ratio; every node of the
      pipeline on onnxjit's CPU provider (the fallback provider disabled), outputs checked against onnxruntime's
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
from ml_timing import compare_blocks, cpu_name

ROWS, FEATURES = 10_000, 20
MODELS = ("lr", "lr_nozipmap", "svc", "svc_nozipmap", "linearsvc", "columns", "dictvec")
OPSETS = {"": 17, "ai.onnx.ml": 3}


def _classification(rows, classes, seed=0):
    from sklearn.datasets import make_classification
    x, y = make_classification(rows, FEATURES, n_informative=8, n_classes=classes, random_state=seed)
    return x.astype(np.float32), y


def _columns_data(rows, seed=0):
    rng = np.random.default_rng(seed)
    colors = np.array(["red", "green", "blue", "black", "white"], dtype=object)
    sizes = np.array(["S", "M", "L", "XL"], dtype=object)
    towns = np.array([f"town{i}" for i in range(40)], dtype=object)
    cats = np.stack([rng.choice(colors, rows), rng.choice(sizes, rows), rng.choice(towns, rows)], axis=1)
    nums = rng.standard_normal((rows, 5)).astype(np.float32)
    y = (nums[:, 0] + (cats[:, 0] == "red") - (cats[:, 1] == "S") > 0).astype(np.int64)
    return cats, nums, y


def _dicts(rows, seed=0):
    rng = np.random.default_rng(seed)
    keys = [f"word{i}" for i in range(50)]
    return [{str(k): float(rng.random()) for k in rng.choice(keys, 10, replace=False)} for _ in range(rows)]


def export(name: str):
    """(ModelProto, feeds maker(batch) -> feeds, batches) of a benchmark model."""
    warnings.filterwarnings("ignore")
    from skl2onnx import convert_sklearn, to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    if name in ("lr", "lr_nozipmap", "svc", "svc_nozipmap", "linearsvc"):
        if name.startswith("svc"):
            from sklearn.svm import SVC
            x, y = _classification(2_000, 3)
            model = SVC(probability=True, random_state=0).fit(x, y)
        elif name == "linearsvc":
            from sklearn.svm import LinearSVC
            x, y = _classification(ROWS, 4)
            model = LinearSVC(random_state=0).fit(x, y)
        else:
            x, y = _classification(ROWS, 4)
            model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
        options = {"zipmap": False} if name.endswith("nozipmap") else None
        onx = to_onnx(model, x[:1], options=options, target_opset=OPSETS)
        xt, _ = _classification(ROWS, 3, seed=1)  # rows the models were not trained on
        iname = onx.graph.input[0].name
        return onx, (lambda b: {iname: xt[:b]}), (ROWS, 1)
    if name == "columns":
        from skl2onnx.common.data_types import FloatTensorType, StringTensorType
        from sklearn.compose import ColumnTransformer
        from sklearn.preprocessing import OneHotEncoder
        cats, nums, y = _columns_data(ROWS)
        # a numpy object array (no pandas here): columns 0-2 strings, 3-7 numbers; in ONNX two inputs
        pre = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1, 2]),
                                 ("num", StandardScaler(), [3, 4, 5, 6, 7])])
        model = make_pipeline(pre, LogisticRegression(max_iter=500)).fit(
            np.concatenate([cats, nums.astype(object)], axis=1), y)
        onx = convert_sklearn(model, initial_types=[("cat", StringTensorType([None, 3])),
                                                    ("num", FloatTensorType([None, 5]))], target_opset=OPSETS)
        tc, tn, _ = _columns_data(ROWS, seed=1)
        return onx, (lambda b: {"cat": tc[:b], "num": tn[:b]}), (ROWS, 1)
    if name == "dictvec":
        from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
        from sklearn.feature_extraction import DictVectorizer
        data = _dicts(2_000)
        y = np.array([int(sum(d.values()) > 5) + int("word3" in d) for d in data])
        model = make_pipeline(DictVectorizer(sparse=False), LogisticRegression(max_iter=500)).fit(data, y)
        onx = convert_sklearn(model, initial_types=[("X", DictionaryType(StringTensorType([1]),
                                                                          FloatTensorType([1])))],
                              target_opset=OPSETS)
        test = _dicts(1, seed=1)[0]
        return onx, (lambda b: {"X": test}), (1,)
    raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")


def _as_array(v):
    if isinstance(v, list) and v and isinstance(v[0], dict):  # ZipMap's list of dicts
        return np.array([[row[k] for k in sorted(row)] for row in v], np.float64)
    return np.asarray(v)


def _check(want, got) -> str:
    """Labels that differ; for scores the largest absolute difference and the largest relative one among scores
    of at least 1e-3 (a probability of 1e-7 against 0 is no relative error worth reporting)."""
    notes = []
    for w, g in zip(want, got):
        w, g = _as_array(w), _as_array(g)
        if w.shape != g.shape:
            notes.append(f"shapes differ: {w.shape} vs {g.shape}")
        elif w.dtype.kind == "f":
            diff = np.abs(w.astype(np.float64) - g)
            big = np.abs(w) >= 1e-3
            rel = float((diff[big] / np.abs(w[big])).max()) if big.any() else 0.0
            notes.append(f"scores: max abs diff {float(diff.max()):.1e}, max rel diff {rel:.1e}")
        else:
            notes.append(f"labels differ: {int((w != g).sum())}")
    return "; ".join(notes)


def compare(names, rounds, threads):
    import onnxruntime

    import onnxjit
    print(f"threads {threads}, {os.cpu_count()} cores: {cpu_name()}")
    ratios = {}
    for name in names:
        model, feeds_of, batches = export(name)
        data = model.SerializeToString()
        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        ort = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        jo = onnxjit.SessionOptions()
        jo.intra_op_num_threads = threads
        jo.add_session_config_entry("session.disable_fallback_provider", "1")  # every node on the CPU provider
        t0 = time.perf_counter()
        jit = onnxjit.InferenceSession(data, jo, providers=["CPUExecutionProvider"])
        created = time.perf_counter() - t0
        ops = sorted({n.op_type for n in model.graph.node})
        feeds = feeds_of(batches[0])
        print(f"{name} ({', '.join(ops)}): session {created:.2f}s; "
              f"{_check(ort.run(None, feeds), jit.run(None, feeds))}")
        for batch in batches:
            feeds = feeds_of(batch)
            ratios[(name, batch)] = compare_blocks(ort, jit, feeds, batch, rounds)
    for batch in (ROWS, 1):
        r = [v for (n, b), v in ratios.items() if b == batch]
        if r:
            print(f"batch {batch}: geometric mean ratio {float(np.exp(np.mean(np.log(r)))):.2f} over {len(r)} models")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    compare(args.models.split(","), args.rounds, args.threads)


if __name__ == "__main__":
    main()
