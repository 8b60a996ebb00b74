"""Branch-free, vectorizable elementary functions for Numba-compiled kernels.

Why this module exists
----------------------
Numba lowers ``np.exp``, ``np.tanh``, ``math.erf`` ... to calls into the C
math library (``expf``, ``tanhf``, ``erf``).  Intel's SVML, which would give
LLVM vector versions of those calls, is not available with this llvmlite
build, so the call stays scalar: either the loop is not vectorized at all
(``tanhf``, ``erf``: an opaque call), or LLVM emits ``llvm.exp.v8f32``, which
the x86 backend expands back into eight scalar ``expf`` calls.  A fused
elementwise chain containing one ``np.tanh`` runs one element at a time.

The functions below are written in plain arithmetic instead: a range
reduction, a short polynomial, exponent manipulation through an integer
bitcast, and ``a if c else b`` selects for the special cases (LLVM turns these
into ``select`` instructions).  There are no libm calls and no data-dependent
branches, so a loop such as::

    for i in range(n):
        out[i] = vmath.tanh(x[i] * a + b)

is vectorized (``<8 x float>`` / ``<4 x double>`` with AVX2).

Usage from njit code
--------------------
``from onnxjit.kernels import vmath`` (or import the names), then call
``vmath.exp(x)`` etc. on *scalars* inside ``@njit`` / ``prange`` loops.
Each public name is a typing stub with a ``numba.extending.overload``:

* float32 argument -> float32 algorithm computed in float32 (fast path),
* float64 argument -> float64 algorithm,
* integer / bool   -> converted to float64.

The implementations are compiled with ``forceinline=True`` (LLVM
``alwaysinline``), ``error_model='numpy'`` and ``fastmath={'contract'}`` (FMA
fusion only).  They are inlined at the LLVM level rather than with numba's
``inline='always'`` IR inlining on purpose: IR inlining would re-lower the code
with the *caller's* flags, and a caller compiled with ``fastmath=True`` would
then be allowed to drop the NaN/inf selects and to reassociate away the
rounding tricks below.  LLVM inlining keeps our per-instruction flags, and
setting ``fastmath`` explicitly stops numba from inheriting the caller's.

Calling a public name from plain Python also works (scalars or arrays; it
runs the same compiled code) which is handy for tests and constant folding.

Accuracy (max error in ulps against float64 / long double references: float32
over every third float32 where the function is not saturated (tanh: every
float32), float64 over the samples of tests/test_vmath.py)
--------------------------------------------------------------------------
            exp   expm1  log   log1p  tanh  sigmoid  softplus  erf
float32     1.01  1.42   0.82  0.83   1.07  2.40     1.68      1.10
float64     0.97  1.73   0.80  0.75   1.05  1.70     1.57      2.0
(float32 relative error <= 1.8e-7 everywhere in the normal range.)

Special values follow C99/numpy: exp(+inf)=inf, exp(-inf)=0, overflow -> inf,
NaN -> NaN everywhere, log(0)=-inf, log(x<0)=NaN, tanh/erf(+-inf)=+-1,
sigmoid(+-inf)=1/0, odd functions keep the sign of zero.  Results in the
subnormal range are computed (not flushed): exp scales by 2**k in two
steps so that a subnormal result is rounded only once.
"""

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

__all__ = [
    "exp", "expm1", "log", "log1p", "tanh", "sigmoid", "softplus", "erf",
    "float_bits", "f32_from_bits", "f64_from_bits",
]

# Options for every implementation function.  See the module docstring.
_JIT = dict(forceinline=True, fastmath={"contract"}, error_model="numpy",
            cache=False)

_f32 = np.float32
_f64 = np.float64


# ---------------------------------------------------------------------------
# Bit casts (numba has no scalar ``.view``)
# ---------------------------------------------------------------------------

@intrinsic
def float_bits(typingctx, x):
    """Reinterpret a float32 / float64 as int32 / int64 (same bits)."""
    if isinstance(x, types.Float) and x.bitwidth in (32, 64):
        ity = types.int32 if x.bitwidth == 32 else types.int64

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(x.bitwidth))

        return ity(x), codegen
    return None


