"""Softmax, LogSoftmax, Hardmax and LayerNormalization on the CPU provider (float16, bfloat16, float, double;
the 16-bit floats are computed in float32 and rounded once, as onnxruntime does).

Softmax/LogSoftmax/Hardmax before opset 13 coerce the input to 2-D at `axis` (default 1) and normalize each
row of the flattened trailing dims; from 13 they normalize along `axis` alone (default -1). Both run the
parallel row kernel of onnxjit.kernels.normalization; an axis that is not last is moved last for it (a
transposed copy there and back). Hardmax is a one-hot of the first maximum (ArgMax's kernel; a row whose first
element is NaN is all zeros, as onnxruntime gives it).

LayerNormalization (17) normalizes the flattened dims from `axis` on; Scale and B broadcast to those dims. It
computes in float32 (float64 for double inputs or stash_type=double); Mean and InvStdDev have the shape
X.shape[:axis] + [1] * (rank - axis) and the stash_type dtype (float32 by default, as onnxruntime gives them even
for double inputs). When X is a dead buffer freshly made by one of this module's ops (Softmax -> LayerNorm with
no other reader of the softmax output), Y is written over it: no new buffer to fault in, no read-for-ownership
of the destination (see `input_is_dead_fresh_buffer`).

The com.onnxjit LayerNormalization (the same op for models older than opset 17) runs the same builder;
com.onnxjit SkipLayerNormalization adds input + skip (+ bias) in the input dtype into a fresh buffer, then runs the
layer-norm rows over it, in place unless the sum is an output too.

RMSNormalization (23) divides each row of the flattened dims from `axis` on by its root mean square (plus
epsilon) and multiplies by Scale (broadcast to those dims); it computes in float32, or float64 for double inputs or
stash_type=double (as onnxruntime), over threads through `run_units`. Its inputs are float16, float or double.

Builders decline a known input dtype that is not a float, and stash types other than float, double and
bfloat16.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from onnx import TensorProto as T

from onnxjit.cache import deferred_compile
from onnxjit.ir.types import np_dtype
from onnxjit.kernels import normalization as kn
from onnxjit.kernels import reduce as kr
from onnxjit.ops import stand_ins
from onnxjit.ops.nn import ro, run_units
from onnxjit.ops.reduce import F32, F64, compute_float, input_elem
from onnxjit.ops.registry import attr, register_chain, register_op

FLOATS = frozenset({T.FLOAT16, T.BFLOAT16, T.FLOAT, T.DOUBLE})
# Softmax on halves is left to the fallback: computing in float32 and rounding once differs from the
# per-step half rounding the conformance data was made with (test_attention_4d_causal_fp16_expanded)
SOFTMAX_FLOATS = frozenset({T.FLOAT, T.DOUBLE})
SOFTMAX, LOGSOFTMAX, HARDMAX = 0, 1, 2
_NAMES = {SOFTMAX: "Softmax", LOGSOFTMAX: "LogSoftmax", HARDMAX: "Hardmax"}
BLOCK_ELEMENTS = 1 << 16  # elements of a block of rows, the row kernel's unit of work


def _dummy_rows(dtype: np.dtype) -> np.ndarray:
    return ro(np.zeros((1, 1), dtype))


def _run_rows(x2, y2, op, scale=None, bias=None, eps=0.0, mean=None, inv=None):
    """kn.softmax_rows (op SOFTMAX, LOG_SOFTMAX: scale to inv unused) or kn.rows (the layer norm forms) over
    (rows, n) arrays, in blocks of about BLOCK_ELEMENTS over the threads."""
    block = max(1, BLOCK_ELEMENTS // max(y2.shape[1], 1))
    units = -(-y2.shape[0] // block)
    if op in (kn.SOFTMAX, kn.LOG_SOFTMAX):
        args = (x2, y2, op == kn.LOG_SOFTMAX, block)
        if deferred_compile.stands_in(kn.softmax_rows, args):
            stand_ins.softmax_rows(x2, y2, op == kn.LOG_SOFTMAX)
        else:
            run_units(kn.softmax_rows, args, units, y2.size * 8)
        return
    args = (x2, y2, op, scale, bias, y2.dtype.type(eps), mean, inv, block)
    if deferred_compile.stands_in(kn.rows, args):
        stand_ins.layer_norm_rows(*args[:-1])
    else:
        run_units(kn.rows, args, units, y2.size * 8)


def softmax_geometry(shape, axis: int, per_axis: bool, name: str) -> tuple[int, int, int]:
    """(outer, n, inner) of Softmax-family rows over a tensor of `shape`: the n values a row normalizes lie `inner`
    apart (opset 13's single axis) or together (older opsets: every axis from `axis` on); a 0-d tensor is one row
    of one value."""
    nd = len(shape)
    if nd == 0:
        return 1, 1, 1
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ValueError(f"{name}: axis {axis} is out of range for an input of rank {nd}")
    if per_axis:
        return math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
    return math.prod(shape[:a]), math.prod(shape[a:]), 1


def softmax(x: np.ndarray, axis: int, mode: int, per_axis: bool) -> np.ndarray:
    x = np.asarray(x)
    shape, dtype = x.shape, x.dtype
    if x.ndim == 0:  # a single element
        return softmax(x.reshape(1), 0, mode, per_axis).reshape(())
    outer, n, inner = softmax_geometry(shape, axis, per_axis, _NAMES[mode])
    if x.size == 0:
        return np.empty(shape, dtype)
    cdt = compute_float(dtype)
    xc = ro(np.ascontiguousarray(x, dtype=cdt).reshape(outer, n, inner))
    if mode == HARDMAX:
        idx = np.empty((outer, inner), np.int64)
        kr.argminmax(xc, True, False, idx)
        y = np.zeros((outer, n, inner), dtype)
        # onnxruntime marks the first element equal to the row max: none when that max is NaN (a NaN first)
        hit = ~np.isnan(np.take_along_axis(xc, idx[:, None, :], axis=1))
        np.put_along_axis(y, idx[:, None, :], hit.astype(dtype), axis=1)
        return y.reshape(shape)
    op = kn.LOG_SOFTMAX if mode == LOGSOFTMAX else kn.SOFTMAX
    if inner == 1:
        y = np.empty((outer, n), cdt)
        _run_rows(xc.reshape(outer, n), y, op)
    else:  # the normalized axis moved last and back: two copies, then the parallel row kernel
        y = np.empty((outer, inner, n), cdt)
        _run_rows(ro(xc.transpose(0, 2, 1)).reshape(outer * inner, n), y.reshape(outer * inner, n), op)
        y = np.ascontiguousarray(y.transpose(0, 2, 1))
    if cdt != dtype:
        y = y.astype(dtype)
    return y.reshape(shape)


def _softmax_builder(mode: int, per_axis: bool):
    def build(node):
        if len(node.inputs) != 1 or node.inputs[0] is None:
            return None
        elem = input_elem(node)
        if elem not in SOFTMAX_FLOATS:
            return None
        axis = int(attr(node, "axis", -1 if per_axis else 1))

        def run(x):
            return (softmax(x, axis, mode, per_axis),)
        return run
    return build


for _mode, _op in _NAMES.items():
    for _v in (1, 11, 13):
        register_op(_op, since=_v)(_softmax_builder(_mode, per_axis=_v >= 13))


# --- LayerNormalization -----------------------------------------------------------------------------------------
# Ops whose kernels (this module's, and onnx.reference's on the fallback provider) always return a freshly
# allocated first output, never a view of an input or a buffer held elsewhere.
FRESH_OUTPUT_OPS = frozenset({"Softmax", "LogSoftmax", "LayerNormalization"})


def input_is_dead_fresh_buffer(node) -> bool:
    """Whether `node` may write its output over its input 0: a buffer freshly made by one of FRESH_OUTPUT_OPS,
    read by no other node, not a graph output and not captured by a subgraph, so nothing else can see it.
    (Softmax -> LayerNormalization then reuses the softmax buffer instead of faulting in a new one.)"""
    v = node.inputs[0]
    g, p = node.graph, v.producer
    if g is None or p is None or p.domain != "" or p.op_type not in FRESH_OUTPUT_OPS or not p.outputs \
            or p.outputs[0] is not v:
        return False
    if len(v.uses) != 1 or any(o is v or o.name == v.name for o in g.outputs):
        return False
    return not any(v.name in sub.outer_names for n in g.nodes for sub in n.subgraphs())



_STASH = {T.FLOAT: np.dtype(np.float32), T.DOUBLE: F64, T.BFLOAT16: np_dtype(T.BFLOAT16)}


@functools.lru_cache(maxsize=64)
def _zeros(n: int, char: str) -> np.ndarray:
    """A read-only row of n zeros of the dtype with this one-letter code, made once."""
    return ro(np.zeros(n, char))


def _param_rows(p, shape: tuple, a: int, rows: int, n: int, cdt: np.dtype) -> np.ndarray:
    """Scale or B as a (1, n) array (it broadcasts to the normalized dims) or a (rows, n) one (it also spans
    leading dims of X), in the compute dtype."""
    p = np.asarray(p)
    if p.dtype == cdt and p.size == n and p.flags.c_contiguous and p.shape == shape[len(shape) - p.ndim:] \
            and p.ndim <= len(shape) - a:  # already the normalized dims' values (np.broadcast_to costs ~5 us)
        return ro(p.reshape(1, n))
    if p.ndim <= len(shape) - a:
        return ro(np.ascontiguousarray(np.broadcast_to(p, shape[a:]), dtype=cdt).reshape(1, n))
    return ro(np.ascontiguousarray(np.broadcast_to(p, shape), dtype=cdt).reshape(rows, n))


def layer_norm(x, scale, bias, axis: int, eps: float, stash_dtype: np.dtype, n_out: int, inplace: bool = False):
    """LayerNormalization's outputs; with `inplace` Y may be written over X (the caller knows X is dead)."""
    x = np.asarray(x)
    shape, dtype = x.shape, x.dtype
    r = x.ndim
    if not -r <= axis < r:
        raise ValueError(f"LayerNormalization: axis {axis} is out of range for an input of rank {r}")
    a = axis + r if axis < 0 else axis
    rows, n = math.prod(shape[:a]), math.prod(shape[a:])
    cdt = F64 if (dtype == F64 or stash_dtype == F64) else compute_float(dtype)
    stat_shape = shape[:a] + (1,) * (r - a)
    mean = np.empty(rows, cdt)
    inv = np.empty(rows, cdt)
    if x.size:
        sc = _param_rows(scale, shape, a, rows, n, cdt)
        bi = _zeros(n, cdt.char).reshape(1, n) if bias is None else _param_rows(bias, shape, a, rows, n, cdt)
        if inplace and dtype == cdt and x.flags.c_contiguous and x.flags.writeable:
            y = x.reshape(rows, n)
            _run_rows(_dummy_rows(cdt), y, kn.LAYER_NORM_INPLACE, sc, bi, eps, mean, inv)
        else:
            y = np.empty((rows, n), cdt)
            _run_rows(ro(np.ascontiguousarray(x, dtype=cdt).reshape(rows, n)), y, kn.LAYER_NORM, sc, bi, eps, mean,
                      inv)
    else:
        y = np.empty((rows, n), cdt)  # nothing to normalize
        mean.fill(0)
        inv.fill(1 / math.sqrt(eps))
    return _layer_norm_outputs(y, mean, inv, shape, dtype, stat_shape, stash_dtype, n_out)


def _layer_norm_outputs(y, mean, inv, shape, dtype, stat_shape, stash_dtype, n_out) -> list:
    outs = [y.reshape(shape) if y.dtype == dtype else y.reshape(shape).astype(dtype)]
    if n_out > 1:
        outs.append(mean.astype(stash_dtype, copy=False).reshape(stat_shape))
    if n_out > 2:
        outs.append(inv.astype(stash_dtype, copy=False).reshape(stat_shape))
    return outs


def softmax_layer_norm(x, mode: int, sm_axis: int, per_axis: bool, scale, bias, ln_axis: int, eps: float,
                       stash_dtype: np.dtype, n_out: int) -> list:
    """LayerNormalization(Softmax(x)) in one pass over memory when both normalize the last axis of a float32
    (stash float32) or float64 tensor; otherwise the two ops one after the other."""
    x = np.asarray(x)
    shape, dtype, r = x.shape, x.dtype, x.ndim
    last = r - 1
    if (r == 0 or x.size == 0 or dtype not in (F32, F64) or (dtype == F32 and stash_dtype != F32)
            or (sm_axis + r if sm_axis < 0 else sm_axis) != last or (ln_axis + r if ln_axis < 0 else ln_axis) != last):
        return layer_norm(softmax(x, sm_axis, mode, per_axis), scale, bias, ln_axis, eps, stash_dtype, n_out,
                          inplace=True)
    n = shape[last]
    rows = x.size // n
    sc = _param_rows(scale, shape, last, rows, n, dtype)
    bi = _zeros(n, dtype.char).reshape(1, n) if bias is None else _param_rows(bias, shape, last, rows, n, dtype)
    y = np.empty((rows, n), dtype)
    mean, inv = np.empty(rows, dtype), np.empty(rows, dtype)
    op = kn.LOG_SOFTMAX_LAYER_NORM if mode == LOGSOFTMAX else kn.SOFTMAX_LAYER_NORM
    _run_rows(ro(np.ascontiguousarray(x).reshape(rows, n)), y, op, sc, bi, eps, mean, inv)
    return _layer_norm_outputs(y, mean, inv, shape, dtype, shape[:last] + (1,), stash_dtype, n_out)


def _layer_norm_params(node):
    """(axis, epsilon, stash dtype, number of outputs) of a LayerNormalization node this module runs, else None."""
    if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
        return None
    for i in range(min(len(node.inputs), 3)):
        elem = input_elem(node, i) if node.inputs[i] is not None else None
        if elem is not None and elem not in FLOATS:
            return None
    stash = int(attr(node, "stash_type", T.FLOAT))
    if stash not in _STASH:
        return None
    n_out = 0
    for i, v in enumerate(node.outputs):
        if v is not None and v.name:
            n_out = i + 1
    return int(attr(node, "axis", -1)), float(attr(node, "epsilon", 1e-5)), _STASH[stash], max(n_out, 1)


def build_layer_norm(node):
    params = _layer_norm_params(node)
    if params is None:
        return None
    axis, eps, stash_dtype, n_out = params
    inplace = input_is_dead_fresh_buffer(node)

    def run(x, scale, bias=None):
        return layer_norm(x, scale, bias, axis, eps, stash_dtype, n_out, inplace)
    return run


# ONNX's LayerNormalization is opset 17's; before it, onnxruntime's own in the ai.onnx domain (its optimizer
# writes it) is the same op
register_op("LayerNormalization", since=1)(build_layer_norm)
register_op("LayerNormalization", since=1, domain="com.onnxjit")(build_layer_norm)


def _build_softmax_layer_norm(mode: int):
    def build(softmax_node, ln_node):
        per_axis = softmax_node.opset >= 13
        if ln_node.opset < 17 or _softmax_builder(mode, per_axis)(softmax_node) is None:
            return None
        params = _layer_norm_params(ln_node)
        if params is None:
            return None
        axis, eps, stash_dtype, n_out = params
        sm_axis = int(attr(softmax_node, "axis", -1 if per_axis else 1))

        def run(x, scale, bias=None):
            return softmax_layer_norm(x, mode, sm_axis, per_axis, scale, bias, axis, eps, stash_dtype, n_out)
        return run
    return build


register_chain("Softmax", "LayerNormalization")(_build_softmax_layer_norm(SOFTMAX))
register_chain("LogSoftmax", "LayerNormalization")(_build_softmax_layer_norm(LOGSOFTMAX))


# --- com.onnxjit SkipLayerNormalization -----------------------------------------------------------------------------
def skip_layer_norm(x, skip, gamma, beta, bias, eps: float, n_out: int, want_sum: bool):
    """SkipLayerNormalization's outputs (see onnxjit.contrib.normalization): the sum in the input dtype into a
    fresh buffer, then the layer-norm rows over it (in place when the sum is not an output itself)."""
    x, skip = np.asarray(x), np.asarray(skip)
    if _fused_skip(x, skip, gamma, beta, bias):
        return _skip_layer_norm_rows(x, skip, gamma, beta, bias, eps, n_out, want_sum)
    total = np.add(x, skip)
    if bias is not None:
        np.add(total, bias, out=total, casting="unsafe")
    stash = F64 if total.dtype == F64 else F32
    if want_sum:
        return layer_norm(total, gamma, beta, -1, eps, stash, 3) + [total]
    return layer_norm(total, gamma, beta, -1, eps, stash, max(n_out, 1), inplace=True)


def _fused_skip(x, skip, gamma, beta, bias) -> bool:
    """Whether skip_rows runs this SkipLayerNormalization: float32 or float64 throughout, X the sum's shape and
    skip the trailing dims of X (leading 1s aside: it repeats over X's rows), a hidden-long bias."""
    if x.dtype not in (F32, F64) or skip.dtype != x.dtype or x.ndim == 0 or x.size == 0:
        return False
    dims = skip.shape
    while dims and dims[0] == 1 and len(dims) > 1:
        dims = dims[1:]
    if len(dims) > x.ndim or dims != x.shape[x.ndim - len(dims):]:
        return False
    n = x.shape[-1]
    return all(p is None or (np.shape(p) in ((n,), (1, n))) for p in (gamma, beta)) and \
        (bias is None or (bias.dtype == x.dtype and bias.shape == (n,)))


def _skip_layer_norm_rows(x, skip, gamma, beta, bias, eps: float, n_out: int, want_sum: bool) -> list:
    """skip_layer_norm's outputs through kn.skip_rows (see _fused_skip)."""
    shape, dtype = x.shape, x.dtype
    n = shape[-1]
    rows = x.size // n
    total = np.empty((rows, n), dtype)
    y = np.empty((rows, n), dtype) if want_sum else total
    mean, inv = np.empty(rows, dtype), np.empty(rows, dtype)
    sc = _param_rows(np.reshape(gamma, n), (rows, n), 1, rows, n, dtype)
    bi = _zeros(n, dtype.char).reshape(1, n) if beta is None else _param_rows(np.reshape(beta, n), (rows, n), 1,
                                                                               rows, n, dtype)
    addend = _zeros(n, dtype.char) if bias is None else ro(bias)  # + 0 leaves the sum as it is
    block = max(1, BLOCK_ELEMENTS // n)
    args = (ro(np.ascontiguousarray(x).reshape(rows, n)), ro(np.ascontiguousarray(skip).reshape(-1, n)), addend,
            total, y, not want_sum, sc, bi, dtype.type(eps), mean, inv, block)
    if deferred_compile.stands_in(kn.skip_rows, args):
        stand_ins.skip_layer_norm_rows(*args[:-1])
    else:
        run_units(kn.skip_rows, args, -(-rows // block), x.size * 8)
    outs = _layer_norm_outputs(y, mean, inv, shape, dtype, shape[:-1] + (1,), F64 if dtype == F64 else F32, n_out)
    if want_sum:
        return outs + [total.reshape(shape)]
    return outs


def build_skip_layer_norm(node):
    if len(node.inputs) < 3 or any(v is None for v in node.inputs[:3]):
        return None
    elems = {input_elem(node, i) for i, v in enumerate(node.inputs[:5]) if v is not None}
    if len(elems) != 1 or not elems <= FLOATS:
        return None
    eps = float(attr(node, "epsilon", 1e-5))
    present = [i for i, v in enumerate(node.outputs) if v is not None and v.name]
    n_out = max(present, default=0) + 1
    want_sum = n_out >= 4

    def run(x, skip, gamma, beta=None, bias=None):
        return skip_layer_norm(x, skip, gamma, beta, bias, eps, n_out, want_sum)
    return run


register_op("SkipLayerNormalization", since=1, domain="com.onnxjit")(build_skip_layer_norm)


# --- RMSNormalization -------------------------------------------------------------------------------------------
RMS_FLOATS = frozenset({T.FLOAT16, T.FLOAT, T.DOUBLE})


def rms_norm(x, scale, axis: int, eps: float, stash_dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    shape, dtype, r = x.shape, x.dtype, x.ndim
    if not -r <= axis < r:
        raise ValueError(f"RMSNormalization: axis {axis} is out of range for an input of rank {r}")
    a = axis + r if axis < 0 else axis
    rows, n = math.prod(shape[:a]), math.prod(shape[a:])
    cdt = F64 if (dtype == F64 or stash_dtype == F64) else F32
    y = np.empty((rows, n), cdt)
    if x.size:
        try:
            sc = _param_rows(scale, shape, a, rows, n, cdt)
        except ValueError:
            raise ValueError(f"RMSNormalization: Scale of shape {np.shape(scale)} does not broadcast to the "
                             f"normalized dims {shape[a:]} (or to X's shape {shape})") from None
        run_units(kn.rms_norm_rows, (ro(np.ascontiguousarray(x, dtype=cdt).reshape(rows, n)), sc, cdt.type(eps), y),
                  rows, 3 * x.size)
    y = y.reshape(shape)
    return y if cdt == dtype else y.astype(dtype)


@register_op("RMSNormalization", since=23)
def build_rms_norm(node):
    if len(node.inputs) != 2 or any(v is None for v in node.inputs):
        return None
    if {input_elem(node, 0), input_elem(node, 1)} - RMS_FLOATS or input_elem(node, 0) != input_elem(node, 1):
        return None
    stash = int(attr(node, "stash_type", T.FLOAT))
    if stash not in (T.FLOAT, T.DOUBLE):
        return None
    axis, eps, stash_dtype = int(attr(node, "axis", -1)), float(attr(node, "epsilon", 1e-5)), _STASH[stash]

    def run(x, scale):
        return (rms_norm(x, scale, axis, eps, stash_dtype),)
    return run
