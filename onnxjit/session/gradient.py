"""Gradient (ai.onnx.preview.training): reverse-mode differentiation of the graph between `xs` and `y`.

The step re-runs the nodes `y` depends on from the given `xs` (and `zs`), then walks them backwards applying
each op's vector-Jacobian product, seeded with dy = 1. The forward nodes run on the provider that claimed the
Gradient node; values they read from elsewhere in the graph arrive as implicit inputs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from onnxjit.errors import NotImplemented as OrtNotImplemented
from onnxjit.ir.graph import Node
from onnxjit.providers.base import GraphCompiler, Step


def _unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum `g` over the axes numpy broadcasting added or stretched to reach it from `shape`."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def _matmul_vjp(a, b, y, g):
    a2, b2 = (a[None, :] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b)
    g2 = g.reshape(np.matmul(a2, b2).shape)
    ga = np.matmul(g2, np.swapaxes(b2, -1, -2))
    gb = np.matmul(np.swapaxes(a2, -1, -2), g2)
    return [_unbroadcast(ga, a2.shape).reshape(a.shape), _unbroadcast(gb, b2.shape).reshape(b.shape)]


# op_type -> vjp(inputs, output, grad of output) -> grads of inputs (None where not differentiable)
VJPS: dict[str, Callable[..., list]] = {
    "Identity": lambda x, y, g: [g],
    "Neg": lambda x, y, g: [-g],
    "Add": lambda a, b, y, g: [_unbroadcast(g, a.shape), _unbroadcast(g, b.shape)],
    "Sub": lambda a, b, y, g: [_unbroadcast(g, a.shape), _unbroadcast(-g, b.shape)],
    "Mul": lambda a, b, y, g: [_unbroadcast(g * b, a.shape), _unbroadcast(g * a, b.shape)],
    "Div": lambda a, b, y, g: [_unbroadcast(g / b, a.shape), _unbroadcast(-g * a / (b * b), b.shape)],
    "Pow": lambda a, b, y, g: [_unbroadcast(g * b * a ** (b - 1), a.shape),
                               _unbroadcast(g * y * np.log(np.where(a > 0, a, 1)), b.shape)],
    "Sum": lambda *args: [_unbroadcast(args[-1], x.shape) for x in args[:-2]],
    "MatMul": _matmul_vjp,
    "Relu": lambda x, y, g: [g * (x > 0)],
    "Sigmoid": lambda x, y, g: [g * y * (1 - y)],
    "Tanh": lambda x, y, g: [g * (1 - y * y)],
    "Exp": lambda x, y, g: [g * y],
    "Log": lambda x, y, g: [g / x],
    "Sqrt": lambda x, y, g: [g / (2 * y)],
}


def _names(node: Node, attr: str) -> list[str]:
    a = node.attributes.get(attr)
    return [] if a is None else [v.decode() if isinstance(v, bytes) else v for v in a.value]


def gradient_step(node: Node, compiler: GraphCompiler, provider) -> Step:
    xs, zs = _names(node, "xs"), _names(node, "zs")
    y = node.attributes["y"].value
    y = y.decode() if isinstance(y, bytes) else y
    leaves = set(xs) | set(zs)
    producer = {v.name: n for n in node.graph.nodes for v in n.outputs if v.name}
    needed: set[Node] = set()
    stack = [y]
    while stack:
        name = stack.pop()
        n = producer.get(name)
        if name in leaves or n is None or n in needed:
            continue
        needed.add(n)
        stack.extend(v.name for v in n.inputs if v is not None)
    forward = [n for n in node.graph.nodes if n in needed]
    for n in forward:
        if n.domain != "" or n.op_type not in VJPS:
            raise OrtNotImplemented(f"{node.label}: cannot differentiate through {n.label}; differentiable ops: "
                                    f"{', '.join(sorted(VJPS))}")
    produced = {v.name for n in forward for v in n.outputs}
    implicit: list[str] = []
    for n in forward:
        for v in n.inputs:
            if v is not None and v.name not in produced and v.name not in leaves and v.name not in implicit:
                implicit.append(v.name)
    steps = provider.compile(forward, compiler)

    def run(*args: Any) -> list[np.ndarray]:
        env = dict(zip(xs + zs, args[:len(xs) + len(zs)]))
        env.update(zip(implicit, args[len(xs) + len(zs):]))
        for s in steps:
            for name, v in zip(s.outputs, s.fn(*[env[i] if i else None for i in s.inputs])):
                env[name] = v
        grads = {y: np.ones_like(env[y])}
        for n in reversed(forward):
            g = grads.get(n.outputs[0].name)
            if g is None:
                continue
            ins = [env[v.name] for v in n.inputs]
            for v, gi in zip(n.inputs, VJPS[n.op_type](*ins, env[n.outputs[0].name], g)):
                if gi is not None:
                    grads[v.name] = grads[v.name] + gi if v.name in grads else gi
        return [np.asarray(grads.get(x, np.zeros_like(env[x])), dtype=env[x].dtype) for x in xs]

    explicit = [v.name if v is not None else "" for v in node.inputs]
    return Step([node], provider.name, explicit + implicit, [v.name for v in node.outputs], run, implicit=implicit)
