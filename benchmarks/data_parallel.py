"""Data-parallel ``partial_fit`` training side by side with its peers, in one process run.

What is compared, on the same synthetic classification data (taskdml's chunk-independent
``make_classification``, 600,000 × 40 float64 by default; train = the first 80 % of rows,
holdout = the rest), with ``SGDClassifier(loss="hinge", alpha=1e-5, random_state=0)`` and
classes ``[0, 1]``, for every chunk size of ``--chunk-sizes`` and epoch count of ``--epochs``:

``serial``          the plain ``partial_fit`` loop over the NumPy train chunks, in order, in one
                    process: the reference every speedup is measured against;
``ceiling``         what the machine allows: ``R`` serial loops at the same time in ``R``
                    processes, loop ``k`` over the train chunks ``i`` with ``i % R == k`` (the
                    chunks replica ``k`` owns in taskdml). That is data-parallel training with
                    free, instant merges, so ``T_serial / T_ceiling`` is the best speedup any
                    data-parallel engine can reach here;
``dask-ml Incremental``  one ``fit`` plus ``epochs - 1`` ``partial_fit`` calls on the
                    persisted dask arrays;
``taskdml defaults``  :func:`taskdml.parallel.train` with only the data, ``classes``, ``epochs``,
                    ``random_state`` and the client: no ``strategy``, ``sync_every``,
                    ``staleness`` or ``shuffle``, so this row follows the engine's defaults as
                    they change (the sync period it used is read from the result);
``taskdml sync`` (``sync_every`` 1, 4, 10) / ``taskdml async`` (default staleness)
                    :func:`taskdml.parallel.train` on the same persisted arrays
                    (``shuffle=False``, the serial loop's chunk order).

Design of the measurement (the methodology of ``research/baselines.md`` sections 1 and 7):

* **Processes.** The cluster is a ``LocalCluster`` of ``R`` single-threaded worker processes
  on 127.0.0.1. The serial loop and the ceiling run in *helper* processes (one "reference"
  helper holding the whole data set, ``R`` ceiling helpers holding their share), started
  before the cluster and idle while it works, so the client process never holds a NumPy copy
  of the data and the cluster's memory reads clean. Helpers limit BLAS to one thread, as the
  nanny does inside workers.
* **Data.** Each side generates its own copy (same values: the generator depends only on the
  seed and the row index). One chunk size at a time: the cluster persists the data in that
  chunking and drops the previous one, the reference helper re-slices its arrays, the
  ceiling helpers regenerate their share. Generation and persist are timed separately and
  never inside a configuration's wall time.
* **Time.** Per chunk size, one untimed warm-up run of every configuration (worker imports,
  first-call costs, the engine's per-chunk inspection), then ``--repeats`` rounds in which
  every configuration runs once per epoch count, interleaved so that a noisy spell hits all
  of them alike. Wall times are medians. The wall time of a taskdml run is the whole
  ``train()`` call as a user sees it. Ratios compare rows of the same chunk size only.
* **Engine facts.** ``TrainResult.stats`` gives each replica's busy time and, where the
  engine reports them, its seconds merging, on the wire and waiting for slower replicas and
  the pieces of the fixed cost (``setup``); every such key is read with ``.get`` and shown
  as "–" when absent. Three extra calls per chunk size under ``get_task_stream`` show where
  a call's fixed cost goes; a least-squares fit over the sync rows splits the time outside
  the busiest replica's compute into a cost per call and a cost per round.
* **Model.** :func:`modelled_speedup` extrapolates the measured costs to 4–256 workers
  (assumptions in its docstring and in the report).
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
import math
import multiprocessing
import os
import statistics
import sys
import threading
import time
import warnings

import _results
import numpy as np
import psutil

N_SAMPLES = 600_000
N_FEATURES = 40
CHUNK_SIZES = [10_000, 30_000, 100_000]
EPOCHS = [1, 3]
REPEATS = 5
TRAIN_FRACTION = 0.8
CLASSES = [0, 1]
MIB = 2**20
RESULTS = _results.RESULTS
# The targets of the issue this benchmark answers (issue 9).
TARGET_DEFAULT_CEILING = 0.90
TARGET_DEFAULT_VS_INCREMENTAL = 2.0
TARGET_ROUND_MS = 1.0
TARGET_FIXED_MS = 10.0
TARGET_ASYNC_PP = 1.0
MODEL_WORKERS = [4, 16, 64, 256]
DATA_PARALLEL_PACKAGES = (
    "taskdml",
    "numpy",
    "scipy",
    "scikit-learn",
    "dask",
    "distributed",
    "dask-ml",
    "xarray",
    "psutil",
)
STARTED = time.perf_counter()


def progress(message):
    """One line of progress on stderr, with the seconds since the start."""
    print(f"[{time.perf_counter() - STARTED:5.0f} s] {message}", file=sys.stderr, flush=True)


def make_model(**params):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(loss="hinge", alpha=1e-5, random_state=0, **params)


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


def chunk_bounds(n_rows, chunk_size):
    """``(start, stop)`` of each chunk of the first *n_rows* rows, as dask chunks them."""
    return [(start, min(start + chunk_size, n_rows)) for start in range(0, n_rows, chunk_size)]


def replica_rows(n_train, chunk_size, n_replicas):
    """Train rows of each replica: chunk ``i`` belongs to replica ``i % n_replicas``."""
    rows = [0] * n_replicas
    for i, (start, stop) in enumerate(chunk_bounds(n_train, chunk_size)):
        rows[i % n_replicas] += stop - start
    return rows


# ---------------------------------------------------------------------------------------------
# Helper processes: the serial loop and the ceiling.


def serial_loop(X_chunks, y_chunks, epochs):
    """The reference: ``partial_fit`` over the chunks in order, ``epochs`` times."""
    model = make_model()
    for _ in range(epochs):
        for X, y in zip(X_chunks, y_chunks):
            model.partial_fit(X, y, classes=CLASSES)
    return model


def _helper_data(role, share, n_replicas, n_samples, chunk_size, data=None):
    """This helper's data in *chunk_size* chunks: everything for the reference, a train
    share for a ceiling helper.

    The reference generates its arrays once (a few blocks at a time into arrays allocated
    once, so that no transient copy inflates its memory) and only re-slices them for another
    chunk size; a ceiling helper generates its own chunks again.
    """
    n_train = n_train_rows(n_samples)
    if role == "ceiling":
        X, y = make_data(n_samples, chunk_size)
        mine = [i for i in range(X[:n_train].numblocks[0]) if i % n_replicas == share]
        return {
            "X_chunks": list(_blocks(X[:n_train], mine)),
            "y_chunks": list(_blocks(y[:n_train], mine)),
        }
    if data is None:
        X, y = make_data(n_samples, chunk_size)
        parts = {"X": X[:n_train], "y": y[:n_train], "X_test": X[n_train:], "y_test": y[n_train:]}
        data = {}
        for name, part in parts.items():
            data[name] = np.empty(part.shape, part.dtype)
            bounds = _bounds(part.chunks[0])
            for (start, stop), block in zip(bounds, _blocks(part, range(len(bounds)))):
                data[name][start:stop] = block
    views = [slice(start, stop) for start, stop in chunk_bounds(n_train, chunk_size)]
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
    """A helper process: make the data, then run commands until told to stop.

    Commands: ``("chunks", chunk_size)`` (the data in other chunks), ``("serial", epochs)``,
    ``("lbfgs", 0)`` (what a linear model can reach on this data, to read accuracies against).
    """
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
        kind, argument = command
        began = time.perf_counter()
        if kind == "chunks":
            if role == "ceiling":
                data = None
                _release_free_memory()
            data = _helper_data(role, share, n_replicas, n_samples, argument, data)
            _release_free_memory()
            connection.send({"data_s": time.perf_counter() - began})
            continue
        if kind == "serial":
            model = serial_loop(data["X_chunks"], data["y_chunks"], argument)
        else:
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(max_iter=500).fit(data["X"], data["y"])
        ended = time.perf_counter()
        accuracy = model.score(data["X_test"], data["y_test"]) if "X_test" in data else None
        del model
        _release_free_memory()  # what a command freed must not count in the next one's peak
        connection.send({"start": began, "end": ended, "accuracy": accuracy})


class Helpers:
    """The reference helper and ``n_replicas`` ceiling helpers, as spawned processes
    (without the reference when *reference* is false: ``benchmarks/scaling.py`` needs the
    serial loop once, and the ceiling at every worker count)."""

    def __init__(self, n_replicas, n_samples, chunk_size, reference=True):
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = {}, {}
        roles = [("reference", 0)] if reference else []
        roles += [("ceiling", k) for k in range(n_replicas)]
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

    def rechunk(self, chunk_size):
        """Every helper's data in *chunk_size* chunks; seconds per role, as ``wait_ready``."""
        for connection in self.connections.values():
            connection.send(("chunks", chunk_size))
        return self.wait_ready()

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
# The configurations.


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    kind: str  # serial | ceiling | incremental | default | sync | async
    sync_every: int = None

    @property
    def on_cluster(self):
        return self.kind in ("incremental", "default", "sync", "async")

    def train_kwargs(self, epochs):
        """What :func:`taskdml.parallel.train` gets besides the data and the client.

        The default row passes nothing the engine has a default for (``classes`` is the
        estimator's need, not an engine option), so it shows whatever the defaults become.
        """
        kwargs = {"classes": CLASSES, "epochs": epochs, "random_state": 0}
        if self.kind in ("sync", "async"):
            kwargs.update(strategy=self.kind, shuffle=False)
        if self.sync_every is not None:
            kwargs["sync_every"] = self.sync_every
        return kwargs


