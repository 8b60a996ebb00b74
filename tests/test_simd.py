"""kernels.simd's register-level helpers against numpy: `vtranspose` turns a TILE x TILE tile of any row strides
(offsets into larger arrays), leaving everything around it as it was, and compiles to shuffles, not element
moves; the masked column loads and stores read and write only the columns their masks allow; the aligned
buffers start on a cache line."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from onnxjit.kernels.simd import (LANES, TILE, aligned_array, aligned_empty, aligned_full, columns, prefetch_l2,
                                  vload_cols, vload_even_cols, vstore_first, vtranspose)

HAS_AVX2 = "avx2" in llvm.get_host_cpu_features().flatten()


@numba.njit
def _transpose(src, s0, s_rs, dst, d0, d_rs):
    vtranspose(src, s0, s_rs, dst, d0, d_rs)


@pytest.mark.parametrize("s0,s_rs,d0,d_rs", [(0, TILE, 0, TILE), (3, 50, 7, 61), (5, TILE + 1, 2, 3 * TILE)])
def test_vtranspose_turns_one_tile(s0, s_rs, d0, d_rs):
    src = np.random.default_rng(0).standard_normal(s0 + s_rs * TILE + TILE).astype(np.float32)
    dst = np.full(d0 + d_rs * TILE + TILE, np.nan, np.float32)
    _transpose(src, s0, s_rs, dst, d0, d_rs)
    tile = np.lib.stride_tricks.as_strided(src[s0:], (TILE, TILE), (4 * s_rs, 4))
    got = np.lib.stride_tricks.as_strided(dst[d0:], (TILE, TILE), (4 * d_rs, 4))
    np.testing.assert_array_equal(got, tile.T)
    written = np.zeros(dst.size, bool)
    for j in range(TILE):
        written[d0 + j * d_rs:d0 + j * d_rs + TILE] = True
    assert np.isnan(dst[~written]).all(), "wrote outside the tile"


@pytest.mark.skipif(not HAS_AVX2, reason="checks x86 AVX2/AVX-512 machine code")
def test_vtranspose_is_shuffles():
    src = np.zeros(TILE * TILE, np.float32)
    _transpose(src, 0, TILE, src.copy(), 0, TILE)
    asm = "\n".join(_transpose.inspect_asm().values())
    assert len(re.findall(r"\bv(?:perm|unpck|shuf|insert|blend)\w*", asm)) >= TILE
    assert not re.findall(r"vmovss\s", asm)  # no element moves


@numba.njit
def _prefetch_then_sum(a, ahead):
    total = np.float32(0)
    for i in range(a.size):
        prefetch_l2(a, min(a.size - 1, i + ahead))
        total += a[i]
    return total


def test_prefetch_l2_is_a_hint_into_l2():
    """prefetch_l2 changes nothing it touches and compiles to x86's prefetcht1 (into L2, not L1)."""
    a = np.arange(100, dtype=np.float32)
    assert _prefetch_then_sum(a, 32) == a.sum()
    np.testing.assert_array_equal(a, np.arange(100, dtype=np.float32))
    if HAS_AVX2:
        asm = "\n".join(_prefetch_then_sum.inspect_asm().values())
        assert re.search(r"\bprefetcht1\b", asm)


@numba.njit
def _masked(a, start, col, ncols, out, n):
    vstore_first(out, 0, vload_cols(a, start + col, columns(col, ncols, 1)), n)
    vstore_first(out, LANES, vload_even_cols(a, start + col, columns(col, ncols, 2)), n)


@pytest.mark.parametrize("col,ncols,n", [(-3, 20, LANES), (0, 2 * LANES + 5, LANES - 1), (5, 4, 3), (-1, 0, LANES)])
def test_masked_columns_read_and_write_inside_only(col, ncols, n):
    """A row of ncols columns starting at `start`, read from column col (1 and 2 apart), the lanes outside the
    row zero; the stores leave lanes n and on as they were. The row sits at the array's very start and end, so a
    read outside the mask would fault (not reliably) or, below, show as a nonzero lane."""
    start = 7
    a = np.arange(1, start + max(ncols, 0) + 1, dtype=np.float32)  # the row is the array's last ncols values
    out = np.full(2 * LANES, -1, np.float32)
    _masked(a, start, col, ncols, out, n)
    for step, got in ((1, out[:LANES]), (2, out[LANES:])):
        cols = col + step * np.arange(LANES)
        want = np.where((cols >= 0) & (cols < ncols), start + cols + 1, 0).astype(np.float32)
        np.testing.assert_array_equal(got[:n], want[:n])
        assert (got[n:] == -1).all()


@numba.njit
def _aligned_starts(sizes, value):
    starts = np.empty(sizes.size, np.int64)
    filled = True
    for i in range(sizes.size):
        a = aligned_empty(sizes[i])
        b = aligned_full(sizes[i], value)
        filled &= a.size == sizes[i] and b.size == sizes[i] and (b == value).all()
        starts[i] = max(a.ctypes.data % 64, b.ctypes.data % 64)
    return starts, filled


def test_aligned_buffers_start_on_a_cache_line():
    # numba's and numpy's own arrays start 32 (numba) or 16 (numpy, large arrays) bytes past a line as a rule
    sizes = np.arange(1, 3000, 37)
    starts, filled = _aligned_starts(sizes, np.float32(-1.5))
    assert (starts == 0).all() and filled
    for shape, dtype in (((3, 17, LANES), np.float32), ((100_003,), np.float32), ((5, 7), np.int64)):
        a = aligned_array(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % 64 == 0
