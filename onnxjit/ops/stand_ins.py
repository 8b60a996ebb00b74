"""numpy stand-ins for the kernels a session's first run defers (onnxjit.cache.deferred_compile).

Over empty caches a first run would compile every kernel it meets, and the conv and product kernels cost the most
(light resnet50 on one core of a 2-core Intel Emerald Rapids VM: 26 s of compiling, 9 s of it conv_packed with its
GEMM microkernel, im2col and activation epilogue, which every one of its 1x1 convs needs). Where such a kernel has no
code yet, the op defers it and runs the same math on numpy (BLAS, nothing to compile) until it has: the convs as an
im2col (strided windows copied a block of output rows at a time) times the weights, the products as numpy's
matmul, then the epilogue the kernels apply (alpha, bias, residual, activation); the pools a strided view per tap,
ConvTranspose a product per tap added into its strided output positions, softmax numpy's exp over each row, the
layer norms and attention the fallback provider's numpy references. Results round as numpy's BLAS
and functions do, within float rounding of the kernels'. Only first runs armed to defer use them (see
deferred_compile.deferring), so steady runs never do.
"""
from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onnxjit.contrib.attention import FULLY_MASKED_ROWS, attention_reference
from onnxjit.contrib.normalization import layer_norm_reference
from onnxjit.kernels import linalg as klinalg
from onnxjit.kernels import normalization as knorm

# most bytes of a conv stand-in's im2col block (output rows of one image): vgg19's first convs' whole im2col is
# 115 MB, new memory a first run would touch page by page
COLUMN_BYTES = 16 << 20


def _sigmoid(v):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-v))


def _expm1_below_zero(v, scale):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(v > 0, v, scale * np.expm1(np.minimum(v, 0)))


# activation code (kernels.linalg.ACTIVATIONS) -> y, alpha, beta -> the activation of y, the formulas of
# kernels.linalg.activate (NaN kept where it keeps it)
_ACTIVATIONS = {
    klinalg.RELU: lambda y, a, b: np.maximum(y, 0),
    klinalg.LEAKY_RELU: lambda y, a, b: np.where(y >= 0, y, y * a),
    klinalg.SIGMOID: lambda y, a, b: _sigmoid(y),
    klinalg.TANH: lambda y, a, b: np.tanh(y),
    klinalg.CLIP: lambda y, a, b: np.minimum(np.maximum(y, a), b),
    klinalg.HARD_SIGMOID: lambda y, a, b: np.clip(a * y + b, 0, 1),
    klinalg.ELU: lambda y, a, b: _expm1_below_zero(y, a),
    klinalg.SELU: lambda y, a, b: b * _expm1_below_zero(y, a),
    klinalg.HARD_SWISH: lambda y, a, b: y * np.clip(a * y + b, 0, 1),
    klinalg.SOFTPLUS: lambda y, a, b: np.logaddexp(0, y),
    klinalg.THRESHOLDED_RELU: lambda y, a, b: np.where(y > a, y, 0),
    klinalg.SWISH: lambda y, a, b: y * _sigmoid(a * y),
}
assert len(_ACTIVATIONS) == len(klinalg.ACTIVATIONS) - 1  # every code but IDENTITY


def activate(y: np.ndarray, act) -> np.ndarray:
    """y = act(y) in place, for an ops.nn.Activation `act` (its code and alpha, beta), in y's dtype."""
    if act.kind != klinalg.IDENTITY and y.size:
        t = y.dtype.type
        np.copyto(y, _ACTIVATIONS[act.kind](y, t(act.alpha), t(act.beta)), casting="same_kind")
    return y


class NumpyProduct:
    """A deferred product kernel's stand-in (ops.linalg.PreparedProducts._stand_in): numpy's matmul, then alpha, C
    and the activation as the kernels' epilogue applies them. A CallSite's `run` for the arguments (A, C, alpha,
    beta, has_c, out)."""

    __slots__ = ("b", "act")
    kernel = None  # (no native form)

    def __init__(self, b, act):
        self.b, self.act = b, act

    def run(self, args, n_units, work) -> None:
        a, c, alpha, beta, has_c, out = args
        np.matmul(a, self.b, out=out)
        if alpha != 1.0:
            out *= out.dtype.type(alpha)
        if has_c:
            out += out.dtype.type(beta) * c
        activate(out, self.act)


