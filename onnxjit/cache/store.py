"""On-disk store for the fuser's generated Numba kernels.

Usage
-----
::

    from onnxjit.cache.store import KernelStore, CacheMissError

    store = KernelStore.default()          # ONNXJIT_CACHE_DIR / XDG cache dir; keep one per session
    store = KernelStore(directory, enabled=True, assert_cached=None)
    res = store.load(source)               # -> LoadResult
    res.kernel                             # == res.module.kernel: the numba dispatcher
    res.compiled                           # signatures numba compiled during this load (0 on a cache hit)
    res.loaded                             # signatures loaded from numba's on-disk cache
    res.reused                             # module was already imported in this process (no work done)
    res.persistent                         # executed with CACHE=True (entry lives on disk)
    res.seconds, res.path, res.from_cache  # from_cache == (compiled == 0)

    store.clear() -> int                   # removes every entry this store owns (all versions); files removed
    store.size() -> int                    # bytes held by the entries (all versions)
    store.entries() -> list[CacheEntry]    # one per cached .py file
    store.entry_path(source) -> str        # where *source* lives (or would live)

The source text
---------------
``source`` is a complete module.  It is executed with a global ``CACHE``
already defined (``True`` when the on-disk cache is usable, ``False`` when it
is disabled or unusable) and must define ``kernel``, typically::

    import numpy as np
    import numba
    from onnxjit.cache.jit import njit
    from onnxjit.kernels import vmath

    @njit("void(float32[::1], float32[::1], int64)", cache=CACHE, parallel=True)
    def kernel(x, out, n): ...

(``onnxjit.cache.jit.njit`` is numba.njit whose cache hits load without Numba's
compiler start-up; plain ``numba.njit`` works too.) Every ``njit`` in it must
pass ``cache=CACHE`` (never ``cache=True``:
numba cannot cache a function that has no file) and should carry explicit
signatures, so that compilation -- or the load from numba's cache -- happens
at import and is what ``compiled`` / ``loaded`` count.  Those counts are the
numba dispatchers' ``stats.cache_misses`` / ``stats.cache_hits`` summed over
the dispatchers *defined in this module* (one count per explicit signature;
with ``cache=False`` every signature counts as a miss).

Layout on disk
--------------
::

    <dir>/<key16>/key.json                  what the key was computed from (informational)
    <dir>/<key16>/fused_<src16>.py          the source, byte for byte; created once, never rewritten
    <dir>/<key16>/__pycache__/fused_<src16>.kernel-<line>.py3XY.nbi / .N.nbc   numba's index/data

``key16`` hashes the numba / llvmlite / numpy / Python / onnxjit versions, the
host CPU name and features (and numba's CPU overrides and opt level), and the
bytes of the onnxjit modules generated kernels may call into (``vmath.py``: numba's
own cache does not track callees).  ``src16`` hashes the source.  The module is
executed as ``onnxjit_kernels.fused_<src16>_<loc8>`` (``loc8`` tells entries of
different stores / key directories apart) and registered in ``sys.modules``, so a
second load in the same process is free.  If ``NUMBA_CACHE_DIR`` is set numba
keeps its .nbi/.nbc files there instead; :meth:`KernelStore.clear` does not
touch them.

Robustness
----------
* The .py file is written to a temporary file in the same directory and
  ``os.link``-ed into place (fails if present), so it is complete or absent.
  An existing file is compared with the source; a mismatch (truncated,
  garbage) is a corrupt entry: its numba files are removed and it is replaced.
  numba writes its own files atomically (temp + ``os.replace``).
* Two processes filling the same entry both compile; numba's index tolerates
  it (worst case one extra compile later).
* Executing a cached entry that fails (corrupt .nbi/.nbc: unpickling errors)
  removes the entry's numba files and compiles again; if that fails too, or
  the entry cannot be written (``OSError``), the kernel is compiled with
  ``CACHE=False`` from the source string.  Genuine compile errors
  (``numba.core.errors.NumbaError`` with no cache files involved, or a
  ``SyntaxError``) propagate unchanged.
* An unusable cache directory (cannot create it, or write in it) is detected
  once per store, logged once as a warning, and every load then runs uncached.
* ``ONNXJIT_ASSERT_CACHED=1`` (or ``assert_cached=True``) makes a load that
  compiled anything raise :class:`CacheMissError` (also when the cache is
  disabled or unusable).

Limitation: numba does not checksum its data files; junk or truncated files
fail to unpickle and are recovered from, but a file whose *object code* was
altered while keeping a valid pickle could still crash LLVM.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import linecache
import logging
import os
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

from onnxjit import config

__all__ = ["KernelStore", "LoadResult", "CacheEntry", "CacheMissError", "MODULE_PREFIX", "fingerprint"]

_log = logging.getLogger("onnxjit")

MODULE_PREFIX = "onnxjit_kernels"
# Bump to invalidate every existing entry (layout or semantics change).
_FORMAT = 1
# Files (relative to the onnxjit package directory) whose code generated kernels may
# inline through numba; their bytes are part of the key, since numba's cache of a
# kernel does not notice a change in a callee.
_KERNEL_DEPENDENCIES = ("kernels/vmath.py", "kernels/vector_width.py", "fuser/scalar.py", "fuser/llvm_options.py")
_KEY_LEN = 16
_SRC_LEN = 16
_STEM_PREFIX = "fused_"
_MANIFEST = "key.json"


class CacheMissError(RuntimeError):
    """A kernel had to be compiled although ``ONNXJIT_ASSERT_CACHED=1`` (or ``assert_cached=True``)."""


@dataclass(frozen=True)
class LoadResult:
    """What :meth:`KernelStore.load` did.  ``kernel`` is the module's ``kernel``."""
    module: types.ModuleType
    compiled: int       # signatures numba compiled during this load (cache misses)
    loaded: int         # signatures loaded from numba's on-disk cache (cache hits)
    reused: bool        # already imported in this process: nothing was compiled or loaded
    persistent: bool    # executed with CACHE=True, i.e. backed by an on-disk entry
    seconds: float      # wall time of the load
    path: Optional[str]  # the entry's .py file, None when running uncached

    @property
    def kernel(self):
        return self.module.kernel

    @property
    def from_cache(self) -> bool:
        """True when nothing had to be compiled (numba disk cache hit, or reused in-process)."""
        return self.compiled == 0


