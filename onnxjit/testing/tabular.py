"""Tabular models the tests and benchmarks share: a customer DataFrame and scikit-learn pipelines exported with
skl2onnx over it (feeds_from_dataframe, onnxjit.dask, benchmarks/dask_scoring.py)."""
import numpy as np
import pandas as pd


def customer_frame(rows=40, seed=0):
    """A customer table: a string column (city), float and integer columns."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"city": rng.choice(["paris", "lyon", "nice"], rows),
                         "age": rng.integers(18, 80, rows).astype(np.float64),
                         "income": rng.standard_normal(rows) * 1000 + 3000,
                         "visits": rng.integers(0, 9, rows)})


def per_column_model(df):
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


def matrix_model(df):
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
