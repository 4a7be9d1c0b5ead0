"""Supersteps where the partitions live: one long-running task per partition, BSP or with
bounded staleness.

:func:`run_supersteps` submits one task per partition of a
:class:`~taskdml.graph._partition.PartitionedGraph`, pinned to the worker that holds it (as
the data-parallel engine pins its replicas), and returns once they all end. Each task runs
the whole iteration itself:

- every superstep, it sends each neighbour partition the messages of the vertices that
  neighbour mirrors (its send lists), receives the messages of its own mirrors, gathers,
  applies (:mod:`taskdml.graph._program`), and joins an all-reduce of a few numbers (the L1
  change, the dangling mass, ...) from which every partition takes the same decision to go
  on or stop: bulk-synchronous, with the barrier in the all-reduce;
- the messages go worker to worker through the direct collective of
  :mod:`taskdml.parallel.collective._direct` (its point-to-point ``send``/``receive`` and its
  ``allreduce_sum``, on the same mailboxes as the data-parallel all-reduce): never through
  the client or the scheduler, which only see one task start and end per partition;
- the task *secedes* from its worker's thread pool as it starts, so that several partitions
  can share a worker of one thread (they wait for each other every superstep: holding a
  thread each would deadlock a worker with fewer threads than partitions);
- rank 0 publishes a ``superstep`` event per superstep (number, the measures, seconds,
  and ``exchange_s``: its seconds waiting for its mirrors and in the all-reduce)
  through :mod:`taskdml._events`, as the engine's rank 0 publishes its rounds, and every
  task returns its values, the history and whether it converged.

The final values stay on the workers, one future per partition; only the history comes
back. A failing partition tells the others, which raise at once (the collective's abort).

**Bounded staleness** (``staleness=s > 0``, for a program whose ``tolerates_staleness``
says it converges from stale values: PageRank and label spreading are contractions,
min-label components is monotone). A partition starts superstep ``t`` with the newest
message of each mirror from supersteps ``t - s .. t`` (:meth:`receive_newest`; it waits only
when the newest it has is older), and skips the per-superstep barrier:

- the convergence test stays a reduction, decided alike everywhere: each partition sends
  its measures of superstep ``t`` to every other one and, at the end of ``t``, sums
  everyone's measures of ``t - s`` in rank order (the same floats on every partition) and
  tests them. Why this rather than an all-reduce every ``k`` supersteps: it is the same
  bound as the mirrors' (no partition is ever more than ``s`` supersteps ahead of any
  other, not just of its neighbours), it never stops everyone at once, and a run stops
  ``s`` supersteps after the test passes, not up to ``k``;
- the run stops once ``s + 1`` measured supersteps in a row pass the test: one superstep
  that changes nothing proves little when its mirrors were stale (a neighbour's change may
  still be on its way), ``s + 1`` in a row cover every read's window. For components the
  labels are then exactly the fixed point; for a contraction of factor ``d`` changing less
  than ``tol`` a superstep, the L1 error is at most about ``d (s + 2) tol / (1 - d)``;
- ``apply`` gets the newest totals every partition has sent (looked for without waiting),
  at worst those of ``t - s - 1`` (PageRank's dangling mass);
- the history (rank 0's) and the ``superstep`` events record per superstep ``measured``
  (the superstep whose measures they hold, ``None`` for the first ``s``) and
  ``staleness_max`` / ``staleness_mean``: ``t`` minus the superstep of each mirror
  message read (each partition's own reads are in its outcome's history); a synchronous
  run's entries do not carry these three.

With checkpoints, each segment's last superstep waits for all its measures (a barrier), so
``checkpoint_every`` must exceed ``s``; a stale run resumes from its checkpoint, or after a
lost worker, like a synchronous one, but its values depend on the timing: a resumed or
repeated run equals an uninterrupted one within the tolerance, not bit for bit.
``staleness=0`` is the bulk-synchronous loop, bit for bit.

**Vertex cut** (``partition_graph(..., cut="vertex")``): the same loop, with one more
exchange. A partition's CSR then holds a 2D block of edges, whose rows are its own vertices
and the remote vertices its edges point into; after the gather it sends the partial gathers
of those remote rows to their masters and combines the ones it receives for its own
(:meth:`~taskdml.graph._partition.VertexCutPartition.combine`, the program's combiner, in
rank order); masters apply, and the next superstep's messages go back to the mirrors as in
edge cut. An edge-cut partition's ``combine`` returns its gather as it is.

A graph partitioned without a client (small graphs, tests, a laptop) runs the very same
loop in one thread per partition of this process, its messages going through in-process
mailboxes (:class:`LocalPeers`) instead of the workers' comms.

**Checkpoints and lost workers** (on a cluster). With ``checkpoint_every=N`` the run goes in
segments of ``N`` supersteps: the tasks of a segment stop after its last superstep and hand
their raw values and the last totals to the next segment's tasks on the same workers (no
transfer), and the client keeps a copy of them, with the superstep number and the history,
as the run's checkpoint. Inside a pipeline step (the runner's scope of
:mod:`taskdml.cache._checkpoints`) the copy is also written to the store, every
:data:`CHECKPOINT_EVERY` supersteps by default (``"auto"``), and a run of the same program
on the same vertex ranges in the same step (whose cache key covers the graph and the data)
that finds one (``taskdml resume`` after a crash) starts from it (``resumed_from``). The
graph subsystem never sees the store: it :func:`claims <taskdml.cache._checkpoints.claim>` a
:class:`~taskdml.cache._checkpoints.Checkpoints` and calls ``save``/``load``. When a worker
holding a partition leaves mid-run, its peers' tasks fail (the collective's abort); the
client sees the worker gone, stops the others, re-partitions the graph from its edges on the
workers left (same vertex ranges; dask recomputes what the lost worker held) and runs again
from the last checkpoint (from the start without one): each superstep computes what an
uninterrupted run computes, in the same order, so the result is the same. ``restarts``
records each loss. That loop is :class:`Segments`, which the bipartite algorithms
(:func:`taskdml.graph._factorize.run_bipartite`) run too with their own tasks and state.
"""

