"""Feeds for a session from a pandas DataFrame: `feeds_from_dataframe(session, df)`.

Exported scikit-learn pipelines name their inputs one of two ways: an input per column ([N, 1] tensors named
after the columns, as skl2onnx writes for a ColumnTransformer given `initial_types` per column), or one [N, F]
input holding several columns. Each input is filled from the column of its name when there is one; otherwise from
the columns `columns[name]` lists, in that order, or, for a model with a single input, from every column of the
frame in order. Values are converted to the input's element type; a string input takes string
columns only (numbers are not turned into text behind the caller's back).

Only the session's public API (`get_inputs()`: name, type, shape) and the frame's `columns` and
`__getitem__(name).to_numpy()` are used: pandas is not imported here, and an onnxruntime session works the same.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from onnxjit.errors import InvalidArgument

# NodeArg.type spellings of the tensor element types a column can fill
_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
           "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
           "tensor(uint64)": np.uint64, "tensor(uint32)": np.uint32, "tensor(uint16)": np.uint16,
           "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(string)": object}


def feeds_from_dataframe(session: Any, df: Any, columns: dict[str, list[str]] | None = None) -> dict[str, np.ndarray]:
    """The feeds of `session` from the DataFrame `df` (see the module docstring); `columns` maps an input name to
    the columns that make it, in order. InvalidArgument names a missing column, a column whose values do not
    convert to its input's type, and an input whose width the columns do not match."""
    columns = dict(columns or {})
    names = [str(c) for c in df.columns]
    inputs = list(session.get_inputs())
    unknown = sorted(set(columns) - {i.name for i in inputs})
    if unknown:
        raise InvalidArgument(f"columns= names {unknown}, which are not inputs of the model; its inputs: "
                              f"{[i.name for i in inputs]}")
    chosen: dict[str, list[str]] = {}
    for inp in inputs:
        if inp.name in columns:
            chosen[inp.name] = list(columns[inp.name])
        elif inp.name in names:
            chosen[inp.name] = [inp.name]
    left = [i for i in inputs if i.name not in chosen]
    if len(inputs) == 1 and left:  # the model's only input: every column, in order
        chosen[left[0].name] = names
    elif left:  # (never guessed: with other inputs, a column missing from the frame is a mistake to report)
        raise InvalidArgument(f"no column named {[i.name for i in left]} in the frame (columns {names}); name the "
                              f"columns that make each of these inputs with columns={{input: [column, ...]}}")
    feeds = {}
    for inp in inputs:
        feeds[inp.name] = _input_from_columns(inp, df, chosen[inp.name], names)
    return feeds


def _input_from_columns(inp: Any, df: Any, cols: list[str], names: list[str]) -> np.ndarray:
    dtype = _DTYPES.get(inp.type)
    if dtype is None:
        raise InvalidArgument(f"input {inp.name!r} is {inp.type}: a DataFrame fills tensor inputs only")
    missing = [c for c in cols if c not in names]
    if missing or not cols:
        raise InvalidArgument(f"input {inp.name!r} needs columns {cols}; the frame has no column {missing} (its "
                              f"columns: {names})")
    shape = list(inp.shape or [])
    width = shape[1] if len(shape) == 2 else None
    if isinstance(width, int) and width >= 0 and width != len(cols):
        raise InvalidArgument(f"input {inp.name!r} is [N, {width}] but {len(cols)} columns make it: {cols}")
    if len(shape) == 1 and len(cols) != 1:
        raise InvalidArgument(f"input {inp.name!r} is 1-D ([N]) but {len(cols)} columns make it: {cols}")
    parts = [_column(inp, c, df[c].to_numpy(), dtype) for c in cols]
    return parts[0] if len(shape) == 1 else np.stack(parts, axis=1)


def _column(inp: Any, name: str, values: np.ndarray, dtype: Any) -> np.ndarray:
    """One column as the input's element type, or InvalidArgument naming both."""
    if dtype is object:
        bad = [v for v in values if not isinstance(v, str)]
        if bad:
            raise InvalidArgument(f"column {name!r} has {len(bad)} value(s) that are not strings (the first: "
                                  f"{bad[0]!r}); input {inp.name!r} takes strings ({inp.type})")
        return values.astype(object)
    if values.dtype == object or values.dtype.kind in "USM":
        raise InvalidArgument(f"column {name!r} holds {values.dtype} values; input {inp.name!r} takes {inp.type}")
    if np.dtype(dtype).kind in "iub" and values.dtype.kind == "f":
        if np.isnan(values).any():
            raise InvalidArgument(f"column {name!r} has missing values (NaN); input {inp.name!r} takes {inp.type}")
        if (values != np.round(values)).any():
            raise InvalidArgument(f"column {name!r} has fractional values; input {inp.name!r} takes {inp.type}")
    return values.astype(dtype)
