"""The training engine: sync, async and sequential on a real cluster and on threads."""

import copy
import re
import warnings

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator
from sklearn.cluster import Birch
from sklearn.linear_model import SGDClassifier
from sklearn.naive_bayes import GaussianNB, MultinomialNB
from sklearn.preprocessing import StandardScaler

from taskdml import DataError
from taskdml.datasets import make_classification
from taskdml.parallel import SequentialFallbackWarning, train


def _data(n_samples=40_000, chunk_size=4_000, n_features=10, seed=0):
    data = make_classification(
        n_samples, n_features, n_informative=4, chunk_size=chunk_size, random_state=seed
    )
    return data.X.data, data.y.data


def _serial(estimator, X, y, epochs=1, **fit_kwargs):
    """The reference: one partial_fit per chunk, in order, *epochs* times, in this process."""
    estimator = copy.deepcopy(estimator)
    X_chunks = [chunk.compute() for chunk in X.to_delayed().ravel()]
    y_chunks = (
        [None] * len(X_chunks) if y is None else [c.compute() for c in y.to_delayed().ravel()]
    )
    for _ in range(epochs):
        for X_chunk, y_chunk in zip(X_chunks, y_chunks):
            if y_chunk is None:
                estimator.partial_fit(X_chunk, **fit_kwargs)
            else:
                estimator.partial_fit(X_chunk, y_chunk, **fit_kwargs)
    return estimator


def test_sync_with_one_replica_is_the_serial_loop(client):
    """SGD trained sync with one replica equals the serial partial_fit loop bit for bit."""
    X, y = _data()
    reference = _serial(SGDClassifier(random_state=0), X, y, classes=[0, 1])
    result = train(
        SGDClassifier(random_state=0), X, y, strategy="sync", n_replicas=1, shuffle=False
    )
    np.testing.assert_array_equal(result.estimator.coef_, reference.coef_)
    assert result.estimator.t_ == reference.t_


def test_sequential_is_the_serial_loop(client):
    """The sequential strategy is the reference chain."""
    X, y = _data()
    reference = _serial(SGDClassifier(random_state=0), X, y, classes=[0, 1])
    result = train(SGDClassifier(random_state=0), X, y, strategy="sequential", shuffle=False)
    np.testing.assert_array_equal(result.estimator.coef_, reference.coef_)


@pytest.mark.parametrize(
    "estimator", [MultinomialNB(), GaussianNB(), StandardScaler()], ids=lambda e: type(e).__name__
)
def test_exact_rules_equal_one_serial_pass_on_the_cluster(client, estimator):
    """Naive Bayes and scalers trained sync on 2 workers equal one serial pass (1e-10)."""
    X, y = _data()
    if isinstance(estimator, MultinomialNB):
        X = abs(X)
    kwargs = {} if isinstance(estimator, StandardScaler) else {"classes": [0, 1]}
    reference = _serial(estimator, X, y, **kwargs)
    result = train(
        estimator,
        X,
        None if isinstance(estimator, StandardScaler) else y,
        strategy="sync",
        sync_every=2,
    )
    assert result.stats["replicas"] == 2
    for name in ("mean_", "var_", "feature_count_", "class_count_", "theta_"):
        if hasattr(reference, name):
            np.testing.assert_allclose(
                getattr(result.estimator, name), getattr(reference, name), rtol=1e-10, atol=1e-10
            )


def test_sync_is_deterministic_and_equals_the_thread_path(client):
    """Two sync runs with one seed and an explicit period agree exactly, and so do 2 replicas as
    threads: all equal the independent loop of replicas (reference_loops.py) with the same
    shuffled chunk order. ("auto" chooses its period from timings: not deterministic.)"""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    X, y = _data()
    options = dict(epochs=2, sync_every=1, random_state=3)
    runs = [train(SGDClassifier(random_state=0), X, y, **options).estimator for _ in range(2)]
    threads = train(
        SGDClassifier(random_state=0), X, y, **options, n_replicas=2, client=False
    ).estimator
    np.testing.assert_array_equal(runs[0].coef_, runs[1].coef_)
    np.testing.assert_array_equal(runs[0].coef_, threads.coef_)
    expected = reference_sync(
        SGDClassifier(random_state=0),
        chunks_of(X.compute(), y.compute(), X.chunks[0]),
        [0, 1],
        merge_linear_sgd,
        n_replicas=2,
        sync_every=1,
        epochs=2,
        shuffle=True,
        random_state=3,
    )
    np.testing.assert_array_equal(runs[0].coef_, expected.coef_)
    np.testing.assert_array_equal(runs[0].intercept_, expected.intercept_)


