"""ALS against Spark MLlib's on ``local[2]`` (issue 26's bar: "ALS reaches Spark's test RMSE
within 1 % in less time than Spark ``local[2]``").

One rating graph per ``--ratings`` value, made once in this process and handed to both sides:
``taskdml.datasets.make_ratings`` with a planted rank-10 model (``noise`` 0.1, density 0.01,
four users per item, ``n_users * n_items * 0.01`` ratings), split by ``split_edges`` (20 %
held out, seed 0). Both sides fit the same training ratings with the same ``rank``, ``reg``
(Spark's ``regParam``) and ``n_iter`` (``maxIter``), in the same formulation: explicit
feedback, items solved first, each vertex's lambda ``reg * n_ratings(vertex)`` (ALS-WR, which
MLlib's ``ALS.computeFactors`` does with ``numExplicits * regParam`` and taskdml's
``als(weighted_reg=True)`` does). The initial factors are each side's own unit-norm normal
rows (different draws).

- **Spark** (``pyspark.ml.recommendation.ALS``, ``implicitPrefs=False``, ``nonnegative=False``,
  its default 10 user and 10 item blocks) runs in a forked child on ``local[2]``, before
  taskdml's cluster starts. Timed: the JVM start (``SparkSession.getOrCreate``), the training
  DataFrame cached and counted (``load``), then ``.fit``: the first fit (a cold JIT), two
  more (warm; the row's ``seconds`` is the faster) and two warm fits of one iteration; per
  iteration is ``(warm fit - faster one-iteration fit) / (n_iter - 1)``. Peak memory: the
  JVM's ``VmHWM``; CPU seconds: the JVM's (user + system) during the faster warm fit.
- **taskdml** (``taskdml.graph.als``) runs on a fresh ``LocalCluster`` of 2 worker processes of
  one thread each per size; the ratings are made on the workers (the same seeds give the same
  values whatever the chunking; their count and sum are checked against this process's copy)
  and persisted. Timed: the first ``als`` call on the new cluster (the direct collective's
  warm-up included), then two more (warm; the row's ``seconds`` is the faster). Both include
  partitioning the ratings (``partition_bipartite``), as Spark's fit includes blocking them;
  per iteration is the median of the faster fit's history ``seconds``. Peak memory: each worker's
  ``VmHWM`` (reset before the fits); CPU seconds: the workers' (user + system, summed) during
  the faster warm fit. On a loaded machine CPU seconds are the steadier comparison.

Test RMSE is computed here, in numpy, the same way for both: ``U[user] . V[item]`` on the
held-out ratings whose user and item both have training ratings (MLlib leaves the others out
of its model; taskdml gives them zero factors).

    python benchmarks/als_peers.py --ratings 1e5 1e6     # about 3 minutes on 2 cores

Prints a markdown table and rewrites its block of ``RESULTS.md`` (``--no-write``: prints only;
``--json PATH`` also writes the rows). The machine's load average goes with the figures.
Needs ``pyspark`` (the ``bench`` extra) and a Java runtime (``default-jre-headless``).
"""

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
import traceback

import _results
import numpy as np

PACKAGES = ("taskdml", "dask", "distributed", "numpy", "pyspark")
TITLE = "Graph parallelism: ALS against Spark MLlib on local[2] (issue 26)"
DENSITY = 0.01
NOISE = 0.1
USERS_PER_ITEM = 4


# --------------------------------------------------------------------------------------------
# The ratings


def shape_for(n_ratings):
    """``(n_users, n_items)`` giving about *n_ratings* ratings at :data:`DENSITY`."""
    n_items = max(10, round(math.sqrt(n_ratings / (DENSITY * USERS_PER_ITEM))))
    return USERS_PER_ITEM * n_items, n_items


def make(n_ratings, rank, seed, chunk_edges=1_000_000):
    """The (train, test) Datasets of the rating graph for *n_ratings* (lazy)."""
    from taskdml.datasets import make_ratings, split_edges

    n_users, n_items = shape_for(n_ratings)
    graph = make_ratings(
        n_users,
        n_items,
        rank=rank,
        density=DENSITY,
        noise=NOISE,
        chunk_edges=chunk_edges,
        random_state=seed,
    )
    return split_edges(graph[["src", "dst", "weight"]], test_size=0.2, random_state=seed)


def arrays(edges):
    """``(src, dst, weight)`` of an edges Dataset, computed here."""
    import dask

    return dask.compute(edges.src.data, edges.dst.data, edges.weight.data, scheduler="threads")


def test_rmse(U, V, train, test):
    """RMSE of ``U[u] . V[i]`` on the test ratings whose user and item have training ratings;
    also the fraction of test ratings kept."""
    src, dst, weight = train
    t_src, t_dst, t_weight = test
    seen_u = np.bincount(src, minlength=len(U)) > 0
    seen_i = np.bincount(dst, minlength=len(V)) > 0
    keep = seen_u[t_src] & seen_i[t_dst]
    predicted = np.einsum("ij,ij->i", U[t_src[keep]], V[t_dst[keep]])
    return float(np.sqrt(np.mean((predicted - t_weight[keep]) ** 2))), float(keep.mean())


