"""Running the trials of an adaptive search: data layout, task functions, backends, driver.

- :func:`prepare` lays the training data out once: persisted chunks (futures) on a cluster,
  or computed chunks in this process, and the folds (chunk indices to train on and to score
  on). Nothing is concatenated on the client.
- A *step* trains one trial from the budget it has to the next rung's, for every fold, and
  scores it. :class:`ClusterBackend` submits it as futures, in the step's *mode*: one task
  over every chunk on a worker that holds a copy of them all (``fused``, when a copy fits on
  every worker), a chain of ``partial_fit`` tasks, one per chunk, that follows the data
  (``chain``), one task that runs the data-parallel engine with replicas (``replicated``), or
  subsample-and-fit tasks (``subsample``); then the scoring; then one small task with the
  trial's score. The driver only ever waits for
  that last future, through ``distributed.as_completed``, then fetches the step's states: a
  worker lost later costs no completed step (Dask would recompute a lost state from the
  trial's first step on). :class:`LocalBackend` does the same in this process, one step at a
  time (small in-memory data, no client).
- :class:`Driver` keeps the slots full: whenever a result arrives it tells the policy, starts
  the jobs the policy hands out until the slots are full again, and releases the state of
  every trial the policy has finished with — except, when the refit will continue the best
  trial (``keep_best``), the best trial finished so far, ranked as the search's best is: its
  state is released when a better one finishes, or with the search.

The task functions are pure and module-level: state in, a new state out.
"""

import copy
import dataclasses
import math
import time
from typing import NamedTuple

import numpy as np

from taskdml import _events, _keys
from taskdml._apply import stacked
from taskdml.parallel.engine._boosting import dask_class_name
from taskdml.parallel.engine._stream import is_streamed, read_ahead, read_part
from taskdml.parallel.engine._tasks import (
    concatenate_parts,
    epoch_order,
    fit_chunk,
    fit_concatenated,
    partial_fit_chunk,
)

# --------------------------------------------------------------------------------------------
# Task functions.


def subsample_chunk(X, y, fraction, seed, index):
    """The rows of one chunk kept at *fraction* (a task): nested as the fraction grows."""
    X, y = read_part(X), read_part(y)
    keep = np.random.default_rng([seed, index]).random(X.shape[0]) < fraction
    return ChunkXY(X[keep], None if y is None else y[keep])


def boost_rounds(state, estimator, chunks, start, stop, max_budget):
    """XGBoost or LightGBM grown from budget *start* to *stop* (a task): the budget counts
    boosting rounds, *max_budget* standing for the estimator's ``n_estimators``; the new
    rounds continue *state*'s booster on *chunks* concatenated (``xgb_model``, LightGBM's
    ``init_model``), so a trial that goes on never starts again."""
    rounds = estimator.get_params()["n_estimators"]
    before, after = (max(1, round(rounds * budget / max_budget)) for budget in (start, stop))
    if start == 0:
        before = 0
    after = max(after, before + 1)
    model = copy.deepcopy(estimator).set_params(n_estimators=after - before)
    parts = [(read_part(X), read_part(y)) for X, y in chunks]
    X = concatenate_parts(*[X for X, _ in parts])
    y = np.concatenate([np.asarray(y) for _, y in parts])
    if before and hasattr(state, "get_booster"):
        model.fit(X, y, xgb_model=state.get_booster())
    elif before:
        model.fit(X, y, init_model=state.booster_)
    else:
        model.fit(X, y)
    return model.set_params(n_estimators=after)  # the trees it holds, as its fit would have


def engine_step(estimator, dataset, epochs, options, seed, classes):
    """Train *estimator* for *epochs* with the data-parallel engine, from inside a task.

    *seed* is a list of non-negative integers (search seed, trial, fold, first epoch).
    *dataset* names the fold's training arrays, published on the scheduler by the search;
    the engine's replicas run as tasks of their own while this one waits outside the pool.
    """
    from distributed import worker_client

    from taskdml.parallel import train

    seed = int(np.random.SeedSequence(seed).generate_state(1)[0])
    with worker_client() as client:
        X, y = client.get_dataset(dataset)
        return train(
            estimator,
            X,
            y,
            classes=classes,
            epochs=epochs,
            random_state=seed,
            client=client,
            **options,
        ).estimator


def hold_chunks(parts, supervised):
    """Every chunk of the training data, in one object on this worker (a task).

    *parts* are the chunks' arrays, flat (``X0, y0, X1, y1, ...``; only X's when
    unsupervised). The list returned keeps them here for the search's fused steps: the chunks
    move to each worker once, whatever the scheduler later does with its extra replicas.
    """
    step = 2 if supervised else 1
    return [
        ChunkXY(parts[i], parts[i + 1] if supervised else None) for i in range(0, len(parts), step)
    ]


def train_held(estimator, held, order, fit_kwargs):
    """A copy of *estimator* after ``partial_fit`` on the held chunks *order* (a fused step).

    The same calls, in the same order, as the chain of :func:`partial_fit_chunk` tasks it
    replaces, so the state is the same.
    """
    estimator = copy.deepcopy(estimator)
    for c in order:
        fit_chunk(estimator, *held[c], (), fit_kwargs)
    return estimator


