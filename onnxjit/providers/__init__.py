"""Execution providers. Importing this package registers them (their priority order is onnxruntime's, base.py's
KNOWN_PROVIDER_NAMES)."""
from onnxjit.providers import cpu, cuda, fallback  # noqa: F401
from onnxjit.providers.base import PROVIDERS, ExecutionProvider, Step, register_provider  # noqa: F401
