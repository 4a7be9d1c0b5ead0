"""Generated data sets whose values do not depend on how they are chunked.

``make_classification``, ``make_regression`` and ``make_blobs`` re-implement scikit-learn's
generators in two parts. The *global model* (centroids, covariance and mixing matrices,
coefficients) is drawn once, on the client, from ``SeedSequence(seed, spawn_key=(0,))`` and
shipped to the cluster as a single graph key. The *samples* are drawn in fixed internal blocks
of ``_BLOCK_ROWS`` rows; block ``b`` has its own generator seeded from
``SeedSequence(seed, spawn_key=(1, b))``. A chunk task generates the blocks overlapping its row
range and slices them, so the values depend only on the seed and the global row index, never on
``chunk_size`` or on the workers. (``_BLOCK_ROWS`` is part of the output's definition: changing
it changes every generated value.) Cluster membership is assigned by a golden-ratio Weyl
sequence over the global row index, which gives near-exact class proportions in every block,
then shuffled within the block, so every chunk holds every class. Rows are not shuffled globally
and features keep scikit-learn's ``shuffle=False`` order.
"""

import dataclasses
import math
import numbers

import numpy as np

from taskdml.datasets._common import (
    _GOLDEN,
    _check_int,
    _check_real,
    _feature_names,
    _paired_arrays,
    _resolve_seed,
    _row_chunks,
    _xy_dataset,
)
from taskdml.exceptions import DataError

# Rows per internal random block. Part of the generators' output definition: never change it.
_BLOCK_ROWS = 4096


def _model_rng(seed):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))


def _block_rng(seed, block):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, block)))