def test_async_reaches_sync_accuracy(client):
    """The parameter server at the default staleness (lock-step) converges to within 1 pp of
    sync's holdout accuracy, unbounded to within 3 pp, and sync to within 1 pp of the serial
    partial_fit loop over the same chunks and epochs."""
    from taskdml.datasets import train_test_split

    data = make_classification(
        140_000, 10, n_informative=6, class_sep=1.5, chunk_size=10_000, random_state=0
    )
    train_set, test_set = train_test_split(data, test_size=20_000, random_state=0)
    X_test, y_test = test_set.X.values, test_set.y.values
    scores = {}
    for strategy, staleness in (("sync", None), ("async", None), ("async", 0)):
        result = train(
            SGDClassifier(loss="log_loss", alpha=1e-2, random_state=0),
            train_set.X.data,
            train_set.y.data,
            strategy=strategy,
            staleness=staleness,
            epochs=3,
            random_state=0,
        )
        scores[strategy, staleness] = result.estimator.score(X_test, y_test)
    serial = _serial(
        SGDClassifier(loss="log_loss", alpha=1e-2, random_state=0),
        train_set.X.data,
        train_set.y.data,
        epochs=3,
        classes=[0, 1],
    ).score(X_test, y_test)
    assert abs(scores["sync", None] - serial) <= 0.01, (scores, serial)
    assert abs(scores["async", 0] - scores["sync", None]) <= 0.01, scores
    # Unbounded staleness depends on timing: measured 0.5-3 pp below sync on average over
    # seeds (issue 9), more on a loaded machine; it must still learn the problem.
    assert abs(scores["async", None] - scores["sync", None]) <= 0.03, scores


def test_history_and_early_stopping(client):
    """Each epoch is recorded with samples seen and validation score; patience stops training:
    with tol=0.5 no epoch can improve enough, so it stops after 1 + n_iter_no_change epochs.
    The last score is scikit-learn's score of the returned model; every epoch's is within 2
    points of the serial partial_fit loop's after as many epochs (held-out rows, same data)."""
    X_all, y_all = _data(n_samples=44_000)
    X, y = X_all[:40_000], y_all[:40_000]
    validation = (X_all[40_000:].compute(), y_all[40_000:].compute())
    estimator = SGDClassifier(loss="log_loss", alpha=1e-2, random_state=0)  # smooth: small noise
    result = train(
        estimator,
        X,
        y,
        epochs=30,
        validation=validation,
        n_iter_no_change=2,
        tol=0.5,
        random_state=0,
    )
    assert len(result.history) == 3
    assert [entry["samples_seen"] for entry in result.history] == [40_000, 80_000, 120_000]
    assert result.history[-1]["validation_score"] == result.estimator.score(*validation)
    serial = estimator
    for entry in result.history:
        serial = _serial(serial, X, y, classes=[0, 1])
        expected = serial.score(*validation)
        assert abs(entry["validation_score"] - expected) <= 0.02, (entry, expected)


@pytest.mark.parametrize(
    "fault,message",
    [
        ("nan", "chunk 2 (rows 8,000–11,999) of X holds 1 NaN"),
        ("label", "chunk 1 (rows 4,000–7,999) of y holds labels [7]"),
    ],
)
def test_bad_chunks_are_named_before_training(fault, message):
    """A NaN or an unseen label is reported with its chunk and rows, before any replica runs."""
    rng = np.random.default_rng(0)
    X_np, y_np = rng.normal(size=(20_000, 3)), rng.integers(0, 2, size=20_000)
    if fault == "nan":
        X_np[9_000, 1] = np.nan
    else:
        y_np[5_000] = 7
    X, y = da.from_array(X_np, chunks=(4_000, 3)), da.from_array(y_np, chunks=4_000)
    with pytest.raises(DataError, match=re.escape(message)):
        train(SGDClassifier(), X, y, classes=[0, 1], client=False)


def test_empty_chunk_is_refused():
    """An empty chunk is an error naming it; the same rows without it train scikit-learn's
    scaler."""
    rows = np.random.default_rng(0).normal(size=(10, 2))
    X = da.from_array(rows, chunks=((5, 0, 5), 2))
    with pytest.raises(DataError, match="chunk 1 is empty"):
        train(StandardScaler(), X, client=False)
    scaler = train(StandardScaler(), X.rechunk(((5, 5), 2)), client=False).estimator
    expected = StandardScaler().fit(rows)
    np.testing.assert_allclose(scaler.mean_, expected.mean_)
    np.testing.assert_allclose(scaler.var_, expected.var_)


