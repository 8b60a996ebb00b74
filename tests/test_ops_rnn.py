"""CPU kernels of RNN, GRU and LSTM against onnxruntime: one-node models over directions, layouts,
sequence_lens, initial states, biases, LSTM peepholes and input_forget, GRU linear_before_reset, clip and the
activations with their alpha/beta, float32 and float64, run with the fallback provider disabled (so a pass proves
the Numba kernels ran). onnxruntime has no layout-1 (batch-major) kernels: those compare with its time-major run
on transposed inputs; nor float64 ones: those compare with onnx.reference."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper

import onnxjit
from conftest import assert_all_same, native_session, ort_run, ref_run

SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
N_ACTS = {"RNN": 1, "GRU": 2, "LSTM": 3}
N_OUT = {"RNN": 2, "GRU": 2, "LSTM": 3}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _inputs(op, direction, layout=0, bias=True, lens=None, initial=False, peephole=False, dtype=np.float32,
            seed=0):
    """The node's inputs as (name, array or None) in order."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: (rng.standard_normal(shape) * 0.5).astype(dtype)  # noqa: E731
    dirs, gates = DIRECTIONS[direction], GATES[op]
    x = r(BATCH, SEQ, INPUT) if layout else r(SEQ, BATCH, INPUT)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    inputs = [("x", x), ("w", r(dirs, gates * HIDDEN, INPUT)), ("r", r(dirs, gates * HIDDEN, HIDDEN)),
              ("b", r(dirs, 2 * gates * HIDDEN) if bias else None),
              ("lens", None if lens is None else np.array(lens, np.int32)),
              ("h0", r(*state) if initial else None)]
    if op == "LSTM":
        inputs += [("c0", r(*state) if initial else None), ("p", r(dirs, 3 * HIDDEN) if peephole else None)]
    return inputs


def _model(op, inputs, opset=22, n_out=None, **attrs) -> onnx.ModelProto:
    names = [n if a is not None else "" for n, a in inputs]
    while not names[-1]:
        names.pop()
    n_out = n_out or N_OUT[op]
    outs = ["y", "y_h", "y_c"][:n_out]
    elem = helper.np_dtype_to_tensor_dtype(inputs[0][1].dtype)
    node = helper.make_node(op, names, outs, hidden_size=HIDDEN, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs
         if a is not None],
        [helper.make_tensor_value_info(n, elem, None) for n in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _check(op, inputs, opset=22, n_out=None, layout=0, **attrs):
    feeds = {n: a for n, a in inputs if a is not None}
    model = _model(op, inputs, opset, n_out, **({"layout": 1} if layout else {}), **attrs)
    got = native_session(model).run(None, feeds)
    if not layout:
        assert_all_same(got, ort_run(model, feeds))
        return
    # onnxruntime has no batch-major (layout 1) kernels: the oracle is its time-major run on transposed inputs
    time_major = {n: np.ascontiguousarray(a.swapaxes(0, 1)) if a is not None and n in ("x", "h0", "c0") else a
                  for n, a in inputs}
    want = ort_run(_model(op, list(time_major.items()), opset, n_out, **attrs),
                   {n: a for n, a in time_major.items() if a is not None})
    assert_all_same(got, [want[0].transpose(2, 0, 1, 3)] + [s.swapaxes(0, 1) for s in want[1:]])


@pytest.mark.parametrize("op,direction,layout,lens,initial", [
    c for c in itertools.product(("RNN", "GRU", "LSTM"), DIRECTIONS, (0, 1), (None, [4, 2, 3], [0, 4, 1]),
                                 (False, True))])
def test_recurrent_directions_layouts_lengths_states(op, direction, layout, lens, initial):
    _check(op, _inputs(op, direction, layout, lens=lens, initial=initial), layout=layout, direction=direction)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("opset", [7, 14])
def test_recurrent_older_opsets_and_only_y(op, opset):
    _check(op, _inputs(op, "forward", bias=False), opset=opset, n_out=1)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(direction, linear_before_reset):
    _check("GRU", _inputs("GRU", direction, lens=[3, 4, 1], initial=True), direction=direction,
           linear_before_reset=linear_before_reset)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_peepholes_and_input_forget(direction, input_forget):
    _check("LSTM", _inputs("LSTM", direction, initial=True, peephole=True, lens=[2, 4, 3]), direction=direction,
           input_forget=input_forget)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_clip(op):
    inputs = _inputs(op, "bidirectional", initial=True, peephole=op == "LSTM", seed=3)
    inputs[0] = ("x", inputs[0][1] * 8)  # pre-activations well past the clip
    _check(op, inputs, direction="bidirectional", clip=0.7)


# activation name, alpha, beta (None: the attribute lists do not give it)
ACTIVATIONS = [("Relu", None, None), ("Tanh", None, None), ("Sigmoid", None, None), ("Affine", 0.5, 0.2),
               ("LeakyRelu", 0.2, None), ("LeakyRelu", None, None), ("ThresholdedRelu", 0.1, None),
               ("ScaledTanh", 0.8, 1.5), ("HardSigmoid", 0.3, 0.4), ("HardSigmoid", None, None), ("Elu", 0.7, None),
               ("Softsign", None, None), ("Softplus", None, None)]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("name,alpha,beta", ACTIVATIONS)
def test_recurrent_activations(op, name, alpha, beta):
    # the activation in RNN's f, GRU's g and LSTM's g and h, of both directions (GRU's and LSTM's gates f stay
    # Sigmoid: an unbounded gate grows the state past float32's range within a few steps)
    per_direction = ["Sigmoid"] * (N_ACTS[op] > 1) + [name] * (N_ACTS[op] - (N_ACTS[op] > 1))
    n = per_direction.count(name) * 2
    attrs = {"activations": per_direction * 2}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha] * n
    if beta is not None:
        attrs["activation_beta"] = [beta] * n
    _check(op, _inputs(op, "bidirectional", initial=True, seed=5), direction="bidirectional", **attrs)


def test_recurrent_mixed_activations_consume_alpha_beta_in_order():
    attrs = {"activations": ["HardSigmoid", "Tanh", "Affine", "LeakyRelu", "ScaledTanh", "Elu"],
             "activation_alpha": [0.3, 0.9, 0.05, 1.1, 0.6], "activation_beta": [0.45, -0.1, 0.7]}
    _check("LSTM", _inputs("LSTM", "bidirectional", initial=True, peephole=True), direction="bidirectional",
           **attrs)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_float64_against_reference(op):
    # onnxruntime has no float64 kernels for these; onnx.reference ignores sequence_lens and activations, so the
    # case has neither
    inputs = _inputs(op, "bidirectional", initial=True, peephole=True, dtype=np.float64)
    model = _model(op, inputs, direction="bidirectional")
    feeds = {n: a for n, a in inputs if a is not None}
    assert_all_same(native_session(model).run(None, feeds), ref_run(model, feeds))


def test_recurrent_sequence_longer_than_input_is_a_value_error():
    inputs = _inputs("GRU", "forward", lens=[SEQ + 1, 1, 1])
    model = _model("GRU", inputs)
    with pytest.raises(onnxjit.RuntimeException, match="GRU: sequence_lens must hold 3 lengths in") as info:
        native_session(model).run(None, {n: a for n, a in inputs if a is not None})
    assert isinstance(info.value.__cause__, ValueError)
