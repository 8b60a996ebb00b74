"""ai.onnx.ml encoders and map ops on the CPU provider: OneHotEncoder, LabelEncoder (1, 2 and 4: every key and
value type, the keys_tensor / values_tensor / default_tensor forms), CategoryMapper, DictVectorizer, CastMap and
ZipMap.

Numeric lookups are one Numba pass (onnxjit.kernels.ml_preprocess: a binary search per element over the sorted
keys, giving a position that numpy's take turns into the value); string keys go through a Python dict, which is
the fastest lookup Python has for str objects (a Numba kernel would first have to copy every string out of its
object array), and maps (Python dicts in, lists of dicts out) are Python data structures anyway, so DictVectorizer,
CastMap and ZipMap are plain Python/numpy code.

Semantics are onnxruntime 1.32's (onehotencoder.cc, label_encoder.h/.cc, category_mapper.h, dictvectorizer.h,
cast_map.cc, zipmap.cc):
  - OneHotEncoder: numeric inputs are truncated to int64 and looked up among cats_int64s, strings among
    cats_strings; an unknown value gives a row of zeros, or an error when zeros=0; output float32, the input's
    shape plus the category axis;
  - LabelEncoder-1: classes_strings, a string's index (int64) or an index's string; 2 and 4: keys_* -> values_*,
    the first of duplicate keys wins; float keys: NaN never matches in opset 2, NaN matches a NaN key in opset 4
    (onnxruntime hashes NaN as one value there); defaults as onnxruntime 1.32 picks them (default_tensor, else
    default_<type>, else -1, '_Unused' or -0.0, whatever the keys; double values ignore default_float and int16
    / int32 values default_int64: only default_tensor sets those);
  - CategoryMapper: cats_strings[i] <-> cats_int64s[i], the last of duplicates wins;
  - DictVectorizer: one map -> a [1, len(vocabulary)] row of its value type, zero (or '') where a key is absent;
  - CastMap: the values of a map(int64, string|float) in key order (DENSE) or at their key's position up to
    max_map (SPARSE; missing ones 0, or '0.f' for strings), cast as C++ does (stof/stoll on strings: leading
    spaces, the longest numeric prefix, hexadecimal floats for stof; '%f' for floats to strings, truncation for
    floats to int64);
  - ZipMap: a list of one {label: float} dict per row, its keys in sorted order (onnxruntime's std::map; the
    last of duplicate labels keeps its score).

LabelEncoder refuses (onnxjit.Fail) more than one keys_* or values_* attribute, as ONNX's type inference does in
onnxruntime. Where onnxruntime registers fewer types than the spec, onnxjit takes the spec's: OneHotEncoder on
int32, LabelEncoder-4 values of int32 and int16 from any key type (onnxruntime: int16 from strings only).
Malformed attributes raise onnxjit.Fail naming the node at session creation; bad inputs (an unknown category
with zeros = 0, a negative SPARSE key, a string stof/stoll cannot read) onnxjit.InvalidArgument when it runs.
"""
from __future__ import annotations

import gc
import re

import numpy as np

from onnxjit.errors import InvalidArgument
from onnxjit.ir.types import TensorType
from onnxjit.kernels import ml_preprocess as k
from onnx import TensorProto as T

from onnxjit.ops.ml_common import (DOMAIN, ELEM_DTYPES, Attrs, bad_input, checked_tensor, declare_outputs, describe,
                                   elem_of, map_type, output_elem, tensor_dtype)
from onnxjit.ops.indexing import build_gather
from onnxjit.ops.nn import constant_input, ro
from onnxjit.ops.registry import attr, register_chain, register_concat_of, register_op

_I64, _F32, _F64 = np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64)
_STR = np.dtype(object)
_ONEHOT_TYPES = frozenset({_STR, _I64, np.dtype(np.int32), _F32, _F64})
_STR_OR_I64 = frozenset({_STR, _I64})
_STR_ONLY = frozenset({_STR})
_F32_ONLY = frozenset({_F32})


