"""Grid and randomized search with cross-validation, as Dask tasks.

:class:`GridSearchCV` and :class:`RandomizedSearchCV` take scikit-learn's parameters and
leave scikit-learn's fitted attributes (``cv_results_`` with the same keys and values,
``best_params_``, ``best_score_``, ``best_index_``, ``best_estimator_``, ``refit_time_``,
``scorer_``, ``n_splits_``, ``multimetric_``), so they drop into code written for
:mod:`sklearn.model_selection`. What changes is how the work runs:

- **in-memory data** (NumPy, pandas, sparse): the folds' indices are computed here with
  scikit-learn's ``check_cv``; the data is scattered to the cluster once (or put into the
  local graph once); every candidate × fold is a few tasks, and the fitted prefix of a
  :class:`~sklearn.pipeline.Pipeline` that several candidates share is one task per fold.
  See :mod:`taskdml.model_selection.grid._graph` for the graph.
- **tables** (an xarray table of mixed columns, or a dask DataFrame), which a
  :class:`~sklearn.pipeline.Pipeline` with a ``ColumnTransformer`` encodes: gathered into one
  pandas DataFrame and searched in memory as above, so that every candidate × fold is scored
  exactly as scikit-learn scores it. Tables up to ``taskdml._data.MAX_GATHERED_CELLS`` (10
  million rows × columns, about 80 MB of numbers) are gathered; a bigger one is refused
  before any of it is computed, with what to do (search on a sample; or encode the columns
  with a ``map`` step and search on the chunked arrays). Chunk-wise folds would need the
  transformers refitted exactly on every fold's chunks; a table small enough to search many
  candidates on is small enough to gather.
- **chunked data** (dask arrays, xarray Datasets): folds are whole chunks, each candidate
  trains with the data-parallel engine and is scored chunk-wise by :mod:`taskdml.metrics`.
  See :mod:`taskdml.model_selection.grid._chunked`.

The work runs on the current distributed client (``distributed.default_client()``) when there
is one and on Dask's local threads otherwise (``n_jobs`` of them); no client is required.
Results are formatted as scikit-learn formats them, so split scores, means, standard
deviations and ranks agree with scikit-learn's to rounding on the same folds.
"""

import numbers
import warnings
from collections import Counter, defaultdict

import numpy as np
from sklearn import get_config
from sklearn.base import clone
from sklearn.utils.metadata_routing import MetadataRouter, MethodMapping, process_routing

from taskdml import _compat, _warm
from taskdml._compat import CallbackSupportMixin, with_callbacks
from taskdml._data import as_dask, gathered_table, is_chunked
from taskdml.model_selection._base import SearchBase, engine_options
from taskdml.model_selection.grid import _chunked as _grid_chunked
from taskdml.model_selection.grid import _graph as _grid_graph
from taskdml.model_selection.grid import _tasks as _grid_tasks

__all__ = ["GridSearchCV", "RandomizedSearchCV"]