def _peak_gib(pid="self"):
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**20


def _cpu_seconds(processes):
    """User plus system CPU seconds of *processes* so far."""
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def _own_cpu_seconds():
    import psutil

    return _cpu_seconds([psutil.Process()])


def _clear_peak():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current resident size


# --------------------------------------------------------------------------------------------
# Spark MLlib on local[2], in a forked child


def spark_side(train, shape, rank, reg, n_iter, seed, driver_memory):
    """Spark's figures and factors for *train* (see the module docstring)."""
    import pandas as pd
    import psutil

    began = time.perf_counter()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("taskdml-als-peers")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    out = {"jvm_start_s": time.perf_counter() - began}
    src, dst, weight = train
    at = time.perf_counter()
    frame = pd.DataFrame(
        {"user": src.astype(np.int32), "item": dst.astype(np.int32), "rating": weight}
    )
    ratings = spark.createDataFrame(frame).cache()
    ratings.count()
    out["load_s"] = time.perf_counter() - at
    from pyspark.ml.recommendation import ALS

    java = [p for p in psutil.Process().children(recursive=True) if "java" in p.name()]

    def fit(iterations):
        estimator = ALS(
            rank=rank,
            maxIter=iterations,
            regParam=reg,
            implicitPrefs=False,
            nonnegative=False,
            seed=seed,
            userCol="user",
            itemCol="item",
            ratingCol="rating",
        )
        at, cpu = time.perf_counter(), _cpu_seconds(java)
        model = estimator.fit(ratings)
        return model, time.perf_counter() - at, _cpu_seconds(java) - cpu

    _, out["first_fit_s"], _ = fit(n_iter)
    model, out["seconds"], out["cpu_s"] = min(fit(n_iter), fit(n_iter), key=lambda f: f[1])
    one = min(fit(1)[1], fit(1)[1])  # the two fits' wall seconds
    out["iteration_s"] = (out["seconds"] - one) / max(1, n_iter - 1)
    factors = []
    for table, n in ((model.userFactors, shape[0]), (model.itemFactors, shape[1])):
        got = table.toPandas()
        dense = np.zeros((n, rank))
        dense[got["id"].to_numpy()] = np.stack(got["features"].to_numpy())
        factors.append(dense)
    out["peak_rss_gib"] = max((_peak_gib(p.pid) for p in java), default=float("nan"))
    spark.stop()
    return out, factors


def _child(queue, *args):
    try:
        queue.put(("ok", *spark_side(*args)))
    except BaseException:  # noqa: BLE001 - the parent reports it
        queue.put(("error", traceback.format_exc()))


def measure_spark(train, shape, rank, reg, n_iter, seed, driver_memory, cap):
    """:func:`spark_side` in a forked child capped at *cap* seconds: ``("ok", figures,
    factors)``, ``("error", text)`` or ``("capped",)``."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(
        target=_child, args=(queue, train, shape, rank, reg, n_iter, seed, driver_memory)
    )
    child.start()
    try:
        return queue.get(timeout=cap)
    except Exception:  # noqa: BLE001 - queue.Empty
        return ("capped",)
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()


# --------------------------------------------------------------------------------------------
# taskdml on a fresh 2-worker LocalCluster


def taskdml_side(n_ratings, local_train, rank, reg, n_iter, seed, workers):
    """taskdml's figures and factors (see the module docstring)."""
    from distributed import Client, LocalCluster, wait

    from taskdml.graph import als

    began = time.perf_counter()
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        ) as cluster,
        Client(cluster) as client,
    ):
        out = {"cluster_start_s": time.perf_counter() - began}
        train, _ = make(n_ratings, rank, seed)
        train = client.persist(train)
        wait([train[v].data for v in ("src", "dst", "weight")])
        count, total = client.compute([train.weight.size, train.weight.data.sum()], sync=True)
        if count != len(local_train[2]) or not np.isclose(total, local_train[2].sum()):
            raise RuntimeError("the ratings made on the workers differ from this process's")
        client.run(_clear_peak)

        def fit():
            at, cpu = time.perf_counter(), sum(client.run(_own_cpu_seconds).values())
            model = als(train, rank=rank, reg=reg, n_iter=n_iter, random_state=seed, client=client)
            seconds = time.perf_counter() - at
            return model, seconds, sum(client.run(_own_cpu_seconds).values()) - cpu

        _, out["first_fit_s"], _ = fit()
        model, out["seconds"], out["cpu_s"] = min(fit(), fit(), key=lambda f: f[1])
        out["iteration_s"] = statistics.median(h["seconds"] for h in model.history)
        out["exchange_s"] = statistics.median(h["exchange_s"] for h in model.history)
        peaks = client.run(_peak_gib)
        out["peak_rss_gib"] = max(peaks.values())
        out["worker_peaks_gib"] = sorted(peaks.values())
        U, V = client.compute(
            [model.user_factors.factors.data, model.item_factors.factors.data], sync=True
        )
    return out, [U, V]


