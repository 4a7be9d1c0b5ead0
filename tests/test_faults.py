"""Worker loss, kept and proven: a worker process SIGKILLed mid-training or mid-search.

Each test runs the same training (or search) twice on a LocalCluster of worker processes on
127.0.0.1: undisturbed, then with a worker killed while it runs. The killed run completes,
within 0.5 pp of the undisturbed one, and the records say what the loss cost: the restarts
of async training (``repeated_s``, the training time done again), and for a search the task
stream, where a completed trial step would show twice. (A sync training that loses a worker
is ``tests/parallel/test_elastic.py``'s: a pipeline run, with a worker that joins too.)

No clock decides when to kill or what had happened before: the estimator is
``holds.HeldSGD``, which stops at a given number of rows seen until the test
lets it go on. The test kills while the training is held there (so it cannot have ended),
and reads what came before from the events recorded on the scheduler: the copies of the
parameter server's state the client kept (``server_copy``), the steps whose results reached
the search (``trial``). ``recovery_s`` (from the kill to the first replica task started after
it, in the task stream) is a figure, not a check. ``FAULT_FIGURES=path`` appends each test's
figures to *path* as JSON lines.
"""

import contextlib
import json
import os
import signal
import threading
import time
import uuid

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, Event, LocalCluster, get_task_stream
from holds import HeldSGD
from sklearn.datasets import make_classification
from sklearn.model_selection import ParameterSampler

from taskdml import _events
from taskdml.model_selection import ASHASearchCV
from taskdml.parallel import train

CHECKPOINT_S = 0.5
"""``taskdml.elastic.checkpoint-s`` of the trainings: the client keeps a copy of the
parameter server's state at most this often (and at most once a second)."""

WAIT_S = 60
"""How long a test waits for an event it needs (only turns a hang into an error)."""


def linear_data(n_samples, n_features, chunk_rows, seed=0):
    rng = da.random.default_rng(seed)
    X = rng.random((n_samples, n_features), chunks=(chunk_rows, n_features)) - 0.5
    y = (X @ da.from_array(np.linspace(-1.0, 1.0, n_features)) > 0).astype(np.int8)
    return X, y


@contextlib.contextmanager
def cluster_of(n_workers):
    """A LocalCluster of *n_workers* single-threaded worker processes on loopback, and its
    client."""
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def kill(client, address):
    """SIGKILL the worker process at *address* (one this test started); the time of the kill
    (for the figures only)."""
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    return time.time()


def held(client, name):
    """Wait until a HeldSGD stops at its hold *name*."""
    if not Event(f"{name}-reached", client=client).wait(WAIT_S):
        raise TimeoutError(f"the training never reached its hold {name!r}")


def release_when_gone(client, address, name, wait_for):
    """Once the scheduler no longer has the worker *address*, let the held training go on."""
    wait_for(lambda: address not in client.nthreads(), WAIT_S, f"{address} to be gone")
    Event(name, client=client).set()


def recorded(client, run, kind):
    """The events of *kind* of *run* (:func:`in_background`'s) recorded on the scheduler so
    far, in their order."""
    return [
        event
        for _, event in client.get_events(_events.TOPIC)
        if event["event"] == kind and event["run_id"] == run["run_id"]
    ]


def replica_workers(client):
    """``{rank: worker}`` of the training replicas running now."""
    return {
        key[1]: worker
        for worker, keys in client.processing().items()
        for key in keys
        if isinstance(key, tuple) and "replica" in str(key[0])
    }


def in_background(function, *args, **kwargs):
    """Run *function* in a thread, its events recorded on the scheduler under a new
    ``run_id`` (:func:`taskdml._events.scope`); a dict with the ``run_id`` that gets the
    ``result`` or the ``error``."""
    outcome = {"run_id": uuid.uuid4().hex}

    def run():
        try:
            with _events.scope(outcome["run_id"], "faults"):
                outcome["result"] = function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the test reports it
            outcome["error"] = error

    outcome["thread"] = threading.Thread(target=run)
    outcome["thread"].start()
    return outcome


def recovery_s(stream, killed_at, name="replica"):
    """Seconds from the kill to the first task named *name* started after it (a figure)."""
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
# Async data-parallel training.


EPOCHS = 12
N_SAMPLES = 60_000


def _train(client, X, y, holds=()):
    return train(
        HeldSGD(holds=holds, random_state=0),
        X,
        y,
        strategy="async",
        epochs=EPOCHS,
        random_state=0,
        client=client,  # this module's cluster, whatever another module left as the default
    )


