"""Class-sharded model parallelism: a model larger than a worker trains and predicts.

1. **A model larger than one worker.** ``ClassSharded(SGDClassifier(loss="log_loss"))`` with
   320 classes on 2^18 hashed features: ``coef_`` is 320 × 2^18 float64 = 640 MiB, on a
   ``LocalCluster(n_workers=4, threads_per_worker=1, memory_limit="512MiB")``, as 4 shards of
   160 MiB, one per worker. (Four workers on two cores, not two: a worker that has imported
   scikit-learn already holds about 200 MiB, so two workers of 400 MiB, as first planned,
   have no room for a 200 MiB shard.) The data is sparse (25 non-zeros per row: 8 of the class's
   signature features, 17 at random), generated on the workers, 20,000 rows in 4 chunks.
   Reported: the seconds of ``fit`` and of ``predict`` on the training rows, the accuracy, and
   the peak resident memory of each worker process and of the client, polled every 0.1 s.
   The workers' spill, pause and target thresholds are off and only the terminate threshold
   (95 % of the limit, where the nanny kills the worker) stays: a shard is the model itself,
   so spilling it to disk between chunks would only write it out and read it back, and a
   paused worker would stop training. The unsharded model cannot run on this cluster at all
   (400 MiB of ``coef_`` in a worker of 400 MiB).
2. **Sharded against unsharded on a problem that fits**: 50 classes on 2^16 features (25 MiB
   of ``coef_``), the same 20,000 rows: the unsharded ``partial_fit`` loop in this process
   (``n_jobs=1`` and ``n_jobs=2``, scikit-learn's threads over the classes) against
   ``ClassSharded`` with 1 and 2 shards on a 2-worker cluster, with a check that every
   ``coef_`` is equal. Seconds of ``fit`` only, best of ``--repeats``.

``python benchmarks/model_parallel.py`` rewrites its block of ``benchmarks/RESULTS.md``;
``--quick`` is a smoke run (a tenth of the sizes) that prints only.
"""

import argparse
import contextlib
import datetime
import threading
import time

import _results
import numpy as np

PACKAGES = ("taskdml", "dask", "distributed", "scikit-learn", "numpy", "scipy")
NNZ, SIGNATURE = 25, 8
WORKERS = 4  # of the large case


def make_chunk(seed, n_rows, n_features, n_classes):
    """One chunk of hashed-feature-like sparse rows and their labels."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    signatures = np.random.default_rng(0).integers(0, n_features, (n_classes, SIGNATURE * 2))
    y = rng.integers(0, n_classes, n_rows)
    picks = rng.integers(0, SIGNATURE * 2, (n_rows, SIGNATURE))
    columns = np.hstack(
        [signatures[y[:, None], picks], rng.integers(0, n_features, (n_rows, NNZ - SIGNATURE))]
    )
    rows = np.repeat(np.arange(n_rows), NNZ)
    X = sp.csr_matrix((np.ones(n_rows * NNZ), (rows, columns.ravel())), shape=(n_rows, n_features))
    X.sum_duplicates()
    return X, y


def make_data(n_rows, n_chunks, n_features, n_classes):
    """Dask arrays of sparse chunks, built by tasks (generated where they are used)."""
    import dask
    import dask.array as da
    import scipy.sparse as sp

    size = n_rows // n_chunks
    pairs = [
        dask.delayed(make_chunk, nout=2)(seed, size, n_features, n_classes)
        for seed in range(1, n_chunks + 1)
    ]
    meta = sp.csr_matrix((0, n_features))
    X = da.concatenate(
        [da.from_delayed(p[0], (size, n_features), dtype=float, meta=meta) for p in pairs]
    )
    y = da.concatenate([da.from_delayed(p[1], (size,), dtype=np.int64) for p in pairs])
    return X, y


class PeakMemory:
    """The peak resident memory of every worker process and of this process, polled."""

    def __init__(self, client, every_s=0.1):
        import psutil

        self.client, self.every_s, self.self = client, every_s, psutil.Process()
        self.workers, self.client_bytes = {}, 0
        self._stop = threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self):
        while not self._stop.is_set():
            for address, rss in self.client.run(_rss).items():
                self.workers[address] = max(self.workers.get(address, 0), rss)
            self.client_bytes = max(self.client_bytes, self.self.memory_info().rss)
            self._stop.wait(self.every_s)


def _rss():
    import psutil

    return psutil.Process().memory_info().rss


def large(quick):
    """Case 1: a ``coef_`` larger than one worker's memory limit, sharded over two."""
    import dask
    from distributed import Client, LocalCluster
    from sklearn.linear_model import SGDClassifier

    from taskdml import ClassSharded

    n_classes, n_features = (20, 2**15) if quick else (320, 2**18)
    n_rows, n_chunks, limit = (2_000, 2, "400MiB") if quick else (20_000, 4, "512MiB")
    thresholds = {
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.pause": False,
    }
    with (
        dask.config.set(thresholds),
        LocalCluster(
            n_workers=WORKERS,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=limit,
        ) as cluster,
        Client(cluster) as client,
    ):
        X, y = make_data(n_rows, n_chunks, n_features, n_classes)
        X, y = client.persist([X, y])
        client.run(_warm_up)
        model = ClassSharded(SGDClassifier(loss="log_loss", random_state=0), n_shards=WORKERS)
        baseline = client.run(_rss)
        with PeakMemory(client) as memory:
            began = time.perf_counter()
            model.fit(X, y, classes=np.arange(n_classes))
            fit_s = time.perf_counter() - began
            began = time.perf_counter()
            predicted = model.predict(X).compute()
            predict_s = time.perf_counter() - began
        accuracy = float((predicted == y.compute()).mean())
        shard_bytes = client.run(_held_shard_bytes)
    return {
        "n_classes": n_classes,
        "n_features": n_features,
        "n_rows": n_rows,
        "n_chunks": n_chunks,
        "limit": limit,
        "coef_mib": n_classes * n_features * 8 / 2**20,
        "fit_s": fit_s,
        "predict_s": predict_s,
        "accuracy": accuracy,
        "baseline_mib": sorted(v / 2**20 for v in baseline.values()),
        "peak_mib": sorted(v / 2**20 for v in memory.workers.values()),
        "client_peak_mib": memory.client_bytes / 2**20,
        "shard_mib": sorted(v / 2**20 for v in shard_bytes.values()),
    }


