"""ai.onnx.ml linear models and SVMs (LinearClassifier, LinearRegressor, SVMClassifier, SVMRegressor) on the CPU
provider against onnxruntime: every post transform, binary and multiclass, int64 and string labels, the SVM
kernels with and without probabilities, input dtypes and ranks, the errors, and real skl2onnx exports. Sessions
run with the fallback provider disabled (`native_session` asserts every step ran on the CPU provider), so a node
the provider refuses fails the test instead of running elsewhere."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnxjit

from conftest import native_session, ort_run

POSTS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]
KERNELS = ["LINEAR", "POLY", "RBF", "SIGMOID"]
_ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.int64): T.INT64,
         np.dtype(np.int32): T.INT32}


def ml_model(op, attrs, x_elem=T.FLOAT, out_elems=(T.FLOAT,), x_shape=None):
    """One ai.onnx.ml node named 'ml' over input X; outputs 'label' and 'Y' for classifiers, 'Y' else."""
    outs = ["label", "Y"] if len(out_elems) == 2 else ["Y"]
    node = helper.make_node(op, ["X"], outs, domain="ai.onnx.ml", name="ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", x_elem, x_shape)],
                              [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, out_elems)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def as_float_input(model):
    """The model with its input X declared float."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.input[0].type.tensor_type.elem_type = T.FLOAT
    return m


def check(model, x, rtol=1e-5, atol=1e-6, unwritten=None, via_float=False):
    """onnxjit (CPU provider only) against onnxruntime: labels exactly, scores within rtol/atol. `unwritten`:
    a boolean mask of the scores onnxruntime leaves unwritten (memory left as it was), not compared.
    `via_float`: for the regressors, which onnxruntime registers for float input only where the spec allows
    double, int64 and int32 too (and says they are converted to float, as onnxruntime's classifiers do):
    onnxruntime's outputs for the float model on x cast to float32. (onnx.reference is no help there: it casts
    the coefficients to an integer input's type.)"""
    got = native_session(model).run(None, {"X": x})
    want = ort_run(as_float_input(model), {"X": x.astype(np.float32)}) if via_float else ort_run(model, {"X": x})
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, np.ndarray), f"output {i}: {type(g).__name__}"
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if w.dtype.kind == "f":
            if unwritten is not None and g.shape == unwritten.shape:
                g, w = g[~unwritten], w[~unwritten]
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
    return got


def packed_probit_unwritten(n):
    """A one-target LinearClassifier with two labels under PROBIT: onnxruntime writes the n probits into the
    first n of its (n, 2) scores and leaves the rest as the memory was."""
    mask = np.zeros(2 * n, bool)
    mask[n:] = True
    return mask.reshape(n, 2)


def rows(rng, n, f, dtype=np.float32, scale=1.0):
    x = rng.uniform(-1, 1, size=(n, f)) * scale
    if np.dtype(dtype).kind == "i":
        x = np.round(x * 3)
    return x.astype(dtype)


def labels_attr(kind, n):
    if kind == "ints":
        return {"classlabels_ints": [7, 3, 11, 5, 2][:n]}
    return {"classlabels_strings": ["cat", "dog", "eel", "fox", "gnu"][:n]}


def label_elem(kind):
    return T.INT64 if kind == "ints" else T.STRING


# --- LinearClassifier ----------------------------------------------------------------------------------------
def linear_classifier(rng, targets, n_labels, post, kind="ints", features=4):
    coef = rng.normal(size=(targets, features)).astype(np.float32)
    bias = rng.normal(size=targets).astype(np.float32)
    if post == "PROBIT":  # scores in (0, 1): probit is defined there
        coef *= 0.08
        bias = np.full(targets, 0.5, np.float32) + rng.uniform(-0.1, 0.1, targets).astype(np.float32)
    attrs = dict(coefficients=coef.reshape(-1).tolist(), intercepts=bias.tolist(), post_transform=post)
    if n_labels:
        attrs.update(labels_attr(kind, n_labels))
    return ml_model("LinearClassifier", attrs, out_elems=(label_elem(kind), T.FLOAT))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("kind", ["ints", "strings"])
