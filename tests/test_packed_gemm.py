"""kernels.packed_gemm against numpy: row panels and their ranges, column chunks and partial blocks, offsets and
row strides into larger arrays, bias; and the machine code of its microkernel (the accumulators stay in vector
registers: the reason kernels.simd exists)."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from onnxjit.kernels import packed_gemm as pg
from onnxjit.kernels.simd import LANES

HAS_AVX2 = "avx2" in llvm.get_host_cpu_features().flatten()


def _run(m, k, n, chunk_blocks, groups=1, g=0, panels=None, bias=True, seed=0, lo=-np.inf, hi=np.inf,
         residual=False):
    """gemm_packed over chunks of `chunk_blocks` blocks of LANES columns (a chunk is a multiple of LANES: 16
    with AVX2, 32 with AVX-512), with a residual laid out as c where `residual`."""
    chunk = chunk_blocks * LANES
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((groups, m, k)).astype(np.float32)
    ap = pg.pack_panels(a)
    b_rs, b0 = n + 3, 5  # b's rows lie apart inside a larger array
    bf = rng.standard_normal(b0 + k * b_rs + LANES).astype(np.float32)
    bmat = bf[b0:b0 + k * b_rs].reshape(k, b_rs)[:, :n]
    bv = rng.standard_normal(m).astype(np.float32) if bias else np.empty(0, np.float32)
    p0, p1 = panels or (0, ap.shape[1])
    c_rs, c0 = n + 2, 7
    cf = np.full(c0 + m * c_rs + 1, np.nan, dtype=np.float32)
    # the residual: NaN outside c's places, so that a read of any other shows
    zf = np.full(cf.size, np.nan, np.float32) if residual else np.empty(0, np.float32)
    zmat = rng.standard_normal((m, n)).astype(np.float32)
    scratch = np.empty(pg.scratch_size(k, chunk), np.float32)
    lo, hi = np.float32(lo), np.float32(hi)
    rows = slice(p0 * pg.MR, min(p1 * pg.MR, m))
    if residual:
        zf[c0:c0 + (rows.stop - rows.start) * c_rs].reshape(-1, c_rs)[:, :n] = zmat[rows]
    pg.gemm_packed(ap, g, p0, p1, m, bv, bf, b0, b_rs, n, cf, c0, c_rs, zf, chunk, scratch, lo, hi)
    want = np.clip(a[g, rows] @ bmat + (bv[rows, None] if bias else 0) + (zmat[rows] if residual else 0), lo, hi)
    got = cf[c0:c0 + (rows.stop - rows.start) * c_rs].reshape(-1, c_rs)
    np.testing.assert_allclose(got[:, :n], want, rtol=1e-5, atol=1e-4)
    assert np.isnan(got[:, n:]).all(), "wrote past the n columns of a row"
    assert np.isnan(cf[:c0]).all() and np.isnan(cf[c0 + (rows.stop - rows.start) * c_rs:]).all()


@pytest.mark.parametrize("m,k,n,chunk_blocks", [(4, 3, 16, 1), (7, 5, 1, 1), (13, 17, 49, 2), (30, 64, 196, 4),
                                                (9, 1, 40, 3), (5, 200, 15, 1), (40, 33, 49, 2), (33, 8, 7, 1),
                                                (12, 7, 100, 1)])
def test_gemm_packed_matches_numpy(m, k, n, chunk_blocks):
    _run(m, k, n, chunk_blocks)


def test_gemm_packed_clamps_in_registers():
    _run(13, 17, 49, 2, lo=0.0)
    _run(13, 17, 49, 2, lo=-0.5, hi=0.25)


@pytest.mark.parametrize("m,k,n,chunk_blocks", [(13, 17, 49, 2), (40, 33, 70, 1), (9, 5, 7, 1), (24, 64, 196, 4)])
def test_gemm_packed_adds_a_residual_before_the_clamp(m, k, n, chunk_blocks):
    """b read in place (at most IN_PLACE_MAX_ROWS rows of A) and packed, whole blocks and a partial last one."""
    _run(m, k, n, chunk_blocks, residual=True)
    _run(m, k, n, chunk_blocks, residual=True, lo=0.0)
    _run(m, k, n, chunk_blocks, residual=True, lo=-0.5, hi=0.25, bias=False)


def test_gemm_packed_panel_range_group_and_no_bias():
    m = 5 * pg.MR + 2  # six panels, the last one of two rows
    _run(m, 9, 37, 2, groups=3, g=2, panels=(2, 5), bias=False)
    _run(m, 9, 37, 2, groups=3, g=1, panels=(5, 6))  # the last panel alone


def test_pack_panels_layout():
    mr = pg.MR
    a = np.arange(2 * (mr + 2) * 3, dtype=np.float32).reshape(2, mr + 2, 3)
    ap = pg.pack_panels(a)
    assert ap.shape == (2, 2, 3, mr) and ap.dtype == np.float32
    np.testing.assert_array_equal(ap[1, 0, 2], a[1, 0:mr, 2])
    np.testing.assert_array_equal(ap[1, 1, 2], [a[1, mr, 2], a[1, mr + 1, 2]] + [0] * (mr - 2))


@pytest.mark.skipif(not HAS_AVX2, reason="checks x86 AVX2/AVX-512 machine code")
def test_microkernel_accumulates_in_vector_registers():
    # a fresh compile: cached code cannot be inspected
    fresh = numba.njit(pg.gemm_packed.py_func)
    k, m, n = 32, 2 * pg.MR, 2 * LANES  # two panels, two blocks of columns
    fresh(pg.pack_panels(np.ones((1, m, k), np.float32)), 0, 0, 2, m, np.empty(0, np.float32),
          np.ones(k * n, np.float32), 0, n, n, np.zeros(m * n, np.float32), 0, n, np.empty(0, np.float32), n,
          np.empty(pg.scratch_size(k, n), np.float32), np.float32(0), np.float32(np.inf))
    asm = "\n".join(fresh.inspect_asm().values())
    assert len(re.findall(r"vfmadd\w*ps\s[^\n]*%[yz]mm", asm)) >= pg.MR
    assert not re.findall(r"vfmadd\w*ss\s", asm)  # no scalar FMAs: LLVM's own vectorizers left those
