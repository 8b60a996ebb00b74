"""The on-disk kernel cache (onnxjit.cache.store): hits across processes, concurrent fills, corrupt entries,
unusable / disabled directories, ONNXJIT_ASSERT_CACHED, and the key."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from onnxjit import config
from onnxjit.cache import store as store_mod
from onnxjit.cache.store import CacheMissError, KernelStore

N = 64


def _source(c: float, parallel: bool = False) -> str:
    """A tiny elementwise kernel out = x * c + 1, in the fuser's format."""
    loop = "numba.prange" if parallel else "range"
    return textwrap.dedent(f"""\
        import numpy as np
        import numba

        @numba.njit("void(float32[::1], float32[::1], int64)", cache=CACHE, parallel={parallel})
        def kernel(x, out, n):
            for i in {loop}(n):
                out[i] = x[i] * np.float32({c!r}) + np.float32(1.0)
        """)


def _inputs():
    return np.linspace(-2.0, 3.0, N).astype(np.float32)


def _expected(c: float):
    return _inputs() * np.float32(c) + np.float32(1.0)


def _run(result, c: float) -> None:
    x = _inputs()
    out = np.full_like(x, np.nan)
    result.kernel(x, out, x.size)
    np.testing.assert_allclose(out, _expected(c), rtol=1e-6)


def _forget(result) -> None:
    """Drop the in-process module so the next load goes to disk again."""
    sys.modules.pop(result.module.__name__, None)


def _files(root) -> list[str]:
    if not os.path.exists(root):
        return []
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


# --------------------------------------------------------------------------- in process


def test_load_compiles_then_hits_disk_then_reuses(tmp_path, monkeypatch, caplog):
    store = KernelStore(tmp_path)
    src = _source(2.0)
    monkeypatch.setattr(config, "DEBUG", 3)  # ONNXJIT_DEBUG >= 3 logs the generated source
    with caplog.at_level(logging.INFO, logger="onnxjit"):
        r1 = store.load(src)
    assert any(src in r.getMessage() for r in caplog.records)
    assert (r1.compiled, r1.loaded, r1.reused, r1.persistent) == (1, 0, False, True)
    assert r1.path == store.entry_path(src) and open(r1.path).read() == src
    assert r1.module.CACHE is True
    _run(r1, 2.0)

    r2 = store.load(src)  # same process: the module is reused
    assert r2.reused and r2.module is r1.module and r2.from_cache

    _forget(r2)
    r3 = store.load(src)  # fresh module: numba's on-disk cache
    assert (r3.compiled, r3.loaded, r3.reused) == (0, 1, False)
    assert r3.module is not r1.module
    _run(r3, 2.0)

    names = _files(tmp_path)
    key = store.key
    assert f"{key}/fused_{r1.path.rsplit('fused_', 1)[1]}" in names
    assert any(n.startswith(f"{key}/__pycache__/") and n.endswith(".nbi") for n in names)
    assert any(n.startswith(f"{key}/__pycache__/") and n.endswith(".nbc") for n in names)
    assert [e.path for e in store.entries()] == [r1.path]
    assert store.size() > 0