@dataclass(frozen=True)
class CacheEntry:
    path: str       # the .py file
    key_dir: str    # its key directory
    current: bool   # key_dir belongs to this process's versions / CPU
    nbytes: int     # .py plus numba's files for it in key_dir/__pycache__


# --------------------------------------------------------------------------- key


def _onnxjit_version() -> str:
    # Lazy: onnxjit/__init__ imports the session machinery, which imports us.
    import onnxjit
    return str(getattr(onnxjit, "__version__", "unknown"))


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def files_digest(root: str, rels) -> str:
    """16 hex digits of sha256 over each file's path relative to `root` and its bytes ("<missing>" if unreadable)."""
    h = hashlib.sha256()
    for rel in rels:
        h.update(rel.encode() + b"\0")
        try:
            with open(os.path.join(root, rel), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()[:16]


def _dependency_digest() -> str:
    return files_digest(_package_dir(), _KERNEL_DEPENDENCIES)


def fingerprint() -> Dict[str, str]:
    """Everything besides the source that decides whether a compiled kernel can be reused."""
    import llvmlite
    import llvmlite.binding as ll
    import numba  # initializes llvmlite's native target
    import numpy
    from numba.core import config as nconfig

    return {
        "format": str(_FORMAT),
        "python": "%s-%d.%d%s" % (sys.implementation.name, sys.version_info[0], sys.version_info[1],
                                  getattr(sys, "abiflags", "")),
        "onnxjit": _onnxjit_version(),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "numpy": numpy.__version__,
        "cpu": ll.get_host_cpu_name(),
        "cpu_features": ll.get_host_cpu_features().flatten(),
        "numba_cpu_name": str(nconfig.CPU_NAME or ""),
        "numba_cpu_features": str(nconfig.CPU_FEATURES or ""),
        "numba_opt": str(nconfig.OPT),
        "kernel_deps": _dependency_digest(),
    }


def _is_key_dir_name(name: str) -> bool:
    return len(name) == _KEY_LEN and all(c in "0123456789abcdef" for c in name)


# --------------------------------------------------------------------------- files


def _atomic_create(path: str, data: bytes, replace: bool) -> bool:
    """Write *data* to *path* atomically.  Without *replace*, only if *path* is absent
    (returns False when it already existed)."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".py", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                os.fchmod(f.fileno(), 0o644)
            except OSError:
                pass
            f.write(data)
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            # Hard links unsupported on this file system: replace only when absent
            # (a lost race then overwrites the file with the same bytes).
            if os.path.lexists(path):
                return False
            os.replace(tmp, path)
            return True
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _numba_cache_dirs(py_path: str) -> List[str]:
    """Where numba keeps the index/data files of functions defined in *py_path*."""
    dirs = [os.path.join(os.path.dirname(py_path), "__pycache__")]
    try:
        from numba.core import caching, config as nconfig
        if nconfig.CACHE_DIR:
            sub = caching._CacheLocator.get_suitable_cache_subpath(py_path)
            dirs.append(os.path.join(nconfig.CACHE_DIR, sub))
    except Exception:  # pragma: no cover - numba internals moved
        pass
    return dirs


def _numba_files(py_path: str, stem: str) -> List[str]:
    prefix = stem + "."
    found = []
    for d in _numba_cache_dirs(py_path):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found.extend(os.path.join(d, n) for n in names
                     if n.startswith(prefix) and (n.endswith((".nbi", ".nbc")) or ".tmp." in n))
    return found


def _purge_numba_files(py_path: str, stem: str) -> None:
    for p in _numba_files(py_path, stem):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.debug("could not remove %s: %s", p, exc)


def _compile_counts(module: types.ModuleType) -> Tuple[int, int]:
    """(cache misses, cache hits) of the numba dispatchers defined in *module*."""
    from numba.core.dispatcher import Dispatcher

    compiled = loaded = 0
    for obj in list(vars(module).values()):
        if not isinstance(obj, Dispatcher):
            continue
        if getattr(obj.py_func, "__module__", None) != module.__name__:
            continue  # imported from elsewhere
        stats = obj.stats
        compiled += sum(stats.cache_misses.values())
        loaded += sum(stats.cache_hits.values())
    return compiled, loaded


def _is_compile_error(exc: BaseException) -> bool:
    from numba.core.errors import NumbaError
    return isinstance(exc, (NumbaError, SyntaxError))


# --------------------------------------------------------------------------- store


class KernelStore:
    """Persistent cache of generated kernel modules.  See the module docstring.

    Holds per-instance state only (the probed directory, a warn-once flag, a lock):
    create one per session and keep it.
    """

    def __init__(self, directory: Union[str, os.PathLike, None] = None, enabled: bool = True,
                 assert_cached: Optional[bool] = None):
        """*directory*: cache root (default ``config.CACHE_DIR``).  *enabled*: False runs every
        kernel uncached and writes nothing.  *assert_cached*: None follows
        ``config.ASSERT_CACHED`` (``ONNXJIT_ASSERT_CACHED``)."""
        root = config.CACHE_DIR if directory is None else os.fspath(directory)
        self.directory = os.path.abspath(os.path.expanduser(root))
        self.enabled = bool(enabled)
        self._assert_cached = assert_cached
        self._lock = threading.RLock()
        self._fingerprint: Optional[Dict[str, str]] = None
        self._key: Optional[str] = None
        self._usable: Optional[Union[str, bool]] = None  # None: not probed; False: unusable

    @classmethod
    def default(cls, enabled: bool = True) -> "KernelStore":
        return cls(None, enabled=enabled)

    def __repr__(self) -> str:
        return "KernelStore(%r, enabled=%r)" % (self.directory, self.enabled)

    # -- key ---------------------------------------------------------------

    @property
    def assert_cached(self) -> bool:
        return bool(config.ASSERT_CACHED if self._assert_cached is None else self._assert_cached)

    def fingerprint(self) -> Dict[str, str]:
        if self._fingerprint is None:
            self._fingerprint = fingerprint()
        return dict(self._fingerprint)

    @property
    def key(self) -> str:
        if self._key is None:
            blob = json.dumps(self.fingerprint(), sort_keys=True).encode()
            self._key = hashlib.sha256(blob).hexdigest()[:_KEY_LEN]
        return self._key

    @property
    def key_dir(self) -> str:
        return os.path.join(self.directory, self.key)

    def entry_path(self, source: str) -> str:
        return os.path.join(self.key_dir, _stem(source.encode("utf-8")) + ".py")

    @property
    def usable(self) -> bool:
        """Whether loads persist (enabled and the directory is writable); probes once."""
        return self._usable_key_dir() is not None

    def _usable_key_dir(self) -> Optional[str]:
        if not self.enabled:
            return None
        if self._usable is None:
            key_dir = self.key_dir
            try:
                pycache = os.path.join(key_dir, "__pycache__")
                os.makedirs(pycache, exist_ok=True)
                tempfile.TemporaryFile(dir=key_dir).close()
                tempfile.TemporaryFile(dir=pycache).close()
            except OSError as exc:
                _log.warning("onnxjit kernel cache directory %s is not usable (%s); kernels will be compiled "
                             "on every run", self.directory, exc)
                self._usable = False
            else:
                self._write_manifest(key_dir)
                self._usable = key_dir
        return self._usable or None

    def _write_manifest(self, key_dir: str) -> None:
        path = os.path.join(key_dir, _MANIFEST)
        if os.path.exists(path):
            return
        data = json.dumps(self.fingerprint(), sort_keys=True, indent=1).encode()
        try:
            _atomic_create(path, data, replace=False)
        except OSError:
            pass

    # -- load --------------------------------------------------------------

    def load(self, source: str) -> LoadResult:
        """Import the kernel module *source*, from numba's on-disk cache when possible."""
        if not isinstance(source, str):
            raise TypeError("source must be str, not %s" % type(source).__name__)
        t0 = time.perf_counter()
        data = source.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        stem = _STEM_PREFIX + digest[:_SRC_LEN]
        with self._lock:
            key_dir = self._usable_key_dir()
            loc = hashlib.sha256((key_dir or ("<uncached>" + self.key)).encode()).hexdigest()[:8]
            name = "%s.%s_%s" % (MODULE_PREFIX, stem, loc)
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__onnxjit_digest__", None) == digest:
                return LoadResult(module, 0, 0, True, bool(getattr(module, "CACHE", False)),
                                  time.perf_counter() - t0, getattr(module, "__file__", None))
            if config.DEBUG >= 3:
                _log.info("onnxjit generated kernel %s:\n%s", stem, source)

            module = None
            path = None
            if key_dir is not None:
                path = os.path.join(key_dir, stem + ".py")
                module = self._load_persistent(source, data, digest, stem, name, path)
            if module is None:
                path = None
                module = self._exec(source, digest, name, "<onnxjit-kernel %s>" % stem, cache=False)
            try:
                compiled, loaded = _compile_counts(module)
                seconds = time.perf_counter() - t0
                if compiled and self.assert_cached:
                    where = path or ("%s (%s)" % (self.directory, "disabled" if not self.enabled else "unusable"))
                    raise CacheMissError(
                        "ONNXJIT_ASSERT_CACHED: kernel %s was not in the kernel cache and had to be compiled "
                        "(%d signature(s), %.2fs); entry: %s" % (stem, compiled, seconds, where))
            except BaseException:
                if sys.modules.get(name) is module:
                    del sys.modules[name]
                raise
        _log.debug("onnxjit kernel %s: compiled %d, loaded %d signature(s) in %.3fs (%s)", stem, compiled, loaded,
                   seconds, path or "uncached")
        return LoadResult(module, compiled, loaded, False, path is not None, seconds, path)

    def _load_persistent(self, source: str, data: bytes, digest: str, stem: str, name: str,
                         path: str) -> Optional[types.ModuleType]:
        """Execute the on-disk entry with CACHE=True; None means "run uncached instead"."""
        code = compile(source, path, "exec", dont_inherit=True)  # a SyntaxError must not leave an entry behind
        try:
            self._materialize(path, data, stem)
        except OSError as exc:
            _log.warning("onnxjit kernel cache: cannot write %s (%s); running uncached", path, exc)
            return None
        for attempt in range(2):
            had_numba_files = bool(_numba_files(path, stem))
            try:
                return self._exec(source, digest, name, path, cache=True, code=code)
            except Exception as exc:
                if _is_compile_error(exc) and not had_numba_files:
                    raise
                retry = attempt == 0 and had_numba_files
                _log.warning("onnxjit kernel cache entry %s failed to load (%s: %s); %s", path,
                             type(exc).__name__, exc, "recompiling" if retry else "running uncached")
                _purge_numba_files(path, stem)
                if not retry:
                    break
        return None

    def _materialize(self, path: str, data: bytes, stem: str) -> None:
        """Make *path* hold exactly *data*: create it if absent, replace it if corrupt."""
        os.makedirs(os.path.join(os.path.dirname(path), "__pycache__"), exist_ok=True)
        for _ in range(3):
            existing = _read(path)
            if existing == data:
                return
            if existing is None:
                if _atomic_create(path, data, replace=False):
                    return
                continue  # lost a race: verify what the winner wrote
            _log.warning("onnxjit kernel cache entry %s is corrupt (%d bytes, expected %d); replacing it",
                         path, len(existing), len(data))
            _purge_numba_files(path, stem)
            _atomic_create(path, data, replace=True)
        if _read(path) != data:
            raise OSError("kernel cache entry %s keeps changing under us" % path)

    @staticmethod
    def _exec(source: str, digest: str, name: str, filename: str, cache: bool,
              code: Optional[types.CodeType] = None) -> types.ModuleType:
        if code is None:
            code = compile(source, filename, "exec", dont_inherit=True)
        if cache:
            spec = importlib.util.spec_from_file_location(name, filename)
            module = importlib.util.module_from_spec(spec)
        else:
            module = types.ModuleType(name)
            # Python's own line cache (entries with mtime None are kept): readable tracebacks
            # and numba error locations for code that has no file.
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module.CACHE = cache
        module.__onnxjit_digest__ = digest
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            if sys.modules.get(name) is module:
                del sys.modules[name]
            raise
        return module

    # -- maintenance -------------------------------------------------------

    def _key_dirs(self) -> List[str]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return [os.path.join(self.directory, n) for n in sorted(names)
                if _is_key_dir_name(n) and os.path.isdir(os.path.join(self.directory, n))
                and not os.path.islink(os.path.join(self.directory, n))]

    def entries(self) -> List[CacheEntry]:
        """One :class:`CacheEntry` per cached kernel, all key directories."""
        current = self.key_dir if self.enabled else None
        out = []
        for kd in self._key_dirs():
            try:
                names = sorted(os.listdir(kd))
            except OSError:
                continue
            try:
                cached = os.listdir(os.path.join(kd, "__pycache__"))
            except OSError:
                cached = []
            for n in names:
                if not (n.startswith(_STEM_PREFIX) and n.endswith(".py")):
                    continue
                p = os.path.join(kd, n)
                prefix = n[:-3] + "."
                nbytes = _file_size(p) + sum(_file_size(os.path.join(kd, "__pycache__", c))
                                             for c in cached if c.startswith(prefix))
                out.append(CacheEntry(p, kd, kd == current, nbytes))
        return out

    def size(self) -> int:
        """Bytes held under the key directories (all versions)."""
        total = 0
        for kd in self._key_dirs():
            for dirpath, _dirs, files in os.walk(kd):
                total += sum(_file_size(os.path.join(dirpath, f)) for f in files)
        return total

    def clear(self) -> int:
        """Remove every key directory (all versions) under ``directory``; returns the number of
        files removed.  Other files in ``directory`` are left alone."""
        removed = 0
        for kd in self._key_dirs():
            for dirpath, dirs, files in os.walk(kd, topdown=False):
                for f in files:
                    try:
                        os.unlink(os.path.join(dirpath, f))
                        removed += 1
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        _log.warning("onnxjit kernel cache: cannot remove %s: %s", os.path.join(dirpath, f), exc)
                for d in dirs:
                    _rmdir(os.path.join(dirpath, d))
            _rmdir(kd)
        with self._lock:
            self._usable = None  # re-probe (and re-create the directory) on the next load
        return removed


def _stem(data: bytes) -> str:
    return _STEM_PREFIX + hashlib.sha256(data).hexdigest()[:_SRC_LEN]


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
