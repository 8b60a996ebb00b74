"""Concat, Flatten and Reshape on the CPU provider. Pure data movement in numpy: Flatten and Reshape return
views of a contiguous input. Every tensor dtype numpy holds is accepted, as in ops/movement.py: they do no
arithmetic (strings are object arrays; bfloat16, float8 and int4 are ml_dtypes arrays). In a native segment
(onnxjit.session.native_plan) a Reshape or Flatten is a view and a Concat of numbers copies each input into its
columns of the output (movement.copy_columns)."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onnxjit.kernels.movement import copy_columns
from onnxjit.ops.nn import constant_input, rank_of, wanted_outputs
from onnxjit.ops.registry import attr, input_tensor_types, register_op
from onnxjit.session.native_plan import (NATIVE_GRAIN, In, NativeCall, NativeCalls, NativeView, Out,
                                         native_dtype)
from onnxjit.worker_pool import PARALLEL_GRAIN

T = TensorProto


def _data_type(node, indices):
    """The element type the inputs at `indices` share, when each is a tensor of a known type; else None."""
    types = input_tensor_types(node)
    elems = set()
    for i in indices:
        t = types[i] if i < len(types) else None
        if t is None or t.elem_type == T.UNDEFINED:
            return None
        elems.add(t.elem_type)
    return elems.pop() if len(elems) == 1 else None


def build_concat(node):
    if not node.inputs or _data_type(node, range(len(node.inputs))) is None or wanted_outputs(node) != 1:
        return None
    axis = attr(node, "axis", 1 if node.opset < 4 else None)
    if axis is None:
        return None
    axis = int(axis)
    ranks = {rank_of(node, i) for i in range(len(node.inputs))} - {None}
    if len(ranks) > 1 or (ranks and not -next(iter(ranks)) <= axis < next(iter(ranks))):
        return None

    def run(*xs):
        nd = xs[0].ndim
        if not -nd <= axis < nd:
            raise ValueError(f"Concat: axis {axis} is out of range for inputs of rank {nd}")
        return (np.concatenate(xs, axis=axis),)

    def native(*xs):
        """The concatenation as copies of each input into its columns of the output viewed as (the dims before
        the axis, the rest): movement.copy_columns, compiled for the segment (the step copies with numpy)."""
        if not xs or any(type(x) is not np.ndarray or not x.flags.c_contiguous or x.dtype != xs[0].dtype
                         or x.ndim != xs[0].ndim for x in xs) or not native_dtype(xs[0].dtype):
            return None
        a = axis + xs[0].ndim if axis < 0 else axis
        if not 0 <= a < xs[0].ndim or any(x.shape[:a] + x.shape[a + 1:] != xs[0].shape[:a] + xs[0].shape[a + 1:]
                                          for x in xs):
            return None
        shape = xs[0].shape[:a] + (sum(x.shape[a] for x in xs),) + xs[0].shape[a + 1:]
        rows, size = math.prod(shape[:a]), math.prod(shape)
        if not rows or not size or size >= NATIVE_GRAIN:
            return None
        calls, start = [], 0
        for k, x in enumerate(xs):
            width = x.size // rows
            if width:
                calls.append(NativeCall(copy_columns, [In(k, (rows, width)), Out(0), start], rows, [], [],
                                        parallel=rows > 1 and size >= PARALLEL_GRAIN, compiles=True))
            start += width
        calls[0].buffers, calls[0].outputs = [((rows, size // rows), xs[0].dtype)], [(0, shape)]
        return NativeCalls(calls)
    run.native = native
    return run


for _v in (1, 4, 11, 13):
    register_op("Concat", since=_v)(build_concat)


def build_flatten(node):
    if len(node.inputs) != 1 or _data_type(node, (0,)) is None:
        return None
    axis = int(attr(node, "axis", 1))
    rk = rank_of(node, 0)
    if rk is not None and not -rk <= axis <= rk:
        return None

    def run(x):
        a = axis + x.ndim if axis < 0 else axis
        if not 0 <= a <= x.ndim:
            raise ValueError(f"Flatten: axis {axis} is out of range for an input of rank {x.ndim}")
        return (x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:])),)

    def native(x):
        a = axis + x.ndim if type(x) is np.ndarray and axis < 0 else axis
        if type(x) is not np.ndarray or not 0 <= a <= x.ndim:
            return None
        return NativeView((math.prod(x.shape[:a]), math.prod(x.shape[a:])))
    run.native = native
    return run


for _v in (1, 9, 11, 13, 21):
    register_op("Flatten", since=_v)(build_flatten)


def reshape_target(in_shape, shape, allowzero):
    """The output shape of Reshape: 0 copies the input's dim (unless allowzero), one -1 is inferred."""
    out = [int(s) for s in shape]
    if not allowzero:
        for i, s in enumerate(out):
            if s == 0:
                if i >= len(in_shape):
                    raise ValueError(f"Reshape: shape {out} copies dim {i} the input {tuple(in_shape)} lacks")
                out[i] = in_shape[i]
    if out.count(-1) > 1 or any(s < -1 for s in out):
        raise ValueError(f"Reshape: invalid shape {list(shape)}")
    total = math.prod(in_shape)
    if -1 in out:
        known = math.prod(s for s in out if s != -1)
        if known == 0 or total % known:
            raise ValueError(f"Reshape: cannot reshape {tuple(in_shape)} to {list(shape)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ValueError(f"Reshape: cannot reshape {tuple(in_shape)} to {list(shape)}")
    return tuple(out)


def build_reshape(node):
    if _data_type(node, (0,)) is None:
        return None
    allowzero = int(attr(node, "allowzero", 0)) != 0
    if node.opset < 5:  # Reshape-1: the shape is an attribute
        if len(node.inputs) != 1 or attr(node, "shape") is None:
            return None
        shape = [int(s) for s in attr(node, "shape")]
        return lambda x: (x.reshape(reshape_target(x.shape, shape, False)),)
    if len(node.inputs) != 2:
        return None
    st = input_tensor_types(node)[1]
    if st is None or st.elem_type != T.INT64:
        return None
    const = constant_input(node, 1)
    targets: dict = {}  # input shape -> output shape, for the constant shape

    def run(x, shape):
        if shape is const:  # the usual case: worked out once per input shape (3 us a run at batch 1 otherwise)
            target = targets.get(x.shape)
            if target is None:
                target = targets[x.shape] = reshape_target(x.shape, shape.reshape(-1), allowzero)
            return (x.reshape(target),)
        return (x.reshape(reshape_target(x.shape, shape.reshape(-1), allowzero)),)

    def native(x, shape):
        target = targets.get(x.shape) if shape is const and type(x) is np.ndarray else None
        return None if target is None else NativeView(target, pinned=(1,))
    run.native = native
    return run


for _v in (1, 5, 13, 14, 19, 21):
    register_op("Reshape", since=_v)(build_reshape)
