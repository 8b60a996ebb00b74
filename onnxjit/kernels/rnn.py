"""RNN, GRU and LSTM over one direction of a sequence: X [T, B, I] (time-major), weights of one direction.

The input projection of every time step is one BLAS GEMM (np.dot of the [T * B, I] input with W^T, the biases that
can be folded added to it); the recurrence then runs step by step, each step one GEMM of the hidden state [B, H]
with R^T (two for GRU without linear_before_reset, whose candidate gate multiplies the reset gate in before R_h)
and the gate math per element. Rows of the batch may have shorter sequences (sequence_lens): at step s a row b is
active while s < lens[b] and reads time s, or lens[b] - 1 - s in reverse; an inactive row keeps its state and its
outputs stay zero. Activations are codes (ACTIVATIONS order) with their alpha/beta; `clip` > 0 bounds every gate
pre-activation to [-clip, clip]. Outputs: y [T, B, H] (zeros where no step ran), the final hidden (and cell) state.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath

# ONNX's activation names for recurrent ops, lower-cased; a kernel gets the index
ACTIVATIONS = ("relu", "tanh", "sigmoid", "affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid",
               "elu", "softsign", "softplus")
(RELU, TANH, SIGMOID, AFFINE, LEAKY_RELU, THRESHOLDED_RELU, SCALED_TANH, HARD_SIGMOID, ELU, SOFTSIGN,
 SOFTPLUS) = range(len(ACTIVATIONS))


@njit(cache=True, nogil=True)
def activate(code, alpha, beta, zero, one, x):
    """The activation `code` of x; zero and one are of x's type (an integer constant would widen float32)."""
    if code == TANH:
        return vmath.tanh(x)
    if code == SIGMOID:
        return vmath.sigmoid(x)
    if code == RELU:
        return x if x > zero else zero
    if code == AFFINE:
        return alpha * x + beta
    if code == LEAKY_RELU:
        return x if x >= zero else alpha * x
    if code == THRESHOLDED_RELU:
        return x if x > alpha else zero
    if code == SCALED_TANH:
        return alpha * vmath.tanh(beta * x)
    if code == HARD_SIGMOID:
        return min(max(alpha * x + beta, zero), one)
    if code == ELU:
        return x if x >= zero else alpha * vmath.expm1(x)
    if code == SOFTSIGN:
        return x / (one + abs(x))
    return vmath.softplus(x)


@njit(cache=True, nogil=True)
def _clip(x, clip):
    return min(max(x, -clip), clip) if clip > 0 else x


@njit(cache=True, nogil=True)
def _project(x, w, bias):
    """x [T, B, I] @ w [G, I]^T + bias [G] as [T, B, G]."""
    steps, batch, inputs = x.shape
    xw = np.dot(x.reshape(steps * batch, inputs), w.T)
    xw += bias
    return xw.reshape(steps, batch, w.shape[0])


@njit(cache=True, nogil=True)
def _time(s, length, reverse):
    return length - 1 - s if reverse else s


