"""Class-sharded model parallelism: a one-vs-rest linear classifier split by class.

A linear classifier with many classes on many features (1,000 classes x 2^20 hashed features
is 8 GB of ``coef_`` in float64) does not fit one worker. scikit-learn's multi-class
``SGDClassifier`` and ``OneVsRestClassifier`` are one-vs-rest: every class is an independent
binary problem on the same rows. :class:`ClassSharded` splits the classes into contiguous
shards; a shard is a list of binary estimators, one per class, and lives on one worker.

Training is one chain of tasks per shard, one link per chunk, in the chunks' order:
``(name, shard, chunk)`` runs ``partial_fit`` of the shard's binary estimators on that chunk
and hands the shard to the next link on the same worker. Only the chunk travels (to every
shard's worker); a shard's coefficients never leave its worker, and the client sends each
link no more than the chunk's key and the shard's per-class seeds. The links update the shard
in place instead of on a copy, unlike the engine's task functions (:mod:`._tasks`): a copy
would double the memory of a shard, which is what this module exists to bound. A link is
therefore not safe to retry on the same input; Dask recomputes a lost chain from its start.

Exactness. For ``SGDClassifier`` (and ``Perceptron``) every ``partial_fit`` call of the
unsharded model draws one seed per class from ``check_random_state(random_state)`` and trains
class ``c`` on ``y == c`` with that seed, positive weight ``class_weight[c]`` and negative
weight 1. The client draws those same seeds per chunk and gives each shard its classes'
seeds; a shard's binary ``SGDClassifier`` for ``c`` gets them as its ``random_state`` and
``class_weight={1: class_weight[c], 0: 1}``. ``coef_`` and ``intercept_`` then equal the
unsharded model's bit for bit (tested). ``average`` is refused: the multi-class averaged SGD of
scikit-learn writes each class's plain intercept into the averaged intercepts that a binary
averaged model keeps apart, so the two differ beyond rounding. ``OneVsRestClassifier`` clones
its binary estimator per class and trains it on ``y == c``: the shards do the same. Decision
values are computed per shard (a matrix-vector product per class rather than one matrix
product), so they equal the unsharded ones to rounding, and predictions are equal.

Prediction is a task per (chunk, shard) computing the shard's columns of the decision function
(or of the unnormalised probabilities), then a task per chunk combining the shards' columns:
the argmax, or the normalisation of the probabilities. No task ever holds two shards.

Two classes make one binary problem, one row of ``coef_``: it cannot be split, so it is one
shard holding a clone of the whole estimator.

Hybrid parallelism (``n_replicas=R > 1``): every shard is also data-parallel inside. A shard is
an estimator of its own (:class:`_ClassShard`: ``partial_fit`` trains its binary estimators on
a chunk, with its classes' seeds) with a merge rule (:func:`merge_shards`: the binary
estimator's rule class by class, weighted by the rows each replica saw; for SGD the rows-seen
average of ``coef_`` and ``intercept_`` with a global ``t_``), so each shard is trained by the
engine, :func:`~taskdml.parallel.train` with ``n_replicas=R``, one call per shard, the shards
side by side in threads of the client. The engine deals chunk ``i`` to replica ``i % R`` (in
order: no shuffle), merges every *sync_every* blocks per replica (``"auto"``: the period it
measures), places the replicas of a shard on distinct workers, re-plans when workers come and
go, and checkpoints inside a pipeline step. This is local SGD: not bit-equal to the unsharded
model. The merged shard ends on one of its replicas' workers (the shards spread over them), a
future in ``shards_`` as with ``R = 1``; ``placement_`` says where each replica ran. Without a
client the same rounds run in threads of this process, shard after shard. In-memory data is
one chunk, which one replica would train: it trains as with ``R = 1``.

What moves: the engine's replicas exchange the shard at each merge (see
:mod:`taskdml.parallel.engine._train`), and the final shard passes through the client once on
its way back to a worker; with ``R = 1`` a shard never leaves its worker. Trainings whose
replicas share a worker take turns there (the engine holds a worker for the replicas of one
training at a time).
"""

import copy
import numbers
import uuid
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from taskdml import _keys
from taskdml._apply import make_task, stacked
from taskdml._client import scatter
from taskdml.parallel.engine._period import check_sync_every
from taskdml.parallel.merge._registry import register_merge

_MAX_SEED = np.iinfo(np.int32).max  # what scikit-learn's SGD draws its per-class seeds under