def train_streamed(estimator, chunks, fit_kwargs, prefetch):
    """A copy of *estimator* after ``partial_fit`` on *chunks* in order, each read here
    *prefetch* ahead and dropped after use (a streamed step; the same calls as a chain's)."""
    estimator = copy.deepcopy(estimator)
    reading = read_ahead(chunks, prefetch)
    for _ in range(len(chunks)):
        chunk = next(reading)
        fit_chunk(estimator, *chunk, (), fit_kwargs)
        del chunk
    return estimator


def score_streamed(metric, scorer, estimator, chunks, prefetch):
    """A streamed step's score on the validation *chunks*, read here one after another
    (a task). *metric* is computed chunk by chunk (as :func:`score_held` does); a *scorer*
    without one needs the chunks concatenated."""
    reading = read_ahead(chunks, prefetch)
    if metric is not None:
        from taskdml.metrics import score_in_memory

        return score_in_memory(estimator, reading, metric)
    parts = list(reading)
    return score_parts(scorer, estimator, [c.X for c in parts], [c.y for c in parts])


def score_held(metric, scorer, estimator, held, valid):
    """A fused step's score on the held validation chunks *valid* (a task).

    *metric* (a :mod:`taskdml.metrics` name) is computed chunk by chunk as the chunked
    scoring computes it; without one, *scorer* runs on the chunks concatenated.
    """
    if metric is not None:
        from taskdml.metrics import score_in_memory

        return score_in_memory(estimator, [held[i] for i in valid], metric)
    return score_parts(scorer, estimator, [held[i].X for i in valid], [held[i].y for i in valid])


def score_parts(scorer, estimator, X_parts, y_parts):
    """*scorer* on the validation chunks, gathered here (a task; validation is small)."""
    X = concatenate_parts(*X_parts)
    y = None if y_parts[0] is None else np.concatenate(y_parts)
    return float(scorer(estimator, X, y))


def collect(scores, metric=None):
    """``{"score": mean, "fold_scores": [...]}`` from per-fold scores (a task)."""
    values = [float(score[metric]) if isinstance(score, dict) else float(score) for score in scores]
    return {"score": float(np.mean(values)), "fold_scores": values}


# --------------------------------------------------------------------------------------------
# The data layout.


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How a search's steps train and score, fixed before the first step runs.

    The model is dask-ml's ``Results`` namedtuple: one record with names, rather than a
    string-keyed dict that every reader has to spell the same way.
    """

    prefix: str  # key prefix: the pipeline step, or the search's own name
    token: str  # tokenize() of the search's inputs: its keys' token
    seed: int  # the search's seed: chunk orders, subsamples, engine seeds
    metric: object  # a metric name of taskdml.metrics (chunk-wise), or None
    scorer: object  # the scikit-learn scorer, used when metric is None
    partial_fit: bool  # budget in epochs of partial_fit, else in subsampled rows
    max_budget: int  # the top rung's budget
    dtypes: tuple  # (X dtype, y dtype or None)
    parallel: dict  # the engine's options for replicated steps; {}: chains only
    shuffle: bool  # a new seeded chunk order per trial and epoch
    fit_kwargs: dict  # partial_fit's keyword arguments (classes)
    prefetch: int = 2  # chunks a streamed step reads ahead
    data: dict = (
        None  # how the data reaches the steps: taskdml.parallel.engine._stream.choose's facts
    )


class Fold(NamedTuple):
    """One fold of chunks: the chunk indices to train on and those to validate on."""

    train: list
    valid: list


class ChunkXY(NamedTuple):
    """One chunk of the training data: its X and y (``None`` when unsupervised).

    Unpacked into the task functions' ``X, y`` arguments; the engine's own
    :class:`taskdml.parallel.engine._chunks.Chunk` also carries weights and a replica index.
    """

    X: object
    y: object


@dataclasses.dataclass
class Layout:
    """Chunks and folds of the training data, whatever holds them."""

    rows: list  # rows per chunk
    folds: list  # [Fold(train chunk indices, validation chunk indices)]
    n_features: int
    classes: object  # numpy array for classifiers, else None
    supervised: bool

    @property
    def n_folds(self):
        return len(self.folds)


def split_rows(n_samples, n_chunks):
    """Row boundaries of *n_chunks* nearly equal chunks."""
    bounds = np.linspace(0, n_samples, n_chunks + 1).round().astype(int)
    return list(zip(bounds[:-1], bounds[1:]))


def chunk_count(n_samples, n_chunks_min):
    """How many chunks in-memory data is cut into: about 20k rows each, at least 10."""
    return min(n_samples, max(10, n_chunks_min, n_samples // 20_000))


def prepare(X, y, *, client, n_chunks_min, data="auto"):
    """Lay the training data out as chunks: ``(chunks, rows, dtypes, data facts)``.

    *X* and *y* are NumPy arrays (cut into :func:`chunk_count` chunks) or dask arrays chunked
    along rows (rechunked only if they have fewer than *n_chunks_min* chunks). With a client
    the chunks are futures (scattered, or the persisted blocks) or, when *data* says to
    stream (:func:`taskdml.parallel.engine._stream.choose`), sources the steps read themselves;
    without one, computed arrays.
    """
    import dask
    import dask.array as da
    from distributed import futures_of

    from taskdml.parallel.engine import _stream

    dtypes = (X.dtype, None if y is None else y.dtype)
    if not isinstance(X, da.Array):
        bounds = split_rows(X.shape[0], chunk_count(X.shape[0], n_chunks_min))
        chunks = [ChunkXY(X[a:b], None if y is None else y[a:b]) for a, b in bounds]
        if client is not None:
            # Tasks that hold the data, not scattered data: Dask computes them again if a
            # worker holding them leaves (scattered data would be lost with it).
            flat = [
                client.submit(data_chunk, part, pure=False)
                for chunk in chunks
                for part in chunk
                if part is not None
            ]
            step = 1 if y is None else 2
            chunks = [
                ChunkXY(flat[i], None if y is None else flat[i + 1])
                for i in range(0, len(flat), step)
            ]
        return chunks, [b - a for a, b in bounds], dtypes, IN_MEMORY
    X = X.compute_chunk_sizes() if any(math.isnan(c) for c in X.chunks[0]) else X
    if len(X.chunks[0]) < n_chunks_min:
        X = X.rechunk({0: -(-X.shape[0] // n_chunks_min)})
    arrays = [X.rechunk({1: -1})]
    if y is not None:
        y = da.asarray(y)
        y = y.compute_chunk_sizes() if any(math.isnan(c) for c in y.chunks[0]) else y
        arrays.append(y.rechunk((X.chunks[0],)))
    facts = IN_MEMORY
    if client is None:
        blocks = dask.compute(*[a.to_delayed().ravel().tolist() for a in arrays])
    else:
        in_memory = any(futures_of(a) for a in arrays)
        mode, facts = _stream.choose_for(client, data, sum(a.nbytes for a in arrays), in_memory)
        if mode == "stream":
            blocks = [list(_stream.sources(a).values()) for a in arrays]
        else:
            blocks = [_block_futures(a) for a in client.persist(arrays)]
    keep = [i for i, rows in enumerate(X.chunks[0]) if rows]  # empty chunks teach nothing
    chunks = [ChunkXY(blocks[0][i], None if y is None else blocks[1][i]) for i in keep]
    return chunks, [X.chunks[0][i] for i in keep], dtypes, facts


IN_MEMORY = {"mode": "persist", "reason": "in-memory data, or no cluster"}


def _block_futures(array):
    from dask.core import flatten
    from distributed import futures_of

    futures = {future.key: future for future in futures_of(array)}
    return [futures[key] for key in flatten(array.__dask_keys__())]


def find_classes(chunks, client, name):
    """The sorted distinct labels of every chunk's ``y`` (one small task per chunk)."""
    if client is None:
        return np.unique(np.concatenate([np.unique(y) for _, y in chunks]))
    labels = client.gather(
        [client.submit(_labels, y, key=(name, i)) for i, (_, y) in enumerate(chunks)]
    )
    return np.unique(np.concatenate(labels))


