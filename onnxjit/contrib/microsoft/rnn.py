"""com.microsoft DynamicQuantizeLSTM (numpy reference): an LSTM whose weights are 8-bit quantized and whose GEMM
inputs are quantized on the fly, as onnxruntime's CPU kernel computes it.

DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point, R_scale,
R_zero_point) -> (Y?, Y_h?, Y_c?)
  X [T, B, I] float; W [D, I, 4H] and R [D, H, 4H] int8 or uint8 (transposed against ONNX LSTM's W [D, 4H, I]),
  gates in ONNX's order i, o, f, c; W_scale / W_zero_point [D] (per tensor) or [D, 4H] (per output column), R's
  alike (int8 weights: zero points 0); B [D, 8H] (Wb then Rb), P [D, 3H] peepholes (i, o, f); attributes as ONNX
  LSTM: hidden_size, direction, activations (default Sigmoid, Tanh, Tanh) with activation_alpha / activation_beta,
  clip, input_forget.
  Each product A @ Wq (the inputs of all steps at once; at each step, each batch row's hidden state alone)
  quantizes A to uint8 per tensor: scale = (max(A, 0) - min(A, 0)) / 255, zero point round(-min / scale), values
  round(A / scale) + zero point clipped to [0, 255] (rounding half to even), and computes (Aq - a_zp) @ (Wq - w_zp)
  * a_scale * w_scale exactly in integers. Y [T, D, B, H]: zeros past a row's sequence length; Y_h / Y_c [D, B, H]
  the last states.
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib.microsoft import reference_op
from onnxjit.contrib.microsoft.quantized import dynamic_quantization, saturate

OP = "DynamicQuantizeLSTM"
_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
# onnxruntime's alpha / beta of an activation the attribute lists do not give (ONNX's defaults)
_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0, "hardsigmoid": 0.2, "elu": 1.0}
_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}


def _activation(name: str, alpha: float, beta: float):
    table = {
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0),
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: np.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x >= 0, x, alpha * np.expm1(x)),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.logaddexp(0, x),
    }
    if name not in table:
        raise ValueError(f"{OP}: unknown activation {name!r}")
    return table[name]


def quantized_product(a: np.ndarray, wq: np.ndarray, w_scale: np.ndarray, w_zero: np.ndarray) -> np.ndarray:
    """a [M, K] float32 times the quantized wq [K, N] (scale, zero point per column or per tensor), a quantized
    on the fly as DynamicQuantizeLinear does (see the module docstring); float64."""
    a_scale, a_zero = dynamic_quantization(a)
    qa = saturate(np.rint(a / a_scale) + np.float32(a_zero), np.uint8).astype(np.int64)
    acc = (qa - int(a_zero)) @ (wq.astype(np.int64) - w_zero.astype(np.int64))
    return acc.astype(np.float64) * (float(a_scale) * w_scale.astype(np.float64))


def _per_column(v: np.ndarray, d: int, gates: int, name: str) -> np.ndarray:
    v = np.asarray(v)
    if v.ndim == 1:
        return np.full(gates, v[d])
    if v.shape[-1] != gates:
        raise ValueError(f"{OP}: {name} must be [num_directions] or [num_directions, {gates}], got {v.shape}")
    return v[d]


@reference_op
class DynamicQuantizeLSTM(OpRun):
    """See the module docstring."""

    def _run(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, w_scale=None,
             w_zero_point=None, r_scale=None, r_zero_point=None, hidden_size=None, direction="forward",
             activations=None, activation_alpha=None, activation_beta=None, clip=None, input_forget=0):
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in _DIRECTIONS:
            raise ValueError(f"{OP}: direction must be forward, reverse or bidirectional, got {direction!r}")
        reverse = _DIRECTIONS[direction]
        dirs = len(reverse)
        if x.ndim != 3 or w.ndim != 3 or r.ndim != 3 or w.shape[0] != dirs or w.shape[1] != x.shape[2] \
                or r.shape[0] != dirs or r.shape[2] != 4 * r.shape[1] or w.shape[2] != r.shape[2]:
            raise ValueError(f"{OP}: X [seq, batch, input], W [{dirs}, input, 4 * hidden], R [{dirs}, hidden, "
                             f"4 * hidden] expected, got {x.shape}, {w.shape}, {r.shape}")
        if any(v is None for v in (w_scale, w_zero_point, r_scale, r_zero_point)):
            raise ValueError(f"{OP}: W_scale, W_zero_point, R_scale and R_zero_point are required")
        for name, q, zero in (("W", w, w_zero_point), ("R", r, r_zero_point)):
            if q.dtype == np.int8 and np.any(zero != 0):
                raise ValueError(f"{OP}: int8 {name} must be quantized symmetrically ({name}_zero_point 0), as "
                                 f"onnxruntime requires")
        steps, batch, _ = x.shape
        hidden = r.shape[1]
        if hidden_size is not None and hidden_size != hidden:
            raise ValueError(f"{OP}: hidden_size {hidden_size} differs from R's {hidden}")
        names = [(n.decode() if isinstance(n, bytes) else n).lower() for n in (activations or [])] or \
            ["sigmoid", "tanh", "tanh"] * dirs
        if len(names) != 3 * dirs:
            raise ValueError(f"{OP}: activations must list 3 per direction, got {names}")
        alphas, betas = list(activation_alpha or []), list(activation_beta or [])
        acts = [_activation(n, alphas.pop(0) if n in _ALPHA and alphas else _ALPHA.get(n, 0.0),
                            betas.pop(0) if n in _BETA and betas else _BETA.get(n, 0.0)) for n in names]
        lens = np.full(batch, steps, np.int64) if sequence_lens is None else sequence_lens.astype(np.int64)
        y = np.zeros((steps, dirs, batch, hidden), np.float64)
        y_h = np.zeros((dirs, batch, hidden), np.float64)
        y_c = np.zeros((dirs, batch, hidden), np.float64)
        for d in range(dirs):
            f, g, h = acts[3 * d:3 * d + 3]
            bias = np.zeros(8 * hidden) if b is None else b[d].astype(np.float64)
            peep = np.zeros(3 * hidden) if p is None else p[d].astype(np.float64)
            xw = quantized_product(x.reshape(steps * batch, -1), w[d], _per_column(w_scale, d, 4 * hidden, "W_scale"),
                                   _per_column(w_zero_point, d, 4 * hidden, "W_zero_point")).reshape(steps, batch, -1)
            r_s, r_z = _per_column(r_scale, d, 4 * hidden, "R_scale"), _per_column(r_zero_point, d, 4 * hidden,
                                                                                   "R_zero_point")
            ht = np.zeros((batch, hidden)) if initial_h is None else initial_h[d].astype(np.float64)
            ct = np.zeros((batch, hidden)) if initial_c is None else initial_c[d].astype(np.float64)
            for step in range(steps):
                active = step < lens
                t = np.where(active, lens - 1 - step, 0) if reverse[d] else np.full(batch, step)
                # each batch row's hidden state is quantized on its own (onnxruntime's per-row recurrence)
                hr = np.concatenate([quantized_product(ht[j:j + 1].astype(np.float32), r[d], r_s, r_z)
                                     for j in range(batch)]) if batch else np.zeros((0, 4 * hidden))
                gates = xw[t, np.arange(batch)] + hr + bias[:4 * hidden] + bias[4 * hidden:]
                if clip:
                    gates = np.clip(gates, -clip, clip)
                gi, go, gf, gc = np.split(gates, 4, axis=1)
                i = f(gi + peep[:hidden] * ct)
                fg = 1 - i if input_forget else f(gf + peep[2 * hidden:] * ct)
                c_new = fg * ct + i * g(gc)
                o = f(go + peep[hidden:2 * hidden] * c_new)
                h_new = o * h(c_new)
                ct = np.where(active[:, None], c_new, ct)
                ht = np.where(active[:, None], h_new, ht)
                y[t[active], d, np.arange(batch)[active]] = h_new[active]
            y_h[d], y_c[d] = np.where(lens[:, None] > 0, ht, 0), np.where(lens[:, None] > 0, ct, 0)
        return y.astype(x.dtype), y_h.astype(x.dtype), y_c.astype(x.dtype)
