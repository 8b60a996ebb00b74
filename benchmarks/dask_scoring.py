"""Batch scoring with onnxjit.dask.predict: rows per second over a DataFrame, one process against a distributed
LocalCluster of 1 and 2 worker processes (one intra-op thread each), outputs checked against the single-process
run.

usage: python benchmarks/dask_scoring.py [--rows 1000000] [--partitions 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import dask.dataframe as dd
    import distributed

    import onnxjit
    import onnxjit.dask as odask
    from onnxjit.testing.tabular import customer_frame, per_column_model

    df = customer_frame(args.rows)
    model = per_column_model(customer_frame(2000))
    so = onnxjit.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onnxjit.InferenceSession(model, so)
    feeds = onnxjit.feeds_from_dataframe(sess, df)
    want = sess.run(["probabilities"], feeds)[0]
    best = min(_timed(lambda: sess.run(["probabilities"], onnxjit.feeds_from_dataframe(sess, df)))
               for _ in range(args.rounds))
    print(f"{args.rows:,} rows; one process, one thread: {args.rows / best:,.0f} rows/s ({best:.2f} s)")
    for workers in (1, 2):
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, distributed.Client(cluster):
            ddf_w = dd.from_pandas(df, npartitions=args.partitions).persist()
            odask.predict(model, ddf_w, output="probabilities").compute()  # sessions and kernels on the workers
            times = []
            for _ in range(args.rounds):
                time.sleep(1.0)  # lets the scheduler forget the last round's result keys (the same graph)
                t0 = time.perf_counter()
                got = odask.predict(model, ddf_w, output="probabilities").compute()
                times.append(time.perf_counter() - t0)
            ok = np.allclose(got.to_numpy(), want, rtol=1e-6, atol=1e-7)
            print(f"LocalCluster, {workers} worker process(es): {args.rows / min(times):,.0f} rows/s "
                  f"({min(times):.2f} s, best of {args.rounds}); outputs {'match' if ok else 'DIFFER'}")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
