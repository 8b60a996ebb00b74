"""Process-wide knobs read from the environment, once, when this module is imported.

==========================  ========================================================
``ONNXJIT_CACHE_DIR``       directory of the on-disk kernel cache.  Default:
                            ``$XDG_CACHE_HOME/onnxjit``, else ``~/.cache/onnxjit``.
``ONNXJIT_DEBUG``           integer verbosity, 0 by default; ``>= 3`` logs the
                            source of every generated kernel (logger ``onnxjit``).
``ONNXJIT_ASSERT_CACHED``   ``1`` turns a kernel-cache miss (a load that had to
                            compile) into :class:`onnxjit.cache.store.CacheMissError`;
                            for CI / cold-start checks.
==========================  ========================================================

The values are exposed both as a frozen :class:`Settings` (``SETTINGS``) and as
plain module constants (``CACHE_DIR``, ``DEBUG``, ``ASSERT_CACHED``).  Code that
wants to honour them should read the module attribute at call time
(``config.ASSERT_CACHED``, not ``from onnxjit.config import ASSERT_CACHED``) so
that tests can monkeypatch them.  :func:`from_environ` parses any mapping and
is what the constants are computed with.

This module imports nothing from onnxjit (no circular-import hazards) and
nothing heavy (no numba).

``ONNXJIT_COMPILE_PROCESSES`` (helper processes compiling a session's first run; session config entry
``session.onnxjit.compile_processes``) is read by :mod:`onnxjit.cache.parallel_compile` when a session is created.

Session-level switches (not environment variables): the session option
``session.onnxjit.disable_kernel_cache`` = ``"1"`` disables the cache for that
session; its key is :data:`SESSION_DISABLE_KERNEL_CACHE`.
``session.onnxjit.native_segments`` (:data:`SESSION_NATIVE_SEGMENTS`) says how
small consecutive steps are joined into native segments
(:mod:`onnxjit.session.native_plan`): ``"background"`` (the default: compiled in
a background thread after a plan's second run), ``"inline"`` (compiled in that
run) or ``"off"``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping, Optional

__all__ = ["Settings", "from_environ", "default_cache_dir", "SETTINGS", "CACHE_DIR", "DEBUG", "ASSERT_CACHED",
           "SESSION_DISABLE_KERNEL_CACHE", "SESSION_NATIVE_SEGMENTS"]

SESSION_DISABLE_KERNEL_CACHE = "session.onnxjit.disable_kernel_cache"
SESSION_NATIVE_SEGMENTS = "session.onnxjit.native_segments"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}

_log = logging.getLogger("onnxjit")


@dataclass(frozen=True)
class Settings:
    cache_dir: str
    debug: int = 0
    assert_cached: bool = False


def default_cache_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    """``ONNXJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/onnxjit``, else ``~/.cache/onnxjit`` (absolute)."""
    env = os.environ if environ is None else environ
    explicit = env.get("ONNXJIT_CACHE_DIR", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(os.path.expanduser(xdg)):
        base = os.path.expanduser(xdg)
    else:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "onnxjit"))


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        _log.warning("ignoring %s=%r: not an integer", name, raw)
        return default


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return default if raw == "" else False
    _log.warning("ignoring %s=%r: expected 0 or 1", name, raw)
    return default


def from_environ(environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Parse the ``ONNXJIT_*`` knobs from *environ* (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    return Settings(cache_dir=default_cache_dir(env),
                    debug=_int(env, "ONNXJIT_DEBUG", 0),
                    assert_cached=_bool(env, "ONNXJIT_ASSERT_CACHED", False))


SETTINGS: Settings = from_environ()
CACHE_DIR: str = SETTINGS.cache_dir
DEBUG: int = SETTINGS.debug
ASSERT_CACHED: bool = SETTINGS.assert_cached
