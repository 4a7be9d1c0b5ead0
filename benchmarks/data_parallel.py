"""Data-parallel ``partial_fit`` training side by side with its peers, in one process run.

What is compared, on the same synthetic classification data (taskdml's chunk-independent
``make_classification``; train = the first 80 % of rows, holdout = the rest), with
``SGDClassifier(loss="log_loss", alpha=1e-5, random_state=0)`` and classes ``[0, 1]``:

``serial``          the plain ``partial_fit`` loop over the NumPy train chunks, in order, in one
                    process: the reference every speedup is measured against;
``sklearn fit``     ``SGDClassifier(max_iter=epochs, tol=None).fit`` on the whole train array;
``ceiling``         what the machine allows: ``R`` serial loops at the same time in ``R``
                    processes, loop ``k`` over the train chunks ``i`` with ``i % R == k`` (the
                    chunks replica ``k`` owns in taskdml). That is data-parallel training with
                    free, instant merges, so ``T_serial / T_ceiling`` is the best speedup any
                    data-parallel engine can reach here;
``dask-ml Incremental``  one ``fit`` plus ``epochs - 1`` ``partial_fit`` calls on the
                    persisted dask arrays;
``taskdml sync`` / ``taskdml async``  :func:`taskdml.train` on the same
                    persisted arrays (``shuffle=False``, the serial loop's chunk order).

Design of the measurement (the methodology of ``research/baselines.md`` sections 1 and 7):

* **Processes.** The cluster is a ``LocalCluster`` of ``R`` single-threaded worker processes
  on 127.0.0.1. The serial loop, the in-memory fit and the ceiling run in *helper* processes
  (one "reference" helper holding the whole data set, ``R`` ceiling helpers holding their
  share), started before the cluster and idle while it works, so the client process never
  holds a NumPy copy of the data and the cluster's memory reads clean. Helpers limit BLAS to
  one thread, as the nanny does inside workers.
* **Data.** Each side generates its own copy (same values: the generator depends only on the
  seed and the row index). Generation and persist are timed separately and never inside a
  configuration's wall time.
* **Time.** One untimed warm-up run of every configuration (worker imports, first-call
  costs), then ``--repeats`` rounds in which every configuration runs once per epoch count,
  interleaved so that a noisy spell hits all of them alike. Wall times are medians. The wall
  time of a taskdml run is the whole ``train()`` call as a user sees it.
* **Memory.** A thread samples the RSS of every process every 20 ms and keeps, per
  configuration, the peak of the processes it uses: client + scheduler + workers for the
  cluster configurations (the scheduler and nannies live in the client process), the
  helper(s) for the others. ``idle`` is the same group before any data existed, after the
  imports every configuration needs, so ``peak - idle`` is what the data and the training add.
* **Load.** The machine may be shared: the CPU time of processes outside this benchmark,
  during the timed part, is measured (system busy time minus this process tree's) and
  reported with the results.

Run ``python benchmarks/data_parallel.py --help`` for the options; ``--quick`` is a smoke run.
The full run prints a markdown report and rewrites the generated part of this benchmark's
section of ``benchmarks/RESULTS.md``.
"""

import argparse
import contextlib
import dataclasses
import datetime
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import psutil

CHUNK_SIZE = 50_000
N_FEATURES = 50
TRAIN_FRACTION = 0.8
CLASSES = [0, 1]
MIB = 2**20
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
BEGIN = "<!-- data_parallel.py: generated, begin -->"
END = "<!-- data_parallel.py: generated, end -->"
# The targets of the issue this benchmark answers.
TARGET_SYNC4_CEILING = 0.90
TARGET_SYNC1_CEILING = 0.75
TARGET_ROUND_MS = 5.0
TARGET_ACCURACY_PP = 0.5
TARGET_MEMORY_X = 2.0


def make_model(**params):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="log_loss", alpha=1e-5, random_state=0, **params)


def make_data(n_samples, chunk_size):
    """The data set as taskdml builds it: lazy dask arrays ``X`` and ``y``."""
    from taskdml.datasets import make_classification

    data = make_classification(
        n_samples,
        N_FEATURES,
        n_informative=20,
        n_redundant=10,
        chunk_size=chunk_size,
        random_state=0,
    )
    return data.X.data, data.y.data


def n_train_rows(n_samples):
    return int(round(n_samples * TRAIN_FRACTION))


# ---------------------------------------------------------------------------------------------
# Helper processes: the serial loop, the in-memory fit and the ceiling.


