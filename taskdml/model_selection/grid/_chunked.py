"""A search over chunked data (dask arrays, xarray Datasets): folds of whole chunks.

Data too big for one machine is never gathered: it is persisted once on the cluster and every
fold is a set of chunks — ``cv=k`` is ``KFold(k)`` over the chunk indices, and a splitter
object splits the chunk indices too. Each candidate × fold trains with the data-parallel
engine (:func:`taskdml.parallel.train`) on the fold's training chunks and is scored
with :mod:`taskdml.metrics` on its held-out chunks, chunk by chunk and exactly. The
candidates run side by side: each training is a chain of tasks (``strategy="sequential"``,
the default) or replicas (``"sync"``/``"async"``, which take turns on the cluster), started
from a thread of this process so that their tasks interleave on the workers. An estimator
without ``partial_fit`` (a ``Pipeline``, say) is fitted in one task on its training chunks
concatenated.

Scores are named metrics of :mod:`taskdml.metrics` (scikit-learn's scorer names), not
callables: a callable would need the predictions in one place.
"""

import concurrent.futures
import contextvars
import copy
import os
import time
import traceback

import dask
import numpy as np

from taskdml._keys import current_step, key_name, step_scope
from taskdml.exceptions import DataError, did_you_mean
from taskdml.model_selection.grid._graph import PREFIX, estimator_spec
from taskdml.parallel.engine._tasks import chunk_labels, fit_concatenated


def chunk_folds(cv, chunks):
    """The folds as ``[(train chunk indices, test chunk indices)]`` for row *chunks*."""
    from sklearn.model_selection import KFold

    splitter = (
        KFold(5 if cv is None else cv) if cv is None or isinstance(cv, (int, np.integer)) else cv
    )
    n_chunks = len(chunks)
    n_splits = splitter.get_n_splits() if hasattr(splitter, "get_n_splits") else None
    if n_splits is not None and n_splits > n_chunks:
        rows = max(1, sum(chunks) // n_splits)
        raise DataError(
            f"X has {n_chunks} chunk(s) along samples, and a search over chunked data "
            f"holds out whole chunks: {n_splits} folds need at least {n_splits} chunks. "
            f"Rechunk X (e.g. X.rechunk({{0: {rows}}})) or pass a smaller cv."
        )
    if hasattr(splitter, "split"):
        folds = splitter.split(np.zeros((n_chunks, 1)))
    else:
        folds = cv
    folds = [(np.asarray(train, dtype=int), np.asarray(test, dtype=int)) for train, test in folds]
    if not folds:
        raise ValueError("No fits were performed. Was the CV iterator empty?")
    return folds


def metric_names(estimator, scoring):
    """``{score name: metric name}`` for *scoring*, checked against :mod:`taskdml.metrics`."""
    from sklearn.base import is_classifier, is_regressor

    from taskdml.metrics import METRICS

    if scoring is None:
        if is_classifier(estimator):
            names = {"score": "accuracy"}
        elif is_regressor(estimator):
            names = {"score": "r2"}
        else:
            raise ValueError(
                "on chunked data, scoring=None needs a classifier (accuracy) or a "
                "regressor (r2); name a metric of taskdml.metrics.available_metrics()."
            )
    elif isinstance(scoring, str):
        names = {"score": scoring}
    elif isinstance(scoring, (list, tuple, set)) and all(isinstance(s, str) for s in scoring):
        names = {name: name for name in scoring}
    elif isinstance(scoring, dict) and all(isinstance(s, str) for s in scoring.values()):
        names = dict(scoring)
    else:
        raise ValueError(
            f"on chunked data, scoring must name metrics of taskdml.metrics (a string, "
            f"a list of them or a dict of names to them), got {scoring!r}; callables "
            "need the predictions in one place, so compute the data first."
        )
    for metric in names.values():
        if metric not in METRICS:
            raise ValueError(
                f"unknown metric {metric!r} for chunked data.{did_you_mean(metric, METRICS)} "
                f"Valid metrics: {', '.join(sorted(METRICS))}."
            )
    return names


def run(
    estimator,
    candidates,
    X,
    y,
    folds,
    *,
    classes,
    metrics,
    parallel,
    return_train_score,
    error_score,
    client,
    n_jobs,
):
    """Train and score every candidate × fold; one result dict each, candidate-major."""
    from sklearn.base import clone

    jobs = []
    for index, params in enumerate(candidates):
        candidate = clone(estimator).set_params(**clone(params, safe=False))
        for train, test in folds:
            jobs.append(
                (candidate, index, _rows(X, train), _rows(y, train), _rows(X, test), _rows(y, test))
            )
    workers = (
        n_jobs
        if n_jobs and n_jobs > 0
        else (2 * sum(client.nthreads().values()) if client is not None else (os.cpu_count() or 1))
    )
    scope = current_step() or PREFIX
    with concurrent.futures.ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        futures = [
            pool.submit(
                contextvars.copy_context().run,
                _scoped,
                scope,
                _job,
                *job,
                metrics=metrics,
                parallel=parallel,
                classes=classes,
                return_train_score=return_train_score,
                error_score=error_score,
                client=client,
            )
            for job in jobs
        ]
        return [future.result() for future in futures]


def refit(estimator, X, y, *, index, classes, parallel, client):
    """Train *estimator* (candidate *index*) on all chunks: ``(fitted, seconds)``."""
    with step_scope(current_step() or PREFIX):
        started = time.perf_counter()
        fitted = _train(estimator, index, X, y, parallel, classes, client)
    return fitted, time.perf_counter() - started


def _scoped(scope, function, *args, **kwargs):
    with step_scope(scope):
        return function(*args, **kwargs)


def _rows(array, chunks):
    """The row chunks *chunks* of *array* (views of its blocks: no data is copied)."""
    return None if array is None else array.blocks[np.asarray(chunks, dtype=int)]


def persist(X, y, client):
    """X and y in the cluster's memory, once for the whole search (as they are without a client)."""
    if client is None:
        return X, y
    if y is None:
        return client.persist(X), None
    X, y = client.persist([X, y])
    return X, y


def classes_of(estimator, y, client):
    """Every label of y for a classifier (a small ``search-labels`` task per chunk), else None."""
    from sklearn.base import is_classifier

    if y is None or not is_classifier(estimator):
        return None
    name = key_name(PREFIX, y.name, phase="labels")
    parts = [
        dask.delayed(chunk_labels, pure=True)(block, dask_key_name=(name, i))
        for i, block in enumerate(y.to_delayed().ravel())
    ]
    labels = client.gather(client.compute(parts)) if client is not None else dask.compute(*parts)
    return np.unique(np.concatenate(labels))


def _train(estimator, index, X, y, parallel, classes, client):
    """One training: the engine for ``partial_fit`` estimators and for XGBoost's and
    LightGBM's (their own Dask training, unless the trials train one task each), else one fit
    task."""
    from taskdml.parallel import train
    from taskdml.parallel.engine._boosting import dask_class_name

    boosted = dask_class_name(estimator) is not None and parallel.get("strategy") != "sequential"
    if not hasattr(estimator, "partial_fit") and not boosted:
        name = key_name(
            PREFIX, X.name, None if y is None else y.name, estimator_spec(estimator), phase="fit"
        )
        X_chunks = X.to_delayed().ravel()
        y_chunks = [None] * len(X_chunks) if y is None else y.to_delayed().ravel()
        task = dask.delayed(fit_concatenated, pure=True)(
            estimator,
            [(X_chunk, y_chunk) for X_chunk, y_chunk in zip(X_chunks, y_chunks)],
            dask_key_name=name,
        )
        return client.gather(client.compute(task)) if client is not None else task.compute()
    options = {key: value for key, value in parallel.items() if key != "random_state"}
    # The engine names its keys after the data and the seed, not the estimator's parameters:
    # a seed per candidate keeps two candidates training on one fold from sharing keys.
    seed = _seed(parallel["random_state"]) + index
    return train(
        copy.deepcopy(estimator),
        X,
        y,
        classes=classes,
        random_state=seed,
        client=client if client is not None else False,
        **options,
    ).estimator


def _seed(random_state):
    """The first candidate's training seed: *random_state* itself when an integer (0 for
    None), else drawn from it."""
    import numbers

    from sklearn.utils import check_random_state

    if random_state is None or isinstance(random_state, numbers.Integral):
        return int(random_state or 0)
    return int(check_random_state(random_state).randint(2**31 - 1 - 10**6))


def _evaluate(fitted, X, y, metrics, client):
    import xarray as xr

    from taskdml.metrics import evaluate_graph

    data = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)})
    graph = evaluate_graph(fitted, data, list(dict.fromkeys(metrics.values())))
    values = client.gather(client.compute(graph)) if client is not None else graph.compute()
    return {name: float(values[metric]) for name, metric in metrics.items()}