def _int_to_float_bits(builder, value, ity, bitwidth, llty):
    if ity.bitwidth > bitwidth:
        value = builder.trunc(value, ir.IntType(bitwidth))
    elif ity.bitwidth < bitwidth:
        ext = builder.sext if ity.signed else builder.zext
        value = ext(value, ir.IntType(bitwidth))
    return builder.bitcast(value, llty)


@intrinsic
def f32_from_bits(typingctx, i):
    """Reinterpret the low 32 bits of an integer as a float32."""
    if isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return _int_to_float_bits(builder, args[0], i, 32, ir.FloatType())

        return types.float32(i), codegen
    return None


@intrinsic
def f64_from_bits(typingctx, i):
    """Reinterpret a 64-bit integer as a float64."""
    if isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return _int_to_float_bits(builder, args[0], i, 64, ir.DoubleType())

        return types.float64(i), codegen
    return None


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def _poly(dtype, coeffs):
    """njit function ``p(u) = sum(coeffs[k] * u**k)`` as an unrolled Horner
    chain with the coefficients baked in as ``dtype`` constants."""
    ns = {"__name__": __name__}
    ns.update({"c%d" % k: dtype(c) for k, c in enumerate(coeffs)})
    n = len(coeffs)
    lines = ["def poly(u):", "    p = c%d" % (n - 1)]
    lines += ["    p = p * u + c%d" % k for k in range(n - 2, -1, -1)]
    lines.append("    return p")
    exec("\n".join(lines), ns)
    return njit(**_JIT)(ns["poly"])


@njit(**_JIT)
def _mul_pow2_f32(y, k):
    # y * 2**k for k in [-151, 129] built from exponent bits.  Two factors so
    # that each stays a normal float: 2**128 (overflow) and 2**-150 (subnormal
    # result, rounded once by the last multiply) both work.
    k1 = k >> 1
    k2 = k - k1
    return y * f32_from_bits((k1 + 127) << 23) * f32_from_bits((k2 + 127) << 23)


@njit(**_JIT)
def _mul_pow2_f64(y, k):
    # Same as _mul_pow2_f32 for k in [-1077, 1025].
    k1 = k >> 1
    k2 = k - k1
    return y * f64_from_bits((k1 + 1023) << 52) * f64_from_bits((k2 + 1023) << 52)


# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

_F_0 = _f32(0.0)
_F_1 = _f32(1.0)
_F_2 = _f32(2.0)
_F_HALF = _f32(0.5)
_F_INF = _f32(np.inf)
_F_NAN = _f32(np.nan)
_D_0 = 0.0
_D_1 = 1.0
_D_2 = 2.0
_D_HALF = 0.5
_D_INF = np.inf
_D_NAN = np.nan

# exp: x = k*ln2 + r.  k = round(x/ln2) is obtained without a float->int
# conversion: adding 1.5*2**23 (2**52) forces rounding to an integer and
# leaves k in the low mantissa bits.  ln2 is split in a "hi" part with
# trailing zero bits (k*hi is exact) and a small "lo" correction.
_F_LOG2E = _f32(1.4426950408889634)
_F_SHIFT = _f32(12582912.0)                  # 1.5 * 2**23
_F_SHIFT_BITS = 0x4B400000
_F_LN2_HI = _f32(0.693359375)
_F_LN2_LO = _f32(-2.12194440e-4)
_F_EXP_HI = _f32(89.0)       # exp(89) > FLT_MAX: overflows to inf below
_F_EXP_LO = _f32(-104.0)     # exp(-104) < 2**-150: rounds to 0
_F_TWO_M25 = _f32(2.0 ** -25)
_F_EXPM1_LO = _f32(-25.0)    # expm1(x) rounds to -1 below this

_D_LOG2E = 1.4426950408889634
_D_SHIFT = 6755399441055744.0                # 1.5 * 2**52
_D_SHIFT_BITS = 0x4338000000000000
_D_LN2_HI = 6.93147180369123816490e-01       # 0x3fe62e42fee00000
_D_LN2_LO = 1.90821492927058770002e-10       # 0x3dea39ef35793c76
_D_EXP_HI = 710.0
_D_EXP_LO = -746.0
_D_EXPM1_LO = -40.0

# expm1(r) = r + r**2 * Q(r) on |r| <= ln2/2 (minimax fits of exp's relative
# error: 3e-9 for float32, a twentieth of its half ulp, resp. 2e-19 for float64).
_expq_f32 = _poly(_f32, (
    0.4999999403953552, 0.1666652113199234, 0.04166838899254799,
    0.008368698880076408, 0.0013814520789310336))