class BaseSearchCV(CallbackSupportMixin, SearchBase):
    """Shared machinery of :class:`GridSearchCV` and :class:`RandomizedSearchCV`.

    Subclasses set their search space in ``__init__`` and return the candidates from
    ``_candidates()``. The delegation to ``best_estimator_`` is :class:`SearchBase`'s.

    Callbacks (``set_callbacks``, :mod:`sklearn.callback`) get scikit-learn's tasks — the fit,
    the search, one evaluation per candidate × fold, the refit — and auto-propagated ones are
    propagated into every fit, as scikit-learn does: each evaluation and the refit call their
    hooks in the Dask task that fits, around the whole estimator's fit (with callbacks set,
    pipeline prefixes are not shared between candidates, so that every fit reports). Hooks
    called on a worker reach the callbacks in this process through scikit-learn's own
    transport (a local socket: the workers must run on this machine), which pickles the
    search by reference: a scorer or estimator defined in a script's ``__main__`` cannot
    travel back (define it in a module). A search over chunked data does not call them yet.
    Callbacks need scikit-learn 1.9 or later; with an older one there is no ``set_callbacks``.
    """

    def __init__(
        self,
        estimator,
        *,
        scoring=None,
        n_jobs=None,
        refit=True,
        cv=None,
        verbose=0,
        pre_dispatch="2*n_jobs",
        error_score=np.nan,
        return_train_score=False,
        strategy=None,
        epochs="auto",
        sync_every="auto",
        staleness=0,
        shuffle=False,
        shuffle_rows=False,
        n_replicas=None,
        data="auto",
        prefetch=2,
        random_state=None,
        parallel="deprecated",
    ):
        self.estimator = estimator
        self.scoring = scoring
        self.n_jobs = n_jobs
        self.refit = refit
        self.cv = cv
        self.verbose = verbose
        self.pre_dispatch = pre_dispatch
        self.error_score = error_score
        self.return_train_score = return_train_score
        self.strategy = strategy
        self.epochs = epochs
        self.sync_every = sync_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.shuffle_rows = shuffle_rows
        self.n_replicas = n_replicas
        self.data = data
        self.prefetch = prefetch
        self.random_state = random_state
        self.parallel = parallel

    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        from taskdml._meta import wrapped_tags

        tags = wrapped_tags(super().__sklearn_tags__(), self.estimator, target=False)
        inner = get_tags(self.estimator)
        tags.input_tags.pairwise = inner.input_tags.pairwise
        tags.input_tags.sparse = inner.input_tags.sparse
        return tags

    def _candidates(self):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------------------------
    # fit

    @with_callbacks
    def fit(self, X, y=None, **params):
        """Run fit with all sets of parameters, as Dask tasks.

        Parameters
        ----------
        X : array-like, dask array, dask DataFrame or xarray.Dataset, (n_samples, n_features)
            In-memory data is scattered once; chunked data (a dask array, or a Dataset with
            ``X`` (dims sample, feature) and ``y`` (dims sample)) stays on the cluster; a
            table (a Dataset of feature columns and ``y``, or a dask DataFrame) is gathered
            into a pandas DataFrame first (see the module docstring).
        y : array-like or dask array of shape (n_samples,), optional
            Targets; taken from the Dataset's ``y`` when ``X`` is one.
        **params : dict
            ``groups`` goes to the CV splitter; the rest to the estimator's ``fit`` (a
            ``Pipeline``'s as ``step__param``), split with the rows where they have one entry
            per sample; ``sample_weight`` also to the scorers that take it (a warning names
            those that do not). With ``enable_metadata_routing=True``
            (:func:`sklearn.set_config`), each goes where the estimator, the scorers and the
            splitter request it instead (``set_fit_request``, ``set_score_request``,
            ``set_split_request``); see :meth:`get_metadata_routing`. On chunked data only
            ``classes`` (every label of a classifier, found chunk-wise when omitted).

        Returns
        -------
        self : object
            The fitted search.
        """
        options = self._check_parameters()
        candidates = list(self._candidates())
        if not candidates:
            raise ValueError(
                "No fits were performed. Was the CV iterator empty? Were there no candidates?"
            )
        # A table (mixed columns for a Pipeline) is gathered: see gathered_table.
        X, y = gathered_table(X, y)
        if is_chunked(X) or is_chunked(y):
            return self._fit_chunked(X, y, candidates, params, options)
        return self._fit_in_memory(X, y, candidates, params)

    def _check_parameters(self):
        if not (self.error_score == "raise" or isinstance(self.error_score, numbers.Real)):
            raise ValueError(f"error_score must be 'raise' or a number, got {self.error_score!r}.")
        if not (isinstance(self.refit, (bool, str)) or callable(self.refit)):
            raise ValueError(
                f"refit must be a bool, a scorer name or a callable, got {self.refit!r}."
            )
        if not hasattr(self.estimator, "fit"):
            raise TypeError(f"estimator must have a fit method, got {self.estimator!r}.")
        return self._engine_options()

    def _engine_options(self):
        """The engine's options of the candidates' trainings on chunked data (the options
        table's, from the parameters or the deprecated ``parallel`` dict)."""
        return engine_options(self, lambda parallel: parallel)

    def _check_loadable(self, client, candidates):
        """Raise now, not hang later, if the workers cannot load what the tasks carry."""
        space = "param_grid" if hasattr(self, "param_grid") else "param_distributions"
        _warm.check_loadable(
            client,
            {"estimator": self.estimator, "scoring": self.scoring, space: candidates},
            owner=f"{type(self).__name__}.fit",
        )

    def _fit_in_memory(self, X, y, candidates, params):
        from sklearn.base import is_classifier
        from sklearn.model_selection import check_cv
        from sklearn.utils import get_tags, indexable

        from taskdml._client import current_client

        scorers, multimetric = _check_scoring(self.estimator, self.scoring)
        _check_refit_for_multimetric(self.refit, scorers, multimetric)
        pairwise = get_tags(self.estimator).input_tags.pairwise
        if pairwise and not hasattr(X, "shape"):
            raise ValueError(
                "Precomputed kernels or affinity matrices have to be passed as arrays or sparse "
                f"matrices, got a {type(X).__name__}; convert X with numpy.asarray(X)."
            )
        X, y = indexable(X, y)
        sample_weight = params.get("sample_weight")
        metadata = None if sample_weight is None else {"sample_weight": sample_weight}
        root = _compat.init_callback_context(
            self, max_subtasks=1 + (self.refit is not False)
        ).call_on_fit_task_begin(estimator=self, X=X, y=y, metadata=metadata)
        if _routing_enabled():
            routed = process_routing(self, "fit", **params)
            params, split_params = routed.estimator.fit, routed.splitter.split
            score_params = {
                metric: routed[_scorer_route(metric)].score
                for metric in (scorers if multimetric else [None])
            }
        else:
            params = dict(params)
            split_params = {"groups": params.pop("groups", None)}
            score_params = self._sample_weight_for_scorers(
                scorers, multimetric, params.get("sample_weight")
            )
        cv = check_cv(self.cv, y, classifier=is_classifier(self.estimator))
        n_splits = cv.get_n_splits(X, y, **split_params)
        splits = tuple(
            (np.asarray(train), np.asarray(test)) for train, test in cv.split(X, y, **split_params)
        )
        if len(splits) != n_splits:
            raise ValueError(
                "cv.split and cv.get_n_splits return inconsistent results. Expected "
                f"{n_splits} splits, got {len(splits)}"
            )
        data = _grid_graph.SearchData(X, y, params, splits, score_params, get_config())
        client = current_client()
        self._check_loadable(client, candidates)
        base = clone(self.estimator)
        search = root.subcontext(
            task_name="search",
            max_subtasks=len(candidates) * n_splits,
            sequential_subtasks=False,
        ).call_on_fit_task_begin(estimator=self)
        callbacks = _compat.has_callbacks(self)
        hooks = (  # made before any task runs, as scikit-learn does
            [
                _grid_tasks.Hooks(
                    search.subcontext(task_name="candidate-split-evaluation", task_id=index),
                    self,
                )
                for index in range(len(candidates) * n_splits)
            ]
            if callbacks
            else None
        )
        with _grid_graph.place(data, client) as (node, token):
            out, schedule = _grid_graph.run(
                base,
                candidates,
                data,
                node,
                token,
                scorers=scorers,
                shortcut_scoring=_names_only(self.scoring),
                return_train_score=self.return_train_score,
                error_score=self.error_score,
                pairwise=pairwise,
                client=client,
                n_jobs=self.n_jobs,
                verbose=self.verbose,
                hooks=hooks,
            )
            search.call_on_fit_task_end(estimator=self)
            fitted = self._results(candidates, n_splits, out, multimetric)
            fitted["_schedule"] = schedule

            def refit(best):
                task = root.subcontext(task_name="refit-with-best-params")
                hooks = _grid_tasks.Hooks(task, self) if callbacks else None
                return _grid_graph.refit(best, node, token, client, self.n_jobs, hooks)

            self._set_fitted(fitted, base, refit, scorers, multimetric, n_splits)
        root.call_on_fit_task_end(estimator=self, X=X, y=y, metadata=metadata)
        return self

    def _sample_weight_for_scorers(self, scorers, multimetric, sample_weight):
        """``sample_weight`` for the scorers that take it, by metric, as scikit-learn passes it.

        A scorer that does not take it gets a warning: its scores are unweighted.
        """
        from taskdml._compat import scorer_accepts_sample_weight

        if sample_weight is None:
            return {}
        named = scorers.items() if multimetric else [(None, scorers)]
        accepting = {}
        for name, scorer in named:
            if scorer_accepts_sample_weight(scorer):
                accepting[name] = {"sample_weight": sample_weight}
                continue
            shown = scorer if name is None else f"{name}={scorer}"
            warnings.warn(
                f"The scoring {shown} does not support sample_weight, which may lead to "
                f"statistically incorrect results when fitting {self} with sample_weight. ",
                UserWarning,
                stacklevel=4,
            )
        return accepting

    def _fit_chunked(self, X, y, candidates, params, parallel):
        from taskdml._client import current_client

        params = dict(params)
        classes = params.pop("classes", None)
        if params:
            raise ValueError(
                f"fit parameters ({', '.join(params)}) are not supported on chunked data "
                "(only classes); fold them into the estimator or compute the data first."
            )
        metrics = _grid_chunked.metric_names(self.estimator, self.scoring)
        multimetric = not (self.scoring is None or isinstance(self.scoring, str))
        _check_refit_for_multimetric(self.refit, metrics, multimetric)
        X, y, _ = as_dask(X, y)
        folds = _grid_chunked.chunk_folds(self.cv, X.chunks[0])
        client = current_client()
        self._check_loadable(client, candidates)
        X, y = _grid_chunked.persist(X, y, client)
        base = clone(self.estimator)
        if self.verbose > 0:
            print(
                f"Fitting {len(folds)} folds of chunks for each of {len(candidates)} candidates, "
                f"totalling {len(folds) * len(candidates)} trainings"
            )
        if classes is None:
            classes = _grid_chunked.classes_of(base, y, client)
        out = _grid_chunked.run(
            base,
            candidates,
            X,
            y,
            folds,
            classes=classes,
            metrics=metrics,
            parallel=parallel,
            return_train_score=self.return_train_score,
            error_score=self.error_score,
            client=client,
            n_jobs=self.n_jobs,
        )
        fitted = self._results(candidates, len(folds), out, multimetric)

        def refit(best):
            return _grid_chunked.refit(
                best,
                X,
                y,
                index=fitted["best_index_"],
                classes=classes,
                parallel=parallel,
                client=client,
            )

        scorer = metrics["score"] if not multimetric else metrics
        self._set_fitted(fitted, base, refit, scorer, multimetric, len(folds), chunked=True)
        return self

    def _results(self, candidates, n_splits, out, multimetric):
        """cv_results_ and the best candidate, from one result per candidate × fold."""
        if not out:
            raise ValueError(
                "No fits were performed. Was the CV iterator empty? Were there no candidates?"
            )
        for result in out:
            for message in result["warnings"]:
                warnings.warn(message, UserWarning, stacklevel=4)
        _warn_or_raise_about_fit_failures(out, self.error_score)
        first = next(result["test_scores"] for result in out if result["fit_error"] is None)
        multimetric = multimetric or (callable(self.scoring) and isinstance(first, dict))
        if callable(self.scoring) and multimetric:
            _check_refit_for_multimetric(self.refit, first, True)
        for result in out:
            if result["fit_error"] is not None:
                filled = (
                    dict.fromkeys(first, self.error_score)
                    if isinstance(first, dict)
                    else self.error_score
                )
                result["test_scores"] = filled
                result["train_scores"] = dict(filled) if isinstance(filled, dict) else filled
        if self.verbose > 1:
            _print_fits(candidates, n_splits, out, self.verbose, self.return_train_score)
        results = format_results(candidates, n_splits, out, self.return_train_score)
        fitted = {"cv_results_": results, "multimetric_": multimetric}
        refit_metric = self.refit if multimetric else "score"
        if self.refit or not multimetric:
            best_index = _select_best_index(self.refit, refit_metric, results)
            fitted["best_index_"] = best_index
            if not callable(self.refit):
                fitted["best_score_"] = results[f"mean_test_{refit_metric}"][best_index]
            fitted["best_params_"] = results["params"][best_index]
        return fitted

    def _set_fitted(self, fitted, base, refit, scorer, multimetric, n_splits, chunked=False):
        if self.refit:
            best = clone(base).set_params(**clone(fitted["best_params_"], safe=False))
            fitted["best_estimator_"], fitted["refit_time_"] = refit(best)
            if hasattr(fitted["best_estimator_"], "feature_names_in_"):
                fitted["feature_names_in_"] = fitted["best_estimator_"].feature_names_in_
        fitted["scorer_"] = scorer
        fitted["n_splits_"] = n_splits
        for name, value in fitted.items():
            setattr(self, name, value)
        self._chunked = chunked
        return self

    # ------------------------------------------------------------------------------------
    # delegation to best_estimator_

    def score(self, X, y=None, **params):
        """Score of the refitted best estimator on the given data.

        Uses ``scoring`` where given (``refit``'s metric when there are several), else
        ``best_estimator_.score``. Chunked data is scored chunk-wise with
        :func:`taskdml.metrics.evaluate`.

        Parameters
        ----------
        X : array-like, dask array or xarray.Dataset of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), optional
        **params : dict
            Metadata routed to the scorer (only with ``enable_metadata_routing=True``, see
            :func:`sklearn.set_config`).

        Returns
        -------
        score : float
        """
        from sklearn.utils.validation import check_is_fitted

        if not self.refit:
            raise AttributeError(self._no_refit_message("score"))
        check_is_fitted(self)
        if params and not _routing_enabled():
            raise ValueError(
                f"Passing extra keyword arguments to {type(self).__name__}.score is only "
                "supported if enable_metadata_routing=True, which you can set using "
                f"`sklearn.set_config`; got {sorted(params)}."
            )
        if not getattr(self, "_chunked", False):
            X, y = gathered_table(X, y)
        if getattr(self, "_chunked", False) or is_chunked(X):
            return self._score_chunked(X, y)
        if self.scorer_ is None:
            raise ValueError(
                "No score function explicitly defined, and the estimator doesn't "
                f"provide one {self.best_estimator_}"
            )
        if params:
            metric = self.refit if isinstance(self.scorer_, dict) else None
            params = process_routing(self, "score", **params)[_scorer_route(metric)].score
        if isinstance(self.scorer_, dict):
            scorer = self.scorer_[self.refit] if self.multimetric_ else self.scorer_
            return scorer(self.best_estimator_, X, y, **params)
        score = self.scorer_(self.best_estimator_, X, y, **params)
        return score[self.refit] if self.multimetric_ else score

    def get_metadata_routing(self):
        """Where this search routes metadata, with scikit-learn's metadata routing.

        ``fit`` routes to the estimator's ``fit``, to the splitter's ``split`` and to each
        scorer's ``score`` (one route per metric); ``score`` routes to the scorers.

        Returns
        -------
        routing : sklearn.utils.metadata_routing.MetadataRouter
        """
        router = MetadataRouter(owner=self).add(
            estimator=self.estimator,
            method_mapping=MethodMapping().add(caller="fit", callee="fit"),
        )
        scorers, multimetric = _check_scoring(self.estimator, self.scoring)
        for metric, scorer in scorers.items() if multimetric else [(None, scorers)]:
            router.add(
                **{_scorer_route(metric): scorer},
                method_mapping=MethodMapping()
                .add(caller="score", callee="score")
                .add(caller="fit", callee="score"),
            )
        return router.add(
            splitter=self.cv, method_mapping=MethodMapping().add(caller="fit", callee="split")
        )

    def _score_chunked(self, X, y):
        import dask.array as da

        from taskdml.metrics import score_chunked

        if not is_chunked(X):
            X = da.from_array(np.asarray(X), chunks=(max(1, len(X)), -1))
        X, y, _ = as_dask(X, y)
        metrics = _grid_chunked.metric_names(self.estimator, self.scoring)
        metric = metrics[self.refit] if self.multimetric_ else metrics["score"]
        return score_chunked(self.best_estimator_, X, y, metric)

    def _sk_visual_block_(self):
        """The HTML repr's content: the refitted best estimator once there is one."""
        from taskdml._compat import _VisualBlock

        if hasattr(self, "best_estimator_"):
            key, estimator = "best_estimator_", self.best_estimator_
        else:
            key, estimator = "estimator", self.estimator
        return _VisualBlock(
            "parallel",
            [estimator],
            names=[f"{key}: {type(estimator).__name__}"],
            name_details=[str(estimator)],
        )

    @property
    def n_features_in_(self):
        """Number of features seen during fit (only with ``refit``)."""
        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted

        try:
            check_is_fitted(self)
        except NotFittedError as error:
            raise AttributeError(
                f"{type(self).__name__} object has no n_features_in_ attribute."
            ) from error
        return self.best_estimator_.n_features_in_


