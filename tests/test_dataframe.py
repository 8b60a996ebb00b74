"""feeds_from_dataframe: a pandas DataFrame as a session's feeds, for an input per column or one [N, F] input;
the outputs match onnxruntime's on the same feeds, and each user error names the column and input."""
import numpy as np
import onnxruntime
import pytest

import onnxjit
from onnxjit import feeds_from_dataframe
from onnxjit.testing.tabular import customer_frame as _frame
from onnxjit.testing.tabular import matrix_model as _matrix_model
from onnxjit.testing.tabular import per_column_model as _per_column_model


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
