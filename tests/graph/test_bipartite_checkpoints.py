"""Checkpoints of the bipartite algorithms (ALS, SGD factorisation, sparse logistic
regression) and lost workers: a run in segments of ``checkpoint_every`` iterations equals one
run (and the numpy loops written here); a run that finds a checkpoint of the same algorithm,
parameters and ranges goes on from its iteration; a run whose worker is SIGKILLed mid-run
(when the recorded ``superstep`` events say it got there) goes on from its last checkpoint
on the workers left; and the CLI SIGKILLed mid-run resumes from the checkpointed iteration.
"""

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from test_bipartite import reference_logistic

from taskdml import _events
from taskdml.cache import Cache, _checkpoints
from taskdml.datasets import make_ratings
from taskdml.graph import (
    als,
    edges_from_scipy,
    partition_bipartite,
    sgd_factorize,
    sparse_logistic_regression,
)
from taskdml.graph._factorize import ALS, _model, _Spec, run_bipartite

HERE = {"PYTHONPATH": str(Path(__file__).parent)}  # the `dask` processes import _held
TASKDML = str(Path(sys.executable).with_name("taskdml"))
RANK, REG = 3, 0.05


@functools.lru_cache
def _ratings():
    """A planted rank-3 rating graph, 120 users x 50 items, in chunks of 300 edges."""
    graph = make_ratings(120, 50, rank=RANK, density=0.15, noise=0.1, random_state=0)
    return graph.chunk({"edge": 300})


def _sparse_problem(n=300, d=80):
    """A sparse table (5% dense), labels 0/1 and a quarter unlabelled (-1)."""
    X = sp.random(n, d, density=0.05, format="csr", random_state=1)
    rng = np.random.default_rng(0)
    y = ((X @ (2 * rng.standard_normal(d))) + 0.3 * rng.standard_normal(n) > 0).astype(int)
    return X, np.where(np.arange(n) % 4 == 0, -1, y)


def reference_als(users, items, ratings, n_users, n_items, U, n_iter):
    """MLlib's weighted ALS, one vertex at a time: items from the user factors, then users;
    lambda = REG * n_ratings; a vertex without ratings gets zeros."""

    def half(rows, cols, n_rows, F):
        out = np.zeros((n_rows, RANK))
        for r in range(n_rows):
            mine = rows == r
            if mine.any():
                Fr = F[cols[mine]]
                gram = Fr.T @ Fr + REG * mine.sum() * np.eye(RANK)
                out[r] = np.linalg.solve(gram, Fr.T @ ratings[mine])
        return out

    for _ in range(n_iter):
        V = half(items, users, n_items, U)
        U = half(users, items, n_users, V)
    return U, V


U0 = np.random.default_rng(1).standard_normal((120, RANK))


def _fit(kind, client, checkpoint_every):
    """Five iterations of *kind* on 3 partitions: its arrays and its history's measure."""
    common = {"n_partitions": 3, "client": client, "checkpoint_every": checkpoint_every}
    if kind == "als":
        model = als(_ratings(), RANK, REG, 5, init=U0, **common)
    elif kind == "sgd":
        model = sgd_factorize(
            _ratings(), RANK, n_epochs=5, n_batches=3, sync_every=2, random_state=5, **common
        )
    else:
        X, labels = _sparse_problem()
        model = sparse_logistic_regression(
            edges_from_scipy(X, chunk_size=300), labels, alpha=1e-3, learning_rate=2.0,
            n_epochs=5, n_batches=3, random_state=3, **common,
        )  # fmt: skip
        arrays = [model.coef.coef.values, np.array([model.intercept])]
        return arrays + [model.samples.probability.values], model.history, "log_loss"
    arrays = [model.user_factors.factors.values, model.item_factors.factors.values]
    return arrays, model.history, "rmse"


