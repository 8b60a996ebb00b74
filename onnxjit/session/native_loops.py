"""Loop and Scan iterations in compiled code, where the whole body is one native segment.

A body's iteration through its runner costs 3-4 us of Python (the plan lookup, the runner, the outputs' lists,
the scan outputs' slices and stacking) where onnxruntime spends 1.3-1.5 us: a 32-trip Loop over a [1,64] state
took 2.8x onnxruntime's time. Once the body's plan has been run and joined into one segment (native_plan; a
body's segment may hold a single kernel call), the Loop or Scan step generates a driver: a Numba function that
calls the body's segment function once per iteration, carries the state, and writes the scan outputs into arrays
it grows as it goes. It is used for the input signature it was built for, after one run through it reproduced the
Python iterations bit for bit; the Python iterations run otherwise (other shapes or types, a body that does not
join, a Loop without a trip count, scan axes or directions other than the defaults).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from onnxjit.session import native_plan
from onnxjit.session.native_plan import Segment, _kernel_import

log = logging.getLogger("onnxjit")


def whole_body_segment(body) -> Segment | bool | None:
    """The segment running all of `body` (a CompiledGraph with one plan), False where there will be none, None
    where its plan has not been joined yet."""
    plans = list(body._plans.values())
    if len(plans) != 1:
        return False if plans else None
    plan = plans[0]
    if plan.native is None or (plan.building is not None and plan.building.is_alive()):
        return None  # not built yet, or compiling in the background
    if len(plan.segments) != 1:
        return False
    seg = plan.segments[0]
    if seg.start != 0 or seg.stop != len(body.steps) or any(n not in seg.outputs for n in body.output_names):
        return False
    return seg


def _header(seg: Segment) -> list[str] | None:
    ref = _kernel_import(seg.fn)
    if ref is None:
        return None
    return ["import numpy as np", "from onnxjit.cache.jit import njit", f"from {ref[0]} import {ref[1]} as body",
            "", "", "@njit(cache=CACHE, nogil=True)"]


def _grow(var: str, at: str, shape: tuple, dtype) -> list[str]:
    """Lines making room for row `at` of the scan output `var` (doubling it)."""
    return [f"        if {at} == {var}.shape[0]:",
            f"            grown = np.empty((2 * {at} + 1, {''.join(f'{d}, ' for d in shape)}), np.{dtype.name})",
            f"            grown[:{at}] = {var}[:{at}]",
            f"            {var} = grown"]


def scan_source(seg: Segment, body, n_state: int, outer: list[str]) -> str | None:
    """A driver kernel(addresses, state, threads, yield_every, *states, *scan_inputs, *outer_values) ->
    (failed, *states, *scan_outputs) of a Scan (opset 9+, axes and directions 0) whose body runs as `seg` (the
    first four arguments and `failed` as the segment's)."""
    head = _header(seg)
    names = body.input_names
    exprs = {n: f"s{k}" for k, n in enumerate(names[:n_state])}
    exprs.update({n: f"x{j}[t]" for j, n in enumerate(names[n_state:])})
    exprs.update({n: f"o{j}" for j, n in enumerate(outer)})
    if head is None or any(n not in exprs for n in seg.inputs) or len(names) == n_state:
        return None
    at = {n: k for k, n in enumerate(seg.outputs)}
    scans = body.output_names[n_state:]
    params = [f"s{k}" for k in range(n_state)] + [f"x{j}" for j in range(len(names) - n_state)] + \
        [f"o{j}" for j in range(len(outer))]
    lines = head + [f"def kernel(addresses, state, threads, yield_every, {', '.join(params)}):", "    failed = 0",
                    "    n = x0.shape[0]"]
    for j, n in enumerate(scans):
        shape, dtype = seg.out_types[at[n]]
        lines.append(f"    y{j} = np.empty((n, {''.join(f'{d}, ' for d in shape)}), np.{dtype.name})")
    lines += ["    for t in range(n):",
              f"        r = body(addresses, state, threads, yield_every, {', '.join(exprs[n] for n in seg.inputs)})",
              "        failed += r[0]"]
    lines += [f"        s{k} = r[{at[n] + 1}]" for k, n in enumerate(body.output_names[:n_state])]
    lines += [f"        y{j}[t] = r[{at[n] + 1}]" for j, n in enumerate(scans)]
    outs = ["failed"] + [f"s{k}" for k in range(n_state)] + [f"y{j}" for j in range(len(scans))]
    lines += [f"    return ({''.join(o + ', ' for o in outs)})", ""]
    return "\n".join(lines)


def loop_source(seg: Segment, body, n_carried: int, outer: list[str]) -> str | None:
    """A driver kernel(addresses, state, threads, yield_every, trips, go, cond_in, *carried, *outer_values) ->
    (failed, *carried, *scan_outputs) of a Loop with a trip count whose body runs as `seg` (`cond_in` the body's
    condition input, a read-only true; the first four arguments and `failed` as the segment's)."""
    head = _header(seg)
    names = body.input_names
    exprs = {names[0]: "it", names[1]: "cond_in"}
    exprs.update({n: f"c{k}" for k, n in enumerate(names[2:])})
    exprs.update({n: f"o{j}" for j, n in enumerate(outer)})
    if head is None or any(n not in exprs for n in seg.inputs):
        return None
    at = {n: k for k, n in enumerate(seg.outputs)}
    scans = body.output_names[1 + n_carried:]
    params = ["trips", "go", "cond_in"] + [f"c{k}" for k in range(n_carried)] + [f"o{j}" for j in range(len(outer))]
    lines = head + [f"def kernel(addresses, state, threads, yield_every, {', '.join(params)}):", "    failed = 0"]
    for j, n in enumerate(scans):
        shape, dtype = seg.out_types[at[n]]
        lines.append(f"    y{j} = np.empty((0, {''.join(f'{d}, ' for d in shape)}), np.{dtype.name})")
    lines += ["    i = 0", "    while go and i < trips:"]
    if names[0] in seg.inputs:  # the iteration number, a new array each time (the body may pass it on)
        lines += ["        it = np.empty((), np.int64)", "        it[()] = i"]
    lines += [f"        r = body(addresses, state, threads, yield_every, {', '.join(exprs[n] for n in seg.inputs)})",
              "        failed += r[0]", f"        go = r[{at[body.output_names[0]] + 1}].item() != 0"]
    lines += [f"        c{k} = r[{at[n] + 1}]" for k, n in enumerate(body.output_names[1:1 + n_carried])]
    for j, n in enumerate(scans):
        shape, dtype = seg.out_types[at[n]]
        lines += _grow(f"y{j}", "i", shape, dtype) + [f"        y{j}[i] = r[{at[n] + 1}]"]
    lines.append("        i += 1")
    outs = ["failed"] + [f"c{k}" for k in range(n_carried)] + [f"y{j}[:i].copy()" for j in range(len(scans))]
    lines += [f"    return ({''.join(o + ', ' for o in outs)})", ""]
    return "\n".join(lines)


def _signature(args) -> tuple | None:
    """The driver's key: arrays' dtypes and shapes (numbers, a trip count or a condition, by their types)."""
    sig = []
    for a in args:
        if type(a) is np.ndarray:
            sig.append((a.dtype.char, a.shape, a.flags.writeable))
        elif type(a) in (int, bool):
            sig.append(type(a))
        else:
            return None
    return tuple(sig)


class NativeIterations:
    """A Loop's or Scan's drivers by the signature of their arguments (`source_of(seg)` writes one)."""

    def __init__(self, body, source_of: Callable[[Segment], str | None], shapes_fit: Callable[[Segment, tuple], bool]):
        self.body = body
        self.source_of = source_of
        self.shapes_fit = shapes_fit  # whether the driver's arguments have the shapes the segment was built for
        self.drivers: dict[tuple, Any] = {}  # signature -> (driver, addresses, parallel, blas, pool state), or False

    def run(self, args: tuple, python_run: Callable[[], list]) -> list:
        """The step's outputs for the driver's arguments `args` (after the addresses): through the driver where
        there is one for their signature, else `python_run()` (which may let one be built)."""
        key = _signature(args)
        driver = self.drivers.get(key) if key is not None else False
        if driver is False:
            return python_run()
        if driver is None:
            return self._build(key, args, python_run)
        try:
            got = _call_driver(driver, args)
        except TypeError:  # argument types it was not compiled for (a non-contiguous input)
            return python_run()
        return python_run() if got[0] else list(got[1:])  # a kernel raised: the Python iterations raise

    def _build(self, key: tuple, args: tuple, python_run: Callable[[], list]) -> list:
        seg = whole_body_segment(self.body)
        want = python_run()
        if seg is None:  # the body's plan is not joined yet: later
            return want
        self.drivers[key] = False
        if seg is False or self.body.native_store is None or not self.shapes_fit(seg, args):
            return want
        try:
            source = self.source_of(seg)
            if source is None:
                return want
            driver = (self.body.native_store.load(source).kernel, seg.addresses, seg.parallel, seg.blas, seg.state)
            got = _call_driver(driver, args)
            driver[0].disable_compile()
            if not got[0] and len(got) == len(want) + 1 and \
                    all(native_plan.same_values(a, b) for a, b in zip(want, got[1:])):
                self.drivers[key] = driver
            else:
                log.warning("onnxjit: the native iterations of %s did not reproduce the Python ones; not used",
                            self.body.graph.name or "a body")
        except Exception as e:  # noqa: BLE001 - the iterations stay in Python
            log.warning("onnxjit: native iterations of %s not used: %s: %s", self.body.graph.name or "a body",
                        type(e).__name__, e)
        return want


def _call_driver(driver, args):
    fn, addresses, parallel, blas, state = driver
    if parallel or blas:
        return native_plan.call_segment(fn, addresses, blas, *args)
    return fn(addresses, state, 1, 1, *args)


def fits(seg: Segment, names: list[str], args: tuple, leading: dict[str, int]) -> bool:
    """Whether the values `args` for the body inputs / outer names `names` have the shapes `seg` was built for
    (a scanned input: past its leading axis, per `leading`) and are the objects it holds (Segment.pinned)."""
    given = dict(zip(names, args))
    if any(given.get(n) is not obj for n, obj in seg.pinned):
        return False
    for n, shape in zip(seg.inputs, seg.shapes):
        a = given.get(n)
        if a is None:
            continue
        have = a.shape[leading[n]:] if n in leading else a.shape
        if tuple(have) != tuple(shape):
            return False
    return True