class _Missing(dict):
    """A dict whose lookups of absent keys give `default`: `map(d.__getitem__, xs)` then runs at C speed."""

    def __init__(self, items, default):
        super().__init__(items)
        self.default = default

    def __missing__(self, key):
        return self.default


def _strings_of(x: np.ndarray) -> list:
    return x.reshape(-1).tolist()


def _map_strings(node, x, table: _Missing, out_dtype) -> np.ndarray:
    """table[s] for each string of x, as an array of out_dtype with x's shape."""
    flat = _strings_of(x)
    if out_dtype == _STR:
        out = np.empty(len(flat), dtype=object)
        out[:] = list(map(table.__getitem__, flat))
    else:
        out = np.fromiter(map(table.__getitem__, flat), dtype=out_dtype, count=len(flat))
    return out.reshape(x.shape)


class _NumericTable:
    """Numeric keys -> values through sorted keys: `lookup` gives each element's position (len(keys) when absent,
    len(keys) + 1 for NaN when NaN is a key) and `values` has the default and the NaN value appended."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default, nan_matches: bool):
        keys = np.asarray(keys).reshape(-1)
        values = np.asarray(values).reshape(-1)
        nan_value = default
        has_nan = False
        if keys.dtype.kind == "f":
            nan = np.isnan(keys)
            if nan.any():
                if nan_matches:
                    has_nan, nan_value = True, values[int(np.argmax(nan))]
                keys, values = keys[~nan], values[~nan]
        uniq, first = np.unique(keys, return_index=True)  # stable: the first of equal keys (-0.0 == 0.0 too)
        self.keys = ro(uniq)
        tail = np.empty(2, dtype=values.dtype)
        tail[0], tail[1] = default, nan_value
        self.values = np.concatenate([values[first], tail])
        self.nan_at = uniq.size + 1 if has_nan else uniq.size

    def __call__(self, x: np.ndarray) -> np.ndarray:
        pos = np.empty(x.size, np.int64)
        k.lookup(self.keys, ro(x.reshape(-1)), self.nan_at, pos)
        return self.values[pos].reshape(x.shape)


# --- OneHotEncoder ---------------------------------------------------------------------------------------------
# strings one-hot encoded by a Python loop up to this many (the array form's numpy calls cost ~5 us at batch 1)
ONE_HOT_LOOP_MAX = 16


class _OneHot:
    """A OneHotEncoder node's categories, checked: `into` sets the ones of an input's values in columns of an
    output, so one encoder fills its own output and a ColumnTransformer's several fill one concatenated output."""

    def __init__(self, node):
        a = Attrs(node)
        cats_i, cats_s = a.ints("cats_int64s"), a.strings("cats_strings")
        if cats_i.size and cats_s:
            a.fail("cats_int64s and cats_strings cannot both be set")
        if not cats_i.size and not cats_s:
            a.fail("one of cats_int64s, cats_strings is required")
        self.node = node
        self.zeros = int(a.get("zeros", 1)) != 0
        self.n_cats = cats_i.size or len(cats_s)
        # the last of duplicate categories names the column, as onnxruntime's map assignment leaves it
        by_int = {int(c): i for i, c in enumerate(cats_i)}
        self.by_str = _Missing({s: i for i, s in enumerate(cats_s)}, -1)
        self.int_keys = ro(np.array(sorted(by_int), np.int64))
        self.int_cols = ro(np.array([by_int[c] for c in sorted(by_int)], np.int64))
        declare_outputs(node, T.FLOAT)

    def unknown(self, x, i):
        v = x.reshape(-1)[i]
        v = v.item() if isinstance(v, np.generic) else v
        raise InvalidArgument(f"{self.node.label}: input 0 value {v!r} (flat index {i}) is no category and "
                              f"zeros = 0")

    def checked(self, x):
        x = checked_tensor(self.node, x, _ONEHOT_TYPES)
        if x.ndim > 2:
            bad_input(self.node, 0, "of rank <= 2", describe(x))
        return x

    def into(self, x, out, offset: int) -> None:
        """out[i, offset + category of x's i-th value] = 1 (out float32 (x.size, *) of zeros, C-contiguous)."""
        if x.dtype == _STR and x.size <= ONE_HOT_LOOP_MAX:  # a few rows (online scoring): a plain loop
            by_str = self.by_str
            for i, s in enumerate(_strings_of(x)):
                c = by_str[s]
                if c >= 0:
                    out[i, offset + c] = 1.0
                elif not self.zeros:
                    self.unknown(x, i)
        elif x.dtype == _STR:
            cols = np.fromiter(map(self.by_str.__getitem__, _strings_of(x)), np.int64, count=x.size)
            hit = cols >= 0
            if not self.zeros and not hit.all():
                self.unknown(x, int(np.argmin(hit)))
            out[np.flatnonzero(hit), offset + cols[hit]] = 1.0
        else:
            whole = offset == 0 and out.shape[1] == self.n_cats
            block = out if whole else np.zeros((x.size, self.n_cats), np.float32)
            missing = k.one_hot(self.int_keys, self.int_cols, ro(x.reshape(-1).astype(np.int64)), block)
            if missing >= 0 and not self.zeros:
                self.unknown(x, missing)
            if not whole:
                out[:, offset:offset + self.n_cats] = block


