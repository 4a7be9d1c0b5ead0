"""Merge rules for the neural networks: MLPClassifier, MLPRegressor and BernoulliRBM.

Averaging network weights is only sound from one shared initialisation (averaging
independently initialised networks destroys them: hidden units are permutation-symmetric),
so ``prepare`` initialises the global network once and every replica starts from it.

MLP: ``coefs_``/``intercepts_`` and the optimiser's moment estimates (Adam ``ms``/``vs``,
SGD ``velocities``) are averaged with shares equal to the rows each replica saw (its ``t_``
increment). The counters become global, as one serial pass would have them: ``t_`` (rows)
and Adam's ``t`` (mini-batch steps, which drives the bias correction) add up every replica's
increment. ``loss_curve_`` gains one entry per ``partial_fit`` call of the round, the
replicas' losses averaged, and ``best_loss_``, ``_no_improvement_count`` and the
``'adaptive'`` learning rate are replayed over the merged curve with scikit-learn's own
rule, so they are a function of the merged history alone.
"""

import copy
import math

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from taskdml._sklearn_compat import AdamOptimizer, SGDOptimizer
from taskdml.parallel._merge_registry import round_start
from taskdml.parallel._merge_util import proportions, seen_since_start, weighted_mean


def mlp_min_rows(estimator, n_features):
    """An MLP's smallest batch: an integer ``batch_size`` (a smaller chunk would be clipped,
    with a warning on every call); any batch with ``"auto"``."""
    return estimator.batch_size if isinstance(estimator.batch_size, int) else 1


def prepare_mlp(estimator, X, y, classes):
    """Initialise an MLP's weights once, without training on the chunk.

    ``partial_fit`` initialises and trains in one call, and it keeps a copy of the initial
    weights in ``_best_coefs``/``_best_intercepts`` (only early stopping, which
    ``partial_fit`` refuses, ever updates them). One call on the first chunk followed by a
    roll-back to those copies gives the initialised, untrained network with every
    attribute scikit-learn sets on the first call (classes, label binariser, layers).
    """
    if hasattr(estimator, "coefs_"):
        return copy.deepcopy(estimator)
    network = clone(estimator)
    if is_classifier(network):
        network.partial_fit(X, y, classes=classes)
    else:
        network.partial_fit(X, y)
    network.coefs_ = [c.copy() for c in network._best_coefs]
    network.intercepts_ = [i.copy() for i in network._best_intercepts]
    del network._optimizer
    del network.loss_
    network.t_ = 0
    network.n_iter_ = 0
    network.loss_curve_ = []
    network.best_loss_ = np.inf
    network._no_improvement_count = 0
    return network


def _merged_curve(replicas, prefix_length, shares):
    """The start's curve plus, per call of the round, the replicas' losses averaged."""
    curve = list(replicas[0].loss_curve_[:prefix_length])
    new = [list(r.loss_curve_[prefix_length:]) for r in replicas]
    for step in range(max(len(n) for n in new)):
        having = [k for k, n in enumerate(new) if len(n) > step]
        local = np.array([shares[k] for k in having])
        local = local / local.sum() if local.sum() > 0 else np.full(len(having), 1.0 / len(having))
        curve.append(float(sum(s * new[k][step] for s, k in zip(local, having))))
    return curve


def _replay_stopping(network, curve, optimizer):
    """best_loss_, _no_improvement_count and the adaptive rate after ``curve``.

    Mirrors MLP._update_no_improvement_count and SGDOptimizer.trigger_stopping.
    """
    best, count = np.inf, 0
    adaptive = isinstance(optimizer, SGDOptimizer) and optimizer.lr_schedule == "adaptive"
    rate = float(network.learning_rate_init)
    for loss in curve:
        count = count + 1 if loss > best - network.tol else 0
        best = min(best, loss)
        if count > network.n_iter_no_change and adaptive and rate > 1e-6:
            rate /= 5.0
            count = 0
    return best, count, rate


