"""Evaluation metrics computed chunk by chunk on the cluster and combined exactly.

A metric over a chunked dataset is computed in three stages, each a small pure task:

1. **statistics** — one task per chunk applies the preprocessing transformers and the model to
   that chunk and reduces the predictions to *sufficient statistics*: a confusion matrix over
   the model's ``classes_``, a sum of log losses, the moments of the target and the residual,
   or, for ranking metrics (ROC AUC, average precision), the distinct ``(score, label)`` pairs
   with their counts. Per-sample predictions never leave the task, except in that last case,
   where the number of distinct scores is what an exact AUC needs.
2. **combine** — a tree reduction (``split_every`` statistics per task) merges them. Every
   merge is exact: counts add, moments combine with Chan's parallel formulas, ranking counts
   merge by score.
3. **score** — one task turns the combined statistics into the numbers, with the same
   conventions as :mod:`sklearn.metrics` (zero divisions give ``0.0``, macro averages run over
   the labels present in ``y`` or the predictions, ``nan`` where scikit-learn returns ``nan``).

What a metric needs and how it is computed lives in two registries: :data:`STATISTICS`
(:class:`Statistic`: which model method to call, how to reduce one chunk, how to merge) and
:data:`METRICS` (:class:`Metric`: one statistic plus a function of its combined value). A new
metric is one entry in :data:`METRICS`. The registries' objects travel inside the graph, so a
metric registered in the client process also works on the workers.

The model and the preprocessing transformers go into the graph once, each as one key, whether
they are given as plain objects, ``dask.delayed`` objects or ``distributed.Future`` s. Keys are
named by :func:`taskdml._keys.key_name`: ``<step>-model``, ``<step>-preprocess``,
``<step>-statistics`` (tuple keys ``(name, chunk)``), ``<step>-combine`` (``(name, level, i)``)
and ``<step>-score``, where ``<step>`` is ``evaluate`` outside a pipeline.

With ``diagnostics=True`` the same chunk tasks also keep what a picture of the evaluation
needs, merged as exactly as the metrics: a classifier's confusion matrix (counts add), or a
regressor's bounded sample of ``(prediction, residual)`` pairs — every row gets a
pseudo-random priority from its row number and a chunk keeps its ``max_residuals`` lowest, so
a merge keeps the lowest of the union and the sample is the same for any chunking.
"""

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable

import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.base import is_dask_collection, tokenize
from dask.delayed import Delayed
from sklearn.base import BaseEstimator, ClassifierMixin, is_classifier
from sklearn.utils.validation import check_is_fitted

from taskdml import _data
from taskdml._keys import key_name
from taskdml._parts import chunk_values, parts_of
from taskdml.exceptions import DataError, did_you_mean

__all__ = [
    "METRICS",
    "STATISTICS",
    "Metric",
    "Statistic",
    "available_metrics",
    "evaluate",
    "evaluate_graph",
    "score_chunked",
    "score_in_memory",
]

_DEFAULT_PREFIX = "evaluate"


@dataclasses.dataclass(frozen=True)
class Statistic:
    """A sufficient statistic: computed on each chunk, merged exactly across chunks.

    Parameters
    ----------
    name : str
        Key of the statistic in :data:`STATISTICS` and in the combined result.
    task : {"classification", "regression"}
        The kind of model it applies to. For classification, ``y`` and ``predict``'s output
        reach :attr:`compute` as indices into the model's ``classes_``.
    response : tuple of str
        Model methods that may give its input, in order of preference (as scikit-learn's
        scorers' ``response_method``); the first one the model has is used.
    compute : callable
        ``compute(y, response, n_classes) -> value`` for one non-empty chunk.
    combine : callable
        ``combine(list_of_values) -> value``; must be exact and associative.
    """

    name: str
    task: str
    response: tuple
    compute: Callable
    combine: Callable


@dataclasses.dataclass(frozen=True)
class Metric:
    """A metric: a function of one combined :class:`Statistic`.

    Parameters
    ----------
    statistic : Statistic
        What every chunk computes for this metric.
    score : callable
        ``score(combined_value, classes) -> float``; ``classes`` is the model's ``classes_``
        (``None`` for regression).
    check : callable, optional
        ``check(name, classes)`` raises :class:`~taskdml.exceptions.DataError` when the metric
        does not apply to a classifier with these classes (e.g. a binary metric on three
        classes). Runs before anything is computed when the model is a plain object.
    """

    statistic: Statistic
    score: Callable
    check: Callable | None = None


# --------------------------------------------------------------------------------------------
# Per-chunk statistics and their exact merges.


def _sum_values(values):
    """Merge statistics that add up (counts, sums)."""
    return functools.reduce(np.add, values)


def _confusion_chunk(y, predicted, n_classes):
    """Confusion matrix of one chunk, rows true class, columns predicted class."""
    flat = np.bincount(y * n_classes + predicted, minlength=n_classes * n_classes)
    return flat.reshape(n_classes, n_classes).astype(np.int64)


def _log_loss_chunk(y, proba, n_classes):
    """``[sum of losses, n_samples]`` with scikit-learn's clipping of the probabilities."""
    proba = np.asarray(proba)
    if not np.issubdtype(proba.dtype, np.floating):
        proba = proba.astype(np.float64)
    if proba.ndim != 2 or proba.shape[1] != n_classes:
        raise DataError(
            f"predict_proba returned an array of shape {proba.shape}; log_loss expects one "
            f"column per class of the model ({n_classes})"
        )
    eps = np.finfo(proba.dtype).eps
    p_true = np.clip(proba[np.arange(len(y)), y], eps, 1 - eps)
    return np.array([-np.sum(np.log(p_true), dtype=np.float64), len(y)], dtype=np.float64)


