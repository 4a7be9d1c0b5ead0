"""Merge rules for meta-estimators: one-vs-rest, one-vs-one, multi-output, SelectFromModel.

They keep one or more fitted copies of the wrapped estimator (``estimators_`` or
``estimator_``); each position is merged with the wrapped estimator's own rule through
:func:`merge_replicas`, which also records each sub-estimator's round start. ``prepare``
builds the sub-estimators as the meta-estimator's first ``partial_fit`` would, prepared by
the wrapped rule, when that rule has a ``prepare``; otherwise nothing needs initialising.

The weights handed down are the rows each replica saw in total: for one-vs-one, whose
sub-estimators see only the rows of their two classes, rules that read their own counters
(SGD and MLP ``t_``, naive Bayes counts) are unaffected; the others are weighted by the
total.
"""

import copy
import itertools

import numpy as np
from sklearn.base import clone
from sklearn.preprocessing import LabelBinarizer
from sklearn.utils.validation import validate_data

from taskdml import _compat
from taskdml._compat import _check_partial_fit_first_call
from taskdml.parallel.merge._registry import (
    _prepare_with,
    _require_rule,
    get_merge_rule,
    merge_replicas,
)


def merge_estimators_list(replicas, weights):
    """Merge ``estimators_`` position by position with the wrapped estimator's rule."""
    merged = copy.deepcopy(replicas[0])
    merged.estimators_ = [
        merge_replicas([r.estimators_[i] for r in replicas], weights)
        for i in range(len(replicas[0].estimators_))
    ]
    return merged


def merge_select_from_model(replicas, weights):
    """Merge SelectFromModel's fitted ``estimator_`` with its own rule."""
    merged = copy.deepcopy(replicas[0])
    merged.estimator_ = merge_replicas([r.estimator_ for r in replicas], weights)
    return merged


def _prepared(inner, X, y, classes):
    return _prepare_with(_require_rule(inner, "prepare"), clone(inner), X, y, classes)


def _needs_prepare(meta):
    rule = get_merge_rule(meta.estimator)
    return rule is not None and rule.prepare is not None


def prepare_one_vs_rest(estimator, X, y, classes):
    """One prepared binary estimator per label column, as OneVsRest's first partial_fit."""
    if hasattr(estimator, "estimators_") or not _needs_prepare(estimator):
        return copy.deepcopy(estimator)
    meta = clone(estimator)
    _check_partial_fit_first_call(meta, classes)
    meta.label_binarizer_ = LabelBinarizer(sparse_output=True)
    meta.label_binarizer_.fit(meta.classes_)
    columns = meta.label_binarizer_.transform(y).tocsc()
    meta.estimators_ = [
        _prepared(meta.estimator, X, column.toarray().ravel(), np.array([0, 1]))
        for column in columns.T
    ]
    if hasattr(meta.estimators_[0], "n_features_in_"):
        meta.n_features_in_ = meta.estimators_[0].n_features_in_
    return meta


def prepare_one_vs_one(estimator, X, y, classes):
    """One prepared binary estimator per pair of classes, as OneVsOne's first partial_fit."""
    if hasattr(estimator, "estimators_") or not _needs_prepare(estimator):
        return copy.deepcopy(estimator)
    meta = clone(estimator)
    _check_partial_fit_first_call(meta, classes)
    X, y = validate_data(
        meta, X, y, accept_sparse=["csr", "csc"], ensure_all_finite=False, reset=True
    )
    estimators = []
    for i, j in itertools.combinations(range(len(meta.classes_)), 2):
        rows = np.logical_or(y == meta.classes_[i], y == meta.classes_[j])
        if not rows.any():
            # The first chunk has neither class: initialise on all rows (never trained on).
            rows = np.ones_like(rows)
        target = (y[rows] == meta.classes_[j]).astype(int)
        estimators.append(_prepared(meta.estimator, X[rows], target, np.array([0, 1])))
    meta.estimators_ = estimators
    meta.pairwise_indices_ = None
    return meta


def prepare_multi_output(estimator, X, y, classes):
    """One prepared estimator per output column, as MultiOutput's first partial_fit."""
    if hasattr(estimator, "estimators_") or not _needs_prepare(estimator):
        return copy.deepcopy(estimator)
    meta = clone(estimator)
    y = np.asarray(y)
    meta.estimators_ = [
        _prepared(meta.estimator, X, y[:, i], None if classes is None else classes[i])
        for i in range(y.shape[1])
    ]
    if hasattr(meta.estimators_[0], "n_features_in_"):
        meta.n_features_in_ = meta.estimators_[0].n_features_in_
    return meta


def prepare_select_from_model(estimator, X, y, classes):
    """A prepared ``estimator_``, as SelectFromModel's first partial_fit would clone it."""
    if hasattr(estimator, "estimator_") or estimator.prefit or not _needs_prepare(estimator):
        return copy.deepcopy(estimator)
    meta = clone(estimator)
    _compat.check_max_features(meta, X)
    meta.estimator_ = _prepared(meta.estimator, X, y, classes)
    return meta


META_NOTES = "Each sub-estimator merged with the wrapped estimator's rule."
