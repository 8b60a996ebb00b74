"""Accuracy, special values and vectorization of onnxjit.kernels.vmath.

Every function is evaluated through an njit'd loop over an array (the way the
generated kernels call it) and compared with a higher-precision reference:
float64 numpy for float32 inputs, long double numpy for float64 inputs
(scipy's float64 erf for erf).  Errors are measured in ulps of the target type
at the reference value.
"""

import functools
import math
import re

import numpy as np
import numba
import pytest
from numba import njit, prange, types

from onnxjit.kernels import vmath

FUNCS = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "softplus", "erf"]
DTYPES = [np.float32, np.float64]

# long double is only a better reference where it has more mantissa bits.
_LD_EXTENDED = np.finfo(np.longdouble).nmant > 60

# Max error in ulps (the measured values are ~0.3-0.5 ulp lower).
_ULP_TOL = {
    np.float32: {"exp": 1.5, "expm1": 1.75, "log": 1.25, "log1p": 1.25,
                 "tanh": 1.5, "sigmoid": 2.5, "softplus": 2.0, "erf": 1.5},
    # erf is compared with scipy's float64 erf, itself good to ~1 ulp.
    np.float64: {"exp": 1.5, "expm1": 2.25, "log": 1.25, "log1p": 1.25,
                 "tanh": 1.75, "sigmoid": 2.5, "softplus": 2.0, "erf": 3.0},
}
_F32_MAX_REL = 2e-7


def _erf_ref(x64):
    try:
        from scipy.special import erf as sp_erf
    except ImportError:  # pragma: no cover
        return np.vectorize(math.erf, otypes=[np.float64])(x64)
    return sp_erf(x64)


def _reference(name, x, dtype):
    wide = np.float64 if dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        w = x.astype(wide)
        if name == "exp":
            return np.exp(w)
        if name == "expm1":
            return np.expm1(w)
        if name == "log":
            return np.log(w)
        if name == "log1p":
            return np.log1p(w)
        if name == "tanh":
            return np.tanh(w)
        if name == "sigmoid":
            return wide(1) / (wide(1) + np.exp(-w))
        if name == "softplus":
            return np.logaddexp(wide(0), w)
        if name == "erf":
            return _erf_ref(x.astype(np.float64)).astype(wide)
    raise AssertionError(name)


_KERNELS = {}


def _kernel(name):
    """njit'd elementwise loop calling vmath.<name> (compiled once)."""
    if name not in _KERNELS:
        fn = getattr(vmath, name)

        @njit
        def loop(x, out):
            for i in range(x.size):
                out[i] = fn(x[i])

        _KERNELS[name] = loop
    return _KERNELS[name]


def _run(name, x):
    out = np.empty_like(x)
    _kernel(name)(x, out)
    return out


def _bits_type(dtype):
    return np.uint32 if dtype == np.float32 else np.uint64


def _neighbours(dtype, points, nsteps=32, nlin=101, width=1e-3):
    """Each point, its +-nsteps ulp neighbours and a small linear window."""
    ity = _bits_type(dtype)
    out = []
    for p in points:
        p = dtype(p)
        if p == 0:
            out.append(np.arange(0, nsteps, dtype=ity).view(dtype))
            continue
        b = np.array([abs(p)], dtype=dtype).view(ity)[0]
        steps = np.arange(-nsteps, nsteps + 1, dtype=np.int64)
        mags = (np.int64(b) + steps).astype(ity).view(dtype)
        out.append(np.copysign(mags, p))
        with np.errstate(over="ignore"):
            out.append((p * (1 + np.linspace(-width, width, nlin))).astype(dtype))
    return np.concatenate(out)


def _thresholds(dtype):
    fi = np.finfo(dtype)
    if dtype == np.float32:
        special = [88.72283, 88.72284, 89.0, -87.33655, -103.27893, -103.97208,
                   -104.0, 17.0, 24.0, -17.5, -25.0, 9.01, 10.0, 3.83, 4.0]
    else:
        special = [709.782712893384, 710.0, -708.3964185322641,
                   -744.4400719213812, -745.1332191019412, -746.0, 36.7, 37.5,
                   -38.0, -40.0, 19.06, 22.0, 5.92, 6.0]
    common = [0.0, 0.5, 1.0, 2.0, 0.625, 0.34657359, 0.70710678, 1.41421356,
              0.29289322, 0.41421356, -0.5, -0.99, -0.999999, 1e-5, 1e-20]
    pts = [float(fi.tiny), float(fi.smallest_subnormal) * 7, float(fi.max)]
    pts += common + special
    return pts + [-p for p in pts]