def _regression_chunk(y, predicted, n_classes):
    """Moments of ``y`` and of the residual, plus the sums the error metrics need."""
    y = np.asarray(y, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64).reshape(len(y))
    residual = y - predicted
    return {
        "n": len(y),
        "mean_y": float(np.mean(y)),
        "m2_y": float(np.sum((y - np.mean(y)) ** 2)),
        "mean_r": float(np.mean(residual)),
        "m2_r": float(np.sum((residual - np.mean(residual)) ** 2)),
        "sum_sq": float(np.sum(residual**2)),
        "sum_abs": float(np.sum(np.abs(residual))),
        "max_abs": float(np.max(np.abs(residual))),
    }


def _row_priority(start, n):
    """A pseudo-random priority in ``[0, 1)`` for rows ``start`` to ``start + n - 1``: the
    splitmix64 hash of the row number, so a row has the same priority in any chunking."""
    z = np.arange(start, start + n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / 2.0**53


def _residual_sample_chunk(y, predicted, size, start):
    """At most *size* ``(prediction, residual)`` pairs of one chunk (its first row is row
    *start*): those of lowest priority."""
    y = np.asarray(y, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64).reshape(len(y))
    priority = _row_priority(start, len(y))
    keep = np.argsort(priority, kind="stable")[:size]
    return {
        "n": len(y),
        "size": size,
        "priority": priority[keep],
        "prediction": predicted[keep],
        "residual": (y - predicted)[keep],
    }


def _residual_sample_combine(values):
    """The *size* pairs of lowest priority among several chunks' samples."""
    size = values[0]["size"]
    priority = np.concatenate([value["priority"] for value in values])
    keep = np.argsort(priority, kind="stable")[:size]
    return {
        "n": sum(value["n"] for value in values),
        "size": size,
        "priority": priority[keep],
        **{
            name: np.concatenate([value[name] for value in values])[keep]
            for name in ("prediction", "residual")
        },
    }


def _merge_moments(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    """Chan et al.'s exact merge of (count, mean, sum of squared deviations)."""
    n = n_a + n_b
    delta = mean_b - mean_a
    return mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def _regression_combine(values):
    """Merge regression statistics of several chunks."""

    def merge(a, b):
        mean_y, m2_y = _merge_moments(
            a["n"], a["mean_y"], a["m2_y"], b["n"], b["mean_y"], b["m2_y"]
        )
        mean_r, m2_r = _merge_moments(
            a["n"], a["mean_r"], a["m2_r"], b["n"], b["mean_r"], b["m2_r"]
        )
        return {
            "n": a["n"] + b["n"],
            "mean_y": mean_y,
            "m2_y": m2_y,
            "mean_r": mean_r,
            "m2_r": m2_r,
            "sum_sq": a["sum_sq"] + b["sum_sq"],
            "sum_abs": a["sum_abs"] + b["sum_abs"],
            "max_abs": max(a["max_abs"], b["max_abs"]),
        }

    return functools.reduce(merge, values)


def _group_pairs(scores, labels, counts):
    """Sum ``counts`` over equal ``(score, label)`` pairs; the result is sorted by score."""
    order = np.lexsort((labels, scores))
    scores, labels, counts = scores[order], labels[order], counts[order]
    if len(scores) == 0:
        return scores, labels, counts
    new = np.ones(len(scores), dtype=bool)
    new[1:] = (scores[1:] != scores[:-1]) | (labels[1:] != labels[:-1])
    starts = np.flatnonzero(new)
    return scores[starts], labels[starts], np.add.reduceat(counts, starts)


def _ranking_chunk(y, scores, n_classes):
    """Distinct ``(score, label)`` pairs and their counts, one triple per score column.

    A binary model has one column, the score of ``classes_[1]`` (as scikit-learn's scorers);
    a multiclass model has one column per class.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if n_classes == 2 and scores.ndim == 2:
        scores = scores[:, -1]
    columns = scores[:, None] if scores.ndim == 1 else scores
    if n_classes > 2 and columns.shape[1] != n_classes:
        raise DataError(
            f"the model's scores have {columns.shape[1]} columns; ranking metrics expect one "
            f"per class of the model ({n_classes})"
        )
    ones = np.ones(len(y), dtype=np.int64)
    return tuple(_group_pairs(column, y.astype(np.int64), ones) for column in columns.T)


def _ranking_combine(values):
    """Merge the ranking counts of several chunks, column by column."""
    return tuple(
        _group_pairs(*(np.concatenate(parts) for parts in zip(*column))) for column in zip(*values)
    )


STATISTICS = {
    statistic.name: statistic
    for statistic in [
        Statistic("confusion", "classification", ("predict",), _confusion_chunk, _sum_values),
        Statistic("log_loss", "classification", ("predict_proba",), _log_loss_chunk, _sum_values),
        Statistic(
            "ranking",
            "classification",
            ("decision_function", "predict_proba"),
            _ranking_chunk,
            _ranking_combine,
        ),
        Statistic(
            "ranking_proba", "classification", ("predict_proba",), _ranking_chunk, _ranking_combine
        ),
        Statistic("regression", "regression", ("predict",), _regression_chunk, _regression_combine),
    ]
}
"""Every :class:`Statistic` a built-in metric uses, by name."""


# --------------------------------------------------------------------------------------------
# Scores from combined statistics, with scikit-learn's conventions.


def _divide(numerator, denominator):
    """Elementwise division that gives 0.0 where the denominator is 0 (``zero_division``)."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def _accuracy(confusion, classes):
    return np.trace(confusion) / confusion.sum()


def _balanced_accuracy(confusion, classes):
    present = (confusion.sum(axis=0) + confusion.sum(axis=1)) > 0
    confusion = confusion[np.ix_(present, present)]
    true_count = confusion.sum(axis=1)
    return np.mean(np.diag(confusion)[true_count > 0] / true_count[true_count > 0])


def _positive_index(classes):
    """Index of scikit-learn's default ``pos_label=1`` in ``classes``."""
    return int(np.flatnonzero(np.asarray(classes) == 1)[0])


def _precision_recall_f1(confusion, classes, kind, average):
    true_positive = np.diag(confusion)
    predicted = confusion.sum(axis=0)
    actual = confusion.sum(axis=1)
    if average == "binary":
        labels = [_positive_index(classes)]
    else:
        labels = np.flatnonzero(predicted + actual > 0)
    true_positive, predicted, actual = true_positive[labels], predicted[labels], actual[labels]
    if average == "micro":
        true_positive, predicted, actual = (
            true_positive.sum(keepdims=True),
            predicted.sum(keepdims=True),
            actual.sum(keepdims=True),
        )
    if kind == "precision":
        values = _divide(true_positive, predicted)
    elif kind == "recall":
        values = _divide(true_positive, actual)
    else:
        values = _divide(2.0 * true_positive, actual + predicted)
    return np.average(values, weights=actual if average == "weighted" else None)


def _log_loss(total, classes):
    return total[0] / total[1]


def _rates(column, positive, negative):
    """Counts of positives and negatives per distinct score, highest score first."""
    scores, labels, counts = column
    pos = np.where(np.isin(labels, positive), counts, 0)
    neg = np.where(np.isin(labels, negative), counts, 0)
    keep = (pos + neg) > 0
    scores, pos, neg = scores[keep], pos[keep], neg[keep]
    if len(scores) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new = np.ones(len(scores), dtype=bool)
    new[1:] = scores[1:] != scores[:-1]
    starts = np.flatnonzero(new)
    return np.add.reduceat(pos, starts)[::-1], np.add.reduceat(neg, starts)[::-1]


def _binary_auc(column, positive, negative):
    """Area under the ROC curve (trapezoids over all distinct thresholds, ties counted half)."""
    pos, neg = _rates(column, positive, negative)
    tps, fps = np.cumsum(pos), np.cumsum(neg)
    if len(tps) == 0 or tps[-1] == 0 or fps[-1] == 0:
        return math.nan  # scikit-learn: "Only one class is present in y_true"
    tpr = np.concatenate([[0.0], tps / tps[-1]])
    fpr = np.concatenate([[0.0], fps / fps[-1]])
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def _binary_average_precision(column, positive, negative):
    """Average precision: the step integral of the precision-recall curve."""
    pos, neg = _rates(column, positive, negative)
    tps, fps = np.cumsum(pos), np.cumsum(neg)
    if len(tps) == 0:
        return math.nan
    precision = tps / (tps + fps)
    recall = tps / tps[-1] if tps[-1] > 0 else np.ones(len(tps))
    return max(0.0, float(np.sum(np.diff(recall, prepend=0.0) * precision)))


def _require_all_classes(column, classes, what):
    """Raise unless every class of the model has samples (as scikit-learn does)."""
    _, labels, counts = column
    support = np.bincount(labels, weights=counts, minlength=len(classes))
    missing = [c for c, s in zip(classes, support) if s == 0]
    if missing:
        raise DataError(
            f"{what} needs samples of every class of the model in y, but classes "
            f"{_listing(missing)} have none; evaluate on data that contains every class"
        )
    return support


def _roc_auc(ranking, classes, multi_class, average):
    everyone = np.arange(len(classes))
    if len(classes) == 2:
        return _binary_auc(ranking[0], [1], [0])
    support = _require_all_classes(ranking[0], classes, f"roc_auc_{multi_class}")
    if multi_class == "ovr":
        scores = [_binary_auc(ranking[c], [c], np.setdiff1d(everyone, [c])) for c in everyone]
        return np.average(scores, weights=support if average == "weighted" else None)
    pairs = list(itertools.combinations(everyone, 2))
    scores = [
        (_binary_auc(ranking[a], [a], [b]) + _binary_auc(ranking[b], [b], [a])) / 2
        for a, b in pairs
    ]
    prevalence = [(support[a] + support[b]) / support.sum() for a, b in pairs]
    return np.average(scores, weights=prevalence if average == "weighted" else None)


def _average_precision(ranking, classes):
    everyone = np.arange(len(classes))
    if len(classes) == 2:
        positive = _positive_index(classes)
        return _binary_average_precision(ranking[0], [positive], [1 - positive])
    _require_all_classes(ranking[0], classes, "average_precision")
    return np.mean(
        [_binary_average_precision(ranking[c], [c], np.setdiff1d(everyone, [c])) for c in everyone]
    )


def _fraction_explained(numerator, denominator):
    """``1 - numerator / denominator`` with scikit-learn's ``force_finite=True``."""
    if numerator == 0:
        return 1.0
    if denominator == 0:
        return 0.0
    return 1.0 - numerator / denominator


def _r2(moments, classes):
    if moments["n"] < 2:
        return math.nan  # scikit-learn: "not well-defined with less than two samples"
    return _fraction_explained(moments["sum_sq"], moments["m2_y"])


def _explained_variance(moments, classes):
    return _fraction_explained(moments["m2_r"], moments["m2_y"])


def _mean_squared_error(moments, classes):
    return moments["sum_sq"] / moments["n"]


def _root_mean_squared_error(moments, classes):
    return math.sqrt(moments["sum_sq"] / moments["n"])


def _mean_absolute_error(moments, classes):
    return moments["sum_abs"] / moments["n"]


def _max_error(moments, classes):
    return moments["max_abs"]


def _negated(score, value, classes):
    return -score(value, classes)


# --------------------------------------------------------------------------------------------
# Checks of a metric against the model's classes.


def _listing(values):
    plain = (v.item() if isinstance(v, np.generic) else v for v in values)
    return "[" + ", ".join(map(repr, plain)) + "]"


def _check_binary_pos_label(name, classes):
    """Binary precision/recall/f1: two classes, one of them ``1`` (scikit-learn's default)."""
    if len(classes) != 2:
        raise DataError(
            f"metric {name!r} is binary but the model has {len(classes)} classes "
            f"{_listing(classes)}; use {name}_macro, {name}_micro or {name}_weighted"
        )
    _check_pos_label(name, classes)


def _check_pos_label(name, classes):
    if not np.any(np.asarray(classes) == 1):
        raise DataError(
            f"metric {name!r} counts the class 1 as positive (scikit-learn's pos_label=1), "
            f"but the model's classes are {_listing(classes)}; use {name}_macro or "
            f"{name}_weighted, or encode the positive class as 1"
        )


def _check_average_precision(name, classes):
    if len(classes) == 2:
        _check_pos_label(name, classes)


def _check_binary(name, classes):
    if len(classes) != 2:
        raise DataError(
            f"metric {name!r} is binary but the model has {len(classes)} classes "
            f"{_listing(classes)}; use 'roc_auc_ovr' or 'roc_auc_ovo' (or their _weighted forms)"
        )


# --------------------------------------------------------------------------------------------
# The registry.


def _build_registry():
    confusion = STATISTICS["confusion"]
    metrics = {
        "accuracy": Metric(confusion, _accuracy),
        "balanced_accuracy": Metric(confusion, _balanced_accuracy),
    }
    for kind in ("precision", "recall", "f1"):
        metrics[kind] = Metric(
            confusion,
            functools.partial(_precision_recall_f1, kind=kind, average="binary"),
            _check_binary_pos_label,
        )
        for average in ("macro", "micro", "weighted"):
            metrics[f"{kind}_{average}"] = Metric(
                confusion, functools.partial(_precision_recall_f1, kind=kind, average=average)
            )
    metrics["log_loss"] = Metric(STATISTICS["log_loss"], _log_loss)
    metrics["roc_auc"] = Metric(
        STATISTICS["ranking"],
        functools.partial(_roc_auc, multi_class="ovr", average="macro"),
        _check_binary,
    )
    for multi_class in ("ovr", "ovo"):
        for average in ("macro", "weighted"):
            suffix = "" if average == "macro" else "_weighted"
            metrics[f"roc_auc_{multi_class}{suffix}"] = Metric(
                STATISTICS["ranking_proba"],
                functools.partial(_roc_auc, multi_class=multi_class, average=average),
            )
    metrics["average_precision"] = Metric(
        STATISTICS["ranking"], _average_precision, _check_average_precision
    )
    regression = STATISTICS["regression"]
    metrics.update(
        r2=Metric(regression, _r2),
        explained_variance=Metric(regression, _explained_variance),
        mean_squared_error=Metric(regression, _mean_squared_error),
        root_mean_squared_error=Metric(regression, _root_mean_squared_error),
        mean_absolute_error=Metric(regression, _mean_absolute_error),
        max_error=Metric(regression, _max_error),
    )
    metrics.update(
        mse=metrics["mean_squared_error"],
        rmse=metrics["root_mean_squared_error"],
        mae=metrics["mean_absolute_error"],
    )
    # scikit-learn's scorer names for losses: the same number, negated.
    for loss in (
        "log_loss",
        "mean_squared_error",
        "root_mean_squared_error",
        "mean_absolute_error",
        "max_error",
    ):
        metric = metrics[loss]
        metrics[f"neg_{loss}"] = dataclasses.replace(
            metric, score=functools.partial(_negated, metric.score)
        )
    return metrics


METRICS = _build_registry()
"""Every metric :func:`evaluate` knows, by name: ``name -> Metric``."""


def available_metrics(task=None):
    """Return the names of the known metrics, sorted.

    Parameters
    ----------
    task : {"classification", "regression"}, optional
        Only the metrics for this kind of model.

    Returns
    -------
    list of str

    Examples
    --------
    >>> from taskdml.metrics import available_metrics
    >>> available_metrics("regression")[:3]
    ['explained_variance', 'mae', 'max_error']
    """
    return sorted(name for name, metric in METRICS.items() if task in (None, metric.statistic.task))


# --------------------------------------------------------------------------------------------
# Tasks.


def _resolve_metrics(metrics):
    """Validate metric names; return ``{name: Metric}`` in the order given, without repeats."""
    if isinstance(metrics, str):
        metrics = [metrics]
    metrics = list(dict.fromkeys(metrics))
    if not metrics:
        raise DataError(f"no metrics to evaluate; choose from {', '.join(available_metrics())}")
    unknown = [name for name in metrics if name not in METRICS]
    if unknown:
        name = unknown[0]
        raise DataError(
            f"unknown metric {name!r}.{did_you_mean(name, METRICS)} "
            f"Valid metrics: {', '.join(available_metrics())}"
        )
    return {name: METRICS[name] for name in metrics}


def _describe(model):
    text = repr(model).replace("\n", "")
    return text if len(text) <= 80 else f"{type(model).__name__}(...)"


def _response_method(model, name, statistic):
    """The first of the statistic's response methods that the model has."""
    for method in statistic.response:
        if hasattr(model, method):
            return method
    wanted = " or ".join(statistic.response)
    raise DataError(
        f"metric {name!r} needs the model's {wanted}, but {_describe(model)} has none; "
        f"choose a model that has it (e.g. SGDClassifier(loss='log_loss') for predict_proba) "
        f"or a metric computed from predict, such as 'accuracy'"
    )


def _check_model(model, metrics):
    """Raise a clear error if *model* cannot be evaluated with *metrics*."""
    if not hasattr(model, "predict"):
        what = "a transformer" if hasattr(model, "transform") else "not a predictor"
        raise DataError(
            f"{_describe(model)} has no predict method ({what}), so it cannot be evaluated; "
            f"pass transformers in preprocess=[...] and evaluate the model that follows them"
        )
    classifier = is_classifier(model) or hasattr(model, "classes_")
    classes = np.asarray(model.classes_) if classifier else None
    for name, metric in metrics.items():
        task = metric.statistic.task
        if (task == "classification") != classifier:
            kind = "classifier" if classifier else "regressor"
            suggestions = ", ".join(
                available_metrics("classification" if classifier else "regression")
            )
            raise DataError(
                f"metric {name!r} is a {task} metric, but {_describe(model)} is a {kind}; "
                f"metrics for a {kind}: {suggestions}"
            )
        _response_method(model, name, metric.statistic)
        if metric.check is not None:
            metric.check(name, classes)
    return classes


def _check_preprocess(preprocess):
    """Raise a clear error for a preprocessing step that cannot transform."""
    for transformer in preprocess:
        if not hasattr(transformer, "transform"):
            raise DataError(
                f"preprocess holds {_describe(transformer)}, which has no transform method; "
                f"preprocess takes fitted transformers such as StandardScaler"
            )


def _encode_labels(values, classes):
    """Indices of *values* in *classes*, and a mask of the values found there."""
    order = np.argsort(classes, kind="stable")
    position = np.searchsorted(classes[order], values)
    position = np.minimum(position, len(classes) - 1)
    found = classes[order][position] == values
    return order[position], np.asarray(found, dtype=bool)


def _chunk_statistics(
    model, preprocess, X, y, metrics, chunk, start, max_residuals=None, responses=None
):
    """Statistics of one chunk: preprocess, predict, reduce (a task).

    Returns ``None`` for an empty chunk, otherwise ``{"n_samples", "classes", <statistic>...}``,
    and ``"diagnostics"`` (see :func:`evaluate_graph`) unless *max_residuals* is ``None``.
    *responses* are the chunk's predictions already made elsewhere (``{method: array}``,
    for a model whose parts live on workers); *X* is then not needed.
    """
    y = np.asarray(y)
    if len(y) == 0:
        return None
    classes = _check_model(model, metrics)
    _check_preprocess(preprocess)
    for transformer in preprocess:
        X = transformer.transform(X)
    where = f"chunk {chunk} (samples {start} to {start + len(y) - 1})"
    if classes is not None:
        labels = y
        y, known = _encode_labels(labels, classes)
        if not known.all():
            unseen = np.unique(labels[~known])
            raise DataError(
                f"{where} of y has labels {_listing(unseen)} that the model does not know; "
                f"its classes_ are {_listing(classes)}. Evaluate on data with the model's "
                f"classes only, or refit the model on data that contains these labels"
            ) from None
    result = {"n_samples": len(y), "classes": classes}
    responses, computed = dict(responses or {}), {}
    for name, metric in metrics.items():
        statistic = metric.statistic
        if statistic.name in result:
            continue
        method = _response_method(model, name, statistic)
        if method not in responses:
            responses[method] = (
                _predict(model, X, classes, where)
                if method == "predict"
                else getattr(model, method)(X)
            )
        cache_key = (statistic.compute, method)
        if cache_key not in computed:
            n_classes = None if classes is None else len(classes)
            computed[cache_key] = statistic.compute(y, responses[method], n_classes)
        result[statistic.name] = computed[cache_key]
    if max_residuals is not None:
        if "predict" not in responses:
            responses["predict"] = _predict(model, X, classes, where)
        result["diagnostics"] = (
            _confusion_chunk(y, responses["predict"], len(classes))
            if classes is not None
            else _residual_sample_chunk(y, responses["predict"], max_residuals, start)
        )
    return result


def _predict(model, X, classes, where):
    """``model.predict(X)``; for a classifier, as indices into *classes*."""
    predicted = model.predict(X)
    if classes is None:
        return predicted
    predicted, known = _encode_labels(predicted, classes)
    if not known.all():
        raise DataError(f"{_describe(model)} predicted labels outside its classes_ in {where}")
    return predicted


def _statistics_of(metrics):
    """``{statistic name: Statistic}`` for the metrics to compute."""
    return {metric.statistic.name: metric.statistic for metric in metrics.values()}


def _combine_statistics(parts, metrics):
    """Merge the statistics of several chunks or subtrees (a task); ``None`` is empty."""
    parts = [part for part in parts if part is not None]
    if not parts:
        return None
    combined = {
        "n_samples": sum(part["n_samples"] for part in parts),
        "classes": parts[0]["classes"],
    }
    for name, statistic in _statistics_of(metrics).items():
        combined[name] = statistic.combine([part[name] for part in parts])
    if "diagnostics" in parts[0]:
        diagnostics = [part["diagnostics"] for part in parts]
        combined["diagnostics"] = (
            _residual_sample_combine(diagnostics)
            if isinstance(diagnostics[0], dict)
            else _sum_values(diagnostics)
        )
    return combined


def _score(statistics, metrics):
    """The metrics' values from the combined statistics (the final task)."""
    if statistics is None:
        raise DataError("the data has no samples; there is nothing to evaluate")
    classes = statistics["classes"]
    return {
        name: float(metric.score(statistics[metric.statistic.name], classes))
        for name, metric in metrics.items()
    }


def _score_and_diagnose(statistics, metrics):
    """The metrics' values and the JSON-able diagnostics (the final task with diagnostics)."""
    scores = _score(statistics, metrics)
    classes, found = statistics["classes"], statistics["diagnostics"]
    if classes is not None:
        return scores, {
            "kind": "confusion",
            "labels": np.asarray(classes).tolist(),
            "counts": found.tolist(),
        }
    order = np.argsort(found["prediction"], kind="stable")
    return scores, {
        "kind": "residuals",
        "n_samples": int(found["n"]),
        "prediction": [float(f"{v:.6g}") for v in found["prediction"][order]],
        "residual": [float(f"{v:.6g}") for v in found["residual"][order]],
    }


# --------------------------------------------------------------------------------------------
# The graph.


def _check_data(data):
    """Return ``(X, y)`` as dask arrays with aligned sample chunks and one feature chunk."""
    if not isinstance(data, xr.Dataset):
        raise DataError(
            "data must be an xarray.Dataset with variables 'X' (dims sample, feature) and "
            f"'y' (dims sample); got {type(data).__name__}"
        )
    if _data.is_table(data):  # feature columns as variables: a dask DataFrame, and y
        if "y" not in data.data_vars:
            raise DataError(
                f"the table has no variable 'y'; its variables are "
                f"{sorted(map(str, data.data_vars))}. Evaluate on data with its target."
            )
        return _data.as_dask(data)[:2]
    for name, dims in (("X", ("sample", "feature")), ("y", ("sample",))):
        if name not in data.data_vars:
            raise DataError(
                f"data has no variable {name!r}.{did_you_mean(name, data.data_vars)} "
                f"Its variables are {sorted(map(str, data.data_vars))}; expected 'X' "
                f"(dims sample, feature) and 'y' (dims sample)"
            )
        if set(data[name].dims) != set(dims):
            raise DataError(f"data[{name!r}] has dims {data[name].dims}; expected {dims}")
    X = data["X"].transpose("sample", "feature").data
    y = data["y"].data
    if not isinstance(X, da.Array):
        sample_chunks = y.chunks[0] if isinstance(y, da.Array) else -1
        X = da.from_array(np.asarray(X), chunks=(sample_chunks, -1))
    X = X.rechunk({1: -1})
    if not isinstance(y, da.Array):
        y = da.from_array(np.asarray(y), chunks=(X.chunks[0],))
    return X, y.rechunk((X.chunks[0],))


def _as_node(value, phase, token):
    """A ``Delayed`` for the model or a transformer, put into the graph once as one key."""
    if isinstance(value, Delayed) or _is_future(value):
        return value
    return dask.delayed(value, name=key_name(_DEFAULT_PREFIX, token, phase=phase), traverse=False)


def evaluate_graph(
    model, data, metrics, *, preprocess=(), split_every=8, diagnostics=False, max_residuals=2000
):
    """Build (without computing) the graph that evaluates *model* on *data*.

    Use it to compute several evaluations, or an evaluation and other work, in one
    ``dask.compute`` call; :func:`evaluate` is this plus ``dask.compute``.

    Parameters
    ----------
    model, data, metrics, preprocess
        As for :func:`evaluate`.
    split_every : int, default=8
        How many statistics one combine task merges.
    diagnostics : bool, default=False
        Also compute, in the same chunk tasks, what a picture of the evaluation needs.
    max_residuals : int, default=2000
        With *diagnostics*, how many ``(prediction, residual)`` pairs a regressor's sample
        keeps at most (a uniform sample of the rows, the same for any chunking).

    Returns
    -------
    dask.delayed.Delayed
        Computes to ``{metric name: float}``; with *diagnostics*, to ``(scores, found)``
        where *found* is JSON-able: ``{"kind": "confusion", "labels", "counts"}`` (rows the
        true label, columns the predicted one) for a classifier, ``{"kind": "residuals",
        "n_samples", "prediction", "residual"}`` (sorted by prediction) for a regressor.

    Examples
    --------
    >>> import dask
    >>> import dask.array as da
    >>> import numpy as np
    >>> import xarray as xr
    >>> from sklearn.linear_model import LinearRegression
    >>> from taskdml.metrics import evaluate_graph
    >>> X = np.arange(20.0).reshape(10, 2)
    >>> y = X @ [1.0, 2.0]
    >>> data = xr.Dataset({"X": (("sample", "feature"), da.from_array(X, chunks=(4, 2))),
    ...                    "y": ("sample", da.from_array(y, chunks=4))})
    >>> graph = evaluate_graph(LinearRegression().fit(X, y), data, ["r2", "max_error"])
    >>> scores, = dask.compute(graph)
    >>> round(scores["r2"], 6), scores["max_error"] < 1e-9
    (1.0, True)
    """
    metrics = _resolve_metrics(metrics)
    if not (isinstance(split_every, int) and split_every >= 2):
        raise DataError(f"split_every must be an integer >= 2; got {split_every!r}")
    if diagnostics and not (isinstance(max_residuals, int) and max_residuals >= 1):
        raise DataError(f"max_residuals must be an integer >= 1; got {max_residuals!r}")
    kept = max_residuals if diagnostics else None
    preprocess = list(preprocess)
    X, y = _check_data(data)
    # Plain objects are checked here, before anything runs; delayed ones in each chunk task.
    if not (is_dask_collection(model) or _is_future(model)):
        if hasattr(model, "fit"):
            check_is_fitted(model)
        _check_model(model, metrics)
    _check_preprocess([t for t in preprocess if not (is_dask_collection(t) or _is_future(t))])
    if _data.is_frame(X):  # a table: one chunk per partition
        rows, X_name = _data.partition_lengths(X), tokenize(X)
        x_blocks = _data.outside_annotations(lambda: list(X.to_delayed()))
    else:
        rows, X_name, x_blocks = X.chunks[0], X.name, X.to_delayed().ravel()
    responses = [None] * len(rows)
    split = None if is_dask_collection(model) or _is_future(model) else parts_of(model)
    if split is not None:  # predicted where its parts are; the chunk tasks get the answers
        responses = _sharded_responses(model, X, preprocess, metrics, diagnostics)
        shards = [str(getattr(shard, "key", shard)) for shard in split[1]]
        model, preprocess, x_blocks = _Answered(model), [], [None] * len(rows)
        model_node = _as_node(model, "model", shards)
    else:
        model_node = _as_node(model, "model", model)
    preprocess_nodes = [_as_node(t, "preprocess", t) for t in preprocess]
    token = (
        _node_key(model_node),
        [_node_key(node) for node in preprocess_nodes],
        X_name,
        y.name,
        list(metrics),
        kept,
    )
    statistics_name = key_name(_DEFAULT_PREFIX, token, phase="statistics")
    starts = np.cumsum((0,) + tuple(rows))
    parts = [
        dask.delayed(_chunk_statistics, pure=True)(
            model_node,
            preprocess_nodes,
            x_block,
            y_block,
            metrics,
            chunk,
            int(starts[chunk]),
            kept,
            responses[chunk],
            dask_key_name=(statistics_name, chunk),
        )
        for chunk, (x_block, y_block) in enumerate(zip(x_blocks, y.to_delayed().ravel()))
    ]
    combine_name = key_name(_DEFAULT_PREFIX, token, split_every, phase="combine")
    level = 0
    while len(parts) > 1:
        parts = [
            dask.delayed(_combine_statistics, pure=True)(
                parts[i : i + split_every], metrics, dask_key_name=(combine_name, level, j)
            )
            for j, i in enumerate(range(0, len(parts), split_every))
        ]
        level += 1
    return dask.delayed(_score_and_diagnose if diagnostics else _score, pure=True)(
        parts[0], metrics, dask_key_name=key_name(_DEFAULT_PREFIX, token, phase="score")
    )


def evaluate(model, data, metrics, *, preprocess=()):
    """Evaluate a fitted model on chunked data, chunk by chunk on the cluster.

    Each chunk is reduced to small statistics where it lives; the statistics are merged
    exactly, so the result equals the :mod:`sklearn.metrics` function on all the data at once
    (to rounding). Runs on the default distributed client if there is one, and on Dask's local
    scheduler otherwise.

    Parameters
    ----------
    model : estimator, dask.delayed or distributed.Future
        A fitted scikit-learn classifier or regressor (a ``Pipeline`` too).
    data : xarray.Dataset
        ``X`` with dims ``(sample, feature)`` and ``y`` with dims ``(sample,)``, dask arrays
        chunked along ``sample``.
    metrics : str or list of str
        Names from :func:`available_metrics`: scikit-learn's names (``accuracy``,
        ``f1_macro``, ``roc_auc``, ``roc_auc_ovr``, ``log_loss``, ``r2``,
        ``mean_squared_error``, ...), the short forms ``mse``, ``rmse``, ``mae``, and the
        scorer names of losses (``neg_log_loss``, ``neg_mean_squared_error``, ...), which are
        the loss negated. Plain ``precision``, ``recall`` and ``f1`` are binary with
        scikit-learn's ``pos_label=1``; ``roc_auc`` and ``average_precision`` rank by
        ``decision_function`` (else ``predict_proba``), the ``roc_auc_ovr``/``_ovo`` family by
        ``predict_proba``, as scikit-learn's scorers do.
    preprocess : sequence of transformers, default=()
        Fitted transformers (or their delayed objects or futures) applied to ``X``, in order,
        before the model.

    Returns
    -------
    dict of str to float
        ``{metric name: value}`` in the order asked.

    Raises
    ------
    DataError
        For an unknown metric name, a model that cannot give what a metric needs (no
        ``predict``, no ``predict_proba``, a regressor for a classification metric, a binary
        metric on a multiclass model), badly shaped data, or labels in ``y`` outside the
        model's ``classes_`` (the message names the chunk).

    Notes
    -----
    Ranking metrics keep one count per distinct ``(score, label)`` pair, which is what an exact
    AUC needs; for continuous scores that is about one entry per sample, merged in a tree.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> import xarray as xr
    >>> from sklearn.linear_model import LogisticRegression
    >>> from taskdml.metrics import evaluate
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> y = (X[:, 0] > 0).astype(int)
    >>> data = xr.Dataset({"X": (("sample", "feature"), da.from_array(X, chunks=(30, 3))),
    ...                    "y": ("sample", da.from_array(y, chunks=30))})
    >>> model = LogisticRegression().fit(X, y)
    >>> scores = evaluate(model, data, ["accuracy", "roc_auc"])
    >>> list(scores), scores["accuracy"] > 0.9
    (['accuracy', 'roc_auc'], True)
    """
    (result,) = dask.compute(evaluate_graph(model, data, metrics, preprocess=preprocess))
    return result


def score_chunked(model, X, y, metric):
    """One metric of a fitted model on chunked arrays, chunk by chunk (see :func:`evaluate`).

    The score of :class:`taskdml.DataParallel` and of the searches on chunked data.

    Parameters
    ----------
    model : estimator, dask.delayed or distributed.Future
        A fitted classifier or regressor.
    X : dask array of shape (n_samples, n_features)
        Chunked along samples (any feature chunks).
    y : dask array or array-like of shape (n_samples,)
        Rechunked to X's row chunks.
    metric : str
        A name from :func:`available_metrics`.

    Returns
    -------
    float

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from taskdml.metrics import score_chunked
    >>> X = np.arange(20.0).reshape(10, 2)
    >>> y = X @ [1.0, 2.0]
    >>> model = LinearRegression().fit(X, y)
    >>> round(score_chunked(model, da.from_array(X, chunks=(4, 2)), y, "r2"), 6)
    1.0
    """
    data = xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)})
    return evaluate(model, data, [metric])[metric]


