"""MatMul and Gemm on the CUDA provider (float32/float64): a shared-memory tiled GEMM kernel over strided
operands, also the core of Conv's implicit GEMM (kernels.cuda.conv).

Each block computes a BM x BN tile of the output, BK deep at a time: the A and B tiles are staged in shared
memory (global loads coalesced along whichever axis of the operand is contiguous, prefetched into registers for
the next step while the current one is multiplied), and each thread keeps a TM x TN register tile whose rows and
columns are strided by the thread grid's height and width, so that a warp's shared reads are conflict-free (or
broadcasts) and its stores coalesced. The kernels are generated as Python source with the BK x TM x TN inner
loop unrolled into scalar registers (Numba leaves loops over local arrays rolled, recomputing 64-bit addresses
per step). Two tilings: 128x128 blocks of 8x8 register tiles for large products, 64x64 of 4x4 where the large
tiles would leave SMs idle; the simulator gets tiny ones.

Transposes are strides (Gemm's transA/transB read the operands as they lie); MatMul's batch dims broadcast
through zero strides, coalesced to at most three dims the kernel decomposes (any further leading dims are a host
loop of launches at offsets). Gemm's C broadcasts the same way, through zero strides over a (rows, cols) view.
"""
from __future__ import annotations

import functools
import linecache

import numba
import numpy as np
from numba import cuda

from onnxjit.kernels.cuda.device import SIMULATED
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.nn import float_type, rank_of
from onnxjit.ops.registry import attr

MAX_GRID_YZ = 65535
MAX_GRID_X = 1 << 30


class Tiling:
    """A block tile BM x BN, BK deep, of NT = (BM/TM) * (BN/TN) threads, each a TM x TN register tile."""

    def __init__(self, name, bm, bn, bk, tm, tn):
        self.name, self.bm, self.bn, self.bk, self.tm, self.tn = name, bm, bn, bk, tm, tn
        self.tx, self.ty = bn // tn, bm // tm
        self.nt = self.tx * self.ty
        # shared A tile rows (one per k) padded so that k-major stores of a row-major A spread over the banks
        self.a_cols = bm + (4 if bm >= 32 else 1)
        self.a_loads, self.b_loads = bm * bk // self.nt, bk * bn // self.nt
        assert bm % tm == 0 and bn % tn == 0 and (bm * bk) % self.nt == 0 and (bk * bn) % self.nt == 0
        assert self.nt % bk == 0 and self.nt % bm == 0 and self.nt % bn == 0


if SIMULATED:  # each thread a Python thread
    LARGE, SMALL = Tiling("large", 8, 8, 4, 2, 2), Tiling("small", 4, 4, 4, 2, 2)
    LARGE_MIN_TILES = 4
else:
    LARGE, SMALL = Tiling("large", 128, 128, 8, 8, 8), Tiling("small", 64, 64, 8, 4, 4)
    LARGE_MIN_TILES = 2 * 132  # large tiles only where they give every SM of an H100 two blocks


# registers per thread the kernels are compiled for (None: as many as ptxas wants)
MAX_REGISTERS = {"large": None, "small": 128}