import copy
import dataclasses
import operator
import threading
import time

import numpy as np

from taskdml import _events, _keys
from taskdml._client import scatter
from taskdml.cache import _checkpoints as _checkpoint
from taskdml.graph._program import gather
from taskdml.parallel.collective import _direct

CHECKPOINT_EVERY = 10
"""Supersteps between two checkpoints of a run inside a pipeline step (``"auto"``)."""

MAX_RESTARTS = 3
"""Worker losses a run survives before it raises."""

WATCH_S = 0.5
"""How often the client looks for lost workers while a segment runs."""

LOSS_NOTICE_S = 10
"""Seconds a partition's failure may precede the scheduler's news of its worker's loss."""


@dataclasses.dataclass
class SuperstepResult:
    """What :func:`run_supersteps` returns.

    Attributes
    ----------
    outcomes : list of distributed.Future
        Per partition, on its worker: ``(values, history, converged)`` (the tuples
        themselves for a graph held in this process).
    history : list of dict
        Per superstep: ``superstep``, the program's measures, ``seconds`` and
        ``exchange_s`` (of them, rank 0's time waiting for its mirrors' values and in the
        all-reduce).
    converged : bool
        Whether the program's test stopped the run before ``max_iter``.
    graph : PartitionedGraph
        The partitions the last supersteps ran on (re-partitioned after a lost worker).
    resumed_from : int or None
        The superstep a run found checkpointed and started from (``None``: from the start).
    restarts : list of dict
        Per worker loss: ``superstep`` (where the run went on from) and ``workers`` (those
        that left).
    """

    outcomes: list
    history: list
    converged: bool
    graph: object
    resumed_from: int = None
    restarts: list = dataclasses.field(default_factory=list)

    @property
    def n_iter(self):
        """The number of supersteps run."""
        return len(self.history)

    def as_array(self, tail=(), dtype=float):
        """The final values as one dask array along the vertices, chunked by partition,
        computed where the partitions are (nothing is gathered here).

        Parameters
        ----------
        tail : tuple of int
            The shape of one vertex's value (``()`` for a scalar).
        dtype : numpy dtype

        Returns
        -------
        dask.array.Array
        """
        import dask
        import dask.array as da

        if self.graph.client is None:  # run in this process: the values are here
            return da.concatenate([da.from_array(outcome[0]) for outcome in self.outcomes])
        values = dask.delayed(operator.itemgetter(0), pure=True)
        blocks = [
            da.from_delayed(values(outcome), shape=(size, *tail), dtype=dtype)
            for outcome, size in zip(self.outcomes, self.graph.sizes)
        ]
        return da.concatenate(blocks, axis=0)


