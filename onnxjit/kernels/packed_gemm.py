"""float32 GEMM with A packed once and a register-tiled microkernel: c = bias + A @ b, for the weights-times-
activations products of convolutions (A the weights, b an image's channels x pixels).

A is packed by `pack_panels` into panels of MR rows, each stored step by step ((K, MR): the MR weights that
multiply row k of b side by side), zero rows padding the last panel. The microkernel `_tile` keeps an MR x LANES
block of c in vector registers (kernels.simd: a vector of LANES floats is two registers): per step k one vector
load of b's row k, MR broadcasts from the panel and MR FMAs. MR is as many rows as the register file holds, so
that there are more independent FMA chains than two FMA pipes of 4-cycle latency need at the least (8):
  - AVX2 (16 ymm registers): MR 4, 8 accumulators. On one AMD Zen 3 core a 96->576-channel 1x1 conv over 14x14
    pixels ran at 83-85 GFLOP/s (OpenBLAS's sgemm 75-80); MR 5 and 6 no faster (6 spilled).
  - AVX-512 (32 zmm registers): MR 8, 16 accumulators. On one Intel Emerald Rapids core, the microkernel over
    packed operands in cache ran at 155-170 GFLOP/s with MR 8, 105 with MR 4 (8 chains: any stall idles a
    pipe), 100-140 with MR 6 and 165-170 with MR 12.
The rows past 4 are written once, under `if MR > 4` (a compile-time constant: LLVM drops them for AVX2).

`gemm_packed` walks b in chunks of columns (`chunk`, a multiple of LANES, sized by the caller so a chunk of b
stays in cache while every panel passes over it), each chunk panel by panel, so each panel's rows of c are
written in runs of a chunk's width: a 16->96 1x1 conv over 112x112 pixels ran at 12 GFLOP/s when the panels
went over all the pixels one block of 16 at a time (96 write streams), 75 in chunks of 1,024. Each chunk is
first copied into blocks of (K, LANES) floats, 64-byte aligned and zero-padded past the last column, so every
load of the microkernel is one cache line, read in sequence (in place, an image's rows of 7x7 or 14x14 pixels
put most loads across two lines), and the last, partial block is an ordinary tile written to scratch first.
With few rows of A (IN_PLACE_MAX_ROWS) each packed value would serve as few tiles, and b's whole blocks are read
in place (only a partial last block is packed, so that no load reads past b).
"""
from __future__ import annotations

import numpy as np

from onnxjit.cache.jit import njit
from onnxjit.kernels.simd import (LANES, VECTOR_REGISTERS, aligned_array, columns, prefetch_l2, vclamp, vfma, vload,
                                  vload_cols, vsplat, vstore)
from onnxjit.kernels.views import read_only
from onnxjit.kernels.views import u64 as _u

MR = 8 if VECTOR_REGISTERS >= 32 else 4  # rows of A per panel: the microkernel's accumulators (above)
# gemm_packed reads b in place, not packed, for at most this many rows of A (each packed value would serve as
# few): 2 Zen 3 threads, processes alternated, 1x1 convs 88->24 over 28x28 pixels 101-116 -> 77-80 us, 72->24
# 93-102 -> 52-80, 96->24 over 56x56 211-237 -> 187-216; at 96 and 144 rows (16->96 over 112x112, 24->144 over
# 56x56) no gain or a loss; at 48 a 576->96 one over 7x7, cut into two units of 48 rows, took 1.1-1.7x as long
IN_PLACE_MAX_ROWS = 32


def pack_panels(a):
    """(G, M, K) float weights as float32 panels (G, ceil(M / MR), K, MR), zero rows padding the last. Straight
    into the panels, full ones in one strided copy: through a zero-padded copy of the whole weight first, a
    first run's packing took twice the time and touched twice the new memory (see pack_blocks)."""
    g, m, k = a.shape
    full, rest = divmod(m, MR)
    panels = aligned_array((g, full + (rest > 0), k, MR))
    panels[:, :full] = a[:, :full * MR].reshape(g, full, MR, k).transpose(0, 1, 3, 2)
    if rest:
        panels[:, full, :, rest:] = 0
        panels[:, full, :, :rest] = a[:, full * MR:].transpose(0, 2, 1)
    return panels