class _ClassShard:
    """Some classes of a one-vs-rest model: their labels and binary estimators, or (two
    classes) the whole estimator in ``estimators[0]`` with ``whole`` set.

    A shard trains with :meth:`partial_fit` like any estimator, so the engine can train its
    replicas (``n_replicas > 1``); its merge rule is the binary estimator's, class by class
    (:func:`merge_shards`). *seeds* gives each ``partial_fit`` its classes' seeds: the
    shard's slice of the draw of an integer ``random_state`` (the same on every call, as
    the unsharded SGD draws them), or ``(generator, columns)`` to draw from; ``None`` for
    OneVsRest and whole shards. *all_classes* are every label of the model.
    """

    def __init__(self, kind, classes, estimators, whole, key, all_classes=None, seeds=None):
        self.kind = kind  # "sgd" or "ovr"
        self.classes = classes
        self.estimators = estimators
        self.whole = whole
        self.key = key
        self.all_classes = all_classes
        self.seeds = seeds

    def __sizeof__(self):  # dask's sizeof: the coefficients, so that memory reports are true
        import dask.sizeof

        return sum(dask.sizeof.sizeof(vars(e)) for e in self.estimators)

    def partial_fit(self, X, y, sample_weight=None, classes=None):
        """Train every binary estimator on one chunk, in place; *classes* is ignored (the
        shard knows all the labels)."""
        seeds = self.seeds
        if isinstance(seeds, tuple):  # a generator: one draw for all the classes per call
            generator, columns = seeds
            seeds = generator.randint(_MAX_SEED, size=len(self.all_classes))[columns]
        return train_shard(self, X, y, seeds, self.all_classes, sample_weight)

    def fit(self, X, y, sample_weight=None):  # what check_is_fitted asks an estimator for
        raise TypeError("a shard of ClassSharded trains with partial_fit only.")

    def __sklearn_tags__(self):  # not a classifier to the engine: it needs no classes=
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=True))

    def __sklearn_is_fitted__(self):
        # always "fitted" for the merge: each binary estimator is checked by its own rule
        return True


def merge_shards(replicas, weights):
    """The replicas of one shard merged class by class with the binary estimator's merge
    rule (:func:`~taskdml.parallel.merge_replicas`; for SGD the rows-weighted mean of
    ``coef_`` and ``intercept_`` with a global ``t_``): a new shard (the merge rule of
    :class:`_ClassShard`, which the engine calls after every round)."""
    from taskdml.parallel.merge._registry import merge_replicas

    merged = copy.copy(replicas[0])
    merged.seeds = copy.deepcopy(merged.seeds)
    merged.estimators = [
        merge_replicas([r.estimators[j] for r in replicas], weights)
        for j in range(len(merged.estimators))
    ]
    return merged


register_merge(
    _ClassShard,
    merge_shards,
    family="class-shard",
    notes="Each binary estimator merged with its own rule, weighted by the rows each "
    "replica saw in the round.",
)


def _kind(estimator):
    from sklearn.linear_model import Perceptron, SGDClassifier
    from sklearn.multiclass import OneVsRestClassifier

    if isinstance(estimator, (SGDClassifier, Perceptron)):
        if estimator.average:
            raise ValueError(
                f"ClassSharded cannot shard {type(estimator).__name__}(average="
                f"{estimator.average!r}): scikit-learn's multi-class averaged SGD mixes the "
                "classes' plain and averaged intercepts, which shards of binary problems "
                "cannot reproduce. Use average=False."
            )
        return "sgd"
    if isinstance(estimator, OneVsRestClassifier) and hasattr(estimator.estimator, "partial_fit"):
        return "ovr"
    raise ValueError(
        "ClassSharded shards the classes of a one-vs-rest linear classifier trained with "
        f"partial_fit; got {type(estimator).__name__}. Use SGDClassifier or Perceptron, or "
        "OneVsRestClassifier(<a binary estimator with partial_fit>); for other estimators "
        "use taskdml.DataParallel (data parallelism)."
    )


def new_shard(estimator, kind, classes, shard_classes, key):
    """A fresh shard of *estimator* for *shard_classes* (all of *classes* when two)."""
    if len(classes) == 2:
        return _ClassShard(kind, classes, [clone(estimator)], True, key, classes)
    if kind == "sgd":
        weights = estimator.class_weight or {}
        binaries = [
            clone(estimator).set_params(class_weight={1: weights.get(c, 1.0), 0: 1.0})
            for c in shard_classes
        ]
    else:
        binaries = [clone(estimator.estimator) for _ in shard_classes]
    return _ClassShard(kind, np.asarray(shard_classes), binaries, False, key, classes)