def serial_loop(X_chunks, y_chunks, epochs):
    """The reference: ``partial_fit`` over the chunks in order, ``epochs`` times."""
    model = make_model()
    for _ in range(epochs):
        for X, y in zip(X_chunks, y_chunks):
            model.partial_fit(X, y, classes=CLASSES)
    return model


def _helper_data(role, share, n_replicas, n_samples, chunk_size):
    """Generate this helper's data: everything for the reference, a train share otherwise.

    A few blocks at a time into arrays allocated once, so that no transient copy of the
    whole data set inflates the helper's memory afterwards.
    """
    X, y = make_data(n_samples, chunk_size)
    n_train = n_train_rows(n_samples)
    parts = {"X": X[:n_train], "y": y[:n_train], "X_test": X[n_train:], "y_test": y[n_train:]}
    if role == "ceiling":
        mine = [i for i in range(parts["X"].numblocks[0]) if i % n_replicas == share]
        return {
            "X_chunks": list(_blocks(parts["X"], mine)),
            "y_chunks": list(_blocks(parts["y"], mine)),
        }
    data = {}
    for name, part in parts.items():
        data[name] = np.empty(part.shape, part.dtype)
        bounds = _bounds(part.chunks[0])
        for (start, stop), block in zip(bounds, _blocks(part, range(len(bounds)))):
            data[name][start:stop] = block
    views = [slice(start, stop) for start, stop in _bounds(parts["X"].chunks[0])]
    data["X_chunks"] = [data["X"][view] for view in views]
    data["y_chunks"] = [data["y"][view] for view in views]
    return data


def _blocks(array, indices, batch=None):
    """The row blocks *indices* of a dask array as NumPy arrays, computed *batch* at a time.

    *batch* defaults to the number of CPUs.
    """
    import dask

    if batch is None:
        batch = os.cpu_count() or 1
    indices = list(indices)
    for first in range(0, len(indices), batch):
        yield from dask.compute(
            *[array.blocks[i] for i in indices[first : first + batch]], scheduler="threads"
        )


def _bounds(chunks):
    ends = np.cumsum(chunks)
    return list(zip(ends - chunks, ends))


def _release_free_memory():
    """Give freed heap pages back to the system, so that RSS shows what is held."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def helper_main(connection, role, share, n_replicas, n_samples, chunk_size):
    """A helper process: make the data, then run commands until told to stop."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    warnings.simplefilter("ignore")
    make_model()  # the imports come before the idle reading
    make_data(1_000, 1_000)
    _release_free_memory()
    connection.send({"idle_rss": psutil.Process().memory_info().rss})
    began = time.perf_counter()
    data = _helper_data(role, share, n_replicas, n_samples, chunk_size)
    _release_free_memory()
    connection.send({"data_s": time.perf_counter() - began})
    while (command := connection.recv()) is not None:
        kind, epochs = command
        began = time.perf_counter()
        if kind == "serial":
            model = serial_loop(data["X_chunks"], data["y_chunks"], epochs)
        elif kind == "fit":
            model = make_model(max_iter=epochs, tol=None).fit(data["X"], data["y"])
        else:  # what a linear model can reach on this data, to read the accuracies against
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(max_iter=500).fit(data["X"], data["y"])
        ended = time.perf_counter()
        accuracy = model.score(data["X_test"], data["y_test"]) if "X_test" in data else None
        del model
        _release_free_memory()  # what a command freed must not count in the next one's peak
        connection.send({"start": began, "end": ended, "accuracy": accuracy})


class Helpers:
    """The reference helper and ``n_replicas`` ceiling helpers, as spawned processes."""

    def __init__(self, n_replicas, n_samples, chunk_size):
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = {}, {}
        roles = [("reference", 0)] + [("ceiling", k) for k in range(n_replicas)]
        for role, share in roles:
            parent, child = context.Pipe()
            process = context.Process(
                target=helper_main,
                name=f"bench-{role}-{share}",
                daemon=True,
                args=(child, role, share, n_replicas, n_samples, chunk_size),
            )
            process.start()
            self.connections[(role, share)], self.processes[(role, share)] = parent, process
        self.idle_rss = {key: c.recv()["idle_rss"] for key, c in self.connections.items()}

    def pids(self, role):
        return {p.pid for (r, _), p in self.processes.items() if r == role}

    def wait_ready(self):
        """Seconds each role took to generate its data (the slowest helper of the role)."""
        data_s = {}
        for (role, _), connection in self.connections.items():
            data_s[role] = max(data_s.get(role, 0.0), connection.recv()["data_s"])
        return data_s

    def run(self, role, kind, epochs):
        """Run one command on every helper of *role* at once; wall = first start to last end."""
        chosen = [c for (r, _), c in self.connections.items() if r == role]
        for connection in chosen:
            connection.send((kind, epochs))
        replies = [connection.recv() for connection in chosen]
        wall = max(r["end"] for r in replies) - min(r["start"] for r in replies)
        return {
            "wall": wall,
            "accuracy": replies[0]["accuracy"],
            "each_s": [r["end"] - r["start"] for r in replies],
        }

    def close(self):
        for connection in self.connections.values():
            with contextlib.suppress(OSError):
                connection.send(None)
        for process in self.processes.values():
            process.join(10)


