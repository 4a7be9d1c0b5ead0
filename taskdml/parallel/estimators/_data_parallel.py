"""``DataParallel``: the data-parallel engine as a scikit-learn meta-estimator.

:class:`DataParallel` wraps any scikit-learn estimator and trains it with
:func:`taskdml.parallel.train`, so that existing scikit-learn code (a script, a
``Pipeline``, ``GridSearchCV``) gets data-parallel ``partial_fit`` training by changing one
line. The wrapper itself does four things and leaves the training to the engine:

1. **Inputs.** Dask arrays are trained on as they are chunked. xarray objects are unwrapped
   (a ``DataArray`` with dims ``(sample, feature)``, or a ``Dataset`` with variables ``X`` and,
   optionally, ``y``). Tables (a ``Dataset`` of feature columns, from ``read_csv`` with text
   or ``categorical`` columns) and dask DataFrames are trained on per partition, and so is a
   pandas DataFrame given to a wrapped ``Pipeline`` (cut into row chunks, its dtypes kept).
   Anything else is validated like scikit-learn validates it and split into about
   ``max(2, n_workers)`` row chunks, so small NumPy or pandas data needs no client: the
   engine then runs its replicas as threads of this process.
   A wrapped scikit-learn ``Pipeline`` fits its transformers chunk-wise and exactly
   (encoders, imputers, scalers; :mod:`taskdml.parallel.chunkwise._tabular`) and trains its last
   step data-parallel on the transformed chunks.
2. **State.** ``fit`` clones the wrapped estimator; ``partial_fit`` continues from the fitted
   ``estimator_`` for one more epoch. Fitted attributes are set together at the end, after the
   engine returned.
3. **Methods.** ``predict``, ``predict_proba``, ``predict_log_proba``, ``decision_function``,
   ``transform`` and ``score`` exist only when the wrapped estimator has them. On dask input
   they are lazy: one ``map_blocks`` task per chunk, with the fitted estimator put into the
   graph once, as one key. In-memory input is predicted in this process: shipping it to a
   cluster and back would cost more than the prediction (as dask-ml's ``ParallelPostFit``
   does). The output follows the input: NumPy in, NumPy out; dask in, dask out; xarray in,
   xarray out.
4. **Tags.** The estimator type (classifier, regressor, transformer, ...) and the target and
   input tags follow the wrapped estimator through ``__sklearn_tags__``, as they do for
   scikit-learn's own meta-estimators, so ``is_classifier``, cross-validation splitters and
   ``check_estimator`` treat the wrapper as what it wraps.
"""

import math
import numbers
import time

import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.utils import format_bytes
from scipy import sparse
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier, is_regressor
from sklearn.utils import check_random_state, get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_array,
    check_consistent_length,
    check_is_fitted,
    check_X_y,
    validate_data,
)

from taskdml._apply import apply_chunkwise
from taskdml._client import current_client, scatter
from taskdml._data import (
    as_dask,
    is_chunked,
    is_frame,
    outside_annotations,
    partition_lengths,
    unwrap,
)
from taskdml._keys import key_name
from taskdml._meta import estimator_has, wrapped_tags
from taskdml.exceptions import DataError
from taskdml.parallel.chunkwise import _tabular
from taskdml.parallel.engine import _options
from taskdml.parallel.engine._payoff import distributing_pays
from taskdml.parallel.engine._train import DEFAULT_STALENESS, FIT_AT_ONCE_BYTES, train

__all__ = ["DataParallel"]

_PREFIX = "dataparallel"

_OPTIONS = _options.names("DataParallel")
# In-memory data is split into at most max(2, n_workers) chunks of at least this many rows.
_MIN_CHUNK_ROWS = 32


