"""onnxjit pins its own worker threads one to a core (onnxjit.affinity), never the calling thread: checked in new
processes, through each thread's CPU mask in /proc."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from onnxjit import affinity

CHILD = r"""
import json, os
import numpy as np
from onnx import TensorProto as TP, helper
import onnxjit
from onnxjit.ops.nn import run_units
from numba import njit

before = sorted(os.sched_getaffinity(0))
m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                        [helper.make_tensor_value_info("x", TP.FLOAT, [4])],
                                        [helper.make_tensor_value_info("y", TP.FLOAT, [4])]))
onnxjit.InferenceSession(m.SerializeToString()).run(None, {"x": np.ones(4, np.float32)})

@njit(nogil=True)
def noop(u0, u1):
    pass

for _ in range(2):  # the first call compiles on the caller; the second, with enough work, starts onnxjit's pool
    run_units(noop, (), 16, 1 << 30)
masks = {}
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/status") as f:
        masks[tid] = f.read().split("Cpus_allowed_list:")[1].split()[0]
print(json.dumps({"caller_before": before, "caller_after": sorted(os.sched_getaffinity(0)),
                  "main": masks[str(os.getpid())], "masks": masks}))
"""


def _child(env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in affinity.USER_PLACEMENT_VARIABLES}
    env.pop("ONNXJIT_PIN_THREADS", None)
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _single_core(mask: str) -> bool:
    return mask.isdigit()


def test_workers_pinned_one_to_a_core_caller_left_free():
    got = _child({})
    cores = affinity.allowed_cores()
    assert got["caller_before"] == got["caller_after"] == cores  # the caller's thread keeps its mask
    pinned = {t: m for t, m in got["masks"].items() if _single_core(m) and m != got["main"]}
    if len(cores) > 1:
        # onnxjit's pool worker, on the second core
        assert len(pinned) >= 1, got
        assert all(int(m) == affinity.core_of_worker(1, cores) for m in pinned.values()), got
    else:
        assert not pinned, got


@pytest.mark.parametrize("env", [{"ONNXJIT_PIN_THREADS": "0"}, {"OMP_PROC_BIND": "false"}])
def test_pinning_off_when_asked_or_when_the_user_places_openmp_threads(env):
    got = _child(env)
    assert not any(_single_core(m) for m in got["masks"].values()) or len(affinity.allowed_cores()) == 1, got


def test_core_of_worker_wraps_over_the_allowed_cores():
    assert [affinity.core_of_worker(k, [2, 5]) for k in range(4)] == [2, 5, 2, 5]


STEP_ASIDE_CHILD = r"""
import json, os, time
from numba import njit
from onnxjit import worker_pool
from onnxjit.ops.nn import run_units

@njit(nogil=True)
def noop(u0, u1):
    pass

for _ in range(2):  # starts onnxjit's pool and its pinned worker
    run_units(noop, (), 16, 1 << 30)
for _ in range(100):
    if worker_pool._pool._pins:
        break
    time.sleep(0.01)
(k, (tid, core)), = worker_pool._pool._pins.items()
os.sched_setaffinity(0, {core})  # here the test puts the caller on the worker's core (the library never pins it)
time.sleep(10 * worker_pool.CORE_CHECK_SECONDS)  # (a job checks the caller's core at most this often)
run_units(noop, (), 16, 1 << 30)  # the job's start moves the worker
after = sorted(os.sched_getaffinity(tid))
run_units(noop, (), 16, 1 << 30)  # the pool still runs jobs
print(json.dumps({"worker_core": core, "worker_after": after, "caller": sorted(os.sched_getaffinity(0)),
                  "pins": {str(k): v for k, v in worker_pool._pool._pins.items()}}))
"""


def test_a_worker_on_the_callers_core_steps_aside():
    """A parallel job whose calling thread finds itself on a pinned worker's core moves the worker to the other
    core (two threads on one core ran every parallel kernel at half speed until the scheduler moved the
    caller)."""
    cores = affinity.allowed_cores()
    if len(cores) < 2:  # no pinning on one core: the pool has no pins to move
        assert not affinity.pinning_enabled()
        return
    env = {k: v for k, v in os.environ.items() if k not in affinity.USER_PLACEMENT_VARIABLES}
    env.pop("ONNXJIT_PIN_THREADS", None)
    out = subprocess.run([sys.executable, "-c", STEP_ASIDE_CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["caller"] == [got["worker_core"]]
    assert len(got["worker_after"]) == 1 and got["worker_after"][0] != got["worker_core"], got
    assert list(got["pins"].values())[0][1] == got["worker_after"][0]


def test_core_to_step_aside_to_picks_the_least_loaded_other_core():
    assert affinity.core_to_step_aside_to(1, [1], [0, 1]) == 0
    assert affinity.core_to_step_aside_to(2, [1, 2, 3], [0, 1, 2, 3]) == 0
    assert affinity.core_to_step_aside_to(1, [0, 1], [0, 1]) is None  # every core has a worker: nowhere better