def test_linear_classifier_multiclass(post, kind):
    rng = np.random.default_rng(1)
    model = linear_classifier(rng, 3, 3, post, kind)
    x = rows(rng, 40, 4)
    x[:3] = 0  # ties between classes: the first highest wins
    check(model, x, atol=3e-5 if post == "PROBIT" else 1e-6)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets,n_labels,kind", [(1, 2, "ints"), (1, 2, "strings"), (2, 2, "ints"),
                                                   (2, 2, "strings"), (1, 0, "ints")])
def test_linear_classifier_binary(post, targets, n_labels, kind):
    """One coefficient row with two labels (scores [1 - s, s]; under LOGISTIC [1 - logistic(s), logistic(s)]),
    two rows, or one row without two labels (labels 0 / 1 by the sign, the score as it is but under PROBIT)."""
    rng = np.random.default_rng(2)
    model = linear_classifier(rng, targets, n_labels, post, kind)
    x = rows(rng, 30, 4)
    x[:2] = 0
    unwritten = packed_probit_unwritten(30) if post == "PROBIT" and (targets, n_labels) == (1, 2) else None
    check(model, x, atol=3e-5 if post == "PROBIT" else 1e-6, unwritten=unwritten)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_linear_classifier_input_dtypes(dtype):
    rng = np.random.default_rng(3)
    model = linear_classifier(rng, 4, 4, "SOFTMAX")
    model = ml_model("LinearClassifier", {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute},
                     _ELEM[np.dtype(dtype)], (T.INT64, T.FLOAT))
    check(model, rows(rng, 25, 4, dtype))


def test_linear_classifier_one_row_and_no_rows():
    rng = np.random.default_rng(4)
    model = linear_classifier(rng, 3, 3, "LOGISTIC")
    check(model, rows(rng, 1, 4)[0])  # rank 1: one row
    check(model, np.zeros((0, 4), np.float32))


def test_linear_classifier_many_rows_on_threads():
    """Enough rows that the blocks go to onnxjit's threads; equal to a single-threaded run."""
    rng = np.random.default_rng(5)
    model = linear_classifier(rng, 5, 5, "SOFTMAX", features=30)
    x = rows(rng, 4000, 30)
    got = check(model, x)
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 1
    one = onnxjit.InferenceSession(model.SerializeToString(), so).run(None, {"X": x})
    np.testing.assert_array_equal(got[0], one[0])
    np.testing.assert_array_equal(got[1], one[1])


def test_linear_classifier_strided_input():
    """A strided view reaching the op (upstream ops hand out contiguous arrays today; the op must not rely on it):
    the GEMM reads rows of unit stride, and the op hands the kernels a contiguous copy."""
    rng = np.random.default_rng(8)
    model = linear_classifier(rng, 3, 3, "SOFTMAX")
    x = rows(rng, 12, 8)
    kernel = native_session(model)._compiled.steps[0].fn
    for view in (x[:, ::2], np.asfortranarray(x[:, :4]), x[::3, 1:5]):
        got, want = kernel(view), ort_run(model, {"X": np.ascontiguousarray(view)})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


# --- LinearRegressor -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(post, targets):
    rng = np.random.default_rng(6)
    coef = rng.normal(size=(targets, 5)).astype(np.float32) * (0.08 if post == "PROBIT" else 1)
    bias = np.full(targets, 0.5 if post == "PROBIT" else -0.3, np.float32)
    attrs = dict(coefficients=coef.reshape(-1).tolist(), intercepts=bias.tolist(), targets=targets,
                 post_transform=post)
    check(ml_model("LinearRegressor", attrs), rows(rng, 30, 5), atol=3e-5 if post == "PROBIT" else 1e-6)


