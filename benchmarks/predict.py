"""Batch prediction over data larger than the workers' memory (issue 28, item 2's bar).

A Zarr store of ``--factor`` (default 4) times the two workers' ``memory_limit`` together is
written chunk by chunk; an ``SGDClassifier`` fitted in memory on its first chunk is applied to
every row by what a ``predict:`` step runs (:func:`taskdml.runs._predict.predictions` and
:func:`~taskdml.runs._predict.write_predictions`, the store read lazily: streamed), written to a
Parquet folder by the workers. Then, in this process: the same model's ``predict`` on the same
rows read chunk by chunk (the in-memory reference, timed), and the output read back and compared
row for row (every row once, in order, equal). Each worker's peak resident memory (``VmHWM``,
read with ``client.run`` as tests/parallel/test_streaming.py reads it) against its limit.

    python benchmarks/predict.py                         # workers of 400 MiB, a 3.2 GiB store
    python benchmarks/predict.py --worker-mib 200 --factor 2   # a smoke run (~0.8 GiB)

Prints a JSON summary; writes nothing else but the temporary store and output (removed).
"""

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np

FEATURES = 40
CHUNK_ROWS = 25_000  # 7.6 MiB chunks: the workers hold their imports (~270 MiB) and a few


def _peak_rss():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _chunk(i, rows, features):
    rng = np.random.default_rng(i)
    X = rng.random((rows, features)) - 0.5
    y = (X @ np.linspace(-1.0, 1.0, features) > 0).astype(np.int8)
    return X, y


def write_store(path, n_chunks):
    """The store, one chunk at a time in this process (never all of it in memory)."""
    import xarray as xr

    for i in range(n_chunks):
        X, y = _chunk(i, CHUNK_ROWS, FEATURES)
        part = xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)})
        if i == 0:
            encoding = {"X": {"chunks": (CHUNK_ROWS, FEATURES)}, "y": {"chunks": (CHUNK_ROWS,)}}
            part.to_zarr(path, mode="w", encoding=encoding, consolidated=False)
        else:
            part.to_zarr(path, append_dim="sample", consolidated=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker-mib", type=int, default=400)
    parser.add_argument("--factor", type=float, default=4.0)
    parser.add_argument("--folder", default=None, help="where the store goes (default: a temp)")
    args = parser.parse_args(argv)

    import pandas as pd
    import xarray as xr
    from distributed import Client, LocalCluster
    from sklearn.linear_model import SGDClassifier

    from taskdml.datasets import read_zarr
    from taskdml.runs._predict import predictions, write_predictions

    limit = args.worker_mib * 2**20
    n_chunks = int(np.ceil(args.factor * 2 * limit / (CHUNK_ROWS * FEATURES * 8)))
    folder = tempfile.mkdtemp(dir=args.folder, prefix="predict-bench-")
    store, out = os.path.join(folder, "rows.zarr"), os.path.join(folder, "scores.parquet")
    try:
        began = time.perf_counter()
        write_store(store, n_chunks)
        write_s = time.perf_counter() - began
        model = SGDClassifier(random_state=0).fit(*_chunk(0, CHUNK_ROWS, FEATURES))
        with (
            LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                memory_limit=limit,
                host="127.0.0.1",
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            data = read_zarr(store, y=None)
            store_bytes = data.X.nbytes
            began = time.perf_counter()
            written = write_predictions(predictions(model, data, "predict"), out)
            predict_s = time.perf_counter() - began
            peaks = client.run(_peak_rss)
            restarts = sum(
                1 for event in client.get_events("all") if "restart" in str(event).lower()
            )
        # the reference: the same model's predict in this process, on the same rows, by chunk
        opened = xr.open_zarr(store, consolidated=False)["X"]
        began = time.perf_counter()
        reference = []
        for start in range(0, opened.shape[0], CHUNK_ROWS):
            block = opened[start : start + CHUNK_ROWS].values
            reference.append(model.predict(block))
        in_memory_s = time.perf_counter() - began
        reference = np.concatenate(reference)
        found = pd.read_parquet(out)
        rows_once = found.index.tolist() == list(range(len(reference)))
        equal = bool(np.array_equal(found["prediction"].to_numpy(), reference))
        summary = {
            "store_gib": round(store_bytes / 2**30, 3),
            "workers": 2,
            "worker_limit_mib": args.worker_mib,
            "store_over_workers_memory": round(store_bytes / (2 * limit), 2),
            "rows": int(len(reference)),
            "chunks": n_chunks,
            "parts_written": written["parts"],
            "every_row_once_in_order": rows_once,
            "equal_to_in_memory_predict": equal,
            "worker_peak_mib": {k: round(v / 2**20, 1) for k, v in peaks.items()},
            "peaks_below_limit": all(v < limit for v in peaks.values()),
            "restart_events": restarts,
            "write_store_s": round(write_s, 1),
            "predict_and_write_s": round(predict_s, 1),
            "in_memory_predict_by_chunk_s": round(in_memory_s, 1),
            "ratio": round(predict_s / in_memory_s, 2),
        }
        print(json.dumps(summary, indent=2))
        return summary
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
