"""Training blocks: tiny and ragged chunks are merged so that every estimator trains on them."""

import copy

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA, IncrementalPCA
from sklearn.linear_model import SGDClassifier
from sklearn.multiclass import OneVsRestClassifier
from sklearn.neural_network import MLPClassifier
from test_merge import APPROXIMATE_CASES, EXACT_CASES, _assert_fitted_close, _ids, _serial

from taskdml.parallel import DataParallel, get_merge_rule, train
from taskdml.parallel.engine._blocks import TINY_ROWS, min_block_rows, plan_blocks, reblock
from taskdml.parallel.engine._chunks import Chunk
from taskdml.parallel.merge._registry import min_batch_rows, without_round_start

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # PassiveAggressive* (deprecated)
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
]

# 240 rows as chunks of 1 to 60 rows: blocks [0, 1], [2, 3], [4, 5], [6, 7] of 56-63 rows.
RAGGED_ROWS = (3, 60, 1, 55, 2, 58, 57, 4)
RAGGED_BLOCKS = [[0, 1], [2, 3], [4, 5], [6, 7]]

# The engine takes finite dense arrays and one list of classes: sparse X, texts, NaNs and
# per-output classes are left to the rule tests of test_merge.py.
_ENGINE_CASES = [
    case
    for case in EXACT_CASES + APPROXIMATE_CASES
    if case[0] not in ("HashingVectorizer", "StandardScaler-sparse", "MultiOutputClassifier-MLP")
    and not np.isnan(case[2]).any()
]
_ENGINE_EXACT = [case for case in _ENGINE_CASES if case in EXACT_CASES]


def _dask(X, y, rows):
    X = da.from_array(X, chunks=(rows, X.shape[1]))
    if y is None:
        return X, None
    return X, da.from_array(y, chunks=(rows,) + tuple((n,) for n in y.shape[1:]))


def _documented_groups(rows, min_rows):
    """_blocks.py's grouping rule, written here from its docstring with the chunks' cumulative
    rows: a group closes at the first chunk where the rows since the last close reach
    *min_rows*; chunks left after the last close join the group before (or are the one
    group)."""
    ends = np.cumsum(rows)
    closes, since = [], 0
    for index, end in enumerate(ends):
        if end - since >= min_rows:
            closes.append(index)
            since = end
    if not closes or closes[-1] != len(rows) - 1:
        closes = [*closes[:-1], len(rows) - 1]
    starts = [0, *(close + 1 for close in closes[:-1])]
    return [list(range(start, close + 1)) for start, close in zip(starts, closes)]


def _outputs(model, X, n_columns):
    """What a fitted model computes on *X*: its probabilities, decisions or transform (the
    first *n_columns* columns: an untruncated IncrementalPCA's leading components)."""
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    if hasattr(model, "decision_function"):
        return model.decision_function(X)
    return model.transform(X)[:, :n_columns]


def _truncate(ipca, n_components):
    """*ipca* (every component kept) as a PCA of *n_components* would be, in place: the
    leading components, and ``noise_variance_`` the mean of the dropped eigenvalues over the
    ``min(n_samples, n_features)`` a PCA of the rows has."""
    if n_components is None:
        return
    total = min(int(ipca.n_samples_seen_), ipca.n_features_in_)
    dropped = ipca.explained_variance_[n_components:total]
    ipca.noise_variance_ = dropped.mean() if len(dropped) else 0.0
    ipca.n_components = ipca.n_components_ = n_components
    for name in ("components_", "singular_values_", "explained_variance_"):
        setattr(ipca, name, getattr(ipca, name)[:n_components])
    ipca.explained_variance_ratio_ = ipca.explained_variance_ratio_[:n_components]


def _block_rows(rows, groups):
    bounds = np.cumsum((0, *rows))
    return [np.arange(bounds[group[0]], bounds[group[-1] + 1]) for group in groups]


@pytest.mark.parametrize(
    "rows, min_rows, expected",
    [
        ((299, 299, 299, 299, 299, 299, 3), 5, [[0], [1], [2], [3], [4], [5, 6]]),
        ((2, 2, 9, 1, 1, 1), 4, [[0, 1], [2, 3, 4, 5]]),
        (RAGGED_ROWS, TINY_ROWS, RAGGED_BLOCKS),
        ((3, 2), 10, [[0, 1]]),
        ((50, 50, 50), 10, [[0], [1], [2]]),
        ((5, 40), 10, [[0, 1]]),
    ],
)
def test_plan_blocks_merges_small_chunks_in_order(rows, min_rows, expected):
    """Consecutive chunks join until a block is large enough; a small tail joins the last:
    the hand-computed groups, and the docstring's rule computed in the test."""
    assert plan_blocks(rows, min_rows) == expected
    assert plan_blocks(rows, min_rows) == _documented_groups(rows, min_rows)