CORRUPTIONS = ["py_truncated", "py_garbage", "nbi_truncated", "nbi_junk", "nbc_truncated", "nbc_junk"]


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corrupt_entry_is_recompiled(tmp_path, kind, caplog):
    c = 3.0 + CORRUPTIONS.index(kind)
    store = KernelStore(tmp_path)
    src = _source(c)
    r1 = store.load(src)
    assert r1.compiled == 1
    _forget(r1)

    what, how = kind.split("_")
    if what == "py":
        victims = [r1.path]
    else:
        pycache = os.path.join(os.path.dirname(r1.path), "__pycache__")
        victims = [os.path.join(pycache, f) for f in os.listdir(pycache) if f.endswith("." + what)]
    assert victims
    for v in victims:
        data = open(v, "rb").read()
        with open(v, "wb") as f:
            f.write(data[: len(data) // 2] if how == "truncated" else b"\x80\x05junk" + os.urandom(64))

    with caplog.at_level(logging.WARNING, logger="onnxjit"):
        r2 = store.load(src)
    assert r2.compiled == 1 and r2.persistent  # recompiled, and the entry was repaired
    _run(r2, c)
    assert open(r2.path).read() == src
    assert any(r.levelno == logging.WARNING and r1.path in r.getMessage() for r in caplog.records)

    _forget(r2)
    r3 = store.load(src)
    assert (r3.compiled, r3.loaded) == (0, 1)
    _run(r3, c)


# chmod does not stop root from writing: as root only the path-under-a-file case is generated
@pytest.mark.parametrize("how", ["chmod", "under_file"] if os.geteuid() != 0 else ["under_file"])
def test_unusable_directory_runs_uncached(tmp_path, how, caplog):
    if how == "chmod":
        root = tmp_path / "ro"
        root.mkdir()
        root.chmod(0o500)
        try:
            (root / "probe").write_text("x")
        except OSError:
            pass
        else:
            (root / "probe").unlink()
            root.chmod(0o700)
            pytest.skip("chmod does not stop writes here (running as root); see the under_file case")
    else:
        (tmp_path / "afile").write_text("not a directory")
        root = tmp_path / "afile" / "cache"
    try:
        before = _files(tmp_path)
        store = KernelStore(root)
        with caplog.at_level(logging.WARNING, logger="onnxjit"):
            results = [(store.load(_source(c)), c) for c in (11.0, 12.0)]
        for r, c in results:
            assert r.compiled == 1 and not r.persistent and r.path is None and r.module.CACHE is False
            _run(r, c)
        assert not store.usable
        assert _files(tmp_path) == before
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not usable" in warnings[0].getMessage()
    finally:
        if how == "chmod":
            root.chmod(0o700)


def test_disabled_cache_writes_nothing(tmp_path):
    root = tmp_path / "cache"
    store = KernelStore(root, enabled=False)
    r = store.load(_source(13.0))
    assert r.compiled == 1 and not r.persistent and r.module.CACHE is False
    _run(r, 13.0)
    assert not root.exists()
    assert store.entries() == [] and store.size() == 0


def test_assert_cached(tmp_path, monkeypatch):
    src = _source(14.0)
    with pytest.raises(CacheMissError, match="ONNXJIT_ASSERT_CACHED"):
        KernelStore(tmp_path, assert_cached=True).load(src)
    # the miss still filled the cache: the next load is a hit and does not raise
    r = KernelStore(tmp_path, assert_cached=True).load(src)
    assert (r.compiled, r.loaded) == (0, 1)
    _run(r, 14.0)
    # default follows onnxjit.config (ONNXJIT_ASSERT_CACHED), read at load time
    monkeypatch.setattr(config, "ASSERT_CACHED", True)
    with pytest.raises(CacheMissError):
        KernelStore(tmp_path).load(_source(15.0))
    with pytest.raises(CacheMissError):  # nothing is cached when the cache is disabled
        KernelStore(tmp_path / "off", enabled=False).load(src)
    monkeypatch.setattr(config, "ASSERT_CACHED", False)
    assert KernelStore(tmp_path / "other").load(_source(15.0)).compiled == 1


def test_key_separates_sources_and_versions(tmp_path, monkeypatch):
    store = KernelStore(tmp_path)
    a, b = _source(16.0), _source(17.0)
    ra, rb = store.load(a), store.load(b)
    assert ra.path != rb.path and os.path.dirname(ra.path) == os.path.dirname(rb.path)
    assert sorted(e.path for e in store.entries()) == sorted([ra.path, rb.path])
    assert all(e.current for e in store.entries())

    monkeypatch.setattr(store_mod, "_onnxjit_version", lambda: "999.0.0")
    other = KernelStore(tmp_path)
    assert other.fingerprint()["onnxjit"] == "999.0.0"
    assert other.key != store.key
    r = other.load(a)
    assert r.compiled == 1  # not served from the other version's entry
    assert os.path.dirname(r.path) == other.key_dir != store.key_dir
    _run(r, 16.0)
    assert len(other.entries()) == 3 and sum(e.current for e in other.entries()) == 1


def test_clear_removes_owned_entries_only(tmp_path):
    store = KernelStore(tmp_path)
    r = store.load(_source(18.0))
    (tmp_path / "keep.txt").write_text("not ours")
    assert store.clear() >= 3  # .py, key.json, numba's .nbi/.nbc
    assert _files(tmp_path) == ["keep.txt"] and store.entries() == []
    _forget(r)
    r2 = store.load(_source(18.0))  # the store recreates its directory
    assert r2.compiled == 1 and r2.persistent
    _run(r2, 18.0)


def test_bad_sources_raise_and_leave_no_entry(tmp_path):
    from numba.core.errors import TypingError
    store = KernelStore(tmp_path)
    with pytest.raises(SyntaxError):
        store.load("import numba\ndef kernel(:\n")
    bad = _source(19.0).replace("x[i] * np.float32", "x * np.float32").replace("out[i] =", "out[i] = x.foo +")
    with pytest.raises(TypingError):
        store.load(bad)
    assert not os.path.exists(store.entry_path("import numba\ndef kernel(:\n"))


def test_config_from_environ(tmp_path):
    s = config.from_environ({})
    assert s.debug == 0 and s.assert_cached is False
    assert s.cache_dir == os.path.join(os.path.expanduser("~"), ".cache", "onnxjit")
    s = config.from_environ({"XDG_CACHE_HOME": str(tmp_path), "ONNXJIT_DEBUG": "3", "ONNXJIT_ASSERT_CACHED": "1"})
    assert (s.cache_dir, s.debug, s.assert_cached) == (str(tmp_path / "onnxjit"), 3, True)
    s = config.from_environ({"XDG_CACHE_HOME": str(tmp_path), "ONNXJIT_CACHE_DIR": str(tmp_path / "x"),
                             "ONNXJIT_DEBUG": "nope", "ONNXJIT_ASSERT_CACHED": "0"})
    assert (s.cache_dir, s.debug, s.assert_cached) == (str(tmp_path / "x"), 0, False)


# --------------------------------------------------------------------------- across processes

_CHILD = textwrap.dedent("""\
    import json, os, sys, time
    import numpy as np
    from onnxjit.cache.store import KernelStore
    src, go = sys.argv[1], sys.argv[2]
    store = KernelStore.default()
    store.key  # imports numba, computes the key
    if go:
        open(go + ".ready." + str(os.getpid()), "w").close()
        t_end = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < t_end:
            time.sleep(0.01)
    r = store.load(src)
    x = np.linspace(-2.0, 3.0, %d).astype(np.float32)
    out = np.full_like(x, np.nan)
    r.kernel(x, out, x.size)
    print(json.dumps({"compiled": r.compiled, "loaded": r.loaded, "persistent": r.persistent,
                      "path": r.path, "seconds": r.seconds, "out": out.tolist()}))
    """ % N)


def _child(tmp_path, src: str, go: str = "", assert_cached: bool = False) -> subprocess.Popen:
    env = dict(os.environ, ONNXJIT_CACHE_DIR=str(tmp_path / "cache"),
               ONNXJIT_ASSERT_CACHED="1" if assert_cached else "0")
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.Popen([sys.executable, "-c", _CHILD, src, go], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_second_process_is_served_from_cache(tmp_path):
    src = _source(21.0, parallel=True)
    first = _result(_child(tmp_path, src))
    assert (first["compiled"], first["loaded"], first["persistent"]) == (1, 0, True)
    np.testing.assert_allclose(first["out"], _expected(21.0), rtol=1e-6)
    # ONNXJIT_ASSERT_CACHED=1 in the second process: a miss would make it exit non-zero
    second = _result(_child(tmp_path, src, assert_cached=True))
    assert (second["compiled"], second["loaded"]) == (0, 1)
    assert second["path"] == first["path"]
    assert second["out"] == first["out"]


def test_concurrent_processes_fill_the_same_entry(tmp_path):
    src = _source(22.0, parallel=True)
    go = str(tmp_path / "go")
    procs = [_child(tmp_path, src, go=go) for _ in range(3)]
    deadline = time.monotonic() + 120
    while len([f for f in os.listdir(tmp_path) if f.startswith("go.ready.")]) < len(procs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "children did not start"
        time.sleep(0.02)
    open(go, "w").close()  # release all of them at once
    results = [_result(p) for p in procs]
    for r in results:
        assert r["persistent"] and r["compiled"] + r["loaded"] == 1
        np.testing.assert_allclose(r["out"], _expected(22.0), rtol=1e-6)
        assert r["out"] == results[0]["out"]
    # the entry they left behind is consistent: a later load is a hit
    store = KernelStore(tmp_path / "cache")
    r = store.load(src)
    assert (r.compiled, r.loaded) == (0, 1) and r.path == results[0]["path"]
    _run(r, 22.0)


@pytest.mark.parametrize("helpers", ["0", "1"])
def test_warm_process_loads_kernels_without_numba_compiler(tmp_path, helpers):
    """A new process over warm caches (ours for generated kernels, Numba's for the hand-written ones) compiles
    nothing and never starts Numba's compiler (onnxjit.cache.jit), and its kernels give onnxruntime's results;
    also where the process that filled them had a compile helper (on a machine with two cores or more, a model whose
    first run computed on numpy alone and compiled its kernels after it, onnxjit.cache.deferred_compile: no job
    started the thread pool in that process)."""
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_process_child.py")
    env = dict(os.environ, ONNXJIT_CACHE_DIR=str(tmp_path / "cache"), ONNXJIT_COMPILE_PROCESSES=helpers)
    env.pop("NUMBA_CACHE_DIR", None)
    if helpers != "0":  # Numba's cache of the hand-written kernels of its own, empty
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")

    models = () if helpers == "0" else ("--models=convnet",)

    def run(*args, **extra_env):
        res = subprocess.run([sys.executable, child, *args, *models], env=dict(env, **extra_env), capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1])

    first = run()
    if helpers == "0":
        assert first["elementwise"] == 2  # an empty store: both generated kernels compiled
    second = run("--no-numba-compiler", ONNXJIT_ASSERT_CACHED="1")
    assert set(second) == set(first) and not any(second.values())


# --------------------------------------------------------------------------- Numba's cache files under concurrency

_ADD_ONE = """\
from onnxjit.cache.jit import njit

@njit(cache=True)
def add_one(x):
    return x + 1
"""


def _fresh_add_one(tmp_path, name):
    """Import the module again under a new name: a new dispatcher over the same cache files, as a new process."""
    import importlib.util
    path = tmp_path / "addone.py"
    if not path.exists():
        path.write_text(_ADD_ONE)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.add_one


def test_signatures_get_their_own_data_files(tmp_path):
    add_one = _fresh_add_one(tmp_path, "addone_a")
    for dt in (np.int8, np.int64):
        add_one(np.arange(3, dtype=dt))
    cache_file = add_one._cache._cache_file
    names = sorted(cache_file._load_index().values())
    assert len(set(names)) == 2, names
    assert not any(n.endswith(".1.nbc") for n in names), names  # not Numba's first-free numbering


def test_entry_of_another_signature_is_not_run(tmp_path):
    """Numba's numbered data files let two processes adding signatures at once leave the index of one pointing at
    the other's code (CI: ScatterElements on int8 ran int64 code). A load whose signature differs is a miss."""
    first = _fresh_add_one(tmp_path, "addone_b")
    first(np.arange(3, dtype=np.int8))
    first(np.arange(3, dtype=np.int64))
    cache_file = first._cache._cache_file
    index = cache_file._load_index()
    (k8,) = [k for k in index if "int8" in repr(k[0])]
    (k64,) = [k for k in index if "int64" in repr(k[0])]
    index[k8] = index[k64]  # what the race left behind
    cache_file._save_index(index)

    second = _fresh_add_one(tmp_path, "addone_c")
    x = np.array([1, -2, 126], np.int8)
    out = second(x)
    assert out.tolist() == [2, -1, 127]
    assert second.stats.cache_misses and not second.stats.cache_hits


def test_interleaved_saves_never_cross_entries(tmp_path, monkeypatch):
    """Two writers that read the index before either wrote it: one entry may be lost (a later miss), never
    crossed."""
    from onnxjit.cache.jit import KeyedDataCacheFile
    monkeypatch.setattr(KeyedDataCacheFile, "_load_index", lambda self: {})  # every writer saw an empty index
    writer = _fresh_add_one(tmp_path, "addone_d")
    writer(np.arange(3, dtype=np.int8))
    writer(np.arange(3, dtype=np.int64))
    monkeypatch.undo()
    reader = _fresh_add_one(tmp_path, "addone_e")
    for dt in (np.int8, np.int64):
        out = reader(np.array([1, 2], dt))
        assert out.tolist() == [2, 3]
