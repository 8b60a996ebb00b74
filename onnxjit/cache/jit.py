"""`njit`: numba.njit for onnxjit's kernels, whose cached functions load without starting Numba's compiler.

Before each load from its disk cache, Numba refreshes its target context: it imports and registers every typing and
lowering implementation it has (and, through the BLAS check in numba.np.arraymath, scipy.linalg). That took
0.3-0.7 s once per process on the development machines, most of what a new process spent creating a session over cached
kernels. Running cached machine code needs none of it, only what the code calls into at run time: Numba's runtime
(NRT, set up by `rtsys.initialize`, which the refresh does first) and the symbols the import of
numba.cpython.hashing adds (the hash secret); Numba's C helpers and math functions are installed with the context
itself, and a parallel function's cache entry starts the thread pool on load. So `njit` gives each cached
dispatcher a `KernelCache`, whose load prepares only that. A miss compiles as usual, and Numba's compiler then
refreshes the context itself. Everything else is numba.njit's: same cache files, locators and index, same
dispatcher.

Tests: tests/test_cache.py runs models in a new process over a warm cache with the refresh made to fail.
"""
from __future__ import annotations

import hashlib
import threading

import numba
from numba.core import caching, sigutils, typeinfer
from numba.core.dispatcher import Dispatcher

from onnxjit.cache import parallel_compile

__all__ = ["njit", "KernelCache", "KeyedDataCacheFile", "load_cached"]

_probe = threading.local()  # .active: load_cached's compile call, which must only load


def _prepare_runtime(target_context) -> None:
    """What cached code needs of Numba at run time, short of the refresh (see the module docstring)."""
    from numba.core.runtime import rtsys
    rtsys.initialize(target_context)
    import numba.cpython.hashing  # noqa: F401  (its import adds the _numba_hashsecret_* symbols)


class KeyedDataCacheFile(caching.IndexDataCacheFile):
    """Numba's index/data files, each data file named after a hash of its index key (see the module docstring)."""

    def save(self, key, data):
        data_name = self._data_name_for(key)
        # data first: an index entry is never visible before its file
        self._save_data(data_name, data)
        overloads = self._load_index()
        if overloads.get(key) != data_name:
            overloads[key] = data_name
            self._save_index(overloads)

    def _data_name_for(self, key) -> str:
        # the key is (signature, target magic tuple, bytecode hashes): its repr names every type in full
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        return self._data_name_pattern.replace("{number:d}", digest)


class KernelCache(caching.FunctionCache):
    """Numba's FunctionCache, loading without the target context's refresh, with key-named data files and loads
    checked against the signature asked for."""

    def __init__(self, py_func):
        super().__init__(py_func)
        plain = self._cache_file
        self._cache_file = KeyedDataCacheFile(plain._cache_path, self._impl.filename_base, plain._source_stamp)

    def load_overload(self, sig, target_context):
        _prepare_runtime(target_context)
        cres = self._load_checked(sig, target_context)
        if cres is None and getattr(_probe, "active", False):
            raise _NotCached
        if cres is None and parallel_compile.wait_for_helper(self._py_func, sig):
            cres = self._load_checked(sig, target_context)  # a helper was compiling it: its code, if it finished
        if cres is None:
            parallel_compile.cache_missed()  # a compile follows: a session's first run starts its helpers
        return cres

    def _load_checked(self, sig, target_context):
        """The cached code for `sig`, or None (an entry written for another signature too: compile this one)."""
        cres = None
        with self._guard_against_spurious_io_errors():
            cres = self._load_overload(sig, target_context)
        if cres is not None and tuple(cres.signature.args) != tuple(sigutils.normalize_signature(sig)[0]):
            return None
        return cres


class _NotCached(Exception):
    pass


def load_cached(dispatcher, argtypes: tuple) -> bool:
    """Whether `dispatcher` has code for `argtypes`: compiled in this process, or in its disk cache (loaded now, as
    a call would). Never compiles: a miss is False (a dispatcher without a KernelCache has only what it compiled)."""
    if tuple(argtypes) in dispatcher.overloads:
        return True
    if not isinstance(getattr(dispatcher, "_cache", None), KernelCache):
        return False
    _probe.active = True
    try:
        dispatcher.compile(tuple(argtypes))  # Numba's own path for a cache hit; a miss raises _NotCached
        return True
    except _NotCached:
        return False
    finally:
        _probe.active = False


def njit(signature_or_function=None, **options):
    """numba.njit, with the same arguments; with ``cache=True`` the dispatcher loads through `KernelCache`."""
    if not options.get("cache"):
        return numba.njit(signature_or_function, **options)
    options["cache"] = False  # the KernelCache replaces Numba's own
    if isinstance(signature_or_function, list):
        sigs = signature_or_function
    elif signature_or_function is None:
        sigs = None
    elif sigutils.is_signature(signature_or_function):
        sigs = [signature_or_function]
    else:
        return _cached(signature_or_function, None, options)
    return lambda function: _cached(function, sigs, options)


def _cached(function, sigs, options):
    dispatcher = numba.njit(**options)(function)
    if not isinstance(dispatcher, Dispatcher):  # NUMBA_DISABLE_JIT: the Python function itself
        return dispatcher
    dispatcher._cache = KernelCache(dispatcher.py_func)
    if sigs is not None:  # as numba.njit does with signatures: compile (or load) them now, and only them
        with typeinfer.register_dispatcher(dispatcher):
            for sig in sigs:
                dispatcher.compile(sig)
        dispatcher.disable_compile()
    return dispatcher
