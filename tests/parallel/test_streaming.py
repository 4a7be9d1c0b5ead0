"""Streaming training: replicas and search steps read their chunks as they train.

The small tests check that streaming changes where chunks are read, never the arithmetic
(the same estimator, bit for bit, as persisting), that the read-ahead holds at most
``prefetch + 1`` chunks, and the ``data="auto"`` rule. The slow ones train on a Zarr store
four times larger than the workers' memory limits and check every worker's peak memory.
"""

import gc
import os
import weakref
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster
from sklearn.linear_model import SGDClassifier

from taskdml.model_selection import ASHASearchCV, SuccessiveHalvingSearchCV
from taskdml.parallel import DataParallel, train
from taskdml.parallel.engine import _stream
from taskdml.parallel.engine._chunks import Chunk

N_FEATURES = 8
WEIGHTS = np.linspace(-1.0, 1.0, N_FEATURES)


def blobs(n_samples, seed):
    """Rows of a noisy linear rule: uniform features, labels 0/1 (about 90 % separable)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n_samples, len(WEIGHTS))) - 0.5
    noise = rng.normal(scale=0.1, size=n_samples)
    return X, (X @ WEIGHTS + noise > 0).astype(np.int8)


def write_store(path, n_chunks, chunk_rows, n_features=N_FEATURES):
    """A Zarr store of *n_chunks* generated chunk by chunk (never whole in memory)."""
    weights = np.linspace(-1.0, 1.0, n_features)
    shape = (n_chunks * chunk_rows, n_features)
    X = zarr.create_array(
        f"{path}/X",
        shape=shape,
        chunks=(chunk_rows, n_features),
        dtype="f8",
        compressors=None,
        overwrite=True,
    )
    y = zarr.create_array(
        f"{path}/y",
        shape=shape[:1],
        chunks=(chunk_rows,),
        dtype="i1",
        compressors=None,
        overwrite=True,
    )
    for i in range(n_chunks):
        rng = np.random.default_rng([7, i])
        block = rng.random((chunk_rows, n_features)) - 0.5
        rows = slice(i * chunk_rows, (i + 1) * chunk_rows)
        X[rows] = block
        y[rows] = (block @ weights + rng.normal(scale=0.1, size=chunk_rows) > 0).astype(np.int8)
    return da.from_zarr(f"{path}/X"), da.from_zarr(f"{path}/y")


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    ) as local:
        yield local


@pytest.fixture
def client(cluster):
    with Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    return write_store(tmp_path_factory.mktemp("store"), n_chunks=10, chunk_rows=2_000)


def _reference(X, y, chunk_rows, *, pushes=None, epochs=1, sync_every=1):
    """What the engine trains from SGDClassifier(random_state=0) with two replicas, chunks
    shuffled with random_state=0: the sync loop of reference_loops.py, or the replay of an
    async run's recorded *pushes*."""
    from reference_loops import (
        chunks_of,
        engine_seed,
        merge_linear_sgd,
        reference_sync,
        replay_async,
    )

    chunks = chunks_of(X, y, chunk_rows)
    if pushes is not None:
        return replay_async(
            SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd,
            [tuple(push) for push in pushes], n_replicas=2, epochs=epochs, shuffle=True,
            seed=engine_seed(0),
        )  # fmt: skip
    return reference_sync(
        SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd, n_replicas=2,
        sync_every=sync_every, epochs=epochs, shuffle=True, random_state=0,
    )  # fmt: skip


@pytest.mark.parametrize("strategy", ["sync", "async"])
def test_streaming_trains_what_persisting_trains(client, small_store, strategy):
    """A streamed sync training equals a persisted one bit for bit, and both the sync loop of
    reference_loops.py; a streamed async training equals the replay of its recorded pushes."""
    X, y = small_store
    results = {
        data: train(
            SGDClassifier(random_state=0),
            X,
            y,
            strategy=strategy,
            epochs=2,
            sync_every=2,
            random_state=0,
            data=data,
        )
        for data in ("persist", "stream")
    }
    assert results["stream"].stats["data"]["mode"] == "stream"
    assert results["stream"].stats["data"]["streamed"] is True
    assert results["persist"].stats["data"]["streamed"] is False
    X_np, y_np = dask.compute(X, y)
    if strategy == "sync":
        np.testing.assert_array_equal(
            results["stream"].estimator.coef_, results["persist"].estimator.coef_
        )
        expected = _reference(X_np, y_np, X.chunks[0], epochs=2, sync_every=2)
    else:
        pushes = results["stream"].stats["pushes"]
        expected = _reference(X_np, y_np, X.chunks[0], pushes=pushes, epochs=2)
    np.testing.assert_array_equal(results["stream"].estimator.coef_, expected.coef_)
    np.testing.assert_array_equal(results["stream"].estimator.intercept_, expected.intercept_)