class DataParallel(MetaEstimatorMixin, BaseEstimator):
    """Train a scikit-learn estimator data-parallel on chunks, with ``partial_fit``.

    The wrapped estimator is cloned and trained by the taskdml engine: every worker (or
    thread, without a Dask client) ``partial_fit``\\s the chunks it holds, and the replicas
    are merged with the estimator family's merge rule every ``sync_every`` chunks. An
    estimator without a merge rule is trained sequentially, and one without ``partial_fit``
    is fitted once on all the data; both warn with
    :class:`~taskdml.SequentialFallbackWarning`.

    Parameters
    ----------
    estimator : scikit-learn estimator
        The estimator to train; it is cloned, never modified.
    strategy : {"sync", "async", "sequential"} or None, default=None
        ``"sync"``: model averaging every ``sync_every`` chunks (deterministic for a seed and
        a number of replicas). ``"async"``: a parameter server with a ``staleness`` bound (not
        deterministic). ``"sequential"``: one replica through every chunk. ``None`` chooses:
        with ``epochs="auto"``, data of at most 64 MiB (``FIT_AT_ONCE_BYTES``) or of one chunk
        is fitted with ``estimator.fit`` at once, where it lies (this process for in-memory
        data, one worker for dask data), as is larger in-memory data whose shipping to the
        workers would cost more than the replicas save (an epoch measured on a probe of the
        rows: :mod:`taskdml.parallel.engine._payoff`); otherwise ``"sync"``
        (``"sequential"`` for an estimator without a merge rule).
    epochs : int or "auto", default="auto"
        Passes over the data. ``"auto"`` trains as far as ``estimator.fit`` would: up to
        its ``max_iter``, stopping with its ``tol`` and ``n_iter_no_change`` on the training
        loss of each epoch (measured on every chunk just before it is trained on, as
        scikit-learn's SGD measures it), or on a held-out ``validation_fraction`` of the rows
        when it sets ``early_stopping``; k-means follows ``max_no_improvement``, naive
        Bayes, scalers and IncrementalPCA make one pass. ``stats_["stopping"]`` says which
        rule ran and ``stats_["stopped"]`` why training ended. With ``strategy=None``, small
        data is fitted with ``estimator.fit`` where it lies: distributing it cannot pay
        (``strategy_ == "fit"``, ``stats_["local"]`` says why).
    sync_every : int or "auto", default="auto"
        Chunks each replica trains between two merges (``"sync"``). ``"auto"`` chooses the
        period from the measured seconds per chunk, per merge and waiting for the slowest
        replica, so that these take at most 5 % of the time while every epoch still merges
        as often as the estimator's family needs (4 times; once for linear SGD models); the
        periods are in ``history_`` (``sync_every``, with their inputs ``block_s``,
        ``round_s``, ``straggler_wait_s`` and ``min_merges``).
        An integer is deterministic for a seed, ``"auto"`` is not. In-memory data split
        by default (about one chunk per replica) merges after every chunk.
    staleness : int or None, default=0
        How many chunks a replica may run ahead of the slowest (``"async"``): ``0`` is
        lock-step (measured within half a point of sync's accuracy, where more slack cost 1-3
        points; see :func:`taskdml.parallel.train`), ``None`` never waits.
    shuffle : bool, default=True
        Visit each replica's chunks in a new seeded order every epoch.
    random_state : int, RandomState instance or None, default=None
        Seeds the chunk order and the ``validation`` split. The wrapped estimator's own
        ``random_state`` seeds its initialisation.
    validation : float or (X_val, y_val) or None, default=None
        Data scored after every epoch (``history_[i]["validation_score"]``). A float in
        ``(0, 1)`` holds out that fraction of rows: in each chunk, ``round(fraction * rows)``
        rows drawn with ``random_state`` (at least one row of each chunk stays for training);
        row numbers in the engine's data errors then count the training rows only. The
        validation rows are gathered into memory, so keep them small.
    scoring : str or callable or None, default=None
        Scorer for ``validation`` (a scikit-learn scorer name or ``scorer(estimator, X, y)``);
        default: the estimator's ``score``.
    tol : float, default=1e-4
        Early stopping: improvement of the validation score that counts.
    n_iter_no_change : int or None, default=None
        Early stopping: stop after this many epochs without an improvement of ``tol`` over
        the best earlier validation score. ``None`` trains every epoch.
    chunk_size : int or None, default=None
        Rows per chunk. ``None``: dask input keeps its chunks, and in-memory input is split
        into about ``max(2, n_workers)`` chunks of at least 32 rows.
    n_replicas : int or None, default=None
        Replicas for ``"sync"`` and ``"async"``; default one per worker (one without a client).
    data : {"auto", "persist", "stream"}, default="auto"
        How dask input reaches the replicas: persisted in the workers' memory, or streamed
        (each replica reads its chunks as it trains, ``prefetch`` ahead, and drops them), so
        that data larger than the workers' memory trains in bounded memory. ``"auto"``
        streams data over half the memory the workers have free; ``stats_["data"]`` says
        what ran and why (see :func:`taskdml.parallel.train`).
    prefetch : int, default=2
        Chunks a streaming replica reads ahead.

    Attributes
    ----------
    estimator_ : estimator
        The trained clone of ``estimator``.
    history_ : list of dict
        One entry per epoch: ``epoch``, ``duration_s``, ``samples_seen``, and
        ``validation_score`` / ``train_loss`` where available; with ``"sync"`` also
        ``sync_every`` (the epoch's period) and ``rounds``, and with ``sync_every="auto"``
        ``block_s``, ``round_s``, ``straggler_wait_s`` and ``min_merges``, what the period
        was chosen from. ``partial_fit``
        appends. With ``"async"`` there is one entry for all the epochs of a call.
    n_epochs_ : int
        Epochs trained since the last ``fit`` (fewer than ``epochs`` after early stopping;
        ``estimator_.n_iter_`` after a ``fit`` where the data lies).
    strategy_ : str
        What ran last: ``"sync"``, ``"async"``, ``"sequential"`` (also after a fallback), or
        ``"fit"`` (one ``fit`` on all the data, for an estimator without ``partial_fit``).
    stats_ : dict
        Facts of the last training (:attr:`taskdml.parallel.TrainResult.stats`): replicas, workers,
        timings, and ``data`` (persisted or streamed, and why).
    classes_ : ndarray of shape (n_classes,)
        Class labels (classifiers only).
    n_features_in_ : int
        Number of features seen during ``fit``.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Feature names, when ``X`` was a DataFrame with string column names.

    See Also
    --------
    taskdml.parallel.train : The engine, for dask arrays.
    taskdml.metrics.evaluate : Chunk-wise metrics, used by ``score`` on dask input.

    Notes
    -----
    ``score`` on dask or xarray input is computed chunk by chunk with
    :func:`taskdml.metrics.evaluate` (accuracy for classifiers, R² for regressors); it does
    not take ``sample_weight`` there, and labels outside ``classes_`` are an error rather than
    a miss. On in-memory input it is the wrapped estimator's ``score``.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml import DataParallel
    >>> X, y = make_classification(n_samples=500, random_state=0)
    >>> model = DataParallel(SGDClassifier(random_state=0), epochs=3, random_state=0).fit(X, y)
    >>> model.predict(X[:5]).shape, model.n_epochs_, model.strategy_
    ((5,), 3, 'sync')

    Dask input gives lazy dask output:

    >>> import dask.array as da
    >>> predicted = model.predict(da.from_array(X, chunks=(100, 20)))
    >>> type(predicted).__name__, predicted.chunks, predicted.name.split("-")[:2]
    ('Array', ((100, 100, 100, 100, 100),), ['dataparallel', 'predict'])
    """

    def __init__(
        self,
        estimator,
        *,
        strategy=None,
        epochs="auto",
        sync_every="auto",
        staleness=DEFAULT_STALENESS,
        shuffle=True,
        random_state=None,
        validation=None,
        scoring=None,
        tol=1e-4,
        n_iter_no_change=None,
        chunk_size=None,
        n_replicas=None,
        data="auto",
        prefetch=2,
    ):
        self.estimator = estimator
        self.strategy = strategy
        self.epochs = epochs
        self.sync_every = sync_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.random_state = random_state
        self.validation = validation
        self.scoring = scoring
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.chunk_size = chunk_size
        self.n_replicas = n_replicas
        self.data = data
        self.prefetch = prefetch

    # ----------------------------------------------------------------------------------------
    # Training

    def fit(self, X, y=None, classes=None, sample_weight=None):
        """Train a clone of ``estimator`` for ``epochs`` epochs.

        Parameters
        ----------
        X : dask array or DataFrame, xarray object, or array-like of shape (n_samples, n_features)
            A ``Dataset`` carries ``X`` and, optionally, ``y``, or is a table (feature
            columns as variables, and ``y``). Text and categorical columns need a wrapped
            ``Pipeline`` that encodes them.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs), optional
            Targets; required for classifiers and regressors.
        classes : array-like, optional
            All class labels; found from ``y`` chunk by chunk when omitted.
        sample_weight : array-like of shape (n_samples,), optional
            Passed to every ``partial_fit``.

        Returns
        -------
        self : DataParallel
        """
        return self._train(X, y, classes, sample_weight, continue_from=None, epochs=self.epochs)

    @available_if(lambda self: _can_partial_fit(self))
    def partial_fit(self, X, y=None, classes=None, sample_weight=None):
        """Train one more epoch on this data, continuing from ``estimator_``.

        The first call trains a clone of ``estimator`` like ``fit`` with ``epochs=1``.

        Parameters
        ----------
        X, y, classes, sample_weight
            As for :meth:`fit`. Later calls must have the features of the first, and their
            labels must be in ``classes_``.

        Returns
        -------
        self : DataParallel
        """
        fitted = hasattr(self, "estimator_")
        return self._train(
            X,
            y,
            classes,
            sample_weight,
            continue_from=self.estimator_ if fitted else None,
            epochs=1,
        )

    def _train(self, X, y, classes, sample_weight, *, continue_from, epochs):
        self._check_params()
        first = continue_from is None
        X, y, sample_weight, _ = unwrap(X, y, sample_weight)
        if y is None and get_tags(self.estimator).target_tags.required:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        client = current_client()
        here = self._fits_here(X, y, sample_weight, classes, first, epochs, client)
        if here is not None:
            return self._fit_here(X, y, sample_weight, here)
        if _tabular.is_pipeline(self.estimator) and _is_pandas_frame(X):
            X = outside_annotations(self._frame_chunks, X, client)
        if is_frame(X):
            X, y, sample_weight, feature_names = self._frame_training_data(
                X, y, sample_weight, first
            )
        elif isinstance(X, da.Array):
            X, y, sample_weight = self._lazy_training_data(X, y, sample_weight, first)
            feature_names = None
        else:
            feature_names = _feature_names(X) if first else getattr(self, "feature_names_in_", None)
            X, y, sample_weight = self._in_memory_training_data(X, y, sample_weight, first, client)
        # After the fit-here path, which draws no seed: a RandomState costs ~0.1 ms to seed.
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        X, y, sample_weight, validation = self._validation_data(
            X, y, sample_weight, seed, self._validation(epochs, is_frame(X))
        )
        if not first and is_classifier(self) and classes is None:
            classes = self.classes_
        epochs_before = 0 if first else self.n_epochs_
        history_before = [] if first else self.history_
        result = train(
            clone(self.estimator) if first else continue_from,
            X,
            y,
            sample_weight=sample_weight,
            classes=classes,
            strategy=self.strategy,
            epochs=epochs,
            sync_every=self.sync_every,
            staleness=self.staleness,
            shuffle=self.shuffle,
            # Later partial_fit calls continue the seed sequence instead of repeating epoch 1.
            random_state=(seed + epochs_before) % np.iinfo(np.int32).max,
            validation=validation,
            scoring=self.scoring,
            tol=self.tol,
            n_iter_no_change=self.n_iter_no_change,
            n_replicas=self.n_replicas,
            data=self.data,
            prefetch=self.prefetch,
        )
        history = result.history or [
            {
                "epoch": 1,
                "duration_s": result.stats["wall_s"],
                "samples_seen": result.stats["n_samples"],
            }
        ]
        samples_before = history_before[-1]["samples_seen"] if history_before else 0
        history = [
            dict(
                entry,
                epoch=entry["epoch"] + epochs_before,
                samples_seen=entry["samples_seen"] + samples_before,
            )
            for entry in history
        ]

        fitted = {
            "estimator_": result.estimator,
            "history_": history_before + history,
            "n_epochs_": history[-1]["epoch"],
            "strategy_": result.strategy,
            "stats_": result.stats,
            "n_features_in_": len(X.columns) if is_frame(X) else X.shape[1],
        }
        if feature_names is not None:
            fitted["feature_names_in_"] = feature_names
        if hasattr(result.estimator, "classes_"):
            fitted["classes_"] = result.estimator.classes_
        for name in ("feature_names_in_", "classes_"):
            if name not in fitted:
                self.__dict__.pop(name, None)
        for name, value in fitted.items():
            setattr(self, name, value)
        return self

    def _fits_here(self, X, y, sample_weight, classes, first, epochs, client):
        """Why ``estimator.fit`` in this process is the training asked for, or None: data
        in memory, where shipping it to replicas costs more than the training saves (at
        most :data:`FIT_AT_ONCE_BYTES`, or measured so by
        :func:`~taskdml.parallel.engine._payoff.distributing_pays`), a first ``fit`` as far
        as the estimator's own would go, no ``validation`` of ours to score, and no
        ``classes`` beyond the labels in ``y`` (``fit`` would not know them)."""
        if not first or epochs != "auto" or self.strategy is not None:
            return None
        if self.validation is not None:
            return None
        if is_chunked(X) or any(is_chunked(a) for a in (y, sample_weight) if a is not None):
            return None
        nbytes = sum(_nbytes(a) for a in (X, y, sample_weight) if a is not None)
        if classes is not None and (
            y is None or not np.array_equal(np.unique(classes), np.unique(np.asarray(y)))
        ):
            return None
        if not _tabular.is_pipeline(self.estimator) and not _all_finite(X):
            return None  # the engine names the chunk and the rows
        if nbytes <= FIT_AT_ONCE_BYTES:
            return (
                f"in-memory data of {format_bytes(nbytes)} (at most "
                f"{format_bytes(FIT_AT_ONCE_BYTES)}): "
                "estimator.fit in this process, where the data lies; shipping it to replicas "
                "would cost more than the training"
            )
        if client is None or _tabular.is_pipeline(self.estimator) or is_frame(X):
            return None  # threads share this process's memory; a frame is cut by columns
        replicas = self.n_replicas or sum(client.nthreads().values())
        pays, reason = distributing_pays(
            self.estimator, X, None if y is None else np.asarray(y), sample_weight, nbytes,
            replicas,
        )  # fmt: skip
        return None if pays else reason

    def _fit_here(self, X, y, sample_weight, reason):
        """``estimator.fit`` on in-memory data, in this process (see :meth:`_fits_here`)."""
        estimator = clone(self.estimator)
        began = time.perf_counter()
        kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
        estimator.fit(X, **kwargs) if y is None else estimator.fit(X, y, **kwargs)
        wall = time.perf_counter() - began
        rows = _n_rows(X)
        final = estimator[-1] if _tabular.is_pipeline(estimator) else estimator
        epochs = int(np.max(getattr(final, "n_iter_", 1)))
        self.estimator_ = estimator
        self.history_ = [{"epoch": epochs, "duration_s": wall, "samples_seen": rows * epochs}]
        self.n_epochs_ = epochs
        self.strategy_ = "fit"
        self.stats_ = {
            "local": reason,
            "wall_s": wall,
            "n_samples": rows,
            "stopping": "estimator.fit",
            "stopped": f"estimator.fit ended after {epochs} epochs (n_iter_)",
        }
        self.n_features_in_ = estimator.n_features_in_
        for name in ("feature_names_in_", "classes_"):
            if hasattr(estimator, name):
                setattr(self, name, getattr(estimator, name))
            else:
                self.__dict__.pop(name, None)
        return self

    def _check_params(self):
        """Raise naming the first invalid parameter (the engine's options: from their table,
        :mod:`taskdml.parallel.engine._options`)."""
        name = type(self).__name__
        if not hasattr(self.estimator, "fit"):
            raise TypeError(
                f"{name}: estimator must be a scikit-learn estimator (with fit); got "
                f"{self.estimator!r}."
            )
        _options.check("DataParallel", {option: getattr(self, option) for option in _OPTIONS}, name)

    def _in_memory_training_data(self, X, y, sample_weight, first, client):
        """Validate like scikit-learn, then cut into row chunks: dask arrays for the engine."""
        # NaN and infinity are left to the engine, whose message names the chunk and rows.
        if y is not None and get_tags(self.estimator).target_tags.required:
            X, y = check_X_y(
                X,
                y,
                accept_sparse=self._sparse_formats(),
                ensure_all_finite=False,
                estimator=self,
                multi_output=get_tags(self.estimator).target_tags.multi_output,
                y_numeric=is_regressor(self),
            )
            if is_classifier(self):
                check_classification_targets(y)
        else:
            X = check_array(
                X, accept_sparse=self._sparse_formats(), ensure_all_finite=False, estimator=self
            )
            if y is not None:
                y = np.asarray(y)
                check_consistent_length(X, y)
        if not first:
            self._check_width(X)
        if sample_weight is not None:
            sample_weight = _check_weights(sample_weight, X.shape[0])
        rows = self.chunk_size or _default_chunk_size(X.shape[0], client)

        def chunked(array):
            chunks = (rows,) + (-1,) * (array.ndim - 1)
            name = key_name(_PREFIX, array, chunks, phase="data")
            if client is None or sparse.issparse(array):
                return da.from_array(
                    array, chunks=chunks, name=name, asarray=not sparse.issparse(array)
                )
            # Scattered, not embedded in the graph: the rows go to the workers once, as
            # data, under keys named by their content (a later fit on the same rows reuses
            # them and their inspection).
            return _scattered(client, array, rows, name)

        return (
            chunked(X),
            None if y is None else chunked(y),
            None if sample_weight is None else chunked(sample_weight),
        )

    def _frame_chunks(self, X, client):
        """An in-memory DataFrame for a Pipeline: a dask DataFrame in row chunks (its
        columns keep their dtypes, which scikit-learn's array checks would not)."""
        import dask.dataframe as dd

        from taskdml._data import plain_strings

        rows = self.chunk_size or _default_chunk_size(len(X), client)
        return plain_strings(dd.from_pandas(X, chunksize=rows, sort=False))

    def _frame_training_data(self, X, y, sample_weight, first):
        """A dask DataFrame (a table): ``y`` and ``sample_weight`` on its partitions."""
        name = type(self).__name__
        if isinstance(self.validation, numbers.Real):
            raise ValueError(
                f"{name}: validation={self.validation!r} holds out rows of arrays only; "
                "with a table or DataFrame pass validation=(X_val, y_val)."
            )
        feature_names = _feature_names(X) if first else getattr(self, "feature_names_in_", None)
        if not first and feature_names is not None and list(X.columns) != list(feature_names):
            raise ValueError(
                f"{name}: X has columns {list(X.columns)}, but it was fitted on "
                f"{list(feature_names)}."
            )
        X, y, sample_weight = as_dask(X, y, sample_weight)
        if y is not None and y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
            _warn_column_vector()
        return X, y, sample_weight, feature_names

    def _lazy_training_data(self, X, y, sample_weight, first):
        """Dask input: check shapes cheaply (the engine inspects every chunk) and rechunk."""
        if X.ndim != 2:
            raise ValueError(
                f"Expected a 2-D array (samples, features), got a dask array of shape {X.shape}."
            )
        if not first:
            self._check_width(X)
        if self.chunk_size is not None:
            X = X.rechunk({0: self.chunk_size})
        if y is not None:
            y = da.asarray(y)
            if (
                y.ndim == 2
                and y.shape[1] == 1
                and not get_tags(self.estimator).target_tags.multi_output
            ):
                y = y[:, 0]
                _warn_column_vector()
        if sample_weight is not None:
            sample_weight = da.asarray(sample_weight)
            if sample_weight.ndim != 1:
                raise ValueError(f"sample_weight must be 1-D; got shape {sample_weight.shape}.")
        return X, y, sample_weight

    def _validation(self, epochs, frame):
        """The ``validation`` of this training: ours, or, when ``epochs="auto"`` follows an
        estimator that holds rows out to stop on (``early_stopping=True``), its
        ``validation_fraction`` (of arrays: a table's training stops on its training loss)."""
        if self.validation is not None or epochs != "auto" or frame:
            return self.validation
        final = self.estimator.steps[-1][1] if _tabular.is_pipeline(self.estimator) else None
        final = final or self.estimator
        if getattr(final, "early_stopping", False) is True:
            return getattr(final, "validation_fraction", None)
        return None

    def _validation_data(self, X, y, sample_weight, seed, validation):
        """``(X, y, sample_weight, validation)`` with the validation rows held out if asked."""
        if validation is None:
            return X, y, sample_weight, None
        if not isinstance(validation, numbers.Real):
            X_val, y_val = validation
            X_val, y_val, _, _ = unwrap(X_val, y_val, None)
            if is_frame(X):  # a table: the pipeline's transformers read X_val as it is
                X_val = X_val.compute() if is_frame(X_val) else X_val
                return X, y, sample_weight, (X_val, None if y_val is None else np.asarray(y_val))
            X_val = check_array(
                X_val, accept_sparse=self._sparse_formats(), ensure_all_finite=False, estimator=self
            )
            if X_val.shape[1] != X.shape[1]:
                raise ValueError(
                    f"validation X has {X_val.shape[1]} features, but the training data "
                    f"has {X.shape[1]}."
                )
            return X, y, sample_weight, (X_val, None if y_val is None else np.asarray(y_val))
        held = [min(rows - 1, round(validation * rows)) for rows in X.chunks[0]]
        if not sum(held):
            raise ValueError(
                f"validation={validation!r} holds out no rows: the chunks have "
                f"{min(X.chunks[0])} to {max(X.chunks[0])} rows. Use a larger "
                "fraction or larger chunks, or pass validation=(X_val, y_val)."
            )
        # Persisted once, so that the split and the training read the same computed chunks.
        X, y, sample_weight = dask.persist(X, y, sample_weight)
        parts = [
            _split_rows(array, held, seed) if array is not None else (None, None)
            for array in (X, y, sample_weight)
        ]
        (X, X_val), (y, y_val), (sample_weight, _) = parts
        X_val, y_val = dask.compute(X_val, y_val)
        return X, y, sample_weight, (X_val, y_val)

    # ----------------------------------------------------------------------------------------
    # Methods of the fitted estimator

    @available_if(estimator_has("predict", "estimator_"))
    def predict(self, X):
        """Predict with ``estimator_``, chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : dask array, xarray DataArray or ndarray
            Of the kind of ``X``: lazy for dask input, with dims ``sample`` (and ``output`` for
            several outputs) for xarray input.
        """
        return self._apply("predict", X)

    @available_if(estimator_has("predict_proba", "estimator_"))
    def predict_proba(self, X):
        """Class probabilities from ``estimator_``, chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : dask array, xarray DataArray or ndarray of shape (n_samples, n_classes)
            Of the kind of ``X``; xarray output has dims ``(sample, class)``.
        """
        return self._apply("predict_proba", X)

    @available_if(estimator_has("predict_log_proba", "estimator_"))
    def predict_log_proba(self, X):
        """Log class probabilities from ``estimator_``, chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : dask array, xarray DataArray or ndarray of shape (n_samples, n_classes)
            Of the kind of ``X``; xarray output has dims ``(sample, class)``.
        """
        return self._apply("predict_log_proba", X)

    @available_if(estimator_has("decision_function", "estimator_"))
    def decision_function(self, X):
        """Decision function of ``estimator_``, chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)

        Returns
        -------
        scores : dask array, xarray DataArray or ndarray
            Shape ``(n_samples,)`` for binary problems, else ``(n_samples, n_classes)``.
        """
        return self._apply("decision_function", X)

    @available_if(estimator_has("transform", "estimator_"))
    def transform(self, X):
        """Transform with ``estimator_``, chunk by chunk.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)

        Returns
        -------
        X_new : dask array, xarray DataArray or ndarray
            Of the kind of ``X``; xarray output has dims ``(sample, feature)``, so it can be
            the input of the next ``DataParallel``.
        """
        return self._apply("transform", X)

    @available_if(estimator_has("transform", "estimator_"))
    def fit_transform(self, X, y=None, **fit_params):
        """Fit, then transform the same data.

        Parameters
        ----------
        X, y
            As for :meth:`fit`.
        **fit_params
            ``classes`` and ``sample_weight``, passed to :meth:`fit`.

        Returns
        -------
        X_new : dask array, xarray DataArray or ndarray
        """
        return self.fit(X, y, **fit_params).transform(X)

    @available_if(estimator_has("score", "estimator_"))
    def score(self, X, y=None, sample_weight=None):
        """Score ``estimator_`` on this data.

        Dask and xarray input are scored chunk by chunk with :func:`taskdml.metrics.evaluate`:
        accuracy for classifiers, R² for regressors. In-memory input uses the wrapped
        estimator's own ``score``.

        Parameters
        ----------
        X : dask array, xarray DataArray or Dataset, or array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
        sample_weight : array-like of shape (n_samples,), optional
            In-memory input only.

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        X, y, sample_weight, _ = unwrap(X, y, sample_weight)
        if is_frame(X):
            return self._score_frame(X, y)
        if _tabular.is_pipeline(self.estimator_) and _is_pandas_frame(X):
            kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
            return self.estimator_.score(X, y, **kwargs)
        if not isinstance(X, da.Array):
            X = validate_data(self, X, reset=False, accept_sparse=self._sparse_formats())
            kwargs = {} if sample_weight is None else {"sample_weight": sample_weight}
            return self.estimator_.score(X, y, **kwargs)
        return self._score_lazily(X, y, sample_weight)

    def _score_lazily(self, X, y, sample_weight):
        from taskdml.metrics import score_chunked

        name = type(self).__name__
        metric = "accuracy" if is_classifier(self) else "r2" if is_regressor(self) else None
        if metric is None:
            raise ValueError(
                f"{name}.score on dask input is defined for classifiers (accuracy) and "
                f"regressors (r2), not for {type(self.estimator_).__name__}; score "
                "NumPy data, or call taskdml.metrics.evaluate."
            )
        if sample_weight is not None:
            raise ValueError(
                f"{name}.score does not take sample_weight with dask input; score "
                "NumPy data, or leave sample_weight out."
            )
        if y is None:
            raise ValueError(f"{name}.score needs y.")
        self._check_width(X)
        y = da.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        return score_chunked(self.estimator_, X, y, metric)

    def _score_frame(self, X, y):
        """Accuracy or R² of a dask DataFrame's predictions, reduced chunk by chunk."""
        if y is None:
            raise ValueError(f"{type(self).__name__}.score needs y.")
        predicted = outside_annotations(self._apply_frame, "predict", X)
        _, y, _ = as_dask(X, y)
        if is_classifier(self):
            return float((predicted == y).mean().compute())
        residual, total = dask.compute(((y - predicted) ** 2).sum(), ((y - y.mean()) ** 2).sum())
        return float(1 - residual / total)

    @available_if(estimator_has("get_feature_names_out", "estimator_"))
    def get_feature_names_out(self, input_features=None):
        """Output feature names of ``transform``.

        Parameters
        ----------
        input_features : array-like of str, optional
            Default ``feature_names_in_`` when fitted on a DataFrame, else ``x0``, ``x1``, ...

        Returns
        -------
        feature_names_out : ndarray of str objects
        """
        check_is_fitted(self)
        names = getattr(self, "feature_names_in_", None)
        if (
            input_features is not None
            and names is not None
            and (len(input_features) != len(names) or np.any(np.asarray(input_features) != names))
        ):
            raise ValueError("input_features is not equal to feature_names_in_")
        return self.estimator_.get_feature_names_out(
            names if input_features is None else input_features
        )

    def _apply(self, method, X):
        check_is_fitted(self)
        X, _, _, template = unwrap(X, None, None)
        if is_frame(X):
            result = outside_annotations(self._apply_frame, method, X)
        elif isinstance(X, da.Array):
            result = self._apply_lazily(method, X)
        elif _tabular.is_pipeline(self.estimator_) and _is_pandas_frame(X):
            result = _tabular._call(self.estimator_, method, X)
        else:
            X = validate_data(self, X, reset=False, accept_sparse=self._sparse_formats())
            result = getattr(self.estimator_, method)(X)
        return result if template is None else self._as_xarray(method, result, template)

    def _apply_lazily(self, method, X):
        """One ``map_blocks`` task per row chunk; the fitted estimator is one key of the graph."""
        if X.ndim != 2:
            raise ValueError(
                f"Expected a 2-D array (samples, features), got a dask array of shape {X.shape}."
            )
        self._check_width(X)
        return apply_chunkwise(self.estimator_, method, X, prefix=_PREFIX)

    def _apply_frame(self, method, X):
        """One task per partition of a dask DataFrame; a dask array on its partitions."""
        import pandas as pd

        try:
            # The output of the first row, computed where the first partition is.
            first_part = X.partitions[0].to_delayed()[0]
            first = dask.delayed(_first_row_call)(first_part, self.estimator_, method).compute()
        except DataError:  # an unseen category: the error of the whole first chunk says more
            X.partitions[0].map_partitions(
                _frame_call, self.estimator_, method, meta=pd.Series([], dtype=float)
            ).compute()
            raise
        meta = first.iloc[:0]
        if isinstance(meta, pd.DataFrame):
            meta.columns = meta.columns.astype(str)
        model = dask.delayed(
            self.estimator_, traverse=False, name=key_name(_PREFIX, self.estimator_, phase="model")
        )
        result = X.map_partitions(
            _frame_call, model, method, meta=meta, token=f"{_PREFIX}-{method.replace('_', '-')}"
        )
        return result.to_dask_array(lengths=list(partition_lengths(X)))

    def _as_xarray(self, method, result, template):
        coords = {
            name: coord for name, coord in template.coords.items() if set(coord.dims) <= {"sample"}
        }
        if result.ndim == 1:
            return xr.DataArray(result, dims=("sample",), coords=coords, name=method)
        width = result.shape[1]
        classes = getattr(self, "classes_", None)
        labels = None
        if method == "transform":
            dim, labels = "feature", self._output_features(template, width)
        elif method in ("predict_proba", "predict_log_proba", "decision_function") and (
            classes is not None and len(classes) == width
        ):
            dim, labels = "class", classes
        else:
            dim = "output"
        if labels is not None:
            coords[dim] = labels
        return xr.DataArray(result, dims=("sample", dim), coords=coords, name=method)

    def _output_features(self, template, width):
        """Names for the features of ``transform``'s output, or None when there are none."""
        if not hasattr(self, "get_feature_names_out"):
            return None
        given = template["feature"].values if "feature" in template.coords else None
        try:
            names = self.get_feature_names_out(given)
        except (ValueError, TypeError, AttributeError):
            return None
        return names if len(names) == width else None

    def _sparse_formats(self):
        """The scipy.sparse formats accepted: CSR where the estimator takes sparse input."""
        return ["csr"] if get_tags(self.estimator).input_tags.sparse else False

    def _check_width(self, X):
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )

    def __sklearn_tags__(self):
        tags = wrapped_tags(super().__sklearn_tags__(), self.estimator)
        inner = get_tags(self.estimator)
        tags.input_tags.positive_only = inner.input_tags.positive_only
        # Chunks may be scipy.sparse where the estimator takes them (text features: the
        # engine and the merges never densify), and must be finite (every chunk is checked).
        tags.input_tags.sparse = inner.input_tags.sparse
        tags.input_tags.allow_nan = False
        tags.non_deterministic = inner.non_deterministic or self.strategy == "async"
        return tags


