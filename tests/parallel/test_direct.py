"""The direct all-reduce: its schedule, its results against the actor's and the threads',
its failures (a replica that raises, a worker that dies), and the fall-back to the actor."""

import contextlib
import os
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import MiniBatchKMeans
from sklearn.linear_model import SGDClassifier
from sklearn.preprocessing import StandardScaler

from taskdml.parallel import train
from taskdml.parallel.collective._direct import steps


@pytest.mark.parametrize("n_replicas", range(1, 18))
def test_recursive_doubling_gives_every_rank_every_model(n_replicas):
    """Simulate the schedule step by step, messages carrying what the sender held when it
    sent: every rank ends with all ranks' models, in ceil(log2 R) exchanges (+2 for R not a
    power of two), and every message sent is received at the same step."""
    held = {rank: {rank} for rank in range(n_replicas)}
    schedules = {rank: steps(n_replicas, rank) for rank in range(n_replicas)}
    tags = sorted({tag for s in schedules.values() for tag, _, _ in s}, key=_step_order)
    for tag in tags:
        sent = {}
        for rank, schedule in schedules.items():
            for step_tag, send_to, _ in schedule:
                if step_tag == tag and send_to is not None:
                    sent[(rank, send_to)] = set(held[rank])
        for rank, schedule in schedules.items():
            for step_tag, _, receive_from in schedule:
                if step_tag == tag and receive_from is not None:
                    held[rank] |= sent.pop((receive_from, rank))
        assert not sent, f"messages sent at {tag} that nobody receives: {sent}"
    assert all(models == set(range(n_replicas)) for models in held.values())
    power = n_replicas & (n_replicas - 1) == 0
    expected = (n_replicas - 1).bit_length() if power else (n_replicas.bit_length() - 1) + 2
    assert len(tags) == expected


def _step_order(tag):
    return (0, 0) if tag == "fold" else (2, 0) if tag == "unfold" else (1, int(tag[1:]))


@pytest.fixture(scope="module")
def six_threads():
    """Three worker processes with two threads each: room for up to six replicas."""
    with _client(n_workers=3, threads_per_worker=2) as client:
        yield client


@contextlib.contextmanager
def _client(**cluster_options):
    """A client of a new LocalCluster of worker processes on loopback, closed on exit."""
    from distributed import Client, LocalCluster

    options = dict(processes=True, host="127.0.0.1", dashboard_address=None, memory_limit="2GiB")
    with (
        LocalCluster(**options, **cluster_options) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


def _data(n_samples=6_000, chunk_size=500):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_samples, 4))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return da.from_array(X, chunks=(chunk_size, 4)), da.from_array(y, chunks=chunk_size)


def _assert_the_sync_loop_model(result, X, y, n_replicas):
    """*result*, an SGDClassifier(random_state=0) trained for one epoch with random_state=0
    and the automatic period, is the model the sync loop of reference_loops.py trains with
    period 1 (the period "auto" keeps while its probe rounds cover the whole epoch)."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    assert result.stats["sync_every"] == [1]
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]), [0, 1],
        merge_linear_sgd, n_replicas=n_replicas, sync_every=1, epochs=1, shuffle=True,
        random_state=0,
    )  # fmt: skip
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
    np.testing.assert_array_equal(result.estimator.intercept_, expected.intercept_)


ESTIMATORS = {
    "SGDClassifier": (lambda: SGDClassifier(random_state=0), ("coef_", "intercept_")),
    "StandardScaler": (StandardScaler, ("mean_", "var_", "n_samples_seen_")),
    "MiniBatchKMeans": (
        lambda: MiniBatchKMeans(n_clusters=3, random_state=0, n_init=1),
        ("cluster_centers_", "_counts"),
    ),
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_direct_actor_and_threads_train_identical_models(six_threads, name):
    """R = 1..5 replicas all-reducing directly between worker processes, through the actor,
    and as threads of this process: the same model, bit for bit; for SGD the sync loop's of
    reference_loops.py, for the scaler the mean and variance of all the rows."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    make, attributes = ESTIMATORS[name]
    X, y = _data()
    needs_y = name == "SGDClassifier"
    kwargs = {"classes": [0, 1]} if needs_y else {}

    def fit(n_replicas, client):  # an integer period: "auto" would depend on timings
        return train(
            make(),
            X,
            y if needs_y else None,
            epochs=2,
            sync_every=1,
            n_replicas=n_replicas,
            random_state=0,
            client=client,
            **kwargs,
        )

    for n_replicas in range(1, 6):
        models = {}
        for collective in ("direct", "actor"):
            with dask.config.set({"taskdml.collective": collective}):
                result = fit(n_replicas, six_threads)
            assert result.stats["collective"] == collective
            models[collective] = result.estimator
        models["threads"] = fit(n_replicas, False).estimator
        if name == "SGDClassifier":
            expected = reference_sync(
                SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]),
                [0, 1], merge_linear_sgd, n_replicas=n_replicas, sync_every=1, epochs=2,
                shuffle=True, random_state=0,
            )  # fmt: skip
            np.testing.assert_array_equal(models["threads"].coef_, expected.coef_)
        elif name == "StandardScaler":
            X_np = X.compute()
            np.testing.assert_allclose(models["threads"].mean_, X_np.mean(axis=0), rtol=1e-12)
            np.testing.assert_allclose(models["threads"].var_, X_np.var(axis=0), rtol=1e-10)
        for attribute in attributes:
            reference = getattr(models["threads"], attribute)
            for collective in ("direct", "actor"):
                np.testing.assert_array_equal(
                    getattr(models[collective], attribute),
                    reference,
                    err_msg=f"{name} {attribute}, R={n_replicas}, {collective}",
                )