_expq_f64 = _poly(_f64, (
    0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326141,
    0.0013888888888883752, 0.00019841269874800493, 2.4801587325533363e-05,
    2.7557255425746435e-06, 2.7557273661348637e-07, 2.510520637395701e-08,
    2.0914679376583935e-09))

# log (fdlibm / musl): x = 2**k * m with m in [sqrt(1/2), sqrt(2)), so
# f = m - 1 is small and log(1+f) = 2*atanh(s), s = f/(2+f), |s| <= 0.1716,
# converges fast in s**2.
_F_MIN_NORMAL = _f32(1.1754943508222875e-38)
_F_TWO23 = _f32(8388608.0)
_F_LOG_LN2_HI = _f32(0.6931381225585938)     # 0x3f317180
_F_LOG_LN2_LO = _f32(9.05800061445916e-06)   # 0x3717f7d1
_F_LG1 = _f32(0.6666666269302368)
_F_LG2 = _f32(0.40000972151756287)
_F_LG3 = _f32(0.2849878668785095)
_F_LG4 = _f32(0.24279078841209412)

_D_MIN_NORMAL = 2.2250738585072014e-308
_D_TWO54 = 18014398509481984.0
_D_LG1 = 6.666666666666735130e-01
_D_LG2 = 3.999999999940941908e-01
_D_LG3 = 2.857142874366239149e-01
_D_LG4 = 2.222219843214978396e-01
_D_LG5 = 1.818357216161805012e-01
_D_LG6 = 1.531383769920937332e-01
_D_LG7 = 1.479819860511658591e-01

# tanh: odd polynomial x + x**3 * P(x**2) for |x| < SMALL (no cancellation
# near 0), 1 - 2/(exp(2|x|) + 1) above.  float32 switches at 0.75 (minimax
# fit on [0, 0.75], rel. err 1.6e-9), where 2/(exp(2|x|) + 1) <= 0.37 is small
# enough that its rounding needs no correction (1.07 ulp at most, checked over
# every float32).
_F_TANH_SMALL = _f32(0.75)
_F_TANH_BIG = _f32(10.0)     # tanh(x) rounds to 1 for x > 9.1 (float32)
_D_TANH_SMALL = 0.625
_D_TANH_BIG = 22.0           # tanh(x) rounds to 1 for x > 19.1 (float64)
_tanhp_f32 = _poly(_f32, (
    -0.33333316445350647, 0.1333269476890564, -0.05389274284243584,
    0.02145211026072502, -0.007657388690859079, 0.0017370214918628335))
_tanhp_f64 = _poly(_f64, (
    -0.3333333333333333, 0.13333333333333042, -0.05396825396789699,
    0.021869488519008305, -0.008863235103240878, 0.0035921217511549622,
    -0.0014557754120478055, 0.0005896606577757043, -0.0002375906496055562,
    9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06))

# erf: |x| <= 1: erf = x + x*Q(x**2) (Q(0) = 2/sqrt(pi) - 1, so the leading
# term is exact); 1 < |x| <= B: erf = 1 - C(|x| - M) with C a polynomial fit of
# erfc on [1, B] (absolute error 1e-9 / 1e-17, which is what 1 - erfc needs);
# erf rounds to 1 beyond B.
_F_ERF_B = _f32(4.0)
_F_ERF_M = _f32(2.5)
_D_ERF_B = 6.0
_D_ERF_M = 3.5
_erfq_f32 = _poly(_f32, (
    0.12837916612625122, -0.3761262595653534, 0.11283594369888306,
    -0.02685421146452427, 0.005189087241888046, -0.000801686430349946,
    7.875874871388078e-05))
_erfq_f64 = _poly(_f64, (
    0.12837916709551256, -0.37612638903183543, 0.11283791670945006,
    -0.02686617064323777, 0.0052239776071164225, -0.0008548325975389692,
    0.00012055294904839707, -1.492473690741966e-05, 1.6447424703317362e-06,
    -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10))
