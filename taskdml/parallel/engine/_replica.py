"""What one replica does: the long-running task of a worker in sync or async training.

A replica task receives every chunk its worker trains on (they are already in that
worker's memory), the global starting estimator, the training plan
(:class:`~taskdml.parallel.engine._train.TrainingPlan`), and the *collective* it coordinates
through: the all-reduce (sync) or the parameter server (async), a Dask actor or a local
object (:mod:`taskdml.parallel.collective._server`). It then trains for all epochs without
returning to the client. Functions here are pure apart from those calls, and run the same in
a Dask task or a thread.
"""

import contextlib
import copy
import functools
import time

from taskdml._apply import transform_chunk
from taskdml._events import ROUND_EVERY_S, publish_from
from taskdml.parallel.collective._server import call
from taskdml.parallel.engine._elastic import requested
from taskdml.parallel.engine._period import Period
from taskdml.parallel.engine._stream import read_ahead, read_chunk
from taskdml.parallel.engine._tasks import epoch_order, fit_chunk
from taskdml.parallel.merge._registry import handed_back, prepare_start
from taskdml.parallel.merge._stopping import stop_reason


def _fit_chunk(estimator, chunk, plan, epoch):
    """``partial_fit`` *estimator* in place on one :class:`~taskdml.parallel.engine._chunks.Chunk`;
    return the rows it saw and its loss before the update, when the training stops on the
    training loss (``(rows, None)`` otherwise)."""
    return fit_chunk(
        estimator,
        chunk.X,
        chunk.y,
        plan.transformers,
        plan.fit_kwargs,
        chunk.weight,
        row_seed(plan, epoch, chunk.index),
        loss=plan.stopping.loss if plan.stopping.on == "train_loss" else None,
    )


class Progress:
    """The summed progressive loss of an epoch and the rows it covers (rows trained on
    before the model was fitted have no loss and are not counted)."""

    def __init__(self):
        self.loss, self.rows = 0.0, 0

    def add(self, rows, loss):
        if loss is not None:
            self.loss, self.rows = self.loss + loss, self.rows + rows

    @staticmethod
    def mean(parts):
        """``{"train_loss": mean}`` over ``(loss, rows)`` *parts* of the replicas, or ``{}``."""
        rows = sum(part[1] for part in parts)
        return {"train_loss": sum(part[0] for part in parts) / rows} if rows else {}


def row_seed(plan, epoch, index):
    """The seed that permutes chunk *index*'s rows in *epoch*, or ``None`` without
    ``shuffle_rows``: the same for every strategy."""
    return [plan.seed, epoch, index, 1] if plan.shuffle_rows else None


@contextlib.contextmanager
def _coordinated(collective, rank, stop=None):
    """A replica's time in the collective: it joins at the start and leaves at the end (for
    the collectives that keep per-replica state), and if it fails it tells the others
    instead of letting them wait for it (unless *stop*, see
    :func:`~taskdml.parallel.collective._server.call`, says the engine stopped them all). Yields a
    dict that receives the collective's timings of this replica when it leaves, and its start
    and end (``time.time``)."""
    join, leave = (getattr(type(collective), name, None) for name in ("join", "leave"))
    timings = {"started": time.time()}
    if join is not None:
        join(collective, rank)
    try:
        yield timings
    except Exception as error:
        with contextlib.suppress(Exception):
            message = f"replica {rank}: {type(error).__name__}: {error}"
            if stop is None or not stop():
                call(collective, "abort", message, stop=stop)
        if leave is not None:
            with contextlib.suppress(Exception):
                leave(collective, rank)
        raise
    if leave is not None:
        timings.update(leave(collective, rank))
    timings["ended"] = time.time()


def sync_replica(rank, estimator, chunks, collective, plan, resume=None):
    """See :func:`_sync_replica`. In a training's first segment rank 0 prepares the start on
    its first block and broadcasts it; a later segment (``plan.resumed``) continues from
    *estimator*, the global state where the last one stopped. A failure here is passed on to
    the other replicas."""
    with _coordinated(collective, rank) as timings:
        start = estimator
        if not plan.resumed:
            start = None
            if rank == 0:
                first = read_chunk(chunks[0])
                classes = plan.fit_kwargs.get("classes")
                start = prepare_start(estimator, first.X, first.y, classes, rule=plan.rule)
            start = call(collective, "broadcast", "start", rank, start)
        state, history, stats = _sync_replica(rank, start, chunks, collective, plan, resume)
    return state, history, {**stats, **timings}


