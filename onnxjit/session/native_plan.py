"""Native segments: consecutive small steps of a plan run as one compiled function.

A batch-1 step costs 1.5-2 us of Python around its kernel (the arguments' views, the output's allocation, the
call into Numba with a dozen arguments), where onnxruntime spends 0.3-0.5 us a node: a chain of eight small
Gemms took 17 us against onnxruntime's 7. So once a plan (one feed signature) has run, the steps whose kernels
say how they call them (`fn.native(*args) -> NativeCall`) and that run on the calling thread alone are joined,
where two or more follow each other, into one generated Numba function per run of them: it allocates the
buffers, makes the views and calls the same compiled kernels with the same arguments, natively. The plan's
runner then calls that function where it called those steps (executor.CompiledGraph).

- Shapes are fixed in the segment's source: the runner checks the shapes of the values the segment reads before
  it calls it, and runs the steps one by one where they differ (a data-dependent shape upstream), or where the
  arguments' types are not those the segment was compiled for (a non-contiguous feed): the segment's dispatcher
  compiles nothing after its first call and raises TypeError.
- Constant arrays (weights, their transposed or packed forms, a Gemm's compact C) reach the segment as
  addresses in one int64 array (`_at` views them): passing each as an argument costs ~0.15 us of unboxing, and
  baking their contents into the code would bloat compilation and the cache. The segment holds the arrays.
- A segment is kept only if a run through it gives outputs bit-equal to the step-by-step run it was built from
  (the same kernels on the same arguments: anything else is a mistake, and the steps run as before).
- The source goes through the artifact cache (KernelStore): a second process loads it. It names the kernels it
  calls by module (a fused kernel's module name carries its source's hash) and carries a digest of the library
  modules it calls into, which numba's cache does not track.
"""
from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numba import types
from numba.core.dispatcher import Dispatcher
from numba.core.extending import intrinsic
from numba.np.arrayobj import populate_array

log = logging.getLogger("onnxjit")

MIN_CALLS = 2  # kernel calls a segment must join to be worth a compiled function
# a step runs natively only below this work (element operations): above it the 1-2 us saved is lost in the
# kernel's time, and a segment is one more function to compile (a transformer's LayerNorms: 50k a step)
NATIVE_GRAIN = 1 << 14


@dataclass(frozen=True)
class In:
    """Argument: the step's input `k` as a read-only C-contiguous view of `shape`."""
    k: int
    shape: tuple


@dataclass(frozen=True)
class Out:
    """Argument: the call's buffer `j` (allocated by the segment)."""
    j: int


@dataclass
class NativeCall:
    """How a step runs natively: `kernel(*args, 0, units)` on the calling thread, its args In / Out / constants
    (read-only C-contiguous arrays, numbers, tuples of numbers), its buffers (shape, dtype) allocated before the
    call, and its outputs as (buffer, shape) in the step's output order. `pinned`: the step's inputs the call
    holds for the objects the run gave them (a constant B packed once): the segment runs only while they are."""
    kernel: Callable
    args: list
    units: int
    buffers: list
    outputs: list
    pinned: tuple = ()

    def matches(self, outs) -> bool:
        """Whether the step's outputs of a run are what this call makes (shapes and dtypes)."""
        if len(outs) != len(self.outputs):
            return False
        for o, (j, shape) in zip(outs, self.outputs):
            if type(o) is not np.ndarray or o.shape != tuple(shape) or o.dtype != self.buffers[j][1]:
                return False
        return True


