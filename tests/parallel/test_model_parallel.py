"""Class-sharded model parallelism: ClassSharded equals the unsharded one-vs-rest model."""

import copy
import re

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, Perceptron, SGDClassifier
from sklearn.multiclass import OneVsRestClassifier
from sklearn.naive_bayes import GaussianNB
from sklearn.neural_network import MLPClassifier
from sklearn.utils.estimator_checks import parametrize_with_checks

from taskdml import ClassSharded

N_SAMPLES, N_FEATURES, N_CLASSES, CHUNK = 20_000, 50, 20, 5_000


@pytest.fixture(scope="module")
def data():
    """20 classes x 50 features x 20,000 rows, each class lifting one feature."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, N_CLASSES, N_SAMPLES)
    X = rng.normal(size=(N_SAMPLES, N_FEATURES))
    X[np.arange(N_SAMPLES), y % N_FEATURES] += 2.0
    return X, y


def _chunked(X, y):
    return da.from_array(X, chunks=(CHUNK, N_FEATURES)), da.from_array(y, chunks=CHUNK)


def _unsharded(estimator, X, y, classes=None):
    """The reference: ``partial_fit`` on the same chunks, in the same order, in this process."""
    estimator = copy.deepcopy(estimator)
    classes = np.unique(y) if classes is None else classes
    for start in range(0, len(y), CHUNK):
        rows = slice(start, start + CHUNK)
        estimator.partial_fit(X[rows], y[rows], classes=classes)
    return estimator


def _shards(model, client=None):
    return client.gather(model.shards_) if client is not None else model.shards_


def _stacked(shards, attribute):
    return np.concatenate(
        [np.atleast_1d(getattr(e, attribute)) for s in shards for e in s.estimators]
    )


ESTIMATORS = {
    "hinge": SGDClassifier(random_state=0),
    "log_loss": SGDClassifier(loss="log_loss", random_state=0),
    "modified_huber-elasticnet": SGDClassifier(
        loss="modified_huber", penalty="elasticnet", random_state=3
    ),
    "class_weight": SGDClassifier(class_weight={0: 3.0, 7: 0.5}, random_state=1),
    "random_state_instance": SGDClassifier(random_state=np.random.RandomState(5)),
    "perceptron": Perceptron(random_state=2),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("n_shards", [1, 3, N_CLASSES])
def test_sharded_equals_unsharded_on_threads(data, name, n_shards):
    """Without a client, every shard count gives the unsharded coef_/intercept_ bit for bit."""
    X, y = data
    estimator = ESTIMATORS[name]
    reference = _unsharded(clone(estimator), X, y)
    model = ClassSharded(clone(estimator), n_shards=n_shards).fit(*_chunked(X, y))
    shards = _shards(model)
    assert len(shards) == n_shards
    assert np.array_equal(
        np.vstack([e.coef_ for s in shards for e in s.estimators]), reference.coef_
    )
    assert np.array_equal(_stacked(shards, "intercept_"), reference.intercept_)
    assert np.array_equal(model.classes_, reference.classes_)
    assert np.array_equal(model.predict(X), reference.predict(X))
    np.testing.assert_allclose(
        model.decision_function(X), reference.decision_function(X), atol=1e-9
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n_shards", [1, 2, 5])
def test_sharded_equals_unsharded_on_a_cluster(client, data, n_shards):
    """On a real cluster the shards stay on workers, and equal the unsharded model."""
    X, y = data
    estimator = SGDClassifier(loss="log_loss", random_state=0)
    reference = _unsharded(estimator, X, y)
    X_d, y_d = _chunked(X, y)
    model = ClassSharded(estimator, n_shards=n_shards).fit(X_d, y_d)
    shards = _shards(model, client)
    assert np.array_equal(
        np.vstack([e.coef_ for s in shards for e in s.estimators]), reference.coef_
    )
    assert np.array_equal(_stacked(shards, "intercept_"), reference.intercept_)
    predicted = model.predict(X_d)
    assert isinstance(predicted, da.Array)
    assert np.array_equal(predicted.compute(), reference.predict(X))
    np.testing.assert_allclose(
        model.predict_proba(X_d).compute(), reference.predict_proba(X), rtol=0, atol=1e-12
    )
    assert model.score(X_d, y_d) == pytest.approx(reference.score(X, y))
    holders = client.who_has(model.shards_)
    assert all(len(holders[f.key]) == 1 for f in model.shards_)
    if n_shards >= 2:  # one shard per worker, round robin
        assert len({holders[f.key][0] for f in model.shards_}) == 2


@pytest.mark.timeout(180)
@pytest.mark.parametrize("base", [SGDClassifier(random_state=4), GaussianNB()])
def test_one_vs_rest_sharded_equals_unsharded(client, data, base):
    """A sharded OneVsRestClassifier holds the unsharded estimators_, predicts the same."""
    X, y = data
    reference = _unsharded(OneVsRestClassifier(base), X, y)
    X_d, y_d = _chunked(X, y)
    model = ClassSharded(OneVsRestClassifier(base), n_shards=3).fit(X_d, y_d)
    estimators = [e for s in _shards(model, client) for e in s.estimators]
    assert len(estimators) == len(reference.estimators_)
    for mine, theirs in zip(estimators, reference.estimators_):
        for attribute in ("coef_", "intercept_", "theta_", "var_", "class_count_"):
            if hasattr(theirs, attribute):
                assert np.array_equal(getattr(mine, attribute), getattr(theirs, attribute))
    assert np.array_equal(model.predict(X), reference.predict(X))
    if hasattr(base, "predict_proba"):
        np.testing.assert_allclose(model.predict_proba(X), reference.predict_proba(X), atol=1e-12)
    else:
        assert not hasattr(model, "predict_proba")


@pytest.mark.timeout(120)
def test_sample_weight_on_a_cluster(client, data):
    """Row weights reach every shard: equal to the unsharded model trained with them."""
    X, y = data
    weight = np.random.default_rng(1).uniform(0.1, 2.0, len(y))
    reference = SGDClassifier(random_state=0)
    for start in range(0, len(y), CHUNK):
        rows = slice(start, start + CHUNK)
        reference.partial_fit(X[rows], y[rows], classes=np.unique(y), sample_weight=weight[rows])
    model = ClassSharded(SGDClassifier(random_state=0), n_shards=2).fit(
        *_chunked(X, y), sample_weight=da.from_array(weight, chunks=CHUNK)
    )
    shards = _shards(model, client)
    assert np.array_equal(
        np.vstack([e.coef_ for s in shards for e in s.estimators]), reference.coef_
    )
    unweighted = ClassSharded(SGDClassifier(random_state=0), n_shards=2).fit(*_chunked(X, y))
    assert unweighted.shards_[0].key != model.shards_[0].key


@pytest.mark.timeout(60)
def test_xarray_dataset_and_explicit_classes(data):
    """An xarray Dataset chunked along samples trains; classes= may name unseen labels."""
    X, y = data
    dataset = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", y)}).chunk(
        {"sample": CHUNK}
    )
    classes = np.arange(N_CLASSES + 1)
    estimator = SGDClassifier(random_state=0)
    reference = _unsharded(estimator, X, y, classes=classes)
    model = ClassSharded(estimator, n_shards=4).fit(dataset, classes=classes)
    assert np.array_equal(model.classes_, classes)
    assert np.array_equal(
        np.vstack([e.coef_ for s in model.shards_ for e in s.estimators]), reference.coef_
    )
    assert np.array_equal(model.predict(dataset).compute(), reference.predict(X))


@pytest.mark.timeout(60)
def test_two_classes_are_one_shard(data):
    """Two classes are one binary problem: one shard holding the whole estimator."""
    X, y = data
    y2 = (y % 2).astype(np.int64)
    estimator = SGDClassifier(loss="log_loss", random_state=0)
    reference = _unsharded(estimator, X, y2)
    model = ClassSharded(estimator).fit(*_chunked(X, y2))
    assert np.array_equal(model.shards_[0].estimators[0].coef_, reference.coef_)
    assert np.array_equal(model.predict(X), reference.predict(X))
    np.testing.assert_allclose(model.predict_proba(X), reference.predict_proba(X))
    np.testing.assert_allclose(model.decision_function(X), reference.decision_function(X))


@pytest.mark.parametrize(
    "estimator, n_shards, message",
    [
        (GaussianNB(), None, "got GaussianNB. Use SGDClassifier or Perceptron, or OneVsRest"),
        (LinearRegression(), None, "use taskdml.DataParallel"),
        (OneVsRestClassifier(LinearRegression()), None, "got OneVsRestClassifier"),
        (SGDClassifier(average=True), None, "Use average=False"),
        (SGDClassifier(), N_CLASSES + 1, f"n_shards=21 but the model has {N_CLASSES}"),
        (SGDClassifier(), 0, "n_shards must be a positive integer, got 0"),
    ],
)
def test_errors(data, estimator, n_shards, message):
    """A model that is not a linear one-vs-rest classifier, or too many shards: a ValueError."""
    X, y = data
    with pytest.raises(ValueError, match=re.escape(message)):
        ClassSharded(estimator, n_shards=n_shards).fit(*_chunked(X[:2000], y[:2000]))


def test_unknown_label_in_a_chunk(data):
    """A chunk with a label outside classes= fails naming the labels and the fix."""
    X, y = data
    with pytest.raises(ValueError, match=re.escape("pass every label in classes= to fit")):
        ClassSharded(SGDClassifier(), n_shards=2).fit(*_chunked(X, y), classes=np.arange(5))


def test_predict_rejects_other_feature_counts(data):
    """predict on a different number of features says how many were expected."""
    X, y = data
    model = ClassSharded(SGDClassifier(), n_shards=2).fit(X[:1000], y[:1000])
    with pytest.raises(ValueError, match="expecting 50 features"):
        model.predict(X[:10, :5])


HYBRID_CHUNK = 3_000  # 7 chunks, the last short: rounds of 4 chunks and a round of 3


@pytest.fixture(scope="module")
def separated():
    """20 well-separated classes x 50 features x 20,000 rows, in chunks of 3,000."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, N_CLASSES, N_SAMPLES)
    X = rng.normal(size=(N_SAMPLES, N_FEATURES))
    X[np.arange(N_SAMPLES), y % N_FEATURES] += 4.0
    return X, y


