"""The training engine: one estimator trained over the chunks of dask arrays.

Every entry point — a pipeline's ``fit`` step, :class:`taskdml.DataParallel`, a search
trial — calls :func:`train`. Strategies:

``sync``
    Block ``i`` belongs to replica ``i mod R`` (``R`` = workers, by default), whatever the
    placement, so results depend only on the seed and ``R``. Each replica is one
    long-running task pinned to the worker that already holds most of its chunks (the
    others are copied there once and stay). The replicas start from one shared
    initialisation (:func:`~taskdml.parallel.prepare_start`, computed by replica 0 and
    broadcast); every round each ``partial_fit``\\s ``sync_every`` blocks and they
    all-reduce with :func:`~taskdml.parallel.merge_replicas`, sending their models straight
    to each other's workers (:mod:`taskdml.parallel.collective._direct`; an actor where workers
    cannot receive them): the client and the scheduler are not in the loop. With
    ``sync_every="auto"`` (the default) the replicas choose the period themselves from the
    measured seconds per block and per round, the same on every replica, so that
    coordination stays under 5 % of the wall time (:mod:`taskdml.parallel.engine._period`); the
    periods are recorded in the history. Not deterministic then; an integer is.
``async``
    The same replicas pull the global estimator from a parameter-server actor, train one
    chunk, and push; a worker more than ``staleness`` chunks ahead of the slowest waits
    (stale-synchronous parallel; ``0`` is lock-step, ``None`` never waits). A push is merged
    with the global estimator as two replicas that started from the version it pulled,
    weighted by the rows merged since then against its own; a push nothing was merged
    before (zero versions behind) becomes the global estimator. The default staleness is
    ``DEFAULT_STALENESS`` (lock-step): measured with 2 replicas, about half of all pushes
    arrive zero versions behind, so every chunk of slack lets single un-averaged replicas
    stand as the global estimator, and holdout accuracy falls 1-3 points below sync's; in
    lock-step it stays within half a point. ``TrainResult.stats["versions_behind"]`` shows
    how stale the pushes were. Not deterministic: the order of pushes depends on timing.
    A lost worker, the server's included, costs at most the pushes since the client's last
    copy of the server's state (:func:`_elastic_async`; ``stats["restarts"]``).
``sequential``
    One replica walks all chunks, a chain of tasks that follows the data (dask-ml's
    ``Incremental``): for estimators that cannot be merged, and the reference in tests.

Every strategy trains on *blocks*, not on the chunks as given: chunks under the estimator's
minimum batch (``IncrementalPCA``: ``n_components`` rows) or under 10 rows are merged with
their neighbours, in order, so a ragged last chunk never fails a replica; chunks already large
enough are trained on as they are, under their own keys
(:mod:`taskdml.parallel.engine._blocks`). ``TrainResult.stats`` records the blocks.

Without a distributed client, replicas run as threads of this process on the computed
chunks (small data), with the same arithmetic. An estimator without ``partial_fit`` is fitted
once on all chunks concatenated, in one task.
"""

import collections
import concurrent.futures
import contextlib
import copy
import dataclasses
import functools
import math
import threading
import time
import uuid
import warnings
import weakref

import numpy as np
from dask.utils import format_bytes

from taskdml import _data, _events, _keys, _warm
from taskdml._client import in_task, resolve_client
from taskdml._compat import (
    address_host,
    client_lock,
    held_keys,
    relink_birch_views,
    running_nthreads,
)
from taskdml.cache import _checkpoints as _checkpoint
from taskdml.parallel.chunkwise import _tabular
from taskdml.parallel.collective import _direct
from taskdml.parallel.collective import _server as _collective
from taskdml.parallel.engine import (
    _blocks,
    _boosting,
    _chunks,
    _elastic,
    _options,
    _period,
    _replica,
    _stream,
    _tasks,
    _warmup,
)
from taskdml.parallel.engine._chunks import Chunk
from taskdml.parallel.merge._registry import (
    get_merge_rule,
    min_batch_rows,
    prepare_start,
    unmergeable_reason,
    without_round_start,
)
from taskdml.parallel.merge._stopping import ONE_PASS, Stopping, converged, stop_reason

STRATEGIES = _options.STRATEGIES
"""The training strategies, for every entry point (the engine, DataParallel, the searches)."""