_erfc_f32 = _poly(_f32, (
    0.00040695202187635005, -0.0021781802643090487, 0.005445702467113733,
    -0.00835182424634695, 0.008622514083981514, -0.006108916364610195,
    0.0027977789286524057, -0.0005606543854810297, -0.0002589991199783981,
    0.00027083599707111716, -8.093342330539599e-05, -1.7837624909589067e-05,
    1.5667485058656894e-05, -4.87990064357291e-07, -8.837966447572398e-07))
_erfc_f64 = _poly(_f64, (
    7.430983723439563e-07, -5.399426777385548e-06, 1.8897993720552932e-05,
    -4.2295509756092346e-05, 6.771781083867252e-05, -8.211628224109501e-05,
    7.774424634757985e-05, -5.819275060619765e-05, 3.4259175594768406e-05,
    -1.533076831625875e-05, 4.6410172874700625e-06, -4.4470360580526613e-07,
    -4.437733033624976e-07, 3.016696409301533e-07, -9.231606082515755e-08,
    5.7311094990526014e-09, 8.263509469732812e-09, -4.034643761376213e-09,
    7.044587117052157e-10, 1.4153127892512087e-10, -1.160801263998319e-10,
    2.5898870524585717e-11, 1.7395565808427347e-12, -2.6811175683751117e-12,
    6.628366427978472e-13, 2.0069638417166458e-14, -5.851696873183428e-14,
    1.3797102940049964e-14, 1.2525164786854401e-15, -1.2399309792375344e-15,
    1.265768941045506e-16, 5.2340529090436487e-17, -1.190296660842776e-17,
    -9.52181345143774e-19, 4.437909153177084e-19, -7.073363837679426e-21,
    -6.811613549036925e-21, 4.52877422867128e-22))


# ---------------------------------------------------------------------------
# Public stubs.  The Python bodies run the compiled code (see _py_eval); in
# njit code the overloads below are used.
# ---------------------------------------------------------------------------

def exp(x):
    """e**x."""
    return _py_eval(exp, x)


def expm1(x):
    """e**x - 1, accurate near 0."""
    return _py_eval(expm1, x)


def log(x):
    """Natural logarithm."""
    return _py_eval(log, x)


def log1p(x):
    """log(1 + x), accurate near 0."""
    return _py_eval(log1p, x)


def tanh(x):
    """Hyperbolic tangent."""
    return _py_eval(tanh, x)


def sigmoid(x):
    """Logistic function 1 / (1 + e**-x)."""
    return _py_eval(sigmoid, x)


def softplus(x):
    """log(1 + e**x), computed without overflow."""
    return _py_eval(softplus, x)


def erf(x):
    """Error function."""
    return _py_eval(erf, x)


# ---------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------

@njit(**_JIT)
def _exp_reduce_f32(x):
    # x = k*ln2 + r, |r| <= ln2/2.  Adding 1.5*2**23 rounds x/ln2 to an
    # integer and leaves k in the low mantissa bits of t, so k is read with a
    # bitcast (no float->int conversion, which would be UB for NaN).  k*ln2
    # is subtracted in two parts: k*LN2_HI is exact (LN2_HI has 9 bits).
    t = x * _F_LOG2E + _F_SHIFT
    kf = t - _F_SHIFT
    r = x - kf * _F_LN2_HI - kf * _F_LN2_LO
    return r, float_bits(t) - _F_SHIFT_BITS


@njit(**_JIT)
def _exp_reduce_f64(x):
    t = x * _D_LOG2E + _D_SHIFT
    kf = t - _D_SHIFT
    r = (x - kf * _D_LN2_HI) - kf * _D_LN2_LO
    return r, float_bits(t) - _D_SHIFT_BITS


@njit(**_JIT)
def _exp_narrow_f32(x):
    # exp(x) for |x| <= 87, where 2**k is a normal number: one scale factor.
    r, k = _exp_reduce_f32(x)
    p = r + r * r * _expq_f32(r)
    return (_F_1 + p) * f32_from_bits((k + 127) << 23)


@njit(**_JIT)
def _exp_narrow_f64(x):
    # exp(x) for |x| <= 708.
    r, k = _exp_reduce_f64(x)
    p = r + r * r * _expq_f64(r)
    return (_D_1 + p) * f64_from_bits((k + 1023) << 52)


