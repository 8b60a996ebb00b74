"""ai.onnx.ml encoders and map ops (OneHotEncoder, LabelEncoder 1/2/4, CategoryMapper, DictVectorizer, CastMap,
ZipMap) on the CPU provider against onnxruntime: every key/value type pair onnxruntime registers, in the list and
the *_tensor attribute forms, the defaults it picks per pair, NaN and -0.0 keys, duplicates, map inputs, ZipMap's
list of dicts, the errors, and a real skl2onnx ColumnTransformer export. Sessions run with the fallback provider
disabled (`native_session` asserts every step ran on the CPU provider).

Pairs the spec allows but onnxruntime registers no kernel for (OneHotEncoder on int32, LabelEncoder-4 values of
int32, float keys to int16) are compared with onnx.reference instead."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnxjit

from conftest import assert_all_same, native_session, ort_run, ref_run

_ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int64): T.INT64,
         np.dtype(np.int32): T.INT32, np.dtype(np.int16): T.INT16, np.dtype(object): T.STRING}
NAN = float("nan")


def ml_model(op, attrs, x_type, y_type, ml_opset=3):
    """One ai.onnx.ml node named 'ml' from input X to output Y; types are elem types or TypeProtos."""
    def value(name, t):
        if isinstance(t, int):
            return helper.make_tensor_value_info(name, t, None)
        return helper.make_value_info(name, t)
    node = helper.make_node(op, ["X"], ["Y"], domain="ai.onnx.ml", name="ml", **attrs)
    graph = helper.make_graph([node], "g", [value("X", x_type)], [value("Y", y_type)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8
    return model


def check(model, x, reference=False):
    got = native_session(model).run(None, {"X": x})
    want = ref_run(model, {"X": x}) if reference else ort_run(model, {"X": x})
    if reference:  # onnx.reference gives numpy unicode strings where onnxruntime gives objects
        want = [w.astype(object) if isinstance(w, np.ndarray) and w.dtype.kind == "U" else w for w in want]
    assert_all_same(got, want)
    for g, w in zip(got, want):  # -0.0 defaults: the sign too
        if isinstance(w, np.ndarray) and w.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
    return got


def strings(*values):
    return np.array(values, dtype=object)


def tensor_attr(values, dtype, name="t"):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


# --- OneHotEncoder ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
@pytest.mark.parametrize("rank", [1, 2])
def test_one_hot_encoder_numbers(dtype, rank):
    """Numbers are truncated to int64 and looked up among cats_int64s (the last of duplicate categories names the
    column); unknown values give zeros."""
    model = ml_model("OneHotEncoder", dict(cats_int64s=[3, 1, 7, -2, 1]), _ELEM[np.dtype(dtype)], T.FLOAT)
    x = np.array([[3, 1, 7, 5], [-2, 0, 1, 3], [7, 7, -3, 1]])
    if np.dtype(dtype).kind == "f":
        x = np.array([[3.7, 1.2, 7.0, 5.5], [-2.9, 0.4, 1.99, 3.0], [7.5, -0.5, -3.2, 1.0]])
    x = x.astype(dtype)
    check(model, x if rank == 2 else x[1])


def test_one_hot_encoder_int32_input():
    """int32 input: the spec allows it, onnxruntime registers no kernel (compared with onnx.reference)."""
    model = ml_model("OneHotEncoder", dict(cats_int64s=[3, 1, 7]), T.INT32, T.FLOAT)
    check(model, np.array([[3, 1, 5], [7, 0, 1]], np.int32), reference=True)


@pytest.mark.parametrize("rank", [1, 2])
def test_one_hot_encoder_strings(rank):
    model = ml_model("OneHotEncoder", dict(cats_strings=["red", "green", "blue", "red2"]), T.STRING, T.FLOAT)
    x = strings(["red", "blue", "pink"], ["green", "red2", ""])
    check(model, x if rank == 2 else x[0])
    check(model, strings())
    # input of the other kind than the categories: no category matches, all zeros
    check(ml_model("OneHotEncoder", dict(cats_strings=["1", "2"]), T.INT64, T.FLOAT), np.array([1, 2], np.int64))
    check(ml_model("OneHotEncoder", dict(cats_int64s=[1, 2]), T.STRING, T.FLOAT), strings("1", "2"))


def test_one_hot_encoder_strings_both_paths():
    """Up to ONE_HOT_LOOP_MAX strings are encoded by a Python loop, more by numpy: both match onnxruntime, and
    with zeros = 0 both name the first value that is no category."""
    from onnxjit.ops.ml_encoders import ONE_HOT_LOOP_MAX
    cats = ["red", "green", "blue"]
    rng = np.random.default_rng(0)
    for n in (1, ONE_HOT_LOOP_MAX, ONE_HOT_LOOP_MAX + 1, 3 * ONE_HOT_LOOP_MAX):
        x = np.array(rng.choice(cats + ["pink"], n), dtype=object)
        check(ml_model("OneHotEncoder", dict(cats_strings=cats), T.STRING, T.FLOAT), x)
        sess = native_session(ml_model("OneHotEncoder", dict(cats_strings=cats, zeros=0), T.STRING, T.FLOAT))
        x[:] = "red"
        x[n // 2] = "pink"
        with pytest.raises(onnxjit.InvalidArgument, match=rf"value 'pink' \(flat index {n // 2}\)"):
            sess.run(None, {"X": x})


def test_one_hot_encoder_errors():
    model = ml_model("OneHotEncoder", dict(cats_strings=["a", "b"], zeros=0), T.STRING, T.FLOAT)
    sess = native_session(model)
    check(model, strings(["a", "b"], ["b", "a"]))  # every value a category: runs
    with pytest.raises(onnxjit.InvalidArgument, match=r"OneHotEncoder \(node 'ml'.*value 'c' \(flat index 2\) is "
                                                      r"no category and zeros = 0"):
        sess.run(None, {"X": strings(["a", "b"], ["c", "a"])})
    with pytest.raises(Exception, match="Unknown Category"):
        ort_run(model, {"X": strings(["a", "b"], ["c", "a"])})
    sess = native_session(ml_model("OneHotEncoder", dict(cats_int64s=[1, 2], zeros=0), T.FLOAT, T.FLOAT))
    with pytest.raises(onnxjit.InvalidArgument, match=r"value 3.0 \(flat index 2\)"):
        sess.run(None, {"X": np.array([1.0, 2.5, 3.0], np.float32)})  # 2.5 truncates to 2: 3.0 is the unknown one
    with pytest.raises(onnxjit.InvalidArgument, match=r"OneHotEncoder \(node 'ml'.*input 0 \('X'\).*rank <= 2"):
        sess.run(None, {"X": np.ones((1, 1, 1), np.float32)})
    for attrs, match in [(dict(cats_int64s=[1], cats_strings=["a"]), "cannot both be set"),
                         (dict(zeros=1), "one of cats_int64s, cats_strings is required")]:
        with pytest.raises(onnxjit.Fail, match=rf"OneHotEncoder \(node 'ml'.*{match}"):
            native_session(ml_model("OneHotEncoder", attrs, T.INT64, T.FLOAT))


def _column_one_hots(x_elem, cats, index_shape=(1,), gathered_out=False):
    """skl2onnx's ColumnTransformer over categorical columns: per column j of X [N, C] a Gather (constant index j,
    axis 1) and a OneHotEncoder of its categories, then a Concat; with `gathered_out` the first Gather's output is
    a graph output too (so that pair cannot run as one step)."""
    nodes, inits, encoded = [], [], []
    for j, c in enumerate(cats):
        inits.append(numpy_helper.from_array(np.full(index_shape, j, np.int64), f"col{j}"))
        nodes.append(helper.make_node("Gather", ["X", f"col{j}"], [f"g{j}"], axis=1, name=f"gather{j}"))
        key = "cats_strings" if x_elem == T.STRING else "cats_int64s"
        nodes.append(helper.make_node("OneHotEncoder", [f"g{j}"], [f"h{j}"], domain="ai.onnx.ml", name=f"hot{j}",
                                      **{key: c}, zeros=1))
        encoded.append(f"h{j}")
    nodes.append(helper.make_node("Concat", encoded, ["Y"], axis=-1))
    outs = [helper.make_tensor_value_info("Y", T.FLOAT, None)]
    if gathered_out:
        outs.append(helper.make_tensor_value_info("g0", x_elem, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", x_elem, [None, len(cats)])], outs,
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kind", ["strings", "ints"])
@pytest.mark.parametrize("index_shape", [(1,), ()])
@pytest.mark.parametrize("rows", [1, 40])
def test_gather_of_a_column_then_one_hot_encoder_is_one_step(kind, index_shape, rows, rng):
    """Each column's Gather and OneHotEncoder run as one chain (the encoder moves up to its Gather, past the other
    columns' Gathers), and the chains with the Concat reading them as one step writing every column's ones into
    the concatenated output: outputs as onnxruntime's, and as with the first Gather apart (a step per column)."""
    if kind == "strings":
        cats = [["red", "green", "blue"], ["S", "M"], [f"town{i}" for i in range(12)]]
        x = np.array([[rng.choice(c + ["other"]) for c in cats] for _ in range(rows)], dtype=object)
        elem = T.STRING
    else:
        cats = [[3, 1, 7], [0, 5], list(range(12))]
        x = np.stack([rng.integers(-1, 13, rows) for _ in cats], axis=1).astype(np.int64)
        elem = T.INT64
    model = _column_one_hots(elem, cats, index_shape)
    steps = native_session(model)._compiled.steps
    assert [[n.op_type for n in s.nodes] for s in steps] == [["Gather", "OneHotEncoder"] * 3 + ["Concat"]]
    got = check(model, x)
    apart = native_session(_column_one_hots(elem, cats, index_shape, gathered_out=True))
    assert [n.op_type for n in apart._compiled.steps[0].nodes] == ["Gather"]
    assert [n.op_type for n in apart._compiled.steps[-1].nodes] == ["Concat"]
    np.testing.assert_array_equal(got[0], apart.run(None, {"X": x})[0])


