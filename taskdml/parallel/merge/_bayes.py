"""Exact merge rules for naive Bayes.

Count-based models (Multinomial, Complement, Bernoulli, Categorical) keep sufficient
statistics: the counts of the round are summed, the start counted once, and the derived
log-probabilities are recomputed by the estimator's own ``_update_feature_log_prob`` and
``_update_class_log_prior``.

GaussianNB keeps per-class means and variances; they are merged with Chan, Golub & LeVeque's
pairwise formula, in sums of squared deviations so the start can be counted once. Its
``var_`` stores ``variance + epsilon_`` with ``epsilon_ = var_smoothing * max(var(batch))``
recomputed from each batch, and ``partial_fit`` subtracts the *new* batch's epsilon from a
``var_`` that holds the *old* one, so chunked ``partial_fit`` drifts by ``var_smoothing``-sized
amounts that depend on the chunking. The merge undoes that drift in every replica (each
replica did ``var_ - eps_k`` on the start's ``var_``, and both are known) and returns the
model of one ``partial_fit`` over all rows, with ``epsilon_`` from the variance of all rows,
pooled from the per-class moments. Exact when each replica makes one ``partial_fit`` call per
round; with several, the replica's own drift from its intermediate epsilons remains.
With ``sample_weight``, epsilon uses weighted moments where scikit-learn uses unweighted ones.
"""

import copy
import warnings

import numpy as np

from taskdml import _compat
from taskdml.parallel.merge._registry import round_start
from taskdml.parallel.merge._util import sum_of_deltas


def _refresh_log_probabilities(merged):
    with warnings.catch_warnings():
        # _check_alpha repeats the small-alpha warning each replica already gave.
        warnings.simplefilter("ignore", UserWarning)
        alpha = _compat.check_alpha(merged)
    _compat.update_feature_log_prob(merged, alpha)
    _compat.update_class_log_prior(merged, class_prior=merged.class_prior)


def merge_discrete_nb(replicas, weights):
    """Sum the class and feature counts of Multinomial/Complement/BernoulliNB replicas."""
    start = round_start(replicas)
    merged = copy.deepcopy(replicas[0])
    merged.class_count_ = sum_of_deltas(
        [r.class_count_ for r in replicas], start.get("class_count_")
    )
    merged.feature_count_ = sum_of_deltas(
        [r.feature_count_ for r in replicas], start.get("feature_count_")
    )
    if hasattr(merged, "feature_all_"):
        merged.feature_all_ = merged.feature_count_.sum(axis=0)
    _refresh_log_probabilities(merged)
    return merged


def _pad_columns(counts, width):
    return np.pad(counts, [(0, 0), (0, width - counts.shape[1])], "constant")


def merge_categorical_nb(replicas, weights):
    """Sum CategoricalNB's per-feature category counts, padded to the widest."""
    start = round_start(replicas)
    merged = copy.deepcopy(replicas[0])
    merged.class_count_ = sum_of_deltas(
        [r.class_count_ for r in replicas], start.get("class_count_")
    )
    start_counts = start.get("category_count_")
    category_count = []
    for i in range(len(replicas[0].category_count_)):
        per_replica = [r.category_count_[i] for r in replicas]
        width = max(c.shape[1] for c in per_replica)
        padded = [_pad_columns(c, width) for c in per_replica]
        start_i = None if start_counts is None else _pad_columns(start_counts[i], width)
        category_count.append(sum_of_deltas(padded, start_i))
    merged.category_count_ = category_count
    # scikit-learn keeps the categories of the *last* batch in n_categories_; one call over
    # all rows keeps those of all rows, which is the width of the count tables.
    merged.n_categories_ = np.array([c.shape[1] for c in category_count], dtype=np.int64)
    _refresh_log_probabilities(merged)
    return merged


def merge_gaussian_nb(replicas, weights):
    """Chan-merge GaussianNB's per-class moments; epsilon_ from the variance of all rows."""
    start = round_start(replicas)
    first = replicas[0]
    counts = np.stack([np.asarray(r.class_count_, dtype=float) for r in replicas])[:, :, None]
    means = np.stack([np.asarray(r.theta_, dtype=float) for r in replicas])
    epsilons = np.array([float(r.epsilon_) for r in replicas])[:, None, None]
    variances = np.stack([np.asarray(r.var_, dtype=float) for r in replicas]) - epsilons

    if "class_count_" in start:
        n0 = np.asarray(start["class_count_"], dtype=float)[:, None]
        mean0 = np.asarray(start["theta_"], dtype=float)
        eps0 = float(start["epsilon_"])
        var0 = np.asarray(start["var_"], dtype=float) - eps0
    else:
        n0, mean0, var0, eps0 = 0.0, 0.0, 0.0, 0.0

    total = n0 + (counts - n0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (n0 * mean0 + (counts * means - n0 * mean0).sum(axis=0)) / total
        # A replica that started from var_0 + eps0 subtracted its own eps_k, so it combined
        # n0 rows of variance var0 + eps0 - eps_k: its squared deviations hold
        # n0 * (eps0 - eps_k) too much.
        replica_ssd = counts * variances - n0 * (eps0 - epsilons) + counts * (means - mean) ** 2
        start_ssd = n0 * var0 + n0 * (mean0 - mean) ** 2
        ssd = start_ssd + (replica_ssd - start_ssd).sum(axis=0)
        variance = ssd / total
    empty = np.broadcast_to(total == 0, mean.shape)
    mean = np.where(empty, first.theta_, mean)
    variance = np.where(empty, 0.0, variance)

    # epsilon_ as one partial_fit over all rows: var_smoothing * max column variance, the
    # column moments pooled from the class moments.
    rows = total.sum()
    if rows > 0:
        overall = (total * mean).sum(axis=0) / rows
        column_var = (total * (variance + (mean - overall) ** 2)).sum(axis=0) / rows
        epsilon = first.var_smoothing * float(np.max(column_var))
    else:
        epsilon = float(first.epsilon_)

    merged = copy.deepcopy(first)
    dtype = np.asarray(first.theta_).dtype
    merged.class_count_ = np.asarray(total[:, 0], dtype=np.asarray(first.class_count_).dtype)
    merged.theta_ = np.asarray(mean, dtype=dtype)
    merged.var_ = np.asarray(variance + epsilon, dtype=dtype)
    merged.epsilon_ = np.asarray(epsilon, dtype=dtype)[()]
    if first.priors is None and merged.class_count_.sum() > 0:
        merged.class_prior_ = merged.class_count_ / merged.class_count_.sum()
    return merged


DISCRETE_NB_NOTES = (
    "Exact: class_count_ and feature_count_ summed (the round start counted once), "
    "log-probabilities recomputed by the estimator itself."
)
CATEGORICAL_NB_NOTES = (
    "Exact: category_count_ tables padded to the widest and summed. n_categories_ is the "
    "table width (one call over all rows); scikit-learn's chunked partial_fit keeps the "
    "last chunk's."
)
GAUSSIAN_NB_NOTES = (
    "Exact against one partial_fit over all rows: Chan pairwise merge of per-class "
    "moments, each replica's epsilon drift undone, epsilon_ from the pooled column "
    "variance. Exact when each replica makes one partial_fit call per round."
)
