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
    with pytest.raises(ValueError, match=re.escape("pass every label in classes= to fit")) as info:
        ClassSharded(SGDClassifier(), n_shards=2).fit(*_chunked(X, y), classes=np.arange(5))
    # The labels it names are those outside classes= (each chunk of 5,000 rows holds them all).
    named = re.search(r"^a chunk holds labels \[([\d, ]+)\] outside the classes", str(info.value))
    assert named, str(info.value)
    outside = np.setdiff1d(y[:CHUNK], np.arange(5))
    np.testing.assert_array_equal(np.array(named[1].split(", "), dtype=int), outside)


def test_predict_rejects_other_feature_counts(data):
    """predict on a different number of features says how many were expected, in the words
    scikit-learn's own SGDClassifier uses for the same rows."""
    X, y = data
    model = ClassSharded(SGDClassifier(), n_shards=2).fit(X[:1000], y[:1000])
    with pytest.raises(ValueError, match="expecting 50 features") as ours:
        model.predict(X[:10, :5])
    with pytest.raises(ValueError) as theirs:
        SGDClassifier().fit(X[:1000], y[:1000]).predict(X[:10, :5])
    assert str(ours.value) == str(theirs.value).replace("SGDClassifier", "ClassSharded")


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


def _replica_workers(task_stream):
    """``{training: {rank: worker}}`` of the engine's replica tasks, keyed ``(name, rank)``."""
    ran = {}
    for task in task_stream.data:
        key = task["key"]
        if isinstance(key, tuple) and len(key) == 2 and key[0].startswith("train-replica-"):
            ran.setdefault(key[0], {})[key[1]] = task["worker"]
    return ran


def _hybrid_data(X, y):
    return (
        da.from_array(X, chunks=(HYBRID_CHUNK, N_FEATURES)),
        da.from_array(y, chunks=HYBRID_CHUNK),
    )


@pytest.mark.timeout(180)
def test_hybrid_shards_times_replicas_on_a_cluster(cluster, separated):
    """replicas=2: the engine trains each shard's replicas on distinct workers, the accuracy
    is within 0.02 of the unsharded model, and the cluster gives the in-process result bit
    for bit."""
    from distributed import Client, get_task_stream

    X, y = separated
    X_d, y_d = _hybrid_data(X, y)
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
        ran = _replica_workers(task_stream)
        accuracy = hybrid.score(X_d, y_d)
        holders = client.who_has(hybrid.shards_)
        on_cluster = clone(repeated).fit(X_d, y_d)
        shards = client.gather(on_cluster.shards_)
        with pytest.raises(ValueError, match=re.escape("n_replicas=3 but the client has 2 worker")):
            clone(hybrid).set_params(n_replicas=3).fit(X_d, y_d)
    assert accuracy == pytest.approx(reference.score(X, y), abs=0.02)
    assert accuracy > 0.9
    assert sorted(sorted(ranks.items()) for ranks in ran.values()) == sorted(
        list(enumerate(workers)) for workers in hybrid.placement_.values()
    )  # one training per shard, its replicas where placement_ says
    for k, workers in hybrid.placement_.items():
        assert len(set(workers)) == 2  # distinct workers per shard
        assert list(holders[hybrid.shards_[k].key])[0] in workers
    assert len({holders[f.key][0] for f in hybrid.shards_}) == 2  # the shards end apart
    for (coef, intercept), (coef_here, intercept_here) in zip(
        _coefficients(shards), _coefficients(in_process.shards_)
    ):
        assert np.array_equal(coef, coef_here) and np.array_equal(intercept, intercept_here)


