"""Persistent cache of the fuser's generated, Numba-compiled kernels (see :mod:`onnxjit.cache.store`)."""
from onnxjit.cache.store import CacheEntry, CacheMissError, KernelStore, LoadResult  # noqa: F401

__all__ = ["CacheEntry", "CacheMissError", "KernelStore", "LoadResult"]