@functools.lru_cache(maxsize=None)
def _inputs(dtype):
    fi = np.finfo(dtype)
    rng = np.random.default_rng(20240611)
    ity = _bits_type(dtype)
    n = 60_000
    # Log-spaced over the whole finite range, both signs (incl. subnormals).
    with np.errstate(over="ignore"):
        mags = np.geomspace(float(fi.smallest_subnormal), float(fi.max), n)
    # Uniformly random bit patterns: every binade, every mantissa pattern.
    bits = rng.integers(0, np.iinfo(ity).max, n, dtype=ity, endpoint=True).view(dtype)
    bits = bits[np.isfinite(bits)]
    # Subnormals.
    sub = rng.integers(1, 1 << fi.nmant, 20_000, dtype=np.int64).astype(ity).view(dtype)
    # Dense where the functions are not saturated, and near 0.
    lin = np.linspace(-12.0, 12.0, n)
    near0 = np.geomspace(1e-12, 1.0, 30_000)
    near1 = 1.0 + np.linspace(-0.5, 0.5, 30_000)   # log around 1
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    parts = [mags, -mags, lin, near0, -near0, near1, -near1, specials]
    xs = np.concatenate([p.astype(dtype) for p in parts]
                        + [bits, sub, -sub, _neighbours(dtype, _thresholds(dtype))])
    return np.ascontiguousarray(xs, dtype=dtype)


def _ulp_error(y, ref, dtype):
    """|y - ref| in ulps of dtype at ref (the binade of the exact value)."""
    fi = np.finfo(dtype)
    wide = ref.dtype.type
    # An infinite result counts as the next power of two above max, and so
    # does any reference beyond it (which rounds to inf).
    big = np.ldexp(wide(1), fi.maxexp)
    yw = np.where(np.isinf(y), np.copysign(big, y.astype(wide)), y.astype(wide))
    ref = np.clip(ref, -big, big)
    _, e = np.frexp(np.abs(ref))
    ulp = np.ldexp(wide(1), np.maximum(e - 1 - fi.nmant, fi.minexp - fi.nmant))
    with np.errstate(invalid="ignore"):
        return np.abs(yw - ref) / ulp


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUNCS)
def test_accuracy(name, dtype):
    x = _inputs(dtype)
    y = _run(name, x)
    assert y.dtype == dtype
    ref = _reference(name, x, dtype)

    nan_ref = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(y), nan_ref, err_msg="NaN mismatch")
    inf_ref = np.isinf(ref)
    np.testing.assert_array_equal(y[inf_ref], ref[inf_ref].astype(dtype))

    ok = ~(nan_ref | inf_ref)
    err = _ulp_error(y[ok], ref[ok], dtype)
    tol = _ULP_TOL[dtype][name] + (0 if dtype == np.float32 or _LD_EXTENDED else 1.0)
    i = int(np.argmax(err))
    assert err[i] <= tol, (
        f"{name}({x[ok][i]!r}) = {y[ok][i]!r}, reference {ref[ok][i]!r}: "
        f"{float(err[i]):.3f} ulp > {tol}")

    if dtype == np.float32:
        fi = np.finfo(np.float32)
        normal = (np.abs(ref[ok]) >= fi.tiny) & (np.abs(ref[ok]) <= fi.max)
        rel = np.abs(y[ok][normal] - ref[ok][normal]) / np.abs(ref[ok][normal])
        j = int(np.argmax(rel))
        assert rel[j] <= _F32_MAX_REL, (
            f"{name}({x[ok][normal][j]!r}): relative error {rel[j]:.3g}")


_INF = np.inf
_NAN = np.nan
# (input, expected); expected compared exactly, including the sign of zero.
_SPECIALS = {
    "exp": [(_INF, _INF), (-_INF, 0.0), (_NAN, _NAN), (0.0, 1.0), (-0.0, 1.0),
            (1e4, _INF), (-1e4, 0.0)],
    "expm1": [(_INF, _INF), (-_INF, -1.0), (_NAN, _NAN), (0.0, 0.0),
              (-0.0, -0.0), (1e4, _INF), (-1e4, -1.0)],
    "log": [(0.0, -_INF), (-0.0, -_INF), (-1.0, _NAN), (-_INF, _NAN),
            (_INF, _INF), (_NAN, _NAN), (1.0, 0.0)],
    "log1p": [(-1.0, -_INF), (-2.0, _NAN), (-_INF, _NAN), (_INF, _INF),
              (_NAN, _NAN), (0.0, 0.0), (-0.0, -0.0)],
    "tanh": [(_INF, 1.0), (-_INF, -1.0), (_NAN, _NAN), (0.0, 0.0),
             (-0.0, -0.0), (1e4, 1.0), (-1e4, -1.0)],
    "sigmoid": [(_INF, 1.0), (-_INF, 0.0), (_NAN, _NAN), (0.0, 0.5),
                (-0.0, 0.5), (1e4, 1.0), (-1e4, 0.0)],
    "softplus": [(_INF, _INF), (-_INF, 0.0), (_NAN, _NAN), (-1e4, 0.0),
                 (1e4, 1e4)],
    "erf": [(_INF, 1.0), (-_INF, -1.0), (_NAN, _NAN), (0.0, 0.0),
            (-0.0, -0.0), (1e4, 1.0), (-1e4, -1.0)],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUNCS)