@njit(**_JIT)
def _log_reduce_f32(x):
    # x = 2**k * m with m in [sqrt(1/2), sqrt(2)), so that log(m) is small and
    # the series below converges fast.  Returns (m - 1, k); x positive normal.
    ix = float_bits(x) + (0x3F800000 - 0x3F3504F3)
    k = (ix >> 23) - 127
    m = f32_from_bits((ix & 0x007FFFFF) + 0x3F3504F3)
    return m - _F_1, k


@njit(**_JIT)
def _log_reduce_f64(x):
    # Same on the high 32 bits (as fdlibm); the low word is carried along.
    ix = float_bits(x)
    hx = (ix >> 32) + (0x3FF00000 - 0x3FE6A09E)
    k = (hx >> 20) - 1023
    hx = (hx & 0x000FFFFF) + 0x3FE6A09E
    m = f64_from_bits((hx << 32) | (ix & 0xFFFFFFFF))
    return m - _D_1, k


@njit(**_JIT)
def _log_kernel_f32(f, dk, lo):
    # log(1 + f) + dk*ln2 + lo for f in [sqrt(1/2) - 1, sqrt(2) - 1] (musl
    # logf): log(1+f) = 2*atanh(s), s = f/(2+f), |s| <= 0.1716.
    s = f / (_F_2 + f)
    z = s * s
    w = z * z
    rr = z * (_F_LG1 + w * _F_LG3) + w * (_F_LG2 + w * _F_LG4)
    hfsq = _F_HALF * f * f
    return (s * (hfsq + rr) + (dk * _F_LOG_LN2_LO + lo) - hfsq + f
            + dk * _F_LOG_LN2_HI)


@njit(**_JIT)
def _log_kernel_f64(f, dk, lo):
    # fdlibm e_log.c, same scheme with a longer series.
    hfsq = _D_HALF * f * f
    s = f / (_D_2 + f)
    z = s * s
    w = z * z
    t1 = w * (_D_LG2 + w * (_D_LG4 + w * _D_LG6))
    t2 = z * (_D_LG1 + w * (_D_LG3 + w * (_D_LG5 + w * _D_LG7)))
    return (s * (hfsq + (t2 + t1)) + (dk * _D_LN2_LO + lo) - hfsq + f
            + dk * _D_LN2_HI)


# ---------------------------------------------------------------------------
# float32 implementations
# ---------------------------------------------------------------------------

def _exp_f32(x):
    # Clamp so that k stays in the range _mul_pow2 handles; the clamp values
    # still overflow to inf / underflow to 0.  Written "c if x > c else x" so
    # that NaN passes through.
    x = _F_EXP_HI if x > _F_EXP_HI else x
    x = _F_EXP_LO if x < _F_EXP_LO else x
    r, k = _exp_reduce_f32(x)
    p = r + r * r * _expq_f32(r)                     # expm1(r)
    return _mul_pow2_f32(_F_1 + p, k)


def _expm1_f32(x):
    x = _F_EXP_HI if x > _F_EXP_HI else x
    x = _F_EXPM1_LO if x < _F_EXPM1_LO else x
    r, k = _exp_reduce_f32(x)
    p = r + r * r * _expq_f32(r)                     # expm1(r)
    # expm1(x) = 2**k * (p + (1 - 2**-k)).  For k == 0 this is exactly p (no
    # cancellation near 0).  1 - 2**-k is exact for k <= 24; beyond, 2**-k
    # is folded into p first instead.  2**-k is irrelevant for k > 64.
    kc = k if k < 64 else 64
    tk = f32_from_bits((127 - kc) << 23)             # 2**-k
    q = p + (_F_1 - tk) if k <= 24 else (p - tk) + _F_1
    res = _mul_pow2_f32(q, k)
    return x if x == _F_0 else res                   # keep -0.0


def _log_f32(x):
    # Subnormals: scale into the normal range first so that the exponent
    # field read by _log_reduce is meaningful.
    sub = x < _F_MIN_NORMAL
    f, k = _log_reduce_f32(x * _F_TWO23 if sub else x)
    res = _log_kernel_f32(f, _f32(k - (23 if sub else 0)), _F_0)
    res = res if x < _F_INF else x                   # +inf -> inf, NaN -> NaN
    res = res if x >= _F_0 else _F_NAN               # x < 0 -> NaN
    return res if x != _F_0 else -_F_INF             # +-0 -> -inf


