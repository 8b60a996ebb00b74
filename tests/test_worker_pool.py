"""onnxjit.worker_pool: every unit runs exactly once, on the caller and the workers, errors reach the caller, and
callers on several threads at once each get their whole job done; kernels of every argument kind go through the
native hand-off."""
from __future__ import annotations

import concurrent.futures
import threading

import numba
import numpy as np
import pytest

from onnxjit import worker_pool
from onnxjit.cache.jit import njit


@njit(cache=True, nogil=True)
def _count_units(hits, u0, u1):
    for u in range(u0, u1):
        hits[u] += 1


@pytest.fixture
def launched(monkeypatch):
    """From here on, True for each job run through the native hand-off, and False for each lookup of
    worker_pool._launcher that found no entry point (the job then ran on the caller). A CallSite looks the entry
    up once and keeps it, so the hand-off itself is counted, by wrapping what the lookup gives."""
    calls = []
    real_launcher = worker_pool._launcher

    def launcher(*a):
        found = real_launcher(*a)
        if found is None:
            calls.append(False)
            return None
        entry, launch = found

        def counted(*args):
            calls.append(True)
            return launch(*args)
        return entry, counted

    monkeypatch.setattr(worker_pool, "_launcher", launcher)
    return calls


@pytest.fixture
def two_threads():
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield numba.get_num_threads()
    numba.set_num_threads(before)


@pytest.mark.parametrize("n_units", [2, 3, 17, 1000])
def test_every_unit_runs_once(two_threads, n_units):
    for _ in range(50):  # many jobs in a row: workers poll between them
        hits = np.zeros(n_units, dtype=np.int64)
        worker_pool.run_units(_count_units, (hits,), n_units, worker_pool.PARALLEL_GRAIN)
        assert (hits == 1).all()


@pytest.mark.parametrize("work", [1, worker_pool.PARALLEL_GRAIN])
def test_call_site_runs_every_unit_once_and_keeps_the_compiled_entry(two_threads, launched, work):
    """A CallSite runs like run_units, on the caller alone (small work) or split; after its first call the serial
    path calls the kernel's compiled entry point (no type dispatch) and the split path the native hand-off it
    looked up once."""
    site = worker_pool.CallSite(_count_units)
    for _ in range(20):
        hits = np.zeros(17, dtype=np.int64)
        site.run((hits,), 17, work)
        assert (hits == 1).all()
    if work == 1:
        assert site._serial in [cres.entry_point for cres in _count_units.overloads.values()]
        assert not launched
    else:
        assert launched.count(True) >= 19


@njit(cache=True, nogil=True)
def _scale_units(x, u0, u1):
    for u in range(u0, u1):
        x[u] *= 2


def test_types_met_after_others_get_the_hand_off_once_compiled(two_threads, launched):
    """A kernel compiled for other argument types first (another model's, another dtype) still hands off new
    types once they are compiled: not finding them before the first call must not stick."""
    worker_pool.run_units(_scale_units, (np.ones(64, np.float64),), 64, 1)  # another signature, on the caller
    for _ in range(4):
        x = np.ones(64, np.int64)
        worker_pool.run_units(_scale_units, (x,), 64, worker_pool.PARALLEL_GRAIN)
        assert (x == 2).all()
    assert any(launched)


def test_call_site_of_a_python_callable_runs_on_the_caller(two_threads):
    seen = []
    site = worker_pool.CallSite(lambda hits, u0, u1: seen.append((u0, u1)))
    for _ in range(3):
        site.run((None,), 8, worker_pool.PARALLEL_GRAIN)
    assert seen == [(0, 8)] * 3


@njit(cache=True, nogil=True)
def _meet(started, met, polls, u0, u1):
    """Each share announces itself, then waits (up to `polls` polls) for the other: met[u0] = 1 when both ran at
    once, which only happens on two threads."""
    worker_pool._fetch_add(started, 0, 1)
    for _ in range(polls):
        if worker_pool._load_acquire(started, 0) >= 2:
            met[u0] = 1
            return
        worker_pool._pause()


def test_shares_run_on_the_workers_too(two_threads):
    if two_threads < 2:
        pytest.skip("one thread allowed: nothing to share")
    polls = 1 << 26  # seconds of polling: far longer than a worker takes to claim the other share
    started, met = np.zeros(1, np.int64), np.zeros(2, np.int64)
    _meet(started, met, 1, 0, 0)  # compiles (a first call runs on the caller alone)
    for _ in range(3):
        started[:] = 0
        met[:] = 0
        worker_pool.run_units(_meet, (started, met, polls), 2, worker_pool.PARALLEL_GRAIN)
        assert met.tolist() == [1, 1]


@njit(cache=True, nogil=True)
def _fail_on_last(hits, u0, u1):
    for u in range(u0, u1):
        if u == hits.size - 1:
            raise ValueError("the last unit failed")
        hits[u] += 1


