"""Compiled graphs and the plans that run them.

A CompiledGraph is a graph partitioned over providers and lowered to Steps in topological order. Running it
uses an ExecutionPlan for the feeds' signature (dtypes and shapes): the kernel each step binds for the shapes it
sees, and the values to drop after their last consumer. Plans are cached per signature, so repeated runs with
the same shapes do no planning work.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from onnxjit.cache import deferred_compile
from onnxjit.errors import OnnxJitError, RuntimeException
from onnxjit.ir.graph import Graph
from onnxjit.providers.base import Step
from onnxjit.session import native_plan

log = logging.getLogger("onnxjit")

MAX_PLANS = 64
_FROM_ENV = object()  # a step argument computed (or fed) in the run, not a fixed constant


def value_signature(v: Any) -> Any:
    """What a plan is specialized on: dtype and shape of tensors, the structure of other values."""
    if isinstance(v, np.ndarray):
        return (v.dtype, v.shape)
    if isinstance(v, list):
        return ("seq", len(v), tuple(value_signature(x) for x in v[:4]))
    if v is None:
        return None
    if hasattr(v, "shape") and hasattr(v, "dtype"):  # a device array
        return (v.dtype, v.shape)
    return type(v).__name__


class ExecutionPlan:
    """The kernels bound per step for one feed signature; filled during the first run with it.

    A step with a `bind(arg_signatures) -> kernel` method gets a kernel specialized for the dtypes and shapes it
    sees; the signature it was bound for is kept, because shapes after a data-dependent op (NonZero, Unique) can
    differ between runs with the same feeds' shapes, and then the step is bound again.
    """

    __slots__ = ("bound", "building", "native", "runs", "segments")

    def __init__(self, steps: list[Step]):
        # (signature, kernel) per step, replaced as one item so concurrent runs never see a mismatched pair
        self.bound: list[tuple[list, Callable] | None] = [None] * len(steps)
        # the runner with native segments for this signature (native_plan): None until built, False if none
        self.native: tuple[Callable, list] | bool | None = None
        self.segments: list = []  # its native_plan.Segments (their sources, for inspection)
        self.building: threading.Thread | None = None  # compiling the segments in the background
        self.runs = 0


class CompiledGraph:
    def __init__(self, graph: Graph, steps: list[Step], output_names: list[str] | None = None,
                 device_constants: dict[str, Any] | None = None):
        self.graph = graph
        self.steps = steps
        self.input_names = [v.name for v in graph.inputs]
        # where each graph output is read from after the run (a host copy when computed on a device)
        self.output_names = output_names or [v.name for v in graph.outputs]
        self.outer_names = list(graph.outer_names)
        self.constants = {name: v.const for name, v in graph.initializers.items()}
        # initializers a feed may override start each run in its environment; the others are bound into the
        # steps' arguments once (no per-run copy of every weight's name)
        self._overridable = {n: self.constants[n] for n in self.input_names if n in self.constants}
        fixed = {n: c for n, c in self.constants.items() if n not in self._overridable}
        fixed.update(device_constants or {})  # copies of constants on a device (partition.compile_graph)
        self._args = [[(n, fixed.get(n, _FROM_ENV)) for n in s.inputs] for s in steps]
        self.frees = self._last_uses()
        self._constant_outputs = any(n in self.constants for n in self.output_names)
        self._plans: OrderedDict[tuple, ExecutionPlan] = OrderedDict()
        self._lock = threading.Lock()
        self._binds = any(s.bind is not None for s in steps)
        # the straight-line runner and each step's arguments in it, generated at the first run (see _run_straight)
        self._straight: tuple[Callable, list] | None = None
        self._positional: tuple[Callable, list] | None = None  # the same, taking the inputs as arguments (caller)
        # set by partition.compile_graph: the inputs some step reads on the host (a device array fed to one of
        # these is copied to the host first), and a maker of this graph without the outputs' copies to the host
        self.host_read_inputs: set[str] = set(self.input_names)
        self.without_output_copies: Callable[[], "CompiledGraph"] | None = None
        # where native segments' sources are loaded from (set by partition.compile_graph; None: no segments), and
        # whether they compile in the background (runs go on step by step meanwhile) or "inline" in the run
        self.native_store = None
        self.segment_mode = "background"
        # steps whose kernels may run natively (native_plan), and how many a segment joins at least
        self._native_candidates = sum(1 for st in steps if st.bind is not None or hasattr(st.fn, "native"))
        self.min_segment_calls = 1 if len(steps) <= native_plan.SMALL_GRAPH_STEPS else native_plan.MIN_CALLS
        self._segmentable = self._native_candidates >= self.min_segment_calls

    def segment_single_calls(self) -> None:
        """Let a segment hold one kernel call: a Loop or Scan body, whose segment its step can iterate natively
        (native_loops)."""
        self.min_segment_calls = 1
        self._segmentable = self._native_candidates >= 1

    def _last_uses(self) -> list[list[str]]:
        """Names to drop after each step: intermediates past their last consumer (never outputs)."""
        keep = set(self.output_names)
        last: dict[str, int] = {}
        for i, s in enumerate(self.steps):
            for n in s.inputs:
                if n:
                    last[n] = i
            for n in s.outputs:
                if n and n not in last:
                    last[n] = i  # produced but never read: dropped at once
        frees: list[list[str]] = [[] for _ in self.steps]
        for n, i in last.items():
            if n not in keep:
                frees[i].append(n)
        return frees

    def plan_for(self, feeds: dict[str, Any]) -> ExecutionPlan:
        # value_signature inlined for arrays, in a list rather than a generator (650 -> 520 ns for one feed)
        return self._plan(tuple([(n, (v.dtype, v.shape) if type(v) is np.ndarray else value_signature(v))
                                 for n, v in feeds.items()]))

    def _plan(self, key: tuple) -> ExecutionPlan:
        """The plan kept under `key`. Any key that tells the feeds' signatures apart will do: a step that binds
        checks its own arguments' signature before it uses the kernel a plan holds for it (_bound_kernel), so
        plans only save rebinding when signatures alternate."""
        if len(self._plans) == 1:  # the common case, one signature: no order to keep, no lock to take
            plan = self._plans.get(key)
            if plan is not None:
                return plan
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
            plan = self._plans[key] = ExecutionPlan(self.steps)
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
            return plan

    @property
    def plan_count(self) -> int:
        return len(self._plans)

    def run(self, feeds: dict[str, Any], outer: dict[str, Any] | None = None, *,
            profile: list | None = None, should_stop: Callable[[], bool] | None = None) -> list[Any]:
        if profile is None and should_stop is None:
            return self._run_straight(feeds, outer)
        plan = self.plan_for(feeds)
        env = dict(self._overridable)
        if outer:
            env.update(outer)
        env.update(feeds)
        return self._run_steps(env, plan.bound, profile=profile, should_stop=should_stop)

    def _run_steps(self, env: dict[str, Any], bound: list, *, profile: list | None = None,
                   should_stop: Callable[[], bool] | None = None,
                   observe: Callable[[int, Callable, list, Any], None] | None = None) -> list[Any]:
        """Run the steps one by one over `env` (filled as they run) with the plan's `bound` kernels; the graph's
        outputs. `observe(i, fn, args, outs)` sees each step's kernel, arguments and outputs (_build_segments)."""
        for i, step in enumerate(self.steps):
            args = [(env[n] if n else None) if c is _FROM_ENV else c for n, c in self._args[i]]
            fn = step.fn
            if step.bind is not None:
                fn = self._bound_kernel(bound, i, args)
            t0 = time.perf_counter() if profile is not None else 0.0
            try:
                outs = fn(*args)
            except OnnxJitError:
                raise
            except Exception as e:  # noqa: BLE001 - a kernel failure becomes a typed error naming the node
                raise self._step_failure(i, args, e) from e
            if profile is not None:
                profile.append((step, t0, time.perf_counter()))
            if observe is not None:
                observe(i, fn, args, outs)
            for n, v in zip(step.outputs, outs):
                if n:
                    env[n] = v
            for n in self.frees[i]:
                env.pop(n, None)
            if should_stop is not None and should_stop():
                raise RuntimeException("run was terminated through RunOptions.terminate")
        if not self._constant_outputs:
            return [env[n] for n in self.output_names]
        # an output that is a constant of the graph is handed out as a copy, so a caller cannot change later runs
        outs = [env[n] if n in env else self.constants[n] for n in self.output_names]
        return [o.copy() if n in self.constants and o is self.constants[n] else o
                for n, o in zip(self.output_names, outs)]

    def _bound_kernel(self, bound: list, i: int, args: list) -> Callable:
        """Step i's kernel bound for these arguments' signatures (kept in the plan's `bound`)."""
        sig = [(a.dtype, a.shape) if type(a) is np.ndarray else value_signature(a) for a in args]
        entry = bound[i]
        if entry is None or entry[0] != sig:
            entry = bound[i] = (sig, self.steps[i].bind(sig))
        return entry[1]

    def _step_failure(self, i: int, args: list, e: BaseException) -> RuntimeException:
        """A kernel failure as a typed error naming the node, its provider and its inputs."""
        step = self.steps[i]
        node = step.nodes[0] if step.nodes else None
        where = node.label if node is not None else step.name
        shapes = ", ".join(f"{n or '<none>'}: {_describe(a)}" for n, a in zip(step.inputs, args))
        return RuntimeException(f"{where} failed on provider {step.provider} with inputs [{shapes}]: "
                                f"{type(e).__name__}: {e}")

    # --- the straight-line runner -------------------------------------------------------------------------
    # The loop above costs 1.5-2 us a step (the arguments gathered from a dict, the outputs put back, the frees,
    # the profile and stop checks), more than onnxruntime spends on a node. Without profiling or a stop check, a
    # run goes through Python source generated once per graph instead: one local variable per value, each step a
    # call with its arguments in place (constants bound as default arguments), `del` after a value's last use
    # (as the loop's frees), and steps that bind per signature through _bound_kernel. `i` holds the running
    # step, so a failure is reported as the loop reports it.
    def _run_straight(self, feeds: dict[str, Any], outer: dict[str, Any] | None) -> list[Any]:
        if self._straight is None:
            self._straight = self._straight_runner()
        if outer or self._overridable:
            env = {**self._overridable, **outer, **feeds} if outer else {**self._overridable, **feeds}
        else:
            env = feeds  # the runner only reads it
        if self._segmentable and self.native_store is not None:
            plan = self.plan_for(feeds)
            native = plan.native
            if native is None:
                return self._unsegmented_run(plan, env, (), False)
            return self._call_runner(self._straight if native is False else native, env, plan.bound, ())
        bound = self.plan_for(feeds).bound if self._binds else None
        return self._call_runner(self._straight, env, bound, ())

    def _unsegmented_run(self, plan: ExecutionPlan, env: dict[str, Any], inputs: tuple,
                         positional: bool) -> list[Any]:
        """A run of a plan without its native segments yet: the first binds the steps' kernels (and prepares
        their arguments), the second builds the segments (native_plan) while it runs the steps one by one."""
        with self._lock:
            plan.runs += 1
            # (not while kernels a first run deferred compile: the segments would call their stand-ins)
            build = plan.runs >= 2 and plan.native is None and not deferred_compile.pending()
            if build:
                plan.native = False  # (runs meanwhile go without segments)
        straight = self._positional if positional else self._straight
        if not build:
            return self._call_runner(straight, env, plan.bound, inputs)
        outs, runner = self._build_segments(plan, env, inputs, positional)
        if runner is not None:  # (else False, or set when the segments compiled in the background are ready)
            plan.native = runner
        return outs

    def _call_runner(self, straight: tuple[Callable, list], env: dict[str, Any], bound, inputs: tuple) -> list[Any]:
        runner, arg_vars = straight
        try:
            outs = runner(env, bound, *inputs)
        except OnnxJitError:
            raise
        except Exception as e:  # noqa: BLE001 - a kernel failure becomes a typed error naming the node
            frame = _frame_of(e.__traceback__, runner.__code__)
            i = frame.f_locals.get("i") if frame is not None else None
            if i is None:  # not in a step (a value missing from the environment): as it is
                raise
            args = [frame.f_locals.get(v) if v else c for v, c in arg_vars[i]]
            raise self._step_failure(i, args, e) from e
        if not self._constant_outputs:
            return outs
        return [o.copy() if n in self.constants and o is self.constants[n] else o
                for n, o in zip(self.output_names, outs)]

    def caller(self, outer: dict[str, Any] | None) -> Callable[..., list[Any]]:
        """This graph as a function of its inputs, positional in the graph's order, with the enclosing graphs'
        values `outer` bound: what a Loop, Scan or SequenceMap calls per iteration. Its runner takes the inputs as
        arguments (generated once, as the straight-line runner), so an iteration builds no environment: a Loop
        step spent 3.4 us an iteration around its body's 6 (the feeds' dict, the environment's merge, the calls
        between)."""
        if self._positional is None:
            self._positional = self._straight_runner(positional=True)
        straight, binds = self._positional, self._binds
        env = {**self._overridable, **outer} if outer else self._overridable  # (read only)
        call_runner = self._call_runner
        if self._segmentable and self.native_store is not None:
            plan, unsegmented = self._plan, self._unsegmented_run

            def call(*inputs):
                p = plan(tuple([v.shape if type(v) is np.ndarray else value_signature(v) for v in inputs]))
                native = p.native
                if native is None:
                    return unsegmented(p, env, inputs, True)
                return call_runner(straight if native is False else native, env, p.bound, inputs)
            return call
        if binds:  # plans keyed by the inputs' shapes alone, in order (1.0 -> 0.3 us an iteration; see _plan)
            plan = self._plan
            return lambda *inputs: call_runner(
                straight, env, plan(tuple([v.shape if type(v) is np.ndarray else value_signature(v)
                                           for v in inputs])).bound, inputs)
        return lambda *inputs: call_runner(straight, env, None, inputs)

    def _build_segments(self, plan: ExecutionPlan, env: dict[str, Any], inputs: tuple,
                        positional: bool) -> tuple[list[Any], tuple[Callable, list] | None]:
        """Run the steps one by one, asking each kernel how it runs natively (native_plan.NativeCall), and join
        the native steps that follow each other into segments. Returns the run's outputs and the plan's runner
        with the segments (None where there is none, or where it does not reproduce this run bit for bit)."""
        values = dict(env)
        values.update(zip(self.input_names, inputs))
        calls: list = []  # per step: its NativeCall or NativeView, None for an alias, False for neither
        arg_values: list = []
        fixed = [[c is not _FROM_ENV for _, c in step_args] for step_args in self._args]

        def note(i, fn, args, outs):
            step = self.steps[i]
            alias = getattr(step.fn, "passes_through", False) and bool(step.outputs[0]) and args[0] is not None \
                and not fixed[i][0]
            call, native = None, getattr(fn, "native", None)
            if native is not None:
                try:
                    call = native(*args)
                except Exception:  # noqa: BLE001 - a kernel that cannot say runs as it does
                    call = None
            if call is not None and not call.matches(outs):
                call = None
            calls.append(None if alias else call if call is not None else False)
            arg_values.append(args if alias or call is not None else None)
        outs = self._run_steps(values, plan.bound, observe=note)
        if not any(isinstance(c, (native_plan.NativeCall, native_plan.NativeCalls)) for c in calls):
            return outs, None
        # generated, compiled and checked against this run (on copies: the caller owns its feeds and outputs; not
        # of the values the segments hold as they are, which they check are the same objects)
        pins = {id(arg_values[i][k]) for i, c in enumerate(calls) if c for k in c.pinned}
        env, inputs, want = _copied(env, pins), _copied(inputs, pins), _copied(outs, pins)

        def segmented():
            made = self._segments(calls, arg_values, fixed)
            return self._finish_segments(plan, made, env, inputs, positional, want) if made else None
        if self.segment_mode == "inline":
            return outs, segmented()

        def finish():
            plan.native = segmented() or False
        plan.building = threading.Thread(target=finish, name="onnxjit-segments", daemon=True)
        plan.building.start()
        return outs, None

    def _finish_segments(self, plan: ExecutionPlan, made: list, env: dict[str, Any], inputs: tuple,
                         positional: bool, want: list) -> tuple[Callable, list] | None:
        """Compile the segments `made` ((segment, address table) pairs), and the plan's runner with them if a run
        through it reproduces `want` bit for bit; else None."""
        try:
            segments = [seg for seg, table in made if native_plan.load_segment(seg, table, self.native_store)]
            if not segments:
                return None
            runner = self._straight_runner(positional, segments)
            check = self._call_runner(runner, env, plan.bound, inputs)
            if any(seg.failed for seg in segments):
                raise RuntimeError("a segment's kernel raised where its step did not")
            for seg in segments:
                seg.fn.disable_compile()  # other argument types: TypeError, and the steps run one by one
            if all(native_plan.same_values(a, b) for a, b in zip(want, check)):
                plan.segments = segments
                return runner
            log.warning("onnxjit: native segments of %s did not reproduce the step-by-step run; not used",
                        self.graph.name or "a graph")
        except Exception as e:  # noqa: BLE001 - the steps run one by one, as they did
            log.warning("onnxjit: native segments of %s not used: %s: %s", self.graph.name or "a graph",
                        type(e).__name__, e)
        return None

    def wait_for_segments(self, timeout: float | None = None) -> None:
        """Wait for the plans' native segments being compiled in the background (tests, benchmarks)."""
        for plan in list(self._plans.values()):
            if plan.building is not None:
                plan.building.join(timeout)

    def _segments(self, calls: list, arg_values: list, fixed: list) -> list:
        """The native segments of runs of native steps (calls[i] a NativeCall, NativeCalls or NativeView, None for
        an alias), with min_segment_calls kernel calls or more, each with its address table, generated (not
        compiled yet; a kernel its step does not call may compile here)."""
        segments, i, n = [], 0, len(self.steps)
        while i < n:
            if calls[i] is False:
                i += 1
                continue
            j = i
            while j < n and calls[j] is not False:
                j += 1
            if sum(1 for c in calls[i:j] if isinstance(c, (native_plan.NativeCall, native_plan.NativeCalls))) \
                    >= self.min_segment_calls:
                live_after = {m for st in self.steps[j:] for m in st.inputs} | set(self.output_names)
                table: list = []
                try:
                    seg = native_plan.segment_source(self.steps, calls, i, j, arg_values, fixed, live_after, table)
                except Exception as e:  # noqa: BLE001 - these steps run one by one, as they did
                    log.warning("onnxjit: a native segment of %s not made: %s: %s", self.graph.name or "a graph",
                                type(e).__name__, e)
                    seg = None
                if seg is not None:
                    segments.append((seg, table))
            i = j
        return segments

    def _straight_runner(self, positional: bool = False, segments: list = ()) -> tuple[Callable, list]:
        """(the generated runner, per step the (local variable or '', constant) of each argument). The runner is
        run(env, bound), or with `positional` run(env, bound, *inputs) taking the graph's inputs as arguments.
        Each of `segments` (native_plan.Segment) is called in place of its steps where the shapes of the values
        it reads are those it was built for and its dispatcher takes their types; else its steps run."""
        names: dict[str, str] = {}  # value name -> local variable
        consts: dict[str, Any] = {"_bound_kernel": self._bound_kernel}

        def var(n: str) -> str:
            if n not in names:
                names[n] = f"v{len(names)}"
            return names[n]

        produced: set[str] = set(self.input_names) if positional else set()
        inputs = [var(n) for n in self.input_names] if positional else []
        loads: list[str] = []
        arg_vars: list = [None] * len(self.steps)  # per step: (local variable or '', constant) per argument

        def load(n: str) -> str:
            v = var(n)
            if n not in produced:
                produced.add(n)
                loads.append(f"    {v} = env[{n!r}]")
            return v

        def step_lines(i: int, pad: str) -> list[str]:
            step = self.steps[i]
            args, described = [], []
            for k, (n, c) in enumerate(self._args[i]):
                if not n:
                    args.append("None")
                    described.append(("", None))
                elif c is not _FROM_ENV:
                    cname = f"c{i}_{k}"
                    consts[cname] = c
                    args.append(cname)
                    described.append(("", c))
                else:
                    v = load(n)
                    args.append(v)
                    described.append((v, None))
            arg_vars[i] = described
            lines = [f"i = {i}"]
            call = ", ".join(args)
            alias = getattr(step.fn, "passes_through", False) and bool(step.outputs[0]) and args[0] != "None"
            if alias:
                # an Identity of a tensor: its output is its input, named without a call (in a Loop body, the
                # condition and a scan output passed on: half a microsecond each, every iteration)
                produced.add(step.outputs[0])
                lines.append(f"{var(step.outputs[0])} = {args[0]}")
            elif step.bind is not None:
                lines.append(f"o = _bound_kernel(bound, {i}, [{call}])({call})")
            else:
                consts[f"f{i}"] = step.fn
                lines.append(f"o = f{i}({call})")
            for k, n in enumerate(step.outputs):
                if n and not alias:
                    produced.add(n)
                    lines.append(f"{var(n)} = o[{k}]")
            dead = [names[n] for n in self.frees[i] if n in names]
            if dead:
                lines.append(f"del {', '.join(dead)}")
            return [pad + line for line in lines]

        body: list[str] = []
        at = {seg.start: (k, seg) for k, seg in enumerate(segments)}
        i = 0
        while i < len(self.steps):
            if i not in at:
                body += step_lines(i, "    ")
                i += 1
                continue
            k, seg = at[i]
            consts[f"s{k}"], consts[f"sa{k}"], consts[f"sg{k}"] = seg.fn, seg.addresses, seg
            consts["call_segment"], consts["pool_state"] = native_plan.call_segment, seg.state
            ins = [load(n) for n in seg.inputs]
            guards = [f"{v}.shape == {tuple(shape)!r}" for v, shape in zip(ins, seg.shapes)]
            for j, (n, obj) in enumerate(seg.pinned):  # a value the segment holds as a constant (an overridable B)
                consts[f"p{k}_{j}"] = obj
                guards.append(f"{load(n)} is p{k}_{j}")
            guard = " and ".join(guards) or "True"
            call = f"call_segment(s{k}, sa{k}, {seg.blas}" if seg.parallel or seg.blas else \
                f"s{k}(sa{k}, pool_state, 1, 1"
            body += [f"    i = {i}", "    o = None", f"    if {guard}:", "        try:",
                     f"            o = {call}{''.join(', ' + v for v in ins)})",
                     "        except TypeError:  # argument types the segment was not compiled for", "            pass",
                     "        if o is not None and o[0]:  # a kernel raised: its steps run, and raise",
                     f"            sg{k}.failed += 1", "            o = None",
                     "    if o is not None:"]
            for j, n in enumerate(seg.outputs):
                body.append(f"        {var(n)} = o[{j + 1}]")
            inside = range(seg.start, seg.stop)
            dead = [names[n] for m in inside for n in self.frees[m] if n in seg.inputs]
            if dead:
                body.append(f"        del {', '.join(dead)}")
            body.append("    else:")
            for m in inside:
                body += step_lines(m, "        ")
            produced.update(seg.outputs)
            i = seg.stop
        outs = []
        for n in self.output_names:
            if n in names:
                outs.append(names[n])
            elif n in self.constants and n not in self._overridable:
                consts[f"out_{len(outs)}"] = self.constants[n]
                outs.append(f"out_{len(outs)}")
            else:  # a graph input passed through (or an outer value): read at the top
                outs.append(var(n))
                loads.append(f"    {names[n]} = env[{n!r}]")
        params = "".join(f", {v}" for v in inputs) + "".join(f", {k}={k}" for k in consts)
        src = "\n".join([f"def run(env, bound{params}):", *loads, *body, f"    return [{', '.join(outs)}]", ""])
        scope: dict[str, Any] = {}
        exec(compile(src, f"<onnxjit plan of {self.graph.name or 'graph'}>", "exec"), consts, scope)
        return scope["run"], arg_vars


def _copied(values, keep: set):
    """A copy of a run's values (a dict, tuple or list) with every array copied but those whose ids are in `keep`."""
    def copy(v):
        return v.copy() if type(v) is np.ndarray and id(v) not in keep else v
    if isinstance(values, dict):
        return {k: copy(v) for k, v in values.items()}
    return type(values)(copy(v) for v in values)


def _frame_of(tb, code):
    """The frame of the traceback `tb` running `code`, or None."""
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return tb.tb_frame
        tb = tb.tb_next
    return None


def _describe(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype}{list(a.shape)}"
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return f"{a.dtype}{list(a.shape)} on a device"
    if isinstance(a, list):
        return f"sequence of {len(a)}"
    return type(a).__name__