def _log1p_f32(x):
    u = _F_1 + x
    f, k = _log_reduce_f32(u)
    # k == 0 (u in [sqrt(1/2), sqrt(2))): use f = x itself so that the
    # rounding of 1 + x never enters.  Otherwise correct for it to first
    # order: log(1 + x) = log(u) + (x - (u - 1)) / u.
    c = (x - (u - _F_1)) / u
    f = x if k == 0 else f
    c = _F_0 if k == 0 else c
    res = _log_kernel_f32(f, _f32(k), c)
    res = res if x < _F_INF else x                   # +inf (inf - inf in c)
    res = -_F_INF if x == -_F_1 else res
    res = _F_NAN if x < -_F_1 else res
    return x if x == _F_0 else res                   # keep -0.0


def _tanh_f32(x):
    ax = abs(x)
    s = ax * ax
    small = ax + ax * s * _tanhp_f32(s)
    # |x| >= 0.75: tanh = 1 - 2/(E + 1), E = exp(2|x|) (clamped so that E
    # stays finite; tanh rounds to 1 well before).
    a = _F_TANH_BIG if ax > _F_TANH_BIG else ax
    big = _F_1 - _F_2 / (_exp_narrow_f32(a + a) + _F_1)
    res = small if ax < _F_TANH_SMALL else big
    return math.copysign(res, x)


def _sigmoid_f32(x):
    # e = exp(-|x|) in (0, 1]; sigmoid(x) = 1/(1+e) for x >= 0 and e/(1+e) for
    # x < 0 (no cancellation).  e is made as e25 = e * 2**25, a normal float
    # down to the clamp (exp(-104) * 2**25 > 2**-126), with one scale factor
    # and no exponent range check; the x < 0 quotient is scaled back by 2**-25,
    # exact unless the result is subnormal (rounded once more there).  Without
    # the two-factor scaling of exp and a Fast2Sum correction of 1 + e this
    # ran 1.6x as fast (x * sigmoid(x) over float32 on AVX-512: 0.57 against
    # 0.90 ns an element, Emerald Rapids) for 0.35 ulp more at most.
    m = -abs(x)
    m = _F_EXP_LO if m < _F_EXP_LO else m            # NaN passes
    r, k = _exp_reduce_f32(m)
    e25 = (_F_1 + (r + r * r * _expq_f32(r))) * f32_from_bits((k + (127 + 25)) << 23)
    pos = x >= _F_0
    q = (_F_1 if pos else e25) / (_F_1 + e25 * _F_TWO_M25)
    return q * (_F_1 if pos else _F_TWO_M25)


def _softplus_f32(x):
    # log(1 + e**x) = max(x, 0) + log1p(e**-|x|): no overflow, and full
    # relative accuracy for very negative x where the result is ~e**x.
    pos = x if x > _F_0 else _F_0
    return pos + log1p(exp(-abs(x)))


def _erf_f32(x):
    # |x| <= 1: x + x*Q(x**2).  1 < |x|: 1 - erfc(|x|) with erfc a polynomial
    # in |x| - 2.5 on [1, 4] (exact subtraction); erf rounds to 1 beyond 4.
    ax = abs(x)
    small = ax + ax * _erfq_f32(ax * ax)
    a = _F_ERF_B if ax > _F_ERF_B else ax
    big = _F_1 - _erfc_f32(a - _F_ERF_M)
    res = small if ax <= _F_1 else big
    return math.copysign(res, x)


# ---------------------------------------------------------------------------
# float64 implementations (same algorithms, longer polynomials)
# ---------------------------------------------------------------------------

def _exp_f64(x):
    x = _D_EXP_HI if x > _D_EXP_HI else x
    x = _D_EXP_LO if x < _D_EXP_LO else x
    r, k = _exp_reduce_f64(x)
    p = r + r * r * _expq_f64(r)
    return _mul_pow2_f64(_D_1 + p, k)


def _expm1_f64(x):
    x = _D_EXP_HI if x > _D_EXP_HI else x
    x = _D_EXPM1_LO if x < _D_EXPM1_LO else x
    r, k = _exp_reduce_f64(x)
    p = r + r * r * _expq_f64(r)
    kc = k if k < 64 else 64
    tk = f64_from_bits((1023 - kc) << 52)
    q = p + (_D_1 - tk) if k <= 53 else (p - tk) + _D_1
    res = _mul_pow2_f64(q, k)
    return x if x == _D_0 else res


