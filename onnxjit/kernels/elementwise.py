"""Elementwise kernels: unary activations over a flat array, binary arithmetic with numpy broadcasting."""
from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def relu(x):
    flat = x.ravel()
    out = np.empty_like(flat)
    for i in prange(flat.size):
        v = flat[i]
        out[i] = v if v > 0 else v * 0
    return out.reshape(x.shape)


@njit(cache=True, parallel=True)
def sigmoid(x):
    flat = x.ravel()
    out = np.empty_like(flat)
    for i in prange(flat.size):
        out[i] = 1.0 / (1.0 + np.exp(-flat[i]))
    return out.reshape(x.shape)


@njit(cache=True, parallel=True)
def tanh(x):
    flat = x.ravel()
    out = np.empty_like(flat)
    for i in prange(flat.size):
        out[i] = np.tanh(flat[i])
    return out.reshape(x.shape)


@njit(cache=True)
def add(a, b):
    return a + b


@njit(cache=True)
def sub(a, b):
    return a - b


@njit(cache=True)
def mul(a, b):
    return a * b


@njit(cache=True)
def div(a, b):
    return a / b
