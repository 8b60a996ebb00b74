"""Loss kernels over inputs viewed as [N, C, D] (the class axis 1, every dim after it flattened into D).

`log_softmax_classes` normalizes along C for each (n, d): the running max, sum of exponentials and log-sum-exp
are kept per d in small rows, so the inner loops walk d contiguously (and vectorize) whatever D is.
`pick_class` gathers -logp[n, target[n, d], d] times the class weight, with the weight itself written next to it
(zero for an ignored target), so the op layer reduces both with numpy for sum and mean. Both work over the
samples [n0, n1), the units `ops.nn.run_units` hands out; targets are checked in range before the call.
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels import vmath


@njit(cache=True, nogil=True, fastmath={"contract"})
def log_softmax_classes(x, out, n0, n1):
    """out[n, :, d] = log_softmax(x[n, :, d]) for n in [n0, n1); x, out [N, C, D] C-contiguous."""
    classes, inner = x.shape[1], x.shape[2]
    peak = np.empty(inner, x.dtype)
    total = np.empty(inner, x.dtype)
    zero = x.dtype.type(0)  # peak + zero: a plain store, not a masked one (see linalg.activate)
    for n in range(n0, n1):
        peak[:] = x[n, 0]
        for c in range(1, classes):
            row = x[n, c]
            for d in range(inner):
                v = row[d]
                peak[d] = v if v > peak[d] or v != v else peak[d] + zero
        total[:] = 0
        for c in range(classes):
            row = x[n, c]
            for d in range(inner):
                total[d] += vmath.exp(row[d] - peak[d])
        for d in range(inner):
            total[d] = peak[d] + vmath.log(total[d])  # the log-sum-exp
        for c in range(classes):
            row, dst = x[n, c], out[n, c]
            for d in range(inner):
                dst[d] = row[d] - total[d]


@njit(cache=True, nogil=True)
def pick_class(logp, target, class_weight, has_ignore, ignore_index, loss, weight, n0, n1):
    """loss[n, d] = -logp[n, t, d] * class_weight[t] and weight[n, d] = class_weight[t], t = target[n, d]; both 0
    where has_ignore and t == ignore_index. logp [N, C, D], target/loss/weight [N, D]."""
    inner = logp.shape[2]
    zero = loss.dtype.type(0)
    for n in range(n0, n1):
        for d in range(inner):
            t = target[n, d]
            if has_ignore and t == ignore_index:
                loss[n, d] = zero
                weight[n, d] = zero
            else:
                w = class_weight[t]
                loss[n, d] = -logp[n, t, d] * w
                weight[n, d] = w
