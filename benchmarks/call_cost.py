"""The fixed cost of one warm ``train`` call at many worker processes, piece by piece.

Tiny data (``--chunks`` chunks of ``--chunk-rows`` × 20 float64 rows, persisted before
timing) so that the replicas' own compute is a few milliseconds and what is left is the cost
of a call: ``TrainResult.stats["setup"]``'s laps (prepare, inspect, blocks, place,
collective, lock, submit, dispatch, skew, return) and the whole call's wall time, median of
``--repeats`` warm calls after ``--warm`` untimed ones, on a fresh
``LocalCluster(n_workers=--workers, threads_per_worker=1)``. One epoch of
``SGDClassifier`` with ``sync_every=1`` and the engine's other defaults.

``python benchmarks/call_cost.py --workers 16`` prints the table; it writes nothing.
"""

import argparse
import logging
import statistics
import time
import warnings


def measure(workers, chunks, chunk_rows, repeats, warm):
    import dask.array as da
    from distributed import Client, LocalCluster, wait
    from sklearn.linear_model import SGDClassifier

    from taskdml.parallel import train

    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        rng = da.random.default_rng(0)
        X = rng.random((chunks * chunk_rows, 20), chunks=(chunk_rows, 20))
        y = (X[:, 0] > 0.5).astype(int)
        X, y = client.persist([X, y])
        wait([X, y])
        calls = []
        for attempt in range(warm + repeats):
            began = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = train(
                    SGDClassifier(random_state=0),
                    X,
                    y,
                    classes=[0, 1],
                    strategy="sync",
                    sync_every=1,
                    random_state=0,
                    client=client,
                )
            wall = time.perf_counter() - began
            if attempt >= warm:
                busy = max(result.stats["busy_s"])
                calls.append({"wall_s": wall, "busy_s": busy, **result.stats["setup"]})
        return {key: statistics.median(c.get(key, 0.0) for c in calls) for key in calls[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--chunk-rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warm", type=int, default=2)
    args = parser.parse_args()
    found = measure(args.workers, args.chunks, args.chunk_rows, args.repeats, args.warm)
    print(
        f"{args.workers} workers, {args.chunks} × {args.chunk_rows} rows, median of "
        f"{args.repeats} warm calls (ms):"
    )
    print("| " + " | ".join(found) + " |")
    print("|" + "---|" * len(found))
    print("| " + " | ".join(f"{v * 1e3:.1f}" for v in found.values()) + " |")


if __name__ == "__main__":
    main()
