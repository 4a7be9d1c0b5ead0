"""DataParallel: the engine as a scikit-learn meta-estimator, on NumPy, dask and xarray."""

import re
import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.cluster import Birch
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression, SGDClassifier, SGDRegressor
from sklearn.metrics import r2_score
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from taskdml import DataError
from taskdml.parallel import DataParallel, SequentialFallbackWarning, train

SAMPLE_WEIGHT_XFAIL = {
    # scikit-learn marks this check xfail for SGDClassifier/SGDRegressor themselves
    # (meta-issue #16298): SGD's sample_weight scales steps, it does not repeat rows.
    "check_sample_weight_equivalence_on_dense_data": (
        "sample_weight is not equivalent to removing/repeating samples for SGD."
    ),
    "check_sample_weight_equivalence_on_sparse_data": (
        "sample_weight is not equivalent to removing/repeating samples for SGD."
    ),
}


def _expected_failed_checks(estimator):
    if isinstance(estimator.estimator, SGDClassifier | SGDRegressor):
        return SAMPLE_WEIGHT_XFAIL
    return {}


@parametrize_with_checks(
    [
        DataParallel(SGDClassifier(random_state=0), epochs=5),
        DataParallel(SGDRegressor(random_state=0), epochs=5),
        DataParallel(StandardScaler()),
        DataParallel(MultinomialNB()),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_check_estimator(estimator, check):
    """DataParallel passes scikit-learn's estimator checks (engine on threads, no client)."""
    check(estimator)


def _data(n_samples=2_000, n_features=8, chunk_size=250, seed=0):
    X, y = make_classification(
        n_samples,
        n_features,
        n_informative=4,
        class_sep=2.0,
        n_clusters_per_class=1,
        random_state=seed,
    )
    return X, y, da.from_array(X, chunks=(chunk_size, -1)), da.from_array(y, chunks=chunk_size)


def _serial(estimator, X_chunks, y_chunks, epochs, **fit_kwargs):
    """The reference: partial_fit on each chunk in order, *epochs* times, in this process."""
    estimator = clone(estimator)
    for _ in range(epochs):
        for X_chunk, y_chunk in zip(X_chunks, y_chunks):
            estimator.partial_fit(X_chunk, y_chunk, **fit_kwargs)
    return estimator


def test_fit_on_the_cluster_equals_the_engine(client):
    """On a 2-worker cluster, fit on dask arrays gives the engine's model, bit for bit, and
    scores within 2 points of the serial partial_fit loop over the same chunks and epochs."""
    X_np, y_np, X, y = _data()
    model = DataParallel(SGDClassifier(random_state=0), epochs=2, shuffle=False).fit(X, y)
    reference = train(SGDClassifier(random_state=0), X, y, epochs=2, shuffle=False)
    assert model.strategy_ == reference.strategy == "sync"
    np.testing.assert_array_equal(model.estimator_.coef_, reference.estimator.coef_)
    np.testing.assert_array_equal(model.classes_, [0, 1])
    assert model.n_epochs_ == 2 and model.n_features_in_ == 8
    assert [entry["samples_seen"] for entry in model.history_] == [2_000, 4_000]
    predicted = model.predict(X)
    assert isinstance(predicted, da.Array)
    np.testing.assert_array_equal(predicted.compute(), reference.estimator.predict(X.compute()))
    assert model.score(X, y) == pytest.approx(reference.estimator.score(X.compute(), y.compute()))
    serial = _serial(
        SGDClassifier(random_state=0), np.split(X_np, 8), np.split(y_np, 8), 2, classes=[0, 1]
    )
    assert abs(model.score(X, y) - serial.score(X_np, y_np)) <= 0.02


def test_sample_weight_reaches_every_chunk():
    """Weights on dask chunks train an exact rule (MultinomialNB) like one weighted fit."""
    X_np, y_np, X, y = _data()
    X_np, X = abs(X_np), abs(X)
    weights = np.random.default_rng(0).uniform(0, 3, size=2_000)
    model = DataParallel(MultinomialNB(), n_replicas=2).fit(
        X, y, sample_weight=da.from_array(weights, chunks=250)
    )
    reference = MultinomialNB().fit(X_np, y_np, sample_weight=weights)
    np.testing.assert_allclose(
        model.estimator_.feature_count_, reference.feature_count_, rtol=1e-10
    )
    np.testing.assert_allclose(model.estimator_.class_count_, reference.class_count_, rtol=1e-10)


def test_sample_weight_reaches_an_estimator_without_partial_fit():
    """LogisticRegression fitted once with weights equals LogisticRegression fitted with weights."""
    X_np, y_np, X, y = _data(n_samples=1_000)
    weights = np.random.default_rng(0).uniform(0, 5, size=1_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallbackWarning)
        model = DataParallel(LogisticRegression()).fit(X_np, y_np, sample_weight=weights)
    reference = LogisticRegression().fit(X_np, y_np, sample_weight=weights)
    np.testing.assert_allclose(model.estimator_.coef_, reference.coef_, rtol=1e-6)


def test_numpy_on_the_cluster(client):
    """NumPy input with a client trains on the cluster (exact for a scaler), NumPy comes back;
    the classifier scores within 2 points of scikit-learn's SGDClassifier fitted in memory."""
    X_np, y_np, _, _ = _data()
    scaler = DataParallel(StandardScaler(), epochs=1).fit(X_np)  # one pass, as replicas
    assert scaler.strategy_ == "sync"
    np.testing.assert_allclose(scaler.estimator_.mean_, X_np.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(
        scaler.transform(X_np), StandardScaler().fit_transform(X_np), atol=1e-10
    )
    X_scaled = scaler.transform(X_np)
    model = DataParallel(SGDClassifier(random_state=0), epochs=3, random_state=0).fit(
        X_scaled, y_np
    )
    assert isinstance(model.predict(X_scaled), np.ndarray)
    in_memory = SGDClassifier(random_state=0, max_iter=3, tol=None).fit(X_scaled, y_np)
    assert abs(model.score(X_scaled, y_np) - in_memory.score(X_scaled, y_np)) <= 0.02


def test_outputs_follow_the_input_kind():
    """NumPy in gives NumPy, dask in gives lazy dask with named keys, xarray in gives xarray."""
    X_np, y_np, X, y = _data()
    model = DataParallel(
        SGDClassifier(loss="log_loss", random_state=0), epochs=2, random_state=0
    ).fit(X, y)
    expected = model.estimator_.predict_proba(X_np)

    assert isinstance(model.predict_proba(X_np), np.ndarray)
    lazy = model.predict_proba(X)
    assert isinstance(lazy, da.Array) and lazy.chunks == (X.chunks[0], (2,))
    assert lazy.name.startswith("dataparallel-predict-proba-")
    assert sum(1 for key in dict(lazy.dask) if str(key).startswith("dataparallel-model-")) == 1
    np.testing.assert_allclose(lazy.compute(), expected)

    data = xr.Dataset(
        {"X": (("sample", "feature"), X), "y": ("sample", y)},
        coords={"sample": np.arange(2_000) * 10},
    )
    proba = model.predict_proba(data)
    assert isinstance(proba, xr.DataArray) and proba.dims == ("sample", "class")
    assert isinstance(proba.data, da.Array)
    np.testing.assert_array_equal(proba["class"], [0, 1])
    np.testing.assert_array_equal(proba["sample"], np.arange(2_000) * 10)
    np.testing.assert_allclose(proba.values, expected)
    assert model.predict(data).dims == ("sample",)
    assert model.score(data) == pytest.approx(model.estimator_.score(X_np, y_np))


def test_transform_on_xarray_keeps_feature_names():
    """A data-parallel scaler's xarray output is (sample, feature) with the input's names."""
    X_np, _, X, _ = _data()
    names = [f"f{i}" for i in range(8)]
    array = xr.DataArray(X, dims=("sample", "feature"), coords={"feature": names})
    scaler = DataParallel(StandardScaler()).fit(array)
    scaled = scaler.transform(array)
    assert scaled.dims == ("sample", "feature") and list(scaled["feature"].values) == names
    np.testing.assert_allclose(scaled.values, StandardScaler().fit_transform(X_np), atol=1e-10)


def test_fit_on_a_dataset_with_y_inside():
    """A Dataset's X and y are used; fitting on it equals fitting on the arrays, and (one
    replica, chunks in order) the serial partial_fit loop over its chunks."""
    X_np, y_np, X, y = _data()
    data = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)})
    from_dataset = DataParallel(SGDClassifier(random_state=0), random_state=0).fit(data)
    from_arrays = DataParallel(SGDClassifier(random_state=0), random_state=0).fit(X, y)
    np.testing.assert_array_equal(from_dataset.estimator_.coef_, from_arrays.estimator_.coef_)
    in_order = DataParallel(
        SGDClassifier(random_state=0), epochs=1, n_replicas=1, shuffle=False
    ).fit(data)
    serial = _serial(
        SGDClassifier(random_state=0), np.split(X_np, 8), np.split(y_np, 8), 1, classes=[0, 1]
    )
    np.testing.assert_array_equal(in_order.estimator_.coef_, serial.coef_)