def pick_tiling(m, n, planes):
    """The large tiling where it makes enough blocks, else the small one."""
    return LARGE if -(-m // LARGE.bm) * -(-n // LARGE.bn) * planes >= LARGE_MIN_TILES else SMALL


def grid_for(t: Tiling, m, n, planes):
    return (max(1, min(-(-n // t.bn), MAX_GRID_X)), max(1, min(-(-m // t.bm), MAX_GRID_YZ)),
            max(1, min(planes, MAX_GRID_YZ)))


# --- kernel source generation ----------------------------------------------------------------------------------
_GEMM_SIGNATURE = """
def kernel(a, b, y, c, a_off, sa0, sa1, sa2, sam, sak, b_off, sb0, sb1, sb2, sbk, sbn, y_off, m, n, k,
           nbatch, bd1, bd2, scm, scn, has_c, alpha, beta):
    alpha_ = nbt(alpha)
    beta_ = nbt(beta)
"""

# a is W (OC, C/groups * KH * KW) flat; toff, tdh, tdw the taps' offsets in X and their row and column steps
# along the GEMM's depth (conv.conv_taps)
_CONV_SIGNATURE = """
def kernel(a, x, toff, tdh, tdw, bias, y, has_bias, n_img, c_in, h, wd, oc_total, oh_n, ow_n, sh, sw, ph, pw,
           groups, k):
    m = oc_total // groups
    cg = c_in // groups
    ohw = oh_n * ow_n
    n = n_img * ohw
    hw = h * wd
    sam = k
    sak = 1
"""

# the loaders' per-thread geometry: which (row, k) of the A tile and (k, column) of the B tile each of its loads
# takes (consecutive threads along the operand's contiguous axis)
_SETUP = """
    a_sh = cuda.shared.array(A_SIZE, nbt)
    b_sh = cuda.shared.array(B_SIZE, nbt)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    tid = ty * TX + tx
    zero = nbt(0)
    if sak == 1:
        a_m0 = tid // BK
        a_k0 = tid % BK
        a_ms = NT // BK
        a_ks = 0
    else:
        a_m0 = tid % BM
        a_k0 = tid // BM
        a_ms = 0
        a_ks = NT // BM
"""

_GEMM_B_SETUP = """
    if sbn == 1 or sbk != 1:
        b_n0 = tid % BN
        b_k0 = tid // BN
        b_ns = 0
        b_ks = NT // BN
    else:
        b_n0 = tid // BK
        b_k0 = tid % BK
        b_ns = NT // BK
        b_ks = 0
"""

_CONV_B_SETUP = """
    b_n0 = tid % BN
    b_k0 = tid // BN
    b_ns = 0
    b_ks = NT // BN
"""

_GEMM_BATCH = """
    for z in range(cuda.blockIdx.z, nbatch, cuda.gridDim.z):
        z2 = z % bd2
        zr = z // bd2
        z1 = zr % bd1
        z0 = zr // bd1
        abase = a_off + z0 * sa0 + z1 * sa1 + z2 * sa2
        bbase = b_off + z0 * sb0 + z1 * sb1 + z2 * sb2
        ybase = y_off + z * m * n
"""

_CONV_BATCH = """
    for z in range(cuda.blockIdx.z, groups, cuda.gridDim.z):
        abase = z * m * k
"""

# the pixel a thread stages patches of, fixed over a tile (its B loads are all of column b_n0)
_CONV_TILE = """
p = bn + b_n0
p_ok = p < n
img = p // ohw
pix = p - img * ohw
oh = pix // ow_n
ow = pix - oh * ow_n
ih0 = oh * sh - ph
iw0 = ow * sw - pw
xpix = (img * c_in + z * cg) * hw + ih0 * wd + iw0
"""


def _indent(lines, n):
    return [" " * n + ln for ln in lines]


def _kernel_source(t: Tiling, variant: str) -> str:
    gemm = variant == "gemm"
    stores = ["    tyu = u64(ty)", "    txu = u64(tx)"]  # where each of a thread's loads goes in the shared tiles
    stores += [f"    sha{ld} = u64((a_k0 + {ld} * a_ks) * A_COLS + a_m0 + {ld} * a_ms)" for ld in range(t.a_loads)]
    stores += [f"    shb{ld} = u64((b_k0 + {ld} * b_ks) * BN + b_n0 + {ld} * b_ns)" for ld in range(t.b_loads)]
    src = [(_GEMM_SIGNATURE if gemm else _CONV_SIGNATURE).strip("\n"), _SETUP.strip("\n"),
           (_GEMM_B_SETUP if gemm else _CONV_B_SETUP).strip("\n"), *stores,
           (_GEMM_BATCH if gemm else _CONV_BATCH).strip("\n"),
           "        for bm in range(cuda.blockIdx.y * BM, m, cuda.gridDim.y * BM):",
           "            for bn in range(cuda.blockIdx.x * BN, n, cuda.gridDim.x * BN):"]
    inner = [] if gemm else _CONV_TILE.strip("\n").splitlines()
    for i in range(t.tm):
        for j in range(t.tn):
            inner.append(f"acc{i}_{j} = zero")

    def loads(k_expr):
        out = []
        for ld in range(t.a_loads):
            out += [f"gm = bm + a_m0 + {ld} * a_ms",
                    f"gk = {k_expr} + a_k0 + {ld} * a_ks",
                    f"ra{ld} = a[u64(abase + gm * sam + gk * sak)] if gm < m and gk < k else zero"]
        for ld in range(t.b_loads):
            if gemm:
                out += [f"gn = bn + b_n0 + {ld} * b_ns",
                        f"gk = {k_expr} + b_k0 + {ld} * b_ks",
                        f"rb{ld} = b[u64(bbase + gk * sbk + gn * sbn)] if gn < n and gk < k else zero"]
            else:
                out += [f"gk = {k_expr} + b_k0 + {ld} * b_ks",
                        f"rb{ld} = zero",
                        "if p_ok and gk < k:",
                        "    gku = u64(gk)",
                        "    ih = ih0 + tdh[gku]",
                        "    iw = iw0 + tdw[gku]",
                        "    if 0 <= ih < h and 0 <= iw < wd:",
                        f"        rb{ld} = x[u64(xpix + toff[gku])]"]
        return out

    inner += loads("0")
    # (unsigned indices: Numba adds the array's length to a negative signed one, which keeps LLVM from folding
    # the unrolled loop's shared addresses into base + immediate: each took registers of its own)
    inner.append("for k0 in range(0, k, BK):")
    step = []
    for ld in range(t.a_loads):
        step.append(f"a_sh[sha{ld}] = ra{ld}")
    for ld in range(t.b_loads):
        step.append(f"b_sh[shb{ld}] = rb{ld}")
    step.append("cuda.syncthreads()")
    step += loads("(k0 + BK)")  # the next step's tiles, in flight while this one is multiplied
    for kk in range(t.bk):
        for i in range(t.tm):
            step.append(f"a{i} = a_sh[tyu + u64({kk * t.a_cols + i * t.ty})]")
        for j in range(t.tn):
            step.append(f"b{j} = b_sh[txu + u64({kk * t.bn + j * t.tx})]")
        for i in range(t.tm):
            for j in range(t.tn):
                step.append(f"acc{i}_{j} += a{i} * b{j}")
    step.append("cuda.syncthreads()")
    inner += _indent(step, 4)
    # epilogue: column-major over the register tile, each output checked against the edges
    for j in range(t.tn):
        inner.append(f"gn = bn + tx + {j * t.tx}")
        inner.append("if gn < n:")
        if not gemm:
            inner += ["    qimg = gn // ohw", "    qpix = gn - qimg * ohw"]
        for i in range(t.tm):
            inner.append(f"    gm = bm + ty + {i * t.ty}")
            inner.append("    if gm < m:")
            if gemm:
                inner += [f"        v = alpha_ * acc{i}_{j}",
                          "        if has_c:",
                          "            v += beta_ * c[u64(gm * scm + gn * scn)]",
                          "        y[u64(ybase + gm * n + gn)] = v"]
            else:
                inner += ["        oc = z * m + gm",
                          f"        v = acc{i}_{j}",
                          "        if has_bias:",
                          "            v += bias[oc]",
                          "        y[u64((qimg * oc_total + oc) * ohw + qpix)] = v"]
    src += _indent(inner, 16)
    return "\n".join(src) + "\n"


@functools.cache
def tiled_kernel(dtype: str, tiling: str, variant: str):
    """The generated tiled kernel of `variant` ("gemm" or "conv", see the heads above) for `dtype` and the
    tiling named `tiling`."""
    t = {"large": LARGE, "small": SMALL}[tiling]
    src = _kernel_source(t, variant)
    filename = f"<onnxjit.kernels.cuda.gemm {variant} {tiling} {dtype}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # tracebacks show the source
    env = {"cuda": cuda, "u64": numba.uint64, "nbt": numba.from_dtype(np.dtype(dtype)), "BM": t.bm, "BN": t.bn,
           "BK": t.bk, "TX": t.tx, "NT": t.nt, "A_COLS": t.a_cols, "A_SIZE": t.bk * t.a_cols, "B_SIZE": t.bk * t.bn}
    exec(compile(src, filename, "exec"), env)  # noqa: S102 - our own generated source
    regs = MAX_REGISTERS.get(tiling)
    return cuda.jit(env["kernel"], **({"max_registers": regs} if regs and not SIMULATED else {}))


# --- launches --------------------------------------------------------------------------------------------------
def _flat(x):
    return x.reshape(x.size)


def plan_gemm(device, dtype, a_batch, sam, sak, b_batch, sbk, sbn, m, n, k, batch, has_c=False, scm=0, scn=0,
              alpha=1.0, beta=0.0):
    """The launches of a GEMM, [(configured kernel, its scalar arguments)], each called as
    `kernel(a, b, y, c, *scalars)` over flat device arrays (c: y where there is no C): `batch` the output's batch
    sizes, `a_batch` and `b_batch` A's and B's strides along them (0 where broadcast). Batch dims coalesce to at
    most three; leading ones beyond are launches at offsets. (A plan is made once per shape: configuring a launch
    and converting its arguments cost host time on every call.)"""
    dims = [(int(d), int(sa), int(sb)) for d, sa, sb in zip(batch, a_batch, b_batch) if d != 1]
    merged: list[tuple[int, int, int]] = []
    for d, sa, sb in dims:  # (size, A stride, B stride), outermost first; merge where one flat stride covers both
        if merged:
            pd, psa, psb = merged[-1]
            if psa == sa * d and psb == sb * d:
                merged[-1] = (pd * d, sa, sb)
                continue
        merged.append((d, sa, sb))
    outer, inner = merged[:-3] if len(merged) > 3 else [], merged[-3:]
    inner = [(1, 0, 0)] * (3 - len(inner)) + inner
    nbatch = inner[0][0] * inner[1][0] * inner[2][0]
    if m == 0 or n == 0 or nbatch == 0 or any(d == 0 for d, _, _ in outer):
        return []
    t = pick_tiling(m, n, nbatch)
    launcher = tiled_kernel(np.dtype(dtype).str, t.name, "gemm")[grid_for(t, m, n, nbatch), (t.tx, t.ty),
                                                                  device.stream]
    launches = []
    for idx in np.ndindex(*(d for d, _, _ in outer)):
        ao = sum(i * sa for i, (_, sa, _) in zip(idx, outer))
        bo = sum(i * sb for i, (_, _, sb) in zip(idx, outer))
        yo = int(np.ravel_multi_index(idx, [d for d, _, _ in outer])) * nbatch * m * n if outer else 0
        launches.append((launcher, (ao, inner[0][1], inner[1][1], inner[2][1], sam, sak, bo, inner[0][2],
                                    inner[1][2], inner[2][2], sbk, sbn, yo, m, n, k, nbatch, inner[1][0], inner[2][0],
                                    scm, scn, bool(has_c), float(alpha), float(beta))))
    return launches


def _strides(shape):
    s, out = 1, []
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out))


def _matmul_plan(device, a_shape, b_shape, dtype):
    """(output shape, GEMM launches) of numpy.matmul over arrays of these shapes: 1-D operands promoted and
    squeezed, batch dims broadcast."""
    if len(a_shape) < 1 or len(b_shape) < 1:
        raise ValueError(f"MatMul needs inputs of rank >= 1, got {a_shape} and {b_shape}")
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    m, k = a2[-2:]
    kb, n = b2[-2:]
    if k != kb:
        raise ValueError(f"MatMul: shapes {a_shape} and {b_shape} do not multiply")
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out_shape = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    if len(b2) == 2 and len(a2) > 2:  # A's batch folds into its rows: one GEMM of more rows
        batch, m = (), m * int(np.prod(batch))
    ra, rb = len(batch) - (len(a2) - 2), len(batch) - (len(b2) - 2)
    sa_full, sb_full = _strides(a2), _strides(b2)
    a_batch = [0 if i < ra or a2[i - ra] == 1 else sa_full[i - ra] for i in range(len(batch))]
    b_batch = [0 if i < rb or b2[i - rb] == 1 else sb_full[i - rb] for i in range(len(batch))]
    return out_shape, plan_gemm(device, dtype, a_batch, k, 1, b_batch, n, 1, m, n, k, batch)


@register_cuda_op("MatMul", since=1)
def build_matmul(node, device):
    if len(node.inputs) != 2 or float_type(node, (0, 1)) is None or node.attributes:
        return None
    if any(rank_of(node, i) == 0 for i in (0, 1)):
        return None
    plans = {}

    def run(a, b):
        key = (a.shape, b.shape, a.dtype)
        p = plans.get(key)
        if p is None:
            p = plans[key] = _matmul_plan(device, tuple(a.shape), tuple(b.shape), a.dtype)
        out_shape, launches = p
        y = device.empty(out_shape, a.dtype)
        if launches:
            af, bf, yf = _flat(a), _flat(b), _flat(y)
            for launcher, scalars in launches:
                launcher(af, bf, yf, yf, *scalars)
        return (y,)
    return run


@register_cuda_op("Gemm", since=1)
def build_gemm(node, device):
    """Gemm: alpha * op(A) @ op(B) + beta * C, C (optional) broadcast to (M, N)."""
    if not 2 <= len(node.inputs) <= 3 or float_type(node, (0, 1, 2)) is None:
        return None
    if any(rank_of(node, i) not in (None, 2) for i in (0, 1)):
        return None
    if len(node.inputs) == 3 and node.inputs[2] is not None and rank_of(node, 2) not in (None, 0, 1, 2):
        return None
    if any(name not in {"alpha", "beta", "transA", "transB", "broadcast"} for name in node.attributes):
        return None
    alpha = float(attr(node, "alpha", 1.0))
    beta = float(attr(node, "beta", 1.0))
    trans_a = int(attr(node, "transA", 0)) != 0
    trans_b = int(attr(node, "transB", 0)) != 0

    plans = {}

    def plan(a_shape, b_shape, c_shape, dtype):
        if len(a_shape) != 2 or len(b_shape) != 2:
            raise ValueError(f"Gemm needs 2-D A and B, got {a_shape} and {b_shape}")
        m, k = (a_shape[1], a_shape[0]) if trans_a else a_shape
        kb, n = (b_shape[1], b_shape[0]) if trans_b else b_shape
        if kb != k:
            raise ValueError(f"Gemm: A {a_shape} and B {b_shape} (after transposes) do not multiply")
        sam, sak = (1, m) if trans_a else (k, 1)
        sbk, sbn = (1, k) if trans_b else (n, 1)
        has_c = c_shape is not None and beta != 0.0
        scm = scn = 0
        if has_c:
            cs = (1,) * (2 - len(c_shape)) + c_shape if len(c_shape) < 2 else c_shape
            if len(cs) != 2 or cs[0] not in (1, m) or cs[1] not in (1, n):
                raise ValueError(f"Gemm: C of shape {c_shape} does not broadcast to the output's ({m}, {n})")
            scm = cs[1] if cs[0] != 1 else 0
            scn = 1 if cs[1] != 1 else 0
        return (m, n), has_c, plan_gemm(device, dtype, (), sam, sak, (), sbk, sbn, m, n, k, (), has_c, scm, scn,
                                        alpha, beta)

    def run(a, b, c=None):
        key = (a.shape, b.shape, None if c is None else c.shape, a.dtype)
        p = plans.get(key)
        if p is None:
            p = plans[key] = plan(tuple(a.shape), tuple(b.shape), None if c is None else tuple(c.shape), a.dtype)
        out_shape, has_c, launches = p
        y = device.empty(out_shape, a.dtype)
        if launches:
            af, bf, yf = _flat(a), _flat(b), _flat(y)
            cf = _flat(c) if has_c else yf
            for launcher, scalars in launches:
                launcher(af, bf, yf, cf, *scalars)
        return (y,)
    return run