def data_chunk(part):
    """One chunk of in-memory training data, as a task (its data travels in the task)."""
    return part


def _labels(y):
    return np.unique(read_part(y))


def make_folds(n_chunks, cv, validation_fraction, seed):
    """Chunk-aligned folds: a seeded hold-out, or ``cv`` groups of a seeded permutation."""
    order = [int(i) for i in np.random.default_rng([seed, 7]).permutation(n_chunks)]
    if cv is None:
        n_valid = min(n_chunks - 1, max(1, round(validation_fraction * n_chunks)))
        return [Fold(sorted(order[n_valid:]), sorted(order[:n_valid]))]
    groups = [sorted(order[k::cv]) for k in range(cv)]
    return [
        Fold(sorted(i for g in groups[:k] + groups[k + 1 :] for i in g), groups[k])
        for k in range(cv)
    ]


@dataclasses.dataclass
class Job:
    """Train *trial* to *stop* (epochs, or a budget of samples for fit-only estimators)."""

    trial: object
    rung: int
    start: int
    stop: int
    replicas: int = 1
    launched: float = 0.0
    mode: str = None  # set by the backend that launches it (its ``mode``)
    workers: tuple = None  # a replicated step's workers (None: any)


# --------------------------------------------------------------------------------------------
# Backends.


HELD_MEMORY_SHARE = 0.25
"""The largest share of a worker's memory limit that a copy of the training data may take
for the steps to be fused (every chunk held on every worker); above it steps are chains."""


