"""Numba kernels, plain math over arrays, one module per op family."""
