"""IncrementalPCA trained data-parallel equals batch PCA at any n_components (issue 25).

The oracle is written here: numpy's SVD of the centred rows, with the definitions of
``sklearn.decomposition.PCA`` for the fitted attributes. Replicas keep every component and the
estimator handed back is truncated once, so a merge of several replicas over several rounds
equals it to rounding, where scikit-learn's serial ``partial_fit``, which truncates after
every batch, does not.
"""

import copy

import dask.array as da
import numpy as np
import pytest
from sklearn.decomposition import IncrementalPCA

from taskdml.parallel import MergeRule, merge_replicas, prepare_start, train
from taskdml.parallel.merge._moments import (
    IPCA_START,
    merge_incremental_pca,
    prepare_incremental_pca,
)
from taskdml.parallel.merge._registry import without_round_start
from taskdml.testing import check_merge

_rng = np.random.default_rng(25)
_ROTATION, _ = np.linalg.qr(_rng.normal(size=(8, 8)))
# 600 rows, 8 features of distinct variances in a rotated basis: every component is defined.
X = _rng.normal(size=(600, 8)) * [5.0, 4.0, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5] @ _ROTATION + 3.0
CHUNKS = (90, 110, 100, 70, 130, 100)  # six uneven chunks


def _batch_pca(rows, k):
    """PCA of *rows*: numpy's SVD of the centred rows, PCA's definitions."""
    mean = rows.mean(axis=0)
    _, s, vt = np.linalg.svd(rows - mean, full_matrices=False)
    variances = s**2 / (len(rows) - 1)
    k = min(rows.shape) if k is None else k
    rank = min(rows.shape)
    return {
        "components_": vt[:k],
        "singular_values_": s[:k],
        "explained_variance_": variances[:k],
        "explained_variance_ratio_": variances[:k] / variances.sum(),
        "noise_variance_": variances[k:rank].mean() if k < rank else 0.0,
        "mean_": mean,
        "var_": rows.var(axis=0),
        "n_samples_seen_": len(rows),
    }


def _assert_batch_pca(model, rows, n_components):
    """*model* is a plain IncrementalPCA(n_components) equal to PCA of *rows*, up to sign."""
    expected = _batch_pca(rows, n_components)
    assert type(model) is IncrementalPCA
    assert model.get_params() == IncrementalPCA(n_components=n_components).get_params()
    assert not [name for name in vars(model) if name.startswith("_taskdml")]
    assert model.n_components_ == len(expected["components_"])
    signs = np.sign(np.sum(model.components_ * expected["components_"], axis=1))
    np.testing.assert_allclose(
        model.components_ * signs[:, None], expected["components_"], rtol=0, atol=1e-8
    )
    for name, value in expected.items():
        if name != "components_":
            np.testing.assert_allclose(getattr(model, name), value, rtol=1e-8, atol=1e-10)


def _rounds(estimator, rows, rounds):
    """The engine's rounds by hand: *rounds* lists each round's replicas' row ranges."""
    first = rounds[0][0]
    global_ = prepare_start(estimator, rows[first[0] : first[1]])
    for replicas in rounds:
        trained = [copy.deepcopy(global_).partial_fit(rows[a:b]) for a, b in replicas]
        global_ = merge_replicas(trained, [b - a for a, b in replicas])
    return without_round_start(global_)


@pytest.mark.parametrize("n_components", [1, 3, None])
def test_three_rounds_of_replicas_equal_batch_pca(n_components):
    """Three rounds of 1 to 3 replicas, handed back, equal PCA of all rows; scikit-learn's
    serial pass over the same chunks, which truncates after every batch, does not."""
    rounds = [[(0, 90), (90, 200), (200, 300)], [(300, 370)], [(370, 500), (500, 600)]]
    merged = _rounds(IncrementalPCA(n_components=n_components), X, rounds)
    _assert_batch_pca(merged, X, n_components)
    if n_components == 3:
        serial = IncrementalPCA(n_components=3)
        for replicas in rounds:
            for a, b in replicas:
                serial.partial_fit(X[a:b])
        assert np.abs(serial.explained_variance_ / merged.explained_variance_ - 1).max() > 1e-6


def test_sync_on_the_cluster_equals_batch_pca_over_two_epochs(client):
    """Two replicas on the cluster's workers, two epochs: PCA of the rows seen twice."""
    result = train(IncrementalPCA(n_components=3), da.from_array(X, chunks=(CHUNKS, 8)), epochs=2)
    assert result.strategy == "sync" and result.stats["replicas"] == 2
    _assert_batch_pca(result.estimator, np.concatenate([X, X]), 3)


