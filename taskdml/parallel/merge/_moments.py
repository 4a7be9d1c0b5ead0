"""Exact merge rules for moment-based transformers: the scalers and IncrementalPCA.

Column means and variances are merged with Chan, Golub & LeVeque's pairwise formula written
in sums of squared deviations, where the round start (held by every replica) is counted
once: ``SSD = SSD_0 + sum_k (SSD_k - SSD_0)`` with each term taken about the global mean.
Per-feature counts (``n_samples_seen_`` as an array, when there are NaNs or weights) are
merged feature by feature. Minima and maxima are idempotent, so the start needs no care.

IncrementalPCA keeps a truncated factor of the scatter matrix about its mean:
``C_k ~ V_k' S_k^2 V_k``. The global scatter is
``sum_k [C_k + n_k (mu_k - mu)(mu_k - mu)'] - (K-1) [C_0 + n_0 (mu_0 - mu)(mu_0 - mu)']``.
In round 1 (no start) that is the SVD of the stacked rows ``S_k V_k`` and
``sqrt(n_k)(mu_k - mu)`` -- the same construction as ``IncrementalPCA.partial_fit``'s
``mean_correction``. Later rounds subtract the start, so the rows are projected on an
orthonormal basis (QR) and the small difference of Gram matrices is diagonalised. Exact
when every replica keeps all components (``n_components = n_features``); with fewer, the
truncation error of each replica remains, as in chunked ``partial_fit``.
"""

import copy

import numpy as np
from scipy import linalg

from taskdml._compat import _handle_zeros_in_scale, _is_constant_feature
from taskdml.parallel.merge._registry import round_start
from taskdml.parallel.merge._util import proportions, sum_of_deltas


