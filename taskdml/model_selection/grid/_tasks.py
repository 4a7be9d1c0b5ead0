"""Task functions of the grid and randomized searches: module-level, pure, picklable.

The search graph passes one small record, a *part*, from task to task along a candidate's
pipeline: the fold's training rows as the next step will see them (``X``), the test rows
transformed the same way (``X_test``), the training rows transformed as at predict time
(``X_score_train``, only for train scores), the targets, the fold's fit parameters, the
fitted steps so far, and the time spent fitting and transforming. :func:`split_fold` makes
the first part of a fold; :func:`fit_transform_step` fits one pipeline step and returns the
next part; :func:`fit_final` fits the last step (or the whole estimator); :func:`score_fit`
scores it. A fit that raises is recorded in the part (``error``) and passed along, so every
candidate that shares the failing step reports it, as scikit-learn does; with
``error_score="raise"`` the task raises instead and the search stops.

:func:`run_batch` runs several candidate × fold fits in one task: the same functions, called
in the same order on the same rows, so its results are those of the one-task-per-step graph.
Inside a batch a fold is split once and a pipeline prefix that several of its candidates
share is fitted once (the batch's cache is keyed like the graph).

Every estimator arriving as an argument is deep-copied before it is fitted: the threaded
scheduler hands the same object to the tasks of every fold. The tasks that fit or score run
under scikit-learn's configuration of the search (``config`` of the data and of each part,
see :func:`_in_search_config`): scikit-learn keeps it per thread, and the threads and workers
that run the tasks do not have the caller's (metadata routing, ``transform_output``, ...).
"""

import contextlib
import copy
import dataclasses
import functools
import inspect
import numbers
import time
import traceback

import numpy as np


def _in_search_config(carrier):
    """Decorator: run the task under the scikit-learn config that its *carrier* argument holds."""

    def decorate(task):
        signature = inspect.signature(task)

        @functools.wraps(task)
        def run(*args, **kwargs):
            from sklearn import config_context

            holder = signature.bind(*args, **kwargs).arguments[carrier]
            config = holder["config"] if isinstance(holder, dict) else holder.config
            with config_context(**config):
                return task(*args, **kwargs)

        return run

    return decorate


def split_fold(data, fold, pairwise):
    """The first part of *fold*: its training and test rows, and its fit parameters."""
    from taskdml._compat import _safe_indexing

    train, test = data.splits[fold]
    if pairwise:
        X = np.asarray(data.X) if not hasattr(data.X, "shape") else data.X
        X_train, X_test = X[np.ix_(train, train)], X[np.ix_(test, train)]
    else:
        X_train, X_test = _safe_indexing(data.X, train), _safe_indexing(data.X, test)
    y_train = None if data.y is None else _safe_indexing(data.y, train)
    y_test = None if data.y is None else _safe_indexing(data.y, test)
    n_samples = data.X.shape[0] if hasattr(data.X, "shape") else len(data.X)

    def rows(params, indices):
        return {
            name: _safe_indexing(value, indices) if _sample_aligned(value, n_samples) else value
            for name, value in params.items()
        }

    score_params = data.score_params.items()
    return {
        "X": X_train,
        "y": y_train,
        "X_test": X_test,
        "y_test": y_test,
        "X_score_train": X_train,
        "config": data.config,
        "fit_params": rows(data.fit_params, train),
        "score_params_test": {metric: rows(params, test) for metric, params in score_params},
        "score_params_train": {metric: rows(params, train) for metric, params in score_params},
        "steps": {},
        "fit_time": 0.0,
        "score_time": 0.0,
        "error": None,
        "score_error": None,
    }


@_in_search_config("part")
def fit_transform_step(part, name, transformer, score_train, transform_test, raise_errors):
    """Fit pipeline step *name* on the part's training rows; return the next part.

    ``fit_transform`` on the training rows, as :class:`sklearn.pipeline.Pipeline` does, then
    ``transform`` of the test rows (and of the training rows for train scores), as the fitted
    pipeline does at predict time.
    """
    if part["error"] is not None:
        return part
    transformer = copy.deepcopy(transformer)
    params = step_params(part["fit_params"], name)
    started = time.perf_counter()
    try:
        if hasattr(transformer, "fit_transform"):
            X = transformer.fit_transform(part["X"], part["y"], **params)
        else:
            X = transformer.fit(part["X"], part["y"], **params).transform(part["X"])
    except Exception:
        if raise_errors:
            raise
        return dict(
            part,
            error=traceback.format_exc(),
            fit_time=part["fit_time"] + time.perf_counter() - started,
        )
    fitted = time.perf_counter()
    following = dict(
        part,
        X=X,
        steps={**part["steps"], name: transformer},
        fit_time=part["fit_time"] + fitted - started,
    )
    if part["score_error"] is None and (transform_test or score_train):
        try:
            if transform_test:
                following["X_test"] = transformer.transform(part["X_test"])
            if score_train:
                following["X_score_train"] = transformer.transform(part["X_score_train"])
        except Exception:
            if raise_errors:
                raise
            following["score_error"] = traceback.format_exc()
        following["score_time"] = part["score_time"] + time.perf_counter() - fitted
    return following