def test_linear_regressor_without_intercepts():
    rng = np.random.default_rng(7)
    model = ml_model("LinearRegressor", dict(coefficients=rng.normal(size=6).astype(np.float32).tolist(), targets=2))
    check(model, rows(rng, 20, 3))
    check(model, rows(rng, 1, 3)[0])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_linear_regressor_other_input_types(dtype):
    """onnxruntime registers LinearRegressor for float input only; the spec (and onnxjit) takes double, int64 and
    int32 too, converted to float."""
    rng = np.random.default_rng(7)
    attrs = dict(coefficients=rng.normal(size=6).astype(np.float32).tolist(), intercepts=[0.5, -1.0], targets=2)
    model = ml_model("LinearRegressor", attrs, _ELEM[np.dtype(dtype)])
    check(model, rows(rng, 20, 3, dtype), via_float=True)


# --- SVMClassifier -------------------------------------------------------------------------------------------
def svm_classifier(rng, classes, kernel, post="NONE", proba=False, kind="ints", per_class=(3, 2, 4, 2),
                   features=3):
    per_class = list(per_class[:classes])
    nv = sum(per_class)
    pairs = classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0 if kernel == "POLY" else 0.0],
                 vectors_per_class=per_class,
                 support_vectors=rng.normal(size=nv * features).astype(np.float32).tolist(),
                 coefficients=rng.normal(size=(classes - 1) * nv).astype(np.float32).tolist(),
                 rho=rng.normal(size=pairs).astype(np.float32).tolist(), post_transform=post,
                 **labels_attr(kind, classes))
    if proba:
        attrs["prob_a"] = rng.uniform(-3, -1, pairs).astype(np.float32).tolist()
        attrs["prob_b"] = rng.uniform(-0.2, 0.2, pairs).astype(np.float32).tolist()
    return ml_model("SVMClassifier", attrs, out_elems=(label_elem(kind), T.FLOAT))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_kernels(kernel, classes, proba):
    rng = np.random.default_rng(KERNELS.index(kernel) * 10 + classes)
    check(svm_classifier(rng, classes, kernel, proba=proba), rows(rng, 30, 3))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("classes,proba", [(2, False), (3, False), (2, True), (3, True)])
def test_svm_classifier_post_transforms(post, classes, proba):
    rng = np.random.default_rng(20 + classes)
    model = svm_classifier(rng, classes, "RBF", post=post, proba=proba, kind="strings")
    # PROBIT of a decision outside (0, 1) is NaN in both; onnxruntime's erfinv loses digits near 0.5. Two classes
    # without probabilities under PROBIT: onnxruntime writes probit(d) and leaves the second score unwritten
    unwritten = None
    if post == "PROBIT" and classes == 2 and not proba:
        unwritten = np.zeros((30, 2), bool)
        unwritten[:, 1] = True
    check(model, rows(rng, 30, 3), atol=3e-5 if post == "PROBIT" else 1e-6, unwritten=unwritten)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_svm_classifier_input_dtypes(dtype):
    rng = np.random.default_rng(8)
    model = svm_classifier(rng, 3, "POLY", proba=True)
    model = ml_model("SVMClassifier", {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute},
                     _ELEM[np.dtype(dtype)], (T.INT64, T.FLOAT))
    check(model, rows(rng, 20, 3, dtype))
    check(model, rows(rng, 1, 3, dtype)[0])


def test_svm_classifier_many_rows_on_threads():
    rng = np.random.default_rng(9)
    model = svm_classifier(rng, 3, "RBF", proba=True, per_class=(40, 30, 50), features=12)
    check(model, rows(rng, 1500, 12))


def liblinear_classifier(rng, classes, post="NONE", proba=False, positive=False, kind="ints", features=4):
    coef = rng.normal(size=classes * features).astype(np.float32)
    if positive:
        coef = np.abs(coef) * 0.2
    attrs = dict(coefficients=coef.tolist(), rho=[float(np.float32(rng.normal() * 0.3))], post_transform=post,
                 kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0], **labels_attr(kind, classes))
    if proba:
        attrs["prob_a"], attrs["prob_b"] = [-1.5], [0.1]
    return ml_model("SVMClassifier", attrs, out_elems=(label_elem(kind), T.FLOAT))


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("classes,positive,proba", [(2, False, False), (2, True, False), (2, False, True),
                                                    (3, False, False), (3, False, True)])
