"""Quantization parameters: the integer range of each type, scale and zero point from a float range, quantizing
weights (per tensor or per channel) and int32 biases, as onnxruntime.quantization computes them, to the bit.

The order of float operations matters for bit-equal results, so it is onnxruntime's: the scale is
(rmax - rmin) / (qmax - qmin) in float64, then stored in the tensor's float type; the zero point is
round(qmin - rmin / scale) in float64 (symmetric: round((qmin + qmax) / 2)); values quantize as
round(float32(x) / scale) + zero_point in float32, clipped to the type's full range. A range narrower than the
float type's smallest normal number gets scale 1 and zero point 0. Rounding is numpy's, half to even.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxjit.errors import InvalidArgument, NotImplemented

# (qmin, qmax) by element type: the full range, the symmetric one (int8/int16 give up their lowest value), and
# the reduced one (7 bits of 8, 15 of 16, 3 of 4: for CPUs whose int8 dot products saturate)
FULL_RANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
              TensorProto.INT16: (-32768, 32767), TensorProto.UINT4: (0, 15), TensorProto.INT4: (-8, 7)}
SYMMETRIC_RANGE = {TensorProto.INT8: (-127, 127), TensorProto.INT16: (-32767, 32767)}
REDUCED_RANGE = {TensorProto.UINT8: (0, 127), TensorProto.INT8: (-64, 64), TensorProto.UINT16: (0, 32767),
                 TensorProto.INT16: (-16384, 16384), TensorProto.UINT4: (0, 7), TensorProto.INT4: (-4, 3)}
# numpy dtype holding quantized values before they become an initializer (4-bit values sit in 8-bit ints)
STORAGE_DTYPE = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8, TensorProto.UINT16: np.uint16,
                 TensorProto.INT16: np.int16, TensorProto.UINT4: np.uint8, TensorProto.INT4: np.int8}
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)
TYPE_NAMES = {TensorProto.UINT8: "uint8", TensorProto.INT8: "int8", TensorProto.UINT16: "uint16",
              TensorProto.INT16: "int16", TensorProto.UINT4: "uint4", TensorProto.INT4: "int4"}


def check_quant_type(qtype: int, what: str) -> None:
    if qtype not in FULL_RANGE:
        name = TensorProto.DataType.Name(qtype) if qtype in TensorProto.DataType.values() else qtype
        raise NotImplemented(f"onnxjit.quantization: {what} type {name} is not supported; "  # noqa: F901
                             f"it quantizes to {', '.join(TYPE_NAMES.values())}")


def quant_range(qtype: int, reduce_range: bool = False, symmetric: bool = False) -> tuple[int, int]:
    """(qmin, qmax) for `qtype`: reduce_range wins over symmetric, which narrows only the signed 8/16-bit types."""
    check_quant_type(qtype, "quantization")
    if reduce_range:
        return REDUCED_RANGE[qtype]
    if symmetric and qtype in SYMMETRIC_RANGE:
        return SYMMETRIC_RANGE[qtype]
    return FULL_RANGE[qtype]


@dataclass
class QuantParams:
    """One tensor's quantization: scale and zero point (0-d arrays, or 1-d along `axis` for per-channel weights)."""

    scale: np.ndarray
    zero_point: np.ndarray
    qtype: int
    axis: int | None = None


def scale_zero_point(rmin, rmax, qtype: int, symmetric: bool = False, reduce_range: bool = False,
                     min_real_range: float | None = None) -> QuantParams:
    """Scale and zero point mapping [rmin, rmax] (widened to hold 0) onto `qtype`'s range; the scale has rmax's
    float type (float32 or float16)."""
    qmin, qmax = quant_range(qtype, reduce_range, symmetric)
    lo, hi = np.asarray(rmin).reshape(()), np.asarray(rmax).reshape(())
    fdtype = hi.dtype if hi.dtype in (np.float16, np.float32) else np.dtype(np.float32)
    lo, hi = np.minimum(lo.astype(fdtype), fdtype.type(0)), np.maximum(hi.astype(fdtype), fdtype.type(0))
    if min_real_range is not None:
        hi = np.maximum(hi, lo + fdtype.type(min_real_range))
    if symmetric:
        lo, hi = -np.maximum(np.abs(lo), np.abs(hi)), np.maximum(np.abs(lo), np.abs(hi))
    scale64 = (np.float64(hi) - np.float64(lo)) / (np.float64(qmax) - np.float64(qmin))
    stored = np.asarray(scale64, dtype=fdtype)
    # a range narrower than the smallest usable scale cannot be represented: onnxruntime falls back to 1 and 0
    too_small = stored < np.finfo(np.float16).smallest_subnormal if fdtype == np.float16 \
        else scale64 < np.finfo(fdtype).tiny
    zdtype = STORAGE_DTYPE[qtype]
    if too_small:
        return QuantParams(np.asarray(1.0, dtype=fdtype), np.asarray(0, dtype=zdtype), qtype)
    if symmetric:
        zero = np.round((qmin + qmax) / np.float64(2.0))
    else:
        zero = np.round(np.float64(qmin) - np.float64(lo) / scale64)
    return QuantParams(stored, np.asarray(zero, dtype=zdtype), qtype)