def score_in_memory(model, chunks, metric, *, split_every=8):
    """One metric of a fitted model on in-memory chunks, computed as :func:`evaluate_graph`
    computes it: a statistic per chunk, combined *split_every* at a time, then the score.

    The scoring of an adaptive search's fused steps, inside one task, where the chunks
    already are; the value is the chunked scoring's, bit for bit.

    Parameters
    ----------
    model : estimator
        Fitted.
    chunks : iterable of (X, y)
        NumPy arrays, in row order; each is used once, as it comes.
    metric : str
        A name from :func:`available_metrics`.
    split_every : int, default=8

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from taskdml.metrics import score_in_memory
    >>> X = np.arange(20.0).reshape(10, 2)
    >>> model = LinearRegression().fit(X, X @ [1.0, 2.0])
    >>> round(score_in_memory(model, [(X[:4], X[:4] @ [1.0, 2.0]), (X[4:], X[4:] @ [1.0, 2.0])],
    ...                       "r2"), 6)
    1.0
    """
    metrics = _resolve_metrics([metric])
    parts, start = [], 0
    for chunk, (X, y) in enumerate(chunks):  # one chunk at a time: *chunks* may read them
        parts.append(_chunk_statistics(model, [], X, y, metrics, chunk, start))
        start += len(y)
    while len(parts) > 1:
        parts = [
            _combine_statistics(parts[i : i + split_every], metrics)
            for i in range(0, len(parts), split_every)
        ]
    return _score(parts[0], metrics)[metric]