def test_three_thread_replicas_equal_batch_pca_and_keep_training():
    """Three replicas as threads; the model handed back partial_fits as scikit-learn's does."""
    result = train(
        IncrementalPCA(n_components=2),
        da.from_array(X, chunks=(CHUNKS, 8)),
        n_replicas=3,
        sync_every=1,
        client=False,
    )
    _assert_batch_pca(result.estimator, X, 2)
    more = _rng.normal(size=(20, 8))
    model = copy.deepcopy(result.estimator).partial_fit(more)
    assert model.components_.shape == (2, 8) and model.n_samples_seen_ == 620
    np.testing.assert_allclose(model.mean_, np.concatenate([X, more]).mean(axis=0))


def test_the_async_parameter_server_equals_batch_pca():
    """Pushes merged with the server's state as two replicas of one start: still PCA."""
    result = train(
        IncrementalPCA(n_components=3),
        da.from_array(X, chunks=(CHUNKS, 8)),
        strategy="async",
        n_replicas=3,
        epochs=2,
        client=False,
    )
    _assert_batch_pca(result.estimator, np.concatenate([X, X]), 3)


def test_fewer_rows_than_features_is_one_block_and_exact():
    """7 rows of 12 features: one block, replicas keep one component per row, still PCA."""
    rows = _rng.normal(size=(7, 12))
    result = train(
        IncrementalPCA(n_components=2), da.from_array(rows, chunks=(4, 12)), epochs=2, client=False
    )
    assert result.stats["blocks"] == 1
    _assert_batch_pca(result.estimator, np.concatenate([rows, rows]), 2)


def test_scores_between_epochs_see_the_model_handed_back():
    """A scorer between epochs gets the truncated model, as the user will: after the first
    epoch, PCA's of every row (its explained variance ratio, the score the history records)."""
    widths = []

    def width(estimator, X_val, y_val):
        widths.append(estimator.transform(X_val).shape[1])
        return float(estimator.explained_variance_ratio_.sum())

    result = train(
        IncrementalPCA(n_components=3),
        da.from_array(X, chunks=(CHUNKS, 8)),
        epochs=2,
        n_replicas=2,
        validation=(X[:10], None),
        scoring=width,
        client=False,
    )
    assert widths == [3, 3]
    expected = _batch_pca(X, 3)["explained_variance_ratio_"].sum()
    assert result.history[0]["validation_score"] == pytest.approx(expected, rel=1e-10)


def test_a_fitted_start_continues_from_the_components_it_kept():
    """A warm start keeps its 3 components (what it dropped is gone): the result is the exact
    PCA of their scatter plus the new rows', pooled about the common mean."""
    old, new = X[:300], X[300:]
    fitted = IncrementalPCA(n_components=3).fit(old)
    result = train(fitted, da.from_array(new, chunks=(100, 8)), n_replicas=3, client=False)
    n0, n1 = fitted.n_samples_seen_, len(new)
    shift = fitted.mean_ - new.mean(axis=0)
    scatter = (
        fitted.components_.T @ np.diag(fitted.singular_values_**2) @ fitted.components_
        + (new - new.mean(axis=0)).T @ (new - new.mean(axis=0))
        + n0 * n1 / (n0 + n1) * np.outer(shift, shift)
    )
    eigenvalues, eigenvectors = np.linalg.eigh(scatter)
    top = eigenvectors[:, ::-1][:, :3].T
    model = result.estimator
    signs = np.sign(np.sum(model.components_ * top, axis=1))
    np.testing.assert_allclose(model.components_ * signs[:, None], top, atol=1e-8)
    np.testing.assert_allclose(
        model.explained_variance_, eigenvalues[::-1][:3] / (n0 + n1 - 1), rtol=1e-8
    )
    assert model.n_samples_seen_ == 600 and model.n_components == 3


@pytest.mark.parametrize("n_components", [2, None])
def test_check_merge_holds_below_n_features(n_components):
    """check_merge's laws, (d) against the serial pass of the prepared start included, and the
    model handed back is IncrementalPCA(n_components) equal to PCA of the rows."""
    handed = check_merge(IncrementalPCA(n_components=n_components), X[:240], n_replicas=3)
    _assert_batch_pca(handed, X[:240], n_components)


def test_check_merge_rejects_a_prepare_without_its_finish():
    """Law (k): replicas that keep every component, handed back untruncated, are refused."""
    rule = MergeRule(
        fn=merge_incremental_pca,
        exact=True,
        prepare=prepare_incremental_pca,
        start_state=IPCA_START,
        family="no-finish",
    )
    with pytest.raises(AssertionError, match=r"other parameters .*\['n_components'\]"):
        check_merge(IncrementalPCA(n_components=2), X[:240], rule=rule)