@pytest.mark.parametrize("rows", [1, 40])
def test_concatenated_one_hots_refuse_an_unknown_category_without_zeros(rows):
    """A column encoder with zeros = 0 in the one step of the columns raises naming its node and the value."""
    cats = [["red", "green"], ["S", "M"]]
    model = _column_one_hots(T.STRING, cats)
    model.graph.node[3].attribute[-1].i = 0  # hot1: zeros = 0
    x = np.array([["red", "M"]] * rows, dtype=object)
    x[rows - 1, 1] = "XL"
    sess = native_session(model)
    assert len(sess._compiled.steps) == 1
    with pytest.raises(onnxjit.InvalidArgument, match=r"hot1.*'XL'.*zeros = 0"):
        sess.run(None, {"X": x})


# --- LabelEncoder ----------------------------------------------------------------------------------------------
def test_label_encoder_1():
    """classes_strings: a string's index (the last of duplicates), an index's string; default_* or -1/'_Unused'."""
    for attrs in (dict(classes_strings=["a", "b", "a", "c"]),
                  dict(classes_strings=["a", "b", "a", "c"], default_int64=42, default_string="none")):
        check(ml_model("LabelEncoder", attrs, T.STRING, T.INT64, 1), strings(["a", "b"], ["z", "c"]))
        check(ml_model("LabelEncoder", attrs, T.INT64, T.STRING, 1), np.array([0, 1, 2, 3, 4, -1], np.int64))