def test_special_values(name, dtype):
    x = np.array([a for a, _ in _SPECIALS[name]], dtype=dtype)
    expected = np.array([b for _, b in _SPECIALS[name]], dtype=dtype)
    y = _run(name, x)
    for xi, yi, ei in zip(x, y, expected):
        if np.isnan(ei):
            assert np.isnan(yi), f"{name}({xi!r}) = {yi!r}, expected nan"
        else:
            assert yi == ei and np.signbit(yi) == np.signbit(ei), \
                f"{name}({xi!r}) = {yi!r}, expected {ei!r}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_tiny_and_subnormal_arguments(dtype):
    fi = np.finfo(dtype)
    x = np.array([fi.smallest_subnormal, fi.tiny, 1e-30, 1e-20], dtype=dtype)
    x = np.concatenate([x, -x])
    # odd functions with f'(0) = 1 return x itself: no cancellation near 0
    for name in ("expm1", "log1p", "tanh"):
        np.testing.assert_array_equal(_run(name, x), x, err_msg=name)
    np.testing.assert_array_equal(_run("exp", x), np.ones_like(x))
    np.testing.assert_array_equal(_run("sigmoid", x), np.full_like(x, 0.5))
    two_over_sqrtpi = 2.0 / math.sqrt(math.pi)
    np.testing.assert_allclose(_run("erf", x[2:4]), two_over_sqrtpi * x[2:4],
                               rtol=2 * fi.eps)
    # log of subnormals: exact exponent handling
    k = np.arange(fi.nmant)
    sub = np.ldexp(dtype(1), fi.minexp - 1 - k).astype(dtype)
    ref = (fi.minexp - 1 - k) * np.log(np.longdouble(2))
    np.testing.assert_allclose(_run("log", sub), ref.astype(dtype), rtol=2 * fi.eps)


# --------------------------------------------------------------------------
# Vectorization: inspect the optimized LLVM IR of the loop.
# --------------------------------------------------------------------------

_LIBM_INTRINSIC = re.compile(
    r"llvm\.(exp|exp2|exp10|log|log2|log10|pow|powi|sin|cos|tan|tanh|sinh|"
    r"cosh|asin|acos|atan|atan2)\.")


def _loop_ir(loop, sig):
    """The optimized IR of the compiled function itself (not its wrapper)."""
    ir = loop.inspect_llvm(sig)
    mangled = loop.overloads[sig].fndesc.mangled_name
    start = None
    for m in re.finditer(r"^define [^\n]*@\"?([^\s(\"]+)\"?\(", ir, re.M):
        if m.group(1) == mangled:
            start = m.start()
    assert start is not None, "function body not found in IR"
    end = ir.index("\n}", start)
    return ir[start:end]


def _vectorization_problems(body, fptype):
    problems = []
    if not re.search(r"<\d+ x %s>" % fptype, body):
        problems.append("no <N x %s> vector values" % fptype)
    for callee in sorted(set(re.findall(r"call [^@\n]*@\"?([\w.$]+)", body))):
        if not callee.startswith("llvm.") or _LIBM_INTRINSIC.match(callee):
            problems.append("call to %s" % callee)
    return problems


