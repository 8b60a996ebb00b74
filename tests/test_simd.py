"""kernels.simd's register-level helpers against numpy: `vtranspose` turns a TILE x TILE tile of any row strides
(offsets into larger arrays), leaving everything around it as it was, and compiles to shuffles, not element
moves."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from onnxjit.kernels.simd import TILE, vtranspose

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
