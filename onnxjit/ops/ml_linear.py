"""ai.onnx.ml linear models and SVMs on the CPU provider: LinearClassifier, LinearRegressor, SVMClassifier and
SVMRegressor (opset 1, the only one), kernels in onnxjit.kernels.ml_linear.

Inputs of float, double, int64 or int32 are converted to float32 first, as onnxruntime does, and rows are cut
into blocks spread over onnxjit's threads (`run_units`) when the work is large enough: each block is one BLAS
GEMM (single-threaded, see kernels.linalg.single_threaded_blas) followed by the label rule and post transform of
its rows, or for SVMs with support vectors the kernel values of the block, then its decisions. Labels come out
of the kernels as the int64 class labels themselves, or as class indices taken from string labels here (an
object array, as onnxruntime returns them). At batch sizes that run in one block, the float32 linear models' steps
say how they call their kernel (`run.native`), so a plan's native segment can call it without their Python
(onnxjit.session.native_plan).

Semantics are onnxruntime 1.32's (linearclassifier.cc, linearregressor.cc, svmclassifier.cc, svmregressor.cc,
ml_common.h; where the sources on record and 1.32 differ, 1.32 as measured), down to its special cases: a
LinearClassifier with one coefficient row labels by the sign of its score; with two class labels it returns
[1 - s, s] under NONE, SOFTMAX and SOFTMAX_ZERO, [1 - logistic(s), logistic(s)] under LOGISTIC, and under PROBIT
the N probits packed first (onnxruntime leaves the rest of its (N, 2) buffer unwritten; here 0); with no class
labels it returns [s] (PROBIT applied, no other transform); LinearRegressor applies only PROBIT to one target;
SVMClassifier labels by pairwise votes when it has support vectors (probabilities or not), by onnxruntime's
ChooseClass rule for two classes without; two classes with support vectors and no probabilities score [-d, d]
under NONE, [1 - logistic(d), logistic(d)] under LOGISTIC, [probit(d), 0] under PROBIT (the second score
unwritten in onnxruntime), [1 - d, d] otherwise; SVMRegressor ignores post_transform.

Where onnxruntime departs from the spec, onnxjit follows it: kernel_params is required for SVMs (it may be
empty); a LinearClassifier with one intercept needs exactly two class labels or none, and one with several at
least one label per intercept (the spec says neither). Where onnxruntime registers fewer input types than the
spec (LinearRegressor and SVMRegressor: float only), onnxjit takes the spec's double, int64 and int32 too,
converted to float as for the classifiers.

Malformed attributes raise onnxjit.Fail naming the node at session creation; an input of the wrong type, rank or
feature count raises onnxjit.InvalidArgument when it runs. A one-class SVMClassifier with support vectors (no
pair to vote on; onnxruntime's scores are then unset memory) is left to the next provider.
"""
from __future__ import annotations

import contextlib

import numba
import numpy as np
from onnx import TensorProto as T

from onnxjit.ir.types import TensorType
from onnxjit.kernels import ml_linear as k
from onnxjit.kernels.linalg import single_threaded_blas
from onnxjit.ops.ml_common import DOMAIN, NUMERIC, Attrs, bad_input, checked_tensor, declare_outputs, rows_of
from onnxjit.ops.ml_preprocess import build_scaler, normalizer_code, scaler_attributes, scaler_columns
from onnxjit.ops.nn import PARALLEL_GRAIN, ro
from onnxjit.ops.registry import register_chain, register_op
from onnxjit.session.native_plan import In, NativeCall, Out
from onnxjit.worker_pool import CallSite

_F32 = np.dtype(np.float32)
BLOCKS_PER_THREAD = 2  # row blocks per thread for the linear models (one BLAS call each)
SVM_BLOCK_ROWS = 64  # rows whose kernel values are computed together (64 x V float32 stay in L2)


def _post(a: Attrs) -> int:
    name = a.get("post_transform", "NONE")
    if name not in k.POSTS:
        a.fail(f"unknown post_transform {name!r} (expected one of {', '.join(k.POSTS)})")
    return k.POSTS[name]