@register_op("OneHotEncoder", since=1, domain=DOMAIN)
def build_one_hot_encoder(node):
    encoder = _OneHot(node)

    def run(x):
        x = encoder.checked(x)
        out = np.zeros((x.size, encoder.n_cats), np.float32)
        encoder.into(x, out, 0)
        return (out.reshape(x.shape + (encoder.n_cats,)),)
    return run


def _column_of(gather):
    """The column a Gather takes from a 2-D input (one constant index, axis 1), or None."""
    idx = constant_input(gather, 1)
    if len(gather.inputs) != 2 or idx is None or idx.size != 1 or int(attr(gather, "axis", 0)) not in (1, -1):
        return None
    return idx, int(idx.reshape(-1)[0])


@register_chain("Gather", ("ai.onnx.ml", "OneHotEncoder"))
def build_column_one_hot(gather, encoder):
    """A Gather of one constant column of a 2-D input (axis 1) whose only reader is a OneHotEncoder, as skl2onnx
    writes a ColumnTransformer's categorical columns, in one step: the encoder reads the column's view. At batch 1
    the Gather's own step cost ~1.3 us, as much as the encoding."""
    found = _column_of(gather)
    gather_alone, encode = build_gather(gather), build_one_hot_encoder(encoder)
    if found is None or gather_alone is None or encode is None:
        return None
    idx, column = found

    def run(data, indices):
        if type(data) is np.ndarray and data.ndim == 2 and -data.shape[1] <= column < data.shape[1] \
                and indices is idx:
            return encode(data[:, column].reshape((data.shape[0],) + idx.shape))
        return encode(gather_alone(data, indices)[0])
    return run