def test_data_in_memory_already_is_not_streamed(client, small_store):
    """Arrays built on futures (an earlier step's output) have no graph of their own to read
    from: asked to stream, the training uses them where they are, says why, and trains what
    the sync loop of reference_loops.py trains on the same rows."""
    X, y = small_store
    X_held, y_held = client.persist([X, y])
    result = train(
        SGDClassifier(random_state=0), X_held[:, :4] * 2.0, y_held, data="stream", sync_every=1,
        random_state=0,
    )  # fmt: skip
    assert result.stats["data"]["mode"] == "persist"
    assert "in the workers' memory already" in result.stats["data"]["reason"]
    X_np, y_np = dask.compute(X, y)
    expected = _reference(X_np[:, :4] * 2.0, y_np, X.chunks[0])
    np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)


def test_streaming_without_a_cluster_matches(small_store):
    """Threads of this process stream too, with the same arithmetic as on a cluster: the
    persisted training's and the sync loop's of reference_loops.py."""
    X, y = small_store
    streamed, persisted = (
        train(
            SGDClassifier(random_state=0),
            X,
            y,
            epochs=2,
            sync_every=1,
            random_state=0,
            n_replicas=2,
            data=data,
            client=False,
        )
        for data in ("stream", "persist")
    )
    assert streamed.stats["data"]["streamed"] is True
    np.testing.assert_array_equal(streamed.estimator.coef_, persisted.estimator.coef_)
    expected = _reference(*dask.compute(X, y), X.chunks[0], epochs=2, sync_every=1)
    np.testing.assert_array_equal(streamed.estimator.coef_, expected.coef_)


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_read_ahead_holds_at_most_prefetch_plus_one_chunks(prefetch):
    """While a chunk is trained on, at most prefetch + 1 read chunks exist; the chunks come
    in order, each the block its source made."""
    alive = []

    def make(i):
        block = np.random.default_rng(i).normal(size=(1_000, 2))
        alive.append(weakref.ref(block))
        return block

    array = da.concatenate(
        [da.from_delayed(dask.delayed(make)(i), (1_000, 2), float) for i in range(8)]
    )
    found = _stream.sources(array)
    chunks = [Chunk(source, None, None, i) for i, source in enumerate(found.values())]
    most = 0
    reading = _stream.read_ahead(chunks, prefetch)
    for i in range(len(chunks)):
        chunk = next(reading)
        np.testing.assert_array_equal(chunk.X, np.random.default_rng(i).normal(size=(1_000, 2)))
        del chunk
        gc.collect()
        most = max(most, sum(ref() is not None for ref in alive))
    assert len(alive) == len(chunks)
    assert most <= prefetch + 1


def test_a_read_error_is_raised_where_the_chunk_is_trained():
    """A chunk that cannot be read fails the training with the reader's error."""

    def broken():
        raise OSError("chunk file vanished")

    array = da.from_delayed(dask.delayed(broken)(), (10, 2), float)
    chunks = [Chunk(source, None, None, 0) for source in _stream.sources(array).values()]
    with pytest.raises(OSError, match="chunk file vanished"):
        list(_stream.read_ahead(chunks, 2))


@pytest.mark.parametrize(
    ("data", "nbytes", "limits", "used", "persisted", "mode"),
    [
        ("auto", 100, [100, 100], None, False, "persist"),  # half the memory: persist
        ("auto", 101, [100, 100], None, False, "stream"),
        ("auto", 300, [600, 600], [280, 280], False, "persist"),  # half of the 640 free
        ("auto", 330, [600, 600], [280, 280], False, "stream"),  # under half of 1200, but
        ("auto", 10**12, [100, 100], None, True, "persist"),  # already in memory
        ("auto", 10**12, [0, 100], None, False, "persist"),  # a worker without a limit
        ("stream", 1, [100], None, False, "stream"),
        ("stream", 1, [100], None, True, "persist"),  # futures: no graph to read them from
        ("persist", 10**12, [100], None, False, "persist"),
    ],
)
def test_auto_streams_data_over_half_the_free_memory(data, nbytes, limits, used, persisted, mode):
    """data="auto" persists what takes at most half the memory the workers have free under
    their limits (an idle worker already holds its imports), and streams the rest. The free
    memory it records is the limits less what the workers hold (NumPy here), and "auto" on
    data not yet in memory under limits persists exactly when it is at most half of that."""
    chosen, facts = _stream.choose(data, nbytes, limits, persisted, used)
    assert chosen == mode
    free = None if not all(limits) else int(np.sum(np.subtract(limits, used or 0)))
    assert facts["memory_free_total"] == free
    assert facts["memory_limit_total"] == (None if free is None else int(np.sum(limits)))
    if data == "auto" and not persisted and free is not None:
        assert (chosen == "persist") == (nbytes <= free / 2)