class GridSearchCV(BaseSearchCV):
    """Exhaustive search over a parameter grid, every candidate × fold a Dask task.

    A drop-in replacement for :class:`sklearn.model_selection.GridSearchCV`: the same
    parameters and fitted attributes, and the same ``cv_results_`` on the same folds. The fits
    run on the current distributed client if there is one, else on Dask's local threads. For a
    :class:`~sklearn.pipeline.Pipeline`, the steps that several candidates share are fitted
    once per fold. Dask arrays and xarray Datasets are searched without being gathered: folds
    are whole chunks and each candidate trains with the data-parallel engine.

    Parameters
    ----------
    estimator : estimator object
        Cloned for every candidate.
    param_grid : dict or list of dict
        Parameter names to lists of values; a list of dicts searches each grid in turn.
    scoring : str, callable, list, tuple, set or dict, default=None
        As in scikit-learn (``None``: ``estimator.score``). On chunked data: metric names of
        :func:`taskdml.metrics.available_metrics` only.
    n_jobs : int, default=None
        Threads of the local scheduler when there is no distributed client (``-1``: all
        cores). The cluster's workers decide otherwise.
    refit : bool, str or callable, default=True
        Refit the best candidate on all the data (one more task). With several metrics, the
        metric that picks the best candidate, or a callable of ``cv_results_`` returning its
        index.
    cv : int, cross-validation generator or iterable, default=None
        As in scikit-learn (5-fold, stratified for classifiers). On chunked data an int (or a
        splitter) splits the chunk indices.
    verbose : int, default=0
        Above 0, print the number of fits and of tasks; above 1, scikit-learn's line per fit
        (``[CV k/n] END ...``, with the scores above 2), printed once the fits are done.
    pre_dispatch : int or str, default="2*n_jobs"
        Accepted for compatibility; Dask schedules the tasks.
    error_score : "raise" or float, default=np.nan
        Score of a candidate whose fit raised (with a ``FitFailedWarning``); ``"raise"``
        stops the search with the error instead.
    return_train_score : bool, default=False
        Also score each fit on its training rows.
    strategy : {"sequential", "sync", "async"} or None, default=None
        Chunked data only, as every engine option below: how each candidate trains with
        :func:`taskdml.parallel.train`. ``None`` lets the engine choose: with ``epochs="auto"``
        a fold's training data of one chunk or at most 64 MiB is fitted at once with the
        estimator's ``fit`` in one task (scikit-learn's own fit, so candidates run side by
        side), larger data by sync replicas. ``"sequential"`` is a chain of tasks per
        candidate, so that candidates run side by side; ``"sync"`` and ``"async"`` train
        replicas, which take turns on the cluster.
    epochs : int or "auto", default="auto"
        Passes over the training chunks, or as far as the estimator's own ``fit`` would train
        (its ``max_iter``, ``tol`` and ``n_iter_no_change``), for every candidate and the
        refit alike.
    sync_every : int or "auto", default="auto"
        Blocks each replica trains between two merges (``"sync"``).
    staleness : int or None, default=0
        Chunks an ``"async"`` replica may run ahead of the slowest (``None``: unbounded).
    shuffle : bool, default=False
        ``False``: every candidate sees the chunks in the same order.
    shuffle_rows : bool, default=False
        Also shuffle the rows inside each chunk.
    n_replicas : int or None, default=None
        Replicas of ``"sync"`` and ``"async"`` (default one per worker).
    data : {"auto", "persist", "stream"}, default="auto"
        How the chunks reach the replicas (see :func:`taskdml.parallel.train`).
    prefetch : int, default=2
        Chunks a streaming replica reads ahead.
    random_state : int, RandomState instance or None, default=None
        Seeds the chunk orders: candidate ``i`` trains with ``random_state + i`` (``None``:
        0).
    parallel : dict, optional
        Deprecated since 0.2 (removed in 0.3): the engine options above as one dict; pass
        them as parameters, which ``set_params`` and ``clone`` reach.

    Attributes
    ----------
    cv_results_ : dict of numpy (masked) ndarrays
        ``split<k>_test_<score>``, ``mean_/std_/rank_test_<score>``, the train scores with
        ``return_train_score``, ``mean_/std_fit_time`` and ``score_time``, ``param_<name>``
        masked arrays and ``params``. A candidate's fit time includes the shared steps it
        used (the time its whole fit would take); its score time includes transforming the
        test rows.
    best_estimator_ : estimator
        The best candidate refitted on all the data (with ``refit``).
    best_score_ : float
        Mean cross-validated score of the best candidate.
    best_params_ : dict
        Parameters of the best candidate.
    best_index_ : int
        Index of the best candidate in ``cv_results_``.
    scorer_ : callable or dict
        The scorer(s) used (metric names on chunked data).
    n_splits_ : int
        Number of folds.
    refit_time_ : float
        Seconds spent refitting the best candidate.
    multimetric_ : bool
        Whether several metrics were scored.
    classes_ : ndarray of shape (n_classes,)
        Class labels of the best estimator (classifiers).
    n_features_in_ : int
        Number of features seen during fit.

    See Also
    --------
    RandomizedSearchCV : Sample candidates from distributions.
    sklearn.model_selection.GridSearchCV : The in-process original.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn.svm import SVC
    >>> from taskdml.model_selection import GridSearchCV
    >>> X, y = load_iris(return_X_y=True)
    >>> pipe = make_pipeline(StandardScaler(), SVC())
    >>> search = GridSearchCV(pipe, {"svc__C": [0.1, 1, 10]}, cv=3).fit(X, y)
    >>> search.best_params_
    {'svc__C': 10}
    >>> round(float(search.best_score_), 3)
    0.973
    >>> sorted(search.cv_results_)[:4]
    ['mean_fit_time', 'mean_score_time', 'mean_test_score', 'param_svc__C']
    """

    def __init__(
        self,
        estimator,
        param_grid,
        *,
        scoring=None,
        n_jobs=None,
        refit=True,
        cv=None,
        verbose=0,
        pre_dispatch="2*n_jobs",
        error_score=np.nan,
        return_train_score=False,
        strategy=None,
        epochs="auto",
        sync_every="auto",
        staleness=0,
        shuffle=False,
        shuffle_rows=False,
        n_replicas=None,
        data="auto",
        prefetch=2,
        random_state=None,
        parallel="deprecated",
    ):
        super().__init__(
            estimator,
            scoring=scoring,
            n_jobs=n_jobs,
            refit=refit,
            cv=cv,
            verbose=verbose,
            pre_dispatch=pre_dispatch,
            error_score=error_score,
            return_train_score=return_train_score,
            strategy=strategy,
            epochs=epochs,
            sync_every=sync_every,
            staleness=staleness,
            shuffle=shuffle,
            shuffle_rows=shuffle_rows,
            n_replicas=n_replicas,
            data=data,
            prefetch=prefetch,
            random_state=random_state,
            parallel=parallel,
        )
        self.param_grid = param_grid

    def _candidates(self):
        from sklearn.model_selection import ParameterGrid

        return list(ParameterGrid(self.param_grid))