def train_shard(shard, X, y, seeds, all_classes, sample_weight=None):
    """``partial_fit`` every binary estimator of *shard* on one chunk, in place; return it.

    *seeds* are the shard's classes' seeds for this chunk (``None`` for OneVsRest).
    """
    if X.shape[0] == 0:
        return shard
    kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
    if shard.whole:
        shard.estimators[0].partial_fit(X, y, classes=all_classes, **kwargs)
        return shard
    unknown = np.setdiff1d(y, all_classes)
    if len(unknown):
        raise ValueError(
            f"a chunk holds labels {unknown.tolist()!r} outside the classes "
            f"{all_classes.tolist()!r}; pass every label in classes= to fit."
        )
    for i, (label, binary) in enumerate(zip(shard.classes, shard.estimators)):
        if seeds is not None:
            binary.set_params(random_state=int(seeds[i]))
        binary.partial_fit(X, (y == label).astype(np.int64), classes=np.array((0, 1)), **kwargs)
    return shard


def shard_scores(shard, X):
    """The shard's columns of the decision function on chunk *X* (1-D for a whole shard)."""
    if shard.whole:
        return shard.estimators[0].decision_function(X)
    if shard.kind == "ovr":  # what OneVsRestClassifier.predict compares
        from taskdml._compat import _predict_binary

        columns = [_predict_binary(e, X) for e in shard.estimators]
    else:
        columns = [e.decision_function(X) for e in shard.estimators]
    return np.column_stack(columns) if columns else np.empty((X.shape[0], 0))


def shard_decision(shard, X):
    """The shard's columns of ``decision_function`` on chunk *X*."""
    if shard.whole or shard.kind == "sgd":
        return shard_scores(shard, X)
    return np.column_stack([np.ravel(e.decision_function(X)) for e in shard.estimators])


def shard_proba(shard, X):
    """The shard's unnormalised probability columns on chunk *X* (all of them when whole)."""
    if shard.whole:
        return shard.estimators[0].predict_proba(X)
    if shard.kind == "ovr":
        return np.column_stack([e.predict_proba(X)[:, 1] for e in shard.estimators])
    scores = shard_scores(shard, X)
    if shard.estimators[0].loss == "log_loss":
        from scipy.special import expit

        return expit(scores)
    return (np.clip(scores, -1, 1) + 1) / 2  # modified_huber


def combine_predict(classes, kind, *parts):
    """The predicted labels of one chunk from its shards' score columns, in class order.

    Ties go where the unsharded model sends them: ``LinearClassifierMixin`` to the first
    maximal class, ``OneVsRestClassifier`` to the last.
    """
    scores = np.hstack(parts)
    if kind == "ovr":
        return classes[scores.shape[1] - 1 - np.argmax(scores[:, ::-1], axis=1)]
    return classes[np.argmax(scores, axis=1)]


def combine_proba(kind, *parts):
    """The probabilities of one chunk from its shards' columns, normalised per row as the
    unsharded estimator normalises them."""
    proba = np.hstack(parts).astype(np.float64)
    totals = proba.sum(axis=1)
    if kind == "ovr":
        np.divide(proba, totals[:, None], out=proba, where=totals[:, None] != 0)
        return proba
    all_zero = totals == 0
    if np.any(all_zero):  # modified_huber can give every class 0: uniform, as sklearn does
        proba[all_zero, :] = 1
        totals[all_zero] = proba.shape[1]
    return proba / totals[:, None]


def combine_columns(*parts):
    """One chunk's decision function from its shards' columns."""
    return np.hstack(parts)


