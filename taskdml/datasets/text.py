"""Text data: a generated labelled corpus, and hashed features for ``map:`` steps.

The classic out-of-core text classifier (scikit-learn's "out-of-core classification of text
documents") hashes mini-batches of documents with :class:`~sklearn.feature_extraction.text.
HashingVectorizer`, which needs no vocabulary and so no pass over the data, and trains a linear
model with ``partial_fit``. In a pipeline the same runs chunk-wise::

    steps:
      corpus:
        call: taskdml.datasets:make_documents        # a table: 'text' and 'y' along 'sample'
        with: {n_documents: 20_000, chunk_size: 2_000}
      hashed:
        map: taskdml.datasets:hash_text              # every chunk, where it lives: sparse X
        with: {n_features: 65536}
        inputs: {data: corpus}
      model:
        fit: sklearn.linear_model:SGDClassifier  # data-parallel on the sparse chunks
        inputs: {data: hashed}

The hashed chunks are ``scipy.sparse`` CSR matrices from the map step to the merges: nothing
densifies them.
"""

import numpy as np

from taskdml._apply import stacked
from taskdml._keys import key_name

__all__ = ["TOPICS", "hash_text", "make_documents"]

TOPICS = {
    "sport": "match goal team coach league season player score win cup striker referee",
    "finance": "market stock bank price trade growth investor bond rate profit fund loan",
    "politics": "vote party senate law minister court election policy campaign bill reform",
    "science": "cell energy study physics climate gene research lab data theory orbit atom",
}
"""The words that mark each topic of :func:`make_documents` (the labels are the topics'
positions in this order)."""

_COMMON = (
    "the a of to and in for on with as at by from it this that was were is be has have new "
    "year week day time people city report said says after before more most some other one "
    "two three first last many also about over into than when who which while where"
).split()


def make_documents(
    n_documents=10_000, *, chunk_size=1_000, words=30, noise=0.1, n_topics=None, random_state=0
):
    """A labelled corpus of short synthetic news items, generated chunk by chunk on the workers.

    Each document mixes ``words`` words: common words and, about one in four, words of its
    topic (:data:`TOPICS`), with a share ``noise`` of the documents labelled at random. Chunk
    ``i`` is drawn from ``SeedSequence(random_state, spawn_key=(i,))``, so the corpus depends
    on the seed and the chunk size. With ``n_topics`` beyond the four named ones, topic ``k``
    has twelve made-up words of its own (``t<k>w0`` ... ``t<k>w11``): a many-class problem.

    Parameters
    ----------
    n_documents : int, default=10_000
    chunk_size : int, default=1_000
        Documents per chunk.
    words : int, default=30
        Words per document.
    noise : float, default=0.1
        Share of documents whose label is drawn at random.
    n_topics : int, optional
        Classes; default the four of :data:`TOPICS`.
    random_state : int, default=0

    Returns
    -------
    xarray.Dataset
        A table: ``text`` (str) and ``y`` (int, the topic) along ``sample``, chunked.

    Examples
    --------
    >>> from taskdml.datasets.text import make_documents
    >>> corpus = make_documents(100, chunk_size=50)
    >>> corpus["text"].shape, corpus["y"].chunks
    ((100,), ((50, 50),))
    """
    import dask
    import xarray as xr

    bounds = list(range(0, n_documents, chunk_size)) + [n_documents]
    n_topics = len(TOPICS) if n_topics is None else n_topics
    name = key_name("make_documents", n_documents, chunk_size, words, noise, n_topics, random_state)
    parts = [
        dask.delayed(_documents, pure=True, nout=2)(
            stop - start, words, noise, random_state, index, n_topics, dask_key_name=(name, index)
        )
        for index, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]))
    ]
    rows = [stop - start for start, stop in zip(bounds[:-1], bounds[1:])]
    text = stacked([part[0] for part in parts], rows, dtype=object)
    y = stacked([part[1] for part in parts], rows, dtype=int)
    return xr.Dataset({"text": ("sample", text), "y": ("sample", y)})


def _documents(n, words, noise, seed, index, n_topics=4):
    """One chunk of :func:`make_documents`: ``(texts, labels)`` (a task)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))
    vocabularies = [topic.split() for topic in TOPICS.values()][:n_topics]
    vocabularies += [[f"t{k}w{j}" for j in range(12)] for k in range(len(TOPICS), n_topics)]
    labels = rng.integers(0, len(vocabularies), n)
    texts = np.empty(n, dtype=object)
    for row, label in enumerate(labels):
        topical = rng.random(words) < 0.25
        drawn = np.where(
            topical,
            rng.choice(vocabularies[label], words),
            rng.choice(_COMMON, words),
        )
        texts[row] = " ".join(drawn)
    flipped = rng.random(n) < noise
    labels = np.where(flipped, rng.integers(0, len(vocabularies), n), labels)
    return texts, labels


def hash_text(chunk, *, column="text", n_features=2**18, **options):
    """A ``map:`` function: hashed features of one chunk's documents, as ``(X, y)``.

    Parameters
    ----------
    chunk : xarray.Dataset
        One chunk of a table with a string variable *column* (and ``y``, kept as it is).
    column : str, default="text"
    n_features : int, default=2**18
    **options
        Other :class:`~sklearn.feature_extraction.text.HashingVectorizer` parameters
        (``ngram_range``, ``alternate_sign``, ``norm``, ...).

    Returns
    -------
    tuple
        ``(X, y)``: ``X`` a CSR matrix of shape (rows, *n_features*), ``y`` the labels or
        ``None``.

    Examples
    --------
    >>> from taskdml.datasets.text import hash_text, make_documents
    >>> X, y = hash_text(make_documents(20, chunk_size=20).compute(), n_features=1024)
    >>> X.shape, X.format, y.shape
    ((20, 1024), 'csr', (20,))
    """
    from sklearn.feature_extraction.text import HashingVectorizer

    from taskdml.exceptions import DataError, did_you_mean

    if column not in chunk.data_vars:
        raise DataError(
            f"hash_text: the data has no variable {column!r}; name the text variable with "
            f"'column'.{did_you_mean(column, list(map(str, chunk.data_vars)))}"
        )
    vectorizer = HashingVectorizer(n_features=n_features, **options)
    X = vectorizer.transform(chunk[column].values.astype(str).tolist())
    return X.tocsr(), chunk["y"].values if "y" in chunk.data_vars else None