def test_partial_fit_continues():
    """Each partial_fit is one more epoch: n_epochs_ and history_ grow, the model moves on; with
    one replica and no shuffling two calls are the serial partial_fit loop, bit for bit."""
    X_np, y_np, X, y = _data()
    model = DataParallel(SGDClassifier(random_state=0), random_state=0)
    model.partial_fit(X, y)
    first = model.estimator_.coef_.copy()
    assert model.n_epochs_ == 1 and len(model.history_) == 1
    model.partial_fit(X[:1_000], y[:1_000])
    assert model.n_epochs_ == 2 and [e["epoch"] for e in model.history_] == [1, 2]
    assert [e["samples_seen"] for e in model.history_] == [2_000, 3_000]
    assert not np.array_equal(model.estimator_.coef_, first)
    with pytest.raises(ValueError, match="X has 3 features, but DataParallel is expecting 8"):
        model.partial_fit(X[:, :3], y)
    single = DataParallel(SGDClassifier(random_state=0), n_replicas=1, shuffle=False)
    single.partial_fit(X, y).partial_fit(X[:1_000], y[:1_000])
    serial = _serial(
        SGDClassifier(random_state=0),
        np.split(X_np, 8) + np.split(X_np[:1_000], 4),
        np.split(y_np, 8) + np.split(y_np[:1_000], 4),
        1,
        classes=[0, 1],
    )
    np.testing.assert_array_equal(single.estimator_.coef_, serial.coef_)
    np.testing.assert_array_equal(single.estimator_.intercept_, serial.intercept_)


