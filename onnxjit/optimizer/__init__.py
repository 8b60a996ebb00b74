"""The graph optimizer: rewrites the IR before partitioning, by onnxruntime's optimization levels.

A pass is a function `(graph, ctx) -> int` (how many rewrites it made) registered with `@graph_pass(level)`.
`optimize` runs the passes of each level, in registration order, over the graph and every subgraph, and repeats
a level until no pass changes anything (each rewrite can expose another: a folded Conv+BN leaves a Conv+Relu).
Passes keep graph inputs and outputs (names, dtypes, shapes) as they are and never change results beyond float
rounding. Fused ops that ONNX has no operator for live in the `com.onnxjit` domain (`onnxjit.contrib`).

Modules, one per pass family: qdq (DequantizeLinear -> op -> QuantizeLinear groups as integer ops, as
onnxruntime's QDQ selectors rewrite them, at extended and above, before constant folding dequantizes the weights),
matmul_integer_to_float (quantize_dynamic's MatMulInteger -> Cast -> Mul as com.microsoft MatMulIntegerToFloat, a
bias Add after it as its bias, a DynamicQuantizeLinear before it into DynamicQuantizeMatMul, at extended and
above), constant_folding, eliminate (Identity/Dropout/no-op nodes, dead nodes), cse (duplicate
nodes), conv_folding (Conv+BN/Add/Mul), gemm_fusion (MatMul+Add), transpose_reshape, activation_fusion
(Conv/Gemm/MatMul+activation), layer_norm, gelu, attention, layout (channels-last depthwise convolutions, at LAYOUT).
"""
from __future__ import annotations

import collections
import importlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

from onnxjit.ir.graph import Graph, Model

log = logging.getLogger("onnxjit")

BASIC, EXTENDED, LAYOUT = 1, 2, 3  # onnxruntime's ORT_ENABLE_BASIC / _EXTENDED / _LAYOUT; ORT_ENABLE_ALL = 99
MAX_ROUNDS = 10
CPU_PROVIDER = "CPUExecutionProvider"

PASS_MODULES = ("qdq", "matmul_integer_to_float", "constant_folding", "eliminate", "cse", "conv_folding",
                "gemm_fusion", "transpose_reshape", "activation_fusion", "layer_norm", "gelu", "attention", "layout")


@dataclass
class PassContext:
    """What a pass may consult: the model's opsets and the providers nodes will be assigned to."""

    model: Model
    providers: tuple[str, ...] = (CPU_PROVIDER,)
    level: int = BASIC  # the session's optimization level (a pass of one tier may depend on a later one)
    counter: collections.Counter = field(default_factory=collections.Counter)
    visited: set = field(default_factory=set)  # (pass, graph id) pairs of passes that look at a graph once

    def first_visit(self, name: str, graph: Graph) -> bool:
        """True the first time pass `name` asks about `graph`: for a pass whose decisions hold for the graph as it
        came, not as its own rewrites leave it (the level's next round would see those)."""
        key = (name, id(graph))
        if key in self.visited:
            return False
        self.visited.add(key)
        return True

    def opset(self, domain: str = "") -> int:
        return self.model.opset_imports.get(domain, 0)

    def use_domain(self, domain: str, version: int = 1) -> None:
        """Declare an opset import for the fused nodes a pass adds."""
        self.model.opset_imports.setdefault(domain, version)


Pass = Callable[[Graph, PassContext], int]


class OptimizerError(Exception):
    """A pass failed (a bug in it, or a model it did not foresee). The graph may be half rewritten: sessions then
    reload the model and run it unoptimized."""


@dataclass(frozen=True)
class RegisteredPass:
    name: str
    level: int
    fn: Pass
    providers: tuple[str, ...] = ()  # the pass runs only when the first provider chosen is one of these


PASSES: list[RegisteredPass] = []


def graph_pass(level: int, name: str | None = None, providers: tuple[str, ...] = ()) -> Callable[[Pass], Pass]:
    """Register a pass at `level`; with `providers`, it runs only when the first provider chosen is one of them
    (onnxruntime's extended fusions are provider-aware in the same way)."""
    def deco(fn: Pass) -> Pass:
        PASSES.append(RegisteredPass(name or fn.__name__, level, fn, tuple(providers)))
        return fn
    return deco


def _load_passes() -> None:
    for m in PASS_MODULES:
        importlib.import_module(f"onnxjit.optimizer.{m}")


