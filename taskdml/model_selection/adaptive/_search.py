"""Adaptive searches over trials trained with ``partial_fit``: ASHA, successive halving, Hyperband.

A *trial* is one candidate's estimator and its state: a fitted copy per fold that lives on the
cluster as a future. Its budget is counted in **epochs** of ``partial_fit`` over the training
chunks; an estimator with only ``fit`` is refitted at each rung on a growing, seeded, nested
subsample of the training rows, the budget then being the fraction ``budget / max_budget`` of
them. A trial that goes on continues from its state, never from scratch; a trial that stops
releases its state at once (the driver drops its futures, so the cluster forgets them).

**Validation** is a seeded hold-out of ``validation_fraction`` of the training *chunks*, or,
with ``cv=k``, k folds of chunks (each fold its own state; a trial's score is the mean over
folds). Chunks are never split, so nothing moves for it. **Scoring**: a scikit-learn scorer
name that :mod:`taskdml.metrics` also knows (``accuracy``, ``f1_macro``, ``roc_auc``,
``neg_log_loss``, ``r2``, ...) is computed chunk-wise where the validation chunks live; any
other name, a callable, or an estimator's own ``score`` runs in one task on the validation
chunks gathered there (validation is small). ``scoring=None`` means ``estimator.score``:
accuracy for classifiers and R² for regressors, computed chunk-wise.

**Scheduling** (see ``_adaptive_policy`` for the rung logic). A *step* trains one trial from
the budget it has to the next rung's, for every fold, and scores it. On a cluster it runs in
one of three ways, recorded per step as ``mode`` in ``history_`` (and in ``trials_["steps"]``):

- ``"fused"`` (the default): one task over every training chunk, on a worker that holds them
  all. When a copy of the training data fits in a quarter of every worker's memory limit, each
  worker receives every chunk once, at the start of the search; a step is then one task
  (all its epochs, the same ``partial_fit`` calls in the same order as a chain) and one scoring
  task on the same worker, so a step's overhead is two tasks whatever its length.
- ``"chain"``: when the data is too large to copy to every worker, a chain of
  ``partial_fit`` tasks, one per chunk, that follows the data (the state is small, the chunks
  stay where they are).
- ``"replicated"``: data-parallel with the engine, see below.

(``"subsample"``: a fit-only estimator's refit at its budget; ``"rounds"``: XGBoost's and
LightGBM's, whose budget counts boosting rounds, ``max_epochs`` standing for ``n_estimators``,
each step growing the trial's booster; ``"local"``: without a client.)
The driver keeps two steps in flight per worker thread (a step of a ``cv=k`` search counts
k), each fused step going to the worker with the fewest in flight, so a thread never waits
for the next step's dispatch. It drives them with ``distributed.as_completed``: when a step's
score arrives the policy decides, and the freed slot is filled at once.

- :class:`ASHASearchCV` has no barrier at all. Rungs sit at ``min_epochs * reduction_factor**k``
  (and ``max_epochs``). A trial that reports at rung k is promoted the moment it is in the top
  ``1/reduction_factor`` of the results recorded at rung k *so far*; otherwise the slot goes to
  another promotable trial (highest rung first) or to a new trial. A trial that can no longer
  be promoted, whatever arrives later, is stopped and released.
- :class:`SuccessiveHalvingSearchCV` is the synchronous version: every trial of a rung
  reports, the top ``1/reduction_factor`` go on.
- :class:`HyperbandSearchCV` runs dask-ml's brackets (successive halvings with different
  trade-offs between trials and epochs) all at once, taking jobs from the brackets in turn.

**Hybrid parallelism.** With ``strategy="sync", sync_every=k`` (or ``"async"``) a step may
train data-parallel with the engine (:func:`taskdml.parallel.train`), one
replica per worker of its share, each on the chunks its worker holds. The driver replicates a
step when it is long and the cluster would otherwise idle: its estimated work (epochs times
the seconds per epoch measured on the steps so far) is at least 0.25 s, at least two worker
threads are free of other replicated steps, and the work left of the single-replica steps in
flight plus the steps waiting, spread over the other free threads, would run out before half
of it is done. In practice: the late rungs, the last survivors, a long step launched when
few trials remain. Early rungs, with many trials runnable, stay task-parallel (one trial per
thread, no synchronisation). A replicated step gets ``n_workers // k`` workers when ``k``
trials could run now (``k`` at most half the workers), taken from those no other replicated
step holds: on four workers the two survivors of a rung train side by side with two replicas
each, on two workers a replicated step takes both. The engine holds a training's workers
while its replicas run (a leased ``distributed.Lock`` per worker), so replicated steps that
would share a worker take turns; a step's task waits for its turn outside the worker's
thread pool, so waiting holds no thread, and other steps keep running meanwhile.
``history_`` records ``mode``, ``replicas`` and ``workers`` for every step.

The refit uses every worker too when ``strategy`` is ``"sync"`` or ``"async"``. Replicated
steps are deterministic for a seed and a number of workers with ``sync`` and an integer
``sync_every``; not with ``"auto"`` (the engine's default, which chooses the period from
timings) nor with ``async``; and which steps replicate depends on timings. Fused and chained
steps give identical results.

**Results.** ``cv_results_`` is scikit-learn's (one row per trial: ``params``, ``param_*``,
``mean_test_score`` at the budget reached, ``rank_test_score``, and ``budget``, ``rung``,
``state``). Trials are ranked by the budget they reached, then by score: a score after one
epoch is not comparable with one after 27, and the best trial is the best of those that went
furthest. ``trials_`` is a DataFrame with one row per trial (parameters, budget, scores per
rung, state: ``"completed"``, ``"stopped at rung r"`` or ``"failed"`` with its error, and
``steps``: how each of its steps ran) and ``history_`` lists every result as it arrived
(trial, rung, epochs, score, seconds since the search started, and how the step ran:
``mode`` and ``replicas``). A failing trial is recorded and the search goes on; it fails only
if every trial does (or at once with ``error_score="raise"``).

**Vocabulary.** The three searches take the same parameters in the same order, scikit-learn's
names first (``param_distributions``, ``random_state``, ``scoring``, ``cv``, ``refit``,
``error_score``), budgets in epochs (``n_trials``, ``max_epochs``, ``min_epochs``,
``reduction_factor``; Hyperband derives its trials and first rungs from ``max_epochs``), then
the engine's options (``strategy``, ``sync_every``, ``staleness``, ``shuffle``, ``data``,
``prefetch``: :mod:`taskdml.parallel.engine._options`), then the other libraries' names that
code migrating to them needs, so that it runs unchanged:

=====================  ===================================  =================================
taskdml                dask-ml                              scikit-learn
=====================  ===================================  =================================
param_distributions    parameters                           param_distributions
n_trials               n_initial_parameters                 n_candidates (an int)
min_epochs             n_initial_iter                       —
max_epochs             max_iter                             —
reduction_factor       aggressiveness                       factor
validation_fraction    test_size                            —
=====================  ===================================  =================================

An alias is an ``__init__`` parameter of its own that defaults to ``None`` and is stored as
given (``get_params`` and ``clone`` see it as passed); ``fit`` resolves it, and a run under the
aliases is the same run as under the canonical names. Giving one parameter twice (an alias
and a non-default canonical value, or two aliases) is an error that names both. ``n_iter``
(``RandomizedSearchCV``'s name for ``n_trials``, which no halving search uses) and the
``parallel`` dict are deprecated: they work until 0.3, with a ``FutureWarning``. Where
dask-ml's meaning differs (``max_iter=None``: dask-ml's "until one model is left"), the
alias is not given: the canonical default applies. dask-ml's ``verbose``, ``prefix``,
``predict_meta`` and friends have no counterpart and are not accepted.

**From dask-ml.** Every public parameter and attribute of dask-ml's
``HyperbandSearchCV``, ``SuccessiveHalvingSearchCV`` and ``IncrementalSearchCV`` (the
``dask_ml.model_selection`` of 2024-2025), and where it went:

=============================  ===========================================================
dask-ml                        taskdml
=============================  ===========================================================
``estimator``                  ``estimator`` (with ``partial_fit``; or only ``fit``: the
                               budget is then a growing subsample)
``parameters``                 ``param_distributions``; both accepted
``n_initial_parameters``       ``n_trials`` (Hyperband: derived from ``max_epochs``, as in
                               dask-ml); ``"grid"``: not accepted, because the adaptive
                               searches sample; pass a list-valued space and ``n_trials`` =
                               its size, or use :class:`~taskdml.model_selection.GridSearchCV`
``n_initial_iter``             ``min_epochs``
``max_iter``                   ``max_epochs``, in epochs over the training chunks, not
                               ``partial_fit`` calls on one block; ``None``: not accepted,
                               the canonical default applies
``aggressiveness``             ``reduction_factor``
``test_size``                  ``validation_fraction`` (of chunks; ``cv=k`` for k folds)
``patience``, ``tol``          the same (halving and Hyperband; ASHA stops by rank)
``random_state``, ``scoring``  the same
``decay_rate``,                not applicable, because taskdml has no inverse-decay
``fits_per_score``             search (``IncrementalSearchCV``,
                               ``InverseDecaySearchCV``): successive halving or ASHA is the
                               nearest schedule
``verbose``, ``prefix``        not applicable, because progress is in ``history_`` and the
                               Dask dashboard, and keys are named by the pipeline step
``predict_meta``,              not applicable, because predictions on dask input are
``predict_proba_meta``,        computed from a probe row (no ``meta`` to declare)
``transform_meta``
``fit(X, y, **fit_params)``    ``fit(X, y, classes=None)``: ``classes`` is the one
                               ``partial_fit`` argument passed; others are not accepted
``cv_results_``                the same, with dask-ml's ``test_score``, ``model_id``,
                               ``partial_fit_calls`` (epochs), ``mean_/std_partial_fit_time``
                               and ``mean_/std_score_time``, and scikit-learn's
                               ``mean_test_score``
``model_history_``             the same: ``{model_id: [record, ...]}`` (see below)
``history_``                   the same records, in arrival order, with taskdml's fields too
                               (``trial``, ``rung``, ``budget``, ``replicas``, ...)
``best_estimator_``            the same, refitted on all the data (see "Refit"); dask-ml
                               returns the best model as trained, without refit
``best_index_``,               the same
``best_params_``,
``best_score_``
``scorer_``, ``n_splits_``,    the same (``n_splits_`` is ``cv`` or 1)
``multimetric_``
``metadata``, ``metadata_``    the same keys (``n_models``, ``partial_fit_calls`` in epochs;
                               Hyperband's ``brackets``), plus ``rungs`` (halving) and, in
                               ``metadata_``, ``refit`` and ``refit_epochs``
=============================  ===========================================================

A ``model_history_`` record has dask-ml's fields: ``model_id`` (the trial's index, or
Hyperband's ``"bracket=s-i"``, the i-th trial of bracket s), ``params``,
``partial_fit_calls`` (epochs trained so far), ``partial_fit_time`` (seconds of the step that
ended at this score, scoring included: a step is one chain of tasks), ``score``,
``score_time`` (NaN: not measured apart from the step), ``elapsed_wall_time`` (seconds since
``fit`` began) and, for Hyperband, ``bracket``. ``model_history_[cv_results_["model_id"]
[best_index_]]`` is the best trial's curve, as in dask-ml.

**Refit.** ``best_estimator_`` is trained on *all* the training data (training and
validation chunks), data-parallel on every worker with ``strategy="sync"`` or ``"async"``, in one
of two ways;
``metadata_["refit"]`` says which ran and ``metadata_["refit_epochs"]`` how many epochs over
every chunk it trained (``refit_time_``: its seconds).

- ``refit=True`` (or ``"continue"``, the default): **continued**. The best trial's state,
  already trained for its budget on the training chunks, trains **one more epoch over every
  chunk** in a seeded order: each validation row is seen once, each training row once more.
  It costs one epoch instead of the budget's (27 for ``max_epochs=27``), and on the
  synthetic problems measured its hold-out accuracy is that of the full refit (within the
  spread over seeds). With ``cv=k`` the state continued is the first fold's (the chunks it
  never saw are that fold's validation chunks). For it the search keeps the state of the best
  trial finished so far (ranked as ``best_index_``), and only that one: every other trial
  that stops releases its state at once, and the kept one is released when a better one
  finishes. An estimator without ``partial_fit`` has no state to continue: its refit is full.
- ``refit="full"``: a fresh copy of the estimator with the best parameters trained from
  scratch on every chunk for the best trial's budget (``refit_epochs`` = the budget).
- ``refit=False``: no ``best_estimator_``; ``metadata_["refit"]`` is ``None``.

**Keys.** The search's keys are named by :func:`taskdml._keys.key_name` with phases
``trial-data`` (the chunks held on each worker: ``(name, worker index)``), ``trial-step`` (a
fused step: ``(name, trial, fold, first epoch, last epoch)``), ``trial-fit`` (a chain's link:
``(name, trial, fold, epoch, position)``), ``trial-train`` (a replicated step),
``trial-subsample``, ``trial-score``, ``trial-result`` and ``classes``; the
prefix is the pipeline step, or ``asha``, ``halving``, ``hyperband`` outside one. Trial
parameters are never in a prefix. Chunk-wise scoring runs :mod:`taskdml.metrics`' graph
(``evaluate-*`` keys, or the step's name).

Without a distributed client the same searches run in this process, one step at a time
(small in-memory data); they are then deterministic.
"""