def test_direct_rounds_record_where_the_time_goes(six_threads):
    """Sync training on a cluster all-reduces directly and records, per replica, the
    seconds spent serialising, on the wire, waiting and merging, the median round, and
    where the call's fixed cost went, piece by piece."""
    X, y = _data()
    result = train(
        SGDClassifier(random_state=0),
        X,
        y,
        classes=[0, 1],
        n_replicas=3,
        random_state=0,
        client=six_threads,
    )
    _assert_the_sync_loop_model(result, X, y, n_replicas=3)
    stats = result.stats
    assert stats["collective"] == "direct"
    for key in ("serialize_s", "wire_s", "wait_s", "merge_s"):
        assert len(stats[key]) == 3 and all(value >= 0 for value in stats[key])
    assert 0 < stats["collective_round_s"] <= max(stats["reduce_wait_s"])
    pieces = ("prepare_s", "inspect_s", "blocks_s", "workers_s", "data_wait_s", "place_s")
    pieces += ("collective_s", "lock_s", "submit_s", "dispatch_s", "skew_s", "return_s")
    pieces += ("finish_s",)
    assert list(stats["setup"]) == list(pieces)
    assert all(stats["setup"][piece] >= 0 for piece in pieces)


class DiesOnMarkedChunk(SGDClassifier):
    """partial_fit ends its worker process (no exception, no goodbye) on a chunk whose first
    feature holds the marker: a worker that dies in the middle of a training."""

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        if np.any(X[:, 0] == 1e6):
            os._exit(17)
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


def test_a_dying_worker_fails_the_training_promptly_naming_its_replica(six_threads):
    """The surviving replica notices that the dead one's connection closed and the call
    raises, naming the replica, instead of waiting for the 600 s limit."""
    X_np = np.random.default_rng(0).normal(size=(4_000, 4))
    X_np[3_500, 0] = 1e6  # chunk 7 of 8: replica 1's fourth round
    X = da.from_array(X_np, chunks=(500, 4))
    y = da.from_array((X_np[:, 1] > 0).astype(int), chunks=500)
    with pytest.raises(ConnectionError, match=r"replica 1"):
        train(
            DiesOnMarkedChunk(),
            X,
            y,
            classes=[0, 1],
            n_replicas=2,
            shuffle=False,
            client=six_threads,
        )
    six_threads.wait_for_workers(3, timeout=60)  # the nanny restarts the worker


def test_blocked_handler_falls_back_to_the_actor_with_a_warning():
    """A cluster whose workers block the collective's handler trains through the actor and
    says why; the model is the one the direct collective would give."""
    X, y = _data(n_samples=2_000, chunk_size=250)
    with (
        dask.config.set({"distributed.worker.blocked-handlers": ["taskdml_collective"]}),
        _client(n_workers=2, threads_per_worker=1) as client,
        pytest.warns(RuntimeWarning, match="falls back to the all-reduce actor.*blocked"),
    ):
        fallback = train(
            SGDClassifier(random_state=0), X, y, classes=[0, 1], random_state=0, client=client
        )
    assert fallback.stats["collective"] == "actor"
    _assert_the_sync_loop_model(fallback, X, y, n_replicas=2)
    threads = train(
        SGDClassifier(random_state=0),
        X,
        y,
        classes=[0, 1],
        n_replicas=2,
        random_state=0,
        client=False,
    )
    np.testing.assert_array_equal(fallback.estimator.coef_, threads.estimator.coef_)


def test_direct_when_required_but_blocked_is_an_error_naming_the_setting():
    """taskdml.collective='direct' on workers that cannot receive direct messages raises."""
    from distributed import Client, LocalCluster

    X, y = _data(n_samples=1_000, chunk_size=250)
    with (
        dask.config.set({"distributed.worker.blocked-handlers": ["taskdml_collective"]}),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
        dask.config.set({"taskdml.collective": "direct"}),
        warnings.catch_warnings(),
    ):
        with pytest.raises(RuntimeError, match="taskdml.collective is 'direct' but"):
            train(SGDClassifier(random_state=0), X, y, classes=[0, 1], client=client)


def test_workers_in_one_process_fall_back_to_the_actor():
    """Workers that are threads of one process (inproc://) all-reduce through the actor,
    with a warning saying why."""
    from distributed import Client, LocalCluster

    X, y = _data(n_samples=2_000, chunk_size=250)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
        pytest.warns(RuntimeWarning, match="threads of one process on inproc://"),
    ):
        result = train(
            SGDClassifier(random_state=0), X, y, classes=[0, 1], random_state=0, client=client
        )
    assert result.stats["collective"] == "actor"
    _assert_the_sync_loop_model(result, X, y, n_replicas=2)
