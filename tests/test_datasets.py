"""Tests of taskdml.datasets: generators, loaders, readers/writers and train_test_split."""

import math

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import sklearn.datasets
import sklearn.model_selection
import xarray as xr
from dask.utils import key_split
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from taskdml import datasets
from taskdml._keys import step_scope
from taskdml.datasets._common import _row_chunks
from taskdml.exceptions import DataError, TaskdmlError

GENERATORS = {
    "make_classification": lambda **kw: datasets.make_classification(
        n_features=7, n_informative=3, n_redundant=2, n_repeated=1, n_classes=3, **kw
    ),
    "make_regression": lambda **kw: datasets.make_regression(
        n_features=6, n_informative=3, noise=0.5, **kw
    ),
    "make_blobs": lambda **kw: datasets.make_blobs(n_features=3, centers=4, **kw),
}


def _local(array):
    """Compute on the synchronous local scheduler, whatever client is the default."""
    return np.asarray(array.compute(scheduler="sync"))


def _check_convention(data, n_samples, n_features, chunks):
    assert isinstance(data, xr.Dataset)
    assert data.X.dims == ("sample", "feature")
    assert data.X.dtype == np.float64
    assert isinstance(data.X.data, da.Array)
    assert data.X.shape == (n_samples, n_features)
    assert data.X.chunks == (chunks, (n_features,))
    if "y" in data:
        assert data.y.dims == ("sample",)
        assert data.y.chunks == (chunks,)
    assert not any(math.isnan(c) for c in data.X.chunks[0])


def _regression_reference(n_samples, seed, n_features=6, n_informative=3, noise=0.5):
    """make_regression's rows (bias 0) as the generators' module docstring defines them, in
    NumPy: the coefficients, 100 x uniform, from ``SeedSequence(seed, spawn_key=(0,))``; block
    ``b`` of 4096 rows from ``SeedSequence(seed, spawn_key=(1, b))``, its X standard normal,
    then the noise of y = X @ coef."""
    coef = np.zeros(n_features)
    model_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    coef[:n_informative] = 100 * model_rng.uniform(size=n_informative)
    X_blocks, y_blocks = [], []
    for block, start in enumerate(range(0, n_samples, 4096)):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, block)))
        rows = min(4096, n_samples - start)
        X = rng.standard_normal((rows, n_features))
        X_blocks.append(X)
        y_blocks.append(X @ coef + rng.normal(scale=noise, size=rows))
    return np.concatenate(X_blocks), np.concatenate(y_blocks)


def _blobs_reference(n_samples, seed, n_features=3, n_centers=4):
    """make_blobs's rows (cluster_std 1) as the generators' module docstring defines them, in
    NumPy: the centers uniform in (-10, 10) from ``SeedSequence(seed, spawn_key=(0,))``; in
    block ``b`` of 4096 rows, generator ``SeedSequence(seed, spawn_key=(1, b))``, row ``r``'s
    cluster the equal stratum of frac((r + 1) x golden ratio), permuted within the block, then
    X standard normal plus its cluster's center."""
    model_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    centers = model_rng.uniform(-10.0, 10.0, size=(n_centers, n_features))
    golden = (1 + math.sqrt(5)) / 2
    X_blocks, y_blocks = [], []
    for block, start in enumerate(range(0, n_samples, 4096)):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, block)))
        rows = np.arange(start, min(start + 4096, n_samples)) + 1
        stratum = np.floor(np.mod(rows * golden, 1.0) * n_centers).astype(np.int64)
        cluster = rng.permutation(stratum)
        X = rng.standard_normal((len(rows), n_features)) + centers[cluster]
        X_blocks.append(X)
        y_blocks.append(cluster)
    return np.concatenate(X_blocks), np.concatenate(y_blocks)