import numbers
import time
import warnings

import numpy as np
from dask.base import tokenize
from sklearn.utils.metaestimators import available_if

from taskdml import _warm
from taskdml._apply import apply_chunkwise
from taskdml._data import as_dask, is_chunked, is_frame, is_table, unwrap
from taskdml._keys import key_name
from taskdml.cache import _checkpoints as _checkpoint
from taskdml.exceptions import DataError
from taskdml.metrics import score_chunked
from taskdml.model_selection._base import SearchBase, best_has, engine_options
from taskdml.model_selection.adaptive import _policy as policies
from taskdml.model_selection.adaptive._results import (
    all_failed_message,
    best_trial,
    cv_results,
    model_history,
    trial_records_frame,
)
from taskdml.model_selection.adaptive._run import (
    AllTrialsFailed,
    ClusterBackend,
    Driver,
    Job,
    Layout,
    LocalBackend,
    SearchPlan,
    Trial,
    find_classes,
    make_folds,
    prepare,
)

__all__ = ["ASHASearchCV", "HyperbandSearchCV", "SuccessiveHalvingSearchCV"]

REFIT_METHODS = ("continue", "full")
"""``refit``'s strings; ``True`` means ``"continue"``."""

CONTINUED_EPOCHS = 1
"""Epochs over every chunk that a continued refit adds to the best trial's state."""