# --- intrinsics the generated segments use -----------------------------------------------------------------------
@intrinsic
def _ro(typingctx, a):
    """`a` typed read-only (the type the kernels were compiled for: onnxjit passes them read-only views)."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, signature, args):
        context.nrt.incref(builder, signature.args[0], args[0])  # a returned value is a new reference
        return args[0]
    return a.copy(readonly=True)(a), codegen


@intrinsic
def _at(typingctx, addresses, i, shape, dtype):
    """A read-only C-contiguous array of `dtype` and `shape` over the memory at addresses[i] (a constant the
    segment's owner keeps alive)."""
    if isinstance(dtype, types.NumberClass):
        dt = dtype.instance_type
    elif isinstance(dtype, types.DType):
        dt = dtype.dtype
    else:
        return None
    if not isinstance(shape, types.BaseTuple) or not isinstance(addresses, types.Array):
        return None
    nd = len(shape)
    result = types.Array(dt, nd, "C", readonly=True)

    def codegen(context, builder, signature, args):
        table = context.make_array(signature.args[0])(context, builder, value=args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        address = builder.load(builder.gep(table.data, [at]))
        data_type = context.get_data_type(dt)
        data = builder.inttoptr(address, data_type.as_pointer())
        dims = [context.cast(builder, builder.extract_value(args[2], d), signature.args[2][d], types.intp)
                for d in range(nd)]
        itemsize = context.get_abi_sizeof(data_type)
        strides, step = [], context.get_constant(types.intp, itemsize)
        for d in reversed(dims):
            strides.append(step)
            step = builder.mul(step, d)
        out = context.make_array(result)(context, builder)
        populate_array(out, data=data, shape=dims, strides=strides[::-1], itemsize=itemsize, meminfo=None)
        return out._getvalue()
    return result(addresses, i, shape, dtype), codegen


# --- source generation ---------------------------------------------------------------------------------------------
def _literal(v) -> str | None:
    """Source for a number (or tuple of numbers) that numba types as it types `v`, or None."""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        return _float_source(v, "float")
    if isinstance(v, np.generic) and v.dtype.kind in "iuf":
        return _float_source(float(v), f"np.{v.dtype.name}") if v.dtype.kind == "f" else f"np.{v.dtype.name}({int(v)})"
    if isinstance(v, tuple):
        parts = [_literal(x) for x in v]
        if any(p is None for p in parts):
            return None
        return "(" + "".join(p + ", " for p in parts) + ")"
    return None


def _float_source(x: float, cast: str) -> str:
    if x != x:
        return f"{cast}(np.nan)"
    if x in (float("inf"), float("-inf")):
        return f"{cast}({'-' if x < 0 else ''}np.inf)"
    return f"{cast}({x!r})"


def _kernel_import(kernel) -> tuple[str, str] | None:
    """(module, name) that import `kernel` (a Numba dispatcher), or None."""
    if not isinstance(kernel, Dispatcher):
        return None
    module, name = kernel.py_func.__module__, kernel.py_func.__name__
    if getattr(sys.modules.get(module), name, None) is not kernel:
        return None
    return module, name


def _module_digest(modules) -> str:
    """A digest of the library modules' files (a segment calls into them; numba's cache does not track callees)."""
    h = hashlib.sha256()
    for name in sorted(modules):
        path = getattr(sys.modules[name], "__file__", None)
        if path:
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


@dataclass
class Segment:
    """Steps [start, stop) of a graph as one compiled function `fn(addresses, *inputs) -> tuple(outputs)`."""
    start: int
    stop: int
    inputs: list  # value names, in the function's parameter order after `addresses`
    shapes: list  # each input's shape when the segment was built (checked before each call)
    pinned: list  # (value name, object): the run's value must be that object (NativeCall.pinned)
    outputs: list  # value names the function returns, in order
    out_types: list = field(default_factory=list)  # (shape, dtype) of each output
    source: str = ""
    fn: Callable | None = None
    addresses: np.ndarray | None = None
    keep: list = field(default_factory=list)  # the constant arrays whose addresses the segment reads


def segment_source(steps, calls, start, stop, arg_values, fixed, live_after, keep) -> Segment | None:
    """Generate the segment of steps [start, stop) with their NativeCalls `calls` (None for an alias step).

    arg_values[i]: step i's arguments in the build run; fixed[i][k]: whether argument k is a constant of the
    graph; live_after: the value names read after the segment (or graph outputs). Constant arrays are appended to
    `keep` (their position there is their index in the address table)."""
    local: dict[str, str] = {}  # value name -> local variable
    typed: dict[str, tuple] = {}  # value name -> (shape, dtype)
    inputs: list[str] = []
    shapes: list[tuple] = []
    pinned: dict[str, Any] = {}
    kernels: dict[int, str] = {}
    imports: dict[str, list] = {}
    body: list[str] = []

    def value(name: str, arg) -> str | None:
        if name not in local:
            if type(arg) is not np.ndarray:
                return None
            local[name] = f"a{len(inputs)}"
            typed[name] = (arg.shape, arg.dtype)
            inputs.append(name)
            shapes.append(arg.shape)
        return local[name]

    def constant_array(a: np.ndarray, shape) -> str | None:
        if not (a.flags.c_contiguous and not a.flags.writeable and a.dtype.kind in "biuf") or a.size == 0:
            return None
        keep.append(a)
        return f"_at(addresses, {len(keep) - 1}, {_literal(tuple(shape))}, np.{a.dtype.name})"

    for i in range(start, stop):
        step, call, args = steps[i], calls[i], arg_values[i]
        if call is None:  # an alias: the output is the input
            src = value(step.inputs[0], args[0])
            if src is None:
                return None
            local[step.outputs[0]] = src
            typed[step.outputs[0]] = typed[step.inputs[0]]
            continue
        ref = _kernel_import(call.kernel)
        if ref is None:
            return None
        for k in call.pinned:
            if not fixed[i][k]:
                if step.inputs[k] in local and step.inputs[k] not in inputs:
                    return None  # computed in the segment: a new object each run
                pinned[step.inputs[k]] = args[k]
        if id(call.kernel) not in kernels:
            kernels[id(call.kernel)] = f"k{len(kernels)}"
            imports.setdefault(ref[0], []).append((ref[1], kernels[id(call.kernel)]))
        buffers = []
        for j, (shape, dtype) in enumerate(call.buffers):
            buffers.append(f"b{i}_{j}")
            body.append(f"    b{i}_{j} = np.empty({_literal(tuple(shape))}, np.{np.dtype(dtype).name})")
        exprs = []
        for a in call.args:
            if isinstance(a, In):
                arg = args[a.k]
                if type(arg) is not np.ndarray:
                    return None
                if fixed[i][a.k]:
                    e = constant_array(arg.reshape(a.shape) if arg.flags.c_contiguous else arg, a.shape)
                else:
                    v = value(step.inputs[a.k], arg)
                    e = None if v is None else f"_ro({v}.reshape({_literal(tuple(a.shape))}))"
            elif isinstance(a, Out):
                e = buffers[a.j]
            elif type(a) is np.ndarray:
                e = constant_array(a, a.shape)
            else:
                e = _literal(a)
            if e is None:
                return None
            exprs.append(e)
        body.append(f"    {kernels[id(call.kernel)]}({', '.join(exprs)}, 0, {call.units})")
        for name, (j, shape) in zip(step.outputs, call.outputs):
            if name:
                local[name] = f"v{i}_{j}"
                typed[name] = (tuple(shape), np.dtype(call.buffers[j][1]))
                same = tuple(shape) == tuple(call.buffers[j][0])
                body.append(f"    v{i}_{j} = {buffers[j]}" + ("" if same else f".reshape({_literal(tuple(shape))})"))
    outputs = [n for i in range(start, stop) for n in steps[i].outputs if n and n in live_after and n in local]
    if not outputs:
        return None
    library = sorted(m for m in imports if not m.startswith("onnxjit_kernels."))
    lines = ["import numpy as np", "from onnxjit.cache.jit import njit",
             "from onnxjit.session.native_plan import _at, _ro"]
    lines += [f"from {m} import " + ", ".join(f"{n} as {alias}" for n, alias in names) for m, names in imports.items()]
    lines += [f"# callees' digest: {_module_digest(library + ['onnxjit.session.native_plan'])}", "",
              "", "@njit(cache=CACHE, nogil=True)",
              f"def kernel(addresses{''.join(', ' + local[n] for n in inputs)}):", *body,
              f"    return ({''.join(local[n] + ', ' for n in outputs)})", ""]
    return Segment(start, stop, inputs, shapes, list(pinned.items()), outputs, [typed[n] for n in outputs],
                   "\n".join(lines))


def same_values(a, b) -> bool:
    """Bit-equality of two runs' outputs (arrays by their bytes, sequences element by element)."""
    if type(a) is np.ndarray:
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a is b or a == b