@pytest.mark.timeout(240)
def test_hybrid_shards_train_side_by_side_on_workers_of_their_own(separated):
    """On four workers, the engine places two shards' two replicas on disjoint pairs of
    workers (trainings started together spread), and each shard ends on one of its pair,
    holding the binaries of the sync loop written here (the defaults: period 1, 1 epoch)."""
    from distributed import Client, LocalCluster

    X, y = separated
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None, memory_limit="1GiB",
        ) as cluster,
        Client(cluster, set_as_default=True) as client,
    ):  # fmt: skip
        model = ClassSharded(SGDClassifier(random_state=0), n_shards=2, n_replicas=2)
        model.fit(*_hybrid_data(X, y))
        holders = client.who_has(model.shards_)
        shards = client.gather(model.shards_)
    classes = np.unique(y)
    for shard, columns in zip(shards, np.array_split(np.arange(len(classes)), 2)):
        reference = _sync_reference(X, y, classes, columns, 2, sync_every=1, epochs=1)
        for mine, theirs in zip(shard.estimators, reference, strict=True):
            np.testing.assert_array_equal(mine.coef_, theirs.coef_)
            np.testing.assert_array_equal(mine.intercept_, theirs.intercept_)
    pairs = [set(model.placement_[k]) for k in range(2)]
    assert all(len(pair) == 2 for pair in pairs) and not pairs[0] & pairs[1]
    assert all(holders[f.key][0] in pair for f, pair in zip(model.shards_, pairs))


def _sync_reference(X, y, classes, columns, replicas, sync_every, epochs):
    """The binary SGDs of the classes at *columns* trained as the engine's sync rounds train
    them: chunk ``i`` to replica ``i % replicas``, in order; each round every replica copies
    the global binaries and trains its next *sync_every* chunks, then the replicas that
    trained are merged by the rows-weighted mean of ``coef_`` and ``intercept_`` (``t_``:
    the start's plus every replica's progress)."""
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=len(classes))
    binaries = [
        SGDClassifier(random_state=int(seeds[c]), class_weight={1: 1.0, 0: 1.0}) for c in columns
    ]
    starts = list(range(0, len(y), HYBRID_CHUNK))
    owned = [starts[r::replicas] for r in range(replicas)]
    for _ in range(epochs):
        for first in range(0, len(owned[0]), sync_every):
            trained, rows = [], []
            for share in owned:
                mine = share[first : first + sync_every]
                if not mine:
                    continue
                copies = copy.deepcopy(binaries)
                for start in mine:
                    X_i, y_i = X[start : start + HYBRID_CHUNK], y[start : start + HYBRID_CHUNK]
                    for c, binary in zip(columns, copies):
                        binary.partial_fit(X_i, (y_i == classes[c]).astype(np.int64), [0, 1])
                trained.append(copies)
                rows.append(sum(min(HYBRID_CHUNK, len(y) - start) for start in mine))
            shares = np.asarray(rows, dtype=float) / sum(rows)
            merged = copy.deepcopy(trained[0])
            for j, binary in enumerate(merged):
                t0 = getattr(binaries[j], "t_", 1.0)
                parts = [copies[j] for copies in trained]
                binary.coef_ = sum(share * p.coef_ for share, p in zip(shares, parts))
                binary.intercept_ = sum(share * p.intercept_ for share, p in zip(shares, parts))
                binary.t_ = t0 + sum(p.t_ - t0 for p in parts)
            binaries = merged
    return binaries


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sync_every, epochs", [(1, 1), (2, 2), (3, 1)])
def test_hybrid_shards_equal_the_sync_reference(separated, sync_every, epochs):
    """Each shard's binary estimators equal a sync loop written here (deal, train copies,
    merge by rows) bit for bit, whatever the period and the epochs."""
    X, y = separated
    classes = np.unique(y)
    model = ClassSharded(
        SGDClassifier(random_state=0), n_shards=2, n_replicas=2, sync_every=sync_every,
        epochs=epochs,
    ).fit(*_hybrid_data(X, y))  # fmt: skip
    groups = np.array_split(np.arange(len(classes)), 2)
    for shard, columns in zip(model.shards_, groups):
        reference = _sync_reference(X, y, classes, columns, 2, sync_every, epochs)
        for mine, theirs in zip(shard.estimators, reference):
            np.testing.assert_array_equal(mine.coef_, theirs.coef_)
            np.testing.assert_array_equal(mine.intercept_, theirs.intercept_)
            assert mine.t_ == theirs.t_
    for history in model.history_.values():
        assert [entry["sync_every"] for entry in history] == [sync_every] * epochs


