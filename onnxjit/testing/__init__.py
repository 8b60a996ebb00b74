"""Models onnxjit's tests, benchmarks and CLI build or load: model-zoo light models (zoo), transformer layers
(transformer)."""