@dataclasses.dataclass(frozen=True)
class Hooks:
    """The scikit-learn callbacks of one fit: its task's context and the search calling them.

    The fit runs inside :meth:`around`, as in scikit-learn's ``_fit_and_score`` and refit: the
    context's ``on_fit_task_begin`` and ``on_fit_task_end`` are called with the search as the
    estimator, and auto-propagated callbacks are propagated into the fitted estimator.
    Callbacks that keep their record in the search's process send it there themselves
    (scikit-learn's ``sklearn.callback`` transport), so this works in a worker process too.
    """

    context: object
    caller: object

    @contextlib.contextmanager
    def around(self, estimator, X, y, fit_params):
        weights = fit_params.get("sample_weight")
        hooks = dict(X=X, y=y, metadata=None if weights is None else {"sample_weight": weights})
        try:
            with self.context.propagate_callback_context(estimator):
                self.context.call_on_fit_task_begin(estimator=self.caller, **hooks)
                yield
        finally:
            self.context.call_on_fit_task_end(estimator=self.caller, **hooks)


def _around(hooks, estimator, X, y, fit_params):
    return contextlib.nullcontext() if hooks is None else hooks.around(estimator, X, y, fit_params)


@_in_search_config("part")
def fit_final(part, name, estimator, raise_errors, hooks=None):
    """Fit the last step (*name*) or, with ``name=None``, the whole estimator (within its
    *hooks*, if any).

    Returns ``{"estimator", "fit_time", "error"}``; the fit time includes the steps before.
    """
    if part["error"] is not None:
        return {"estimator": None, "fit_time": part["fit_time"], "error": part["error"]}
    estimator = copy.deepcopy(estimator)
    params = part["fit_params"] if name is None else step_params(part["fit_params"], name)
    started = time.perf_counter()
    try:
        with _around(hooks, estimator, part["X"], part["y"], params):
            if part["y"] is None:
                estimator.fit(part["X"], **params)
            else:
                estimator.fit(part["X"], part["y"], **params)
    except Exception:
        if raise_errors:
            raise
        return {
            "estimator": None,
            "fit_time": part["fit_time"] + time.perf_counter() - started,
            "error": traceback.format_exc(),
        }
    return {
        "estimator": estimator,
        "fit_time": part["fit_time"] + time.perf_counter() - started,
        "error": None,
    }


@_in_search_config("part")
def score_fit(fitted, part, raw, template, scorers, score_train, error_score):
    """Score a fitted candidate on its fold: ``{"test_scores", "train_scores", ...}``.

    *scorers* is one scorer or a dict of them. With *template* ``None`` the scorers see the
    fitted estimator and the part's (transformed) rows; otherwise *template* is the candidate
    pipeline, reassembled from the fitted steps and scored on the *raw* fold, for scorers
    that may look inside the pipeline.
    """
    result = {
        "fit_time": fitted["fit_time"],
        "fit_error": fitted["error"],
        "score_time": 0.0,
        "test_scores": None,
        "train_scores": None,
        "warnings": [],
    }
    if fitted["error"] is not None:
        return result
    if template is None:
        estimator, rows = fitted["estimator"], part
        X_test, X_train = part["X_test"], part["X_score_train"]
    else:
        estimator = copy.copy(template)
        *before, (final_name, _) = template.steps
        estimator.steps = [(name, part["steps"].get(name, step)) for name, step in before]
        estimator.steps.append((final_name, fitted["estimator"]))
        rows, X_test, X_train = raw, raw["X_test"], raw["X"]
    started = time.perf_counter()
    if part["score_error"] is not None:
        if error_score == "raise":  # pragma: no cover - the step task raised already
            raise RuntimeError(part["score_error"])
        result["warnings"].append(_scoring_failed(error_score, part["score_error"]))
        result["test_scores"] = _fill(scorers, error_score)
        result["train_scores"] = _fill(scorers, error_score) if score_train else None
        return result
    result["test_scores"] = _score(
        estimator,
        X_test,
        rows["y_test"],
        scorers,
        rows["score_params_test"],
        error_score,
        result["warnings"],
    )
    result["score_time"] = part["score_time"] + time.perf_counter() - started
    if score_train:
        result["train_scores"] = _score(
            estimator,
            X_train,
            rows["y"],
            scorers,
            rows["score_params_train"],
            error_score,
            result["warnings"],
        )
    return result