class _AdaptiveSearchCV(SearchBase):
    """What the three searches share: validation, data layout, the driver, the results.

    A subclass says how many candidates it samples (:meth:`_n_candidates`), the budget of the
    top rung (:meth:`_max_budget`), and builds its policy (:meth:`_policy`).
    """

    _prefix = "search"
    _taker = "adaptive"
    _aliases = {}
    """``{canonical name: ((alias, vocabulary), ...)}``: the other libraries' names it accepts."""
    _deprecated_aliases = frozenset({"n_iter"})
    """Aliases nobody migrating needs, accepted with a ``FutureWarning`` until 0.3."""

    # -- the estimator contract ---------------------------------------------------------------

    def __sklearn_tags__(self):
        from taskdml._meta import wrapped_tags

        tags = wrapped_tags(super().__sklearn_tags__(), self.estimator)
        tags.input_tags.sparse = False
        return tags

    def fit(self, X, y=None, classes=None):
        """Run the search on chunked data; refit the best candidate on all of it.

        Parameters
        ----------
        X : dask array, xarray.DataArray or Dataset, or array-like of shape (n_samples, n_features)
            Training data, chunked along samples (an ``xarray.Dataset`` holds ``X`` and ``y``).
            In-memory data is cut into chunks of about 20,000 rows (at least 10 chunks).
        y : dask array, xarray.DataArray or array-like of shape (n_samples,), optional
        classes : array-like, optional
            Every label of a classifier (``partial_fit``'s ``classes``); found chunk by chunk
            when omitted.

        Returns
        -------
        self
        """
        from sklearn.base import clone
        from sklearn.utils import check_random_state

        from taskdml.model_selection._space import candidates

        began = time.perf_counter()
        self._check_common_params()
        self._check_params()
        X, y = self._validate_data(X, y)
        scoring = _resolve_scoring(self.estimator, self.scoring)
        options = engine_options(self, self._from_parallel)
        parallel = self._replication(options, hasattr(self.estimator, "partial_fit"))
        rng = check_random_state(self.random_state)
        params = candidates(self._space(), self._n_candidates(), random_state=rng)
        backend = self._backend(
            X, y, classes, params, int(rng.randint(2**31 - 1)), scoring, parallel, options
        )
        trials = [Trial(i, p, clone(self.estimator).set_params(**p)) for i, p in enumerate(params)]
        driver = Driver(
            self._policy(trials),
            backend,
            trials,
            parallel=bool(backend.plan.parallel),
            patience=self._patience(),
            tol=getattr(self, "tol", 0.0),
            raise_errors=self.error_score == "raise",
            started=began,
            keep_best=self.refit in (True, "continue") and backend.plan.partial_fit,
            checkpoints=_checkpoint.claim(),
        )
        driver.restore()
        try:
            try:
                history = driver.run()
            except AllTrialsFailed:
                raise ValueError(all_failed_message(self, trials)) from None
            best = best_trial(trials)
            refit_began = time.perf_counter()
            best_estimator, refit = (
                self._refit(backend, best, driver.kept) if self.refit else (None, None)
            )
            refit_time = time.perf_counter() - refit_began
        finally:
            driver.release_all()
            backend.close()
        failed = [t for t in trials if t.status == "failed"]
        if failed:
            warnings.warn(
                f"{len(failed)} of {len(trials)} trials failed; see trials_['error']. First: "
                f"trial {failed[0].id}: {failed[0].error}",
                _fit_failed_warning(),
                stacklevel=2,
            )
        self._store_results(trials, history, best, backend)
        self.metadata_.update(refit or {"refit": None, "refit_epochs": 0})
        self.metadata_["data"] = backend.plan.data
        if driver.resumed_from is not None:
            self.metadata_["resumed_from"] = driver.resumed_from
        self.n_features_in_ = X.shape[1]
        self.fit_time_ = time.perf_counter() - began
        if self.refit:
            self.best_estimator_ = best_estimator
            self.refit_time_ = refit_time
        return self

    def _backend(self, X, y, classes, params, seed, scoring, parallel, options):
        """Lay the data out (chunks, folds, classes) and choose where steps run."""
        from sklearn.base import is_classifier

        from taskdml._client import current_client

        n_folds = self.cv or 1
        metric, scorer = scoring
        partial_fit = hasattr(self.estimator, "partial_fit")
        client = current_client()
        _warm.check_loadable(
            client,
            {"estimator": self.estimator, "scoring": self.scoring, self._space_name(): params},
            owner=f"{type(self).__name__}.fit",
        )
        data, prefetch = options["data"], options["prefetch"]
        chunks, rows, dtypes, data_facts = prepare(
            X, y, client=client, n_chunks_min=max(2, n_folds), data=data
        )
        token = tokenize(
            type(self).__name__,
            type(self.estimator).__name__,
            seed,
            rows,
            [getattr(part, "key", None) for chunk in chunks for part in chunk],
            params,
        )
        classifier = is_classifier(self.estimator)
        if classes is None and y is not None and classifier and partial_fit:
            classes = find_classes(chunks, client, key_name(self._prefix, token, phase="classes"))
        classes = None if classes is None else np.asarray(classes)
        folds = make_folds(len(rows), self.cv, self._value("validation_fraction"), seed)
        layout = Layout(rows, folds, X.shape[1], classes, y is not None)
        plan = SearchPlan(
            prefix=self._prefix,
            token=token,
            seed=seed,
            metric=metric,
            scorer=scorer,
            partial_fit=partial_fit,
            max_budget=self._max_budget(),
            dtypes=dtypes,
            parallel=parallel or {},
            shuffle=options["shuffle"],
            fit_kwargs={"classes": classes} if classes is not None and classifier else {},
            prefetch=prefetch,
            data=data_facts,
        )
        if client is None:
            return LocalBackend(chunks, layout, plan)
        return ClusterBackend(client, chunks, layout, plan)

    def _refit(self, backend, best, kept):
        """``(best_estimator_, {"refit": how, "refit_epochs": epochs over every chunk})``.

        Continued: the best trial's state (its first fold's), trained one more epoch over
        every chunk. Full: a fresh estimator with the best parameters trained on every chunk
        to the best trial's budget (also when there is no state to continue from).
        """
        from sklearn.base import clone

        replicas = backend.n_workers if backend.plan.parallel else 1
        if self.refit != "full" and kept is best and best.states:
            trial = Trial(-1, best.params, best.states[0])
            job = Job(trial, best.rung, best.budget, best.budget + CONTINUED_EPOCHS, replicas)
            return backend.train_all(job), {"refit": "continued", "refit_epochs": CONTINUED_EPOCHS}
        trial = Trial(-1, best.params, clone(self.estimator).set_params(**best.params))
        estimator = backend.train_all(Job(trial, best.rung, 0, best.budget, replicas))
        epochs = best.budget if backend.plan.partial_fit else None
        return estimator, {"refit": "full", "refit_epochs": epochs}

    def _store_results(self, trials, history, best, backend):
        layout, plan = backend.layout, backend.plan
        n_train = sum(layout.rows[i] for i in layout.folds[0].train)
        model_ids = self._model_ids(trials)
        for event in history:
            if plan.partial_fit:
                event["epochs"] = event["budget"]
            else:
                event["n_samples"] = round(n_train * event["budget"] / plan.max_budget)
            event.update(
                model_id=model_ids[event["trial"]],
                params=trials[event["trial"]].params,
                partial_fit_calls=event["budget"],
                partial_fit_time=event["time"] - event["started"],
                score_time=float("nan"),
                elapsed_wall_time=event["time"],
            )
        self.model_history_ = model_history(history, model_ids, self._has_brackets)
        self.cv_results_ = cv_results(
            trials,
            self.error_score,
            layout.n_folds,
            self.cv is not None,
            with_bracket=self._has_brackets,
        )
        self.cv_results_["model_id"] = np.array([model_ids[t.id] for t in trials])
        self.cv_results_["partial_fit_calls"] = np.array([t.budget for t in trials])
        for field in ("partial_fit_time", "score_time"):  # dask-ml's columns, per trial
            times = [[r[field] for r in self.model_history_.get(i, ())] for i in model_ids]
            self.cv_results_[f"mean_{field}"] = np.array([_mean(t) for t in times])
            self.cv_results_[f"std_{field}"] = np.array([_std(t) for t in times])
        self.best_index_ = best.id
        self.best_params_ = best.params
        self.best_score_ = best.scores[best.rung]
        self.n_trials_ = sum(1 for t in trials if t.status != "pending")
        self.n_iter_ = best.budget
        self.n_splits_ = layout.n_folds
        self.multimetric_ = False
        self.scorer_ = plan.scorer
        self.trials_ = trial_records_frame(trials, self._has_brackets)
        self.history_ = history
        self.metadata_ = self._metadata_as_run(trials)

    def _model_ids(self, trials):
        """dask-ml's ``model_id`` of every trial: its id (Hyperband: ``"bracket=s-i"``)."""
        return [t.id for t in trials]

    # -- prediction: the refitted estimator (delegation: SearchBase) --------------------------

    _refit_gates_methods = False

    def _no_refit_message(self, attribute):
        return (
            f"This {type(self).__name__} was initialized with refit=False. {attribute} is "
            "available only after refitting on the best parameters; set refit=True."
        )

    def _apply_best(self, estimator, method, X):
        return _apply(estimator, method, X)

    @available_if(best_has("score"))
    def score(self, X, y=None):
        """The search's scoring of the refitted best estimator on *X*, *y*.

        A metric of :mod:`taskdml.metrics` is computed chunk by chunk on dask and xarray
        input; any other scorer sees the data computed.

        Parameters
        ----------
        X : dask array, xarray.DataArray or Dataset, or array-like of shape (n_samples, n_features)
        y : dask array, xarray.DataArray or array-like of shape (n_samples,), optional

        Returns
        -------
        score : float
        """
        estimator = self._refitted("score")
        metric, _ = _resolve_scoring(self.estimator, self.scoring)
        X, y, _, _ = unwrap(X, y)
        if is_chunked(X):
            X, y, _ = as_dask(X, y)
            if metric is not None:
                return score_chunked(estimator, X, y, metric)
            X, y = X.compute(), None if y is None else y.compute()
        return self.scorer_(estimator, X, y)

    # -- the vocabulary: canonical names and their aliases --------------------------------------

    def _value(self, name):
        """Parameter *name*'s value, taken from its alias when only the alias was given.

        An alias is an ``__init__`` parameter of its own (default ``None``, stored as given,
        so ``get_params`` and ``clone`` see it); it is resolved here, in ``fit`` and in
        ``metadata``, never in ``__init__``.
        """
        given = self._alias_given(name)
        return getattr(self, name) if given is None else getattr(self, given)

    def _given_name(self, name):
        """The name the user gave parameter *name* under: an alias, or *name* itself."""
        return self._alias_given(name) or name

    def _alias_given(self, name):
        import inspect

        aliases = [
            (alias, vocabulary)
            for alias, vocabulary in self._aliases.get(name, ())
            if getattr(self, alias) is not None
        ]
        if not aliases:
            return None
        default = inspect.signature(type(self).__init__).parameters[name].default
        value = getattr(self, name)
        canonical_given = not (
            value is default
            or (
                isinstance(value, (numbers.Number, str))
                and isinstance(default, (numbers.Number, str))
                and value == default
            )
        )
        if len(aliases) > 1 or canonical_given:
            named = [
                f"{alias}={getattr(self, alias)!r} ({vocabulary}'s name)"
                for alias, vocabulary in aliases
            ]
            if canonical_given:
                named.insert(0, f"{name}={value!r}")
            raise ValueError(
                f"{type(self).__name__}: {' and '.join(named)} set the same parameter, "
                f"{name}; give it once."
            )
        return aliases[0][0]

    # -- shared checks ------------------------------------------------------------------------

    def _check_common_params(self):
        name = type(self).__name__
        for canonical, aliases in self._aliases.items():
            for alias, vocabulary in aliases:
                if alias in self._deprecated_aliases and getattr(self, alias) is not None:
                    warnings.warn(
                        f"{name}({alias}=) ({vocabulary}'s name) is deprecated since taskdml "
                        f"0.2 and will be removed in 0.3: write {canonical}= (scikit-learn's "
                        "halving searches call it n_candidates, dask-ml n_initial_parameters; "
                        "both stay).",
                        FutureWarning,
                        stacklevel=3,
                    )
        if not (hasattr(self.estimator, "fit") or hasattr(self.estimator, "partial_fit")):
            raise TypeError(
                f"{name}: estimator must be a scikit-learn estimator with partial_fit or fit, "
                f"got {self.estimator!r}."
            )
        space = self._space_name()
        if self._space() is None:
            others = " or ".join(alias for alias, _ in self._aliases.get(space, ()))
            raise ValueError(
                f"{name}: no parameter space; pass {space} (or {others}): a dict of "
                "parameter names to lists of values or scipy.stats distributions."
            )
        fraction = self._value("validation_fraction")
        if self.cv is None and not (isinstance(fraction, numbers.Real) and 0 < fraction < 1):
            raise ValueError(
                f"{name}: {self._given_name('validation_fraction')} must be a number in "
                f"(0, 1), got {fraction!r}."
            )
        if self.cv is not None and not (_is_integer(self.cv) and self.cv >= 2):
            raise ValueError(
                f"{name}: cv must be None (a hold-out of validation_fraction) or an integer "
                f">= 2 (k folds of chunks), got {self.cv!r}."
            )
        if not (self.error_score == "raise" or isinstance(self.error_score, numbers.Real)):
            raise ValueError(
                f"{name}: error_score must be 'raise' or a number, got {self.error_score!r}."
            )
        if not (isinstance(self.refit, (bool, np.bool_)) or self.refit in REFIT_METHODS):
            raise ValueError(
                f"{name}: refit must be True (continue the best trial), 'continue', 'full' "
                f"(retrain from scratch) or False, got {self.refit!r}."
            )

    def _from_parallel(self, parallel):
        """The options the deprecated ``parallel`` dict stood for: ``"sync"`` unless it said."""
        if "epochs" in parallel:
            raise ValueError(
                f"{type(self).__name__}: parallel['epochs'] does not apply to a search: the "
                f"budget sets how many epochs each trial trains ({self._budget_names}); remove "
                "it."
            )
        return {"strategy": "sync", **parallel}

    def _replication(self, options, partial_fit):
        """The engine's options for replicated steps, or ``None`` for sequential chains."""
        from taskdml.parallel import SequentialFallbackWarning, unmergeable_reason

        strategy = options["strategy"]
        if strategy == "sequential":
            return None
        reason = unmergeable_reason(self.estimator) if partial_fit else "it has no partial_fit"
        if reason is not None:
            warnings.warn(
                f"{type(self).__name__}: trials of {type(self.estimator).__name__} train as "
                f"sequential chains instead of {strategy!r}: {reason}",
                SequentialFallbackWarning,
                stacklevel=3,
            )
            return None
        return {
            key: options[key] for key in ("strategy", "sync_every", "staleness", "data", "prefetch")
        }

    def _validate_data(self, X, y):
        """Chunked data through :func:`taskdml._data.as_dask`, the rest through scikit-learn."""
        from sklearn.base import is_classifier
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import check_array, check_X_y

        table = is_table(X)
        X, y, _, _ = unwrap(X, y)
        if table or is_frame(X) or _mixed_columns(X):
            raise DataError(
                f"{type(self).__name__} trains its trials incrementally on numeric arrays, "
                f"but X is a table of columns ({_columns_text(X)}). Search a Pipeline over a "
                "table with GridSearchCV or RandomizedSearchCV (method: grid or random in a "
                "search step), or encode the columns into numbers with a map step first and "
                "search on its arrays."
            )
        if is_chunked(X):
            X, y, _ = as_dask(X, y)
            return X, y
        if y is None and self.__sklearn_tags__().target_tags.required:
            X, y = check_X_y(X, y, estimator=self)
        elif y is None:
            X = check_array(X, estimator=self)
        else:
            X, y = check_X_y(X, y, estimator=self)
            if is_classifier(self.estimator):
                check_classification_targets(y)
        if X.shape[0] < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 samples to hold some out for "
                f"validation; got n_samples={X.shape[0]}."
            )
        return X, y

    def _patience(self):
        return None

    def _metadata_as_run(self, trials):
        """``metadata_``: models started and epochs trained, as the search ran."""
        return {
            "n_models": sum(1 for t in trials if t.status != "pending"),
            "partial_fit_calls": int(sum(t.budget for t in trials)),
        }

    _has_brackets = False
    _budget_names = "max_epochs"