# ---------------------------------------------------------------------------------------------
# Memory and CPU sampling.


class MemorySampler(threading.Thread):
    """RSS of process groups, sampled every *interval* seconds; peaks per measurement window.

    ``groups`` maps a name to a function returning the pids of the group at the moment (the
    cluster group is "this process and its descendants, helpers excepted", re-read every
    half second so that restarted workers are followed).
    """

    def __init__(self, groups, interval=0.02):
        super().__init__(daemon=True, name="memory-sampler")
        self.groups, self.interval = groups, interval
        self.peaks = dict.fromkeys(groups, 0)
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.processes, self.refreshed = {}, 0.0

    def _members(self):
        if time.monotonic() - self.refreshed > 0.5:
            self.members = {name: set(pids()) for name, pids in self.groups.items()}
            self.refreshed = time.monotonic()
        return self.members

    def sample(self):
        """Current RSS of every group, in bytes."""
        sizes = {}
        for name, pids in self._members().items():
            total = 0
            for pid in pids:
                with contextlib.suppress(psutil.Error):
                    process = self.processes.get(pid) or self.processes.setdefault(
                        pid, psutil.Process(pid)
                    )
                    total += process.memory_info().rss
            sizes[name] = total
        return sizes

    def run(self):
        while not self.stopped.wait(self.interval):
            sizes = self.sample()
            with self.lock:
                for name, size in sizes.items():
                    self.peaks[name] = max(self.peaks[name], size)

    @contextlib.contextmanager
    def window(self):
        """Peaks of every group between entering and leaving (a dict, filled on exit)."""
        peaks = {}
        with self.lock:
            self.peaks = dict.fromkeys(self.groups, 0)
        try:
            yield peaks
        finally:
            sizes = self.sample()
            with self.lock:
                peaks.update({name: max(self.peaks[name], sizes[name]) for name in self.groups})

    def stop(self):
        self.stopped.set()
        self.join()


def tree_cpu_s():
    """CPU seconds used so far by this process and all its descendants."""
    total = 0.0
    for process in [psutil.Process()] + psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def system_cpu():
    """(busy CPU seconds of the whole machine, steal seconds) so far."""
    times = psutil.cpu_times()
    busy = sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
    return busy, getattr(times, "steal", 0.0)


# ---------------------------------------------------------------------------------------------
# The cluster configurations.


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    kind: str  # serial | fit | ceiling | incremental | sync | async
    sync_every: int = 1
    staleness: object = None

    @property
    def on_cluster(self):
        return self.kind in ("incremental", "sync", "async")


CONFIGS = [
    Config("serial partial_fit loop (reference)", "serial"),
    Config("sklearn fit in memory", "fit"),
    Config("ceiling: R serial loops at once, 1/R of the chunks each", "ceiling"),
    Config("dask-ml Incremental", "incremental"),
    Config("taskdml sync, sync_every=1", "sync", sync_every=1),
    Config("taskdml sync, sync_every=4", "sync", sync_every=4),
    Config("taskdml async, staleness=None", "async", staleness=None),
    Config("taskdml async, staleness=2", "async", staleness=2),
]


def taskdml_imports():
    """Import, in a process of the cluster, what the taskdml configurations need."""
    import sklearn.linear_model  # noqa: F401

    import taskdml.parallel  # noqa: F401


def worker_imports():
    """Import, in a cluster process, what every configuration needs (before the idle reading)."""
    import dask_ml.wrappers  # noqa: F401

    taskdml_imports()


def worker_transfers(dask_worker):
    """Bytes this worker has fetched from other workers so far."""
    return sum(entry["total"] for entry in dask_worker.transfer_incoming_log)


def holdout_accuracy(model, X_test, y_test):
    """Accuracy of *model* on the persisted holdout, computed on the cluster."""
    predicted = X_test.map_blocks(model.predict, drop_axis=1, dtype=y_test.dtype)
    return float((predicted == y_test).mean().compute())


