"""Calibration: the float range of every activation static quantization needs, measured by running the model on
the reader's batches on onnxjit's own InferenceSession.

The model is augmented with the tensors to calibrate as extra graph outputs (the inputs and outputs of the nodes
whose op types are to be quantized, float ones, not initializers), and run with graph optimizations off, as
onnxruntime's calibrator runs it, so the intermediate values are those of the unoptimized graph. Methods, with
onnxruntime's defaults and arithmetic (the ranges, hence the scales, come out equal):
- MinMax: the minimum and maximum over all batches (with CalibMovingAverage, the mean of the batches' minima and
  maxima); CalibTensorRangeSymmetric makes the range [-m, m].
- Entropy: a 128-bin histogram over [-t, t] (t: the largest magnitude seen) and the threshold whose 128-bin
  quantized distribution has the least KL divergence from it.
- Percentile: a 2048-bin histogram of the magnitudes and the 99.999th percentile (CalibPercentile), as [-p, p]
  (asymmetric, with CalibTensorRangeSymmetric False: the two tails cut from a histogram of the values).
- Distribution: a 2048-bin histogram's mean and deviation, and its edges as the range.
A progress bar counts the batches on a terminal, by the mechanism (and the session config entry
`session.onnxjit.show_progress`) that the kernel compilation bar uses; there is none when stderr is not a terminal.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from onnxjit.errors import InvalidArgument
from onnxjit.progress import progress_bar
from onnxjit.quantization.types import CalibrationMethod, TensorData, TensorsData

FLOAT_ELEM_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)
ENTROPY_BINS = ENTROPY_QUANTIZED_BINS = 128
HISTOGRAM_BINS = 2048  # Percentile and Distribution
DEFAULT_PERCENTILE = 99.999


def tensors_to_calibrate(model: onnx.ModelProto, op_types) -> list[str]:
    """The float, non-initializer inputs and outputs of the nodes whose op type is in `op_types` (every node when
    it is empty), in graph order."""
    g = model.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*g.value_info, *g.output, *g.input)
             if vi.type.HasField("tensor_type")}
    initializers = {t.name for t in g.initializer}
    names: dict[str, None] = {}
    for node in g.node:
        if op_types and node.op_type not in op_types:
            continue
        for name in (*node.input, *node.output):
            if name and name not in initializers and types.get(name) in FLOAT_ELEM_TYPES:
                names[name] = None
    return list(names)


class Calibrator:
    """Runs the augmented model over a reader's batches and reduces what it sees per tensor, by `method`."""

    def __init__(self, model: onnx.ModelProto, op_types, method: CalibrationMethod, options: dict,
                 show_progress: bool = True, providers=None):
        if not isinstance(method, CalibrationMethod):
            raise InvalidArgument(f"onnxjit.quantization: calibrate_method must be a CalibrationMethod, not {method!r}")
        self.method = method
        self.symmetric = options.get("symmetric", method == CalibrationMethod.Percentile)
        self.moving_average = options.get("moving_average", False)
        self.averaging_constant = options.get("averaging_constant", 0.01)
        if self.moving_average and not 0 <= self.averaging_constant <= 1:
            raise InvalidArgument(f"onnxjit.quantization: CalibMovingAverageConstant must be in [0, 1], "
                                  f"got {self.averaging_constant}")
        self.percentile = options.get("percentile", DEFAULT_PERCENTILE)
        if not 0 <= self.percentile <= 100:
            raise InvalidArgument(f"onnxjit.quantization: CalibPercentile must be in [0, 100], got {self.percentile}")
        self.show_progress = show_progress
        self.providers = list(providers) if providers else ["CPUExecutionProvider"]
        self.tensors = tensors_to_calibrate(model, op_types)
        self.graph_inputs = [i.name for i in model.graph.input
                             if i.name not in {t.name for t in model.graph.initializer}]
        self.model = self._augmented(model)

    def _augmented(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model with every tensor to calibrate (but the graph inputs, read from the feeds) as an output."""
        aug = copy.deepcopy(model)
        g = aug.graph
        infos = {vi.name: vi for vi in (*g.value_info, *g.output)}
        outputs = {o.name for o in g.output}
        for name in self.tensors:
            if name not in outputs and name not in self.graph_inputs:
                g.output.append(copy.deepcopy(infos[name]))
        return aug

    def _session(self):
        import onnxjit
        from onnxjit.providers.cpu import SHOW_PROGRESS_KEY
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL
        if not self.show_progress:
            so.add_session_config_entry(SHOW_PROGRESS_KEY, "0")
        return onnxjit.InferenceSession(self.model, so, providers=self.providers)

    def _check_feeds(self, feeds, index: int) -> dict:
        if not isinstance(feeds, Mapping):
            raise InvalidArgument(f"onnxjit.quantization: calibration batch {index} is a {type(feeds).__name__}, "
                                  f"expected a dict of input name -> array")
        unknown = [k for k in feeds if k not in self.graph_inputs]
        missing = [k for k in self.graph_inputs if k not in feeds]
        if unknown or missing:
            parts = ([f"names unknown to the model: {unknown}"] if unknown else []) + \
                ([f"missing inputs: {missing}"] if missing else [])
            raise InvalidArgument(f"onnxjit.quantization: calibration batch {index} from the reader does not match "
                                  f"the model's inputs {self.graph_inputs}: {'; '.join(parts)}")
        return dict(feeds)

    def collect(self, reader) -> TensorsData:
        """Run every batch `reader.get_next()` yields; the ranges of the tensors."""
        if reader is None:
            raise InvalidArgument("onnxjit.quantization: quantize_static needs a calibration_data_reader (or an "
                                  "existing calibration_cache_path)")
        if not callable(getattr(reader, "get_next", None)):
            raise InvalidArgument(f"onnxjit.quantization: calibration_data_reader {type(reader).__name__} has no "
                                  f"get_next() method (see CalibrationDataReader)")
        sess = self._session()
        fetch = [n for n in self.tensors if n not in self.graph_inputs]
        seen: dict[str, list[np.ndarray]] = {n: [] for n in self.tensors}
        try:
            total = len(reader)
        except Exception:  # noqa: BLE001 - readers need not know their length
            total = None
        bar = progress_bar(self.show_progress, total, "onnxjit: calibrating", "batch")
        batches = 0
        try:
            while True:
                feeds = reader.get_next()
                if not feeds:
                    break
                feeds = self._check_feeds(feeds, batches)
                values = dict(zip(fetch, sess.run(fetch, feeds))) if fetch else {}
                for name in self.tensors:
                    value = np.asarray(feeds[name]) if name in feeds else values[name]
                    # MinMax keeps only each batch's extremes; the histograms need the values
                    seen[name].append(_extremes(value) if self.method == CalibrationMethod.MinMax else value)
                batches += 1
                bar.update(1)
        finally:
            bar.close()
        if batches == 0:
            raise InvalidArgument("onnxjit.quantization: the calibration_data_reader yielded no batches")
        if self.method == CalibrationMethod.MinMax:
            return TensorsData(self.method, {n: self._min_max(v) for n, v in seen.items()})
        return TensorsData(self.method, {n: self._histogram(v, n) for n, v in seen.items()})

    # MinMax
    def _min_max(self, extremes: list[tuple[np.ndarray, np.ndarray]]) -> TensorData:
        mins = np.stack([lo for lo, _ in extremes])
        maxs = np.stack([hi for _, hi in extremes])
        if self.moving_average:
            lo, hi = np.nanmean(mins, axis=0), np.nanmean(maxs, axis=0)
        else:
            lo, hi = np.nanmin(mins, axis=0), np.nanmax(maxs, axis=0)
        if self.symmetric:
            m = np.nanmax([np.abs(lo), np.abs(hi)], axis=0)
            lo, hi = -m, m
        return TensorData(lowest=np.asarray(lo), highest=np.asarray(hi))

    # histogram methods
    def _histogram(self, batches: list[np.ndarray], name: str = "") -> TensorData:
        data = np.concatenate([np.asarray(b).ravel() for b in batches])
        if data.size:
            lo, hi = np.nanmin(data), np.nanmax(data)
        else:
            lo = hi = np.array(0, dtype=data.dtype)
        if self.method == CalibrationMethod.Percentile and self.symmetric:
            hist, edges = np.histogram(np.abs(data), bins=HISTOGRAM_BINS)
            return self._percentile(hist, edges.astype(data.dtype), lo, hi)
        bins = ENTROPY_BINS if self.method == CalibrationMethod.Entropy else HISTOGRAM_BINS
        t = np.array(max(abs(lo), abs(hi)), dtype=data.dtype)
        try:
            hist, edges = np.histogram(data, bins, range=(-t, t))
        except ValueError as e:  # (onnxruntime's calibrator fails the same way, with numpy's message alone)
            # every input and output of the op types to quantize is calibrated, whatever nodes_to_exclude says
            # (as in onnxruntime's calibrator): what helps is MinMax, or leaving those op types out
            op_types = sorted({n.op_type for n in self.model.graph.node if name in n.input or name in n.output})
            raise ValueError(f"onnxjit.quantization: {self.method.name} calibration cannot histogram tensor "
                             f"{name!r}: its values span [{lo}, {hi}] ({e}); calibrate with MinMax, or leave the op "
                             f"types that read or write it ({', '.join(op_types)}) out of op_types_to_quantize") from e
        if self.method == CalibrationMethod.Entropy:
            low, high = entropy_threshold(hist, edges, ENTROPY_QUANTIZED_BINS)
            low, high = max(low, lo), min(high, hi)
            return TensorData(lowest=np.asarray(low), highest=np.asarray(high), hist=hist, bins=edges)
        if self.method == CalibrationMethod.Percentile:
            return self._percentile(hist, edges, lo, hi)
        avg, std = _avg_std(hist, edges)
        return TensorData(avg=avg, std=std, hist=hist, hist_edges=edges, lowest=edges.min(), highest=edges.max())

    def _percentile(self, hist, edges, lo, hi) -> TensorData:
        cdf = np.cumsum(hist / hist.sum())
        if self.symmetric:
            edge = edges[np.searchsorted(cdf, self.percentile / 100.0)]
            low, high = -edge, edge
        else:
            cut = (100.0 - self.percentile) / 200.0
            low, high = edges[np.searchsorted(cdf, cut)], edges[np.searchsorted(cdf, 1.0 - cut)]
        low, high = (max(low, lo)), (min(high, hi))
        return TensorData(lowest=np.asarray(low, dtype=edges.dtype), highest=np.asarray(high, dtype=edges.dtype),
                          hist=hist, bins=edges)


def _extremes(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if value.size == 0:
        return np.array(np.nan, dtype=value.dtype), np.array(np.nan, dtype=value.dtype)
    return np.min(value), np.max(value)


def _avg_std(hist: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centers = (edges[:-1] + edges[1:]) * 0.5
    avg = (hist * centers).sum() / hist.sum()
    std = ((hist * centers ** 2).sum() / hist.sum() - avg ** 2) ** 0.5
    return np.array(avg, dtype=edges.dtype), np.array(std, dtype=edges.dtype)


def _smoothed(p: np.ndarray, eps: float = 0.0001) -> np.ndarray | None:
    """p (counts) as float32 with every zero raised to eps, the mass taken evenly off the others; None if all zero."""
    zeros = (p == 0).astype(np.float32)
    n_zeros = zeros.sum()
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    taken = eps * float(n_zeros) / float(n_nonzeros)
    out = p.astype(np.float32)
    out += eps * zeros + (-taken) * (p != 0).astype(np.float32)
    return out


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> np.float32:
    """KL(p || q) of the normalized distributions, in float32 (inf where q has no mass under p's)."""
    pk = p.astype(np.float32)
    pk = 1.0 * pk / np.sum(pk, axis=0, keepdims=True)
    qk = q.astype(np.float32)
    qk = 1.0 * qk / np.sum(qk, axis=0, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = pk * np.log(pk / qk)
    terms[(pk == 0) & (qk >= 0)] = 0
    terms[~((pk > 0) & (qk > 0))] = np.inf
    return np.sum(terms, axis=0).astype(np.float32)


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, num_quantized_bins: int):
    """The (low, high) histogram edges, symmetric about the middle bin, whose clipped distribution keeps the least
    KL divergence when merged into `num_quantized_bins` bins (TensorRT's entropy calibration, onnxruntime's form:
    the outliers folded into the end bins, merged bins spread evenly over the nonzero bins they cover)."""
    num_bins = hist.size
    middle = num_bins // 2
    half = num_quantized_bins // 2
    divergences = np.zeros(middle - half + 1)
    candidates = []
    for k, i in enumerate(range(half, middle + 1)):
        start, end = middle - i, min(middle + i + 1, num_bins)
        candidates.append((edges[start], edges[end]))
        sliced = hist[start:end]
        p = sliced.copy()
        p[0] += hist[:start].sum()
        p[-1] += hist[end:].sum()
        merge = sliced.size // num_quantized_bins
        used = num_quantized_bins * merge
        merged = sliced[:used].reshape(num_quantized_bins, merge).sum(axis=1)
        merged[-1] += sliced[used:].sum()
        nonzero = (p != 0).astype(np.int64)[:used].reshape(num_quantized_bins, merge).sum(axis=1)
        q = np.zeros(p.size, dtype=np.int64)
        spread = np.zeros(num_quantized_bins, dtype=np.int64)
        spread[nonzero != 0] = merged[nonzero != 0] / nonzero[nonzero != 0]  # truncated to whole counts
        q[:used] = np.repeat(spread, merge)
        ps, qs = _smoothed(p), _smoothed(q)
        divergences[k] = np.inf if ps is None or qs is None else np.array(_kl_divergence(ps, qs), dtype=edges.dtype)
    return candidates[int(np.argmin(divergences))]


# the calibration cache: onnxruntime's JSON layout, so either library reads the other's ranges
def _to_json(value):
    if isinstance(value, np.ndarray):
        return {"data": value.tolist(), "dtype": str(value.dtype), "CLS": "numpy.array"}
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot write {type(value).__name__} to a calibration cache")


def save_tensors_data(ranges: TensorsData, path) -> None:
    """Write `ranges` to `path` atomically, as onnxruntime's save_tensors_data does."""
    import json
    import os
    import tempfile
    from pathlib import Path
    data = {name: {**{k: getattr(td, k) for k in TensorData._fields if hasattr(td, k)}, "CLS": "TensorData"}
            for name, td in ranges.items()}
    payload = {"CLS": "TensorsData", "data": data,
               "calibration_method": {"CLS": "CalibrationMethod", "value": str(ranges.calibration_method)},
               "smooth_quant": False}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibcache_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, default=_to_json)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_tensors_data(path) -> TensorsData:
    """The ranges a calibration cache holds (onnxruntime's or onnxjit's)."""
    import json
    try:
        with open(path) as f:
            raw = json.load(f)
        method = raw["calibration_method"]
        method = CalibrationMethod[(method["value"] if isinstance(method, dict) else str(method)).split(".")[-1]]
        data = {}
        for name, fields in raw["data"].items():
            values = {}
            for k, v in fields.items():
                if k == "CLS":
                    continue
                if isinstance(v, dict) and v.get("CLS") == "numpy.array":
                    v = np.array(v["data"], dtype=np.dtype(v["dtype"]))
                elif isinstance(v, (int, float)) and k in ("avg", "std", "lowest", "highest", "hist_edges"):
                    v = np.array(v, dtype=np.float32)
                values[k] = v
            data[name] = TensorData(**values)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidArgument(f"onnxjit.quantization: {str(path)!r} is not a calibration cache: "
                              f"{type(e).__name__}: {e}") from e
    return TensorsData(method, data)