def _assert_documented_values(name, X, y, seed):
    """A generator's computed X and y (rows 0..len(X)) against the reference drawn in the test:
    make_regression's and make_blobs's (make_classification's model is not re-derived here)."""
    if name == "make_regression":
        X_ref, y_ref = _regression_reference(len(X), seed)
        np.testing.assert_array_equal(X, X_ref)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12)
    if name == "make_blobs":
        X_ref, y_ref = _blobs_reference(len(X), seed)
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_allclose(X, X_ref, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# Generators
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_convention(name, seed):
    """Generated data has the convention's dims, dtypes, chunks and feature names, and
    make_regression's and make_blobs's values are those their documented seeding draws."""
    data = GENERATORS[name](n_samples=1_000, chunk_size=300, random_state=seed)
    n_features = data.sizes["feature"]
    _check_convention(data, 1_000, n_features, (300, 300, 300, 100))
    assert data.feature.values.tolist() == [f"x{i}" for i in range(n_features)]
    expected_y = np.float64 if name == "make_regression" else np.int64
    assert data.y.dtype == expected_y
    assert np.isfinite(_local(data.X)).all()
    _assert_documented_values(name, _local(data.X), _local(data.y), seed)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_keys_are_named_after_the_function(name, seed):
    """Output keys split to the function's name; inside a step, to the step's name, with the
    values the documented seeding draws (make_regression, make_blobs): names are no seeds."""
    data = GENERATORS[name](n_samples=500, chunk_size=100, random_state=seed)
    for var in ("X", "y"):
        assert {key_split(k) for k in dask.core.flatten(data[var].data.__dask_keys__())} == {name}
    graph_groups = {key_split(k) for k in dict(data.X.data.__dask_graph__())}
    assert graph_groups == {name, f"{name}-generate", f"{name}-model"}
    with step_scope("data"):
        scoped = GENERATORS[name](n_samples=500, chunk_size=100, random_state=seed)
    assert key_split(scoped.X.data.name) == "data"
    _assert_documented_values(name, _local(scoped.X), _local(scoped.y), seed)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_seed_determines_values(name):
    """Same seed, same data and same keys; another seed or None gives other data; each seed's
    values are those the documented seeding draws (make_regression, make_blobs)."""
    a = GENERATORS[name](n_samples=2_000, chunk_size=500, random_state=1)
    b = GENERATORS[name](n_samples=2_000, chunk_size=500, random_state=1)
    c = GENERATORS[name](n_samples=2_000, chunk_size=500, random_state=2)
    assert a.X.data.name == b.X.data.name
    np.testing.assert_array_equal(_local(a.X), _local(b.X))
    assert not np.array_equal(_local(a.X), _local(c.X))
    _assert_documented_values(name, _local(a.X), _local(a.y), 1)  # each seed's own values
    _assert_documented_values(name, _local(c.X), _local(c.y), 2)
    fresh = [GENERATORS[name](n_samples=100, chunk_size=50) for _ in range(2)]
    assert not np.array_equal(_local(fresh[0].X), _local(fresh[1].X))
    rs = GENERATORS[name](n_samples=100, random_state=np.random.RandomState(0))
    assert rs.sizes["sample"] == 100


@pytest.mark.parametrize("name", sorted(GENERATORS))
@settings(max_examples=25, deadline=None)
@given(
    n_samples=st.integers(1, 20_000),
    chunk_a=st.integers(1, 20_000),
    chunk_b=st.integers(500, 20_000),
    random_state=st.integers(0, 2**32),
)
def test_generator_values_do_not_depend_on_chunking(
    name, n_samples, chunk_a, chunk_b, random_state
):
    """Property: for a seed the arrays are identical whatever chunk_size, and are the
    documented seeding's (make_regression, make_blobs: drawn with NumPy in the test)."""
    chunk_a = max(chunk_a, n_samples // 50 + 1)  # keep the number of tasks small
    a = GENERATORS[name](n_samples=n_samples, chunk_size=chunk_a, random_state=random_state)
    b = GENERATORS[name](n_samples=n_samples, chunk_size=chunk_b, random_state=random_state)
    np.testing.assert_array_equal(_local(a.X), _local(b.X))
    np.testing.assert_array_equal(_local(a.y), _local(b.y))
    _assert_documented_values(name, _local(b.X), _local(b.y), random_state)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generator_same_on_cluster_and_local_scheduler(name, client, seed):
    """A 2-worker cluster computes exactly what the local scheduler computes, and what the
    documented seeding draws (make_regression, make_blobs)."""
    data = GENERATORS[name](n_samples=10_000, chunk_size=1_500, random_state=seed)
    on_cluster = client.compute([data.X.data, data.y.data], sync=True)
    np.testing.assert_array_equal(on_cluster[0], _local(data.X))
    np.testing.assert_array_equal(on_cluster[1], _local(data.y))
    other = GENERATORS[name](n_samples=10_000, chunk_size=4_096, random_state=seed)
    np.testing.assert_array_equal(other.X.data.compute(), on_cluster[0])
    _assert_documented_values(name, on_cluster[0], on_cluster[1], seed)


def test_make_classification_weights_give_class_balance(seed):
    """Class proportions follow weights (exactly up to a few rows when flip_y=0); the last class
    takes what the weights leave, as scikit-learn documents."""
    weights = [0.2, 0.3]
    data = datasets.make_classification(
        60_000,
        6,
        n_informative=3,
        n_classes=3,
        weights=weights,
        flip_y=0.0,
        chunk_size=7_000,
        random_state=seed,
    )
    counts = np.bincount(_local(data.y), minlength=3)
    np.testing.assert_allclose(counts / 60_000, [0.2, 0.3, 0.5], atol=2e-4)
    expected = np.append(weights, 1 - np.sum(weights))
    np.testing.assert_allclose(counts / 60_000, expected, atol=2e-4)
    for block in data.y.data.blocks:
        assert set(np.unique(_local(block))) == {0, 1, 2}, "every chunk holds every class"


def test_make_classification_flip_y_moves_labels_toward_uniform(seed):
    """flip_y replaces that fraction of labels by uniform ones: class k's share is
    (1 - flip_y) * weight_k + flip_y / n_classes, within 4 standard errors of a proportion."""
    n_samples, flip_y, weights = 40_000, 0.5, np.array([0.9, 0.1])
    data = datasets.make_classification(
        n_samples,
        5,
        weights=weights[:1].tolist(),
        flip_y=flip_y,
        chunk_size=10_000,
        random_state=seed,
    )
    fraction = np.bincount(_local(data.y)) / 40_000
    np.testing.assert_allclose(fraction, [0.5 * 0.9 + 0.25, 0.5 * 0.1 + 0.25], atol=0.01)
    expected = (1 - flip_y) * weights + flip_y / len(weights)
    tolerance = 4 * np.sqrt(expected * (1 - expected) / n_samples)
    np.testing.assert_array_less(np.abs(fraction - expected), tolerance)


def test_make_classification_feature_structure(seed):
    """Redundant features are linear in the informative ones; repeated ones are copies."""
    data = datasets.make_classification(
        3_000,
        9,
        n_informative=3,
        n_redundant=2,
        n_repeated=2,
        flip_y=0.0,
        chunk_size=1_000,
        random_state=seed,
    )
    X = _local(data.X)
    assert np.linalg.matrix_rank(X[:, :5], tol=1e-8) == 3
    for column in (5, 6):
        assert any(np.array_equal(X[:, column], X[:, j]) for j in range(5))
    noise = X[:, 7:]
    np.testing.assert_allclose(noise.mean(0), 0, atol=0.1)
    np.testing.assert_allclose(noise.std(0), 1, atol=0.1)
    # The noise columns are N(0, 1): their mean and standard deviation lie within 4 standard
    # errors (1 / sqrt(n) and 1 / sqrt(2 n)) of 0 and 1.
    n_samples = X.shape[0]
    np.testing.assert_array_less(np.abs(noise.mean(0)), 4 / np.sqrt(n_samples))
    np.testing.assert_array_less(np.abs(noise.std(0) - 1), 4 / np.sqrt(2 * n_samples))


def test_make_classification_classes_sit_on_hypercube_vertices(seed):
    """Each class's informative mean is a distinct vertex of the (+-class_sep) hypercube."""
    data = datasets.make_classification(
        40_000,
        5,
        n_informative=3,
        n_redundant=0,
        n_classes=4,
        n_clusters_per_class=1,
        class_sep=2.0,
        flip_y=0.0,
        chunk_size=9_000,
        random_state=seed,
    )
    X, y = _local(data.X), _local(data.y)
    means = np.array([X[y == c, :3].mean(0) for c in range(4)])
    np.testing.assert_allclose(np.abs(means), 2.0, atol=0.05)
    assert len({tuple(np.sign(m)) for m in means}) == 4
    # scikit-learn's generator with the same parameters puts its classes at the same distance.
    sk_X, sk_y = sklearn.datasets.make_classification(
        40_000,
        5,
        n_informative=3,
        n_redundant=0,
        n_classes=4,
        n_clusters_per_class=1,
        class_sep=2.0,
        flip_y=0.0,
        shuffle=False,
        random_state=seed,
    )
    sk_means = np.array([sk_X[sk_y == c, :3].mean(0) for c in range(4)])
    np.testing.assert_allclose(np.abs(means), np.abs(sk_means), atol=0.1)


def test_make_classification_shift_and_scale(seed):
    """X is (X + shift) * scale, applied after generation; None draws them in scikit-learn's
    ranges."""
    plain = datasets.make_classification(1_000, 4, chunk_size=400, random_state=seed)
    moved = datasets.make_classification(
        1_000, 4, shift=2.0, scale=[1.0, 2.0, 3.0, 4.0], chunk_size=400, random_state=seed
    )
    np.testing.assert_allclose(_local(moved.X), (_local(plain.X) + 2.0) * [1, 2, 3, 4])
    random = datasets.make_classification(100, 4, shift=None, scale=None, random_state=seed)
    assert np.isfinite(_local(random.X)).all()
    # None draws them as scikit-learn does: shift in [-class_sep, class_sep), scale in
    # [1, 101), applied to the same rows (the draws come after the model's).
    base = _local(datasets.make_classification(100, 4, random_state=seed).X)
    drawn_scale = np.ptp(_local(random.X), axis=0) / np.ptp(base, axis=0)
    drawn_shift = (_local(random.X) / drawn_scale - base).mean(0)
    assert ((drawn_scale >= 1) & (drawn_scale < 101)).all(), drawn_scale
    assert ((drawn_shift >= -1) & (drawn_shift < 1)).all(), drawn_shift
    np.testing.assert_allclose(_local(random.X), (base + drawn_shift) * drawn_scale, rtol=1e-9)


def test_make_regression_is_linear_when_noise_free(seed):
    """y = X @ coef + bias exactly with noise=0 (scikit-learn's least squares finds coef and
    bias again); n_informative non-zero coefficients."""
    from sklearn.linear_model import LinearRegression

    data, coef = datasets.make_regression(
        5_000, 8, n_informative=3, bias=4.0, chunk_size=999, random_state=seed, coef=True
    )
    np.testing.assert_allclose(_local(data.X) @ coef + 4.0, _local(data.y))
    fitted = LinearRegression().fit(_local(data.X), _local(data.y))
    np.testing.assert_allclose(fitted.coef_, coef, atol=1e-8)
    assert fitted.intercept_ == pytest.approx(4.0)
    assert np.count_nonzero(coef) == 3 and (coef[:3] > 0).all() and (coef < 100).all()


def test_make_regression_noise_has_its_standard_deviation(seed):
    """The residual of the true model has standard deviation `noise`."""
    data, coef = datasets.make_regression(
        20_000, 5, noise=3.0, chunk_size=6_000, random_state=seed, coef=True
    )
    residual = _local(data.y) - _local(data.X) @ coef
    assert residual.std() == pytest.approx(3.0, rel=0.03)
    assert _local(data.X).std() == pytest.approx(1.0, rel=0.02)
    # Within 4 standard errors of a standard deviation (sigma / sqrt(2 n)).
    noise, n_samples = 3.0, 20_000
    assert abs(residual.std() - noise) <= 4 * noise / np.sqrt(2 * n_samples)


def test_make_blobs_clusters_around_centers(seed):
    """Rows split evenly over the centers, each cluster centred with its own std."""
    centers = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])
    data, returned = datasets.make_blobs(
        9_000,
        centers=centers,
        cluster_std=[0.5, 1.0, 2.0],
        chunk_size=2_500,
        random_state=seed,
        return_centers=True,
    )
    np.testing.assert_array_equal(returned, centers)
    X, y = _local(data.X), _local(data.y)
    np.testing.assert_allclose(np.bincount(y), 3_000, atol=3)
    np.testing.assert_allclose(np.bincount(y), 9_000 // len(centers), atol=3)
    for k, std in enumerate([0.5, 1.0, 2.0]):
        np.testing.assert_allclose(X[y == k].mean(0), centers[k], atol=0.1)
        np.testing.assert_allclose(X[y == k].std(0), std, rtol=0.06)
        # Within 4 standard errors: std / sqrt(n) for a mean, std / sqrt(2 n) for a std.
        n_k = np.sum(y == k)
        np.testing.assert_array_less(np.abs(X[y == k].mean(0) - centers[k]), 4 * std / np.sqrt(n_k))
        np.testing.assert_array_less(np.abs(X[y == k].std(0) - std), 4 * std / np.sqrt(2 * n_k))
    _, drawn = datasets.make_blobs(100, 5, centers=4, random_state=seed, return_centers=True)
    assert drawn.shape == (4, 5) and (np.abs(drawn) <= 10).all()


def test_generators_build_no_large_client_objects():
    """100 million rows cost only a graph: nothing of size n_samples is made."""
    data = datasets.make_classification(100_000_000, 20, chunk_size=1_000_000, random_state=0)
    assert data.X.shape == (100_000_000, 20)
    assert len(data.X.chunks[0]) == 100
    first = data.X.data.blocks[0]
    assert first.shape == (1_000_000, 20)


MC, MR, MB = datasets.make_classification, datasets.make_regression, datasets.make_blobs


@pytest.mark.parametrize(
    "func, kwargs, message",
    [
        (MC, {"n_samples": 0}, r"n_samples must be an integer >= 1, got 0\. Pass e\.g\."),
        (MC, {"n_samples": 10.5}, r"n_samples must be an integer >= 1, got 10\.5"),
        (MC, {"chunk_size": True}, r"chunk_size must be an integer >= 1, got True"),
        (
            MC,
            {"n_features": 3},
            r"n_informative \+ n_redundant \+ n_repeated must be <= n_features=3, "
            r"got 2 \+ 2 \+ 0 = 4\. Raise n_features",
        ),
        (
            MC,
            {"n_classes": 3},
            r"n_classes \* n_clusters_per_class must be <= 2 \*\* n_informative, "
            r"got 3 \* 2 = 6 > 2 \*\* 2\. Raise n_informative to at least 3",
        ),
        (MC, {"weights": [0.1, 0.2, 0.7]}, r"weights must hold n_classes=2 .*got \[0\.1"),
        (MC, {"flip_y": 1.5}, r"flip_y must be a finite number >= 0\.0 and <= 1\.0, got 1\.5"),
        (MC, {"random_state": -1}, r"random_state must be None, a non-negative integer.*got -1"),
        (MC, {"random_state": "seed"}, r"random_state must be .*got 'seed'\. Pass an integer"),
        (MR, {"noise": -1.0}, r"noise must be a finite number >= 0\.0, got -1\.0"),
        (MR, {"n_features": 0}, r"n_features must be an integer >= 1, got 0"),
        (MB, {"centers": [1.0, 2.0]}, r"centers must be an integer or a finite 2-D array"),
        (MB, {"cluster_std": -1.0}, r"cluster_std must be finite and >= 0, got \[-1\.0"),
    ],
)
def test_generator_argument_errors(func, kwargs, message):
    """Bad arguments raise DataError (a ValueError) naming the parameter and the value."""
    with pytest.raises(DataError, match=message) as info:
        func(**{"n_samples": 100, **kwargs})
    assert str(info.value).startswith(f"{func.__name__}: ")
    assert isinstance(info.value, ValueError) and isinstance(info.value, TaskdmlError)


# --------------------------------------------------------------------------------------------
# scikit-learn's bundled data sets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, loader, y_dtype",
    [
        ("iris", sklearn.datasets.load_iris, np.int64),
        ("digits", sklearn.datasets.load_digits, np.int64),
        ("wine", sklearn.datasets.load_wine, np.int64),
        ("breast_cancer", sklearn.datasets.load_breast_cancer, np.int64),
        ("diabetes", sklearn.datasets.load_diabetes, np.float64),
        ("linnerud", sklearn.datasets.load_linnerud, np.float64),
    ],
)
def test_load_sklearn_matches_scikit_learn(name, loader, y_dtype):
    """Values, feature names and about four chunks, as scikit-learn loads them."""
    bunch = loader()
    data = datasets.load_sklearn(name)
    n_samples, n_features = bunch.data.shape
    chunk = math.ceil(n_samples / 4)
    _check_convention(data, n_samples, n_features, _row_chunks(n_samples, chunk))
    assert data.feature.values.tolist() == list(bunch.feature_names)
    assert data.y.dtype == y_dtype
    np.testing.assert_array_equal(_local(data.X), bunch.data)
    expected_y = bunch.target[:, 0] if name == "linnerud" else bunch.target
    np.testing.assert_array_equal(_local(data.y), expected_y)
    assert key_split(data.X.data.name) == "load_sklearn"
    assert data.attrs["source"] == f"sklearn.datasets.{loader.__name__}"


