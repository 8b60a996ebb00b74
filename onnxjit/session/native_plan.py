"""Native segments: consecutive steps of a plan run as one compiled function.

A step costs 1.5-3 us of Python around its kernel (the arguments' views, the output's allocation, the call into
Numba or the pool with a dozen arguments), where onnxruntime spends well under a microsecond a node: a chain of
eight small Gemms took 17 us against onnxruntime's 7, and a batch-1 MobileNet's 74 steps 1.4x onnxruntime's
time. So once a plan (one feed signature) has run twice, the steps whose kernels say how they call them
(`fn.native(*args) -> NativeCall`, NativeCalls for several calls into one output such as a Concat's copies, or a
NativeView for a Reshape) and do less than NATIVE_GRAIN work are joined, where MIN_CALLS or more follow each
other (one in a graph of at most SMALL_GRAPH_STEPS steps), into one generated Numba function per run of them:
it allocates the
buffers and calls the same compiled kernels with the same arguments, on this thread or split over the pool's
threads as their steps would be. The plan's runner then calls it where it called those steps
(executor.CompiledGraph); Loop and Scan bodies iterate theirs natively (native_loops).

- Each kernel call is one `_kernel_call` intrinsic whose arguments are described by a string literal (views of
  the run's arrays with static shapes, constants at addresses, numbers): Numba types and lowers it directly, and
  it calls the kernel (or worker_pool._launch's overload) through its entry point for exactly the argument types
  the step passed, so a segment links no kernel's code and compiles in a fraction of a second. Before first use
  the types the specs produce are checked against those the entry points were compiled for.
- Constant arrays (weights, their packed forms, a Gemm's compact C) reach the segment as addresses in one int64
  array: passing each as an argument costs ~0.15 us of unboxing; the segment holds the arrays. A step input a
  kernel holds as a constant (a packed B) is `pinned`: the runner checks the run's value is that object.
- Shapes are fixed in the source: the runner checks the shapes of the values the segment reads before it calls
  it, and runs the steps one by one where they differ (a data-dependent shape upstream), where the arguments'
  types are not those the segment was compiled for (a non-contiguous feed: its dispatcher compiles nothing more
  and raises TypeError), or where a kernel raised in it (the steps then raise as they would).
- Segments compile in a background thread after the plan's second run, which builds them (runs go on step by
  step meanwhile; session.onnxjit.native_segments = "inline" compiles them in that run, "off" never). One is kept
  only if a run through it gives outputs bit-equal to the step-by-step run it was built from.
- The source goes through the artifact cache (KernelStore); a second process loads it and looks the entry points
  up again. It carries a digest of the modules it calls into (this one and worker_pool), which Numba's cache
  does not track.
"""
from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from llvmlite import ir
from numba import typeof, types
from numba.core import callconv, cgutils
from numba.core.dispatcher import Dispatcher
from numba.core.extending import intrinsic
from numba.np.arrayobj import populate_array

from onnxjit import worker_pool
from onnxjit.kernels.linalg import single_threaded_blas

log = logging.getLogger("onnxjit")

