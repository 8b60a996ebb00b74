"""Rendering one group of fused nodes as the Python source of one Numba kernel.

The kernel is specialized for the dtypes, the rank and broadcast pattern of its inputs, never for their sizes:
sizes are run-time arguments, so one compiled kernel serves every shape of the pattern. Compiling is what a cold
start pays for (about 0.2 s per kernel), and baking sizes in bought nothing measurable: over ten cases
(elementwise, broadcast, staged and reduction kernels, 16 to 4M elements) a call with run-time sizes took
0.82-1.08x the time (medians of 12 alternating rounds; the main loops are the same machine code), while
densenet121's 62 Mul-Add-Relu groups, over as many channel counts, compiled 62 kernels (13-18 s) instead of 2. For
the same reason the source names no node (`KernelInfo.nodes` does): identical groups render identical sources
and share one kernel.

The kernel runs the units [u0, u1) of its outermost loop (its last two arguments), so onnxjit's own threads
(worker_pool.run_units) split it as they split the conv and GEMM kernels. Written with numba.prange, fused
kernels ran on Numba's OpenMP threads, which spin after each parallel region on the cores onnxjit's workers
compute on (for GOMP_SPINCOUNT polls, 10,000 as onnxjit set it then): vit_tiny's MatMuls took 600 instead of 350 us
each after a fused kernel (19.9 -> 12.7 ms over the model with no spin at all, OMP_WAIT_POLICY=PASSIVE alone),
and a serial loop over a range also compiles faster than a parfor.

Dimensions of size 1 are dropped and neighbouring dimensions that every input treats alike (all full, or all
broadcast) are merged, so an elementwise op over same-shaped inputs is one flat loop whose body LLVM vectorizes.
Inputs and outputs are passed as flat contiguous arrays; each node's value is a local variable, so nothing
between fused nodes touches memory.

A long body is split into stages (see `_stages`): the innermost loop runs over tiles of TILE elements, and each
stage is a loop over the tile; a value that one stage computes and a later one reads goes through a TILE-element
scratch array, which stays in L1 cache. A body with two transcendental functions (about 100 AVX-512
instructions) is too long for the CPU's out-of-order window to overlap consecutive iterations, so one loop runs
it latency-bound; split into stages of one transcendental each, it measured 25-30% faster. A kernel whose long
innermost loop calls a transcendental also compiles with LLVM interleaving INTERLEAVE vector iterations
(`llvm_options.vector_interleave`): with AVX2's 16 registers LLVM does not do it on its own, and the 8-op chain
ran 4.6 instead of 7.9 ms on a 2-core AMD EPYC (Zen 3).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from onnxjit.fuser.exprs import EXPRS, REDUCTIONS, TYPE_ONLY_INPUTS, Ctx, compute_dtype, reduction_spec
from onnxjit.fuser.partition import Group
from onnxjit.ir.types import TensorType
from onnxjit.worker_pool import PARALLEL_GRAIN

PARALLEL_MIN_ELEMENTS = 1 << 16  # below this, threads cost more than they save
TILE = 1024  # elements per tile of a staged kernel: its scratch arrays (4 bytes each per value) stay in L1
INTERLEAVE = 4  # vector iterations run side by side in a long loop around a transcendental (llvm_options.py)

_NUMBA_NAMES = {"bool": "boolean"}


def _numba_type(dtype: np.dtype) -> str:
    return _NUMBA_NAMES.get(dtype.name, dtype.name)


def _np_ctor(dtype: np.dtype) -> str:
    return "np.bool_" if dtype.kind == "b" else f"np.{dtype.name}"


@dataclass
class KernelSpec:
    """A rendered kernel and how to call it for one input signature."""

    name: str
    source: str
    loaded: list[int]  # positions (in the group's inputs) of the arrays the kernel reads
    in_dtypes: list[np.dtype]  # compute dtype each loaded input is converted to
    out_shapes: list[tuple]  # per output (a reduction stage's output is smaller)
    out_dtypes: list[np.dtype]  # compute dtypes of the outputs
    final_dtypes: list[np.dtype]  # dtypes the outputs are returned in
    sizes: list[int]  # the loop sizes, passed as the kernel's arguments before the unit range
    n_units: int  # the kernel runs units [u0, u1) of its outermost loop (worker_pool.run_units); 1: not split
    work: int  # element operations, for run_units' parallel threshold (0: run on the caller)


def _collapse(out_shape: tuple, in_shapes: list[tuple]) -> tuple[list[int], list[list[bool]]]:
    """Merged loop sizes, and per input which merged dims it spans fully (False: broadcast along it)."""
    rank = len(out_shape)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in in_shapes]
    dims: list[int] = []
    full: list[list[bool]] = [[] for _ in in_shapes]
    for d, n in enumerate(out_shape):
        if n == 1:
            continue
        pattern = [p[d] == n for p in padded]
        if dims and all(f[-1] == pat for f, pat in zip(full, pattern)):
            dims[-1] *= n
        else:
            dims.append(n)
            for f, pat in zip(full, pattern):
                f.append(pat)
    return dims, full


@dataclass
class _Body:
    """What both targets render from: the loops, the loads, the scalar body, the outputs' stores."""

    loaded: list[int]
    in_dtypes: list[np.dtype]
    out_dtypes: list[np.dtype]
    out_shapes: list[tuple]
    dims: list[int]  # merged loop sizes, the kept (outer) ones first
    full: list[list[bool]]  # per loaded input, which loops it spans
    n_outer: int  # loops over kept dims (all of them without a reduction)
    total: int
    body: list[str]  # the nodes' scalar expressions, one assignment each
    reads: list[set[str]]  # per body line, the variables it reads
    var: dict[str, str]  # value name -> variable holding it
    dtype_of: dict[str, np.dtype]
    lines: list[str]  # per element of the innermost loop: loads, body, stores or the reduction's update
    before: list[str]  # per outer index, before the reduced loops
    after: list[str]  # per outer index, after them
    out_index: str
    flat_index: object  # flat_index(spans, upto) -> index expression over i0.. of an array spanning `spans`
    size: list[str]
    reduces: bool