def test_an_unknown_data_mode_is_refused():
    """A misspelt data mode names the valid ones."""
    with pytest.raises(ValueError, match="data must be one of auto, persist, stream, got 'steam'"):
        _stream.choose("steam", 1, [1], False)


def test_a_streamed_search_equals_a_persisted_one(client, small_store):
    """Successive halving over streamed chunks runs the same steps and scores as over
    persisted ones (ASHA's promotions depend on the order results arrive in)."""
    X, y = small_store
    searches = {}
    for data in ("persist", "stream"):
        search = SuccessiveHalvingSearchCV(
            SGDClassifier(random_state=0),
            {"alpha": [1e-5, 1e-4, 1e-3, 1e-2]},
            max_epochs=3,
            random_state=0,
            data=data,
            strategy="sequential",
        )
        searches[data] = search.fit(X, y)
    streamed, persisted = searches["stream"], searches["persist"]
    assert streamed.metadata_["data"]["mode"] == "stream"
    assert {entry["mode"] for entry in streamed.history_} == {"streamed"}
    assert streamed.best_params_ == persisted.best_params_
    steps = [
        sorted((e["trial"], e["budget"], e["score"]) for e in s.history_)
        for s in (streamed, persisted)
    ]
    assert steps[0] == steps[1]
    np.testing.assert_array_equal(streamed.best_estimator_.coef_, persisted.best_estimator_.coef_)
    # The model it hands back is as good as scikit-learn's own fit in memory with the same
    # parameters, on new rows of the same rule.
    X_new, y_new = blobs(5_000, seed=11)
    in_memory = SGDClassifier(random_state=0, **streamed.best_params_).fit(*dask.compute(X, y))
    assert streamed.score(X_new, y_new) >= in_memory.score(X_new, y_new) - 0.02


# --------------------------------------------------------------------------------------------
# Data four times the workers' memory.

WORKER_MEMORY = 600 * 2**20
BIG_FEATURES = 40
BIG_CHUNK_ROWS = 100_000
BIG_CHUNKS = 170  # 17M rows x 40 float64: 5.07 GiB, 4.2x the two workers' 1.17 GiB


def _store_folder(tmp_path_factory, nbytes):
    """Where the 5 GiB store goes: a folder of the RAM-backed file system (``/dev/shm``)
    when it has room for it twice over, else the tests' temporary folder. Either is a real
    file system the workers read with file calls; what the tests bound is the workers' own
    resident memory (``VmHWM``), which a file's pages, in RAM or on disk, are not part of.
    On a virtual disk writing it took 20 to 74 s; in RAM a few seconds."""
    import shutil
    import tempfile

    shm = "/dev/shm"
    if os.path.isdir(shm) and shutil.disk_usage(shm).free > 2 * nbytes:
        return Path(tempfile.mkdtemp(prefix="taskdml-big-", dir=shm))
    return tmp_path_factory.mktemp("big")


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    import shutil

    nbytes = BIG_CHUNKS * BIG_CHUNK_ROWS * (BIG_FEATURES * 8 + 1)
    path = _store_folder(tmp_path_factory, nbytes)
    try:
        X, y = write_store(path, BIG_CHUNKS, BIG_CHUNK_ROWS, BIG_FEATURES)
        assert X.nbytes >= 4 * 2 * WORKER_MEMORY
        yield X, y
    finally:
        shutil.rmtree(path)  # 5 GiB: not left for the session's end


@pytest.fixture(scope="module")
def small_workers():
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit=WORKER_MEMORY,
            host="127.0.0.1",
            dashboard_address=None,
        ) as local,
        Client(local) as client,
    ):
        yield client


