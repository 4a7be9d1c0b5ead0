"""Sparse chunks (hashed text features) through the engine, the merges and the searches."""

import dask.array as da
import numpy as np
import pytest
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.naive_bayes import MultinomialNB

from taskdml.model_selection import ASHASearchCV, GridSearchCV
from taskdml.parallel import DataParallel

N_FEATURES = 2**12
WORDS = {
    0: ["goal", "match", "team", "coach", "league", "score"],
    1: ["market", "stock", "bank", "price", "trade", "growth"],
    2: ["vote", "party", "senate", "law", "minister", "court"],
}


def _corpus(n_documents, seed):
    """Short documents: a few topic words in filler, a tenth of them labelled at random."""
    rng = np.random.default_rng(seed)
    filler = [f"w{i}" for i in range(300)]
    labels = rng.integers(0, 3, n_documents)
    documents = [
        " ".join(rng.choice(WORDS[label], 3).tolist() + rng.choice(filler, 12).tolist())
        for label in labels
    ]
    noisy = rng.random(n_documents) < 0.1
    return documents, np.where(noisy, rng.integers(0, 3, n_documents), labels)


def _hashed(documents):
    return HashingVectorizer(n_features=N_FEATURES, alternate_sign=False).transform(documents)


class SparseOnlySGD(SGDClassifier):
    """An SGDClassifier that refuses dense chunks: proof that nothing densifies them."""

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        if not sparse.issparse(X):
            raise TypeError(f"a chunk arrived as {type(X).__name__}, not sparse")
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


@pytest.fixture(scope="module")
def text():
    """Hashed training chunks as a dask array of CSR blocks, and a hashed holdout."""
    documents, labels = _corpus(6_000, seed=0)
    test_documents, test_labels = _corpus(2_000, seed=1)
    X = _hashed(documents)
    chunks = [_hashed(documents[i : i + 500]) for i in range(0, len(documents), 500)]
    X_dask = da.concatenate(
        [da.from_array(chunk, chunks=chunk.shape, asarray=False) for chunk in chunks]
    )
    return {
        "X": X,
        "y": labels,
        "X_dask": X_dask,
        "y_dask": da.from_array(labels, chunks=500),
        "chunks": chunks,
        "X_test": _hashed(test_documents),
        "y_test": test_labels,
    }


def test_sgd_on_hashed_text_matches_the_out_of_core_loop(client, text):
    """SGDClassifier trained data-parallel on sparse chunks (never densified) scores within
    1 pp of scikit-learn's out-of-core example approach: partial_fit over the hashed
    mini-batches in one process, for the same epochs."""
    model = DataParallel(SparseOnlySGD(random_state=0), epochs=3).fit(
        text["X_dask"], text["y_dask"]
    )
    reference = SGDClassifier(random_state=0)
    for _ in range(3):
        for start, chunk in zip(range(0, len(text["y"]), 500), text["chunks"]):
            reference.partial_fit(chunk, text["y"][start : start + 500], classes=[0, 1, 2])
    ours = model.score(text["X_test"], text["y_test"])
    theirs = reference.score(text["X_test"], text["y_test"])
    assert abs(ours - theirs) <= 0.01, (ours, theirs)
    assert ours > 0.8


def test_multinomial_nb_on_sparse_chunks_is_exact(client, text):
    """MultinomialNB's counts merge exactly: the data-parallel model equals one fit on all the
    rows, and it predicts on in-memory sparse input too."""
    model = DataParallel(MultinomialNB()).fit(text["X_dask"], text["y_dask"])
    expected = MultinomialNB().fit(text["X"], text["y"])
    np.testing.assert_allclose(model.estimator_.feature_count_, expected.feature_count_)
    np.testing.assert_array_equal(model.estimator_.class_count_, expected.class_count_)
    np.testing.assert_array_equal(model.predict(text["X_test"]), expected.predict(text["X_test"]))


def test_in_memory_sparse_input_is_chunked_sparse(client, text):
    """A scipy.sparse matrix given to fit is cut into sparse chunks, not densified, and
    trained as the sync loop of reference_loops.py trains the same sparse chunks (with the
    engine's seed that DataParallel draws from its random_state)."""
    from reference_loops import chunks_of, engine_seed, merge_linear_sgd, reference_sync

    model = DataParallel(
        SparseOnlySGD(random_state=0), epochs=2, sync_every=1, chunk_size=1_000, random_state=0
    )
    model.fit(text["X"], text["y"])
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(text["X"], text["y"], (1_000,) * 6),
        [0, 1, 2], merge_linear_sgd, n_replicas=2, sync_every=1, epochs=2, shuffle=True,
        random_state=engine_seed(0),
    )  # fmt: skip
    np.testing.assert_array_equal(model.estimator_.coef_, expected.coef_)
    assert model.score(text["X_test"], text["y_test"]) > 0.8


def test_searches_on_sparse_chunks(client, text):
    """The adaptive search trains and scores on sparse chunks; the grid search on sparse
    in-memory data scores every candidate as scikit-learn's GridSearchCV does."""
    from sklearn.model_selection import GridSearchCV as SklearnGridSearchCV

    asha = ASHASearchCV(
        SparseOnlySGD(random_state=0),
        {"alpha": [1e-5, 1e-4, 1e-3]},
        n_trials=3,
        max_epochs=3,
        random_state=0,
    ).fit(text["X_dask"], text["y_dask"])
    assert asha.best_estimator_.score(text["X_test"], text["y_test"]) > 0.8
    grid = GridSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 1e-3]}, cv=3)
    grid.fit(text["X"], text["y"])
    theirs = SklearnGridSearchCV(SGDClassifier(random_state=0), {"alpha": [1e-4, 1e-3]}, cv=3)
    theirs.fit(text["X"], text["y"])
    np.testing.assert_allclose(
        grid.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"]
    )
    assert grid.best_params_ == theirs.best_params_ and grid.best_score_ > 0.8


def test_nan_in_a_sparse_chunk_is_reported(client, text):
    """A NaN stored in a sparse chunk is found by the inspection, with the chunk's rows."""
    bad = text["chunks"][1].copy()
    bad.data[0] = np.nan
    X = da.concatenate(
        [da.from_array(c, chunks=c.shape, asarray=False) for c in [text["chunks"][0], bad]]
    )
    with pytest.raises(ValueError, match=r"chunk 1 \(rows 500–999\) of X holds 1 NaN"):
        DataParallel(SGDClassifier()).fit(X, da.from_array(text["y"][:1000], chunks=500))