def test_load_sklearn_chunk_size_and_cluster(client):
    """An explicit chunk_size is honoured, and the chunks load on the workers."""
    data = datasets.load_sklearn("iris", chunk_size=50)
    assert data.X.chunks[0] == (50, 50, 50)
    np.testing.assert_array_equal(data.X.data.compute(), sklearn.datasets.load_iris().data)


def test_load_sklearn_unknown_name():
    """An unknown name lists the names and suggests the closest."""
    expected = (
        r"load_sklearn: unknown data set name='irsi'; expected one of "
        r"\['breast_cancer', 'diabetes', 'digits', 'iris', 'linnerud', 'wine'\]\. "
        r"Did you mean 'iris'\?"
    )
    with pytest.raises(DataError, match=expected):
        datasets.load_sklearn("irsi")


# --------------------------------------------------------------------------------------------
# Readers and writers
# --------------------------------------------------------------------------------------------


def _drawn(n_samples, n_features, chunk_size, seed):
    """Data of the convention drawn here (not by the generators under test): X uniform,
    y integer labels, feature names x0, x1, ..."""
    rng = da.random.default_rng(seed)
    X = rng.random((n_samples, n_features), chunks=(chunk_size, n_features))
    y = rng.integers(0, 3, n_samples, chunks=chunk_size)
    return xr.Dataset(
        {"X": (("sample", "feature"), X), "y": (("sample",), y)},
        coords={"feature": [f"x{i}" for i in range(n_features)]},
    )


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_xarray_round_trip(fmt, tmp_path, seed):
    """write_* then read_* gives back the values, names and (zarr) the chunking; xarray's own
    reader finds the same values in the file."""
    data = _drawn(1_000, 5, chunk_size=300, seed=seed)
    path = tmp_path / f"data.{fmt}"
    write = getattr(datasets, f"write_{fmt}")
    read = getattr(datasets, f"read_{fmt}")
    assert write(data, path) == str(path)
    back = read(path) if fmt == "zarr" else read(path, chunk_size=300)
    _check_convention(back, 1_000, 5, (300, 300, 300, 100))
    np.testing.assert_array_equal(_local(back.X), _local(data.X))
    np.testing.assert_array_equal(_local(back.y), _local(data.y))
    assert back.feature.values.tolist() == data.feature.values.tolist()
    assert key_split(back.X.data.name) == f"read_{fmt}"
    opened = xr.open_zarr(path, consolidated=False) if fmt == "zarr" else xr.open_dataset(path)
    with opened as plain:
        np.testing.assert_array_equal(plain.X.values, _local(data.X))
        np.testing.assert_array_equal(plain.y.values, _local(data.y))
    again = read(path, chunk_size=450)
    assert again.X.chunks[0] == (450, 450, 100) and again.y.chunks[0] == (450, 450, 100)
    with pytest.raises(DataError, match=r"already exists\. Pass overwrite=True"):
        write(data, path)
    write(data, path, overwrite=True)


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_xarray_readers_rename_dims_and_convert_dtype(fmt, tmp_path):
    """Any 2-D X (first dim = samples) and its labels are renamed and cast to float64."""
    raw = xr.Dataset(
        {
            "pixels": (("image", "pixel"), np.arange(24, dtype=np.float32).reshape(8, 3)),
            "label": (("image",), np.arange(8) % 2),
            "other": (("pixel",), np.ones(3)),
        },
        coords={"pixel": ["r", "g", "b"]},
    )
    path = tmp_path / f"raw.{fmt}"
    getattr(datasets, f"write_{fmt}")(raw, path)
    data = getattr(datasets, f"read_{fmt}")(path, x="pixels", y="label", chunk_size=3)
    _check_convention(data, 8, 3, (3, 3, 2))
    assert set(data.data_vars) == {"X", "y"}
    assert data.feature.values.tolist() == ["r", "g", "b"]
    np.testing.assert_array_equal(_local(data.X), raw.pixels.values.astype(np.float64))
    np.testing.assert_array_equal(_local(data.y), raw.label.values)
    unlabelled = getattr(datasets, f"read_{fmt}")(path, x="pixels", y=None)
    assert set(unlabelled.data_vars) == {"X"}