def _coefficients(shards):
    return [(e.coef_, e.intercept_) for s in shards for e in s.estimators]


def _task_workers(task_stream):
    """``{(shard, replica): {worker}}`` of the training links, keyed ``(name, k, r, step)``."""
    ran = {}
    for task in task_stream.data:
        key = task["key"]
        if isinstance(key, tuple) and len(key) == 4 and key[0].startswith("train-shard-"):
            ran.setdefault(key[1:3], set()).add(task["worker"])
    return ran


@pytest.mark.timeout(120)
def test_hybrid_shards_times_replicas_on_a_cluster(cluster, separated):
    """n_replicas=2: the replicas of a shard train on distinct workers, the accuracy is within
    0.02 of the unsharded model, and the cluster gives the in-process result bit for bit."""
    from distributed import Client, get_task_stream

    X, y = separated
    X_d, y_d = (
        da.from_array(X, chunks=(HYBRID_CHUNK, N_FEATURES)),
        da.from_array(y, chunks=HYBRID_CHUNK),
    )
    reference = SGDClassifier(random_state=0)
    for start in range(0, N_SAMPLES, HYBRID_CHUNK):
        rows = slice(start, start + HYBRID_CHUNK)
        reference.partial_fit(X[rows], y[rows], classes=np.unique(y))
    hybrid = ClassSharded(SGDClassifier(random_state=0), n_shards=2, n_replicas=2)
    repeated = clone(hybrid).set_params(sync_every=2, epochs=2)
    in_process = clone(repeated).fit(X_d, y_d)
    assert in_process.placement_ == {0: [], 1: []}
    with Client(cluster, set_as_default=True) as client:
        with get_task_stream(client) as task_stream:
            hybrid.fit(X_d, y_d)
        ran = _task_workers(task_stream)
        accuracy = hybrid.score(X_d, y_d)
        holders = client.who_has(hybrid.shards_)
        on_cluster = clone(repeated).fit(X_d, y_d)
        shards = client.gather(on_cluster.shards_)
        with pytest.raises(ValueError, match=re.escape("n_replicas=3 but the client has 2 worker")):
            clone(hybrid).set_params(n_replicas=3).fit(X_d, y_d)
    assert accuracy == pytest.approx(reference.score(X, y), abs=0.02)
    assert accuracy > 0.9
    for k, workers in hybrid.placement_.items():
        assert len(set(workers)) == 2  # distinct workers per shard
        assert ran[k, 0] == {workers[0]} and ran[k, 1] == {workers[1]}
        assert list(holders[hybrid.shards_[k].key]) == [workers[0]]
    assert hybrid.placement_[0][0] != hybrid.placement_[1][0]  # the shards end apart
    for (coef, intercept), (coef_here, intercept_here) in zip(
        _coefficients(shards), _coefficients(in_process.shards_)
    ):
        assert np.array_equal(coef, coef_here) and np.array_equal(intercept, intercept_here)