def _compiled_loop(loop, dtype):
    x = np.linspace(0.5, 2.0, 64).astype(dtype)
    loop(x, np.empty_like(x))
    sig = [s for s in loop.signatures if s[0].dtype == numba.from_dtype(dtype)]
    return loop, sig[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", FUNCS)
def test_loop_vectorizes(name, dtype):
    # the same loop the accuracy tests run: out[i] = vmath.<name>(x[i])
    loop, sig = _compiled_loop(_kernel(name), dtype)
    fptype = "float" if dtype == np.float32 else "double"
    assert _vectorization_problems(_loop_ir(loop, sig), fptype) == []


@pytest.mark.skipif(numba.config.USING_SVML,
                    reason="with SVML, LLVM vectorizes np.exp itself")
def test_vectorization_check_detects_libm_loop():
    # Control: the same check flags loops calling np.exp / np.tanh.  (LLVM
    # may still emit llvm.exp.v8f32 for np.exp, which the x86 backend expands
    # into 8 scalar expf calls; the call check catches it.)
    for fn, libm in ((np.exp, ("llvm.exp", "expf")), (np.tanh, ("tanhf",))):
        @njit
        def libm_loop(x, out):
            for i in range(x.size):
                out[i] = fn(x[i])

        loop, sig = _compiled_loop(libm_loop, np.float32)
        problems = _vectorization_problems(_loop_ir(loop, sig), "float")
        assert any(p.startswith("call to " + name) for p in problems
                   for name in libm), problems


# --------------------------------------------------------------------------
# Typing, helpers and other call styles
# --------------------------------------------------------------------------

def test_result_types():
    @njit
    def f(v):
        return vmath.tanh(v)

    f(np.float32(0.5))
    f(np.float64(0.5))
    f(np.int64(1))
    rtypes = {s[0]: f.overloads[s].signature.return_type for s in f.signatures}
    assert rtypes[types.float32] == types.float32
    assert rtypes[types.float64] == types.float64
    assert rtypes[types.int64] == types.float64
    assert f(np.int64(1)) == pytest.approx(math.tanh(1.0), rel=1e-15)


def test_bitcast_intrinsics():
    @njit
    def roundtrip(a, b):
        ia = vmath.float_bits(a)
        ib = vmath.float_bits(b)
        return ia, ib, vmath.f32_from_bits(ia), vmath.f64_from_bits(ib)

    a, b = np.float32(-1.5), np.float64(3.25)
    ia, ib, ra, rb = roundtrip(a, b)
    assert ia == np.array([a]).view(np.int32)[0]
    assert ib == np.array([b]).view(np.int64)[0]
    assert ra == a and rb == b


def test_python_level_call():
    x = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
    y = vmath.exp(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.exp(x.astype(np.float64)), rtol=2e-7)
    assert vmath.log(1.0) == 0.0
    assert isinstance(vmath.erf(np.float64(0.5)), np.float64)


@njit(fastmath=True)
def _all_funcs_fastmath(x, out):
    for i in range(x.size):
        v = x[i]
        out[0, i] = vmath.exp(v)
        out[1, i] = vmath.expm1(v)
        out[2, i] = vmath.log(v)
        out[3, i] = vmath.log1p(v)
        out[4, i] = vmath.tanh(v)
        out[5, i] = vmath.sigmoid(v)
        out[6, i] = vmath.softplus(v)
        out[7, i] = vmath.erf(v)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_fastmath_caller_gets_identical_results(dtype):
    # A caller compiled with fastmath=True must not change our results (our
    # code keeps its own flags; see the vmath docstring).
    x = _inputs(dtype)[::5].copy()
    out = np.empty((len(FUNCS), x.size), dtype=dtype)
    _all_funcs_fastmath(x, out)
    for row, name in zip(out, FUNCS):
        np.testing.assert_array_equal(row, _run(name, x), err_msg=name)


def test_fused_chain_parallel_and_fastmath_caller():
    # The motivating use: an 8-node elementwise chain in one prange loop, with
    # the caller compiled with fastmath (must not break our special values).
    @njit(parallel=True, fastmath=True)
    def chain(x, out, a, b, c, d):
        for i in prange(x.size):
            out[i] = np.sqrt(abs(vmath.sigmoid(vmath.tanh(x[i] * a + b) * c) - d))

    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    x[:3] = [np.inf, -np.inf, np.nan]
    a, b, c, d = (np.float32(v) for v in (1.3, 0.2, 2.1, 0.4))
    out = np.empty_like(x)
    chain(x, out, a, b, c, d)
    xd = x.astype(np.float64)
    s = 1.0 / (1.0 + np.exp(-np.tanh(xd * float(a) + float(b)) * float(c)))
    ref = np.sqrt(np.abs(s - float(d)))
    # sqrt(|s - d|) amplifies the error of s near s == d: absolute tolerance
    np.testing.assert_allclose(out[3:], ref[3:], rtol=1e-6, atol=1e-3)
    assert np.isfinite(out[:2]).all() and np.isnan(out[2])