def _sync_replica(rank, start, chunks, collective, plan, resume=None):
    """Train one replica synchronously; rank 0 returns ``(estimator, history, stats)``.

    Each round the replica copies the global estimator, ``partial_fit``\\s its next blocks
    (``plan.sync_every`` of them, or as many as the ``"auto"`` period says: see
    :mod:`taskdml.parallel.engine._period`), and all-reduces through *collective*, passing what the
    period needs as the reduce's info. Every replica runs rounds until ``plan.most_blocks``
    blocks of the epoch are done, one with fewer blocks contributing no rows, so all perform
    the same reduces with the same round ids. After an epoch's last round each replica writes
    the epoch's report itself: every one holds the same merged estimator and every replica's
    losses from the last reduce, so all reach the same decision whether to go on (early
    stopping) without a message. With validation data only rank 0 scores, and its report goes
    down the collective's broadcast to the others (a tree of message latencies: 16 worker
    processes on 2 cores spent up to 0.17 s of a 3-epoch call there, ``epoch_end_s``).

    A training runs in *segments* (:mod:`taskdml.parallel.engine._elastic`): this one starts at
    epoch ``plan.first_epoch``, where *resume* (the chunks left of that epoch, in order,
    ``plan.resume_blocks`` at most on any replica) replaces the epoch's own order when the
    last segment stopped inside it. Each reduce also carries whether a re-plan is wanted;
    since every replica receives every replica's wish, all stop after the same round, and
    ``stats["position"]`` says where: ``(epoch, indices of the chunks left of it, rounds of it
    done)``, or ``None`` when the training is over; a resumed epoch counts its rounds on from
    ``plan.rounds_before``.
    """
    state, history, busy, waiting = start, [], 0.0, 0.0
    copying_s, epoch_end_s, log = 0.0, 0.0, []  # log: per round (seconds, rows, chunk indices)
    validation, overhead = plan.validation, None
    period = Period(plan.sync_every, plan.most_blocks, getattr(plan.rule, "min_merges", None))
    if plan.period_state is not None:  # a later segment: no new probe rounds
        period.period, period.inputs, period.probing, period.rounds = plan.period_state
    epochs = range(plan.first_epoch, plan.epochs)
    orders = [
        resume
        if resume is not None and epoch == plan.first_epoch
        else epoch_order(chunks, (plan.seed, epoch, rank), plan.shuffle)
        for epoch in epochs
    ]
    reading = read_ahead([chunk for order in orders for chunk in order], plan.prefetch)
    segment_began, position = time.perf_counter(), None
    published = segment_began  # when rank 0 last published its progress in the epoch
    for epoch, order in zip(epochs, orders):
        epoch_started = time.perf_counter()
        resumed = resume is not None and epoch == plan.first_epoch
        period.most_blocks = plan.resume_blocks if resumed else plan.most_blocks
        period.count = plan.rounds_before if resumed else 0
        done, round_index, progress = 0, 0, Progress()
        while (size := period.blocks(done)) > 0:
            copying = time.perf_counter()
            replica, rows = copy.deepcopy(state), 0
            began = time.perf_counter()
            n_blocks, trained = len(order[done : done + size]), []
            for _ in range(n_blocks):
                chunk = next(reading)
                seen, loss = _fit_chunk(replica, chunk, plan, epoch)
                rows += seen
                progress.add(seen, loss)
                trained.append(chunk.index)
                del chunk  # before the next read: at most prefetch + 1 chunks at once
            reduced = time.perf_counter()
            busy += reduced - began
            copying_s += began - copying
            log.append((reduced - began, rows, trained))
            info = period.info(reduced - began, n_blocks, overhead)
            wish = replan_wanted(plan, rank, reduced - segment_began)
            losses = (progress.loss, progress.rows)
            state, infos = call(
                collective, "reduce", (epoch, round_index), rank, replica, rows,
                (info, wish, losses),
            )  # fmt: skip
            returned = time.perf_counter()
            waiting += returned - reduced
            overhead = (began - copying) + (returned - reduced)
            period.observe([entry[0] for entry in infos])
            done, round_index = done + size, round_index + 1
            if rank == 0 and plan.events is not None and returned - published >= ROUND_EVERY_S:
                published = returned
                publish_from(
                    plan.events, "round", epoch=epoch + 1, epochs=plan.epochs,
                    round=done, of=period.most_blocks, at_most=plan.stopping.on is not None,
                )  # fmt: skip
            if any(entry[1] for entry in infos) and period.blocks(done) > 0:
                position = (epoch, [chunk.index for chunk in order[done:]], period.count)
                break
        if position is not None:
            break
        ending = time.perf_counter()
        facts = period.end_epoch()
        report = None
        if rank == 0 or validation is None:
            report = {
                "epoch": epoch + 1,
                "duration_s": time.perf_counter() - epoch_started,
                **facts,
                **epoch_scores(state, validation, plan),
                **Progress.mean([entry[2] for entry in infos]),
            }
            report["stop"] = stop_reason([*plan.earlier, *history, report], plan.stopping)
        if validation is not None:  # only rank 0 scored: its report decides for all
            report = call(collective, "broadcast", ("epoch", epoch), rank, report)
        epoch_end_s += time.perf_counter() - ending
        history.append(report)
        if rank == 0:
            publish_epoch(plan, report)
        if report.get("stop"):
            break
        if any(entry[1] for entry in infos) and epoch + 1 < plan.epochs:
            position = (epoch + 1, None, 0)
            break
    reading.close()
    stats = {"rank": rank, "busy_s": busy, "reduce_wait_s": waiting, "position": position}
    stats.update(copy_s=copying_s, epoch_end_s=epoch_end_s, round_log=log)
    stats["period_state"] = (period.period, period.inputs, period.probing, period.rounds)
    return (state, history, stats) if rank == 0 else (None, None, stats)


