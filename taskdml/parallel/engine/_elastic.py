"""Elastic sync training: workers may join and leave while a training runs.

A sync training on a cluster runs in *segments*. A segment is one submission of the
replicas; it ends when the training is over, or after a round at which some replica asked to
stop: every reduce carries each replica's wish, and every replica receives all of them, so
all stop after the same round with the same global state (see
:func:`taskdml.parallel.engine._replica._sync_replica`). Each replica reports what is left of the
epoch it stopped in. Between segments the client re-plans from the workers there are now:

- **a worker joined** (``adapt``, or by hand): while a segment runs the client looks at the
  workers every :data:`WATCH_S` seconds and, when the training may use more of them (no
  ``workers`` or ``n_replicas`` given), asks the replicas to stop (:func:`request`, a flag
  in each replica's worker process, read once a round). The next segment has a replica on
  every worker; the chunks left of the epoch are dealt out again (chunk ``i`` to replica
  ``i mod R``), and later epochs follow ``i mod R`` with the new ``R``.
- **a worker left** (or died): its replica is gone, and the others fail their next exchange
  with it, or are told to stop (:func:`taskdml.parallel.collective._direct.abort_training`). The
  segment is dropped and the training continues from the last segment's end, without that
  worker: at most :data:`CHECKPOINT_S` seconds of training are repeated, because rank 0 asks
  for a segment to end after that long (the client then holds the global state).
  Persisted chunks that were only on the lost worker are computed again from their graph;
  streamed ones are read by whichever replica now owns them.

The merges stay weighted by the rows each replica saw in a round, whatever the number of
replicas. Every re-plan is recorded: ``TrainResult.stats["replans"]`` and the ``replans`` of
the history entry of the epoch it happened in (``epoch``, ``reason``: ``"joined"`` or
``"left"``, ``workers`` and ``replicas`` after it, ``repeated_s`` the training time lost).
A segment that ends at a checkpoint, with the same workers, continues exactly as if it had
not stopped: a fixed cluster gives the same estimator for a seed and ``R`` as before.
"""

import threading

CHECKPOINT_S = 60.0
"""Seconds of training after which a segment ends at the next round (see above); the dask
config ``taskdml.elastic.checkpoint-s`` overrides it."""

WATCH_S = 1.0
"""How often the client looks at the cluster's workers while a segment runs."""

_REQUESTED = set()  # trainings (segment ids) asked to stop, in this worker process
_REQUESTED_LOCK = threading.Lock()


def checkpoint_seconds():
    """:data:`CHECKPOINT_S`, or the dask config ``taskdml.elastic.checkpoint-s``."""
    import dask

    return float(dask.config.get("taskdml.elastic.checkpoint-s", CHECKPOINT_S))


def request(training):
    """Ask the replicas of *training* in this process to stop after their next round (run
    on the workers by ``Client.run``)."""
    with _REQUESTED_LOCK:
        _REQUESTED.add(training)
        while len(_REQUESTED) > 1000:  # the ids of segments long over
            _REQUESTED.pop()


def requested(training):
    """Whether *training* was asked to stop (a set lookup, once a round)."""
    return training in _REQUESTED


def deal(chunks, left, n_replicas):
    """The chunks left of an epoch dealt to *n_replicas* replicas: chunk ``i`` to replica
    ``i mod n_replicas``, in index order (*left*: their indices)."""
    by_index = {chunk.index: chunk for chunk in chunks}
    return [
        [by_index[i] for i in sorted(left) if i % n_replicas == rank] for rank in range(n_replicas)
    ]


class Watch:
    """Wait for a segment's replica tasks, looking at the cluster meanwhile.

    Parameters
    ----------
    client : distributed.Client
    tasks : list of Future
        The replicas.
    addresses : list of str
        Their workers.
    may_grow : callable or None
        ``may_grow(workers)`` is true when the training would use more of *workers* (the
        current ones) than it has; then the replicas are asked to stop once.
    training : str
        The segment's id, for :func:`request`.
    every : callable, optional
        Called each time the client looks (an async training keeps a copy of its parameter
        server's state this way).
    """

    def __init__(self, client, tasks, addresses, may_grow, training, every=None):
        self.client, self.tasks, self.addresses = client, tasks, set(addresses)
        self.may_grow, self.training, self.every = may_grow, training, every
        self.changed = threading.Event()
        for task in tasks:
            task.add_done_callback(lambda _: self.changed.set())

    def wait(self):
        """``None`` once every replica finished or one failed, or the set of the training's
        workers that left."""
        asked = False
        while not all(task.done() for task in self.tasks):
            self.changed.wait(WATCH_S)
            self.changed.clear()
            if all(task.done() for task in self.tasks):
                break  # every replica ended: no need to ask the scheduler (a round trip)
            workers = set(self.client.nthreads())
            gone = self.addresses - workers
            if gone:
                return gone
            if any(task.status == "error" for task in self.tasks):
                return None
            if not asked and self.may_grow is not None and self.may_grow(workers):
                self.client.run(request, self.training, workers=sorted(self.addresses))
                asked = True
            if self.every is not None:
                self.every()
        return None