def test_read_zarr_errors(tmp_path):
    """Missing variables, wrong shapes and missing paths say what and how to fix."""
    raw = xr.Dataset({"X": (("a", "b"), np.ones((4, 2))), "lab": (("b",), np.ones(2))})
    path = tmp_path / "bad.zarr"
    datasets.write_zarr(raw, path)
    cases = [
        (
            {},
            r"read_zarr: '.*bad\.zarr' has no variable y='y'; its variables are "
            r"\['X', 'lab'\]\. Pass y=None for data without labels\.",
        ),
        ({"x": "x", "y": None}, r"has no variable x='x'; .* Did you mean 'X'\?"),
        (
            {"y": "lab"},
            r"variable 'lab' must be 1-D along 'X''s first dim 'a', found dims \('b',\)",
        ),
        ({"x": "lab", "y": None}, r"variable 'lab' must be 2-D \(samples, features\)"),
    ]
    for kwargs, message in cases:
        with pytest.raises(DataError, match=message):
            datasets.read_zarr(path, **kwargs)
    with pytest.raises(DataError, match=r"read_zarr: no file or directory at path='.*nowhere"):
        datasets.read_zarr(tmp_path / "nowhere.zarr")


@pytest.fixture
def table():
    """A small table with numeric features, a text column and an integer label."""
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "height": rng.normal(size=500),
            "weight": rng.integers(0, 100, size=500),
            "smoker": rng.integers(0, 2, size=500).astype(bool),
            "label": rng.integers(0, 3, size=500),
        }
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_table_round_trip(fmt, table, tmp_path):
    """CSV and Parquet give float64 X from the features and y from the target."""
    path = tmp_path / f"table.{fmt}"
    if fmt == "csv":
        table.to_csv(path, index=False)
        data = datasets.read_csv(path, target="label", blocksize=4_000)
        assert len(data.X.chunks[0]) > 1, "blocksize splits the file"
    else:
        table.to_parquet(path)
        data = datasets.read_parquet(path, target="label")
    _check_convention(data, 500, 3, data.X.chunks[0])
    assert data.feature.values.tolist() == ["height", "weight", "smoker"]
    expected = table[["height", "weight", "smoker"]].to_numpy(float)
    np.testing.assert_allclose(_local(data.X), expected)
    np.testing.assert_array_equal(_local(data.y), table.label.to_numpy())
    assert key_split(data.X.data.name) == f"read_{fmt}"
    chosen = getattr(datasets, f"read_{fmt}")(path, features=["weight"])
    assert chosen.feature.values.tolist() == ["weight"] and "y" not in chosen