def run_on_cluster(config, epochs, client, data):
    """Run one cluster configuration; return its measurements."""
    from taskdml import train

    X_train, y_train = data["X_train"], data["y_train"]
    transfers = sum(client.run(worker_transfers).values())
    began = time.perf_counter()
    if config.kind == "incremental":
        from dask_ml.wrappers import Incremental

        incremental = Incremental(make_model(), random_state=0)
        incremental.fit(X_train, y_train, classes=CLASSES)
        for _ in range(epochs - 1):
            incremental.partial_fit(X_train, y_train, classes=CLASSES)
        model, stats = incremental.estimator_, {}
    else:
        result = train(
            make_model(),
            X_train,
            y_train,
            classes=CLASSES,
            strategy=config.kind,
            epochs=epochs,
            sync_every=config.sync_every,
            staleness=config.staleness,
            shuffle=False,
            random_state=0,
            client=client,
        )
        model, stats = result.estimator, result.stats
    wall = time.perf_counter() - began
    transfers = sum(client.run(worker_transfers).values()) - transfers  # before scoring moves data
    return {
        "wall": wall,
        "accuracy": holdout_accuracy(model, data["X_test"], data["y_test"]),
        "stats": stats,
        "transfers": transfers,
    }


def fixed_cost_timeline(client, data, runs=3):
    """Where a short ``train()`` call's time goes, from the task stream (median of *runs*).

    One epoch of sync training with ``sync_every=4``: milestones in ms from the call's start.
    """
    from dask.utils import key_split
    from distributed import get_task_stream

    from taskdml import train

    timelines = []
    for _ in range(runs):
        with get_task_stream(client) as stream:
            began = time.time()
            train(
                make_model(),
                data["X_train"],
                data["y_train"],
                classes=CLASSES,
                strategy="sync",
                epochs=1,
                sync_every=4,
                shuffle=False,
                random_state=0,
                client=client,
            )
            ended = time.time()
        spans = {}
        for record in stream.data:
            for span in record["startstops"]:
                if span["action"] == "compute":
                    spans.setdefault(key_split(record["key"]), []).append(
                        (span["start"], span["stop"])
                    )
        inspect, prepare, replica = (
            spans.get("train-inspect", []),
            spans["train-prepare"],
            spans["train-replica"],
        )
        timelines.append(
            {  # no inspection tasks when the engine remembers these chunks: shown as 0
                "inspect_start": min((a for a, _ in inspect), default=began) - began,
                "inspect_end": max((b for _, b in inspect), default=began) - began,
                "inspect_cpu": sum(b - a for a, b in inspect),
                "inspect_tasks": len(inspect),
                "prepare_start": min(a for a, _ in prepare) - began,
                "replicas_start": max(a for a, _ in replica) - began,
                "replicas_end": max(b for _, b in replica) - began,
                "wall": ended - began,
            }
        )
    return {
        key: statistics.median(t[key] for t in timelines) * (1 if key == "inspect_tasks" else 1e3)
        for key in timelines[0]
    }


def run_config(config, epochs, client, data, helpers, sampler):
    """One timed run of *config*, with the memory peak of the processes it uses."""
    with sampler.window() as peaks:
        if config.on_cluster:
            outcome = run_on_cluster(config, epochs, client, data)
        elif config.kind == "ceiling":
            outcome = helpers.run("ceiling", "serial", epochs)
        else:
            outcome = helpers.run("reference", config.kind, epochs)
    group = (
        "cluster" if config.on_cluster else "ceiling" if config.kind == "ceiling" else "reference"
    )
    outcome["peak"] = peaks[group]
    return outcome


# ---------------------------------------------------------------------------------------------
# Summaries.