def run_supersteps(
    graph,
    program,
    data=None,
    *,
    max_iter=100,
    timeout=600.0,
    checkpoint_every="auto",
    staleness=0,
):
    """Run *program* on *graph* in supersteps, one task per partition where it lives.

    Parameters
    ----------
    graph : PartitionedGraph
    program : VertexProgram
    data : list, optional
        One block of vertex data per partition (an array, a future or a delayed object),
        handed to ``program.init``.
    max_iter : int, default=100
        The most supersteps.
    timeout : float, default=600
        Seconds a partition waits for a neighbour's message before it raises.
    checkpoint_every : int, "auto" or None, default="auto"
        Supersteps between checkpoints (see the module docstring): the run goes on from the
        last one when a worker is lost, and inside a pipeline step they are written to the
        store, so that ``taskdml resume`` goes on from there. ``"auto"``:
        :data:`CHECKPOINT_EVERY` inside a pipeline step, none outside (a lost worker then
        costs the supersteps run so far). A graph held in this process takes none.
    staleness : int, default=0
        ``0``: bulk-synchronous. ``s > 0``: bounded staleness (see the module docstring), for
        a program whose :attr:`~taskdml.graph.VertexProgram.tolerates_staleness` says it
        converges from stale values; the result then depends on the timing (equal within the
        program's tolerance, not bit for bit).

    Returns
    -------
    SuperstepResult
    """
    client = graph.client
    if data is None:
        data = [None] * graph.n_partitions
    if len(data) != graph.n_partitions:
        raise ValueError(
            f"data must have one block per partition ({graph.n_partitions}); got {len(data)}."
        )
    if not (isinstance(staleness, int) and staleness >= 0):
        raise ValueError(f"staleness must be an int >= 0; got {staleness!r}.")
    if staleness and not getattr(program, "tolerates_staleness", False):
        raise ValueError(
            f"{type(program).__name__} does not declare tolerates_staleness = True: it runs "
            f"bulk-synchronous only (staleness=0); got staleness={staleness}."
        )
    if staleness and getattr(graph, "cut", "edge") == "vertex":
        raise ValueError(
            "a vertex-cut graph runs bulk-synchronous only (staleness=0); partition it with "
            f"cut='edge' for staleness={staleness}."
        )
    if client is None:
        return _run_here(graph, program, data, max_iter, timeout, staleness)
    check_every(checkpoint_every)
    return _Run(graph, program, data, int(max_iter), timeout, checkpoint_every, staleness).run()


def _submit(graph, program, data, timeout, max_iter, first, stop, start, staleness=0):
    """The tasks of supersteps ``first .. stop - 1``, one per partition; *start*: per
    partition, what the last segment left (its outcome future or a checkpoint's state)."""

    def arguments(rank, collective, tags):
        begin = None if start is None else start[rank]
        return (graph.partitions[rank], program, data[rank], collective, rank, max_iter, tags,
                first, stop, begin, staleness)  # fmt: skip

    return pinned_tasks(
        graph, superstep_task, arguments, timeout, type(program).__name__, phase="superstep"
    )


