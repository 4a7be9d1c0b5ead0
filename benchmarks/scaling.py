"""How sync data-parallel training scales with the workers, and what it holds in memory.

One estimator, ``SGDClassifier(loss="hinge", alpha=1e-5, random_state=0)`` with classes
``[0, 1]``, trained by ``taskdml.parallel.train(..., strategy="sync")`` (the engine's other
defaults: ``sync_every="auto"``, shuffled chunk order) on synthetic data (taskdml's
chunk-independent ``make_classification``: ``--features`` float64 columns, 20 informative and
10 redundant, in chunks of ``--chunk-rows``), written once, chunk by chunk, to a Zarr store in
a temporary directory and read with ``da.from_zarr``. Four parts:

1. **Speed-up.** For every count ``w`` of ``--workers``, a fresh ``LocalCluster(n_workers=w,
   threads_per_worker=1, host="127.0.0.1")``; the ``--rows`` rows are persisted on it (timed
   apart), one untimed ``train`` (imports, first calls), then ``--repeats`` timed calls of
   ``--epochs`` epochs. *Seconds per epoch* = the median over the epochs after the first (the
   first runs the period's probe rounds) of rank 0's epoch durations (``history``), median over
   the calls. Speed-up = that of 1 worker / that of ``w``; efficiency = speed-up / ``w``.
2. **The cost of a round**, from ``TrainResult.stats`` (read the engine:
   ``taskdml/parallel/engine/_train.py`` and ``_direct.py``), per round, mean over replicas:
   *compute* = ``busy_s`` (``partial_fit``); *serialise* = ``serialize_s`` (pickling its own
   model, unpickling the others'); *wire* = ``wire_s`` (from a message's send to its arrival,
   as far as the receiver was blocked on it); *waiting* = ``wait_s`` (blocked on a peer that had
   not sent yet: load imbalance); *merge* = ``merge_s`` (merging the R models); *other* = the
   rest of the epoch's time (copying the global model, the epoch's broadcast, bookkeeping).
   ``collective_round_s`` is the engine's median round of the replica that waited least.
3. **Streaming against persisting**, on the same Zarr store
   at the fewest and the most workers: ``data="persist"`` and ``data="stream"`` (prefetch as
   the engine's default), interleaved, seconds per epoch both ways and their ratio.
4. **Peak memory**: for every multiple ``m`` of
   ``--memory-multiples``, data of ``m`` × the workers' total memory limit (``--memory-limit``
   per worker, at the most workers) in a Zarr store that is not persisted, one epoch with
   ``data="auto"`` on a fresh cluster; the peak RSS of every worker process (``VmHWM``, see
   :func:`_peak_rss_kib`) before and after, and the engine's ``stats["data"]``.
   Data over ``--max-gib`` is skipped with a note.

With the speed-up, per worker count and in the same run: the *ceiling* (``w`` plain processes
each running scikit-learn's ``partial_fit`` loop over ``1/w`` of the chunks, no communication:
``benchmarks/data_parallel.py``'s helpers, :func:`ceiling_walls`) and the serial loop, taskdml's
call as a share of the ceiling, the first call on the fresh cluster, where a call goes (the laps
of ``stats["setup"]``) and who each round waits for and why (``stats["slowest"]``,
``late_s``, ``copy_s``, ``epoch_end_s``, ``remote_chunks``). ``--parts scaling`` runs that part
alone (8-16 worker processes with small chunks show the overheads even on 2 cores) and writes
its own block of RESULTS.md.

Then :func:`modelled_epoch_s` extrapolates the measured costs to 8-256 workers (its assumptions
are in its docstring and in the report).

``python benchmarks/scaling.py --help`` for the options; ``--quick`` is a smoke run (< 1 min)
that prints only. A full run rewrites the generated block of the scaling section of
``benchmarks/RESULTS.md`` (``--out``) and leaves the rest of the file alone.
"""

import argparse
import concurrent.futures
import contextlib
import datetime
import logging
import math
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import _results
import psutil

CLASSES = [0, 1]
MIB = 2**20
GIB = 2**30
MODEL_WORKERS = [8, 16, 32, 64, 128, 256]
BANDWIDTH_GBIT = 10.0
TARGET_STREAM_RATIO = 1.10
PACKAGES = ("taskdml", "numpy", "scikit-learn", "dask", "distributed", "zarr", "psutil")
STARTED = time.perf_counter()
PARTS = ("scaling", "stream", "memory")
PARTIAL_BLOCK = "scaling.py --parts scaling"
"""The generated block of a run of the scaling part alone (the full run's stays as it was)."""


def progress(message):
    """One line of progress on stderr, with the seconds since the start."""
    print(f"[{time.perf_counter() - STARTED:5.0f} s] {message}", file=sys.stderr, flush=True)


def make_model():
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="hinge", alpha=1e-5, random_state=0)


def row_bytes(n_features):
    """Bytes of one row of X (float64) and y (int64)."""
    return 8 * n_features + 8


def write_store(directory, n_rows, n_features, chunk_rows):
    """Generate the data chunk by chunk and write it to a Zarr store in *directory*, in this
    process's threads (never more than a few chunks in memory); return the seconds taken."""
    import dask

    from taskdml.datasets import make_classification

    began = time.perf_counter()
    data = make_classification(
        n_rows,
        n_features,
        n_informative=min(20, n_features),
        n_redundant=min(10, max(0, n_features - 20)),
        chunk_size=chunk_rows,
        random_state=0,
    )
    writes = [
        array.to_zarr(os.path.join(directory, name), compute=False, compressors=None)
        for name, array in (("X", data.X.data), ("y", data.y.data))
    ]
    dask.compute(*writes, scheduler="threads", num_workers=2)
    return time.perf_counter() - began


