"""Intel AMX tile instructions for the integer GEMM (kernels.quantize.igemm_amx), as Numba intrinsics.

AMX (Sapphire Rapids and later) multiplies whole tiles: `tdpbusd` adds to a 16 x 16 int32 tile the products of a
16 x 64 tile of unsigned bytes (A, 16 rows of 64 K values) with a 16 x 64 tile of signed bytes (B, 16 groups of
4 K values for each of 16 columns, the layout of vpdpbusd's words), 16,384 multiply-adds in one instruction. The
instructions are emitted as inline assembly (LLVM's AMX intrinsics need its tile-shape analysis, which Numba's
pipeline does not run), so the asm parser is initialized here. Tile registers are named by literal integers.

Linux hands out the tile state per process on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`);
without it the first tile instruction kills the process. `HAS_AMX` is true only when the CPU reports amx-tile and
amx-int8 and that request succeeded (made once, at import), and `ONNXJIT_AMX=0` turns it off.
"""
from __future__ import annotations

import ctypes
import os

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

ROWS = 16  # rows of every tile used here
ROW_BYTES = 64  # bytes of each tile row: 64 K values of A, 16 int32 columns of B words and of C

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _tiles_granted() -> bool:
    """Whether this process may use AMX tiles: the CPU has them and the kernel granted the tile state."""
    if os.environ.get("ONNXJIT_AMX", "1") == "0":
        return False
    features = llvm.get_host_cpu_features().flatten().split(",")
    if "+amx-tile" not in features or "+amx-int8" not in features or "+avx512f" not in features:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


HAS_AMX = _tiles_granted()
if HAS_AMX:
    llvm.initialize_native_asmparser()  # Numba's LLVM parses no inline assembly without it


def _asm(builder, text, constraints="", args=(), argtys=()):
    builder.asm(ir.FunctionType(ir.VoidType(), list(argtys)), text, constraints, list(args), side_effect=True)


def _byte_pointer(context, builder, arrty, arr, index, indexty):
    data = context.make_array(arrty)(context, builder, value=arr).data
    i = context.cast(builder, index, indexty, types.intp)
    return builder.bitcast(builder.gep(data, [i]), ir.IntType(8).as_pointer())


def _literals(*ts) -> bool:
    return all(isinstance(t, types.IntegerLiteral) and 0 <= t.literal_value < 8 for t in ts)


@intrinsic
def tile_config(typingctx, cfg):
    """ldtilecfg from cfg (64 bytes, C-contiguous uint8: palette 1, each tile's bytes a row and rows)."""
    if not (isinstance(cfg, types.Array) and cfg.dtype == types.uint8 and cfg.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        p = _byte_pointer(context, builder, sig.args[0], args[0], ir.Constant(ir.IntType(64), 0), types.int64)
        _asm(builder, "ldtilecfg ($0)", "r,~{memory}", [p], [p.type])
        return context.get_dummy_value()

    return types.none(cfg), codegen


@intrinsic
def tile_release(typingctx):
    """tilerelease: the tile state back to its initial state (the thread's next context switch saves nothing)."""
    def codegen(context, builder, sig, args):
        _asm(builder, "tilerelease", "~{memory}")
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def tile_zero(typingctx, reg):
    """tilezero: tile `reg` (a literal 0-7) all zeros."""
    if not _literals(reg):
        return None
    r = reg.literal_value

    def codegen(context, builder, sig, args):
        _asm(builder, f"tilezero %tmm{r}")
        return context.get_dummy_value()

    return types.none(reg), codegen


def _tile_memory(name: str, template: str, doc: str):
    """An intrinsic (reg, arr, index, stride) running `template` (its tile register as {r}; $0 the address of arr's
    flat element `index`, $1 the stride in bytes between rows)."""
    def typer(typingctx, reg, arr, index, stride):
        if not (_literals(reg) and isinstance(arr, types.Array) and arr.layout == "C"):
            return None
        text = template.format(r=reg.literal_value)

        def codegen(context, builder, sig, args):
            p = _byte_pointer(context, builder, sig.args[1], args[1], args[2], sig.args[2])
            s = context.cast(builder, args[3], sig.args[3], types.int64)
            _asm(builder, text, "r,r,~{memory}", [p, s], [p.type, ir.IntType(64)])
            return context.get_dummy_value()

        return types.none(reg, arr, index, stride), codegen
    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


tile_load = _tile_memory("tile_load", "tileloadd ($0,$1,1), %tmm{r}",
                         "tileloadd: tile `reg` from arr's flat element `index` on, its rows `stride` bytes apart.")
tile_store = _tile_memory("tile_store", "tilestored %tmm{r}, ($0,$1,1)",
                          "tilestored: tile `reg` to arr from its flat element `index` on, rows `stride` bytes apart.")


@intrinsic
def tile_dot_u8s8(typingctx, c, a, b):
    """tdpbusd: tile c (int32) += tile a (unsigned bytes) . tile b (signed bytes, in 4-byte groups)."""
    if not _literals(c, a, b):
        return None
    rc, ra, rb = c.literal_value, a.literal_value, b.literal_value

    def codegen(context, builder, sig, args):
        _asm(builder, f"tdpbusd %tmm{rb}, %tmm{ra}, %tmm{rc}")
        return context.get_dummy_value()

    return types.none(c, a, b), codegen