def test_the_birch_fallback_equals_the_serial_loop(client):
    """Asking sync for an estimator without a merge rule trains it sequentially, with a
    warning that says why; the fallback's Birch is the serial partial_fit loop's, bit for bit."""
    X, _ = _data(n_samples=8_000, chunk_size=2_000, n_features=6)
    with pytest.warns(SequentialFallbackWarning, match="Birch cannot be merged"):
        result = train(Birch(n_clusters=3), X, strategy="sync", shuffle=False)
    assert result.strategy == "sequential"
    reference = _serial(Birch(n_clusters=3), X, None)
    np.testing.assert_array_equal(
        result.estimator.subcluster_centers_, reference.subcluster_centers_
    )
    more = X[:2_000].compute()  # the returned Birch continues as the serial one does
    np.testing.assert_array_equal(
        result.estimator.partial_fit(more).subcluster_centers_,
        reference.partial_fit(more).subcluster_centers_,
    )


def test_estimator_without_partial_fit_is_fitted_once(client):
    """LogisticRegression has no partial_fit: one fit on all chunks."""
    from sklearn.linear_model import LogisticRegression

    X, y = _data(n_samples=8_000, chunk_size=2_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = train(LogisticRegression(), X, y)
    assert result.strategy == "fit"
    reference = LogisticRegression().fit(X.compute(), y.compute())
    np.testing.assert_allclose(result.estimator.coef_, reference.coef_, rtol=1e-6)


def test_more_replicas_than_worker_threads_is_refused(client):
    """Three replicas on two single-threaded workers would wait for each other forever: a
    ValueError says so before anything is submitted."""
    X, y = _data(n_samples=8_000, chunk_size=1_000)
    with pytest.raises(ValueError, match=r"n_replicas=3 needs 3 worker threads .* has 2; use"):
        train(SGDClassifier(), X, y, strategy="sync", n_replicas=3)
    # Two replicas, which the threads allow, train as the loop of reference_loops.py.
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    options = dict(epochs=1, sync_every=1, random_state=3)
    model = train(SGDClassifier(random_state=0), X, y, strategy="sync", n_replicas=2, **options)
    expected = reference_sync(
        SGDClassifier(random_state=0),
        chunks_of(X.compute(), y.compute(), X.chunks[0]),
        [0, 1],
        merge_linear_sgd,
        n_replicas=2,
        shuffle=True,
        **options,
    )
    np.testing.assert_array_equal(model.estimator.coef_, expected.coef_)
    np.testing.assert_array_equal(model.estimator.intercept_, expected.intercept_)


class FailsOnLargeChunks(SGDClassifier):
    """partial_fit raises on the chunk with the most rows: a replica that fails mid-training."""

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        if len(X) > 4_000:
            raise RuntimeError("chunk too large for this test estimator")
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


def test_a_failing_replica_stops_the_others(client):
    """One replica's error reaches the caller; the other replica does not wait forever."""
    X = da.from_array(
        np.random.default_rng(0).normal(size=(20_000, 3)), chunks=((4_000,) * 3 + (8_000,), 3)
    )
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(RuntimeError, match="chunk too large"):
        train(FailsOnLargeChunks(), X, y, strategy="sync", shuffle=False)


@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(50, 600), min_size=1, max_size=6), replicas=st.integers(1, 3))
def test_exact_merges_do_not_depend_on_chunking(cuts, replicas):
    """GaussianNB and StandardScaler trained sync equal one pass, whatever the chunks, replicas."""
    rng = np.random.default_rng(len(cuts))
    total = sum(cuts)
    X_np, y_np = rng.normal(size=(total, 4)), rng.integers(0, 3, size=total)
    X, y = da.from_array(X_np, chunks=(tuple(cuts), 4)), da.from_array(y_np, chunks=(tuple(cuts),))
    scaler = train(StandardScaler(), X, n_replicas=replicas, client=False).estimator
    np.testing.assert_allclose(scaler.mean_, X_np.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(scaler.var_, X_np.var(axis=0), rtol=1e-10)
    nb = train(GaussianNB(), X, y, classes=[0, 1, 2], n_replicas=replicas, client=False).estimator
    reference = GaussianNB().partial_fit(X_np, y_np, classes=[0, 1, 2])
    np.testing.assert_allclose(nb.theta_, reference.theta_, rtol=1e-10)
    np.testing.assert_allclose(nb.var_, reference.var_, rtol=1e-9)


class ColumnSum(BaseEstimator):
    """A user's own incremental estimator: column sums and row count."""

    def fit(self, X, y=None):
        for name in ("sum_", "n_"):
            self.__dict__.pop(name, None)
        return self.partial_fit(X)

    def partial_fit(self, X, y=None):
        self.sum_ = getattr(self, "sum_", 0) + np.asarray(X).sum(axis=0)
        self.n_ = getattr(self, "n_", 0) + len(X)
        return self


def _merge_column_sums(replicas, weights):
    from taskdml.parallel import round_start

    start = round_start(replicas)
    merged = copy.deepcopy(replicas[0])
    merged.sum_ = start.get("sum_", 0) + sum(r.sum_ - start.get("sum_", 0) for r in replicas)
    merged.n_ = start.get("n_", 0) + sum(r.n_ - start.get("n_", 0) for r in replicas)
    return merged


def test_rules_registered_in_the_client_apply_on_the_workers(client):
    """register_merge in this process is enough: the engine ships the rule to the workers."""
    from taskdml.parallel import register_merge

    register_merge(ColumnSum, _merge_column_sums, exact=True, start_state=("sum_", "n_"))
    X_np = np.random.default_rng(0).normal(size=(9_000, 3))
    result = train(ColumnSum(), da.from_array(X_np, chunks=(1_000, 3)), epochs=2, strategy="sync")
    assert result.strategy == "sync" and result.stats["replicas"] == 2
    assert result.estimator.n_ == 18_000
    np.testing.assert_allclose(result.estimator.sum_, 2 * X_np.sum(axis=0), rtol=1e-12)


def test_concurrent_trainings_with_different_parameters_stay_apart(client):
    """Keys depend on the estimator's parameters: concurrent trainings never share results."""
    import concurrent.futures

    X, y = _data(n_samples=12_000, chunk_size=2_000)
    alphas = [1e-5, 1e-3, 1e-1]
    with concurrent.futures.ThreadPoolExecutor(len(alphas)) as pool:
        results = list(
            pool.map(
                lambda alpha: train(
                    SGDClassifier(alpha=alpha, random_state=0),
                    X,
                    y,
                    strategy="sequential",
                    shuffle=False,
                ),
                alphas,
            )
        )
    for alpha, result in zip(alphas, results):
        reference = _serial(SGDClassifier(alpha=alpha, random_state=0), X, y, classes=[0, 1])
        np.testing.assert_array_equal(result.estimator.coef_, reference.coef_)


@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_repeated_trainings_start_fresh(client, strategy):
    """The same call repeated gets a new actor each time: every run makes its own updates
    from the start (a reused parameter server went on from the last run's version), and
    each run's model is the reference loop's from a fresh start (reference_loops.py: sync's
    rounds, or async's recorded pushes replayed)."""
    from reference_loops import (
        chunks_of,
        engine_seed,
        merge_linear_sgd,
        reference_sync,
        replay_async,
    )

    X, y = client.persist(_data(n_samples=8_000, chunk_size=1_000))
    options = {"sync_every": 1} if strategy == "sync" else {}
    runs = [
        train(SGDClassifier(random_state=0), X, y, strategy=strategy, random_state=0, **options)
        for _ in range(3)
    ]
    counted = "updates" if strategy == "async" else "rounds"
    expected = 8 if strategy == "async" else 4
    assert [run.stats[counted] for run in runs] == [expected] * 3
    assert all(run.estimator.t_ == 8_001 for run in runs)
    chunks = chunks_of(X.compute(), y.compute(), X.chunks[0])
    for run in runs:
        if strategy == "sync":
            reference = reference_sync(
                SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd,
                n_replicas=2, sync_every=1, epochs=1, shuffle=True, random_state=0,
            )  # fmt: skip
        else:
            pushes = [tuple(push) for push in run.stats["pushes"]]
            reference = replay_async(
                SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd, pushes,
                n_replicas=2, epochs=1, shuffle=True, seed=engine_seed(0),
            )  # fmt: skip
        np.testing.assert_array_equal(run.estimator.coef_, reference.coef_)
        np.testing.assert_array_equal(run.estimator.intercept_, reference.intercept_)
