"""What one replica does: the long-running task of a worker in sync or async training.

A replica task receives every chunk its worker trains on (they are already in that
worker's memory), the global starting estimator, and a handle to the all-reduce or the
parameter server. It then trains for all epochs without returning to the client. Functions
here are pure apart from those calls, and run the same in a Dask task or a thread.
"""

import contextlib
import copy
import time

import numpy as np

from taskdml.parallel._collective import call
from taskdml.parallel._tasks import transform_chunk


def epoch_order(n_chunks, epoch, rank, shuffle, seed):
    """The order a replica visits its chunks in an epoch: seeded, per (epoch, rank)."""
    if not shuffle:
        return list(range(n_chunks))
    return list(np.random.default_rng([seed, epoch, rank]).permutation(n_chunks))


def _fit_chunk(estimator, chunk, transformers, fit_kwargs, epoch, shuffle_rows, seed):
    """``partial_fit`` *estimator* in place on one chunk; return the rows it saw."""
    X, y, weight, index = chunk
    if shuffle_rows:
        rows = np.random.default_rng([seed, epoch, index, 1]).permutation(len(X))
        X, y = X[rows], None if y is None else y[rows]
        weight = None if weight is None else weight[rows]
    X = transform_chunk(X, transformers)
    kwargs = dict(fit_kwargs, **({} if weight is None else {"sample_weight": weight}))
    if y is None:
        estimator.partial_fit(X, **kwargs)
    else:
        estimator.partial_fit(X, y, **kwargs)
    return len(X)


@contextlib.contextmanager
def _abort_others_on_error(service, rank):
    """If this replica fails, tell the others instead of letting them wait for it."""
    try:
        yield
    except Exception as error:
        with contextlib.suppress(Exception):
            call(service, "abort", f"replica {rank}: {type(error).__name__}: {error}")
        raise


def sync_replica(rank, start, chunks, reducer, plan):
    """See :func:`_sync_replica`; a failure here is passed on to the other replicas."""
    with _abort_others_on_error(reducer, rank):
        return _sync_replica(rank, start, chunks, reducer, plan)


def _sync_replica(rank, start, chunks, reducer, plan):
    """Train one replica synchronously; rank 0 returns ``(estimator, history)``.

    Each round the replica copies the global estimator, ``partial_fit``\\s its next
    ``plan["sync_every"]`` chunks, and all-reduces. After an epoch's last round rank 0
    scores the global estimator on the validation data (if any) and reports; every replica
    reads the report to decide whether to go on (early stopping).
    """
    state, history, busy, waiting = start, [], 0.0, 0.0
    validation = plan.get("validation")
    for epoch in range(plan["epochs"]):
        epoch_started = time.perf_counter()
        order = epoch_order(len(chunks), epoch, rank, plan["shuffle"], plan["seed"])
        rows_seen = 0
        for round_index in range(plan["rounds_per_epoch"]):
            replica, rows = copy.deepcopy(state), 0
            began = time.perf_counter()
            for position in order[round_index * plan["sync_every"]:(round_index + 1) * plan["sync_every"]]:
                rows += _fit_chunk(replica, chunks[position], plan["transformers"], plan["fit_kwargs"],
                                   epoch, plan["shuffle_rows"], plan["seed"])
            reduced = time.perf_counter()
            busy += reduced - began
            state = call(reducer, "reduce", (epoch, round_index), rank, replica, rows)
            waiting += time.perf_counter() - reduced
            rows_seen += rows
        report = None
        if rank == 0:
            report = {"epoch": epoch + 1, "duration_s": time.perf_counter() - epoch_started,
                      **epoch_scores(state, validation, plan)}
            report["stop"] = should_stop(history + [report], plan)
        report = call(reducer, "epoch_end", epoch, report)
        history.append(report)
        if report.get("stop"):
            break
    stats = {"rank": rank, "busy_s": busy, "reduce_wait_s": waiting}
    return (state, history, stats) if rank == 0 else (None, None, stats)


def epoch_scores(estimator, validation, plan):
    """Training loss (when the estimator keeps one) and validation score after an epoch."""
    scores = {}
    if getattr(estimator, "loss_", None) is not None:
        scores["train_loss"] = float(estimator.loss_)
    if validation is not None:
        X, y = validation
        X = transform_chunk(X, plan["transformers"])
        scorer = plan["scorer"]
        scores["validation_score"] = float(scorer(estimator, X, y) if scorer else estimator.score(X, y))
    return scores


def should_stop(history, plan):
    """scikit-learn's rule: stop after ``n_iter_no_change`` epochs without a validation score
    better than the best so far by ``tol``."""
    patience = plan.get("n_iter_no_change")
    scores = [entry["validation_score"] for entry in history if "validation_score" in entry]
    if not patience or len(scores) <= patience:
        return False
    best_before = max(scores[:-patience])
    return all(score < best_before + plan["tol"] for score in scores[-patience:])


def async_replica(rank, chunks, server, plan):
    """Train one worker's chunks against the parameter server (pull, fit one chunk, push)."""
    with _abort_others_on_error(server, rank):
        return _async_replica(rank, chunks, server, plan)


def _async_replica(rank, chunks, server, plan):
    busy = 0.0
    for epoch in range(plan["epochs"]):
        for position in epoch_order(len(chunks), epoch, rank, plan["shuffle"], plan["seed"]):
            state, version = call(server, "pull", rank)
            replica = copy.deepcopy(state)
            began = time.perf_counter()
            rows = _fit_chunk(replica, chunks[position], plan["transformers"], plan["fit_kwargs"],
                              epoch, plan["shuffle_rows"], plan["seed"])
            busy += time.perf_counter() - began
            call(server, "push", rank, replica, version, rows)
    call(server, "finish", rank)
    return {"rank": rank, "busy_s": busy}