# --------------------------------------------------------------------------------------------
# Helpers: module-level, so tasks that use them pickle.


def _can_partial_fit(meta):
    """``partial_fit`` is there when the wrapped estimator has it, or for a Pipeline, its
    last step (the transformers, fitted by the first call, are kept)."""
    estimator = getattr(meta, "estimator_", meta.estimator)
    if _tabular.is_pipeline(estimator):
        final = estimator.steps[-1][1]
        if hasattr(final, "partial_fit"):
            return True
        raise AttributeError(
            f"This {type(meta).__name__}'s Pipeline ends in {type(final).__name__}, which has "
            "no attribute 'partial_fit'"
        )
    return estimator_has("partial_fit", "estimator_")(meta)


def _scattered(client, array, rows, name):
    """*array* as a dask array of *rows*-row chunks scattered to the workers, keyed
    ``(name, i, 0...)``."""
    bounds = list(range(0, array.shape[0], rows)) + [array.shape[0]]
    parts = [array[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    keys = [(name, i) + (0,) * (array.ndim - 1) for i in range(len(parts))]
    futures = scatter(client, dict(zip(keys, parts)), hash=False)
    graph = {key: futures[key] for key in keys}
    chunks = (tuple(b - a for a, b in zip(bounds[:-1], bounds[1:])),) + tuple(
        (n,) for n in array.shape[1:]
    )
    meta = array[:0]
    return da.Array(graph, name, chunks, meta=meta)


def _nbytes(data):
    """Bytes of in-memory data: an array, a sparse matrix, a pandas object or a list."""
    if sparse.issparse(data):
        data = data.tocsr()
        return data.data.nbytes + data.indices.nbytes + data.indptr.nbytes
    if hasattr(data, "memory_usage"):  # pandas
        usage = data.memory_usage(deep=True)
        return int(usage.sum() if hasattr(usage, "sum") else usage)
    return int(np.asarray(data).nbytes)


def _all_finite(X):
    """Whether numeric in-memory *X* holds no NaN or infinity (other data: True, its
    estimator checks it)."""
    values = X.tocsr().data if sparse.issparse(X) else np.asarray(X)
    if not np.issubdtype(values.dtype, np.number):
        return True
    # A finite sum means every value is finite (NaN and infinities carry into it), in one
    # pass without a mask the size of the data; an overflowing sum asks the full check.
    return bool(np.isfinite(values.sum()) or np.isfinite(values).all())


def _n_rows(data):
    """Rows of in-memory data (anything ``numpy.asarray`` reads, a sparse matrix, pandas)."""
    return data.shape[0] if hasattr(data, "shape") else np.asarray(data).shape[0]


def _is_pandas_frame(X):
    return type(X).__name__ == "DataFrame" and type(X).__module__.startswith("pandas")


def _first_row_call(part, model, method):
    """Task: :func:`_frame_call` on the first row of a partition (the output's type)."""
    return _frame_call(part.iloc[:1], model, method)


def _frame_call(part, model, method):
    """Task: ``model.<method>`` of one partition, as a pandas object on its index."""
    import pandas as pd

    index = part.index
    if not _tabular.is_pipeline(model):  # trained on the columns as one float array
        part = part.to_numpy(dtype=np.float64)
    result = _tabular._call(model, method, part)
    if np.ndim(result) == 1:
        return pd.Series(result, index=index)
    return pd.DataFrame(result, index=index, columns=[str(i) for i in range(result.shape[1])])


def _feature_names(X):
    """String column names of a DataFrame, as scikit-learn records them; else None."""
    columns = getattr(X, "columns", None)
    if columns is None or len(columns) == 0:
        return None
    names = np.asarray(columns, dtype=object)
    strings = [isinstance(name, str) for name in names]
    if all(strings):
        return names
    if any(strings):
        kinds = sorted({type(name).__name__ for name in names})
        raise TypeError(
            "Feature names are only supported if all input features have string names, "
            f"but your input has {kinds} as feature name / column name types. Convert "
            "them all to strings (X.columns = X.columns.astype(str)) or to a non-string "
            "type."
        )
    return None


def _check_weights(sample_weight, n_samples):
    if isinstance(sample_weight, numbers.Number):
        return np.full(n_samples, float(sample_weight))
    sample_weight = check_array(
        sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight"
    )
    if sample_weight.shape != (n_samples,):
        raise ValueError(f"sample_weight.shape == {sample_weight.shape}, expected {(n_samples,)}!")
    return sample_weight


def _default_chunk_size(n_samples, client):
    """Rows per chunk: about max(2, n_workers) chunks, none under ``_MIN_CHUNK_ROWS`` rows."""
    n_workers = len(client.nthreads()) if client is not None else 1
    n_chunks = max(1, min(max(2, n_workers), n_samples // _MIN_CHUNK_ROWS))
    return max(1, math.ceil(n_samples / n_chunks))


def _warn_column_vector():
    import warnings

    from sklearn.exceptions import DataConversionWarning

    warnings.warn(
        "A column-vector y was passed when a 1d array was expected. Please change the "
        "shape of y to (n_samples, ), for example using ravel().",
        DataConversionWarning,
        stacklevel=5,
    )  # the caller of fit or partial_fit


def _held_out(n_rows, n_held, seed, chunk):
    """Boolean mask of the rows of one chunk held out for validation (seeded per chunk)."""
    mask = np.zeros(n_rows, dtype=bool)
    mask[np.random.default_rng([seed, chunk]).choice(n_rows, n_held, replace=False)] = True
    return mask


def _rows(block, held, seed, validation, block_id=None):
    """Task: the training (or validation) rows of one chunk."""
    mask = _held_out(block.shape[0], held[block_id[0]], seed, block_id[0])
    return block[mask] if validation else block[~mask]


def _split_rows(array, held, seed):
    """``(train, validation)`` parts of a dask array, with ``held[i]`` rows out of chunk ``i``."""
    parts = []
    for validation in (False, True):
        rows = tuple(held) if validation else tuple(n - k for n, k in zip(array.chunks[0], held))
        name = key_name(
            _PREFIX,
            array.name,
            held,
            seed,
            validation,
            phase="validation" if validation else "train",
        )
        parts.append(
            array.map_blocks(
                _rows,
                held,
                seed,
                validation,
                name=name,
                dtype=array.dtype,
                chunks=(rows,) + array.chunks[1:],
                meta=np.empty((0,) * array.ndim, array.dtype),
            )
        )
    return tuple(parts)
