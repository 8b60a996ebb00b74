"""Models onnxjit's tests, benchmarks and CLI build or load: the model-zoo light models (zoo) and small
transformer layers with random weights (transformer)."""
