"""Batch scoring on Dask: `predict(model, data)` runs a model over the partitions of a Dask DataFrame (or the row
blocks of a 2-D Dask array) with one onnxjit session per worker process.

The model's bytes enter the task graph once, as one key every partition's task reads: a distributed worker fetches
that key once and keeps it, so the model is not shipped per partition. Each worker process keeps its sessions in
`_SESSIONS`, keyed by the model's digest and options, so a worker creates a model's session once, and its kernels
come from the artifact cache after the first process that compiled them. Sessions run one intra-op thread by
default: the workers are the parallelism (pass `sess_options` to change it).

A DataFrame partition becomes the model's feeds through `feeds_from_dataframe` (its `columns` argument passes
through). The result holds one output (`output`, default the model's first): a Series for a 1-D output, a
DataFrame with columns `<output>_0 ...` for a 2-D one, or, from an array, a Dask array of the output's rows. Its
meta comes from running the model here on Dask's non-empty stand-in for a partition.
"""
from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import numpy as np

_SESSIONS: dict[tuple, Any] = {}  # (model digest, options) -> this process's session
_SESSIONS_LOCK = threading.Lock()
created = 0  # sessions this process created for predict (tests read it on each worker)


def _session(model: bytes, digest: str, providers: tuple, threads: int):
    global created
    key = (digest, providers, threads)
    sess = _SESSIONS.get(key)
    if sess is None:
        with _SESSIONS_LOCK:
            sess = _SESSIONS.get(key)
            if sess is None:
                import onnxjit
                so = onnxjit.SessionOptions()
                so.intra_op_num_threads = threads
                sess = _SESSIONS[key] = onnxjit.InferenceSession(model, so, providers=list(providers))
                created += 1
    return sess


def _score_frame(part, model, digest, providers, threads, columns, output):
    import pandas as pd

    from onnxjit.dataframe import feeds_from_dataframe
    sess = _session(model, digest, providers, threads)
    name = output or sess.get_outputs()[0].name
    values = np.asarray(sess.run([name], feeds_from_dataframe(sess, part, columns))[0])
    if values.ndim == 1:
        return pd.Series(values, index=part.index, name=name)
    if values.ndim != 2:
        raise ValueError(f"output {name!r} has shape {list(values.shape)}: predict returns 1-D or 2-D outputs")
    return pd.DataFrame(values, index=part.index, columns=[f"{name}_{k}" for k in range(values.shape[1])])


def _score_block(block, model, digest, providers, threads, input_name, output):
    sess = _session(model, digest, providers, threads)
    return np.asarray(sess.run([output or sess.get_outputs()[0].name], {input_name: block})[0])


def predict(model: str | bytes | os.PathLike, data: Any, *, output: str | None = None,
            columns: dict[str, list[str]] | None = None, providers: list[str] | None = None,
            threads: int = 1) -> Any:
    """`model` (a path or the model's bytes) over `data`, a Dask DataFrame or a 2-D Dask array (the model's
    single input, rows along axis 0): a lazy Dask Series/DataFrame or array of the output `output`."""
    import dask
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    elif not isinstance(model, bytes):
        raise TypeError(f"model must be a path or the model's bytes, got {type(model).__name__}")
    digest = hashlib.sha256(model).hexdigest()
    providers_t = tuple(providers or ["CPUExecutionProvider"])
    model_key = dask.delayed(model, pure=True)  # one key in the graph: each worker fetches it once
    if isinstance(data, dd.DataFrame):
        sample = data._meta_nonempty  # Dask's stand-in rows (missing values in its string columns: filled)
        text = [c for c in sample.columns if sample[c].dtype == object or str(sample[c].dtype).startswith("str")]
        sample = sample.fillna({c: "a" for c in text}) if text else sample
        meta = _score_frame(sample, model, digest, providers_t, threads, columns, output).iloc[:0]
        return data.map_partitions(_score_frame, model_key, digest, providers_t, threads, columns, output,
                                   meta=meta)
    if isinstance(data, da.Array):
        if data.ndim != 2:
            raise ValueError(f"a Dask array to score must be 2-D (rows, features), got shape {data.shape}")
        sess = _session(model, digest, providers_t, threads)
        inputs = sess.get_inputs()
        if len(inputs) != 1:
            raise ValueError(f"a Dask array feeds a model with one input; this one has {[i.name for i in inputs]}")
        data = data.rechunk({1: -1})  # every block holds whole rows
        sample = _score_block(np.zeros((1, data.shape[1]), data.dtype), model, digest, providers_t, threads,
                              inputs[0].name, output)
        chunks = (data.chunks[0],) + tuple((n,) for n in sample.shape[1:])
        return da.map_blocks(_score_block, data, model_key, digest, providers_t, threads, inputs[0].name, output,
                             dtype=sample.dtype, chunks=chunks, drop_axis=None if sample.ndim == 2 else 1)
    raise TypeError(f"data must be a Dask DataFrame or a Dask array, got {type(data).__name__}")
