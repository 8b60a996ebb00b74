"""RNN, GRU and LSTM (7, 14, 22) on the CPU provider: float32/float64, every direction (forward, reverse,
bidirectional: the two directions one after the other), layout 0 ([seq, batch, ...]) and 1 ([batch, seq, ...]),
sequence_lens, initial states, LSTM peepholes and input_forget, GRU linear_before_reset, clip, and the activations
ONNX lists with their alpha/beta.

Per direction the kernel of onnxjit.kernels.rnn projects every time step's input with one BLAS GEMM and runs the
recurrence step by step (see there). A batch row whose sequence_lens is 0 gets zero final states, as onnxruntime
gives them (not its initial state). Layout 1 inputs are transposed to time-major copies and the outputs back.
Activation names are case-insensitive; activation_alpha/activation_beta are consumed in order by the activations
that take them (over all directions, as onnxruntime reads them), an exhausted list giving onnxruntime's defaults.
A node whose activations list does not hold one set per direction, or with an unknown activation or direction, is
left to the next provider, as are the opset-1/3 forms of these ops.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto as T

from onnxjit.kernels import rnn as krnn
from onnxjit.ops.nn import float_type, wanted_outputs
from onnxjit.ops.registry import attr, input_tensor_types, register_op

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
# onnxruntime's values for an activation whose alpha / beta the attribute lists do not give
_ALPHA_DEFAULTS = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0, "hardsigmoid": 0.2,
                   "elu": 1.0}
_BETA_DEFAULTS = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}


@dataclass(frozen=True)
class RecurrentAttrs:
    op: str  # RNN, GRU or LSTM
    reverse: tuple[bool, ...]  # per direction
    hidden_size: int | None
    layout: int
    clip: float  # 0: none
    activations: tuple[tuple[int, ...], ...]  # per direction, krnn activation codes
    alphas: tuple[tuple[float, ...], ...]
    betas: tuple[tuple[float, ...], ...]
    linear_before_reset: bool = False
    input_forget: bool = False


def _strings(value) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in value]


def _recurrent_attrs(node) -> RecurrentAttrs | None:
    reverse = _DIRECTIONS.get(attr(node, "direction", "forward"))
    if reverse is None:
        return None
    per_direction = len(_DEFAULT_ACTIVATIONS[node.op_type])
    names = [n.lower() for n in _strings(attr(node, "activations", None) or [])]
    if not names:
        names = list(_DEFAULT_ACTIVATIONS[node.op_type]) * len(reverse)
    if len(names) != per_direction * len(reverse) or any(n not in krnn.ACTIVATIONS for n in names):
        return None
    alpha_list = list(attr(node, "activation_alpha", None) or [])
    beta_list = list(attr(node, "activation_beta", None) or [])
    alphas, betas = [], []
    for n in names:
        alphas.append(float(alpha_list.pop(0)) if n in _ALPHA_DEFAULTS and alpha_list else _ALPHA_DEFAULTS.get(n, 0.0))
        betas.append(float(beta_list.pop(0)) if n in _BETA_DEFAULTS and beta_list else _BETA_DEFAULTS.get(n, 0.0))
    codes = [krnn.ACTIVATIONS.index(n) for n in names]

    def split(v):
        return tuple(tuple(v[d * per_direction:(d + 1) * per_direction]) for d in range(len(reverse)))
    hidden = attr(node, "hidden_size")
    clip = attr(node, "clip")
    return RecurrentAttrs(op=node.op_type, reverse=reverse, hidden_size=None if hidden is None else int(hidden),
                          layout=int(attr(node, "layout", 0)), clip=0.0 if clip is None else float(clip),
                          activations=split(codes), alphas=split(alphas), betas=split(betas),
                          linear_before_reset=bool(attr(node, "linear_before_reset", 0)),
                          input_forget=bool(attr(node, "input_forget", 0)))


def _state(a: RecurrentAttrs, name: str, value, dirs: int, batch: int, hidden: int, dtype) -> np.ndarray:
    """An initial state as a [dirs, batch, hidden] array (zeros when absent)."""
    if value is None:
        return np.zeros((dirs, batch, hidden), dtype)
    value = np.asarray(value)
    want = (batch, dirs, hidden) if a.layout else (dirs, batch, hidden)
    if value.shape != want or value.dtype != dtype:
        raise ValueError(f"{a.op}: {name} must be {dtype} of shape {want}, got {value.dtype} {value.shape}")
    return value.transpose(1, 0, 2) if a.layout else value


def _check(a: RecurrentAttrs, name: str, value: np.ndarray, shape: tuple, dtype) -> None:
    if value.shape != shape or value.dtype != dtype:
        raise ValueError(f"{a.op}: {name} must be {dtype} of shape {shape}, got {value.dtype} {value.shape}")


def recurrent(a: RecurrentAttrs, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None,
              peephole=None) -> tuple:
    """(Y, Y_h, Y_c) of RNN / GRU / LSTM (Y_c None but for LSTM)."""
    x, w, r = np.asarray(x), np.asarray(w), np.asarray(r)
    if x.ndim != 3:
        raise ValueError(f"{a.op}: X must be 3-D [{'batch, seq' if a.layout else 'seq, batch'}, input_size], "
                         f"got shape {x.shape}")
    dtype = x.dtype
    xt = np.ascontiguousarray(x.transpose(1, 0, 2) if a.layout else x)
    steps, batch, inputs = xt.shape
    dirs, gates = len(a.reverse), _GATES[a.op]
    hidden = r.shape[-1] if r.ndim == 3 else -1
    if a.hidden_size is not None and a.hidden_size != hidden:
        raise ValueError(f"{a.op}: R must have shape ({dirs}, {gates * a.hidden_size}, {a.hidden_size}) for "
                         f"hidden_size {a.hidden_size}, got {r.shape}")
    _check(a, "W", w, (dirs, gates * hidden, inputs), dtype)
    _check(a, "R", r, (dirs, gates * hidden, hidden), dtype)
    if b is None:
        b = np.zeros((dirs, 2 * gates * hidden), dtype)
    b = np.asarray(b)
    _check(a, "B", b, (dirs, 2 * gates * hidden), dtype)
    if sequence_lens is None:
        lens = np.full(batch, steps, np.int64)
    else:
        lens = np.asarray(sequence_lens).astype(np.int64)
        if lens.shape != (batch,) or (lens < 0).any() or (lens > steps).any():
            raise ValueError(f"{a.op}: sequence_lens must hold {batch} lengths in [0, {steps}], got {lens}")
    h0 = _state(a, "initial_h", initial_h, dirs, batch, hidden, dtype)
    c0 = _state(a, "initial_c", initial_c, dirs, batch, hidden, dtype)
    if peephole is None:
        peephole = np.zeros((dirs, 3 * hidden), dtype)
    peephole = np.asarray(peephole)
    if a.op == "LSTM":
        _check(a, "P", peephole, (dirs, 3 * hidden), dtype)
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(a.reverse):
        act = np.array(a.activations[d], np.int64)
        alpha, beta = np.array(a.alphas[d], dtype), np.array(a.betas[d], dtype)
        wb, rb = b[d, :gates * hidden], b[d, gates * hidden:]
        y = np.zeros((steps, batch, hidden), dtype)
        h = np.array(h0[d], dtype, order="C")
        clip = dtype.type(a.clip)
        if a.op == "RNN":
            krnn.rnn(xt, w[d], r[d], wb + rb, h, lens, reverse, act, alpha, beta, clip, y)
        elif a.op == "GRU":
            bias = wb + rb
            if a.linear_before_reset:
                bias[2 * hidden:] = wb[2 * hidden:]
            krnn.gru(xt, w[d], r[d], bias, np.ascontiguousarray(rb[2 * hidden:]), h, lens, reverse,
                     a.linear_before_reset, act, alpha, beta, clip, y)
        else:
            c = np.array(c0[d], dtype, order="C")
            krnn.lstm(xt, w[d], r[d], wb + rb, np.ascontiguousarray(peephole[d]), h, c, lens, reverse,
                      a.input_forget, act, alpha, beta, clip, y)
            cs.append(c)
        ys.append(y)
        hs.append(h)
    empty = lens == 0  # onnxruntime gives zero final states for a sequence of no step
    for state in hs + cs:
        state[empty] = 0
    y, y_h = np.stack(ys, axis=1), np.stack(hs)  # [seq, dirs, batch, hidden], [dirs, batch, hidden]
    y_c = np.stack(cs) if cs else None
    if a.layout:
        y = np.ascontiguousarray(y.transpose(2, 0, 1, 3))
        y_h = np.ascontiguousarray(y_h.transpose(1, 0, 2))
        y_c = None if y_c is None else np.ascontiguousarray(y_c.transpose(1, 0, 2))
    return y, y_h, y_c


def build_recurrent(node):
    n_in = 8 if node.op_type == "LSTM" else 6
    if len(node.inputs) < 3 or len(node.inputs) > n_in or any(v is None for v in node.inputs[:3]):
        return None
    float_inputs = [i for i in range(n_in) if i != 4]
    if float_type(node, float_inputs) not in (T.FLOAT, T.DOUBLE):
        return None
    types = input_tensor_types(node)
    if len(node.inputs) > 4 and node.inputs[4] is not None and (types[4] is None or types[4].elem_type != T.INT32):
        return None
    a = _recurrent_attrs(node)
    if a is None:
        return None
    n_out = max(wanted_outputs(node), 1)

    def run(*inputs):
        return recurrent(a, *inputs)[:n_out]
    return run


for _op in ("RNN", "GRU", "LSTM"):
    for _v in (7, 14, 22):
        register_op(_op, since=_v)(build_recurrent)
