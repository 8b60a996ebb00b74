"""onnxjit.dask.predict on a 2-worker distributed LocalCluster (worker processes): a DataFrame and a Dask array
scored partition by partition match the single-process run, and each worker creates one session per model."""
import dask.array as da
import dask.dataframe as dd
import distributed
import numpy as np
import pytest

import onnxjit
import onnxjit.dask as odask
from onnxjit.testing.tabular import customer_frame as _frame
from onnxjit.testing.tabular import matrix_model as _matrix_model
from onnxjit.testing.tabular import per_column_model as _per_column_model


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def test_dataframe_partitions_match_one_process(client, tmp_path):
    df = _frame(3000)
    path = tmp_path / "pipeline.onnx"
    path.write_bytes(_per_column_model(df))
    ddf = dd.from_pandas(df, npartitions=6)
    probabilities = odask.predict(str(path), ddf, output="probabilities")
    labels = odask.predict(str(path), ddf)  # the model's first output
    assert list(probabilities.columns) == ["probabilities_0", "probabilities_1"] and labels.name == "label"
    got_p, got_l = probabilities.compute(), labels.compute()
    sess = onnxjit.InferenceSession(str(path))
    want_l, want_p = sess.run(None, onnxjit.feeds_from_dataframe(sess, df))
    np.testing.assert_array_equal(got_l.to_numpy(), want_l)
    np.testing.assert_allclose(got_p.to_numpy(), want_p, rtol=1e-6, atol=1e-7)
    assert got_p.index.equals(df.index)
    # the model went to each worker once: one session per worker process, whatever the partitions
    assert set(client.run(lambda: __import__("onnxjit.dask").dask.created).values()) == {1}


def test_array_blocks_match_one_process(client):
    df = _frame(3000)
    data = _matrix_model(df)
    x = df[["age", "income", "visits"]].to_numpy(np.float32)
    got = odask.predict(data, da.from_array(x, chunks=(700, 2)), output="probabilities")  # rechunked to whole rows
    assert got.shape == (3000, 2) and got.dtype == np.float32
    want = onnxjit.InferenceSession(data).run(["probabilities"], {"X": x})[0]
    np.testing.assert_allclose(got.compute(), want, rtol=1e-6, atol=1e-7)


def test_what_it_cannot_score_is_named():
    with pytest.raises(TypeError, match="Dask DataFrame or a Dask array"):
        odask.predict(_matrix_model(_frame(10)), np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="must be 2-D"):
        odask.predict(_matrix_model(_frame(10)), da.zeros(5, chunks=5))