class ClusterBackend:
    """Steps as futures on a distributed cluster; completions through ``as_completed``."""

    def __init__(self, client, chunks, layout, plan):
        from distributed import as_completed

        self.client = client
        self.chunks = chunks  # [(X future, y future or None)]
        self.layout = layout
        self.plan = plan
        self.names = {
            phase: _keys.key_name(plan.prefix, plan.token, phase=phase)
            for phase in (
                "trial-data",
                "trial-fit",
                "trial-step",
                "trial-train",
                "trial-subsample",
                "trial-score",
                "trial-result",
            )
        }
        self.pending = as_completed()
        self.handles = {}
        self.datasets = []
        self.streamed = any(is_streamed(chunk) for chunk in chunks)
        self.validation = [
            self._dataset(fold.valid) if plan.metric and not self.streamed else None
            for fold in layout.folds
        ]
        self.workers, self.n_workers, self.n_threads, self.looked = [], 0, 0, -math.inf
        self.held, self.load = {}, {}  # fused steps: the data and the tasks in flight per worker
        self.fused = plan.partial_fit and not self.streamed and self._fits_everywhere()
        self.follow_workers()

    def _fits_everywhere(self):
        """Whether a copy of the training data fits in every worker's memory share."""
        itemsizes = [np.dtype(dtype).itemsize for dtype in self.plan.dtypes if dtype is not None]
        rows = sum(self.layout.rows)
        size = rows * self.layout.n_features * itemsizes[0] + rows * sum(itemsizes[1:])
        limits = [
            info.get("memory_limit") or math.inf
            for info in self.client.scheduler_info(n_workers=-1)["workers"].values()
        ]
        return bool(limits) and size <= HELD_MEMORY_SHARE * min(limits)

    def follow_workers(self):
        """Take the workers there are now (at most every ``WATCH_S`` seconds): a worker that
        joined gets a copy of the data for the fused steps, and trials like the others; one
        that left is dropped (its steps in flight are computed again elsewhere by Dask)."""
        from taskdml.parallel.engine._elastic import WATCH_S

        if time.monotonic() < self.looked + WATCH_S:
            return
        self.looked = time.monotonic()
        nthreads = self.client.nthreads()
        if sorted(nthreads) == self.workers:
            return
        self.workers = sorted(nthreads)
        self.n_workers, self.n_threads = len(nthreads), sum(nthreads.values())
        if not self.fused:
            return
        for worker in [w for w in self.held if w not in nthreads]:
            del self.held[worker], self.load[worker]
        for worker in self.workers:
            if worker not in self.held:
                self.held[worker], self.load[worker] = self._hold(worker), 0

    def _hold(self, worker):
        """Every chunk in one object on *worker*, for the fused steps."""
        parts = [part for chunk in self.chunks for part in chunk if part is not None]
        return self.client.submit(
            hold_chunks,
            parts,
            self.layout.supervised,
            key=(self.names["trial-data"], worker),
            workers=[worker],
            allow_other_workers=True,
            priority=10_000,
        )

    def mode(self, job):
        """How *job*'s step trains: ``subsample``, ``replicated``, ``streamed``, ``fused`` or
        ``chain``."""
        if dask_class_name(job.trial.estimator) is not None:
            return "rounds"
        if not self.plan.partial_fit:
            return "subsample"
        if self.streamed:
            return "streamed"
        if job.replicas > 1:
            return "replicated"
        return "fused" if self.held else "chain"

    def _arrays(self, indices):
        """Dask arrays over the persisted chunks *indices* (no data moves)."""
        rows = [self.layout.rows[i] for i in indices]
        x_dtype, y_dtype = self.plan.dtypes
        X = stacked(
            [self.chunks[i].X for i in indices], rows, dtype=x_dtype, width=self.layout.n_features
        )
        if not self.layout.supervised:
            return X, None
        return X, stacked([self.chunks[i].y for i in indices], rows, dtype=y_dtype)

    def _dataset(self, indices):
        import xarray as xr

        X, y = self.client.persist(list(self._arrays(indices)))
        return xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)})

    def _published(self, fold, train):
        """The name of a fold's training arrays, published once for the engine's steps."""
        name = f"{self.names['trial-train']}-{fold}"
        if name not in self.datasets:
            X, y = self._arrays(train)
            X, y = self.client.persist([X, y]) if y is not None else (self.client.persist(X), None)
            self.client.publish_dataset(**{name: (X, y)})
            self.datasets.append(name)
        return name

    def launch(self, job):
        """Submit one step of every fold and its scoring; the handle is the score's future."""
        self.follow_workers()
        job.mode = self.mode(job)
        states, scores, workers = self._step(job, range(self.layout.n_folds), score=True)
        result = self.client.submit(
            collect,
            scores,
            self.plan.metric,
            key=(self.names["trial-result"], job.trial.id, job.stop),
            priority=job.rung + 1000,
        )
        self.handles[result] = states, workers
        self.pending.add(result)
        return result

    def _step(self, job, folds, score):
        """``(states, scores, workers)``: futures of every fold's step and score, and the
        workers the fused ones were given (their load is counted until the step's outcome)."""
        trial, priority = job.trial, job.rung
        states, scores, workers = [], [], []
        for fold in folds:
            train = (
                list(range(len(self.chunks))) if fold == "all" else self.layout.folds[fold].train
            )
            state = trial.states[fold] if trial.states else trial.estimator
            if job.mode == "fused":
                worker = min(self.load, key=self.load.get)
                self.load[worker] += 1
                workers.append(worker)
                state = self._fused(state, worker, train, fold, job)
                if score:
                    scores.append(self._score_held(state, worker, fold, job))
            elif job.mode == "streamed":
                state = self._streamed(state, train, fold, job)
                if score:
                    scores.append(self._score_streamed(state, fold, job))
            else:
                step = {
                    "subsample": self._subsample,
                    "replicated": self._replicated,
                    "rounds": self._rounds,
                }
                state = step.get(job.mode, self._chain)(state, train, fold, job)
                if score:
                    scores.append(self._score(state, fold, job, priority + 1000))
            states.append(state)
        return states, scores, workers

    def _subsample(self, state, train, fold, job):
        """A fit-only estimator refitted on the chunks' nested subsample at the job's budget."""
        fraction = job.stop / self.plan.max_budget
        parts = [
            self.client.submit(
                subsample_chunk,
                *self.chunks[c],
                fraction,
                self.plan.seed,
                c,
                key=(self.names["trial-subsample"], job.stop, c),
                priority=job.rung,
            )
            for c in train
        ]
        return self.client.submit(
            fit_concatenated,
            job.trial.estimator,
            parts,
            key=(self.names["trial-fit"], job.trial.id, fold, job.stop, 0),
            priority=job.rung,
        )

    def _rounds(self, state, train, fold, job):
        """XGBoost's or LightGBM's next rounds, continuing the trial's booster, in one task."""
        return self.client.submit(
            boost_rounds,
            state,
            job.trial.estimator,
            [tuple(self.chunks[c][:2]) for c in train],
            job.start,
            job.stop,
            self.plan.max_budget,
            key=(self.names["trial-fit"], job.trial.id, fold, job.stop, 0),
            priority=job.rung,
        )

    def _replicated(self, state, train, fold, job):
        """One task that trains the step with the engine, a replica per worker."""
        options = dict(
            self.plan.parallel,
            n_replicas=job.replicas,
            workers=job.workers,
            shuffle=self.plan.shuffle,
        )
        return self.client.submit(
            engine_step,
            state,
            self._published(fold, train),
            job.stop - job.start,
            options,
            [self.plan.seed, job.trial.id + 1, _fold_number(fold) + 1, job.start],
            self.layout.classes,
            key=(self.names["trial-train"], job.trial.id, fold, job.start),
            priority=job.rung,
        )

    def _fused(self, state, worker, train, fold, job):
        """One task over the chunks held on *worker*: every epoch of the step."""
        return self.client.submit(
            train_held,
            state,
            self.held[worker],
            self._order(train, job.trial, fold, job),
            self.plan.fit_kwargs,
            key=(self.names["trial-step"], job.trial.id, fold, job.start, job.stop),
            workers=[worker],
            allow_other_workers=True,
            priority=job.rung,
        )

    def _streamed(self, state, train, fold, job):
        """One task that reads the step's chunks as it trains on them: every epoch."""
        return self.client.submit(
            train_streamed,
            state,
            [self.chunks[c] for c in self._order(train, job.trial, fold, job)],
            self.plan.fit_kwargs,
            self.plan.prefetch,
            key=(self.names["trial-step"], job.trial.id, fold, job.start, job.stop),
            priority=job.rung,
        )

    def _score_streamed(self, state, fold, job):
        return self.client.submit(
            score_streamed,
            self.plan.metric,
            self.plan.scorer,
            state,
            [self.chunks[i] for i in self.layout.folds[fold].valid],
            self.plan.prefetch,
            key=(self.names["trial-score"], job.trial.id, fold, job.stop),
            priority=job.rung + 1000,
        )

    def _chain(self, state, train, fold, job):
        """A ``partial_fit`` task per chunk and epoch, each where its chunk is."""
        for epoch in range(job.start, job.stop):
            order = epoch_order(
                train, _order_seed(self.plan.seed, job.trial, fold, epoch), self.plan.shuffle
            )
            for position, c in enumerate(order):
                state = self.client.submit(
                    partial_fit_chunk,
                    state,
                    *self.chunks[c],
                    (),
                    self.plan.fit_kwargs,
                    key=(self.names["trial-fit"], job.trial.id, fold, epoch, position),
                    priority=job.rung,
                )
        return state

    def _score_held(self, state, worker, fold, job):
        """A fused step's score, on the validation chunks held where it trained."""
        return self.client.submit(
            score_held,
            self.plan.metric,
            self.plan.scorer,
            state,
            self.held[worker],
            self.layout.folds[fold].valid,
            key=(self.names["trial-score"], job.trial.id, fold, job.stop),
            workers=[worker],
            allow_other_workers=True,
            priority=job.rung + 1000,
        )

    def _order(self, train, trial, fold, job):
        """The chunks a step visits, every epoch's seeded order in turn (see the chain)."""
        return [
            c
            for epoch in range(job.start, job.stop)
            for c in epoch_order(
                train, _order_seed(self.plan.seed, trial, fold, epoch), self.plan.shuffle
            )
        ]

    def _score(self, state, fold, job, priority):
        if self.plan.metric is not None:
            from taskdml.metrics import evaluate_graph

            graph = evaluate_graph(state, self.validation[fold], [self.plan.metric])
            return self.client.compute(graph, priority=priority)
        valid = self.layout.folds[fold].valid
        return self.client.submit(
            score_parts,
            self.plan.scorer,
            state,
            [self.chunks[i].X for i in valid],
            [self.chunks[i].y for i in valid],
            key=(self.names["trial-score"], job.trial.id, fold, job.stop),
            priority=priority,
        )

    def wait(self):
        """Handles of finished steps (blocks until at least one)."""
        return self.pending.next_batch(block=True)

    def outcome(self, handle):
        """``(states, result)`` of a finished step; raises the step's error.

        The states come to this process: a completed step is never computed again. Left on
        the cluster, a state whose worker is lost would be recomputed by Dask from its
        graph, the trial's every step since its start.
        """
        states, workers = self.handles.pop(handle)
        for worker in workers:
            if worker in self.load:  # not if it left meanwhile
                self.load[worker] -= 1
        result = handle.result()
        return self.client.gather(states), result

    def train_all(self, job):
        """Train one state on every chunk to the job's budget (the refit); the estimator."""
        job.mode = self.mode(job)
        (state,), _, _ = self._step(job, ["all"], score=False)
        return state.result()

    def gathered(self, states):
        """The estimators of a trial's *states* (futures), in this process."""
        return self.client.gather(list(states))

    def close(self):
        self.handles.clear()
        self.pending.clear()
        for name in self.datasets:
            try:
                self.client.unpublish_dataset(name)
            except KeyError:
                pass
        self.datasets, self.validation, self.chunks, self.held = [], [], [], {}


