"""Kernels of the CUDA provider: Numba `@cuda.jit` code, one module per op family, each with the builders that
register its ops for the provider (registry.py).

Importing this package imports numba-cuda (the `.[cuda]` extra): only the CUDA provider does, when a session asks
for it. Under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) the same kernels run as Python on the host, which
is how the tests check them on machines with no GPU.
"""
