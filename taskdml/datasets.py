"""Chunked data sets: generators, loaders, readers and a chunk-preserving train/test split.

Every function here returns an :class:`xarray.Dataset` in taskdml's data convention: a
variable ``X`` with dims ``("sample", "feature")`` (float64, a dask array chunked along
``sample`` only, one chunk along ``feature``) and, when there are labels, ``y`` with dims
``("sample",)`` chunked identically. A ``feature`` coordinate carries the feature names when
they are known. Chunk sizes are always known (never NaN).

Design
------
**Data is made where it lives.** Nothing of size ``n_samples`` is built on the client: each
chunk is generated, loaded or read inside its own task, so a 100-million-row data set costs the
client a graph, not memory.

**Generators are independent of chunking.** ``make_classification``, ``make_regression`` and
``make_blobs`` re-implement scikit-learn's generators in two parts. The *global model*
(centroids, covariance and mixing matrices, coefficients) is drawn once, on the client, from
``SeedSequence(seed, spawn_key=(0,))`` and shipped to the cluster as a single graph key. The
*samples* are drawn in fixed internal blocks of ``_BLOCK_ROWS`` rows; block ``b`` has its own
generator seeded from ``SeedSequence(seed, spawn_key=(1, b))``. A chunk task generates the blocks
overlapping its row range and slices them, so the values depend only on the seed and the global
row index, never on ``chunk_size`` or on the workers. (``_BLOCK_ROWS`` is part of the output's
definition: changing it changes every generated value.) Cluster membership is assigned by a
golden-ratio Weyl sequence over the global row index, which gives near-exact class proportions
in every block, then shuffled within the block, so every chunk holds every class. Rows are not
shuffled globally and features keep scikit-learn's ``shuffle=False`` order.

**The split is a hash, not a shuffle.** :func:`train_test_split` sends row ``i`` to the test side
when ``splitmix64(offset + i)`` is among the ``n_test`` smallest such hashes, ``offset`` being
derived from the seed. Because splitmix64 is a bijection the hashes never tie, so the test side
has exactly ``n_test`` rows (scikit-learn's count). The client finds the threshold and every
output chunk's length by hashing row *indices* only, in bounded memory, without touching data;
each output chunk is then computed from the input chunk in place (no rechunk, no gather). Input
chunks that would leave an empty output chunk are dropped from that output.

**Names.** Every dask key is named by :func:`taskdml._keys.key_name`, so the dashboard groups
the tasks under the function's name (``make_classification``, ``train_test_split-test``) or,
inside a pipeline, under the step's name.

**Readers** open files lazily through xarray (zarr, netCDF) or dask.dataframe (CSV, Parquet);
they validate variable and column names up front and raise :class:`~taskdml.exceptions.DataError`
with the names available and a "did you mean".
"""

import dataclasses
import importlib.util
import math
import numbers
import os
import secrets

import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from taskdml._keys import key_name
from taskdml.exceptions import DataError, did_you_mean

__all__ = [
    "load_sklearn",
    "make_blobs",
    "make_classification",
    "make_regression",
    "read_csv",
    "read_netcdf",
    "read_parquet",
    "read_zarr",
    "train_test_split",
    "write_netcdf",
    "write_zarr",
]

# Rows per internal random block. Part of the generators' output definition: never change it.
_BLOCK_ROWS = 4096
# Rows hashed at once on the client by train_test_split (bounds its memory).
_HASH_BATCH = 1 << 20
# Target bytes per chunk for readers whose file does not say how it is chunked.
_TARGET_CHUNK_BYTES = 64 * 2**20

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------


def _check_int(function, name, value, *, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DataError(
            f"{function}: {name} must be an integer >= {minimum}, got {value!r}. "
            f"Pass e.g. {name}={max(minimum, 1)}."
        )
    return int(value)


def _check_real(function, name, value, *, low=None, high=None, low_open=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = []
        if low is not None:
            bounds.append(f"{'>' if low_open else '>='} {low}")
        if high is not None:
            bounds.append(f"<= {high}")
        expected = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")
        raise DataError(f"{function}: {name} must be {expected}, got {value!r}.")
    return float(value)


def _resolve_seed(function, random_state):
    """Turn ``random_state`` into a non-negative int seed, drawn once when it is ``None``."""
    if random_state is None:
        return secrets.randbits(63)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int64).max, dtype=np.int64))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int64).max))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state >= 0:
            return int(random_state)
    raise DataError(
        f"{function}: random_state must be None, a non-negative integer, a "
        f"numpy.random.RandomState or a numpy.random.Generator, got {random_state!r}. "
        "Pass an integer such as random_state=0 for reproducible data."
    )


