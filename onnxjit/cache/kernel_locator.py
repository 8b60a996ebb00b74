"""Numba's on-disk cache of the hand-written kernels (onnxjit/kernels, ``@njit(cache=True)``), made to see
their callees.

Numba stamps a cached function with its own source file only, but these kernels
inline functions of other kernel modules: vmath's exp in the softmax rows, linalg's activations in conv. After
an edit to vmath.py alone (a ``git pull`` into an editable install, say) Numba would go on serving code compiled
from the old vmath. `KernelsCacheLocator` keeps Numba's own choice of cache directory and file names, and adds a
digest of every kernels/*.py to the source stamp: a change to any of them makes the cached entries of the whole
package stale, so each kernel compiles once more and overwrites its entry. (The fuser's generated kernels have
their own store, keyed the same way: cache/store.py.)
"""
from __future__ import annotations

import functools
import glob
import os

from numba.core import caching

from onnxjit.cache.store import files_digest

# numba 0.61 renamed _CacheImpl to CacheImpl
_CACHE_IMPL = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")
KERNELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")


def kernels_digest(directory: str = KERNELS_DIR) -> str:
    """A digest of the bytes of every .py file in `directory`."""
    return files_digest(directory, sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "*.py"))))


_digest = functools.lru_cache(maxsize=1)(kernels_digest)


class KernelsCacheLocator(caching._CacheLocator):
    """Numba's locator for a function of onnxjit/kernels, with `kernels_digest` added to its source stamp."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return (self._inner.get_source_stamp(), _digest())

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != KERNELS_DIR:
            return None
        for other in _CACHE_IMPL._locator_classes:
            inner = other.from_function(py_func, py_file) if other is not cls else None
            if inner is not None:
                return cls(inner)
        return None


def install() -> None:
    """Put the locator first in Numba's list (once); kernels defined afterwards are cached through it."""
    if KernelsCacheLocator not in _CACHE_IMPL._locator_classes:
        _CACHE_IMPL._locator_classes.insert(0, KernelsCacheLocator)
