"""onnxjit's InferenceSession API against onnxruntime's behaviour on the same tiny models."""
from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib

import numba
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnxjit
import onnxjit.capi.onnxruntime_pybind11_state as jit_state
from conftest import assert_all_same, jit_run, make_model, ort_run, ort_session, ref_run, tensor


# --- models ------------------------------------------------------------------------------------------------------
def mlp_model() -> onnx.ModelProto:
    """x[N,4] -> MatMul(W) -> t -> Add(B) -> u -> Relu -> y: CPU-provider and fallback nodes, three outputs."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "W")
    b = numpy_helper.from_array(np.array([0.1, -0.2, 0.3], dtype=np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
             helper.make_node("Add", ["t", "B"], ["u"], name="add"),
             helper.make_node("Relu", ["u"], ["y"], name="relu")]
    return make_model(nodes, [tensor("x", TP.FLOAT, ["N", 4])],
                      [tensor("y", TP.FLOAT, ["N", 3]), tensor("t", TP.FLOAT, ["N", 3]),
                       tensor("u", TP.FLOAT, ["N", 3])],
                      initializers=[w, b])


def einsum_model() -> onnx.ModelProto:
    """Einsum: an op the CPU provider has no kernel for (only the fallback runs it)."""
    return make_model([helper.make_node("Einsum", ["a", "b"], ["c"], equation="ij,jk->ik")],
                      [tensor("a", TP.FLOAT, [2, 3]), tensor("b", TP.FLOAT, [3, 4])], [tensor("c", TP.FLOAT, [2, 4])])


def one_class_tree_model() -> onnx.ModelProto:
    """An ai.onnx.ml node the CPU provider leaves to the next one: a tree classifier with a single class label."""
    node = helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                            classlabels_int64s=[7], nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0],
                            nodes_modes=["LEAF"], nodes_values=[0.0], nodes_truenodeids=[0], nodes_falsenodeids=[0],
                            class_treeids=[0], class_nodeids=[0], class_ids=[0], class_weights=[0.5])
    return make_model([node], [tensor("x", TP.FLOAT, [2, 3])],
                      [tensor("label", TP.INT64, [2]), tensor("scores", TP.FLOAT, [2, 1])],
                      extra_opsets={"ai.onnx.ml": 3})


def two_input_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "y"], ["z"]), helper.make_node("Relu", ["z"], ["r"])]
    return make_model(nodes, [tensor("x", TP.FLOAT, ["N", 3]), tensor("y", TP.FLOAT, ["N", 3])],
                      [tensor("r", TP.FLOAT, ["N", 3])])


def overridable_model() -> onnx.ModelProto:
    """W is an initializer also listed among the graph inputs (IR >= 4): a feed may override it."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
    return make_model([helper.make_node("Add", ["x", "W"], ["y"])],
                      [tensor("x", TP.FLOAT, [2, 3]), tensor("W", TP.FLOAT, [2, 3])], [tensor("y", TP.FLOAT, [2, 3])],
                      initializers=[w])


def node_args(sess) -> dict[str, list[tuple]]:
    return {kind: [(a.name, a.type, a.shape) for a in getattr(sess, f"get_{kind}")()]
            for kind in ("inputs", "outputs", "overridable_initializers")}


def assert_same_node_args(model: onnx.ModelProto) -> dict:
    want = node_args(ort_session(model))
    got = node_args(onnxjit.InferenceSession(model))
    for kind in want:
        assert len(got[kind]) == len(want[kind]), f"{kind}: {got[kind]} != {want[kind]}"
        for g, w in zip(got[kind], want[kind]):
            assert g[0] == w[0], f"{kind} name: {g} != {w}"
            assert g[1] == w[1], f"{kind} {w[0]!r} type: {g[1]!r} != onnxruntime's {w[1]!r}"
            assert g[2] == w[2], f"{kind} {w[0]!r} shape: {g[2]!r} != onnxruntime's {w[2]!r}"
    return got


# --- loading and running -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["str", "pathlib", "bytes", "proto"])
def test_load_from_every_source_matches_onnxruntime(kind, tmp_path, rng):
    model = mlp_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    source = {"str": str(path), "pathlib": path, "bytes": path.read_bytes(), "proto": model}[kind]
    x = rng.standard_normal((5, 4), dtype=np.float32)
    assert_all_same(onnxjit.InferenceSession(source).run(None, {"x": x}), ort_run(model, {"x": x}))