_KEYS = {"int64s": [5, -3, 5, 0, 12], "floats": [0.5, -0.0, NAN, 2.25, 0.5],
         "strings": ["x", "y", "x", "", "zz"]}
_VALUES = {"int64s": [1, 2, 3, 4, 5], "floats": [1.5, -2.5, 3.5, 4.5, 5.5], "strings": ["A", "B", "C", "D", "E"]}
_DTYPE = {"int64s": np.int64, "floats": np.float32, "strings": object}
_DEFAULT_ATTR = {"int64s": ("default_int64", 99), "floats": ("default_float", 9.5),
                 "strings": ("default_string", "none")}


def _inputs(kind):
    """Every key, misses, and for floats NaN, 0.0 and -0.0."""
    if kind == "int64s":
        return np.array([[5, -3, 0, 12], [7, 5, 1, -1]], np.int64)
    if kind == "floats":
        return np.array([[0.5, -0.0, 2.25, NAN], [0.0, 1.0, 0.25, -7.0]], np.float32)
    return strings(["x", "y", "", "zz"], ["X", "x ", "yy", "x"])


PAIRS = [(k, v) for k in ("int64s", "floats", "strings") for v in ("int64s", "floats", "strings")]


@pytest.mark.parametrize("ml_opset", [2, 3, 4])
@pytest.mark.parametrize("keys,values", PAIRS)
@pytest.mark.parametrize("default", [False, True])
def test_label_encoder_pairs(ml_opset, keys, values, default):
    """keys_<type> -> values_<type>: the first of duplicate keys wins; NaN keys never match in opset 2 and 3 and
    match NaN in opset 4; -0.0 and 0.0 are one key; a miss gives default_<type> or -1 / -0.0 / '_Unused'."""
    attrs = {f"keys_{keys}": _KEYS[keys], f"values_{values}": _VALUES[values]}
    if default:
        attrs[_DEFAULT_ATTR[values][0]] = _DEFAULT_ATTR[values][1]
    model = ml_model("LabelEncoder", attrs, _ELEM[np.dtype(_DTYPE[keys])], _ELEM[np.dtype(_DTYPE[values])], ml_opset)
    check(model, _inputs(keys))


