"""Sync training against an independent reference: a plain loop of R replicas in this process.

The loop restates the engine's definition of a synchronous run and nothing else: chunk ``i``
belongs to replica ``i mod R``; the replicas start from :func:`taskdml.parallel.prepare_start`
on the first chunk; each round every replica copies the global estimator and runs
``partial_fit`` on its next ``sync_every`` chunks; the replicas that saw rows are merged in
rank order with :func:`taskdml.parallel.merge_replicas`, weighted by their rows; the merge
starts the next round. ``taskdml.parallel.train`` must equal it bit for bit where the arithmetic is
deterministic (SGD: Cython loops, no BLAS), and to rounding where BLAS sums in another order
(MLP, k-means, LDA).
"""

import copy
import math

import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import MiniBatchKMeans
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.neural_network import MLPClassifier
from sklearn.utils import check_random_state

import taskdml
from taskdml.parallel import merge_replicas, prepare_start

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

CHUNK_ROWS = (300, 250, 320, 280, 310, 260, 290)  # 7 ragged chunks: replica 0 owns 4, 1 owns 3
_rng = np.random.default_rng(0)
X_NP = _rng.normal(size=(sum(CHUNK_ROWS), 5))
Y_CLASS = (X_NP @ [1.0, -1.0, 0.5, 0.0, 0.2] + 0.5 * _rng.normal(size=len(X_NP)) > 0).astype(int)
Y_REAL = X_NP @ [1.0, 2.0, 0.0, -1.0, 0.5] + _rng.normal(size=len(X_NP))
X_COUNTS = _rng.poisson(2.0, size=X_NP.shape).astype(float)


def _chunks(X, y, chunk_rows=CHUNK_ROWS):
    bounds = np.cumsum((0, *chunk_rows))
    return [(X[a:b], None if y is None else y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _epoch_order(n_chunks, epoch, rank, shuffle, seed):
    # The engine's documented seeding: one seed drawn from random_state, then per (epoch, rank).
    if not shuffle:
        return list(range(n_chunks))
    return list(np.random.default_rng([seed, epoch, rank]).permutation(n_chunks))


def reference_sync(
    estimator,
    X,
    y,
    classes,
    *,
    n_replicas,
    sync_every,
    epochs,
    shuffle=False,
    random_state=0,
    chunk_rows=CHUNK_ROWS,
):
    """The sync strategy as a plain loop of replicas in this process (X, y: NumPy arrays cut
    into chunks of *chunk_rows* rows)."""
    chunks = _chunks(X, y, chunk_rows)
    owned = [
        [c for i, c in enumerate(chunks) if i % n_replicas == rank] for rank in range(n_replicas)
    ]
    seed = int(check_random_state(random_state).randint(2**31 - 1))
    rounds = math.ceil(max(len(o) for o in owned) / sync_every)
    fit_kwargs = {} if classes is None else {"classes": classes}
    state = prepare_start(estimator, chunks[0][0], chunks[0][1], classes)
    for epoch in range(epochs):
        orders = [_epoch_order(len(o), epoch, rank, shuffle, seed) for rank, o in enumerate(owned)]
        for round_index in range(rounds):
            trained = []
            for rank in range(n_replicas):
                replica, rows = copy.deepcopy(state), 0
                for position in orders[rank][
                    round_index * sync_every : (round_index + 1) * sync_every
                ]:
                    X_chunk, y_chunk = owned[rank][position]
                    if y_chunk is None:
                        replica.partial_fit(X_chunk, **fit_kwargs)
                    else:
                        replica.partial_fit(X_chunk, y_chunk, **fit_kwargs)
                    rows += len(X_chunk)
                if rows:
                    trained.append((replica, rows))
            if trained:
                state = merge_replicas([r for r, _ in trained], [w for _, w in trained])
    return state


def _assert_same(got, expected, exact, path="estimator"):
    """Every learned attribute of *expected* (public ``*_`` and private buffers) is in *got*."""
    if isinstance(expected, (np.random.RandomState, np.random.Generator)):
        return
    if isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), path
        for i, (g, e) in enumerate(zip(got, expected)):
            _assert_same(g, e, exact, f"{path}[{i}]")
        return
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), path
        for key in expected:
            _assert_same(got[key], expected[key], exact, f"{path}[{key!r}]")
        return
    if hasattr(expected, "get_params"):
        names = [n for n in vars(expected) if n.endswith("_") or n.startswith("_")]
        # _n_threads is the machine's OpenMP thread count (workers run one thread each).
        skip = {"_taskdml_round_start", "_n_threads"}
        names = [n for n in names if not n.startswith("__") and n not in skip]
        for name in names:
            assert hasattr(got, name), f"{path}.{name} missing"
            _assert_same(getattr(got, name), getattr(expected, name), exact, f"{path}.{name}")
        return
    if hasattr(expected, "__dict__"):  # optimisers: compare their state
        _assert_same(vars(got), vars(expected), exact, path)
        return
    if isinstance(expected, (np.ndarray, float, int, np.number)) and not isinstance(expected, bool):
        if exact or np.asarray(expected).dtype.kind not in "fc":
            np.testing.assert_array_equal(got, expected, err_msg=path)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12, err_msg=path)
        return
    if expected is None or isinstance(expected, (str, bool)):
        assert got == expected, path