def pooled_moments(counts, means, variances, n0, mean0, var0):
    """Merge per-column ``(count, mean, variance)`` of K replicas, the start counted once.

    ``counts``, ``means`` and ``variances`` have shape ``(K, n_features)``; ``variances``
    may be None. Columns a replica never saw (count 0) do not contribute, even if their
    mean is NaN. Returns ``(count, mean, variance)``.
    """
    n0 = np.asarray(n0, dtype=float)
    total = n0 + (counts - n0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        seen = counts > 0
        start_seen = n0 > 0
        start_sum = np.where(start_seen, n0 * mean0, 0.0)
        sums = np.where(seen, counts * means, 0.0)
        mean = (start_sum + (sums - start_sum).sum(axis=0)) / total
        if variances is None:
            return total, mean, None
        start_ssd = np.where(start_seen, n0 * var0 + n0 * (mean0 - mean) ** 2, 0.0)
        ssd = np.where(seen, counts * variances + counts * (means - mean) ** 2, 0.0)
        variance = (start_ssd + (ssd - start_ssd).sum(axis=0)) / total
    return total, mean, variance


def _per_feature(value, n_features):
    return np.broadcast_to(np.asarray(value, dtype=float), (n_features,))


def _counts_like(total, reference_values):
    """``total`` in the dtype the estimator uses, reduced to a scalar when uniform."""
    dtype = np.result_type(*[np.asarray(v).dtype for v in reference_values])
    total = np.asarray(np.rint(total) if np.issubdtype(dtype, np.integer) else total, dtype=dtype)
    if total.ndim and total.max() == total.min():
        return total[0]
    return total


def merge_standard_scaler(replicas, weights):
    """Chan-merge StandardScaler's means and variances, per feature."""
    start = round_start(replicas)
    first = replicas[0]
    d = first.n_features_in_
    counts = np.stack([_per_feature(r.n_samples_seen_, d) for r in replicas])
    n0 = _per_feature(start.get("n_samples_seen_", 0), d)
    merged = copy.deepcopy(first)
    if first.mean_ is not None:
        means = np.stack([_per_feature(r.mean_, d) for r in replicas])
        variances = None
        if first.var_ is not None:
            variances = np.stack([_per_feature(r.var_, d) for r in replicas])
        mean0 = _per_feature(start.get("mean_", 0.0), d)
        var0 = _per_feature(start.get("var_", 0.0) if start.get("var_") is not None else 0.0, d)
        total, mean, variance = pooled_moments(counts, means, variances, n0, mean0, var0)
        merged.mean_ = mean.astype(np.asarray(first.mean_).dtype, copy=False)
        merged.var_ = None if variance is None else variance.astype(first.var_.dtype, copy=False)
    else:
        total = n0 + (counts - n0).sum(axis=0)
    merged.n_samples_seen_ = _counts_like(total, [r.n_samples_seen_ for r in replicas])
    if first.with_std:
        constant = _is_constant_feature(merged.var_, merged.mean_, merged.n_samples_seen_)
        merged.scale_ = _handle_zeros_in_scale(
            np.sqrt(merged.var_), copy=False, constant_mask=constant
        )
    return merged


def _reduce_elementwise(op, arrays):
    result = np.array(arrays[0], copy=True)
    for array in arrays[1:]:
        result = op(result, array)
    return result


def _row_count(replicas, start):
    return int(sum_of_deltas([r.n_samples_seen_ for r in replicas], start.get("n_samples_seen_")))


def merge_min_max_scaler(replicas, weights):
    """Elementwise min and max; NaN propagates as in MinMaxScaler.partial_fit."""
    start = round_start(replicas)
    merged = copy.deepcopy(replicas[0])
    data_min = _reduce_elementwise(np.minimum, [r.data_min_ for r in replicas])
    data_max = _reduce_elementwise(np.maximum, [r.data_max_ for r in replicas])
    low, high = (np.asarray(v, dtype=data_min.dtype) for v in merged.feature_range)
    data_range = data_max - data_min
    merged.scale_ = (high - low) / _handle_zeros_in_scale(data_range, copy=True)
    merged.min_ = low - data_min * merged.scale_
    merged.data_min_, merged.data_max_, merged.data_range_ = data_min, data_max, data_range
    merged.n_samples_seen_ = _row_count(replicas, start)
    return merged


def merge_max_abs_scaler(replicas, weights):
    """Elementwise maximum of the absolute values."""
    start = round_start(replicas)
    merged = copy.deepcopy(replicas[0])
    merged.max_abs_ = _reduce_elementwise(np.maximum, [r.max_abs_ for r in replicas])
    merged.scale_ = _handle_zeros_in_scale(merged.max_abs_, copy=True)
    merged.n_samples_seen_ = _row_count(replicas, start)
    return merged


def _flip_rows(components):
    """svd_flip(u_based_decision=False): the largest entry of each row positive."""
    largest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(components.shape[0]), largest])
    signs[signs == 0] = 1.0
    return components * signs[:, None]


def _scatter_rows(singular_values, components, count, mean, global_mean):
    return np.vstack(
        [
            np.asarray(singular_values)[:, None] * components,
            np.sqrt(count) * (np.asarray(mean) - global_mean)[None, :],
        ]
    )


def ipca_keeps_every_component(estimator):
    """Whether IncrementalPCA keeps all components (its merge is then exact); None if unknown."""
    n_features = getattr(estimator, "n_features_in_", None)
    if estimator.n_components is None:
        n_components = getattr(estimator, "n_components_", None)
    else:
        n_components = estimator.n_components
    if n_features is None or n_components is None:
        return None
    return n_components >= n_features


def ipca_min_rows(estimator, n_features):
    """IncrementalPCA's smallest batch: ``n_components`` rows (every component of the first
    batch's SVD); without ``n_components``, every feature, or the first batch truncates."""
    if estimator.n_components is not None:
        return estimator.n_components
    return getattr(estimator, "n_components_", n_features)


