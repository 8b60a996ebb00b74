"""Numba's cache of the hand-written kernels depends on every kernels/*.py, not only on each kernel's own file
(onnxjit/cache/kernel_locator.py): a kernel inlining vmath must not be served from a cache compiled against an
older vmath."""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

from onnxjit.cache.kernel_locator import KERNELS_DIR, KernelsCacheLocator, kernels_digest


def test_kernels_are_cached_through_the_locator():
    from onnxjit.kernels import conv, normalization
    for dispatcher in (normalization.rows, conv.conv_direct):
        locator = dispatcher._cache._impl.locator
        assert isinstance(locator, KernelsCacheLocator)
        assert locator.get_source_stamp()[1] == kernels_digest()


def test_functions_elsewhere_keep_numbas_locators(tmp_path):
    (tmp_path / "mod_elsewhere.py").write_text(textwrap.dedent("""\
        import numba

        @numba.njit(cache=True)
        def twice(x):
            return 2 * x
        """))
    spec = importlib.util.spec_from_file_location("mod_elsewhere", tmp_path / "mod_elsewhere.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not isinstance(mod.twice._cache._impl.locator, KernelsCacheLocator)


def test_digest_changes_with_any_kernel_file(tmp_path):
    for path in glob.glob(os.path.join(KERNELS_DIR, "*.py")):
        shutil.copy(path, tmp_path)
    assert kernels_digest(str(tmp_path)) == kernels_digest()
    vmath = tmp_path / "vmath.py"
    text = vmath.read_bytes()
    vmath.write_bytes(text + b"\n")
    assert kernels_digest(str(tmp_path)) != kernels_digest()
    vmath.write_bytes(text)
    (tmp_path / "new_family.py").write_text("")
    assert kernels_digest(str(tmp_path)) != kernels_digest()


_CHILD = r"""
import json, numpy as np
from onnxjit.kernels import normalization
v = int(normalization.row_max(np.array([7.0, -1.0], dtype=np.float32)))
print(json.dumps({"value": v, "hits": sum(normalization.row_max.stats.cache_hits.values()),
                  "misses": sum(normalization.row_max.stats.cache_misses.values())}))
"""


def _child(numba_cache) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(numba_cache))
    res = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_entry_stamped_with_another_digest_is_recompiled(tmp_path):
    """A second process loads the kernel from Numba's cache; after its index is stamped with another digest (as an
    edit to some other kernels/*.py would leave it), the next process compiles it again, and gets it right."""
    assert _child(tmp_path) == {"value": 7, "hits": 0, "misses": 1}
    assert _child(tmp_path) == {"value": 7, "hits": 1, "misses": 0}
    (index,) = glob.glob(str(tmp_path / "**" / "normalization.row_max-*.nbi"), recursive=True)
    with open(index, "rb") as f:
        version = pickle.load(f)
        (file_stamp, digest), overloads = pickle.loads(f.read())
    assert digest == kernels_digest()
    with open(index, "wb") as f:
        pickle.dump(version, f, protocol=-1)
        f.write(pickle.dumps(((file_stamp, "0" * 16), overloads), protocol=-1))
    assert _child(tmp_path) == {"value": 7, "hits": 0, "misses": 1}
    assert _child(tmp_path) == {"value": 7, "hits": 1, "misses": 0}
