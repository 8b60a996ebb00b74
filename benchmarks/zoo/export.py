"""Exports the zoo's models into a cache folder, once: the onnx files never go into git.

Each torch model is exported with both torch.onnx exporters ("dynamo": torch.export + onnxscript, and
"torchscript": the tracing exporter) into `<cache>/<model>-<exporter>-torch<version>-<models.py hash>.onnx`, with
its fixed-seed inputs beside it (`.inputs.npz`, in the model's input order). An export that fails leaves
`.failed` with the reason, so later runs report it without trying again (`--reexport` tries again). The nine light
models shipped inside the onnx package get random stored weights (`onnxjit.testing.zoo.with_random_weights`) and
the backend test's input. This module imports torch only to export, so `run.py` and the tests do not need it.

usage: python3 benchmarks/zoo/export.py [--models a,b] [--exporters dynamo,torchscript] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

EXPORTERS = ("dynamo", "torchscript")
LIGHT_PREFIX = "light_"
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
                "regnet_y_400mf", "convnext_tiny", "vit_tiny", "unet_seg", "wav2vec_conv", "bert_minilm", "gpt2",
                "gpt2_past")  # the keys of models.MODELS, listed here so that listing them needs no torch


def default_cache_dir() -> str:
    """$ONNXJIT_ZOO_CACHE, else $XDG_CACHE_HOME/onnxjit-zoo, else ~/.cache/onnxjit-zoo."""
    if os.environ.get("ONNXJIT_ZOO_CACHE"):
        return os.environ["ONNXJIT_ZOO_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "onnxjit-zoo")


@dataclass
class ZooCase:
    """One row's model: the onnx file and its inputs on disk, or why there is none."""

    model: str
    exporter: str  # "dynamo", "torchscript", or "onnx" for a light model
    path: str
    inputs_path: str
    error: str | None = None

    def load_inputs(self) -> list[np.ndarray]:
        with np.load(self.inputs_path) as z:
            return [z[f"input{i}"] for i in range(len(z.files))]


def save_inputs(path: str, arrays) -> None:
    """Inputs in order as input0, input1, ... (onnx input names differ between exporters)."""
    tmp = path + ".tmp.npz"
    np.savez(tmp, **{f"input{i}": np.asarray(a) for i, a in enumerate(arrays)})
    os.replace(tmp, path)


def _models_source_hash() -> str:
    with open(os.path.join(HERE, "models.py"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:8]


def _torch_version() -> str:
    """torch's version without importing torch (importlib.metadata), '+' replaced for the file name."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch").replace("+", "_")
    except PackageNotFoundError:
        return "none"


def torch_case(model: str, exporter: str, cache_dir: str) -> ZooCase:
    stem = os.path.join(cache_dir, f"{model}-{exporter}-torch{_torch_version()}-{_models_source_hash()}")
    case = ZooCase(model, exporter, stem + ".onnx", stem + ".inputs.npz")
    if os.path.exists(stem + ".failed"):
        with open(stem + ".failed") as f:
            case.error = f.read().strip()
    return case


def light_case(name: str, cache_dir: str, seed: int = 0) -> ZooCase:
    import onnx
    stem = os.path.join(cache_dir, f"{LIGHT_PREFIX}{name}-random{seed}-onnx{onnx.__version__}")
    return ZooCase(LIGHT_PREFIX + name, "onnx", stem + ".onnx", stem + ".inputs.npz")


def write_light_model(name: str, cache_dir: str, seed: int = 0) -> ZooCase:
    """The light model `name` with random stored weights and the backend test's input, written once."""
    case = light_case(name, cache_dir, seed)
    if os.path.exists(case.path) and os.path.exists(case.inputs_path):
        return case
    import onnx
    from onnxjit.testing.zoo import light_model_case, with_random_weights
    os.makedirs(cache_dir, exist_ok=True)
    path, feeds, _ = light_model_case(name)
    model = with_random_weights(onnx.load(path), seed)
    inits = {i.name for i in model.graph.initializer}
    order = [vi.name for vi in model.graph.input if vi.name not in inits]
    save_inputs(case.inputs_path, [feeds[n] for n in order])
    onnx.save(model, case.path + ".tmp")
    os.replace(case.path + ".tmp", case.path)
    return case


def export_torch_model(model: str, exporter: str, cache_dir: str, reexport: bool = False) -> ZooCase:
    """Export `model` with `exporter` unless its file (or its recorded failure) is already in the cache."""
    case = torch_case(model, exporter, cache_dir)
    failed = case.path[:-len(".onnx")] + ".failed"
    if not reexport and (case.error or (os.path.exists(case.path) and os.path.exists(case.inputs_path))):
        return case
    import torch
    from models import MODELS  # noqa: I001 - this folder is on sys.path when run as a script or a child
    os.makedirs(cache_dir, exist_ok=True)
    spec = MODELS[model]
    module, inputs = spec.build(), spec.example_inputs()
    tmp = case.path + ".tmp.onnx"
    log = io.StringIO()
    try:
        with torch.no_grad(), contextlib.redirect_stdout(log):
            if exporter == "dynamo":
                torch.onnx.export(module, inputs, tmp, dynamo=True, external_data=False, verbose=False)
            else:
                torch.onnx.export(module, inputs, tmp, dynamo=False, input_names=list(spec.input_names),
                                  output_names=list(spec.output_names), opset_version=17)
    except Exception as e:  # noqa: BLE001 - an exporter that fails is a result to record
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
        with open(failed, "w") as f:
            f.write(msg + "\n")
        with open(failed + ".log", "w") as f:
            f.write(log.getvalue() + "\n" + traceback.format_exc())
        case.error = msg
        return case
    save_inputs(case.inputs_path, [t.numpy() for t in inputs])
    os.replace(tmp, case.path)
    if os.path.exists(failed):
        os.remove(failed)
    case.error = None
    return case


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(TORCH_MODELS))
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--cache-dir", default=default_cache_dir())
    ap.add_argument("--reexport", action="store_true", help="export again even if the cache has the file")
    a = ap.parse_args(argv)
    for model in a.models.split(","):
        for exporter in a.exporters.split(","):
            t0 = time.perf_counter()
            case = export_torch_model(model, exporter, a.cache_dir, a.reexport)
            status = f"FAILED: {case.error}" if case.error else case.path
            print(f"{model} {exporter} ({time.perf_counter() - t0:.1f} s): {status}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