class ClassSharded(ClassifierMixin, BaseEstimator):
    """A one-vs-rest linear classifier whose classes are split across workers.

    Each shard holds the binary estimators of some classes and trains them with
    ``partial_fit`` on every chunk, in order, on one worker; prediction combines the shards'
    decision functions chunk by chunk. The result equals the unsharded estimator trained with
    ``partial_fit`` on the same chunks in the same order (same ``coef_`` and ``intercept_``
    bit for bit; decision values to rounding). With ``n_replicas > 1`` each shard is also
    trained data-parallel by the engine's replicas on several workers, merged every
    *sync_every* blocks (local SGD: close to the unsharded model, not equal). See
    :mod:`taskdml.parallel.estimators._class_sharded`.

    Parameters
    ----------
    estimator : SGDClassifier, Perceptron or OneVsRestClassifier
        The model to shard. ``SGDClassifier``/``Perceptron`` with ``average=False``; a
        ``OneVsRestClassifier`` over any binary estimator with ``partial_fit``.
    n_shards : int, optional
        Number of shards, at most the number of classes. Default: the number of workers of
        the distributed client (one shard per worker), or 1 without one.
    epochs : int, default=1
        Passes over the chunks, in the same order each time (the unsharded model's
        ``partial_fit`` called on every chunk, *epochs* times).
    n_replicas : int, default=1
        Data-parallel replicas per shard (hybrid parallelism: shards x replicas), each on a
        different worker: every shard is trained by the engine
        (:func:`~taskdml.parallel.train`, ``n_replicas``), chunk ``i`` of every epoch
        to replica ``i % n_replicas``, the replicas of a shard merged every *sync_every* blocks
        each (model averaging for SGD, so not bit-equal to the unsharded model). At most the
        number of workers of the client; without a client the replicas are threads of this
        process. Needs a merge rule for the binary estimator
        (:func:`~taskdml.parallel.get_merge_rule`).
    sync_every : int or "auto", default=1
        Blocks each replica trains between two merges of its shard (``"auto"``: chosen by the
        engine from measured timings); ignored with ``n_replicas=1``.
    replicas : int, optional
        Deprecated since 0.2 (removed in 0.3): the old name of ``n_replicas``, used when
        given, with a ``FutureWarning``.

    Attributes
    ----------
    shards_ : list
        One per shard, in class order: with a distributed client a ``distributed.Future`` of
        the shard, which stays on its worker; otherwise the shard itself. A shard has
        ``classes`` and ``estimators`` (one binary estimator per class).
    classes_ : ndarray of shape (n_classes,)
        The class labels.
    n_features_in_ : int
        Number of features seen in ``fit``.
    placement_ : dict
        ``{shard index: [worker address of each replica]}`` where the shards trained (with
        ``n_replicas > 1``, replica by rank, as the engine placed them); empty lists without a
        client.
    history_ : dict
        ``{shard index: the engine's history}`` with ``n_replicas > 1`` (per epoch the period
        and rounds, see :class:`~taskdml.parallel.TrainResult`); empty otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml.parallel import ClassSharded
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(300, 5)), np.arange(300) % 3
    >>> X[np.arange(300), y] += 3
    >>> model = ClassSharded(SGDClassifier(random_state=0), n_shards=2).fit(X, y)
    >>> [shard.classes.tolist() for shard in model.shards_]
    [[0, 1], [2]]
    >>> unsharded = SGDClassifier(random_state=0).partial_fit(X, y, classes=[0, 1, 2])
    >>> bool((model.predict(X) == unsharded.predict(X)).all())
    True
    """

    def __init__(
        self, estimator, n_shards=None, epochs=1, n_replicas=1, sync_every=1, replicas="deprecated"
    ):
        self.estimator = estimator
        self.n_shards = n_shards
        self.epochs = epochs
        self.n_replicas = n_replicas
        self.sync_every = sync_every
        self.replicas = replicas

    def _n_replicas(self):
        """``n_replicas``, or the deprecated ``replicas`` when it was given (with a warning)."""
        if isinstance(self.replicas, str) and self.replicas == "deprecated":
            return self.n_replicas
        warnings.warn(
            "ClassSharded(replicas=) was renamed n_replicas in taskdml 0.2 (the name "
            "DataParallel and train use); replicas will be removed in 0.3.",
            FutureWarning,
            stacklevel=3,
        )
        return self.replicas

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def fit(self, X, y=None, classes=None, sample_weight=None):
        """Train the shards on every chunk of *X*, in order.

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Chunked along samples (one feature chunk); in-memory data is one chunk.
        y : dask array or array-like, optional
            Labels (in the ``Dataset`` when *X* is one).
        classes : array-like, optional
            Every label; computed from *y* (one pass over it) when not given.
        sample_weight : dask array or array-like, optional
            Weights of the rows.

        Returns
        -------
        self : ClassSharded
        """
        from taskdml._client import current_client
        from taskdml._data import as_dask, is_chunked, unwrap

        kind = _kind(self.estimator)
        n_replicas = self._n_replicas()
        X, y, sample_weight, _ = unwrap(X, y, sample_weight)
        chunked = is_chunked(X)
        if chunked:
            X, y, sample_weight = as_dask(X, y, sample_weight)
            n_features = X.shape[1]
        else:
            X, y = validate_data(self, X, y, accept_sparse="csr", reset=True)
            check_classification_targets(y)
            n_features = X.shape[1]
        if y is None:
            raise ValueError("ClassSharded.fit needs labels: pass y, or a Dataset with 'y'.")
        if classes is None:
            classes = np.unique(y.compute() if chunked else y)
        classes = np.unique(np.asarray(classes))
        rows = len(classes) if len(classes) > 2 else 1
        if len(classes) < 2:
            raise ValueError(
                f"ClassSharded needs at least 2 classes, got {len(classes)} class "
                f"({classes.tolist()!r}); pass every label in classes=."
            )
        client = current_client() if chunked else None
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"]) if client else []
        n_shards = self.n_shards
        if n_shards is None:
            n_shards = min(max(len(workers), 1), rows)
        if not isinstance(n_shards, numbers.Integral) or n_shards < 1:
            raise ValueError(f"n_shards must be a positive integer, got {n_shards!r}.")
        if not isinstance(self.epochs, numbers.Integral) or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {self.epochs!r}.")
        if not isinstance(n_replicas, numbers.Integral) or n_replicas < 1:
            raise ValueError(f"n_replicas must be a positive integer, got {n_replicas!r}.")
        check_sync_every(self.sync_every, "ClassSharded")
        if n_replicas > 1:
            _check_mergeable(self.estimator, kind, n_replicas)
            if client is not None and n_replicas > len(workers):
                raise ValueError(
                    f"n_replicas={n_replicas} but the client has {len(workers)} worker(s): "
                    "the replicas of a shard train on distinct workers. Use n_replicas <= "
                    f"{len(workers)}, or add workers."
                )
        if n_shards > rows:
            raise ValueError(
                f"n_shards={n_shards} but the model has {rows} coefficient row(s) "
                f"({len(classes)} classes) to shard; use n_shards <= {rows}."
            )
        estimator = clone(self.estimator)
        # a random_state that is not an integer trains differently each time: a fresh key
        fresh = [] if _reproducible(estimator) else [uuid.uuid4().hex]
        name = _keys.key_name(
            "train",
            *fresh, type(estimator).__name__, estimator.get_params(deep=False),
            classes, n_shards, self.epochs,
            *([n_replicas, self.sync_every] if n_replicas > 1 else []),
            *[getattr(a, "name", a) for a in (X, y, sample_weight)],
            phase="shard",
        )  # fmt: skip
        groups = np.array_split(np.arange(len(classes)), n_shards)
        shards = [
            new_shard(estimator, kind, classes, classes[g], (name, s)) for s, g in enumerate(groups)
        ]
        seeds_of = self._seeder(estimator, kind, classes)
        homes = {k: [workers[k % len(workers)]] if workers else [] for k in range(n_shards)}
        history = {}
        if n_replicas > 1 and chunked:  # in memory, one chunk: n_replicas=1 is the same
            for shard, g in zip(shards, groups):
                shard.seeds = _seed_source(estimator, kind, classes, g)
            shards, homes, history = _train_replicas(client, shards, X, y, sample_weight,
                                                     self.epochs, n_replicas,
                                                     self.sync_every)  # fmt: skip
        elif chunked:
            shards = _train_chunked(client, workers, shards, groups, X, y, sample_weight,
                                    seeds_of, classes, name, self.epochs)  # fmt: skip
        else:
            for _ in range(self.epochs):
                seeds = seeds_of()
                for shard, g in zip(shards, groups):
                    train_shard(shard, X, y, None if seeds is None else seeds[g], classes,
                                sample_weight)  # fmt: skip
        self.shards_, self.classes_, self.n_features_in_ = shards, classes, n_features
        self.placement_, self.history_, self._kind = homes, history, kind
        return self

    @staticmethod
    def _seeder(estimator, kind, classes):
        """A function drawing the per-class seeds of the next ``partial_fit`` call, as the
        unsharded multi-class SGD draws them (a fresh generator per call for an integer
        ``random_state``, the same instance advancing otherwise)."""
        if kind != "sgd" or len(classes) == 2:
            return lambda: None
        random_state = estimator.random_state
        return lambda: check_random_state(random_state).randint(_MAX_SEED, size=len(classes))

    def _parts(self, X, function):
        """``function(shard, chunk)`` per (chunk, shard): lists of delayed per chunk, the
        dask array of *X* and whether *X* was chunked."""
        import dask.array as da

        from taskdml._data import as_dask, is_chunked, unwrap

        check_is_fitted(self, "shards_")
        X = unwrap(X)[0]
        chunked = is_chunked(X)
        if chunked:
            X = as_dask(X)[0]
        else:
            X = validate_data(self, X, accept_sparse="csr", reset=False)
            X = da.from_array(X, chunks=X.shape) if not hasattr(X, "tocsr") else X
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but ClassSharded is expecting "
                f"{self.n_features_in_} features as input."
            )
        if not isinstance(X, da.Array):  # an in-memory sparse matrix: one chunk
            blocks = [X]
        else:
            blocks = list(X.to_delayed().ravel())
        shards = [_as_delayed(s) for s in self.shards_]
        phase = function.__name__.strip("_").replace("_", "-")
        token = X.name if isinstance(X, da.Array) else X
        name = _keys.key_name("predict", [_shard_key(s) for s in shards], token, phase=phase)
        homes, client = _homes(self.shards_), None
        if any(homes):  # shards on workers: each (chunk, shard) task runs where its shard is
            client, shards = self.shards_[0].client, self.shards_
            blocks = client.compute(blocks) if isinstance(X, da.Array) else [scatter(client, X)]
        per_chunk = [
            [
                make_task(function, shard, block, key=(name, i, s), client=client, **homes[s])
                for s, shard in enumerate(shards)
            ]
            for i, block in enumerate(blocks)
        ]
        rows = X.chunks[0] if isinstance(X, da.Array) else (X.shape[0],)
        return per_chunk, rows, chunked

    def _plan(self, method):
        """How *method* is computed: ``(per-shard function, combining function, its leading
        arguments, columns of the result or None)``."""
        check_is_fitted(self, "shards_")
        two, n = len(self.classes_) == 2, len(self.classes_)
        if method == "decision_function":
            return (shard_decision, _identity, (), None) if two else (
                shard_decision, combine_columns, (), n)  # fmt: skip
        if method == "predict":
            return (_whole_predict, _identity, (), None) if two else (
                shard_scores, combine_predict, (self.classes_, self._kind), None)  # fmt: skip
        kind = "ovr" if self._kind == "ovr" and not two else "sgd"
        return (shard_proba, combine_columns, (), 2) if two else (
            shard_proba, combine_proba, (kind,), n)  # fmt: skip

    def _chunk_values(self, X, method):
        """*method*'s result on every chunk of *X*: per chunk a future computing where the
        shards are (a delayed without a client); the rows per chunk; whether *X* was
        chunked. Whoever computes from the futures must hold them until it is done."""
        from dask.delayed import Delayed

        function, combine, args, _ = self._plan(method)
        per_chunk, rows, chunked = self._parts(X, function)
        name = _keys.key_name("predict", [str(p[0].key) for p in per_chunk], phase="combine")
        values = []
        for i, parts in enumerate(per_chunk):
            client = None if isinstance(parts[0], Delayed) else parts[0].client
            values.append(make_task(combine, *args, *parts, key=(name, i), client=client))
        return values, rows, chunked

    def __taskdml_parts__(self):
        """``(shell, shards)``: the shell holds the classes, the width and the unfitted
        estimator, and is small; the shards are futures or in-memory shards
        (:mod:`taskdml._parts`). Savers write the model shard by shard, never gathering it."""
        if not hasattr(self, "shards_"):
            return None
        shell = copy.copy(self)
        return shell, list(shell.__dict__.pop("shards_"))

    def __taskdml_with_parts__(self, parts):
        """This shell with its *parts* (futures or in-memory shards) as ``shards_``."""
        self.shards_ = list(parts)
        return self

    def __taskdml_chunk_values__(self, X, method):
        """Per chunk of *X*, *method* computed where the shards are (:mod:`taskdml._parts`)."""
        return self._chunk_values(X, method)

    def _combined(self, X, method):
        values, rows, chunked = self._chunk_values(X, method)
        dtype = self.classes_.dtype if method == "predict" else np.float64
        result = stacked(values, rows, dtype=dtype, width=self._plan(method)[3])
        return result if chunked else result.compute()

    def decision_function(self, X):
        """Decision values per class (1-D for two classes), chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Rows to predict, chunked along samples or in memory.

        Returns
        -------
        scores : dask array or ndarray of shape (n_samples, n_classes) or (n_samples,)
            A dask array for chunked *X* (its chunks already computing on a cluster), a
            NumPy array otherwise.
        """
        return self._combined(X, "decision_function")

    def predict(self, X):
        """The class of every row: the argmax over all shards' decision values.

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Rows to predict, chunked along samples or in memory.

        Returns
        -------
        labels : dask array or ndarray of shape (n_samples,)
            A dask array for chunked *X*, a NumPy array otherwise.
        """
        return self._combined(X, "predict")

    def _has_proba(self):
        estimator = self.estimator
        if _kind(estimator) == "ovr":
            return hasattr(estimator.estimator, "predict_proba")
        return getattr(estimator, "loss", None) in ("log_loss", "modified_huber")

    @available_if(_has_proba)
    def predict_proba(self, X):
        """Class probabilities, normalised over all shards as the unsharded model does.

        Available when the estimator has them (``loss="log_loss"`` or ``"modified_huber"``;
        a OneVsRest estimator with ``predict_proba``).

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Rows to predict, chunked along samples or in memory.

        Returns
        -------
        proba : dask array or ndarray of shape (n_samples, n_classes)
            A dask array for chunked *X*, a NumPy array otherwise.
        """
        return self._combined(X, "predict_proba")

    @available_if(_has_proba)
    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Rows to predict, chunked along samples or in memory.

        Returns
        -------
        log_proba : dask array or ndarray of shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))

    def score(self, X, y=None, sample_weight=None):
        """Mean accuracy of :meth:`predict` on *X* against *y* (computed for dask inputs).

        Parameters
        ----------
        X : dask array, xarray Dataset/DataArray, array-like or sparse matrix
            Rows to predict, chunked along samples or in memory.
        y : dask array or array-like, optional
            True labels (in the ``Dataset`` when *X* is one).
        sample_weight : dask array or array-like, optional
            Weights of the rows.

        Returns
        -------
        score : float
        """
        import dask
        from sklearn.metrics import accuracy_score

        from taskdml._data import unwrap

        X, y, sample_weight, _ = unwrap(X, y, sample_weight)
        y_pred, y, sample_weight = dask.compute(self.predict(X), y, sample_weight)
        return accuracy_score(y, y_pred, sample_weight=sample_weight)