def test_an_error_in_a_share_reaches_the_caller(two_threads):
    hits = np.zeros(8, dtype=np.int64)
    for _ in range(3):  # the first call compiles on the caller; later ones raise in a worker's share or the caller's
        with pytest.raises(ValueError, match="the last unit failed"):
            worker_pool.run_units(_fail_on_last, (hits,), 8, worker_pool.PARALLEL_GRAIN)
    hits = np.zeros(8, dtype=np.int64)  # the pool still works afterwards
    worker_pool.run_units(_count_units, (hits,), 8, worker_pool.PARALLEL_GRAIN)
    assert (hits == 1).all()


@njit(cache=True, nogil=True)
def _mixed_arguments(out, ro_in, shape, scale, flag, consts, u0, u1):
    for u in range(u0, u1):
        v = ro_in[u] * scale + consts[0] - consts[1]
        out[u] = v if flag else -v
        out[u] += shape[0] - shape[1]


def test_arguments_of_every_kind(two_threads):
    """Arrays (writable and read-only), tuples, floats, bools: unpacked by the share entry as the kernel's
    dispatcher would pass them."""
    src = np.arange(1000, dtype=np.float32)
    src.flags.writeable = False
    want = src * np.float32(2.5) + np.float32(1.5 - 0.5) + (7 - 3)
    for _ in range(3):
        out = np.zeros(1000, dtype=np.float32)
        worker_pool.run_units(_mixed_arguments, (out, src, (7, 3), np.float32(2.5), True, (1.5, 0.5)), 1000,
                              worker_pool.PARALLEL_GRAIN)
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_python_callables_run_on_the_caller(two_threads):
    names = []
    worker_pool.run_units(lambda u0, u1: names.append((threading.current_thread().name, u0, u1)), (), 4,
                          worker_pool.PARALLEL_GRAIN)
    assert names == [(threading.current_thread().name, 0, 4)]


def test_callers_on_several_threads(two_threads):
    def job(seed):
        out = []
        for _ in range(30):
            hits = np.zeros(64 + seed, dtype=np.int64)
            worker_pool.run_units(_count_units, (hits,), hits.size, worker_pool.PARALLEL_GRAIN)
            out.append(bool((hits == 1).all()))
        return all(out)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        assert all(ex.map(job, range(4)))


@pytest.mark.parametrize("images,group,kernel,stride", [(2, 1, 1, 1), (2, 1, 3, 2), (2, 4, 3, 1), (2, 8, 3, 1),
                                                        (1, 2, 3, 1), (1, 2, 3, 2)])  # the last: row tiles
def test_conv_kernels_through_the_native_hand_off(two_threads, monkeypatch, launched, images, group, kernel,
                                                 stride):
    """Real kernels (views of their arguments in inner loops, scratch allocations, the packed GEMM) split over
    the threads: every call parallel, as on big inputs, compared with onnxruntime."""
    from conftest import make_model, native_session, ort_run, tensor
    from onnx import TensorProto, helper, numpy_helper

    from onnxjit.ops import nn
    monkeypatch.setattr(worker_pool, "PARALLEL_GRAIN", 0)
    monkeypatch.setattr(nn, "PARALLEL_GRAIN", 0)  # the conv's plan: tiles for the threads
    rng = np.random.default_rng(0)
    c, m, size = 16, 24, 13
    w = numpy_helper.from_array(rng.standard_normal((m, c // group, kernel, kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, strides=[stride, stride],
                            pads=[kernel // 2] * 4)
    model = make_model([node], [tensor("x", TensorProto.FLOAT, [images, c, size, size])],
                       [tensor("y", TensorProto.FLOAT, None)], initializers=[w, b])
    x = rng.standard_normal((images, c, size, size)).astype(np.float32)
    sess = native_session(model)
    want = ort_run(model, {"x": x})[0]
    for _ in range(3):  # the first run compiles on the caller; the others go through the pool
        # float32 sums of up to 144 products summed in another order than onnxruntime's
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    assert any(launched)  # the native hand-off ran


def test_fused_kernels_split_over_the_threads(two_threads, launched):
    """Fused kernels big enough to split (fuser.codegen: the arrays sliced to each share's rows) with inputs
    broadcast along and across the split dimension, an elementwise chain and a reduction over the last axis,
    against onnxruntime."""
    from conftest import make_model, ort_run, tensor
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    b = numpy_helper.from_array(rng.standard_normal((1, 64, 1)).astype(np.float32), "b")
    s = numpy_helper.from_array(rng.standard_normal(600).astype(np.float32), "s")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=1),
             helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Tanh", ["m"], ["z"])]
    model = make_model(nodes, [tensor("x", TensorProto.FLOAT, [3, 64, 600])],
                       [tensor("y", TensorProto.FLOAT, None), tensor("z", TensorProto.FLOAT, None)],
                       initializers=[b, s, axes], opset=18)
    import onnxjit
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 2
    sess = onnxjit.InferenceSession(model.SerializeToString(), so)
    x = rng.standard_normal((3, 64, 600)).astype(np.float32)
    want = ort_run(model, {"x": x})
    for _ in range(3):  # the first run compiles on the caller; the others split
        got = sess.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-4)  # 600-term sums in another order
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
    assert sum(launched) >= 4  # both kernels, in the later runs, through the native hand-off