def _warm_up():
    import sklearn.linear_model  # noqa: F401 — imported before the baseline is read

    import taskdml.parallel.estimators._class_sharded  # noqa: F401


def _held_shard_bytes(dask_worker):
    """The coefficient bytes of the shards this worker holds."""
    from taskdml.parallel.estimators._class_sharded import _ClassShard

    return sum(
        e.coef_.nbytes
        for value in dask_worker.data.values()
        if isinstance(value, _ClassShard)
        for e in value.estimators
    )


@contextlib.contextmanager
def two_workers():
    """A fresh 2-worker ``LocalCluster`` (one thread each) and its client, the default."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def fits(quick, repeats, client=None):
    """Case 2: unsharded in this process against sharded on 2 workers, a model that fits
    (on a fresh cluster, or *client*'s)."""
    from sklearn.base import clone
    from sklearn.linear_model import SGDClassifier

    from taskdml import ClassSharded

    n_classes, n_features = (10, 2**12) if quick else (50, 2**16)
    n_rows, n_chunks = (2_000, 2) if quick else (20_000, 4)
    base = SGDClassifier(loss="log_loss", random_state=0)
    classes = np.arange(n_classes)
    chunks = [
        make_chunk(seed, n_rows // n_chunks, n_features, n_classes)
        for seed in range(1, n_chunks + 1)
    ]
    seconds, reference = {}, None
    for n_jobs in (1, 2):
        best = np.inf
        for _ in range(repeats):
            model, began = clone(base).set_params(n_jobs=n_jobs), time.perf_counter()
            for X, y in chunks:
                model.partial_fit(X, y, classes=classes)
            best = min(best, time.perf_counter() - began)
        seconds[f"unsharded, in this process, n_jobs={n_jobs}"] = best
        reference = model
    equal = True
    with contextlib.nullcontext(client) if client else two_workers() as client:
        X, y = make_data(n_rows, n_chunks, n_features, n_classes)
        X, y = client.persist([X, y])
        client.run(_warm_up)
        for n_shards in (1, 2):
            best = np.inf
            for repeat in range(repeats):
                # another seed per round: a fit with the keys of one still held would reuse it
                timed = clone(base).set_params(random_state=1000 + repeat)
                model, began = ClassSharded(timed, n_shards=n_shards), time.perf_counter()
                model.fit(X, y, classes=classes)
                best = min(best, time.perf_counter() - began)
                del model
            seconds[f"ClassSharded, {n_shards} shard(s) on 2 workers"] = best
            model = ClassSharded(clone(base), n_shards=n_shards).fit(X, y, classes=classes)
            coef = np.vstack([e.coef_ for s in client.gather(model.shards_) for e in s.estimators])
            equal = equal and np.array_equal(coef, reference.coef_)
    return {
        "n_classes": n_classes,
        "n_features": n_features,
        "n_rows": n_rows,
        "n_chunks": n_chunks,
        "seconds": seconds,
        "equal": equal,
    }


def vertical(quick, client=None):
    """Case 3: feature-sharded gradient descent, the cost of one mini-batch's exchange (on a
    fresh cluster, or *client*'s, the default client)."""
    import dask.array as da

    from taskdml.parallel import FeatureSharded
    from taskdml.parallel.estimators._feature_sharded import margin_gradient

    n_rows, n_features, n_chunks = (4_000, 200, 8) if quick else (40_000, 4_000, 80)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_rows, n_features))
    y = (X[:, : n_features // 2].sum(axis=1) > 0).astype(float)
    rows = n_rows // n_chunks
    began, w, b = time.perf_counter(), np.zeros(n_features), 0.0
    for i in np.random.RandomState(0).permutation(n_chunks):
        part = slice(i * rows, (i + 1) * rows)
        gradient, b = margin_gradient(y[part], b, "log_loss", 0.1, X[part] @ w)
        w = w - 0.1 * (X[part].T @ gradient / rows)
    seconds = {"in this process, numpy": (time.perf_counter() - began) / n_chunks}
    with contextlib.nullcontext(client) if client else two_workers():
        dX = da.from_array(X, chunks=(rows, n_features))
        dy = da.from_array(y, chunks=rows)
        for n_blocks in (1, 2):
            FeatureSharded(n_blocks=n_blocks, random_state=1).fit(dX, dy)  # warm up
            model, began = FeatureSharded(n_blocks=n_blocks, random_state=0), time.perf_counter()
            model.fit(dX, dy)
            seconds[f"FeatureSharded, {n_blocks} block(s) on 2 workers"] = (
                time.perf_counter() - began
            ) / n_chunks
            equal = np.allclose(model.coef_, w, rtol=0, atol=1e-10)
    return {"n_rows": n_rows, "n_features": n_features, "rows": rows, "seconds": seconds,
            "equal": equal}  # fmt: skip


def report(big, small, facts, wide):
    lines = [
        f"Run {facts['date']} with `{facts['command']}`.  ",
        f"Machine: {_results.machine_line(facts['machine'])}  ",
        f"Versions: {_results.versions_line(facts['versions'])}",
        "",
        f"### A model larger than one worker: {big['n_classes']} classes × "
        f"{big['n_features']:,} features ({big['coef_mib']:.0f} MiB of coef_), workers of "
        f"{big['limit']}",
        "",
        f"{big['n_rows']:,} sparse rows in {big['n_chunks']} chunks, {WORKERS} shards on "
        f"{WORKERS} workers (one thread each).",
        "",
        "| measure | value |",
        "| --- | ---: |",
        f"| fit, seconds | {big['fit_s']:.1f} |",
        f"| predict (all rows), seconds | {big['predict_s']:.1f} |",
        f"| training accuracy | {big['accuracy']:.3f} |",
        f"| coef_ held per worker, MiB | {_mib(big['shard_mib'])} |",
        f"| worker resident memory before fit, MiB | {_mib(big['baseline_mib'])} |",
        f"| worker peak resident memory, MiB | {_mib(big['peak_mib'])} |",
        f"| client peak resident memory, MiB | {big['client_peak_mib']:.0f} |",
        "",
        f"The whole coef_ ({big['coef_mib']:.0f} MiB) exceeds a worker's limit: the unsharded "
        "model cannot train on this cluster. Each worker holds one shard, and the client never "
        "holds one. The rows are separable by construction (each class has its own signature "
        "features), so the accuracy checks that the shards were combined right, not the model.",
        "",
        f"### Sharded against unsharded on a model that fits: {small['n_classes']} classes × "
        f"{small['n_features']:,} features, {small['n_rows']:,} rows in {small['n_chunks']} "
        f"chunks (best of {facts['repeats']})",
        "",
        "| training | fit seconds | ratio to unsharded n_jobs=1 |",
        "| --- | ---: | ---: |",
    ]
    base = next(iter(small["seconds"].values()))
    for name, value in small["seconds"].items():
        lines.append(f"| {name} | {value:.2f} | {value / base:.2f}× |")
    lines += [
        "",
        "Every sharded coef_ equals the unsharded one bit for bit: "
        f"{'yes' if small['equal'] else 'NO'}.",
        "",
        f"### Feature-sharded gradient descent: {wide['n_rows']:,} rows × "
        f"{wide['n_features']:,} features, mini-batches of {wide['rows']} rows, one epoch",
        "",
        "| training | ms per mini-batch |",
        "| --- | ---: |",
    ]
    for name, value in wide["seconds"].items():
        lines.append(f"| {name} | {1000 * value:.1f} |")
    lines += [
        "",
        "Per mini-batch the blocks send their partial margins and get the gradient back: two "
        "task hops. The weights equal the in-process steps to 1e-10: "
        f"{'yes' if wide['equal'] else 'NO'}.",
    ]
    return "\n".join(lines)


def _mib(values):
    return " / ".join(f"{v:.0f}" for v in values)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the timed fits")
    parser.add_argument("--quick", action="store_true", help="a smoke run that prints only")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    args = parser.parse_args(argv)
    facts = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/model_parallel.py" + (" --quick" if args.quick else ""),
        "machine": _results.machine(),
        "versions": _results.versions(PACKAGES),
        "repeats": 1 if args.quick else args.repeats,
    }
    big = large(args.quick)
    if args.quick:  # a smoke run: cases 2 and 3 on one cluster, one cluster start fewer
        with two_workers() as client:
            small = fits(True, facts["repeats"], client)
            wide = vertical(True, client)
    else:
        small = fits(False, facts["repeats"])
        wide = vertical(False)
    text = report(big, small, facts, wide)
    print(text)
    if not small["equal"]:
        raise SystemExit("a sharded coef_ differs from the unsharded one")
    if not args.quick:
        title = "Class-sharded model parallelism (`benchmarks/model_parallel.py`)"
        _results.write_section(args.out, text, "model_parallel.py", title)


if __name__ == "__main__":
    main()