class LocalBackend:
    """The same steps in this process, one at a time, in the order they are launched."""

    n_workers = n_threads = 1
    streamed = False

    def __init__(self, chunks, layout, plan):
        self.chunks = chunks  # [(X array, y array or None)]
        self.layout = layout
        self.plan = plan
        self.done = []

    def mode(self, job):
        if dask_class_name(job.trial.estimator) is not None:
            return "rounds"
        return "subsample" if not self.plan.partial_fit else "local"

    def launch(self, job):
        job.mode = self.mode(job)
        try:
            states, scores = self._step(job, range(self.layout.n_folds), score=True)
            handle = _Done(states, collect(scores), None)
        except Exception as error:  # a trial's error is its result
            handle = _Done(None, None, error)
        self.done.append(handle)
        return handle

    def _step(self, job, folds, score):
        trial, states, scores = job.trial, [], []
        for fold in folds:
            train = (
                list(range(len(self.chunks))) if fold == "all" else self.layout.folds[fold].train
            )
            state = trial.states[fold] if trial.states else trial.estimator
            if job.mode == "rounds":
                chunks = [tuple(self.chunks[c][:2]) for c in train]
                args = (job.start, job.stop, self.plan.max_budget)
                state = boost_rounds(state, trial.estimator, chunks, *args)
            elif not self.plan.partial_fit:
                fraction = job.stop / self.plan.max_budget
                parts = [
                    subsample_chunk(*self.chunks[c], fraction, self.plan.seed, c) for c in train
                ]
                state = fit_concatenated(trial.estimator, parts)
            else:
                for epoch in range(job.start, job.stop):
                    for c in epoch_order(
                        train, _order_seed(self.plan.seed, trial, fold, epoch), self.plan.shuffle
                    ):
                        state = partial_fit_chunk(state, *self.chunks[c], (), self.plan.fit_kwargs)
            states.append(state)
            if score:
                valid = self.layout.folds[fold].valid
                scores.append(
                    score_parts(
                        self.plan.scorer,
                        state,
                        [self.chunks[i].X for i in valid],
                        [self.chunks[i].y for i in valid],
                    )
                )
        return states, scores

    def wait(self):
        return [self.done.pop(0)]

    def outcome(self, handle):
        if handle.error is not None:
            raise handle.error
        return handle.states, handle.result

    def train_all(self, job):
        (state,), _ = self._step(job, ["all"], score=False)
        return state

    def gathered(self, states):
        return list(states)

    def close(self):
        self.done, self.chunks = [], []


