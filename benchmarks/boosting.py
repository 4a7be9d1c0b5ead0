"""Gradient-boosted trees: taskdml's fit step (the library's own Dask training) against the
same model fitted in memory and scikit-learn's HistGradientBoostingClassifier.

For each size, one synthetic classification set (20 features, 10 informative) split 80/20;
the training rows persisted on a LocalCluster of 2 workers × 1 thread, in 8 chunks. Timed:

- *taskdml*: :func:`taskdml.parallel.train` with ``strategy="sync"``, what a ``fit:`` step runs
  (XGBoost's ``xgboost.dask``, LightGBM's ``DaskLGBMClassifier``), its result the in-memory
  class; and with the default strategy (data under 64 MiB fitted at once on one worker);
- *in memory*: the same estimator's ``fit`` on NumPy arrays in this process, 2 threads;
- *HGB*: ``HistGradientBoostingClassifier`` with the same rounds, depth and learning rate,
  2 threads (``OMP_NUM_THREADS``), no early stopping.

Accuracy on the same test rows. Run: ``python benchmarks/boosting.py`` (``--quick``: 10^4
rows, prints only).
"""

import argparse
import os
import time

import _results

PACKAGES = ("xgboost", "lightgbm", "scikit-learn", "dask", "distributed")
ROUNDS, DEPTH, RATE = 100, 6, 0.3


def models():
    import lightgbm
    import xgboost

    return {
        "XGBClassifier": lambda threads: xgboost.XGBClassifier(
            n_estimators=ROUNDS, max_depth=DEPTH, learning_rate=RATE, tree_method="hist",
            n_jobs=threads, random_state=0,
        ),
        "LGBMClassifier": lambda threads: lightgbm.LGBMClassifier(
            n_estimators=ROUNDS, max_depth=DEPTH, learning_rate=RATE, num_leaves=31,
            n_jobs=threads, verbose=-1, random_state=0,
        ),
    }  # fmt: skip


def measure(sizes, workers):
    import dask.array as da
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification
    from sklearn.ensemble import HistGradientBoostingClassifier

    from taskdml.parallel import train

    rows = []
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1",
                     dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        for n in sizes:
            X, y = make_classification(int(n * 1.25), 20, n_informative=10, random_state=0)
            X_train, y_train, X_test, y_test = X[:n], y[:n], X[n:], y[n:]
            Xd = da.from_array(X_train, chunks=(-(-n // 8), 20))
            yd = da.from_array(y_train, chunks=-(-n // 8))
            Xd, yd = client.persist([Xd, yd])
            began = time.perf_counter()
            hgb = HistGradientBoostingClassifier(
                max_iter=ROUNDS, max_depth=DEPTH, learning_rate=RATE, early_stopping=False,
                random_state=0,
            ).fit(X_train, y_train)  # fmt: skip
            hgb_s = time.perf_counter() - began
            hgb_score = hgb.score(X_test, y_test)
            for name, make in models().items():
                train(make(1), Xd[: 8 * 1000], yd[: 8 * 1000], strategy="sync", client=client)
                timed = {}
                for label, strategy in (("native", "sync"), ("default", None)):
                    began = time.perf_counter()
                    result = train(make(1), Xd, yd, strategy=strategy, epochs="auto", client=client)
                    timed[label] = (
                        time.perf_counter() - began,
                        result.estimator.score(X_test, y_test),
                        result.strategy,
                    )
                began = time.perf_counter()
                local = make(workers).fit(X_train, y_train)
                local_s = time.perf_counter() - began
                rows.append({
                    "n": n, "model": name,
                    "native_s": timed["native"][0], "native": timed["native"][1],
                    "default_s": timed["default"][0], "default": timed["default"][1],
                    "default_ran": timed["default"][2],
                    "memory_s": local_s, "memory": local.score(X_test, y_test),
                    "hgb_s": hgb_s, "hgb": hgb_score,
                })  # fmt: skip
                print(rows[-1], flush=True)
    return rows


def report(rows, facts):
    lines = [
        *_results.header(facts),
        f"Cluster: LocalCluster, {facts['workers']} worker processes × 1 thread, 127.0.0.1; "
        f"training rows persisted in 8 chunks.",
        "",
        f"{ROUNDS} rounds, depth {DEPTH}, learning rate {RATE}; accuracy on the same 20 % of "
        "rows held out. *taskdml native*: `train(..., strategy='sync')`, the library's Dask "
        "training (what a `fit:` step runs above 64 MiB); *taskdml default*: the strategy "
        "left to taskdml (what ran in brackets); *in memory*: the same estimator's `fit` on "
        f"NumPy in this process with {facts['workers']} threads; *HGB*: scikit-learn's "
        "`HistGradientBoostingClassifier`, same rounds, depth and rate. × = seconds / in "
        "memory's.",
        "",
        "| rows | model | taskdml native s (×) | acc | taskdml default s (×) | acc "
        "| in memory s | acc | HGB s (×) | acc |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        base = row["memory_s"]
        lines.append(
            f"| {row['n']:,} | {row['model']} | {row['native_s']:.2f} "
            f"({row['native_s'] / base:.2f}×) | {row['native']:.4f} "
            f"| {row['default_s']:.2f} ({row['default_s'] / base:.2f}×, {row['default_ran']}) "
            f"| {row['default']:.4f} | {base:.2f} | {row['memory']:.4f} "
            f"| {row['hgb_s']:.2f} ({row['hgb_s'] / base:.2f}×) | {row['hgb']:.4f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=None, help="training rows")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run that prints only")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = [10_000] if args.quick else [100_000, 1_000_000]
    os.environ.setdefault("OMP_NUM_THREADS", str(args.workers))
    began = time.perf_counter()
    rows = measure(args.sizes, args.workers)
    _results.publish(
        report,
        rows,
        args,
        "boosting.py",
        "Gradient-boosted trees (`benchmarks/boosting.py`)",
        PACKAGES,
        began,
    )


if __name__ == "__main__":
    main()