def test_clone_and_params():
    """get_params reaches the wrapped estimator; clone copies parameters, not fitted state."""
    model = DataParallel(SGDClassifier(alpha=0.1), epochs=3, sync_every=2)
    assert model.get_params()["estimator__alpha"] == 0.1
    model.set_params(estimator__alpha=0.5, epochs=4)
    copy = clone(model.fit(*_data(n_samples=200)[:2]))
    assert copy.get_params()["estimator__alpha"] == 0.5 and copy.epochs == 4
    assert not hasattr(copy, "estimator_")
    assert is_classifier(model) and is_regressor(DataParallel(SGDRegressor()))
    assert not hasattr(DataParallel(SGDClassifier()), "predict_proba")
    assert hasattr(DataParallel(SGDClassifier(loss="log_loss")), "predict_proba")


def test_inside_a_scikit_learn_pipeline():
    """make_pipeline(StandardScaler(), DataParallel(SGDClassifier())) fits and scores NumPy
    within 2 points of the same pipeline with scikit-learn's SGDClassifier fitted in memory."""
    X_np, y_np, _, _ = _data()
    pipeline = make_pipeline(
        StandardScaler(), DataParallel(SGDClassifier(random_state=0), epochs=3, random_state=0)
    )
    in_memory = make_pipeline(StandardScaler(), SGDClassifier(random_state=0, max_iter=3, tol=None))
    expected = in_memory.fit(X_np, y_np).score(X_np, y_np)
    assert pipeline.fit(X_np, y_np).score(X_np, y_np) == pytest.approx(expected, abs=0.02)
    frame = pd.DataFrame(X_np, columns=[f"c{i}" for i in range(8)])
    model = DataParallel(StandardScaler()).fit(frame)
    np.testing.assert_allclose(
        model.transform(frame), StandardScaler().fit(frame).transform(frame), atol=1e-12
    )
    assert list(model.feature_names_in_) == list(frame.columns)
    assert list(model.get_feature_names_out()) == list(frame.columns)