def pinned_tasks(graph, function, arguments, timeout, label, phase):
    """``function(*arguments(rank, collective, tags))`` as one task per partition of *graph*,
    pinned to the worker that holds it, all joined to one new direct collective; returns the
    tasks' futures and the collective. Every graph run on workers starts here."""
    import dask

    client = graph.client
    _check_direct(client, graph.workers)
    collective = _direct.DirectAllReduce(graph.workers, timeout=timeout)
    name = _keys.key_name("graph", graph.name, label, collective.training, phase=phase)
    tags = _events.where()
    task = dask.delayed(function, pure=False)
    tasks = []
    for rank, worker in enumerate(graph.workers):
        with dask.annotate(workers=[worker], allow_other_workers=False):
            tasks.append(task(*arguments(rank, collective, tags), dask_key_name=(name, rank)))
    return client.compute(tasks), collective


def _raise_the_cause(outcomes):
    """Wait for every partition; if some failed, raise the error of the one that failed
    first (the others only say that it did)."""
    from distributed import wait

    with outcomes[0].client.as_current():  # the graph's client, default or not
        wait(outcomes)
    errors = [outcome.exception() for outcome in outcomes if outcome.status == "error"]
    followers = [e for e in errors if str(e).startswith("another replica failed")]
    if errors:
        raise next((e for e in errors if e not in followers), errors[0])


def superstep_task(
    partition, program, data, collective, rank, max_iter, tags, first=0, stop=None, start=None,
    staleness=0,
):  # fmt: skip
    """One partition's task: supersteps ``first`` to ``stop - 1`` (all of them by default) of
    *program* on *partition* (see the module docstring); returns ``(values, history,
    converged, totals)``, the values being the program's result once the run ended."""
    program = copy.copy(program)  # its per-partition state is its own, even on one worker
    return as_partition(
        collective,
        rank,
        _iterate,
        partition, program, data, collective, rank, max_iter, tags, first, stop, start,
        staleness,
    )  # fmt: skip


def as_partition(collective, rank, body, *args):
    """``body(*args)`` as partition *rank*'s long-running task of a run: seceded from the
    worker's thread pool (partitions wait on each other: none may hold a thread another one
    needs), joined to *collective*, telling the other partitions if it fails, and leaving
    the collective however it ends. Every graph run's partition task is this."""
    from distributed import secede

    secede()
    collective.join(rank)
    try:
        return body(*args)
    except BaseException as error:
        collective.abort(f"partition {rank} failed: {type(error).__name__}: {error}")
        raise
    finally:
        collective.leave(rank)