def merge_incremental_pca(replicas, weights):
    """Merge IncrementalPCA replicas through their scatter matrices."""
    start = round_start(replicas)
    first = replicas[0]
    d = first.n_features_in_
    counts = np.stack([_per_feature(r.n_samples_seen_, d) for r in replicas])
    means = np.stack([np.asarray(r.mean_, dtype=float) for r in replicas])
    variances = np.stack([np.asarray(r.var_, dtype=float) for r in replicas])
    n0 = float(start.get("n_samples_seen_", 0))
    mean0 = _per_feature(start.get("mean_", 0.0), d)
    var0 = _per_feature(start.get("var_", 0.0), d)
    total, mean, variance = pooled_moments(counts, means, variances, n0, mean0, var0)
    n_total = float(total[0])

    positive = np.vstack(
        [
            _scatter_rows(r.singular_values_, r.components_, float(c[0]), m, mean)
            for r, c, m in zip(replicas, counts, means)
        ]
    )
    if len(replicas) > 1 and n0 > 0:
        negative = np.sqrt(len(replicas) - 1) * _scatter_rows(
            start["singular_values_"], start["components_"], n0, mean0, mean
        )
        stacked = np.vstack([positive, negative])
        q, r = linalg.qr(stacked.T, mode="economic", check_finite=False)
        r_pos, r_neg = r[:, : positive.shape[0]], r[:, positive.shape[0] :]
        eigenvalues, eigenvectors = linalg.eigh(r_pos @ r_pos.T - r_neg @ r_neg.T)
        order = np.argsort(eigenvalues)[::-1]
        singular_values = np.sqrt(np.clip(eigenvalues[order], 0.0, None))
        components = (q @ eigenvectors[:, order]).T
    else:
        _, singular_values, components = linalg.svd(
            positive, full_matrices=False, check_finite=False
        )
    components = _flip_rows(components)

    n_components = first.n_components
    if n_components is None:
        n_components = max(r.n_components_ for r in replicas)
    dtype = first.components_.dtype
    explained_variance = singular_values**2 / (n_total - 1)
    merged = copy.deepcopy(first)
    merged.n_components_ = n_components
    merged.components_ = np.ascontiguousarray(components[:n_components], dtype=dtype)
    merged.singular_values_ = singular_values[:n_components].astype(dtype)
    merged.mean_ = mean.astype(np.asarray(first.mean_).dtype)
    merged.var_ = variance.astype(np.asarray(first.var_).dtype)
    merged.n_samples_seen_ = _counts_like(total, [r.n_samples_seen_ for r in replicas])
    merged.explained_variance_ = explained_variance[:n_components].astype(dtype)
    merged.explained_variance_ratio_ = (
        singular_values[:n_components] ** 2 / np.sum(variance * n_total)
    ).astype(dtype)
    # The variance each replica discarded is gone from the factors, so the merged noise is
    # the replicas' estimates weighted by the rows they saw this round (exact with one
    # replica, 0 without truncation).
    shares = proportions(counts[:, 0] - n0)
    merged.noise_variance_ = float(sum(s * r.noise_variance_ for s, r in zip(shares, replicas)))
    return merged


STANDARD_SCALER_NOTES = (
    "Exact: Chan pairwise merge of mean_/var_ per feature (n_samples_seen_ per feature "
    "when NaNs or sample weights made it an array), scale_ recomputed as scikit-learn does."
)
MIN_MAX_NOTES = "Exact: elementwise min/max, scale_ and min_ recomputed, rows summed."
MAX_ABS_NOTES = "Exact: elementwise max of |x|, scale_ recomputed, rows summed."
IPCA_NOTES = (
    "Exact when n_components = n_features (up to floating point; later rounds diagonalise "
    "a Gram matrix, which squares the condition number of small singular values). With "
    "fewer components each replica's truncation error remains, as in chunked partial_fit. "
    "noise_variance_ is the replicas' estimates weighted by rows."
)