def publish_epoch(plan, entry):
    """Publish an epoch's history entry as an ``epoch`` event (:mod:`taskdml._events`)."""
    if plan.events is None:
        return
    fields = ("epoch", "duration_s", "validation_score", "train_loss", "sync_every", "rounds")
    publish_from(
        plan.events,
        "epoch",
        epochs=plan.epochs,
        at_most=plan.stopping.on is not None,  # epochs is a bound: a rule may stop it earlier
        **{k: entry[k] for k in fields if k in entry},
    )


def replan_wanted(plan, rank, segment_s):
    """Whether this replica asks the others to stop after this round: the client asked its
    worker to (workers joined or left), or rank 0 has run ``plan.checkpoint_s`` in this
    segment (the client then holds the state, and a lost worker costs at most that)."""
    return requested(plan.training) or (rank == 0 and segment_s > plan.checkpoint_s)


def epoch_scores(estimator, validation, plan):
    """Training loss (when the estimator keeps one) and validation score after an epoch, of
    the estimator the training would hand back now (IncrementalPCA truncated)."""
    estimator = handed_back(estimator)
    scores = {}
    if getattr(estimator, "loss_", None) is not None:
        scores["train_loss"] = float(estimator.loss_)
    if validation is not None:
        X, y = validation
        X = transform_chunk(X, plan.transformers)
        scorer = plan.scorer
        scores["validation_score"] = float(
            scorer(estimator, X, y) if scorer else estimator.score(X, y)
        )
    return scores


def async_replica(rank, chunks, collective, plan, epochs=None):
    """Train one replica's chunks against the parameter server *collective* (pull, fit one
    chunk, push): every epoch of *chunks* in :func:`async_order`, or, in a segment that
    continues a training whose server was lost, *chunks* as given, ``chunks[i]`` in epoch
    ``epochs[i]``."""
    items = async_order(rank, chunks, plan) if epochs is None else list(zip(epochs, chunks))
    stop = functools.partial(requested, plan.training)  # a worker left (see the engine)
    with _coordinated(collective, rank, stop) as timings:
        stats = _async_replica(rank, items, collective, plan, stop)
    return {**stats, **timings}


def async_order(rank, chunks, plan):
    """``(epoch, chunk)`` in the order async replica *rank* trains on its *chunks*: its
    pushes follow this order, so the server's count of them says which it has absorbed."""
    return [
        (epoch, chunk)
        for epoch in range(plan.epochs)
        for chunk in epoch_order(chunks, (plan.seed, epoch, rank), plan.shuffle)
    ]


def _async_replica(rank, items, collective, plan, stop):
    busy = 0.0
    reading = read_ahead([chunk for _, chunk in items], plan.prefetch)
    for epoch, _ in items:
        chunk = next(reading)
        state, version, stop_epoch = call(collective, "pull", rank, stop=stop)
        if stop_epoch is not None and epoch >= stop_epoch:
            break  # the server's rule stopped the training after an earlier epoch
        replica = copy.deepcopy(state)
        began = time.perf_counter()
        rows, loss = _fit_chunk(replica, chunk, plan, epoch)
        busy += time.perf_counter() - began
        del chunk
        call(collective, "push", rank, replica, version, rows, (epoch, loss, rows), stop=stop)
    reading.close()
    call(collective, "finish", rank, stop=stop)
    return {"rank": rank, "busy_s": busy}
