"""Concat's inputs computed in place: the steps that produce them write straight into the Concat's output.

A Concat along an axis with nothing but unit dims before it (channels of a batch-1 image) lays each input out as
one contiguous run of its output. Where the step producing an input can write its result into a given array (a
kernel with `writes_into`: Conv, FusedConv and the pools), it gets that run of the output as its `out`, and the
Concat copies only what no such step made: squeezenet's fire modules and inception's branches then copy nothing
(a channel concat of two 64x55x55 float32 images was a 3 MB copy, 90-120 us on two Emerald Rapids threads). A
Concat's output read by a later Concat is itself placed in that one's output, so densenet's chain of growing
Concats within a block fills one array, each layer's conv writing its own channels, where each Concat copied all
the channels before it.

The steps are rewritten at compile time from the types inference found (static shapes only): an allocation step,
placed before the first step writing into the array, makes it at every run (so runs stay independent); each
writing step takes it as an extra input and writes its view; the Concat step copies the other inputs into their
runs and returns its own. A value is placed only where nothing else needs it as an array of its own: not a graph
output or a value a subgraph reads by name, and in one Concat only (the first place it appears in the latest).
"""
from __future__ import annotations

import math

import numpy as np

from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType
from onnxjit.providers.base import Step

BUFFER_SUFFIX = "::concat_buffer"


def _concat_geometry(node: Node) -> tuple[int, tuple[int, ...], list[tuple[int, ...]]] | None:
    """(axis, output shape, input shapes) of a Concat whose inputs are contiguous runs of its output, with static
    shapes, else None."""
    if node.domain or node.op_type != "Concat" or len(node.outputs) != 1 or not node.inputs:
        return None
    out_t = node.outputs[0].type
    if not isinstance(out_t, TensorType) or out_t.shape is None or not all(isinstance(d, int) for d in out_t.shape):
        return None
    shape = tuple(out_t.shape)
    a = node.attributes.get("axis")
    if a is None:
        return None
    axis = int(a.value) + (len(shape) if int(a.value) < 0 else 0)
    if not 0 <= axis < len(shape) or math.prod(shape[:axis]) != 1 or np.dtype(out_t.dtype).kind not in "fiub":
        return None
    in_shapes = []
    for v in node.inputs:
        t = v.type if v is not None else None
        if not isinstance(t, TensorType) or t.shape is None or tuple(t.shape)[:axis] + tuple(t.shape)[axis + 1:] \
                != shape[:axis] + shape[axis + 1:] or not isinstance(t.shape[axis], int):
            return None
        in_shapes.append(tuple(t.shape))
    if sum(s[axis] for s in in_shapes) != shape[axis]:
        return None
    return axis, shape, in_shapes


def _region(buf: np.ndarray, axis: int, start: int, size: int) -> np.ndarray:
    """buf's run [start, start + size) along `axis` (contiguous: the dims before `axis` are all 1)."""
    return buf[(slice(None),) * axis + (slice(start, start + size),)]


def place_concat_inputs(steps: list[Step], external: set[str]) -> list[Step]:
    """The steps with the Concat inputs their producers can write in place so placed (module docstring)."""
    producer = {name: i for i, s in enumerate(steps) for name in s.outputs if name}
    # value -> (root Concat output, axis, start along the axis, size along it)
    placed: dict[str, tuple[str, int, int, int]] = {}
    concats: dict[int, tuple[int, tuple, list, list[bool]]] = {}  # step index -> geometry and which inputs placed
    for i in range(len(steps) - 1, -1, -1):
        s = steps[i]
        if len(s.nodes) != 1 or s.bind is not None:
            continue
        geometry = _concat_geometry(s.nodes[0])
        if geometry is None:
            continue
        axis, shape, in_shapes = geometry
        out = s.outputs[0]
        root, _, base, _ = placed.get(out, (out, axis, 0, shape[axis]))
        flags, start = [], base
        for name, in_shape in zip(s.inputs, in_shapes):
            p = producer.get(name)
            ok = (p is not None and p < i and name not in external and name not in placed
                  and len(steps[p].outputs) == 1
                  and (getattr(steps[p].fn, "writes_into", False) or _is_concat(steps[p])))
            if ok:
                placed[name] = (root, axis, start, in_shape[axis])
            flags.append(ok)
            start += in_shape[axis]
        concats[i] = (axis, shape, in_shapes, flags)
    if not placed:
        return steps
    # the arrays to allocate, each before the first step that writes into it
    roots = {r for r, *_ in placed.values()}
    first: dict[str, int] = {}
    for name, (root, *_) in placed.items():
        first[root] = min(first.get(root, len(steps)), producer[name])
    dtypes = {s.outputs[0]: s.nodes[0].outputs[0].type.dtype for i, s in enumerate(steps) if i in concats}
    shapes = {steps[i].outputs[0]: concats[i][1] for i in concats}
    out: list[Step] = []
    for i, s in enumerate(steps):
        for root in sorted(r for r in roots if first[r] == i):
            out.append(_allocation(root, shapes[root], dtypes[root]))
        name = s.outputs[0] if s.outputs else ""
        if i in concats and (name in placed or name in roots):
            out.append(_concat_step(s, concats[i], placed.get(name, (name, concats[i][0], 0,
                                                                      concats[i][1][concats[i][0]]))))
        elif name in placed:
            out.append(_writing_step(s, placed[name]))
        else:
            out.append(s)
    return out


def _is_concat(step: Step) -> bool:
    return len(step.nodes) == 1 and _concat_geometry(step.nodes[0]) is not None


def _allocation(root: str, shape: tuple, dtype) -> Step:
    def allocate():
        return (np.empty(shape, dtype),)
    return Step([], "CPUExecutionProvider", [], [root + BUFFER_SUFFIX], allocate, name=f"allocate {root}")


def _writing_step(s: Step, where: tuple[str, int, int, int]) -> Step:
    """`s`, writing its output into its run of the Concat's array (an extra, last input)."""
    root, axis, start, size = where
    fn = s.fn

    def write_into(*args):
        return fn(*args[:-1], out=_region(args[-1], axis, start, size))
    return Step(s.nodes, s.provider, s.inputs + [root + BUFFER_SUFFIX], s.outputs, write_into, name=s.name)


def _concat_step(s: Step, geometry: tuple, where: tuple[str, int, int, int]) -> Step:
    """The Concat as a step that copies its inputs no step wrote into their runs, and returns its own run."""
    axis, shape, in_shapes, flags = geometry
    root, _, base, size = where
    copies, start = [], base
    for k, (in_shape, done) in enumerate(zip(in_shapes, flags)):
        if not done:
            copies.append((k, start, in_shape[axis]))
        start += in_shape[axis]
    inputs = [s.inputs[k] for k, _, _ in copies] + [root + BUFFER_SUFFIX]

    def concat_into(*args):
        buf = args[-1]
        for (_, at, n), v in zip(copies, args[:-1]):
            _region(buf, axis, at, n)[...] = v
        return (_region(buf, axis, base, size),)
    return Step(s.nodes, s.provider, inputs, s.outputs, concat_into, name=s.name)