@register_concat_of("Gather", ("ai.onnx.ml", "OneHotEncoder"))
def build_concatenated_one_hots(concat, chains):
    """A Concat along the last axis of column one-hots (build_column_one_hot) of one 2-D input, each read by the
    Concat alone: the OneHotEncoder over several categorical columns that skl2onnx writes for a ColumnTransformer,
    as one step writing each column's ones straight into the concatenated output (at batch 1 a step per column
    and the Concat's cost ~1.8 us each). Its inputs are the chains' steps' inputs, (data, index) per column."""
    columns, offset = [], 0
    for gather, encoder in chains:
        found = _column_of(gather)
        if found is None or gather.inputs[0] is not chains[0][0].inputs[0] or (
                columns and found[0].shape != columns[0][0].shape):  # one input, one index shape
            return None
        one_hot = _OneHot(encoder)
        columns.append((found[0], found[1], one_hot, offset))
        offset += one_hot.n_cats
    index_shape = columns[0][0].shape  # each one-hot is (N, *index_shape, categories)
    axis = int(attr(concat, "axis", 0))
    if axis not in (-1, len(index_shape) + 1):
        return None
    each = [build_column_one_hot(*chain) for chain in chains]
    width = offset

    def run(*args):
        data = args[0]
        if type(data) is not np.ndarray or data.ndim != 2 or any(
                args[2 * j] is not data or args[2 * j + 1] is not idx or not -data.shape[1] <= column < data.shape[1]
                for j, (idx, column, _, _) in enumerate(columns)):
            return (np.concatenate([f(*args[2 * j:2 * j + 2])[0] for j, f in enumerate(each)], axis=axis),)
        data = columns[0][2].checked(data)
        n = data.shape[0]
        out = np.zeros((n, width), np.float32)
        if data.dtype == _STR and n <= ONE_HOT_LOOP_MAX:  # a few rows: one loop over them, every column
            for r, row in enumerate(data.tolist()):
                for _, column, one_hot, at in columns:
                    c = one_hot.by_str[row[column]]
                    if c >= 0:
                        out[r, at + c] = 1.0
                    elif not one_hot.zeros:
                        one_hot.unknown(data[:, column], r)
        else:
            for _, column, one_hot, at in columns:
                one_hot.into(data[:, column], out, at)
        return (out.reshape((n,) + index_shape + (width,)),)
    return run


# --- LabelEncoder ----------------------------------------------------------------------------------------------
_KEY_ATTRS = {_I64: "keys_int64s", _F32: "keys_floats", _STR: "keys_strings"}
_VALUE_ATTRS = {_I64: "values_int64s", _F32: "values_floats", _STR: "values_strings"}
_ATTR_DTYPES = {"int64s": _I64, "floats": _F32, "strings": _STR}
_DEFAULT_ATTRS = {_I64: "default_int64", _F32: "default_float", _F64: "default_float", _STR: "default_string"}


def _list_or_tensor(a: Attrs, prefix: str, dtype):
    """The keys/values list attribute of `dtype`'s kind, else the `<prefix>_tensor` one, as an array of dtype."""
    name = f"{prefix}_{ {_I64: 'int64s', _F32: 'floats', _STR: 'strings'}.get(dtype, '') }"
    if a.has(name):
        v = a.get(name)
    elif a.has(f"{prefix}_tensor"):
        v = a.get(f"{prefix}_tensor").reshape(-1)
    else:
        return None
    return np.array(list(v), dtype=object) if dtype == _STR else np.asarray(v).astype(dtype)


def _value_dtype(node, a: Attrs):
    """The value type: the declared output type, else the values attribute that is set."""
    elem = output_elem(node)
    if elem is not None and elem in ELEM_DTYPES:
        return ELEM_DTYPES[elem]
    for suffix, dtype in _ATTR_DTYPES.items():
        if a.has(f"values_{suffix}"):
            return dtype
    if a.has("values_tensor"):
        v = a.get("values_tensor")
        return _STR if v.dtype == object else v.dtype
    return None


def _default(a: Attrs, opset: int, value_dtype):
    """onnxruntime 1.32's default for this value type: default_tensor (opset 4), else default_<type>, else -1,
    '_Unused' or -0.0. Double values read no default_float and int16/int32 values no default_int64 (onnxruntime
    asks for an attribute of the value's own type, which these cannot be), so only default_tensor sets theirs."""
    if opset >= 4 and a.has("default_tensor"):
        v = a.get("default_tensor").reshape(-1)
        return v[0] if value_dtype == _STR else value_dtype.type(v[0])
    if value_dtype == _STR:
        return a.get("default_string", "_Unused")
    if value_dtype == _I64:
        return value_dtype.type(a.get("default_int64", -1))
    if value_dtype.kind == "i":
        return value_dtype.type(-1)
    if value_dtype == _F64:
        return value_dtype.type(-0.0)
    return value_dtype.type(a.get("default_float", -0.0))