DEFAULT_STALENESS = 0
"""How many chunks an async replica may run ahead of the slowest unless told: lock-step (see
the module docstring for the measurement). ``None`` is unbounded."""


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """Everything a replica needs to know about a training, fixed before it starts.

    Built once by :func:`train` and passed to every replica task unchanged (the engine sets
    ``rounds_per_epoch`` and ``most_blocks`` with :func:`dataclasses.replace` once it knows
    the replicas).
    """

    epochs: int  # the most epochs (stopping.max_epochs)
    sync_every: object  # int >= 1 or "auto" (see taskdml.parallel.engine._period)
    shuffle: bool
    shuffle_rows: bool
    seed: int
    transformers: list  # fitted transformers applied to each chunk, in order
    fit_kwargs: dict  # passed to every partial_fit (``classes`` for classifiers)
    validation: object  # (X_val, y_val) scored after every epoch, or None
    scorer: object  # scorer(estimator, X, y), or None for estimator.score
    stopping: object  # when training stops (taskdml.parallel.merge._stopping.Stopping)
    rounds_per_epoch: int = 0  # most sync rounds in one epoch (exactly, for an integer period)
    most_blocks: int = 0  # the most blocks of a replica: the rounds of an epoch cover them
    rule: object = None  # the estimator's merge rule (sync/async), set with the rounds
    prefetch: int = _stream.DEFAULT_PREFETCH  # chunks a streaming replica reads ahead
    # A segment of an elastic training (taskdml.parallel.engine._elastic); the defaults: all of it.
    first_epoch: int = 0  # the epoch this segment starts in
    resumed: bool = False  # starts from a global state (no prepare, no broadcast)
    resume_blocks: int = 0  # the most blocks left of the first epoch on a replica, if resumed
    rounds_before: int = 0  # the rounds of the first epoch done before, if resumed
    period_state: tuple = None  # the sync period where the last segment left it, if resumed
    training: str = ""  # the segment's id: replicas asked to stop look it up
    checkpoint_s: float = _elastic.CHECKPOINT_S  # rank 0 ends a segment after this long
    events: dict = None  # the run and step its epochs and rounds are published for
    earlier: tuple = ()  # the history of the segments before this one (the rule reads it)


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns: the estimator, its per-epoch history, and run facts.

    Attributes
    ----------
    estimator : estimator
        The trained copy.
    history : list of dict
        One entry per epoch (one for all epochs with ``"async"``): ``epoch``, ``duration_s``,
        ``samples_seen``, and ``validation_score`` / ``train_loss`` where available. With
        ``"sync"`` also ``sync_every`` (the epoch's period; with ``"auto"`` the one chosen
        after the first epoch's probe rounds of period 1) and ``rounds``; with ``"auto"``
        also ``block_s``, ``round_s`` and ``straggler_wait_s`` (the mean wait of a replica
        for the slowest, per round), the measurements the period was chosen from
        (:func:`~taskdml.parallel.engine._period.choose_period`), and ``min_merges``, the
        fewest merges an epoch its family keeps (``MergeRule.min_merges``).
    strategy : str
        What ran: ``"sync"``, ``"async"``, ``"sequential"``, ``"fit"`` (one ``fit`` on all
        the data, for an estimator without ``partial_fit``) or ``"native"`` (XGBoost or
        LightGBM trained by its own library's Dask training,
        :mod:`taskdml.parallel.engine._boosting`).
    stats : dict
        Facts of the run: ``wall_s``, ``n_samples``, ``n_chunks`` (as given), ``blocks`` (as
        trained on), ``rows_per_block`` (fewest, most), ``min_block_rows`` (not for
        ``"fit"``), ``replicas``, ``setup_s`` (seconds from the call's start until training
        began: inspection, blocks, placement, submission), and per strategy ``rounds`` (all
        epochs), ``busy_s``, ``reduce_wait_s``, ``sync_every`` (the integer given, or with
        ``"auto"`` the list of the epochs' periods) and with ``"auto"`` ``block_s``,
        ``round_s``, ``straggler_wait_s`` and ``min_merges`` (lists, per epoch: the inputs of
        the choice), ``collective`` (``"direct"``,
        ``"actor"`` or ``"local"``) and with ``"direct"`` per replica ``serialize_s``,
        ``wire_s``, ``wait_s``, ``merge_s`` and ``collective_round_s`` (the median round) for
        sync; or ``updates``, ``held_back_s`` and ``versions_behind`` (async: mean, most; how
        many other pushes were merged between a replica's pull and its push), ``pushes`` (per
        push the server merged, in order, ``(rank, version the replica had pulled)``; of the
        last server, after a restart) and ``restarts`` (the lost workers it went on without,
        see :func:`_elastic_async`).
        Replicas on a cluster add ``workers`` (the addresses they ran on, held while they
        ran), ``placement`` (the worker of each replica, by rank, in the last segment) and
        ``ran`` (``time.time`` of the first replica's start and of the last one's
        end).
    """

    estimator: object
    history: list
    strategy: str
    stats: dict


class SequentialFallbackWarning(UserWarning):
    """An estimator asked to train data-parallel was trained sequentially; the message says why.

    Raised (as a warning) by :func:`train` and :class:`taskdml.DataParallel` for an estimator
    without a merge rule (one sequential pass) or without ``partial_fit`` (one ``fit``).

    Examples
    --------
    >>> import warnings
    >>> import dask.array as da
    >>> from sklearn.cluster import Birch
    >>> from taskdml.parallel import SequentialFallbackWarning, train
    >>> X = da.random.default_rng(0).random((60, 2), chunks=20)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     result = train(Birch(n_clusters=2), X, strategy="sync", client=False)
    >>> result.strategy, caught[0].category is SequentialFallbackWarning
    ('sequential', True)
    """


def train(
    estimator,
    X,
    y=None,
    *,
    sample_weight=None,
    classes=None,
    preprocess=(),
    strategy=None,
    epochs=1,
    sync_every="auto",
    staleness=DEFAULT_STALENESS,
    shuffle=True,
    shuffle_rows=False,
    random_state=None,
    validation=None,
    scoring=None,
    tol=1e-4,
    n_iter_no_change=None,
    n_replicas=None,
    workers=None,
    data="auto",
    prefetch=_stream.DEFAULT_PREFETCH,
    client=None,
):
    """Train a copy of *estimator* on chunked data; return a :class:`TrainResult`.

    Parameters
    ----------
    estimator : scikit-learn estimator
        Trained as given (a fitted one continues from its state); it is not modified. A
        ``Pipeline`` fits its transformers chunk-wise and trains its last step on the
        transformed chunks (:mod:`taskdml.parallel.chunkwise._tabular`).
    X : dask.array.Array, dask DataFrame or xarray.Dataset, shape (n_samples, n_features)
        Chunked along samples. A dask DataFrame (or a table, which is read as one) needs a
        ``Pipeline`` when it has non-numeric columns.
    y, sample_weight : dask.array.Array, shape (n_samples,), optional
    classes : array-like, optional
        All labels of a classifier; found chunk-wise when omitted.
    preprocess : sequence of fitted transformers
        Applied to each chunk before training.
    strategy : {"sync", "async", "sequential"}, optional
        Default ``"sync"`` when the estimator has a merge rule, else ``"sequential"``.
        XGBoost's and LightGBM's estimators on a cluster train with their library's own
        Dask training instead of replicas (``strategy`` ``"native"`` in the result) when
        asked for ``"sync"`` or ``"async"``, or by default when the data is larger than
        one worker fits at once (:mod:`taskdml.parallel.engine._boosting`).
    epochs : int or "auto", default=1
        Passes over the data. ``"auto"`` (the default of :class:`~taskdml.DataParallel` and
        of a pipeline's ``fit`` step) trains as far as ``estimator.fit`` would: up to
        its ``max_iter``, stopping with its ``tol`` and ``n_iter_no_change`` on the epoch's
        training loss (k-means: ``max_no_improvement``; naive Bayes, scalers and
        IncrementalPCA: one pass), as its family's merge rule states it
        (:mod:`taskdml.parallel.merge._stopping`). ``stats["stopping"]`` says which rule
        ran and ``stats["stopped"]`` why training ended; data of one chunk is fitted with
        ``estimator.fit`` where it lies (``strategy`` ``"fit"``).
    staleness, shuffle, shuffle_rows, random_state
        See the module docstring; ``staleness`` (default 0, lock-step; ``None`` unbounded)
        bounds how many chunks an async replica runs ahead of the slowest, ``shuffle``
        reorders each replica's chunks per epoch, ``shuffle_rows`` the rows inside each
        chunk, both seeded by ``random_state``.
    sync_every : int or "auto", default="auto"
        Blocks each replica trains between two merges (``"sync"``); ``"auto"`` chooses the
        period from measured timings (recorded in the history; not deterministic). Ignored
        by ``"async"`` and ``"sequential"``.
    validation : (X_val, y_val), optional
        Scored after every epoch (``scoring``: a scorer name or callable; default
        ``estimator.score``).
    tol, n_iter_no_change
        Early stopping on the validation score, as in scikit-learn (with *validation*;
        ``n_iter_no_change=None``: the estimator's own rule with ``epochs="auto"``, else
        every epoch).
    n_replicas : int, optional
        Replicas for sync/async; default the number of workers (1 without a client).
    workers : sequence of str, optional
        The worker addresses the replicas may run on (default: every worker); chunks held
        elsewhere are copied to them once. Replicated trainings hold their workers while they
        run, so trainings on disjoint workers run side by side and the others take turns.
    data : {"auto", "persist", "stream"}, default="auto"
        How the chunks reach sync and async replicas: persisted in the workers' memory, or
        streamed — read by the replicas as they train, *prefetch* ahead, and dropped after
        use, so that memory is bounded by the chunk size, not the data size
        (:mod:`taskdml.parallel.engine._stream`). ``"auto"`` persists data already persisted or
        taking at most half the memory the workers have free under their limits, and
        streams larger data. The choice and its inputs are in ``stats["data"]``.
    prefetch : int, default=2
        Chunks a streaming replica reads ahead in a background thread (0: read each when
        it is needed).
    client : distributed.Client or False, optional
        Default: the current client if there is one, else threads in this process;
        ``False`` forces threads in this process even when a client exists.

    Returns
    -------
    TrainResult
        The trained copy, its history and facts of the run (:class:`TrainResult` lists
        ``stats``). Where a call and its epochs go (``"sync"``):

        - ``stats["setup"]``, the call's laps in seconds, in order: ``prepare_s``,
          ``inspect_s``, ``blocks_s``, ``workers_s`` (the workers there are),
          ``data_wait_s`` (every chunk in memory), ``place_s`` (who holds them, placement),
          ``collective_s``, ``lock_s`` (the replicas' workers), ``submit_s``, then from the
          replicas' clocks ``dispatch_s`` (to the first replica's start, chunks copied to it
          included), ``skew_s``, ``return_s`` (the last replica's end to the results here)
          and ``finish_s`` (to the call's end); on a cluster, without the local threads'.
        - Per replica, by rank: ``copy_s`` (copying the global model each round),
          ``epoch_end_s`` (scoring and the epoch's broadcast), ``round_busy_s`` and
          ``round_rows`` (its ``partial_fit`` seconds and rows in each round of the last
          segment), ``start_late_s`` (seconds after the first replica's start) and, on a
          cluster, ``remote_chunks`` (its chunks held only on other workers when it was
          placed, copied before it started; ``None`` unless they were persisted).
        - ``slowest``: per round, the replica the others waited for: ``rank``, ``late_s``
          (its seconds minus the median replica's), ``rows``, ``median_rows``,
          ``row_s_ratio`` (its seconds per row over the median's: above 1 a slower or
          busier core), ``remote_blocks`` and ``cause`` (``"rows"`` or ``"speed"``,
          whichever explains more of ``late_s``; ``None`` when no one was late); and
          ``late_s``, the sum over rounds. All recorded by the replicas and returned with
          their results: no message of their own.

    Raises
    ------
    DataError
        For a chunk that is empty, has the wrong number of features, holds NaN or infinite
        values, or labels outside ``classes`` (the message names the chunk and its rows).

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn.linear_model import SGDRegressor
    >>> from taskdml.parallel import train
    >>> rng = da.random.default_rng(0)
    >>> X = rng.random((1_000, 3), chunks=(250, 3))
    >>> y = X @ da.from_array([1.0, 2.0, 3.0])
    >>> result = train(SGDRegressor(random_state=0), X, y, epochs=3, n_replicas=2,
    ...                random_state=0, client=False)
    >>> result.strategy, result.stats["replicas"], [entry["epoch"] for entry in result.history]
    ('sync', 2, [1, 2, 3])
    """
    from sklearn.base import is_classifier
    from sklearn.utils import check_random_state

    clock = _Clock()
    engine_options = dict(
        strategy=strategy,
        epochs=epochs,
        sync_every=sync_every,
        staleness=staleness,
        shuffle=shuffle,
        shuffle_rows=shuffle_rows,
        random_state=random_state,
        scoring=scoring,
        tol=tol,
        n_iter_no_change=n_iter_no_change,
        n_replicas=n_replicas,
        workers=workers,
        data=data,
        prefetch=prefetch,
    )
    _options.check("train", engine_options, "train")
    sync_every = sync_every if isinstance(sync_every, str) else int(sync_every)
    client = resolve_client(client)
    _warmup.prepare(client, estimator)  # the workers' imports, while this call goes on
    _warm.check_loadable(client, {"estimator": estimator}, owner="train")
    X, y, sample_weight = _data.as_dask(
        X if _data.is_chunked(X) else _as_array(X), y, sample_weight
    )
    if _tabular.is_pipeline(estimator):
        if _pipeline_at_once(estimator, X, (X, y, sample_weight), strategy, epochs, data, client):
            try:
                return _fit_pipeline_at_once(estimator, X, y, sample_weight, client, clock)
            except ValueError:
                pass  # bad data: the chunk-wise path's checks name the chunk and the fix
        return _train_pipeline(
            estimator,
            X,
            y,
            client,
            dict(
                engine_options,
                sync_every=sync_every,
                sample_weight=sample_weight,
                classes=classes,
                preprocess=preprocess,
                validation=validation,
            ),
        )
    if _data.is_frame(X):
        X = _data.outside_annotations(_numeric_array, X)
    arrays = [a for a in (X, y, sample_weight) if a is not None]
    if _boosted(estimator, strategy, epochs, X, arrays, data, client):
        return _train_boosted(estimator, X, y, sample_weight, preprocess, client, clock)
    persisted = client is not None and all(_persisted(client, array) for array in arrays)
    in_memory = client is not None and any(_holds_futures(array) for array in arrays)
    mode, data_facts = _data_mode(data, client, arrays, in_memory, workers)
    if client is not None and mode == "persist" and not persisted:
        arrays = client.persist(arrays)
    chunks = _chunk_lists(arrays, X, y, sample_weight)
    clock.lap("prepare_s")
    facts = _inspect(client, chunks, is_classifier(estimator))
    classes = _chunks.check(facts, X.shape[1], classes, is_classifier(estimator) and y is not None)
    seed = int(check_random_state(random_state).randint(2**31 - 1))
    rows = sum(fact["rows"] for fact in facts)
    stopping = _stopping_rule(estimator, epochs, tol, n_iter_no_change, validation, rows)
    plan = TrainingPlan(
        epochs=stopping.max_epochs,
        sync_every=sync_every,
        shuffle=shuffle,
        shuffle_rows=shuffle_rows,
        seed=seed,
        transformers=list(preprocess),
        fit_kwargs={"classes": classes} if classes is not None else {},
        validation=validation,
        scorer=_scorer(scoring),
        stopping=stopping,
        prefetch=int(prefetch),
        events=_events.where(),
    )
    n_chunks = len(chunks)
    at_once = strategy is None and _fits_at_once(estimator, epochs, n_chunks, _nbytes(arrays), mode)
    strategy = "fit" if at_once else _choose(estimator, strategy, epochs)
    clock.lap("inspect_s")
    chunks, block_stats = _training_blocks(estimator, chunks, facts, X, strategy, client)
    if mode == "stream" and strategy in ("sync", "async"):
        found = {key: source for array in arrays for key, source in _stream.sources(array).items()}
        chunks = [_stream.as_streamed(chunk, found) for chunk in chunks]
    clock.lap("blocks_s")
    started = time.perf_counter()
    if strategy == "fit":
        result = _fit_once(estimator, chunks, plan, client, passes=at_once)
    elif strategy == "sequential":
        result = _sequential(estimator, chunks, plan, client)
    else:
        result = _replicated(
            estimator, chunks, plan, client, strategy, staleness, n_replicas, clock, workers
        )
    result.stats.setdefault("setup_s", started - clock.began)
    clock.finish()
    result.stats["setup"] = clock.laps
    result.stats.update(
        wall_s=time.perf_counter() - started, n_samples=rows, n_chunks=n_chunks, **block_stats
    )
    result.stats["data"] = _data_stats(data_facts, strategy, result, facts, arrays, plan)
    without_round_start(result.estimator)
    relink_birch_views(result.estimator)
    for entry in result.history:
        entry.pop("stop", None)
        entry["samples_seen"] = rows * entry["epoch"]
    _record_stop(result, stopping, strategy, at_once)
    return result


def _stopping_rule(estimator, epochs, tol, n_iter_no_change, validation, rows):
    """The :class:`~taskdml.parallel.merge._stopping.Stopping` of this training: *epochs*
    passes (early stopping on *validation* with *tol* and *n_iter_no_change* when both are
    given), or with ``"auto"`` the family's own rule, which a given *n_iter_no_change*
    overrides (on *validation*) and which stops on the training loss when it asks for a
    validation score but no *validation* was given."""
    watch = validation is not None and n_iter_no_change is not None
    if epochs != "auto":
        return Stopping(
            int(epochs),
            "validation_score" if watch else None,
            tol,
            n_iter_no_change if watch else None,
            source=f"epochs={int(epochs)}",
        )
    rule = get_merge_rule(estimator) if unmergeable_reason(estimator) is None else None
    found = rule.stopping(estimator, rows) if rule is not None and rule.stopping else ONE_PASS
    if watch:
        return dataclasses.replace(
            found,
            on="validation_score",
            tol=tol,
            patience=n_iter_no_change,
            source=f"{found.source}; validation: tol={tol}, n_iter_no_change={n_iter_no_change}",
        )
    if found.on == "validation_score" and validation is None:
        if found.loss is None:
            return dataclasses.replace(found, on=None, patience=None)
        return dataclasses.replace(
            found,
            on="train_loss",
            source=found.source + "; no validation data: on the training loss",
        )
    return found


FIT_AT_ONCE_BYTES = 64 * 2**20
"""Data up to this size trained with ``epochs="auto"`` is fitted with ``estimator.fit`` on one
worker (in this process when it is in memory: :class:`~taskdml.DataParallel`): below it,
replicas and their rounds cost more than they save (``benchmarks/parity.py`` measures where
the two cross on this machine)."""


def _nbytes(arrays):
    nbytes = sum(array.nbytes for array in arrays)
    return math.inf if math.isnan(nbytes) else nbytes


def _fits_at_once(estimator, epochs, n_chunks, nbytes, mode):
    """Whether ``estimator.fit`` once on all the chunks, on one worker, is the training asked
    for and the fastest: as far as ``fit`` would go (``epochs="auto"``) from an unfitted
    estimator, on data of one chunk or of at most :data:`FIT_AT_ONCE_BYTES` that is not
    streamed. One-pass families too: on 100,000 × 20 rows in 8 chunks their replicas and
    merge cost 0.1 s more than moving the chunks to one worker (``benchmarks/parity.py``)."""
    if epochs != "auto" or not hasattr(estimator, "fit"):
        return False
    if n_chunks != 1 and (nbytes > FIT_AT_ONCE_BYTES or mode == "stream"):
        return False
    return not _tasks.is_fitted(estimator)


def _boosted(estimator, strategy, epochs, X, arrays, data, client):
    """Whether *estimator* trains with its own library's Dask training
    (:mod:`taskdml.parallel.engine._boosting`): XGBoost and LightGBM on a cluster, where
    replicas would run: data larger than :func:`_fits_at_once` fits on one worker, or
    ``strategy`` ``"sync"`` or ``"async"`` asked for (both mean the library's own training,
    whose all-reduce is synchronous). ``"sequential"`` fits once, in one task."""
    if client is None or _boosting.dask_class_name(estimator) is None or X.numblocks[0] == 1:
        return False
    if strategy is not None:
        return strategy != "sequential"
    return not _fits_at_once(estimator, epochs, X.numblocks[0], _nbytes(arrays), data)


def _train_boosted(estimator, X, y, sample_weight, preprocess, client, clock):
    """XGBoost or LightGBM trained by its library on the workers, taking turns with the
    other trainings that hold workers (:func:`_taking_turns`): its tasks, one per worker,
    wait for each other like replicas."""
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    started = time.perf_counter()
    with _taking_turns(client, workers):
        fitted, stats = _boosting.fit(estimator, X, y, sample_weight, preprocess, client)
    wall_s = time.perf_counter() - started
    rows = None if math.isnan(X.shape[0]) else int(X.shape[0])
    stats.update(
        wall_s=wall_s,
        setup_s=started - clock.began,
        n_samples=rows,
        n_chunks=X.numblocks[0],
        stopping=f"{stats['library']}'s own rounds (n_estimators, early stopping)",
        stopped="fitted once",
    )
    history = [{"epoch": 1, "duration_s": wall_s, "samples_seen": rows}]
    return TrainResult(fitted, history, "native", stats)


def _pipeline_at_once(pipeline, X, arrays, strategy, epochs, data, client):
    """Whether a whole scikit-learn Pipeline is fitted at once on one worker (one task,
    :func:`_fits_at_once`) rather than its transformers chunk-wise and its last step by the
    engine: data small enough, with the strategy left to taskdml. Saves the chunk-wise rounds
    of the transformers (two graph round trips each). A dask DataFrame's size is read first
    (its memory per partition, one small task each), unless the rest rules it out."""
    if strategy is not None or epochs != "auto" or data == "stream":
        return False
    arrays = [array for array in arrays if array is not None and not _data.is_frame(array)]
    if not _data.is_frame(X):
        return _fits_at_once(pipeline, epochs, X.numblocks[0], _nbytes(arrays), data)
    if _tasks.is_fitted(pipeline):  # a fitted pipeline continues: no size to read
        return False
    usage = X.memory_usage_per_partition(index=True, deep=True)
    sizes = usage.compute() if client is None else client.compute(usage).result()
    nbytes = float(sizes.sum()) + _nbytes(arrays)
    return _fits_at_once(pipeline, epochs, X.npartitions, nbytes, data)


def _fit_pipeline_at_once(pipeline, X, y, sample_weight, client, clock):
    """A whole Pipeline fitted with its own ``fit`` on small chunked data, in one task on one
    worker: the chunks concatenated there, in order (a DataFrame's partitions with their
    columns and dtypes: a ColumnTransformer selects by name), y and the weights beside them.
    The data is not inspected first: NaNs are the pipeline's business (an imputer), and a
    ``ValueError`` of ``fit`` sends the caller to the chunk-wise path, whose checks say where.
    """
    import dask

    if not _data.is_frame(X):
        X = X.rechunk({1: -1}) if X.ndim == 2 else X
    parts = [_row_parts(part) if part is not None else None for part in (X, y, sample_weight)]
    parts = [part if part is not None else [None] * len(parts[0]) for part in parts]
    name = _keys.key_name("train", _estimator_token(pipeline), parts, phase="fit")
    task = dask.delayed(_tasks.fit_concatenated, pure=True)(
        pipeline, list(zip(*parts)), threads=_lone_fit_threads(client), dask_key_name=name
    )
    lengths = [dask.delayed(len, pure=True)(part) for part in parts[0]]
    began = time.perf_counter()
    fitted, *lengths = _gather(client, [task, *lengths])
    epochs = int(np.max(getattr(fitted[-1], "n_iter_", 1)))
    rows = int(sum(lengths))
    entry = {"epoch": epochs, "duration_s": time.perf_counter() - began}
    entry["samples_seen"] = rows * epochs
    result = TrainResult(fitted, [entry], "fit", {})
    result.stats.update(
        setup_s=began - clock.began,
        wall_s=time.perf_counter() - began,
        n_samples=rows,
        n_chunks=len(parts[0]),
    )
    _record_stop(result, None, "fit", True)
    return result


def _lone_fit_threads(client):
    """``{host: threads}`` of the workers that run nothing now: the BLAS and OpenMP threads
    a training fitted once, in one task, may use on its worker's host
    (:func:`~taskdml.parallel.engine._tasks.fit_concatenated`). distributed starts workers
    with one such thread each, against oversubscription among their tasks; a lone fit on one
    worker would otherwise leave the cores of the host's idle workers unused where
    ``est.fit`` in one process uses them all (an MLP on 10^5 rows on one of two workers:
    1.35× ``est.fit``, ``benchmarks/parity.py``). ``None`` without a client and inside a
    task (a search's trial, with others beside it)."""
    if client is None or in_task():
        return None
    busy = {address for address, keys in client.processing().items() if keys}
    threads = {}
    for address, count in client.nthreads().items():
        if address not in busy:
            host = address_host(address)
            threads[host] = threads.get(host, 0) + count
    return threads


def _row_parts(collection):
    """The row chunks of a dask array (one column block) or a dask DataFrame's partitions,
    as delayed objects, in order."""
    parts = collection.to_delayed()
    return list(parts.ravel()) if hasattr(parts, "ravel") else list(parts)


def _record_stop(result, stopping, strategy, at_once):
    """``stats["stopping"]`` (the rule) and ``stats["stopped"]`` (why the training ended);
    a ``ConvergenceWarning``, as scikit-learn's, when a rule that watches a value ran out of
    epochs first."""
    if strategy == "fit":
        result.stats["stopping"] = "estimator.fit on all the data at once"
        result.stats["stopped"] = "fitted once"
        if at_once:
            result.stats["local"] = (
                "data of one chunk or at most "
                f"{format_bytes(FIT_AT_ONCE_BYTES)}: estimator.fit on one worker, as far as "
                "it trains; replicas and their rounds would cost more than they save"
            )
        return
    done = result.history[-1]["epoch"] if result.history else 0
    reason = stop_reason(result.history, stopping) or f"{done} epochs done"
    result.stats["stopping"] = stopping.source
    result.stats["stopped"] = reason
    if stopping.on is not None and stopping.patience and not converged(reason):
        from sklearn.exceptions import ConvergenceWarning

        warnings.warn(
            f"{stopping.source}: the maximum number of epochs ({stopping.max_epochs}) was "
            f"reached before {stopping.on} stopped improving by tol={stopping.tol:g}; "
            "consider more epochs (the estimator's max_iter) or a larger tol.",
            ConvergenceWarning,
            stacklevel=_user_frame(),
        )


def _data_mode(data, client, arrays, persisted, workers):
    """``(mode, facts)`` of :func:`taskdml.parallel.engine._stream.choose` for these arrays, against
    the memory limits of the workers the training may use (this machine's memory without a
    client)."""
    nbytes = sum(array.nbytes for array in arrays)
    nbytes = 0 if math.isnan(nbytes) else nbytes
    return _stream.choose_for(client, data, nbytes, persisted, workers)


def _data_stats(facts, strategy, result, chunk_facts, arrays, plan):
    """What ``stats["data"]`` says: the choice, its inputs, and for a streaming training the
    memory it may hold per worker (:func:`taskdml.parallel.engine._stream.memory_bound`)."""
    facts = dict(facts)
    if strategy not in ("sync", "async") or facts["mode"] != "stream":
        facts["streamed"] = False
        return facts
    import pickle

    rows = sum(fact["rows"] for fact in chunk_facts)
    row_bytes = sum(array.nbytes for array in arrays) / max(rows, 1)
    chunk_bytes = int(max(fact["rows"] for fact in chunk_facts) * row_bytes)
    workers = result.stats.get("workers") or [None]
    replicas = result.stats["replicas"]
    per_worker = -(-replicas // len(workers))
    model_bytes = len(pickle.dumps(result.estimator))
    facts.update(
        streamed=True,
        prefetch=plan.prefetch,
        chunk_bytes=chunk_bytes,
        model_bytes=model_bytes,
        memory_bound_bytes=_stream.memory_bound(
            per_worker, chunk_bytes, plan.prefetch, model_bytes, replicas
        ),
    )
    return facts


def _train_pipeline(pipeline, X, y, client, options):
    """A scikit-learn Pipeline: its transformers fitted chunk-wise, its last step trained on
    the transformed chunks (:mod:`taskdml.parallel.chunkwise._tabular`); a fitted pipeline keeps its
    transformers and continues its last step."""
    from sklearn.pipeline import Pipeline

    chunks = _tabular.chunks_of(X, client)
    prefix = _tabular.fitted_prefix(pipeline)
    if prefix is None:
        prefix = _tabular.fit_transformers(pipeline[:-1], chunks)
    name, last = pipeline.steps[-1]
    validation = options["validation"]
    if validation is not None:
        X_val, y_val = validation
        options["validation"] = (_tabular._dense(prefix, X_val), y_val)
    result = train(last, _tabular.transformed(prefix, chunks), y, client=client or False, **options)
    fitted = Pipeline(prefix.steps + [(name, result.estimator)], memory=pipeline.memory)
    return dataclasses.replace(result, estimator=fitted)


def _numeric_array(frame):
    """A dask DataFrame of numeric columns as a float64 dask array on its partitions."""
    import numpy as np
    import pandas as pd

    from taskdml.exceptions import DataError

    not_numeric = [
        str(name)
        for name, dtype in frame.dtypes.items()
        if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))
        or isinstance(dtype, pd.CategoricalDtype)
    ]
    if not_numeric:
        raise DataError(
            f"the columns {not_numeric} are not numeric, and only a scikit-learn Pipeline "
            "can train on them: put a ColumnTransformer that encodes them (OneHotEncoder, "
            "OrdinalEncoder) before the estimator, e.g. make_pipeline(make_column_transformer("
            f"(OneHotEncoder(), {not_numeric!r}), remainder='passthrough'), estimator)."
        )
    return frame.to_dask_array(lengths=list(_data.partition_lengths(frame))).astype(np.float64)


def _choose(estimator, strategy, epochs=1):
    if not hasattr(estimator, "partial_fit"):
        asked = strategy not in (None, "sequential") or epochs not in (1, "auto")
        if asked:  # replicas or epochs asked for: say they cannot be
            warnings.warn(
                f"{type(estimator).__name__} has no partial_fit: fitting it once on all "
                "the data instead of data-parallel.",
                SequentialFallbackWarning,
                stacklevel=_user_frame(),
            )
        return "fit"
    reason = unmergeable_reason(estimator)
    if reason is None:
        return strategy or "sync"
    if strategy in ("sync", "async"):
        warnings.warn(
            f"training {type(estimator).__name__} sequentially instead of {strategy!r}: {reason}",
            SequentialFallbackWarning,
            stacklevel=_user_frame(),
        )
    return "sequential"


def _user_frame():
    """The ``stacklevel`` that points a warning at the first frame outside taskdml."""
    import sys

    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("taskdml"):
        frame, level = frame.f_back, level + 1
    return level


def _as_array(X):
    """In-memory *X* as a dask array of one chunk (the engine's input is a dask array)."""
    import dask.array as da

    return da.asarray(X)


def _chunk_lists(arrays, X, y, sample_weight):
    """One :class:`Chunk` per row block: the futures (persisted) or delayed objects."""
    parts = iter(arrays)
    columns = [_array_blocks(next(parts))]
    for array in (y, sample_weight):
        columns.append(
            _array_blocks(next(parts)) if array is not None else [None] * len(columns[0])
        )
    return [Chunk(x, y_i, w_i, i) for i, (x, y_i, w_i) in enumerate(zip(*columns))]


def _persisted(client, array):
    """Whether every block of *array* is already a future of *client* (persisting it again
    would only send the scheduler a message, which delays the submissions that follow)."""
    from dask.core import flatten
    from distributed import futures_of

    held = {future.key for future in futures_of(array) if future.client is client}
    return all(key in held for key in flatten(array.__dask_keys__()))


def _holds_futures(array):
    """Whether *array* is built on futures (persisted, or an earlier step's output): its
    blocks cannot be read from a graph of their own."""
    from distributed import futures_of

    return bool(futures_of(array))


def _array_blocks(array):
    """The row blocks of *array*, in order: its futures if it is persisted, else delayed."""
    from dask.core import flatten
    from distributed import futures_of

    futures = {future.key: future for future in futures_of(array)}
    keys = list(flatten(array.__dask_keys__()))
    if futures and all(key in futures for key in keys):
        return [futures[key] for key in keys]
    return list(array.to_delayed().ravel())


def _training_blocks(estimator, chunks, facts, X, strategy, client):
    """The blocks to train on (see :mod:`taskdml.parallel.engine._blocks`) and their stats.

    Chunks that are already large enough come back unchanged; merged blocks are computed on
    the cluster (futures) when there is a client, so replicas find them like any chunk.
    """
    rows = [fact["rows"] for fact in facts]
    if strategy == "fit":  # one fit on everything: no blocks
        return chunks, {"blocks": len(chunks), "rows_per_block": (min(rows), max(rows))}
    n_features = X.shape[1] if X.ndim > 1 else 1
    min_rows = _blocks.min_block_rows(min_batch_rows(estimator, n_features))
    groups = _blocks.plan_blocks(rows, min_rows)
    blocks = _blocks.reblock(chunks, groups)
    merged = [i for i, group in enumerate(groups) if len(group) > 1]
    if client is not None and merged:
        lazy = [getattr(blocks[i], field) for i in merged for field in ("X", "y", "weight")]
        futures = iter(client.compute([part for part in lazy if part is not None]))
        for i in merged:
            blocks[i] = Chunk(
                *(
                    None if getattr(blocks[i], f) is None else next(futures)
                    for f in ("X", "y", "weight")
                ),
                blocks[i].index,
            )
    block_rows = [sum(rows[i] for i in group) for group in groups]
    stats = {
        "blocks": len(blocks),
        "rows_per_block": (min(block_rows), max(block_rows)),
        "min_block_rows": min_rows,
    }
    return blocks, stats


def _task_key(function, phase, index, *args):
    """The key of the task ``function(*args)`` for chunk *index* (named by the keys it reads)."""
    name = _keys.key_name(
        "train", function.__name__, [getattr(a, "key", a) for a in args], phase=phase
    )
    return (name, index)


def _gather(client, values):
    import dask

    if client is not None:
        return client.gather(client.compute(values))
    return list(dask.compute(*values))


# Facts of the chunks already inspected, so that a repeated ``train`` on the same data (epochs
# through ``partial_fit``, search trials, benchmarks) does not read all of it again. Per client,
# and only while that client holds the chunks: an entry goes when its data is released, and
# the client's whole cache when the client is gone. Without a client, a small LRU.
_INSPECTED = weakref.WeakKeyDictionary()  # client -> OrderedDict(inspection key: (keys, facts))
_INSPECTED_LOCAL = collections.OrderedDict()  # inspection key -> ((), facts)
_INSPECTED_MAX = 10_000  # entries per client
_INSPECTED_MAX_LOCAL = 1_000
_INSPECTED_LOCK = threading.Lock()  # searches train from several threads at once


def _inspection_cache(client):
    """This client's cache, without the entries whose chunks it no longer holds (and without
    the caches of closed clients)."""
    for closed in [other for other in _INSPECTED if other.status in ("closing", "closed")]:
        del _INSPECTED[closed]
    if client is None:
        return _INSPECTED_LOCAL, _INSPECTED_MAX_LOCAL
    cache = _INSPECTED.setdefault(client, collections.OrderedDict())
    held = held_keys(client)
    for key in [key for key, (keys, _) in cache.items() if not all(k in held for k in keys)]:
        del cache[key]
    return cache, _INSPECTED_MAX


def _inspect(client, chunks, want_labels):
    """The facts of every chunk, from one :func:`~taskdml.parallel.engine._chunks.inspect_chunk`
    task per chunk not seen before (with its distinct labels if *want_labels*).

    An inspection's key is a token of the chunk keys it reads, and Dask keys name immutable
    data, so facts found once stay true while the chunks exist. Only the tasks of chunks
    not in the cache are built.
    """
    args = [(chunk.X, chunk.y, chunk.weight, want_labels) for chunk in chunks]
    task_keys = [
        _task_key(_chunks.inspect_chunk, "inspect", chunk.index, *chunk_args)
        for chunk, chunk_args in zip(chunks, args)
    ]
    with _INSPECTED_LOCK:
        cache, limit = _inspection_cache(client)
        facts = {key: cache[key] for key in task_keys if key in cache}
    missing = [
        (chunk, key, chunk_args)
        for chunk, key, chunk_args in zip(chunks, task_keys, args)
        if key not in facts
    ]
    if missing:
        import dask

        inspect = dask.delayed(_chunks.inspect_chunk, pure=True)
        tasks = [inspect(*chunk_args, dask_key_name=key) for _, key, chunk_args in missing]
        found = _gather(client, tasks)
    else:
        found = []
    for (chunk, key, _), chunk_facts in zip(missing, found):
        keys = tuple(
            part.key
            for part in (chunk.X, chunk.y, chunk.weight)
            if part is not None and client is not None
        )
        facts[key] = (keys, chunk_facts)
    with _INSPECTED_LOCK:
        cache.update(facts)
        for key in facts:
            cache.move_to_end(key)
        while len(cache) > limit:
            cache.popitem(last=False)
    return [facts[key][1] for key in task_keys]


def _scorer(scoring):
    if scoring is None or callable(scoring):
        return scoring
    from sklearn.metrics import get_scorer

    return get_scorer(scoring)


def _estimator_token(estimator):
    """A deterministic token of the estimator's class, parameters and learned state.

    Training keys must differ whenever the result could: two candidates of a search differ
    only in their parameters, and a fitted estimator continues from its state.
    """
    import joblib

    return type(estimator).__name__, joblib.hash(estimator)


def _fit_once(estimator, chunks, plan, client, passes=False):
    import dask

    name = _keys.key_name(
        "train", _estimator_token(estimator), [c.X.key for c in chunks], phase="fit"
    )
    parts = [(chunk.X, chunk.y, chunk.weight) for chunk in chunks]
    began = time.perf_counter()
    task = dask.delayed(_tasks.fit_concatenated, pure=True)(
        estimator, parts, plan.transformers, _lone_fit_threads(client), dask_key_name=name
    )
    fitted = _gather(client, [task])[0]
    entry = {
        # the passes fit made over the data, for a family whose n_iter_ counts them
        "epoch": int(np.max(getattr(fitted, "n_iter_", 1))) if passes else 1,
        "duration_s": time.perf_counter() - began,
        **_replica.epoch_scores(fitted, plan.validation, plan),
    }
    return TrainResult(fitted, [entry], "fit", {})


def _sequential(estimator, chunks, plan, client):
    """One replica through every chunk, epoch by epoch, scored between epochs."""
    import dask

    name = _keys.key_name(
        "train", _estimator_token(estimator), [c.X.key for c in chunks], plan.seed, phase="fit"
    )
    state, history, step = copy.deepcopy(estimator), [], 0
    loss = plan.stopping.loss if plan.stopping.on == "train_loss" else None
    for epoch in range(plan.epochs):
        began = time.perf_counter()
        carried = (state, 0.0, 0)
        for chunk in _tasks.epoch_order(chunks, (plan.seed, epoch, 0), plan.shuffle):
            carried = dask.delayed(_tasks.partial_fit_link, pure=True)(
                carried,
                chunk.X,
                chunk.y,
                plan.transformers,
                plan.fit_kwargs,
                chunk.weight,
                _replica.row_seed(plan, epoch, chunk.index),
                loss,
                dask_key_name=(name, step),
            )
            step += 1
        state, total, counted = _gather(client, [carried])[0]
        entry = {
            "epoch": epoch + 1,
            "duration_s": time.perf_counter() - began,
            **_replica.epoch_scores(state, plan.validation, plan),
            **_replica.Progress.mean([(total, counted)]),
        }
        history.append(entry)
        _replica.publish_epoch(plan, entry)
        if stop_reason(history, plan.stopping):
            break
    return TrainResult(state, history, "sequential", {"replicas": 1})


def _owned(chunks, n_replicas):
    """The chunks of each replica: chunk ``i`` belongs to replica ``i mod n_replicas``."""
    return [[c for c in chunks if c.index % n_replicas == rank] for rank in range(n_replicas)]


def _with_rounds(plan, owned):
    """*plan* with the most blocks of a replica and the most rounds of one epoch (``sync_every``
    blocks a round; period 1 for ``"auto"``, whose rounds the replicas count as they go)."""
    most = max(len(chunks) for chunks in owned)
    every = 1 if plan.sync_every == _period.AUTO else plan.sync_every
    return dataclasses.replace(plan, rounds_per_epoch=-(-most // every), most_blocks=most)


def _replicated(
    estimator, chunks, plan, client, strategy, staleness, n_replicas, clock, workers=None
):
    """Sync or async replicas, as pinned long-running tasks or as local threads.

    The replicas coordinate through one *collective*: an all-reduce (sync: direct messages
    between their workers, or an actor) or a parameter server (async: a Dask actor on the
    first replica's worker). Both go on when a worker is lost (:func:`_elastic_sync`,
    :func:`_elastic_async`). The result's
    ``setup_s`` counts from the call's start to the replicas' submission; *clock* (a
    :class:`_Clock`) gets the pieces of the fixed cost.
    """
    if client is None:
        return _replicated_locally(
            estimator, chunks, plan, strategy, staleness, n_replicas or 1, clock
        )
    # only the replicas score on the workers; the other strategies score in this process
    _warm.check_loadable(client, {"scoring": plan.scorer}, owner="train")
    rule = get_merge_rule(estimator)
    plan = dataclasses.replace(plan, rule=rule)
    if strategy == "async":
        return _elastic_async(
            estimator, chunks, plan, client, staleness, n_replicas, clock, workers
        )
    return _elastic_sync(estimator, chunks, plan, client, n_replicas, clock, workers)


def _elastic_sync(estimator, chunks, plan, client, n_replicas, clock, workers):
    """Sync replicas on a cluster, in segments re-planned as workers join and leave
    (:mod:`taskdml.parallel.engine._elastic`)."""
    by_index = {chunk.index: chunk for chunk in chunks}
    may_grow = workers is None and n_replicas is None
    state, prepared, epoch, left, rounds_before = estimator, False, 0, None, 0
    period_state, earlier, resumed_from = None, [], None
    segments, replans, used, lost_in_a_row = [], [], set(), 0
    checkpoints = _checkpoint.claim()
    saved = checkpoints.load() if checkpoints is not None else None
    if saved is not None:
        state, prepared, epoch, rounds_before = saved["state"], True, *saved["position"]
        period_state, earlier, replans = saved["period_state"], saved["history"], saved["replans"]
        if saved["left"] is not None:
            left = [[by_index[i] for i in share] for share in saved["left"]]
        resumed_from = {"epoch": epoch + 1, "rounds_before": rounds_before}
    while True:
        threads, who_has = _threads_and_holders(client, workers, chunks)
        clock.lap("workers_s")
        count = _replica_count(n_replicas, threads, len(chunks))
        owned = _owned(chunks, count)
        if left is not None and len(left) != count:
            left = _elastic.deal(chunks, [c.index for share in left for c in share], count)
        segment_plan = dataclasses.replace(
            _with_rounds(plan, owned),
            first_epoch=epoch,
            resumed=prepared,
            resume_blocks=max(len(share) for share in left) if left else 0,
            rounds_before=rounds_before,
            period_state=period_state,
            training=uuid.uuid4().hex,
            checkpoint_s=_elastic.checkpoint_seconds(),
            earlier=tuple(earlier + [e for s in segments for e in s.history]),
        )
        if replans and "replicas" not in replans[-1]:  # the re-plan this segment follows
            replans[-1]["replicas"] = count
        began = time.perf_counter()

        def grows(now, count=count):
            return len(now) > count and count < len(chunks)

        segment = _segment(
            client,
            state,
            owned,
            left,
            segment_plan,
            "sync",
            None,
            threads,
            clock,
            grows if may_grow else None,
            who_has=who_has,
        )
        used.update(segment.addresses)
        if segment.gone:
            lost_in_a_row += 1
            if lost_in_a_row > 1:
                raise _lost_again(segment, epoch)
            replans.append(
                {
                    "epoch": epoch + 1,
                    "reason": "left",
                    "workers": sorted(segment.gone),
                    "repeated_s": time.perf_counter() - began,
                }
            )
            continue
        segments.append(segment.result("sync", count))
        lost_in_a_row = 0
        position = segment.outcomes[0][2]["position"]
        if position is None:
            break
        state, prepared = segments[-1].estimator, True
        epoch, indices, rounds_before = position
        period_state = segment.outcomes[0][2]["period_state"]
        left = None
        if indices is not None:
            left = [[by_index[i] for i in o[2]["position"][1]] for o in segment.outcomes]
        if checkpoints is not None:
            checkpoints.save(
                {
                    "state": state,
                    "position": (epoch, rounds_before),
                    "left": None if left is None else [[c.index for c in s] for s in left],
                    "period_state": period_state,
                    "history": earlier + [e for s in segments for e in s.history],
                    "replans": replans,
                }
            )
        joined = set(running_nthreads(client)) - set(segment.addresses) if may_grow else ()
        if joined:
            replans.append({"epoch": epoch + 1, "reason": "joined", "workers": sorted(joined)})
    return _joined(segments, replans, used, earlier, resumed_from)


def _elastic_async(estimator, chunks, plan, client, staleness, n_replicas, clock, workers):
    """Async replicas on a cluster, submitted again on the workers there are when one of
    theirs is lost.

    While the replicas run, the client takes a copy of the parameter server's state every
    ``checkpoint_s`` seconds, at most once per :data:`~taskdml.parallel.engine._elastic.WATCH_S`
    (:meth:`~taskdml.parallel.collective._server._ServerState.snapshot`: the global estimator and
    how many chunks each replica pushed; one model's transfer each time). When a worker is lost the
    replicas are stopped and a new server starts from the server's state if its worker is
    still there, else from the last copy; the chunks it had not absorbed (each replica
    pushes in :func:`~taskdml.parallel.engine._replica.async_order`) are dealt to the new replicas,
    epoch by epoch. ``stats["restarts"]`` records each loss: ``workers``, ``server_lost``,
    ``repeated_s`` (the training time whose pushes were lost and are trained again) and
    ``chunks_left``. A second loss before any push was kept stops with an error. Inside a
    pipeline step each copy is also written as the training's checkpoint
    (:mod:`._checkpoint`), so a resumed run trains only the chunks not absorbed
    (``stats["resumed_from"]``).
    """
    state, resumed, left, updates = estimator, False, None, 0
    restarts, used, resumed_from = [], set(), None
    checkpoints = _checkpoint.claim()
    saved = checkpoints.load() if checkpoints is not None else None
    if saved is not None:  # a run resumed: go on from the last copy it wrote
        by_index = {chunk.index: chunk for chunk in chunks}
        state, resumed, updates = saved["state"], True, saved["updates"]
        left = [(epoch, by_index[index]) for epoch, index in saved["left"]]
        restarts, resumed_from = saved["restarts"], {"updates": updates, "chunks_left": len(left)}
    while True:
        threads = _worker_threads(client, workers)
        count = _replica_count(n_replicas, threads, len(chunks if left is None else left))
        if left is None:
            owned, epochs = _owned(chunks, count), None
            items = [_replica.async_order(rank, share, plan) for rank, share in enumerate(owned)]
        else:
            items = [left[rank::count] for rank in range(count)]
            owned = [[chunk for _, chunk in share] for share in items]
            epochs = [[epoch for epoch, _ in share] for share in items]
        segment_plan = dataclasses.replace(
            _with_rounds(plan, owned),
            resumed=resumed,
            training=uuid.uuid4().hex,
            checkpoint_s=_elastic.checkpoint_seconds(),
        )
        segment = _segment(
            client, state, owned, epochs, segment_plan, "async", staleness, threads, clock,
            on_copy=_async_checkpoint(checkpoints, items, updates, restarts),
        )  # fmt: skip
        used.update(segment.addresses)
        if not segment.gone:
            break
        kept = segment.server_copy
        if restarts and (kept.state is None or not any(kept.state[1].values())):
            raise _server_lost_again(segment)
        if kept.state is not None:
            state, pushed, version = kept.state
            resumed, updates = True, updates + version
            left = _not_pushed(items, pushed)
        restarts.append(
            {
                "reason": "left",
                "workers": sorted(segment.gone),
                "server_lost": segment.addresses[0] in segment.gone,
                "repeated_s": max(0.0, segment.lost_at - kept.taken),
                "chunks_left": sum(map(len, items)) if kept.state is None else len(left),
            }
        )
    result = segment.result("async", count)
    result.stats.update(
        updates=updates + result.stats["updates"], restarts=restarts, workers=sorted(used)
    )
    if resumed_from is not None:
        result.stats["resumed_from"] = resumed_from
    return result


def _async_checkpoint(checkpoints, items, updates, restarts):
    """What the client does with each copy of the server's state inside a pipeline step:
    write it as the training's checkpoint (:mod:`._checkpoint`), with the chunks the server
    had not absorbed, so that a resumed run trains only those. ``None`` outside a step."""
    if checkpoints is None:
        return None

    def save(copy):
        estimator, pushed, version = copy
        checkpoints.save(
            {
                "state": estimator,
                "updates": updates + version,
                "left": [(epoch, chunk.index) for epoch, chunk in _not_pushed(items, pushed)],
                "restarts": restarts,
            }
        )

    return save


def _not_pushed(items, pushed):
    """The ``(epoch, chunk)`` items a server had not absorbed (*pushed*: how many of its
    *items* each replica pushed), epoch by epoch, alternating replicas within an epoch."""
    left = [
        (epoch, position, rank, chunk)
        for rank, share in enumerate(items)
        for position, (epoch, chunk) in enumerate(share[pushed.get(rank, 0) :])
    ]
    return [(epoch, chunk) for epoch, _, _, chunk in sorted(left, key=lambda item: item[:3])]


def _server_lost_again(segment):
    """The error of an async training that lost a worker again before any push was kept."""
    return ConnectionError(
        f"the async training lost the workers {sorted(segment.gone)} right after it had lost "
        "a worker and started again without it, before any update was kept: something in the "
        "training (a chunk, the estimator) may be ending the worker processes, so it stops "
        "here. The workers' logs say why they ended."
    )


class _ServerCopy:
    """The last copy of an async training's server state on the client, taken every
    *every_s* seconds by :meth:`keep` (``state`` ``None``: none yet; ``taken``: when)."""

    def __init__(self, collective, every_s, on_copy=None):
        self.collective, self.every_s, self.on_copy = collective, every_s, on_copy
        self.state, self.taken = None, time.perf_counter()

    def keep(self, now=False):
        if not now and time.perf_counter() < self.taken + self.every_s:
            return
        try:
            state = self.collective.snapshot().result(timeout=SNAPSHOT_TIMEOUT_S)
        except Exception:  # the server's worker is gone: the last copy stands
            return
        self.state, self.taken = state, time.perf_counter()
        _events.publish("server_copy", pushed=sum(state[1].values()), version=state[2])
        if self.on_copy is not None:
            self.on_copy(state)


SNAPSHOT_TIMEOUT_S = 10
"""Seconds the client waits for its parameter server (a copy of its state, an abort)."""


def _left_meanwhile(client, tasks, addresses):
    """The workers of *addresses* that left, when a replica failed on a lost connection (to
    the parameter server's worker, typically): the scheduler may learn of the loss a moment
    after the replica does. ``None`` for any other failure."""
    errors = [task.exception() for task in tasks if task.status == "error"]
    if not any(isinstance(e, OSError) or "Actor was lost" in str(e) for e in errors):
        return None
    deadline = time.monotonic() + LOSS_NOTICE_S
    while time.monotonic() < deadline:
        gone = set(addresses) - set(client.nthreads())
        if gone:
            return gone
        time.sleep(0.1)
    return None


LOSS_NOTICE_S = 10
"""Seconds a connection lost by a replica may take to show as a worker gone."""


def _lost_again(segment, epoch):
    """The error of a training that lost a worker again before it got any further: something
    in the training itself may be ending the worker processes, so it is not tried again."""
    rank = next(r for r, address in enumerate(segment.addresses) if address in segment.gone)
    return ConnectionError(
        f"replica {rank}'s worker {segment.addresses[rank]} left the cluster during epoch "
        f"{epoch + 1}, right after the training had lost a worker at the same point and "
        "started again without it: something in the training (a chunk, the estimator) may "
        "be ending the worker processes, so it stops here. The workers' logs say why they "
        "ended."
    )


def _joined(segments, replans, used, earlier=(), resumed_from=None):
    """One result from a training's segments: the last one's estimator and replica facts,
    every segment's history (after the *earlier* one of a training resumed from a
    checkpoint), the re-plans (also in the history entry of their epoch)."""
    result = segments[-1]
    history = [*earlier, *(entry for segment in segments for entry in segment.history)]
    for replan in replans:
        for entry in history:
            if entry["epoch"] >= replan["epoch"]:
                entry.setdefault("replans", []).append(replan)
                break
    result.stats.update(
        rounds=sum(entry["rounds"] for entry in history),
        workers=sorted(used),
        segments=len(segments),
        replans=replans,
        ran=(segments[0].stats["ran"][0], result.stats["ran"][1]),
    )
    if resumed_from is not None:
        result.stats["resumed_from"] = resumed_from
    return dataclasses.replace(result, history=history)


def _worker_threads(client, workers):
    """``{address: threads}`` of the workers a training may use now: the running ones. A
    paused worker (its memory over distributed's pause fraction) starts no task, so a replica
    pinned to it would never start while the others waited for it in their first round."""
    threads = running_nthreads(client)
    if workers is None:
        if not threads and client.nthreads():
            raise RuntimeError(_NOT_RUNNING.format(which="none of the cluster's workers is"))
        return threads
    stopped = sorted(set(workers) - set(threads))
    if stopped:
        every = client.nthreads()
        unknown = [address for address in stopped if address not in every]
        if unknown:
            raise ValueError(f"workers {unknown} are not in the cluster: {sorted(every)}.")
        raise RuntimeError(_NOT_RUNNING.format(which=f"the workers {stopped} are not"))
    return {address: threads[address] for address in workers}


_NOT_RUNNING = (
    "{which} running: paused (their memory is over distributed's "
    "distributed.worker.memory.pause fraction) or closing, they start no replica, and a "
    "training waits for all of its replicas. Free memory on them (release persisted data "
    "you no longer need), give them a larger memory_limit, or name running workers in "
    "workers=...; then train again."
)


def _replica_count(n_replicas, threads, n_chunks):
    if not threads:
        raise RuntimeError(
            "the training has no worker left to run on: the cluster lost them all; add "
            "workers (or restart the cluster) and train again."
        )
    count = min(n_replicas or len(threads), n_chunks)
    if count > sum(threads.values()):
        raise ValueError(
            f"n_replicas={count} needs {count} worker threads at once (every replica "
            f"runs for the whole training and waits for the others each round), but the "
            f"cluster has {sum(threads.values())}; use n_replicas <= {sum(threads.values())} "
            "or add workers."
        )
    return count


@dataclasses.dataclass
class _Segment:
    """One submission of a training's replicas: what came back, or the workers that left."""

    outcomes: list
    collective: object
    plan: TrainingPlan
    addresses: list
    setup_s: float
    gone: set = None
    lost_at: float = None  # time.perf_counter() when the loss was seen
    server_copy: object = None  # async: the _ServerCopy the client kept
    remote: list = None  # per rank, its chunks held only elsewhere at placement (or None)

    def result(self, strategy, count):
        timings = [_outcome_stats(strategy, outcome) for outcome in self.outcomes]
        result = _result(strategy, self.outcomes, self.collective, self.plan, count, self.remote)
        result.stats.update(
            setup_s=self.setup_s,
            workers=sorted(set(self.addresses)),
            placement=list(self.addresses),
            ran=(min(t["started"] for t in timings), max(t["ended"] for t in timings)),
        )
        return result


def _segment(
    client,
    state,
    owned,
    left,
    plan,
    strategy,
    staleness,
    threads,
    clock,
    grows=None,
    on_copy=None,
    who_has=None,
):
    """Run the replicas once, from *state*, on the chunks *owned* (and *left* of the first
    epoch); see :class:`_Segment`. *who_has*: where the chunks were, if asked already."""
    _in_memory(client, [c for share in owned for c in share])  # placement follows them
    clock.lap("data_wait_s")
    placement, holders = _place(client, owned, threads, who_has)
    addresses = [placement[rank] for rank in range(len(owned))]
    clock.lap("place_s")
    try:
        segment = _run_segment(
            client, state, owned, left, plan, strategy, staleness, clock, grows, on_copy, addresses
        )
        segment.remote = _remote(owned, addresses, holders)
        return segment
    finally:
        _release(client, addresses)


def _run_segment(
    client, state, owned, left, plan, strategy, staleness, clock, grows, on_copy, addresses
):
    """:func:`_segment` once its replicas are placed on *addresses* (by rank)."""
    # The actor and the replicas hold the state of this one training, so their keys are new
    # on every call: with a key of its inputs alone, a call made while the scheduler still
    # held the last one's actor got that actor back, its state and version included.
    name = _keys.key_name(
        "train",
        _estimator_token(state),
        [c.X.key for share in owned for c in share],
        plan.seed,
        strategy,
        plan.training,
        phase="replica",
    )
    if strategy == "sync":
        collective, actor_future = _sync_collective(client, addresses, plan.rule, name)
    else:
        first, start = owned[0][0], state
        if not plan.resumed:
            start = client.submit(
                _prepare_start,
                state,
                first.X,
                first.y,
                plan.fit_kwargs.get("classes"),
                plan.rule,
                key=_keys.key_name("train", name, phase="prepare"),
            )
        actor_future = client.submit(
            _collective.ParameterServerActor,
            start,
            len(owned),
            staleness,
            plan.rule,
            stopping=plan.stopping,
            chunks_per_epoch=sum(len(share) for share in owned),
            actor=True,
            workers=[addresses[0]],
            key=_keys.key_name("train", name, phase="server"),
        )
        collective = actor_future.result()
    # An actor lives as long as its future does: ``actor_future`` is kept to the end.
    replica, start_args = _replica_task(strategy, state)
    clock.lap("collective_s")
    with _taking_turns(client, addresses):
        clock.lap("lock_s")
        tasks = _submit_together(
            client, replica, start_args, owned, left, collective, plan, addresses, name
        )
        setup_s, submitted = clock.since_start(), time.time()
        clock.lap("submit_s")
        # A replica pinned to a worker that left is never run again: the client sees the
        # loss and starts the training again where it can (:mod:`._elastic`).
        kept = None
        if strategy == "sync":
            gone = _elastic.Watch(client, tasks, addresses, grows, plan.training).wait()
        else:
            kept = _ServerCopy(collective, plan.checkpoint_s, on_copy)
            watch = _elastic.Watch(client, tasks, addresses, None, plan.training, kept.keep)
            gone = watch.wait() or _left_meanwhile(client, tasks, addresses)
        if gone:
            lost_at = time.perf_counter()
            _stop(client, tasks, collective, addresses, gone, plan.training)
            if kept is not None:
                kept.keep(now=True)  # a server still there loses no push
            return _Segment(None, collective, plan, addresses, setup_s, gone, lost_at, kept)
        outcomes = client.gather(tasks)
    timings = [_outcome_stats(strategy, outcome) for outcome in outcomes]
    clock.replicas(submitted, timings)
    del actor_future
    return _Segment(outcomes, collective, plan, addresses, setup_s)


def _stop(client, tasks, collective, addresses, gone, training):
    """Stop the replicas of a segment that lost the workers *gone*."""
    import contextlib

    client.cancel(tasks)
    message = f"the workers {sorted(gone)} left the cluster"
    live = sorted(set(addresses) - set(gone))
    with contextlib.suppress(Exception):
        if isinstance(collective, _direct.DirectAllReduce):
            client.run(_direct.abort_training, collective.training, message, workers=live)
        else:
            # Async replicas wait on their server: if it is gone, only this frees them.
            client.run(_elastic.request, training, workers=live)
            collective.abort(message).result(timeout=SNAPSHOT_TIMEOUT_S)


def _prepare_start(estimator, X, y, classes, rule):
    """:func:`prepare_start` on the first chunk, read here if it streams (a task)."""
    return prepare_start(estimator, _stream.read_part(X), _stream.read_part(y), classes, rule=rule)


def _in_memory(client, chunks):
    """Wait until every chunk a replica will read is computed.

    Replicas start together and each holds its worker's thread until the training ends. A
    chunk still being computed (just persisted, a merged block, or recomputed after its
    futures were released) would queue behind a replica on a worker whose only thread that
    replica holds, while the replica waits every round for the one that needs the chunk: a
    deadlock that a CI run hit. So the replicas are submitted only once the data is there.
    """
    from distributed import Future, as_completed

    futures = [part for chunk in chunks for part in chunk[:3] if isinstance(part, Future)]
    if all(future.done() for future in futures):  # the warm case: as_completed costs ~7 ms
        return
    for _ in as_completed(futures, loop=client.loop):  # *client*'s, not a default client
        pass


def _submit_together(client, function, start_args, owned, left, collective, plan, workers, name):
    """Submit replica ``rank``'s task (*function* on its chunks ``owned[rank]``) pinned to
    ``workers[rank]``, all in one message to the scheduler: the client batches its messages
    (one every 10 ms), so one ``submit`` per replica could start the last replica 10 ms
    after the first, and the others would wait for it."""
    import dask

    tasks, collective = [], _collective.handed(collective)  # not a dependency: see Handed
    # dask walks a task's arguments for collections, a dataclass field by field: the plan
    # (its merge rule, stopping rule, history) took 0.3 ms a replica, 5 ms a call at 16. It
    # goes as it is; only its validation data, which may be dask arrays, is walked.
    shared = _AsIs(dataclasses.replace(plan, validation=None))
    for rank, (chunks, worker) in enumerate(zip(owned, workers)):
        resume = None if left is None else [_as_argument(c) for c in left[rank]]
        with dask.annotate(workers=[worker], allow_other_workers=False):
            task = dask.delayed(_replica_task_entry, pure=False)(
                function,
                rank,
                start_args,
                [tuple(c) for c in chunks],
                collective,
                shared,
                plan.validation,
                resume,
                dask_key_name=(name, rank),
            )
        tasks.append(task)
    return client.compute(tasks)


def _as_argument(part):
    """A chunk as a plain tuple (see :func:`_replica_task_entry`); an epoch as it is."""
    return part if isinstance(part, int) else tuple(part)


class _AsIs:
    """A task argument that dask passes on without looking inside it for collections."""

    def __init__(self, value):
        self.value = value


def _replica_task_entry(
    function, rank, start_args, chunks, collective, shared, validation, resume=None
):
    """A replica task. Its chunks come as plain tuples, where a graph finds their futures
    (it passes a NamedTuple's fields on unread); the plan comes :class:`_AsIs`, its
    *validation* data apart; *resume*: those left of the first epoch (sync), or the epoch of
    each chunk (async, after a lost worker)."""
    chunks, collective = [Chunk(*c) for c in chunks], _collective.received(collective)
    plan = dataclasses.replace(shared.value, validation=validation)
    if resume is None:
        return function(rank, *start_args, chunks, collective, plan)
    if function is _replica.async_replica:  # *resume*: the epoch of each chunk
        return function(rank, *start_args, chunks, collective, plan, resume)
    return function(rank, *start_args, chunks, collective, plan, [Chunk(*c) for c in resume])


def _sync_collective(client, addresses, rule, name):
    """The all-reduce of a sync training and the actor future to keep (``None`` if direct).

    Direct messages between the replicas' workers (:mod:`taskdml.parallel.collective._direct`)
    unless the dask config ``taskdml.collective`` says ``"actor"`` or a worker cannot receive them;
    then the all-reduce actor on the first replica's worker, with a warning saying why.
    """
    import dask

    choice = dask.config.get("taskdml.collective", "auto")
    if choice not in COLLECTIVES:
        raise ValueError(
            f"the dask config 'taskdml.collective' must be one of {', '.join(COLLECTIVES)}, "
            f"got {choice!r}."
        )
    if choice != "actor":
        reason = _direct.unavailable(client, addresses)
        if reason is None:
            return _direct.DirectAllReduce(addresses, rule), None
        if choice == "direct":
            raise RuntimeError(f"taskdml.collective is 'direct' but {reason}.")
        warnings.warn(
            f"sync training falls back to the all-reduce actor (a few ms more per round): "
            f"{reason}.",
            RuntimeWarning,
            stacklevel=_user_frame(),
        )
    actor_future = client.submit(
        _collective.AllReduceActor,
        len(addresses),
        rule,
        actor=True,
        workers=[addresses[0]],
        key=_keys.key_name("train", name, phase="allreduce"),
    )
    return actor_future.result(), actor_future


COLLECTIVES = ("auto", "direct", "actor")
"""Values of the dask config ``taskdml.collective``: how sync replicas all-reduce."""

_PER_CLIENT_LOCK = threading.Lock()  # for the per-client caches (_TURNS, _RESERVED)


@contextlib.contextmanager
def _taking_turns(client, addresses):
    """Replicated trainings that share a worker take turns; a single replica never waits.

    Every replica of a training must run at once (they wait for each other every round), and
    each holds a worker thread for the whole training. Two trainings started together could
    each get one of the workers they both need and wait forever for the other. So a training
    holds a ``distributed.Lock`` per worker it uses, taken in the workers' sorted order (two
    trainings never wait on each other in a cycle) and released at the end; trainings on
    disjoint workers run side by side. A worker is held whole, whatever its threads. The
    locks are leased: if the process holding one dies, its lease lapses and the others go on
    (a ``MultiLock`` grant to a client that went away is never released). Only the replicas
    are submitted under them: ``prepare_start`` and the actor wait for nothing, so they are
    submitted (and the actor created) before.
    """
    if len(addresses) == 1:
        yield
        return
    locks = [_worker_lock(client, address) for address in sorted(set(addresses))]
    _acquire_all(locks)
    try:
        yield
    finally:
        _each(_release_lock, locks)


def _acquire_all(locks):
    """Take every one of *locks* (sorted by worker): all tried at once without waiting, so
    that a training whose workers are free pays one round trip to the scheduler, not one per
    worker (16 workers: 16 round trips, then 16 more to release); if another training holds
    any of them, those taken are given back and all are waited for one by one, in order, as
    :func:`_taking_turns` says (the try waits for nothing, so it adds no cycle)."""
    taken = _each(_try_lock, locks)
    if all(taken):
        return
    _each(_release_lock, [lock for lock, got in zip(locks, taken) if got])
    with contextlib.ExitStack() as held:
        for lock in locks:
            held.enter_context(lock)
        held.pop_all()


def _try_lock(lock):
    try:
        return lock.acquire(blocking=False)
    except Exception:  # the scheduler refused: the waits that follow say why
        return False


def _release_lock(lock):
    with contextlib.suppress(Exception):  # a lease that lapsed is released already
        lock.release()


def _each(function, items):
    """``[function(item) for item in items]``, the calls in flight at once: each is a round
    trip to the scheduler (a lock, ``nthreads``, ``who_has``), made from a thread of its own
    with the client's public blocking calls."""
    global _SCHEDULER_CALLS
    if len(items) <= 1:
        return [function(item) for item in items]
    with _PER_CLIENT_LOCK:
        if _SCHEDULER_CALLS is None:
            _SCHEDULER_CALLS = concurrent.futures.ThreadPoolExecutor(
                32, thread_name_prefix="taskdml-scheduler-calls"
            )
    return list(_SCHEDULER_CALLS.map(function, items))


_SCHEDULER_CALLS = None  # the threads of _each, started at the first training that needs them


def _worker_lock(client, address):
    """The lock of one worker's replicas, one object per client (registered once)."""
    with _PER_CLIENT_LOCK:
        locks = _TURNS.setdefault(client, {})
        if address not in locks:
            locks[address] = client_lock(client, f"taskdml-replicas-{address}")
        return locks[address]


_TURNS = weakref.WeakKeyDictionary()  # client -> {worker address: its distributed.Lock}


def _result(strategy, outcomes, collective, plan, n_replicas, remote=None):
    if strategy == "sync":
        state, history, _ = outcomes[0]
        stats = [_outcome_stats(strategy, outcome) for outcome in outcomes]
        facts = {
            "replicas": n_replicas,
            "collective": _collective_kind(collective),
            "rounds": sum(entry["rounds"] for entry in history),
            "busy_s": [s["busy_s"] for s in stats],
            "reduce_wait_s": [s["reduce_wait_s"] for s in stats],
            "copy_s": [s["copy_s"] for s in stats],
            "epoch_end_s": [s["epoch_end_s"] for s in stats],
            "sync_every": plan.sync_every,
            **_round_timings(stats),
            **_stragglers(stats, remote),
        }
        if plan.sync_every == _period.AUTO:
            for name in ("sync_every", "block_s", "round_s", "straggler_wait_s", "min_merges"):
                facts[name] = [entry[name] for entry in history]
        return TrainResult(state, history, "sync", facts)
    state, version, waited, behind, pushes, epochs = _collective.call(collective, "result")
    last = epochs.pop() if epochs else {"epoch": plan.epochs}
    history = epochs + [
        {
            **last,
            "duration_s": max(o["busy_s"] for o in outcomes),
            **_replica.epoch_scores(state, plan.validation, plan),
        }
    ]
    return TrainResult(
        state,
        history,
        "async",
        {
            "replicas": n_replicas,
            "updates": version,
            "versions_behind": (sum(behind) / max(len(behind), 1), max(behind, default=0)),
            "busy_s": [o["busy_s"] for o in outcomes],
            "held_back_s": [waited[rank] for rank in sorted(waited)],
            "pushes": pushes,
        },
    )


def _stragglers(stats, remote=None):
    """Who each round waited for, and why, from the replicas' own records of their rounds
    (``round_log``: seconds of ``partial_fit``, rows, chunk indices; no message of its own).

    ``round_busy_s`` and ``round_rows``: per replica, per round. ``slowest``: per round (of
    the last segment, epochs in order), the replica with the most seconds of ``partial_fit``
    (``rank``), ``late_s`` (its seconds minus the median replica's), ``rows`` and
    ``median_rows``, ``row_s_ratio`` (its seconds per row over the median replica's: above 1,
    a slower or busier core), ``remote_blocks`` (how many of the round's blocks were held only
    on other workers when it was placed; ``None`` unless persisted) and ``cause``: ``"rows"``
    when more rows at the median speed explain more of its lateness than its speed does, else
    ``"speed"`` (``None`` for a round no replica was late in). A remote chunk is copied before
    its replica starts, so it shows in ``start_late_s`` (per replica, seconds after the first
    replica's start) rather than in a round. ``late_s`` sums ``late_s`` over the rounds: the
    seconds the replicas spent waiting for the slowest.
    """
    import statistics

    if "round_log" not in stats[0]:
        return {}
    logs = [s["round_log"] for s in stats]
    starts = [s.get("started") for s in stats]
    slowest = []
    for i, rounds in enumerate(zip(*logs)):
        seconds = [entry[0] for entry in rounds]
        rows = [entry[1] for entry in rounds]
        rank = max(range(len(rounds)), key=seconds.__getitem__)
        median_s, median_rows = statistics.median(seconds), statistics.median(rows)
        per_row = [s / r for s, r in zip(seconds, rows) if r]
        median_per_row = statistics.median(per_row) if per_row else 0.0
        late = seconds[rank] - median_s
        by_rows = (rows[rank] - median_rows) * median_per_row
        by_speed = seconds[rank] - rows[rank] * median_per_row
        mine = None if remote is None or remote[rank] is None else remote[rank]
        slowest.append(
            {
                "round": i,
                "rank": rank,
                "late_s": late,
                "rows": rows[rank],
                "median_rows": median_rows,
                "row_s_ratio": (
                    seconds[rank] / rows[rank] / median_per_row
                    if rows[rank] and median_per_row
                    else None
                ),
                "remote_blocks": None if mine is None else len(set(rounds[rank][2]) & mine),
                "cause": None if late <= 0 else ("rows" if by_rows >= by_speed else "speed"),
            }
        )
    facts = {
        "round_busy_s": [[entry[0] for entry in log] for log in logs],
        "round_rows": [[entry[1] for entry in log] for log in logs],
        "slowest": slowest,
        "late_s": sum(entry["late_s"] for entry in slowest),
    }
    if None not in starts:
        facts["start_late_s"] = [start - min(starts) for start in starts]
    if remote is not None:
        facts["remote_chunks"] = [None if r is None else len(r) for r in remote]
    return facts


def _collective_kind(collective):
    if isinstance(collective, _direct.DirectAllReduce):
        return "direct"
    return "local" if isinstance(collective, _collective.AllReduceLocal) else "actor"


def _round_timings(stats):
    """The direct collective's timings: per replica, seconds spent serialising, on the wire,
    waiting for slower replicas and merging; and ``round_s``, the median over rounds of the
    fastest replica's seconds in the collective (the one that arrived last waits for no
    one: its time is the collective's own cost), as ``collective_round_s``."""
    if "round_times_s" not in stats[0]:
        return {}
    import statistics

    per_round = [min(times) for times in zip(*(s["round_times_s"] for s in stats))]
    timings = {key: [s[key] for s in stats] for key in _direct.TIMINGS}
    return {**timings, "collective_round_s": statistics.median(per_round) if per_round else 0.0}


def _threads_and_holders(client, workers, chunks):
    """``(threads, who_has)``: the workers a training may use now (:func:`_worker_threads`)
    and who holds the chunks, the two questions to the scheduler in flight at once (one
    round trip of waiting instead of two) when every chunk is in memory already; otherwise
    ``who_has`` is ``None`` and :func:`_place` asks once the chunks are there."""
    from distributed import Future

    parts = [part for chunk in chunks for part in chunk[:3] if isinstance(part, Future)]
    held = [chunk.X for chunk in chunks if isinstance(chunk.X, Future)]
    if not held or not all(part.done() for part in parts):
        return _worker_threads(client, workers), None
    threads, who_has = _each(
        lambda ask: ask(),
        [
            functools.partial(_worker_threads, client, workers),
            functools.partial(client.who_has, held),
        ],
    )
    return threads, who_has


def _place(client, owned, threads, who_has=None):
    """Pin each replica to the free worker holding most of its rows (copies the rest once).

    Replicas are spread evenly over the workers first, never more on a worker than it has
    threads (each replica holds one for the whole training); *threads* maps worker address to
    thread count and holds at least as many threads as there are replicas. Streamed chunks
    are read wherever they are trained on, so they weigh nothing here. Workers that hold
    replicas of other trainings of this process (placed and not yet ended: see
    :func:`_release`) come after the others, whatever their rows: trainings started together
    (``ClassSharded``'s shards) spread over the cluster instead of queueing for the same
    workers (:func:`_taking_turns`).
    """
    from distributed import Future

    workers = sorted(threads)
    held = [c.X for chunks in owned for c in chunks if isinstance(c.X, Future)]
    if who_has is None:
        who_has = client.who_has(held) if held else {}
    holders = {key: set(found) for key, found in who_has.items()}
    with _PER_CLIENT_LOCK:  # the choice and its reservation at once, for trainings in threads
        reserved = _RESERVED.setdefault(client, collections.Counter())
        local = []
        for rank, chunks in enumerate(owned):
            for worker in workers:
                here = sum(
                    1 for c in chunks if worker in who_has.get(getattr(c.X, "key", None), ())
                )
                local.append((reserved[worker], -here, rank, worker))
        placement, used = {}, {}
        even = -(-len(owned) // len(workers))
        for capacity in ({w: min(even, threads[w]) for w in workers}, threads):
            for *_, rank, worker in sorted(local):
                if rank not in placement and used.get(worker, 0) < capacity[worker]:
                    placement[rank] = worker
                    used[worker] = used.get(worker, 0) + 1
        reserved.update(placement.values())
    return placement, holders


def _remote(owned, addresses, holders):
    """Per rank, the indices of its chunks that were held only on other workers when it was
    placed (their copy to its worker delays its start), or ``None`` for a rank whose chunks
    are not all persisted (streamed or computed ones are read wherever they are trained)."""
    remote = []
    for chunks, address in zip(owned, addresses):
        keys = [getattr(chunk.X, "key", None) for chunk in chunks]
        if not all(key in holders for key in keys):
            remote.append(None)
            continue
        remote.append({c.index for c, k in zip(chunks, keys) if address not in holders[k]})
    return remote


def _release(client, addresses):
    """The replicas placed on *addresses* by :func:`_place` have ended."""
    with _PER_CLIENT_LOCK:
        reserved = _RESERVED.get(client)
        for address in addresses if reserved is not None else ():
            reserved[address] -= 1


_RESERVED = weakref.WeakKeyDictionary()  # client -> Counter: replicas placed, per worker


def _replicated_locally(estimator, chunks, plan, strategy, staleness, n_replicas, clock):
    """The same replicas as threads of this process, on computed chunks."""
    import dask

    chunks = [Chunk(*dask.compute(chunk.X, chunk.y, chunk.weight), chunk.index) for chunk in chunks]
    n_replicas = min(n_replicas, len(chunks))
    owned = _owned(chunks, n_replicas)
    rule = get_merge_rule(estimator)
    plan = dataclasses.replace(_with_rounds(plan, owned), rule=rule, checkpoint_s=math.inf)
    if strategy == "sync":
        collective = _collective.AllReduceLocal(n_replicas, rule)
    else:
        classes = plan.fit_kwargs.get("classes")
        start = prepare_start(estimator, chunks[0].X, chunks[0].y, classes, rule=rule)
        collective = _collective.ParameterServerLocal(
            start,
            n_replicas,
            staleness,
            rule,
            stopping=plan.stopping,
            chunks_per_epoch=len(chunks),
        )
    replica, start_args = _replica_task(strategy, estimator)
    with concurrent.futures.ThreadPoolExecutor(n_replicas) as pool:
        futures = [
            pool.submit(replica, rank, *start_args, owned[rank], collective, plan)
            for rank in range(n_replicas)
        ]
        setup_s, submitted = clock.since_start(), time.time()
        outcomes = [future.result() for future in futures]
    clock.replicas(submitted, [_outcome_stats(strategy, outcome) for outcome in outcomes])
    result = _result(strategy, outcomes, collective, plan, n_replicas)
    result.stats["setup_s"] = setup_s
    return result


def _outcome_stats(strategy, outcome):
    """The stats dict of one replica's outcome (sync: ``(state, history, stats)``)."""
    return outcome[2] if strategy == "sync" else outcome


class _Clock:
    """Where the fixed cost of one :func:`train` call goes: seconds per piece, in order.

    Before submission, laps of the client's own work (``prepare_s``: arguments, the data
    mode, chunk lists; ``inspect_s``; ``blocks_s``; ``workers_s``: the workers there are;
    ``data_wait_s``: until every chunk is in memory; ``place_s``: who holds them, placement;
    ``collective_s``; ``lock_s``: the wait for the replicas' workers; ``submit_s``). After
    it, from the replicas' own clocks (``time.time``, so across hosts only as good as their
    clock sync): ``dispatch_s`` from submission to the first replica's start (the copies of
    chunks held elsewhere included), ``skew_s`` from the first start to the last,
    ``return_s`` from the last replica's end to the results in this process; then
    ``finish_s``, from there to the call's end.
    """

    def __init__(self):
        self.began = self.last = time.perf_counter()
        self.laps, self.returned = {}, None

    def lap(self, name):
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.last
        self.last = now

    def since_start(self):
        return time.perf_counter() - self.began

    def replicas(self, submitted, stats):
        """Add the pieces after *submitted* (``time.time``) from the replicas' *stats*."""
        starts = [s["started"] for s in stats]
        self.laps["dispatch_s"] = max(0.0, min(starts) - submitted)
        self.laps["skew_s"] = max(starts) - min(starts)
        self.laps["return_s"] = max(0.0, time.time() - max(s["ended"] for s in stats))
        self.returned = time.perf_counter()

    def finish(self):
        """``finish_s``: from the results in this process to the call's end (the workers'
        locks given back, the stats put together)."""
        if self.returned is not None:
            self.laps["finish_s"] = time.perf_counter() - self.returned


def _replica_task(strategy, estimator):
    """The replica function of *strategy* and its leading arguments: sync replicas get the
    estimator (rank 0 prepares the start and broadcasts it); async ones pull the global
    estimator from the parameter server instead."""
    if strategy == "sync":
        return _replica.sync_replica, (estimator,)
    return _replica.async_replica, ()