class RandomizedSearchCV(BaseSearchCV):
    """Randomized search over parameter distributions, every candidate × fold a Dask task.

    A drop-in replacement for :class:`sklearn.model_selection.RandomizedSearchCV`: it draws
    the same candidates for the same ``random_state`` (through
    :func:`taskdml.model_selection._space.candidates`) and runs them as
    :class:`GridSearchCV` does.

    Parameters
    ----------
    estimator : estimator object
        Cloned for every candidate.
    param_distributions : dict or list of dict
        Parameter names to lists (sampled uniformly) or ``scipy.stats`` distributions.
    n_iter : int, default=10
        Number of candidates sampled.
    scoring, n_jobs, refit, cv, verbose, pre_dispatch, error_score, return_train_score
        As in :class:`GridSearchCV`.
    random_state : int, RandomState instance or None, default=None
        Seeds the sampling of the candidates, and on chunked data the chunk orders as in
        :class:`GridSearchCV`.
    strategy, epochs, sync_every, staleness, shuffle, shuffle_rows, n_replicas, data, \
prefetch, parallel
        As in :class:`GridSearchCV`.

    Attributes
    ----------
    cv_results_, best_estimator_, best_score_, best_params_, best_index_, scorer_, n_splits_, \
refit_time_, multimetric_, classes_, n_features_in_
        As in :class:`GridSearchCV`.

    See Also
    --------
    GridSearchCV : Every point of a grid.

    Examples
    --------
    >>> from scipy.stats import loguniform
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from taskdml.model_selection import RandomizedSearchCV
    >>> X, y = load_iris(return_X_y=True)
    >>> search = RandomizedSearchCV(LogisticRegression(max_iter=500), {"C": loguniform(1e-2, 1e2)},
    ...                             n_iter=4, cv=3, random_state=0).fit(X, y)
    >>> len(search.cv_results_["params"]), search.n_splits_
    (4, 3)
    >>> bool(search.best_score_ > 0.9)
    True
    """

    def __init__(
        self,
        estimator,
        param_distributions,
        *,
        n_iter=10,
        scoring=None,
        n_jobs=None,
        refit=True,
        cv=None,
        verbose=0,
        pre_dispatch="2*n_jobs",
        random_state=None,
        error_score=np.nan,
        return_train_score=False,
        strategy=None,
        epochs="auto",
        sync_every="auto",
        staleness=0,
        shuffle=False,
        shuffle_rows=False,
        n_replicas=None,
        data="auto",
        prefetch=2,
        parallel="deprecated",
    ):
        super().__init__(
            estimator,
            scoring=scoring,
            n_jobs=n_jobs,
            refit=refit,
            cv=cv,
            verbose=verbose,
            pre_dispatch=pre_dispatch,
            error_score=error_score,
            return_train_score=return_train_score,
            strategy=strategy,
            epochs=epochs,
            sync_every=sync_every,
            staleness=staleness,
            shuffle=shuffle,
            shuffle_rows=shuffle_rows,
            n_replicas=n_replicas,
            data=data,
            prefetch=prefetch,
            random_state=random_state,
            parallel=parallel,
        )
        self.param_distributions = param_distributions
        self.n_iter = n_iter

    def _candidates(self):
        from taskdml.model_selection._space import candidates

        return candidates(self.param_distributions, self.n_iter, random_state=self.random_state)


