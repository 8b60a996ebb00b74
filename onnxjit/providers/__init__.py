"""Execution providers. Importing this package registers them, in default priority order."""
from onnxjit.providers import cpu, fallback  # noqa: F401  (registration order is priority order)
from onnxjit.providers.base import PROVIDERS, ExecutionProvider, Step, register_provider  # noqa: F401