def _weyl_strata(start, stop, cumulative):
    """Stratum of each global row in ``[start, stop)`` for cumulative probabilities.

    Row ``r`` takes the stratum of ``frac((r + 1) * golden_ratio)``, computed exactly in
    uint64 arithmetic. The sequence is equidistributed with low discrepancy, so any run of
    rows holds each stratum in almost exactly its proportion.
    """
    rows = np.arange(start, stop, dtype=np.uint64) + np.uint64(1)
    u = (rows * _GOLDEN >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.minimum(np.searchsorted(cumulative, u, side="right"), len(cumulative) - 1)


def _shuffled_strata(rng, start, stop, probabilities):
    cumulative = np.cumsum(probabilities)
    cumulative /= cumulative[-1]
    return rng.permutation(_weyl_strata(start, stop, cumulative))


def _generated_rows(block_rows, model, start, stop):
    """Rows ``[start, stop)`` of a generated data set: the task behind every chunk.

    Generates each internal block overlapping the range with *block_rows* and keeps the
    overlap, so a row's values never depend on which chunk asks for it.
    """
    X = np.empty((stop - start, model.n_features), dtype=np.float64)
    y = None
    for block in range(start // _BLOCK_ROWS, (stop - 1) // _BLOCK_ROWS + 1):
        block_start = block * _BLOCK_ROWS
        block_stop = min(block_start + _BLOCK_ROWS, model.n_samples)
        X_block, y_block = block_rows(model, _block_rng(model.seed, block), block_start, block_stop)
        lo, hi = max(start, block_start), min(stop, block_stop)
        if y is None:
            y = np.empty(stop - start, dtype=y_block.dtype)
        X[lo - start : hi - start] = X_block[lo - block_start : hi - block_start]
        y[lo - start : hi - start] = y_block[lo - block_start : hi - block_start]
    return X, y


@dataclasses.dataclass(frozen=True, eq=False)
class _ClassificationModel:
    seed: int
    n_samples: int
    n_features: int
    n_classes: int
    cluster_probabilities: np.ndarray
    centroids: np.ndarray  # (n_clusters, n_informative)
    covariances: np.ndarray  # (n_clusters, n_informative, n_informative)
    redundant: np.ndarray  # (n_informative, n_redundant)
    repeated: np.ndarray  # column indices copied into the repeated features
    n_useless: int
    flip_y: float
    shift: np.ndarray
    scale: np.ndarray


def _classification_block(model, rng, start, stop):
    n_rows = stop - start
    n_informative = model.centroids.shape[1]
    n_redundant = model.redundant.shape[1]
    cluster = _shuffled_strata(rng, start, stop, model.cluster_probabilities)
    informative = rng.standard_normal((n_rows, n_informative))
    for k in range(len(model.centroids)):
        in_k = cluster == k
        informative[in_k] = informative[in_k] @ model.covariances[k] + model.centroids[k]
    X = np.empty((n_rows, model.n_features))
    X[:, :n_informative] = informative
    X[:, n_informative : n_informative + n_redundant] = informative @ model.redundant
    used = n_informative + n_redundant
    X[:, used : used + len(model.repeated)] = X[:, model.repeated]
    if model.n_useless:
        X[:, model.n_features - model.n_useless :] = rng.standard_normal((n_rows, model.n_useless))
    y = (cluster % model.n_classes).astype(np.int64)
    if model.flip_y > 0:
        flip = rng.random(n_rows) < model.flip_y
        y[flip] = rng.integers(model.n_classes, size=int(flip.sum()))
    X += model.shift
    X *= model.scale
    return X, y


@dataclasses.dataclass(frozen=True, eq=False)
class _RegressionModel:
    seed: int
    n_samples: int
    n_features: int
    coef: np.ndarray
    bias: float
    noise: float


def _regression_block(model, rng, start, stop):
    X = rng.standard_normal((stop - start, model.n_features))
    y = X @ model.coef + model.bias
    if model.noise > 0:
        y += rng.normal(scale=model.noise, size=stop - start)
    return X, y


@dataclasses.dataclass(frozen=True, eq=False)
class _BlobsModel:
    seed: int
    n_samples: int
    n_features: int
    centers: np.ndarray
    cluster_std: np.ndarray


def _blobs_block(model, rng, start, stop):
    n_centers = len(model.centers)
    cluster = _shuffled_strata(rng, start, stop, np.full(n_centers, 1.0 / n_centers))
    X = rng.standard_normal((stop - start, model.n_features))
    X *= model.cluster_std[cluster, None]
    X += model.centers[cluster]
    return X, cluster.astype(np.int64)


def _hypercube_vertices(n_vertices, dimensions, rng):
    """Distinct binary vectors of length *dimensions* (scikit-learn's ``_generate_hypercube``)."""
    if dimensions > 30:
        return np.hstack(
            [
                rng.integers(2, size=(n_vertices, dimensions - 30)),
                _hypercube_vertices(n_vertices, 30, rng),
            ]
        )
    codes = rng.choice(2**dimensions, size=n_vertices, replace=False).astype(">u4")
    return np.unpackbits(codes.view(">u1")).reshape((-1, 32))[:, -dimensions:]


def make_classification(
    n_samples=100_000,
    n_features=20,
    *,
    n_informative=2,
    n_redundant=2,
    n_repeated=0,
    n_classes=2,
    n_clusters_per_class=2,
    weights=None,
    flip_y=0.01,
    class_sep=1.0,
    hypercube=True,
    shift=0.0,
    scale=1.0,
    chunk_size=10_000,
    random_state=None,
):
    """Generate a random n-class classification problem, chunk by chunk on the cluster.

    The same model as :func:`sklearn.datasets.make_classification`: each class is made of
    ``n_clusters_per_class`` normally distributed clusters placed on the vertices of a
    hypercube in the informative subspace, each with its own random covariance; redundant
    features are random linear combinations of the informative ones, repeated features are
    copies, and the rest is noise. Features come in that order (scikit-learn's
    ``shuffle=False``); rows are not shuffled globally, but classes are mixed within every
    internal block of 4096 rows, so every chunk holds every class.

    Parameters
    ----------
    n_samples : int, default=100_000
        Number of rows. Any size: nothing of this size is built on the client.
    n_features : int, default=20
        Total number of features.
    n_informative, n_redundant, n_repeated : int
        Numbers of informative, redundant and repeated features (see scikit-learn).
    n_classes : int, default=2
        Number of classes.
    n_clusters_per_class : int, default=2
        Number of clusters per class; ``n_classes * n_clusters_per_class`` must be at most
        ``2 ** n_informative``.
    weights : sequence of float, optional
        Proportion of rows in each class (``n_classes`` or ``n_classes - 1`` values, the last
        one then being the remainder). Proportions hold almost exactly, before ``flip_y``.
    flip_y : float, default=0.01
        Fraction of rows whose label is replaced by a uniformly random class.
    class_sep : float, default=1.0
        Half the side of the hypercube: larger values make the task easier.
    hypercube : bool, default=True
        Place clusters on hypercube vertices; if False, on a random polytope.
    shift, scale : float, array of shape (n_features,) or None
        Applied to ``X`` after generation (``X = (X + shift) * scale``); ``None`` draws them
        at random as scikit-learn does.
    chunk_size : int, default=10_000
        Rows per chunk. The values do not depend on it.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    xarray.Dataset
        ``X`` (float64, ``("sample", "feature")``), ``y`` (int64 class labels, ``("sample",)``)
        and a ``feature`` coordinate ``x0, x1, ...``.

    Examples
    --------
    >>> from taskdml.datasets import make_classification
    >>> data = make_classification(1_000, 5, n_classes=3, n_clusters_per_class=1,
    ...                            chunk_size=300, random_state=0)
    >>> data.X.shape, data.X.chunks
    ((1000, 5), ((300, 300, 300, 100), (5,)))
    >>> sorted(set(data.y.values.tolist()))
    [0, 1, 2]
    >>> bool((make_classification(1_000, 5, n_classes=3, n_clusters_per_class=1,
    ...       chunk_size=77, random_state=0).X == data.X).all())
    True
    """
    fn = "make_classification"
    n_samples = _check_int(fn, "n_samples", n_samples, minimum=1)
    n_features = _check_int(fn, "n_features", n_features, minimum=1)
    n_informative = _check_int(fn, "n_informative", n_informative, minimum=1)
    n_redundant = _check_int(fn, "n_redundant", n_redundant, minimum=0)
    n_repeated = _check_int(fn, "n_repeated", n_repeated, minimum=0)
    n_classes = _check_int(fn, "n_classes", n_classes, minimum=1)
    n_clusters_per_class = _check_int(fn, "n_clusters_per_class", n_clusters_per_class, minimum=1)
    flip_y = _check_real(fn, "flip_y", flip_y, low=0.0, high=1.0)
    class_sep = _check_real(fn, "class_sep", class_sep)
    chunk_size = _check_int(fn, "chunk_size", chunk_size, minimum=1)
    if n_informative + n_redundant + n_repeated > n_features:
        raise DataError(
            f"{fn}: n_informative + n_redundant + n_repeated must be <= n_features={n_features}, "
            f"got {n_informative} + {n_redundant} + {n_repeated} = "
            f"{n_informative + n_redundant + n_repeated}. Raise n_features or lower the others."
        )
    n_clusters = n_classes * n_clusters_per_class
    if n_informative < np.log2(n_clusters):
        raise DataError(
            f"{fn}: n_classes * n_clusters_per_class must be <= 2 ** n_informative, got "
            f"{n_classes} * {n_clusters_per_class} = {n_clusters} > 2 ** {n_informative}. "
            f"Raise n_informative to at least {math.ceil(np.log2(n_clusters))}."
        )
    if weights is None:
        weights = np.full(n_classes, 1.0 / n_classes)
    else:
        weights = np.asarray(weights, dtype=np.float64).ravel()
        if len(weights) == n_classes - 1:
            weights = np.append(weights, 1.0 - weights.sum())
        if len(weights) != n_classes or not np.all(np.isfinite(weights)) or (weights < 0).any():
            raise DataError(
                f"{fn}: weights must hold n_classes={n_classes} (or n_classes - 1) non-negative "
                f"proportions, got {weights.tolist()!r}."
            )
    if weights.sum() <= 0:
        raise DataError(f"{fn}: weights must not all be zero, got {weights.tolist()!r}.")
    seed = _resolve_seed(fn, random_state)

    rng = _model_rng(seed)
    centroids = _hypercube_vertices(n_clusters, n_informative, rng).astype(np.float64)
    centroids *= 2 * class_sep
    centroids -= class_sep
    if not hypercube:
        centroids *= rng.uniform(size=(n_clusters, 1))
        centroids *= rng.uniform(size=(1, n_informative))
    covariances = 2 * rng.uniform(size=(n_clusters, n_informative, n_informative)) - 1
    redundant = 2 * rng.uniform(size=(n_informative, n_redundant)) - 1
    used = n_informative + n_redundant
    repeated = ((used - 1) * rng.uniform(size=n_repeated) + 0.5).astype(np.intp)
    if shift is None:
        shift = (2 * rng.uniform(size=n_features) - 1) * class_sep
    if scale is None:
        scale = 1 + 100 * rng.uniform(size=n_features)
    shift = np.broadcast_to(np.asarray(shift, dtype=np.float64), (n_features,)).copy()
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), (n_features,)).copy()

    model = _ClassificationModel(
        seed=seed,
        n_samples=n_samples,
        n_features=n_features,
        n_classes=n_classes,
        cluster_probabilities=np.array(
            [weights[k % n_classes] / n_clusters_per_class for k in range(n_clusters)]
        ),
        centroids=centroids,
        covariances=covariances,
        redundant=redundant,
        repeated=repeated,
        n_useless=n_features - used - n_repeated,
        flip_y=flip_y,
        shift=shift,
        scale=scale,
    )
    params = (
        seed,
        n_samples,
        n_features,
        n_informative,
        n_redundant,
        n_repeated,
        n_classes,
        n_clusters_per_class,
        weights,
        flip_y,
        class_sep,
        hypercube,
        shift,
        scale,
        chunk_size,
    )
    return _generated(fn, params, model, _classification_block, chunk_size, np.int64)