def run_batch(data, jobs, pairwise, scorers, return_train_score, error_score):
    """Fit and score *jobs* (``(fold, job)`` pairs, a job's stages from the graph's plan).

    Returns ``{"results": [one score_fit result per job], "seconds": wall time}``; each
    result's fit and score times are those of its own fit, as in the one-task-per-step graph.
    """
    started = time.perf_counter()
    raise_errors = error_score == "raise"
    splits, parts, scored = {}, {}, {}
    results = []
    for fold, job in jobs:
        if fold not in splits:
            splits[fold] = split_fold(data, fold, pairwise)
        part = splits[fold]
        for key, name, step, score_train, transform_test in job.prefix:
            if key not in parts:
                parts[key] = fit_transform_step(
                    part, name, step, score_train, transform_test, raise_errors
                )
            part = parts[key]
        if job.score_key not in scored:
            fitted = fit_final(part, job.final_name, job.final, raise_errors, job.hooks)
            raw = splits[fold] if job.template is not None else None
            scored[job.score_key] = score_fit(
                fitted, part, raw, job.template, scorers, return_train_score, error_score
            )
        results.append(scored[job.score_key])
    return {"results": results, "seconds": time.perf_counter() - started}


@_in_search_config("data")
def refit(data, estimator, hooks=None):
    """Fit *estimator* on all the data (within its *hooks*, if any); return it and the time
    the fit took."""
    estimator = copy.deepcopy(estimator)
    started = time.perf_counter()
    with _around(hooks, estimator, data.X, data.y, data.fit_params):
        if data.y is None:
            estimator.fit(data.X, **data.fit_params)
        else:
            estimator.fit(data.X, data.y, **data.fit_params)
    return estimator, time.perf_counter() - started


def step_params(fit_params, name):
    """The fit parameters of pipeline step *name* (``name__param`` keys, prefix removed)."""
    prefix = f"{name}__"
    return {
        key[len(prefix) :]: value for key, value in fit_params.items() if key.startswith(prefix)
    }


def _sample_aligned(value, n_samples):
    """Whether a fit parameter has one entry per sample (then it is split with the rows)."""
    if isinstance(value, (str, bytes, dict)) or not (
        hasattr(value, "shape") or hasattr(value, "__len__")
    ):
        return False
    try:
        return (value.shape[0] if hasattr(value, "shape") else len(value)) == n_samples
    except (TypeError, IndexError):
        return False


def _score(estimator, X, y, scorers, params, error_score, warned):
    """scikit-learn's ``_score``: each scorer on its own, ``error_score`` where one raises.

    *params* holds each scorer's parameters by metric name (``None`` for a single scorer).
    """
    if isinstance(scorers, dict):
        return {
            name: _one_score(
                estimator, X, y, scorer, params.get(name, {}), name, error_score, warned
            )
            for name, scorer in scorers.items()
        }
    return _one_score(estimator, X, y, scorers, params.get(None, {}), scorers, error_score, warned)


def _one_score(estimator, X, y, scorer, params, name, error_score, warned):
    try:
        score = scorer(estimator, X, **params) if y is None else scorer(estimator, X, y, **params)
    except Exception:
        if error_score == "raise":
            raise
        warned.append(_scoring_failed(error_score, traceback.format_exc()))
        return error_score
    if isinstance(score, dict):  # a callable scorer may return several scores
        return {key: _number(value, key) for key, value in score.items()}
    return _number(score, name)


def _number(score, name):
    if hasattr(score, "item"):
        try:
            score = score.item()
        except ValueError:
            pass
    if not isinstance(score, numbers.Number):
        raise ValueError(
            f"scoring must return a number, got {score} ({type(score)}) instead. (scorer={name})"
        )
    return score


def _fill(scorers, value):
    return dict.fromkeys(scorers, value) if isinstance(scorers, dict) else value


def _scoring_failed(error_score, details):
    return (
        "Scoring failed. The score on this train-test partition for these parameters will "
        f"be set to {error_score}. Details: \n{details}"
    )