def _iterate(
    part, program, data, collective, rank, max_iter, tags, first=0, stop=None, start=None,
    staleness=0,
):  # fmt: skip
    values = program.init(part, data)
    totals = collective.allreduce_sum("init", rank, program.measures(part, None, values))
    if start is not None:  # a segment going on from the last: its values and totals
        values, totals = start[0], np.asarray(start[-1], dtype=float)
    last = max_iter if stop is None else min(stop, max_iter)
    history, converged, streak, kept, heard = [], False, 0, {}, {}
    neighbours, n_ranks = sorted(part.mirrors), len(part.bounds) - 1
    columns = None  # the gather's input, reused from superstep to superstep
    for superstep in range(first, last):
        began = time.perf_counter()
        sent = program.message(part, values)
        for peer, indices in part.sends.items():
            collective.send(peer, superstep, sent[indices])
        exchanging = time.perf_counter()
        if staleness:  # the newest of each mirror's messages from superstep - s .. superstep
            read = [
                collective.receive_newest(q, max(first, superstep - staleness), superstep)
                for q in neighbours
            ]
            mirrored = [value for value, _ in read]
            lags = [superstep - tag for _, tag in read]
        else:
            mirrored, lags = [collective.receive(q, superstep) for q in neighbours], []
        computing = time.perf_counter()
        columns = _columns(columns, sent, mirrored)
        known = totals  # staleness: the newest measures every partition sent, if newer
        if staleness:
            known = _freshest(collective, rank, n_ranks, kept, heard, totals)
        gathered = part.combine(program, gather(program, part, columns), collective, superstep)
        new = program.apply(part, values, gathered, known)
        measures = program.measures(part, values, new)
        reducing = time.perf_counter()
        if staleness:  # the measures of superstep - s (of all left, at a segment's end)
            _send_measures(collective, rank, n_ranks, superstep, measures, kept)
            targets = range(max(first, superstep - staleness), superstep + 1)
            if superstep < last - 1:
                targets = [superstep - staleness] if superstep - staleness >= first else []
        else:
            totals, targets = collective.allreduce_sum(superstep, rank, measures), [superstep]
        settled = False
        for measured in targets:
            if staleness:
                totals = _measures_of(collective, rank, n_ranks, measured, kept, heard)
            if program.converged(totals, measured):
                streak += 1
                settled = settled or streak > staleness  # s + 1 in a row (module docstring)
            else:
                streak = 0
        values, done = new, time.perf_counter()
        entry = {
            "superstep": superstep,
            **{k: float(v) for k, v in zip(program.measure_names, totals)},
            "seconds": done - began,
            "exchange_s": (computing - exchanging) + (done - reducing),
        }
        if staleness:  # BSP's entries stay as they were (the dashboards plot numeric fields)
            entry["staleness_max"] = max(lags, default=0)
            entry["staleness_mean"] = float(np.mean(lags)) if lags else 0.0
            entry["measured"] = targets[-1] if targets else None  # None: the last known
        history.append(entry)
        if rank == 0:
            _events.publish_from(
                tags, "superstep", **entry, tol=getattr(program, "tol", None), max_iter=max_iter,
                **_measured(program),
            )  # fmt: skip
        if settled:
            converged = True
            break
    ended = converged or last == max_iter
    return (program.result(part, values) if ended else values), history, converged, totals


def _send_measures(collective, rank, n, superstep, measures, kept):
    """Send this partition's *measures* of *superstep* to the other *n* - 1 partitions and
    keep them in *kept* (by superstep) until :func:`_measures_of` sums them."""
    measures = kept[superstep] = np.asarray(measures, dtype=float)
    for peer in range(n):
        if peer != rank:
            collective.send(peer, ("measures", superstep), measures)


def _measures_of(collective, rank, n, superstep, kept, heard):
    """Every partition's measures of *superstep*, summed in rank order (the same floats on
    every partition), waiting for those not *heard* yet: the bounded-staleness all-reduce."""
    own, early = kept.pop(superstep), heard.pop(superstep, {})
    total = np.zeros(len(own))
    for peer in range(n):
        if peer == rank:
            total = total + own
        elif peer in early:
            total = total + early[peer]
        else:
            total = total + collective.receive(peer, ("measures", superstep))
    return total


def _freshest(collective, rank, n, kept, heard, totals):
    """The sum of the newest measures that every partition has sent by now (those come are
    put in *heard*), without waiting; *totals* if there are none newer: what a stale run's
    ``apply`` gets (the decision to stop waits for ``superstep - s``'s, the same on all)."""
    for superstep in sorted(kept, reverse=True):
        early = heard.setdefault(superstep, {})
        for peer in range(n):
            if peer != rank and peer not in early:
                value = collective.poll(peer, ("measures", superstep))
                if value is not None:
                    early[peer] = value
        if len(early) == n - 1:
            total = np.zeros(len(kept[superstep]))
            for peer in range(n):
                total = total + (kept[superstep] if peer == rank else early[peer])
            return total
    return totals