def test_a_folder_of_parquet_files_keeps_one_chunk_per_file(table, tmp_path, client):
    """A folder of small Parquet files gives X and y one chunk per file on a cluster (dask
    would otherwise fuse the partitions of the one-column selection behind y)."""
    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(4):
        table.iloc[i * 125 : (i + 1) * 125].to_parquet(folder / f"part{i}.parquet")
    data = datasets.read_parquet(folder, target="label")
    assert data.X.chunks[0] == data.y.chunks[0] == (125, 125, 125, 125)
    X, y = client.compute([data.X.data, data.y.data], sync=True)
    np.testing.assert_array_equal(y, table.label.to_numpy())
    assert X.shape == (500, 3)


def test_readers_and_writers_on_cluster(table, tmp_path, client, seed):
    """Files are written and read chunk by chunk on the workers of a real cluster."""
    path = tmp_path / "table.csv"
    table.to_csv(path, index=False)
    data = datasets.read_csv(path, target="label", blocksize=5_000)
    np.testing.assert_array_equal(data.y.data.compute(), table.label.to_numpy())

    blobs = _drawn(2_000, 2, chunk_size=600, seed=seed)
    expected = _local(blobs.X)
    datasets.write_zarr(blobs, tmp_path / "blobs.zarr")
    np.testing.assert_array_equal(datasets.read_zarr(tmp_path / "blobs.zarr").X.values, expected)
    datasets.write_netcdf(blobs, tmp_path / "blobs.nc")
    from_netcdf = datasets.read_netcdf(tmp_path / "blobs.nc", chunk_size=500)
    np.testing.assert_array_equal(from_netcdf.X.data.compute(), expected)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"target": "lable"},
            r"has no column target='lable'; its columns are "
            r"\['height', 'weight', 'smoker', 'label'\]\. Did you mean 'label'\?",
        ),
        (
            {"features": ["height", "wieght"]},
            r"has no column features='wieght'; .* Did you mean 'weight'\?",
        ),
        ({"target": "label", "features": ["label"]}, r"target='label' is also listed in features"),
    ],
)
def test_table_column_errors(fmt, kwargs, message, table, tmp_path):
    """A missing column names the file, the column, the columns and the closest match."""
    path = tmp_path / f"table.{fmt}"
    table.to_csv(path, index=False) if fmt == "csv" else table.to_parquet(path)
    with pytest.raises(DataError, match=message) as info:
        getattr(datasets, f"read_{fmt}")(path, **kwargs)
    assert str(info.value).startswith(f"read_{fmt}: {str(path)!r}")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_text_features_make_a_table(fmt, tmp_path):
    """Text and categorical columns give a table: one variable per column, file dtypes kept,
    missing text as nan, chunked like the file, and train_test_split splits it row-aligned."""
    frame = pd.DataFrame(
        {
            "a": np.arange(400.0),
            "city": (["Oslo", "Lima", None, "Pune"] * 100),
            "code": [1, 2, 3, 4] * 100,
            "label": [0, 1] * 200,
        }
    )
    path = tmp_path / f"text.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
        table = datasets.read_csv(path, target="label", categorical=["code"], blocksize=2_000)
    else:
        frame.to_parquet(path)
        table = datasets.read_parquet(path, target="label", categorical=["code"])
    assert sorted(table.data_vars) == ["a", "city", "code", "y"] and "X" not in table
    assert table.code.attrs == {"categorical": True} and not table.city.attrs
    assert table.a.dtype == np.float64 and table.code.dtype.kind == "i"
    city = table.city.values
    assert city.dtype == object and city[:2].tolist() == ["Oslo", "Lima"] and np.isnan(city[2])
    train, test = datasets.train_test_split(table, test_size=0.25, random_state=0)
    assert (train.sizes["sample"], test.sizes["sample"]) == (300, 100)
    rows = test.a.values.astype(int)
    np.testing.assert_array_equal(rows, _reference_test_rows(400, 0.25, 0))
    np.testing.assert_array_equal(test.code.values, frame.code.to_numpy()[rows])
    np.testing.assert_array_equal(test.y.values, frame.label.to_numpy()[rows])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_every_column_of_a_chunk_comes_from_one_read(fmt, tmp_path):
    """The columns of a table (and X and y) take chunk i from one task that reads partition
    i: dask plans each column selection of a frame as a read of its own, and a table of 31
    columns parsed every CSV chunk 32 times. The values are the file's (with a nullable
    integer column: its missing value is nan)."""
    frame = pd.DataFrame({f"f{i}": np.arange(300.0) + i for i in range(6)})
    frame["city"] = ["Oslo", "Lima", "Pune"] * 100
    frame["count"] = pd.array([1, None, 3] * 100, dtype="Int64")
    frame["label"] = [0, 1, 1] * 100
    path = tmp_path / f"wide.{fmt}"
    if fmt == "csv":
        frame.drop(columns="count").to_csv(path, index=False)
        table = datasets.read_csv(path, target="label", blocksize=2_000)
        numeric = datasets.read_csv(path, target="label", features=["f0", "f1"], blocksize=2_000)
    else:
        frame.to_parquet(path, row_group_size=100)
        table = datasets.read_parquet(path, target="label")
        numeric = datasets.read_parquet(path, target="label", features=["f0", "f1"])
    for data in (table, numeric):
        graph = dict(data.__dask_graph__())
        chunks = len(data.y.chunks[0])
        names = [v.data.name for v in data.data_vars.values()]
        for i in range(chunks):
            reads = {
                frozenset(dask.core.get_dependencies(graph, key))
                for key in graph
                if isinstance(key, tuple) and key[0] in names and key[1] == i
            }
            assert len(reads) == 1, (fmt, i, reads)
    expected = frame.drop(columns="count") if fmt == "csv" else frame
    for column in expected.columns.drop("label"):
        values = table[column].values
        if column == "count":
            np.testing.assert_array_equal(values, [1.0, np.nan, 3.0] * 100)
        else:
            np.testing.assert_array_equal(values, expected[column].to_numpy())
    np.testing.assert_array_equal(table.y.values, expected.label.to_numpy())
    np.testing.assert_array_equal(numeric.X.values, expected[["f0", "f1"]].to_numpy())