def read_store(directory):
    import dask.array as da

    return da.from_zarr(os.path.join(directory, "X")), da.from_zarr(os.path.join(directory, "y"))


@contextlib.contextmanager
def cluster(n_workers, memory_limit="auto"):
    """A fresh ``LocalCluster`` of single-threaded worker processes on 127.0.0.1, its client."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=memory_limit,
            silence_logs=logging.ERROR,
        ) as local,
        Client(local) as client,
    ):
        client.run(_worker_imports)
        yield client


def _worker_imports():
    import sklearn.linear_model  # noqa: F401

    import taskdml.parallel  # noqa: F401


def _peak_rss_kib():
    """This process's peak RSS in KiB: ``VmHWM``, the high-water mark of its own memory map.

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux keeps that across ``execve``, and a
    worker process is spawned (fork or vfork, then exec) from the process that starts the
    cluster, so its ``ru_maxrss`` starts at that process's peak (measured: a worker whose
    own peak was 62 MiB reported 459 MiB, the client's peak). ``ru_maxrss`` where there is
    no ``/proc``.
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def train(client, X, y, epochs, **options):
    import taskdml

    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = taskdml.parallel.train(
            make_model(),
            X,
            y,
            classes=CLASSES,
            strategy="sync",
            epochs=epochs,
            random_state=0,
            client=client,
            **options,
        )
    return result, time.perf_counter() - began


def epoch_s(result):
    """Rank 0's median epoch after the first (the first runs the probe rounds), else the only."""
    durations = [entry["duration_s"] for entry in result.history]
    return statistics.median(durations[1:] or durations)


def round_split(result):
    """Per round, mean over replicas, in seconds: compute, serialise, wire, waiting, merge,
    other, and the engine's median collective round; ``rounds``; ``period`` (the median sync
    period of the epochs after the first)."""
    stats, rounds = result.stats, max(1, result.stats["rounds"])

    def mean(key):
        values = stats.get(key)
        return None if values is None else statistics.fmean(values) / rounds

    split = {key: mean(key + "_s") for key in ("busy", "serialize", "wire", "wait", "merge")}
    epochs_s = sum(entry["duration_s"] for entry in result.history)
    known = sum(value or 0.0 for value in split.values())
    periods = [entry.get("sync_every") for entry in result.history]
    periods = [p for p in periods if p is not None]
    return {
        **split,
        "other": max(0.0, epochs_s / rounds - known),
        "collective_round": stats.get("collective_round_s"),
        "rounds": stats["rounds"],
        "rounds_per_epoch": stats["rounds"] / len(result.history),
        "period": statistics.median(periods[1:] or periods) if periods else None,
        "blocks": stats["blocks"],
        "replicas": stats["replicas"],
        "model_bytes": len(pickle.dumps(result.estimator, protocol=5)),
    }


def _median_split(splits):
    return {
        key: (
            None
            if any(s.get(key) is None for s in splits)
            else statistics.median(s[key] for s in splits)
        )
        for key in splits[0]
    }


# ---------------------------------------------------------------------------------------------
# The measurements.


def scaling_part(args, store, stream_at=()):
    """Per worker count: seconds per epoch, the round split, the persist time, the first
    call on the fresh cluster, the breakdown of a call and of its rounds, and the same run's
    ceiling (:func:`ceiling_walls`). At the counts of *stream_at* (a smoke run's), the
    streaming part first, on the same cluster, before the data is persisted there
    (:func:`stream_part`'s rows, returned with the rows; the first call is then not the
    cluster's first)."""
    rows, serial_s, streamed = [], None, []
    for workers in args.workers:
        progress(f"scaling: {workers} worker(s)")
        with cluster(workers) as client:
            if workers in stream_at:  # before the store's chunks are persisted here
                streamed.append(stream_part(args, store, workers, client))
            X, y = read_store(store)
            began = time.perf_counter()
            X, y = client.persist([X, y])
            from distributed import wait

            wait([X, y])
            persist_s = time.perf_counter() - began
            first, first_wall = train(client, X, y, args.epochs)  # the first call, untimed
            runs = [train(client, X, y, args.epochs) for _ in range(args.repeats)]
        ceiling = {"ceiling_s": None}
        if not args.quick or serial_s is None:  # a smoke run: the ceiling at one count only
            ceiling = ceiling_walls(args, workers, serial=serial_s is None)
            serial_s = serial_s or ceiling.pop("serial_s")
        rows.append(
            {
                "workers": workers,
                "persist_s": persist_s,
                "epoch_s": statistics.median(epoch_s(r) for r, _ in runs),
                "call_s": statistics.median(wall for _, wall in runs),
                "collective": runs[0][0].stats.get("collective"),
                "first": {"call_s": first_wall, **call_breakdown(first)},
                "warm": _median_split([call_breakdown(r) for r, _ in runs]),
                "serial_s": serial_s,
                "ceiling_s": ceiling["ceiling_s"],
                **_median_split([round_split(r) for r, _ in runs]),
            }
        )
        progress(
            f"  {rows[-1]['epoch_s']:.3f} s/epoch, call {rows[-1]['call_s']:.2f} s, "
            f"ceiling {_fmt(ceiling['ceiling_s'], '.2f')} s"
        )
        if args.save_rows:  # what a run killed at a later count still leaves
            import json

            with open(args.save_rows, "w") as out:
                json.dump(rows, out, default=str)
    one = next((r for r in rows if r["workers"] == 1), None)
    for row in rows:
        row["speedup"] = one["epoch_s"] / row["epoch_s"] if one else None
    return rows, streamed