# --------------------------------------------------------------------------------------------
# The three searches.


class _SampledTrials:
    """What ASHA and successive halving share: sampled candidates, epoch rungs, aliases."""

    _aliases = {
        "param_distributions": (("parameters", "dask-ml"),),
        "n_trials": (
            ("n_initial_parameters", "dask-ml"),
            ("n_candidates", "scikit-learn"),
            ("n_iter", "scikit-learn"),
        ),
        "min_epochs": (("n_initial_iter", "dask-ml"),),
        "max_epochs": (("max_iter", "dask-ml"),),
        "reduction_factor": (("aggressiveness", "dask-ml"), ("factor", "scikit-learn")),
        "validation_fraction": (("test_size", "dask-ml"),),
    }

    def _space_name(self):
        return "param_distributions"

    def _space(self):
        return self._value("param_distributions")

    def _n_candidates(self):
        return self._value("n_trials")

    def _max_budget(self):
        return self._value("max_epochs")

    def _rung_budgets(self):
        return policies.rung_budgets(
            self._value("min_epochs"), self._value("max_epochs"), self._value("reduction_factor")
        )


class ASHASearchCV(_SampledTrials, _AdaptiveSearchCV):
    """Asynchronous successive halving (ASHA) over trials trained with ``partial_fit``.

    Trials start from seeded samples of *param_distributions*; each trains in epochs over the
    training chunks and reports its validation score at rungs of ``min_epochs *
    reduction_factor**k`` epochs (and ``max_epochs``). A trial that reports is promoted to the
    next rung the moment it is among the top ``1 / reduction_factor`` of the results recorded
    at its rung so far; no rung waits to fill (Li et al., "A System for Massively Parallel
    Hyperparameter Tuning", MLSys 2020). See the module docstring for scheduling, validation,
    data-parallel trials and the fitted attributes.

    Parameters
    ----------
    estimator : scikit-learn estimator
        With ``partial_fit`` (budget in epochs) or only ``fit`` (budget in samples: refitted on
        a growing seeded subsample at each rung).
    param_distributions : dict or list of dicts
        Lists of values and ``scipy.stats`` distributions, as scikit-learn's searches take.
    n_trials : int, default=20
        Number of candidates sampled; trials start in the order sampled.
    max_epochs : int, default=27
        Budget of the top rung.
    min_epochs : int, default=1
        Budget of the first rung.
    reduction_factor : int, default=3
        η: the top ``1/η`` of a rung is promoted, and rung budgets grow by η.
    scoring : str or callable, optional
        A scikit-learn scorer name or callable; ``None`` uses ``estimator.score``.
    cv : int, optional
        k folds of chunks (each its own trial state); ``None`` holds out ``validation_fraction``.
    validation_fraction : float, default=0.2
        Fraction of the training chunks held out for validation when ``cv`` is None.
    strategy : {"sequential", "sync", "async"}, default="sequential"
        ``"sync"`` or ``"async"``: steps may train data-parallel with the engine when fewer
        trials are runnable than workers (see "Hybrid parallelism" in the module docstring);
        ``"sequential"``: every step is one trial's chain of tasks.
    sync_every : int or "auto", default="auto"
        Blocks each replica of a replicated step trains between two merges (``"sync"``).
    staleness : int or None, default=0
        Chunks an ``"async"`` replica may run ahead of the slowest (``None``: unbounded).
    shuffle : bool, default=True
        A new seeded chunk order per trial and epoch; ``False`` keeps one order.
    data : {"auto", "persist", "stream"}, default="auto"
        Whether the training chunks are persisted on the workers or streamed to the steps
        (see :func:`taskdml.parallel.train`); ``metadata_["data"]`` says what ran.
    prefetch : int, default=2
        Chunks a streamed step reads ahead.
    refit : bool, 'continue' or 'full', default=True
        Train the best candidate on all the data into ``best_estimator_``: ``True`` (or
        ``'continue'``) continues the best trial's state for one epoch over every chunk,
        ``'full'`` retrains it from scratch for its budget (see "Refit" in the module
        docstring); ``metadata_["refit"]`` says which ran.
    error_score : 'raise' or float, default=np.nan
        Score of a failed trial in ``cv_results_``; ``'raise'`` stops the search at once.
    random_state : int, RandomState or None
        Seeds the candidates, the hold-out and every trial's chunk order.
    parameters : dict or list of dicts, optional
        dask-ml's name for *param_distributions*.
    n_initial_parameters : int, optional
        dask-ml's name for *n_trials*.
    n_initial_iter : int, optional
        dask-ml's name for *min_epochs*.
    max_iter : int, optional
        dask-ml's name for *max_epochs*.
    aggressiveness : int, optional
        dask-ml's name for *reduction_factor*.
    test_size : float, optional
        dask-ml's name for *validation_fraction*.
    n_candidates : int, optional
        scikit-learn's name for *n_trials* (``HalvingRandomSearchCV``).
    factor : int, optional
        scikit-learn's name for *reduction_factor* (``HalvingRandomSearchCV``).
    n_iter : int, optional
        Deprecated since 0.2 (removed in 0.3): ``RandomizedSearchCV``'s name for *n_trials*.
    parallel : dict, optional
        Deprecated since 0.2 (removed in 0.3): ``strategy``, ``sync_every``, ``staleness``,
        ``shuffle``, ``data`` and ``prefetch`` as one dict (``strategy`` then defaults to
        ``"sync"``); pass them as parameters, which ``set_params`` and ``clone`` reach.

    Attributes
    ----------
    cv_results_ : dict of arrays
    best_index_, best_params_, best_score_, best_estimator_
    n_trials_ : int
    trials_ : pandas.DataFrame
    history_ : list of dict
        Every score as it arrived: taskdml's fields and dask-ml's.
    model_history_ : dict
        dask-ml's: ``{model_id: [record per score]}`` (see "From dask-ml" in the module
        docstring).
    refit_time_ : float
        Seconds of the refit.
    metadata_ : dict
        ``n_models`` and ``partial_fit_calls`` (epochs trained, summed over trials);
        ``refit`` (``"continued"``, ``"full"`` or ``None``) and ``refit_epochs`` (epochs over
        every chunk the refit trained).

    Examples
    --------
    >>> from scipy.stats import loguniform
    >>> from sklearn.datasets import make_classification
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml.model_selection import ASHASearchCV
    >>> X, y = make_classification(2_000, 10, random_state=0)
    >>> search = ASHASearchCV(SGDClassifier(random_state=0), {"alpha": loguniform(1e-5, 1e-1)},
    ...                       n_trials=9, max_epochs=9, random_state=0).fit(X, y)
    >>> sorted(search.trials_["state"].unique())
    ['completed', 'stopped at rung 0', 'stopped at rung 1']
    >>> bool(search.best_score_ > 0.8), search.best_estimator_.predict(X[:3]).shape
    (True, (3,))
    """

    _prefix = "asha"

    def __init__(
        self,
        estimator,
        param_distributions=None,
        *,
        n_trials=20,
        max_epochs=27,
        min_epochs=1,
        reduction_factor=3,
        scoring=None,
        cv=None,
        validation_fraction=0.2,
        strategy="sequential",
        sync_every="auto",
        staleness=0,
        shuffle=True,
        data="auto",
        prefetch=2,
        refit=True,
        error_score=np.nan,
        random_state=None,
        parameters=None,
        n_initial_parameters=None,
        n_initial_iter=None,
        max_iter=None,
        aggressiveness=None,
        test_size=None,
        n_candidates=None,
        factor=None,
        n_iter=None,
        parallel="deprecated",
    ):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_trials = n_trials
        self.max_epochs = max_epochs
        self.min_epochs = min_epochs
        self.reduction_factor = reduction_factor
        self.scoring = scoring
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.strategy = strategy
        self.sync_every = sync_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.data = data
        self.prefetch = prefetch
        self.refit = refit
        self.error_score = error_score
        self.random_state = random_state
        self.parameters = parameters
        self.n_initial_parameters = n_initial_parameters
        self.n_initial_iter = n_initial_iter
        self.max_iter = max_iter
        self.aggressiveness = aggressiveness
        self.test_size = test_size
        self.n_candidates = n_candidates
        self.factor = factor
        self.n_iter = n_iter
        self.parallel = parallel

    def _check_params(self):
        _check_rungs(self)

    def _policy(self, trials):
        budgets = self._rung_budgets()
        for trial in trials:
            trial.budgets = budgets
        return policies.ASHA([t.id for t in trials], budgets, self._value("reduction_factor"))