# ----------------------------------------------------------------------------------------
# Scoring and results, as scikit-learn does them.


def _routing_enabled():
    return get_config()["enable_metadata_routing"]


def _scorer_route(metric):
    """The name of a scorer's route in :meth:`BaseSearchCV.get_metadata_routing`."""
    return "scorer" if metric is None else f"scorer_{metric}"


def _names_only(scoring):
    """Whether the scorers only call prediction methods (then they see transformed rows)."""
    if scoring is None or isinstance(scoring, str):
        return True
    if isinstance(scoring, (list, tuple, set)):
        return all(isinstance(name, str) for name in scoring)
    if isinstance(scoring, dict):
        return all(isinstance(name, str) for name in scoring.values())
    return False


def _check_scoring(estimator, scoring):
    """``(scorers, multimetric)``: one scorer, or a dict of them for several metrics."""
    from sklearn.metrics import check_scoring

    if callable(scoring) or scoring is None or isinstance(scoring, str):
        return (scoring if callable(scoring) else check_scoring(estimator, scoring)), False
    generic = "The list/tuple elements must be unique strings of predefined scorers. "
    if isinstance(scoring, (list, tuple, set)):
        names = list(scoring)
        if not names:
            raise ValueError(f"{generic}Empty list was given. {scoring!r}")
        if not all(isinstance(name, str) for name in names):
            if any(callable(name) for name in names):
                raise ValueError(
                    f"{generic}One or more of the elements were callables. Use a dict of score "
                    f"name mapped to the scorer callable. Got {scoring!r}"
                )
            raise ValueError(
                f"{generic}Non-string types were found in the given list. Got {scoring!r}"
            )
        if len(set(names)) != len(names):
            raise ValueError(
                f"{generic}Duplicate elements were found in the given list. {scoring!r}"
            )
        return {name: check_scoring(estimator, scoring=name) for name in names}, True
    if isinstance(scoring, dict):
        if not scoring:
            raise ValueError(f"An empty dict was passed. {scoring!r}")
        if not all(isinstance(name, str) for name in scoring):
            raise ValueError(
                f"Non-string types were found in the keys of the given dict. scoring={scoring!r}"
            )
        return {
            name: check_scoring(estimator, scoring=value) for name, value in scoring.items()
        }, True
    raise ValueError(
        f"scoring is invalid (got {scoring!r}). Refer to the scoring glossary for details: "
        "https://scikit-learn.org/stable/glossary.html#term-scoring"
    )


