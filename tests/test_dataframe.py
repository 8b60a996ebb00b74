"""feeds_from_dataframe: a pandas DataFrame as a session's feeds, for an input per column or one [N, F] input;
the outputs match onnxruntime's on the same feeds, and each user error names the column and input."""
import numpy as np
import onnxruntime
import pandas as pd
import pytest

import onnxjit
from onnxjit import feeds_from_dataframe


def _frame(rows=40, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"city": rng.choice(["paris", "lyon", "nice"], rows),
                         "age": rng.integers(18, 80, rows).astype(np.float64),
                         "income": rng.standard_normal(rows) * 1000 + 3000,
                         "visits": rng.integers(0, 9, rows)})


def _per_column_model(df):
    """ColumnTransformer (OneHotEncoder over city, StandardScaler over the numbers) + LogisticRegression, with an
    [N, 1] input per column, as skl2onnx writes it from initial_types."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    y = (df["income"] > 3000).astype(int)
    pre = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), ["city"]),
                             ("num", StandardScaler(), ["age", "income", "visits"])])
    model = make_pipeline(pre, LogisticRegression(max_iter=500)).fit(df, y)
    types = [("city", StringTensorType([None, 1])), ("age", FloatTensorType([None, 1])),
             ("income", FloatTensorType([None, 1])), ("visits", Int64TensorType([None, 1]))]
    return convert_sklearn(model, initial_types=types, target_opset={"": 17, "ai.onnx.ml": 3},
                           options={id(model): {"zipmap": False}}).SerializeToString()


def _matrix_model(df):
    """StandardScaler + LogisticRegression over one [N, 3] float input."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x = df[["age", "income", "visits"]].to_numpy(np.float32)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, df["income"] > 3000)
    return convert_sklearn(model, initial_types=[("X", FloatTensorType([None, 3]))],
                           target_opset={"": 17, "ai.onnx.ml": 3},
                           options={id(model): {"zipmap": False}}).SerializeToString()


def _same_outputs(data, feeds):
    got = onnxjit.InferenceSession(data).run(None, feeds)
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_an_input_per_column():
    df = _frame()
    data = _per_column_model(df)
    feeds = feeds_from_dataframe(onnxjit.InferenceSession(data), df)
    assert {k: (v.dtype, v.shape) for k, v in feeds.items()} == {
        "city": (np.dtype(object), (40, 1)), "age": (np.dtype(np.float32), (40, 1)),
        "income": (np.dtype(np.float32), (40, 1)), "visits": (np.dtype(np.int64), (40, 1))}
    _same_outputs(data, feeds)
    # an onnxruntime session's inputs describe the same feeds
    ort_feeds = feeds_from_dataframe(onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]), df)
    assert all(np.array_equal(ort_feeds[k], feeds[k]) for k in feeds)


def test_one_input_from_several_columns():
    df = _frame()
    data = _matrix_model(df)
    sess = onnxjit.InferenceSession(data)
    named = feeds_from_dataframe(sess, df, columns={"X": ["age", "income", "visits"]})
    assert named["X"].dtype == np.float32 and named["X"].shape == (40, 3)
    np.testing.assert_array_equal(named["X"], df[["age", "income", "visits"]].to_numpy(np.float32))
    _same_outputs(data, named)
    # the model's only input, no column of its name: the frame's columns in order (here too many: city)
    with pytest.raises(onnxjit.InvalidArgument, match=r"'X' is \[N, 3\] but 4 columns make it"):
        feeds_from_dataframe(sess, df)
    assert np.array_equal(feeds_from_dataframe(sess, df.drop(columns="city"))["X"], named["X"])


def test_errors_name_the_column_and_the_input():
    df = _frame()
    sess = onnxjit.InferenceSession(_per_column_model(df))
    with pytest.raises(onnxjit.InvalidArgument, match=r"no column named \['visits'\].*columns="):
        feeds_from_dataframe(sess, df.drop(columns="visits").assign(other=1))
    with pytest.raises(onnxjit.InvalidArgument, match=r"column 'city' holds .* input 'age' takes tensor\(float\)"):
        feeds_from_dataframe(sess, df, columns={"age": ["city"]})
    with pytest.raises(onnxjit.InvalidArgument, match=r"column 'age' has 40 value\(s\) that are not strings.*'city'"):
        feeds_from_dataframe(sess, df, columns={"city": ["age"]})
    with pytest.raises(onnxjit.InvalidArgument, match=r"column 'visits' has missing values.*tensor\(int64\)"):
        feeds_from_dataframe(sess, df.assign(visits=df["visits"].where(df["visits"] > 2)))
    with pytest.raises(onnxjit.InvalidArgument, match=r"\['nope'\], which are not inputs"):
        feeds_from_dataframe(sess, df, columns={"nope": ["age"]})