def ceiling_walls(args, workers, serial=False):
    """The same run's ceiling at *workers* (``benchmarks/data_parallel.py``'s helpers:
    *workers* plain processes, each running scikit-learn's ``partial_fit`` loop over its
    1/w of the chunks, chunk ``i`` in loop ``i mod w``, started together, no communication):
    the median wall of ``--repeats`` runs of ``--epochs`` epochs, and with *serial* the one
    loop over every chunk (``serial_s``). The helpers generate the same rows as the store
    (``--rows`` is their train share)."""
    import data_parallel

    n_samples = round(args.rows / data_parallel.TRAIN_FRACTION)
    helpers = data_parallel.Helpers(workers, n_samples, args.chunk_rows, reference=serial)
    try:
        helpers.wait_ready()
        out = {}
        if serial:
            out["serial_s"] = statistics.median(
                helpers.run("reference", "serial", args.epochs)["wall"] for _ in range(args.repeats)
            )
        out["ceiling_s"] = statistics.median(
            helpers.run("ceiling", "serial", args.epochs)["wall"] for _ in range(args.repeats)
        )
        return out
    finally:
        helpers.close()


CALL_LAPS = (
    "prepare_s",
    "inspect_s",
    "blocks_s",
    "workers_s",
    "data_wait_s",
    "place_s",
    "collective_s",
    "lock_s",
    "submit_s",
    "dispatch_s",
    "skew_s",
    "return_s",
    "finish_s",
)


def call_breakdown(result):
    """Where one call went, from ``TrainResult.stats``: the call's laps (``setup``), the
    epochs' time, and per round (mean over replicas) copying, the epoch ends, the wait for
    the slowest replica (``late_s``), and what the slowest rounds were late for."""
    stats = result.stats
    laps = stats.get("setup") or {}
    rounds = max(1, stats.get("rounds", 1))
    slowest = stats.get("slowest") or []
    late = [entry for entry in slowest if entry["cause"] is not None]
    remote = stats.get("remote_chunks") or []
    out = {key: laps.get(key) for key in CALL_LAPS}
    out.update(
        epochs_s=sum(entry["duration_s"] for entry in result.history),
        first_epoch_s=result.history[0]["duration_s"] if result.history else None,
        copy=_mean_over(stats.get("copy_s"), rounds),
        epoch_end=_mean_over(stats.get("epoch_end_s"), rounds),
        late=(stats["late_s"] / rounds) if "late_s" in stats else None,
        by_rows=sum(entry["cause"] == "rows" for entry in late) / max(1, len(slowest)),
        remote_chunks=sum(r or 0 for r in remote),
        start_late=max(stats.get("start_late_s") or [0.0]),
    )
    return out


def _mean_over(values, rounds):
    return None if not values else statistics.fmean(values) / rounds


def stream_part(args, store, workers, client=None):
    """Seconds per epoch with the data persisted and streamed, on *workers* workers (a fresh
    cluster, or *client*'s)."""
    progress(f"streaming against persisting: {workers} worker(s)")
    found = {"persist": [], "stream": []}
    with contextlib.nullcontext(client) if client else cluster(workers) as client:
        X, y = read_store(store)
        for mode in found:  # warm-up
            train(client, X, y, min(args.epochs, 2), data=mode)
        for _ in range(args.repeats):
            for mode in found:
                result, wall = train(client, X, y, args.epochs, data=mode)
                found[mode].append((epoch_s(result), wall, result.stats.get("data")))
    out = {"workers": workers}
    for mode, runs in found.items():
        out[mode] = {
            "epoch_s": statistics.median(r[0] for r in runs),
            "call_s": statistics.median(r[1] for r in runs),
            "data": runs[-1][2],
        }
    out["ratio"] = out["stream"]["epoch_s"] / out["persist"]["epoch_s"]
    return out