@pytest.mark.timeout(180)
def test_hybrid_sync_every_auto(client, separated):
    """sync_every="auto": the engine chooses each shard's period and records it per epoch;
    the accuracy is within 0.02 of the unsharded SGD trained in this process."""
    X, y = separated
    X_d, y_d = _hybrid_data(X, y)
    model = ClassSharded(SGDClassifier(random_state=0), n_shards=2, n_replicas=2, epochs=2)
    model.set_params(sync_every="auto").fit(X_d, y_d)
    assert set(model.history_) == {0, 1}
    for history in model.history_.values():
        assert len(history) == 2
        assert all(isinstance(e["sync_every"], int) and e["sync_every"] >= 1 for e in history)
    assert model.score(X_d, y_d) > 0.9
    reference = _unsharded(SGDClassifier(random_state=0), X, y)  # 5,000-row chunks in order
    assert model.score(X_d, y_d) == pytest.approx(reference.score(X, y), abs=0.02)


@pytest.mark.timeout(240)
def test_hybrid_checkpoints_per_shard_change_nothing(client, separated, tmp_path):
    """Inside a step's checkpoint scope each shard's training checkpoints under its own name;
    segments at every round, and a run resumed from those checkpoints, give the shards of one
    uninterrupted training bit for bit: the sync loop written here, period 2, one epoch."""
    import dask

    from taskdml.cache import Cache
    from taskdml.cache._checkpoints import scope

    X, y = separated
    X_d, y_d = _hybrid_data(X, y)
    hybrid = ClassSharded(SGDClassifier(random_state=0), n_shards=2, n_replicas=2, sync_every=2)
    whole = client.gather(clone(hybrid).fit(X_d, y_d).shards_)
    classes = np.unique(y)
    for shard, columns in zip(whole, np.array_split(np.arange(len(classes)), 2)):
        reference = _sync_reference(X, y, classes, columns, 2, sync_every=2, epochs=1)
        for mine, theirs in zip(shard.estimators, reference, strict=True):
            np.testing.assert_array_equal(mine.coef_, theirs.coef_)
    store = Cache(tmp_path / "store")
    with dask.config.set({"taskdml.elastic.checkpoint-s": 0}), scope(store, "step"):
        cut = client.gather(clone(hybrid).fit(X_d, y_d).shards_)
    saved = [store.load_checkpoint("step", f"training-{k}-training-0") for k in range(2)]
    assert [s["state"].classes.tolist() for s in saved] == [s.classes.tolist() for s in whole]
    with scope(store, "step"):  # the same step again: each shard from its own checkpoint
        resumed = client.gather(clone(hybrid).fit(X_d, y_d).shards_)
    for shards in (cut, resumed):
        for (coef, intercept), (coef_whole, intercept_whole) in zip(
            _coefficients(shards), _coefficients(whole)
        ):
            assert np.array_equal(coef, coef_whole) and np.array_equal(intercept, intercept_whole)


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
    the same shards as n_replicas=2: in-memory data is one chunk for replica 0, so both are
    one partial_fit of scikit-learn's SGD."""
    X, y = data
    new = ClassSharded(SGDClassifier(random_state=0), n_shards=3, n_replicas=2).fit(X, y)
    old = ClassSharded(SGDClassifier(random_state=0), n_shards=3, replicas=2)
    with pytest.warns(FutureWarning, match=r"replicas=\) was renamed n_replicas"):
        old.fit(X, y)
    assert old.get_params()["replicas"] == 2  # stored as given
    for (coef, _), (coef_new, _) in zip(_coefficients(old.shards_), _coefficients(new.shards_)):
        assert np.array_equal(coef, coef_new)
    one_call = SGDClassifier(random_state=0).partial_fit(X, y, classes=np.unique(y))
    assert np.array_equal(np.vstack([c for c, _ in _coefficients(old.shards_)]), one_call.coef_)


@pytest.mark.parametrize(
    "estimator, params, message",
    [
        (SGDClassifier(), {"n_replicas": 0}, "n_replicas must be a positive integer, got 0"),
        (SGDClassifier(), {"n_replicas": 2.0}, "n_replicas must be a positive integer, got 2.0"),
        (SGDClassifier(), {"sync_every": 0}, "ClassSharded: sync_every must be an integer >= 1"),
        (SGDClassifier(), {"sync_every": "often"}, "or 'auto' (chosen from measured timings)"),
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