def _check_refit_for_multimetric(refit, scorers, multimetric):
    if not multimetric:
        return
    if (
        refit is not False
        and not (isinstance(refit, str) and refit in scorers)
        and not callable(refit)
    ):
        raise ValueError(
            "For multi-metric scoring, the parameter refit must be set to a scorer key or a "
            "callable to refit an estimator with the best parameter setting on the whole data and "
            "make the best_* attributes available for that metric. If this is not needed, refit "
            f"should be set to False explicitly. {refit!r} was passed."
        )


def _select_best_index(refit, refit_metric, results):
    if callable(refit):
        best_index = refit(results)
        if not isinstance(best_index, numbers.Integral):
            raise TypeError("best_index_ returned is not an integer")
        if best_index < 0 or best_index >= len(results["params"]):
            raise IndexError("best_index_ index out of range")
        return best_index
    return results[f"rank_test_{refit_metric}"].argmin()


def _warn_or_raise_about_fit_failures(results, error_score):
    from sklearn.exceptions import FitFailedWarning

    errors = [result["fit_error"] for result in results if result["fit_error"] is not None]
    if not errors:
        return
    delimiter = "-" * 80 + "\n"
    summary = "\n".join(
        f"{delimiter}{n} fits failed with the following error:\n{error}"
        for error, n in Counter(errors).items()
    )
    if len(errors) == len(results):
        raise ValueError(
            f"\nAll the {len(results)} fits failed.\n"
            "It is very likely that your model is misconfigured.\n"
            "You can try to debug the error by setting error_score='raise'.\n\n"
            f"Below are more details about the failures:\n{summary}"
        )
    warnings.warn(
        f"\n{len(errors)} fits failed out of a total of {len(results)}.\n"
        "The score on these train-test "
        f"partitions for these parameters will be set to {error_score}.\nIf these failures are not "
        "expected, you can try to debug them by setting error_score='raise'.\n\n"
        f"Below are more details about the failures:\n{summary}",
        FitFailedWarning,
        stacklevel=5,
    )