def memory_part(args, tmp):
    """Per multiple: peak RSS of every worker training on m × the total memory limit."""
    workers = max(args.workers)
    limit = args.memory_limit_mib * MIB
    rows, skipped = [], []
    for multiple in args.memory_multiples:
        n_rows = int(multiple * workers * limit // row_bytes(args.features))
        gib = n_rows * row_bytes(args.features) / GIB
        if gib > args.max_gib:
            skipped.append((multiple, n_rows, gib))
            progress(f"memory: {multiple}× ({gib:.1f} GiB) skipped: over --max-gib")
            continue
        store = os.path.join(tmp, f"memory-{multiple}")
        progress(f"memory: {multiple}× = {n_rows:,} rows, {gib:.2f} GiB: writing the store")
        write_s = write_store(store, n_rows, args.features, args.chunk_rows)
        with cluster(workers, memory_limit=limit) as client:
            idle = client.run(_peak_rss_kib)
            X, y = read_store(store)
            pool = concurrent.futures.ThreadPoolExecutor(1)
            call = pool.submit(train, client, X, y, 1, data="auto")
            try:
                result, wall = call.result(timeout=args.memory_timeout)
                failed = None
            except Exception as error:  # a worker killed for memory, or a hang
                result, wall = None, None
                failed = f"{type(error).__name__}: {error}"[:200] or "timed out"
            peak = client.run(_peak_rss_kib)
            # A worker the nanny restarted (over its memory limit) comes back at a new address.
            lost = len(set(idle) - set(peak))
        pool.shutdown(wait=False)
        shutil.rmtree(store, ignore_errors=True)
        rows.append(
            {
                "multiple": multiple,
                "rows": n_rows,
                "gib": gib,
                "write_s": write_s,
                "call_s": wall,
                "epoch_s": epoch_s(result) if result else None,
                "idle_mib": max(idle.values()) / 1024,
                "peak_mib": sorted(v / 1024 for v in peak.values()),
                "data": result.stats.get("data") if result else None,
                "workers_lost": lost,
                "failed": failed,
            }
        )
        progress(
            f"  peak {max(rows[-1]['peak_mib']):.0f} MiB, "
            + (f"failed: {failed}" if failed else f"{rows[-1]['epoch_s']:.1f} s/epoch")
        )
    return rows, skipped


class Load:
    """The CPU time other processes used while the benchmark ran (the machine may be shared)."""

    def __enter__(self):
        self.began, self.busy, self.ours = time.perf_counter(), _system_busy_s(), _tree_cpu_s()
        self.load_before = _loadavg()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.began
        foreign = (_system_busy_s() - self.busy) - (_tree_cpu_s() - self.ours)
        self.foreign_cores = max(0.0, foreign / max(wall, 1e-9))
        self.load_after = _loadavg()


def _system_busy_s():
    times = psutil.cpu_times()
    return sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))


def _tree_cpu_s():
    total = 0.0
    for process in [psutil.Process()] + psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------
# The model of larger clusters.


def modelled_epoch_s(
    replicas,
    blocks,
    *,
    block_s,
    imbalance,
    round_s,
    per_model_s,
    latency_s,
    model_bytes,
    bandwidth_bit_s,
    period=None,
    min_rounds=4,
):
    """Seconds per epoch of sync training of *blocks* blocks on *replicas* workers.

    With ``R`` replicas (at most one per block, as the engine runs them), ``k = ceil(B / R)``
    blocks for the busiest one and ``n`` rounds per epoch:

        T(R) = k · block_s · (1 + imbalance)
               + n · (round_s + per_model_s · R + ceil(log2 R) · (latency_s + 8 · bytes / bw))

        n = ceil(k / p),   p = period, or what ``sync_every="auto"`` chooses from block_s and
                           the round's cost (``taskdml.parallel.engine._period.choose_period``),
                           keeping *min_rounds* rounds an epoch (the family's ``min_merges``)

    Compute divides by ``R`` (perfect data locality, one replica per core, compute per block
    as measured); replicas wait for the slowest a fixed share of their compute (*imbalance*,
    as measured; none at ``R = 1``). A round is a recursive-doubling all-gather, as the
    engine's direct collective does it: ``ceil(log2 R)`` message steps, each paying the
    per-message latency (measured on loopback) and moving the model's bytes over a network of
    *bandwidth_bit_s* (a step moves up to ``R / 2`` models in the last step; the latency term
    dominates for small models, so each step is charged one model); then every replica
    deserialises and merges all ``R`` models (*per_model_s* each), and pays *round_s* once
    (copying the global model, bookkeeping). Nothing else grows with ``R``.

    Examples
    --------
    >>> costs = dict(block_s=0.01, imbalance=0.0, round_s=0.0, per_model_s=0.0, latency_s=0.0,
    ...              model_bytes=0, bandwidth_bit_s=1e10, period=1)
    >>> round(modelled_epoch_s(1, 64, **costs) / modelled_epoch_s(4, 64, **costs), 6)
    4.0
    >>> costs.update(latency_s=0.01)
    >>> round(modelled_epoch_s(1, 64, **costs) / modelled_epoch_s(4, 64, **costs), 6)  # 16+32
    1.333333
    """
    from taskdml.parallel.engine._period import choose_period

    replicas = max(1, min(replicas, blocks))
    busiest = math.ceil(blocks / replicas)
    steps = math.ceil(math.log2(replicas)) if replicas > 1 else 0
    per_round = (
        round_s + per_model_s * replicas + steps * (latency_s + 8 * model_bytes / bandwidth_bit_s)
    )
    if period is None:
        period = choose_period(block_s, per_round, busiest, min_rounds=min_rounds)
    compute = busiest * block_s * (1 + (imbalance if replicas > 1 else 0.0))
    return compute + math.ceil(busiest / period) * per_round


def model_parameters(rows, bandwidth_gbit):
    """The model's inputs, from the measured row of the most workers (and the loopback
    latency from the most workers that sent messages)."""
    top = max(rows, key=lambda r: r["workers"])
    replicas, rounds_pe = top["replicas"], top["rounds_per_epoch"]
    blocks_each = math.ceil(top["blocks"] / replicas)
    block_s = top["busy"] * rounds_pe / blocks_each  # busy per round × rounds / blocks, per epoch
    sent = [r for r in rows if r["replicas"] > 1 and r["wire"] is not None]
    latency_s = None
    if sent:
        s = max(sent, key=lambda r: r["workers"])
        latency_s = s["wire"] / math.ceil(math.log2(s["replicas"]))
    per_model = ((top["serialize"] or 0.0) + (top["merge"] or 0.0)) / replicas
    return {
        "measured_workers": top["workers"],
        "blocks": top["blocks"],
        "block_s": block_s,
        "imbalance": (top["wait"] or 0.0) / top["busy"] if replicas > 1 else 0.0,
        "round_s": top["other"],
        "per_model_s": per_model,
        "latency_s": latency_s if latency_s is not None else 0.0,
        "latency_measured": latency_s is not None,
        "model_bytes": top["model_bytes"],
        "bandwidth_bit_s": bandwidth_gbit * 1e9,
        "min_rounds": min_rounds(make_model()),
    }


