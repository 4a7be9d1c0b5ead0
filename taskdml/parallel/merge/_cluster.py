"""Merge rule for MiniBatchKMeans.

k-means centres are only comparable between replicas if they started from the same
centres (labels are permutation-ambiguous), so ``prepare`` runs the initialisation
(k-means++ or the given ``init``) once on the first chunk, keeping the best of ``n_init``
draws on a validation sample as ``fit`` does. Replicas then step in mini-batches of
``batch_size`` rows (the rule's ``batch_rows``), as ``fit`` does, not one step per chunk.

Sculley's mini-batch update keeps each centre at the weighted mean of the points it has
absorbed, its weight in ``_counts``. A replica holds ``W_k c_k = W_0 c_0 + (points it added)``,
so the round's points are pooled exactly as a serial pass with the same assignments would:
``c = (W_0 c_0 + sum_k (W_k c_k - W_0 c_0)) / (W_0 + sum_k (W_k - W_0))``. It is approximate
because a serial pass would have assigned the later points to moved centres, and because a
replica may reassign a starving centre to a random point (its count is then reset): a
replica whose count for a centre went down contributes nothing to that centre.
"""

import copy

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_array, check_random_state
from sklearn.utils.extmath import row_norms
from sklearn.utils.validation import validate_data

from taskdml import _compat
from taskdml._compat import (
    _check_sample_weight,
    _is_arraylike_not_scalar,
    _openmp_effective_n_threads,
)
from taskdml.parallel.merge._registry import round_start


def minibatch_kmeans_min_rows(estimator, n_features):
    """MiniBatchKMeans' smallest batch: ``n_clusters`` rows (its first batch draws the centres)."""
    return estimator.n_clusters


def prepare_minibatch_kmeans(estimator, X, y, classes):
    """Initialise the centres once, as MiniBatchKMeans' first partial_fit does, untrained."""
    if hasattr(estimator, "cluster_centers_"):
        return copy.deepcopy(estimator)
    km = clone(estimator)
    X = validate_data(
        km,
        X,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        order="C",
        accept_large_sparse=False,
        reset=True,
    )
    km._random_state = check_random_state(km.random_state)
    sample_weight = _check_sample_weight(None, X, dtype=X.dtype)
    km.n_steps_ = 0
    _compat.check_params_vs_input(km, X)
    km._n_threads = _openmp_effective_n_threads()
    init = km.init
    if _is_arraylike_not_scalar(init):
        init = check_array(init, dtype=X.dtype, copy=True, order="C")
        _compat.validate_center_shape(km, X, init)
    _compat.check_mkl_vcomp(km, X, X.shape[0])
    km.cluster_centers_ = _best_init(km, X, init, sample_weight)
    km._counts = np.zeros(km.n_clusters, dtype=X.dtype)
    km._n_since_last_reassign = 0
    km._n_features_out = km.cluster_centers_.shape[0]
    return km


def _best_init(km, X, init, sample_weight):
    """The best of ``n_init`` initialisations, as ``MiniBatchKMeans.fit`` chooses it: each
    drawn from a subsample of ``init_size`` rows, the one of least inertia on a validation
    sample of ``init_size`` rows kept (``partial_fit`` draws one; a replica's ``fit`` is
    what DataParallel stands in for)."""
    random_state = km._random_state
    valid = random_state.randint(0, X.shape[0], km._init_size)
    X_valid, weight_valid = X[valid], sample_weight[valid]
    norms = row_norms(X, squared=True)
    valid_norms = norms[valid]
    best, best_inertia = None, np.inf
    for _ in range(km._n_init):
        centres = _compat.init_centroids(
            km,
            X,
            x_squared_norms=norms,
            init=init,
            random_state=random_state,
            init_size=km._init_size,
            sample_weight=sample_weight,
        )
        distances = valid_norms[:, None] - 2 * np.asarray(X_valid @ centres.T)
        distances += (centres**2).sum(axis=1)
        inertia = float(weight_valid @ np.maximum(distances.min(axis=1), 0))
        if inertia < best_inertia:
            best, best_inertia = centres, inertia
    return best


def merge_minibatch_kmeans(replicas, weights):
    """Pool the points each replica's centres absorbed this round."""
    start = round_start(replicas)
    first = replicas[0]
    counts = np.stack([np.asarray(r._counts, dtype=float) for r in replicas])
    centres = np.stack([np.asarray(r.cluster_centers_, dtype=float) for r in replicas])
    counts0 = np.asarray(start.get("_counts", np.zeros(counts.shape[1])), dtype=float)
    centres0 = np.asarray(start.get("cluster_centers_", np.zeros(centres.shape[1:])), dtype=float)

    gained = counts - counts0
    took_points = gained > 0
    start_mass = counts0[:, None] * centres0
    added_mass = np.where(took_points[:, :, None], counts[:, :, None] * centres - start_mass, 0.0)
    total = counts0 + np.where(took_points, gained, 0.0).sum(axis=0)
    mass = start_mass + added_mass.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        merged_centres = np.where(total[:, None] > 0, mass / total[:, None], centres[0])

    merged = copy.deepcopy(first)
    merged.cluster_centers_ = np.ascontiguousarray(
        merged_centres, dtype=first.cluster_centers_.dtype
    )
    merged._counts = total.astype(first._counts.dtype)
    steps0 = start.get("n_steps_", 0)
    merged.n_steps_ = steps0 + sum(r.n_steps_ - steps0 for r in replicas)
    stepped = [r for r in replicas if r.n_steps_ > steps0] or [first]
    # The most recent reassignment anywhere resets the clock (min over replicas).
    merged._n_since_last_reassign = min(r._n_since_last_reassign for r in stepped)
    if hasattr(first, "labels_"):
        # Labels and inertia of the last mini-batch of every replica, in replica order.
        merged.labels_ = np.concatenate([r.labels_ for r in stepped])
        merged.inertia_ = sum(r.inertia_ for r in stepped)
    return merged


MINIBATCH_KMEANS_NOTES = (
    "Approximate. prepare draws the initial centres once; each centre pools the points "
    "the replicas assigned to it (weights from _counts, the start counted once); "
    "n_steps_ summed; a replica that reassigned a centre (its count went down) does not "
    "contribute to it; labels_/inertia_ are those of each replica's last mini-batch."
)
