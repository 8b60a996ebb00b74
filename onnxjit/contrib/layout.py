"""com.onnxjit NhwcConv: FusedConv over channels-last tensors, which the optimizer's layout pass
(onnxjit/optimizer/layout.py, ORT_ENABLE_ALL) writes where that layout pays."""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from onnxjit.contrib import reference_op
from onnxjit.contrib.fused import FusedConv

TO_NHWC = (0, 2, 3, 1)  # Transpose perm: channels first -> channels last (2-D images)
TO_NCHW = (0, 3, 1, 2)


@reference_op
class NhwcConv(OpRun):
    """NhwcConv(X, W, B?) -> Y: FusedConv on channels-last images.

    Inputs: X [N, H, W, C]; W [M, C / group, KH, KW] and B [M] (optional) as ONNX Conv's.
    Output: Y [N, OH, OW, M], which is Transpose(FusedConv(Transpose(X, (0, 3, 1, 2)), W, B), (0, 2, 3, 1)).
    Attributes: FusedConv's (auto_pad, dilations, group, kernel_shape, pads, strides, activation,
    activation_params), with the same meaning; pads, strides and dilations are over (H, W).
    Types: float (float32) and double (float64).
    """

    def _run(self, X, W, B=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None, activation="Identity", activation_params=None):
        if X.ndim != 4:
            raise ValueError(f"NhwcConv: X must be [N, H, W, C], got shape {X.shape}")
        (y,) = FusedConv._run(self, np.ascontiguousarray(X.transpose(TO_NCHW)), W, B, None, auto_pad, dilations,
                              group, kernel_shape, pads, strides, activation, activation_params)
        return (np.ascontiguousarray(y.transpose(TO_NHWC)),)