@dataclasses.dataclass(eq=False)
class _Done:
    states: list
    result: dict
    error: Exception


def _fold_number(fold):
    return -1 if fold == "all" else fold


def _order_seed(seed, trial, fold, epoch):
    """The seed of a trial's chunk order in one epoch (the refit is trial -1, fold -1)."""
    return (seed, trial.id + 1, _fold_number(fold) + 1, epoch)


# --------------------------------------------------------------------------------------------
# The driver.


@dataclasses.dataclass(eq=False)
class Trial:
    """One candidate's estimator and where it stands."""

    id: int
    params: dict
    estimator: object
    bracket: object = None
    budgets: list = dataclasses.field(default_factory=list)
    states: list = None
    budget: int = 0
    rung: int = -1
    scores: dict = dataclasses.field(default_factory=dict)
    fold_scores: list = None
    curve: list = dataclasses.field(default_factory=list)
    steps: list = dataclasses.field(default_factory=list)  # (mode, replicas) per step
    status: str = "pending"
    error: str = None
    fit_time: float = 0.0
    ended: float = None


def _publish_trial(trial, **fields):
    """A ``trial`` event (:mod:`taskdml._events`): where the trial stands now."""
    _events.publish(
        "trial",
        trial=trial.id,
        params=trial.params,
        rung=trial.rung,
        budget=trial.budget,
        status=trial.status,
        **fields,
    )


class AllTrialsFailed(Exception):
    """Raised by the driver when every trial failed (the search turns it into its message)."""


STEPS_PER_THREAD = 2
"""Steps in flight per worker thread. A chain's link waits for the scheduler and for the state
to hop to the next chunk's worker (~5 ms); with one chain per thread the thread idles that long
after every chunk, with two the other chain's link runs meanwhile (measured: 10 ms per link for
one chain on two workers, 6 for two, 5 for four)."""


CHECKPOINT_S = 1.0
"""Inside a pipeline step, the search's state is written to the step's checkpoint when
results arrived, at most this often (see :meth:`Driver.restore`); the dask config
``taskdml.search.checkpoint-s`` overrides it (0: after every result)."""