def _job(
    estimator,
    index,
    X_train,
    y_train,
    X_test,
    y_test,
    *,
    metrics,
    parallel,
    classes,
    return_train_score,
    error_score,
    client,
):
    """One candidate on one fold: the same result record as the in-memory search's tasks."""
    from sklearn.base import is_classifier

    result = {
        "fit_time": 0.0,
        "score_time": 0.0,
        "fit_error": None,
        "test_scores": None,
        "train_scores": None,
        "warnings": [],
    }
    started = time.perf_counter()
    try:
        fitted = _train(
            estimator,
            index,
            X_train,
            y_train,
            parallel,
            classes if is_classifier(estimator) else None,
            client,
        )
    except Exception:
        if error_score == "raise":
            raise
        result.update(fit_time=time.perf_counter() - started, fit_error=traceback.format_exc())
        return result
    result["fit_time"] = time.perf_counter() - started
    scored = time.perf_counter()
    result["test_scores"] = _scores(fitted, X_test, y_test, metrics, client, error_score, result)
    result["score_time"] = time.perf_counter() - scored
    if return_train_score:
        result["train_scores"] = _scores(
            fitted, X_train, y_train, metrics, client, error_score, result
        )
    return result


def _scores(fitted, X, y, metrics, client, error_score, result):
    try:
        return _evaluate(fitted, X, y, metrics, client)
    except Exception:
        if error_score == "raise":
            raise
        result["warnings"].append(
            "Scoring failed. The score on this train-test partition for these "
            f"parameters will be set to {error_score}. Details: \n"
            f"{traceback.format_exc()}"
        )
        return dict.fromkeys(metrics, error_score)
