"""Exact merge rules for moment-based transformers: the scalers and IncrementalPCA.

Column means and variances are merged with Chan, Golub & LeVeque's pairwise formula written
in sums of squared deviations, where the round start (held by every replica) is counted
once: ``SSD = SSD_0 + sum_k (SSD_k - SSD_0)`` with each term taken about the global mean.
Per-feature counts (``n_samples_seen_`` as an array, when there are NaNs or weights) are
merged feature by feature. Minima and maxima are idempotent, so the start needs no care.

IncrementalPCA keeps a factor of the scatter matrix about its mean, ``C ~ V' S^2 V``, and its
``partial_fit`` truncates it to ``n_components`` rows after every batch: replicas that
truncate lose what each dropped, and no merge of their factors can recover it. So the rule
gives the replicas every component (:func:`prepare_incremental_pca`: ``n_components =
n_features``, the value asked for kept aside; a fitted start is completed to a basis with zero
singular values), their factors hold the whole scatter, the merge below is exact, and
:func:`finish_incremental_pca` truncates once, when the training hands the estimator back.

The merge: the global scatter is
``sum_k [C_k + n_k (mu_k - mu)(mu_k - mu)'] - (K-1) [C_0 + n_0 (mu_0 - mu)(mu_0 - mu)']``.
In round 1 (no start) that is the SVD of the stacked rows ``S_k V_k`` and
``sqrt(n_k)(mu_k - mu)`` -- the same construction as ``IncrementalPCA.partial_fit``'s
``mean_correction``. Later rounds subtract the start, so the rows are projected on an
orthonormal basis (QR) and the small difference of Gram matrices is diagonalised.

What the result equals. The estimator handed back equals batch PCA of every row the training
saw (a row counted once per epoch that saw it): ``components_``, ``singular_values_``,
``explained_variance_``, ``explained_variance_ratio_``, ``mean_`` and ``noise_variance_`` as
``sklearn.decomposition.PCA(n_components, svd_solver="full")`` fitted on those rows defines
them, ``var_`` and ``n_samples_seen_`` as IncrementalPCA's, up to the sign of each component
and to rounding: the later rounds' Gram difference makes an eigenvalue's error about
``eps * largest eigenvalue``, so a component is accurate to about that over its eigenvalue
gap, and directions of (near) zero variance are arbitrary, as in PCA. It is also scikit-learn's
serial ``partial_fit`` pass of the prepared start (every component kept), truncated at the
end, which is what :func:`taskdml.testing.check_merge` compares it with. It is *not*
scikit-learn's serial pass at ``n_components < n_features``, which truncates after every
batch and so depends on the batches and their order. Digits in 6 chunks of 299-300 rows,
``n_components=5``, 2 replicas, one round per block (``python benchmarks/ipca_exact.py``):
the merge's components differ from PCA's by at most 1.1e-14 and its explained variances by
6e-15 relatively (unexplained variance 0.455036, PCA's); the serial pass's components differ
from PCA's by up to 0.059 and its explained variances by 1.7 %, unexplained variance 0.457310
(0.455784 over 5 epochs); the rule before this one (replicas that truncate) gave 0.460550.

The cost of exactness: a replica holds ``n_features**2`` numbers (8 MB at 1,000 float64
features, 800 MB at 10,000; the round-start record holds as many again), each ``partial_fit``
is an SVD of ``(n_features + rows + 1) x n_features`` -- ``O((n_features + rows)
n_features**2)`` against ``O((n_components + rows) n_features**2)`` when truncating, under 2x
once blocks hold ``n_features`` rows -- and a merge of K replicas is ``O(K n_features**3)``.
Measured on 2 cores, blocks of ``n_features`` rows, ``n_components=5``: at 256 features a
``partial_fit`` takes 20 ms (10 ms truncating) and a merge of 2 replicas 32 ms; at 1,000
features 394 ms (227 ms) and 0.52 s.
An untrained replica's first batch must hold every component, so the rule's ``min_rows`` is
``n_features``: the engine joins smaller chunks into blocks of that many rows (all the data
is one block when it has fewer rows than features; the replicas then keep one component per
row, which still loses nothing). For very wide data,
``register_incremental_pca_merge(IncrementalPCA, every_component=False)`` registers the rule
whose replicas keep ``n_components`` (the merge of truncated factors, exact only when
``n_components = n_features``).
"""

import copy

import numpy as np
from scipy import linalg

from taskdml._compat import _handle_zeros_in_scale, _is_constant_feature
from taskdml.parallel.merge._registry import register_merge, round_start
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


_ASKED = "_taskdml_n_components"
"""Where a prepared IncrementalPCA keeps the ``n_components`` asked for while its replicas keep
every component; :func:`finish_incremental_pca` restores it."""
_NOT_PREPARED = object()


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


def ipca_every_component_min_rows(estimator, n_features):
    """The smallest batch of a replica that keeps every component: ``n_features`` rows for
    its first batch; any batch once fitted (:func:`prepare_incremental_pca` completes a fitted
    start to every component, and a later batch is stacked under them)."""
    if hasattr(estimator, "components_"):
        return 1
    return max(n_features, estimator.n_components or 0)


def _complete_basis(ipca):
    """Complete a fitted IncrementalPCA's components to a basis of the feature space, with
    zero singular values: the same scatter, factored with every component."""
    components = np.asarray(ipca.components_)
    kept, n_features = components.shape
    if kept >= n_features:
        return
    dtype = components.dtype
    basis, _ = linalg.qr(components.T.astype(float), mode="full", check_finite=False)
    rest = _flip_rows(basis[:, kept:].T).astype(dtype)
    ipca.components_ = np.ascontiguousarray(np.vstack([components, rest]))
    for name in ("singular_values_", "explained_variance_", "explained_variance_ratio_"):
        value = np.asarray(getattr(ipca, name))
        setattr(ipca, name, np.concatenate([value, np.zeros(n_features - kept, value.dtype)]))
    ipca.n_components_ = n_features