_SAVED_FIELDS = (
    "budget", "rung", "scores", "fold_scores", "curve", "steps", "status", "error",
    "fit_time", "ended",
)  # fmt: skip

REPLICATED_MIN_SECONDS = 0.25
"""The shortest step (estimated) that may train replicated."""


class Driver:
    """Keep every slot busy; feed results to the policy; release finished trials at once.

    The capacity counts concurrent fold chains (a step of a cv=k search runs k chains):
    :data:`STEPS_PER_THREAD` per worker thread. With *parallel*, :meth:`_replicate` decides
    which steps train with a replica per worker (see the search module's docstring).
    """

    def __init__(
        self,
        policy,
        backend,
        trials,
        *,
        parallel=False,
        patience=None,
        tol=0.0,
        raise_errors=False,
        started=None,
        keep_best=False,
        checkpoints=None,
    ):
        self.policy, self.backend = policy, backend
        self.checkpoints = checkpoints  # a pipeline step's (taskdml.cache._checkpoints)
        self.saved_at, self.unsaved = time.monotonic(), False
        self.relaunch, self.resumed_from = [], None  # set by restore()
        self.keep_best = keep_best
        self.kept = None  # the best trial finished so far: its states outlive its finish
        self.trials = {trial.id: trial for trial in trials}
        self.parallel, self.patience, self.tol = parallel, patience, tol
        self.raise_errors = raise_errors
        self.n_folds = backend.layout.n_folds
        self.in_flight = {}
        self.epoch_seconds = []  # per single-replica step: seconds per epoch and fold
        self.history = []
        self.started = time.perf_counter() if started is None else started

    def clock(self):
        return time.perf_counter() - self.started

    def capacity(self):
        """Fold chains in flight: :data:`STEPS_PER_THREAD` per thread of the workers there
        are now."""
        return max(1, STEPS_PER_THREAD * self.backend.n_threads)

    def run(self):
        for trial_id, rung in self.relaunch:  # the steps in flight when the checkpoint was taken
            self._launch(self.trials[trial_id], rung)
        self._fill()
        while self.in_flight:
            for handle in self.backend.wait():
                self._complete(handle)
            self._finish(self.policy.take_finished())
            self._save_if_due()
            self._fill()
        self._finish(self.policy.take_finished())
        return self.history

    def _save_if_due(self):
        """Checkpoint the search (at most every :data:`CHECKPOINT_S`) when results arrived."""
        if self.checkpoints is None or not self.unsaved:
            return
        import dask

        every = float(dask.config.get("taskdml.search.checkpoint-s", CHECKPOINT_S))
        if time.monotonic() - self.saved_at < every:
            return
        self.checkpoints.save(self._snapshot())
        self.saved_at, self.unsaved = time.monotonic(), False

    def _snapshot(self):
        """Everything the search would need to go on: the policy, every trial's results and
        the estimators of those that may train again, the steps in flight."""
        trials = {}
        for trial in self.trials.values():
            fields = {f: getattr(trial, f) for f in _SAVED_FIELDS}
            fields["states"] = self.backend.gathered(trial.states) if trial.states else None
            trials[trial.id] = fields
        return {
            "params": [self.trials[i].params for i in sorted(self.trials)],
            "policy": copy.deepcopy(self.policy),
            "trials": trials,
            "in_flight": [(job.trial.id, job.rung) for job in self.in_flight.values()],
            "history": list(self.history),
            "epoch_seconds": list(self.epoch_seconds),
            "kept": self.kept.id if self.kept is not None else None,
        }

    def restore(self):
        """Go on from the last checkpoint of this search, if there is one for the same
        candidates: finished trials stay finished, the others continue from the state of
        their last completed step. Returns whether it did."""
        saved = self.checkpoints.load() if self.checkpoints is not None else None
        if saved is None or saved["params"] != [self.trials[i].params for i in sorted(self.trials)]:
            return False
        self.policy = saved["policy"]
        for trial_id, fields in saved["trials"].items():
            for field, value in fields.items():
                setattr(self.trials[trial_id], field, value)
        self.history, self.epoch_seconds = saved["history"], saved["epoch_seconds"]
        self.kept = self.trials[saved["kept"]] if saved["kept"] is not None else None
        self.relaunch = saved["in_flight"]
        self.resumed_from = {"results": len(self.history), "in_flight": len(self.relaunch)}
        return True

    def release_all(self):
        """Drop every future this driver holds (the search ended, or was interrupted)."""
        self.in_flight.clear()
        self.kept = None
        for trial in self.trials.values():
            trial.states = None

    def _fill(self):
        while not self.in_flight or len(self.in_flight) * self.n_folds < self.capacity():
            job = self.policy.next_job()
            if job is None:
                return
            trial_id, rung = job
            self._launch(self.trials[trial_id], rung)

    def _launch(self, trial, rung):
        target = trial.budgets[rung]
        stop = min(target, trial.budget + self.patience) if self.patience else target
        workers = None
        if self.parallel and self._replicate(trial, stop - trial.budget):
            workers = self._replica_workers()
        trial.status = "running"
        replicas = len(workers) if workers else 1
        job = Job(trial, rung, trial.budget, stop, replicas, self.clock(), workers=workers)
        self.in_flight[self.backend.launch(job)] = job

    def _replicate(self, trial, epochs):
        """Whether a step of *epochs* trains replicated: it is long, and the rest of the work
        runnable now would leave the free worker threads idle for most of it.

        In seconds of one thread, from :attr:`epoch_seconds`: the step's own work against the
        work left of the single-replica steps in flight plus the steps waiting (each counted
        at the first rung's budget, a lower bound), spread over the other free threads (those
        not held by replicated steps in flight). Replicated when the others would run out
        before half of the step is done, at least two threads are free, and the step takes
        at least :data:`REPLICATED_MIN_SECONDS` (the engine's fixed cost is ~20 ms a call).
        """
        if self.backend.n_workers < 2 or not self.epoch_seconds or self.backend.streamed:
            return False
        per_epoch = float(np.median(self.epoch_seconds)) * self.n_folds
        own = epochs * per_epoch
        free = self.backend.n_threads - sum(
            job.replicas for job in self.in_flight.values() if job.replicas > 1
        )
        if own < REPLICATED_MIN_SECONDS or free < 2:
            return False
        now = self.clock()
        other = sum(
            max(0.0, (job.stop - job.start) * per_epoch - (now - job.launched))
            for job in self.in_flight.values()
            if job.replicas == 1
        )
        other += self.policy.n_waiting() * trial.budgets[0] * per_epoch
        return other / (free - 1) < own / 2

    def _replica_workers(self):
        """The workers of a new replicated step: a share of the cluster that leaves room for
        the other trials that could run now to replicate beside it.

        With ``k`` trials runnable (at most half as many as workers), a replicated step gets
        ``n_workers // k`` workers, the first of them not held by replicated steps in flight;
        when too few are free it gets every worker and waits for its turn (the engine holds
        a training's workers while it runs).
        """
        names = self.backend.workers
        runnable = len(self.in_flight) + self.policy.n_waiting() + 1
        share = len(names) // max(1, min(runnable, len(names) // 2))
        held = {w for job in self.in_flight.values() if job.workers for w in job.workers}
        free = [w for w in names if w not in held]
        return tuple(free[:share]) if len(free) >= share else tuple(names)

    def _complete(self, handle):
        job = self.in_flight.pop(handle)
        trial = job.trial
        now = self.clock()
        trial.fit_time += now - job.launched
        trial.steps.append((job.mode, job.replicas))
        if job.replicas == 1 and job.stop > job.start:
            self.epoch_seconds.append((now - job.launched) / (job.stop - job.start) / self.n_folds)
        try:
            states, result = self.backend.outcome(handle)
        except Exception as error:
            if self.raise_errors:
                raise
            trial.status, trial.error = "failed", f"{type(error).__name__}: {error}"
            trial.states, trial.ended = None, now
            _publish_trial(trial, error=trial.error)
            self.history.append(self._event(trial, job, float("nan"), now))
            self.policy.fail(trial.id)
            if all(t.status == "failed" for t in self.trials.values()):
                raise AllTrialsFailed(trial.error) from error
            return
        score = result["score"]
        self.unsaved = True
        trial.states, trial.budget, trial.fold_scores = states, job.stop, result["fold_scores"]
        trial.curve.append((job.stop, score))
        self.history.append(self._event(trial, job, score, now))
        plateau = self._plateau(trial)
        if job.stop < trial.budgets[job.rung] and not plateau:
            self._launch(trial, job.rung)  # the next segment of the same rung
            return
        trial.rung, trial.scores[job.rung] = job.rung, score
        trial.status = "plateau" if plateau else "paused"
        _publish_trial(trial, score=score)
        self.policy.record(
            trial.id, job.rung, score if math.isfinite(score) else -math.inf, plateau
        )

    def _plateau(self, trial):
        """dask-ml's rule: no gain above *tol* over the last *patience* epochs."""
        if not self.patience:
            return False
        window = [score for budget, score in trial.curve if budget >= trial.budget - self.patience]
        return len(window) >= 2 and max(window[1:]) - window[0] <= self.tol

    def _finish(self, trial_ids):
        now = self.clock()
        for trial_id in trial_ids:
            trial = self.trials[trial_id]
            if trial.status == "plateau":
                trial.status = f"stopped at rung {trial.rung} (plateau)"
            elif trial.rung == len(trial.budgets) - 1:
                trial.status = "completed"
            else:
                trial.status = f"stopped at rung {trial.rung}"
            _publish_trial(trial)
            if self.keep_best and self._better(trial, self.kept):
                if self.kept is not None:
                    self.kept.states = None
                self.kept = trial  # kept for the refit to continue from
            else:
                trial.states = None
            trial.ended = now

    @staticmethod
    def _better(trial, other):
        """Whether *trial* outranks *other* (``None``: nothing), as the search's best does."""
        if other is None:
            return True

        def key(t):
            score = t.scores[t.rung]
            return (t.budget, score if math.isfinite(score) else -math.inf, -t.id)

        return key(trial) > key(other)

    def _event(self, trial, job, score, now):
        return {
            "trial": trial.id,
            "bracket": trial.bracket,
            "rung": job.rung,
            "budget": job.stop,
            "score": score,
            "mode": job.mode,
            "replicas": job.replicas,
            "workers": list(job.workers) if job.workers else None,
            "started": job.launched,
            "time": now,
        }
