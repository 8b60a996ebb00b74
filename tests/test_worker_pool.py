"""onnxjit.worker_pool: every unit runs exactly once, on the caller and the workers, errors reach the caller, and
callers on several threads at once each get their whole job done."""
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


def test_shares_run_on_the_workers_too(two_threads):
    if two_threads < 2:
        pytest.skip("one thread allowed: nothing to share")
    names = set()

    def note(u0, u1):
        names.add(threading.current_thread().name)
        threading.Event().wait(0.01)  # long enough for a worker to claim the other share

    worker_pool.run_units(note, (), 2, worker_pool.PARALLEL_GRAIN)
    assert any(n.startswith("onnxjit-cpu") for n in names), names


def test_an_error_in_a_share_reaches_the_caller(two_threads):
    def fail_on_last(u0, u1):
        if u1 == 8:
            raise ValueError("unit 7 failed")

    with pytest.raises(ValueError, match="unit 7 failed"):
        worker_pool.run_units(fail_on_last, (), 8, worker_pool.PARALLEL_GRAIN)
    hits = np.zeros(8, dtype=np.int64)  # the pool still works afterwards
    worker_pool.run_units(_count_units, (hits,), 8, worker_pool.PARALLEL_GRAIN)
    assert (hits == 1).all()


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