def summarise(config, epochs, runs, serial_wall, ceiling, idle, data_bytes):
    """One table row: medians over *runs* and the derived ratios."""
    wall = statistics.median(r["wall"] for r in runs)
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    row = {
        "config": config,
        "epochs": epochs,
        "wall": wall,
        "runs": [r["wall"] for r in runs],
        "speedup": serial_wall / wall,
        "accuracy": statistics.median(accuracies) if accuracies else None,
        "accuracy_range": (min(accuracies), max(accuracies)) if accuracies else None,
        "peak": max(r["peak"] for r in runs),
        "idle": idle,
    }
    row["ceiling_fraction"] = row["speedup"] / ceiling
    row["peak_x"] = row["peak"] / data_bytes
    row["added_x"] = (row["peak"] - idle) / data_bytes
    row["transfers"] = statistics.median(r.get("transfers", 0) for r in runs)
    stats = [r["stats"] for r in runs if r.get("stats")]
    if stats:
        per = []
        for run in runs:
            s = run["stats"]
            steps = s["rounds"] if config.kind == "sync" else s["updates"] / s["replicas"]
            waits = s["reduce_wait_s"] if config.kind == "sync" else s["held_back_s"]
            per.append(
                {
                    "steps": steps,
                    "overhead_ms": (run["wall"] - max(s["busy_s"])) / steps * 1e3,
                    "wait_ms": [w / steps * 1e3 for w in waits],
                    "setup_ms": (run["wall"] - s["wall_s"]) * 1e3,
                    "busy_s": max(s["busy_s"]),
                    "loss_s": run["wall"] - max(s["busy_s"]),
                    "busy_spread_s": max(s["busy_s"]) - min(s["busy_s"]),
                }
            )
        row["steps"] = per[0]["steps"]
        for key in ("overhead_ms", "setup_ms", "busy_s", "loss_s", "busy_spread_s"):
            row[key] = statistics.median(p[key] for p in per)
        row["wait_min_ms"] = statistics.median(min(p["wait_ms"]) for p in per)
        row["wait_max_ms"] = statistics.median(max(p["wait_ms"]) for p in per)
    return row


