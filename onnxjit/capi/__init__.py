"""Mirror of `onnxruntime.capi` for scripts that import error classes from there."""