def test_unmergeable_estimator_falls_back_to_sequential():
    """Birch cannot be merged: a SequentialFallbackWarning, strategy_ says sequential, and the
    model is scikit-learn's serial partial_fit loop over the same chunks, bit for bit."""
    X_np, y_np, X, y = _data(n_samples=600, chunk_size=200)
    with pytest.warns(SequentialFallbackWarning, match="Birch cannot be merged"):
        model = DataParallel(Birch(n_clusters=2), strategy="sync", shuffle=False).fit(X)
    assert model.strategy_ == "sequential"
    chunks = [X_np[i : i + 200] for i in range(0, 600, 200)]
    reference = _serial(Birch(n_clusters=2), chunks, [None] * 3, epochs=1)
    np.testing.assert_array_equal(
        model.estimator_.subcluster_centers_, reference.subcluster_centers_
    )
    np.testing.assert_array_equal(model.predict(X_np), reference.predict(X_np))


def test_estimator_without_partial_fit_is_fitted_once():
    """LogisticRegression is fitted once on all the data, says so, and has no partial_fit."""
    X_np, y_np, X, y = _data()
    with pytest.warns(SequentialFallbackWarning, match="has no partial_fit"):
        model = DataParallel(LogisticRegression(), epochs=5).fit(X, y)
    assert model.strategy_ == "fit" and model.n_epochs_ == 1 and len(model.history_) == 1
    np.testing.assert_allclose(
        model.estimator_.coef_, LogisticRegression().fit(X_np, y_np).coef_, rtol=1e-6
    )
    assert not hasattr(model, "partial_fit")


class BlasThreads(LogisticRegression):
    """A LogisticRegression that keeps the BLAS threads it was fitted with
    (``blas_threads_``, read from threadpoolctl as the fit starts)."""

    def fit(self, X, y, sample_weight=None):
        self.blas_threads_ = _blas_threads()
        return super().fit(X, y, sample_weight)


def _blas_threads():
    from threadpoolctl import threadpool_info

    return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")


def test_a_lone_fit_uses_the_threads_of_its_hosts_idle_workers(client):
    """A training fitted once, in one task, gets the BLAS threads of the session cluster's
    idle workers on its host (one each: both workers, when nothing else runs), only its own
    worker's when the other one is busy (held by a task until the fit is done, its start
    known from an Event), and leaves the worker's own setting as distributed made it; the
    model is LogisticRegression's fitted in memory."""
    import uuid

    from distributed import Event

    X_np, y_np, X, y = _data()
    first, other = sorted(client.nthreads())
    X, y = client.persist([X, y], workers=[first])
    model = DataParallel(BlasThreads()).fit(X, y)
    assert model.strategy_ == "fit"
    assert model.estimator_.blas_threads_ == sum(client.nthreads().values()) == 2
    assert set(client.run(_blas_threads).values()) == {1}
    np.testing.assert_allclose(
        model.estimator_.coef_, LogisticRegression().fit(X_np, y_np).coef_, rtol=1e-6
    )
    name = uuid.uuid4().hex
    started, release = Event(f"{name}-started"), Event(f"{name}-release")

    def hold():
        Event(f"{name}-started").set()
        return Event(f"{name}-release").wait(60)

    held = client.submit(hold, workers=[other], pure=False)
    try:
        assert started.wait(60)
        busy = DataParallel(BlasThreads(C=0.5)).fit(X, y)
    finally:
        release.set()
    assert held.result() and busy.estimator_.blas_threads_ == client.nthreads()[first] == 1