SERIAL = Config("serial partial_fit loop (reference)", "serial")
CEILING = Config("ceiling: R serial loops at once, 1/R of the chunks each", "ceiling")
INCREMENTAL = Config("dask-ml Incremental", "incremental")
DEFAULTS = Config("**taskdml defaults** (no sync_every)", "default")
SYNC_1 = Config("taskdml sync, sync_every=1", "sync", sync_every=1)
ASYNC = Config("taskdml async (default staleness)", "async")
CONFIGS = [
    SERIAL,
    CEILING,
    INCREMENTAL,
    DEFAULTS,
    SYNC_1,
    Config("taskdml sync, sync_every=4", "sync", sync_every=4),
    Config("taskdml sync, sync_every=10", "sync", sync_every=10),
    ASYNC,
]


def taskdml_imports():
    """Import, in a process of the cluster, what the taskdml configurations need."""
    import sklearn.linear_model  # noqa: F401

    # taskdml.parallel imports its names on first use: name the engine and the rules
    import taskdml.parallel.engine._train  # noqa: F401
    import taskdml.parallel.merge._builtin  # noqa: F401


def worker_imports():
    """Import, in a cluster process, what every configuration needs (before the idle reading)."""
    import dask_ml.wrappers  # noqa: F401

    taskdml_imports()


def worker_transfers(dask_worker):
    """Bytes this worker has fetched from other workers so far."""
    return sum(entry["total"] for entry in dask_worker.transfer_incoming_log)


def _held_keys(dask_worker):
    return len(dask_worker.data)


def holdout_accuracy(model, X_test, y_test):
    """Accuracy of *model* on the persisted holdout, computed on the cluster."""
    predicted = X_test.map_blocks(model.predict, drop_axis=1, dtype=y_test.dtype)
    return float((predicted == y_test).mean().compute())