def _string_int_output(node):
    """LabelEncoder-1 and CategoryMapper map strings to int64 and int64 to strings."""
    dtype = tensor_dtype(node)
    if dtype is not None:
        declare_outputs(node, T.INT64 if dtype == _STR else T.STRING)


def _string_int_map(node, a: Attrs, strings, ints):
    """LabelEncoder-1's and CategoryMapper's run: strings[i] <-> ints[i] (the last of duplicates wins), the
    direction given by the input's type, unknown keys to default_int64 / default_string."""
    _string_int_output(node)
    to_int = _Missing(zip(strings, ints), int(a.get("default_int64", -1)))
    to_str = _Missing(zip(ints, strings), a.get("default_string", "_Unused"))

    def run(x):
        x = checked_tensor(node, x, _STR_OR_I64, what="a string or int64 tensor")
        if x.dtype == _STR:
            return (_map_strings(node, x, to_int, _I64),)
        return (_map_strings(node, x, to_str, _STR),)
    return run


def _build_label_encoder_1(node, a: Attrs):
    classes = a.strings("classes_strings")
    return _string_int_map(node, a, classes, range(len(classes)))


def _build_label_encoder(node):
    a = Attrs(node)
    opset = node.opset
    if opset < 2:
        return _build_label_encoder_1(node, a)
    key_dtype = tensor_dtype(node)
    value_dtype = _value_dtype(node, a)
    if key_dtype is None or value_dtype is None:
        return None  # types decided at run time only: the next provider reads them then
    for prefix in ("keys", "values"):  # as ONNX's type inference (and so onnxruntime) checks
        given = [f"{prefix}_{s}" for s in ("strings", "int64s", "floats", "tensor") if a.has(f"{prefix}_{s}")]
        if len(given) > 1:
            a.fail(f"one and only one of {', '.join(given)} may be set")
    keys = _list_or_tensor(a, "keys", key_dtype)
    values = _list_or_tensor(a, "values", value_dtype)
    if keys is None:
        a.fail(f"no keys for {key_dtype if key_dtype != _STR else 'string'} input: keys_* or keys_tensor is "
               f"required")
    if values is None:
        a.fail("no values: values_* or values_tensor is required")
    if keys.size != values.size:
        a.fail(f"keys ({keys.size}) and values ({values.size}) must have the same length")
    default = _default(a, opset, value_dtype)
    declare_outputs(node, elem_of(value_dtype))
    nan_matches = opset >= 4

    if key_dtype == _STR:
        table = _Missing({}, default)
        for key, value in zip(keys.tolist(), values.tolist()):
            table.setdefault(key, value)  # the first of duplicates wins (onnxruntime's emplace)

        def run_strings(x):
            x = checked_tensor(node, x, _STR_ONLY)
            return (_map_strings(node, x, table, value_dtype),)
        return run_strings

    numeric = _NumericTable(keys, values.astype(value_dtype) if value_dtype != _STR else values, default,
                            nan_matches)

    key_types = frozenset({key_dtype})

    def run(x):
        x = checked_tensor(node, x, key_types)
        return (numeric(x),)
    return run


for _v in (1, 2, 4):
    register_op("LabelEncoder", since=_v, domain=DOMAIN)(_build_label_encoder)


# --- CategoryMapper --------------------------------------------------------------------------------------------
@register_op("CategoryMapper", since=1, domain=DOMAIN)
def build_category_mapper(node):
    a = Attrs(node)
    strings, ints = a.strings("cats_strings"), a.ints("cats_int64s")
    if len(strings) != ints.size:
        a.fail(f"cats_strings ({len(strings)}) and cats_int64s ({ints.size}) must have the same length")
    return _string_int_map(node, a, strings, ints.tolist())