def _print_fits(candidates, n_splits, out, verbose, return_train_score):
    """scikit-learn's per-fit ``[CV k/n] END ...`` lines, printed once all the fits are done."""
    from joblib.logger import short_format_time

    for index, result in enumerate(out):
        params = candidates[index // n_splits]
        message = ", ".join(f"{name}={params[name]}" for name in sorted(params))
        message += ";" if message else ""
        progress = ""
        if verbose > 2:
            progress = f" {index % n_splits + 1}/{n_splits}"
            if verbose > 9:
                progress += f"; {index // n_splits + 1}/{len(candidates)}"
            test, train = result["test_scores"], result["train_scores"]
            if isinstance(test, dict):
                for name in sorted(test):
                    message += f" {name}: ("
                    if return_train_score:
                        message += f"train={train[name]:.3f}, "
                    message += f"test={test[name]:.3f})"
            elif return_train_score:
                message += f", score=(train={train:.3f}, test={test:.3f})"
            else:
                message += f", score={test:.3f}"
        total = result["fit_time"] + result["score_time"]
        message += f" total time={short_format_time(total)}"
        line = f"[CV{progress}] END "
        print(line + "." * (80 - len(line) - len(message)) + message)


def format_results(candidates, n_splits, out, return_train_score):
    """``cv_results_`` from one result per candidate × fold (candidate-major), as scikit-learn."""
    from scipy.stats import rankdata

    n_candidates = len(candidates)
    results = {}

    def store(name, values, splits=False, rank=False):
        array = np.array(values, dtype=np.float64).reshape(n_candidates, n_splits)
        if splits:
            for split in range(n_splits):
                results[f"split{split}_{name}"] = array[:, split]
        means = np.average(array, axis=1)
        results[f"mean_{name}"] = means
        if name.startswith(("train_", "test_")) and np.any(~np.isfinite(means)):
            warnings.warn(
                f"One or more of the {name.split('_')[0]} scores are non-finite: {means}",
                category=UserWarning,
                stacklevel=4,
            )
        results[f"std_{name}"] = np.sqrt(np.average((array - means[:, np.newaxis]) ** 2, axis=1))
        if rank:
            if np.isnan(means).all():
                ranks = np.ones_like(means, dtype=np.int32)
            else:
                means = np.nan_to_num(means, nan=np.nanmin(means) - 1)
                ranks = rankdata(-means, method="min").astype(np.int32, copy=False)
            results[f"rank_{name}"] = ranks

    store("fit_time", [result["fit_time"] for result in out])
    store("score_time", [result["score_time"] for result in out])
    results.update(_masked_params(candidates))
    results["params"] = candidates
    test = _by_name([result["test_scores"] for result in out])
    train = _by_name([result["train_scores"] for result in out]) if return_train_score else {}
    for name in test:
        store(f"test_{name}", test[name], splits=True, rank=True)
        if return_train_score:
            store(f"train_{name}", train[name], splits=True)
    return results


def _by_name(scores):
    """``{name: [score per fit]}``; a single metric is named ``score``."""
    if isinstance(scores[0], dict):
        return {name: [score[name] for score in scores] for name in scores[0]}
    return {"score": scores}


def _masked_params(candidates):
    """One masked array per parameter name, masked where a candidate lacks it (as scikit-learn)."""
    values = defaultdict(dict)
    for index, params in enumerate(candidates):
        for name, value in params.items():
            values[f"param_{name}"][index] = value
    masked = {}
    for key, by_index in values.items():
        listed = list(by_index.values())
        try:
            array = np.array(listed)
        except ValueError:
            dtype = np.dtype(object)
        else:
            dtype = array.dtype if array.dtype.kind != "U" and array.ndim == 1 else object
        column = np.ma.MaskedArray(np.empty(len(candidates), dtype=dtype), mask=True)
        for index, value in by_index.items():
            column[index] = value
        masked[key] = column
    return masked