MODES = ("background", "inline", "off")  # session.onnxjit.native_segments (config.SESSION_NATIVE_SEGMENTS)
MIN_CALLS = 2  # kernel calls a segment must join to be worth a compiled function
# ... except in a graph of at most this many steps, where one call is enough: its runs are a few steps of a few
# microseconds (a classical-ML pipeline at batch 1), and a step's Python around its kernel is much of the run
SMALL_GRAPH_STEPS = 12
# a step runs natively only below this work (element operations): above it the 2 us saved is lost in the
# kernel's time (resnet50's convs do 100M and more), and its segment would be one more function to compile
NATIVE_GRAIN = 1 << 24


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
    """How a step runs natively: `kernel(*args, u0, u1)` over the units [0, units), on the calling thread or
    split over the pool's where `parallel`, as the step runs it; its args In / Out / constants (C-contiguous
    arrays, numbers, tuples of numbers), its buffers (shape, dtype) allocated before the call, and its outputs as
    (buffer, shape) in the step's output order. `pinned`: the step's inputs the call holds for the objects the
    run gave them (a constant B packed once): the segment runs only while they are."""
    kernel: Callable
    args: list
    units: int
    buffers: list
    outputs: list
    pinned: tuple = ()
    parallel: bool = False  # split over the pool's threads as the step splits it
    single_threaded_blas: bool = False  # the kernel calls BLAS and its step holds BLAS to one thread around it
    # the step itself does not call this kernel (a Concat copies with numpy), so it may not be compiled for these
    # types yet: the segment compiles it (in its background thread) where it is not
    compiles: bool = False

    def matches(self, outs) -> bool:
        """Whether the step's outputs of a run are what this call makes (shapes and dtypes)."""
        if len(outs) != len(self.outputs):
            return False
        for o, (j, shape) in zip(outs, self.outputs):
            if type(o) is not np.ndarray or o.shape != tuple(shape) or o.dtype != self.buffers[j][1]:
                return False
        return True


@dataclass
class NativeCalls:
    """How a step runs natively as several kernel calls one after the other: the first's buffers are the step's,
    which the later calls' Out arguments name too, and its outputs the step's (a Concat's copies of its inputs
    into its output)."""
    calls: list

    @property
    def pinned(self) -> tuple:
        return tuple(k for c in self.calls for k in c.pinned)

    def matches(self, outs) -> bool:
        return self.calls[0].matches(outs)


@dataclass
class NativeView:
    """How a step runs natively when its output is its input 0 viewed with another `shape` (Reshape, Flatten;
    `pinned` as NativeCall's)."""
    shape: tuple
    pinned: tuple = ()

    def matches(self, outs) -> bool:
        return len(outs) == 1 and type(outs[0]) is np.ndarray and outs[0].shape == tuple(self.shape)


# --- the kernel calls' argument specs ------------------------------------------------------------------------
# A call's arguments are written in the segment's source as one string literal, which the `_kernel_call`
# intrinsic types and lowers directly (Numba typing and lowering a tuple of twenty typed constants and views took
# about a second a segment): elements separated by commas, tuples in parentheses, each element one of
#   v<j>:<dtype>:<d0>x<d1>..:<r|w>   the call's j-th array, viewed C-contiguous with that shape, read-only or not
#   c<i>:<dtype>:<dims>:<r|w>        a constant array at addresses[i]
#   n<dtype>:<value>                 a number (floats as float.hex)
_NUMBER_TYPES = {"bool": types.boolean, "int8": types.int8, "int16": types.int16, "int32": types.int32,
                 "int64": types.int64, "uint8": types.uint8, "uint16": types.uint16, "uint32": types.uint32,
                 "uint64": types.uint64, "float32": types.float32, "float64": types.float64}


def _number_spec(v) -> str | None:
    if isinstance(v, (bool, np.bool_)):
        return f"nbool:{int(bool(v))}"
    if isinstance(v, int):
        return f"nint64:{v}" if -2 ** 63 <= v < 2 ** 63 else None
    if isinstance(v, float):
        return f"nfloat64:{v.hex()}"
    if isinstance(v, np.generic) and v.dtype.name in _NUMBER_TYPES:
        return f"n{v.dtype.name}:{float(v).hex() if v.dtype.kind == 'f' else int(v)}"
    if isinstance(v, tuple):
        parts = [_number_spec(x) for x in v]
        return None if any(p is None for p in parts) else "(" + ",".join(parts) + ")"
    return None


def native_dtype(dtype) -> bool:
    """Whether a segment can pass arrays of `dtype` (numbers and bools, not strings or ml_dtypes' types)."""
    return np.dtype(dtype).name in _NUMBER_TYPES


def _array_spec(kind: str, at: int, a_dtype, shape, readonly: bool) -> str | None:
    name = np.dtype(a_dtype).name
    if name not in _NUMBER_TYPES:
        return None
    return f"{kind}{at}:{name}:{'x'.join(str(int(d)) for d in shape)}:{'r' if readonly else 'w'}"


