"""Neural-network ops on the CPU provider (float32/float64): Conv (and com.onnxjit FusedConv: a Conv with a
residual input and an activation epilogue), pooling, BatchNormalization (inference), InstanceNormalization, LRN,
Dropout (inference).

Attributes become static arguments here; the output geometry (pads, output sizes) is computed per input shape in
Python, cached, and handed to the Numba kernels in `onnxjit.kernels.conv` / `.pool` / `.nn`, which work over 3
spatial dims (1-D and 2-D inputs get unit leading spatial dims, a free reshape). Output sizes and auto_pad follow
onnxruntime's CPU kernels, including where they differ from the ONNX reference (pooling with auto_pad SAME and
dilations, ceil_mode together with auto_pad); Conv with auto_pad SAME and dilations, which onnxruntime refuses,
pads for the dilated kernel as the spec says. Kernels run over threads through `run_units` (onnxjit.worker_pool).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numba
import numpy as np
from onnx import TensorProto

from onnxjit import contrib
from onnxjit.cache import deferred_compile
from onnxjit.contrib.fused import ACTIVATION_PARAM_COUNTS
from onnxjit.kernels import conv as kconv
from onnxjit.kernels import linalg as klinalg
from onnxjit.kernels import nn as knn
from onnxjit.kernels import packed_gemm
from onnxjit.kernels import pool as kpool
from onnxjit.kernels.linalg import BLAS_SERIAL_WORK, single_threaded_blas_for
from onnxjit.kernels.simd import LANES
from onnxjit.ops.registry import attr, input_tensor_types, register_op
from onnxjit.ops import stand_ins
from onnxjit.session.native_plan import NATIVE_GRAIN, In, NativeCall, Out
from onnxjit.worker_pool import CHUNKS_PER_THREAD, PARALLEL_GRAIN, CallSite, run_units  # other ops' too

FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# grouped convs with at most this many (input channels x output channels) per group run as direct loops
DIRECT_CONV_MAX_CHANNELS = 16
CONV_TILE_BYTES = 1 << 20  # most bytes of a conv_gemm unit's im2col tile, and of its output block (half an L2)
CONV_TILE_MIN_PIXELS = 128  # fewest output pixels of a tile, where the image has them (GEMM efficiency)
# a row cut into tiles of columns (_column_tiles) is cut into tiles of up to this many times CONV_TILE_BYTES: BLAS
# packs A again for each GEMM, and wav2vec's 512->512 k=3 conv over 1,599 steps (two Intel Xeon threads) took
# 27.7 ms in all with tiles of 1 MB, 24.6 with 4 MB, as with one tile per unit
COLUMN_TILE_FACTOR = 4
CONV_MIN_M_BLOCK = 64  # fewest output channels of a block, where the group has them (GEMM efficiency)
# float32 convs as GEMMs run on kernels.packed_gemm: 1x1 ones, and im2col ones up to this depth. Timed against
# BLAS on two threads (AMD Zen 3), packed ran 1x1 convs 0.70-1.0x (96->576 channels over 14x14: 0.40-0.75x) and
# the stems 0.86-0.88x, but a 256->256 3x3 conv over 14x14 (depth 2,304) 0.99-1.39x.
PACKED_IM2COL_MAX_K = 1024
CONV_PACKED_MIN_PIXELS = 512  # fewest pixels of a conv_packed tile cut for the threads (see _packed_tiles)
# fewest output channels of a conv_packed unit's block when the threads' shares are cut along the channels (each
# share packs all of the tile's input columns for them): with fewer, the shares cut along the pixels instead
CONV_MIN_PACKED_ROWS = 32
# and more output channels than this times the depth (input channels x taps) a share packs: a share reads its columns
# of the input (often in the other core's cache, just written by a depthwise conv), which a cut along the
# channels makes each share read whole
CONV_CHANNEL_CUT_MIN_RATIO = 1.0
PACKED_CHUNK_BYTES = 128 << 10  # bytes of a packed-GEMM pass's packed columns of b (kernels.packed_gemm)
# deepest grouped conv (channels x taps per group) run by kernels.conv.conv_padded; ungrouped ones stay on the
# im2col GEMM (a 3->32-channel stride-2 stem: 290 us there, 330 padded, its 8 panels' scattered stores)
PADDED_CONV_MAX_K = 1024
# float32 depthwise 2-D convs run a row of output pixels to a vector (kernels.conv.conv_depthwise_rows, column
# strides 1 and 2) where a row fills at least this fraction of a vector's LANES; narrower ones channels-last, a
# vector of channels per pixel (conv_depthwise_blocked), whose copies in and out cost less than the empty lanes.
# One Emerald Rapids thread, the kernels alone, rows / blocked: 88 channels 3x3 at 28x28 41 / 79 us, 72 at 56x56
# stride 2 (28x28 out) 61 / 185; 240 5x5 at 14x14 137 / 94, 576 at 7x7 156 / 59, 96 at 28x28 stride 2 93 / 60
DEPTHWISE_ROWS_MIN_FILL = (3, 4)
# the same for 3x3 undilated ones of strides 1 or 2, which kernels.conv.conv_depthwise_3x3 runs (each input row
# loaded once, the weights in registers). One Intel Xeon AVX-512 thread, 3x3 / blocked: 192 channels at 28x28 39 /
# 101 us, 384 at 14x14 46 / 48, 672 at 14x14 80 / 81, 144 at 28x28 stride 2 (14x14 out) 37 / 43; 576 at 14x14
# stride 2 (7x7 out) 66 / 33, 960 at 7x7 61 / 22
DEPTHWISE_3X3_MIN_FILL = (7, 16)
# float32 dense 2-D convs of at most this many input channels (stems) to at most a vector of output channels, column
# stride 1 or 2 and output rows at least a vector wide run with output pixels as the lanes (kernels.conv.conv_rows),
# in units of this many rows. Two threads of an Intel Xeon AVX-512 VM, 4 convs of a shape against conv_broadcast:
# 3->16 3x3 stride 2 over 224x224 305 -> 253 us, 3->32 217 -> 181 (onnxruntime 120 and 255); a 3->64 7x7 stem,
# whose 64 channels fill conv_broadcast's vectors, 960 -> 1299, so it stays there
ROWS_CONV_MAX_CHANNELS = 4
ROWS_CONV_TILE_ROWS = 4
# float32 2-D pools whose padded plane and output plane have at most these many pixels run channels-last
# (kernels.pool.pool_blocked), else as separable passes (kernels.pool.pool). In-process A/B, single-op sessions, two
# Emerald Rapids threads, separable -> channels-last (onnxruntime): 3x3 stride-1 averages over 576 planes of 14x14
# 169-207 -> 105-112 us (61-64), over 1024 of 7x7 186-213 -> 53-54 (48-49); 3x3 max over 1024 of 7x7 127-150 ->
# 47-50 (38-45); 3x3 stride-2 max over 576 of 14x14 109-131 -> 43-48 (32-35), over 256 of 28x28 111 -> 60 (53);
# but 3x3 stride-1 ones over 28x28 outputs lose (480 planes 176 -> 272 us: the tiles outgrow L2)
POOL_BLOCKED_MAX_PIXELS = 32 * 32
POOL_BLOCKED_MAX_OUTPUTS = 16 * 16
# float32 2-D dense convs that are neither pointwise nor Winograd's run with vectors over the output channels and
# no im2col (kernels.conv.conv_broadcast). Two Emerald Rapids threads, same process, 4 convs reading one input
# with their own weights (as a network streams them), broadcast / the path before (im2col GEMMs, BLAS's or
# packed_gemm's, or Winograd below WINOGRAD_MIN_TILES_F32): 3x3 over 7x7 pixels 160->224 0.55, 192->224 0.53,
# 512->512 0.71; over 13x13 and 14x14 64->256 0.79, 128->128 0.84, 256->256 0.96, 512->512 0.50; strided
# 128->256 0.77, 256->512 0.68, 64->128 over 56x56 0.93; 5x5 96->256 over 27x27 0.76, 32->96 over 14x14 0.27;
# 11x11 stride 4 3->96 0.72. Pointwise convs stay on packed_gemm: broadcast 1.25-2.8x their time (each input
# channel a tap, a new cache line per tap). The stems it took first (3->64 7x7, 3->16 3x3 stride 2) run as before.
CONV_BROADCAST_BYTES = 64 << 10  # most bytes of a conv_broadcast unit's output rows (LANES channels)
DOT_CONV_MAX_IMAGES = 4  # a 1x1 conv over 1x1 pixels of at most this many images runs as dot products
CONV_UNITS_PER_THREAD = 2  # conv_gemm units per thread: more, smaller GEMMs cost more than balance gains


def constant_input(node, i):
    """The constant value of input i (an initializer no feed can override), or None."""
    v = node.inputs[i] if i < len(node.inputs) else None
    if v is None or v.const is None:
        return None
    if node.graph is not None and any(g is v for g in node.graph.inputs):
        return None
    return v.const


def is_constant(b, c) -> bool:
    """Whether b is the constant c: the array itself, or a view of all of it (the provider may hand kernels
    read-only views of the initializers, new objects over the same memory); both None counts as the same."""
    if b is c:
        return True
    return b is not None and c is not None and b.shape == c.shape and b.strides == c.strides and \
        b.dtype == c.dtype and b.ctypes.data == c.ctypes.data


class ConstantDerived:
    """An array derived from a node's constant input (a transposed or transformed weight): made once for the
    constant, and anew for any other value (a fed array may be written in place between runs)."""

    def __init__(self, const, derive):
        self.const = const
        self.derive = derive
        self.value = None

    def holds(self, b) -> bool:
        """Whether b is the constant (see is_constant)."""
        return self.const is not None and is_constant(b, self.const)

    def of(self, b):
        if not self.holds(b):
            return self.derive(b)
        if self.value is None:
            self.value = self.derive(b)
        return self.value


def ro(a):
    """A read-only view of `a` (C-contiguous): kernels then see one array type whether an input is an
    initializer (read-only) or a computed value, and compile once per dtype. (setflags, not `flags.writeable =`:
    380 against 660 ns, once or twice per step of every run.)"""
    a = np.ascontiguousarray(a)
    if a.flags.writeable:
        a = a.view()
        a.setflags(write=False)
    return a


def ro_reshaped(a, shape, dtype=None):
    """ro(a.reshape(shape)) (of `a` as `dtype` where given) with one view made instead of two: a reshape is always
    a new view."""
    v = np.ascontiguousarray(a, dtype=dtype).reshape(shape)
    v.setflags(write=False)
    return v


# --- helpers ---------------------------------------------------------------------------------------------------
def float_type(node, indices):
    """The common float elem type of the node's inputs at `indices` (absent optional inputs skipped), or None
    when one is unknown, not a tensor, or the dtypes differ."""
    types = input_tensor_types(node)
    elem = None
    for i in indices:
        if i >= len(node.inputs) or node.inputs[i] is None:
            continue
        t = types[i]
        if t is None or t.elem_type not in FLOATS or (elem is not None and t.elem_type != elem):
            return None
        elem = t.elem_type
    return elem


def wanted_outputs(node) -> int:
    """How many leading outputs are requested (an absent optional output has an empty name)."""
    n = 0
    for i, v in enumerate(node.outputs):
        if v is not None and v.name:
            n = i + 1
    return n


def rank_of(node, i):
    v = node.inputs[i] if i < len(node.inputs) else None
    t = v.type if v is not None else None
    shape = getattr(t, "shape", None)
    return None if shape is None else len(shape)


def _ints(value, n, default):
    v = list(value) if value is not None else []
    return [default] * n if not v else [int(x) for x in v]


def pad3(vals, fill):
    """A per-spatial-dim list padded in front to 3 dims."""
    return tuple([fill] * (3 - len(vals)) + list(vals))


def shape5_of(shape, r):
    """(N, C, *spatial[r]) -> (N, C, D, H, W), leading unit spatial dims."""
    return shape[:2] + (1,) * (3 - r) + shape[2:]


def conv_kernel_of(xs, ws, r: int, kernel_attr, group: int) -> list[int]:
    """The kernel's spatial shape from W, after checking X and W against the node's rank, kernel_shape and group
    (ValueError naming the mismatch)."""
    if len(xs) != r + 2 or len(ws) != r + 2:
        raise ValueError(f"Conv: X {xs} and W {ws} must both have rank {r + 2}")
    kernel = list(ws[2:])
    if kernel_attr is not None and kernel_attr != kernel:
        raise ValueError(f"Conv: kernel_shape {kernel_attr} does not match W {ws}")
    if xs[1] != ws[1] * group or ws[0] % group:
        raise ValueError(f"Conv: X {xs} and W {ws} do not fit group={group}")
    return kernel


def conv_geometry(in_sizes, kernel, strides, dilations, pads, auto_pad):
    """onnxruntime's Conv output sizes and head pads; auto_pad SAME uses the dilated kernel (the ONNX spec)."""
    out, head = [], []
    r = len(in_sizes)
    for i in range(r):
        n, k, s, d = in_sizes[i], kernel[i], strides[i], dilations[i]
        dk = d * (k - 1) + 1
        if auto_pad == "NOTSET":
            ph, pt = pads[i], pads[i + r]
            o = (n + ph + pt - dk) // s + 1
        elif auto_pad == "VALID":
            ph = 0
            o = (n - dk) // s + 1
        else:
            o = (n + s - 1) // s
            need = max(0, (o - 1) * s + dk - n)
            ph = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
        if o <= 0:
            raise ValueError(f"Conv: invalid input spatial shape {tuple(in_sizes)} for kernel {tuple(kernel)}")
        out.append(o)
        head.append(ph)
    return out, head