def _reproducible(estimator):
    """Whether every ``random_state`` of *estimator* (nested ones included) is an integer."""
    return all(
        isinstance(value, numbers.Integral)
        for key, value in estimator.get_params(deep=True).items()
        if key.split("__")[-1] == "random_state"
    )


def _identity(part):
    return part


def _shard_key(shard):
    return getattr(shard, "key", shard)


def _whole_predict(shard, X):
    return shard.estimators[0].predict(X)


def _homes(shards):
    """Per shard, the annotations that keep its tasks on its worker (none in memory)."""
    futures = [s for s in shards if not isinstance(s, _ClassShard)]
    if not futures:
        return [{} for _ in shards]
    holders = futures[0].client.who_has(futures)
    return [
        {"workers": list(holders[s.key]), "allow_other_workers": False}
        if not isinstance(s, _ClassShard) and holders.get(s.key)
        else {}
        for s in shards
    ]


def _as_delayed(shard):
    """A shard as a dask argument: a future as it is, an in-memory shard under its own key
    (never tokenized: that would hash all its coefficients)."""
    import dask

    if isinstance(shard, _ClassShard):
        return dask.delayed(shard, name=f"{shard.key[0]}-{shard.key[1]}", traverse=False)
    return shard


def _train_chunked(
    client, workers, shards, groups, X, y, sample_weight, seeds_of, classes, name, epochs
):
    """Train *shards* over the chunks of dask arrays, *epochs* times: chained futures pinned
    one shard per worker with a client, a loop over the computed chunks in this process
    without one."""
    import dask

    blocks = [list(a.to_delayed().ravel()) if a is not None else None for a in (X, y)]
    weights = list(sample_weight.to_delayed().ravel()) if sample_weight is not None else None
    n_chunks = len(blocks[0])
    order = [i for _ in range(epochs) for i in range(n_chunks)]
    if client is None:
        for i in order:
            X_i, y_i, w_i = dask.compute(
                blocks[0][i], blocks[1][i], None if weights is None else weights[i]
            )
            seeds = seeds_of()
            for shard, g in zip(shards, groups):
                train_shard(shard, X_i, y_i, None if seeds is None else seeds[g], classes, w_i)
        return shards
    states = [
        scatter(client, shard, workers=[workers[k % len(workers)]], hash=False)
        for k, shard in enumerate(shards)
    ]
    held = {}  # with several epochs, every chunk is computed once and kept on the workers
    for step, i in enumerate(order):
        if i not in held:
            X_i, y_i = client.compute([blocks[0][i], blocks[1][i]])
            w_i = client.compute(weights[i]) if weights is not None else None
            if epochs > 1:
                held[i] = X_i, y_i, w_i
        else:
            X_i, y_i, w_i = held[i]
        seeds = seeds_of()
        for k, g in enumerate(groups):
            states[k] = client.submit(
                train_shard, states[k], X_i, y_i, None if seeds is None else seeds[g],
                classes, w_i, key=(name, k, step), workers=[workers[k % len(workers)]],
                allow_other_workers=True, pure=False,
            )  # fmt: skip
    from distributed import wait

    wait(states)
    for state in states:  # the first error of a chain; a shard itself never travels here
        if state.status != "finished":
            raise state.exception()
    return states