def _parse(spec: str):
    """The element tree of an argument spec: ('t', children) for the whole tuple and nested ones."""
    stack: list[list] = [[]]
    token = ""

    def flush():
        nonlocal token
        if token:
            stack[-1].append(_parse_element(token))
            token = ""
    for ch in spec:
        if ch == "(":
            stack.append([])
        elif ch == ")":
            flush()
            inner = stack.pop()
            stack[-1].append(("t", inner))
        elif ch == ",":
            flush()
        else:
            token += ch
    flush()
    return ("t", stack[0])


def _parse_element(token: str):
    if token[0] == "n":
        dtype, value = token[1:].split(":")
        ty = _NUMBER_TYPES[dtype]
        v = float.fromhex(value) if dtype.startswith("float") else int(value)
        return ("n", ty, bool(v) if dtype == "bool" else v)
    at, dtype, dims, ro = token[1:].split(":")
    shape = tuple(int(d) for d in dims.split("x")) if dims else ()
    return (token[0], int(at), _NUMBER_TYPES[dtype], shape, ro == "r")


def _type_of(node):
    if node[0] == "t":
        return types.Tuple([_type_of(c) for c in node[1]])
    if node[0] == "n":
        return node[1]
    return types.Array(node[2], len(node[3]), "C", readonly=node[4])


SPEC_TYPES: dict[str, Any] = {}  # a spec -> the argument tuple's type, as typed in this process (check_types)


def _call_through(context, builder, address, argtys, values, restype):
    """Call the Numba function at `address` (compiled for exactly `argtys`, returning `restype`) with Numba's
    calling convention: (whether it raised, its return value)."""
    conv = context.call_conv
    callee = builder.inttoptr(address, conv.get_function_type(restype, argtys).as_pointer())
    retty = conv.get_return_type(restype).pointee
    ret = cgutils.alloca_once(builder, retty)
    builder.store(cgutils.get_null_value(retty), ret)
    excinfo = cgutils.alloca_once(builder, ir.PointerType(callconv.excinfo_t))
    code = builder.call(callee, [ret, excinfo] + list(conv._get_arg_packer(argtys).as_arguments(builder, values)))
    status = conv._get_return_status(builder, code, builder.load(excinfo))
    return status.is_error, builder.load(ret)


