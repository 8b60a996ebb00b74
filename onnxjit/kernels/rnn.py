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
def activate_row(code, alpha, beta, zero, one, v):
    """v = the activation `code` of v, in place over a row; zero and one are of v's type (an integer constant would
    widen float32). The code is tested once and each case is one loop, which vectorizes: a test per element (a
    scalar function called for every gate value) made LSTMs 3.3-3.8x onnxruntime's time."""
    n = v.shape[0]
    if code == TANH:
        for j in range(n):
            v[j] = vmath.tanh(v[j])
    elif code == SIGMOID:
        for j in range(n):
            v[j] = vmath.sigmoid(v[j])
    elif code == RELU:
        for j in range(n):
            v[j] = v[j] if v[j] > zero else zero
    elif code == AFFINE:
        for j in range(n):
            v[j] = alpha * v[j] + beta
    elif code == LEAKY_RELU:
        for j in range(n):
            v[j] = v[j] if v[j] >= zero else alpha * v[j]
    elif code == THRESHOLDED_RELU:
        for j in range(n):
            v[j] = v[j] if v[j] > alpha else zero
    elif code == SCALED_TANH:
        for j in range(n):
            v[j] = alpha * vmath.tanh(beta * v[j])
    elif code == HARD_SIGMOID:
        for j in range(n):
            v[j] = min(max(alpha * v[j] + beta, zero), one)
    elif code == ELU:
        for j in range(n):
            v[j] = v[j] if v[j] >= zero else alpha * vmath.expm1(v[j])
    elif code == SOFTSIGN:
        for j in range(n):
            v[j] = v[j] / (one + abs(v[j]))
    else:
        for j in range(n):
            v[j] = vmath.softplus(v[j])


@njit(cache=True, nogil=True)
def _clip_row(v, clip):
    """v bounded to [-clip, clip] in place where clip > 0 (a gate's pre-activation)."""
    if clip > 0:
        for j in range(v.shape[0]):
            v[j] = min(max(v[j], -clip), clip)


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
            hb = h[b]
            g, gh = xw[t, b], hr[b]
            for j in range(hidden):
                hb[j] = g[j] + gh[j]
            _clip_row(hb, clip)
            activate_row(act[0], alpha[0], beta[0], zero, one, hb)
            y[t, b] = hb


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
            g, gh, zb, rb = xw[t, b], hzr[b], z[b], reset[b]
            for j in range(hidden):
                zb[j] = g[j] + gh[j]
                rb[j] = g[hidden + j] + gh[hidden + j]
            for gate in (zb, rb):
                _clip_row(gate, clip)
                activate_row(act[0], alpha[0], beta[0], zero, one, gate)
        if linear_before_reset:
            hh = np.dot(h, r_h.T)
        else:
            hh = np.dot(reset * h, r_h.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            g, cand, zb, hb = xw[t, b], hh[b], z[b], h[b]
            if linear_before_reset:
                rb = reset[b]
                for j in range(hidden):
                    cand[j] = g[2 * hidden + j] + rb[j] * (cand[j] + rb_h[j])
            else:
                for j in range(hidden):
                    cand[j] = g[2 * hidden + j] + cand[j]
            _clip_row(cand, clip)
            activate_row(act[1], alpha[1], beta[1], zero, one, cand)
            for j in range(hidden):
                hb[j] = (one - zb[j]) * cand[j] + zb[j] * hb[j]
            y[t, b] = hb


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
    rows = np.empty((5, hidden), h.dtype)  # one batch row's gates, then its cell activated
    gate_i, gate_f, gate_o, cand, cell = rows[0], rows[1], rows[2], rows[3], rows[4]
    for s in range(lens.max() if lens.size else 0):
        hr = np.dot(h, r.T)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = _time(s, lens[b], reverse)
            g, gh, cb, hb = xw[t, b], hr[b], c[b], h[b]
            for j in range(hidden):
                gate_i[j] = g[j] + gh[j] + p_i[j] * cb[j]
                gate_f[j] = g[2 * hidden + j] + gh[2 * hidden + j] + p_f[j] * cb[j]
                cand[j] = g[3 * hidden + j] + gh[3 * hidden + j]
            _clip_row(gate_i, clip)
            activate_row(act[0], alpha[0], beta[0], zero, one, gate_i)
            if input_forget:
                for j in range(hidden):
                    gate_f[j] = one - gate_i[j]
            else:
                _clip_row(gate_f, clip)
                activate_row(act[0], alpha[0], beta[0], zero, one, gate_f)
            _clip_row(cand, clip)
            activate_row(act[1], alpha[1], beta[1], zero, one, cand)
            for j in range(hidden):
                cb[j] = gate_f[j] * cb[j] + gate_i[j] * cand[j]
                gate_o[j] = g[hidden + j] + gh[hidden + j] + p_o[j] * cb[j]
                cell[j] = cb[j]
            _clip_row(gate_o, clip)
            activate_row(act[0], alpha[0], beta[0], zero, one, gate_o)
            activate_row(act[2], alpha[2], beta[2], zero, one, cell)
            for j in range(hidden):
                hb[j] = gate_o[j] * cell[j]
            y[t, b] = hb
