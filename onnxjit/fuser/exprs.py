"""The table from ONNX elementwise op to the scalar expression the fuser renders for it.

Each entry renders one node as Python expression text over the names of its inputs' scalars; the generated
kernel evaluates the expressions of a whole group inside one loop, so intermediates stay in registers. Kernels
compute float16/bfloat16 in float32 (the group converts at its edges).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import TensorProto

from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType, np_dtype
from onnxjit.ops.registry import attr

# element types a kernel computes in, and what half types compute as
_NATIVE = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16,
           TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32,
           TensorProto.UINT64}
_VIA_FLOAT32 = {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def compute_dtype(elem_type: int) -> np.dtype | None:
    """The dtype a kernel computes a tensor of this element type in, or None when it cannot."""
    if elem_type in _NATIVE:
        return np_dtype(elem_type)
    if elem_type in _VIA_FLOAT32:
        return np.dtype(np.float32)
    return None


@dataclass
class Ctx:
    """What a renderer may look at: the node, its inputs' and output's compute dtypes."""

    node: Node
    in_dtypes: list[np.dtype | None]
    out_dtype: np.dtype

    def lit(self, value, dtype: np.dtype | None = None) -> str:
        """A constant typed in `dtype` (the output's by default), so float32 math never widens to float64."""
        dtype = np.dtype(dtype or self.out_dtype)
        if dtype.kind == "b":
            return "True" if value else "False"
        if dtype.kind == "f":
            v = float(value)
            text = "np.inf" if v == math.inf else "-np.inf" if v == -math.inf else "np.nan" if v != v else repr(v)
        else:
            text = repr(int(value))
        return f"np.{dtype.name}({text})"

    def attr(self, name, default=None):
        return attr(self.node, name, default)


@dataclass(frozen=True)
class ScalarOp:
    render: Callable[[Ctx, list[str]], str]
    kinds: str  # numpy dtype kinds the inputs may have: 'f' float, 'i' signed, 'u' unsigned, 'b' bool
    min_inputs: int = 1


EXPRS: dict[str, ScalarOp] = {}
FLOAT, INT, ALL_NUM = "f", "iu", "fiu"


def expr(op_type: str, kinds: str, min_inputs: int = 1):
    def deco(render):
        if op_type in EXPRS:
            raise ValueError(f"expression for {op_type} registered twice")
        EXPRS[op_type] = ScalarOp(render, kinds, min_inputs)
        return render
    return deco


def _unary(op_type: str, kinds: str, template: str):
    expr(op_type, kinds)(lambda c, a: template.format(a=a[0]))


def _is_float(c: Ctx) -> bool:
    return c.out_dtype.kind == "f"


# --- arithmetic ----------------------------------------------------------------------------------------------
expr("Add", ALL_NUM, 2)(lambda c, a: f"{a[0]} + {a[1]}")
expr("Sub", ALL_NUM, 2)(lambda c, a: f"{a[0]} - {a[1]}")
expr("Mul", ALL_NUM, 2)(lambda c, a: f"{a[0]} * {a[1]}")


@expr("Div", ALL_NUM, 2)
def _div(c, a):
    if _is_float(c):
        return f"{a[0]} / {a[1]}"
    return f"{a[0]} // {a[1]}" if c.out_dtype.kind == "u" else f"S.idiv({a[0]}, {a[1]})"


@expr("Mod", ALL_NUM, 2)
def _mod(c, a):
    if c.attr("fmod", 0):
        return f"np.fmod({a[0]}, {a[1]})" if _is_float(c) else f"S.ifmod({a[0]}, {a[1]})"
    return f"S.pymod({a[0]}, {a[1]})" if _is_float(c) else f"{a[0]} % {a[1]}"


@expr("Pow", ALL_NUM, 2)
def _pow(c, a):
    if _is_float(c):
        return f"{a[0]} ** np.{c.out_dtype.name}({a[1]})"
    if c.in_dtypes[1].kind == "f":
        return f"np.float64({a[0]}) ** {a[1]}"
    return f"S.ipow({a[0]}, {a[1]})"


_unary("Neg", "fi", "-{a}")
_unary("Abs", ALL_NUM, "abs({a})")
_unary("Sign", ALL_NUM, "np.sign({a})")
_unary("Sqrt", FLOAT, "np.sqrt({a})")
_unary("Exp", FLOAT, "vmath.exp({a})")
_unary("Log", FLOAT, "vmath.log({a})")
_unary("Floor", FLOAT, "np.floor({a})")
_unary("Ceil", FLOAT, "np.ceil({a})")
_unary("Round", FLOAT, "np.rint({a})")


@expr("Erf", ALL_NUM)
def _erf(c, a):
    if _is_float(c):
        return f"vmath.erf({a[0]})"
    # Erf-9/13 allow integers; onnx's definition (its reference op) rounds erf to float32 before the integer
    # conversion truncates it: 0 for |x| <= 3, sign(x) from 4 on, where float32(erf) is 1
    return f"np.float32(vmath.erf(np.float64({a[0]})))"


for _op, _fn in [("Sin", "sin"), ("Cos", "cos"), ("Tan", "tan"), ("Asin", "arcsin"), ("Acos", "arccos"),
                 ("Atan", "arctan"), ("Sinh", "sinh"), ("Cosh", "cosh"), ("Asinh", "arcsinh"),
                 ("Acosh", "arccosh"), ("Atanh", "arctanh")]:
    _unary(_op, FLOAT, f"np.{_fn}({{a}})")
expr("Reciprocal", FLOAT)(lambda c, a: f"{c.lit(1)} / {a[0]}")


def _fold(fn: str):
    def render(c, a):
        out = a[0]
        for x in a[1:]:
            out = f"{fn}({out}, {x})"
        return out
    return render


@expr("Max", ALL_NUM, 1)
def _max(c, a):
    return _fold("S.fmax" if _is_float(c) else "max")(c, a)


@expr("Min", ALL_NUM, 1)
def _min(c, a):
    return _fold("S.fmin" if _is_float(c) else "min")(c, a)


expr("Sum", ALL_NUM, 1)(lambda c, a: " + ".join(a))
expr("Mean", FLOAT, 1)(lambda c, a: f"({' + '.join(a)}) / {c.lit(len(a))}")


@expr("Clip", ALL_NUM, 1)
def _clip(c, a):
    if c.node.opset < 11:
        lo, hi = c.lit(c.attr("min", -3.4028234663852886e38)), c.lit(c.attr("max", 3.4028234663852886e38))
    else:
        lo = a[1] if len(a) > 1 and a[1] else None
        hi = a[2] if len(a) > 2 and a[2] else None
    out = a[0]
    if lo is not None:
        out = f"max({out}, {lo})"
    if hi is not None:
        out = f"min({out}, {hi})"
    return out


expr("Where", "fiub", 3)(lambda c, a: f"{a[1]} if {a[0]} else {a[2]}")
expr("Cast", "fiub")(lambda c, a: f"{a[0]} != 0" if c.out_dtype.kind == "b" and c.in_dtypes[0].kind != "b" else a[0])
expr("CastLike", "fiub", 2)(
    lambda c, a: f"{a[0]} != 0" if c.out_dtype.kind == "b" and c.in_dtypes[0].kind != "b" else a[0])

# --- comparisons and logic (Equal, Where over strings: onnxjit/ops/elementwise.py) --------------------------
for _op, _sym in [("Equal", "=="), ("Greater", ">"), ("Less", "<"), ("GreaterOrEqual", ">="),
                  ("LessOrEqual", "<=")]:
    expr(_op, "fiub", 2)(lambda c, a, s=_sym: f"{a[0]} {s} {a[1]}")
expr("And", "b", 2)(lambda c, a: f"{a[0]} & {a[1]}")
expr("Or", "b", 2)(lambda c, a: f"{a[0]} | {a[1]}")
expr("Xor", "b", 2)(lambda c, a: f"{a[0]} ^ {a[1]}")
expr("Not", "b")(lambda c, a: f"not {a[0]}")
expr("BitwiseAnd", INT, 2)(lambda c, a: f"{a[0]} & {a[1]}")
expr("BitwiseOr", INT, 2)(lambda c, a: f"{a[0]} | {a[1]}")
expr("BitwiseXor", INT, 2)(lambda c, a: f"{a[0]} ^ {a[1]}")
expr("BitwiseNot", INT)(lambda c, a: f"~{a[0]}")
expr("BitShift", INT, 2)(
    lambda c, a: f"S.shift_{'left' if c.attr('direction', 'LEFT') == 'LEFT' else 'right'}({a[0]}, {a[1]}, "
                 f"{c.out_dtype.itemsize * 8})")
expr("IsNaN", FLOAT)(lambda c, a: f"{a[0]} != {a[0]}")


@expr("IsInf", FLOAT)
def _isinf(c, a):
    inf = c.lit(math.inf, c.in_dtypes[0])
    checks = ([f"{a[0]} == {inf}"] if c.attr("detect_positive", 1) else []) + (
        [f"{a[0]} == -{inf}"] if c.attr("detect_negative", 1) else [])
    return " or ".join(checks) if checks else "False"


# --- activations ---------------------------------------------------------------------------------------------
# NaN stays NaN (as in onnxruntime) in Relu, HardSigmoid and Celu: only a true comparison picks the constant
expr("Relu", "fi")(lambda c, a: f"{c.lit(0)} if {a[0]} < {c.lit(0)} else {a[0]}")
expr("LeakyRelu", FLOAT)(lambda c, a: f"{a[0]} if {a[0]} >= {c.lit(0)} else {a[0]} * {c.lit(c.attr('alpha', 0.01))}")
expr("PRelu", ALL_NUM, 2)(lambda c, a: f"{a[0]} if {a[0]} >= {c.lit(0)} else {a[0]} * {a[1]}")
expr("Sigmoid", FLOAT)(lambda c, a: f"vmath.sigmoid({a[0]})")
expr("Tanh", FLOAT)(lambda c, a: f"vmath.tanh({a[0]})")
expr("Softplus", FLOAT)(lambda c, a: f"vmath.softplus({a[0]})")
expr("Softsign", FLOAT)(lambda c, a: f"{a[0]} / ({c.lit(1)} + abs({a[0]}))")
expr("HardSigmoid", FLOAT)(
    lambda c, a: f"S.fmax({c.lit(0)}, S.fmin({c.lit(1)}, {c.lit(c.attr('alpha', 0.2))} * {a[0]} + "
                 f"{c.lit(c.attr('beta', 0.5))}))")
expr("HardSwish", FLOAT)(
    lambda c, a: f"{a[0]} * max({c.lit(0)}, min({c.lit(1)}, {c.lit(1 / 6)} * {a[0]} + {c.lit(0.5)}))")
expr("Elu", FLOAT)(
    lambda c, a: f"{a[0]} if {a[0]} >= {c.lit(0)} else {c.lit(c.attr('alpha', 1.0))} * vmath.expm1({a[0]})")
expr("Selu", FLOAT)(
    lambda c, a: f"{c.lit(c.attr('gamma', 1.0507009873554805))} * ({a[0]} if {a[0]} > {c.lit(0)} else "
                 f"{c.lit(c.attr('alpha', 1.6732632423543772))} * vmath.expm1({a[0]}))")
expr("Celu", FLOAT)(
    lambda c, a: f"S.fmax({c.lit(0)}, {a[0]}) + S.fmin({c.lit(0)}, {c.lit(c.attr('alpha', 1.0))} * "
                 f"vmath.expm1({a[0]} / {c.lit(c.attr('alpha', 1.0))}))")
expr("Mish", FLOAT)(lambda c, a: f"{a[0]} * vmath.tanh(vmath.softplus({a[0]}))")
expr("ThresholdedRelu", FLOAT)(
    lambda c, a: f"{a[0]} if {a[0]} > {c.lit(c.attr('alpha', 1.0))} else {c.lit(0)}")


@expr("Shrink", ALL_NUM)
def _shrink(c, a):
    bias, lambd = c.lit(c.attr("bias", 0.0)), c.lit(c.attr("lambd", 0.5))
    return f"({a[0]} + {bias} if {a[0]} < -{lambd} else ({a[0]} - {bias} if {a[0]} > {lambd} else {c.lit(0)}))"


def _gelu_of(c, x, tanh):
    if tanh:
        inner = f"{c.lit(0.7978845608028654)} * ({x} + {c.lit(0.044715)} * {x} * {x} * {x})"
        return f"{c.lit(0.5)} * {x} * ({c.lit(1)} + vmath.tanh({inner}))"
    return f"{c.lit(0.5)} * {x} * ({c.lit(1)} + vmath.erf({x} * {c.lit(0.7071067811865476)}))"


expr("Gelu", FLOAT)(lambda c, a: _gelu_of(c, a[0], c.attr("approximate", "none") == "tanh"))

# onnxruntime's com.microsoft activations (contrib/microsoft/activation.py); their bias inputs are 1-D over the
# last axis, numpy's broadcast
expr("FastGelu", FLOAT)(lambda c, a: _gelu_of(c, f"({a[0]} + {a[1]})" if len(a) > 1 else a[0], True))
expr("BiasGelu", FLOAT, 2)(lambda c, a: _gelu_of(c, f"({a[0]} + {a[1]})", False))
expr("QuickGelu", FLOAT)(lambda c, a: f"{a[0]} * vmath.sigmoid({c.lit(c.attr('alpha', 1.702))} * {a[0]})")
expr("BiasAdd", FLOAT, 3)(lambda c, a: f"{a[0]} + {a[1]} + {a[2]}")


# --- which nodes are fusable ---------------------------------------------------------------------------------
# the domains an op renders for, where not ai.onnx alone: com.onnxjit and com.microsoft Gelu are ai.onnx's (the
# optimizer writes com.onnxjit's for older opsets), and com.microsoft's own activations
OP_DOMAINS = {"Gelu": ("", "com.onnxjit", "com.microsoft"), "FastGelu": ("com.microsoft",),
              "BiasGelu": ("com.microsoft",), "QuickGelu": ("com.microsoft",), "BiasAdd": ("com.microsoft",)}
# ops whose inputs are not the elements being computed on (CastLike's second input only gives a type)
TYPE_ONLY_INPUTS = {"CastLike": {1}}


def fusable(node: Node) -> bool:
    """Whether the node can be one stage of a generated kernel: a known op over known, supported dtypes."""
    # (grouping also needs the output shape; see partition.py)
    op = EXPRS.get(node.op_type)
    if op is None or node.domain not in OP_DOMAINS.get(node.op_type, ("",)) or len(node.outputs) != 1:
        return False
    if node.domain == "" and node.opset < 7 and len(node.inputs) > 1:
        return False  # before opset 7, binary ops broadcast by an axis attribute, not numpy's rules
    out_t = node.outputs[0].type
    # shapes may be unknown (the kernel takes them from the arrays); a node of unknown shape fuses with nothing
    if not isinstance(out_t, TensorType) or compute_dtype(out_t.elem_type) is None:
        return False
    present = [v for v in node.inputs if v is not None]
    if len(present) < op.min_inputs:
        return False
    for i, v in enumerate(node.inputs):
        if v is None:
            continue
        t = v.type
        if not isinstance(t, TensorType):
            return False
        dt = compute_dtype(t.elem_type)
        if dt is None:
            return False
        if i in TYPE_ONLY_INPUTS.get(node.op_type, ()):
            continue
        if node.op_type in ("Where",) and i == 0:
            continue
        if node.op_type == "Pow" and i == 1:
            continue
        if dt.kind not in op.kinds and not (dt.kind == "b" and node.op_type in ("Cast", "CastLike")):
            return False
    if node.op_type in ("Cast", "CastLike") and out_t.elem_type not in _NATIVE | _VIA_FLOAT32:
        return False
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        return _per_tensor_quantization(node)
    return True


# --- QuantizeLinear / DequantizeLinear with one scale and zero point ------------------------------------------
# computed as ops/quantize.py's kernels compute them, so that the Q -> DQ pair a QDQ model puts on each activation
# is one pass with no integer array in between (and joins the elementwise ops around it)
_QUANTIZED = {TensorProto.INT8: (-128, 127), TensorProto.UINT8: (0, 255), TensorProto.INT16: (-32768, 32767),
              TensorProto.UINT16: (0, 65535)}


@expr("QuantizeLinear", ALL_NUM, 2)
def _quantize(c, a):
    lo, hi = _QUANTIZED[c.node.outputs[0].type.elem_type]
    zero_point = f"np.float32({a[2]})" if len(a) > 2 and a[2] else "np.float32(0)"
    return f"S.quantize({a[0]}, {a[1]}, {zero_point}, np.float32({lo}), np.float32({hi}))"


@expr("DequantizeLinear", ALL_NUM, 2)
def _dequantize(c, a):
    # the difference in int64 (uint8 - uint8 would wrap), exact, then one rounding to float32
    q = f"(np.int64({a[0]}) - np.int64({a[2]}))" if len(a) > 2 and a[2] else a[0]
    return f"np.float32({q}) * {a[1]}"


def _one_value(v) -> bool:
    t = v.type if v is not None else None
    return isinstance(t, TensorType) and t.shape is not None and len(t.shape) <= 1 and \
        all(isinstance(d, int) and d == 1 for d in t.shape)


def _per_tensor_quantization(node: Node) -> bool:
    """Whether a QuantizeLinear / DequantizeLinear is one the scalar expressions compute: one float32 scale and
    (optional) zero point, no blocks, a float32 x to quantize into 8 or 16 bits, or such integers (or int32) to
    dequantize into float32."""
    ins = list(node.inputs) + [None] * (3 - len(node.inputs))
    x, scale, zero_point = ins[:3]
    if not (_one_value(scale) and scale.type.elem_type == TensorProto.FLOAT) or attr(node, "block_size", 0) or \
            (zero_point is not None and not _one_value(zero_point)) or int(attr(node, "precision", 0) or 0) not in (
            0, TensorProto.FLOAT) or x is None or not isinstance(x.type, TensorType):
        return False
    out = node.outputs[0].type.elem_type
    if node.op_type == "QuantizeLinear":
        return x.type.elem_type == TensorProto.FLOAT and out in _QUANTIZED
    return out == TensorProto.FLOAT and (x.type.elem_type in _QUANTIZED or x.type.elem_type == TensorProto.INT32)


# --- reductions as a group's output stage ----------------------------------------------------------------------
# op -> (initial accumulator, update of `acc` by element `v`, final value of `acc` given the element count `n`)
REDUCTIONS: dict[str, tuple[str, str, str]] = {
    "ReduceSum": ("0", "acc + v", "acc"),
    "ReduceMean": ("0", "acc + v", "acc / n"),
    "ReduceMax": ("-inf", "S.fmaximum(acc, v)", "acc"),
    "ReduceMin": ("inf", "S.fminimum(acc, v)", "acc"),
    "ReduceProd": ("1", "acc * v", "acc"),
    "ReduceSumSquare": ("0", "acc + v * v", "acc"),
    "ReduceL1": ("0", "acc + abs(v)", "acc"),
    "ReduceL2": ("0", "acc + v * v", "np.sqrt(acc)"),
    "ReduceLogSum": ("0", "acc + v", "vmath.log(acc)"),
}
# the opset from which each reduction takes its axes as an input instead of an attribute
_AXES_INPUT_SINCE = {op: (13 if op == "ReduceSum" else 18) for op in REDUCTIONS}


@dataclass(frozen=True)
class ReductionSpec:
    op_type: str
    first_axis: int  # the reduced axes are first_axis .. rank-1
    keepdims: bool


def reduction_spec(node: Node) -> ReductionSpec | None:
    """How a reduction node fuses as a kernel's output stage, or None when it cannot: the kernel reduces the
    trailing axes of a float tensor of known rank, with the axes known when the graph is compiled."""
    if node.domain != "" or node.op_type not in REDUCTIONS or len(node.outputs) != 1 or not node.inputs:
        return None
    x = node.inputs[0]
    t = x.type if x is not None else None
    if not isinstance(t, TensorType) or t.shape is None or t.elem_type not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return None
    out_t = node.outputs[0].type
    if not isinstance(out_t, TensorType) or out_t.elem_type != t.elem_type:
        return None
    rank = len(t.shape)
    if node.opset >= _AXES_INPUT_SINCE[node.op_type]:
        axes_v = node.inputs[1] if len(node.inputs) > 1 else None
        if axes_v is not None and axes_v.const is None:
            return None  # axes computed at run time
        axes = [] if axes_v is None else [int(a) for a in np.asarray(axes_v.const).reshape(-1)]
        if not axes and attr(node, "noop_with_empty_axes", 0):
            return None
    else:
        axes = list(attr(node, "axes", []) or [])
    axes = sorted({a + rank if a < 0 else a for a in axes}) if axes else list(range(rank))
    if not axes or axes != list(range(axes[0], rank)) or axes[0] < 0:
        return None
    return ReductionSpec(node.op_type, axes[0], bool(attr(node, "keepdims", 1)))