def _analyze(group: Group, outputs: list[str], in_sigs: list[tuple[np.dtype, tuple]]) -> _Body:
    red = group.reduction
    red_spec = reduction_spec(red) if red is not None else None
    elementwise = group.nodes[:-1] if red is not None else group.nodes
    inputs = group.inputs
    index_of = {name: i for i, name in enumerate(inputs)}
    loaded_names: list[str] = []
    for n in group.nodes:
        skip = TYPE_ONLY_INPUTS.get(n.op_type, ())
        read = n.inputs[:1] if n is red else n.inputs  # a reduction's axes input is read at compile time
        for i, v in enumerate(read):
            if v is not None and i not in skip and v.name in index_of and v.name not in loaded_names:
                loaded_names.append(v.name)
    loaded = [index_of[n] for n in loaded_names]
    in_dtypes = [compute_dtype_of(in_sigs[i][0]) for i in loaded]
    in_shapes = [tuple(in_sigs[i][1]) for i in loaded]
    out_shape = tuple(np.broadcast_shapes(*in_shapes)) if in_shapes else ()
    rank0 = len(out_shape)
    split = red_spec.first_axis if red_spec is not None else rank0
    padded = [(1,) * (rank0 - len(sh)) + sh for sh in in_shapes]
    # the reduced (trailing) axes and the kept ones collapse separately: loops over kept dims are outside
    outer_dims, outer_full = _collapse(out_shape[:split], [p[:split] for p in padded])
    inner_dims, inner_full = _collapse(out_shape[split:], [p[split:] for p in padded])
    dims = outer_dims + inner_dims
    full = [o + i for o, i in zip(outer_full, inner_full)]
    n_outer = len(outer_dims)
    total = math.prod(out_shape)

    var = {name: f"x{j}" for j, name in enumerate(loaded_names)}
    dtype_of = {name: dt for name, dt in zip(loaded_names, in_dtypes)}
    body: list[str] = []
    reads: list[set[str]] = []  # per body line, the variables it reads
    for k, n in enumerate(elementwise):
        out_t: TensorType = n.outputs[0].type
        out_dt = compute_dtype(out_t.elem_type)
        skip = TYPE_ONLY_INPUTS.get(n.op_type, ())
        args = ["" if v is None or i in skip else var[v.name] for i, v in enumerate(n.inputs)]
        arg_dtypes = [None if v is None else dtype_of.get(v.name) for v in n.inputs]
        text = EXPRS[n.op_type].render(Ctx(n, arg_dtypes, out_dt), args)
        body.append(f"t{k} = {_np_ctor(out_dt)}({text})  # {n.op_type}")
        reads.append({a for a in args if a})
        var[n.outputs[0].name] = f"t{k}"
        dtype_of[n.outputs[0].name] = out_dt
    if red is not None:
        dtype_of[red.outputs[0].name] = compute_dtype(red.outputs[0].type.elem_type)
    out_dtypes = [dtype_of[name] for name in outputs]

    rank = len(dims)
    size = [f"n{d}" for d in range(rank)]

    def flat_index(spans: list[bool], upto: int = rank) -> str:
        terms = []
        for d in range(upto):
            if not spans[d]:
                continue
            inner = [size[e] for e in range(d + 1, upto) if spans[e]]
            terms.append("*".join([f"i{d}"] + inner))
        return " + ".join(terms) if terms else "0"

    lines = [f"x{j} = in{j}[{flat_index(full[j])}]" for j in range(len(loaded))] + body
    out_index = flat_index([True] * rank)
    out_shapes = []
    after: list[str] = []  # at the end of the outer loop body, after the reduced loops
    before: list[str] = []  # at the start of the outer loop body
    for o, name in enumerate(outputs):
        if red is not None and name == red.outputs[0].name:
            dt = _np_ctor(dtype_of[name])
            init, update, final = REDUCTIONS[red.op_type]
            count = "*".join(size[n_outer:]) or "1"
            init_text = {"inf": "np.inf", "-inf": "-np.inf"}.get(init, init)
            before.append(f"acc = {dt}({init_text})")
            lines.append(f"v = {var[red.inputs[0].name]}")
            lines.append(f"acc = {dt}({update})  # {red.op_type}")
            after.append(f"n = {dt}({count})")
            after.append(f"out{o}[{flat_index([True] * n_outer, n_outer)}] = {dt}({final})")
            reduced = list(out_shape)
            for a in range(split, rank0):
                reduced[a] = 1
            out_shapes.append(tuple(reduced) if red_spec.keepdims else tuple(out_shape[:split]))
        else:
            lines.append(f"out{o}[{out_index}] = {var[name]}")
            out_shapes.append(out_shape)

    return _Body(loaded, in_dtypes, out_dtypes, out_shapes, dims, full, n_outer, total, body, reads, var, dtype_of,
                 lines, before, after, out_index, flat_index, size, red is not None)