def pool_geometry(in_sizes, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """onnxruntime's pooling output sizes, head and tail pads.

    auto_pad SAME pads for the undilated kernel (as onnxruntime does); ceil_mode applies to every auto_pad, and a
    ceil_mode window that would start past the input and the head pad is dropped."""
    out, head, tail = [], [], []
    r = len(in_sizes)
    for i in range(r):
        n, k, s, d = in_sizes[i], kernel[i], strides[i], dilations[i]
        if auto_pad == "NOTSET":
            ph, pt = pads[i], pads[i + r]
        elif auto_pad == "VALID":
            ph = pt = 0
        else:
            need = ((n + s - 1) // s - 1) * s + k - n
            ph = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            if need < 0:  # onnxruntime's C++ division truncates toward zero
                ph = -((-need) // 2) if auto_pad == "SAME_UPPER" else -((-need - 1) // 2)
            pt = need - ph
        span = n + ph + pt - d * (k - 1) - 1
        if ceil_mode:
            o = int(math.ceil(span / s)) + 1
            if (o - 1) * s >= n + ph:
                o -= 1
        else:
            o = int(span / s) + 1  # truncation, as onnxruntime
        if o <= 0:
            raise ValueError(f"pooling: invalid input spatial shape {tuple(in_sizes)} for kernel {tuple(kernel)}")
        out.append(o)
        head.append(ph)
        tail.append(pt)
    return out, head, tail


# --- activation epilogues (com.onnxjit FusedConv / FusedGemm / FusedMatMul) --------------------------------------
FUSED_DOMAIN = contrib.DOMAIN
_FIXED_PARAMS = {"HardSwish": (1 / 6, 0.5)}  # x * HardSigmoid(x) with these alpha, beta


@dataclass(frozen=True)
class Activation:
    """The activation a kernel applies to its output as it writes it: the kernels' code and (alpha, beta)."""

    kind: int = klinalg.IDENTITY
    alpha: float = 0.0
    beta: float = 0.0

    def consts(self, dtype):
        return klinalg.activation_consts(self.alpha, self.beta, dtype)

    def apply(self, y):
        """The activation over a whole array, in place (for outputs no kernel writes: empty reductions)."""
        if self.kind != klinalg.IDENTITY and y.size:
            flat = y.reshape(-1)
            klinalg.activate(flat, 0, flat.size, self.kind, self.consts(y.dtype))
        return y


NO_ACTIVATION = Activation()


def activation_of(node):
    """The node's activation epilogue: none for an ONNX op; for a com.onnxjit fused op its `activation` and
    `activation_params` attributes, or None when the kernels do not have that activation."""
    if node.domain != FUSED_DOMAIN:
        return NO_ACTIVATION
    name = attr(node, "activation", "Identity")
    params = [float(v) for v in attr(node, "activation_params", None) or []]
    if name not in ACTIVATION_PARAM_COUNTS or len(params) != ACTIVATION_PARAM_COUNTS[name]:
        return None
    alpha, beta = (list(_FIXED_PARAMS.get(name, params)) + [0.0, 0.0])[:2]
    return Activation(klinalg.ACTIVATIONS.index(name), alpha, beta)


# --- Conv ------------------------------------------------------------------------------------------------------
def spatial_rank(node, kernel_attr):
    """The spatial rank (1-3) of a Conv-like node, from kernel_shape and X's and W's ranks where known; None when
    they disagree or none is known."""
    r = len(kernel_attr) if kernel_attr else None
    for i in (1, 0):
        rk = rank_of(node, i)
        if rk is not None:
            if r is None:
                r = rk - 2
            elif rk - 2 != r:
                return None
    return r if r is not None and 1 <= r <= 3 else None


def conv_attributes(node, r, auto_pad, negative_pads=False):
    """(group, strides, dilations, pads) of a Conv-like node with r spatial dims, or None when invalid (negative
    pads too, unless `negative_pads`: ConvTranspose's crop its output)."""
    group = int(attr(node, "group", 1))
    strides = _ints(attr(node, "strides"), r, 1)
    dilations = _ints(attr(node, "dilations"), r, 1)
    pads = _ints(attr(node, "pads"), 2 * r, 0)
    if len(strides) != r or len(dilations) != r or len(pads) != 2 * r or group < 1:
        return None
    if min(strides) < 1 or min(dilations) < 1 or (auto_pad == "NOTSET" and min(pads) < 0 and not negative_pads):
        return None
    return group, strides, dilations, pads


def conv_node_attributes(node, negative_pads=False):
    """(auto_pad, spatial rank, kernel_shape as ints or None, (group, strides, dilations, pads)) of a Conv node, or
    None where they are not ones the conv kernels take (the CPU and CUDA providers' Conv; ConvTranspose's, with
    `negative_pads`)."""
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        return None
    kernel_attr = attr(node, "kernel_shape")
    r = spatial_rank(node, kernel_attr)
    if r is None:
        return None
    geometry = conv_attributes(node, r, auto_pad, negative_pads)
    if geometry is None:
        return None
    return auto_pad, r, [int(k) for k in kernel_attr] if kernel_attr else None, geometry


@register_op("Conv", since=1)
@register_op("Conv", since=11)
@register_op("FusedConv", since=1, domain=FUSED_DOMAIN)
def build_conv(node):
    """Conv, and FusedConv: Conv(X, W, B) + Z (its optional 4th input, of the output's shape), then the
    activation, both applied by the kernels as they write each output row."""
    act = activation_of(node)
    n_in = 4 if node.domain == FUSED_DOMAIN else 3
    if not 2 <= len(node.inputs) <= n_in or float_type(node, range(n_in)) is None or wanted_outputs(node) != 1 \
            or act is None:
        return None
    attributes = conv_node_attributes(node)
    if attributes is None:
        return None
    auto_pad, r, kernel_attr, (group, strides, dilations, pads) = attributes
    cache = {}
    has_z = len(node.inputs) > 3 and node.inputs[3] is not None
    winograd_weights = ConstantDerived(constant_input(node, 1), _winograd_weights)
    winograd_packed = ConstantDerived(constant_input(node, 1), kconv.winograd_packed_weights)
    packed_weights = ConstantDerived(constant_input(node, 1),
                                     lambda w: _packed_weights(w.reshape(group, w.shape[0] // group, -1)))
    broadcast_weights = ConstantDerived(constant_input(node, 1), kconv.broadcast_weight_vectors)

    def plan(xs, ws, itemsize):
        """The conv's geometry and kernel choice for these shapes."""
        key = (xs, ws, itemsize)
        p = cache.get(key)
        if p is not None:
            return p
        kernel = conv_kernel_of(xs, ws, r, kernel_attr, group)
        out, head = conv_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad)
        n_img, m_out, cg = xs[0], ws[0], ws[1]
        mg = m_out // group
        k3, s3, d3, p3, o3 = (pad3(kernel, 1), pad3(strides, 1), pad3(dilations, 1), pad3(head, 0),
                              pad3(out, 1))
        kk = cg * math.prod(kernel)
        work = n_img * m_out * math.prod(out) * kk
        direct = group > 1 and cg * mg <= DIRECT_CONV_MAX_CHANNELS
        pointwise = not direct and kk == cg and all(v == 1 for v in strides) and not any(head) and \
            tuple(out) == tuple(xs[2:])
        taps = kconv.tap_table(k3[2], d3[2], p3[2], s3[2], xs[-1], o3[2])
        is_3x3 = tuple(kernel) == (3, 3) and all(v == 1 for v in dilations) and all(v in (1, 2) for v in strides)
        fill = DEPTHWISE_3X3_MIN_FILL if is_3x3 else DEPTHWISE_ROWS_MIN_FILL
        nth = numba.get_num_threads()
        tile_cols = o3[2]  # tiles of whole rows, but in conv_gemm's and conv_packed's cut of long rows
        if n_img * m_out * math.prod(out) == 0:  # an empty output: nothing to plan (the tilings divide by these)
            mode = "empty"
            tile_rows = m_blocks = units = 0
        elif _winograd_fits(r, group, kernel, strides, dilations, cg, m_out, out, itemsize):
            mode = "winograd"
            th, wq = -(-out[0] // 4), -(-out[1] // 4) + 1
            tile_rows, m_blocks = _winograd_blocks(n_img, cg, m_out, th, wq, itemsize, nth)
            units = n_img * -(-th // tile_rows) * -(-m_out // m_blocks)
        elif (itemsize == 4 and r == 2 and group == xs[1] == m_out
              and (s3[2] > 2 or out[1] * fill[1] < LANES * fill[0])):
            mode = "depthwise"
            tile_rows = m_blocks = 1
            units = n_img * -(-m_out // LANES)
        elif (itemsize == 4 and r == 2 and group == 1 and cg <= ROWS_CONV_MAX_CHANNELS and kk > cg
              and m_out <= LANES and s3[2] <= 2 and out[1] >= LANES):
            mode = "rows"
            tile_rows, m_blocks = ROWS_CONV_TILE_ROWS, 1
            units = n_img * -(-out[0] // tile_rows)
        elif itemsize == 4 and r == 2 and group == 1 and not pointwise and kk > cg:
            # (a strided 1x1 conv, kk == cg, is a GEMM over every s-th pixel: conv_packed's im2col picks them;
            # here it ran 2-3x as long, resnets' 256->512 projection over 56x56 3.1 vs 1.05 ms, 2 threads)
            mode = "broadcast"
            n_mb = -(-m_out // LANES)
            tile_rows, m_blocks = _broadcast_tiles(n_img, o3[1], o3[2], n_mb, nth, nth > 1 and work >= PARALLEL_GRAIN)
            units = n_img * -(-o3[1] // tile_rows) * -(-n_mb // m_blocks)
        elif itemsize == 4 and r == 2 and group == xs[1] == m_out:
            mode = "depthwise-3x3" if is_3x3 else "depthwise-rows"
            tile_rows = m_blocks = 1
            units = n_img * m_out
        elif direct:
            mode = "direct"
            tile_rows = m_blocks = 1
            units = n_img * m_out
        elif (itemsize == 4 and r == 2 and group > 1 and not pointwise and all(v == 1 for v in dilations)
              and kk <= PADDED_CONV_MAX_K):
            mode = "padded"  # packed_gemm's microkernel over a padded (phase-split) copy of the group, no im2col
            m_blocks = 0
            # rows of output per unit: whole images' groups where they are enough units for the threads
            wanted = CONV_UNITS_PER_THREAD * nth if nth > 1 and work >= PARALLEL_GRAIN else 1
            tiles = min(o3[1], -(-wanted // (n_img * group)))
            tile_rows = -(-o3[1] // tiles)
            units = n_img * group * -(-o3[1] // tile_rows)
        elif pointwise and group == 1 and math.prod(out) == 1 and n_img <= DOT_CONV_MAX_IMAGES and not has_z:
            mode = "dot"  # a matrix-vector product per image (squeeze-excitation convs): no GEMM tile to fill
            tile_rows = m_blocks = max(16, -(-m_out // (nth * CHUNKS_PER_THREAD)))  # outputs per unit
            units = -(-m_out // m_blocks)
        else:
            mode = "pointwise" if pointwise else "gemm"
            parallel = nth > 1 and work >= PARALLEL_GRAIN
            tiler = _gemm_tiles
            if itemsize == 4 and 0 < kk and (pointwise or kk <= PACKED_IM2COL_MAX_K):  # packed_gemm
                mode = "packed-pointwise" if pointwise else "packed"
                tiler = _packed_tiles
            nrows, ow = o3[0] * o3[1], o3[2]
            tile_cols = _column_tiles(n_img * group, nrows, ow, (mg + (0 if pointwise else kk)) * itemsize,
                                      nth if parallel else 1)
            if tile_cols < ow:  # each row cut into tiles of columns: the tilers see them as rows
                _, m_blocks = tiler(n_img * group, nrows * -(-ow // tile_cols), tile_cols, kk, mg, pointwise,
                                    itemsize, nth, parallel)
                tile_rows = 1
            else:
                tile_rows, m_blocks = tiler(n_img * group, nrows, ow, kk, mg, pointwise, itemsize, nth, parallel)
            units = n_img * group * kconv.tile_count(nrows, tile_rows, tile_cols, ow) * -(-mg // m_blocks)
        p = cache[key] = ((n_img, m_out) + tuple(out), (n_img, m_out) + o3, k3, s3, d3, p3, taps, mode,
                          tile_rows, tile_cols, m_blocks, units, work)
        return p

    def prepare(key, dtype, w, b):
        """(the kernel's CallSite, its arguments with x, z and the output left as None, where they go, output
        shape, 5-D output shape, units, work, whether it calls BLAS) for inputs of these shapes and this W and B.
        The argument types are fixed by the key and W and B, as the CallSite needs."""
        shape, shape5, k, s, d, p, taps, mode, tile_rows, tile_cols, m_blocks, units, work = plan(*key)
        bias = ro(b.reshape(-1) if b is not None else np.empty(0, dtype=dtype))
        consts = act.consts(dtype)
        if mode == "empty":
            return None, (), (), shape, shape5, units, work, False
        if mode == "winograd" and key[2] == 4 and WINOGRAD_PACKED:
            return (CallSite(kconv.conv_winograd_packed), (None, winograd_packed.of(w), w.shape[0], bias, None, p[1],
                                                           p[2], tile_rows, m_blocks, act.kind, consts, None),
                    (0, 4, 11), shape, shape, units, work, False)
        if mode == "winograd":
            return (CallSite(kconv.conv_winograd), (None, winograd_weights.of(w), bias, None, p[1], p[2], tile_rows,
                                                    m_blocks, act.kind, consts, None), (0, 3, 10), shape, shape,
                    units, work, True)
        w5 = ro_reshaped(w, shape5_of(w.shape, r))
        if mode.startswith("packed"):
            chunk = max(1, PACKED_CHUNK_BYTES // (4 * w5[0].size * LANES)) * LANES
            return (CallSite(kconv.conv_packed), (None, packed_weights.of(w), w5.shape[0], bias, None, group, k, s, d,
                                                  p, taps, tile_rows, tile_cols, m_blocks, chunk,
                                                  mode == "packed-pointwise", act.kind, consts, None), (0, 4, 18),
                    shape, shape5, units, work, False)
        if mode == "padded":
            return (CallSite(kconv.conv_padded), (None, packed_weights.of(w), w.shape[0], bias, None, group, k, s, p,
                                                  tile_rows, act.kind, consts, None), (0, 4, 12), shape, shape5,
                    units, work, False)
        if mode == "dot":
            return (CallSite(klinalg.dot_cols_f32 if dtype == np.float32 else klinalg.dot_cols),
                    (None, ro(w.reshape(w.shape[0], -1)), bias.reshape(1, -1), 1.0, 1.0, b is not None, act.kind,
                     consts, m_blocks, None), (0, None, 9), shape, shape5, units, work, False)
        if mode == "depthwise":
            return (CallSite(kconv.conv_depthwise_blocked), (None, broadcast_weights.of(w), bias, None, k, s, d, p,
                                                              act.kind, consts, None), (0, 3, 10), shape, shape5,
                    units, work, False)
        if mode == "broadcast":
            return (CallSite(kconv.conv_broadcast), (None, broadcast_weights.of(w), bias, None, k, s, d, p, tile_rows,
                                                     m_blocks, act.kind, consts, None), (0, 3, 12), shape, shape5,
                    units, work, False)
        if mode == "rows":
            return (CallSite(kconv.conv_rows), (None, packed_weights.of(w), w.shape[0], bias, None, k, s, d, p,
                                                tile_rows, act.kind, consts, None), (0, 4, 12), shape, shape5, units,
                    work, False)
        if mode == "depthwise-3x3":
            return (CallSite(kconv.conv_depthwise_3x3), (None, w5, bias, None, s, p, act.kind, consts, None),
                    (0, 3, 8), shape, shape5, units, work, False)
        if mode == "depthwise-rows":
            return (CallSite(kconv.conv_depthwise_rows), (None, w5, bias, None, k, s, d, p, act.kind, consts, None),
                    (0, 3, 10), shape, shape5, units, work, False)
        if mode == "direct":
            return (CallSite(kconv.conv_direct), (None, w5, bias, None, group, k, s, d, p, act.kind, consts, None),
                    (0, 3, 11), shape, shape5, units, work, False)
        return (CallSite(kconv.conv_gemm), (None, w5, bias, None, group, k, s, d, p, taps, tile_rows, tile_cols,
                                            m_blocks, mode == "pointwise", act.kind, consts, None), (0, 3, 16), shape,
                shape5, units, work, True)

    def views(site, x_shape, shape, shape5):
        """(X's view, the output's and Z's view) the kernel takes: the images as they are for the Winograd
        kernels, 5-D (shape5_of) for the others."""
        if site.kernel is kconv.conv_winograd or site.kernel is kconv.conv_winograd_packed:
            return x_shape, shape
        return shape5_of(x_shape, r), shape5

    def bind(key, dtype, made):
        """call(x, z, out) -> the output, for inputs of `key`'s shapes: prepare's kernel call with the arguments
        that stay the same made once (X's view shape, the empty Z, the template cut around the per-run slots).
        A conv step of a batch-1 network is mostly this code's overhead where its kernel is short."""
        site, template, slots, shape, shape5, units, work, uses_blas = made
        if site is None:  # an empty output
            return lambda x, z, out: np.zeros(shape, dtype=dtype) if out is None else out
        s0, s1, s2 = slots
        if s1 is None:  # the dot products: X as (images, channels) rows, the output as (images, M)
            def dots(x, z, out):
                y = np.empty(shape5, dtype=dtype) if out is None else out.reshape(shape5)
                args = list(template)
                args[s0] = ro_reshaped(x, (x.shape[0], -1))
                args[s2] = y.reshape(shape[0], -1)
                site.run(tuple(args), units, work)
                return y.reshape(shape)
            return dots
        x_view, out_view = views(site, key[0], shape, shape5)  # (Z is viewed as the output is)
        no_z = _no_residual(dtype, len(out_view))
        head, mid1, mid2, tail = template[:s0], template[s0 + 1:s1], template[s1 + 1:s2], template[s2 + 1:]

        def call(x, z, out):
            y = np.empty(shape, dtype=dtype) if out is None else out
            args = head + (ro_reshaped(x, x_view),) + mid1 + (no_z if z is None else ro_reshaped(z, out_view),) + \
                mid2 + (y.reshape(out_view),) + tail
            if uses_blas:
                with single_threaded_blas_for(work):
                    site.run(args, units, work)
            else:
                site.run(args, units, work)
            return y
        return call

    def kernel_args(made, x, z) -> tuple:
        """Arguments of the types prepare's kernel takes for input x (and Z), its range of units left out."""
        site, template, (s0, s1, s2), shape, shape5 = made[:5]
        args = list(template)
        if s1 is None:  # the dot products (bind's `dots`)
            args[s0] = ro_reshaped(x, (x.shape[0], -1))
            args[s2] = np.empty((0, 0), dtype=x.dtype)
            return tuple(args)
        x_view, out_view = views(site, x.shape, shape, shape5)
        args[s0] = ro_reshaped(x, x_view)
        args[s1] = _no_residual(x.dtype, len(out_view)) if z is None else ro_reshaped(z, out_view)
        args[s2] = np.empty((0,) * len(out_view), dtype=x.dtype)  # (C-contiguous and writable, as the output)
        return tuple(args)

    def stand_in(key, w, b):
        """The conv on numpy (stand_ins.NumpyConv), for inputs of `key`'s shapes and this W and B."""
        shape, shape5, k, s, d, p = plan(*key)[:6]
        return stand_ins.NumpyConv(w, b, group, shape5_of(key[0], r), shape, shape5, k, s, d, p, act)

    prepared = {}  # (X shape, W shape, itemsize) -> (W, B, bind's call, output shape) for the constant W and B

    def run(x, w, b=None, z=None, out=None):
        key = (x.shape, w.shape, x.dtype.itemsize)
        entry = prepared.get(key)
        if entry is None or entry[0] is not w or entry[1] is not b:
            made = prepare(key, x.dtype, w, b)
            constant = packed_weights.holds(w) and (b is None or b is constant_input(node, 2))
            if constant and made[0] is not None and deferred_compile.deferring() and \
                    deferred_compile.defer_unless_available(made[0].kernel, kernel_args(made, x, z),
                                                            lambda: prepared.pop(key, None)):
                entry = (w, b, stand_in(key, w, b), made[3], None)  # numpy's until the kernel has code
            else:
                entry = (w, b, bind(key, x.dtype, made), made[3], made)
            if constant:
                prepared[key] = entry  # the per-run work left: the input's view, Z's and the output
        if z is not None and z.shape != entry[3]:
            raise ValueError(f"FusedConv: Z of shape {z.shape} is not the output's shape {entry[3]}")
        return (entry[2](x, z, out),)

    def native(x, w, b=None, z=None, out=None):
        """The prepared call as a native_plan.NativeCall (X input 0, Z input 3), or None."""
        if out is not None or type(x) is not np.ndarray or (z is not None and type(z) is not np.ndarray):
            return None
        entry = prepared.get((x.shape, w.shape, x.dtype.itemsize))
        if entry is None or entry[0] is not w or entry[1] is not b or entry[4] is None:  # (None: a stand-in)
            return None
        site, template, (s0, s1, s2), shape, shape5, units, work, uses_blas = entry[4]
        if site is None or work >= NATIVE_GRAIN or (z is not None and z.shape != shape):
            return None
        args = list(template)
        if s1 is None:  # the dot products (bind's `dots`)
            args[s0], args[s2] = In(0, (x.shape[0], x.size // max(x.shape[0], 1))), Out(0)
            buffer = (shape[0], math.prod(shape) // max(shape[0], 1))
        else:
            x_view, buffer = views(site, x.shape, shape, shape5)
            args[s0], args[s2] = In(0, x_view), Out(0)
            args[s1] = _no_residual(x.dtype, len(buffer)) if z is None else In(3, buffer)
        return NativeCall(site.kernel, args, units, [(buffer, x.dtype)], [(0, shape)],
                          pinned=(1,) if b is None else (1, 2), parallel=units > 1 and work >= PARALLEL_GRAIN,
                          single_threaded_blas=uses_blas and work > BLAS_SERIAL_WORK)

    run.native = native
    run.writes_into = True  # `out`: a C-contiguous array of the output's shape and dtype to write (placement.py)
    return run


_NO_RESIDUALS: dict = {}

def _no_residual(dtype, ndim):
    """An empty read-only array standing for "no Z" in the conv kernels (one per dtype and rank: a new one cost
    1 us a step)."""
    key = (dtype, ndim)
    a = _NO_RESIDUALS.get(key)
    if a is None:
        a = _NO_RESIDUALS[key] = ro(np.empty((0,) * ndim, dtype=dtype))
    return a


def _broadcast_tiles(images, nrows, ow, n_mb, nth, parallel):
    """(output rows per band, blocks of LANES output channels per group) of conv_broadcast's units: bands within
    the byte budget of a unit's channels-last tile; where they are fewer than CONV_UNITS_PER_THREAD per thread,
    the blocks of output channels are cut into groups too, then the bands cut smaller (a 7x7 output was one
    unit). Groups cost nothing but each unit's copy of its band's input rows, and split the weights between
    the threads instead of each reading them all."""
    wanted = CONV_UNITS_PER_THREAD * nth if parallel else 1
    tile_rows = max(1, min(nrows, CONV_BROADCAST_BYTES // (ow * LANES * 4)))
    bands = images * -(-nrows // tile_rows)
    m_blocks = n_mb
    if bands < wanted:
        m_blocks = -(-n_mb // min(n_mb, -(-wanted // bands)))
        groups = -(-n_mb // m_blocks)
        if bands * groups < wanted:
            tile_rows = max(1, -(-nrows // -(-wanted // (images * groups))))
    return tile_rows, m_blocks


def _column_tiles(images, nrows, ow, px_bytes, nth):
    """Columns of each tile of the output rows, where whole rows make fewer tiles than the threads want and a row
    is more than a tile's bytes (`px_bytes`: a pixel's bytes of im2col and output): a 1-D conv over a long
    sequence is a single row. Else ow, tiles of whole rows. Such a row's units were blocks of output channels, each
    repeating the whole row's im2col: wav2vec's 512->512 k=3 stride-2 conv over 1,599 steps wrote 9.8 MB of it on
    each of two Intel Xeon threads, 13.0 ms against onnxruntime's 9.0; cut into tiles of columns, 9.4 ms (the
    model 27.2-28.9 -> 24.6-26.2 ms)."""
    row_bytes = px_bytes * ow
    wanted = CONV_UNITS_PER_THREAD * nth
    if row_bytes <= CONV_TILE_BYTES or images * nrows >= wanted or ow < 2 * CONV_TILE_MIN_PIXELS:
        return ow
    per_row = max(-(-wanted // (images * nrows)), -(-row_bytes // (COLUMN_TILE_FACTOR * CONV_TILE_BYTES)))
    return min(ow, max(CONV_TILE_MIN_PIXELS, -(-ow // per_row)))


def _gemm_tiles(images, nrows, ow, kk, mg, pointwise, itemsize, nth, parallel):
    """(output rows per tile, output channels per block) of conv_gemm's units: tiles of whole output rows, of even
    sizes, within the byte budgets, about CONV_UNITS_PER_THREAD units per thread and at least CONV_TILE_MIN_PIXELS
    wide; where that leaves fewer units, a pointwise conv splits its output channels too, and an im2col one when
    threads would idle otherwise (each block repeats the tile's im2col); blocks of at least CONV_MIN_M_BLOCK
    channels: BLAS ran a 1x1 conv's 16-row blocks at half its speed on 64-row ones."""
    per_row = (mg + (0 if pointwise else kk)) * ow * itemsize
    budget = max(1, CONV_TILE_BYTES // per_row)
    wanted = CONV_UNITS_PER_THREAD * nth if parallel else 1
    share = -(-nrows * images // wanted)
    tile_rows = max(1, min(nrows, budget, max(share, -(-CONV_TILE_MIN_PIXELS // ow))))
    tile_rows = -(-nrows // -(-nrows // tile_rows))  # the same number of tiles, of even sizes
    units = images * -(-nrows // tile_rows)
    # a pointwise conv splits its output channels for free, up to `wanted` units; an im2col one only as far as
    # the threads need, each block repeating the tile's im2col
    target = wanted if pointwise else nth
    m_block = mg
    if parallel and units < target:
        m_block = max(min(mg, CONV_MIN_M_BLOCK), -(-mg // -(-target // units)))
    return tile_rows, m_block


def _packed_tiles(images, nrows, ow, kk, mg, pointwise, itemsize, nth, parallel):
    """(output rows per tile, output channels per block) of conv_packed's units: tiles of whole output rows
    within the byte budget; the threads' shares cut along the pixels while tiles keep CONV_PACKED_MIN_PIXELS,
    then along the output channels (blocks of whole panels), then along the pixels again where the channels are
    too few. Two threads writing the two halves of each output row share the cache line at the cut in every
    row: a 96->576-channel 1x1 conv over 14x14 pixels took 240-290 us on two threads against 165 us for either
    half alone (AMD Zen 3); cut along the channels they share none, but each unit packs the tile's columns of
    the input again (a 256->64-channel one over 56x56 pixels ran 1.4x slower cut four ways along 64 channels
    than along the pixels). So a cut along the channels leaves each share CONV_MIN_PACKED_ROWS channels at least,
    balanced, and more channels than the depth it packs (CONV_CHANNEL_CUT_MIN_RATIO), or the cut goes along the
    pixels. Two Emerald Rapids threads, 1x1 convs reading a depthwise conv's output (in the two cores' caches),
    same process, alternating: 192->32 channels over 28x28 205 -> 139 us (16-channel shares before), 240->40
    350 -> 240 us (24 + 16); the projections of inverted residual blocks, 576->96 and 672->112 over 14x14
    pixels, 0.87x along the pixels, 1152->192 over 7x7 0.93x, resnet's 512->128 over 28x28 0.60x; the
    expansions stay cut along the channels (96->576 over 14x14 1.12x, 112->672 1.11x along the pixels). Tiles
    the byte budget asks for come in whole rounds for the threads (a 3->32-channel stem conv over 224x224 pixels
    was cut into three tiles, two on one thread). `itemsize` (always 4) is unread: _gemm_tiles' signature, so
    that the plan calls either tiler alike."""
    mr = packed_gemm.MR
    per_row = (mg + (0 if pointwise else kk)) * ow * 4
    tile_rows = max(1, min(nrows, CONV_TILE_BYTES // per_row))
    tiles = -(-nrows // tile_rows)
    if parallel and images * tiles > 1 and images * tiles % nth:  # whole rounds of units for the threads
        tiles = min(nrows, -(-images * tiles // nth) * nth // images)
    tile_rows = -(-nrows // tiles)
    wanted = (CONV_UNITS_PER_THREAD if pointwise else 1) * nth if parallel else 1
    units = images * -(-nrows // tile_rows)
    if units < wanted:
        cuts = max(1, min(-(-wanted // units), tile_rows * ow // CONV_PACKED_MIN_PIXELS, tile_rows))
        tile_rows = -(-tile_rows // cuts)
        units = images * -(-nrows // tile_rows)
    panels = -(-mg // mr)
    m_block = panels
    if parallel and units < nth:  # one block per thread: every block packs the tile's columns again
        per_thread = -(-panels // -(-nth // units))
        by_pixels = tile_rows > 1 and (per_thread * mr < CONV_MIN_PACKED_ROWS
                                       or mg <= CONV_CHANNEL_CUT_MIN_RATIO * kk)
        if not by_pixels:
            m_block = per_thread
            units *= -(-panels // m_block)
    if parallel and units < nth and tile_rows > 1:  # too few channels: pixels too
        tile_rows = -(-tile_rows // -(-nth // units))
    return tile_rows, m_block * mr


# Winograd F(4x4, 3x3) (kernels.conv.conv_winograd) for 3x3 stride-1 2-D convs: a quarter of the multiplies, in
# 36 GEMMs over channels. It pays where those GEMMs are wide enough: enough channels, and at least 4x4 tiles; for
# float32, at least 7x7 tiles (28x28 pixels), below which conv_broadcast is faster: its transformed weights are 4x
# the raw ones, streamed from memory once per conv in a network. Over 28x28 and 56x56 pixels Winograd stays:
# benchmarks/conv_paths.py, two Emerald Rapids threads, 128->128 and 64->64 convs: conv_broadcast 1.25-2.0x
# Winograd's time in four runs (0.96-1.03 in an earlier sweep)
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_TILES = 16  # float64, which conv_broadcast does not take
WINOGRAD_MIN_TILES_F32 = 49
WINOGRAD_PACKED = True  # float32's 36 GEMMs on packed_gemm (kernels.conv.conv_winograd_packed), not BLAS
# conv_winograd's blocking (_winograd_blocks): a thread's time for its units, estimated from seconds per GEMM flop,
# per byte of transformed weights read, per byte of a unit's transformed input or products spilled out of L2 and
# read back, and per channel and tile transformed in and out. Fitted (least squares on relative error) to 112
# blockings of 12 shapes, 28x28 to 224x224 pixels, 32 to 512 channels, on two threads of an Intel Xeon AVX-512 VM
# (November 2026): its picks took 1.02x the time of the best blocking of each shape
WINOGRAD_S_PER_FLOP = 6.93e-12
WINOGRAD_S_PER_WEIGHT_BYTE = 5.4e-11
WINOGRAD_S_PER_SPILLED_BYTE = 7.54e-11
WINOGRAD_S_PER_INPUT = 3.32e-8
WINOGRAD_S_PER_OUTPUT = 2.28e-9


def _winograd_fits(r, group, kernel, strides, dilations, cg, m_out, out, itemsize):
    return (r == 2 and group == 1 and list(kernel) == [3, 3] and all(v == 1 for v in strides)
            and all(v == 1 for v in dilations) and min(cg, m_out) >= WINOGRAD_MIN_CHANNELS
            and -(-out[0] // 4) * -(-out[1] // 4) >= (WINOGRAD_MIN_TILES_F32 if itemsize == 4 else WINOGRAD_MIN_TILES))


def _cache_bytes(level: int, default: int) -> int:
    """One core's cache of this level in bytes, from Linux's sysfs (`default` where it does not say)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            with open(os.path.join(base, entry, "level")) as f:
                if int(f.read()) != level:
                    continue
            with open(os.path.join(base, entry, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            return int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        pass
    return default


L2_BYTES = _cache_bytes(2, 1 << 20)


def _winograd_blocks(n_img, cg, m_out, th, wq, itemsize, nth):
    """(tile rows, output channels) of a conv_winograd unit, the blocking of least estimated time per thread.
    A unit transforms its tile rows' input (V: 36 x channels x tiles), runs the 36 GEMMs of its output channels'
    transformed weights (36 x channels x its channels, 4x the raw weights) over V, and transforms their products
    back. Its weights come from memory once per unit (a network reads each conv's once per run), V and the
    products stay in L2 when they fit and travel to memory and back when not; few, wide units re-read the weights
    least, but leave threads idle and spill V. Splitting the output channels over units halves each unit's weights
    and repeats the input transform. Why a model, not a byte budget for V: with V held to 1 MB, 512->512 convs
    over 28x28 pixels took one tile row a unit and read their 38 MB of weights 7 times a run (28.5 ms a conv on
    two threads; 7.0 ms with all the rows and half the channels a unit)."""
    packed = itemsize == 4 and WINOGRAD_PACKED
    mr, lanes = (packed_gemm.MR, LANES) if packed else (1, 1)
    best = None
    for splits in range(1, nth + 1):
        share = -(-m_out // splits)  # in whole panels of mr rows
        m_block = min(m_out, -(-share // mr) * mr)
        if splits > 1 and m_block < WINOGRAD_MIN_CHANNELS:
            break
        n_mb = -(-m_out // m_block)
        for tile_rows in range(1, th + 1):
            if tile_rows > 1 and -(-th // tile_rows) == -(-th // (tile_rows - 1)):
                continue  # as many blocks as one row fewer, and larger
            tiles = tile_rows * wq
            v = 36 * cg * tiles * itemsize
            products = 36 * m_block * tiles * itemsize
            spilled = (v if v > L2_BYTES // 2 else 0) + (products if products > L2_BYTES // 2 else 0)
            unit = (2 * 36 * cg * m_block * -(-tiles // lanes) * lanes * WINOGRAD_S_PER_FLOP
                    + 36 * cg * m_block * itemsize * WINOGRAD_S_PER_WEIGHT_BYTE
                    + spilled * WINOGRAD_S_PER_SPILLED_BYTE
                    + cg * tiles * WINOGRAD_S_PER_INPUT + m_block * tiles * WINOGRAD_S_PER_OUTPUT)
            cost = -(-(n_img * -(-th // tile_rows) * n_mb) // nth) * unit
            if best is None or cost < best[0]:
                best = (cost, tile_rows, m_block)
    return best[1], best[2]


def _packed_weights(w):
    u = packed_gemm.pack_panels(w)
    u.flags.writeable = False
    return u


def _winograd_weights(w):
    u = kconv.winograd_weights(w, w.dtype)
    u.flags.writeable = False
    return u


@register_op("NhwcConv", since=1, domain=FUSED_DOMAIN)
def build_nhwc_conv(node):
    """com.onnxjit NhwcConv in its depthwise form (group = C = M, 2-D, the layout pass's): the
    conv_depthwise_nhwc kernel over units (image, output row). Other forms run on the fallback provider."""
    act = activation_of(node)
    if not 2 <= len(node.inputs) <= 3 or float_type(node, range(3)) is None or wanted_outputs(node) != 1 \
            or act is None:
        return None
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    kernel_attr = attr(node, "kernel_shape")
    geometry = conv_attributes(node, 2, auto_pad)
    if auto_pad not in AUTO_PADS or geometry is None or rank_of(node, 0) not in (None, 4):
        return None
    group, strides, dilations, pads = geometry

    def run(x, w, b=None):
        n, h, wd, c = x.shape
        if w.shape != (c, 1) + w.shape[2:] or w.ndim != 4 or group != c or (
                kernel_attr is not None and list(kernel_attr) != list(w.shape[2:])):
            raise ValueError(f"NhwcConv: the CPU kernel runs depthwise convs (group = channels = {c}, W of shape "
                             f"[{c}, 1, KH, KW]); got group={group}, W {w.shape}")
        out, head = conv_geometry((h, wd), w.shape[2:], strides, dilations, pads, auto_pad)
        y = np.empty((n, out[0], out[1], c), dtype=x.dtype)
        bias = ro(b.reshape(-1) if b is not None else np.empty(0, dtype=x.dtype))
        wt = ro(np.ascontiguousarray(w[:, 0].transpose(1, 2, 0)))  # (KH, KW, C)
        run_units(kconv.conv_depthwise_nhwc, (ro(x), wt, bias, pad3(list(w.shape[2:]), 1), pad3(strides, 1),
                                               pad3(dilations, 1), pad3(head, 0), act.kind, act.consts(x.dtype), y),
                  n * out[0], y.size * w.shape[2] * w.shape[3])
        return (y,)

    return run


# --- pooling ---------------------------------------------------------------------------------------------------
def pool_attributes(node, max_rank: int):
    """(auto_pad, kernel, strides, dilations, pads, ceil_mode, count_include_pad) of a MaxPool / AveragePool node
    over at most `max_rank` spatial dims, or None when they are not valid for its input's rank."""
    auto_pad = attr(node, "auto_pad", "NOTSET") or "NOTSET"
    kernel = attr(node, "kernel_shape")
    if auto_pad not in AUTO_PADS or not kernel or not 1 <= len(kernel) <= max_rank:
        return None
    r = len(kernel)
    kernel = [int(k) for k in kernel]
    rk = rank_of(node, 0)
    if rk is not None and rk != r + 2:
        return None
    strides = _ints(attr(node, "strides"), r, 1)
    dilations = _ints(attr(node, "dilations"), r, 1)
    pads = _ints(attr(node, "pads"), 2 * r, 0)
    ceil_mode = int(attr(node, "ceil_mode", 0))
    cip = int(attr(node, "count_include_pad", 0)) != 0
    if len(strides) != r or len(dilations) != r or len(pads) != 2 * r:
        return None
    if min(kernel) < 1 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        return None
    return auto_pad, kernel, strides, dilations, pads, ceil_mode, cip


def _pool_builder(kind):
    def build(node):
        if len(node.inputs) != 1:
            return None
        if float_type(node, (0,)) is None and not (kind == "max" and _eight_bit_max_pool(node)):
            return None
        if kind == "max" and (wanted_outputs(node) != 1 or int(attr(node, "storage_order", 0)) != 0):
            return None  # the Indices output (and column-major indices) are left to the fallback
        attrs = pool_attributes(node, 3)
        return None if attrs is None else pool_runner(kind == "max", attrs)
    return build


def _eight_bit_max_pool(node) -> bool:
    """MaxPool-12 and later over int8 / uint8 (what QOperator-format quantized models keep between QLinearConvs)."""
    t = input_tensor_types(node)[0]
    return node.opset >= 12 and t is not None and t.elem_type in (TensorProto.INT8, TensorProto.UINT8)


def pool_runner(is_max: bool, attrs):
    """run(x, out=None) -> (y,): MaxPool (`is_max`) or AveragePool of float NCHW... arrays, with `attrs` as
    pool_attributes gives them; planned once per input shape and dtype (also com.microsoft's QLinearAveragePool's
    float average)."""
    auto_pad, kernel, strides, dilations, pads, ceil_mode, cip = attrs
    r = len(kernel)
    cache = {}

    def plan(xs, dtype):
        key = (xs, dtype)
        p = cache.get(key)
        if p is None:
            if len(xs) != r + 2:
                raise ValueError(f"pooling: input of shape {xs} does not have rank {r + 2}")
            out, head, tail = pool_geometry(xs[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
            i3, k3, s3, d3, p3, q3, o3 = (pad3(v, f) for v, f in ((xs[2:], 1), (kernel, 1), (strides, 1),
                                                                  (dilations, 1), (head, 0), (tail, 0), (out, 1)))
            padded = kpool.padded_plane(i3, o3, k3, s3, d3, p3)
            if is_max:  # no divisors
                divisors = (np.empty(0, dtype=dtype),) * 3
            else:
                divisors = tuple(kpool.pool_divisors(kpool.dim_table(o3[i], s3[i], p3[i], d3[i], k3[i], i3[i],
                                                                     q3[i]), cip, dtype) for i in range(3))
            planes = xs[0] * xs[1]
            # one window over the whole input (inception's last 7x7 average over 6x6 pixels and its padding):
            # a global pool, one loop per plane
            whole = (planes > 0 and all(o == 1 for o in o3) and all(v == 1 for v in d3)
                     and all(0 <= p3[i] and i3[i] <= k3[i] - p3[i] for i in range(3))
                     and (is_max or not cip or (not any(p3) and k3 == i3)))
            units = planes
            if whole:
                site = CallSite(kpool.global_max if is_max else kpool.global_avg)
            elif (dtype == np.float32 and i3[0] == k3[0] == padded[0] == 1
                  and padded[1] * padded[2] <= POOL_BLOCKED_MAX_PIXELS
                  and o3[1] * o3[2] <= POOL_BLOCKED_MAX_OUTPUTS):
                site = CallSite(kpool.pool_blocked)  # small planes: channels-last, LANES planes a unit
                units = -(-planes // LANES)
            else:
                site = CallSite(kpool.pool)  # types fixed by the key
            p = cache[key] = (xs[:2] + tuple(out), (planes,) + i3, (planes,) + o3, k3, s3, d3, p3, padded,
                              divisors, planes * math.prod(o3) * math.prod(k3), site, whole, units)
        return p

    def run(x, out=None):
        shape, xs, ys, k, s, d, p, padded, (fd, fh, fw), work, site, whole, units = plan(x.shape, x.dtype)
        if whole:
            y = np.empty(ys[0], dtype=x.dtype) if out is None else out.reshape(ys[0])
            args = (ro_reshaped(x, (ys[0], x.size // ys[0])), y)
            if deferred_compile.stands_in(site.kernel, args):
                stand_ins.global_pool(is_max, *args)
            else:
                site.run(args, ys[0], x.size)
            return (y.reshape(shape),)
        y = np.empty(ys, dtype=x.dtype) if out is None else out.reshape(ys)
        lowest = (np.finfo if x.dtype.kind == "f" else np.iinfo)(x.dtype).min
        pad_value = x.dtype.type(lowest if is_max else 0)
        args = (is_max, ro_reshaped(x, xs), k, s, d, p, padded, pad_value, fd, fh, fw, y)
        if deferred_compile.stands_in(site.kernel, args):
            stand_ins.pool(*args)
        else:
            site.run(args, units, work)
        return (y.reshape(shape),)
    run.writes_into = True  # as Conv's
    return run


build_max_pool = _pool_builder("max")
build_avg_pool = _pool_builder("avg")
for _v in (1, 8, 10, 11, 12):
    register_op("MaxPool", since=_v)(build_max_pool)
for _v in (1, 7, 10, 11, 19):
    register_op("AveragePool", since=_v)(build_avg_pool)


def _global_pool_builder(kernel):
    def build(node):
        if len(node.inputs) != 1 or float_type(node, (0,)) is None:
            return None
        rk = rank_of(node, 0)
        if rk is not None and rk < 2:
            return None
        sites = {}  # dtype -> the kernel's CallSite (the argument types depend on the dtype alone)

        def run(x):
            if x.ndim < 2:
                raise ValueError(f"global pooling needs an input of rank >= 2, got shape {x.shape}")
            rows = x.shape[0] * x.shape[1]
            size = x.size // rows if rows else 0
            if size == 0:
                raise ValueError(f"global pooling over an empty input of shape {x.shape}")
            y = np.empty(rows, dtype=x.dtype)
            site = sites.get(x.dtype)
            if site is None:
                site = sites[x.dtype] = CallSite(kernel)
            args = (ro_reshaped(x, (rows, size)), y)
            if deferred_compile.stands_in(kernel, args):
                stand_ins.global_pool(kernel is kpool.global_max, *args)
            else:
                site.run(args, rows, x.size)
            return (y.reshape(x.shape[:2] + (1,) * (x.ndim - 2)),)

        def native(x):
            site = sites.get(x.dtype) if type(x) is np.ndarray and x.ndim >= 2 else None
            rows = x.shape[0] * x.shape[1] if site is not None else 0
            if not rows or not x.size or x.size >= NATIVE_GRAIN:
                return None
            return NativeCall(site.kernel, [In(0, (rows, x.size // rows)), Out(0)], rows, [((rows,), x.dtype)],
                              [(0, x.shape[:2] + (1,) * (x.ndim - 2))], parallel=rows > 1 and x.size >= PARALLEL_GRAIN)
        run.native = native
        return run
    return build


register_op("GlobalAveragePool", since=1)(_global_pool_builder(kpool.global_avg))
register_op("GlobalMaxPool", since=1)(_global_pool_builder(kpool.global_max))


# --- BatchNormalization (inference) ----------------------------------------------------------------------------
def build_batchnorm(node):
    if len(node.inputs) != 5 or float_type(node, range(5)) is None or wanted_outputs(node) != 1:
        return None  # mean/var/saved outputs only exist in training mode
    if node.opset < 7 and int(attr(node, "is_test", 0)) == 0:
        return None
    if int(attr(node, "training_mode", 0)) != 0:
        return None
    eps = float(attr(node, "epsilon", 1e-5))
    spatial = int(attr(node, "spatial", 1)) if node.opset < 9 else 1

    folded = [None, None]  # (the parameter arrays, (a, b)) of the last call: constants fold once

    def fold(params, dtype, c, per):
        last = folded[0]
        if last is not None and all(p is q for p, q in zip(params, last[0])) and last[1][0].dtype == dtype \
                and not any(np.asarray(p).flags.writeable for p in params):  # read-only: initializers
            return last[1]
        scale, bias, mean, var = (np.asarray(p, dtype=np.float64).reshape(c, per) for p in params)
        a = scale / np.sqrt(var + eps)
        ab = (ro(a.astype(dtype)), ro((bias - mean * a).astype(dtype)))
        folded[0] = (params, ab)
        return ab

    def run(x, scale, bias, mean, var):
        if x.ndim < 2:
            raise ValueError(f"BatchNormalization needs an input of rank >= 2, got shape {x.shape}")
        n, c = x.shape[:2]
        size = x.size // (n * c) if n * c else 0
        a, b = fold((scale, bias, mean, var), x.dtype, c, 1 if spatial else size)
        y = np.empty((n, c, size), dtype=x.dtype)
        run_units(knn.batchnorm, (ro(x.reshape(n, c, size)), a, b, y), n * c, x.size)
        return (y.reshape(x.shape),)
    return run


for _v in (6, 7, 9, 14, 15):
    register_op("BatchNormalization", since=_v)(build_batchnorm)


# --- InstanceNormalization, LRN ------------------------------------------------------------------------------
@register_op("InstanceNormalization", since=1)
@register_op("InstanceNormalization", since=6)
def build_instance_norm(node):
    if len(node.inputs) != 3 or float_type(node, range(3)) is None or wanted_outputs(node) != 1:
        return None
    eps = float(attr(node, "epsilon", 1e-5))

    def run(x, scale, bias):
        if x.ndim < 2 or scale.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
            raise ValueError(f"InstanceNormalization: input of shape {x.shape} needs scale and B of shape "
                             f"({x.shape[1] if x.ndim >= 2 else 'C'},), got {scale.shape} and {bias.shape}")
        n, c = x.shape[:2]
        size = x.size // (n * c) if n * c else 0
        y = np.empty((n, c, size), dtype=x.dtype)
        if size:
            run_units(knn.instance_norm, (ro(x.reshape(n, c, size)), ro(scale), ro(bias), eps, y), n * c,
                      3 * x.size)
        return (y.reshape(x.shape),)
    return run


@register_op("LRN", since=1)
@register_op("LRN", since=13)
def build_lrn(node):
    if len(node.inputs) != 1 or float_type(node, (0,)) is None or wanted_outputs(node) != 1:
        return None
    size = int(attr(node, "size", 0))
    alpha, beta, bias = (float(attr(node, "alpha", 1e-4)), float(attr(node, "beta", 0.75)),
                         float(attr(node, "bias", 1.0)))
    if size < 1:
        return None

    def run(x):
        if x.ndim < 2:
            raise ValueError(f"LRN needs an input of rank >= 2 (N, C, ...), got shape {x.shape}")
        n, c = x.shape[:2]
        plane = x.size // (n * c) if n * c else 0
        y = np.empty((n, c, plane), dtype=x.dtype)
        if plane:
            run_units(knn.lrn, (ro(x.reshape(n, c, plane)), size, alpha, beta, bias, y), n * c, x.size * (size + 4))
        return (y.reshape(x.shape),)
    return run


# --- Dropout (inference) ---------------------------------------------------------------------------------------
def build_dropout(node):
    if not node.inputs or float_type(node, (0,)) is None:
        return None
    if node.opset < 7 and int(attr(node, "is_test", 0)) == 0:
        return None  # training mode: random
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        v = node.inputs[2]
        tm = None if v.const is None else np.asarray(v.const)
        feedable = node.graph is not None and any(g is v for g in node.graph.inputs)
        if tm is None or feedable or tm.size != 1 or bool(tm.reshape(-1)[0]):
            return None  # training_mode unknown at build time, or true: random
    n_out = wanted_outputs(node)
    if n_out == 2:
        mt = node.outputs[1].type
        if getattr(mt, "elem_type", None) is not None:
            mask_dtype = mt.dtype
        else:
            mask_dtype = np.dtype(bool) if node.opset >= 10 else node.inputs[0].type.dtype
        # what onnxruntime gives: an all-true mask from Dropout-12 on, all-false (zero) before
        keep = node.opset >= 12

        def run(x, *_):
            return (x, np.full(x.shape, keep, dtype=mask_dtype))
        return run
    return lambda x, *_: (x,)


for _v in (1, 6, 7, 10, 12, 13, 22):
    register_op("Dropout", since=_v)(build_dropout)