def test_svm_classifier_without_support_vectors(post, classes, positive, proba):
    """The liblinear form: one coefficient row per class, rho[0] added; two classes label by onnxruntime's rule
    for all-positive or mixed weights (a score >= 0.5 or > 0 picks class 1)."""
    rng = np.random.default_rng(30 + classes)
    model = liblinear_classifier(rng, classes, post, proba, positive, kind="strings" if positive else "ints")
    x = rows(rng, 40, 4, scale=0.3 if post == "PROBIT" else 1.0)
    if post == "PROBIT":
        x = np.abs(x)
    check(model, x, atol=3e-5 if post == "PROBIT" else 1e-6)


def test_svm_empty_kernel_params_and_no_rows():
    """kernel_params may be present and empty (gamma = coef0 = degree = 0); zero rows give empty outputs."""
    from onnx import AttributeProto
    model = liblinear_classifier(np.random.default_rng(35), 3)
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "kernel_params"]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute("kernel_params", [], attr_type=AttributeProto.FLOATS)])
    check(model, rows(np.random.default_rng(36), 10, 4))
    check(model, np.zeros((0, 4), np.float32))
    check(svm_classifier(np.random.default_rng(37), 3, "RBF", proba=True), np.zeros((0, 3), np.float32))


# --- SVMRegressor --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(40 + KERNELS.index(kernel))
    nv = 6
    attrs = dict(kernel_type=kernel, kernel_params=[0.4, 0.2, 2.0 if kernel == "POLY" else 0.0], n_supports=nv,
                 support_vectors=rng.normal(size=nv * 3).astype(np.float32).tolist(),
                 coefficients=rng.normal(size=nv).astype(np.float32).tolist(), rho=[0.25], one_class=one_class)
    model = ml_model("SVMRegressor", attrs)
    check(model, rows(rng, 30, 3))
    check(model, rows(rng, 1, 3)[0])


@pytest.mark.parametrize("one_class", [0, 1])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_svm_regressor_linear_form(one_class, post):
    """No support vectors: coefficients . x + rho[0]; post_transform is ignored by onnxruntime."""
    rng = np.random.default_rng(50)
    attrs = dict(coefficients=rng.normal(size=4).astype(np.float32).tolist(), rho=[-0.1], one_class=one_class,
                 post_transform=post, kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0])
    check(ml_model("SVMRegressor", attrs), rows(rng, 20, 4))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_svm_regressor_other_input_types(dtype):
    """onnxruntime registers SVMRegressor for float input only; the spec (and onnxjit) takes the others too,
    converted to float."""
    rng = np.random.default_rng(51)
    nv = 4
    attrs = dict(kernel_type="RBF", kernel_params=[0.4, 0.0, 0.0], n_supports=nv,
                 support_vectors=rng.normal(size=nv * 3).astype(np.float32).tolist(),
                 coefficients=rng.normal(size=nv).astype(np.float32).tolist(), rho=[0.25])
    check(ml_model("SVMRegressor", attrs, _ELEM[np.dtype(dtype)]), rows(rng, 10, 3, dtype), via_float=True)


# --- errors --------------------------------------------------------------------------------------------------
def test_input_errors_name_node_and_input():
    rng = np.random.default_rng(60)
    for model in (linear_classifier(rng, 3, 3, "NONE"), svm_classifier(rng, 3, "RBF"),
                  ml_model("LinearRegressor", dict(coefficients=[1.0, 2.0, 3.0, 4.0], targets=1))):
        sess = native_session(model)
        op = model.graph.node[0].op_type
        with pytest.raises(onnxjit.InvalidArgument, match=rf"{op} \(node 'ml'.*input 0 \('X'\).*shape \[5, 7\]"):
            sess.run(None, {"X": np.zeros((5, 7), np.float32)})
        with pytest.raises(onnxjit.InvalidArgument, match=rf"{op} \(node 'ml'.*rank 1 .* or 2"):
            sess.run(None, {"X": np.zeros((2, 2, 2), np.float32)})