@pytest.mark.parametrize("keys,values", PAIRS)
def test_label_encoder_4_tensor_attributes(keys, values):
    """keys_tensor / values_tensor / default_tensor (opset 4) in place of the lists and default_<type>."""
    attrs = dict(keys_tensor=tensor_attr(_KEYS[keys], _DTYPE[keys], "k"),
                 values_tensor=tensor_attr(_VALUES[values], _DTYPE[values], "v"),
                 default_tensor=tensor_attr([{"int64s": 77, "floats": 7.25, "strings": "dflt"}[values]],
                                            _DTYPE[values], "d"))
    model = ml_model("LabelEncoder", attrs, _ELEM[np.dtype(_DTYPE[keys])], _ELEM[np.dtype(_DTYPE[values])], 4)
    check(model, _inputs(keys))
    attrs[_DEFAULT_ATTR[values][0]] = _DEFAULT_ATTR[values][1]  # default_tensor wins over default_<type>
    check(ml_model("LabelEncoder", attrs, _ELEM[np.dtype(_DTYPE[keys])], _ELEM[np.dtype(_DTYPE[values])], 4),
          _inputs(keys))


@pytest.mark.parametrize("keys,values", [("doubles", "doubles"), ("doubles", "strings"), ("doubles", "int64s"),
                                         ("int64s", "doubles"), ("strings", "doubles"), ("strings", "int16s")])
@pytest.mark.parametrize("default", ["none", "attribute", "tensor"])
def test_label_encoder_4_double_and_int16(keys, values, default):
    """Doubles and int16 exist as *_tensor attributes only. Defaults: default_tensor, else -0.0 for doubles (their
    default_float is not read) and -1 for int16 (nor is default_int64)."""
    dtypes = dict(_DTYPE, doubles=np.float64, int16s=np.int16)
    key_values = _KEYS.get(keys, _KEYS["floats"])
    value_values = _VALUES.get(values, [1.5, -2.5, 3.5, 4.5, 5.5] if values == "doubles" else [1, 2, 3, 4, 5])
    attrs = {}
    attrs.update({f"keys_{keys}": key_values} if keys in _KEYS else {"keys_tensor": tensor_attr(key_values,
                                                                                                np.float64, "k")})
    attrs.update({f"values_{values}": value_values} if values in _VALUES else
                 {"values_tensor": tensor_attr(value_values, dtypes[values], "v")})
    if default == "attribute":
        attrs.update({"default_float": 9.5, "default_int64": 99, "default_string": "none"})
    elif default == "tensor":
        attrs["default_tensor"] = tensor_attr([{"strings": "dflt"}.get(values, 7)], dtypes[values], "d")
    model = ml_model("LabelEncoder", attrs, _ELEM[np.dtype(dtypes[keys])], _ELEM[np.dtype(dtypes[values])], 4)
    x = _inputs(keys if keys in _KEYS else "floats")
    check(model, x.astype(np.float64) if keys == "doubles" else x)


