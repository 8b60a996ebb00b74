"""If, Loop, Scan and SequenceMap: steps that run compiled subgraphs.

Bodies are compiled by the session like any graph (partitioned over the same providers), so their nodes run on
the CPU provider's kernels as well as the fallback's. Values a body reads from enclosing graphs arrive as the
step's implicit inputs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from onnxjit.errors import RuntimeException
from onnxjit.ir.graph import Node
from onnxjit.ir.types import TensorType
from onnxjit.providers.base import GraphCompiler, Step
from onnxjit.session.native_loops import NativeIterations, fits, loop_source, scan_source

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _attr(node: Node, name: str, default: Any = None) -> Any:
    a = node.attributes.get(name)
    return default if a is None else a.value


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


# a Loop body's condition input, made once: read-only, so a body passing it on as an output shares nothing writable
_TRUE = _read_only(np.array(True))


def _scalar_bool(v: Any) -> bool:
    if type(v) is np.ndarray and v.ndim == 0:  # the common case, 0.1 us against 1.5
        return bool(v)
    return bool(np.asarray(v).reshape(-1)[0])


def _reads(body, i: int) -> bool:
    """Whether the body reads its input i (a kernel's input or a graph output): a Loop skips making the
    iteration number and condition values of a body that reads neither (a microsecond of every iteration)."""
    v = body.graph.inputs[i]
    return bool(v.uses) or v.name in body.output_names or v.name in body.graph.external_names()


def _stack(parts: list[np.ndarray], t, axis: int = 0) -> np.ndarray:
    """Scan outputs stacked along a new `axis`; with no iteration, empty and shaped as the body declares `t`."""
    if not parts:
        dims = [d if isinstance(d, int) else 0 for d in (t.shape or ())] if isinstance(t, TensorType) else []
        empty = np.zeros((0, *dims), dtype=t.dtype if isinstance(t, TensorType) else np.float32)
        return np.moveaxis(empty, 0, axis + empty.ndim if axis < 0 else axis)
    axis = axis + parts[0].ndim + 1 if axis < 0 else axis
    return np.stack(parts, axis=axis)


def _if(node, bodies, outer_of):
    then_g, else_g = bodies["then_branch"], bodies["else_branch"]

    def run_if(cond, *outer_vals):
        g = then_g if _scalar_bool(cond) else else_g
        return g.run({}, outer_of(g, outer_vals))
    return run_if


def _loop(node, bodies, outer_of):
    body = bodies["body"]
    n_carried = len(body.input_names) - 2
    reads_i, reads_cond = _reads(body, 0), _reads(body, 1)
    outer_names = list(body.outer_names)
    driver_names = [None, None, body.input_names[1], *body.input_names[2:], *outer_names]

    def shapes_fit(seg, args):
        carried = args[3:3 + n_carried]
        return fits(seg, driver_names, args, {}) and _kept(seg, body.output_names[1:1 + n_carried], carried)
    natives = NativeIterations(body, lambda seg: loop_source(seg, body, n_carried, outer_names), shapes_fit)

    def iterate(trips, keep_going, carried, outer):
        call = body.caller(outer)
        scan_types = [v.type for v in body.graph.outputs[1 + n_carried:]]
        scans: list[list[Any]] = [[] for _ in scan_types]
        i = 0
        # an iteration's condition input is always true (the loop stops when it is not); inputs the body does not
        # read are passed as None
        cond_in = _TRUE if reads_cond else None
        while keep_going and (trips is None or i < trips):
            outs = call(np.array(i, dtype=np.int64) if reads_i else None, cond_in, *carried)
            # the spec says a body's cond is ignored when the Loop has no cond input; onnxruntime stops on it
            keep_going = _scalar_bool(outs[0])
            carried = outs[1:1 + n_carried]
            if scans:
                for acc, v in zip(scans, outs[1 + n_carried:]):
                    acc.append(v)
            i += 1
        return list(carried) + [_stack(acc, t) for acc, t in zip(scans, scan_types)]

    def run_loop(max_trip, cond, *rest):
        carried, outer = rest[:n_carried], outer_of(body, rest[n_carried:])
        trips = None if max_trip is None else int(np.asarray(max_trip).reshape(-1)[0])
        keep_going = True if cond is None else _scalar_bool(cond)
        if trips is None or trips <= 0 or not keep_going:
            return iterate(trips, keep_going, carried, outer)
        return natives.run((trips, True, _TRUE, *carried, *[outer[n] for n in outer_names]),
                           lambda: iterate(trips, keep_going, carried, outer))
    return run_loop


def _kept(seg, outputs, inputs) -> bool:
    """Whether the body's carried `outputs` come out of its segment with the shapes and dtypes of `inputs`."""
    at = {n: k for k, n in enumerate(seg.outputs)}
    return all(type(a) is np.ndarray and seg.out_types[at[n]][0] == a.shape and seg.out_types[at[n]][1] == a.dtype
               for n, a in zip(outputs, inputs))


def _scan_once(body, n_state, states, scans, in_axes, in_dirs, out_axes, out_dirs, outer):
    length = scans[0].shape[in_axes[0]] if scans else 0
    collected: list[list[np.ndarray]] = [[] for _ in range(len(body.output_names) - n_state)]
    call = body.caller(outer)
    for t in range(length):
        # along axis 0 a view (the body's kernels never write their inputs), else np.take's copy
        slices = [x[length - 1 - t if in_dirs[j] else t] if in_axes[j] == 0 else
                  np.asarray(np.take(x, length - 1 - t if in_dirs[j] else t, axis=in_axes[j]))
                  for j, x in enumerate(scans)]
        outs = call(*states, *slices)
        states = outs[:n_state]
        for acc, v in zip(collected, outs[n_state:]):
            acc.append(v)
    results = list(states)
    for k, acc in enumerate(collected):
        if out_dirs[k]:
            acc = acc[::-1]
        results.append(_stack(acc, body.graph.outputs[n_state + k].type, out_axes[k]))
    return results


def _scan(node, bodies, outer_of):
    body = bodies["body"]
    m = int(_attr(node, "num_scan_inputs"))
    n_state = len(body.input_names) - m
    k = len(body.output_names) - n_state
    if node.opset <= 8:  # Scan-8: optional sequence_lens first, then a batch axis 0 on every input
        dirs = list(_attr(node, "directions", [0] * m))

        def run_scan8(seq_lens, *rest):
            ins, outer = rest[:n_state + m], outer_of(body, rest[n_state + m:])
            batch = ins[0].shape[0]
            per_batch = []
            for b in range(batch):
                scans = [x[b] for x in ins[n_state:]]
                if seq_lens is not None:
                    scans = [x[:int(seq_lens[b])] for x in scans]
                per_batch.append(_scan_once(body, n_state, [x[b] for x in ins[:n_state]], scans, [0] * m, dirs,
                                            [0] * k, [0] * k, outer))
            # a batch entry shorter than the longest gets its scan outputs zero-padded, as onnxruntime does
            full = ins[n_state].shape[1] if m else 0
            for r in per_batch:
                for i in range(n_state, n_state + k):
                    short = full - r[i].shape[0]
                    if short > 0:
                        r[i] = np.concatenate([r[i], np.zeros((short, *r[i].shape[1:]), r[i].dtype)])
            return [np.stack([r[i] for r in per_batch]) for i in range(n_state + k)]
        return run_scan8

    in_dirs = list(_attr(node, "scan_input_directions", [0] * m))
    out_axes = list(_attr(node, "scan_output_axes", [0] * k))
    out_dirs = list(_attr(node, "scan_output_directions", [0] * k))
    outer_names = list(body.outer_names)
    driver_names = [*body.input_names, *outer_names]
    scanned = {n: 1 for n in body.input_names[n_state:]}

    def shapes_fit(seg, args):
        return fits(seg, driver_names, args, scanned) and _kept(seg, body.output_names[:n_state], args[:n_state])
    natives = NativeIterations(body, lambda seg: scan_source(seg, body, n_state, outer_names), shapes_fit)
    by_default = not any(in_dirs) and not any(out_axes) and not any(out_dirs)

    def run_scan(*rest):
        ins, outer = rest[:n_state + m], outer_of(body, rest[n_state + m:])
        scans = ins[n_state:]
        in_axes = [a + x.ndim if a < 0 else a for a, x in zip(_attr(node, "scan_input_axes", [0] * m), scans)]

        def iterate():
            return _scan_once(body, n_state, list(ins[:n_state]), scans, in_axes, in_dirs, out_axes, out_dirs, outer)
        if not by_default or any(in_axes) or not m or any(type(x) is not np.ndarray or not x.ndim for x in scans) \
                or len({x.shape[0] for x in scans}) != 1 or not scans[0].shape[0]:
            return iterate()
        return natives.run((*ins, *[outer[n] for n in outer_names]), iterate)
    return run_scan


def _sequence_map(node, bodies, outer_of):
    body = bodies["body"]
    n_in = len(node.inputs)

    def run_sequence_map(seq, *rest):
        extra, outer = rest[:n_in - 1], outer_of(body, rest[n_in - 1:])
        results: list[list[Any]] = [[] for _ in body.output_names]
        call = body.caller(outer)
        for i in range(len(seq)):
            for acc, v in zip(results, call(seq[i], *[x[i] if isinstance(x, list) else x for x in extra])):
                acc.append(v)
        return results
    return run_sequence_map


_BUILDERS: dict[str, Callable] = {"If": _if, "Loop": _loop, "Scan": _scan, "SequenceMap": _sequence_map}


def control_flow_step(node: Node, compiler: GraphCompiler, provider: str) -> Step:
    bodies = {name: compiler.compile_subgraph(a.value) for name, a in node.attributes.items()
              if hasattr(a.value, "nodes")}
    if node.op_type in ("Loop", "Scan"):  # a body of one kernel call is worth a segment: its step iterates it
        for g in bodies.values():
            g.segment_single_calls()
    implicit: list[str] = []
    for g in bodies.values():
        implicit.extend(n for n in g.outer_names if n not in implicit)
    position = {n: i for i, n in enumerate(implicit)}

    def outer_of(g, outer_vals) -> dict[str, Any]:
        return {n: outer_vals[position[n]] for n in g.outer_names}

    fn = _BUILDERS[node.op_type](node, bodies, outer_of)
    explicit = [v.name if v is not None else "" for v in node.inputs]

    def run(*args):
        try:
            return fn(*args)
        except RuntimeException as e:
            raise RuntimeException(f"in the body of {node.label}: {e}") from e
    return Step([node], provider, explicit + implicit, [v.name for v in node.outputs], run, implicit=implicit)