def min_rounds(estimator):
    """The fewest merges an epoch ``sync_every="auto"`` keeps for *estimator*: its merge
    rule's ``min_merges``, or the engine's default."""
    from taskdml.parallel import get_merge_rule
    from taskdml.parallel.engine._period import MIN_ROUNDS

    return get_merge_rule(estimator).min_merges or MIN_ROUNDS


def model_rows(parameters, counts):
    """Modelled speed-up (and efficiency) per worker count: strong (the measured blocks) and
    weak (the measured blocks per worker, the data growing with the workers)."""
    costs = {k: parameters[k] for k in _MODEL_COSTS}
    blocks = parameters["blocks"]
    per_worker = blocks / parameters["measured_workers"]
    out = []
    for r in counts:
        strong = modelled_epoch_s(1, blocks, **costs) / modelled_epoch_s(r, blocks, **costs)
        weak_blocks = max(1, round(per_worker * r))
        weak = r * modelled_epoch_s(1, max(1, round(per_worker)), **costs)
        weak /= modelled_epoch_s(r, weak_blocks, **costs)
        out.append({"workers": r, "strong": strong, "weak": weak})
    return out


_MODEL_COSTS = (
    "block_s",
    "imbalance",
    "round_s",
    "per_model_s",
    "latency_s",
    "model_bytes",
    "bandwidth_bit_s",
    "min_rounds",
)


# ---------------------------------------------------------------------------------------------
# The report.


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def _ms(value):
    return _fmt(None if value is None else value * 1e3, ".3f")


