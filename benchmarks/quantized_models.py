"""Quantized models: onnxjit against onnxruntime on the same quantized files, and against onnxjit's own float model
(issue 16's figures).

Models (from the zoo's cache, benchmarks/zoo; exported or written there first when missing):
  resnet50   the light resnet50 with random stored weights, converted to opset 13 (per-channel QDQ needs it)
  bert       the zoo's MiniLM-size BERT encoder (torchscript export), sequence 128
Quantized with onnxjit.quantization (whose files equal onnxruntime.quantization's) after quant_pre_process: dynamic
(int8 weights) and static, QDQ and QOperator (per-channel int8 weights, int8 activations, MinMax calibration
over 4 random batches, or --calibration's method), for both. Static quantization keeps a Softmax that writes a
graph output in float (nodes_to_exclude), as is usual for class probabilities: resnet50's random weights give
1000 near-equal ones (about 1e-3 each), which an 8-bit output step of 1/256 maps all to zero.

For each file: onnxruntime's and onnxjit's latency (best of blocks of runs, alternating, 2 intra-op threads each,
benchmarks/ml_timing.py), their ratio, onnxjit's float model's latency, the largest difference between the two
runtimes' outputs, and how often the quantized model's top class is the float model's over 100 random inputs, on
each runtime (for BERT's hidden states only a rough check). Says whether onnxjit's integer GEMM ran on AMX tiles
(kernels.quantize.HAS_AMX_GEMM) and names the CPU.

usage: python benchmarks/quantized_models.py [--models resnet50,bert] [--rounds 4] [--threads 2]
                                             [--calibration MinMax|Entropy|Percentile|Distribution]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))
import export as zoo_export  # noqa: E402
from ml_timing import block, cpu_name  # noqa: E402


def _float_model(name: str, cache_dir: str) -> tuple[str, list[np.ndarray]]:
    """(path of the float model, its inputs)."""
    import onnx
    if name == "resnet50":
        case = zoo_export.write_light_model("resnet50", cache_dir)
        path = case.path.replace(".onnx", "-opset13.onnx")
        if not os.path.exists(path):
            from onnx import version_converter
            model = onnx.load(case.path)
            # IR 3: its weights are listed among the inputs, which the converter takes for undefined inputs
            inits = {i.name for i in model.graph.initializer}
            kept = [v for v in model.graph.input if v.name not in inits]
            del model.graph.input[:]
            model.graph.input.extend(kept)
            model.ir_version = 7
            onnx.save(version_converter.convert_version(model, 13), path)
        return path, case.load_inputs()
    if name == "bert":
        case = zoo_export.export_torch_model("bert_minilm", "torchscript", cache_dir)
        if case.error:
            raise RuntimeError(f"bert_minilm did not export: {case.error}")
        return case.path, case.load_inputs()
    raise ValueError(f"unknown model {name!r} (known: resnet50, bert)")


def _timed(ref, jit, feeds, rounds) -> tuple[float, float]:
    """(onnxruntime's, onnxjit's) best ms a run over `rounds` blocks each, alternating, 0.5 s of rest before each."""
    t_ort, t_jit = [], []
    for _ in range(rounds):
        time.sleep(0.5)
        t_ort.append(block(ref, feeds))
        time.sleep(0.5)
        t_jit.append(block(jit, feeds))
    return 1e3 * min(t_ort), 1e3 * min(t_jit)


def _feeds(sess, inputs):
    return {v.name: x for v, x in zip(sess.get_inputs(), inputs)}


def _random_like(inputs, rng):
    """Inputs of the same shapes: normal floats, integer ids within the given ones' range."""
    out = []
    for x in inputs:
        if x.dtype.kind == "f":
            out.append(rng.standard_normal(x.shape).astype(x.dtype))
        else:
            out.append(rng.integers(int(x.min()), int(x.max()) + 1, x.shape).astype(x.dtype))
    return out