def _peak_rss():
    """This process's peak resident memory in bytes (``VmHWM``: ``ru_maxrss`` of a spawned
    worker would start from its parent's peak)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _peaks(client):
    """Every worker's process and peak resident memory (bytes) since it started."""
    return client.run(lambda: (os.getpid(), _peak_rss()))


def _holdout(n_features):
    rng = np.random.default_rng(99)
    X = rng.random((200_000, n_features)) - 0.5
    weights = np.linspace(-1.0, 1.0, n_features)
    return X, (X @ weights + rng.normal(scale=0.1, size=len(X)) > 0).astype(np.int8)


def _in_memory_score(big_store, X_test, y_test, **params):
    """scikit-learn's own SGDClassifier with *params*, fitted in this process on the ten
    chunks the fractions train on, read here (not through the small workers): its score on
    the holdout."""
    X, y = big_store
    rows = slice(0, 10 * BIG_CHUNK_ROWS)
    fraction = dask.compute(X[rows], y[rows], scheduler="threads")
    reference = SGDClassifier(random_state=0, **params).fit(*fraction)
    return reference.score(X_test, y_test)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_on_a_store_four_times_the_workers_memory(small_workers, big_store):
    """DataParallel streams a 5 GiB store through two 600 MiB workers: peaks stay below the
    limits, no worker restarts, and accuracy is within 0.5 pp of training on a fraction and
    of scikit-learn's fit in memory on that fraction."""
    client = small_workers
    X, y = big_store
    before = _peaks(client)
    # one pass over the 17M rows: the memory bound is the point, and a pass is plenty here
    model = DataParallel(SGDClassifier(random_state=0), random_state=0, epochs=1).fit(X, y)
    after = _peaks(client)
    assert model.stats_["data"]["mode"] == "stream"
    assert {w: pid for w, (pid, _) in after.items()} == {w: pid for w, (pid, _) in before.items()}
    assert all(peak < WORKER_MEMORY for _, peak in after.values()), after
    fraction = DataParallel(SGDClassifier(random_state=0), random_state=0, data="persist")
    fraction.fit(X[: 10 * BIG_CHUNK_ROWS], y[: 10 * BIG_CHUNK_ROWS])
    X_test, y_test = _holdout(BIG_FEATURES)
    assert abs(model.score(X_test, y_test) - fraction.score(X_test, y_test)) <= 0.005
    in_memory = _in_memory_score(big_store, X_test, y_test)
    assert model.score(X_test, y_test) == pytest.approx(in_memory, abs=0.005)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_asha_search_on_a_store_four_times_the_workers_memory(small_workers, big_store):
    """ASHA streams the same store: peaks below the limits, no restarts, and its best model
    within 0.5 pp of the same search on a fraction that fits in memory and of scikit-learn's
    fit in memory on that fraction with the best parameters."""
    client = small_workers
    X, y = big_store
    before = _peaks(client)
    space = {"alpha": [1e-5, 1e-3]}  # two trials: what is shown is the memory bound
    search = ASHASearchCV(SGDClassifier(random_state=0), space, max_epochs=2, random_state=0)
    search.fit(X, y)
    after = _peaks(client)
    assert search.metadata_["data"]["mode"] == "stream"
    assert {w: pid for w, (pid, _) in after.items()} == {w: pid for w, (pid, _) in before.items()}
    assert all(peak < WORKER_MEMORY for _, peak in after.values()), after
    fraction = ASHASearchCV(
        SGDClassifier(random_state=0),
        space,
        max_epochs=2,
        random_state=0,
        data="persist",
        strategy="sequential",
    ).fit(X[: 10 * BIG_CHUNK_ROWS], y[: 10 * BIG_CHUNK_ROWS])
    X_test, y_test = _holdout(BIG_FEATURES)
    assert abs(search.score(X_test, y_test) - fraction.score(X_test, y_test)) <= 0.005
    in_memory = _in_memory_score(big_store, X_test, y_test, **search.best_params_)
    assert search.score(X_test, y_test) == pytest.approx(in_memory, abs=0.005)


@pytest.fixture(scope="module")
def file_sources(tmp_path_factory):
    """The same rows as a directory of Parquet files and as a NetCDF file."""
    import pandas as pd
    import xarray as xr

    path = tmp_path_factory.mktemp("files")
    X, y = blobs(20_000, seed=5)
    (path / "table").mkdir()
    for i in range(10):
        rows = slice(i * 2_000, (i + 1) * 2_000)
        frame = pd.DataFrame(X[rows], columns=[f"f{j}" for j in range(N_FEATURES)])
        frame.assign(y=y[rows]).to_parquet(path / "table" / f"part-{i:02d}.parquet")
    data = xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)})
    data.chunk({"sample": 2_000}).to_netcdf(path / "data.nc")
    return path


