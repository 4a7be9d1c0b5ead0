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


def fit_all(estimator, X_chunks, y_chunks, weight_chunks, transformers):
    """Return a copy of *estimator* fitted on all chunks concatenated (no ``partial_fit``)."""
    estimator = copy.deepcopy(estimator)
    X = transform_chunk(np.concatenate(X_chunks), transformers)
    kwargs = {} if weight_chunks is None else {"sample_weight": np.concatenate(weight_chunks)}
    if y_chunks is None:
        return estimator.fit(X, **kwargs)
    return estimator.fit(X, np.concatenate(y_chunks), **kwargs)


def chunk_labels(y):
    """The distinct labels of one chunk (a small array)."""
    return np.unique(y)


def transformed(X, transformers):
    """*X* (a dask array) with fitted *transformers* applied lazily, chunk by chunk."""
    if not transformers:
        return X
    import dask

    from taskdml import _keys

    n_features = transform_chunk(X[:1].compute(), transformers).shape[1]
    fitted = dask.delayed(list(transformers), pure=True)
    return X.map_blocks(transform_chunk, fitted, dtype=float, chunks=(X.chunks[0], (n_features,)),
                        name=_keys.key_name("transform", X.name, fitted.key, phase="transform"))