@pytest.mark.parametrize("names", [None, [], ["y"], ["u"], ["u", "y"], ["t", "u", "y"], ["y", "y"]])
def test_run_output_names_select_and_order(names, rng):
    model = mlp_model()
    x = rng.standard_normal((3, 4), dtype=np.float32)
    got = onnxjit.InferenceSession(model).run(names, {"x": x})
    want = ort_run(model, {"x": x}, names)
    assert len(got) == len(want)
    assert_all_same(got, want)


# --- NodeArgs ----------------------------------------------------------------------------------------------------
def test_node_args_symbolic_static_and_unknown_dims():
    model = make_model([helper.make_node("Add", ["x", "y"], ["z"]), helper.make_node("Relu", ["z"], ["r"])],
                       [tensor("x", TP.FLOAT, ["N", 3]), tensor("y", TP.FLOAT, [None, 3])],
                       [tensor("r", TP.FLOAT, ["N", 3]), tensor("z", TP.FLOAT, None)])
    got = assert_same_node_args(model)
    assert got["inputs"][0] == ("x", "tensor(float)", ["N", 3])


def test_node_args_element_types_and_ranks():
    specs = [("f", TP.FLOAT, ["batch", 2]), ("d", TP.DOUBLE, [1]), ("i", TP.INT64, []), ("b", TP.BOOL, [2, 2]),
             ("s", TP.STRING, [3]), ("h", TP.FLOAT16, [4, "w"]), ("u8", TP.UINT8, [1, 2, 3]), ("i32", TP.INT32, [7])]
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n, _, _ in specs]
    model = make_model(nodes, [tensor(n, t, s) for n, t, s in specs], [tensor(n + "_out", t, s) for n, t, s in specs])
    got = assert_same_node_args(model)
    assert [t for _, t, _ in got["inputs"]] == ["tensor(float)", "tensor(double)", "tensor(int64)", "tensor(bool)",
                                                "tensor(string)", "tensor(float16)", "tensor(uint8)", "tensor(int32)"]


def test_node_args_unknown_rank_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", TP.FLOAT, None)],
                       [tensor("y", TP.FLOAT, None)])
    assert_same_node_args(model)


def test_node_args_sequence_and_optional():
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TP.FLOAT, ["a"]))
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TP.FLOAT, [2]))
    nodes = [helper.make_node("SequenceLength", ["s"], ["n"]), helper.make_node("OptionalHasElement", ["o"], ["h"])]
    model = make_model(nodes, [helper.make_value_info("s", seq_t), helper.make_value_info("o", opt_t)],
                       [tensor("n", TP.INT64, []), tensor("h", TP.BOOL, [])], opset=18)
    got = assert_same_node_args(model)
    assert got["inputs"][0][1] == "seq(tensor(float))"
    assert got["inputs"][1][1] == "optional(tensor(float))"


def test_node_args_and_feed_of_a_map_input():
    map_t = helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(TP.FLOAT, None))
    model = make_model([helper.make_node("DictVectorizer", ["d"], ["y"], domain="ai.onnx.ml",
                                         int64_vocabulary=[1, 2, 3])],
                       [helper.make_value_info("d", map_t)], [tensor("y", TP.FLOAT, None)],
                       extra_opsets={"ai.onnx.ml": 3})
    got = assert_same_node_args(model)
    assert got["inputs"][0][1] == "map(int64,tensor(float))"
    feeds = {"d": {1: 2.0, 3: 5.0}}
    assert_all_same(jit_run(model, feeds), ort_run(model, feeds))


# --- overridable initializers ------------------------------------------------------------------------------------
def test_overridable_initializer_default_and_override(rng):
    model = overridable_model()
    got = assert_same_node_args(model)
    assert [n for n, _, _ in got["inputs"]] == ["x"]
    assert [n for n, _, _ in got["overridable_initializers"]] == ["W"]
    sess = onnxjit.InferenceSession(model)
    x = rng.standard_normal((2, 3), dtype=np.float32)
    assert_all_same(sess.run(None, {"x": x}), ort_run(model, {"x": x}))
    feeds = {"x": x, "W": rng.standard_normal((2, 3), dtype=np.float32)}
    assert_all_same(sess.run(None, feeds), ort_run(model, feeds))
    # the override is per run: the default is back for the next one
    assert_all_same(sess.run(None, {"x": x}), ort_run(model, {"x": x}))