# --------------------------------------------------------------------------------------------
# The run


def run(ratings_list, rank, reg, n_iter, seed, workers, driver_memory, cap):
    rows = []
    for n_ratings in ratings_list:
        began = time.perf_counter()
        train_ds, test_ds = make(int(n_ratings), rank, seed)
        train, test = arrays(train_ds), arrays(test_ds)
        shape = tuple(train_ds.attrs["shape"])
        base = {"ratings": len(train[0]) + len(test[0]), "train": len(train[0]), "shape": shape}
        print(
            f"# {shape[0]:,} users x {shape[1]:,} items: {len(train[0]):,} training and "
            f"{len(test[0]):,} test ratings ({time.perf_counter() - began:.1f} s to make)",
            flush=True,
        )
        outcome = measure_spark(train, shape, rank, reg, n_iter, seed, driver_memory, cap)
        if outcome[0] != "ok":
            print(f"spark: {outcome}", flush=True)
            rows.append({**base, "peer": "spark local[2]", "status": outcome[0]})
            spark = None
        else:
            _, figures, (U, V) = outcome
            figures["rmse"], figures["test_kept"] = test_rmse(U, V, train, test)
            spark = {**base, "peer": "spark local[2]", "status": "ok", **figures}
            rows.append(spark)
            print(f"spark: {figures}", flush=True)
        figures, (U, V) = taskdml_side(int(n_ratings), train, rank, reg, n_iter, seed, workers)
        figures["rmse"], figures["test_kept"] = test_rmse(U, V, train, test)
        row = {**base, "peer": f"taskdml {workers} workers", "status": "ok", **figures}
        if spark is not None:
            row["rmse_ratio"] = row["rmse"] / spark["rmse"]
            row["time_ratio"] = row["seconds"] / spark["seconds"]
        rows.append(row)
        print(f"taskdml: {figures}", flush=True)
    return rows


def table(rows):
    lines = [
        "| ratings (train) | users × items | who | test RMSE | RMSE ÷ Spark's | fit s (warm) "
        "| × Spark | fit CPU s | first fit s | start s | per iteration ms | peak GiB |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        head = f"| {row['ratings']:,} ({row['train']:,}) | {row['shape'][0]:,} × "
        head += f"{row['shape'][1]:,} | {row['peer']} "
        if row["status"] != "ok":
            lines.append(head + f"| {row['status']} | | | | | | | | |")
            continue
        start = row.get("jvm_start_s", row.get("cluster_start_s"))
        peaks = " / ".join(f"{p:.2f}" for p in row.get("worker_peaks_gib", [row["peak_rss_gib"]]))
        ratio = f"{row['rmse_ratio']:.4f}" if "rmse_ratio" in row else ""
        times = f"{row['time_ratio']:.2f}" if "time_ratio" in row else ""
        lines.append(
            head + f"| {row['rmse']:.4f} | {ratio} | {row['seconds']:.2f} | {times} "
            f"| {row['cpu_s']:.1f} | {row['first_fit_s']:.2f} | {start:.2f} "
            f"| {1e3 * row['iteration_s']:.0f} | {peaks} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ratings", nargs="+", type=float, default=[1e5, 1e6])
    parser.add_argument("--rank", type=int, default=10)
    parser.add_argument("--reg", type=float, default=0.1)
    parser.add_argument("--n-iter", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--driver-memory", default="6g", help="Spark's spark.driver.memory")
    parser.add_argument("--cap", type=float, default=900.0, help="seconds for Spark's child")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="a sentence recorded with the results")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    began = time.perf_counter()
    rows = run(
        args.ratings,
        args.rank,
        args.reg,
        args.n_iter,
        args.seed,
        args.workers,
        args.driver_memory,
        args.cap,
    )
    wall = time.perf_counter() - began
    load_after = os.getloadavg()
    text = table(rows)
    print()
    print(text)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    command = "python benchmarks/als_peers.py " + " ".join(sys.argv[1 if argv is None else 0 :])
    body = "\n".join(
        [
            f"Command: `{command}` ({wall:.0f} s). Machine: {_results.machine_line()}.",
            f"Versions: {_results.versions_line(_results.versions(PACKAGES))}.",
            f"rank {args.rank}, reg {args.reg:g} (ALS-WR on both sides), {args.n_iter} "
            f"iterations, density {DENSITY:g}, noise {NOISE:g} (the RMSE floor). Spark on "
            f"`local[2]` (driver memory {args.driver_memory}); taskdml on {args.workers} worker "
            f"processes of 1 thread each (LocalCluster). Fit seconds: the faster of two warm fits; "
            f"start is the JVM's or the cluster's. Load average (1 min) {load_before[0]:.2f} "
            f"before, {load_after[0]:.2f} after." + (f" {args.note}" if args.note else ""),
            "",
            text,
        ]
    )
    if not args.no_write:
        _results.write_section(_results.RESULTS, body, "als_peers.py", TITLE)
        print(f"\nupdated {_results.RESULTS}")


if __name__ == "__main__":
    main()