@njit(cache=True, nogil=True, forceinline=True)
def panel_fma(ap, q, v, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7):
    """acc_r + ap[q + r] * v for the MR rows r of a panel's step at ap[q] (the accumulators past MR as they are):
    the microkernel's step, shared by the tiles here and conv.conv_rows."""
    acc0 = vfma(vsplat(ap[q]), v, acc0)
    acc1 = vfma(vsplat(ap[q + _u(1)]), v, acc1)
    acc2 = vfma(vsplat(ap[q + _u(2)]), v, acc2)
    acc3 = vfma(vsplat(ap[q + _u(3)]), v, acc3)
    if MR > 4:
        acc4 = vfma(vsplat(ap[q + _u(4)]), v, acc4)
        acc5 = vfma(vsplat(ap[q + _u(5)]), v, acc5)
        acc6 = vfma(vsplat(ap[q + _u(6)]), v, acc6)
        acc7 = vfma(vsplat(ap[q + _u(7)]), v, acc7)
    return acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@njit(cache=True, nogil=True, forceinline=True)
def _tile(ap, a0, k, bf, b0, b_rs, cf, c0, c_rs, rows, s, zf, with_z, lo, hi, pf):
    """cf[c0 + r * c_rs + j] = clamp(s[r] + sum_i ap[a0 + i * MR + r] * bf[b0 + i * b_rs + j] (+ zf[c0 + r * c_rs +
    j] `with_z`), lo, hi), for rows r < `rows` of the panel at a0 and the LANES columns j at b0 and c0 (s:
    `bias_rows`; zf a residual laid out as c); meanwhile the panel at
    pf (the next one) comes into L2, MR floats of it a step. Why: the weights of a network's convs come from
    memory once per run, and the first block of each panel waited for them (a 2048->512-channel 1x1 conv over 7x7
    pixels, 16 such convs' weights streamed, two threads of an Intel Xeon AVX-512 VM: 813-847 -> 474-487 us,
    onnxruntime 358-408; Winograd's 36 GEMMs of 128->128 over 28x28 672-677 -> 524-527 us)."""
    acc0, acc1, acc2, acc3 = vsplat(s[0]), vsplat(s[1]), vsplat(s[2]), vsplat(s[3])
    acc4, acc5, acc6, acc7 = vsplat(s[4]), vsplat(s[5]), vsplat(s[6]), vsplat(s[7])
    for i in range(k):
        bv = vload(bf, b0 + _u(i) * b_rs)
        ai = a0 + _u(i * MR)
        prefetch_l2(ap, pf + _u(i * MR))
        acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = panel_fma(ap, ai, bv, acc0, acc1, acc2, acc3, acc4, acc5,
                                                                   acc6, acc7)
    if with_z:
        acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = add_rows(zf, c0, c_rs, rows, acc0, acc1, acc2, acc3, acc4,
                                                                  acc5, acc6, acc7)
    store_rows(cf, c0, c_rs, rows, lo, hi, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7)