@pytest.mark.parametrize("keys,values", [("int64s", np.int32), ("floats", np.int16), ("strings", np.int32)])
def test_label_encoder_4_pairs_onnxruntime_lacks(keys, values):
    """Value types the spec allows that onnxruntime registers no kernel for: compared with onnx.reference (which
    needs default_tensor with values_tensor; NaN keys and duplicate keys left out, where it differs from
    onnxruntime)."""
    key_values = list(dict.fromkeys(k for k in _KEYS[keys] if k == k))  # its dict keeps the last of duplicates
    attrs = {f"keys_{keys}": key_values, "values_tensor": tensor_attr(range(1, len(key_values) + 1), values, "v"),
             "default_tensor": tensor_attr([-7], values, "d")}
    model = ml_model("LabelEncoder", attrs, _ELEM[np.dtype(_DTYPE[keys])], _ELEM[np.dtype(values)], 4)
    x = _inputs(keys)
    if keys == "floats":
        x = np.nan_to_num(x, nan=3.0)
    check(model, x, reference=True)


def test_label_encoder_many_values():
    """A numeric lookup over many elements (the binary search kernel) equals onnxruntime's hash map."""
    rng = np.random.default_rng(0)
    keys = rng.choice(100_000, 500, replace=False).astype(np.int64)
    model = ml_model("LabelEncoder", dict(keys_int64s=keys.tolist(), values_floats=rng.normal(size=500).tolist()),
                     T.INT64, T.FLOAT, 4)
    x = rng.choice(np.concatenate([keys, np.arange(1000)]), size=(300, 20)).astype(np.int64)
    check(model, x)
    check(model, x[:0])
    model = ml_model("LabelEncoder", dict(keys_strings=[str(k) for k in keys], values_int64s=keys.tolist()),
                     T.STRING, T.INT64, 4)
    check(model, np.array([str(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape))
    check(model, strings())


def test_label_encoder_errors():
    def fails(attrs, match, x_type=T.INT64, y_type=T.STRING, ml_opset=4):
        with pytest.raises(onnxjit.Fail, match=rf"LabelEncoder \(node 'ml'.*{match}"):
            native_session(ml_model("LabelEncoder", attrs, x_type, y_type, ml_opset))
    fails(dict(keys_int64s=[1, 2], values_strings=["a"]), r"keys \(2\) and values \(1\) must have the same length")
    fails(dict(keys_strings=["a"], values_strings=["b"]), "no keys for int64 input")
    fails(dict(keys_int64s=[1]), "no values")
    fails(dict(keys_int64s=[1], keys_tensor=tensor_attr([2], np.int64), values_strings=["a"]),
          "one and only one of keys_int64s, keys_tensor")
    fails(dict(keys_int64s=[1], values_strings=["a"], values_int64s=[3]), "one and only one of")
    sess = native_session(ml_model("LabelEncoder", dict(keys_int64s=[1], values_strings=["a"]), T.INT64, T.STRING, 4))
    with pytest.raises(onnxjit.InvalidArgument):  # a feed of another type than declared
        sess.run(None, {"X": np.array([1.0], np.float32)})


# --- CategoryMapper --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("default", [False, True])
def test_category_mapper(default):
    """cats_strings[i] <-> cats_int64s[i], the last of duplicates winning either way."""
    attrs = dict(cats_strings=["a", "b", "a", "c"], cats_int64s=[1, 2, 3, 2])
    if default:
        attrs.update(default_int64=-9, default_string="?")
    check(ml_model("CategoryMapper", attrs, T.STRING, T.INT64), strings(["a", "b", "c"], ["d", "", "a"]))
    check(ml_model("CategoryMapper", attrs, T.INT64, T.STRING), np.array([[1, 2, 3, 4, 0]], np.int64))


def test_category_mapper_errors():
    with pytest.raises(onnxjit.Fail, match=r"CategoryMapper \(node 'ml'.*cats_strings \(2\) and cats_int64s \(1\)"):
        native_session(ml_model("CategoryMapper", dict(cats_strings=["a", "b"], cats_int64s=[1]), T.STRING, T.INT64))
    sess = native_session(ml_model("CategoryMapper", dict(cats_strings=["a"], cats_int64s=[1]), T.STRING, T.INT64))
    with pytest.raises(onnxjit.InvalidArgument):
        sess.run(None, {"X": np.array([1.5], np.float32)})


# --- DictVectorizer --------------------------------------------------------------------------------------------
# onnxruntime's Python binding feeds only non-empty maps with float values (map(int64, float), map(string, float)),
# and onnx.reference has no CastMap and gives 0 for a missing string value. Where neither can run a case, the
# expected output is written from the spec's (and onnxruntime's C++) rules below, with the C library's strtof /
# strtoll / "%f" (what std::stof / std::stoll / std::to_string call) for the casts.
def map_type(key, value):
    return helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))