def _check_mergeable(estimator, kind, replicas):
    """Raise unless the binary estimators of a shard can be merged as :func:`merge_shards`
    merges them (a merge rule that needs no shared initialisation)."""
    from taskdml.parallel.merge._builtin import get_merge_rule, unmergeable_reason

    binary = estimator.estimator if kind == "ovr" else estimator
    rule = get_merge_rule(binary)
    if rule is None:
        raise ValueError(
            f"n_replicas={replicas} merges the replicas of each shard, but "
            f"{unmergeable_reason(binary)} Use n_replicas=1."
        )
    if rule.prepare is not None:
        raise ValueError(
            f"n_replicas={replicas} needs replicas of {type(binary).__name__} that start from "
            f"one shared initialisation (merge rule {rule.family!r}), which ClassSharded does "
            "not draw. Use n_replicas=1, or taskdml.DataParallel."
        )


def _seed_source(estimator, kind, classes, columns):
    """What a shard of the classes at *columns* draws its seeds from (see :class:`_ClassShard`),
    as :meth:`ClassSharded._seeder` draws them for all the classes."""
    if kind != "sgd" or len(classes) == 2:
        return None
    random_state = estimator.random_state
    if isinstance(random_state, numbers.Integral):  # a fresh generator per call: fixed seeds
        return check_random_state(random_state).randint(_MAX_SEED, size=len(classes))[columns]
    return copy.deepcopy(check_random_state(random_state)), columns


