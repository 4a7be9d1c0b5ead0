"""Coordination of replicas that train at the same time: an all-reduce and a parameter server.

Both live in one of two forms with the same logic:

- on a cluster, as a **Dask actor** on one worker, whose ``async`` methods wait on
  ``asyncio`` conditions: long-running replica tasks call them worker-to-worker, so a round
  never goes through the client or the scheduler (about 3–4 ms a round here, against about
  25 ms for a round the client drives);
- without a cluster, as a plain object whose blocking methods wait on a ``threading``
  condition, for replicas run as threads in one process.

Whichever it is, the engine and the replicas call it the *collective* and reach its methods
through :func:`call`; on a cluster the engine also keeps the actor's future (``actor_future``),
which keeps the actor alive until the training ends.

The state each holds is in a small plain class (``_Rounds``, ``_ServerState``) that both forms
share, so the arithmetic is written once. Merges always combine replicas in rank order,
whatever order they arrive in, which makes synchronous training deterministic.
"""

import asyncio
import copy
import threading
import time

from taskdml.parallel.merge._registry import merge_replicas, restart_from
from taskdml.parallel.merge._stopping import stop_reason


class _Rounds:
    """Rounds of an all-reduce: replicas contribute, the merge is computed once per round.

    What is ready to be taken (a round's merge under ``("reduce", round_id)``, rank 0's
    broadcast value under ``("broadcast", tag)``) stays in ``ready`` until every replica took
    it."""

    def __init__(self, n_replicas, rule):
        self.n_replicas, self.rule = n_replicas, rule
        self.pending = {}
        self.ready = {}
        self.served = {}
        self.failed = None

    def contribute(self, round_id, rank, replica, rows, info):
        entries = self.pending.setdefault(round_id, {})
        entries[rank] = (replica, rows, info)
        if len(entries) == self.n_replicas:
            ranked = [entries[rank] for rank in sorted(self.pending.pop(round_id))]
            self.ready["reduce", round_id] = (
                merge_ranked([(r, n) for r, n, _ in ranked], self.rule),
                [i for _, _, i in ranked],
            )
            return True
        return False

    def share(self, tag, rank, value):
        """Rank 0 leaves *value* under *tag*; whether it did."""
        if rank == 0:
            self.ready["broadcast", tag] = value
        return rank == 0

    def take(self, key):
        """What is ready under *key*; it goes once every replica took it."""
        value = self.ready[key]
        self.served[key] = self.served.get(key, 0) + 1
        if self.served[key] == self.n_replicas:
            del self.ready[key], self.served[key]
        return value


def merge_ranked(ranked, rule):
    """Merge one round's ``(replica, rows)`` pairs, given in rank order, leaving out replicas
    that saw no rows: the one merge every collective computes."""
    trained = [(replica, rows) for replica, rows in ranked if rows > 0]
    if not trained:
        return ranked[0][0]
    return merge_replicas(
        [replica for replica, _ in trained], [rows for _, rows in trained], rule=rule
    )


class _ActorCollective:
    """Waiting in an actor: an ``asyncio`` condition, a time limit, and failure propagation."""

    timeout = 600.0

    async def _wait(self, predicate):
        try:
            await asyncio.wait_for(
                self.condition.wait_for(lambda: predicate() or self.failed), self.timeout
            )
        except asyncio.TimeoutError:
            raise TimeoutError(_late(self.timeout)) from None
        if self.failed:
            raise RuntimeError(f"another replica failed: {self.failed}")

    async def abort(self, message):
        """Record that a replica failed and wake everyone waiting."""
        async with self._lock():
            self.failed = self.failed or message
            self.condition.notify_all()

    def _lock(self):
        self.condition = getattr(self, "condition", None) or asyncio.Condition()
        return self.condition


class _LocalCollective:
    """Waiting among threads: a ``threading`` condition, a time limit, failure propagation."""

    timeout = 600.0

    def _wait(self, predicate):
        if not self.condition.wait_for(lambda: predicate() or self.failed, self.timeout):
            raise TimeoutError(_late(self.timeout))
        if self.failed:
            raise RuntimeError(f"another replica failed: {self.failed}")

    def abort(self, message):
        with self.condition:
            self.failed = self.failed or message
            self.condition.notify_all()

    def _lock(self):
        return self.condition


def _late(timeout):
    return (
        f"no progress from the other replicas within {timeout:.0f} s: a worker may have died "
        "or another trial holds the threads they need."
    )


class AllReduceActor(_ActorCollective):
    """The all-reduce as a Dask actor (``client.submit(AllReduceActor, n, actor=True)``)."""

    def __init__(self, n_replicas, rule, timeout=600.0):
        self.rounds, self.timeout, self.condition = _Rounds(n_replicas, rule), timeout, None

    @property
    def failed(self):
        return self.rounds.failed

    @failed.setter
    def failed(self, message):
        self.rounds.failed = message

    async def reduce(self, round_id, rank, replica, rows, info=None):
        """Contribute *replica* (which saw *rows* rows) and *info* (any small value); return
        the round's merge and every replica's *info*, in rank order."""
        async with self._lock():
            if self.rounds.contribute(round_id, rank, replica, rows, info):
                self.condition.notify_all()
            await self._wait(lambda: ("reduce", round_id) in self.rounds.ready)
            return self.rounds.take(("reduce", round_id))

    async def broadcast(self, tag, rank, value=None):
        """Rank 0's *value* under *tag*, returned to every replica."""
        async with self._lock():
            if self.rounds.share(tag, rank, value):
                self.condition.notify_all()
            await self._wait(lambda: ("broadcast", tag) in self.rounds.ready)
            return self.rounds.take(("broadcast", tag))


