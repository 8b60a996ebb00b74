"""Shape and Size on the CUDA provider: they read a device array's metadata and return host arrays (the CPU
provider's kernels, which look only at `.shape` and `.size`), so a shape computation after a CUDA node copies no
tensor to the host."""
from onnxjit.kernels.cuda.registry import register_cuda_op
from onnxjit.ops.movement import build_shape, build_size

for _v in (1, 13, 15, 19, 21, 23, 24, 25):
    register_cuda_op("Shape", since=_v, host_outputs=True)(lambda node, device: build_shape(node))
for _v in (1, 13, 19, 21, 23, 24, 25):
    register_cuda_op("Size", since=_v, host_outputs=True)(lambda node, device: build_size(node))
