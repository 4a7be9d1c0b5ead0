"""Worker loss, kept and proven: a worker process SIGKILLed mid-training or mid-search.

Each test runs the same training (or search) twice on a LocalCluster of worker processes on
127.0.0.1: undisturbed, then with a worker killed while it runs. The killed run completes,
within 0.5 pp of the undisturbed one, and the records say what the loss cost: the re-plans
of sync training, the restarts of async training (``repeated_s``, the training time done
again), and for a search the task stream, where a completed trial step would show twice.
``recovery_s`` (from the kill to the first replica task started after it) is measured from
the task stream too. ``FAULT_FIGURES=path`` appends each test's figures to *path* as JSON lines.
"""

import contextlib
import json
import os
import signal
import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

from taskdml.model_selection import ASHASearchCV
from taskdml.parallel import train

CHECKPOINT_S = 0.5
"""``taskdml.elastic.checkpoint-s`` of the trainings: the client holds the state of half a
second ago (sync: a segment ends; async: a copy of the server's state)."""


def linear_data(n_samples, n_features, chunk_rows, seed=0):
    rng = da.random.default_rng(seed)
    X = rng.random((n_samples, n_features), chunks=(chunk_rows, n_features)) - 0.5
    y = (X @ da.from_array(np.linspace(-1.0, 1.0, n_features)) > 0).astype(np.int8)
    return X, y


@contextlib.contextmanager
def three_workers():
    """A client of a LocalCluster of three single-threaded worker processes on loopback."""
    with (
        LocalCluster(
            n_workers=3,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def kill(client, address):
    """SIGKILL the worker process at *address* (one this test started); the time of the kill."""
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    return time.time()


def replica_workers(client):
    """``{rank: worker}`` of the training replicas running now."""
    return {
        key[1]: worker
        for worker, keys in client.processing().items()
        for key in keys
        if isinstance(key, tuple) and "replica" in str(key[0])
    }


def worker_of(client, rank, wait_for):
    """The worker running replica *rank* now (waiting for one: between two segments of a
    sync training none runs)."""
    seen = []
    wait_for(lambda: seen.append(replica_workers(client).get(rank)) or seen[-1], 60, "replicas")
    return seen[-1]


def in_background(function, *args, **kwargs):
    """Run *function* in a thread; a dict that gets its ``result`` or ``error``."""
    outcome = {}

    def run():
        try:
            outcome["result"] = function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the test reports it
            outcome["error"] = error

    outcome["thread"] = threading.Thread(target=run)
    outcome["thread"].start()
    return outcome


def recovery_s(stream, killed_at, name="replica"):
    """Seconds from the kill to the first task named *name* started after it."""
    starts = [
        part["start"]
        for task in stream.data
        if name in str(task["key"])
        for part in task["startstops"]
        if part["action"] == "compute" and part["start"] > killed_at
    ]
    return min(starts) - killed_at


def record(name, **figures):
    """Append *figures* to the file ``FAULT_FIGURES`` names, if any."""
    path = os.environ.get("FAULT_FIGURES")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"test": name, **figures}, default=float) + "\n")


def accuracy(result, test):
    return result.estimator.score(*test)


# --------------------------------------------------------------------------------------------
# Data-parallel training.


EPOCHS = {"sync": 120, "async": 30}
"""About ten seconds of training each on three workers (sync rounds are cheaper)."""


