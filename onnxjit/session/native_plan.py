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
from numba import typeof, types
from numba.core.dispatcher import Dispatcher
from numba.core.extending import intrinsic
from numba.np.arrayobj import populate_array

from onnxjit import worker_pool
from onnxjit.cache.jit import njit

log = logging.getLogger("onnxjit")

MIN_CALLS = 2  # kernel calls a segment must join to be worth a compiled function
# a step runs natively only below this work (element operations): above it the 1-2 us saved is lost in the
# kernel's time, and a segment is one more function to compile (a transformer's LayerNorms: 50k a step)
NATIVE_GRAIN = 1 << 22


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
    parallel: bool = False  # split over the pool's threads as the step splits it

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


def _array_at(readonly: bool):
    """An intrinsic (addresses, i, shape, dtype) -> a C-contiguous array of `dtype` and `shape` over the memory at
    addresses[i] (a constant the segment's owner keeps alive), typed read-only or not as the kernels took it."""
    @intrinsic
    def at(typingctx, addresses, i, shape, dtype):
        if isinstance(dtype, types.NumberClass):
            dt = dtype.instance_type
        elif isinstance(dtype, types.DType):
            dt = dtype.dtype
        else:
            return None
        if not isinstance(shape, types.BaseTuple) or not isinstance(addresses, types.Array):
            return None
        nd = len(shape)
        result = types.Array(dt, nd, "C", readonly=readonly)

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
    return at


_at = _array_at(True)
_at_w = _array_at(False)  # a constant a kernel took writable (it never writes it: a derived weight, say)


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


def _typed_literal(v) -> str | None:
    """Source for a number or tuple of numbers that Numba types exactly as it types `v` (a kernel's argument)."""
    if isinstance(v, (bool, np.bool_)):
        return f"np.bool_({bool(v)})"
    if isinstance(v, int):
        return f"np.int64({v})"
    if isinstance(v, float):
        return _float_source(v, "np.float64")
    if isinstance(v, np.generic) and v.dtype.kind in "iuf":
        return _literal(v)
    if isinstance(v, tuple):
        parts = [_typed_literal(x) for x in v]
        if any(p is None for p in parts):
            return None
        return "(" + "".join(p + ", " for p in parts) + ")"
    return None


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
    parallel: bool = False  # whether a call splits over the pool's threads (call it through call_segment)
    expected: dict = field(default_factory=dict)  # argument tuple variable -> its Numba type (check_types)
    samples: list = field(default_factory=list)  # the build run's input values (to compile for; then dropped)
    state: np.ndarray | None = None  # the pool's state array (a serial segment's argument)
    failed: int = 0  # calls in which a kernel raised (the steps ran instead)


def segment_source(steps, calls, start, stop, arg_values, fixed, live_after, table) -> Segment | None:
    """Generate the segment of steps [start, stop) with their NativeCalls `calls` (None for an alias step).

    arg_values[i]: step i's arguments in the build run; fixed[i][k]: whether argument k is a constant of the
    graph; live_after: the value names read after the segment (or graph outputs). What the segment reads from
    its address table is appended to `table`: constant arrays, and the kernels' native entry points (ints).

    Each kernel is called through its entry point for the argument types the step passed (worker_pool's share
    entry, on this thread or split over the pool's as the step would be): the segment links no kernel's code,
    so it compiles in a fraction of a second however large its kernels are."""
    local: dict[str, str] = {}  # value name -> local variable
    typed: dict[str, tuple] = {}  # value name -> (shape, dtype)
    inputs: list[str] = []
    shapes: list[tuple] = []
    samples: list = []
    pinned: dict[str, Any] = {}
    expected: dict[str, Any] = {}  # argument tuple variable -> the Numba type the kernel was compiled for
    body: list[str] = []
    state = worker_pool._the_pool()._state

    def value(name: str, arg) -> str | None:
        if name not in local:
            if type(arg) is not np.ndarray:
                return None
            local[name] = f"a{len(inputs)}"
            typed[name] = (arg.shape, arg.dtype)
            inputs.append(name)
            shapes.append(arg.shape)
            samples.append(arg)
        return local[name]

    def constant_array(a: np.ndarray, shape, readonly: bool = True) -> str | None:
        if not a.flags.c_contiguous or a.dtype.kind not in "biuf":
            return None
        table.append(a)
        return f"{'_at' if readonly else '_at_w'}(addresses, {len(table) - 1}, {_literal(tuple(shape))}, " \
            f"np.{a.dtype.name})"

    for i in range(start, stop):
        step, call, args = steps[i], calls[i], arg_values[i]
        if call is None:  # an alias: the output is the input
            src = value(step.inputs[0], args[0])
            if src is None:
                return None
            local[step.outputs[0]] = src
            typed[step.outputs[0]] = typed[step.inputs[0]]
            continue
        for k in call.pinned:
            if not fixed[i][k]:
                if step.inputs[k] in local and step.inputs[k] not in inputs:
                    return None  # computed in the segment: a new object each run
                pinned[step.inputs[k]] = args[k]
        buffers, made = [], []
        for j, (shape, dtype) in enumerate(call.buffers):
            buffers.append(f"b{i}_{j}")
            made.append(np.empty(shape, dtype))
            body.append(f"    b{i}_{j} = np.empty({_literal(tuple(shape))}, np.{np.dtype(dtype).name})")
        exprs, passed = [], []  # the arguments' source, and the arguments as the step passes them
        for a in call.args:
            if isinstance(a, In):
                arg = args[a.k]
                if type(arg) is not np.ndarray or not arg.flags.c_contiguous:
                    return None
                view = arg.reshape(a.shape)
                view.setflags(write=False)
                passed.append(view)
                if fixed[i][a.k]:
                    e = constant_array(view, a.shape)
                else:
                    v = value(step.inputs[a.k], arg)
                    e = None if v is None else f"_ro({v}.reshape({_literal(tuple(a.shape))}))"
            elif isinstance(a, Out):
                passed.append(made[a.j])
                e = buffers[a.j]
            elif type(a) is np.ndarray:
                passed.append(a)
                e = constant_array(a, a.shape, readonly=not a.flags.writeable)
            else:
                passed.append(a)
                e = _typed_literal(a)
            if e is None:
                return None
            exprs.append(e)
        found = worker_pool._launcher(call.kernel, tuple(passed), state)
        if found is None:  # not compiled for exactly these types
            return None
        table.append(found[0])
        expected[f"t{i}"] = typeof(tuple(passed))
        body.append(f"    t{i} = ({''.join(e + ', ' for e in exprs)})")
        if call.parallel:
            body.append(f"    failed += _split(state, t{i}, addresses[{len(table) - 1}], {call.units}, threads, "
                        "yield_every)")
        else:
            body.append(f"    failed += _call(t{i}, addresses[{len(table) - 1}], {call.units})")
        for name, (j, shape) in zip(step.outputs, call.outputs):
            if name:
                local[name] = f"v{i}_{j}"
                typed[name] = (tuple(shape), np.dtype(call.buffers[j][1]))
                same = tuple(shape) == tuple(call.buffers[j][0])
                body.append(f"    v{i}_{j} = {buffers[j]}" + ("" if same else f".reshape({_literal(tuple(shape))})"))
    outputs = [n for i in range(start, stop) for n in steps[i].outputs if n and n in live_after and n in local]
    if not outputs:
        return None
    lines = ["import numpy as np", "from onnxjit.cache.jit import njit",
             "from onnxjit.session.native_plan import _at, _at_w, _call, _ro, _split",
             f"# callees' digest: {_module_digest(['onnxjit.session.native_plan', 'onnxjit.worker_pool'])}", "",
             "", "@njit(cache=CACHE, nogil=True)",
             f"def kernel(addresses, state, threads, yield_every{''.join(', ' + local[n] for n in inputs)}):",
             "    failed = 0", *body, f"    return (failed, {''.join(local[n] + ', ' for n in outputs)})", ""]
    seg = Segment(start, stop, inputs, shapes, list(pinned.items()), outputs, [typed[n] for n in outputs],
                  "\n".join(lines))
    seg.parallel = any(c is not None and c.parallel for c in calls[start:stop])
    seg.expected, seg.samples, seg.state = expected, samples, state
    return seg