@pytest.mark.parametrize("validation", [0.2, "tuple"])
def test_early_stopping_on_validation(validation):
    """On an easy problem the validation score stops improving and training stops early; each
    epoch's validation score is within 2 points of scikit-learn's SGDClassifier fitted in memory
    on the rows given (scored on held-out rows), and with a tuple it is the model's own score."""
    X_np, y_np, X, y = _data(n_samples=4_500, chunk_size=500)
    X, y = X[:4_000], y[:4_000]
    if validation == "tuple":
        validation = (X_np[4_000:], y_np[4_000:])
    model = DataParallel(
        SGDClassifier(random_state=0),
        epochs=40,
        validation=validation,
        n_iter_no_change=2,
        tol=1e-3,
        random_state=0,
    ).fit(X, y)
    assert 3 <= model.n_epochs_ < 40 and len(model.history_) == model.n_epochs_
    in_memory = SGDClassifier(random_state=0).fit(X_np[:4_000], y_np[:4_000])
    expected = in_memory.score(X_np[4_000:], y_np[4_000:])
    for entry in model.history_:
        assert abs(entry["validation_score"] - expected) <= 0.02, (entry, expected)
    if isinstance(model.validation, float):
        assert model.history_[0]["samples_seen"] == 3_200
    else:
        assert model.history_[-1]["validation_score"] == model.estimator_.score(*validation)


def _nan_at(X_np, row):
    X_np = X_np.copy()
    X_np[row, 1] = np.nan
    return X_np


@pytest.mark.parametrize(
    "make_input,error,message",
    [
        (
            lambda X, y: (da.from_array(_nan_at(X, 600), chunks=(250, -1)), y),
            DataError,
            "chunk 2 (rows 500–749) of X holds 1 NaN",
        ),
        (
            lambda X, y: (_nan_at(X, 1_500), y),
            DataError,
            "chunk 1 (rows 1,000–1,999) of X holds 1 NaN",
        ),
        (
            lambda X, y: (xr.DataArray(X, dims=("row", "feature")), y),
            DataError,
            "X has dims ('row', 'feature'); expected ('sample', 'feature')",
        ),
        (
            lambda X, y: (xr.Dataset({"x": (("sample", "feature"), X)}), None),
            DataError,
            "the Dataset has no variable 'X'. Did you mean 'x'?",
        ),
        (
            lambda X, y: (xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)}), y),
            DataError,
            "y was given twice",
        ),
        (lambda X, y: (X, None), ValueError, "DataParallel requires y to be passed"),
    ],
)
def test_bad_input_is_named(make_input, error, message):
    """Bad data fails with a message that says where (the chunk and its rows) and what."""
    X_np, y_np, _, _ = _data()
    X, y = make_input(X_np, y_np)
    with pytest.raises(error, match=re.escape(message)):
        DataParallel(SGDClassifier()).fit(X, y)


@pytest.mark.parametrize(
    "params,message",
    [
        (
            {"strategy": "synk"},
            "strategy must be one of 'sync', 'async', 'sequential'; got 'synk'. "
            "Did you mean 'sync'?",
        ),
        (
            {"epochs": 0},
            "epochs must be an integer >= 1 or 'auto' (as far as the estimator's own fit "
            "would train); got 0.",
        ),
        ({"chunk_size": 2.5}, "chunk_size must be an integer >= 1 or None; got 2.5."),
        (
            {"validation": 1.5},
            "validation must be a fraction in (0, 1), a tuple (X_val, y_val) or None",
        ),
    ],
)
def test_bad_parameters_are_named_at_fit(params, message):
    """Invalid parameters are reported by fit (not __init__), naming the parameter."""
    model = DataParallel(SGDClassifier(), **params)
    with pytest.raises(ValueError, match=re.escape(message)):
        model.fit(*_data(n_samples=200)[:2])


def test_score_on_dask_input_needs_a_classifier_or_regressor():
    """score on dask input is accuracy or r2; sample_weight there is refused with a fix."""
    X_np, y_np, X, y = _data()
    model = DataParallel(SGDRegressor(random_state=0), random_state=0).fit(X, y.astype(float))
    expected = r2_score(y_np, model.estimator_.predict(X_np))
    assert model.score(X, y.astype(float)) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="does not take sample_weight with dask input"):
        model.score(X, y, sample_weight=da.ones(2_000, chunks=250))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SequentialFallbackWarning)
        birch = DataParallel(Birch(n_clusters=2)).fit(X_np)
    assert not hasattr(birch, "score")