_NP = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.INT64: np.int64, T.STRING: object}
_DV_VOCAB = {T.STRING: ["a", "c", "b", "a", "zz"], T.INT64: [10, 30, 20, 10, -5]}
_DV_KEYS = {T.STRING: ["a", "b", "c", "d"], T.INT64: [10, 20, 30, 40]}
_DV_VALUES = {T.FLOAT: [1.5, -2.0, 3.25, 4.0], T.DOUBLE: [1.5, -2.0, 3.25, 4.0], T.INT64: [7, -8, 9, 10],
              T.STRING: ["p", "q", "r", "s"]}


def dict_vectorizer_model(key, value):
    attr = "string_vocabulary" if key == T.STRING else "int64_vocabulary"
    return ml_model("DictVectorizer", {attr: _DV_VOCAB[key]}, map_type(key, value), value)


@pytest.mark.parametrize("key,value", [(T.STRING, T.FLOAT), (T.INT64, T.FLOAT), (T.STRING, T.DOUBLE),
                                       (T.INT64, T.DOUBLE), (T.STRING, T.INT64), (T.INT64, T.STRING)])
def test_dict_vectorizer(key, value):
    """One map -> a [1, len(vocabulary)] row of the value type; absent keys give 0 (or ''); a repeated vocabulary
    entry repeats its value. (The six key/value pairs of the spec.)"""
    model = dict_vectorizer_model(key, value)
    sess = native_session(model)
    keys, vals = _DV_KEYS[key], _DV_VALUES[value]
    for m in (dict(zip(keys, vals)), dict(zip(keys[1:3], vals[1:3])), {}):
        got = sess.run(None, {"X": m})
        if m and value in (T.FLOAT, T.DOUBLE, T.INT64):
            # numeric values exact in float32: onnxruntime fed through the float twin of the model
            want = ort_run(dict_vectorizer_model(key, T.FLOAT), {"X": {k: float(v) for k, v in m.items()}})
            want = [want[0].astype(_NP[value])]
        else:  # an empty map or string values: no route into onnxruntime (see above)
            zero = "" if value == T.STRING else 0
            want = [np.array([[m.get(k, zero) for k in _DV_VOCAB[key]]], dtype=_NP[value])]
        assert_all_same(got, want)


def test_dict_vectorizer_errors():
    model = ml_model("DictVectorizer", dict(string_vocabulary=["a"]), map_type(T.STRING, T.FLOAT), T.FLOAT)
    sess = native_session(model)
    with pytest.raises(onnxjit.InvalidArgument, match=r"input 'X'.*dict"):  # the session checks the feed's kind
        sess.run(None, {"X": np.zeros((1, 1), np.float32)})
    with pytest.raises(onnxjit.InvalidArgument, match=r"DictVectorizer \(node 'ml'.*input 0 \('X'\).*string keys"):
        sess.run(None, {"X": {1: 2.0}})
    with pytest.raises(onnxjit.Fail, match="int64_vocabulary and string_vocabulary cannot both be set"):
        native_session(ml_model("DictVectorizer", dict(string_vocabulary=["a"], int64_vocabulary=[1]),
                                map_type(T.STRING, T.FLOAT), T.FLOAT))


# --- CastMap ---------------------------------------------------------------------------------------------------
def _libc():
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.strtof.restype, libc.strtof.argtypes = ctypes.c_float, [ctypes.c_char_p, ctypes.c_void_p]
    libc.strtoll.restype = ctypes.c_longlong
    libc.strtoll.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    return libc