def _log_f64(x):
    sub = x < _D_MIN_NORMAL
    f, k = _log_reduce_f64(x * _D_TWO54 if sub else x)
    res = _log_kernel_f64(f, _f64(k - (54 if sub else 0)), _D_0)
    res = res if x < _D_INF else x
    res = res if x >= _D_0 else _D_NAN
    return res if x != _D_0 else -_D_INF


def _log1p_f64(x):
    u = _D_1 + x
    f, k = _log_reduce_f64(u)
    c = (x - (u - _D_1)) / u
    f = x if k == 0 else f
    c = _D_0 if k == 0 else c
    res = _log_kernel_f64(f, _f64(k), c)
    res = res if x < _D_INF else x
    res = -_D_INF if x == -_D_1 else res
    res = _D_NAN if x < -_D_1 else res
    return x if x == _D_0 else res


def _tanh_f64(x):
    ax = abs(x)
    s = ax * ax
    small = ax + ax * s * _tanhp_f64(s)
    # Switching at 0.625, where t = 2/(E + 1) reaches 0.445, the rounding
    # error of E + 1 (exact by Fast2Sum, E >= 1) is folded back in, using
    # 1/(E + 1) = t/2.
    a = _D_TANH_BIG if ax > _D_TANH_BIG else ax
    e = _exp_narrow_f64(a + a)
    d = e + _D_1
    dd = (e - d) + _D_1
    t = _D_2 / d
    t = t - t * (dd * t * _D_HALF)
    big = _D_1 - t
    res = small if ax < _D_TANH_SMALL else big
    return math.copysign(res, x)


def _sigmoid_f64(x):
    e = exp(-abs(x))
    d = _D_1 + e
    dd = (_D_1 - d) + e
    pos = x >= _D_0
    q = (_D_1 if pos else e) / d
    rd = q if pos else _D_1 - q
    return q - q * (dd * rd)


def _softplus_f64(x):
    pos = x if x > _D_0 else _D_0
    return pos + log1p(exp(-abs(x)))


def _erf_f64(x):
    # As _erf_f32 with the erfc polynomial in |x| - 3.5 on [1, 6].
    ax = abs(x)
    small = ax + ax * _erfq_f64(ax * ax)
    a = _D_ERF_B if ax > _D_ERF_B else ax
    big = _D_1 - _erfc_f64(a - _D_ERF_M)
    res = small if ax <= _D_1 else big
    return math.copysign(res, x)


# ---------------------------------------------------------------------------
# Type dispatch
# ---------------------------------------------------------------------------

def _register(stub, impl_f32, impl_f64):
    def to_f64(x):
        return stub(np.float64(x))

    @overload(stub, jit_options=_JIT)
    def _ol(x):
        if isinstance(x, types.Float):
            if x.bitwidth == 32:
                return impl_f32
            if x.bitwidth == 64:
                return impl_f64
        elif isinstance(x, (types.Integer, types.Boolean)):
            return to_f64
        return None

    return _ol


_register(exp, _exp_f32, _exp_f64)
_register(expm1, _expm1_f32, _expm1_f64)
_register(log, _log_f32, _log_f64)
_register(log1p, _log1p_f32, _log1p_f64)
_register(tanh, _tanh_f32, _tanh_f64)
_register(sigmoid, _sigmoid_f32, _sigmoid_f64)
_register(softplus, _softplus_f32, _softplus_f64)
_register(erf, _erf_f32, _erf_f64)


# ---------------------------------------------------------------------------
# Python-level entry (not used from njit code)
# ---------------------------------------------------------------------------

_PY_KERNELS = {}


def _make_kernel(fn):
    @njit
    def kernel(a):
        out = np.empty_like(a)
        for i in range(a.size):
            out[i] = fn(a[i])
        return out
    return kernel


def _py_eval(fn, x):
    a = np.asarray(x)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    kernel = _PY_KERNELS.get(fn)
    if kernel is None:
        kernel = _PY_KERNELS[fn] = _make_kernel(fn)
    out = kernel(np.ascontiguousarray(a).ravel()).reshape(a.shape)
    return out[()] if out.ndim == 0 else out