@dataclass
class OptimizationReport:
    """Node counts per op type before and after, and how many rewrites each pass made."""

    before: collections.Counter
    after: collections.Counter
    rewrites: collections.Counter


def op_counts(graph: Graph) -> collections.Counter:
    return collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in graph.all_nodes())


def _graphs(graph: Graph) -> list[Graph]:
    """The graph and its subgraphs, innermost first (a body's rewrites may make its parent's possible)."""
    out: list[Graph] = []
    for n in graph.nodes:
        for g in n.subgraphs():
            out.extend(_graphs(g))
    out.append(graph)
    return out


def optimize(model: Model, level: int, providers: Sequence[str] = (CPU_PROVIDER,)) -> OptimizationReport:
    """Rewrite `model` in place up to `level` (a GraphOptimizationLevel value)."""
    from onnxjit.optimizer.pattern import forget_graph_facts
    _load_passes()
    ctx = PassContext(model, tuple(providers), int(level))
    before = op_counts(model.graph)
    forget_graph_facts()
    try:
        _run_levels(model, level, ctx)
    finally:
        forget_graph_facts()
    after = op_counts(model.graph)
    if before != after:
        log.debug("onnxjit optimizer: %s", dict(ctx.counter))
    return OptimizationReport(before, after, ctx.counter)


def _run_levels(model: Model, level: int, ctx: PassContext) -> None:
    for tier in (BASIC, EXTENDED, LAYOUT):
        if level < tier:
            break
        # a pass writing ops of one provider runs when that provider comes first: with CUDA first, the nodes are
        # to run there, and CPU-only fused ops would pull them back to the host
        passes = [p for p in PASSES if p.level == tier
                  and (not p.providers or (ctx.providers and ctx.providers[0] in p.providers))]
        _to_fixpoint(model, passes, ctx)
        missing = _shapes_missing(model.graph) if tier == BASIC else 0
        if missing:
            # weights computed by constant subgraphs (ConstantOfShape, ...) left their readers' shapes unknown
            # at load; folded, they let inference find them, which passes with static-shape checks need
            from onnxjit.ir.serde import infer_model_types
            infer_model_types(model)
            if _shapes_missing(model.graph) < missing:
                _to_fixpoint(model, passes, ctx)


def _to_fixpoint(model: Model, passes: list[RegisteredPass], ctx: PassContext) -> None:
    for _ in range(MAX_ROUNDS):
        changed = 0
        for p in passes:
            for g in _graphs(model.graph):
                try:
                    n = p.fn(g, ctx)
                except Exception as e:  # noqa: BLE001 - named, and handled by the caller
                    raise OptimizerError(f"graph optimization pass {p.name!r} failed on graph {g.name!r}: "
                                         f"{type(e).__name__}: {e}") from e
                if n:
                    ctx.counter[p.name] += n
                    changed += n
                    g.sort()
        if not changed:
            break


def _shapes_missing(graph: Graph) -> int:
    """How many node outputs have no known shape."""
    return sum(1 for n in graph.nodes for v in n.outputs
               if v.name and (v.type is None or getattr(v.type, "shape", ()) is None))


def optimize_model(model, level: int, providers: Sequence[str] = (CPU_PROVIDER,)):
    """Load `model` (a path, bytes or ModelProto), optimize it as a session would and return
    (optimized onnx.ModelProto, OptimizationReport): what `onnxjit optimize` writes."""
    from onnxjit.ir.serde import from_onnx, to_onnx
    from onnxjit.session.loader import load_model_proto
    proto, base_dir = load_model_proto(model)
    m = from_onnx(proto, base_dir)
    report = optimize(m, level, providers)
    return to_onnx(m), report


def format_counts(report: OptimizationReport) -> str:
    """Node counts per op type before and after, as a text table (most frequent first)."""
    ops = sorted(set(report.before) | set(report.after), key=lambda o: (-report.before[o], -report.after[o], o))
    width = max([len(o) for o in ops] + [len("total")])
    lines = [f"{'op type':<{width}}  {'before':>6}  {'after':>6}"]
    lines += [f"{o:<{width}}  {report.before[o]:>6}  {report.after[o]:>6}" for o in ops]
    lines.append(f"{'total':<{width}}  {sum(report.before.values()):>6}  {sum(report.after.values()):>6}")
    return "\n".join(lines)