def test_wrong_input_dtype_is_invalid_argument():
    """A feed of a type the model does not declare is refused by the session; the op refuses the rest."""
    rng = np.random.default_rng(61)
    model = linear_classifier(rng, 3, 3, "NONE")
    with pytest.raises(onnxjit.InvalidArgument):
        native_session(model).run(None, {"X": np.zeros((2, 4), np.bool_)})


@pytest.mark.parametrize("op,attrs,match", [
    ("LinearClassifier", dict(coefficients=[1.0, 2.0, 3.0], intercepts=[0.0, 1.0], classlabels_ints=[0, 1]),
     "3 coefficients do not make one row per intercept"),
    ("LinearClassifier", dict(coefficients=[1.0, 2.0], intercepts=[0.0], post_transform="SQUARE"),
     "unknown post_transform 'SQUARE'"),
    ("LinearClassifier", dict(coefficients=[1.0, 2.0, 3.0], intercepts=[0.0, 1.0, 2.0], classlabels_ints=[0, 1]),
     "3 classes .* but 2 class labels"),
    ("LinearClassifier", dict(coefficients=[1.0, 2.0], intercepts=[0.0], classlabels_ints=[4]),
     "one class .* needs exactly 2 class labels or none, got 1"),
    ("LinearClassifier", dict(coefficients=[1.0, 2.0, 3.0, 4.0], intercepts=[0.0, 1.0]),
     "2 classes .* but 0 class labels"),
    ("LinearRegressor", dict(coefficients=[1.0, 2.0, 3.0], targets=2), "3 coefficients do not make 2 target rows"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0], rho=[0.0], classlabels_ints=[0, 1], kernel_type="CUBIC",
                           kernel_params=[0.1, 0, 0]),
     "unknown kernel_type 'CUBIC'"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0], rho=[0.0], vectors_per_class=[1, 1],
                           support_vectors=[1.0, 2.0, 3.0], classlabels_ints=[0, 1], kernel_params=[0.1, 0, 0]),
     "3 support_vectors values do not make 2 vectors"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0], rho=[0.0], classlabels_ints=[0, 1], prob_a=[1.0],
                           kernel_params=[0.1, 0, 0]),
     r"prob_a \(1 values\) and prob_b \(0\)"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0], rho=[0.0], classlabels_ints=[0, 1]),
     "kernel_params is required"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0], rho=[0.0], classlabels_ints=[0, 1], kernel_params=[0.1]),
     "kernel_params must be empty or .gamma, coef0, degree., got 1 values"),
    ("SVMClassifier", dict(coefficients=[1.0, 2.0, 3.0, 4.0], rho=[0.0], vectors_per_class=[1, 1, 1],
                           support_vectors=[1.0, 2.0, 3.0], classlabels_ints=[0, 1, 2], kernel_params=[0.1, 0, 0]),
     r"coefficients has 4 values, expected \(classes - 1\) x vectors = 6"),
    ("SVMClassifier", dict(coefficients=[1.0] * 6, rho=[0.0], vectors_per_class=[1, 1, 1],
                           support_vectors=[1.0, 2.0, 3.0], classlabels_ints=[0, 1, 2], kernel_params=[0.1, 0, 0]),
     r"rho has 1 values, expected one per pair of classes \(3\)"),
    ("SVMRegressor", dict(coefficients=[1.0], rho=[0.0], n_supports=2, support_vectors=[1.0, 2.0],
                          kernel_params=[0.1, 0, 0]),
     "coefficients has 1 values for 2 support vectors"),
])
def test_malformed_attributes_fail_at_session_creation(op, attrs, match):
    outs = (T.INT64, T.FLOAT) if "Classifier" in op else (T.FLOAT,)
    model = ml_model(op, attrs, out_elems=outs)
    with pytest.raises(onnxjit.Fail, match=f"{op} \\(node 'ml'.*{match}"):
        onnxjit.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception):  # onnxruntime refuses these models too
        ort_run(model, {"X": np.zeros((1, 2), np.float32)})