@pytest.mark.parametrize(
    "estimator, minimum",
    [
        # replicas keep every component, so an untrained one's first batch holds every feature
        (IncrementalPCA(n_components=5), 64),
        (IncrementalPCA(), 64),
        (IncrementalPCA(n_components=5).fit(np.eye(64)), 1),  # fitted: any batch
        (MiniBatchKMeans(n_clusters=30), 30),
        (MLPClassifier(batch_size=64), 64),
        (MLPClassifier(), 1),  # batch_size="auto" takes any batch
        (OneVsRestClassifier(MiniBatchKMeans(n_clusters=12)), 12),  # the wrapped estimator's
        (SGDClassifier(), 1),
    ],
)
def test_merge_rules_state_the_minimum_batch(estimator, minimum):
    """The rule's minimum batch, and the block floor at least TINY_ROWS above it."""
    assert min_batch_rows(estimator, n_features=64) == minimum
    assert min_block_rows(minimum) == max(minimum, TINY_ROWS)


def test_well_sized_chunks_are_trained_as_given_and_blocks_are_deterministic():
    """Large chunks keep their keys; merged blocks get the same keys on every call, and hold
    the rows of their chunks, in order."""
    X_np = np.random.default_rng(0).normal(size=(240, 2))
    X = da.from_array(X_np, chunks=(RAGGED_ROWS, 2))
    chunks = [Chunk(x, None, None, i) for i, x in enumerate(X.to_delayed().ravel())]
    as_given = reblock(chunks, [[i] for i in range(len(chunks))])
    assert [block.X.key for block in as_given] == [chunk.X.key for chunk in chunks]
    first, again = reblock(chunks, RAGGED_BLOCKS), reblock(chunks, RAGGED_BLOCKS)
    assert [b.X.key for b in first] == [b.X.key for b in again]
    assert not {b.X.key for b in first} & {c.X.key for c in chunks}
    blocks = dask.compute(*(b.X for b in first))
    assert [len(x) for x in blocks] == [63, 56, 60, 61]
    for block, rows in zip(blocks, _block_rows(RAGGED_ROWS, RAGGED_BLOCKS)):
        np.testing.assert_array_equal(block, X_np[rows])