class NumpyConv:
    """A deferred conv kernel's stand-in (ops.nn.build_conv): call(x, z, out) -> act(conv(x, w) + bias + z), written
    into `out` where given. Shapes as the conv kernels take them, 3 spatial dims (ops.nn.shape5_of): X viewed as
    `x_shape5`, the output `shape` viewed as `shape5`; per spatial dim the kernel's taps, strides, dilations and head
    pads."""

    def __init__(self, w, b, group, x_shape5, shape, shape5, kernel, strides, dilations, pads, act):
        m = w.shape[0]
        self.w = w.reshape(group, m // group, -1)  # (groups, output channels a group, its channels x taps)
        self.bias = None if b is None else b.reshape(m, 1, 1, 1)
        self.x_shape5, self.shape, self.shape5, self.act = x_shape5, shape, shape5, act
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        outs = shape5[2:]
        tails = [max(0, (o - 1) * s + e - (n + p)) for o, s, e, n, p in zip(outs, strides, extent, x_shape5[2:], pads)]
        self.padding = ((0, 0), (0, 0)) + tuple(zip(pads, tails)) if any(pads) or any(tails) else None
        self.extent = tuple(extent)
        # the windows' axes (N, C, OD, OH, OW, KD, KH, KW) picked from every position's: strides, then dilations
        self.picks = (slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides)) \
            + tuple(slice(None, None, d) for d in dilations)

    def __call__(self, x, z, out):
        y = np.empty(self.shape, dtype=x.dtype) if out is None else out
        y5 = y.reshape(self.shape5)
        x5 = x.reshape(self.x_shape5)
        if self.padding is not None:
            x5 = np.pad(x5, self.padding)
        windows = sliding_window_view(x5, self.extent, axis=(2, 3, 4))[self.picks]
        n, c, od, oh, ow, kd, kh, kw = windows.shape
        groups, mg, depth = self.w.shape
        rows = max(1, min(oh, COLUMN_BYTES // max(1, c * kd * kh * kw * od * ow * x.itemsize)))
        for i in range(n):
            for h0 in range(0, oh, rows):
                part = windows[i, :, :, h0:h0 + rows]  # (C, OD, rows, OW, KD, KH, KW)
                hc = part.shape[2]
                columns = part.transpose(0, 4, 5, 6, 1, 2, 3).reshape(groups, depth, od * hc * ow)
                y5[i, :, :, h0:h0 + hc] = np.matmul(self.w, columns).reshape(groups * mg, od, hc, ow)
        if self.bias is not None:
            y5 += self.bias
        if z is not None:
            y += z
        return activate(y, self.act)


def pool(is_max, x, kernel, strides, dilations, head, padded, pad_value, fd, fh, fw, y) -> None:
    """kernels.pool.pool's (and pool_blocked's) arguments and result: y (planes, OD, OH, OW) = the max, or the sum
    times the divisors fd, fh, fw (one per output index along each axis), of the windows over x (planes, D, H, W)
    padded with pad_value, by `head` in front, to the `padded` plane."""
    xp = np.full((x.shape[0],) + tuple(padded), pad_value, dtype=x.dtype)
    xp[(slice(None),) + tuple(slice(h, h + n) for h, n in zip(head, x.shape[1:]))] = x
    outs = y.shape[1:]
    for i, taps in enumerate(itertools.product(*(range(k) for k in kernel))):
        window = xp[(slice(None),) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                                           for t, d, o, s in zip(taps, dilations, outs, strides))]
        if i == 0:
            y[...] = window
        elif is_max:
            np.maximum(y, window, out=y)
        else:
            y += window
    if not is_max:
        y *= fd[:, None, None] * fh[None, :, None] * fw[None, None, :]


def global_pool(is_max, x, out) -> None:
    """kernels.pool.global_max's / global_avg's arguments and result: the max or mean (summed in float64) of each
    row of x (rows, size) into out (rows,)."""
    if is_max:
        np.max(x, axis=1, out=out)
    else:
        out[:] = x.mean(axis=1, dtype=np.float64)


def softmax_rows(x, y, log: bool) -> np.ndarray:
    """Softmax (LogSoftmax where `log`) of each row of x (rows, n) into y (a new array where y is None), as
    kernels.normalization.softmax_rows computes it: less the row's max, exp, divided by (less the log of) the
    sum."""
    shifted = x - x.max(axis=1, keepdims=True)
    if log:
        result = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    else:
        e = np.exp(shifted)
        result = e / e.sum(axis=1, keepdims=True)
    if y is None:
        return result
    y[...] = result
    return y


def attention(q, k, v, bias, causal: bool, causal_offset: int, scale, fully_masked: int) -> np.ndarray:
    """kernels.attention.attention's output where its scores are neither softcapped nor copied out: q, k, v 4-D,
    bias None or broadcast to [B, Hq, S, L], with `causal` keys j > i + causal_offset masked; contrib.attention's
    reference with the causal mask folded into the bias."""
    s, total = q.shape[2], k.shape[2]
    mask = np.zeros((1, 1, s, total), q.dtype) if bias is None else bias
    if causal:
        mask = mask + np.where(np.arange(total) > np.arange(s)[:, None] + causal_offset, -np.inf, 0).astype(q.dtype)
    return attention_reference(q, k, v, mask, scale, 0, FULLY_MASKED_ROWS[fully_masked])


def conv_transpose(x, w, group, bias, kernel, strides, dilations, head, out) -> None:
    """kernels.conv_transpose.conv_transpose's result into out (N, M, OD, OH, OW): x (N, C, D, H, W), w as the op
    takes it (C, M / group, KD, KH, KW), bias (M,) or empty; input index i adds to output index i * stride + tap *
    dilation - head along each axis (`head` may be negative), one product per tap over every group."""
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    out[...] = 0
    x_groups = x.reshape(n, group, cg, -1)
    ins, outs = x.shape[2:], out.shape[2:]
    for taps in itertools.product(*(range(k) for k in kernel)):
        picks_in, picks_out = [slice(None)] * 2, [slice(None)] * 2
        for i, o, t, stride, d, h in zip(ins, outs, taps, strides, dilations, head):
            shift = t * d - h  # the output index of input index 0
            lo = max(0, -(shift // stride))  # the first input index whose output index is >= 0
            hi = min(i - 1, (o - 1 - shift) // stride)
            if hi < lo:
                break
            picks_in.append(slice(lo, hi + 1))
            picks_out.append(slice(lo * stride + shift, hi * stride + shift + 1, stride))
        else:
            w_tap = w[(slice(None), slice(None)) + taps].reshape(group, cg, mg).transpose(0, 2, 1)  # (G, M/g, C/g)
            part = np.matmul(w_tap, x_groups).reshape((n, group * mg) + ins)
            out[tuple(picks_out)] += part[tuple(picks_in)]
    if bias.size:
        out += bias.reshape((-1,) + (1,) * (out.ndim - 2))


def layer_norm_rows(x, y, op, scale, bias, eps, mean, inv_std) -> None:
    """kernels.normalization.rows's result over (rows, n) arrays: y = the layer norm of x's rows (op LAYER_NORM),
    of y's in place (LAYER_NORM_INPLACE), of the softmax or log-softmax of x's (SOFTMAX_LAYER_NORM,
    LOG_SOFTMAX_LAYER_NORM), times scale plus bias ((1 or rows, n)); mean and inv_std (rows,) get each row's
    statistics."""
    if op == knorm.LAYER_NORM_INPLACE:
        rows = y
    elif op in (knorm.SOFTMAX_LAYER_NORM, knorm.LOG_SOFTMAX_LAYER_NORM):
        rows = softmax_rows(x, None, log=op == knorm.LOG_SOFTMAX_LAYER_NORM)
    else:
        rows = x
    y[...], mu, inv = layer_norm_reference(rows, scale, bias, 1, eps, y.dtype)
    mean[:] = mu[:, 0]
    inv_std[:] = inv[:, 0]


def skip_layer_norm_rows(x, skip, addend, total, y, in_place, scale, bias, eps, mean, inv_std) -> None:
    """kernels.normalization.skip_rows's result over (rows, n) arrays: total = x + skip (its rows repeated over
    x's) + addend (n,), then y = total's layer norm as layer_norm_rows gives it (over total itself when
    `in_place`)."""
    np.add(x, np.resize(skip, x.shape), out=total)
    total += addend
    layer_norm_rows(total, y, knorm.LAYER_NORM_INPLACE if in_place else knorm.LAYER_NORM, scale, bias, eps, mean,
                    inv_std)