# --- DictVectorizer --------------------------------------------------------------------------------------------
def _map_value_dtype(node):
    elem = output_elem(node)
    if elem in ELEM_DTYPES:
        return ELEM_DTYPES[elem]
    t = map_type(node)
    if t is not None and isinstance(t.value, TensorType) and t.value.elem_type in ELEM_DTYPES:
        return ELEM_DTYPES[t.value.elem_type]
    return None


@register_op("DictVectorizer", since=1, domain=DOMAIN)
def build_dict_vectorizer(node):
    a = Attrs(node)
    ints, strings = a.ints("int64_vocabulary"), a.strings("string_vocabulary")
    if ints.size and strings:
        a.fail("int64_vocabulary and string_vocabulary cannot both be set")
    vocab = ints.tolist() if ints.size else strings
    dtype = _map_value_dtype(node)
    if dtype is None:
        return None
    zero = "" if dtype == _STR else dtype.type(0)
    declare_outputs(node, elem_of(dtype))
    key_kind = (int,) if ints.size else (str,)
    position = {key: i for i, key in enumerate(vocab)}
    unique = len(position) == len(vocab)

    def run(m):
        if not isinstance(m, dict):
            bad_input(node, 0, f"a map ({'int64' if ints.size else 'string'} keys)", describe(m))
        if m and not isinstance(next(iter(m)), key_kind + ((np.integer,) if ints.size else ())):
            bad_input(node, 0, f"a map with {'int64' if ints.size else 'string'} keys",
                      f"a {type(next(iter(m))).__name__} key")
        if dtype == _STR or not unique:
            out = np.empty((1, len(vocab)), dtype=object if dtype == _STR else dtype)
            out[0, :] = [m.get(key, zero) for key in vocab]
            return (out,)
        # the map's entries written into a row of zeros: a map has few of a vocabulary's keys (10 of 50: 0.8 us,
        # a list over the vocabulary 3 us)
        out = np.zeros((1, len(vocab)), dtype=dtype)
        row = out[0]
        for key, v in m.items():
            i = position.get(key)
            if i is not None:
                row[i] = v
        return (out,)
    return run


# --- CastMap ---------------------------------------------------------------------------------------------------
_FLOAT_PREFIX = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")


_HEX_PREFIX = re.compile(r"\s*([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?)")


def _stof(node, s: str) -> np.float32:
    m = _HEX_PREFIX.match(s)  # strtof reads hexadecimal floats too
    if m is not None:
        return np.float32(float.fromhex(m.group(1) + "0x" + m.group(2)))
    m = _FLOAT_PREFIX.match(s)
    if m is None:
        raise InvalidArgument(f"{node.label}: map value {s!r} is not a number (std::stof)")
    return np.float32(float(m.group().strip()))


def _stoll(node, s: str) -> np.int64:
    m = _INT_PREFIX.match(s)
    if m is None:
        raise InvalidArgument(f"{node.label}: map value {s!r} is not an integer (std::stoll)")
    return np.int64(int(m.group()))