def prepare_incremental_pca(estimator, X, y, classes):
    """The start of replicas that keep every component (see the module docstring).

    ``n_components`` becomes the number of features (of the first chunk's rows, when it has
    fewer rows than features: then all the data is one block and its rows span no more), and
    the value asked for waits in ``_taskdml_n_components`` for
    :func:`finish_incremental_pca`. A fitted start (a warm start) is completed to a basis with
    zero singular values: it carries the components it kept, what it dropped is gone. A
    start prepared already (a training's own global estimator) is copied as it is.
    """
    ipca = copy.deepcopy(estimator)
    if hasattr(ipca, _ASKED):
        return ipca
    asked = ipca.n_components
    setattr(ipca, _ASKED, asked)
    if hasattr(ipca, "components_"):
        _complete_basis(ipca)
        ipca.n_components = ipca.components_.shape[0]
    else:
        n_samples, n_features = X.shape[0], X.shape[1]
        ipca.n_components = max(asked or 0, min(n_features, n_samples))
    return ipca


def finish_incremental_pca(estimator):
    """Truncate, in place, a training's IncrementalPCA to the ``n_components`` asked for.

    The attributes are PCA's for the kept components; ``noise_variance_`` is the mean of the
    dropped eigenvalues, over the ``min(n_samples_seen_, n_features)`` a PCA of the rows has.
    An estimator :func:`prepare_incremental_pca` never saw, or one finished already, is left
    alone.
    """
    asked = estimator.__dict__.pop(_ASKED, _NOT_PREPARED)
    if asked is _NOT_PREPARED:
        return
    estimator.n_components = asked
    if not hasattr(estimator, "components_"):
        return
    available, n_features = estimator.components_.shape
    # PCA's count of eigenvalues; those past the components kept (more than the rows span,
    # when there are fewer rows than features) are zero.
    total = min(int(np.max(estimator.n_samples_seen_)), n_features)
    keep = min(available, total if asked is None else asked)
    dropped = np.asarray(estimator.explained_variance_, dtype=float)[keep:]
    estimator.noise_variance_ = float(dropped.sum() / (total - keep)) if keep < total else 0.0
    estimator.n_components_ = keep
    estimator.components_ = np.ascontiguousarray(estimator.components_[:keep])
    for name in ("singular_values_", "explained_variance_", "explained_variance_ratio_"):
        setattr(estimator, name, np.array(getattr(estimator, name)[:keep]))


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
    "Exact at any n_components: prepare gives the replicas every component (n_components = "
    "n_features, blocks of n_features rows), the merge pools their scatter matrices, and the "
    "estimator handed back is truncated once: batch PCA of every row seen, to rounding. Not "
    "scikit-learn's serial partial_fit, which truncates after every batch. Replicas hold "
    "n_features**2 numbers."
)
IPCA_TRUNCATED_NOTES = (
    "Exact when n_components = n_features (up to floating point; later rounds diagonalise "
    "a Gram matrix, which squares the condition number of small singular values). With "
    "fewer components each replica's truncation error remains, as in chunked partial_fit. "
    "noise_variance_ is the replicas' estimates weighted by rows."
)


IPCA_START = ("n_samples_seen_", "mean_", "var_", "components_", "singular_values_")


def register_incremental_pca_merge(estimator_class, *, every_component=True):
    """Register the IncrementalPCA merge rule for *estimator_class*, exact or truncating.

    ``IncrementalPCA`` has the exact rule (family ``"incremental-pca"``) from the start: its
    replicas keep every component and the estimator handed back is truncated once (see the
    module docstring for what it equals and what it costs). ``every_component=False``
    registers the rule whose replicas keep ``n_components`` (family
    ``"incremental-pca-truncated"``, the rule before the exact one): ``n_features`` times
    less memory per replica, approximate when ``n_components < n_features``. Registering
    affects every later training in this process; register it for a subclass to change one
    model only.

    Parameters
    ----------
    estimator_class : type
        ``IncrementalPCA`` or a subclass.
    every_component : bool, default=True
        Replicas keep every component, and the merge is exact.

    Returns
    -------
    MergeRule
        The registered rule.

    Examples
    --------
    >>> from sklearn.decomposition import IncrementalPCA
    >>> from taskdml.parallel import get_merge_rule, register_incremental_pca_merge
    >>> class WideIncrementalPCA(IncrementalPCA):
    ...     pass
    >>> register_incremental_pca_merge(WideIncrementalPCA, every_component=False).family
    'incremental-pca-truncated'
    >>> get_merge_rule(IncrementalPCA(n_components=5)).exact
    True
    """
    if every_component:
        return register_merge(
            estimator_class,
            merge_incremental_pca,
            exact=True,
            prepare=prepare_incremental_pca,
            finish=finish_incremental_pca,
            family="incremental-pca",
            notes=IPCA_NOTES,
            start_state=IPCA_START,
            min_rows=ipca_every_component_min_rows,
        )
    return register_merge(
        estimator_class,
        merge_incremental_pca,
        exact=True,
        exact_when=ipca_keeps_every_component,
        family="incremental-pca-truncated",
        notes=IPCA_TRUNCATED_NOTES,
        start_state=IPCA_START,
        min_rows=ipca_min_rows,
    )