def test_one_replica_ignores_sync_every(data):
    """n_replicas=1 trains as before whatever sync_every is; in-memory data with n_replicas=2 is
    one chunk for replica 0, so it equals one partial_fit too."""
    X, y = data
    reference = _unsharded(SGDClassifier(random_state=0), X, y)
    model = ClassSharded(SGDClassifier(random_state=0), n_shards=3, sync_every=4)
    model.fit(*_chunked(X, y))
    assert np.array_equal(np.vstack([c for c, _ in _coefficients(model.shards_)]), reference.coef_)
    one_call = SGDClassifier(random_state=0).partial_fit(X[:CHUNK], y[:CHUNK], classes=np.unique(y))
    model = ClassSharded(SGDClassifier(random_state=0), n_shards=3, n_replicas=2)
    model.fit(X[:CHUNK], y[:CHUNK])
    assert np.array_equal(np.vstack([c for c, _ in _coefficients(model.shards_)]), one_call.coef_)


def test_the_old_name_replicas_warns_and_still_trains(data):
    """ClassSharded(replicas=2), the name before 0.2: a FutureWarning naming n_replicas, and
    the same shards as n_replicas=2."""
    X, y = data
    new = ClassSharded(SGDClassifier(random_state=0), n_shards=3, n_replicas=2).fit(X, y)
    old = ClassSharded(SGDClassifier(random_state=0), n_shards=3, replicas=2)
    with pytest.warns(FutureWarning, match=r"replicas=\) was renamed n_replicas"):
        old.fit(X, y)
    assert old.get_params()["replicas"] == 2  # stored as given
    for (coef, _), (coef_new, _) in zip(_coefficients(old.shards_), _coefficients(new.shards_)):
        assert np.array_equal(coef, coef_new)