class AllReduceLocal(_LocalCollective):
    """The all-reduce for replicas running as threads of one process."""

    def __init__(self, n_replicas, rule, timeout=600.0):
        self.rounds, self.timeout = _Rounds(n_replicas, rule), timeout
        self.condition = threading.Condition()

    failed = AllReduceActor.failed

    def reduce(self, round_id, rank, replica, rows, info=None):
        with self.condition:
            if self.rounds.contribute(round_id, rank, replica, rows, info):
                self.condition.notify_all()
            self._wait(lambda: ("reduce", round_id) in self.rounds.ready)
            return self.rounds.take(("reduce", round_id))

    def broadcast(self, tag, rank, value=None):
        with self.condition:
            if self.rounds.share(tag, rank, value):
                self.condition.notify_all()
            self._wait(lambda: ("broadcast", tag) in self.rounds.ready)
            return self.rounds.take(("broadcast", tag))


class _ServerState:
    """Parameter-server state: the global estimator, versions, and stale-synchronous clocks.

    A replica's clock counts the chunks it has pushed. It may pull while it is at most
    ``staleness`` ahead of the slowest replica still training (``None``: never held back).
    A push merges the replica with the current global estimator as two replicas that
    started from the version the replica pulled: the global side weighted by the rows
    it absorbed since then, the replica by its chunk's rows. A fresh push (nothing absorbed
    since) simply becomes the global estimator. ``behind`` records, per push, how many
    versions were merged between the replica's pull and its push, ``pushes`` which replica
    pushed and the version it had pulled, in the order the pushes were merged.
    """

    def __init__(self, start, n_replicas, staleness, rule, stopping=None, chunks_per_epoch=0):
        self.rule = rule
        self.estimator, self.version, self.rows = start, 0, 0
        self.rows_at = {0: 0}
        self.clocks = dict.fromkeys(range(n_replicas), 0)
        self.done = set()
        self.staleness = staleness
        self.waited = dict.fromkeys(range(n_replicas), 0.0)
        self.behind = []  # per push: versions merged since the replica pulled
        self.pushes = []  # per push, in merge order: (rank, version it pulled)
        # Per epoch, the pushes' progressive loss; the epochs complete, and the first epoch
        # the rule (a merge._stopping.Stopping) says not to train.
        self.stopping, self.chunks_per_epoch = stopping, chunks_per_epoch
        self.progress, self.history, self.stop_epoch = {}, [], None

    def may_pull(self, rank):
        if self.staleness is None:
            return True
        active = [clock for other, clock in self.clocks.items() if other not in self.done]
        return self.clocks[rank] - min(active) <= self.staleness

    def pull(self):
        """``(global estimator, version, stop epoch)``: a replica trains no chunk of an
        epoch at or after the stop epoch (None: go on)."""
        self.rows_at[self.version] = self.rows
        return self.estimator, self.version, self.stop_epoch

    def push(self, rank, replica, version, rows, progress=None):
        self.behind.append(self.version - version)
        self.pushes.append((rank, version))
        absorbed = self.rows - self.rows_at[version]
        if absorbed == 0:
            self.estimator = merge_replicas([replica], [rows], rule=self.rule)
        else:
            ahead = restart_from(self.estimator, replica)
            self.estimator = merge_replicas([ahead, replica], [absorbed, rows], rule=self.rule)
        self.version += 1
        self.rows += rows
        self.clocks[rank] += 1
        self._forget()
        if progress is not None:
            self._progress(*progress)

    def _progress(self, epoch, loss, rows):
        """Add a chunk's progressive loss to its epoch (0-based); once the epoch has all its
        chunks, record it and ask the rule whether to stop after it. Replicas train their
        chunks epoch by epoch, so epochs complete in order."""
        part = self.progress.setdefault(epoch, [0.0, 0, 0])
        if loss is not None:
            part[0], part[1] = part[0] + loss, part[1] + rows
        part[2] += 1
        if self.stopping is None or part[2] != self.chunks_per_epoch:
            return
        entry = {"epoch": epoch + 1}
        if part[1]:
            entry["train_loss"] = part[0] / part[1]
        self.history.append(entry)
        if self.stop_epoch is None and stop_reason(self.history, self.stopping):
            self.stop_epoch = epoch + 1

    def finish(self, rank):
        self.done.add(rank)

    def snapshot(self):
        """A copy of the global estimator and, per replica, how many chunks it pushed: a
        training whose server is lost continues from it (the engine keeps the last one)."""
        return copy.deepcopy(self.estimator), dict(self.clocks), self.version

    def _forget(self):
        """Drop the row counts of versions no replica can still push against."""
        if len(self.rows_at) > 4 * len(self.clocks) + 16:
            for version in sorted(self.rows_at)[: len(self.rows_at) // 2]:
                self.rows_at.pop(version)


class ParameterServerActor(_ActorCollective):
    """The parameter server as a Dask actor."""

    def __init__(
        self, start, n_replicas, staleness, rule, timeout=600.0, stopping=None, chunks_per_epoch=0
    ):
        self.state = _ServerState(start, n_replicas, staleness, rule, stopping, chunks_per_epoch)
        self.timeout = timeout
        self.condition = None
        self.failed = None

    async def pull(self, rank):
        """Return ``(global estimator, version)`` once *rank* is within the staleness bound."""
        started = time.perf_counter()
        async with self._lock():
            await self._wait(lambda: self.state.may_pull(rank))
            self.state.waited[rank] += time.perf_counter() - started
            return self.state.pull()

    async def push(self, rank, replica, version, rows, progress=None):
        async with self._lock():
            self.state.push(rank, replica, version, rows, progress)
            self.condition.notify_all()

    async def finish(self, rank):
        async with self._lock():
            self.state.finish(rank)
            self.condition.notify_all()

    async def snapshot(self):
        """:meth:`_ServerState.snapshot`, between two pushes."""
        async with self._lock():
            return self.state.snapshot()

    def result(self):
        """The global estimator, its version, the seconds each replica was held back, how
        many versions behind each push was, each push's ``(rank, version pulled)``, and the
        epochs completed (``epoch``, ``train_loss``)."""
        state = self.state
        return (
            copy.deepcopy(state.estimator), state.version, dict(state.waited),
            list(state.behind), list(state.pushes), list(state.history),
        )  # fmt: skip


class ParameterServerLocal(_LocalCollective):
    """The parameter server for replicas running as threads of one process."""

    def __init__(
        self, start, n_replicas, staleness, rule, timeout=600.0, stopping=None, chunks_per_epoch=0
    ):
        self.state = _ServerState(start, n_replicas, staleness, rule, stopping, chunks_per_epoch)
        self.timeout = timeout
        self.condition, self.failed = threading.Condition(), None

    def pull(self, rank):
        started = time.perf_counter()
        with self.condition:
            self._wait(lambda: self.state.may_pull(rank))
            self.state.waited[rank] += time.perf_counter() - started
            return self.state.pull()

    def push(self, rank, replica, version, rows, progress=None):
        with self.condition:
            self.state.push(rank, replica, version, rows, progress)
            self.condition.notify_all()

    def finish(self, rank):
        with self.condition:
            self.state.finish(rank)
            self.condition.notify_all()

    result = ParameterServerActor.result


class Handed:
    """An actor handed to a task without making the task depend on the actor's key.

    dask reads an ``Actor`` among a task's arguments as a dependency on the actor's key. When
    the actor's worker dies, the scheduler marks every task depending on it as erred and
    forgets where they run, without telling their workers, which go on executing them. The
    chunks a replica task read (copied to its worker) then look unused to the scheduler, whose
    active memory manager drops the copy; the worker, still executing the replica, refuses
    ("Cannot remove replica of ... while ... in state 'executing'") with an error that ends
    its connection, and the worker shuts down. Handed this way, the replicas stay what the
    scheduler believes: processing until they end or the engine cancels them, which their
    workers are told. The actor is built again in the task from what pickling it keeps (its
    class, worker and key), as dask builds it for a dependency.
    """

    def __init__(self, actor):
        self.rebuild = actor.__reduce__()

    def received(self):
        """The actor, in the task that got it."""
        function, args = self.rebuild
        return function(*args)


def handed(collective):
    """*collective* as a task's argument: an actor :class:`Handed`, anything else as it is."""
    from distributed import Actor

    return Handed(collective) if isinstance(collective, Actor) else collective


def received(collective):
    """The collective a task got through :func:`handed`."""
    return collective.received() if isinstance(collective, Handed) else collective


def call(collective, method, *args, stop=None):
    """Call *method* of a collective, an actor (waiting for its result) or a local object alike.

    With *stop* (a callable), the wait for an actor looks at ``stop()`` every
    :data:`STOP_POLL_S` seconds and raises :class:`TrainingStopped` once it is true: a call
    to an actor whose worker died may never return (distributed leaves its future unset when
    the actor's own future is cancelled), so the engine tells the replicas to stop instead.
    """
    result = getattr(collective, method)(*args)
    if not (hasattr(result, "result") and callable(result.result)):
        return result
    while stop is not None:
        try:
            return result.result(timeout=STOP_POLL_S)
        except (TimeoutError, asyncio.TimeoutError):
            if stop():
                raise TrainingStopped(
                    f"the training was stopped while this replica waited for {method}: a "
                    "worker it needs left the cluster"
                ) from None
    return result.result()


STOP_POLL_S = 1.0
"""How often a replica waiting for an actor looks whether it was asked to stop."""


class TrainingStopped(RuntimeError):
    """A replica stopped waiting for its collective because the engine asked it to."""
