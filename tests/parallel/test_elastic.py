"""Elastic sync training: segments, re-plans when workers join and leave.

The fast tests check that cutting a training into segments changes nothing (a checkpoint
every round gives the estimator of one segment, bit for bit) and how the chunks left of an
epoch are dealt. The slow one runs against ``dask scheduler`` and ``dask worker`` processes
started here: a worker joins and another leaves during a sync training.
"""

import os
import signal
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.linear_model import SGDClassifier

from taskdml import train
from taskdml.parallel import _elastic
from taskdml.parallel._chunks import Chunk


def linear_data(n_samples, n_features, chunk_rows, seed=0):
    rng = da.random.default_rng(seed)
    X = rng.random((n_samples, n_features), chunks=(chunk_rows, n_features)) - 0.5
    y = (X @ da.from_array(np.linspace(-1.0, 1.0, n_features)) > 0).astype(np.int8)
    return X, y


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@pytest.mark.parametrize("data", ["persist", "stream"])
def test_checkpoints_change_nothing(client, data):
    """A segment per round trains the estimator one segment trains, bit for bit."""
    X, y = linear_data(12_000, 5, 1_000)
    whole = train(
        SGDClassifier(random_state=0), X, y, epochs=2, sync_every=2, random_state=0, data=data
    )
    with dask.config.set({"taskdml.elastic.checkpoint-s": 0}):
        cut = train(
            SGDClassifier(random_state=0), X, y, epochs=2, sync_every=2, random_state=0, data=data
        )
    assert whole.stats["segments"] == 1
    assert cut.stats["segments"] == 6  # 6 blocks a replica an epoch, 2 a round: 3 a epoch
    assert cut.stats["replans"] == []
    assert [e["epoch"] for e in cut.history] == [1, 2]
    np.testing.assert_array_equal(whole.estimator.coef_, cut.estimator.coef_)
    np.testing.assert_array_equal(whole.estimator.intercept_, cut.estimator.intercept_)


def test_the_chunks_left_are_dealt_by_index():
    """Chunk i of those left goes to replica i mod R, in index order."""
    chunks = [Chunk(None, None, None, i) for i in range(10)]
    shares = _elastic.deal(chunks, [9, 2, 4, 7, 5], 3)
    assert [[c.index for c in share] for share in shares] == [[9], [4, 7], [2, 5]]


# --------------------------------------------------------------------------------------------
# Workers that join and leave: separate `dask scheduler` and `dask worker` processes.


def _replicas_on(client):
    """The workers running a replica task now."""
    return {w for w, keys in client.processing().items() if any("replica" in str(k) for k in keys)}


def _wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_joins_and_another_leaves_during_sync_training(dask_cluster):
    """A worker that joins gets a replica, one that leaves has its chunks dealt out again:
    the training completes within 0.5 pp of the same training on a fixed cluster."""
    address = dask_cluster.start(workers=(None, None))
    X, y = linear_data(240_000, 20, 4_000, seed=3)
    X_test, y_test = dask.compute(*linear_data(50_000, 20, 50_000, seed=4))
    options = dict(epochs=40, sync_every=1, random_state=0)
    with Client(address, set_as_default=False) as client:
        X, y = client.persist([X, y])
        fixed = train(SGDClassifier(random_state=0), X, y, client=client, **options)
        first = set(client.nthreads())
        outcome = {}

        def training():
            outcome["result"] = train(SGDClassifier(random_state=0), X, y, client=client, **options)

        runner = threading.Thread(target=training)
        runner.start()
        _wait_for(lambda: _replicas_on(client), 60, "the replicas to start")
        dask_cluster.add_worker(address)
        _wait_for(lambda: _replicas_on(client) - first, 60, "a replica on the new worker")
        leaving = sorted(first)[1]
        os.kill(client.run(os.getpid, workers=[leaving])[leaving], signal.SIGTERM)
        runner.join(timeout=200)
        assert not runner.is_alive()
    result = outcome["result"]
    reasons = [(replan["reason"], replan["replicas"]) for replan in result.stats["replans"]]
    assert reasons == [("joined", 3), ("left", 2)]
    assert [entry["epoch"] for entry in result.history] == list(range(1, 41))
    assert sum("replans" in entry for entry in result.history) >= 1
    assert (
        abs(result.estimator.score(X_test, y_test) - fixed.estimator.score(X_test, y_test)) <= 0.005
    )