def test_ir3_initializers_listed_as_inputs_are_constants(rng, tmp_path):
    """Before IR 4 every initializer had to be listed among the graph inputs: onnxruntime then treats them as
    constants (none overridable, so the optimizer may fold them), and so does onnxjit; the written optimized model
    lists them again, as IR 3 requires."""
    model = overridable_model()
    model.ir_version = 3
    got = assert_same_node_args(model)
    assert [n for n, _, _ in got["inputs"]] == ["x"]
    assert got["overridable_initializers"] == []
    x = rng.standard_normal((2, 3), dtype=np.float32)
    so = onnxjit.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    assert_all_same(onnxjit.InferenceSession(model, so).run(None, {"x": x}), ort_run(model, {"x": x}))
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written)
    assert written.ir_version == 3 and {i.name for i in written.graph.initializer} <= {
        i.name for i in written.graph.input}


def test_negative_input_dim_is_free(rng):
    """A dim_value of -1 (some exporters write it for a free batch) accepts any size, as in onnxruntime."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", TP.FLOAT, [-1, 3])],
                       [tensor("y", TP.FLOAT, [-1, 3])])
    x = rng.standard_normal((6, 3), dtype=np.float32)
    assert_all_same(onnxjit.InferenceSession(model).run(None, {"x": x}), ort_run(model, {"x": x}))


# --- metadata ----------------------------------------------------------------------------------------------------
def test_modelmeta_matches_onnxruntime():
    model = mlp_model()
    model.producer_name = "unit-test"
    model.producer_version = "1.2"
    model.domain = "org.example"
    model.doc_string = "a model for tests"
    model.model_version = 7
    model.graph.name = "the_graph"
    model.graph.doc_string = "graph doc"
    helper.set_model_props(model, {"author": "me", "license": "none", "empty": ""})
    want = ort_session(model).get_modelmeta()
    got = onnxjit.InferenceSession(model).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.custom_metadata_map == {"author": "me", "license": "none", "empty": ""}


# --- providers ---------------------------------------------------------------------------------------------------
def test_default_providers_are_cpu_then_fallback():
    model = mlp_model()
    sess = onnxjit.InferenceSession(model)
    assert sess.get_providers() == ["CPUExecutionProvider", "FallbackExecutionProvider"]
    assert sess.get_providers()[:-1] == ort_session(model, providers=None).get_providers()
    assert set(sess.get_provider_options()) == set(sess.get_providers())


def test_explicit_cpu_provider():
    sess = onnxjit.InferenceSession(mlp_model(), providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider", "FallbackExecutionProvider"]


def test_fallback_named_explicitly_is_not_added_twice(rng):
    model = mlp_model()
    sess = onnxjit.InferenceSession(model, providers=["FallbackExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["FallbackExecutionProvider", "CPUExecutionProvider"]
    x = rng.standard_normal((2, 4), dtype=np.float32)
    assert_all_same(sess.run(None, {"x": x}), ort_run(model, {"x": x}))


def test_provider_options_as_tuples_and_list():
    sess = onnxjit.InferenceSession(mlp_model(), providers=[("CPUExecutionProvider", {"opt": 1, "flag": "x"})])
    assert sess.get_provider_options()["CPUExecutionProvider"] == {"opt": "1", "flag": "x"}
    sess = onnxjit.InferenceSession(mlp_model(), providers=["CPUExecutionProvider"], provider_options=[{"k": "v"}])
    assert sess.get_provider_options()["CPUExecutionProvider"] == {"k": "v"}
    assert sess.get_provider_options()["FallbackExecutionProvider"] == {}
    with pytest.raises(ValueError):
        onnxjit.InferenceSession(mlp_model(), providers=["CPUExecutionProvider"], provider_options=[{}, {}])


def test_unknown_provider_raises_value_error():
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        onnxjit.InferenceSession(mlp_model(), providers=["NoSuchExecutionProvider"])


def test_absent_known_provider_warns_and_is_skipped(rng):
    model = mlp_model()
    with pytest.warns(UserWarning, match="TensorrtExecutionProvider"):
        sess = onnxjit.InferenceSession(model, providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
    assert "TensorrtExecutionProvider" not in sess.get_providers()
    assert sess.get_providers()[0] == "CPUExecutionProvider"
    with pytest.warns(UserWarning, match="TensorrtExecutionProvider"):  # onnxruntime warns the same way
        ort_sess = ort_session(model, providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
    assert ort_sess.get_providers() == sess.get_providers()[:-1]
    x = rng.standard_normal((2, 4), dtype=np.float32)
    assert_all_same(sess.run(None, {"x": x}), ort_sess.run(None, {"x": x}))


def test_module_level_provider_functions():
    available = onnxjit.get_available_providers()
    # CUDA first where it is usable (the tests run it on Numba's CUDA simulator: conftest.py), as onnxruntime lists
    # it; a session given no providers still runs on the host
    cuda = bool(numba.core.config.ENABLE_CUDASIM)
    assert available[:2] == (["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else
                             ["CPUExecutionProvider", "FallbackExecutionProvider"])
    assert "FallbackExecutionProvider" in available
    assert set(available) <= set(onnxjit.get_all_providers())
    assert set(onnxruntime.get_all_providers()) <= set(onnxjit.get_all_providers())
    assert onnxjit.InferenceSession(mlp_model()).get_providers() == ["CPUExecutionProvider",
                                                                     "FallbackExecutionProvider"]
    assert onnxjit.get_device() == onnxruntime.get_device()


def test_fallback_runs_what_cpu_lacks(rng):
    model = einsum_model()
    feeds = {"a": rng.standard_normal((2, 3), dtype=np.float32), "b": rng.standard_normal((3, 4), dtype=np.float32)}
    assert_all_same(jit_run(model, feeds), ort_run(model, feeds))


def _no_fallback() -> onnxjit.SessionOptions:
    so = onnxjit.SessionOptions()
    so.add_session_config_entry("session.disable_fallback_provider", "1")
    return so


def test_disabled_fallback_is_not_appended(rng):
    model = two_input_model()  # Add and Relu: the CPU provider runs both
    sess = onnxjit.InferenceSession(model, _no_fallback())
    assert sess.get_providers() == ["CPUExecutionProvider"]
    feeds = {"x": rng.standard_normal((2, 3), dtype=np.float32), "y": rng.standard_normal((2, 3), dtype=np.float32)}
    assert_all_same(sess.run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize("model_fn, op, domain, opset",
                         [(einsum_model, "Einsum", "ai.onnx", 17),
                          (one_class_tree_model, "TreeEnsembleClassifier", "ai.onnx.ml", 3)])
def test_disabled_fallback_unsupported_node_raises_not_implemented(model_fn, op, domain, opset):
    with pytest.raises(onnxjit.NotImplemented) as info:
        onnxjit.InferenceSession(model_fn(), _no_fallback())
    msg = str(info.value)
    assert op in msg and domain in msg and str(opset) in msg, msg
    assert isinstance(info.value, jit_state.NotImplemented)


# --- dynamic shapes and plan caching -----------------------------------------------------------------------------
def test_symbolic_batch_runs_any_batch_and_caches_plans(rng):
    model = mlp_model()
    sess = onnxjit.InferenceSession(model)
    ort_sess = ort_session(model)
    assert sess._compiled.plan_count == 0
    seen = set()
    for batch in (1, 32, 1, 32, 7, 1):
        x = rng.standard_normal((batch, 4), dtype=np.float32)
        before = sess._compiled.plan_count
        assert_all_same(sess.run(None, {"x": x}), ort_sess.run(None, {"x": x}))
        assert sess._compiled.plan_count == before + (batch not in seen), batch
        seen.add(batch)
    assert sess._compiled.plan_count == 3


# --- bad inputs --------------------------------------------------------------------------------------------------
X = np.ones((2, 3), np.float32)
BAD_FEEDS = {
    # case: (feeds, output_names, words the message must contain, onnxruntime raises)
    "missing input": ({"x": X}, None, ["y", "missing"], True),
    "unknown input": ({"x": X, "y": X, "bogus": X}, None, ["bogus"], True),
    "wrong dtype": ({"x": X.astype(np.float64), "y": X}, None, ["'x'", "tensor(double)", "tensor(float)"], True),
    "wrong rank": ({"x": X[None], "y": X}, None, ["'x'", "rank", "3", "2"], True),
    "static dim mismatch": ({"x": np.ones((2, 4), np.float32), "y": X}, None, ["'x'", "index: 1", "4", "3"], True),
    # onnxruntime converts a nested Python list to an array; onnxjit insists on numpy arrays
    "python list": ({"x": X.tolist(), "y": X}, None, ["'x'", "list", "tensor(float)"], False),
    "str value": ({"x": "abc", "y": X}, None, ["'x'", "str", "tensor(float)"], True),
    "int value": ({"x": 3, "y": X}, None, ["'x'", "int", "tensor(float)"], True),
    "non-dict feed": ([X, X], None, ["dict", "list"], True),
    "unknown output": ({"x": X, "y": X}, ["r", "nope"], ["nope"], True),
}


def static_two_input_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "y"], ["z"]), helper.make_node("Relu", ["z"], ["r"])]
    return make_model(nodes, [tensor("x", TP.FLOAT, ["N", 3]), tensor("y", TP.FLOAT, ["N", 3])],
                      [tensor("r", TP.FLOAT, ["N", 3]), tensor("z", TP.FLOAT, ["N", 3])])


@pytest.mark.parametrize("case", list(BAD_FEEDS))
def test_bad_feed_raises_invalid_argument(case):
    feeds, names, words, ort_raises = BAD_FEEDS[case]
    model = static_two_input_model()
    sess = onnxjit.InferenceSession(model)
    with pytest.raises(onnxjit.InvalidArgument) as info:
        sess.run(names, feeds)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{case}: {w!r} not in {msg!r}"
    with pytest.raises(jit_state.InvalidArgument):
        sess.run(names, feeds)
    # parity with onnxruntime
    ort_sess = ort_session(model)
    if ort_raises:
        with pytest.raises(Exception):
            ort_sess.run(names, feeds)
    else:
        ort_sess.run(names, feeds)


def test_error_classes_are_shared_with_capi_module():
    for name in ("InvalidArgument", "NoSuchFile", "InvalidGraph", "InvalidProtobuf", "NotImplemented",
                 "RuntimeException", "Fail"):
        assert getattr(jit_state, name) is getattr(onnxjit, name)
    assert issubclass(onnxjit.InvalidProtobuf, onnxjit.InvalidGraph)
    assert issubclass(onnxjit.InvalidArgument, ValueError)


# --- bad models --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_pathlib", [False, True])
def test_missing_file_raises_no_such_file(tmp_path, as_pathlib):
    path = tmp_path / "absent.onnx"
    with pytest.raises(onnxjit.NoSuchFile, match="absent.onnx"):
        onnxjit.InferenceSession(path if as_pathlib else str(path))
    with pytest.raises(Exception):
        onnxruntime.InferenceSession(str(path))


def test_directory_raises_no_such_file(tmp_path):
    with pytest.raises(onnxjit.NoSuchFile):
        onnxjit.InferenceSession(str(tmp_path))
    with pytest.raises(Exception):
        onnxruntime.InferenceSession(str(tmp_path))


def _corrupt_sources(tmp_path):
    good = mlp_model().SerializeToString()
    text = tmp_path / "notes.txt"
    text.write_text("This is a plain text file.\nIt is not an ONNX model at all.\n")
    return {
        "random bytes": np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8).tobytes(),
        "truncated model": good[: len(good) // 2],
        "text file": str(text),
        "text bytes": text.read_bytes(),
    }


@pytest.mark.parametrize("case", ["random bytes", "truncated model", "text file", "text bytes"])
def test_corrupt_model_raises_invalid_graph(case, tmp_path):
    source = _corrupt_sources(tmp_path)[case]
    with pytest.raises(onnxjit.InvalidGraph) as info:
        onnxjit.InferenceSession(source)
    msg = str(info.value)
    assert "model" in msg.lower() and len(msg) > 20, msg
    with pytest.raises(Exception):
        onnxruntime.InferenceSession(source)


def test_undefined_value_raises_invalid_graph():
    model = make_model([helper.make_node("Add", ["x", "nothere"], ["y"])], [tensor("x", TP.FLOAT, [2])],
                       [tensor("y", TP.FLOAT, [2])])
    with pytest.raises(onnxjit.InvalidGraph, match="nothere"):
        onnxjit.InferenceSession(model)
    with pytest.raises(Exception):
        ort_session(model)


def test_ir_version_newer_than_onnx_raises_invalid_graph():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", TP.FLOAT, [2])],
                       [tensor("y", TP.FLOAT, [2])], ir_version=onnx.IR_VERSION + 5)
    with pytest.raises(onnxjit.InvalidGraph, match="IR version"):
        onnxjit.InferenceSession(model.SerializeToString())
    with pytest.raises(Exception):
        ort_session(model)


# --- threads -----------------------------------------------------------------------------------------------------
def test_concurrent_runs_on_one_session():
    model = mlp_model()
    sess = onnxjit.InferenceSession(model)
    ort_sess = ort_session(model)
    rng = np.random.default_rng(42)
    batches = [1, 2, 3, 5, 8, 16, 32]
    jobs = []
    for t in range(8):
        for i in range(20):
            x = rng.standard_normal((batches[(t + i) % len(batches)], 4), dtype=np.float32)
            jobs.append((x, ort_sess.run(None, {"x": x})))

    def work(chunk):
        return [(sess.run(None, {"x": x}), want) for x, want in chunk]

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, [jobs[t * 20:(t + 1) * 20] for t in range(8)]))
    assert sum(len(r) for r in results) == 160
    for chunk in results:
        for got, want in chunk:
            assert_all_same(got, want)


# --- session options ---------------------------------------------------------------------------------------------
def test_session_options_defaults_mirror_onnxruntime():
    got, want = onnxjit.SessionOptions(), onnxruntime.SessionOptions()
    for field in ("graph_optimization_level", "execution_mode", "execution_order"):
        assert int(getattr(got, field)) == int(getattr(want, field)), field
        assert getattr(got, field).name == getattr(want, field).name, field
    for field in ("intra_op_num_threads", "inter_op_num_threads", "optimized_model_filepath", "enable_profiling",
                  "log_verbosity_level", "logid", "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse",
                  "use_deterministic_compute"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.graph_optimization_level == onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert got.intra_op_num_threads == 0
    for name in ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"):
        assert int(getattr(onnxjit.GraphOptimizationLevel, name)) == int(getattr(onnxruntime.GraphOptimizationLevel,
                                                                                 name))
    run_got, run_want = onnxjit.RunOptions(), onnxruntime.RunOptions()
    assert run_got.terminate == run_want.terminate
    assert run_got.log_verbosity_level == run_want.log_verbosity_level


def test_session_config_entries():
    for so in (onnxjit.SessionOptions(), onnxruntime.SessionOptions()):
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        so.add_session_config_entry("session.intra_op.allow_spinning", "1")
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
        with pytest.raises(Exception):
            so.get_session_config_entry("never.set")
    with pytest.raises(onnxjit.InvalidArgument):
        onnxjit.SessionOptions().get_session_config_entry("never.set")


def test_optimized_model_filepath_writes_a_valid_model(tmp_path, rng):
    model = mlp_model()
    so = onnxjit.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = onnxjit.InferenceSession(model, so)
    assert os.path.isfile(so.optimized_model_filepath)
    written = onnx.load(so.optimized_model_filepath)
    onnx.checker.check_model(written, full_check=True)
    x = rng.standard_normal((3, 4), dtype=np.float32)
    want = ort_run(model, {"x": x})
    assert_all_same(sess.run(None, {"x": x}), want)
    assert_all_same(jit_run(written, {"x": x}), want)
    assert_all_same(ort_run(written, {"x": x}), want)


def test_profiling_writes_a_chrome_trace(tmp_path, rng):
    so = onnxjit.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "jitprof")
    sess = onnxjit.InferenceSession(mlp_model(), so)
    for _ in range(2):
        sess.run(None, {"x": rng.standard_normal((2, 4), dtype=np.float32)})
    path = sess.end_profiling()
    assert path and os.path.isfile(path)
    events = json.loads(pathlib.Path(path).read_text())
    # one event per step per run; a fused step lists every node it ran
    assert isinstance(events, list) and len(events) == 2 * len(sess._compiled.steps)
    ran = {n for e in events for n in e["args"]["nodes"]}
    assert len(ran) == 3, ran  # three nodes
    for e in events:
        assert {"name", "ph", "ts", "dur"} <= set(e), e
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    # onnxruntime writes a JSON list of trace events too
    ort_so = onnxruntime.SessionOptions()
    ort_so.enable_profiling = True
    ort_so.profile_file_prefix = str(tmp_path / "ortprof")
    ort_sess = ort_session(mlp_model(), sess_options=ort_so)
    ort_sess.run(None, {"x": np.ones((2, 4), np.float32)})
    ort_events = json.loads(pathlib.Path(ort_sess.end_profiling()).read_text())
    assert isinstance(ort_events, list) and {"name", "ph", "ts", "dur"} <= set(ort_events[-1])


def test_profiling_off_end_profiling_returns_empty():
    assert onnxjit.InferenceSession(mlp_model()).end_profiling() == ""


def test_run_options_terminate_raises_runtime_exception():
    model = mlp_model()
    sess = onnxjit.InferenceSession(model)
    ro = onnxjit.RunOptions()
    ro.terminate = True
    x = np.ones((2, 4), np.float32)
    with pytest.raises(onnxjit.RuntimeException):
        sess.run(None, {"x": x}, ro)
    ort_ro = onnxruntime.RunOptions()
    ort_ro.terminate = True
    with pytest.raises(Exception):
        ort_session(model).run(None, {"x": x}, ort_ro)
    ro.terminate = False  # the session is still usable afterwards
    assert_all_same(sess.run(None, {"x": x}, ro), ort_run(model, {"x": x}))


# --- external data -----------------------------------------------------------------------------------------------
def test_external_data_from_path_and_from_bytes(tmp_path, rng):
    model = mlp_model()
    saved = onnx.ModelProto()
    saved.CopyFrom(model)
    path = tmp_path / "ext.onnx"
    onnx.save_model(saved, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").is_file()
    x = rng.standard_normal((4, 4), dtype=np.float32)
    want = onnxruntime.InferenceSession(str(path)).run(None, {"x": x})
    assert_all_same(want, ort_run(model, {"x": x}))
    assert_all_same(onnxjit.InferenceSession(str(path)).run(None, {"x": x}), want)
    assert_all_same(onnxjit.InferenceSession(path).run(None, {"x": x}), want)
    data = path.read_bytes()
    with pytest.raises(onnxjit.InvalidGraph, match="'W'|'B'"):
        onnxjit.InferenceSession(data)
    with pytest.raises(Exception):
        onnxruntime.InferenceSession(data)


# --- model-local functions ---------------------------------------------------------------------------------------
def test_model_local_function(rng):
    fn = helper.make_function(
        "custom.fns", "ScaledAdd", ["a", "b"], ["out"],
        [helper.make_node("Add", ["a", "b"], ["s"]),
         helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
         helper.make_node("Mul", ["s", "two"], ["m"]),
         helper.make_node("Tanh", ["m"], ["out"])],
        opset_imports=[helper.make_opsetid("", 17)])
    model = make_model([helper.make_node("ScaledAdd", ["x", "y"], ["h"], domain="custom.fns"),
                        helper.make_node("ScaledAdd", ["h", "x"], ["z"], domain="custom.fns")],
                       [tensor("x", TP.FLOAT, ["N", 3]), tensor("y", TP.FLOAT, ["N", 3])],
                       [tensor("z", TP.FLOAT, ["N", 3])], extra_opsets={"custom.fns": 1}, functions=[fn])
    onnx.checker.check_model(model)
    feeds = {"x": rng.standard_normal((2, 3), dtype=np.float32), "y": rng.standard_normal((2, 3), dtype=np.float32)}
    got = jit_run(model, feeds)
    assert_all_same(got, ref_run(model, feeds))
    assert_all_same(got, ort_run(model, feeds))


# --- drop-in ----------------------------------------------------------------------------------------------------
TYPICAL_ORT_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
sess = ort.InferenceSession(sys.argv[1], sess_options=so, providers=["CPUExecutionProvider"])
input_name = sess.get_inputs()[0].name
output_names = [o.name for o in sess.get_outputs()]
x = np.load(sys.argv[2])
assert sess.get_inputs()[0].shape[1] == x.shape[1]
try:
    sess.run(None, {input_name: x, "wrong_name": x})
    raise SystemExit("no error for a wrong input name")
except InvalidArgument:
    pass
outputs = sess.run(output_names, {input_name: x})
np.savez(sys.argv[3], *outputs)
print(sess.get_providers()[0], input_name, ort.get_device())
"""