def _train(strategy, X, y):
    return train(
        SGDClassifier(random_state=0),
        X,
        y,
        strategy=strategy,
        epochs=EPOCHS[strategy],
        random_state=0,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sync_training_survives_a_killed_worker(wait_for):
    """A worker SIGKILLed mid sync training: the training re-plans on the others, repeats at
    most the seconds since its last checkpoint, and ends within 0.5 pp of an undisturbed run."""
    X, y = linear_data(60_000, 20, 1_000)
    test = dask.compute(*linear_data(20_000, 20, 20_000, seed=1))
    with three_workers() as client, dask.config.set({"taskdml.elastic.checkpoint-s": 1}):
        undisturbed = _train("sync", X, y)
        with get_task_stream(client=client) as stream:
            run = in_background(_train, "sync", X, y)
            wait_for(lambda: len(replica_workers(client)) == 3, 60, "three replicas")
            time.sleep(2)
            killed_at = kill(client, worker_of(client, 1, wait_for))
            run["thread"].join(120)
    assert "error" not in run, run.get("error")
    result = run["result"]
    (left,) = [r for r in result.stats["replans"] if r["reason"] == "left"]
    assert [entry["epoch"] for entry in result.history] == list(range(1, EPOCHS["sync"] + 1))
    assert abs(accuracy(result, test) - accuracy(undisturbed, test)) <= 0.005
    record(
        "sync",
        recovery_s=recovery_s(stream, killed_at),
        repeated_s=left["repeated_s"],
        epoch=left["epoch"],
        accuracy=accuracy(result, test),
        undisturbed=accuracy(undisturbed, test),
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("victim", ["server", "replica"])
def test_async_training_survives_a_killed_worker(wait_for, victim):
    """A worker SIGKILLed mid async training, the parameter server's or another: a new
    server starts from the last state the client holds (the server's own when it is still
    there) and the chunks it had not absorbed are trained; every chunk of every epoch is
    absorbed exactly once, and the result is within 0.5 pp of an undisturbed run."""
    X, y = linear_data(60_000, 20, 1_000)
    test = dask.compute(*linear_data(20_000, 20, 20_000, seed=1))
    pushes = EPOCHS["async"] * X.numblocks[0]
    with (
        three_workers() as client,
        dask.config.set({"taskdml.elastic.checkpoint-s": CHECKPOINT_S}),
    ):
        undisturbed = _train("async", X, y)
        with get_task_stream(client=client) as stream:
            run = in_background(_train, "async", X, y)
            wait_for(lambda: len(replica_workers(client)) == 3, 60, "three replicas")
            time.sleep(2.5)  # between two copies of the server's state (about 1 s apart)
            killed_at = kill(client, worker_of(client, 0 if victim == "server" else 1, wait_for))
            run["thread"].join(120)
    assert "error" not in run, run.get("error")
    result = run["result"]
    (restart,) = result.stats["restarts"]
    assert restart["server_lost"] is (victim == "server")
    assert 0 < restart["chunks_left"] < pushes  # it continued from a kept state
    assert result.stats["updates"] == undisturbed.stats["updates"] == pushes
    if victim == "replica":
        assert restart["repeated_s"] == 0.0  # the server's own state: no push lost
    assert undisturbed.stats["restarts"] == []
    assert abs(accuracy(result, test) - accuracy(undisturbed, test)) <= 0.005
    record(
        f"async-{victim}",
        recovery_s=recovery_s(stream, killed_at),
        repeated_s=restart["repeated_s"],
        chunks_left=restart["chunks_left"],
        pushes=pushes,
        accuracy=accuracy(result, test),
        undisturbed=accuracy(undisturbed, test),
    )


def test_the_chunks_a_lost_server_had_not_absorbed_are_trained_epoch_by_epoch():
    """A replica's pushes follow its order, so those past its count are left; they are
    trained again epoch by epoch, alternating the replicas they came from."""
    from taskdml.parallel.engine._train import _not_pushed

    items = [[(0, "a"), (0, "b"), (1, "a"), (1, "b")], [(0, "c"), (1, "c"), (2, "c")]]
    left = _not_pushed(items, {0: 1, 1: 0})
    assert left == [(0, "b"), (0, "c"), (1, "a"), (1, "c"), (1, "b"), (2, "c")]


def test_a_second_loss_before_any_progress_stops_with_a_clear_error():
    """The message of an async training that lost workers twice in a row."""
    from taskdml.parallel.engine._train import _Segment, _server_lost_again

    segment = _Segment(None, None, None, ["tcp://127.0.0.1:1"], 0.0, {"tcp://127.0.0.1:1"})
    with pytest.raises(ConnectionError, match=r"lost the workers \['tcp://127.0.0.1:1'\] right"):
        raise _server_lost_again(segment)


# --------------------------------------------------------------------------------------------
# An adaptive search.


def _search():
    return ASHASearchCV(
        SGDClassifier(random_state=0),
        {"alpha": np.logspace(-6, -1, 24).tolist()},
        n_trials=24,
        max_epochs=81,
        random_state=0,
    )


def trial_tasks(stream):
    """How many times each trial task of the search (a step's training, scoring and result;
    not the copies of the data for fused steps) completed, by key. Read the stream once its
    ``with`` block has ended: it is gathered then."""
    counts = {}
    for task in stream.data:
        if "trial-" in str(task["key"]) and "trial-data" not in str(task["key"]):
            counts[task["key"]] = counts.get(task["key"], 0) + 1
    return counts


def steps_done(stream, before):
    """``(trial, budget)`` of the steps whose result task ended before *before*."""
    return {
        (task["key"][1], task["key"][-1])
        for task in stream.data
        if "trial-result" in str(task["key"]) and task["startstops"][-1]["stop"] < before
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_search_survives_a_killed_worker_and_recomputes_no_completed_step(wait_for):
    """A worker SIGKILLed mid ASHA search: every trial finishes with a score, the best is
    within 0.5 pp of an undisturbed search, and no task of a step completed before the kill
    is computed again (the task stream would hold its key twice).

    A step is completed once its result reached the search, which then holds its states; a
    margin of a second separates that from the result task's end on the worker. A step in
    flight at the kill may be computed again, its training included.
    """
    X, y = make_classification(n_samples=120_000, n_features=20, random_state=0)
    (X, X_test), (y, y_test) = np.split(X, [100_000]), np.split(y, [100_000])
    with three_workers() as client:
        began = time.perf_counter()
        undisturbed = _search().fit(X, y)
        undisturbed_s = time.perf_counter() - began
        with get_task_stream(client=client) as stream:
            search = _search()
            run = in_background(search.fit, X, y)
            wait_for(lambda: any(client.processing().values()), 60, "the first steps")
            time.sleep(undisturbed_s / 3)  # some trials have finished steps, none all
            victim = sorted(client.nthreads())[0]
            in_flight = [k for k in client.processing()[victim] if "trial-step" in str(k)]
            killed_at = kill(client, victim)
            run["thread"].join(200)
    assert "error" not in run, run.get("error")
    counts = trial_tasks(stream)
    completed = steps_done(stream, killed_at - 1.0)
    assert completed  # killed mid-search
    of_completed = {key: n for key, n in counts.items() if (key[1], key[-1]) in completed}
    assert {key: n for key, n in of_completed.items() if n > 1} == {}
    assert len(search.trials_) == 24
    assert search.trials_["score"].notna().all()
    assert abs(search.best_score_ - undisturbed.best_score_) <= 0.005
    accuracy, undisturbed_accuracy = (
        s.best_estimator_.score(X_test, y_test) for s in (search, undisturbed)
    )
    assert abs(accuracy - undisturbed_accuracy) <= 0.005
    record(
        "asha",
        steps_completed_before_kill=len(completed),
        their_tasks=len(of_completed),
        steps_in_flight_on_the_killed_worker=len(in_flight),
        recovery_s=recovery_s(stream, killed_at, "trial-step"),
        in_flight_rerun_by_s=max(
            (
                task["startstops"][-1]["stop"] - killed_at
                for task in stream.data
                if task["key"] in in_flight
            ),
            default=None,
        ),
        trial_tasks=len(counts),
        computed_twice=sorted(str(key) for key, n in counts.items() if n > 1),
        undisturbed_s=undisturbed_s,
        seconds_after_kill=time.time() - killed_at,
        accuracy=accuracy,
        undisturbed=undisturbed_accuracy,
    )
