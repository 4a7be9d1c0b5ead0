"""Merge rule for the linear SGD family: SGDClassifier, Perceptron, SGDRegressor, SGDOneClassSVM.

Model averaging (FedAvg): coefficients and intercepts are averaged with shares equal to the
rows each replica saw this round, read from its ``t_`` counter. ``t_`` becomes the global
count (1 + every row seen, as one serial pass), so the ``'optimal'`` and ``'invscaling'``
schedules continue where a serial run would be rather than restarting every round.

With ``average=`` (ASGD) the private buffers are merged too. ``_standard_*`` are the SGD
iterates: averaged like ``coef_``. ``_average_*`` are running means of the iterates since
step ``average``; a replica's holds ``m0`` iterates from before the round plus its own, so
the merge pools the iterates: ``sum_k m_k a_k - (K-1) m0 a0``, over the pooled count. The
public ``coef_``/``intercept_`` are then re-pointed at the averaged or the standard buffers
exactly as scikit-learn does at the end of ``partial_fit``, using the global ``t_``.
"""

import copy

import numpy as np

from taskdml.parallel.merge._registry import round_start
from taskdml.parallel.merge._util import proportions, seen_since_start, weighted_mean


def _averaged_count(t, average):
    """How many iterates the ASGD running mean holds once the counter has reached ``t``."""
    return max(0.0, float(t) - float(average))


def _pool_averages(replicas, name, start, t0, average, shares):
    """Pool the ASGD running means of ``name`` over all iterates of the round."""
    values = [getattr(r, name) for r in replicas]
    m0 = _averaged_count(t0, average)
    counts = [_averaged_count(r.t_, average) for r in replicas]
    pooled = m0 + sum(m - m0 for m in counts)
    if pooled <= 0:
        return np.array(values[0], copy=True)
    a0 = start.get(name)
    if a0 is None:
        # No record of the start: it held no iterates (m0 == 0), or the engine did not
        # call prepare_start; the replicas' weighted mean stands in for it.
        a0 = weighted_mean(values, shares)
    acc = (counts[0] / pooled) * np.asarray(values[0])
    for m, value in zip(counts[1:], values[1:]):
        acc = acc + (m / pooled) * np.asarray(value)
    if len(values) > 1 and m0 > 0:
        acc = acc - ((len(values) - 1) * m0 / pooled) * np.asarray(a0)
    return np.ascontiguousarray(acc, dtype=np.asarray(values[0]).dtype)


def merge_sgd(replicas, weights):
    """Average an SGD linear model's replicas; ``t_`` becomes the global row count."""
    start = round_start(replicas)
    first = replicas[0]
    t0 = float(start.get("t_", 1.0))
    seen = seen_since_start([r.t_ for r in replicas], t0, weights)
    shares = proportions(seen)
    merged = copy.deepcopy(first)
    merged.t_ = t0 + float(np.sum(np.asarray([r.t_ for r in replicas]) - t0))
    merged.n_iter_ = max(r.n_iter_ for r in replicas)
    one_class = hasattr(first, "offset_")
    is_classifier = hasattr(first, "classes_")

    if not first.average:
        merged.coef_ = weighted_mean([r.coef_ for r in replicas], shares)
        if one_class:
            merged.offset_ = weighted_mean([r.offset_ for r in replicas], shares)
        else:
            merged.intercept_ = weighted_mean([r.intercept_ for r in replicas], shares)
        return merged

    merged._standard_coef = weighted_mean([r._standard_coef for r in replicas], shares)
    merged._standard_intercept = weighted_mean([r._standard_intercept for r in replicas], shares)
    for name in ("_average_coef", "_average_intercept"):
        setattr(merged, name, _pool_averages(replicas, name, start, t0, first.average, shares))

    averaging = first.average <= merged.t_ - 1
    coef = merged._average_coef if averaging else merged._standard_coef
    intercept = merged._average_intercept if averaging else merged._standard_intercept
    if is_classifier:
        # Same aliasing as BaseSGDClassifier._fit_binary/_fit_multiclass: the next
        # partial_fit writes intercepts in place through intercept_.
        merged.coef_ = coef.reshape(1, -1) if len(first.classes_) == 2 else coef
        merged.intercept_ = intercept
    elif one_class:
        merged.coef_ = coef
        merged.offset_ = 1 - np.atleast_1d(intercept)
    else:
        merged.coef_ = coef
        merged.intercept_ = np.array(np.atleast_1d(intercept), copy=True)
    return merged


SGD_NOTES = (
    "Approximate (model averaging). coef_/intercept_ (offset_) averaged by rows seen, "
    "t_ = 1 + global rows, n_iter_ = max; with average=, the ASGD buffers are pooled over "
    "all iterates of the round. L1/elasticnet sparsity is not re-thresholded after "
    "averaging; the truncated-gradient state is per call in scikit-learn, so nothing of it "
    "is lost."
)
