"""Supersteps where the partitions live: one long-running task per partition, BSP.

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

A graph partitioned without a client (small graphs, tests, a laptop) runs the very same
loop in one thread per partition of this process, its messages going through in-process
mailboxes (:class:`LocalPeers`) instead of the workers' comms.
"""

import copy
import dataclasses
import operator
import threading
import time

import numpy as np

from taskdml import _events, _keys
from taskdml.graph._program import gather
from taskdml.parallel.collective import _direct


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
    """

    outcomes: list
    history: list
    converged: bool
    graph: object

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


def run_supersteps(graph, program, data=None, *, max_iter=100, timeout=600.0):
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

    Returns
    -------
    SuperstepResult
    """
    import dask

    client = graph.client
    if data is None:
        data = [None] * graph.n_partitions
    if len(data) != graph.n_partitions:
        raise ValueError(
            f"data must have one block per partition ({graph.n_partitions}); got {len(data)}."
        )
    if client is None:
        return _run_here(graph, program, data, max_iter, timeout)
    _check_direct(client, graph.workers)
    collective = _direct.DirectAllReduce(graph.workers, timeout=timeout)
    name = _keys.key_name(
        "graph", graph.name, type(program).__name__, collective.training, phase="superstep"
    )
    tags = _events.where()
    task = dask.delayed(superstep_task, pure=False)
    tasks = []
    for rank, (partition, block, worker) in enumerate(zip(graph.partitions, data, graph.workers)):
        with dask.annotate(workers=[worker], allow_other_workers=False):
            tasks.append(
                task(
                    partition,
                    program,
                    block,
                    collective,
                    rank,
                    int(max_iter),
                    tags,
                    dask_key_name=(name, rank),
                )
            )
    outcomes = client.compute(tasks)
    _raise_the_cause(outcomes)
    summary = client.submit(operator.itemgetter(1, 2), outcomes[0], pure=False)
    history, converged = summary.result()
    return SuperstepResult(outcomes, history, converged, graph)


def _raise_the_cause(outcomes):
    """Wait for every partition; if some failed, raise the error of the one that failed
    first (the others only say that it did)."""
    from distributed import wait

    wait(outcomes)
    errors = [outcome.exception() for outcome in outcomes if outcome.status == "error"]
    followers = [e for e in errors if str(e).startswith("another replica failed")]
    if errors:
        raise next((e for e in errors if e not in followers), errors[0])


def superstep_task(partition, program, data, collective, rank, max_iter, tags):
    """One partition's task: every superstep of *program* on *partition* (see the module
    docstring); returns ``(values, history, converged)``."""
    from distributed import secede

    secede()  # partitions wait on each other: none may hold a thread another one needs
    program = copy.copy(program)  # its per-partition state is its own, even on one worker
    collective.join(rank)
    try:
        outcome = _iterate(partition, program, data, collective, rank, max_iter, tags)
    except BaseException as error:
        collective.abort(f"partition {rank} failed: {type(error).__name__}: {error}")
        raise
    finally:
        collective.leave(rank)
    return outcome


def _iterate(part, program, data, collective, rank, max_iter, tags):
    values = program.init(part, data)
    totals = collective.allreduce_sum("init", rank, program.measures(part, None, values))
    history, converged = [], False
    neighbours = sorted(part.mirrors)
    columns = None  # the gather's input, reused from superstep to superstep
    for superstep in range(max_iter):
        began = time.perf_counter()
        sent = program.message(part, values)
        for peer, indices in part.sends.items():
            collective.send(peer, superstep, sent[indices])
        exchanging = time.perf_counter()
        mirrored = [collective.receive(q, superstep) for q in neighbours]
        computing = time.perf_counter()
        columns = _columns(columns, sent, mirrored)
        new = program.apply(part, values, gather(program, part, columns), totals)
        measures = program.measures(part, values, new)
        reducing = time.perf_counter()
        totals = collective.allreduce_sum(superstep, rank, measures)
        values, done = new, time.perf_counter()
        entry = {
            "superstep": superstep,
            **{k: float(v) for k, v in zip(program.measure_names, totals)},
            "seconds": done - began,
            "exchange_s": (computing - exchanging) + (done - reducing),
        }
        history.append(entry)
        if rank == 0:
            _events.publish_from(tags, "superstep", **entry)
        if program.converged(totals, superstep):
            converged = True
            break
    return program.result(part, values), history, converged


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


def _run_here(graph, program, data, max_iter, timeout):
    """The supersteps of a graph held in this process: one thread per partition, the same
    loop, messages through in-process mailboxes."""
    from concurrent.futures import ThreadPoolExecutor

    boxes = [_direct.Mailbox() for _ in graph.partitions]
    peers = [LocalPeers(boxes, rank, timeout) for rank in range(len(boxes))]

    def run(rank):
        block = data[rank]
        block = block.compute(scheduler="sync") if hasattr(block, "compute") else block
        try:
            return _iterate(
                graph.partitions[rank], copy.copy(program), block, peers[rank], rank, max_iter, None
            )
        except BaseException as error:
            with lock:
                failed.append(error)  # the first is the cause; the others follow the abort
            peers[rank].abort(f"partition {rank} failed: {type(error).__name__}: {error}")
            raise

    failed, lock = [], threading.Lock()
    with ThreadPoolExecutor(len(boxes)) as pool:
        running = [pool.submit(run, rank) for rank in range(len(boxes))]
    if failed:
        raise failed[0]
    outcomes = [future.result() for future in running]
    return SuperstepResult(outcomes, outcomes[0][1], outcomes[0][2], graph)


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


def _check_direct(client, workers):
    """Raise unless every worker in *workers* can receive direct messages."""
    reason = _direct.unavailable(client, workers)
    if reason is not None:
        raise RuntimeError(f"graph supersteps message the workers directly, but {reason}.")