@intrinsic
def _kernel_call(typingctx, addresses, spec, state, threads, yield_every, arrays):
    """kernel(*arguments, u0, u1) over the units [0, units) for the spec "k=<i> l=<i> u=<units> s=<shares>|<args>":
    the kernel's entry point at addresses[k], compiled for exactly the arguments' types; where l >= 0 and
    `threads` > 1, split over the pool's threads through worker_pool._launch's overload for those types at
    addresses[l] (shares at most s). `arrays`: the call's arrays, which the v elements view. Returns the shares
    (or calls) that raised."""
    if not isinstance(spec, types.StringLiteral) or not isinstance(arrays, types.BaseTuple):
        return None
    head, body = spec.literal_value.split("|", 1)
    fields = dict(kv.split("=") for kv in head.split())
    tree = _parse(body)
    tuple_type = _type_of(tree)
    for node in _leaves(tree):  # the arrays viewed must be C-contiguous of the dtype the spec says
        if node[0] == "v":
            src = arrays[node[1]]
            if not isinstance(src, types.Array) or src.layout != "C" or src.dtype != node[2]:
                return None
    SPEC_TYPES[spec.literal_value] = tuple_type
    k_at, l_at, units, shares = (int(fields[f]) for f in "klus")

    def codegen(context, builder, signature, cargs):
        table = context.make_array(signature.args[0])(context, builder, value=cargs[0])
        i64 = ir.IntType(64)

        def address(i):
            return builder.load(builder.gep(table.data, [context.get_constant(types.intp, i)]))

        def build(node, ty):
            if node[0] == "t":
                return context.make_tuple(builder, ty, [build(c, t) for c, t in zip(node[1], ty.types)])
            if node[0] == "n":
                return context.get_constant(node[1], node[2])
            data_type = context.get_data_type(node[2])
            if node[0] == "v":
                src = context.make_array(signature.args[5][node[1]])(
                    context, builder, value=builder.extract_value(cargs[5], node[1]))
                data, meminfo = builder.bitcast(src.data, data_type.as_pointer()), src.meminfo
            else:
                data, meminfo = builder.inttoptr(address(node[1]), data_type.as_pointer()), None
            itemsize = context.get_abi_sizeof(data_type)
            strides, step = [], itemsize
            for d in reversed(node[3]):
                strides.append(step)
                step *= d
            out = context.make_array(ty)(context, builder)
            populate_array(out, data=data, shape=[context.get_constant(types.intp, d) for d in node[3]],
                           strides=[context.get_constant(types.intp, st) for st in strides[::-1]],
                           itemsize=itemsize, meminfo=meminfo)
            return out._getvalue()
        args = build(tree, tuple_type)
        kernel = address(k_at)
        argtys = tuple(tuple_type.types) + (types.int64, types.int64)
        values = [builder.extract_value(args, i) for i in range(len(tuple_type))]
        result = cgutils.alloca_once(builder, i64)

        def serial():
            failed, _ = _call_through(context, builder, kernel, argtys,
                                      values + [ir.Constant(i64, 0), ir.Constant(i64, units)], types.none)
            builder.store(builder.zext(failed, i64), result)
        if l_at < 0:
            serial()
        else:
            threads_value = context.cast(builder, cargs[3], signature.args[3], types.int64)
            with builder.if_else(builder.icmp_signed(">", threads_value, ir.Constant(i64, 1))) as (split, alone):
                with split:
                    n_shares = builder.select(builder.icmp_signed("<", threads_value, ir.Constant(i64, shares)),
                                              threads_value, ir.Constant(i64, shares))
                    yields = context.cast(builder, cargs[4], signature.args[4], types.int64)
                    failed, shares_failed = _call_through(
                        context, builder, address(l_at), (signature.args[2], tuple_type) + (types.int64,) * 4,
                        [cargs[2], args, kernel, ir.Constant(i64, units), n_shares, yields], types.int64)
                    builder.store(builder.select(failed, ir.Constant(i64, 1), shares_failed), result)
                with alone:
                    serial()
        return builder.load(result)
    return types.int64(addresses, spec, state, threads, yield_every, arrays), codegen


def _leaves(node):
    if node[0] == "t":
        for c in node[1]:
            yield from _leaves(c)
    else:
        yield node


def _shape_source(shape) -> str:
    return "(" + "".join(f"{int(d)}, " for d in shape) + ")"


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
    """Steps [start, stop) of a graph as one compiled function
    `fn(addresses, state, threads, yield_every, *inputs) -> (failed, *outputs)`."""
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
    blas: bool = False  # whether BLAS is held to one thread around it (a call's NativeCall.single_threaded_blas)
    expected: dict = field(default_factory=dict)  # argument spec -> its Numba type (check_types)
    samples: list = field(default_factory=list)  # the build run's input values (to compile for; then dropped)
    state: np.ndarray | None = None  # the pool's state array (a serial segment's argument)
    failed: int = 0  # calls in which a kernel raised (the steps ran instead)


