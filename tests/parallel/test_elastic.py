"""Elastic sync training: segments, re-plans when workers join and leave.

The fast tests check that cutting a training into segments changes nothing (a checkpoint
every round gives the estimator of one segment, bit for bit) and how the chunks left of an
epoch are dealt. The slow one runs against ``dask scheduler`` and ``dask worker`` processes
started here: `taskdml run` while a worker joins and another is killed during its sync
training (the test of a sync training that loses a worker).
"""

import contextlib
import dataclasses
import json
import os
import signal
import uuid
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from distributed import Client, Event, LocalCluster
from holds import stop_requested
from sklearn.linear_model import SGDClassifier

from cli.main import cli
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
    """A segment per round trains the estimator one segment trains, bit for bit: the sync
    loop's of reference_loops.py."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

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
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]), [0, 1],
        merge_linear_sgd, n_replicas=2, sync_every=2, epochs=2, shuffle=True, random_state=0,
    )  # fmt: skip
    np.testing.assert_array_equal(cut.estimator.coef_, expected.coef_)


def test_checkpoints_of_fewer_replicas_than_workers_are_no_replans(client):
    """n_replicas=1 on two workers: segments at every round, none of them a re-plan; the
    model is the serial loop's (reference_loops.py)."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    X, y = linear_data(6_000, 5, 1_000)
    with dask.config.set({"taskdml.elastic.checkpoint-s": 0}):
        result = train(
            SGDClassifier(random_state=0), X, y, n_replicas=1, sync_every=2, random_state=0
        )
    assert result.stats["segments"] == 3
    assert result.stats["replans"] == []
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]), [0, 1],
        merge_linear_sgd, n_replicas=1, sync_every=2, epochs=1, shuffle=True, random_state=0,
    )  # fmt: skip
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)


def test_the_chunks_left_are_dealt_by_index():
    """Chunk i of those left goes to replica i mod R, in index order."""
    chunks = [Chunk(None, None, None, i) for i in range(10)]
    left, n_replicas = [9, 2, 4, 7, 5], 3
    shares = _elastic.deal(chunks, left, n_replicas)
    assert [[c.index for c in share] for share in shares] == [[9], [4, 7], [2, 5]]
    # the rule, computed here: replica r holds the chunks left whose index is r mod R, sorted
    indices = np.sort(left)
    dealt = [indices[indices % n_replicas == r].tolist() for r in range(n_replicas)]
    assert [[c.index for c in share] for share in shares] == dealt


# --------------------------------------------------------------------------------------------
# Workers that join and leave: separate `dask scheduler` and `dask worker` processes.


QUICKSTART = Path(__file__).resolve().parents[2] / "pipelines" / "quickstart.yaml"
TESTS = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])}
"""The run and the workers import ``holds`` (the held estimator) from tests/."""

N_SAMPLES, TEST_SIZE, EPOCHS = 60_000, 0.2, 4
TRAIN_ROWS = int(N_SAMPLES * (1 - TEST_SIZE))
WAIT_S = 120
"""How long the test waits for an event it needs (only turns a hang into an error)."""


def _pipeline(tmp_path, holds):
    """quickstart.yaml, smaller, its model a ``holds:HeldSGD`` with *holds*, and sync rounds
    of one block."""
    spec = yaml.safe_load(QUICKSTART.read_text())
    spec["imports"] = {"allow": ["sklearn.*", "taskdml.*", "holds"]}
    spec["params"].update(n_samples=N_SAMPLES, chunk_size=2_000, epochs=EPOCHS)
    spec["steps"]["split"]["with"]["test_size"] = TEST_SIZE
    model = spec["steps"]["model"]
    model["fit"] = "holds:HeldSGD"
    model["with"]["holds"] = holds
    model["parallel"]["sync_every"] = 1
    path = tmp_path / f"pipeline-{len(holds)}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _replicas_on(client, step):
    """The workers running a replica of *step*'s training now."""
    return {
        worker
        for worker, keys in client.processing().items()
        if any(str(key).startswith(f"('{step}-replica-") for key in keys)
    }


def _run(processes, address, pipeline, run_dir):
    """`taskdml run` of *pipeline* on the cluster at *address*, as a process."""
    return processes(
        "taskdml",
        "run",
        str(pipeline),
        "--scheduler",
        address,
        "--run-dir",
        str(run_dir),
        "--no-cache",
        env=ENV,
        name="taskdml",
    )


