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

    def run_loop(max_trip, cond, *rest):
        carried, outer_vals = rest[:n_carried], rest[n_carried:]
        call = body.caller(outer_of(body, outer_vals))
        trips = None if max_trip is None else int(np.asarray(max_trip).reshape(-1)[0])
        keep_going = True if cond is None else _scalar_bool(cond)
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
    return run_loop


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

    def run_scan(*rest):
        ins, outer = rest[:n_state + m], outer_of(body, rest[n_state + m:])
        scans = ins[n_state:]
        in_axes = [a + x.ndim if a < 0 else a for a, x in zip(_attr(node, "scan_input_axes", [0] * m), scans)]
        out_axes = list(_attr(node, "scan_output_axes", [0] * k))
        return _scan_once(body, n_state, list(ins[:n_state]), scans, in_axes,
                          list(_attr(node, "scan_input_directions", [0] * m)), out_axes,
                          list(_attr(node, "scan_output_directions", [0] * k)), outer)
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
