"""Elastic sync training: segments, re-plans when workers join and leave.

The fast tests check that cutting a training into segments changes nothing (a checkpoint
every round gives the estimator of one segment, bit for bit) and how the chunks left of an
epoch are dealt. The slow one runs against ``dask scheduler`` and ``dask worker`` processes
started here: `taskdml run` while a worker joins and another leaves during its sync training.
"""

import json
import os
import signal
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.linear_model import SGDClassifier

from taskdml.parallel import train
from taskdml.parallel.engine import _elastic
from taskdml.parallel.engine._chunks import Chunk


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
    assert [e["rounds"] for e in cut.history] == [e["rounds"] for e in whole.history] == [3, 3]
    np.testing.assert_array_equal(whole.estimator.coef_, cut.estimator.coef_)
    np.testing.assert_array_equal(whole.estimator.intercept_, cut.estimator.intercept_)


def test_checkpoints_of_fewer_replicas_than_workers_are_no_replans(client):
    """n_replicas=1 on two workers: segments at every round, none of them a re-plan."""
    X, y = linear_data(6_000, 5, 1_000)
    with dask.config.set({"taskdml.elastic.checkpoint-s": 0}):
        result = train(
            SGDClassifier(random_state=0), X, y, n_replicas=1, sync_every=2, random_state=0
        )
    assert result.stats["segments"] == 3
    assert result.stats["replans"] == []


def test_the_chunks_left_are_dealt_by_index():
    """Chunk i of those left goes to replica i mod R, in index order."""
    chunks = [Chunk(None, None, None, i) for i in range(10)]
    shares = _elastic.deal(chunks, [9, 2, 4, 7, 5], 3)
    assert [[c.index for c in share] for share in shares] == [[9], [4, 7], [2, 5]]


# --------------------------------------------------------------------------------------------
# Workers that join and leave: separate `dask scheduler` and `dask worker` processes.


QUICKSTART = Path(__file__).resolve().parents[2] / "pipelines" / "quickstart.yaml"
LONG_TRAINING = [
    "n_samples=240000",
    "chunk_size=4000",
    "epochs=40",
    "++steps.model.parallel.sync_every=1",
]
"""quickstart.yaml with a model step of 960 sync rounds: long enough to change the workers."""


def _replicas_on(client, step):
    """The workers running a replica of *step*'s training now."""
    return {
        worker
        for worker, keys in client.processing().items()
        if any(str(key).startswith(f"('{step}-replica-") for key in keys)
    }


def _run(processes, address, run_dir):
    return processes(
        "taskdml",
        "run",
        str(QUICKSTART),
        *LONG_TRAINING,
        "--scheduler",
        address,
        "--run-dir",
        str(run_dir),
        "--no-cache",  # both runs train: the second must not reuse the first's model
        name="taskdml",
    )


def _outcome(run_dir):
    (manifest,) = run_dir.glob("*/manifest.json")
    (metrics,) = run_dir.glob("*/metrics.json")
    training = json.loads(manifest.read_text())["steps"]["model"]["training"]
    return training, json.loads(metrics.read_text())["report"]["accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_joins_and_another_leaves_during_a_pipelines_training(
    dask_cluster, processes, wait_for, tmp_path
):
    """`taskdml run` on separate scheduler and worker processes: a worker that joins during
    the sync training gets a replica, one that leaves has its chunks dealt out again, and
    the run completes within 0.5 pp of the same run on the fixed cluster."""
    address = dask_cluster.start(workers=(None, None))
    assert _run(processes, address, tmp_path / "fixed").wait(timeout=200) == 0
    with Client(address, set_as_default=False) as client:
        first = set(client.nthreads())
        run = _run(processes, address, tmp_path / "elastic")
        wait_for(lambda: _replicas_on(client, "model"), 120, "the model's replicas")
        dask_cluster.add_worker(address)
        wait_for(lambda: _replicas_on(client, "model") - first, 60, "a replica on the new worker")
        leaving = sorted(first)[1]
        os.kill(client.run(os.getpid, workers=[leaving])[leaving], signal.SIGTERM)
        assert run.wait(timeout=200) == 0
    training, accuracy = _outcome(tmp_path / "elastic")
    fixed_training, fixed_accuracy = _outcome(tmp_path / "fixed")
    replans = training["stats"]["replans"]
    assert [(r["reason"], r["replicas"]) for r in replans] == [("joined", 3), ("left", 2)]
    assert [entry["epoch"] for entry in training["history"]] == list(range(1, 41))
    assert any("replans" in entry for entry in training["history"])
    assert fixed_training["stats"]["replans"] == []
    assert abs(accuracy - fixed_accuracy) <= 0.005