@pytest.mark.parametrize("source", ["parquet", "netcdf"])
def test_files_stream_as_they_persist(client, file_sources, source):
    """A Parquet directory read by dask.dataframe and a NetCDF file opened by xarray train
    the same estimator streamed as persisted: the sync loop's of reference_loops.py over the
    files' rows."""
    import dask.dataframe as dd
    import xarray as xr

    if source == "parquet":
        frame = dd.read_parquet(file_sources / "table")
        data = (frame[[f"f{j}" for j in range(N_FEATURES)]], frame["y"])
    else:
        data = (xr.open_dataset(file_sources / "data.nc", chunks={"sample": 2_000}),)
    results = {
        mode: train(SGDClassifier(random_state=0), *data, sync_every=1, random_state=0, data=mode)
        for mode in ("persist", "stream")
    }
    assert results["stream"].stats["data"]["mode"] == "stream"
    np.testing.assert_array_equal(
        results["stream"].estimator.coef_, results["persist"].estimator.coef_
    )
    expected = _reference(*blobs(20_000, seed=5), (2_000,) * 10)
    np.testing.assert_array_equal(results["stream"].estimator.coef_, expected.coef_)


def test_readers_of_one_chunk_at_the_same_time_share_its_read():
    """Two steps on one worker reading the same chunk at once read it once."""
    import threading
    import time

    reads = []
    started = threading.Barrier(2)

    def slow_block():
        """The read, held until the second reader has joined it (the registry of reads in
        flight counts its readers)."""
        reads.append(1)
        deadline = time.monotonic() + 30
        while not any(readers == 2 for _, readers in list(_stream._READS.values())):
            if time.monotonic() > deadline:
                raise TimeoutError("the second reader never joined the read in flight")
            threading.Event().wait(0.001)
        return np.ones((10, 2))

    (source,) = _stream.sources(
        da.from_delayed(dask.delayed(slow_block)(), (10, 2), float)
    ).values()
    results = []

    def reader():
        started.wait()
        results.append(source.read())

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1 and len(results) == 2
    assert results[0] is results[1]
    assert _stream._READS == {}  # nothing kept once both have it


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pipeline_streams_a_store_larger_than_its_clusters_memory_share(tmp_path):
    """read_zarr's dataset, too large to persist on the file's cluster, stays lazy: the fit
    step streams it, and the manifest says so; the model it saved scores, on the first 50,000
    rows, within 2 points of scikit-learn's SGDClassifier fitted in memory on those rows."""
    import json

    import xarray as xr
    from click.testing import CliRunner

    from cli.main import cli
    from taskdml.runs._directory import load_model

    rng = da.random.default_rng(3)
    X = rng.random((1_600_000, 32), chunks=(50_000, 32)) - 0.5  # 410 MB
    y = (X @ da.from_array(np.linspace(-1.0, 1.0, 32)) > 0).astype(np.int8)
    xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)}).to_zarr(
        tmp_path / "store.zarr"
    )
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "taskdml: 1\nname: big\n"
        "cluster: {n_workers: 2, threads_per_worker: 1, memory_limit: 600MiB}\n"
        "steps:\n"
        "  data:\n    call: taskdml.datasets:read_zarr\n"
        f"    with: {{path: '{tmp_path / 'store.zarr'}'}}\n"
        "  model:\n    fit: sklearn.linear_model:SGDClassifier\n"
        "    with: {random_state: 0}\n    parallel: {epochs: 1}\n    inputs: {data: data}\n"
    )
    result = CliRunner().invoke(cli, ["run", str(pipeline), "--run-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (manifest,) = (tmp_path / "runs").glob("*/manifest.json")
    data = json.loads(manifest.read_text())["steps"]["model"]["training"]["stats"]["data"]
    assert data["mode"] == "stream" and data["streamed"], data
    X_rows, y_rows = dask.compute(X[:50_000], y[:50_000])
    expected = SGDClassifier(random_state=0).fit(X_rows, y_rows).score(X_rows, y_rows)
    accuracy = load_model(manifest.parent, "model").score(X_rows, y_rows)
    assert accuracy >= expected - 0.02, (accuracy, expected)