def scaling_table(rows):
    lines = [
        "| workers | s/epoch | speed-up | efficiency | train() call s | rounds/epoch | period "
        "| persist s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedup = r["speedup"]
        lines.append(
            f"| {r['workers']} | {r['epoch_s']:.3f} | {_fmt(speedup, '.2f')}× "
            f"| {_fmt(None if speedup is None else speedup / r['workers'], '.0%')} "
            f"| {r['call_s']:.2f} | {r['rounds_per_epoch']:.1f} | {_fmt(r['period'], 'g')} "
            f"| {r['persist_s']:.1f} |"
        )
    return "\n".join(lines)


def ceiling_table(rows):
    lines = [
        "| workers | serial loop s | ceiling s (× serial) | taskdml call s (× serial) "
        "| taskdml / ceiling | first call on the fresh cluster s (setup, first epoch) "
        "| warm call s (setup) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        serial, ceiling, call = r["serial_s"], r["ceiling_s"], r["call_s"]
        first, warm = r["first"], r["warm"]
        shown = "–" if ceiling is None else f"{ceiling:.2f} ({serial / ceiling:.2f}×)"
        share = "–" if ceiling is None else f"**{ceiling / call:.0%}**"
        lines.append(
            f"| {r['workers']} | {serial:.2f} | {shown} "
            f"| {call:.2f} ({serial / call:.2f}×) | {share} "
            f"| {first['call_s']:.2f} ({_setup_s(first):.2f}, "
            f"{_fmt(first['first_epoch_s'], '.2f')}) "
            f"| {call:.2f} ({_setup_s(warm):.2f}) |"
        )
    return "\n".join(lines)


def _setup_s(breakdown):
    """Seconds of a call before its replicas ran: the laps up to the submission."""
    return sum(breakdown.get(key) or 0.0 for key in CALL_LAPS[: CALL_LAPS.index("submit_s") + 1])


def call_table(rows):
    laps = [key[:-2] for key in CALL_LAPS]
    lines = [
        "| workers | call | " + " | ".join(laps) + " | epochs |",
        "|---|---|" + "---|" * (len(laps) + 1),
    ]
    for r in rows:
        for label in ("first", "warm"):
            b = r[label]
            lines.append(
                f"| {r['workers']} | {label} | "
                + " | ".join(_ms1(b.get(key)) for key in CALL_LAPS)
                + f" | {_ms1(b.get('epochs_s'))} |"
            )
    return "\n".join(lines)


def straggler_table(rows):
    lines = [
        "| workers | compute | copy | waiting for the slowest (`late_s`) | its cause: more rows "
        "| collective (serialise + wire + wait + merge) | epoch end | chunks copied to their "
        "replica | latest start |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        w = r["warm"]
        collective = sum(r[k] or 0.0 for k in ("serialize", "wire", "wait", "merge"))
        lines.append(
            f"| {r['workers']} | {_ms(r['busy'])} | {_ms(w['copy'])} | {_ms(w['late'])} "
            f"| {_fmt(w['by_rows'], '.0%')} | {_ms(collective)} | {_ms(w['epoch_end'])} "
            f"| {_fmt(w['remote_chunks'], 'g')} | {_ms1(w['start_late'])} |"
        )
    return "\n".join(lines)


def _ms1(value):
    return _fmt(None if value is None else value * 1e3, ".1f")


def round_table(rows):
    lines = [
        "| workers | collective | compute | serialise | wire | waiting | merge | other "
        "| round total | engine's median round |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        parts = ("busy", "serialize", "wire", "wait", "merge", "other")
        total = sum(r[k] or 0.0 for k in parts)
        lines.append(
            f"| {r['workers']} | {r['collective'] or '–'} | "
            + " | ".join(_ms(r[k]) for k in parts)
            + f" | {_ms(total)} | {_ms(r['collective_round'])} |"
        )
    return "\n".join(lines)


def _data_facts(data):
    """``stats["data"]`` in a few words: the mode (and what was asked), why, the bound."""
    if not data:
        return "–"
    if not isinstance(data, dict):
        return str(data)
    words = [f"{data.get('mode')} (asked {data.get('requested')})"]
    if data.get("reason"):
        words.append(data["reason"])
    if data.get("streamed"):
        words.append(
            f"prefetch {data.get('prefetch')}, chunk {data.get('chunk_bytes', 0) / MIB:.1f} MiB, "
            f"bound {data.get('memory_bound_bytes', 0) / MIB:.1f} MiB per worker"
        )
    return "; ".join(words)


def stream_lines(streamed):
    lines = [
        "| workers | data | s/epoch | train() call s | stream / persist (s/epoch) "
        "| engine's choice (`stats['data']`) |",
        "|---|---|---|---|---|---|",
    ]
    for found in streamed:
        met = "met" if found["ratio"] <= TARGET_STREAM_RATIO else "**missed**"
        for mode in ("persist", "stream"):
            ratio = f"**{found['ratio']:.2f}×** (target ≤ {TARGET_STREAM_RATIO:.2f}×: {met})"
            lines.append(
                f"| {found['workers']} | {mode} | {found[mode]['epoch_s']:.3f} "
                f"| {found[mode]['call_s']:.2f} | {ratio if mode == 'stream' else ''} "
                f"| {_data_facts(found[mode]['data'])} |"
            )
    return lines


def memory_lines(rows, skipped, args):
    workers = max(args.workers)
    lines = [
        "| data × total limit | rows | data GiB | worker peak RSS MiB (each) | most / limit "
        "| idle peak MiB | s/epoch | store written s | engine's choice (`stats['data']`) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lost = f" ({r['workers_lost']} worker(s) restarted)" if r["workers_lost"] else ""
        choice = _data_facts(r["data"]) if not r["failed"] else f"**failed**: {r['failed']}"
        lines.append(
            f"| {r['multiple']:g}× | {r['rows']:,} | {r['gib']:.2f} "
            f"| {', '.join(f'{p:.0f}' for p in r['peak_mib'])}{lost} "
            f"| {max(r['peak_mib']) / args.memory_limit_mib:.0%} | {r['idle_mib']:.0f} "
            f"| {_fmt(r['epoch_s'], '.2f')} | {r['write_s']:.1f} | {choice} |"
        )
    for multiple, n_rows, gib in skipped:
        lines.append(
            f"| {multiple:g}× | {n_rows:,} | {gib:.1f} | skipped: over --max-gib "
            f"{args.max_gib:g} | | | | | |"
        )
    lines += [
        "",
        f"{workers} workers × {args.memory_limit_mib:,} MiB memory limit "
        f"({workers * args.memory_limit_mib / 1024:.2f} GiB in all); one epoch with "
        '`data="auto"` on a fresh cluster per size, from a Zarr store that is not persisted. '
        "*idle peak*: the largest worker's peak before training (imports done).",
    ]
    return lines


def model_lines(parameters, counts, rows):
    p = parameters
    modelled = model_rows(p, counts)
    measured = {r["workers"]: r["speedup"] for r in rows}
    lines = [
        "Inputs, measured at "
        f"{p['measured_workers']} worker(s): {p['blocks']} blocks, "
        f"compute {p['block_s'] * 1e3:.2f} ms per block, waiting {p['imbalance']:.1%} of "
        f"compute, {p['round_s'] * 1e3:.3f} ms once per round (other), "
        f"{p['per_model_s'] * 1e3:.3f} ms per model and round (serialise + merge), "
        f"{p['latency_s'] * 1e3:.3f} ms per message step"
        + (" (wire, loopback)" if p["latency_measured"] else " (not measured: no messages)")
        + f", model {p['model_bytes']:,} bytes pickled, network {p['bandwidth_bit_s'] / 1e9:g} "
        "Gbit/s (assumed).",
        "",
        "| workers | " + " | ".join(str(m["workers"]) for m in modelled) + " |",
        "|---|" + "---|" * len(modelled),
        "| strong (same data) | "
        + " | ".join(f"{m['strong']:.1f}× ({m['strong'] / m['workers']:.0%})" for m in modelled)
        + " |",
        "| weak (same data per worker) | "
        + " | ".join(f"{m['weak']:.1f}× ({m['weak'] / m['workers']:.0%})" for m in modelled)
        + " |",
        "| measured | "
        + " | ".join(
            f"{measured[m['workers']]:.2f}×" if measured.get(m["workers"]) else "–"
            for m in modelled
        )
        + " |",
    ]
    return lines


def report(args, facts, rows, streamed, memory, model_parameters_):
    m = facts["machine"]
    load_note = _results.load_note(facts["foreign_cores"], m["nproc"])
    lines = [
        f"Command: `{facts['command']}`  ",
        f"Date: {facts['date']}; whole benchmark {facts['total_s']:.0f} s  ",
        f"Machine: {_results.machine_line(m)}  ",
        f"Versions: {_results.versions_line(facts['versions'])}",
        "",
        f"{load_note} Load average before/after: {facts['load_before']} / {facts['load_after']}.",
        *([""] + [f"Note: {args.note}"] if args.note else []),
        "",
        f"Data: {args.rows:,} × {args.features} float64 "
        f"({args.rows * row_bytes(args.features) / MIB:,.0f} MiB for X and y) in "
        f"{args.chunk_rows:,}-row chunks, from a Zarr store (written in {facts['write_s']:.1f} s) "
        'persisted on each cluster; `SGDClassifier(loss="hinge", alpha=1e-5)`, '
        f'`train(strategy="sync", epochs={args.epochs})`, the engine\'s default `sync_every` '
        f'("auto"). Per worker count: a fresh cluster, one warm-up call, the median of '
        f"{args.repeats} calls.",
        "",
        "### The ceiling, in the same run",
        "",
        ceiling_table(rows),
        "",
        "*serial loop*: one process running scikit-learn's `partial_fit` loop over every "
        "chunk, in order; *ceiling*: w such processes at once, each over 1/w of the chunks "
        "(chunk i in loop i mod w), no communication (`benchmarks/data_parallel.py`'s "
        "helpers), first start to last end; both the median of "
        f"{args.repeats} runs of {args.epochs} epochs on the same rows. *taskdml call*: the "
        "whole `train()` call, median; *taskdml / ceiling* = ceiling s / call s. *first call*: "
        "the first `train()` on the fresh cluster, data persisted; *setup* = its laps up to "
        "the replicas' submission.",
        "",
        "### Where a call goes (ms; `stats['setup']`)",
        "",
        call_table(rows),
        "",
        "The laps of `TrainResult.stats['setup']`, in order: *prepare* (arguments, the data "
        "mode, the chunk lists), *inspect* (chunk facts; cached after the first call), "
        "*blocks*, *workers* (the workers there are), *data_wait* (every chunk in memory), "
        "*place* (who holds the chunks, placement), *collective*, *lock* (the replicas' "
        "workers), *submit*, then from the replicas' clocks *dispatch* (submission to the first "
        "replica's start), *skew* (first start to last), *return* (last end to the results "
        "here) and *finish* (to the call's end); *epochs*: the epochs' own seconds. *warm*: "
        "the median over the timed calls.",
        "",
        "### Where a round goes, and who it waits for (ms per round, mean over replicas)",
        "",
        straggler_table(rows),
        "",
        "From `TrainResult.stats` of the timed calls (median over calls): *compute* = "
        "`busy_s`; *copy* = `copy_s` (the global model copied each round); *waiting for the "
        "slowest* = `late_s` / rounds (per round, the slowest replica's `partial_fit` seconds "
        "minus the median replica's: `stats['slowest']`); *its cause: more rows* = the share "
        "of rounds whose slowest replica was late for its rows rather than its speed (the "
        "rest: a slower or busier core); *collective* = serialise + wire + wait + merge; "
        "*epoch end* = `epoch_end_s` (scoring, the epoch's broadcast); *chunks copied* = "
        "`remote_chunks` (held on another worker when the replicas were placed); *latest "
        "start* = the most `start_late_s`, ms after the first replica's start.",
        "",
        "### Speed-up",
        "",
        scaling_table(rows),
        "",
        "*s/epoch*: rank 0's epochs after the first (the first runs the probe rounds of the "
        "sync period), median; *speed-up* = s/epoch at 1 worker / s/epoch; *efficiency* = "
        'speed-up / workers; *period*: blocks per round chosen by `sync_every="auto"`.',
        "",
        "### Cost of a round (ms per round, mean over replicas)",
        "",
        round_table(rows),
        "",
        "*compute* = `busy_s` (partial_fit); *serialise* = `serialize_s` (pickling its model, "
        "unpickling the others'); *wire* = `wire_s` (send to arrival of the messages it was "
        "blocked on); *waiting* = `wait_s` (blocked on a peer that had not sent: load "
        "imbalance); *merge* = `merge_s`; *other* = the rest of the epochs' time per round "
        "(copying the global model, the epoch's broadcast, bookkeeping); *engine's median "
        "round* = `collective_round_s`, the collective's own cost. All over every round of "
        "the call, first epoch's probe rounds included.",
    ]
    if streamed:
        lines += [
            "",
            "### Streaming against persisting",
            "",
            f"The same Zarr store, at the fewest and the most workers; median of "
            f"{args.repeats} interleaved calls after a warm-up of each; s/epoch as above "
            '(`data="persist"` reads the store into memory inside the call, before the '
            "first epoch).",
            "",
            *stream_lines(streamed),
        ]
    if memory is not None:
        lines += [
            "",
            "### Peak memory per worker against data size",
            "",
            *memory_lines(*memory, args),
        ]
    if model_parameters_:
        lines += [
            "",
            "### A model of the speed-up at more workers",
            "",
            "`modelled_epoch_s` in this script: T(R) = k · block · (1 + waiting share) + n · "
            "(once + per model · R + ceil(log2 R) · (latency + 8 · model bytes / bandwidth)), "
            "k = ceil(blocks / R) blocks for the busiest replica, n = ceil(k / period) rounds "
            'per epoch, the period chosen as `sync_every="auto"` chooses it from the block '
            "and round costs (keeping the estimator's fewest merges an epoch: "
            f"{model_parameters_['min_rounds']} for this one). Assumed: compute per block as "
            "measured at the most workers, divided among R replicas (perfect locality, one "
            "replica per core); the waiting share (load imbalance) held at its measured value; "
            "the collective a recursive-doubling all-gather (ceil(log2 R) message steps, each "
            "charged the loopback latency measured here plus one model over the network); "
            "every replica deserialising and merging R models at the measured cost per model; "
            "the cost once per round held fixed; nothing else grows with R; never more "
            "replicas than blocks. *Strong*: the measured data over R workers (speed-up over "
            "the model's 1 worker). *Weak*: the measured blocks per worker, the data growing "
            "with R (throughput over 1 worker). Cells: speed-up (efficiency). The *measured* "
            "row is the model's check: its 1 worker runs at the most workers' compute per "
            "block, so what the measured workers lose to each other (shared cores, memory "
            "bandwidth, other load) shows as the gap between the modelled and the measured "
            "speed-up.",
            "",
            *model_lines(model_parameters_, facts["model_counts"], rows),
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def _int_list(text):
    return [int(part) for part in text.split(",") if part]


def _float_list(text):
    return [float(part) for part in text.split(",") if part]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run (< 1 min): 40,000 rows, workers 1,2 (streaming on 2 only, on the "
        "scaling part's cluster; the ceiling at the fewest only), 1 repeat, "
        "memory 0.1× of 2 × 600 MiB; prints only",
    )
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    default_workers = ",".join(str(2**k) for k in range(nproc.bit_length()) if 2**k <= nproc)
    parser.add_argument(
        "--workers",
        type=_int_list,
        default=_int_list(default_workers),
        help=f"worker counts, comma-separated (default powers of two up to the CPUs: "
        f"{default_workers})",
    )
    parser.add_argument("--rows", type=int, default=4_000_000, help="rows (default 4,000,000)")
    parser.add_argument("--features", type=int, default=40, help="features (default 40)")
    parser.add_argument("--chunk-rows", type=int, default=50_000, help="rows per chunk")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per call (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per worker count")
    parser.add_argument(
        "--memory-multiples",
        type=_float_list,
        default=[1.0, 4.0, 16.0],
        help="data sizes of the memory part, as multiples of the workers' total memory limit",
    )
    parser.add_argument(
        "--memory-limit",
        dest="memory_limit_mib",
        type=int,
        default=700,
        help="memory limit per worker in the memory part, MiB (default 700)",
    )
    parser.add_argument(
        "--max-gib",
        type=float,
        default=6.0,
        help="skip memory-part data sets larger than this, GiB (default 6)",
    )
    parser.add_argument(
        "--bandwidth-gbit",
        type=float,
        default=BANDWIDTH_GBIT,
        help="network bandwidth the model assumes",
    )
    parser.add_argument(
        "--memory-timeout",
        type=float,
        default=900.0,
        help="seconds a memory-part training may take before it counts as failed",
    )
    parser.add_argument(
        "--parts",
        type=lambda text: [part for part in text.split(",") if part],
        default=list(PARTS),
        help="the parts to run, comma-separated (default all: scaling,stream,memory); a run "
        "of the scaling part alone writes its own block (PARTIAL_BLOCK), leaving the full "
        "run's alone",
    )
    parser.add_argument(
        "--save-rows", default=None, help="a JSON file the measured rows go to, count by count"
    )
    parser.add_argument("--tmp", default=None, help="directory for the Zarr stores")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="a sentence recorded with the results")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers = [w for w in args.workers if w <= 2] or [1]
        args.rows, args.chunk_rows, args.epochs, args.repeats = 40_000, 5_000, 2, 1
        # A smoke run checks that every part runs and reports, not the figures: a tenth of the
        # memory limit in data exercises the same code path as the full run's multiples.
        args.memory_multiples, args.memory_limit_mib, args.no_write = [0.1], 600, True
        args.memory_timeout = 60.0
    args.workers = sorted(set(args.workers))
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or "scaling" not in args.parts:
        parser.error(
            f"--parts: {unknown or args.parts} — choose from {', '.join(PARTS)}, scaling included"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="taskdml-scaling-", dir=args.tmp)
    facts = {
        "command": " ".join(["python benchmarks/scaling.py", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _results.machine(detail=True),
        "versions": _results.versions(PACKAGES),
        "model_counts": sorted(set(args.workers) | set(MODEL_WORKERS)),
    }
    try:
        with Load() as load:
            store = os.path.join(tmp, "data")
            progress(f"writing {args.rows:,} rows to {store}")
            facts["write_s"] = write_store(store, args.rows, args.features, args.chunk_rows)
            counts = sorted({min(args.workers), max(args.workers)})
            if "stream" not in args.parts:
                counts = []
            # A smoke run streams at the most workers only, on the scaling part's cluster: one
            # cluster fewer, the same streaming code path.
            rows, streamed = scaling_part(args, store, counts[-1:] if args.quick else ())
            if not args.quick:
                streamed = [stream_part(args, store, workers) for workers in counts]
            shutil.rmtree(store, ignore_errors=True)
            memory = memory_part(args, tmp) if "memory" in args.parts else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    facts.update(
        foreign_cores=load.foreign_cores,
        load_before=load.load_before,
        load_after=load.load_after,
        total_s=time.perf_counter() - STARTED,
    )
    parameters = model_parameters(rows, args.bandwidth_gbit)
    text = report(args, facts, rows, streamed, memory, parameters)
    print(text)
    if not args.no_write:
        partial = set(args.parts) != set(PARTS)
        _results.write_section(
            args.out,
            text,
            PARTIAL_BLOCK if partial else "scaling.py",
            "Scaling: the ceiling and the breakdown (`benchmarks/scaling.py --parts scaling`)"
            if partial
            else "Scaling (`benchmarks/scaling.py`)",
        )
        progress(f"wrote {args.out}")


if __name__ == "__main__":
    main()