def segment_source(steps, calls, start, stop, arg_values, fixed, live_after, table) -> Segment | None:
    """Generate the segment of steps [start, stop) with their NativeCalls `calls` (None for an alias step).

    arg_values[i]: step i's arguments in the build run; fixed[i][k]: whether argument k is a constant of the
    graph; live_after: the value names read after the segment (or graph outputs). What the segment reads from
    its address table is appended to `table`: constant arrays, and the entry points (ints) of the kernels and of
    worker_pool._launch's overloads.

    Each kernel is called through its entry point for the argument types its step passed it, on this thread or
    split over the pool's as the step would be: the segment links no kernel's code."""
    local: dict[str, str] = {}  # value name -> local variable
    typed: dict[str, tuple] = {}  # value name -> (shape, dtype)
    inputs: list[str] = []
    shapes: list[tuple] = []
    samples: list = []
    pinned: dict[str, Any] = {}
    expected: dict[str, Any] = {}
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

    def constant(a: np.ndarray, shape, readonly: bool) -> str | None:
        if not a.flags.c_contiguous:
            return None
        table.append(a)
        return _array_spec("c", len(table) - 1, a.dtype, shape, readonly)

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
        if isinstance(call, NativeView):
            src = None if fixed[i][0] or not args[0].flags.c_contiguous else value(step.inputs[0], args[0])
            if src is None:
                return None
            local[step.outputs[0]] = f"v{i}_0"
            typed[step.outputs[0]] = (tuple(call.shape), args[0].dtype)
            body.append(f"    v{i}_0 = {src}.reshape({_shape_source(call.shape)})")
            continue
        group = call.calls if isinstance(call, NativeCalls) else [call]
        buffers, made = [], []
        for j, (shape, dtype) in enumerate(group[0].buffers):
            buffers.append(f"b{i}_{j}")
            made.append(np.empty(shape, dtype))
            body.append(f"    b{i}_{j} = np.empty({_shape_source(shape)}, np.{np.dtype(dtype).name})")
        for one in group:
            line = _call_line(one, step, args, fixed[i], buffers, made, value, constant, table, expected, state)
            if line is None:
                return None
            body.append(line)
        call = group[0]
        for name, (j, shape) in zip(step.outputs, call.outputs):
            if name:
                local[name] = f"v{i}_{j}"
                typed[name] = (tuple(shape), np.dtype(call.buffers[j][1]))
                same = tuple(shape) == tuple(call.buffers[j][0])
                body.append(f"    v{i}_{j} = {buffers[j]}" + ("" if same else f".reshape({_shape_source(shape)})"))
    outputs = [n for i in range(start, stop) for n in steps[i].outputs if n and n in live_after and n in local]
    if not outputs:
        return None
    lines = ["import numpy as np", "from onnxjit.cache.jit import njit",
             "from onnxjit.session.native_plan import _kernel_call",
             f"# callees' digest: {_module_digest(['onnxjit.session.native_plan', 'onnxjit.worker_pool'])}", "",
             "", "@njit(cache=CACHE, nogil=True)",
             f"def kernel(addresses, state, threads, yield_every{''.join(', ' + local[n] for n in inputs)}):",
             "    failed = 0", *body, f"    return (failed, {''.join(local[n] + ', ' for n in outputs)})", ""]
    seg = Segment(start, stop, inputs, shapes, list(pinned.items()), outputs, [typed[n] for n in outputs],
                  "\n".join(lines))
    kernel_calls = [one for c in calls[start:stop] for one in (c.calls if isinstance(c, NativeCalls) else [c])
                    if isinstance(one, NativeCall)]
    seg.parallel = any(c.parallel for c in kernel_calls)
    seg.blas = any(c.single_threaded_blas for c in kernel_calls)
    seg.expected, seg.samples, seg.state = expected, samples, state
    return seg