def make_regression(
    n_samples=100_000,
    n_features=100,
    *,
    n_informative=10,
    bias=0.0,
    noise=0.0,
    chunk_size=10_000,
    random_state=None,
    coef=False,
):
    """Generate a random linear regression problem, chunk by chunk on the cluster.

    As :func:`sklearn.datasets.make_regression` (one target, ``effective_rank=None``): ``X``
    is standard normal and ``y = X @ coef + bias + noise``, where the first ``n_informative``
    coefficients are uniform in ``[0, 100)`` and the others are zero (scikit-learn's
    ``shuffle=False`` order).

    Parameters
    ----------
    n_samples : int, default=100_000
        Number of rows.
    n_features : int, default=100
        Number of features.
    n_informative : int, default=10
        Number of features with a non-zero coefficient (capped at ``n_features``).
    bias : float, default=0.0
        Intercept.
    noise : float, default=0.0
        Standard deviation of the Gaussian noise added to ``y``.
    chunk_size : int, default=10_000
        Rows per chunk. The values do not depend on it.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.
    coef : bool, default=False
        Also return the true coefficients.

    Returns
    -------
    data : xarray.Dataset
        ``X`` (float64), ``y`` (float64) and a ``feature`` coordinate.
    coef : ndarray of shape (n_features,)
        Only when ``coef=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from taskdml.datasets import make_regression
    >>> data, w = make_regression(500, 4, n_informative=2, bias=1.5, chunk_size=128,
    ...                           random_state=0, coef=True)
    >>> data.y.dtype, data.X.chunks[0]
    (dtype('float64'), (128, 128, 128, 116))
    >>> bool(np.allclose(data.X.values @ w + 1.5, data.y.values))
    True
    """
    fn = "make_regression"
    n_samples = _check_int(fn, "n_samples", n_samples, minimum=1)
    n_features = _check_int(fn, "n_features", n_features, minimum=1)
    n_informative = min(n_features, _check_int(fn, "n_informative", n_informative, minimum=0))
    bias = _check_real(fn, "bias", bias)
    noise = _check_real(fn, "noise", noise, low=0.0)
    chunk_size = _check_int(fn, "chunk_size", chunk_size, minimum=1)
    seed = _resolve_seed(fn, random_state)

    true_coef = np.zeros(n_features)
    true_coef[:n_informative] = 100 * _model_rng(seed).uniform(size=n_informative)
    model = _RegressionModel(seed, n_samples, n_features, true_coef, bias, noise)
    params = (seed, n_samples, n_features, n_informative, bias, noise, chunk_size)
    data = _generated(fn, params, model, _regression_block, chunk_size, np.float64)
    return (data, true_coef.copy()) if coef else data