@pytest.mark.parametrize(
    "estimator, params, message",
    [
        (SGDClassifier(), {"n_replicas": 0}, "n_replicas must be a positive integer, got 0"),
        (SGDClassifier(), {"n_replicas": 2.0}, "n_replicas must be a positive integer, got 2.0"),
        (SGDClassifier(), {"sync_every": 0}, "sync_every must be a positive integer, got 0"),
        (
            OneVsRestClassifier(MLPClassifier()),
            {"n_replicas": 2},
            "n_replicas=2 needs replicas of MLPClassifier that start from one shared "
            "initialisation (merge rule 'mlp'), which ClassSharded does not draw. Use "
            "n_replicas=1",
        ),
    ],
)
def test_replica_errors(data, estimator, params, message):
    """Bad replicas/sync_every, or a binary estimator that replicas cannot merge: ValueError."""
    X, y = data
    with pytest.raises(ValueError, match=re.escape(message)):
        ClassSharded(estimator, n_shards=2, **params).fit(*_chunked(X[:2000], y[:2000]))


# SGD is stochastic: weighting a row is not repeating it, so SGDClassifier fails these too
# (scikit-learn marks them as expected failures of SGDClassifier in its own test suite).
EXPECTED_FAILED_CHECKS = dict.fromkeys(
    (
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weight_equivalence_on_sparse_data",
    ),
    "SGD: a sample weight is not a repeated row; SGDClassifier fails it too",
)


@pytest.mark.timeout(120)
@parametrize_with_checks(
    [ClassSharded(SGDClassifier(random_state=0), n_shards=1)],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_scikit_learn_estimator_checks(estimator, check):
    """ClassSharded passes scikit-learn's estimator checks on in-memory data."""
    check(estimator)
