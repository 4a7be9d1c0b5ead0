"""Replicated trainings hold their workers: disjoint ones run side by side, others take turns.

Which ran when is read from what the trainings record, never from clocks: each
``partial_fit`` logs its training's tag to the scheduler's event log (whose order is the order
the scheduler received them in), and two trainings that must run at once meet through
``distributed.Event`` objects, which they can only do if both run at the same time.
"""

import concurrent.futures
import uuid

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier

from taskdml.parallel import train

TOPIC = "test-turns"
"""The scheduler's event log topic the trainings here log their ``partial_fit`` calls to."""

MEET_TIMEOUT_S = 60
"""How long a training waits for the other to start (only turns a hang into an error)."""


class Marked(SGDClassifier):
    """An SGDClassifier whose partial_fit logs *tag* to :data:`TOPIC`; with *meet*, it also
    sets the ``distributed.Event`` *tag* and waits for the Event *meet* (the other
    training's tag): two trainings that meet so ran at the same time."""

    def __init__(self, *, tag=None, meet=None, alpha=1e-4, random_state=None):
        super().__init__(alpha=alpha, random_state=random_state)
        self.tag = tag
        self.meet = meet

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        from distributed import Event, get_worker

        if self.tag is not None:
            get_worker().log_event(TOPIC, {"training": self.tag})
        if self.meet is not None:
            Event(self.tag).set()
            if not Event(self.meet).wait(MEET_TIMEOUT_S):
                raise TimeoutError(f"training {self.meet!r} never ran while {self.tag!r} did")
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


@pytest.fixture(scope="module")
def four_workers():
    """Four single-thread worker processes on loopback."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=4,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit="1GiB",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4_000, 4))
    y = (X[:, 0] > 0).astype(int)
    return da.from_array(X, chunks=(250, 4)), da.from_array(y, chunks=250)


def _two_at_once(client, groups, meet=False):
    """Start two 2-replica trainings together, on *groups* of workers; their results and
    their tags, new ones (with *meet*, each waits for the other)."""
    X, y = _data()
    X, y = client.persist([X, y])
    a, b = (f"{uuid.uuid4().hex}-{name}" for name in "ab")
    tags = {a: b, b: a}

    def one(tag, workers):
        return train(
            Marked(tag=tag, meet=tags[tag] if meet else None, random_state=0),
            X,
            y,
            n_replicas=2,
            workers=workers,
            sync_every=2,
            epochs=1,
            random_state=0,
            client=client,
        )

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # one there, the other here
        first = pool.submit(one, a, groups[0])
        second = one(b, groups[1])
        return [first.result(), second], [a, b]


def _assert_trained_as_the_sync_loop(results):
    """Each training's model is what the sync loop of reference_loops.py trains from
    scikit-learn's SGDClassifier (Marked only logs) with the same replicas, period and seed:
    taking turns or running side by side changes when replicas train, not what."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    X, y = _data()
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]), [0, 1],
        merge_linear_sgd, n_replicas=2, sync_every=2, epochs=1, shuffle=True, random_state=0,
    )  # fmt: skip
    for result in results:
        np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
        np.testing.assert_array_equal(result.estimator.intercept_, expected.intercept_)


def _logged(client, tags):
    """Which of *tags* each ``partial_fit`` logged, in the scheduler's order."""
    return [e["training"] for _, e in client.get_events(TOPIC) if e["training"] in tags]


def test_trainings_on_disjoint_workers_run_side_by_side(four_workers):
    """Two trainings given disjoint halves of the cluster run on them at the same time: each
    one's partial_fit waits until the other's has been called, and both finish."""
    names = sorted(four_workers.nthreads())
    groups = [names[:2], names[2:]]
    (first, second), tags = _two_at_once(four_workers, groups, meet=True)
    assert [first.stats["workers"], second.stats["workers"]] == groups
    assert set(_logged(four_workers, tags)) == set(tags)
    _assert_trained_as_the_sync_loop([first, second])


def test_trainings_that_share_workers_take_turns(four_workers):
    """Two trainings on the same two workers take turns: in the scheduler's log, every
    partial_fit of one comes before every partial_fit of the other, and both finish (no
    deadlock)."""
    group = sorted(four_workers.nthreads())[1:3]
    (first, second), tags = _two_at_once(four_workers, [group, group])
    assert first.stats["workers"] == second.stats["workers"] == group
    logged = _logged(four_workers, tags)
    turns = [logged[0]] * logged.count(logged[0]) + [t for t in logged if t != logged[0]]
    assert set(logged) == set(tags) and logged == turns, logged
    _assert_trained_as_the_sync_loop([first, second])


def test_unknown_workers_are_refused(four_workers):
    """A training given a worker the cluster does not have is refused, naming it; given
    workers it has, it trains on them."""
    X, y = _data()
    with pytest.raises(ValueError, match="are not in the cluster"):
        train(SGDClassifier(), X, y, workers=["tcp://127.0.0.1:1"], client=four_workers)
    # Workers the cluster has are taken: two of them train as the sync loop.
    known = sorted(four_workers.nthreads())[:2]
    result = train(
        SGDClassifier(random_state=0), X, y, n_replicas=2, workers=known, sync_every=2,
        epochs=1, random_state=0, client=four_workers,
    )  # fmt: skip
    _assert_trained_as_the_sync_loop([result])


def test_a_search_runs_two_replicated_trials_side_by_side(four_workers, monkeypatch):
    """On four workers, the two trials of a halving search's last rung each train with two
    replicas, on disjoint pairs of workers (the engine holds only a training's workers; the
    floor on a step's length is lowered for this small data), and the best model is about as
    good as scikit-learn's fit in memory."""
    from distributed import Client

    from taskdml.model_selection import SuccessiveHalvingSearchCV
    from taskdml.model_selection.adaptive import _run as _adaptive_run

    monkeypatch.setattr(_adaptive_run, "REPLICATED_MIN_SECONDS", 0.0)
    X, y = _data()
    search = SuccessiveHalvingSearchCV(
        SGDClassifier(random_state=0),
        {"alpha": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
        n_trials=6,
        max_epochs=3,
        strategy="sync",
        sync_every=2,
        random_state=0,
    )
    with Client(four_workers.cluster, set_as_default=True):
        search.fit(X, y)
    last = [e for e in search.history_ if e["rung"] == 1]
    assert [(e["mode"], e["replicas"]) for e in last] == [("replicated", 2)] * 2
    first, second = last
    assert len(first["workers"]) == len(second["workers"]) == 2
    assert not set(first["workers"]) & set(second["workers"])
    # and the model handed back is about as good as scikit-learn's fit in memory with the
    # parameters the search chose
    X_np, y_np = dask.compute(X, y)
    in_memory = SGDClassifier(random_state=0, **search.best_params_).fit(X_np, y_np)
    assert search.score(X_np, y_np) >= in_memory.score(X_np, y_np) - 0.02