def test_categorical_column_errors(tmp_path):
    """A categorical column that is missing or not a feature is named, with the fix."""
    path = tmp_path / "text.csv"
    pd.DataFrame({"a": [1.0, 2.0], "city": ["Oslo", "Lima"], "y": [0, 1]}).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"no column categorical='cty'.*Did you mean 'city'"):
        datasets.read_csv(path, categorical=["cty"])
    with pytest.raises(DataError, match=r"categorical column 'y' is not a feature"):
        datasets.read_csv(path, target="y", categorical=["y"])


def test_read_csv_in_a_span_does_not_warn(tmp_path, client):
    """Reading inside a step's span (dask annotations) does not warn about annotations."""
    import warnings

    from distributed import span

    path = tmp_path / "text.csv"
    pd.DataFrame({"a": [1.0, 2.0], "city": ["Oslo", "Lima"]}).to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with span("read"):
            table = datasets.read_csv(path)
            from taskdml._data import unwrap

            frame = unwrap(table).X
    assert frame.compute()["city"].tolist() == ["Oslo", "Lima"]


# --------------------------------------------------------------------------------------------
# train_test_split
# --------------------------------------------------------------------------------------------


def _indexed(n_samples, chunk_size):
    """Data whose X holds each row's global index, to see where rows go."""
    rows = da.arange(n_samples, chunks=chunk_size, dtype=np.float64)
    X = da.stack([rows, -rows], axis=1).rechunk({1: -1})
    return xr.Dataset(
        {"X": (("sample", "feature"), X), "y": (("sample",), rows.astype(np.int64))},
        coords={"feature": ["i", "minus_i"]},
    )