def _quantize(name, float_path, inputs, how, folder, method="MinMax"):
    """The file quantized `how` (dynamic, qdq, qoperator), after quant_pre_process (BatchNormalization folded into
    the convs, as onnxruntime's documentation asks before static quantization)."""
    from onnxjit import quantization as q
    path = os.path.join(folder, f"{name}-{how}-{method}.onnx")
    prepared = os.path.join(folder, f"{name}-prepared.onnx")
    if not os.path.exists(prepared):
        q.quant_pre_process(float_path, prepared)
    float_path = prepared
    if how == "dynamic":
        q.quantize_dynamic(float_path, path, weight_type=q.QuantType.QInt8)
        return path
    model = __import__("onnx").load(float_path)
    names = [v.name for v in model.graph.input][:len(inputs)]
    outputs = {v.name for v in model.graph.output}
    exclude = [n.name for n in model.graph.node if n.op_type == "Softmax" and set(n.output) & outputs]
    batches = [dict(zip(names, _random_like(inputs, np.random.default_rng(1)))) for _ in range(4)]

    class Batches(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)
    q.quantize_static(float_path, path, Batches(), per_channel=True, weight_type=q.QuantType.QInt8,
                      quant_format=q.QuantFormat.QDQ if how == "qdq" else q.QuantFormat.QOperator,
                      nodes_to_exclude=exclude, calibrate_method=getattr(q.CalibrationMethod, method))
    return path


AGREEMENT_SAMPLES = 100  # random inputs the quantized model's top class is compared over (issue 16: 100)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calibration", default="MinMax", choices=["MinMax", "Entropy", "Percentile", "Distribution"],
                    help="the static files' calibration method")
    ap.add_argument("--cache-dir", default=zoo_export.default_cache_dir())
    a = ap.parse_args(argv)
    import onnxruntime as ort

    import onnxjit
    from onnxjit.kernels import quantize as kq
    print(f"{cpu_name()}, onnxruntime {ort.__version__}, {a.threads} intra-op threads each, integer GEMM on "
          f"{'AMX tiles' if kq.HAS_AMX_GEMM else 'VNNI' if kq.HAS_VNNI else 'int16 pairs'}")

    def sessions(path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.log_severity_level = 3
        jo = onnxjit.SessionOptions()
        jo.intra_op_num_threads = a.threads
        return (ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]),
                onnxjit.InferenceSession(path, jo, providers=["CPUExecutionProvider"]))

    with tempfile.TemporaryDirectory() as folder:
        for name in a.models.split(","):
            float_path, inputs = _float_model(name, a.cache_dir)
            ref_float, jit_float = sessions(float_path)
            feeds = _feeds(ref_float, inputs)
            t_ort, jit_float_ms = _timed(ref_float, jit_float, feeds, a.rounds)
            print(f"{name} float: onnxruntime {t_ort:.2f} ms, onnxjit {jit_float_ms:.2f} ms, ratio "
                  f"{jit_float_ms / t_ort:.2f}")
            rng = np.random.default_rng(7)
            samples = [_feeds(ref_float, _random_like(inputs, rng)) for _ in range(AGREEMENT_SAMPLES)]
            float_top = [ref_float.run(None, s)[0].argmax(-1) for s in samples]
            for how in ("dynamic", "qdq", "qoperator"):
                try:
                    path = _quantize(name, float_path, inputs, how, folder, a.calibration)
                except ValueError as e:  # a histogram method over a tensor it cannot bin (BERT's attention mask)
                    print(f"{name} {how}: not quantized: {e}")
                    continue
                ref, jit = sessions(path)
                diff = max(float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max())
                           for x, y in zip(ref.run(None, feeds), jit.run(None, feeds)))
                agree = [np.mean([(sess.run(None, s)[0].argmax(-1) == top).mean()
                                  for s, top in zip(samples, float_top)]) for sess in (ref, jit)]
                t_ort, t_jit = _timed(ref, jit, feeds, a.rounds)
                print(f"{name} {how}: onnxruntime {t_ort:.2f} ms, onnxjit {t_jit:.2f} ms, ratio {t_jit / t_ort:.2f}; "
                      f"onnxjit float / quantized {jit_float_ms / t_jit:.2f}; largest difference from onnxruntime "
                      f"{diff:.3g}; top class as the float model's: onnxruntime {agree[0]:.0%}, onnxjit "
                      f"{agree[1]:.0%}")


if __name__ == "__main__":
    main()