def cast_map_expected(m, cast_to, form, max_map, from_strings):
    """CastMap's output by onnxruntime's C++ (cast_map.cc): std::stof / std::stoll (strtof / strtoll) on strings,
    std::to_string ("%f") on floats, static_cast (truncation) to int64; DENSE: key order; SPARSE: position = key,
    pad 0 / "0.f"."""
    libc = _libc()

    def cast(v):
        if cast_to == "TO_STRING":
            return v if from_strings else "%f" % np.float32(v)
        if from_strings:
            b = v.encode()
            return np.float32(libc.strtof(b, None)) if cast_to == "TO_FLOAT" else np.int64(libc.strtoll(b, None, 10))
        return np.float32(v) if cast_to == "TO_FLOAT" else np.int64(int(np.float32(v)))
    pad = {"TO_FLOAT": np.float32(0), "TO_INT64": np.int64(0), "TO_STRING": "0.f"}[cast_to]
    if form == "DENSE":
        row = [cast(m[k]) for k in sorted(m)]
    else:
        row = [cast(m[i]) if i in m else pad for i in range(max_map)]
    out = np.empty((1, len(row)), dtype={"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}[cast_to])
    out[0, :] = row
    return out


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_INT64", "TO_STRING"])
@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
@pytest.mark.parametrize("value", [T.FLOAT, T.STRING])
def test_cast_map(cast_to, form, value):
    """The values in key order (DENSE) or at their key's position up to max_map (SPARSE; 0 or '0.f' elsewhere),
    cast as C++ does: stof / stoll on strings (leading spaces, a numeric prefix, hexadecimal for stof),
    to_string ('%f') on floats, truncation to int64. onnxruntime is fed the non-empty float maps; the rest is
    compared with cast_map_expected (see the DictVectorizer section)."""
    out = {"TO_FLOAT": T.FLOAT, "TO_INT64": T.INT64, "TO_STRING": T.STRING}[cast_to]
    model = ml_model("CastMap", dict(cast_to=cast_to, map_form=form, max_map=6), map_type(T.INT64, value), out)
    sess = native_session(model)
    if value == T.FLOAT:
        m = {4: 2.75, 0: -1.5, 2: 1e-3, 9: 123456.789, 1: -0.0, 3: -7.9}
    else:
        m = {4: "2.75", 0: " -1.5e2", 2: "7abc", 9: "12", 1: "+3", 3: "-0.5", 5: "0x1Ap1"}
    for x in (m, {5: m[4], 1: m[1]}, {}):
        got = sess.run(None, {"X": x})
        if x and value == T.FLOAT:
            want = ort_run(model, {"X": x})
        else:
            want = [cast_map_expected(x, cast_to, form, 6, value == T.STRING)]
        assert_all_same(got, want)


def test_cast_map_errors():
    model = ml_model("CastMap", dict(cast_to="TO_FLOAT", map_form="SPARSE", max_map=3),
                     map_type(T.INT64, T.STRING), T.FLOAT)
    sess = native_session(model)
    with pytest.raises(onnxjit.InvalidArgument, match=r"CastMap \(node 'ml'.*negative map key -1"):
        sess.run(None, {"X": {-1: "1", 2: "2"}})
    with pytest.raises(onnxjit.InvalidArgument, match=r"CastMap \(node 'ml'.*map value 'abc' is not a number"):
        sess.run(None, {"X": {0: "abc"}})
    float_model = ml_model("CastMap", dict(cast_to="TO_FLOAT", map_form="SPARSE", max_map=3),
                           map_type(T.INT64, T.FLOAT), T.FLOAT)
    with pytest.raises(onnxjit.InvalidArgument, match="negative map key -1"):
        native_session(float_model).run(None, {"X": {-1: 1.0, 2: 2.0}})
    with pytest.raises(Exception, match="Negative index"):  # onnxruntime refuses it too
        ort_run(float_model, {"X": {-1: 1.0, 2: 2.0}})
    with pytest.raises(onnxjit.Fail, match=r"CastMap \(node 'ml'.*unknown cast_to 'TO_BOOL'"):
        native_session(ml_model("CastMap", dict(cast_to="TO_BOOL"), map_type(T.INT64, T.STRING), T.FLOAT))


# --- ZipMap ----------------------------------------------------------------------------------------------------
def zipmap_model(attrs, key):
    return ml_model("ZipMap", attrs, T.FLOAT, helper.make_sequence_type_proto(map_type(key, T.FLOAT)))


@pytest.mark.parametrize("labels", [["b", "a", "c"], [3, 1, 2], ["x", "y", "x"], [f"c{i:03d}" for i in range(70)]])
def test_zip_map(labels):
    """A list of one {label: score} dict per row, keys in sorted order as onnxruntime's std::map gives them (the
    last of duplicate labels wins); past 64 labels the dicts are built another way."""
    key = T.STRING if isinstance(labels[0], str) else T.INT64
    attr = "classlabels_strings" if key == T.STRING else "classlabels_int64s"
    model = zipmap_model({attr: labels}, key)
    x = np.random.default_rng(1).random((5, len(labels))).astype(np.float32)
    for xx in (x, x[0], x[:0]):
        got = check(model, xx)[0]
        want = ort_run(model, {"X": xx})[0]
        assert [list(d) for d in got] == [list(d) for d in want]  # same key order
        assert all(type(v) is float for d in got for v in d.values())


def test_zip_map_errors():
    sess = native_session(zipmap_model(dict(classlabels_strings=["a", "b"]), T.STRING))
    with pytest.raises(onnxjit.InvalidArgument, match=r"ZipMap \(node 'ml'.*input 0 \('X'\).*\[N, 2\]"):
        sess.run(None, {"X": np.zeros((2, 3), np.float32)})
    with pytest.raises(onnxjit.InvalidArgument, match=r"ZipMap \(node 'ml'.*rank 1 or 2"):
        sess.run(None, {"X": np.zeros((1, 1, 2), np.float32)})
    with pytest.raises(onnxjit.Fail, match=r"ZipMap \(node 'ml'.*exactly one of classlabels_strings"):
        native_session(zipmap_model(dict(classlabels_strings=["a"], classlabels_int64s=[1]), T.STRING))


# --- real exports ----------------------------------------------------------------------------------------------
def _columns_data(rows, seed):
    rng = np.random.default_rng(seed)
    cats = np.stack([rng.choice(["red", "green", "blue"], rows), rng.choice(["S", "M", "L", "XL"], rows)],
                    axis=1).astype(object)
    nums = rng.standard_normal((rows, 3)).astype(np.float32)
    y = (nums[:, 0] + (cats[:, 0] == "red") - (cats[:, 1] == "S") > 0).astype(np.int64)
    return cats, nums, y


@pytest.mark.parametrize("zipmap", [False, True])
def test_sklearn_column_transformer_one_hot(zipmap):
    """A OneHotEncoder in a ColumnTransformer (string columns; unknown categories in the test rows) with a
    StandardScaler, then LogisticRegression: labels equal, probabilities (or ZipMap's dicts) within 1e-5."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    cats, nums, y = _columns_data(200, 0)
    pre = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                             ("num", StandardScaler(), [2, 3, 4])])
    model = make_pipeline(pre, LogisticRegression(max_iter=500)).fit(np.concatenate([cats, nums.astype(object)], 1), y)
    onx = convert_sklearn(model, initial_types=[("cat", StringTensorType([None, 2])),
                                                ("num", FloatTensorType([None, 3]))],
                          options=None if zipmap else {id(model): {"zipmap": False}},
                          target_opset={"": 17, "ai.onnx.ml": 3})
    tc, tn, _ = _columns_data(50, 1)
    tc[::7, 1] = "XXL"  # not seen in training: a row of zeros
    feeds = {"cat": tc, "num": tn}
    got, want = native_session(onx).run(None, feeds), ort_run(onx, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    if zipmap:
        assert [list(d) for d in got[1]] == [list(d) for d in want[1]]
        got[1] = np.array([list(d.values()) for d in got[1]], np.float32)
        want[1] = np.array([list(d.values()) for d in want[1]], np.float32)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_sklearn_dict_vectorizer_pipeline():
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    rng = np.random.default_rng(2)
    keys = [f"w{i}" for i in range(12)]
    data = [{str(k): float(rng.random()) for k in rng.choice(keys, 4, replace=False)} for _ in range(120)]
    y = np.array([int(sum(d.values()) > 2) + int("w3" in d) for d in data])
    model = make_pipeline(DictVectorizer(sparse=False), LogisticRegression(max_iter=500)).fit(data, y)
    onx = convert_sklearn(model, initial_types=[("X", DictionaryType(StringTensorType([1]), FloatTensorType([1])))],
                          target_opset={"": 17, "ai.onnx.ml": 3})
    sess = native_session(onx)
    for d in data[:5] + [{"w1": 0.5, "unseen": 3.0}]:  # (onnxruntime's Python binding refuses an empty map)
        got, want = sess.run(None, {"X": d}), ort_run(onx, {"X": d})
        np.testing.assert_array_equal(got[0], want[0])
        assert [list(m) for m in got[1]] == [list(m) for m in want[1]]
        np.testing.assert_allclose([list(m.values()) for m in got[1]], [list(m.values()) for m in want[1]],
                                   rtol=1e-5, atol=1e-6)