@njit(cache=True, nogil=True, forceinline=True)
def add_rows(zf, z0, z_rs, rows, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7):
    """acc_r + zf[z0 + r * z_rs:][:LANES] for the rows r < `rows` (a residual added in registers, before the
    clamp: an FMA by 1, one rounding as the sum's); the others as they are."""
    one = vsplat(np.float32(1))
    acc0 = vfma(one, vload(zf, z0), acc0)
    if rows > 1:
        acc1 = vfma(one, vload(zf, z0 + z_rs), acc1)
    if rows > 2:
        acc2 = vfma(one, vload(zf, z0 + _u(2) * z_rs), acc2)
    if rows > 3:
        acc3 = vfma(one, vload(zf, z0 + _u(3) * z_rs), acc3)
    if MR > 4:
        if rows > 4:
            acc4 = vfma(one, vload(zf, z0 + _u(4) * z_rs), acc4)
        if rows > 5:
            acc5 = vfma(one, vload(zf, z0 + _u(5) * z_rs), acc5)
        if rows > 6:
            acc6 = vfma(one, vload(zf, z0 + _u(6) * z_rs), acc6)
        if rows > 7:
            acc7 = vfma(one, vload(zf, z0 + _u(7) * z_rs), acc7)
    return acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7


@njit(cache=True, nogil=True, forceinline=True)
def tile_at_offsets(ap, a0, k, bf, b0, offs, cf, c0, s, lo, hi):
    """_tile with row i of b at bf[b0 + offs[i]] (any offsets: the taps of a conv over a padded input), the MR x
    LANES result stored whole at cf[c0], LANES apart."""
    acc0, acc1, acc2, acc3 = vsplat(s[0]), vsplat(s[1]), vsplat(s[2]), vsplat(s[3])
    acc4, acc5, acc6, acc7 = vsplat(s[4]), vsplat(s[5]), vsplat(s[6]), vsplat(s[7])
    for i in range(k):
        bv = vload(bf, b0 + _u(offs[i]))
        ai = a0 + _u(i * MR)
        acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = panel_fma(ap, ai, bv, acc0, acc1, acc2, acc3, acc4, acc5,
                                                                   acc6, acc7)
    store_rows(cf, c0, _u(LANES), MR, lo, hi, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7)


@njit(cache=True, nogil=True, forceinline=True)
def store_rows(cf, c0, c_rs, rows, lo, hi, acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7):
    """cf[c0 + r * c_rs:][:LANES] = clamp(acc_r, lo, hi) for the rows r < `rows` (at most MR; the accumulators
    past MR are unused)."""
    vstore(cf, c0, vclamp(acc0, lo, hi))
    if rows > 1:
        vstore(cf, c0 + c_rs, vclamp(acc1, lo, hi))
    if rows > 2:
        vstore(cf, c0 + _u(2) * c_rs, vclamp(acc2, lo, hi))
    if rows > 3:
        vstore(cf, c0 + _u(3) * c_rs, vclamp(acc3, lo, hi))
    if MR > 4:
        if rows > 4:
            vstore(cf, c0 + _u(4) * c_rs, vclamp(acc4, lo, hi))
        if rows > 5:
            vstore(cf, c0 + _u(5) * c_rs, vclamp(acc5, lo, hi))
        if rows > 6:
            vstore(cf, c0 + _u(6) * c_rs, vclamp(acc6, lo, hi))
        if rows > 7:
            vstore(cf, c0 + _u(7) * c_rs, vclamp(acc7, lo, hi))


@njit(cache=True, nogil=True, forceinline=True)
def bias_rows(bias, i, m):
    """bias[i:i + MR] as the 8 starting values of a tile's rows (zeros past m, past MR, or where bias is
    empty)."""
    return (_bias_at(bias, i, m), _bias_at(bias, i + 1, m), _bias_at(bias, i + 2, m), _bias_at(bias, i + 3, m),
            _bias_at(bias, i + 4, m) if MR > 4 else np.float32(0),
            _bias_at(bias, i + 5, m) if MR > 4 else np.float32(0),
            _bias_at(bias, i + 6, m) if MR > 4 else np.float32(0),
            _bias_at(bias, i + 7, m) if MR > 4 else np.float32(0))


@njit(cache=True, nogil=True, forceinline=True)
def _bias_at(bias, i, m):
    return bias[i] if bias.size > 0 and i < m else np.float32(0)