@pytest.mark.parametrize("kind", ["als", "sgd", "logit"])
def test_a_run_in_segments_equals_one_run_and_the_reference(client, kind):
    """Five iterations on 3 partitions in segments of 2 (each segment's tasks going on from
    the last one's state where it is) give one run's arrays and history exactly; ALS's
    factors are the one-vertex-at-a-time loop's from the same start, logistic regression's
    weights the global mini-batch loop's (SGD's random streams are seeded by (seed, epoch,
    partition): the segments do not change them)."""
    whole, history, measure = _fit(kind, client, None)
    segmented, segmented_history, _ = _fit(kind, client, 2)
    for part, expected in zip(segmented, whole):
        np.testing.assert_array_equal(part, expected)
    assert [h["superstep"] for h in segmented_history] == list(range(5))
    assert [h[measure] for h in segmented_history] == [h[measure] for h in history]
    if kind == "als":
        graph = _ratings()
        src, dst, weight = graph.src.values, graph.dst.values, graph.weight.values
        U, V = reference_als(src, dst, weight, 120, 50, U0, 5)
        np.testing.assert_allclose(segmented[0], U, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(segmented[1], V, rtol=1e-8, atol=1e-10)
    elif kind == "logit":
        X, labels = _sparse_problem()
        bounds = np.linspace(0, 300, 4).round().astype(int)
        w, b = reference_logistic(
            X, labels, bounds, alpha=1e-3, lr=2.0, n_epochs=5, n_batches=3, seed=3
        )
        np.testing.assert_allclose(segmented[0], w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(segmented[1], [b], rtol=1e-10, atol=1e-12)


def test_an_als_run_that_finds_its_checkpoint_goes_on_from_its_iteration(client, tmp_path):
    """A run in a pipeline step's scope, checkpointing every 2 of 5 iterations, leaves the
    checkpoint of iteration 4 in the store; the same ALS run again in that step starts from
    iteration 4 (``resumed_from``), publishes only iteration 4's event and ends with an
    uninterrupted run's factors and history; another ``reg`` does not take it (nor would a
    run without a seed: it draws one anew)."""
    whole = als(
        partition_bipartite(_ratings(), 3, client=client),
        RANK,
        REG,
        5,
        init=U0,
        random_state=0,
        checkpoint_every=None,
    )
    store = Cache(tmp_path / "cache")
    with _checkpoints.scope(store, "step-key"):
        first = als(whole.graph, RANK, REG, 5, init=U0, random_state=0, checkpoint_every=2)
    assert first.resumed_from is None
    run_id = uuid.uuid4().hex
    with _checkpoints.scope(store, "step-key"), _events.scope(run_id, "factors"):
        again = als(whole.graph, RANK, REG, 5, init=U0, random_state=0, checkpoint_every=2)
    assert again.resumed_from == 4
    assert _supersteps_published(client, run_id) == [4]
    published = [e for _, e in client.get_events(_events.TOPIC) if e.get("run_id") == run_id]
    assert list(published[0]["measure"]) == ["rmse", "training RMSE"]  # what pictures plot
    assert [h["rmse"] for h in again.history] == [h["rmse"] for h in whole.history]
    for side in ("user_factors", "item_factors"):
        np.testing.assert_array_equal(
            getattr(again, side).factors.values, getattr(whole, side).factors.values
        )
    graph = _ratings()
    src, dst, weight = graph.src.values, graph.dst.values, graph.weight.values
    U, _ = reference_als(src, dst, weight, 120, 50, U0, 5)
    np.testing.assert_allclose(again.user_factors.factors.values, U, rtol=1e-8, atol=1e-10)
    with _checkpoints.scope(store, "step-key"):
        other = als(whole.graph, RANK, 2 * REG, 5, init=U0, random_state=0, checkpoint_every=2)
    assert other.resumed_from is None


def _supersteps_published(client, run_id):
    return [
        e["superstep"]
        for _, e in client.get_events(_events.TOPIC)
        if e.get("run_id") == run_id and e["event"] == "superstep"
    ]


def _held(part, block, spec, collective, rank, tags, first, stop, start, *, hold, holder, at):
    """ALS's iterations, partition *holder* waiting after iteration *at* for the
    distributed Event *hold* (once set, it never waits again)."""
    if rank != holder or not first <= at < stop - 1:
        return ALS.iterate(part, block, spec, collective, rank, tags, first, stop, start)
    from distributed import Event

    done = ALS.iterate(part, block, spec, collective, rank, tags, first, at + 1, start)
    Event(hold).wait()
    rest = ALS.iterate(part, block, spec, collective, rank, tags, at + 1, stop, done)
    return (*rest[:-1], done[-1] + rest[-1])


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_als_the_run_ends_as_an_uninterrupted_one(dask_cluster):
    """Three partitions on three `dask worker` processes, a checkpoint every 2 of 8 ALS
    iterations; partition 1 holds after iteration 4 and, once the recorded events say
    iteration 4 was reached, its worker is SIGKILLed. The run goes on from the checkpoint of
    iteration 4 on the two workers left and ends with the uninterrupted run's factors and
    history, the one-vertex-at-a-time loop's from the same start."""
    from distributed import Client, Event

    address = dask_cluster.start(workers=(HERE, HERE, HERE), scheduler=HERE)
    hold, run_id = f"als-hold-{uuid.uuid4().hex}", uuid.uuid4().hex
    with Client(address, set_as_default=False) as client:
        graph = partition_bipartite(_ratings(), 3, client=client)
        uninterrupted = als(graph, RANK, REG, 8, init=U0, random_state=0, checkpoint_every=None)
        expected = [uninterrupted.user_factors, uninterrupted.item_factors]
        expected = [client.compute(side.factors.data).result() for side in expected]
        spec = _Spec(RANK, REG, 8, True, 0)
        held = dataclasses.replace(ALS, iterate=functools.partial(_held, hold=hold, holder=1, at=4))
        bounds = graph.user_bounds
        blocks = [U0[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

        def run():
            with _events.scope(run_id, "als"):
                return run_bipartite(graph, held, spec, blocks, 60.0, checkpoint_every=2)

        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(run)
            deadline = time.monotonic() + 60  # a guard against a hang, not a measurement
            while 4 not in _supersteps_published(client, run_id):
                assert not running.done() and time.monotonic() < deadline, running.exception()
                time.sleep(0.02)
            victim = graph.workers[1]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)  # a worker process this test started
            Event(hold, client=client).set()
            model = _model(running.result(timeout=90), spec)
        assert model.restarts == [{"superstep": 4, "workers": [victim]}]
        assert victim not in model.graph.workers and len(set(model.graph.workers)) == 2
        assert [h["superstep"] for h in model.history] == list(range(8))
        assert [h["rmse"] for h in model.history] == [h["rmse"] for h in uninterrupted.history]
        for side, values in zip((model.user_factors, model.item_factors), expected):
            np.testing.assert_array_equal(client.compute(side.factors.data).result(), values)
        ratings = _ratings()
        U, _ = reference_als(
            ratings.src.values, ratings.dst.values, ratings.weight.values, 120, 50, U0, 8
        )
        users = client.compute(model.user_factors.factors.data).result()
        np.testing.assert_allclose(users, U, rtol=1e-8, atol=1e-10)


PIPELINE = """\
taskdml: 1
name: als
imports: {allow: ["taskdml.*", holds]}
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  ratings:
    call: taskdml.datasets:make_ratings
    with: {n_users: 120, n_items: 50, rank: 3, density: 0.15, noise: 0.1, random_state: 0}
  factors:
    call: holds:held_als   # ALS whose rank 0 holds after iteration 12 (checkpoints every 10)
    inputs: {ratings: ratings}
    with: {hold: HOLD, at: 12, rank: 3, reg: 0.05, n_iter: 16, random_state: 0, init_seed: 1}
  saved:
    call: holds:save_values
    inputs: {result: factors}
    with: {variable: users, path: PATH}
"""


def _cli(folder):
    return {**os.environ, "TASKDML_CACHE_DIR": str(folder / "cache")}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_als_killed_mid_way_goes_on_from_its_checkpointed_iteration(tmp_path, cluster, client):
    """ALS in a pipeline step checkpoints every 10 iterations (the default); SIGKILL the CLI
    while its iteration 12 is held (the checkpoint of iteration 10 is on disk); `taskdml
    resume` publishes iterations 10 to 15 (none before) and saves an uninterrupted run's
    user factors, the one-vertex-at-a-time loop's from the same start (``U0``)."""
    from distributed import Event

    hold = f"resume-als-{uuid.uuid4().hex}"
    saved = tmp_path / "users.npy"
    (tmp_path / "als.yaml").write_text(PIPELINE.replace("HOLD", hold).replace("PATH", str(saved)))
    shutil.copy(Path(__file__).parents[1] / "holds.py", tmp_path / "holds.py")
    where = ["--scheduler", cluster.scheduler_address]
    process = subprocess.Popen(
        [TASKDML, "run", "als.yaml", "--run-dir", "runs", *where], cwd=tmp_path,
        env=_cli(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    reached, checkpoints = (
        Event(f"{hold}-reached", client=client),
        tmp_path / "cache" / "checkpoints",
    )
    deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
    while not (reached.is_set() and any(checkpoints.glob("*/*.checkpoint"))):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the hold was never reached"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the CLI this test started, and its children
    process.wait(timeout=60)
    Event(hold, client=client).set()  # the held partition's client is gone: let its task end
    done = subprocess.run(
        [TASKDML, "resume", "latest", "--run-dir", "runs", *where], cwd=tmp_path,
        env=_cli(tmp_path), capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads(sorted((tmp_path / "runs").glob("*/manifest.json"))[-1].read_text())
    assert manifest["status"] == "succeeded"
    events = [
        json.loads(line)
        for line in (tmp_path / "runs" / manifest["run_id"] / "events.jsonl").open()
    ]
    resumed = events[max(i for i, e in enumerate(events) if e["event"] == "run_started") :]
    assert [e["superstep"] for e in resumed if e["event"] == "superstep"] == list(range(10, 16))
    assert not any(checkpoints.iterdir())  # removed once the step was stored
    graph = make_ratings(120, 50, rank=RANK, density=0.15, noise=0.1, random_state=0)
    uninterrupted = als(graph, RANK, REG, 16, init=U0, random_state=0, client=client)
    expected = uninterrupted.user_factors.factors.values
    np.testing.assert_allclose(np.load(saved), expected, rtol=0, atol=1e-12)
    src, dst, weight = graph.src.values, graph.dst.values, graph.weight.values
    U, _ = reference_als(src, dst, weight, 120, 50, U0, 16)
    np.testing.assert_allclose(np.load(saved), U, rtol=1e-8, atol=1e-10)