def _columns(buffer, own, mirrored):
    """The gather's input: the messages of the partition's own vertices, then its mirrors',
    in its CSR's column order, written into *buffer* when it fits (else a new one).

    Why a buffer: a worker's malloc hands every large block back to the system when freed
    (distributed sets ``MALLOC_TRIM_THRESHOLD_``), so a fresh array of megabytes each
    superstep costs its page faults again, about as much as copying into it."""
    shape = (len(own) + sum(len(m) for m in mirrored), *np.shape(own)[1:])
    dtype = np.result_type(own, *mirrored)
    if buffer is None or buffer.shape != shape or buffer.dtype != dtype:
        buffer = np.empty(shape, dtype)
    return np.concatenate([own, *mirrored], out=buffer)


def _run_here(graph, program, data, max_iter, timeout, staleness=0):
    """The supersteps of a graph held in this process: one thread per partition, the same
    loop, messages through in-process mailboxes."""

    def run(rank, part, block, peer):
        program_ = copy.copy(program)
        return _iterate(part, program_, block, peer, rank, max_iter, None, staleness=staleness)

    outcomes = in_threads(graph, data, timeout, run)
    return SuperstepResult(outcomes, outcomes[0][1], outcomes[0][2], graph)


def in_threads(graph, blocks, timeout, run):
    """``run(rank, partition, block, peer)`` for every partition of a graph held in this
    process, one thread each, *peer* its in-process mailboxes (:class:`LocalPeers`); a
    failing partition tells the others and its own error is raised. Every graph run
    without a client goes through here."""
    from concurrent.futures import ThreadPoolExecutor

    boxes = [_direct.Mailbox() for _ in graph.partitions]
    peers = [LocalPeers(boxes, rank, timeout) for rank in range(len(boxes))]
    failed, lock = [], threading.Lock()

    def one(rank):
        block = blocks[rank]
        block = block.compute(scheduler="sync") if hasattr(block, "compute") else block
        try:
            return run(rank, graph.partitions[rank], block, peers[rank])
        except BaseException as error:
            with lock:
                failed.append(error)  # the first is the cause; the others follow the abort
            peers[rank].abort(f"partition {rank} failed: {type(error).__name__}: {error}")
            raise

    with ThreadPoolExecutor(len(boxes)) as pool:
        running = [pool.submit(one, rank) for rank in range(len(boxes))]
    if failed:
        raise failed[0]
    return [future.result() for future in running]


class LocalPeers:
    """The collective of partitions run as threads of this process: what
    :class:`~taskdml.parallel.collective._direct.DirectAllReduce` offers the supersteps
    (``send``, ``receive``, ``allreduce_sum``), on one mailbox per rank."""

    def __init__(self, boxes, rank, timeout):
        self.boxes, self.rank, self.timeout = boxes, rank, timeout

    def send(self, peer, tag, value):
        """Put *value* in rank *peer*'s mailbox under *tag*."""
        self.boxes[peer].put(self.rank, {"tag": tag, "value": value})

    def receive(self, sender, tag):
        """The value rank *sender* sent under *tag* (raises if a rank failed)."""
        message = self.boxes[self.rank].take(sender, tag, self.timeout)
        if message is None:
            raise TimeoutError(f"partition {self.rank}: nothing from {sender} in {self.timeout} s")
        return message["value"]

    def poll(self, sender, tag):
        """The value rank *sender* sent under *tag* if it came, else ``None`` (no wait)."""
        message = self.boxes[self.rank].take(sender, tag, 0)
        return None if message is None else message["value"]

    def receive_newest(self, sender, oldest, newest):
        """The newest value rank *sender* sent under an int tag in ``oldest .. newest``, and
        its tag (the older ones are dropped); waits while there is none."""
        found = self.boxes[self.rank].take_newest(sender, _int_tag, oldest, newest, self.timeout)
        if found is None:
            raise TimeoutError(f"partition {self.rank}: nothing from {sender} in {self.timeout} s")
        return found[0]["value"], found[1]

    def allreduce_sum(self, tag, rank, values):
        """Every rank's *values*, summed in rank order (each rank sends its own to all)."""
        values = np.asarray(values, dtype=float)
        for peer in range(len(self.boxes)):
            if peer != rank:
                self.send(peer, ("sum", tag), values)
        total = np.zeros(len(values))
        for peer in range(len(self.boxes)):
            total = total + (values if peer == rank else self.receive(peer, ("sum", tag)))
        return total

    def abort(self, message):
        """Make every rank raise at its next wait."""
        for box in self.boxes:
            box.fail(message)