@register_op("CastMap", since=1, domain=DOMAIN)
def build_cast_map(node):
    a = Attrs(node)
    cast_to, form = a.get("cast_to", "TO_FLOAT"), a.get("map_form", "DENSE")
    if cast_to not in ("TO_FLOAT", "TO_INT64", "TO_STRING"):
        a.fail(f"unknown cast_to {cast_to!r} (expected TO_FLOAT, TO_STRING or TO_INT64)")
    if form not in ("DENSE", "SPARSE"):
        a.fail(f"unknown map_form {form!r} (expected DENSE or SPARSE)")
    max_map = int(a.get("max_map", 1))
    dtype = {"TO_FLOAT": _F32, "TO_INT64": _I64, "TO_STRING": _STR}[cast_to]
    pad = {"TO_FLOAT": np.float32(0), "TO_INT64": np.int64(0), "TO_STRING": "0.f"}[cast_to]
    declare_outputs(node, elem_of(dtype))

    def cast(v):
        if isinstance(v, str):
            if dtype == _STR:
                return v
            return _stof(node, v) if dtype == _F32 else _stoll(node, v)
        v = np.float32(v)
        if dtype == _STR:
            return "%f" % v  # std::to_string(float)
        return v if dtype == _F32 else np.int64(int(v))

    def run(m):
        if not isinstance(m, dict):
            bad_input(node, 0, "a map(int64, string) or map(int64, float)", describe(m))
        keys = sorted(m)
        if form == "DENSE":
            row = [cast(m[key]) for key in keys]
        else:
            if keys and keys[0] < 0:
                raise InvalidArgument(f"{node.label}: negative map key {keys[0]}; SPARSE needs keys >= 0")
            row = [pad] * max_map
            for key in keys:
                if key < max_map:
                    row[key] = cast(m[key])
        out = np.empty((1, len(row)), dtype=dtype)
        out[0, :] = row
        return (out,)
    return run


# --- ZipMap ----------------------------------------------------------------------------------------------------
ZIPMAP_UNROLLED_MAX = 64  # up to this many labels a row's dict is built by one generated function


def _row_dict_maker(labels):
    """f(v0, v1, ...) -> {label0: v0, label1: v1, ...}: a dict display, a third faster than dict(zip(...)) over
    10,000 rows. The labels are bound as names (k0, k1, ...): no label text enters the source."""
    if len(labels) > ZIPMAP_UNROLLED_MAX:
        return lambda *values: dict(zip(labels, values))
    names = {f"k{i}": label for i, label in enumerate(labels)}
    params = ", ".join(f"v{i}" for i in range(len(labels)))
    body = ", ".join(f"k{i}: v{i}" for i in range(len(labels)))
    return eval(f"lambda {params}: {{{body}}}", names)  # noqa: S307 - source made of generated names only


@register_op("ZipMap", since=1, domain=DOMAIN)
def build_zip_map(node):
    a = Attrs(node)
    strings, ints = a.strings("classlabels_strings"), a.ints("classlabels_int64s")
    if bool(strings) == bool(ints.size):
        a.fail("exactly one of classlabels_strings and classlabels_int64s must be given")
    labels = strings or ints.tolist()
    # onnxruntime fills a std::map: keys in sorted order, the last of duplicate labels keeping its score
    last = {label: i for i, label in enumerate(labels)}
    keys = sorted(last)
    cols = [last[key] for key in keys]
    take = None if cols == list(range(len(labels))) else np.array(cols, np.int64)
    make_row = _row_dict_maker(keys)
    width = len(labels)

    def zip_rows(scores):
        """The dicts of float32 scores (N, width)."""
        if take is not None:
            scores = scores[:, take]
        if scores.shape[0] <= 64:  # a few dicts: no collection to fear (the switch costs as much as the rows)
            return (list(map(make_row, *scores.T.tolist())),)
        # the cyclic GC would scan the whole heap several times while 10,000 dicts are made (and before, while
        # per-row lists were: 16 ms instead of 2.3 for 10,000 rows of 2 classes in a scikit-learn process); none
        # of them can be in a cycle. The scores go over as one list of floats per column (floats are not tracked
        # by the GC), zipped back into rows by map.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return (list(map(make_row, *scores.T.tolist())),)
        finally:
            if enabled:
                gc.enable()

    def run(x):
        if type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 2 and x.shape[1] == width:
            return zip_rows(x)  # (a classifier's scores, as they come)
        x = checked_tensor(node, x, _F32_ONLY)
        if x.ndim not in (1, 2):
            bad_input(node, 0, "of rank 1 or 2", describe(x))
        if x.shape[-1] != width:
            bad_input(node, 0, f"[N, {width}] (one column per class label)", describe(x))
        return zip_rows(x.reshape(-1, width))
    return run
