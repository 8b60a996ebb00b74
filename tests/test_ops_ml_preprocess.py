"""ai.onnx.ml preprocessing (Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor, FeatureVectorizer) on the
CPU provider against onnxruntime: every input type, rank 1 / 2 / 3 inputs, per-column and single attribute values,
the special values (zero norms, NaN), the errors. Sessions run with the fallback provider disabled
(`native_session` asserts every step ran on the CPU provider).

onnxruntime registers Binarizer for float input only and Imputer for float and int64 only; the spec (and onnxjit)
takes double, int64 and int32 too: those cases are compared with onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnxjit

from conftest import assert_all_same, native_session, ort_run, ref_run

DTYPES = [np.float32, np.float64, np.int64, np.int32]
_ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int64): T.INT64,
         np.dtype(np.int32): T.INT32, np.dtype(object): T.STRING}


def ml_model(op, attrs, inputs, out_elem):
    """One ai.onnx.ml node named 'ml'; `inputs` as (name, elem type), one output 'Y'."""
    node = helper.make_node(op, [n for n, _ in inputs], ["Y"], domain="ai.onnx.ml", name="ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, e, None) for n, e in inputs],
                              [helper.make_tensor_value_info("Y", out_elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def unary(op, attrs, dtype, out_elem=None):
    elem = _ELEM[np.dtype(dtype)]
    return ml_model(op, attrs, [("X", elem)], out_elem if out_elem is not None else elem)


def check(model, feeds, reference=False):
    got = native_session(model).run(None, feeds)
    want = ref_run(model, feeds) if reference else ort_run(model, feeds)
    assert_all_same(got, want)
    return got


def data(rng, shape, dtype, zeros=False):
    x = rng.normal(size=shape) * 3
    if zeros:
        x[..., 0, :] = 0  # a row of zeros (a zero norm)
    if np.dtype(dtype).kind == "i":
        x = np.round(x)
    return x.astype(dtype)


# --- Scaler ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_column", [False, True])
def test_scaler(dtype, per_column):
    rng = np.random.default_rng(1)
    n = 4 if per_column else 1
    attrs = dict(scale=rng.uniform(0.5, 2, n).astype(np.float32).tolist(),
                 offset=rng.normal(size=n).astype(np.float32).tolist())
    model = unary("Scaler", attrs, dtype, T.FLOAT)
    check(model, {"X": data(rng, (7, 4), dtype)})
    check(model, {"X": data(rng, (4,), dtype)})  # rank 1: one row of 4 features
    check(model, {"X": data(rng, (0, 4), dtype)})


def test_scaler_rank_3_cycles_over_dim_1():
    """onnxruntime indexes scale/offset by flat index % dim 1, whatever the rank."""
    rng = np.random.default_rng(2)
    model = unary("Scaler", dict(scale=[1.0, 2.0, 3.0], offset=[0.5, -0.5, 1.0]), np.float32, T.FLOAT)
    check(model, {"X": data(rng, (2, 3, 5), np.float32)})


def test_scaler_many_rows_on_threads():
    rng = np.random.default_rng(3)
    model = unary("Scaler", dict(scale=rng.uniform(size=16).tolist(), offset=rng.normal(size=16).tolist()),
                  np.float64, T.FLOAT)
    check(model, {"X": data(rng, (5000, 16), np.float64)})


def test_scaler_errors():
    sess = native_session(unary("Scaler", dict(scale=[1.0, 2.0], offset=[0.0, 1.0]), np.float32, T.FLOAT))
    with pytest.raises(onnxjit.InvalidArgument, match=r"Scaler \(node 'ml'.*offset must have 1 value or one per "
                                                      r"column \(3\), has 2"):
        sess.run(None, {"X": np.zeros((2, 3), np.float32)})
    with pytest.raises(onnxjit.InvalidArgument, match=r"Scaler \(node 'ml'.*input 0 \('X'\).*rank >= 1"):
        sess.run(None, {"X": np.float32(1.0).reshape(())})
    for attrs, match in [(dict(scale=[1.0, 2.0], offset=[0.0]), r"scale \(2 values\) and offset \(1\)"),
                         (dict(offset=[1.0]), "scale is required")]:
        with pytest.raises(onnxjit.Fail, match=rf"Scaler \(node 'ml'.*{match}"):
            native_session(unary("Scaler", attrs, np.float32, T.FLOAT))


# --- Normalizer ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalizer(norm, dtype):
    rng = np.random.default_rng(4)
    model = unary("Normalizer", dict(norm=norm), dtype, T.FLOAT)
    x = data(rng, (9, 5), dtype, zeros=True)
    x[1] = -np.abs(x[1])  # MAX takes the largest value, negative here
    x[2, :2] = 0  # zeros among the values: L2 keeps them 0
    check(model, {"X": x})
    check(model, {"X": x[3]})  # rank 1


def test_normalizer_errors():
    sess = native_session(unary("Normalizer", dict(norm="L1"), np.float32, T.FLOAT))
    with pytest.raises(onnxjit.InvalidArgument, match=r"Normalizer \(node 'ml'.*input 0 \('X'\).*rank 1 or 2"):
        sess.run(None, {"X": np.zeros((2, 2, 2), np.float32)})
    with pytest.raises(onnxjit.Fail, match=r"Normalizer \(node 'ml'.*unknown norm 'L3'"):
        native_session(unary("Normalizer", dict(norm="L3"), np.float32, T.FLOAT))


# --- Binarizer -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threshold", [None, 0.5, -1.0])
def test_binarizer(dtype, threshold):
    rng = np.random.default_rng(5)
    attrs = {} if threshold is None else dict(threshold=threshold)  # the default is 0 (as onnxruntime 1.32 has it)
    model = unary("Binarizer", attrs, dtype)
    x = data(rng, (6, 4), dtype)
    x[0, :3] = [0, 0.5, -1.0] if np.dtype(dtype).kind == "f" else [0, 1, -1]  # on the thresholds
    check(model, {"X": x}, reference=dtype != np.float32)
    check(model, {"X": x.reshape(2, 3, 4)}, reference=dtype != np.float32)


def test_binarizer_nan_is_an_error():
    sess = native_session(unary("Binarizer", dict(threshold=0.5), np.float32))
    x = np.array([[0.0, 1.0], [np.nan, 2.0]], np.float32)
    with pytest.raises(Exception, match="NaN"):
        ort_run(unary("Binarizer", dict(threshold=0.5), np.float32), {"X": x})
    with pytest.raises(onnxjit.InvalidArgument, match=r"Binarizer \(node 'ml'.*NaN at flat index 2"):
        sess.run(None, {"X": x})


# --- Imputer ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("replaced", [float("nan"), 0.0, -1.0])
def test_imputer_floats(per_column, replaced):
    rng = np.random.default_rng(6)
    values = [7.0, 8.0, 9.0] if per_column else [7.0]
    model = unary("Imputer", dict(imputed_value_floats=values, replaced_value_float=replaced), np.float32)
    x = data(rng, (8, 3), np.float32)
    x[rng.random(x.shape) < 0.3] = replaced
    x[0, 0] = np.nan  # NaN stays NaN unless NaN is the replaced value
    check(model, {"X": x})
    check(model, {"X": x[1]})  # rank 1: one row


@pytest.mark.parametrize("per_column", [False, True])
def test_imputer_int64(per_column):
    rng = np.random.default_rng(7)
    values = [70, 80, 90] if per_column else [70]
    model = unary("Imputer", dict(imputed_value_int64s=values, replaced_value_int64=-1), np.int64)
    x = data(rng, (8, 3), np.int64)
    x[rng.random(x.shape) < 0.3] = -1
    check(model, {"X": x})


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_imputer_other_input_types(dtype):
    """Double uses the float attributes, int32 the int64 ones (onnxruntime registers neither type)."""
    rng = np.random.default_rng(8)
    if dtype == np.float64:
        attrs, replaced = dict(imputed_value_floats=[7.5, 8.5, 9.5], replaced_value_float=float("nan")), np.nan
    else:
        attrs, replaced = dict(imputed_value_int64s=[70], replaced_value_int64=3), 3
    model = unary("Imputer", attrs, dtype)
    x = data(rng, (8, 3), dtype)
    x[rng.random(x.shape) < 0.3] = replaced
    check(model, {"X": x}, reference=True)


def test_imputer_errors():
    sess = native_session(unary("Imputer", dict(imputed_value_floats=[1.0]), np.int64))
    with pytest.raises(onnxjit.InvalidArgument, match=r"Imputer \(node 'ml'.*only imputed_value_floats are given"):
        sess.run(None, {"X": np.zeros((2, 2), np.int64)})
    for attrs in (dict(imputed_value_floats=[1.0], imputed_value_int64s=[1]), dict(replaced_value_float=1.0)):
        with pytest.raises(onnxjit.Fail, match=r"Imputer \(node 'ml'.*exactly one of imputed_value_floats"):
            native_session(unary("Imputer", attrs, np.float32))
        with pytest.raises(Exception):  # onnxruntime refuses these too
            ort_run(unary("Imputer", attrs, np.float32), {"X": np.zeros((2, 2), np.float32)})


# --- ArrayFeatureExtractor -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES + [object])
def test_array_feature_extractor(dtype):
    rng = np.random.default_rng(9)
    elem = _ELEM[np.dtype(dtype)]
    model = ml_model("ArrayFeatureExtractor", {}, [("X", elem), ("I", T.INT64)], elem)
    x = data(rng, (4, 5), np.float32 if dtype is object else dtype)
    if dtype is object:
        x = np.array([f"s{v:.2f}" for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    for idx in ([4, 0, 4], [[1, 2]], [3]):
        check(model, {"X": x, "I": np.array(idx, np.int64)})
    check(model, {"X": x[0], "I": np.array([2, 1], np.int64)})  # rank 1 gives [1, k]
    check(model, {"X": np.stack([x, x[::-1]]), "I": np.array([1, 3], np.int64)})  # rank 3: the last axis


def test_array_feature_extractor_errors():
    model = ml_model("ArrayFeatureExtractor", {}, [("X", T.FLOAT), ("I", T.INT64)], T.FLOAT)
    sess = native_session(model)
    x = np.zeros((2, 3), np.float32)
    for idx, match in [([0, 3], r"indices in \[0, 3\).*Y\[1\] = 3"), ([-1], r"Y\[0\] = -1"),
                       ([], "at least one index")]:
        feeds = {"X": x, "I": np.array(idx, np.int64)}
        with pytest.raises(onnxjit.InvalidArgument, match=rf"ArrayFeatureExtractor \(node 'ml'.*input 1 \('I'\)"
                                                          rf".*{match}"):
            sess.run(None, feeds)
        with pytest.raises(Exception, match="INVALID_ARGUMENT"):  # onnxruntime refuses them too
            ort_run(model, feeds)


# --- FeatureVectorizer -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_feature_vectorizer(dtype):
    """Each input cut or zero-padded to its inputdimensions entry; rank 1 inputs are one row; rank 3 ones are
    flattened after dim 0."""
    rng = np.random.default_rng(10)
    elem = _ELEM[np.dtype(dtype)]
    model = ml_model("FeatureVectorizer", dict(inputdimensions=[2, 4, 3]), [("A", elem), ("B", elem), ("C", elem)],
                     T.FLOAT)
    feeds = {"A": data(rng, (5, 3), dtype), "B": data(rng, (5, 2), dtype), "C": data(rng, (5, 1, 3), dtype)}
    check(model, feeds)
    check(model, {k: v[0].reshape(-1) for k, v in feeds.items()})


def test_feature_vectorizer_errors():
    model = ml_model("FeatureVectorizer", dict(inputdimensions=[2, 2]), [("A", T.FLOAT), ("B", T.FLOAT)], T.FLOAT)
    sess = native_session(model)
    for rows in (3, 1):  # onnxruntime 1.32 requires every input to have input 0's batch size
        feeds = {"A": np.zeros((2, 2), np.float32), "B": np.zeros((rows, 2), np.float32)}
        with pytest.raises(onnxjit.InvalidArgument, match=r"FeatureVectorizer \(node 'ml'.*input 1 \('B'\).*of 2 "
                                                          r"rows"):
            sess.run(None, feeds)
        with pytest.raises(Exception, match="same batch size"):
            ort_run(model, feeds)
    with pytest.raises(onnxjit.Fail, match=r"FeatureVectorizer \(node 'ml'.*inputdimensions has 1 entries for 2"):
        native_session(ml_model("FeatureVectorizer", dict(inputdimensions=[2]), [("A", T.FLOAT), ("B", T.FLOAT)],
                                T.FLOAT))


# --- real exports ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["scaler", "normalizer", "binarizer", "imputer", "minmax", "maxabs"])
def test_sklearn_preprocessing_exports(kind):
    from skl2onnx import to_onnx
    from sklearn import impute, preprocessing
    rng = np.random.default_rng(11)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    if kind == "imputer":
        x[rng.random(x.shape) < 0.2] = np.nan
    model = {"scaler": preprocessing.StandardScaler(), "normalizer": preprocessing.Normalizer(norm="l2"),
             "binarizer": preprocessing.Binarizer(threshold=0.2), "imputer": impute.SimpleImputer(),
             "minmax": preprocessing.MinMaxScaler(), "maxabs": preprocessing.MaxAbsScaler()}[kind].fit(x)
    onx = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    feeds = {onx.graph.input[0].name: x}
    got, want = native_session(onx).run(None, feeds), ort_run(onx, feeds)
    assert_all_same(got, want)