def _int_tag(tag):
    return tag if isinstance(tag, int) else None


def _measured(program):
    """The ``measure`` field of a ``superstep`` event: the field its pictures plot and what
    it is in words (none for a program without measures)."""
    if not program.measure_names:
        return {}
    return {"measure": [program.measure_names[0], program.measure_label]}


def _check_direct(client, workers):
    """Raise unless every worker in *workers* can receive direct messages."""
    reason = _direct.unavailable(client, workers)
    if reason is not None:
        raise RuntimeError(f"graph supersteps message the workers directly, but {reason}.")


# -- checkpoints and lost workers (see the module docstring) --------------------------------


def _state(outcome):
    """What a segment's task hands the next: its raw values and the last totals."""
    return outcome[0], outcome[-1]


class Segments:
    """A run on a cluster in segments between checkpoints, going on after lost workers: the
    loop of every graph run that checkpoints (the vertex programs' :class:`_Run`, and the
    bipartite algorithms of :mod:`taskdml.graph._factorize` and
    :mod:`taskdml.graph._logistic`).

    A subclass says how to :meth:`submit` the tasks of supersteps ``first .. stop - 1``
    (``start``: per partition, the previous segment's outcome future, a checkpointed state
    scattered to its worker, or ``None`` from the start), and may change :attr:`summary`
    (an outcome's ``(history, converged)``) and :attr:`state` (what of an outcome is
    checkpointed and starts the next segment). *token* names what the checkpoint holds: a
    run only goes on from a checkpoint of the same token. The graph must offer ``client``,
    ``workers`` and ``repartitioned()``.
    """

    summary = staticmethod(operator.itemgetter(1, 2))
    state = staticmethod(_state)

    def __init__(self, graph, max_iter, every, token):
        self.graph, self.max_iter, self.token = graph, max_iter, token
        self.checkpoints = _checkpoint.claim()  # None outside a pipeline step
        if every == "auto":
            every = CHECKPOINT_EVERY if self.checkpoints is not None else None
        self.every = every
        saved = self.checkpoints.load() if self.checkpoints is not None else None
        self.kept = saved if isinstance(saved, dict) and saved.get("token") == token else None
        self.resumed_from = None if self.kept is None else self.kept["superstep"]

    def submit(self, graph, first, stop, start):
        """The futures of the tasks of supersteps ``first .. stop - 1`` on *graph*, one per
        partition, and their collective (:func:`pinned_tasks`)."""
        raise NotImplementedError

    def run(self):
        """``(outcomes, history, converged, graph, restarts)`` of the whole run: the last
        segment's futures, the histories of all, and the graph they ran on."""
        client, restarts = self.graph.client, []
        first, history, start = self._from_kept()
        while True:
            stop = self.max_iter
            if self.every:
                stop = min(self.max_iter, (first // self.every + 1) * self.every)
            graph = self.graph
            outcomes, collective = self.submit(graph, first, stop, start)
            gone = _lost(client, outcomes, graph.workers)
            if gone:
                _stop(client, outcomes, collective, graph.workers, gone)
                if len(restarts) >= MAX_RESTARTS:
                    raise ConnectionError(
                        f"graph supersteps lost workers {len(restarts) + 1} times (last: "
                        f"{sorted(gone)}); the workers' logs say why they ended."
                    )
                self.graph = graph.repartitioned()  # on the workers left
                first, history, start = self._from_kept()
                restarts.append({"superstep": first, "workers": sorted(gone)})
                continue
            _raise_the_cause(outcomes)
            segment, converged = client.submit(self.summary, outcomes[0], pure=False).result()
            history = history + segment
            if converged or stop >= self.max_iter:
                break
            first, start = stop, outcomes
            self._keep(client, outcomes, first, history)
        return outcomes, history, converged, graph, restarts

    def _from_kept(self):
        """Where the run starts (again): the first superstep, the history so far and the
        partitions' states (``None``: from the start)."""
        if self.kept is None:
            return 0, [], None
        client, workers = self.graph.client, self.graph.workers
        start = [
            scatter(client, [state], workers=[worker], hash=False)[0]
            for state, worker in zip(self.kept["states"], workers)
        ]
        return self.kept["superstep"], list(self.kept["history"]), start

    def _keep(self, client, outcomes, superstep, history):
        """Take a checkpoint before *superstep* (a copy here, and in the store in a step)."""
        if not self.every:
            return
        states = client.gather([client.submit(self.state, o, pure=False) for o in outcomes])
        self.kept = {
            "token": self.token,
            "superstep": superstep,
            "states": states,
            "history": list(history),
        }
        if self.checkpoints is not None:
            self.checkpoints.save(self.kept)


def check_every(checkpoint_every):
    """Raise unless *checkpoint_every* is a positive int, ``"auto"`` or ``None``."""
    if checkpoint_every not in ("auto", None) and not (
        isinstance(checkpoint_every, int) and checkpoint_every >= 1
    ):
        raise ValueError(
            f"checkpoint_every must be a positive int, 'auto' or None; got {checkpoint_every!r}."
        )


class _Run(Segments):
    """A vertex program's run on a cluster (:func:`run_supersteps`), in :class:`Segments`."""

    def __init__(self, graph, program, data, max_iter, timeout, every, staleness=0):
        from dask.base import tokenize

        self.program, self.data = program, data
        self.timeout, self.staleness = timeout, staleness
        # the step's cache key names the graph and the data; a checkpoint also says which
        # program and vertex ranges it holds the values of
        token = tokenize(
            type(program).__qualname__,
            vars(program),
            np.asarray(graph.bounds).tolist(),
            graph.directed,
            *([staleness] if staleness else []),  # a BSP run's token as it was
            ensure_deterministic=False,
        )
        super().__init__(graph, max_iter, every, token)
        if self.every and staleness >= self.every:
            raise ValueError(
                f"checkpoint_every ({self.every}) must exceed staleness ({staleness}): a "
                "segment decides to stop from staleness + 1 of its supersteps' measures."
            )

    def submit(self, graph, first, stop, start):
        return _submit(
            graph, self.program, self.data, self.timeout, self.max_iter, first, stop, start,
            self.staleness,
        )  # fmt: skip

    def run(self):
        """The :class:`SuperstepResult` of the whole run."""
        outcomes, history, converged, graph, restarts = super().run()
        return SuperstepResult(outcomes, history, converged, graph, self.resumed_from, restarts)


def _lost(client, outcomes, workers):
    """Wait for a segment's tasks; the set of its workers that left, or ``None`` once every
    task ended (or one failed for another reason)."""
    from distributed import wait

    expected = set(workers)
    noticed = None
    while True:
        try:
            with client.as_current():
                wait(outcomes, timeout=WATCH_S)
        except TimeoutError:
            pass
        gone = expected - set(client.nthreads())
        if gone:
            return gone
        if all(outcome.done() for outcome in outcomes):
            return None
        if any(outcome.status == "error" for outcome in outcomes):
            # a peer's worker died: the scheduler may learn of it after the partitions do
            noticed = noticed or time.monotonic()
            if time.monotonic() - noticed > LOSS_NOTICE_S:
                return None


def _stop(client, outcomes, collective, workers, gone):
    """Stop the tasks of a segment that lost the workers *gone*."""
    import contextlib

    client.cancel(outcomes)
    live = sorted(set(workers) - set(gone))
    with contextlib.suppress(Exception):
        message = f"the workers {sorted(gone)} left the cluster"
        client.run(_direct.abort_training, collective.training, message, workers=live)