def _dask(X, y):
    X = da.from_array(X, chunks=(CHUNK_ROWS, X.shape[1]))
    return X, None if y is None else da.from_array(y, chunks=(CHUNK_ROWS,))


# (id, estimator, X, y, classes, bit for bit)
CASES = [
    ("SGDClassifier", SGDClassifier(random_state=0), X_NP, Y_CLASS, [0, 1], True),
    (
        "SGDClassifier-asgd",
        SGDClassifier(average=True, random_state=0),
        X_NP,
        Y_CLASS,
        [0, 1],
        True,
    ),
    ("SGDRegressor", SGDRegressor(random_state=0), X_NP, Y_REAL, None, True),
    (
        "MLPClassifier",
        MLPClassifier(hidden_layer_sizes=(6,), random_state=0),
        X_NP,
        Y_CLASS,
        [0, 1],
        False,
    ),
    (
        "MiniBatchKMeans",
        MiniBatchKMeans(n_clusters=3, n_init=1, random_state=0),
        X_NP,
        None,
        None,
        False,
    ),
    (
        "LatentDirichletAllocation",
        LatentDirichletAllocation(n_components=2, random_state=0),
        X_COUNTS,
        None,
        None,
        False,
    ),
]


@pytest.mark.parametrize("sync_every", [1, 2, 3])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sync_on_two_workers_equals_the_reference_loop(client, case, sync_every):
    """train(strategy="sync", n_replicas=2) on 2 worker processes equals the replica loop for
    an explicit period (3: a short last round), as it did before "auto" existed."""
    _, estimator, X, y, classes, exact = case
    expected = reference_sync(
        estimator, X, y, classes, n_replicas=2, sync_every=sync_every, epochs=2
    )
    result = taskdml.parallel.train(
        estimator,
        *_dask(X, y),
        classes=classes,
        strategy="sync",
        n_replicas=2,
        sync_every=sync_every,
        epochs=2,
        shuffle=False,
        random_state=0,
    )
    assert result.stats["replicas"] == 2
    assert result.stats["rounds"] == 2 * math.ceil(4 / sync_every)
    _assert_same(result.estimator, expected, exact)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sync_on_threads_equals_the_reference_loop(case):
    """The thread path (client=False) with shuffled chunk order equals the replica loop."""
    _, estimator, X, y, classes, exact = case
    expected = reference_sync(
        estimator, X, y, classes, n_replicas=2, sync_every=1, epochs=2, shuffle=True, random_state=5
    )
    result = taskdml.parallel.train(
        estimator,
        *_dask(X, y),
        classes=classes,
        strategy="sync",
        n_replicas=2,
        epochs=2,
        shuffle=True,
        random_state=5,
        client=False,
    )
    _assert_same(result.estimator, expected, exact)


def test_the_reference_loop_is_not_the_serial_loop():
    """With 2 replicas the loop really averages: it is not one serial pass (a sanity check)."""
    estimator = SGDClassifier(random_state=0)
    merged = reference_sync(estimator, X_NP, Y_CLASS, [0, 1], n_replicas=2, sync_every=1, epochs=1)
    serial = reference_sync(estimator, X_NP, Y_CLASS, [0, 1], n_replicas=1, sync_every=1, epochs=1)
    assert merged.t_ == serial.t_ == 1 + len(X_NP)
    assert not np.allclose(merged.coef_, serial.coef_)