def quantize_values(x: np.ndarray, scale, zero_point, qtype: int) -> np.ndarray:
    """round(x / scale) + zero_point, clipped to qtype's full range; scale/zero point broadcast against x."""
    qmin, qmax = FULL_RANGE[qtype]
    q = np.round(np.asarray(x).astype(np.float32) / scale) + zero_point
    return np.clip(q, qmin, qmax).astype(STORAGE_DTYPE[qtype])


def data_params(data: np.ndarray, qtype: int, symmetric: bool, reduce_range: bool,
                min_real_range: float | None) -> QuantParams:
    """Per-tensor parameters of a weight from its own min and max."""
    if data.size == 0:
        return QuantParams(np.asarray(1.0, dtype=data.dtype), np.asarray(0, dtype=STORAGE_DTYPE[qtype]), qtype)
    return scale_zero_point(data.min(), data.max(), qtype, symmetric, reduce_range, min_real_range)


def channel_params(data: np.ndarray, axis: int, qtype: int, symmetric: bool, reduce_range: bool,
                   min_real_range: float | None) -> QuantParams:
    """Per-channel parameters along `axis` (each slice's own min and max)."""
    per = [data_params(np.take(data, i, axis=axis).ravel(), qtype, symmetric, reduce_range, min_real_range)
           for i in range(data.shape[axis])]
    return QuantParams(np.stack([p.scale for p in per]), np.stack([p.zero_point for p in per]), qtype, axis)


def quantize_weight(data: np.ndarray, params: QuantParams) -> np.ndarray:
    """The weight's quantized values (per channel when params.axis is set)."""
    scale, zero = params.scale, params.zero_point
    if params.axis is not None:
        shape = [1] * data.ndim
        shape[params.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return quantize_values(data, scale, zero, params.qtype)


def normalize_axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgument(f"onnxjit.quantization: channel axis {axis} is out of range for {what} of rank {rank}")
    return axis % rank


# int32 biases: scale = input scale * weight scale * beta, zero point 0
INT32_MAX = np.iinfo(np.int32).max
INT32_RANGE = np.float64(INT32_MAX) - np.float64(np.iinfo(np.int32).min + 1)
BIAS_SCALE_MARGIN = 1.0001


def widen_weight_scale_for_bias(input_scale: np.ndarray, weight_scale: np.ndarray, bias: np.ndarray,
                                per_channel: bool) -> np.ndarray | None:
    """A weight scale large enough that the bias, at scale input_scale * weight_scale, fits int32 (each channel's
    own bias when per channel); None when it fits already. (TFLite's remedy, in onnxruntime's form.)"""
    in64 = np.float64(np.asarray(input_scale).item())
    if per_channel and weight_scale.ndim == 1:
        # in the bias's float type up to the division, as onnxruntime computes it
        need = BIAS_SCALE_MARGIN * (2.0 * np.abs(bias.ravel())) / INT32_RANGE
    else:
        absmax = max(abs(min(np.float64(bias.min()), 0.0)), abs(max(np.float64(bias.max()), 0.0)))
        need = np.asarray(BIAS_SCALE_MARGIN * (2.0 * absmax) / INT32_RANGE)
    ws64 = np.asarray(weight_scale, dtype=np.float64)
    have = in64 * ws64
    widen = (have < need) & (have > 0)
    if not widen.any():
        return None
    wider = np.where(widen, ws64 * (need / np.where(have > 0, have, 1.0)), ws64).astype(weight_scale.dtype)
    if weight_scale.dtype == np.float16:  # rounding down in float16 could leave the scale too small again
        up = widen & (wider.astype(np.float64) < ws64 * (need / np.where(have > 0, have, 1.0)))
        wider = np.where(up, np.nextafter(wider, np.float16(np.inf)), wider)
    return wider.reshape(weight_scale.shape)


def quantize_bias(bias: np.ndarray, input_scale: np.ndarray, weight_scale: np.ndarray,
                  beta: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(int32 values, 1-d scale in the bias's float type) of a bias added to the product of input and weight."""
    if beta == 0:
        bias, beta = np.zeros_like(bias), 1.0
    scale = np.asarray(input_scale) * np.asarray(weight_scale) * beta
    q = np.round(bias.astype(np.float64) / scale.astype(np.float64))
    q = np.clip(q, np.float64(np.iinfo(np.int32).min), np.float64(INT32_MAX)).astype(np.int32)
    return q.reshape(bias.shape), np.asarray(scale, dtype=bias.dtype).reshape(-1)


# initializers
def scalar_or_vector(name: str, elem_type: int, values: np.ndarray, dims=None) -> TensorProto:
    values = np.asarray(values)
    return onnx.helper.make_tensor(name, elem_type, list(values.shape) if dims is None else dims,
                                   values.ravel().tolist())


def quantized_initializer(name: str, values: np.ndarray, qtype: int) -> TensorProto:
    if qtype in (TensorProto.INT4, TensorProto.UINT4):  # packed two to a byte, as ONNX stores 4-bit tensors
        return onnx.helper.make_tensor(name, qtype, list(values.shape), values.ravel().tolist())
    return numpy_helper.from_array(values.astype(STORAGE_DTYPE[qtype], order="C"), name)