def make_blobs(
    n_samples=100_000,
    n_features=2,
    *,
    centers=3,
    cluster_std=1.0,
    center_box=(-10.0, 10.0),
    chunk_size=10_000,
    random_state=None,
    return_centers=False,
):
    """Generate isotropic Gaussian blobs for clustering, chunk by chunk on the cluster.

    As :func:`sklearn.datasets.make_blobs` with an integer ``n_samples``: rows are split
    (almost exactly) evenly between the centers, and classes are mixed within every internal
    block of 4096 rows.

    Parameters
    ----------
    n_samples : int, default=100_000
        Number of rows.
    n_features : int, default=2
        Number of features; ignored when ``centers`` is an array (its width is used).
    centers : int or array of shape (n_centers, n_features), default=3
        Number of centers to draw uniformly in ``center_box``, or the centers themselves.
    cluster_std : float or sequence of float, default=1.0
        Standard deviation of each cluster.
    center_box : (float, float), default=(-10.0, 10.0)
        Bounds of the random centers.
    chunk_size : int, default=10_000
        Rows per chunk. The values do not depend on it.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.
    return_centers : bool, default=False
        Also return the centers.

    Returns
    -------
    data : xarray.Dataset
        ``X`` (float64), ``y`` (int64 cluster index) and a ``feature`` coordinate.
    centers : ndarray of shape (n_centers, n_features)
        Only when ``return_centers=True``.

    Examples
    --------
    >>> from taskdml.datasets import make_blobs
    >>> data = make_blobs(1_000, centers=[[0, 0], [10, 10]], cluster_std=0.1,
    ...                   chunk_size=250, random_state=0)
    >>> data.X.shape, int(data.y.sum())
    ((1000, 2), 500)
    """
    fn = "make_blobs"
    n_samples = _check_int(fn, "n_samples", n_samples, minimum=1)
    chunk_size = _check_int(fn, "chunk_size", chunk_size, minimum=1)
    seed = _resolve_seed(fn, random_state)
    rng = _model_rng(seed)
    if isinstance(centers, numbers.Integral) and not isinstance(centers, bool):
        n_features = _check_int(fn, "n_features", n_features, minimum=1)
        n_centers = _check_int(fn, "centers", centers, minimum=1)
        low, high = center_box
        centers = rng.uniform(low, high, size=(n_centers, n_features))
    else:
        centers = np.array(centers, dtype=np.float64)
        if centers.ndim != 2 or centers.size == 0 or not np.isfinite(centers).all():
            raise DataError(
                f"{fn}: centers must be an integer or a finite 2-D array of shape "
                f"(n_centers, n_features), got an array of shape {centers.shape}."
            )
        n_centers, n_features = centers.shape
    cluster_std = np.broadcast_to(np.asarray(cluster_std, dtype=np.float64), (n_centers,)).copy()
    if (cluster_std < 0).any() or not np.isfinite(cluster_std).all():
        raise DataError(f"{fn}: cluster_std must be finite and >= 0, got {cluster_std.tolist()!r}.")
    model = _BlobsModel(seed, n_samples, n_features, centers, cluster_std)
    params = (seed, n_samples, n_features, centers, cluster_std, chunk_size)
    data = _generated(fn, params, model, _blobs_block, chunk_size, np.int64)
    return (data, centers.copy()) if return_centers else data


def _generated(prefix, params, model, block_rows, chunk_size, y_dtype):
    def chunk_task(start, stop, model_key):
        return (_generated_rows, block_rows, model_key, start, stop)

    X, y = _paired_arrays(
        prefix,
        params,
        chunk_task,
        _row_chunks(model.n_samples, chunk_size),
        model.n_features,
        y_dtype,
        shared=model,
    )
    return _xy_dataset(X, y, _feature_names(model.n_features))