@njit(cache=True, nogil=True)
def gemm_packed(ap, g, panel0, panel1, m, bias, bf, b0, b_rs, n, cf, c0, c_rs, zf, chunk, scratch, lo, hi):
    """c = clamp(bias + A @ b + z, lo, hi) (float32 bounds, -inf and inf for none: Relu and Clip applied in
    registers) for the rows [panel0 * MR, min(panel1 * MR, m)) of group g's A (ap from `pack_panels`,
    m its real row count) and n columns: b is bf's rows of n values at b0 + k * b_rs, c row i (counted from
    panel0's first) cf's n values at c0 + i * c_rs; bias a length-m array or empty; z (a residual) zf's values
    at c's places, or nothing where zf is empty. `chunk`: columns per pass of the panels (a multiple of LANES);
    `scratch`: float32, at least (K * chunk + MR * LANES + LANES)."""
    k = ap.shape[2]
    pflat = ap.reshape(-1)
    panel_size = k * MR
    g0 = _u(g) * _u(ap.shape[1]) * _u(panel_size)
    b0 = _u(b0)
    b_rs = _u(b_rs)
    c0 = _u(c0)
    c_rs = _u(c_rs)
    bp0 = _u(aligned_start(scratch))
    ct = bp0 + _u(k * chunk)  # the scratch tile for the last, partial block of columns
    a0 = g0 + _u(panel0 * panel_size)
    panels = panel1 - panel0
    rows_left = m - panel0 * MR
    in_place = panels * MR <= IN_PLACE_MAX_ROWS
    for jc in range(0, n, chunk):
        width = min(chunk, n - jc)
        # in place: the chunk's whole blocks; the columns from j0 on (all, or a partial last block) are packed
        j0 = jc + width - width % LANES if in_place else jc
        if j0 > jc:
            _panels_times_blocks(pflat, a0, panels, rows_left, bias, panel0 * MR, k, bf, b0 + _u(jc), b_rs,
                                 _u(LANES), j0 - jc, cf, c0 + _u(jc), c_rs, zf, scratch, ct, lo, hi)
        packed = jc + width - j0
        if packed == 0:
            continue
        _pack_columns(bf, b0 + _u(j0), b_rs, k, packed, -(-packed // LANES), scratch, bp0)
        _panels_times_blocks(pflat, a0, panels, rows_left, bias, panel0 * MR, k, read_only(scratch), bp0,
                             _u(LANES), _u(k * LANES), packed, cf, c0 + _u(j0), c_rs, zf, scratch, ct, lo, hi)


@njit(cache=True, nogil=True)
def gemm_blocked(ap, g, panel0, panel1, m, bias, bp, bp0, n, cf, c0, c_rs, zf, scratch, lo, hi):
    """gemm_packed with b already in blocks of (K, LANES) columns from bp[bp0] (n columns, the last block's
    lanes past n unread), as conv_packed's im2col writes them; scratch at least MR * LANES long."""
    k = ap.shape[2]
    panel_size = k * MR
    a0 = (_u(g) * _u(ap.shape[1]) + _u(panel0)) * _u(panel_size)
    _panels_times_blocks(ap.reshape(-1), a0, panel1 - panel0, m - panel0 * MR, bias, panel0 * MR, k, read_only(bp),
                         _u(bp0), _u(LANES), _u(k * LANES), n, cf, _u(c0), _u(c_rs), zf, scratch, _u(0), lo, hi)


@njit(cache=True, nogil=True, forceinline=True)
def _panels_times_blocks(ap, a0, panels, rows_left, bias, bias0, k, bp, bb0, b_rs, block_step, width, cf, c0, c_rs,
                         zf, scratch, ct, lo, hi):
    """The microkernel over `panels` panels of A from ap[a0] (rows_left real rows from the first; bias rows
    from bias0) times blocks of LANES columns of b, `width` columns in all: block i's k rows start at
    bp[bb0 + i * block_step], b_rs apart (packed: LANES and k * LANES; in place: b's row stride and LANES);
    c's rows from cf[c0], c_rs apart, plus the residual zf at c's places where zf is not empty; a partial last
    block, and a panel's last rows where M is not a multiple of MR, go through scratch[ct:] (MR x LANES) first
    (their residual and clamp added as they are copied out)."""
    panel_size = k * MR
    blocks = -(-width // LANES)
    has_z = zf.size > 0
    no_lo, no_hi = np.float32(-np.inf), np.float32(np.inf)
    for panel in range(panels):
        i0 = panel * MR
        rows = min(MR, rows_left - i0)
        sums = bias_rows(bias, bias0 + i0, bias0 + rows_left)
        a = a0 + _u(panel * panel_size)
        pf = a + _u(panel_size) if panel + 1 < panels else a  # the next panel's A, into L2 meanwhile
        crow = c0 + _u(i0) * c_rs
        for blk in range(blocks):
            bb = bb0 + _u(blk) * block_step
            j = blk * LANES
            # every tile with the row count and the residual test as constants: after inlining LLVM drops the
            # tests, which made it compile the tile's loop 10-20% slower (one Intel Xeon AVX-512 core, operands
            # in L2: 512x128 @ 128x768 126-133 -> 146-157 GFLOP/s, 256x64 @ 64x3136 108-120 -> 127-149, with a
            # residual 102 -> 116-136). A panel's last rows go through scratch as a partial block does, so the
            # tile is inlined three times: a fourth copy for them took gemm_packed's first compile from 3.5 to
            # 4.9-5.5 s
            if j + LANES <= width and rows == MR and not has_z:
                _tile(ap, a, k, bp, bb, b_rs, cf, crow + _u(j), c_rs, MR, sums, zf, False, lo, hi, pf)
            elif j + LANES <= width and rows == MR:
                _tile(ap, a, k, bp, bb, b_rs, cf, crow + _u(j), c_rs, MR, sums, zf, True, lo, hi, pf)
            else:
                _tile(ap, a, k, bp, bb, b_rs, scratch, ct, _u(LANES), MR, sums, zf, False, no_lo, no_hi, pf)
                for r in range(rows):
                    for q in range(min(LANES, width - j)):
                        at = crow + _u(r) * c_rs + _u(j + q)
                        v = scratch[ct + _u(r * LANES + q)]
                        if has_z:
                            v += zf[at]
                        v = lo if v < lo else v  # as vclamp: NaN stays
                        cf[at] = hi if v > hi else v


@njit(cache=True, nogil=True, forceinline=True)
def _pack_columns(bf, b0, b_rs, k, width, blocks, bp, bp0):
    """bp[bp0:] = the `width` columns of b from b0 (k rows, b_rs apart) as `blocks` blocks of (k, LANES),
    zeros past width: row by row, each row's blocks one vector each (a masked load for a partial last one).
    Element by element, block by block, it copied at 19 GB/s, as vectors row by row at 33 (one Intel Xeon
    AVX-512 core, 384 x 256 floats: 20 -> 12 us, against gemm_blocked's 78 us over them with 64 rows of A)."""
    full = width // LANES
    tail = columns(0, width - full * LANES, 1)
    block = _u(k * LANES)
    for i in range(k):
        src = b0 + _u(i) * b_rs
        dst = bp0 + _u(i * LANES)
        for blk in range(full):
            vstore(bp, dst + _u(blk) * block, vload(bf, src + _u(blk * LANES)))
        if full < blocks:
            vstore(bp, dst + _u(full) * block, vload_cols(bf, src + _u(full * LANES), tail))


@njit(cache=True, nogil=True, forceinline=True)
def aligned_start(buf):
    """The first index of the float32 `buf` on a LANES-float boundary (64 bytes with 16 lanes): packed blocks
    start there, so each of the microkernel's loads is whole cache lines."""
    return (-(buf.ctypes.data // 4)) % LANES


@njit(cache=True, nogil=True)
def scratch_size(k, chunk):
    """Floats of gemm_packed's scratch for K = k and a chunk of `chunk` columns."""
    return k * chunk + (MR + 1) * LANES


def pack_blocks(b):
    """A (K, N) float weight as float32 blocks of columns (ceil(N / LANES), K, LANES), zeros past N: B for
    `gemm_prepacked`, packed once, straight into the blocks (full ones in one strided copy). Through a zero-padded
    (K, N) copy first, GPT-2's 768 x 50257 output weight took 109 ms, and 430-510 ms as the transposed view of
    its embedding (the copy's strided gather), against 52-68 ms; and the copy's 154 MB of new memory cost up to
    seconds more on a VM whose guest pages the host backs on first touch."""
    k, n = b.shape
    full, rest = divmod(n, LANES)
    packed = aligned_array((full + (rest > 0), k, LANES))  # each vector whole cache lines
    packed[:full] = b[:, :full * LANES].reshape(k, full, LANES).transpose(1, 0, 2)
    if rest:
        packed[full, :, rest:] = 0
        packed[full, :, :rest] = b[:, full * LANES:]
    return packed


@njit(cache=True, nogil=True)
def prepacked_scratch_size(k, rows):
    """Floats of gemm_prepacked's scratch for K = k and up to `rows` rows of a."""
    return -(-rows // MR) * MR * k + MR * LANES


@njit(cache=True, nogil=True, forceinline=True)
def _tile_a_rows(af, a0, a_rs, rows, k, bf, b0, b_rs, cb, cb0, cf, c0, c_rs, lo, hi):
    """_tile with A read in place: row r of the tile is af[a0 + r * a_rs:][:k] (rows past `rows` read the last
    row again, their results unused); the LANES values of the row vector cb from cb0 are added to every row after
    the sum (a Gemm's row C, as its epilogue adds it), then the clamp."""
    last = _u(rows - 1)
    r1, r2, r3 = a0 + min(_u(1), last) * a_rs, a0 + min(_u(2), last) * a_rs, a0 + min(_u(3), last) * a_rs
    r4, r5, r6 = a0 + min(_u(4), last) * a_rs, a0 + min(_u(5), last) * a_rs, a0 + min(_u(6), last) * a_rs
    r7 = a0 + min(_u(7), last) * a_rs
    zero = vsplat(np.float32(0))
    acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7 = zero, zero, zero, zero, zero, zero, zero, zero
    for i in range(_u(k)):
        bv = vload(bf, b0 + i * b_rs)
        acc0 = vfma(vsplat(af[a0 + i]), bv, acc0)
        acc1 = vfma(vsplat(af[r1 + i]), bv, acc1)
        acc2 = vfma(vsplat(af[r2 + i]), bv, acc2)
        acc3 = vfma(vsplat(af[r3 + i]), bv, acc3)
        if MR > 4:
            acc4 = vfma(vsplat(af[r4 + i]), bv, acc4)
            acc5 = vfma(vsplat(af[r5 + i]), bv, acc5)
            acc6 = vfma(vsplat(af[r6 + i]), bv, acc6)
            acc7 = vfma(vsplat(af[r7 + i]), bv, acc7)
    cv, one = vload(cb, cb0), vsplat(np.float32(1))  # acc + cv as one rounding: 1 * cv is exact
    store_rows(cf, c0, c_rs, rows, lo, hi, vfma(one, cv, acc0), vfma(one, cv, acc1), vfma(one, cv, acc2),
               vfma(one, cv, acc3), vfma(one, cv, acc4), vfma(one, cv, acc5), vfma(one, cv, acc6), vfma(one, cv, acc7))


@njit(cache=True, nogil=True, forceinline=True)
def _rows_times_blocks(af, a0, a_rs, rows_left, k, bp, bb0, block_step, width, cb, cb0, cf, c0, c_rs, scratch, lo,
                       hi):
    """_panels_times_blocks with A's rows read in place (MR at a time from af[a0], a_rs apart) and B packed; the
    row vector cb from cb0 (width values, zeros past them) added to each row (see _tile_a_rows)."""
    blocks = -(-width // LANES)
    for i0 in range(0, rows_left, MR):
        rows = min(MR, rows_left - i0)
        a = a0 + _u(i0) * a_rs
        crow = c0 + _u(i0) * c_rs
        for blk in range(blocks):
            bb = bb0 + _u(blk) * block_step
            j = blk * LANES
            if j + LANES <= width:
                _tile_a_rows(af, a, a_rs, rows, k, bp, bb, _u(LANES), cb, cb0 + _u(j), cf, crow + _u(j), c_rs, lo, hi)
            else:
                _tile_a_rows(af, a, a_rs, rows, k, bp, bb, _u(LANES), cb, cb0 + _u(j), scratch, _u(0), _u(LANES), lo,
                             hi)
                for r in range(rows):
                    for q in range(width - j):
                        cf[crow + _u(r) * c_rs + _u(j + q)] = scratch[_u(r * LANES + q)]


@njit(cache=True, nogil=True)
def gemm_prepacked(a, row0, row1, alpha, bp, blk0, width, chunk_blocks, cb, cf, c0, c_rs, scratch, lo, hi):
    """c = clamp(alpha * a[row0:row1] @ B[:, blk0 * LANES:blk0 * LANES + width], lo, hi): a (M, K) float32
    C-contiguous, its rows read in place where alpha is 1 (one thread, in turns in one process: 0.95-0.99x the
    time of packing them, K from 192 to 1,536), else packed here into panels scaled by alpha; B packed once
    (`pack_blocks`), taken `chunk_blocks` blocks per pass of the panels; c row i cf's `width` values at c0 + i *
    c_rs; `scratch` at least prepacked_scratch_size(K, row1 - row0) long. `cb`: a row vector over all of B's
    blocks (zeros past N) added to every row before the clamp where A is read in place (alpha 1), unread
    otherwise."""
    k = a.shape[1]
    rows = row1 - row0
    bflat = bp.reshape(-1)
    step = chunk_blocks * LANES
    if alpha == 1:  # A's rows read in place (above)
        af = a.reshape(-1)
        for j in range(0, width, step):
            _rows_times_blocks(af, _u(row0 * k), _u(k), rows, k, bflat, _u((blk0 * k * LANES) + j * k),
                               _u(k * LANES), min(step, width - j), cb, _u(blk0 * LANES + j), cf, _u(c0) + _u(j),
                               _u(c_rs), scratch, lo, hi)
        return
    panels = -(-rows // MR)
    for p in range(panels):
        r0 = row0 + p * MR
        if r0 + MR <= row1:
            for i in range(k):
                for r in range(MR):
                    scratch[_u((p * k + i) * MR + r)] = alpha * a[r0 + r, i]
            continue
        for r in range(MR):  # the last panel row by row, its rows past row1 apart: a per-element test there
            dst = p * k * MR + r  # became masked loads
            if r0 + r < row1:
                for i in range(k):
                    scratch[_u(dst + i * MR)] = alpha * a[r0 + r, i]
            else:
                for i in range(k):
                    scratch[_u(dst + i * MR)] = np.float32(0)
    ct = _u(panels * MR * k)
    no_bias = read_only(scratch[:0])  # (read-only, as the convs' bias and residual: one compile of the microkernel)
    c0 = _u(c0)
    c_rs = _u(c_rs)
    for j in range(0, width, step):
        _panels_times_blocks(scratch, _u(0), panels, rows, no_bias, 0, k, bflat, _u((blk0 * k * LANES) + j * k),
                             _u(LANES), _u(k * LANES), min(step, width - j), cf, c0 + _u(j), c_rs, no_bias, scratch,
                             ct, lo, hi)