def _outcome(run_dir):
    (manifest,) = run_dir.glob("*/manifest.json")
    (metrics,) = run_dir.glob("*/metrics.json")
    training = json.loads(manifest.read_text())["steps"]["model"]["training"]
    return training, json.loads(metrics.read_text())["report"]["accuracy"]


def _held(client, name):
    """Wait until the training stops at its hold *name* (see ``HeldSGD``)."""
    if not Event(f"{name}-reached", client=client).wait(WAIT_S):
        raise TimeoutError(f"the training never reached its hold {name!r}")


class _Holder:
    """Any actor: the collective of the replica below, never called."""


@contextlib.contextmanager
def _cluster_in_this_process(n_workers):
    """``(cluster, client)``: a LocalCluster whose workers run in this process (their objects
    at hand) and a client of its own."""
    with (
        LocalCluster(
            n_workers=n_workers, processes=False, protocol="tcp://", host="127.0.0.1",
            threads_per_worker=1, dashboard_address=None,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):  # fmt: skip
        yield cluster, client


@dataclasses.dataclass
class _EventsPlan:
    """The plan of the replica below: the names of its two events (a plan has validation)."""

    started: str
    go: str
    validation: object = None


def _waiting_replica(rank, chunks, collective, plan):
    """A replica task (see ``_train._submit_together``) that says it runs, then waits."""
    Event(plan.started).set()
    Event(plan.go).wait()
    return type(collective).__name__, chunks[0].X.shape


def _hold_chunk(chunk, go):
    """Occupy the chunk's own worker with a task that reads it (so its copy stays there)."""
    Event(go).wait()
    return chunk.shape


def test_a_replica_outlives_its_collectives_worker_with_its_chunks(wait_for):
    """The replicas get their actor (the all-reduce or the parameter server) without
    depending on its key. When the actor's worker leaves, a replica still running elsewhere
    stays processing to the scheduler, so its worker's copy of the chunks it reads is kept
    by the active memory manager; a replica depending on the actor was erred with it, the
    copy dropped while the replica was still executing, and that worker shut down
    ("Cannot remove replica of ... while ... in state 'executing'")."""
    from taskdml.parallel.engine import _train

    with _cluster_in_this_process(3) as (cluster, client):
        server, home, replica = sorted(client.nthreads())
        actor_future = client.submit(_Holder, actor=True, workers=[server])
        actor = actor_future.result()
        chunk = client.submit(np.ones, (4, 2), workers=[home], key="chunk-of-the-replica")
        started, go = f"started-{uuid.uuid4().hex}", f"go-{uuid.uuid4().hex}"
        holder = client.submit(_hold_chunk, chunk, go, workers=[home], pure=False)
        (task,) = _train._submit_together(
            client, _waiting_replica, (), [[Chunk(chunk, None, None, 0)]], None, actor,
            _EventsPlan(started, go), [replica], "train-replica-test",
        )  # fmt: skip
        Event(started, client=client).wait(30)
        assert set(client.who_has([chunk])[chunk.key]) == {home, replica}
        (lost,) = [w for w in cluster.workers.values() if w.address == server]
        client.sync(lost.close)
        wait_for(lambda: server not in client.nthreads(), 30, "the actor's worker to leave")
        client.amm.run_once()
        assert task.status == "pending"  # not erred with the actor: still running
        assert set(client.who_has([chunk])[chunk.key]) == {home, replica}
        Event(go, client=client).set()
        assert task.result(timeout=30) == ("Actor", (4, 2))
        assert holder.result(timeout=30) == (4, 2)
        assert replica in client.nthreads()


@pytest.mark.timeout(120)
def test_a_paused_worker_gets_no_replica_and_none_running_is_an_error(wait_for):
    """A worker paused over its memory's pause fraction starts no task: the training places
    its replicas on the running one and ends (a replica pinned to the paused worker never
    started, and the other waited for it in its first round forever); with every worker
    paused, or a paused one named in workers=, it says so instead of waiting."""
    from distributed.core import Status

    X, y = linear_data(2_000, 4, 250)
    with (
        # the memory monitor would resume a worker paused below its pause fraction
        dask.config.set({"distributed.worker.memory.pause": False}),
        _cluster_in_this_process(2) as (cluster, client),
    ):
        X, y = client.persist([X, y])
        workers = sorted(cluster.workers.values(), key=lambda w: w.address)

        def pause(worker):
            worker.status = Status.paused  # what the memory monitor does, told to the scheduler
            wait_for(
                lambda: worker.address not in client.sync(client.scheduler.ncores_running),
                30,
                "the scheduler to see the pause",
            )

        pause(workers[0])
        result = train(
            SGDClassifier(random_state=0), X, y, classes=[0, 1], epochs=2, strategy="sync",
            client=client,
        )  # fmt: skip
        assert result.stats["replicas"] == 1
        assert [e["epoch"] for e in result.history] == [1, 2]
        with pytest.raises(RuntimeError, match=rf"the workers \['{workers[0].address}'\] are not"):
            train(
                SGDClassifier(), X, y, classes=[0, 1], epochs=1, strategy="sync",
                workers=[w.address for w in workers], client=client,
            )  # fmt: skip
        pause(workers[1])
        with pytest.raises(RuntimeError, match="none of the cluster's workers is running"):
            train(SGDClassifier(), X, y, classes=[0, 1], epochs=1, strategy="sync", client=client)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_joins_and_another_is_killed_during_a_pipelines_training(
    dask_cluster, processes, wait_for, tmp_path
):
    """`taskdml run` on separate scheduler and worker processes: a worker that joins during
    the sync training gets a replica, one SIGKILLed later has its chunks dealt out again,
    and the run completes every epoch within 0.5 pp of the same run on the fixed cluster.

    The training is held (``HeldSGD``) at one epoch until the engine has asked its replicas
    to stop for the new worker, and at two epochs while a replica runs on the new worker and
    an old worker is killed: each happens while the training runs, whatever its speed.
    """
    address = dask_cluster.start(workers=(ENV, ENV), scheduler=ENV)
    fixed = [str(_pipeline(tmp_path, [])), "--scheduler", address, "--no-cache"]
    result = CliRunner().invoke(cli, ["run", *fixed, "--run-dir", str(tmp_path / "fixed")])
    assert result.exit_code == 0, result.output
    joins, kill = (f"{what}-{uuid.uuid4().hex}" for what in ("join", "kill"))
    pipeline = _pipeline(tmp_path, [[TRAIN_ROWS, joins], [2 * TRAIN_ROWS, kill]])
    with Client(address, set_as_default=False) as client:
        first = set(client.nthreads())
        run = _run(processes, address, pipeline, tmp_path / "elastic")
        _held(client, joins)
        dask_cluster.add_worker(address, ENV)
        client.wait_for_workers(3, timeout=WAIT_S)
        wait_for(
            lambda: all(client.run(stop_requested, workers=sorted(first)).values()),
            WAIT_S,
            "the engine to ask the replicas to stop for the new worker",
        )
        Event(joins, client=client).set()
        _held(client, kill)
        assert _replicas_on(client, "model") - first  # a replica on the new worker
        leaving = sorted(first)[1]
        os.kill(client.run(os.getpid, workers=[leaving])[leaving], signal.SIGKILL)
        wait_for(lambda: leaving not in client.nthreads(), WAIT_S, f"{leaving} to be gone")
        Event(kill, client=client).set()
        assert run.wait(timeout=200) == 0
    training, accuracy = _outcome(tmp_path / "elastic")
    fixed_training, fixed_accuracy = _outcome(tmp_path / "fixed")
    replans = training["stats"]["replans"]
    assert [(r["reason"], r["replicas"]) for r in replans] == [("joined", 3), ("left", 2)]
    assert [entry["epoch"] for entry in training["history"]] == list(range(1, EPOCHS + 1))
    assert any("replans" in entry for entry in training["history"])
    assert fixed_training["stats"]["replans"] == []
    assert abs(accuracy - fixed_accuracy) <= 0.005
    expected = _in_memory_accuracy()
    assert abs(accuracy - expected) <= 0.02, (accuracy, expected)


def _in_memory_accuracy():
    """The test accuracy of scikit-learn's SGDClassifier fitted in memory on the run's rows
    (made here with the pipeline's seed), scaled by StandardScaler, for the same epochs."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets

    data = datasets.make_classification(
        N_SAMPLES, 20, n_informative=10, chunk_size=2_000, random_state=0
    )
    train_set, test_set = datasets.train_test_split(data, test_size=TEST_SIZE, random_state=0)
    train_set, test_set = train_set.compute(), test_set.compute()
    scaler = StandardScaler().fit(train_set["X"].values)
    model = SGDClassifier(loss="log_loss", alpha=1e-4, max_iter=EPOCHS, tol=None, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # EPOCHS epochs, as the run
        model.fit(scaler.transform(train_set["X"].values), train_set["y"].values)
    return model.score(scaler.transform(test_set["X"].values), test_set["y"].values)
