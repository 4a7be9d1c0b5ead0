"""Replicated trainings hold their workers: disjoint ones run side by side, others take turns."""

import concurrent.futures
import time

import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier

from taskdml.parallel import train


class SlowSGD(SGDClassifier):
    """An SGDClassifier whose partial_fit takes at least *pause* seconds: trainings long
    enough to see whether two of them overlap."""

    def __init__(self, *, pause=0.02, alpha=1e-4, random_state=None):
        super().__init__(alpha=alpha, random_state=random_state)
        self.pause = pause

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        time.sleep(self.pause)
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


def _two_at_once(client, groups):
    """Start two 2-replica trainings together, on *groups* of workers; their results."""
    X, y = _data()
    X, y = client.persist([X, y])

    def one(workers):
        return train(
            SlowSGD(random_state=0),
            X,
            y,
            n_replicas=2,
            workers=workers,
            sync_every=2,
            epochs=1,
            client=client,
        )

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, groups))


def _overlap(first, second):
    (a, b), (c, d) = first.stats["ran"], second.stats["ran"]
    return min(b, d) - max(a, c)


def test_trainings_on_disjoint_workers_run_side_by_side(four_workers):
    """Two trainings given disjoint halves of the cluster run on them, at the same time."""
    names = sorted(four_workers.nthreads())
    groups = [names[:2], names[2:]]
    first, second = _two_at_once(four_workers, groups)
    assert [first.stats["workers"], second.stats["workers"]] == groups
    assert _overlap(first, second) > 0.1, (first.stats["ran"], second.stats["ran"])


def test_trainings_that_share_workers_take_turns(four_workers):
    """Two trainings on the same two workers take turns: one waits for the other, and both
    finish (no deadlock)."""
    group = sorted(four_workers.nthreads())[1:3]
    first, second = _two_at_once(four_workers, [group, group])
    assert first.stats["workers"] == second.stats["workers"] == group
    assert _overlap(first, second) <= 0


def test_unknown_workers_are_refused(four_workers):
    X, y = _data()
    with pytest.raises(ValueError, match="are not in the cluster"):
        train(SGDClassifier(), X, y, workers=["tcp://127.0.0.1:1"], client=four_workers)


def test_a_search_runs_two_replicated_trials_side_by_side(four_workers, monkeypatch):
    """On four workers, the two trials of a halving search's last rung each train with two
    replicas on workers of their own, so they run side by side (the engine holds only a
    training's workers; the floor on a step's length is lowered for this small data)."""
    from distributed import Client

    from taskdml.model_selection import SuccessiveHalvingSearchCV
    from taskdml.model_selection.adaptive import _run as _adaptive_run

    monkeypatch.setattr(_adaptive_run, "REPLICATED_MIN_SECONDS", 0.0)
    X, y = _data()
    search = SuccessiveHalvingSearchCV(
        SlowSGD(random_state=0),
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