def _sharded_responses(model, X, preprocess, metrics, diagnostics):
    """Per chunk, ``{method: future}`` of what the metrics need from a
    :class:`~taskdml.parallel.ClassSharded` model, made by tasks where its shards are (the
    graph that takes them holds the futures until it is computed)."""
    from taskdml._apply import transformed

    methods = {_response_method(model, name, m.statistic) for name, m in metrics.items()}
    if diagnostics:
        methods.add("predict")
    X = transformed(X, list(preprocess))
    values = {method: chunk_values(model, X, method)[0] for method in sorted(methods)}
    return [{method: values[method][i] for method in values} for i in range(len(X.chunks[0]))]


class _Answered(ClassifierMixin, BaseEstimator):
    """A sharded model as its chunk tasks see it once its shards made the predictions: its
    classes, and which methods it has (never called)."""

    def __init__(self, model=None):
        self.model = None  # the shards stay where they are
        self.classes_ = model.classes_
        for method in ("predict", "predict_proba", "decision_function", "predict_log_proba"):
            if hasattr(model, method):
                setattr(self, method, _made_by_shards)


def _made_by_shards(X):
    raise RuntimeError("a sharded model's predictions are made by its shards' tasks")


def _is_future(value):
    try:
        from distributed import Future
    except ImportError:  # pragma: no cover - distributed is a dependency
        return False
    return isinstance(value, Future)


def _node_key(node):
    return node.key
