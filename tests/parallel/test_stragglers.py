"""Who each sync round waited for, and why: ``TrainResult.stats`` checked against facts the
test records itself (the chunk sizes it made, where it put the chunks, ``who_has`` before the
training) and against the replicas' own per-round records. No clock value is asserted."""

import statistics

import dask.array as da
import numpy as np
from dask.core import flatten
from sklearn.linear_model import SGDClassifier

from taskdml.parallel import train

SMALL, LARGE = 60, 240  # rows of the even and of the odd chunks


def _uneven(n_chunks=8, n_features=4):
    """Chunks of SMALL rows at even indices, LARGE at odd ones: with two replicas (chunk i to
    replica i mod 2) every block of replica 1 is four times replica 0's."""
    sizes = tuple(LARGE if i % 2 else SMALL for i in range(n_chunks))
    X = da.random.default_rng(0).random((sum(sizes), n_features), chunks=(sizes, n_features))
    y = (X[:, 0] > 0.5).astype(int)
    return X, y, sizes


def test_the_slowest_replica_of_each_round_is_the_one_its_records_name(client):
    """Per round, ``slowest`` names the replica with the most recorded partial_fit seconds,
    its lateness over the median replica and its rows; ``round_rows`` are the rows of the
    chunks the replica owns (chunk i to replica i mod 2), in order, each epoch."""
    X, y, sizes = _uneven()
    result = train(
        SGDClassifier(random_state=0),
        X,
        y,
        classes=[0, 1],
        n_replicas=2,
        sync_every=1,
        epochs=2,
        shuffle=False,
        random_state=0,
        client=client,
    )
    stats = result.stats
    owned = [[size for i, size in enumerate(sizes) if i % 2 == rank] for rank in range(2)]
    assert stats["round_rows"] == [share * 2 for share in owned]  # two epochs, in order
    busy, rows = stats["round_busy_s"], stats["round_rows"]
    assert len(stats["slowest"]) == stats["rounds"] == len(busy[0]) == len(busy[1])
    for i, entry in enumerate(stats["slowest"]):
        seconds = [busy[rank][i] for rank in range(2)]
        assert entry["round"] == i
        assert entry["rank"] == int(np.argmax(seconds))
        assert entry["late_s"] == seconds[entry["rank"]] - statistics.median(seconds)
        assert entry["rows"] == rows[entry["rank"]][i]
        assert entry["median_rows"] == (SMALL + LARGE) / 2
        assert entry["cause"] in ("rows", "speed", None)
    for rank in range(2):  # what the replicas also sum up per call
        assert np.isclose(sum(busy[rank]), stats["busy_s"][rank])
    assert np.isclose(stats["late_s"], sum(e["late_s"] for e in stats["slowest"]))
    assert len(stats["copy_s"]) == len(stats["epoch_end_s"]) == 2


def test_chunks_held_on_another_worker_are_counted_for_their_replica(client):
    """With every chunk persisted on one worker, the replica placed on the other has all
    its chunks remote and the first none: ``remote_chunks`` per rank equals the chunks
    ``who_has`` (read by the test before training) did not show on its worker, and each
    round's ``remote_blocks`` is that round's block if its slowest replica is the remote one.
    The call's laps are all there, in order."""
    X, y, sizes = _uneven(n_chunks=6)
    first = sorted(client.nthreads())[0]
    X, y = client.persist([X, y], workers=[first])
    client.gather(client.compute([X.sum(), y.sum()]))  # computed where they were put
    held = client.who_has(X)
    keys = list(flatten(X.__dask_keys__()))  # the row blocks' keys, in order
    result = train(
        SGDClassifier(random_state=0),
        X,
        y,
        classes=[0, 1],
        n_replicas=2,
        sync_every=1,
        shuffle=False,
        random_state=0,
        client=client,
    )
    stats = result.stats
    placement = stats["placement"]
    expected = [
        sum(1 for i, key in enumerate(keys) if i % 2 == rank and placement[rank] not in held[key])
        for rank in range(2)
    ]
    assert sorted(expected) == [0, len(sizes) // 2]  # one replica on each worker
    assert stats["remote_chunks"] == expected
    for entry in stats["slowest"]:
        assert entry["remote_blocks"] == (1 if expected[entry["rank"]] else 0)
    pieces = ("prepare_s", "inspect_s", "blocks_s", "workers_s", "data_wait_s", "place_s")
    pieces += ("collective_s", "lock_s", "submit_s", "dispatch_s", "skew_s", "return_s")
    assert list(stats["setup"]) == [*pieces, "finish_s"]
    assert len(stats["start_late_s"]) == 2 and min(stats["start_late_s"]) == 0.0
