"""Text, the classic out-of-core example: a generated corpus, hashed per chunk by a map step,
classified data-parallel on sparse chunks."""

import numpy as np
import pytest
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import SGDClassifier

from taskdml import DataError, load_pipeline, run_pipeline
from taskdml.datasets import train_test_split
from taskdml.datasets.text import TOPICS, hash_text, make_documents

PIPELINE = "pipelines/text.yaml"


def test_the_corpus_is_a_chunked_table_that_depends_on_the_seed():
    """Text and labels along 'sample', chunk by chunk; the same seed, the same corpus."""
    corpus = make_documents(300, chunk_size=100, random_state=3)
    assert corpus["text"].chunks == ((100, 100, 100),)
    first = corpus.compute()
    assert first.equals(make_documents(300, chunk_size=100, random_state=3).compute())
    assert not first.equals(make_documents(300, chunk_size=100, random_state=4).compute())
    assert set(np.unique(first["y"].values)) == set(range(len(TOPICS)))


def test_hash_text_is_scikit_learns_hashing_and_names_a_missing_column():
    """A chunk's features are HashingVectorizer's of its documents, its labels kept; a
    missing column is named, with the closest."""
    chunk = make_documents(10, chunk_size=10).compute()
    X, y = hash_text(chunk, n_features=1024, alternate_sign=False)
    vectorizer = HashingVectorizer(n_features=1024, alternate_sign=False)
    expected = vectorizer.transform(chunk["text"].values.tolist())
    assert X.format == "csr" and (X != expected).nnz == 0
    np.testing.assert_array_equal(y, chunk["y"].values)
    with pytest.raises(DataError, match="no variable 'txt'.*Did you mean 'text'"):
        hash_text(chunk, column="txt")


def test_text_pipeline_matches_the_out_of_core_loop(client):
    """The example pipeline's linear model scores within 1 pp of scikit-learn's out-of-core
    approach on the same documents: HashingVectorizer on each mini-batch (the same chunks of
    the same split) and partial_fit over them, for the same epochs, in one process (nothing
    of taskdml.datasets.text but the documents)."""
    pipeline = load_pipeline(PIPELINE, overrides=["n_documents=8000"])
    run = run_pipeline(pipeline, client=client, record=False)
    ours = run.metrics["report_linear"]["accuracy"]
    corpus = make_documents(8000, chunk_size=2500, random_state=0)
    train, test = train_test_split(corpus, test_size=0.2, random_state=0)
    vectorizer = HashingVectorizer(n_features=65536, alternate_sign=False)

    def hashed(table):
        return vectorizer.transform(table["text"].values.tolist()), table["y"].values

    batches = [
        hashed(train.isel(sample=slice(a, a + n)).compute())
        for a, n in zip(np.cumsum((0,) + train.chunks["sample"][:-1]), train.chunks["sample"])
    ]
    reference = SGDClassifier(alpha=1e-5, random_state=0)
    for _ in range(3):
        for X, y in batches:
            reference.partial_fit(X, y, classes=np.arange(len(TOPICS)))
    X_test, y_test = hashed(test.compute())
    theirs = reference.score(X_test, y_test)
    assert abs(ours - theirs) <= 0.01, (ours, theirs)
    assert run.metrics["report_bayes"]["accuracy"] > 0.85
