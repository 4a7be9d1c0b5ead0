"""Task functions of the training engine: pure, module-level, state in and new state out."""

import copy

import numpy as np


def transform_chunk(X, transformers):
    """Apply fitted *transformers* to one chunk, in order."""
    for transformer in transformers:
        X = transformer.transform(X)
    return X


def partial_fit_chunk(estimator, X, y, transformers, fit_kwargs):
    """Return a copy of *estimator* after ``partial_fit`` on one chunk."""
    estimator = copy.deepcopy(estimator)
    X = transform_chunk(X, transformers)
    if y is None:
        estimator.partial_fit(X, **fit_kwargs)
    else:
        estimator.partial_fit(X, y, **fit_kwargs)
    return estimator


def fit_all(estimator, X_chunks, y_chunks, transformers):
    """Return a copy of *estimator* fitted on all chunks concatenated (no ``partial_fit``)."""
    estimator = copy.deepcopy(estimator)
    X = transform_chunk(np.concatenate(X_chunks), transformers)
    if y_chunks is None:
        return estimator.fit(X)
    return estimator.fit(X, np.concatenate(y_chunks))


def chunk_labels(y):
    """The distinct labels of one chunk (a small array)."""
    return np.unique(y)