@pytest.fixture(scope="module")
def async_training():
    """A client of three workers (the nannies restart a killed one), the training data, and
    the undisturbed training's result."""
    X, y = linear_data(N_SAMPLES, 20, 1_000)
    with cluster_of(3) as (_, client):
        yield client, (X, y), _train(client, X, y)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("victim", ["server", "replica"])
def test_async_training_survives_a_killed_worker(async_training, wait_for, victim):
    """A worker SIGKILLed mid async training, the parameter server's or another: a new
    server starts from the last state the client holds (the server's own when it is still
    there) and the chunks it had not absorbed are trained; every chunk of every epoch is
    absorbed exactly once, and the result is within 0.5 pp of an undisturbed run."""
    client, (X, y), undisturbed = async_training
    client.wait_for_workers(3, timeout=WAIT_S)  # the one killed before is back
    test = dask.compute(*linear_data(20_000, 20, 20_000, seed=1))
    pushes = EPOCHS * X.numblocks[0]
    hold = f"half-{uuid.uuid4().hex}"
    with (
        dask.config.set({"taskdml.elastic.checkpoint-s": CHECKPOINT_S}),
        get_task_stream(client=client) as stream,
    ):
        run = in_background(_train, client, X, y, holds=[[EPOCHS // 2 * N_SAMPLES, hold]])
        held(client, hold)
        wait_for(
            lambda: any(copy["pushed"] for copy in recorded(client, run, "server_copy")),
            WAIT_S,
            "the client to keep a copy of the server's state with pushes in it",
        )
        victim_worker = replica_workers(client)[0 if victim == "server" else 1]
        killed_at = kill(client, victim_worker)
        release_when_gone(client, victim_worker, hold, wait_for)
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
# An adaptive search on workers that change.


ALPHAS = {"alpha": np.logspace(-6, -1, 16).tolist()}


def _search(holds=()):
    return ASHASearchCV(
        HeldSGD(holds=holds, random_state=0),
        ALPHAS,
        n_trials=16,
        max_epochs=27,
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


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_search_takes_a_new_worker_and_recomputes_no_completed_step_of_a_killed_one(wait_for):
    """ASHA held mid-search while a worker joins and another is SIGKILLed: trials run on the
    new worker, every trial finishes with a score, no task of a step whose result had reached
    the search before the kill is computed again (the task stream would hold its key twice),
    the trials are still scikit-learn's ParameterSampler's candidates for the search's seed,
    and the best is within 0.5 pp of an undisturbed search.

    A step is completed once its result reached the search, which then holds its states and
    records a ``trial`` event; those recorded before the kill are the completed ones. The
    search is held in a trial's second epoch (a step promoted from the first rung), so the
    kill comes while it runs; a step in flight at the kill may be computed again.
    """
    X, y = make_classification(n_samples=36_000, n_features=20, random_state=0)
    (X, X_test), (y, y_test) = np.split(X, [30_000]), np.split(y, [30_000])
    hold = f"rung-1-{uuid.uuid4().hex}"
    with cluster_of(2) as (cluster, client):
        undisturbed = _search().fit(X, y)
        first = set(client.nthreads())
        with get_task_stream(client=client) as stream:
            search = _search(holds=[[len(X), hold]])  # more rows than one epoch trains on
            run = in_background(search.fit, X, y)
            held(client, hold)
            cluster.scale(3)
            client.wait_for_workers(3, timeout=WAIT_S)
            (joined,) = set(client.nthreads()) - first
            processing = client.processing()
            victim = max(sorted(first), key=lambda w: "trial-step" in str(processing[w]))
            in_flight = [k for k in processing[victim] if "trial-step" in str(k)]
            completed = {(e["trial"], e["budget"]) for e in recorded(client, run, "trial")}
            killed_at = kill(client, victim)
            release_when_gone(client, victim, hold, wait_for)
            run["thread"].join(200)
    assert "error" not in run, run.get("error")
    counts = trial_tasks(stream)
    assert completed  # killed mid-search
    of_completed = {key: n for key, n in counts.items() if (key[1], key[-1]) in completed}
    assert of_completed
    assert {key: n for key, n in of_completed.items() if n > 1} == {}
    assert joined in {task["worker"] for task in stream.data if "trial-" in str(task["key"])}
    assert len(search.trials_) == 16
    assert search.trials_["score"].notna().all()
    sampled = [c["alpha"] for c in ParameterSampler(ALPHAS, 16, random_state=0)]
    assert search.trials_["alpha"].tolist() == undisturbed.trials_["alpha"].tolist() == sampled
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
        trial_tasks=len(counts),
        computed_twice=sorted(str(key) for key, n in counts.items() if n > 1),
        accuracy=accuracy,
        undisturbed=undisturbed_accuracy,
    )