@njit(cache=True, nogil=True)
def rnn(x, w, r, bias, h, lens, reverse, act, alpha, beta, clip, y):
    """Ht = act(Xt W^T + Ht-1 R^T + Wb + Rb); bias [H] is Wb + Rb; h [B, H] holds H0 and receives the final state."""
    xw = _project(x, w, bias)
    batch, hidden = h.shape
    zero, one = h.dtype.type(0), h.dtype.type(1)
    for s in range(lens.max() if lens.size else 0):
        hr = np.dot(h, r.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            for j in range(hidden):
                v = activate(act[0], alpha[0], beta[0], zero, one, _clip(xw[t, b, j] + hr[b, j], clip))
                h[b, j] = v
                y[t, b, j] = v


@njit(cache=True, nogil=True)
def gru(x, w, r, bias, rb_h, h, lens, reverse, linear_before_reset, act, alpha, beta, clip, y):
    """GRU, gates z, r, h: zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz), rt likewise, then
    ht = g(Xt Wh^T + (rt * Ht-1) Rh^T + Rbh + Wbh), or with linear_before_reset g(Xt Wh^T + rt * (Ht-1 Rh^T + Rbh) +
    Wbh), and Ht = (1 - zt) * ht + zt * Ht-1. bias [3H] holds the folded biases (Rbh folded in unless
    linear_before_reset, which adds rb_h [H] inside)."""
    xw = _project(x, w, bias)
    batch, hidden = h.shape
    zero, one = h.dtype.type(0), h.dtype.type(1)
    r_zr = r[:2 * hidden]
    r_h = r[2 * hidden:]
    z = np.zeros((batch, hidden), h.dtype)
    reset = np.zeros((batch, hidden), h.dtype)
    for s in range(lens.max() if lens.size else 0):
        hzr = np.dot(h, r_zr.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            for j in range(hidden):
                z[b, j] = activate(act[0], alpha[0], beta[0], zero, one, _clip(xw[t, b, j] + hzr[b, j], clip))
                reset[b, j] = activate(act[0], alpha[0], beta[0], zero, one,
                                       _clip(xw[t, b, hidden + j] + hzr[b, hidden + j], clip))
        if linear_before_reset:
            hh = np.dot(h, r_h.T)
        else:
            hh = np.dot(reset * h, r_h.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            for j in range(hidden):
                pre = xw[t, b, 2 * hidden + j]
                pre += reset[b, j] * (hh[b, j] + rb_h[j]) if linear_before_reset else hh[b, j]
                candidate = activate(act[1], alpha[1], beta[1], zero, one, _clip(pre, clip))
                v = (one - z[b, j]) * candidate + z[b, j] * h[b, j]
                h[b, j] = v
                y[t, b, j] = v


@njit(cache=True, nogil=True)
def lstm(x, w, r, bias, peephole, h, c, lens, reverse, input_forget, act, alpha, beta, clip, y):
    """LSTM, gates i, o, f, c: it = f(Xt Wi^T + Ht-1 Ri^T + Pi * Ct-1 + Wbi + Rbi), ft likewise with Pf (1 - it with
    input_forget), ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc), Ct = ft * Ct-1 + it * ct,
    ot = f(Xt Wo^T + Ht-1 Ro^T + Po * Ct + Wbo + Rbo), Ht = ot * h(Ct). bias [4H] is Wb + Rb, peephole [3H] (i, o, f);
    h, c [B, H] hold the initial states and receive the final ones."""
    xw = _project(x, w, bias)
    batch, hidden = h.shape
    zero, one = h.dtype.type(0), h.dtype.type(1)
    p_i = peephole[:hidden]
    p_o = peephole[hidden:2 * hidden]
    p_f = peephole[2 * hidden:]
    for s in range(lens.max() if lens.size else 0):
        hr = np.dot(h, r.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            g = xw[t, b]
            gh = hr[b]
            for j in range(hidden):
                c_prev = c[b, j]
                gate_i = activate(act[0], alpha[0], beta[0], zero, one,
                                  _clip(g[j] + gh[j] + p_i[j] * c_prev, clip))
                if input_forget:
                    gate_f = one - gate_i
                else:
                    gate_f = activate(act[0], alpha[0], beta[0], zero, one,
                                      _clip(g[2 * hidden + j] + gh[2 * hidden + j] + p_f[j] * c_prev, clip))
                cand = activate(act[1], alpha[1], beta[1], zero, one,
                                _clip(g[3 * hidden + j] + gh[3 * hidden + j], clip))
                cell = gate_f * c_prev + gate_i * cand
                gate_o = activate(act[0], alpha[0], beta[0], zero, one,
                                  _clip(g[hidden + j] + gh[hidden + j] + p_o[j] * cell, clip))
                v = gate_o * activate(act[2], alpha[2], beta[2], zero, one, cell)
                c[b, j] = cell
                h[b, j] = v
                y[t, b, j] = v