def test_import_onnxjit_as_ort_drop_in(tmp_path, rng):
    """The same ORT script, once as written and once with `import onnxjit as ort` (and onnxjit's capi module)."""
    import subprocess
    import sys
    model_path = str(tmp_path / "model.onnx")
    onnx.save(mlp_model(), model_path)
    x_path = str(tmp_path / "x.npy")
    np.save(x_path, rng.standard_normal((6, 4), dtype=np.float32))
    results = {}
    for lib in ("onnxruntime", "onnxjit"):
        script = TYPICAL_ORT_SCRIPT.replace("import onnxruntime as ort", f"import {lib} as ort").replace(
            "from onnxruntime.capi", f"from {lib}.capi")
        out = str(tmp_path / f"{lib}.npz")
        proc = subprocess.run([sys.executable, "-c", script, model_path, x_path, out], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"{lib}: {proc.stderr[-2000:]}"
        with np.load(out) as z:
            results[lib] = (proc.stdout.split(), [z[f"arr_{i}"] for i in range(len(z.files))])
    assert results["onnxjit"][0] == results["onnxruntime"][0]
    assert_all_same(results["onnxjit"][1], results["onnxruntime"][1])


def test_shape_inference_sees_large_initializers_dims_without_their_data(rng):
    # a weight above serde.STRUCTURE_PAYLOAD_ELEMENTS: shape inference runs on a copy without its data and still
    # infers the output shape from its dims; the session computes with the real data
    w = rng.standard_normal((300, 200)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    graph = helper.make_graph(nodes, "g", [tensor("x", TP.FLOAT, ["N", 300])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    sess = onnxjit.InferenceSession(model)
    assert sess.get_outputs()[0].shape == ["N", 200]
    x = rng.standard_normal((3, 300)).astype(np.float32)
    # 300-term dot products: summation order differs from onnxruntime's
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_openmp_environment_left_alone():
    """onnxjit's kernels run on its own threads, never OpenMP's: it sets no OpenMP variable for the process (they
    would reach every other OpenMP library in it)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    script = "import os, onnxjit; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"]


def test_outputs_never_share_memory_with_feeds_each_other_or_weights():
    """Views the kernels hand out (a Reshape of the input, an Identity of that, a Gather of one row of a weight)
    come back as the caller's own writable arrays, as onnxruntime's: writing one changes no feed, other output or
    later run."""
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    import onnxjit
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"]), helper.make_node("Identity", ["y"], ["z"]),
         helper.make_node("Gather", ["table", "row"], ["w"])], "views",
        [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
        [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("y", "z", "w")],
        [numpy_helper.from_array(np.array([4, 3], np.int64), "shape"), numpy_helper.from_array(table, "table"),
         numpy_helper.from_array(np.array(1, np.int64), "row")])
    sess = onnxjit.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                                    .SerializeToString())
    x = np.ones((3, 4), np.float32)
    y, z, w = sess.run(None, {"x": x})
    y += 1
    z += 2
    w += 3
    assert (x == 1).all() and (y == 2).all() and (z == 3).all()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[2], table[1])


def test_outputs_that_are_feeds_or_repeat_a_value_are_copies():
    """A graph output that is a feed itself (listed as an output, or an Identity of it, which the optimizer
    removes), and one value listed twice as outputs, come back as separate arrays of the caller's own; a feed that
    views a larger array of the caller is copied too. A fresh output of a kernel is handed out as it is."""
    import numpy as np
    from onnx import TensorProto as TP
    from onnx import helper

    import onnxjit
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Add", ["x", "x"], ["s"])], "fed",
        [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TP.FLOAT, [2, 3]) for n in ("y", "x", "s", "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for level in (onnxjit.GraphOptimizationLevel.ORT_DISABLE_ALL, onnxjit.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = onnxjit.SessionOptions()
        so.graph_optimization_level = level
        sess = onnxjit.InferenceSession(model.SerializeToString(), so)
        whole = np.arange(12, dtype=np.float32).reshape(4, 3)
        for x in (np.ones((2, 3), np.float32), whole[1:3]):
            before = x.copy()
            outs = sess.run(None, {"x": x})
            for i, o in enumerate(outs):
                assert o.flags.writeable and not np.shares_memory(o, x) and not np.shares_memory(o, whole)
                assert not any(np.shares_memory(o, p) for p in outs[:i])
                o += 1
            np.testing.assert_array_equal(x, before)
            np.testing.assert_array_equal(outs[0], before + 1)
            np.testing.assert_array_equal(outs[3], before * 2 + 1)


def test_outputs_from_numba_kernels_are_copied_only_where_they_share_memory():
    """Numba's arrays have a MemInfo for base, not the array they view: a view of a feed (its MemInfo's parent) and
    a second array over one Numba allocation are copies, a fresh Numba array is handed out as it is."""
    import numba
    import numpy as np

    from onnxjit.session.session import _independent

    @numba.njit
    def kernel(x):
        fresh = np.arange(4.0)
        return fresh, x[1:], x, fresh[:2], fresh
    whole = np.zeros(6)
    x = whole[1:5]  # a feed viewing a larger array of the caller's
    outs = kernel(x)
    handed = _independent(outs, {"x": x})
    assert handed[0] is outs[0]
    for i, o in enumerate(handed[1:], 1):
        assert o is not outs[i] and o.flags.writeable
        assert not np.shares_memory(o, whole) and not any(np.shares_memory(o, p) for p in handed[:i])
    assert [o.tolist() for o in handed] == [[0, 1, 2, 3], [0, 0, 0], [0, 0, 0, 0], [0, 1], [0, 1, 2, 3]]
    # a numpy scalar comes back as a 0-d array
    assert type(_independent([np.float32(2)], {})[0]) is np.ndarray