def test_first_run_in_a_new_process(tmp_path):
    """The first GEMM of a process whose kernels load from the disk cache, before anything imported scipy's BLAS
    (numba's BLAS helper imports it during that call): the scores must still be right. blas.gemm's own alpha/beta
    array was freed before BLAS read it, and the import reused that memory."""
    import subprocess
    import sys
    rng = np.random.default_rng(70)
    model = linear_classifier(rng, 3, 3, "NONE", features=5)
    x = rows(rng, 40, 5)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, onnxjit\n"
        "so = onnxjit.SessionOptions()\n"
        "so.add_session_config_entry('session.disable_fallback_provider', '1')\n"
        f"s = onnxjit.InferenceSession({str(tmp_path / 'm.onnx')!r}, so, providers=['CPUExecutionProvider'])\n"
        f"y = s.run(None, {{'X': np.load({str(tmp_path / 'x.npy')!r})}})[1]\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n")
    for _ in range(2):  # the second process loads the kernels from the cache the first may have written
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), ort_run(model, {"X": x})[1], rtol=1e-5, atol=1e-6)


# --- real exports --------------------------------------------------------------------------------------------
# SVC(probability=True) is deprecated from scikit-learn 1.9 (its exports are what users have); a few fits stop at
# max_iter: neither matters to the comparison
sklearn_warnings = pytest.mark.filterwarnings("ignore:.*probability:FutureWarning",
                                              "ignore:.*prob[AB]_:FutureWarning",
                                              "ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import make_classification
    x, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=0)
    return x.astype(np.float32), y


def _export(model, x, zipmap=True):
    from skl2onnx import to_onnx
    options = None if zipmap else {"zipmap": False}
    return to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})


def check_export(onx, x, rtol=1e-5, atol=1e-6):
    """Labels equal, scores (tensors or ZipMap's dicts) within rtol / atol of onnxruntime's."""
    feeds = {onx.graph.input[0].name: x}
    got, want = native_session(onx).run(None, feeds), ort_run(onx, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap
            assert isinstance(g, list) and len(g) == len(w)
            assert all(isinstance(d, dict) and list(d) == list(e) for d, e in zip(g, w))
            g = np.array([list(d.values()) for d in g], np.float32)
            w = np.array([list(d.values()) for d in w], np.float32)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


@sklearn_warnings
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("zipmap", [False, True])
def test_sklearn_scaler_logistic_regression(data, binary, zipmap):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    x, y = data
    if binary:
        y = np.array(["no", "yes"])[(y == 1).astype(int)]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y)
    check_export(_export(model, x, zipmap), x)


@sklearn_warnings
@pytest.mark.parametrize("kernel", ["rbf", "poly", "linear", "sigmoid"])
@pytest.mark.parametrize("binary", [False, True])
def test_sklearn_svc_probability(data, kernel, binary):
    from sklearn.svm import SVC
    x, y = data
    if binary:
        y = (y == 1).astype(int)
    model = SVC(kernel=kernel, probability=True, degree=2, random_state=0).fit(x[:150], y[:150])
    check_export(_export(model, x, zipmap=False), x)


@sklearn_warnings
def test_sklearn_svc_decision_function(data):
    from sklearn.svm import SVC
    x, y = data
    model = SVC(kernel="rbf").fit(x[:150], y[:150])
    check_export(_export(model, x), x)