def round_cost_fit(rows):
    """Least squares over the sync rows: ``wall - busiest busy = fixed + rounds * per_round``."""
    points = [(r["steps"], r["loss_s"]) for r in rows if r["config"].kind == "sync"]
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit([x for x, _ in points], [y for _, y in points], 1)
    return {"per_round_ms": slope * 1e3, "fixed_ms": intercept * 1e3, "points": len(points)}


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def results_table(rows):
    lines = [
        "| configuration | epochs | wall s (median) | speedup vs serial | of ceiling | holdout acc "
        "| overhead ms/round | engine wait ms/round (min–max) | peak RSS MiB | peak / data "
        "| (peak − idle) / data |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kind = r["config"].kind
        overhead = wait = "–"
        if kind in ("sync", "async"):
            unit = "" if kind == "sync" else " /chunk"
            overhead = f"{r['overhead_ms']:.1f}{unit}"
            wait = f"{r['wait_min_ms']:.1f}–{r['wait_max_ms']:.1f}{unit}"
        accuracy = _fmt(r["accuracy"], ".4f")
        if r["accuracy_range"] and r["accuracy_range"][1] - r["accuracy_range"][0] > 5e-5:
            accuracy += f" ({r['accuracy_range'][0]:.4f}–{r['accuracy_range'][1]:.4f})"
        lines.append(
            f"| {r['config'].name} | {r['epochs']} | {r['wall']:.3f} | {r['speedup']:.2f}× "
            f"| {r['ceiling_fraction']:.0%} | {accuracy} | {overhead} | {wait} "
            f"| {r['peak'] / MIB:,.0f} | {r['peak_x']:.2f}× | {r['added_x']:.2f}× |"
        )
    return "\n".join(lines)


def detail_table(rows):
    lines = [
        "| configuration | epochs | runs s | busiest busy s | busy spread s | wall − busiest s "
        "| setup before the loop ms | rounds (chunks/replica) | fetched between workers MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs = " ".join(f"{w:.3f}" for w in r["runs"])
        if "busy_s" in r:
            lines.append(
                f"| {r['config'].name} | {r['epochs']} | {runs} | {r['busy_s']:.3f} "
                f"| {r['busy_spread_s']:.3f} | {r['loss_s']:.3f} | {r['setup_ms']:.0f} "
                f"| {r['steps']:g} | {r['transfers'] / MIB:.1f} |"
            )
        else:
            transfers = f"{r['transfers'] / MIB:.1f}" if r["config"].on_cluster else "–"
            lines.append(
                f"| {r['config'].name} | {r['epochs']} | {runs} | – | – | – | – | – | {transfers} |"
            )
    return "\n".join(lines)


def target_checks(rows, epochs_list, fit):
    """Each target of the issue, per epoch count: (target, epochs, measured, met)."""
    checks = []
    if fit:
        checks.append(
            (
                f"marginal cost of a sync round < {TARGET_ROUND_MS:g} ms (fit over the sync rows)",
                "all",
                f"{fit['per_round_ms']:.1f} ms + {fit['fixed_ms']:.0f} ms per call",
                fit["per_round_ms"] < TARGET_ROUND_MS,
            )
        )
    for epochs in epochs_list:
        at = [r for r in rows if r["epochs"] == epochs]
        serial = next(r for r in at if r["config"].kind == "serial")
        for r in at:
            c = r["config"]
            if c.kind == "sync" and c.sync_every in (1, 4):
                goal = TARGET_SYNC4_CEILING if c.sync_every == 4 else TARGET_SYNC1_CEILING
                checks.append(
                    (
                        f"{c.name}: ≥ {goal:.0%} of the ceiling",
                        epochs,
                        f"{r['ceiling_fraction']:.0%}",
                        r["ceiling_fraction"] >= goal,
                    )
                )
            if c.kind == "sync":
                checks.append(
                    (
                        f"{c.name}: overhead < {TARGET_ROUND_MS:g} ms/round",
                        epochs,
                        f"{r['overhead_ms']:.1f} ms (engine wait {r['wait_min_ms']:.1f}–"
                        f"{r['wait_max_ms']:.1f})",
                        r["overhead_ms"] < TARGET_ROUND_MS,
                    )
                )
            if c.kind in ("sync", "async"):
                gap = (r["accuracy"] - serial["accuracy"]) * 100
                met = abs(gap) <= TARGET_ACCURACY_PP or ("higher" if gap > 0 else False)
                checks.append(
                    (
                        f"{c.name}: holdout accuracy within {TARGET_ACCURACY_PP} pp of serial",
                        epochs,
                        f"{gap:+.2f} pp",
                        met,
                    )
                )
                checks.append(
                    (
                        f"{c.name}: peak memory < {TARGET_MEMORY_X:g}× data (above idle)",
                        epochs,
                        f"{r['added_x']:.2f}× above idle ({r['peak_x']:.2f}× whole tree)",
                        r["added_x"] < TARGET_MEMORY_X,
                    )
                )
    lines = ["| target | epochs | measured | met |", "|---|---|---|---|"]
    verdicts = {True: "yes", False: "**no**", "higher": "no: higher than serial"}
    lines += [f"| {t} | {e} | {m} | {verdicts[ok]} |" for t, e, m, ok in checks]
    return "\n".join(lines), checks


# ---------------------------------------------------------------------------------------------
# Machine, versions, report.


def machine():
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        fields = dict(
            re.findall(r"^(model name|cpu family|model)\s*:\s*(.*)$", cpuinfo.read(), re.M)
        )
        model = (
            f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')})"
        )
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": nproc,
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "cpu": model,
        "platform": platform.platform(),
    }


def versions():
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in (
        "taskdml",
        "numpy",
        "scipy",
        "scikit-learn",
        "dask",
        "distributed",
        "dask-ml",
        "xarray",
        "psutil",
    ):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        here = os.path.dirname(os.path.abspath(__file__))

        def git(*words):
            return subprocess.run(
                ["git", *words], cwd=here, check=True, capture_output=True, text=True
            ).stdout.strip()

        commit = git("rev-parse", "--short", "HEAD")
        if git("status", "--porcelain", "--", os.path.join(here, "..", "taskdml")):
            commit += ", with uncommitted changes in taskdml/"
        found["taskdml"] = f"{found.get('taskdml', '?')} (git {commit})"
    return found


def report(args, facts, rows, fit, checks_table):
    m, load = facts["machine"], facts["load"]
    busy_note = (
        "**The machine was not idle**: other processes used "
        f"{load['foreign_cores']:.2f} of {m['nproc']} cores on average during the timed "
        "runs; timings are noisy and should be rerun on a calm machine."
        if load["foreign_cores"] > 0.1
        else f"The machine was idle apart from this benchmark (other processes: "
        f"{load['foreign_cores']:.2f} cores on average)."
    )
    lines = [
        f"Command: `{facts['command']}`  ",
        f"Date: {facts['date']}  ",
        f"Machine: {m['nproc']} CPUs, {m['cpu']}, {m['memory_gib']:.1f} GiB memory, "
        f"{m['platform']}  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in facts["versions"].items()),
        "",
        busy_note + f" Load average before/after: {load['before']} / {load['after']}; CPU steal "
        f"during the run: {load['steal_s']:.1f} s.",
        *([""] + [f"Note: {args.note}"] if args.note else []),
        "",
        f"Data: {args.n_samples:,} × {N_FEATURES} float64 in {args.chunk_size:,}-row chunks "
        f"({facts['data_mib']:,.0f} MiB for X and y; train = first {facts['n_train']:,} rows, "
        f"holdout = the rest), R = {args.workers} workers × 1 thread. Generating and persisting "
        f"it on the cluster took {facts['persist_s']:.2f} s; the helpers took "
        f"{facts['helper_data_s']['reference']:.2f} s (reference) and "
        f"{facts['helper_data_s']['ceiling']:.2f} s (ceiling). Median of "
        f"{args.repeats} runs after one warm-up; whole benchmark {facts['total_s']:.0f} s.",
        "",
        results_table(rows),
        "",
        "*speedup* = serial wall / wall; *of ceiling* = speedup / the ceiling's speedup at the "
        "same epochs. *overhead ms/round* = (wall − busiest replica's busy_s) / rounds (for "
        "async: per chunk a replica trains). *engine wait* = the engine's `reduce_wait_s` "
        "(sync) or `held_back_s` (async) per round, fastest and slowest replica. *peak RSS*: "
        "client + scheduler + workers for cluster rows, the helper process(es) for the others; "
        f"*data* = X and y of all rows ({facts['data_mib']:,.0f} MiB); *idle* = the same "
        f"processes before any data: {facts['idle_mib']['cluster']:,.0f} MiB cluster "
        f"({facts['idle_taskdml_mib']:,.0f} MiB before dask-ml was imported in the client and "
        "workers; client process with scheduler and nannies "
        f"{facts['idle_client_mib']:,.0f} MiB; other processes "
        f"{' + '.join(f'{v:,.0f}' for v in facts['idle_others_mib'])} MiB), "
        f"{facts['idle_mib']['reference']:,.0f} MiB reference helper, "
        f"{facts['idle_mib']['ceiling']:,.0f} MiB ceiling helpers. RSS counts shared library pages "
        "once per process.",
        "",
    ]
    if fit:
        lines += [
            "Fixed vs per-round cost (least squares of wall − busiest busy over the "
            f"{fit['points']} sync rows): **{fit['per_round_ms']:.1f} ms per round** plus "
            f"**{fit['fixed_ms']:.0f} ms per `train()` call**.",
            "",
        ]
    t = facts["timeline"]
    lines += [
        "Where the fixed cost of a `train()` call goes (task stream of 3 extra sync runs, 1 epoch, "
        "sync_every=4; ms from the call's start, medians): first chunk-inspection task starts at "
        f"{t['inspect_start']:.0f}; the {t['inspect_tasks']:.0f} inspection tasks (a pass over "
        f"every chunk) end at {t['inspect_end']:.0f} ({t['inspect_cpu']:.0f} ms of worker CPU); "
        f"`prepare_start` runs at {t['prepare_start']:.0f}; all replicas are computing by "
        f"{t['replicas_start']:.0f}; they end at {t['replicas_end']:.0f}; the call returns at "
        f"{t['wall']:.0f}.",
        "",
        f"The first sync `train()` call on freshly persisted data (the warm-up) moved "
        f"{facts['first_call_fetched_mib']:,.0f} MiB between workers (chunks that were not on "
        "their replica's worker); later calls found them in place.",
        "",
        f"For reading the accuracies: `LogisticRegression` (lbfgs) on the same train rows scores "
        f"{facts['lbfgs_accuracy']:.4f} on the holdout.",
        "",
        "Targets:",
        "",
        checks_table,
        "",
        "Details:",
        "",
        detail_table(rows),
        "",
    ]
    return "\n".join(lines)


def write_section(path, body):
    """Replace the generated block of this benchmark's section (create the file or section)."""
    block = f"{BEGIN}\n{body}\n{END}"
    if os.path.exists(path):
        with open(path) as existing:
            text = existing.read()
    else:
        text = "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = (
            text.rstrip("\n")
            + "\n\n## Data-parallel training (`benchmarks/data_parallel.py`)\n\n"
            + block
            + "\n"
        )
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 200k rows, 1 repeat, nothing written"
    )
    parser.add_argument("--repeats", type=int, help="timed runs per configuration (default 5)")
    parser.add_argument(
        "--workers", type=int, default=2, help="cluster workers = replicas = ceiling loops"
    )
    parser.add_argument("--n-samples", type=int, help="rows, train + holdout (default 1,000,000)")
    parser.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, help="rows per chunk")
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 5], help="epoch counts to run")
    parser.add_argument("--results", default=RESULTS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only (implied by --quick)")
    parser.add_argument("--note", default="", help="a sentence to add to the recorded section")
    args = parser.parse_args(argv)
    args.n_samples = args.n_samples or (200_000 if args.quick else 1_000_000)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.write = not (args.quick or args.no_write)
    return args


def main(argv=None):
    args = parse_args(argv)
    from distributed import Client, LocalCluster, wait

    warnings.simplefilter("ignore")
    started = time.perf_counter()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = " ".join(
        ["python benchmarks/data_parallel.py", *(sys.argv[1:] if argv is None else argv)]
    )
    facts = {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(),
        "n_train": n_train_rows(args.n_samples),
    }
    helpers = Helpers(args.workers, args.n_samples, args.chunk_size)
    helper_pids = helpers.pids("reference") | helpers.pids("ceiling")

    def cluster_pids():
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        return {os.getpid()} | (children - helper_pids)

    sampler = MemorySampler(
        {
            "cluster": cluster_pids,
            "reference": lambda: helpers.pids("reference"),
            "ceiling": lambda: helpers.pids("ceiling"),
        }
    )
    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = Client(cluster)
    try:
        client.run(taskdml_imports)
        taskdml_imports()
        facts["idle_taskdml_mib"] = sampler.sample()["cluster"] / MIB
        client.run(worker_imports)
        worker_imports()
        idle = sampler.sample()
        idle["reference"] = sum(v for (r, _), v in helpers.idle_rss.items() if r == "reference")
        idle["ceiling"] = sum(v for (r, _), v in helpers.idle_rss.items() if r == "ceiling")
        facts["idle_mib"] = {k: v / MIB for k, v in idle.items()}
        facts["idle_client_mib"] = psutil.Process().memory_info().rss / MIB
        facts["idle_others_mib"] = sorted(
            (psutil.Process(pid).memory_info().rss / MIB for pid in cluster_pids() - {os.getpid()}),
            reverse=True,
        )

        facts["helper_data_s"] = helpers.wait_ready()
        X, y = make_data(args.n_samples, args.chunk_size)
        n_train = facts["n_train"]
        began = time.perf_counter()
        persisted = client.persist([X[:n_train], y[:n_train], X[n_train:], y[n_train:]])
        wait(persisted)
        facts["persist_s"] = time.perf_counter() - began
        data = dict(zip(("X_train", "y_train", "X_test", "y_test"), persisted))
        data_bytes = X.nbytes + y.nbytes
        facts["data_mib"] = data_bytes / MIB
        sampler.start()

        print(f"data ready ({facts['persist_s']:.1f} s on the cluster); warm-up", file=sys.stderr)
        for config in CONFIGS:
            outcome = run_config(config, 1, client, data, helpers, sampler)
            if config.kind == "sync" and "first_call_fetched_mib" not in facts:
                facts["first_call_fetched_mib"] = outcome["transfers"] / MIB
        facts["lbfgs_accuracy"] = helpers.run("reference", "lbfgs", 0)["accuracy"]
        facts["timeline"] = fixed_cost_timeline(client, data)
        cpu_before, (busy_before, steal_before) = tree_cpu_s(), system_cpu()
        timed_began = time.perf_counter()
        runs = {(c, e): [] for e in args.epochs for c in CONFIGS}
        for repeat in range(args.repeats):
            for epochs in args.epochs:
                for config in CONFIGS:
                    outcome = run_config(config, epochs, client, data, helpers, sampler)
                    runs[(config, epochs)].append(outcome)
                    print(
                        f"repeat {repeat + 1}/{args.repeats} epochs {epochs} {config.name}: "
                        f"{outcome['wall']:.3f} s",
                        file=sys.stderr,
                    )
        timed_s = time.perf_counter() - timed_began
        busy_after, steal_after = system_cpu()
        foreign = (busy_after - busy_before) - (tree_cpu_s() - cpu_before)
        facts["load"] = {
            "before": load_before,
            "after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "foreign_cores": max(foreign, 0.0) / timed_s,
            "steal_s": steal_after - steal_before,
        }
    finally:
        if sampler.is_alive():
            sampler.stop()
        client.close()
        cluster.close()
        helpers.close()
    facts["total_s"] = time.perf_counter() - started

    rows = []
    for epochs in args.epochs:
        serial_wall = statistics.median(r["wall"] for r in runs[(CONFIGS[0], epochs)])
        ceiling = serial_wall / statistics.median(r["wall"] for r in runs[(CONFIGS[2], epochs)])
        for config in CONFIGS:
            group = (
                "cluster"
                if config.on_cluster
                else "ceiling"
                if config.kind == "ceiling"
                else "reference"
            )
            rows.append(
                summarise(
                    config,
                    epochs,
                    runs[(config, epochs)],
                    serial_wall,
                    ceiling,
                    idle[group],
                    data_bytes,
                )
            )
    fit = round_cost_fit(rows)
    checks_table, _ = target_checks(rows, args.epochs, fit)
    text = report(args, facts, rows, fit, checks_table)
    print(text)
    if args.write:
        write_section(args.results, text)
        print(f"\nwritten to {args.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