class SuccessiveHalvingSearchCV(_SampledTrials, _AdaptiveSearchCV):
    """Synchronous successive halving over trials trained with ``partial_fit``.

    All *n_trials* train to ``min_epochs``; when every one has reported, the top
    ``1/reduction_factor`` (at least one) continue from their state to the next rung
    (``min_epochs * reduction_factor**k``, then ``max_epochs``), and so on. The rungs are
    barriers: prefer :class:`ASHASearchCV` on a busy or uneven cluster. Decisions do not depend
    on timing, so a seed gives the same trials, scores and ``best_params_``.

    Parameters
    ----------
    estimator, param_distributions, n_trials, max_epochs, min_epochs, reduction_factor
        As for :class:`ASHASearchCV`.
    patience : bool or int, default=False
        Stop a trial whose score has not improved by more than *tol* over the last *patience*
        epochs (steps are cut into segments of at most *patience* epochs, each scored);
        ``True`` means ``max(max_epochs // reduction_factor, 1)``.
    tol : float, default=1e-3
    scoring, cv, validation_fraction, strategy, sync_every, staleness, shuffle, data, \
prefetch, refit, error_score, random_state
        As for :class:`ASHASearchCV`.
    parameters, n_initial_parameters, n_initial_iter, max_iter, aggressiveness, test_size, \
n_candidates, factor : optional
        dask-ml's and scikit-learn's names, as for :class:`ASHASearchCV`. A dask-ml user's
        ``SuccessiveHalvingSearchCV(model, parameters, n_initial_parameters=10, max_iter=27,
        aggressiveness=3, patience=..., tol=..., test_size=...)`` runs as written.
    n_iter, parallel : optional
        Deprecated since 0.2 (removed in 0.3), as for :class:`ASHASearchCV`.

    Attributes
    ----------
    cv_results_, best_index_, best_params_, best_score_, best_estimator_, n_trials_, trials_,
    history_, model_history_, refit_time_, metadata_
        As for :class:`ASHASearchCV`; ``metadata`` (before fitting) gives the plan.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml.model_selection import SuccessiveHalvingSearchCV
    >>> X, y = make_classification(2_000, 10, random_state=0)
    >>> search = SuccessiveHalvingSearchCV(SGDClassifier(random_state=0),
    ...                                    {"alpha": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
    ...                                    n_trials=6, max_epochs=9, random_state=0)
    >>> search.metadata
    {'n_models': 6, 'partial_fit_calls': 16, 'rungs': [(6, 1), (2, 3), (1, 9)]}
    >>> search.fit(X, y).trials_["budget"].value_counts().sort_index().tolist()
    [4, 1, 1]
    """

    _prefix = "halving"

    def __init__(
        self,
        estimator,
        param_distributions=None,
        *,
        n_trials=20,
        max_epochs=27,
        min_epochs=1,
        reduction_factor=3,
        patience=False,
        tol=1e-3,
        scoring=None,
        cv=None,
        validation_fraction=0.2,
        strategy="sequential",
        sync_every="auto",
        staleness=0,
        shuffle=True,
        data="auto",
        prefetch=2,
        refit=True,
        error_score=np.nan,
        random_state=None,
        parameters=None,
        n_initial_parameters=None,
        n_initial_iter=None,
        max_iter=None,
        aggressiveness=None,
        test_size=None,
        n_candidates=None,
        factor=None,
        n_iter=None,
        parallel="deprecated",
    ):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.n_trials = n_trials
        self.max_epochs = max_epochs
        self.min_epochs = min_epochs
        self.reduction_factor = reduction_factor
        self.patience = patience
        self.tol = tol
        self.scoring = scoring
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.strategy = strategy
        self.sync_every = sync_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.data = data
        self.prefetch = prefetch
        self.refit = refit
        self.error_score = error_score
        self.random_state = random_state
        self.parameters = parameters
        self.n_initial_parameters = n_initial_parameters
        self.n_initial_iter = n_initial_iter
        self.max_iter = max_iter
        self.aggressiveness = aggressiveness
        self.test_size = test_size
        self.n_candidates = n_candidates
        self.factor = factor
        self.n_iter = n_iter
        self.parallel = parallel

    def _check_params(self):
        _check_rungs(self)
        _check_patience(self)

    def _schedule(self, n_trials):
        eta = self._value("reduction_factor")
        return [
            (max(1, n_trials // eta**i), budget) for i, budget in enumerate(self._rung_budgets())
        ]

    def _patience(self):
        return _patience_epochs(
            self.patience, self._value("max_epochs"), self._value("reduction_factor")
        )

    def _policy(self, trials):
        schedule = self._schedule(len(trials))
        for trial in trials:
            trial.budgets = [budget for _, budget in schedule]
        return policies.Halving([t.id for t in trials], schedule)

    @property
    def metadata(self):
        """The plan before fitting, read from the parameters (aliases resolved).

        Returns
        -------
        dict
            ``n_models`` (trials started), ``partial_fit_calls`` (epochs trained by all
            trials, dask-ml's name) and ``rungs``: ``(n_trials, epochs)`` per rung.
        """
        _check_rungs(self)
        schedule = self._schedule(self._value("n_trials"))
        return {
            "n_models": self._value("n_trials"),
            "partial_fit_calls": _planned_budget(schedule),
            "rungs": schedule,
        }


class HyperbandSearchCV(_AdaptiveSearchCV):
    """Hyperband over trials trained with ``partial_fit``: a working stand-in for dask-ml's.

    The same brackets as ``dask_ml.model_selection.HyperbandSearchCV`` (bracket ``s`` starts
    ``n`` trials at ``r`` epochs and halves them ``s`` times up to *max_epochs*; for
    ``max_epochs=81``: ``{4: (81, 1), 3: (34, 3), 2: (15, 9), 1: (8, 27), 0: (5, 81)}``), with
    ``s_max`` found by an integer loop (dask-ml's ``math.log`` gives 5 brackets for 243
    instead of 6). Every bracket is a synchronous successive halving, and all of them run at
    once: the driver takes jobs from the brackets in turn, so no bracket waits for another.

    Differences from dask-ml: *max_epochs* (dask-ml's ``max_iter``) counts epochs over the
    training chunks (dask-ml counts ``partial_fit`` calls on one block each), and each
    bracket's last rung is exactly *max_epochs*. ``metadata``'s ``partial_fit_calls`` is in
    epochs, under dask-ml's name. The parameters are the other adaptive searches', in the same
    order; dask-ml's names are accepted, so dask-ml's call ``HyperbandSearchCV(model,
    parameters, max_iter=81, aggressiveness=3)`` runs as written.

    Parameters
    ----------
    estimator : scikit-learn estimator
    param_distributions : dict or list of dicts
        Lists of values and ``scipy.stats`` distributions.
    max_epochs : int, default=81
        Epochs of the most trained trials (Hyperband's R).
    reduction_factor : int, default=3
        Hyperband's η.
    patience : bool or int, default=False
        As dask-ml: stop a trial without a gain above *tol* over *patience* epochs; ``True``
        means ``max(max_epochs // reduction_factor, 1)``.
    tol : float, default=1e-3
    scoring, cv, validation_fraction, strategy, sync_every, staleness, shuffle, data, \
prefetch, refit, error_score, random_state
        As for :class:`ASHASearchCV`.
    parameters : dict or list of dicts, optional
        dask-ml's name for *param_distributions*.
    max_iter : int, optional
        dask-ml's name for *max_epochs*.
    aggressiveness : int, optional
        dask-ml's name for *reduction_factor*.
    test_size : float, optional
        dask-ml's name for *validation_fraction*.
    factor : int, optional
        scikit-learn's name for *reduction_factor*.
    parallel : dict, optional
        Deprecated since 0.2 (removed in 0.3), as for :class:`ASHASearchCV`.

    Attributes
    ----------
    metadata : dict
        Before fitting: ``n_models``, ``partial_fit_calls`` and per bracket the same.
    metadata_ : dict
        The same, as run.
    cv_results_, best_index_, best_params_, best_score_, best_estimator_, n_trials_, trials_,
    history_, model_history_, refit_time_
        As for :class:`ASHASearchCV`, with a ``bracket`` column (and field); ``model_id`` is
        dask-ml's ``"bracket=s-i"``.

    Examples
    --------
    >>> from sklearn.linear_model import SGDClassifier
    >>> from taskdml.model_selection import HyperbandSearchCV
    >>> search = HyperbandSearchCV(SGDClassifier(), {"alpha": [1e-4, 1e-3]}, max_epochs=81)
    >>> search.metadata["n_models"], search.metadata["partial_fit_calls"]
    (143, 1581)
    >>> {b["bracket"]: (b["n_models"], b["decisions"][0]) for b in search.metadata["brackets"]}
    {0: (5, 81), 1: (8, 27), 2: (15, 9), 3: (34, 3), 4: (81, 1)}
    """

    _prefix = "hyperband"
    _has_brackets = True

    def __init__(
        self,
        estimator,
        param_distributions=None,
        *,
        max_epochs=81,
        reduction_factor=3,
        patience=False,
        tol=1e-3,
        scoring=None,
        cv=None,
        validation_fraction=0.2,
        strategy="sequential",
        sync_every="auto",
        staleness=0,
        shuffle=True,
        data="auto",
        prefetch=2,
        refit=True,
        error_score=np.nan,
        random_state=None,
        parameters=None,
        max_iter=None,
        aggressiveness=None,
        test_size=None,
        factor=None,
        parallel="deprecated",
    ):
        self.estimator = estimator
        self.param_distributions = param_distributions
        self.max_epochs = max_epochs
        self.reduction_factor = reduction_factor
        self.patience = patience
        self.tol = tol
        self.scoring = scoring
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.strategy = strategy
        self.sync_every = sync_every
        self.staleness = staleness
        self.shuffle = shuffle
        self.data = data
        self.prefetch = prefetch
        self.refit = refit
        self.error_score = error_score
        self.random_state = random_state
        self.parameters = parameters
        self.max_iter = max_iter
        self.aggressiveness = aggressiveness
        self.test_size = test_size
        self.factor = factor
        self.parallel = parallel

    def _check_params(self):
        _check_integer(self, "max_epochs", 1)
        _check_integer(self, "reduction_factor", 2)
        _check_patience(self)

    _aliases = {
        "param_distributions": (("parameters", "dask-ml"),),
        "max_epochs": (("max_iter", "dask-ml"),),
        "reduction_factor": (("aggressiveness", "dask-ml"), ("factor", "scikit-learn")),
        "validation_fraction": (("test_size", "dask-ml"),),
    }

    def _space_name(self):
        return "param_distributions"

    def _space(self):
        return self._value("param_distributions")

    def _max_budget(self):
        return self._value("max_epochs")

    def _patience(self):
        return _patience_epochs(
            self.patience, self._value("max_epochs"), self._value("reduction_factor")
        )

    def _brackets(self):
        """``{s: schedule}`` with each schedule's last budget exactly *max_epochs*."""
        eta, max_iter = self._value("reduction_factor"), self._value("max_epochs")
        brackets = {}
        for s, (n, r) in policies.hyperband_brackets(max_iter, eta).items():
            schedule = policies.halving_schedule(n, r, eta, s + 1)
            n_last, _ = schedule[-1]
            schedule[-1] = (n_last, max_iter)
            brackets[s] = schedule
        return brackets

    def _n_candidates(self):
        return sum(_n_starting(schedule) for schedule in self._brackets().values())

    def _policy(self, trials):
        halvings, owner, offset = [], {}, 0
        for s, schedule in self._brackets().items():  # most adaptive first, as dask-ml
            members = trials[offset : offset + _n_starting(schedule)]
            offset += _n_starting(schedule)
            if not members:
                continue
            halving = policies.Halving([t.id for t in members], schedule)
            for trial in members:
                trial.bracket, trial.budgets = s, halving.budgets
                owner[trial.id] = halving
            halvings.append(halving)
        return policies.Concurrent(halvings, owner)

    @property
    def metadata(self):
        """The plan before fitting, as dask-ml's ``metadata`` (aliases resolved).

        Returns
        -------
        dict
            ``n_models``, ``partial_fit_calls`` (in epochs) and ``brackets``: per bracket its
            ``bracket``, ``n_models``, ``partial_fit_calls`` and ``decisions`` (the rung
            budgets).
        """
        self._check_params()
        brackets = [
            {
                "bracket": s,
                "n_models": _n_starting(schedule),
                "partial_fit_calls": _planned_budget(schedule),
                "decisions": [budget for _, budget in schedule],
            }
            for s, schedule in sorted(self._brackets().items())
        ]
        return {
            "n_models": sum(b["n_models"] for b in brackets),
            "partial_fit_calls": sum(b["partial_fit_calls"] for b in brackets),
            "brackets": brackets,
        }

    def _model_ids(self, trials):
        position, ids = {}, []
        for t in trials:  # dask-ml's _model_id: the bracket, then the index inside it
            position[t.bracket] = position.get(t.bracket, -1) + 1
            ids.append(f"bracket={t.bracket}-{position[t.bracket]}")
        return ids

    def _metadata_as_run(self, trials):
        meta = super()._metadata_as_run(trials)
        meta["brackets"] = [
            {
                "bracket": s,
                "n_models": sum(1 for t in trials if t.bracket == s and t.status != "pending"),
                "partial_fit_calls": int(sum(t.budget for t in trials if t.bracket == s)),
                "decisions": [budget for _, budget in schedule],
            }
            for s, schedule in sorted(self._brackets().items())
        ]
        return meta


# --------------------------------------------------------------------------------------------
# Helpers.


def _mean(values):
    return float(np.mean(values)) if values else float("nan")


def _std(values):
    return float(np.std(values)) if values else float("nan")


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_integer(search, name, minimum):
    value = search._value(name)
    if not (_is_integer(value) and value >= minimum):
        raise ValueError(
            f"{type(search).__name__}: {search._given_name(name)} must be an integer "
            f">= {minimum}, got {value!r}."
        )


def _check_rungs(search):
    _check_integer(search, "n_trials", 1)
    _check_integer(search, "min_epochs", 1)
    _check_integer(search, "max_epochs", 1)
    _check_integer(search, "reduction_factor", 2)
    low, high = search._value("min_epochs"), search._value("max_epochs")
    if low > high:
        raise ValueError(
            f"{type(search).__name__}: {search._given_name('min_epochs')} ({low}) must "
            f"not exceed {search._given_name('max_epochs')} ({high})."
        )


def _check_patience(search):
    patience = search.patience
    if not (isinstance(patience, (bool, np.bool_)) or (_is_integer(patience) and patience >= 1)):
        raise ValueError(
            f"{type(search).__name__}: patience must be True, False or an integer >= 1 "
            f"(epochs), got {patience!r}."
        )
    if not (isinstance(search.tol, numbers.Real) and search.tol >= 0):
        raise ValueError(f"{type(search).__name__}: tol must be a number >= 0, got {search.tol!r}.")


def _patience_epochs(patience, max_budget, eta):
    if patience is True:
        return max(max_budget // eta, 1)
    return int(patience) or None


def _n_starting(schedule):
    """How many trials a halving schedule ``[(n_trials, budget), ...]`` starts."""
    n_trials, _ = schedule[0]
    return n_trials


def _planned_budget(schedule):
    """Epochs trained by all trials of one halving schedule, each to the last rung it reaches."""
    total = 0
    sizes = [n_trials for n_trials, _ in schedule] + [0]
    for i, (n_trials, budget) in enumerate(schedule):
        total += (n_trials - sizes[i + 1]) * budget
    return total


def _apply(estimator, method, X):
    """``estimator.method(X)``; chunk by chunk (a dask array) for dask or xarray input."""
    X = unwrap(X).X
    if not hasattr(X, "dask"):
        return getattr(estimator, method)(X)
    return apply_chunkwise(estimator, method, X, prefix=type(estimator).__name__)


def _resolve_scoring(estimator, scoring):
    """``(metric name for taskdml.metrics or None, scikit-learn scorer)``."""
    from sklearn.base import ClassifierMixin, RegressorMixin
    from sklearn.metrics import check_scoring, get_scorer, get_scorer_names

    from taskdml.metrics import METRICS

    if scoring is None:
        scorer = check_scoring(estimator)
        own_score = getattr(type(estimator), "score", None)
        if own_score is ClassifierMixin.score:
            return "accuracy", scorer
        if own_score is RegressorMixin.score:
            return "r2", scorer
        return None, scorer
    if isinstance(scoring, str):
        scorer = get_scorer(scoring)
        return (scoring if scoring in METRICS and scoring in get_scorer_names() else None), scorer
    if callable(scoring):
        return None, scoring
    raise ValueError(
        f"scoring must be None, a scorer name or a callable (one metric), got {scoring!r}."
    )


def _fit_failed_warning():
    from sklearn.exceptions import FitFailedWarning

    return FitFailedWarning


def _mixed_columns(X):
    """Whether *X* is a pandas DataFrame with a column that is not numeric."""
    import pandas as pd

    return isinstance(X, pd.DataFrame) and not all(
        pd.api.types.is_numeric_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype)
        for dtype in X.dtypes
    )


def _columns_text(X):
    """The first few column names of a DataFrame, for a message."""
    columns = [str(name) for name in X.columns]
    shown = ", ".join(repr(name) for name in columns[:5])
    return shown + (f", ... {len(columns)} in all" if len(columns) > 5 else "")