def _call_line(call: NativeCall, step, args, fixed, buffers, made, value, constant, table, expected, state):
    """The segment's source line making `call` (segment_source's helpers: `value` names a step input's local,
    `constant` puts an array in the address table), or None where it cannot be made."""
    specs, arrays, passed = [], [], []  # the elements' specs, the call's arrays, the arguments as passed

    def array(var: str, a: np.ndarray, shape, readonly: bool) -> str | None:
        arrays.append(var)
        return _array_spec("v", len(arrays) - 1, a.dtype, shape, readonly)
    for a in call.args:
        if isinstance(a, In):
            arg = args[a.k]
            if type(arg) is not np.ndarray or not arg.flags.c_contiguous:
                return None
            view = arg.reshape(a.shape)
            view.setflags(write=False)
            passed.append(view)
            if fixed[a.k]:
                e = constant(view, a.shape, True)
            else:
                v = value(step.inputs[a.k], arg)
                e = None if v is None else array(v, arg, a.shape, True)
        elif isinstance(a, Out):
            passed.append(made[a.j])
            e = array(buffers[a.j], made[a.j], made[a.j].shape, False)
        elif type(a) is np.ndarray:
            passed.append(a)
            e = constant(a, a.shape, not a.flags.writeable)
        else:
            passed.append(a)
            e = _number_spec(a)
        if e is None:
            return None
        specs.append(e)
    argtys = typeof(tuple(passed))
    found = worker_pool._launcher(call.kernel, tuple(passed), state)
    if found is None and call.compiles and isinstance(call.kernel, Dispatcher):
        call.kernel.compile(tuple(argtys.types) + (types.int64, types.int64))
        found = worker_pool._launcher(call.kernel, tuple(passed), state)
    if found is None:  # not compiled for exactly these types
        return None
    table.append(found[0])
    kernel_at, launch_at = len(table) - 1, -1
    if call.parallel and call.units > 1:
        launch = worker_pool._launch.overloads[worker_pool.launch_signature(tuple(argtys.types), state)]
        table.append(launch.library.get_pointer_to_function(launch.fndesc.llvm_func_name))
        launch_at = len(table) - 1
    spec = f"k={kernel_at} l={launch_at} u={call.units} s={min(call.units, worker_pool.MAX_SHARES)}|" + \
        ",".join(specs)
    expected[spec] = argtys
    return f"    failed += _kernel_call(addresses, {spec!r}, state, threads, yield_every, " \
        f"({''.join(v + ', ' for v in arrays)}))"


def load_segment(seg: Segment, table: list, store) -> bool:
    """Load `seg`'s source from the artifact cache, compile it for its inputs' types and check the argument types
    it passes its kernels (check_types); its address table from `table`. False where it cannot be used."""
    addresses = np.array([x if isinstance(x, int) else x.ctypes.data for x in table] or [0], dtype=np.int64)
    addresses.setflags(write=False)
    seg.addresses, seg.keep = addresses, [x for x in table if not isinstance(x, int)]
    seg.fn = store.load(seg.source).kernel  # (the same dispatcher for the same source, in this process)
    sig = tuple(typeof(x) for x in (addresses, seg.state, 1, 1, *seg.samples))
    if sig not in seg.fn.overloads:
        seg.fn.compile(sig)
    seg.samples = []
    if not check_types(seg):
        log.warning("onnxjit: a native segment would pass its kernels other types than their steps; not used")
        return False
    return True


def check_types(seg: Segment) -> bool:
    """Whether each kernel call's arguments, as the segment's spec types them, are the types its entry point was
    compiled for (it is called assuming so). A spec not typed in this process (the segment came from the cache,
    checked when it was compiled from the same source) passes."""
    return all(SPEC_TYPES.get(spec, want) == want for spec, want in seg.expected.items())


def call_segment(fn, addresses, blas, *inputs):
    """A segment with a call split over the pool's threads, or calling BLAS (`blas`: held to one thread): the
    pool's workers readied (woken, started, moved off the caller's core) as for a job of its own, and held for
    the segment; where another thread's job holds them, the segment runs on this thread alone."""
    if blas:
        with single_threaded_blas:
            return call_segment(fn, addresses, False, *inputs)
    threads = worker_pool.thread_count()
    pool = worker_pool._the_pool()
    if threads <= 1 or not pool.hold(threads):
        return fn(addresses, pool._state, 1, 1, *inputs)
    try:
        return fn(addresses, pool._state, threads, pool._yield_every, *inputs)
    finally:
        pool.release()


def same_values(a, b) -> bool:
    """Bit-equality of two runs' outputs (arrays by their bytes, sequences element by element)."""
    if type(a) is np.ndarray:
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a is b or a == b