def load_segment(seg: Segment, table: list, store) -> bool:
    """Load `seg`'s source from the artifact cache, compile it for its inputs' types and check the argument types
    it passes its kernels (check_types); its address table from `table`. False where it cannot be used."""
    addresses = np.array([x if isinstance(x, int) else x.ctypes.data for x in table] or [0], dtype=np.int64)
    addresses.setflags(write=False)
    seg.addresses, seg.keep = addresses, [x for x in table if not isinstance(x, int)]
    seg.fn = store.load(seg.source).kernel
    seg.fn.compile(tuple(typeof(x) for x in (addresses, seg.state, 1, 1, *seg.samples)))
    seg.samples = []
    if not check_types(seg):
        log.warning("onnxjit: a native segment passes its kernels other types than their steps; not used")
        return False
    return True


def check_types(seg: Segment) -> bool:
    """Whether each kernel's argument tuple in the compiled segment has the types its entry point was compiled
    for (the share entry calls it assuming so). Where Numba kept no type map (a cache hit of a source checked when
    it was compiled), True."""
    for cres in seg.fn.overloads.values():
        typemap = getattr(getattr(cres, "fndesc", None), "typemap", None)
        if not typemap:
            continue
        for name, want in seg.expected.items():
            if typemap.get(name) != want:
                return False
    return True


def call_segment(fn, addresses, *inputs):
    """A segment with a call split over the pool's threads: the pool's workers readied (woken, started, moved
    off the caller's core) as for a job of its own, and held for the segment; where another thread's job holds
    them, the segment runs on this thread alone."""
    threads = worker_pool.thread_count()
    pool = worker_pool._the_pool()
    if threads <= 1 or not pool.hold(threads):
        return fn(addresses, pool._state, 1, 1, *inputs)
    try:
        return fn(addresses, pool._state, threads, pool._yield_every, *inputs)
    finally:
        pool.release()


@njit(cache=True, nogil=True)
def _call(args, kernel, n_units):
    """kernel(*args, 0, n_units) on this thread (`kernel` its native entry point): 1 where it raised."""
    arguments, entry = worker_pool._publish(args)
    return worker_pool._call_share_entry(entry, arguments, kernel, 0, n_units)


@njit(cache=True, nogil=True)
def _split(state, args, kernel, n_units, threads, yield_every):
    """kernel(*args, u0, u1) over [0, n_units) split over `threads` of the pool (held by the caller): the shares
    that raised."""
    if threads <= 1 or n_units <= 1:
        return _call(args, kernel, n_units)
    return worker_pool._launch(state, args, kernel, n_units, min(threads, n_units, worker_pool.MAX_SHARES),
                               yield_every)


def same_values(a, b) -> bool:
    """Bit-equality of two runs' outputs (arrays by their bytes, sequences element by element)."""
    if type(a) is np.ndarray:
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a is b or a == b