def _rows(part):
    return _local(part.X)[:, 0].astype(np.int64)


_M64 = (1 << 64) - 1


def _splitmix64(x):
    """splitmix64 of one integer, in Python's integers (no NumPy wrap-around)."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _reference_test_rows(n_samples, test_size, seed):
    """The split's definition computed directly: scikit-learn's test size, and the rows whose
    splitmix64(offset + row) are the smallest, by a full sort (the library streams a histogram).
    """
    n_test = len(
        sklearn.model_selection.train_test_split(np.arange(n_samples), test_size=test_size)[1]
    )
    offset = int(np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(1, np.uint64)[0])
    hashes = [_splitmix64((offset + row) & _M64) for row in range(n_samples)]
    return np.sort(np.argsort(hashes)[:n_test])


@pytest.mark.parametrize("test_size, n_test", [(0.25, 250), (0.3333, 334), (1, 1), (999, 999)])
def test_split_is_an_exact_partition(test_size, n_test, seed):
    """Train and test are disjoint, cover every row in order, and test has the sklearn size and
    the rows of the split's definition."""
    data = _indexed(1_000, 128)
    train, test = datasets.train_test_split(data, test_size=test_size, random_state=seed)
    train_rows, test_rows = _rows(train), _rows(test)
    assert len(test_rows) == n_test and test.sizes["sample"] == n_test
    np.testing.assert_array_equal(test_rows, _reference_test_rows(1_000, test_size, seed))
    assert np.intersect1d(train_rows, test_rows).size == 0
    everything = np.sort(np.concatenate([train_rows, test_rows]))
    np.testing.assert_array_equal(everything, np.arange(1_000))
    assert (np.diff(train_rows) > 0).all() and (np.diff(test_rows) > 0).all()
    np.testing.assert_array_equal(_local(train.y), train_rows)
    assert train.feature.values.tolist() == ["i", "minus_i"]
    for part in (train, test):
        assert all(c > 0 for c in part.X.chunks[0]), "no empty chunk"
        assert part.X.chunks[0] == part.y.chunks[0]
        assert part.X.chunks[1] == (2,)