def _row_chunks(n_samples, chunk_size):
    full, rest = divmod(n_samples, chunk_size)
    return (chunk_size,) * full + ((rest,) if rest else ())


def _feature_names(n_features):
    return np.array([f"x{i}" for i in range(n_features)])


# --------------------------------------------------------------------------------------------
# Per-block randomness (module-level and pure: they run inside tasks)
# --------------------------------------------------------------------------------------------


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


def _pick(pair, index):
    return pair[index]


def _as_float64(block):
    return np.asarray(block, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Graph assembly
# --------------------------------------------------------------------------------------------


def _paired_arrays(prefix, token, chunk_task, row_chunks, n_features, y_dtype, shared=None):
    """Build ``X`` and ``y`` dask arrays whose chunk ``i`` comes from one task.

    ``chunk_task(start, stop, shared_key)`` returns the task (a tuple) that makes the pair
    ``(X_chunk, y_chunk)`` for rows ``[start, stop)``; *shared*, when given, is stored once in
    the graph under ``shared_key`` (the generator's model) instead of in every task.
    """
    layers, dependencies = {}, {}
    shared_key = None
    if shared is not None:
        shared_key = key_name(prefix, token, phase="model")
        layers[shared_key] = {shared_key: shared}
        dependencies[shared_key] = set()
    pairs = key_name(prefix, token, phase="generate")
    bounds = np.cumsum((0,) + row_chunks).tolist()
    layers[pairs] = {
        (pairs, i): chunk_task(bounds[i], bounds[i + 1], shared_key) for i in range(len(row_chunks))
    }
    dependencies[pairs] = {shared_key} if shared_key else set()

    X_name, y_name = key_name(prefix, token, "X"), key_name(prefix, token, "y")
    layers[X_name] = {(X_name, i, 0): (_pick, (pairs, i), 0) for i in range(len(row_chunks))}
    layers[y_name] = {(y_name, i): (_pick, (pairs, i), 1) for i in range(len(row_chunks))}
    dependencies[X_name] = dependencies[y_name] = {pairs}
    graph = HighLevelGraph(layers, dependencies)
    X = da.Array(
        graph, X_name, (row_chunks, (n_features,)), meta=np.empty((0, n_features), np.float64)
    )
    y = da.Array(graph, y_name, (row_chunks,), meta=np.empty((0,), y_dtype))
    return X, y


def _xy_dataset(X, y, feature_names, attrs=None):
    data_vars = {"X": (("sample", "feature"), X)}
    if y is not None:
        data_vars["y"] = (("sample",), y)
    coords = {"feature": feature_names} if feature_names is not None else None
    return xr.Dataset(data_vars, coords=coords, attrs=attrs or {})


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


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# scikit-learn's bundled data sets
# --------------------------------------------------------------------------------------------

# name -> (loader in sklearn.datasets, target column for multi-output data sets)
_SKLEARN_DATASETS = {
    "iris": ("load_iris", None),
    "digits": ("load_digits", None),
    "wine": ("load_wine", None),
    "breast_cancer": ("load_breast_cancer", None),
    "diabetes": ("load_diabetes", None),
    "linnerud": ("load_linnerud", "Weight"),
}


def _sklearn_arrays(name):
    import sklearn.datasets

    loader, target = _SKLEARN_DATASETS[name]
    bunch = getattr(sklearn.datasets, loader)()
    X = np.asarray(bunch.data, dtype=np.float64)
    if target is None:
        y, target_name = np.asarray(bunch.target), "target"
    else:
        y, target_name = bunch.target[:, list(bunch.target_names).index(target)], target
    y = y.astype(np.int64 if np.issubdtype(y.dtype, np.integer) else np.float64)
    return X, y, [str(f) for f in bunch.feature_names], target_name


def _sklearn_rows(name, start, stop):
    X, y, _, _ = _sklearn_arrays(name)
    return X[start:stop], y[start:stop]


def load_sklearn(name, *, chunk_size=None):
    """Load one of scikit-learn's bundled (no download) data sets as chunked data.

    The client reads the file once for its shape and feature names; every chunk is then
    loaded again inside its own task, so no data travels from the client.

    Parameters
    ----------
    name : {"iris", "digits", "wine", "breast_cancer", "diabetes", "linnerud"}
        The data set. ``y`` is the class label (int64) for iris, digits, wine and
        breast_cancer, the disease progression (float64) for diabetes, and the ``Weight``
        column (float64) of linnerud's three physiological targets.
    chunk_size : int, optional
        Rows per chunk; by default about four chunks.

    Returns
    -------
    xarray.Dataset
        ``X``, ``y``, a ``feature`` coordinate with scikit-learn's feature names, and attrs
        ``source`` (the scikit-learn loader) and ``target`` (the name of ``y``).

    Examples
    --------
    >>> from taskdml.datasets import load_sklearn
    >>> iris = load_sklearn("iris")
    >>> iris.X.shape, iris.X.chunks[0], str(iris.feature.values[0]), iris.attrs["target"]
    ((150, 4), (38, 38, 38, 36), 'sepal length (cm)', 'target')
    """
    if name not in _SKLEARN_DATASETS:
        raise DataError(
            f"load_sklearn: unknown data set name={name!r}; expected one of "
            f"{sorted(_SKLEARN_DATASETS)}.{did_you_mean(name, _SKLEARN_DATASETS)}"
        )
    X, y, feature_names, target_name = _sklearn_arrays(name)
    n_samples, n_features = X.shape
    if chunk_size is None:
        chunk_size = math.ceil(n_samples / 4)
    chunk_size = _check_int("load_sklearn", "chunk_size", chunk_size, minimum=1)

    def chunk_task(start, stop, _):
        return (_sklearn_rows, name, start, stop)

    X, y = _paired_arrays(
        "load_sklearn",
        (name, chunk_size),
        chunk_task,
        _row_chunks(n_samples, chunk_size),
        n_features,
        y.dtype,
    )
    attrs = {"source": f"sklearn.datasets.{_SKLEARN_DATASETS[name][0]}", "target": target_name}
    return _xy_dataset(X, y, np.array(feature_names), attrs)


# --------------------------------------------------------------------------------------------
# Files through xarray: zarr and netCDF
# --------------------------------------------------------------------------------------------


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _from_xarray(function, path, ds, x, y, chunk_size):
    """Select, rename and chunk ``x``/``y`` of a lazily opened file into the convention."""
    where = f"{function}: {path!r}"
    names = sorted(ds.data_vars)
    for param, var in (("x", x), ("y", y)):
        if var is not None and var not in ds.data_vars:
            raise DataError(
                f"{where} has no variable {param}={var!r}; its variables are {names}."
                f"{did_you_mean(var, names)}"
                + (" Pass y=None for data without labels." if param == "y" else "")
            )
    X = ds[x]
    if X.ndim != 2:
        raise DataError(
            f"{where}: variable {x!r} must be 2-D (samples, features), found dims {X.dims}."
        )
    sample_dim, feature_dim = X.dims
    if y is not None and ds[y].dims != (sample_dim,):
        raise DataError(
            f"{where}: variable {y!r} must be 1-D along {x!r}'s first dim {sample_dim!r}, "
            f"found dims {ds[y].dims}."
        )
    if chunk_size is None:
        encoding = X.encoding
        disk_chunks = encoding.get("chunks") or encoding.get("chunksizes")
        if disk_chunks:
            chunk_size = int(disk_chunks[0])
        else:
            chunk_size = max(1, _TARGET_CHUNK_BYTES // (8 * max(1, X.shape[1])))
    chunk_size = _check_int(function, "chunk_size", chunk_size, minimum=1)

    selected = ds[[x] if y is None else [x, y]].drop_encoding()
    # Through temporary names, so that swapped or clashing names cannot collide.
    selected = selected.rename({x: "__X", sample_dim: "__sample", feature_dim: "__feature"})
    if y is not None:
        selected = selected.rename({y: "__y"})
    selected = selected.rename({"__X": "X", "__sample": "sample", "__feature": "feature"})
    if y is not None:
        selected = selected.rename({"__y": "y"})
    name = key_name(function, os.path.abspath(path), _mtime(path), x, y, chunk_size)
    selected = selected.chunk(
        {"sample": chunk_size, "feature": -1}, name_prefix=f"{name}-", token=name
    )
    if selected.X.dtype != np.float64:
        X_data = selected.X.data
        selected["X"] = selected.X.copy(
            data=X_data.map_blocks(
                _as_float64, dtype=np.float64, name=key_name(function, X_data.name, "float64")
            )
        )
    if "feature" in selected.coords and selected.feature.dtype.kind not in "iuf":
        names = np.array([str(name) for name in selected.feature.values.tolist()])
        selected = selected.assign_coords(feature=names)
    return selected


def _check_path(function, path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(
            f"{function}: no file or directory at path={path!r}. Check the path (relative paths "
            f"are taken from {os.getcwd()!r})."
        )
    return path


def _check_files(function, path):
    """*path* (a path, a glob or a list of them), once every local one matches a file or
    directory; URLs (``s3://``) are left to their filesystem."""
    import glob

    for one in path if isinstance(path, (list, tuple)) else [path]:
        one = os.fspath(one)
        if "://" not in one and not glob.glob(one):
            raise DataError(
                f"{function}: no file or directory matches path={one!r}. Check the path "
                f"(relative paths are taken from {os.getcwd()!r})."
            )
    return path


def read_zarr(path, *, x="X", y="y", chunk_size=None):
    """Open a zarr store lazily as chunked ``X``/``y`` data.

    Parameters
    ----------
    path : str or os.PathLike
        The zarr store (a directory).
    x : str, default="X"
        Name of the 2-D feature variable. Its dims may have any names: the first is taken
        as ``sample``, the second as ``feature`` (a coordinate on it becomes ``feature``).
    y : str or None, default="y"
        Name of the 1-D label variable along the sample dim, or ``None`` for no labels.
    chunk_size : int, optional
        Rows per chunk; by default the store's own chunking along samples.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention; nothing is read until the data is computed.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_blobs, read_zarr, write_zarr
    >>> path = os.path.join(tempfile.mkdtemp(), "blobs.zarr")
    >>> _ = write_zarr(make_blobs(100, chunk_size=30, random_state=0), path)
    >>> read_zarr(path).X.chunks
    ((30, 30, 30, 10), (2,))
    """
    path = _check_path("read_zarr", path)
    ds = xr.open_dataset(path, engine="zarr", chunks=None, cache=False, consolidated=False)
    return _from_xarray("read_zarr", path, ds, x, y, chunk_size)


def read_netcdf(path, *, x="X", y="y", chunk_size=None):
    """Open a netCDF file lazily as chunked ``X``/``y`` data.

    Parameters
    ----------
    path : str or os.PathLike
        The netCDF file (netCDF4/HDF5 through h5netcdf, or netCDF3 through scipy).
    x : str, default="X"
        Name of the 2-D feature variable; its first dim is the sample dim.
    y : str or None, default="y"
        Name of the 1-D label variable, or ``None`` for no labels.
    chunk_size : int, optional
        Rows per chunk; by default the file's own chunking, or about 64 MiB per chunk.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_blobs, read_netcdf, write_netcdf
    >>> path = os.path.join(tempfile.mkdtemp(), "blobs.nc")
    >>> _ = write_netcdf(make_blobs(100, random_state=0), path)
    >>> read_netcdf(path, chunk_size=40).X.chunks
    ((40, 40, 20), (2,))
    """
    path = _check_path("read_netcdf", path)
    ds = xr.open_dataset(path, chunks=None, cache=False)
    return _from_xarray("read_netcdf", path, ds, x, y, chunk_size)


def _writable(function, data, path, overwrite):
    if not isinstance(data, xr.Dataset):
        raise DataError(f"{function}: data must be an xarray.Dataset, got {type(data).__name__}.")
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise DataError(f"{function}: {path!r} already exists. Pass overwrite=True to replace it.")
    data = data.drop_encoding()
    # zarr v3 has no stable fixed-width unicode type; variable-length strings round-trip.
    strings = {k: v.astype(object) for k, v in data.coords.items() if v.dtype.kind == "U"}
    return path, data.assign_coords(strings)


def write_zarr(data, path, *, overwrite=False):
    """Write a data set to a zarr store, chunk by chunk from where each chunk lives.

    Zarr needs equal chunks along ``sample`` (the last may be shorter); data with irregular
    chunks (the output of :func:`train_test_split`, say) is rechunked to its largest chunk
    first.

    Parameters
    ----------
    data : xarray.Dataset
        The data to write.
    path : str or os.PathLike
        The store to create.
    overwrite : bool, default=False
        Replace an existing store.

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_regression, write_zarr
    >>> path = write_zarr(make_regression(100, 3, random_state=0),
    ...                   os.path.join(tempfile.mkdtemp(), "r.zarr"))
    >>> os.path.isdir(path)
    True
    """
    path, data = _writable("write_zarr", data, path, overwrite)
    if "sample" in data.chunksizes:
        chunks = data.chunksizes["sample"]
        if len(set(chunks[:-1])) > 1 or (len(chunks) > 1 and chunks[-1] > chunks[0]):
            data = data.chunk({"sample": max(chunks)})
    data.to_zarr(path, mode="w", consolidated=False)
    return path


def write_netcdf(data, path, *, overwrite=False):
    """Write a data set to a netCDF file.

    With ``h5py`` installed the file is netCDF4 (h5netcdf) and the chunks are written from
    the workers; without it the file is netCDF3 (scipy), which xarray can only write from
    one process, so the chunks are then computed and written by the local threaded scheduler.

    Parameters
    ----------
    data : xarray.Dataset
        The data to write.
    path : str or os.PathLike
        The file to create.
    overwrite : bool, default=False
        Replace an existing file.

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_regression, write_netcdf
    >>> path = write_netcdf(make_regression(100, 3, random_state=0),
    ...                     os.path.join(tempfile.mkdtemp(), "r.nc"))
    >>> os.path.getsize(path) > 0
    True
    """
    path, data = _writable("write_netcdf", data, path, overwrite)
    if os.path.exists(path):
        os.remove(path)
    if importlib.util.find_spec("h5py") is not None:
        data.to_netcdf(path, engine="h5netcdf")
    else:
        with dask.config.set(scheduler="threads"):
            data.to_netcdf(path, engine="scipy")
    return path


# --------------------------------------------------------------------------------------------
# Tables through dask.dataframe: CSV and Parquet
# --------------------------------------------------------------------------------------------


def _object_columns(part, columns):
    """Task: *columns* of one partition as object arrays with ``nan`` for missing values,
    what scikit-learn's encoders and imputers read as missing (``pd.NA`` is not)."""
    import pandas as pd

    part = part.copy()
    for column in columns:
        values = part[column].astype(object)
        part[column] = values.where(pd.notna(values), np.nan)
    return part


def _from_dataframe(function, path, frame, target, features, categorical=None):
    """Turn a lazy dask DataFrame into ``X``/``y`` (numeric features) or a table (any
    non-numeric or categorical feature), with known chunk lengths."""
    columns = [str(c) for c in frame.columns]
    where = f"{function}: {os.fspath(path) if not isinstance(path, (list, tuple)) else path!r}"

    def check(param, column):
        if column not in columns:
            raise DataError(
                f"{where} has no column {param}={column!r}; its columns are {columns}."
                f"{did_you_mean(column, columns)}"
            )

    if target is not None:
        check("target", target)
    if features is None:
        features = [c for c in columns if c != target]
    else:
        if isinstance(features, str):
            features = [features]
        features = list(features)
        for column in features:
            check("features", column)
    if not features:
        raise DataError(f"{where}: no feature columns left (found only target={target!r}).")
    if target in features:
        raise DataError(f"{where}: target={target!r} is also listed in features; remove it.")
    categorical = [categorical] if isinstance(categorical, str) else list(categorical or ())
    for column in categorical:
        check("categorical", column)
        if column not in features:
            raise DataError(
                f"{where}: categorical column {column!r} is not a feature (the features are "
                f"{features}); remove it from categorical or add it to features."
            )
    import pandas as pd

    not_numeric = [
        c
        for c in features
        if not (
            pd.api.types.is_numeric_dtype(frame.dtypes[c])
            or pd.api.types.is_bool_dtype(frame.dtypes[c])
        )
    ]
    frame = frame[features + ([target] if target is not None else [])]
    lengths = tuple(int(n) for n in frame.map_partitions(len).compute())
    if not sum(lengths):
        raise DataError(f"{where} has no rows: nothing to train or score on. Check the file(s).")
    y = None
    if target is not None:
        y_rows = frame[target].to_dask_array(lengths=lengths)
        y = y_rows.map_blocks(np.asarray, dtype=y_rows.dtype, name=key_name(function, y_rows.name))
    if not_numeric or categorical:
        return _table(function, frame, features, not_numeric, categorical, lengths, y)
    X_rows = frame[features].to_dask_array(lengths=lengths)
    X = X_rows.map_blocks(_as_float64, dtype=np.float64, name=key_name(function, X_rows.name, "X"))
    return _xy_dataset(X, y, np.array(features, dtype=str))


def _table(function, frame, features, not_numeric, categorical, lengths, y):
    """A table (see :mod:`taskdml._data`): one variable per feature column, on *lengths*."""
    objects = [c for c in features if c in not_numeric]
    if objects:
        meta = frame._meta.copy()
        for column in objects:
            meta[column] = meta[column].astype(object)
        frame = frame.map_partitions(_object_columns, objects, meta=meta)
    data_vars = {}
    for column in features:
        rows = frame[column].to_dask_array(lengths=lengths)
        values = rows.map_blocks(
            np.asarray, dtype=rows.dtype, name=key_name(function, rows.name, column)
        )
        attrs = {"categorical": True} if column in categorical else {}
        data_vars[column] = xr.Variable(("sample",), values, attrs=attrs)
    if y is not None:
        data_vars["y"] = xr.Variable(("sample",), y)
    return xr.Dataset(data_vars)


def _without_annotations(function, *args, **kwargs):
    """Build dask DataFrames outside annotations (see :func:`taskdml._data.outside_annotations`)."""
    from taskdml._data import outside_annotations

    return outside_annotations(function, *args, **kwargs)


def read_csv(path, *, target=None, features=None, categorical=None, blocksize="64MB"):
    """Read CSV file(s) through :func:`dask.dataframe.read_csv` as chunked ``X``/``y``.

    One pass over the files counts the rows of each block (only the counts reach the client),
    so the chunk sizes are known.

    Parameters
    ----------
    path : str, os.PathLike or list
        A file, a glob or a list of files.
    target : str, optional
        The label column; ``None`` for no ``y``.
    features : list of str, optional
        The feature columns; by default every column but ``target``.
    categorical : list of str, optional
        Feature columns to treat as categories (marked ``categorical=True``; pandas
        ``category`` columns once unwrapped).
    blocksize : str or int, default="64MB"
        Bytes per chunk, as in dask.

    Returns
    -------
    xarray.Dataset
        Numeric features only (and no ``categorical``): ``X`` (float64) and ``y``, feature
        names as the ``feature`` coordinate. Otherwise a table (see :mod:`taskdml._data`):
        one variable per feature column, with the file's dtypes (strings as objects,
        missing values as ``nan``), and ``y``; fit it with a scikit-learn ``Pipeline``
        whose ``ColumnTransformer`` encodes the columns.

    Examples
    --------
    >>> import tempfile, os
    >>> import pandas as pd
    >>> from taskdml.datasets import read_csv
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "label": [0, 1, 0]}).to_csv(
    ...     path, index=False)
    >>> data = read_csv(path, target="label")
    >>> data.feature.values.tolist(), data.y.values.tolist()
    (['a', 'b'], [0, 1, 0])

    A string column makes a table:

    >>> pd.DataFrame({"a": [1, 2, 3], "grade": ["low", "high", "low"], "label": [0, 1, 0]}
    ...              ).to_csv(path, index=False)
    >>> table = read_csv(path, target="label", categorical=["grade"])
    >>> sorted(table.data_vars), table.grade.values.tolist(), table.grade.attrs
    (['a', 'grade', 'y'], ['low', 'high', 'low'], {'categorical': True})
    """

    def read():
        import dask.dataframe as dd

        frame = dd.read_csv(_check_files("read_csv", path), blocksize=blocksize)
        return _from_dataframe("read_csv", path, frame, target, features, categorical)

    return _without_annotations(read)


def _as_read(part):
    return part


def read_parquet(path, *, target=None, features=None, categorical=None):
    """Read a Parquet file or directory through :func:`dask.dataframe.read_parquet`.

    Parameters
    ----------
    path : str, os.PathLike or list
        A file, a directory of files or a list of files.
    target : str, optional
        The label column; ``None`` for no ``y``.
    features : list of str, optional
        The feature columns; by default every column but ``target``.
    categorical : list of str, optional
        Feature columns to treat as categories, as in :func:`read_csv`.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention, one chunk per Parquet partition: ``X``/``y`` for
        numeric features, a table otherwise (as in :func:`read_csv`).

    Examples
    --------
    >>> import tempfile, os
    >>> import pandas as pd
    >>> from taskdml.datasets import read_parquet
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pd.DataFrame({"a": [1.0, 2.0], "label": [1, 0]}).to_parquet(path)
    >>> read_parquet(path, target="label").X.values.tolist()
    [[1.0], [2.0]]
    """

    def read():
        import dask.dataframe as dd

        frame = dd.read_parquet(_check_files("read_parquet", path))
        # dask fuses the partitions of small files when only some columns are read, so the
        # one-column selections behind y would have fewer partitions than the row counts
        # taken on the whole table: a map over the partitions keeps the files' partitions.
        frame = frame.map_partitions(_as_read, meta=frame._meta)
        return _from_dataframe("read_parquet", path, frame, target, features, categorical)

    return _without_annotations(read)


# --------------------------------------------------------------------------------------------
# train_test_split
# --------------------------------------------------------------------------------------------


def _row_hashes(start, stop, offset):
    """splitmix64 of ``offset + row`` for every row in ``[start, stop)`` (a bijection)."""
    z = np.arange(start, stop, dtype=np.uint64) + offset + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _hash_batches(start, stop):
    for lo in range(start, stop, _HASH_BATCH):
        yield lo, min(lo + _HASH_BATCH, stop)


def _test_threshold(n_samples, n_test, offset):
    """The ``n_test``-th smallest row hash, found in two streaming passes over row indices."""
    histogram = np.zeros(1 << 16, dtype=np.int64)
    for lo, hi in _hash_batches(0, n_samples):
        top = (_row_hashes(lo, hi, offset) >> np.uint64(48)).astype(np.intp)
        histogram += np.bincount(top, minlength=1 << 16)
    cumulative = np.cumsum(histogram)
    bucket = int(np.searchsorted(cumulative, n_test))
    below = int(cumulative[bucket - 1]) if bucket else 0
    in_bucket = []
    for lo, hi in _hash_batches(0, n_samples):
        hashes = _row_hashes(lo, hi, offset)
        in_bucket.append(hashes[(hashes >> np.uint64(48)) == np.uint64(bucket)])
    return np.sort(np.concatenate(in_bucket))[n_test - below - 1]


def _test_counts(row_chunks, offset, threshold):
    bounds = np.cumsum((0,) + tuple(row_chunks)).tolist()
    counts = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        counts.append(
            sum(
                int(np.count_nonzero(_row_hashes(lo, hi, offset) <= threshold))
                for lo, hi in _hash_batches(start, stop)
            )
        )
    return bounds, counts


def _rows_on_side(block, axis, start, offset, threshold, test):
    """The rows of *block* (global rows from *start*) that fall on the test or train side."""
    in_test = _row_hashes(start, start + block.shape[axis], offset) <= threshold
    keep = in_test if test else ~in_test
    if hasattr(block, "tocsr"):  # a scipy.sparse chunk (hashed text): rows are axis 0
        return block.tocsr()[np.flatnonzero(keep)]
    return np.compress(keep, block, axis=axis)


def _split_dask(array, axis, offset, threshold, counts_cache):
    """Split a dask array along *axis* into ``(train, test)``, chunk by chunk in place."""
    row_chunks = array.chunks[axis]
    if row_chunks not in counts_cache:
        counts_cache[row_chunks] = _test_counts(row_chunks, offset, threshold)
    bounds, test_counts = counts_cache[row_chunks]
    other_blocks = [range(n) for i, n in enumerate(array.numblocks) if i != axis]
    outputs = []
    for side, test in (("train", False), ("test", True)):
        sizes = [
            c if test else (b - a - c) for a, b, c in zip(bounds[:-1], bounds[1:], test_counts)
        ]
        kept = [i for i, size in enumerate(sizes) if size > 0]
        name = key_name("train_test_split", array.name, offset, threshold, phase=side)
        layer = {}
        for j, i in enumerate(kept):
            for rest in np.ndindex(*[len(r) for r in other_blocks]):
                in_index = rest[:axis] + (i,) + rest[axis:]
                out_index = rest[:axis] + (j,) + rest[axis:]
                layer[(name, *out_index)] = (
                    _rows_on_side,
                    (array.name, *in_index),
                    axis,
                    bounds[i],
                    offset,
                    threshold,
                    test,
                )
        chunks = list(array.chunks)
        chunks[axis] = tuple(sizes[i] for i in kept)
        graph = HighLevelGraph.from_collections(name, layer, dependencies=[array])
        outputs.append(da.Array(graph, name, tuple(chunks), meta=array._meta))
    return outputs


def _n_test(test_size, n_samples):
    fn = "train_test_split"
    if isinstance(test_size, numbers.Integral) and not isinstance(test_size, bool):
        n_test = int(test_size)
        if not 1 <= n_test < n_samples:
            raise DataError(
                f"{fn}: an integer test_size must be between 1 and n_samples - 1 = "
                f"{n_samples - 1}, got {test_size!r}."
            )
        return n_test
    if isinstance(test_size, numbers.Real) and not isinstance(test_size, bool):
        if 0 < test_size < 1:
            n_test = math.ceil(test_size * n_samples)
            if n_test >= n_samples:
                raise DataError(
                    f"{fn}: test_size={test_size!r} of {n_samples} samples leaves no training "
                    "rows. Lower test_size."
                )
            return n_test
    raise DataError(
        f"{fn}: test_size must be a float in (0, 1) or an integer number of rows, "
        f"got {test_size!r}."
    )


def train_test_split(data, *, test_size=0.25, random_state=None):
    """Split a data set's rows into a train and a test set, without moving any chunk.

    Row ``i`` goes to the test set when a counter-based hash of ``(seed, i)`` is among the
    ``n_test`` smallest, so the split is exact in size (``n_test = ceil(test_size *
    n_samples)``, as scikit-learn), deterministic for a seed, and independent of how the data
    is chunked or how many workers hold it. Each output chunk is computed from one input
    chunk, in the same task location; input chunks that would give an empty output chunk are
    left out of that output, so every output chunk is non-empty. Row order is kept.

    Parameters
    ----------
    data : xarray.Dataset
        Data with a ``sample`` dim. Every variable along ``sample`` is split (dask-backed ones
        chunk by chunk, in-memory ones in memory); the others are kept as they are.
    test_size : float or int, default=0.25
        Fraction of rows in ``(0, 1)``, or number of rows, in the test set.
    random_state : int, RandomState, Generator or None
        Seed of the split. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    train, test : xarray.Dataset
        The two parts, in the same convention as *data*.

    Examples
    --------
    >>> from taskdml.datasets import make_classification, train_test_split
    >>> data = make_classification(1_000, 4, chunk_size=250, random_state=0)
    >>> train, test = train_test_split(data, test_size=0.2, random_state=0)
    >>> train.sizes["sample"], test.sizes["sample"]
    (800, 200)
    >>> len(test.X.chunks[0])
    4
    """
    fn = "train_test_split"
    if not isinstance(data, xr.Dataset):
        raise DataError(f"{fn}: data must be an xarray.Dataset, got {type(data).__name__}.")
    if "sample" not in data.dims:
        raise DataError(
            f"{fn}: data must have a 'sample' dim; found dims {list(data.dims)}."
            f"{did_you_mean('sample', list(data.dims))}"
        )
    n_samples = data.sizes["sample"]
    n_test = _n_test(test_size, n_samples)
    seed = _resolve_seed(fn, random_state)
    offset = np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(1, np.uint64)[0]
    threshold = _test_threshold(n_samples, n_test, offset)

    counts_cache, memory_mask = {}, None
    parts = ({}, {})
    for var_name, var in data.variables.items():
        if "sample" not in var.dims:
            for part in parts:
                part[var_name] = var
            continue
        axis = var.dims.index("sample")
        if isinstance(var.data, da.Array):
            pieces = _split_dask(var.data, axis, offset, threshold, counts_cache)
        else:
            if memory_mask is None:
                memory_mask = _row_hashes(0, n_samples, offset) <= threshold
            values = np.asarray(var.values)
            pieces = [
                np.compress(~memory_mask, values, axis=axis),
                np.compress(memory_mask, values, axis=axis),
            ]
        for part, piece in zip(parts, pieces):
            part[var_name] = xr.Variable(var.dims, piece, attrs=var.attrs)
    coord_names = set(data.coords)
    return tuple(
        xr.Dataset(
            {k: v for k, v in part.items() if k not in coord_names},
            coords={k: v for k, v in part.items() if k in coord_names},
            attrs=data.attrs,
        )
        for part in parts
    )