def merge_mlp(replicas, weights):
    """Average MLP replicas that started from one initialisation."""
    start = round_start(replicas)
    first = replicas[0]
    t0 = start.get("t_", 0)
    shares = proportions(seen_since_start([r.t_ for r in replicas], t0, weights))
    merged = copy.deepcopy(first)
    merged.coefs_ = [
        weighted_mean([r.coefs_[i] for r in replicas], shares) for i in range(len(first.coefs_))
    ]
    merged.intercepts_ = [
        weighted_mean([r.intercepts_[i] for r in replicas], shares)
        for i in range(len(first.intercepts_))
    ]
    merged.t_ = t0 + sum(r.t_ - t0 for r in replicas)
    merged.n_iter_ = max(r.n_iter_ for r in replicas)

    optimizer = getattr(merged, "_optimizer", None)
    if isinstance(optimizer, AdamOptimizer):
        steps0 = start.get("_optimizer.t", 0)
        optimizer.t = steps0 + sum(r._optimizer.t - steps0 for r in replicas)
        optimizer.ms = [
            weighted_mean([r._optimizer.ms[i] for r in replicas], shares)
            for i in range(len(optimizer.ms))
        ]
        optimizer.vs = [
            weighted_mean([r._optimizer.vs[i] for r in replicas], shares)
            for i in range(len(optimizer.vs))
        ]
        if optimizer.t > 0:
            optimizer.learning_rate = (
                optimizer.learning_rate_init
                * math.sqrt(1 - optimizer.beta_2**optimizer.t)
                / (1 - optimizer.beta_1**optimizer.t)
            )
    elif isinstance(optimizer, SGDOptimizer):
        optimizer.velocities = [
            weighted_mean([r._optimizer.velocities[i] for r in replicas], shares)
            for i in range(len(optimizer.velocities))
        ]

    if hasattr(first, "loss_curve_"):
        prefix = len(start.get("loss_curve_", []))
        merged.loss_curve_ = _merged_curve(replicas, prefix, shares)
        if len(merged.loss_curve_) > prefix:
            merged.loss_ = merged.loss_curve_[-1]
        best, count, rate = _replay_stopping(merged, merged.loss_curve_, optimizer)
        if getattr(first, "validation_scores_", None) is None:
            merged.best_loss_ = best
        merged._no_improvement_count = count
        if isinstance(optimizer, SGDOptimizer):
            if optimizer.lr_schedule == "adaptive":
                optimizer.learning_rate = rate
            elif optimizer.lr_schedule == "invscaling":
                optimizer.iteration_ends(merged.t_)
    return merged


def prepare_rbm(estimator, X, y, classes):
    """Draw BernoulliRBM's initial weights once, as its first partial_fit would."""
    if hasattr(estimator, "components_"):
        return copy.deepcopy(estimator)
    rbm = clone(estimator)
    X = validate_data(rbm, X, accept_sparse="csr", dtype=np.float64, reset=True)
    rbm.random_state_ = check_random_state(rbm.random_state)
    rbm.components_ = np.asarray(
        rbm.random_state_.normal(0, 0.01, (rbm.n_components, X.shape[1])), order="F"
    )
    rbm._n_features_out = rbm.components_.shape[0]
    rbm.intercept_hidden_ = np.zeros(rbm.n_components)
    rbm.intercept_visible_ = np.zeros(X.shape[1])
    rbm.h_samples_ = np.zeros((rbm.batch_size, rbm.n_components))
    return rbm


def merge_rbm(replicas, weights):
    """Average RBM weights; the persistent chain takes its rows from the replicas in turn."""
    shares = proportions(weights)
    merged = copy.deepcopy(replicas[0])
    merged.components_ = np.asfortranarray(weighted_mean([r.components_ for r in replicas], shares))
    for name in ("intercept_hidden_", "intercept_visible_"):
        setattr(merged, name, weighted_mean([getattr(r, name) for r in replicas], shares))
    # Replicas that saw no rows still hold the start's chain.
    chains = [r.h_samples_ for r, share in zip(replicas, shares) if share > 0] or [
        replicas[0].h_samples_
    ]
    merged.h_samples_ = np.stack([chains[i % len(chains)][i] for i in range(chains[0].shape[0])])
    return merged


MLP_NOTES = (
    "Approximate (model averaging from a shared init, which prepare draws). Weights and "
    "optimiser moments averaged by rows seen; t_ and Adam's step count made global; "
    "loss_curve_ gets one averaged entry per partial_fit call of the round; best_loss_, "
    "_no_improvement_count and the adaptive learning rate replayed over the merged curve."
)
RBM_NOTES = (
    "Approximate (weights averaged from a shared init, which prepare draws). The "
    "persistent Gibbs chain h_samples_ takes row i from replica i mod K."
)