@settings(max_examples=25, deadline=None)
@given(
    n_samples=st.integers(2, 5_000),
    chunk_a=st.integers(1, 5_000),
    chunk_b=st.integers(1, 5_000),
    test_size=st.floats(0.01, 0.99),
    random_state=st.integers(0, 2**32),
)
def test_split_does_not_depend_on_chunking(n_samples, chunk_a, chunk_b, test_size, random_state):
    """Property: for a seed the same rows go to test whatever the input chunking: the rows of
    the split's definition, computed directly."""
    chunk_a = max(chunk_a, n_samples // 40 + 1)
    chunk_b = max(chunk_b, n_samples // 40 + 1)
    assume(math.ceil(test_size * n_samples) < n_samples)
    parts_a = datasets.train_test_split(
        _indexed(n_samples, chunk_a), test_size=test_size, random_state=random_state
    )
    parts_b = datasets.train_test_split(
        _indexed(n_samples, chunk_b), test_size=test_size, random_state=random_state
    )
    for a, b in zip(parts_a, parts_b):
        np.testing.assert_array_equal(_rows(a), _rows(b))
        assert all(c > 0 for c in a.X.chunks[0])
    expected = _reference_test_rows(n_samples, test_size, random_state)
    np.testing.assert_array_equal(_rows(parts_a[1]), expected)


def test_split_seed_determines_rows():
    """Same seed, same split; another seed, another split; the fraction is right."""
    data = _indexed(20_000, 3_000)
    a = _rows(datasets.train_test_split(data, random_state=5)[1])
    b = _rows(datasets.train_test_split(data, random_state=5)[1])
    c = _rows(datasets.train_test_split(data, random_state=6)[1])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert len(a) == 5_000
    np.testing.assert_array_equal(c, _reference_test_rows(20_000, 0.25, 6))
    # the test rows are spread evenly, not bunched: about a quarter of every chunk
    per_chunk = np.bincount(a // 3_000)
    np.testing.assert_allclose(per_chunk[:-1] / 3_000, 0.25, atol=0.04)


def test_split_keeps_chunks_in_place_and_names_keys(seed):
    """Each output chunk is one task on one input chunk: no rechunk, no gather, named keys; the
    test chunk of input chunk i holds chunk i's rows of the split's definition."""
    data = datasets.make_classification(10_000, 4, chunk_size=1_000, random_state=seed)
    train, test = datasets.train_test_split(data, random_state=seed)
    expected = _reference_test_rows(10_000, 0.25, seed)
    X = _local(data.X)
    for i, block in enumerate(test.X.data.blocks):
        in_chunk = expected[(expected >= 1_000 * i) & (expected < 1_000 * (i + 1))]
        np.testing.assert_array_equal(_local(block), X[in_chunk])
    for part, side in ((train, "train"), (test, "test")):
        assert {key_split(k) for k in dask.core.flatten(part.X.data.__dask_keys__())} == {
            f"train_test_split-{side}"
        }
        graph = part.X.data.__dask_graph__()
        layer = graph.layers[part.X.data.name]
        assert len(layer) == len(part.X.chunks[0])
        assert graph.dependencies[part.X.data.name] == {data.X.data.name}
        assert not any(key_split(k).startswith("rechunk") for k in dict(graph))


def test_split_drops_chunks_left_empty(seed):
    """With one-row chunks the empty outputs are dropped, not kept as 0-row chunks; the rows
    kept are those of the split's definition."""
    data = _indexed(60, 1)
    train, test = datasets.train_test_split(data, test_size=10, random_state=seed)
    assert test.X.chunks[0] == (1,) * 10 and train.X.chunks[0] == (1,) * 50
    expected = _reference_test_rows(60, 10, seed)
    np.testing.assert_array_equal(_rows(test), expected)
    np.testing.assert_array_equal(_rows(train), np.setdiff1d(np.arange(60), expected))


def test_split_on_cluster_equals_local(client, seed):
    """The 2-worker cluster computes the same split as the local scheduler, and the rows of
    the split's definition."""
    data = datasets.make_regression(8_000, 5, chunk_size=1_100, random_state=seed)
    train, test = datasets.train_test_split(data, test_size=0.3, random_state=seed)
    computed = client.compute([train.X.data, test.y.data], sync=True)
    np.testing.assert_array_equal(computed[0], _local(train.X))
    np.testing.assert_array_equal(computed[1], _local(test.y))
    expected = _reference_test_rows(8_000, 0.3, seed)
    np.testing.assert_array_equal(computed[1], _local(data.y)[expected])


def test_split_in_memory_variables_and_coordinates(seed):
    """Variables and coordinates along sample that are not dask arrays are split alike."""
    data = _indexed(300, 70).assign_coords(sample=np.arange(300) * 10)
    data["weight"] = (("sample",), np.arange(300.0))
    data["scale"] = (("feature",), np.array([1.0, 2.0]))
    train, test = datasets.train_test_split(data, random_state=seed)
    for part in (train, test):
        rows = _rows(part)
        np.testing.assert_array_equal(part.sample.values, rows * 10)
        np.testing.assert_array_equal(part.weight.values, rows)
        np.testing.assert_array_equal(part.scale.values, [1.0, 2.0])
    expected = _reference_test_rows(300, 0.25, seed)  # the rows of the split's definition
    np.testing.assert_array_equal(test.sample.values, expected * 10)
    np.testing.assert_array_equal(test.weight.values, expected)
    np.testing.assert_array_equal(train.weight.values, np.setdiff1d(np.arange(300), expected))


def test_split_output_writes_to_zarr(tmp_path, seed):
    """Irregular split chunks are rechunked by write_zarr and read back intact, by read_zarr and
    by xarray itself; what comes back is the training rows of the split's definition."""
    data = datasets.make_blobs(3_000, chunk_size=700, random_state=seed)
    train, _ = datasets.train_test_split(data, random_state=seed)
    datasets.write_zarr(train, tmp_path / "train.zarr")
    back = datasets.read_zarr(tmp_path / "train.zarr")
    np.testing.assert_array_equal(_local(back.X), _local(train.X))
    indexed, _ = datasets.train_test_split(_indexed(3_000, 700), random_state=seed)
    datasets.write_zarr(indexed, tmp_path / "indexed.zarr")
    rows = np.setdiff1d(np.arange(3_000), _reference_test_rows(3_000, 0.25, seed))
    np.testing.assert_array_equal(_rows(datasets.read_zarr(tmp_path / "indexed.zarr")), rows)
    with xr.open_zarr(tmp_path / "train.zarr", consolidated=False) as plain:
        np.testing.assert_array_equal(plain.X.values, _local(train.X))
        np.testing.assert_array_equal(plain.y.values, _local(train.y))


@pytest.mark.parametrize(
    "data, kwargs, message",
    [
        (
            "ok",
            {"test_size": 0.0},
            r"test_size must be a float in \(0, 1\) or an integer number of rows, got 0\.0",
        ),
        ("ok", {"test_size": 1.0}, r"test_size must be a float in \(0, 1\).*got 1\.0"),
        ("ok", {"test_size": True}, r"test_size must be a float in \(0, 1\).*got True"),
        (
            "ok",
            {"test_size": 100},
            r"an integer test_size must be between 1 and n_samples - 1 = 99, got 100",
        ),
        ("ok", {"test_size": 0.999}, r"test_size=0\.999 of 100 samples leaves no training rows"),
        (
            "no_sample",
            {},
            r"data must have a 'sample' dim; found dims \['samples', 'feature'\]\. "
            r"Did you mean 'samples'\?",
        ),
        ("array", {}, r"data must be an xarray\.Dataset, got Array"),
    ],
)
def test_split_errors(data, kwargs, message):
    """Bad arguments name the parameter, the expected and the found value."""
    ok = _indexed(100, 30)
    data = {"ok": ok, "no_sample": ok.rename(sample="samples"), "array": ok.X.data}[data]
    with pytest.raises(DataError, match=message) as info:
        datasets.train_test_split(data, **kwargs)
    assert str(info.value).startswith("train_test_split: ")