def _labels(a: Attrs, required: bool):
    """(labels as an array to take from, is_string) from classlabels_strings / classlabels_ints."""
    strings, ints = a.strings("classlabels_strings"), a.ints("classlabels_ints")
    if strings and ints.size:
        a.fail("classlabels_strings and classlabels_ints cannot both be set")
    if strings:
        return np.array(strings, dtype=object), True
    if required and not ints.size:
        a.fail("one of classlabels_strings, classlabels_ints is required")
    return ints, False


def _float_rows(node, x, features: int):
    """x (float, double, int64 or int32; [F] or [N, F]) as read-only float32 (N, F), its width checked."""
    if type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 2 and x.shape[1] == features:
        return ro(x)  # the common case first: this runs once per model per run
    x = checked_tensor(node, x, NUMERIC)
    n, f = rows_of(node, x)
    if f != features:
        bad_input(node, 0, f"[N, {features}] (the model's feature count)", f"shape {list(x.shape)}")
    if x.dtype != _F32:
        x = x.astype(np.float32)
    return ro(x.reshape(n, f) if x.ndim == 1 else x)


def _row_blocks(n: int, work: int) -> tuple[int, int]:
    """(rows per block, blocks): one block when the work is small or one thread runs, else BLOCKS_PER_THREAD
    blocks per thread."""
    if work < PARALLEL_GRAIN or n < 2:
        return max(n, 1), 1 if n else 0
    threads = numba.get_num_threads()
    if threads <= 1:
        return n, 1
    units = min(threads * BLOCKS_PER_THREAD, n)
    rows = -(-n // units)
    return rows, -(-n // rows)


def _run_blocks(site, args, n_blocks, work):
    """site's kernel(*args, b0, b1) over the blocks (a CallSite of the node: its arguments' types are fixed, and
    at batch 1 the call skips Numba's type dispatch, 2-3 us of the step); BLAS single-threaded whenever the work
    is large enough for it to start its own threads (they spin, and on a busy machine a 10,000-row GEMM took 8 ms
    instead of 30 us)."""
    if n_blocks == 0:
        return
    with single_threaded_blas if work >= PARALLEL_GRAIN else contextlib.nullcontext():
        site.run(args, n_blocks, work)


_NO_LABELS = np.zeros(0, np.int64)
_NO_CLASSES = ro(np.zeros(0, np.int64))


def _classes(labels: np.ndarray) -> np.ndarray:
    """What the kernels write per class index: the int64 labels themselves, or for string labels the index
    (mapped to the string here)."""
    return ro(np.arange(labels.size, dtype=np.int64) if labels.dtype == object else labels.astype(np.int64))


_NO_SCALING = (ro(np.zeros(0, np.float32)), ro(np.zeros(0, np.float32)))
_NO_NORM = (-1, np.zeros((0, 0), np.float32))


def _linear_args(x, coef, bias, mode, post, rule, classes, labels_out, raw, out, scaling, norming) -> tuple:
    """linear_rows' arguments before the rows per block, in its order: for the step's call (_linear) and its
    native form (_native_linear) alike."""
    return (x, *scaling, coef, bias, mode, post, rule, classes, labels_out, raw, out, *norming)


def _linear(site, x, coef, bias, mode, post, rule, classes, labels_out, raw, out, scaling=_NO_SCALING,
            norming=_NO_NORM):
    """linear_rows over x's rows in blocks (site: the node's CallSite of it, x read-only float32 (N, F), raw and out
    float32 (N, *), labels_out int64 (N,) written with `classes` per class index); `scaling`: a Scaler's (offset,
    scale) per column applied to x first; `norming`: a Normalizer's (norm, output like out) applied to out's rows
    last."""
    n = x.shape[0]
    args = _linear_args(x, coef, bias, mode, post, rule, classes, labels_out, raw, out, scaling, norming)
    work = n * coef.size
    if work < PARALLEL_GRAIN:  # one block on this thread, as _row_blocks would cut it, with less Python (batch 1)
        if n:
            site.run(args + (n,), 1, work)
        return
    rows, blocks = _row_blocks(n, n * coef.shape[0] * max(coef.shape[1], 1))
    _run_blocks(site, args + (rows,), blocks, work)


def _native_linear(x, features, coef, bias, mode, post, rule, classes, labeled, cols, scaling=_NO_SCALING, norm=-1):
    """The call _linear makes where the rows run in one block, as a native_plan.NativeCall of the step's input 0
    (float32 (N, features), C-contiguous), else None: its buffers the labels (where `labeled`), the scores (N, cols),
    the raw scores (N, T) where T differs from cols, and the normalized scores where `norm` >= 0; its outputs the
    labels (where labeled) and the scores (normalized where norm >= 0)."""
    if type(x) is not np.ndarray or x.dtype != _F32 or x.ndim != 2 or x.shape[1] != features \
            or not x.flags.c_contiguous or not 0 < x.shape[0] * coef.size < PARALLEL_GRAIN:
        return None
    n = x.shape[0]
    buffers: list = []

    def buffer(shape, dtype):
        buffers.append((shape, np.dtype(dtype)))
        return Out(len(buffers) - 1)
    labels = buffer((n,), np.int64) if labeled else _NO_LABELS
    out = buffer((n, cols), _F32)
    raw = out if cols == coef.shape[0] else buffer((n, coef.shape[0]), _F32)
    normed = buffer((n, cols), _F32) if norm >= 0 else _NO_NORM[1]
    scores = normed if norm >= 0 else out
    args = _linear_args(In(0, (n, features)), coef, bias, mode, post, rule, classes, labels, raw, out, scaling,
                        (norm, normed))
    return NativeCall(k.linear_rows, [*args, n], 1, buffers, ([(0, (n,))] if labeled else []) + [(scores.j, (n, cols))])


# --- LinearClassifier / LinearRegressor ------------------------------------------------------------------------
@register_op("LinearClassifier", since=1, domain=DOMAIN)
def build_linear_classifier(node, scaling=None, normalizer=None):
    """The LinearClassifier's kernel; with `scaling`, a Scaler's (offset, scale) per feature, of the Scaler before
    it (see build_scaled_linear); with `normalizer`, the Normalizer node reading its scores, whose output the
    kernel returns in their place (see build_normalized_linear)."""
    a = Attrs(node)
    coef, bias = a.floats("coefficients"), a.floats("intercepts")
    post = _post(a)
    labels, _ = _labels(a, required=False)
    targets = bias.size
    if coef.size == 0:
        a.fail("coefficients are required")
    if targets == 0 or coef.size % targets:
        a.fail(f"{coef.size} coefficients do not make one row per intercept ({targets} intercepts)")
    features = coef.size // targets
    two_labels = targets == 1 and labels.size == 2
    if targets == 1:
        if labels.size not in (0, 2):  # onnxruntime 1.32 refuses the others (the spec does not say)
            a.fail(f"one class (intercept) needs exactly 2 class labels or none, got {labels.size}")
        if not two_labels:  # the sign labels 1 / 0
            labels = np.array([0, 1], np.int64)
    elif labels.size < targets:
        a.fail(f"{targets} classes (intercepts) but {labels.size} class labels")
    else:
        labels = labels[:targets]
    coef = ro(coef.reshape(targets, features))
    bias = ro(bias)
    cols = 2 if two_labels else targets
    declare_outputs(node, T.STRING if labels.dtype == object else T.INT64, T.FLOAT)

    site = CallSite(k.linear_rows)
    new_out = np.zeros if post == k.PROBIT else np.empty
    rule, scaling = int(two_labels), scaling or _NO_SCALING
    norm = -1 if normalizer is None else normalizer_code(normalizer)
    classes, by_index = _classes(labels), labels.dtype == object

    def run(x):
        xf = _float_rows(node, x, features)
        n = xf.shape[0]
        written = np.empty(n, np.int64)
        out = new_out((n, cols), np.float32)
        raw = out if cols == targets else np.empty((n, targets), np.float32)
        normed = np.empty((n, cols), np.float32) if norm >= 0 else _NO_NORM[1]
        _linear(site, xf, coef, bias, k.LINEAR_CLASSIFIER, post, rule, classes, written, raw, out, scaling,
                (norm, normed))
        return (labels[written] if by_index else written), (normed if norm >= 0 else out)

    def native(x):
        if by_index or post == k.PROBIT:  # string labels map here; PROBIT's unwritten scores are zeros
            return None
        return _native_linear(x, features, coef, bias, k.LINEAR_CLASSIFIER, post, rule, classes, True, cols,
                              scaling, norm)
    run.native = native
    return run


@register_op("LinearRegressor", since=1, domain=DOMAIN)
def build_linear_regressor(node, scaling=None):
    """The LinearRegressor's kernel; `scaling` as build_linear_classifier's."""
    a = Attrs(node)
    targets = int(a.get("targets", 1))
    coef, bias = a.floats("coefficients"), a.floats("intercepts")
    post = _post(a)
    if targets <= 0 or coef.size == 0 or coef.size % targets:
        a.fail(f"{coef.size} coefficients do not make {targets} target rows")
    features = coef.size // targets
    if bias.size != targets:  # onnxruntime uses the intercepts only when there is one per target
        bias = np.zeros(targets, np.float32)
    coef, bias = ro(coef.reshape(targets, features)), ro(bias)
    declare_outputs(node, T.FLOAT)

    site = CallSite(k.linear_rows)

    scaling = scaling or _NO_SCALING

    def run(x):
        xf = _float_rows(node, x, features)
        out = np.empty((xf.shape[0], targets), np.float32)
        _linear(site, xf, coef, bias, k.REGRESSOR, post, 0, _NO_CLASSES, _NO_LABELS, out, out, scaling)
        return (out,)
    run.native = lambda x: _native_linear(x, features, coef, bias, k.REGRESSOR, post, 0, _NO_CLASSES, False,
                                          targets, scaling)
    return run


# --- Scaler -> linear model -> Normalizer, one step -------------------------------------------------------------
@register_chain("Scaler", "LinearClassifier", domain=DOMAIN)
@register_chain("Scaler", "LinearRegressor", domain=DOMAIN)
@register_chain("Scaler", "LinearClassifier", "Normalizer", domain=DOMAIN)
def build_scaled_linear(scaler, linear, normalizer=None):
    """A Scaler whose only reader is a LinearClassifier or LinearRegressor (scikit-learn's StandardScaler then a
    linear model, as skl2onnx writes it), run as one kernel: linear_rows scales each block of float32 rows as
    Scaler's kernel does, then multiplies (the same float32 values reach the GEMM: results equal the two steps').
    At batch 1 the Scaler's own step cost ~3.5 us, more than its arithmetic. Inputs other than float32 [N, F]
    with the model's F features run through the ops' kernels one after the other. A Normalizer of the
    classifier's scores joins the kernel as in build_normalized_linear."""
    t = scaler.inputs[0].type if scaler.inputs and scaler.inputs[0] is not None else None
    if not isinstance(t, TensorType) or t.elem_type != T.FLOAT:
        return None
    classifier = linear.op_type == "LinearClassifier"
    la = Attrs(linear)
    targets = la.floats("intercepts").size if classifier else int(la.get("targets", 1))
    features = la.floats("coefficients").size // max(targets, 1)
    offset, scale = scaler_attributes(scaler)
    if offset.size not in (1, features):
        return None  # the Scaler's own kernel names the mismatch when it runs
    scaling = scaler_columns(scaler, offset, scale, features, _F32)
    if classifier:
        fused = build_linear_classifier(linear, scaling, normalizer)
        linear_alone = build_linear_classifier(linear, None, normalizer)
    else:
        fused, linear_alone = build_linear_regressor(linear, scaling), build_linear_regressor(linear)
    scale_alone = build_scaler(scaler)

    def run(x):
        if type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 2 and x.shape[1] == features:
            return fused(x)
        return linear_alone(scale_alone(x)[0])
    run.native = fused.native
    return run


@register_chain("LinearClassifier", "Normalizer", domain=DOMAIN)
def build_normalized_linear(linear, normalizer):
    """A Normalizer whose input is a LinearClassifier's scores (skl2onnx's LogisticRegression: L1 over the
    probabilities), run in the classifier's kernel over each block of rows (linear_rows' `norm`): at batch 1 the
    Normalizer's own step cost ~1.8 us. Its output takes the scores' place: (labels, normalized scores)."""
    return build_linear_classifier(linear, None, normalizer)


# --- SVMs ------------------------------------------------------------------------------------------------------
class _Svm:
    """An SVM's attributes, checked: kernel, support vectors per class, coefficients, rho, probabilities."""

    def __init__(self, a: Attrs, vectors: int):
        self.kernel = a.get("kernel_type", "LINEAR")
        if self.kernel not in k.KERNELS:
            a.fail(f"unknown kernel_type {self.kernel!r} (expected one of {', '.join(k.KERNELS)})")
        params = a.floats("kernel_params")
        if "kernel_params" not in a.values:  # optional in the spec, required by onnxruntime (SVMCommon)
            a.fail("kernel_params is required (onnxruntime refuses an SVM without it; it may be empty)")
        if params.size not in (0, 3):
            a.fail(f"kernel_params must be empty or [gamma, coef0, degree], got {params.size} values")
        self.gamma, self.coef0, self.degree = (np.float32(v) for v in (params if params.size else (0, 0, 0)))
        self.coef, self.rho = a.floats("coefficients"), a.floats("rho")
        self.sv = a.floats("support_vectors")
        if self.coef.size == 0:
            a.fail("coefficients are required")
        if self.rho.size == 0:
            a.fail("rho is required")
        self.vectors = vectors
        self.features = 0
        if vectors > 0:
            if self.sv.size % vectors:
                a.fail(f"{self.sv.size} support_vectors values do not make {vectors} vectors")
            self.features = self.sv.size // vectors

    def kernel_args(self):
        """(support vectors transposed (F, V), kernel code, gamma, coef0, degree, MLAS's feature slice)."""
        sv = self.sv.reshape(self.vectors, self.features)
        return (ro(np.ascontiguousarray(sv.T)), k.KERNELS[self.kernel], self.gamma, self.coef0, self.degree,
                mlas_stride_k(self.vectors, self.features))


def mlas_stride_k(n: int, kk: int) -> int:
    """The slice of the inner dimension MLAS's SGEMM sums at a time for an (M x K) (K x N) product (MlasSgemmOp):
    its sums restart from zero per slice, which decides the rounding the SVM kernels reproduce."""
    stride_n, stride_k = 128, 128
    if n >= kk:
        while stride_k // 2 >= kk:
            stride_n, stride_k = stride_n * 2, stride_k // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride_k = stride_n // 2, stride_k * 2
    return stride_k


def _svm_run(site, x, svm_args, n_out, rows=SVM_BLOCK_ROWS):
    """svm_rows over the rows of x (site: the node's CallSite of it; svm_args up to and with the classes written
    per class index); returns (labels as written, scores)."""
    n = x.shape[0]
    label_idx = np.empty(n, np.int64)
    out = np.empty((n, n_out), np.float32)
    svt = svm_args[0]
    blocks = -(-n // rows)
    work = n * svt.size
    if blocks <= 1 or work < PARALLEL_GRAIN or numba.get_num_threads() <= 1:  # (the query last: it costs 0.6 us)
        rows, blocks = max(n, 1), 1 if n else 0
    _run_blocks(site, (x, *svm_args, label_idx, out, rows), blocks, work)
    return label_idx, out


@register_op("SVMClassifier", since=1, domain=DOMAIN)
def build_svm_classifier(node):
    a = Attrs(node)
    post = _post(a)
    labels, _ = _labels(a, required=True)
    classes = labels.size
    per_class = a.ints("vectors_per_class")
    s = _Svm(a, int(per_class.sum()) if per_class.size else 0)
    prob_a, prob_b = a.floats("prob_a"), a.floats("prob_b")
    if prob_a.size != prob_b.size:
        a.fail(f"prob_a ({prob_a.size} values) and prob_b ({prob_b.size}) must have the same size")
    have_proba = prob_a.size > 0
    declare_outputs(node, T.STRING if labels.dtype == object else T.INT64, T.FLOAT)

    if s.vectors == 0:  # liblinear: one coefficient row per class, rho[0] added to every score
        if s.coef.size % classes:
            a.fail(f"{s.coef.size} coefficients do not make one row per class ({classes} classes)")
        features = s.coef.size // classes
        coef = ro(s.coef.reshape(classes, features))
        bias = ro(np.full(classes, s.rho[0], np.float32))
        rule = k.ARGMAX if have_proba else (k.POSITIVE_WEIGHTS if (s.coef >= 0).all() else k.MIXED_WEIGHTS)

        site = CallSite(k.linear_rows)

        svm_classes, by_index = _classes(labels), labels.dtype == object

        def run_linear(x):
            xf = _float_rows(node, x, features)
            written = np.empty(xf.shape[0], np.int64)
            out = np.empty((xf.shape[0], classes), np.float32)
            _linear(site, xf, coef, bias, k.SVM_LINEAR, post, rule, svm_classes, written, out, out)
            return (labels[written] if by_index else written), out
        run_linear.native = lambda x: None if by_index else _native_linear(
            x, features, coef, bias, k.SVM_LINEAR, post, rule, svm_classes, True, classes)
        return run_linear

    if per_class.size != classes:
        a.fail(f"vectors_per_class has {per_class.size} entries for {classes} class labels")
    if classes < 2:
        return None  # no pair to decide: onnxruntime's scores are unset memory then
    pairs = classes * (classes - 1) // 2
    if s.coef.size < (classes - 1) * s.vectors:
        a.fail(f"coefficients has {s.coef.size} values, expected (classes - 1) x vectors = "
               f"{(classes - 1) * s.vectors}")
    if s.rho.size < pairs:
        a.fail(f"rho has {s.rho.size} values, expected one per pair of classes ({pairs})")
    if have_proba and prob_a.size < pairs:
        a.fail(f"prob_a / prob_b have {prob_a.size} values, expected one per pair of classes ({pairs})")
    coef = ro(s.coef[:(classes - 1) * s.vectors].reshape(classes - 1, s.vectors))
    starts = ro(np.concatenate([[0], np.cumsum(per_class)[:-1]]).astype(np.int64))
    n_out = classes if have_proba else (pairs if classes > 2 else 2)
    by_index = labels.dtype == object
    args = (*s.kernel_args(), coef, starts, ro(per_class.astype(np.int64)), ro(s.rho), ro(prob_a), ro(prob_b),
            post, True, False, 0, _classes(labels))

    site = CallSite(k.svm_rows)

    def run(x):
        written, out = _svm_run(site, _float_rows(node, x, s.features), args, n_out)
        return (labels[written] if by_index else written), out
    return run


@register_op("SVMRegressor", since=1, domain=DOMAIN)
def build_svm_regressor(node):
    a = Attrs(node)
    _post(a)  # checked; onnxruntime ignores it for regressors
    s = _Svm(a, int(a.get("n_supports", 0)))
    one_class = int(a.get("one_class", 0)) != 0
    declare_outputs(node, T.FLOAT)
    if s.vectors == 0:  # linear: coefficients . x + rho[0]
        features = s.coef.size
        coef, bias = ro(s.coef.reshape(1, features)), ro(s.rho[:1].copy())

        site = CallSite(k.linear_rows)

        def run_linear(x):
            xf = _float_rows(node, x, features)
            out = np.empty((xf.shape[0], 1), np.float32)
            _linear(site, xf, coef, bias, k.REGRESSOR, k.NONE, int(one_class), _NO_CLASSES, _NO_LABELS, out, out)
            return (out,)
        run_linear.native = lambda x: _native_linear(x, features, coef, bias, k.REGRESSOR, k.NONE, int(one_class),
                                                     _NO_CLASSES, False, 1)
        return run_linear

    if s.coef.size < s.vectors:
        a.fail(f"coefficients has {s.coef.size} values for {s.vectors} support vectors")
    coef = ro(s.coef[:s.vectors].reshape(1, s.vectors))
    none = ro(np.zeros(0, np.float32))
    args = (*s.kernel_args(), coef, ro(np.zeros(0, np.int64)), ro(np.zeros(0, np.int64)), ro(s.rho), none, none,
            k.NONE, False, one_class, mlas_stride_k(1, s.vectors), _NO_CLASSES)

    site = CallSite(k.svm_rows)

    def run(x):
        _, out = _svm_run(site, _float_rows(node, x, s.features), args, 1)
        return (out,)
    return run