def _train_replicas(client, shards, X, y, sample_weight, epochs, replicas, sync_every):
    """Train each shard's *replicas* with the engine, one :func:`~taskdml.parallel.train` per
    shard (threads of this process, side by side, with a client; one after the other
    without): the engine deals the chunks, merges with :func:`merge_shards`, chooses
    ``sync_every="auto"``, re-plans when workers come and go, and checkpoints inside a
    pipeline step (each shard's training under its own name, claimed here in shard order).

    Returns the shards (with a client, futures on one of their replicas' workers, spread
    over them), the workers of each shard's replicas by rank, and each shard's history.
    """
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from taskdml.cache import _checkpoints
    from taskdml.parallel.engine._train import train
    from taskdml.parallel.merge._registry import without_round_start

    claimed = [_checkpoints.claim() for _ in shards]

    def one(shard, checkpoints):
        where = (None, None) if checkpoints is None else (checkpoints.store, checkpoints.key)
        with _checkpoints.scope(*where), _checkpoints.item(getattr(checkpoints, "name", None)):
            return train(
                shard, X, y, sample_weight=sample_weight, epochs=epochs,
                sync_every=sync_every, n_replicas=replicas, shuffle=False, random_state=0,
                client=client or False,
            )  # fmt: skip

    if client is None:
        results = [one(shard, c) for shard, c in zip(shards, claimed)]
    else:  # each thread in a copy of this context: the run's events and checkpoint scope
        with ThreadPoolExecutor(len(shards)) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, one, shard, c)
                for shard, c in zip(shards, claimed)
            ]
            results = [future.result() for future in futures]
    trained, homes, held = [], {}, {}
    for k, result in enumerate(results):
        shard = result.estimator
        for binary in shard.estimators:
            without_round_start(binary)
        homes[k] = list(result.stats.get("placement", []))
        if client is not None:  # back to a worker of its replicas, the least loaded first
            turn = k % len(homes[k])
            home = min(homes[k][turn:] + homes[k][:turn], key=lambda w: held.get(w, 0))
            held[home] = held.get(home, 0) + 1
            shard = scatter(client, shard, workers=[home], hash=False)
        trained.append(shard)
    return trained, homes, {k: result.history for k, result in enumerate(results)}