def test_well_sized_data_is_one_block_per_chunk(client):
    """Chunks above the floor are trained on as they are, and the stats say so."""
    X = da.from_array(np.random.default_rng(0).normal(size=(600, 3)), chunks=(200, 3))
    result = train(IncrementalPCA(n_components=2), X)
    stats = result.stats
    assert (stats["n_chunks"], stats["blocks"], stats["rows_per_block"]) == (3, 3, (200, 200))
    # exact moments: the mean, and PCA's top two variances, of the rows in memory
    X_np = X.compute()
    np.testing.assert_allclose(result.estimator.mean_, X_np.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(
        result.estimator.explained_variance_,
        PCA(n_components=2).fit(X_np).explained_variance_,
        rtol=1e-10,
    )


@pytest.mark.parametrize("case", _ENGINE_CASES, ids=_ids(_ENGINE_CASES))
def test_ragged_tiny_chunks_train_every_family(client, case):
    """Chunks of 1-60 rows train every merge family on two workers, in four blocks."""
    _, estimator, X, y, classes = case
    result = train(estimator, *_dask(X, y, RAGGED_ROWS), classes=classes, random_state=0)
    assert result.strategy == "sync" and result.stats["replicas"] == 2
    assert (result.stats["blocks"], result.stats["rows_per_block"]) == (4, (56, 63))
    # the documented grouping rule's blocks: any floor from 5 to 56 rows groups these alike
    groups = _documented_groups(RAGGED_ROWS, min_rows=10)
    sizes = [np.sum(np.take(RAGGED_ROWS, group)) for group in groups]
    assert result.stats["blocks"] == len(groups)
    assert result.stats["rows_per_block"] == (min(sizes), max(sizes))


@pytest.mark.parametrize("case", _ENGINE_EXACT, ids=_ids(_ENGINE_EXACT))
def test_exact_families_on_ragged_chunks_equal_one_pass_over_the_blocks(client, case):
    """Exact rules trained on tiny ragged chunks equal one serial pass over the blocks."""
    _, estimator, X, y, classes = case
    result = train(
        estimator, *_dask(X, y, RAGGED_ROWS), classes=classes, shuffle=False, random_state=0
    )
    blocks = _block_rows(RAGGED_ROWS, RAGGED_BLOCKS)
    if get_merge_rule(estimator).reference == "one_call":
        blocks = [np.arange(len(X))]
    # as a training hands it back: test_merge's serial IncrementalPCA keeps every component
    # (as the replicas do); the user's n_components truncates it
    serial = _serial(estimator, X, y, classes, [blocks])
    reference = without_round_start(copy.deepcopy(serial))
    if isinstance(reference, IncrementalPCA):
        _truncate(reference, estimator.n_components)
    _assert_fitted_close(result.estimator, reference, rtol=1e-10, atol=1e-12)
    # and what the models compute on the rows, against scikit-learn's serial pass itself
    got = _outputs(result.estimator, X, n_columns=None)
    np.testing.assert_allclose(
        got, _outputs(serial, X, n_columns=got.shape[1]), rtol=1e-8, atol=1e-10
    )


def test_ragged_chunks_train_reproducibly_for_a_seed(client):
    """SGD on tiny ragged chunks, shuffled, gives the same model twice for one seed: the sync
    loop of reference_loops.py over the four blocks."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync

    _, estimator, X, y, classes = next(c for c in _ENGINE_CASES if c[0] == "SGDClassifier")
    options = dict(classes=classes, epochs=2, sync_every=1, random_state=3)
    models = [train(estimator, *_dask(X, y, RAGGED_ROWS), **options).estimator for _ in range(2)]
    np.testing.assert_array_equal(models[0].coef_, models[1].coef_)
    blocks = chunks_of(X, y, [len(rows) for rows in _block_rows(RAGGED_ROWS, RAGGED_BLOCKS)])
    expected = reference_sync(
        SGDClassifier(random_state=0), blocks, classes, merge_linear_sgd, n_replicas=2,
        sync_every=1, epochs=2, shuffle=True, random_state=3,
    )  # fmt: skip
    np.testing.assert_array_equal(models[0].coef_, expected.coef_)


def test_minibatch_kmeans_first_block_holds_n_clusters(client):
    """A 12-row first chunk is merged until the block holds n_clusters=30 rows."""
    X = np.random.default_rng(0).normal(size=(300, 2))
    result = train(
        MiniBatchKMeans(n_clusters=30, n_init=1, random_state=0),
        da.from_array(X, chunks=((12, 100, 100, 88), 2)),
    )
    assert result.stats["rows_per_block"] == (88, 112)
    assert result.estimator.cluster_centers_.shape == (30, 2)
    # the merged centres cluster the rows about as well as k-means fitted in memory
    inertia = -result.estimator.score(X)
    assert inertia <= 1.5 * KMeans(n_clusters=30, n_init=1, random_state=0).fit(X).inertia_


def _digits_chunks():
    X = load_digits().data
    return X, da.from_array(X, chunks=(299, -1))  # the last chunk has 3 rows


def test_incremental_pca_on_digits_in_299_row_chunks_through_data_parallel(client):
    """The issue's case: n_components=5 no longer fails on the 3-row last chunk. Small data
    is fitted at once with the estimator's own fit (as documented): scikit-learn's
    IncrementalPCA fitted in memory; trained in blocks ("sync"), the replicas keep every
    component, so the moments are PCA's of the rows."""
    X, chunks = _digits_chunks()
    model = DataParallel(IncrementalPCA(n_components=5)).fit(chunks)
    assert model.estimator_.components_.shape == (5, 64)
    assert model.transform(X[:10]).shape == (10, 5)
    np.testing.assert_allclose(
        model.transform(X[:10]), IncrementalPCA(n_components=5).fit(X).transform(X[:10]),
        atol=1e-8,
    )  # fmt: skip
    blocks = DataParallel(IncrementalPCA(n_components=5), strategy="sync").fit(chunks)
    pca = PCA(n_components=5).fit(X)
    np.testing.assert_allclose(blocks.estimator_.mean_, X.mean(axis=0), atol=1e-10)
    np.testing.assert_allclose(
        blocks.estimator_.explained_variance_, pca.explained_variance_, rtol=1e-8
    )
    # the five leading directions are distinct: the projections agree up to their signs
    np.testing.assert_allclose(
        np.abs(blocks.transform(X[:10])), np.abs(pca.transform(X[:10])), atol=1e-6
    )


def test_incremental_pca_on_digits_in_threads():
    """Without a client the replicas are threads on the same blocks: the same fix holds."""
    X, chunks = _digits_chunks()
    result = train(IncrementalPCA(n_components=5), chunks, n_replicas=2, client=False)
    assert result.stats["blocks"] == 6 and result.estimator.components_.shape == (5, 64)
    np.testing.assert_allclose(
        result.estimator.explained_variance_,
        PCA(n_components=5).fit(X).explained_variance_,
        rtol=1e-8,
    )


def test_incremental_pca_on_digits_equals_one_serial_pass(client):
    """All 64 components trained on 299-row chunks equal one serial pass over the blocks."""
    X, chunks = _digits_chunks()
    result = train(IncrementalPCA(n_components=64), chunks, shuffle=False)
    assert result.stats["rows_per_block"] == (299, 302)
    reference = IncrementalPCA(n_components=64)
    for start in range(0, 1495, 299):
        reference.partial_fit(X[start : start + 299])
    reference.partial_fit(X[1495:])
    got = result.estimator
    for name in ("mean_", "var_", "explained_variance_", "singular_values_"):
        np.testing.assert_allclose(getattr(got, name), getattr(reference, name), atol=1e-8)
    # Directions of zero variance (constant pixels) are arbitrary: compare the others.
    kept = reference.explained_variance_ > 1e-8 * reference.explained_variance_[0]
    np.testing.assert_allclose(got.components_[kept], reference.components_[kept], atol=1e-6)