def render(group: Group, outputs: list[str], in_sigs: list[tuple[np.dtype, tuple]]) -> KernelSpec:
    """The CPU target: an @njit kernel over the units [u0, u1) of its outermost loop."""
    g = _analyze(group, outputs, in_sigs)
    loaded, in_dtypes, out_dtypes, out_shapes, dims, full = g.loaded, g.in_dtypes, g.out_dtypes, g.out_shapes, \
        g.dims, g.full
    n_outer, total, body, reads, var, dtype_of = g.n_outer, g.total, g.body, g.reads, g.var, g.dtype_of
    lines, before, after, out_index, flat_index, size = g.lines, g.before, g.after, g.out_index, g.flat_index, \
        g.size
    red = group.reduction
    rank = len(dims)
    # the outermost loop is split into units over onnxjit's threads, unless it is a reduced one
    splittable = rank > 0 and (red is None or n_outer > 0)
    parallel = total >= PARALLEL_MIN_ELEMENTS and splittable
    # (a short innermost loop gains nothing from tiles; shapes on both sides of the bound, like those on both
    # sides of PARALLEL_MIN_ELEMENTS, get two kernels, each correct for every size)
    long_inner = red is None and rank > 0 and dims[-1] >= TILE // 4
    stages = _stages(body) if long_inner else []
    interleave = INTERLEAVE if long_inner and any(_vmath_calls(line) for line in body) else 0
    if len(stages) > 1:
        # at tile level i{rank-1} is the tile's first element: each array's offset for the tile
        tile_offsets = [flat_index(full[j]) for j in range(len(loaded))] + [out_index] * len(outputs)
        spans_inner = [full[j][-1] for j in range(len(loaded))] + [True] * len(outputs)
        out_vars = [var[name] for name in outputs]
        var_dtypes = {v: dtype_of[name] for name, v in var.items()}
        code = _staged_loops(stages, body, reads, tile_offsets, spans_inner, out_vars, var_dtypes, size)
        n_units = -(-dims[0] // TILE) if rank == 1 else dims[0]
    else:
        code = []
        if splittable:
            # the arrays sliced to the units' rows: the loop then counts from 0, so LLVM knows every index is
            # non-negative and drops Numba's wraparound on it (with range(u0, u1) it did not, and a broadcast
            # Mul over 240x196 floats ran 45 us instead of ~15, unvectorized)
            def rows_slice(spans: list[bool], upto: int) -> str:
                step = "*".join(size[e] for e in range(1, upto) if spans[e]) or "1"
                return f"[u0 * {step}:u1 * {step}]"
            code += [f"    in{j} = in{j}{rows_slice(full[j], rank)}" for j in range(len(loaded)) if full[j][0]]
            for o, name in enumerate(outputs):
                reduced = red is not None and name == red.outputs[0].name
                code.append(f"    out{o} = out{o}{rows_slice([True] * rank, n_outer if reduced else rank)}")
        for d in range(n_outer):
            rng = "range(u1 - u0)" if d == 0 else f"range({size[d]})"
            code.append("    " * (d + 1) + f"for i{d} in {rng}:")
        code += ["    " * (n_outer + 1) + line for line in before]
        for d in range(n_outer, rank):
            rng = "range(u1 - u0)" if d == 0 and splittable else f"range({size[d]})"
            code.append("    " * (d + 1) + f"for i{d} in {rng}:")
        n_units = dims[0] if splittable else 1
        code += ["    " * (rank + 1) + line for line in lines]
        code += ["    " * (n_outer + 1) + line for line in after]

    params = [f"in{j}" for j in range(len(loaded))] + [f"out{o}" for o in range(len(outputs))]
    # inputs are typed read-only so initializers and read-only feeds match; writable arrays convert to that
    types = [f"T.Array(T.{_numba_type(dt)}, 1, 'C', readonly=True)" for dt in in_dtypes] + [
        f"T.Array(T.{_numba_type(dt)}, 1, 'C')" for dt in out_dtypes]
    params += [f"n{d}" for d in range(rank)] + ["u0", "u1"]
    types += ["T.int64"] * (rank + 2)
    # a reduction vectorizes only if its sum may be reassociated
    fastmath = ', fastmath={"reassoc", "contract"}' if red is not None else ""
    ops_doc = ", ".join(n.op_type for n in group.nodes)
    header = [
        f"# onnxjit fused kernel over {len(group.nodes)} node(s): {ops_doc[:2000]}",
        f"# {rank} loop(s), sizes given at run time",
        "import numpy as np",
        "import numba",
        "from numba import types as T",
        "from onnxjit.cache.jit import njit",
        "from onnxjit.kernels import vmath",
        "from onnxjit.fuser import scalar as S",
    ]
    function = [
        f"@njit(T.void({', '.join(types)}), cache=CACHE, nogil=True, error_model=\"numpy\"{fastmath})",
        f"def kernel({', '.join(params)}):",
    ] + code
    if interleave:  # the signature makes Numba compile (or load) the kernel here, inside the with block
        header += ["from onnxjit.fuser.llvm_options import vector_interleave", "", "",
                   f"with vector_interleave({interleave}):"]
        function = ["    " + line for line in function]
    else:
        header += ["", ""]
    source = "\n".join(header + function) + "\n"
    name = "fused_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    final = [np.dtype(in_sigs_final) for in_sigs_final in _final_dtypes(group, outputs)]
    return KernelSpec(name, source, loaded, in_dtypes, out_shapes, out_dtypes, final, list(dims), n_units,
                      max(total, PARALLEL_GRAIN) if parallel else 0)


def render_cuda(group: Group, outputs: list[str], in_sigs: list[tuple[np.dtype, tuple]],
                target_tag: str = "") -> KernelSpec:
    """The CUDA target: the same loads, body and stores as `render`, in a @cuda.jit kernel whose threads take the
    outer (kept) indices in a grid-stride loop, each running the reduced loops itself. Launched over `n_units`
    outer indices (see providers/cuda.py). `target_tag` names the GPU the source is for (its compute capability):
    the artifact cache keys entries by source."""
    g = _analyze(group, outputs, in_sigs)
    rank = len(g.dims)
    n_outer = g.n_outer
    outer_total = " * ".join(g.size[:n_outer]) or "1"
    code = [f"    for k in range(cuda.grid(1), {outer_total}, cuda.gridsize(1)):"]
    if n_outer:
        code.append("        r = k")
        for d in range(n_outer - 1, 0, -1):
            code.append(f"        i{d} = r % {g.size[d]}")
            code.append(f"        r = r // {g.size[d]}")
        code.append("        i0 = r")
    code += ["        " + line for line in g.before]
    for d in range(n_outer, rank):
        code.append("    " * (d - n_outer + 2) + f"for i{d} in range({g.size[d]}):")
    code += ["    " * (rank - n_outer + 2) + line for line in g.lines]
    code += ["        " + line for line in g.after]
    params = [f"in{j}" for j in range(len(g.loaded))] + [f"out{o}" for o in range(len(outputs))] + \
        [f"n{d}" for d in range(rank)]
    # device arrays are never read-only: every array argument is typed writable
    types = [f"T.Array(T.{_numba_type(dt)}, 1, 'C')" for dt in g.in_dtypes + g.out_dtypes] + ["T.int64"] * rank
    ops_doc = ", ".join(n.op_type for n in group.nodes)
    source = "\n".join([
        f"# onnxjit fused CUDA kernel over {len(group.nodes)} node(s): {ops_doc[:2000]}",
        f"# {rank} loop(s), sizes given at run time{'; for ' + target_tag if target_tag else ''}",
        "from numba import cuda",
        "from numba import types as T",
        "# numpy's, vmath's and fuser/scalar.py's names as device functions (numba-cuda compiles no numpy ufunc)",
        "from onnxjit.kernels.cuda import scalar_math as np",
        "from onnxjit.kernels.cuda import scalar_math as S",
        "from onnxjit.kernels.cuda import scalar_math as vmath",
        "",
        "",
        f"@cuda.jit(T.void({', '.join(types)}), cache=CACHE)",
        f"def kernel({', '.join(params)}):",
        *code]) + "\n"
    name = "cuda_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    final = [np.dtype(dt) for dt in _final_dtypes(group, outputs)]
    n_units = math.prod(g.dims[:n_outer])
    return KernelSpec(name, source, g.loaded, g.in_dtypes, g.out_shapes, g.out_dtypes, final, list(g.dims), n_units, 0)


def _vmath_calls(line: str) -> int:
    """How many transcendental functions (vmath calls) a body line makes."""
    return line.count("vmath.")


def _stages(body: list[str]) -> list[list[int]]:
    """The body lines split into stages of at most one transcendental function each (a vmath call); in order."""
    stages: list[list[int]] = [[]]
    heavy = False
    for k, line in enumerate(body):
        calls = _vmath_calls(line)
        if calls and heavy:
            stages.append([])
            heavy = False
        stages[-1].append(k)
        heavy = heavy or calls > 0
    return [st for st in stages if st]


def _staged_loops(stages, body, reads, tile_offsets, spans_inner, out_vars, var_dtypes, size) -> list[str]:
    """Loops of a staged kernel: the outer dims as usual (the first over the units [u0, u1)), then the innermost
    one as tiles (the units when it is the only one), each tile running the stages one after the other over its
    elements. Values read by a later stage than their own go through one
    TILE-element scratch array each. Arrays are indexed through per-tile slices: LLVM vectorizes `a[j]` but
    not `a[base + j]` (numba's negative-index wraparound on the sum), which measured 5.5 vs 8.5 ms on ew_chain."""
    rank = len(size)
    d = rank - 1
    n_in = len(tile_offsets) - len(out_vars)
    stage_of = {f"t{k}": s for s, st in enumerate(stages) for k in st}
    crossing = sorted({v for s, st in enumerate(stages) for k in st for v in reads[k]
                       if v in stage_of and stage_of[v] < s}, key=lambda v: int(v[1:]))
    scratch = [f"s{v[1:]} = np.empty({TILE}, {_np_ctor(var_dtypes[v])})" for v in crossing]
    code: list[str] = ["    " + line for line in scratch]  # once per call: each thread's share is one call
    for e in range(d):
        rng = "range(u0, u1)" if e == 0 else f"range({size[e]})"
        code.append("    " * (e + 1) + f"for i{e} in {rng}:")
    ind = "    " * (d + 1)
    ntiles = f"({size[d]} + {TILE - 1}) // {TILE}"
    code.append(ind + f"for tile in {'range(u0, u1)' if d == 0 else f'range({ntiles})'}:")
    ind += "    "
    code.append(ind + f"i{d} = tile * {TILE}")
    code.append(ind + f"count = min({TILE}, {size[d]} - i{d})")
    for a, off in enumerate(tile_offsets):
        name = f"in{a}" if a < n_in else f"out{a - n_in}"
        view = f"a{a}" if a < n_in else f"o{a - n_in}"
        if spans_inner[a]:
            code.append(ind + f"{view} = {name}[{off}:{off} + count]")
        else:  # broadcast along the innermost dim: one element for the whole tile
            code.append(ind + f"x{a} = {name}[{off}]")
    for s, st in enumerate(stages):
        used = set().union(*(reads[k] for k in st))
        code.append(ind + "for j in range(count):")
        inner = ind + "    "
        code += [inner + f"x{a} = a{a}[j]" for a in range(n_in) if spans_inner[a] and f"x{a}" in used]
        code += [inner + f"{v} = s{v[1:]}[j]" for v in crossing if v in used and stage_of[v] < s]
        for k in st:
            code.append(inner + body[k])
            t = f"t{k}"
            if t in crossing:
                code.append(inner + f"s{k}[j] = {t}")
            code += [inner + f"o{o}[j] = {t}" for o, v in enumerate(out_vars) if v == t]
    return code


def compute_dtype_of(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == "V" or dtype.name in ("float16", "bfloat16") else dtype


def _final_dtypes(group: Group, outputs: list[str]) -> list[np.dtype]:
    by_name = {v.name: v.type for n in group.nodes for v in n.outputs}
    return [by_name[name].dtype for name in outputs]