def run_on_cluster(config, epochs, client, data):
    """Run one cluster configuration; return its measurements."""
    from taskdml.parallel import train

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
        result = train(make_model(), X_train, y_train, client=client, **config.train_kwargs(epochs))
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

    One epoch with the engine's defaults: milestones in ms from the call's start (``None``
    where the engine ran no task of that name), and the engine's own ``setup`` pieces.
    """
    from dask.utils import key_split
    from distributed import get_task_stream

    from taskdml.parallel import train

    timelines = []
    for _ in range(runs):
        with get_task_stream(client) as stream:
            began = time.time()
            result = train(
                make_model(),
                data["X_train"],
                data["y_train"],
                client=client,
                **DEFAULTS.train_kwargs(1),
            )
            ended = time.time()
        spans = {}
        for record in stream.data:
            for span in record["startstops"]:
                if span["action"] == "compute":
                    spans.setdefault(key_split(record["key"]), []).append(
                        (span["start"], span["stop"])
                    )
        inspect = spans.get("train-inspect", [])
        prepare = spans.get("train-prepare", [])
        replica = spans.get("train-replica", [])
        timeline = {  # no inspection tasks when the engine remembers these chunks: 0 tasks
            "inspect_tasks": len(inspect),
            "inspect_end": max((b for _, b in inspect), default=None),
            "prepare_start": min((a for a, _ in prepare), default=None),
            "replicas_start": max((a for a, _ in replica), default=None),
            "replicas_end": max((b for _, b in replica), default=None),
            "wall": ended,
        }
        timeline = {
            key: value if key == "inspect_tasks" or value is None else (value - began) * 1e3
            for key, value in timeline.items()
        }
        if replica:
            span = max(b for _, b in replica) - min(a for a, _ in replica)
            timeline["outside_replicas"] = (ended - began - span) * 1e3
        for piece, seconds in (result.stats.get("setup") or {}).items():
            timeline[f"setup:{piece}"] = seconds * 1e3
        timelines.append(timeline)
    keys = dict.fromkeys(key for t in timelines for key in t)
    return {key: _median(t.get(key) for t in timelines) for key in keys}


def _noop():
    return None


def dask_task_floor(client, runs=30):
    """Dask's own floor for one call, in ms (median of *runs*): a no-op task submitted and its
    result fetched, isolated (50 ms apart) and back to back (the client sends its messages
    to the scheduler at most every 10 ms, so back-to-back calls pay more)."""
    floors = {}
    for label, pause in (("noop_isolated", 0.05), ("noop_back_to_back", 0.0)):
        times = []
        for _ in range(runs):
            time.sleep(pause)
            began = time.perf_counter()
            client.submit(_noop, pure=False).result()
            times.append((time.perf_counter() - began) * 1e3)
        floors[label] = statistics.median(times)
    return floors


def run_config(config, epochs, client, data, helpers, sampler):
    """One timed run of *config*, with the memory peak of the processes it uses."""
    with sampler.window() as peaks:
        if config.on_cluster:
            outcome = run_on_cluster(config, epochs, client, data)
        elif config.kind == "ceiling":
            outcome = helpers.run("ceiling", "serial", epochs)
        else:
            outcome = helpers.run("reference", config.kind, epochs)
    outcome["peak"] = peaks[_group(config)]
    return outcome


def _group(config):
    """The processes whose memory a configuration uses."""
    return "cluster" if config.on_cluster else config.kind.replace("serial", "reference")


# ---------------------------------------------------------------------------------------------
# Summaries.


def _median(values):
    """The median of the values that are not ``None``; ``None`` if there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _mean(values):
    return sum(values) / len(values) if values else None


def engine_facts(run, rows_per_replica, epochs):
    """What one taskdml run's ``stats`` say, in ms per round (sync) or per chunk (async).

    Keys the engine does not report (``collective_round_s``, ``merge_s``, ``serialize_s``,
    ``wire_s``, ``wait_s``, ``collective``, ``sync_every``) give ``None``. *rows_per_replica*
    are the train rows each replica owns, for the compute cost per row.
    """
    s, wall = run["stats"], run["wall"]
    sync = "rounds" in s
    steps = s["rounds"] if sync else s["updates"] / s["replicas"]
    busy = s["busy_s"]

    def per_step_ms(seconds):
        return None if seconds is None else seconds / steps * 1e3

    waits = s.get("reduce_wait_s" if sync else "held_back_s") or [None]
    merge, serialize, wire = (
        _mean(s.get(key) or []) for key in ("merge_s", "serialize_s", "wire_s")
    )
    if s.get("collective_round_s") is not None:  # the engine's median round: no division
        round_ms = s["collective_round_s"] * 1e3
        round_source = "engine `collective_round_s`, median over rounds"
    elif merge is not None and wire is not None:
        round_ms = per_step_ms(merge + wire + (serialize or 0.0))
        round_source = "mean of merge_s + serialize_s + wire_s"
    else:
        round_ms = per_step_ms(min(waits))
        round_source = "reduce_wait_s of the replica that waited least"
    blocks = s.get("blocks") or s["n_chunks"]
    facts = {
        "sync": sync,
        "steps": steps,
        "collective": s.get("collective"),
        "stated_period": s.get("sync_every"),
        "chunks_per_replica": math.ceil(blocks / s["replicas"]),
        "replicas": s["replicas"],
        "busy_s": max(busy),
        "busy_spread_s": max(busy) - min(busy),
        "loss_s": wall - max(busy),
        "overhead_ms": per_step_ms(wall - max(busy)),
        "setup_ms": s["setup_s"] * 1e3 if "setup_s" in s else (wall - s["wall_s"]) * 1e3,
        "compute_ms": per_step_ms(max(busy)),
        "engine_wait_min_ms": per_step_ms(min(waits)),
        "engine_wait_max_ms": per_step_ms(max(waits)),
        "merge_ms": per_step_ms(merge),
        "serialize_ms": per_step_ms(serialize),
        "wire_ms": per_step_ms(wire),
        "wait_min_ms": per_step_ms(min(s["wait_s"])) if s.get("wait_s") else None,
        "wait_max_ms": per_step_ms(max(s["wait_s"])) if s.get("wait_s") else None,
        "round_ms": round_ms if sync else None,
        "round_source": round_source,
        "row_s": None,
    }
    if len(busy) == len(rows_per_replica):
        facts["row_s"] = _mean([b / (rows * epochs) for b, rows in zip(busy, rows_per_replica)])
    return facts


def summarise(config, epochs, runs, refs, idle, data_bytes, rows_per_replica):
    """One table row: medians over *runs* and the derived ratios.

    *refs* holds the same chunk size's and epochs' median walls of the serial loop and
    dask-ml Incremental and the ceiling's speedup.
    """
    wall = statistics.median(r["wall"] for r in runs)
    accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
    row = {
        "config": config,
        "epochs": epochs,
        "wall": wall,
        "runs": [r["wall"] for r in runs],
        "speedup": refs["serial"] / wall,
        "vs_incremental": refs["incremental"] / wall,
        "accuracy": statistics.median(accuracies) if accuracies else None,
        "accuracy_range": (min(accuracies), max(accuracies)) if accuracies else None,
        "peak": max(r["peak"] for r in runs),
        "idle": idle,
        "transfers": statistics.median(r.get("transfers", 0) for r in runs),
        "engine": None,
    }
    row["ceiling_fraction"] = row["speedup"] / refs["ceiling"]
    row["peak_x"] = row["peak"] / data_bytes
    row["added_x"] = (row["peak"] - idle) / data_bytes
    per = [engine_facts(r, rows_per_replica, epochs) for r in runs if r.get("stats")]
    if per:
        labels = ("sync", "collective", "stated_period", "round_source")
        engine = {key: _median(p[key] for p in per) for key in per[0] if key not in labels}
        engine.update({key: per[0][key] for key in labels})
        engine["round_ms_runs"] = [p["round_ms"] for p in per if p["round_ms"] is not None]
        row["engine"] = engine
    return row