@sklearn_warnings
@pytest.mark.parametrize("kind", ["LinearSVR", "SVR", "LinearSVC", "NuSVR", "OneClassSVM"])
def test_sklearn_svm_regressors_and_linear_svc(data, kind):
    from sklearn import svm
    x, y = data
    target = x[:, 0] * 2 + x[:, 1] + 0.1 * y
    if kind == "LinearSVR":
        model = svm.LinearSVR(random_state=0, max_iter=5000).fit(x, target)
    elif kind == "SVR":
        model = svm.SVR(kernel="rbf", C=3.0).fit(x[:150], target[:150])
    elif kind == "NuSVR":
        model = svm.NuSVR(kernel="poly", degree=2).fit(x[:150], target[:150])
    elif kind == "OneClassSVM":
        model = svm.OneClassSVM(gamma=0.2).fit(x[:150])
    else:
        model = svm.LinearSVC(random_state=0).fit(x, y)
    # the regressors' sums can cancel: compare relative to the outputs' scale
    check_export(_export(model, x), x, atol=1e-5)


# --- Scaler -> linear model in one step ------------------------------------------------------------------------
def _scaled_model(linear_op, linear_attrs, out_elems, x_elem=T.FLOAT, x_shape=None, scaler_out=False,
                  scale=None, offset=None):
    """Scaler (offset, scale per feature, or one value each) then `linear_op` over X; with `scaler_out` the
    Scaler's output is a graph output too (so the two ops cannot run as one step)."""
    f = 4
    scale = [0.5, 2.0, -1.5, 0.25] if scale is None else scale
    offset = [1.0, -3.0, 0.5, 100.0] if offset is None else offset
    outs = ["label", "Y"] if len(out_elems) == 2 else ["Y"]
    nodes = [helper.make_node("Scaler", ["X"], ["S"], domain="ai.onnx.ml", name="scaler", scale=scale,
                              offset=offset),
             helper.make_node(linear_op, ["S"], outs, domain="ai.onnx.ml", name="linear", **linear_attrs)]
    graph_outs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, out_elems)]
    if scaler_out:
        graph_outs.append(helper.make_tensor_value_info("S", T.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", x_elem, x_shape or [None, f])],
                              graph_outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


_SCALED_CASES = [
    ("LinearClassifier", dict(coefficients=list(np.linspace(-1, 1, 12)), intercepts=[0.1, -0.2, 0.3],
                              classlabels_ints=[4, 5, 6], post_transform="SOFTMAX"), (T.INT64, T.FLOAT)),
    ("LinearClassifier", dict(coefficients=[0.5, -1.0, 0.25, 2.0], intercepts=[0.1], classlabels_strings=["no", "yes"],
                              post_transform="LOGISTIC"), (T.STRING, T.FLOAT)),
    ("LinearRegressor", dict(coefficients=list(np.linspace(-2, 2, 8)), intercepts=[1.0, -1.0], targets=2),
     (T.FLOAT,)),
]


@pytest.mark.parametrize("op,attrs,out_elems", _SCALED_CASES)
@pytest.mark.parametrize("rows", [1, 7, 3000])
def test_scaler_then_linear_model_is_one_step_equal_to_two(op, attrs, out_elems, rows, rng):
    """A Scaler read only by a linear model runs with it as one kernel: the outputs match onnxruntime's and equal,
    bit for bit, the two ops run as two steps (the Scaler's output made a graph output keeps them apart)."""
    x = (rng.standard_normal((rows, 4)) * 50).astype(np.float32)
    model = _scaled_model(op, attrs, out_elems)
    sess = native_session(model)
    assert [[n.op_type for n in s.nodes] for s in sess._compiled.steps] == [["Scaler", op]]
    got = check(model, x)
    apart = native_session(_scaled_model(op, attrs, out_elems, scaler_out=True))
    assert len(apart._compiled.steps) == 2
    for g, w in zip(got, apart.run(None, {"X": x})):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("x_elem,x_shape,x", [
    (T.DOUBLE, [None, 4], np.linspace(-9, 9, 8).reshape(2, 4)),  # double in: the Scaler computes in double
    (T.FLOAT, [4], np.array([3.0, -1.0, 2.5, 120.0], np.float32)),  # one row as [F]: through the two kernels
])
def test_scaler_then_linear_model_other_inputs(x_elem, x_shape, x):
    op, attrs, out_elems = _SCALED_CASES[0]
    check(_scaled_model(op, attrs, out_elems, x_elem=x_elem, x_shape=x_shape), x)


def test_scaler_then_linear_model_one_scale_value_and_a_wrong_width(rng):
    op, attrs, out_elems = _SCALED_CASES[0]
    model = _scaled_model(op, attrs, out_elems, scale=[0.5], offset=[2.0])
    check(model, rng.standard_normal((5, 4)).astype(np.float32))
    with pytest.raises(onnxjit.InvalidArgument, match="4"):
        native_session(model).run(None, {"X": rng.standard_normal((5, 3)).astype(np.float32)})


# --- (Scaler ->) LinearClassifier -> Normalizer in one step ----------------------------------------------------
def _normalized_model(classifier_attrs, norm, scaler, apart):
    """[Scaler ->] LinearClassifier -> Normalizer(norm) over X [N, 4]; with `apart` the classifier's scores are a
    graph output too (so the Normalizer cannot join its step)."""
    nodes = [helper.make_node("LinearClassifier", ["S" if scaler else "X"], ["label", "scores"], domain="ai.onnx.ml",
                              name="linear", **classifier_attrs),
             helper.make_node("Normalizer", ["scores"], ["Y"], domain="ai.onnx.ml", name="norm", norm=norm)]
    if scaler:
        nodes.insert(0, helper.make_node("Scaler", ["X"], ["S"], domain="ai.onnx.ml", name="scaler",
                                         scale=[0.5, 2.0, -1.5, 0.25], offset=[1.0, -3.0, 0.5, 100.0]))
    label = T.STRING if "classlabels_strings" in classifier_attrs else T.INT64
    outs = [helper.make_tensor_value_info("label", label, None), helper.make_tensor_value_info("Y", T.FLOAT, None)]
    if apart:
        outs.append(helper.make_tensor_value_info("scores", T.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", T.FLOAT, [None, 4])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


_NORMALIZED_CLASSIFIERS = [
    dict(coefficients=list(np.linspace(-1, 1, 12)), intercepts=[0.1, -0.2, 0.3], classlabels_ints=[4, 5, 6],
         post_transform="SOFTMAX"),
    dict(coefficients=list(np.linspace(-1, 1, 12)), intercepts=[0.1, -0.2, 0.3], classlabels_ints=[4, 5, 6]),
    dict(coefficients=[0.5, -1.0, 0.25, 2.0], intercepts=[0.1], classlabels_strings=["no", "yes"],
         post_transform="LOGISTIC"),
    dict(coefficients=[0.5, -1.0, 0.25, 2.0], intercepts=[0.1], post_transform="PROBIT"),
]


@pytest.mark.parametrize("attrs", _NORMALIZED_CLASSIFIERS)
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("scaler", [False, True])
@pytest.mark.parametrize("rows", [1, 3000])
def test_normalizer_of_a_linear_classifier_joins_its_step(attrs, norm, scaler, rows, rng):
    """A Normalizer reading a LinearClassifier's scores alone (skl2onnx's LogisticRegression) runs in the
    classifier's kernel, with the Scaler before it where there is one: outputs match onnxruntime's and equal, bit
    for bit, the ops run as separate steps."""
    x = (rng.standard_normal((rows, 4)) * (50 if scaler else 1)).astype(np.float32)
    model = _normalized_model(attrs, norm, scaler, apart=False)
    sess = native_session(model)
    want_ops = (["Scaler"] if scaler else []) + ["LinearClassifier", "Normalizer"]
    assert [[n.op_type for n in s.nodes] for s in sess._compiled.steps] == [want_ops]
    got = check(model, x)
    apart = native_session(_normalized_model(attrs, norm, scaler, apart=True))
    assert [n.op_type for s in apart._compiled.steps for n in s.nodes][-1:] == ["Normalizer"]
    for g, w in zip(got, apart.run(None, {"X": x})):
        np.testing.assert_array_equal(g, w)