def sync_rows(rows):
    return [r for r in rows if r["engine"] and r["engine"]["sync"]]


def round_cost_fit(rows):
    """Least squares over the sync rows: ``wall - busiest busy = fixed + rounds * per_round``."""
    points = [(r["engine"]["steps"], r["engine"]["loss_s"]) for r in sync_rows(rows)]
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = np.polyfit([x for x, _ in points], [y for _, y in points], 1)
    return {"per_round_ms": slope * 1e3, "fixed_ms": intercept * 1e3, "points": len(points)}


def round_cost_ms(rows):
    """The engine-measured cost of one sync round: the median over every sync run of *rows*,
    and where it comes from."""
    runs = [value for r in sync_rows(rows) for value in r["engine"]["round_ms_runs"]]
    source = next((r["engine"]["round_source"] for r in sync_rows(rows)), None)
    return _median(runs), source


def period_of(row):
    """The chunks per round of a sync row, as ``(low, high)``: equal when known.

    Explicit rows: their ``sync_every``. The defaults row: ``stats['sync_every']`` when the
    engine states a number, else the periods that give the rounds it ran (``high`` is
    ``None`` for no upper bound; both are the mean period when the rounds per epoch are not
    a whole number).
    """
    engine = row["engine"]
    if not engine or not engine["sync"]:
        return None
    stated = row["config"].sync_every or engine["stated_period"]
    if isinstance(stated, (int, float)):
        return stated, stated
    per_replica, rounds = engine["chunks_per_replica"], engine["steps"] / row["epochs"]
    if rounds != int(rounds):
        return per_replica / rounds, per_replica / rounds
    low = math.ceil(per_replica / rounds)
    return low, (None if rounds <= 1 else (per_replica - 1) // (int(rounds) - 1))


def _period_text(row):
    period = period_of(row)
    if period is None:
        return "–"
    low, high = period
    stated = row["engine"]["stated_period"]
    prefix = f"{stated} → " if isinstance(stated, str) else ""
    if high is None:
        return f"{prefix}≥ {low}"
    if low != high:
        return f"{prefix}{low}–{high}"
    return prefix + (f"{low:g}" if low == int(low) else f"≈{low:.3g}")


# ---------------------------------------------------------------------------------------------
# The model of larger clusters.


def modelled_speedup(
    replicas,
    total_rows,
    *,
    chunk_rows,
    sync_every,
    epochs,
    row_s,
    round_s,
    step_s,
    merge_s,
    call_s,
):
    """Speed-up over one serial ``partial_fit`` loop of sync training on *replicas* workers.

    The serial loop takes ``T1 = total_rows · epochs · row_s``. Sync training on ``R``
    replicas (at most one per chunk: the engine never runs more) takes

        T(R) = call_s + epochs · rounds · (round_s + step_s · log2 R + merge_s · R)
               + epochs · rows_R · row_s

    where ``rows_R`` are the rows of the busiest replica (``ceil(n_chunks / R)`` chunks of
    *chunk_rows*) and ``rounds = ceil(chunks of the busiest replica / sync_every)`` per
    epoch. The round is a recursive-doubling all-gather of the model, as the engine's direct
    collective does it: ``log2 R`` message steps (``step_s`` each: serialising and the wire,
    latency-bound for small models), after which every replica merges all ``R`` models
    (``merge_s`` per model), plus a cost paid once per round (``round_s``: the call into the
    collective, waiting for the slowest replica). Assumptions: perfect data locality (every
    replica trains on chunks already in its worker's memory); compute per row as measured
    and independent of ``R`` (one replica per core, memory bandwidth growing with the cores);
    no growth of ``call_s`` or of the load imbalance with ``R``; message steps stay
    latency-bound (a model of ``R`` times the size still costs ``step_s``); ``sync_every``
    held at its measured value. Returns ``T1 / T(R)``.

    Examples
    --------
    >>> round(modelled_speedup(4, 400, chunk_rows=100, sync_every=1, epochs=1, row_s=1e-3,
    ...                        round_s=0.0, step_s=0.0, merge_s=0.0, call_s=0.0), 6)
    4.0
    >>> round(modelled_speedup(4, 400, chunk_rows=100, sync_every=1, epochs=1, row_s=1e-3,
    ...                        round_s=0.0, step_s=0.05, merge_s=0.0, call_s=0.0), 6)
    2.0
    """
    n_chunks = math.ceil(total_rows / chunk_rows)
    replicas = max(1, min(replicas, n_chunks))
    busiest_chunks = math.ceil(n_chunks / replicas)
    busiest_rows = min(busiest_chunks * chunk_rows, total_rows)
    rounds = epochs * math.ceil(busiest_chunks / sync_every)
    per_round = 0.0
    if replicas > 1:
        per_round = round_s + step_s * math.log2(replicas) + merge_s * replicas
    parallel = call_s + rounds * per_round + epochs * busiest_rows * row_s
    return total_rows * epochs * row_s / parallel


def model_parameters(rows, chunk_size, n_train, workers):
    """The model's inputs for one chunk size, from its measured rows at the most epochs.

    ``row_s``: the replicas' busy time per row (sync rows). ``merge_s``: the engine's
    ``merge_s`` per round / the replicas merged (0 when not reported). ``step_s``: the
    engine-measured round (:func:`round_cost_ms`) less the merge. ``round_s``: what the
    least-squares cost per round adds to the engine-measured round (not below 0).
    ``call_s``: the least-squares fixed cost (not below 0; the engine's ``setup_s`` without
    a fit). ``sync_every``: the defaults row's period (the lowest that fits its rounds).
    """
    mine = [r for r in rows if r["chunk_size"] == chunk_size]
    most = max(r["epochs"] for r in mine)
    synced = [r for r in sync_rows(mine) if r["epochs"] == most]
    row_s = _median(r["engine"]["row_s"] for r in synced)
    if not synced or row_s is None:
        return None
    engine_ms = round_cost_ms(mine)[0] or 0.0
    merge_ms = (_median(r["engine"]["merge_ms"] for r in synced) or 0.0) / workers
    fit = round_cost_fit(mine)
    default = _find(mine, DEFAULTS, most)
    period = period_of(default) if default else None
    if fit:
        once_ms, call_ms = max(0.0, fit["per_round_ms"] - engine_ms), max(0.0, fit["fixed_ms"])
    else:
        once_ms, call_ms = 0.0, _median(r["engine"]["setup_ms"] for r in synced)
    return {
        "chunk_rows": chunk_size,
        "sync_every": max(1, round(period[0])) if period else 1,
        "epochs": most,
        "row_s": row_s,
        "round_s": once_ms / 1e3,
        "step_s": max(0.0, engine_ms - merge_ms * workers) / 1e3,
        "merge_s": merge_ms / 1e3,
        "call_s": call_ms / 1e3,
        "rows_per_worker": n_train / workers,
        "measured_workers": workers,
    }


def model_tables(parameters):
    """The model's inputs per chunk size, then its speed-ups (and efficiencies) per R."""
    inputs = [
        "| chunk rows | sync period | epochs | row µs | once per round ms | per step ms "
        "| merge per model ms | fixed per call ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    counts = [parameters[0]["measured_workers"], *MODEL_WORKERS] if parameters else []
    speedups = [
        "| chunk rows | scaling | "
        + " | ".join(
            f"R = {r}{' (the measured R)' if i == 0 else ''}" for i, r in enumerate(counts)
        )
        + " |",
        "|---|---|" + "---|" * len(counts),
    ]
    for p in parameters:
        inputs.append(
            f"| {p['chunk_rows']:,} | {p['sync_every']} | {p['epochs']} | {p['row_s'] * 1e6:.3f} "
            f"| {p['round_s'] * 1e3:.2f} | {p['step_s'] * 1e3:.2f} | {p['merge_s'] * 1e3:.3f} "
            f"| {p['call_s'] * 1e3:.1f} |"
        )
        arguments = {
            key: p[key]
            for key in (
                "chunk_rows",
                "sync_every",
                "epochs",
                "row_s",
                "round_s",
                "step_s",
                "merge_s",
                "call_s",
            )
        }
        n_train = p["rows_per_worker"] * p["measured_workers"]
        for scaling, weak in (
            ("strong (same rows)", False),
            ("weak (same rows per replica)", True),
        ):
            cells = []
            for r in counts:
                total = p["rows_per_worker"] * r if weak else n_train
                speedup = modelled_speedup(r, total, **arguments)
                cells.append(f"{speedup:.1f}× ({speedup / r:.0%})")
            speedups.append(f"| {p['chunk_rows']:,} | {scaling} | " + " | ".join(cells) + " |")
    return "\n".join(inputs), "\n".join(speedups)


# ---------------------------------------------------------------------------------------------
# Tables.


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def _span(low, high, spec=".1f"):
    if low is None or high is None:
        return "–"
    return (
        format(low, spec) if f"{low:{spec}}" == f"{high:{spec}}" else f"{low:{spec}}–{high:{spec}}"
    )


def results_table(rows):
    """One chunk size: every configuration and epoch count, as ratios."""
    lines = [
        "| configuration | epochs | wall s (median) | speedup vs serial | of ceiling "
        "| vs dask-ml Incremental | holdout acc | acc − sync_every=1 pp | chunks/round "
        "| overhead ms/round | peak RSS MiB | (peak − idle) / data |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        engine, overhead = r["engine"], "–"
        if engine:
            unit = "" if engine["sync"] else " /chunk"
            overhead = f"{engine['overhead_ms']:.1f}{unit}"
        accuracy = _fmt(r["accuracy"], ".4f")
        if r["accuracy_range"] and r["accuracy_range"][1] - r["accuracy_range"][0] > 5e-5:
            accuracy += f" ({r['accuracy_range'][0]:.4f}–{r['accuracy_range'][1]:.4f})"
        gap = "–"
        sync_1 = _find(rows, SYNC_1, r["epochs"])
        if engine and sync_1 and r["accuracy"] is not None and r["config"] != SYNC_1:
            gap = f"{(r['accuracy'] - sync_1['accuracy']) * 100:+.2f}"
        lines.append(
            f"| {r['config'].name} | {r['epochs']} | {r['wall']:.3f} | {r['speedup']:.2f}× "
            f"| {r['ceiling_fraction']:.0%} | {r['vs_incremental']:.2f}× | {accuracy} | {gap} "
            f"| {_period_text(r)} | {overhead} | {r['peak'] / MIB:,.0f} | {r['added_x']:.2f}× |"
        )
    return "\n".join(lines)


def _find(rows, config, epochs, chunk_size=None):
    return next(
        (
            r
            for r in rows
            if r["config"] == config
            and r["epochs"] == epochs
            and chunk_size in (None, r["chunk_size"])
        ),
        None,
    )


def round_table(rows):
    """Per round of every sync row: compute, merge, wire, waiting, and the totals."""
    lines = [
        "| chunk rows | configuration | epochs | collective | rounds | chunks/round "
        "| compute | merge | serialise | wire | waiting (min–max) | round (engine) "
        "| reduce_wait (min–max) | overhead (wall − busiest) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sync_rows(rows):
        e = r["engine"]
        lines.append(
            f"| {r['chunk_size']:,} | {r['config'].name} | {r['epochs']} "
            f"| {e['collective'] or '–'} | {e['steps']:g} | {_period_text(r)} "
            f"| {e['compute_ms']:.1f} | {_fmt(e['merge_ms'], '.2f')} "
            f"| {_fmt(e['serialize_ms'], '.2f')} | {_fmt(e['wire_ms'], '.2f')} "
            f"| {_span(e['wait_min_ms'], e['wait_max_ms'], '.2f')} | {_fmt(e['round_ms'], '.2f')} "
            f"| {_span(e['engine_wait_min_ms'], e['engine_wait_max_ms'], '.2f')} "
            f"| {e['overhead_ms']:.1f} |"
        )
    return "\n".join(lines)


FIXED_COST_LINES = [  # (label, key in the per-chunk-size facts, format)
    ("task stream: inspection tasks (0: the engine remembered the chunks)", "inspect_tasks", ".0f"),
    ("task stream: last inspection task ends, ms", "inspect_end", ".0f"),
    ("task stream: `prepare_start` starts, ms", "prepare_start", ".0f"),
    ("task stream: all replicas computing by, ms", "replicas_start", ".0f"),
    ("task stream: replicas end, ms", "replicas_end", ".0f"),
    ("task stream: the call returns, ms", "wall", ".0f"),
    ("**outside the replicas** (wall − replicas' span), ms", "outside_replicas", ".1f"),
    ("Dask's floor: a no-op task submitted and fetched, isolated, ms", "noop_isolated", ".1f"),
    ("Dask's floor: the same, calls back to back, ms", "noop_back_to_back", ".1f"),
    (
        "engine `setup_s` (call start to submission; median over the sync rows), ms",
        "setup_ms",
        ".1f",
    ),
]


def fixed_cost_table(per_chunk):
    """Where a call's fixed cost goes, one column per chunk size."""
    sizes = list(per_chunk)
    pieces = dict.fromkeys(
        key for facts in per_chunk.values() for key in facts if key.startswith("setup:")
    )
    lines = [
        "| | " + " | ".join(f"{size:,}-row chunks" for size in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    labelled = FIXED_COST_LINES + [
        (f"engine `stats['setup']['{key[6:]}']` (median of the timeline calls), ms", key, ".1f")
        for key in pieces
    ]
    if not pieces:
        labelled.append(("engine `stats['setup']` pieces", "no such key", ""))
    labelled += [
        ("**least squares: fixed cost per call**, ms", "fixed_ms", ".1f"),
        ("least squares: cost per sync round, ms", "per_round_ms", ".2f"),
        ("least squares: sync rows fitted", "points", ".0f"),
        ("first sync call on fresh data fetched between workers, MiB", "first_fetched_mib", ".0f"),
    ]
    for label, key, spec in labelled:
        values = [_fmt(per_chunk[size].get(key), spec) if spec else "–" for size in sizes]
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def detail_table(rows):
    lines = [
        "| chunk rows | configuration | epochs | runs s | busiest busy s | busy spread s "
        "| wall − busiest s | setup_s ms | rounds (chunks/replica) | fetched between workers MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        runs = " ".join(f"{w:.3f}" for w in r["runs"])
        transfers = f"{r['transfers'] / MIB:.1f}" if r["config"].on_cluster else "–"
        head = f"| {r['chunk_size']:,} | {r['config'].name} | {r['epochs']} | {runs} "
        e = r["engine"]
        if e:
            lines.append(
                head + f"| {e['busy_s']:.3f} | {e['busy_spread_s']:.3f} | {e['loss_s']:.3f} "
                f"| {e['setup_ms']:.1f} | {e['steps']:g} | {transfers} |"
            )
        else:
            lines.append(head + f"| – | – | – | – | – | {transfers} |")
    return "\n".join(lines)


def target_checks(rows, per_chunk):
    """Each target of the issue: (target, where, measured, met)."""
    checks = []
    for chunk_size, facts in per_chunk.items():
        mine = [r for r in rows if r["chunk_size"] == chunk_size]
        where = f"{chunk_size:,}"
        for epochs in sorted({r["epochs"] for r in mine}):
            default = _find(mine, DEFAULTS, epochs)
            checks.append(
                (
                    f"defaults ≥ {TARGET_DEFAULT_CEILING:.0%} of the same run's ceiling",
                    f"{where}, {epochs} ep",
                    f"{default['ceiling_fraction']:.0%}",
                    default["ceiling_fraction"] >= TARGET_DEFAULT_CEILING,
                )
            )
            checks.append(
                (
                    f"defaults ≥ {TARGET_DEFAULT_VS_INCREMENTAL:g}× dask-ml Incremental",
                    f"{where}, {epochs} ep",
                    f"{default['vs_incremental']:.2f}×",
                    default["vs_incremental"] >= TARGET_DEFAULT_VS_INCREMENTAL,
                )
            )
        round_ms, source = round_cost_ms(mine)
        if round_ms is not None:
            checks.append(
                (
                    f"median sync round ≤ {TARGET_ROUND_MS:g} ms at R = 2 (engine-measured)",
                    where,
                    f"{round_ms:.2f} ms ({source})",
                    round_ms <= TARGET_ROUND_MS,
                )
            )
        if facts.get("fixed_ms") is not None:
            outside = _fmt(facts.get("outside_replicas"), ".1f")
            checks.append(
                (
                    f"fixed cost per call ≤ {TARGET_FIXED_MS:g} ms (least squares)",
                    where,
                    f"{facts['fixed_ms']:.1f} ms (outside the replicas: {outside} ms)",
                    facts["fixed_ms"] <= TARGET_FIXED_MS,
                )
            )
        for epochs in sorted({r["epochs"] for r in mine}):
            async_row = _find(mine, ASYNC, epochs)
            gaps = [
                (name, (async_row["accuracy"] - ref["accuracy"]) * 100)
                for name, ref in (
                    ("sync_every=1", _find(mine, SYNC_1, epochs)),
                    ("defaults", _find(mine, DEFAULTS, epochs)),
                )
            ]
            # How far apart sync runs land that differ only in period or chunk order: the
            # noise the async gap is read against.
            synced = [r["accuracy"] * 100 for r in sync_rows(mine) if r["epochs"] == epochs]
            checks.append(
                (
                    f"async holdout accuracy within {TARGET_ASYNC_PP:g} pp of sync "
                    "(sync_every=1 and defaults)",
                    f"{where}, {epochs} ep",
                    ", ".join(f"{gap:+.2f} pp vs {name}" for name, gap in gaps)
                    + f" (the sync rows span {max(synced) - min(synced):.2f} pp)",
                    all(abs(gap) <= TARGET_ASYNC_PP for _, gap in gaps),
                )
            )
    lines = ["| target | chunk rows, epochs | measured | met |", "|---|---|---|---|"]
    lines += [f"| {t} | {w} | {m} | {'met' if ok else '**missed**'} |" for t, w, m, ok in checks]
    return "\n".join(lines), checks


# ---------------------------------------------------------------------------------------------
# Machine, versions, report.


def report(args, facts, rows, per_chunk, parameters, checks_table):
    m, load = facts["machine"], facts["load"]
    busy_note = _results.load_note(load["foreign_cores"], m["nproc"], " during the timed runs")
    sizes = ", ".join(f"{size:,}" for size in args.chunk_sizes)
    lines = [
        f"Command: `{facts['command']}`  ",
        f"Date: {facts['date']}  ",
        f"Machine: {_results.machine_line(m)}  ",
        "Versions: " + _results.versions_line(facts["versions"]),
        "",
        busy_note + f" Load average before/after: {load['before']} / {load['after']}; CPU steal "
        f"during the run: {load['steal_s']:.1f} s.",
        *([""] + [f"Note: {args.note}"] if args.note else []),
        "",
        f"Data: {args.n_samples:,} × {N_FEATURES} float64 ({facts['data_mib']:,.0f} MiB for X "
        f"and y; train = first {facts['n_train']:,} rows, holdout = the rest) in chunks of "
        f'{sizes} rows, one chunk size at a time; `SGDClassifier(loss="hinge", alpha=1e-5, '
        f"random_state=0)`; R = {args.workers} workers × 1 thread. Per chunk size, one warm-up "
        f"run of every configuration, then the median of {args.repeats} interleaved runs; "
        f"whole benchmark {facts['total_s']:.0f} s.",
        "",
    ]
    for chunk_size in args.chunk_sizes:
        c = per_chunk[chunk_size]
        lines += [
            f"**{chunk_size:,}-row chunks** ({c['n_chunks']} train chunks; persisting on the "
            f"cluster {c['persist_s']:.2f} s, the helpers' data {c['helper_data_s']:.2f} s):",
            "",
            results_table([r for r in rows if r["chunk_size"] == chunk_size]),
            "",
        ]
    lines += [
        "*speedup* = serial wall / wall; *of ceiling* = speedup / the ceiling's speedup (same "
        "chunk size and epochs); *vs dask-ml Incremental* = Incremental's wall / wall; *acc − "
        "sync_every=1* = holdout accuracy minus that of sync_every=1, in percentage points; "
        "*chunks/round* = the sync period as the engine states it (`stats['sync_every']`) or, "
        "shown with 3 digits, derived from its rounds (chunks of the busiest replica per epoch "
        "/ rounds per epoch); *overhead ms/round* = (wall − busiest replica's busy_s) / rounds "
        "(async: per chunk a replica trains). The defaults row also shuffles each replica's "
        "chunks every epoch (`shuffle=True` is the default); the other taskdml rows keep the "
        "serial loop's order. *peak RSS*: client + scheduler + workers for cluster rows, the "
        "helper process(es) for the others; *data* = X and y of all rows "
        f"({facts['data_mib']:,.0f} MiB); *idle* = the same processes before any data: "
        f"{facts['idle_mib']['cluster']:,.0f} MiB cluster, "
        f"{facts['idle_mib']['reference']:,.0f} MiB reference helper, "
        f"{facts['idle_mib']['ceiling']:,.0f} MiB ceiling helpers.",
        "",
        f"For reading the accuracies: `LogisticRegression` (lbfgs) on the same train rows scores "
        f"{facts['lbfgs_accuracy']:.4f} on the holdout.",
        "",
        "Per sync round (ms per round, medians over the runs): *compute* = busiest replica's "
        "busy_s / rounds; *merge*, *serialise*, *wire*, *waiting* = the engine's `merge_s`, "
        "`serialize_s`, `wire_s`, `wait_s` (waiting for slower replicas) / rounds, mean over "
        "replicas (waiting: fastest–slowest replica); *round (engine)* = the engine's "
        "`round_s` (the median over rounds of the fastest replica's time in the collective: "
        "it arrived last and waited for no one), else merge + serialise + wire per round, "
        "else the `reduce_wait_s` per round of the replica that waited least; *reduce_wait* "
        "= the engine's whole time in the collective per round, fastest–slowest replica; "
        "*overhead* = (wall − busiest busy_s) / rounds, the call's fixed cost included. "
        '"–": the engine does not report it.',
        "",
        round_table(rows),
        "",
        "Where the fixed cost of a `train()` call goes: task stream of 3 extra calls per chunk "
        "size with the defaults, 1 epoch (ms from the call's start, medians), the engine's own "
        "`stats['setup']` pieces, and a least-squares fit of wall − busiest busy = fixed + "
        "rounds × per round over the sync rows of the chunk size (defaults row included when it "
        "ran sync).",
        "",
        fixed_cost_table(per_chunk),
        "",
    ]
    overall = facts.get("fit_all")
    if overall:
        lines += [
            f"Over all {overall['points']} sync rows of every chunk size: "
            f"**{overall['per_round_ms']:.2f} ms per round** plus "
            f"**{overall['fixed_ms']:.1f} ms per `train()` call**.",
            "",
        ]
    if parameters:
        lines += [
            "**A model of the speed-up at more workers** (`modelled_speedup` in this script), "
            "from the costs measured above at the most epochs. A sync round costs *once* + "
            "*per step* · log2 R + *merge per model* · R: a recursive-doubling all-gather, as "
            "the engine's direct collective does it (log2 R message steps, then every replica "
            "merges all R models). *per step* = the engine-measured round less its merge; "
            "*merge per model* = the engine's `merge_s` per round / R; *once* = what the "
            "least-squares cost per round adds to the engine-measured round (the call into the "
            "collective, load imbalance), held at its R = 2 value. Assumed: the fixed cost per "
            "call (least squares) does not grow with R; compute per row as the replicas "
            "measured it (*row µs*), for the serial loop too, with perfect data locality and "
            "one replica per core; messages stay latency-bound; the sync period of the "
            "defaults row (the lowest that gives its rounds), held fixed; never more replicas "
            "than chunks. *Strong*: the same train rows split over R replicas (it stops at one "
            "chunk per replica). *Weak*: every replica keeps the rows it had at the measured R "
            "(the data grows with R). Cells: speed-up over the serial loop (efficiency = "
            "speed-up / R). The measured-R column is the model's own check: read its "
            "efficiency against the defaults row's *of ceiling* above.",
            "",
            *model_tables(parameters)[:1],
            "",
            *model_tables(parameters)[1:],
            "",
        ]
    lines += [
        "Targets (issue 9):",
        "",
        checks_table,
        "",
        "Details:",
        "",
        detail_table(rows),
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 120k rows, chunks of 10k and 30k rows, 1 repeat, nothing written",
    )
    parser.add_argument(
        "--repeats", type=int, help=f"timed runs per configuration (default {REPEATS})"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="cluster workers = replicas = ceiling loops"
    )
    parser.add_argument(
        "--n-samples", type=int, help=f"rows, train + holdout (default {N_SAMPLES:,})"
    )
    parser.add_argument(
        "--chunk-sizes",
        "--chunk-size",
        dest="chunk_sizes",
        type=int,
        nargs="+",
        help="rows per chunk, one run each (default " + " ".join(map(str, CHUNK_SIZES)) + ")",
    )
    parser.add_argument("--epochs", type=int, nargs="+", default=EPOCHS, help="epoch counts to run")
    parser.add_argument("--results", default=RESULTS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only (implied by --quick)")
    parser.add_argument("--note", default="", help="a sentence to add to the recorded section")
    args = parser.parse_args(argv)
    args.n_samples = args.n_samples or (120_000 if args.quick else N_SAMPLES)
    args.chunk_sizes = args.chunk_sizes or ([10_000, 30_000] if args.quick else CHUNK_SIZES)
    args.repeats = args.repeats or (1 if args.quick else REPEATS)
    args.write = not (args.quick or args.no_write)
    return args


def measure_chunk_size(chunk_size, args, client, helpers, sampler, load):
    """Warm-up and timed runs of every configuration on data in *chunk_size* chunks.

    Returns ``(runs, facts)``: the runs per ``(config, epochs)`` and this chunk size's facts.
    *load* accumulates the timed seconds and the CPU time of other processes.
    """
    from distributed import wait

    facts = {"n_chunks": len(chunk_bounds(n_train_rows(args.n_samples), chunk_size))}
    X, y = make_data(args.n_samples, chunk_size)
    n_train = n_train_rows(args.n_samples)
    began = time.perf_counter()
    persisted = client.persist([X[:n_train], y[:n_train], X[n_train:], y[n_train:]])
    wait(persisted)
    facts["persist_s"] = time.perf_counter() - began
    data = dict(zip(("X_train", "y_train", "X_test", "y_test"), persisted))
    progress(f"{chunk_size:,}-row chunks persisted in {facts['persist_s']:.1f} s; warm-up")
    for config in CONFIGS:
        outcome = run_config(config, 1, client, data, helpers, sampler)
        if config.kind in ("default", "sync") and "first_fetched_mib" not in facts:
            facts["first_fetched_mib"] = outcome["transfers"] / MIB
    progress("fixed-cost timeline (task stream)")
    facts.update(fixed_cost_timeline(client, data))
    facts.update(dask_task_floor(client))
    cpu_before, (busy_before, steal_before) = tree_cpu_s(), system_cpu()
    timed_began = time.perf_counter()
    runs = {(c, e): [] for e in args.epochs for c in CONFIGS}
    for repeat in range(args.repeats):
        for epochs in args.epochs:
            for config in CONFIGS:
                outcome = run_config(config, epochs, client, data, helpers, sampler)
                runs[(config, epochs)].append(outcome)
                progress(
                    f"{chunk_size:,}-row chunks, repeat {repeat + 1}/{args.repeats}, epochs "
                    f"{epochs}, {config.name}: {outcome['wall']:.3f} s"
                )
    load["timed_s"] += time.perf_counter() - timed_began
    busy_after, steal_after = system_cpu()
    load["foreign_s"] += max((busy_after - busy_before) - (tree_cpu_s() - cpu_before), 0.0)
    load["steal_s"] += steal_after - steal_before
    del data, persisted
    deadline = time.monotonic() + 10  # the workers drop the chunks a moment after the client
    while sum(client.run(_held_keys).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    client.run(_release_free_memory)
    return runs, facts


def main(argv=None):
    args = parse_args(argv)
    from distributed import Client, LocalCluster

    warnings.simplefilter("ignore")
    started = time.perf_counter()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = " ".join(
        ["python benchmarks/data_parallel.py", *(sys.argv[1:] if argv is None else argv)]
    )
    facts = {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _results.machine(detail=True),
        "versions": _results.versions(DATA_PARALLEL_PACKAGES),
        "n_train": n_train_rows(args.n_samples),
    }
    helpers = Helpers(args.workers, args.n_samples, args.chunk_sizes[0])
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
    per_chunk, runs, load = {}, {}, {"timed_s": 0.0, "foreign_s": 0.0, "steal_s": 0.0}
    try:
        client.run(worker_imports)
        worker_imports()
        idle = sampler.sample()
        idle["reference"] = sum(v for (r, _), v in helpers.idle_rss.items() if r == "reference")
        idle["ceiling"] = sum(v for (r, _), v in helpers.idle_rss.items() if r == "ceiling")
        facts["idle_mib"] = {k: v / MIB for k, v in idle.items()}
        helper_data_s = helpers.wait_ready()
        sampler.start()
        progress("cluster and helpers ready; LogisticRegression for reference")
        facts["lbfgs_accuracy"] = helpers.run("reference", "lbfgs", 0)["accuracy"]
        for index, chunk_size in enumerate(args.chunk_sizes):
            if index:
                helper_data_s = helpers.rechunk(chunk_size)
            runs[chunk_size], per_chunk[chunk_size] = measure_chunk_size(
                chunk_size, args, client, helpers, sampler, load
            )
            per_chunk[chunk_size]["helper_data_s"] = max(helper_data_s.values())
    finally:
        if sampler.is_alive():
            sampler.stop()
        client.close()
        cluster.close()
        helpers.close()
    facts["total_s"] = time.perf_counter() - started
    facts["load"] = {
        "before": load_before,
        "after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "foreign_cores": load["foreign_s"] / max(load["timed_s"], 1e-9),
        "steal_s": load["steal_s"],
    }
    X, y = make_data(args.n_samples, args.chunk_sizes[0])
    data_bytes = X.nbytes + y.nbytes
    facts["data_mib"] = data_bytes / MIB

    rows = []
    n_train = facts["n_train"]
    for chunk_size in args.chunk_sizes:
        rows_per_replica = replica_rows(n_train, chunk_size, args.workers)
        for epochs in args.epochs:
            at = runs[chunk_size]

            def median_wall(config, at=at, epochs=epochs):
                return statistics.median(r["wall"] for r in at[(config, epochs)])

            refs = {
                "serial": median_wall(SERIAL),
                "incremental": median_wall(INCREMENTAL),
                "ceiling": median_wall(SERIAL) / median_wall(CEILING),
            }
            for config in CONFIGS:
                row = summarise(
                    config,
                    epochs,
                    at[(config, epochs)],
                    refs,
                    idle[_group(config)],
                    data_bytes,
                    rows_per_replica,
                )
                row["chunk_size"] = chunk_size
                rows.append(row)
        mine = [r for r in rows if r["chunk_size"] == chunk_size]
        per_chunk[chunk_size].update(round_cost_fit(mine) or {})
        per_chunk[chunk_size]["setup_ms"] = _median(
            r["engine"]["setup_ms"] for r in sync_rows(mine)
        )
    facts["fit_all"] = round_cost_fit(rows)
    parameters = [
        p
        for size in args.chunk_sizes
        if (p := model_parameters(rows, size, n_train, args.workers)) is not None
    ]
    checks_table, _ = target_checks(rows, per_chunk)
    text = report(args, facts, rows, per_chunk, parameters, checks_table)
    print(text)
    if args.write:
        _results.write_section(
            args.results,
            text,
            "data_parallel.py",
            "Data-parallel training (`benchmarks/data_parallel.py`)",
        )
        print(f"\nwritten to {args.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
