"""An estimator's method applied chunk by chunk, where the chunks live.

The one place a fitted ``estimator.<method>(X)`` on a dask array becomes a lazy array of one
task per row chunk: the estimator is one key of the graph (sent once to each worker that needs
it, not once per chunk), the output's dtype and trailing shape come from a probe on one row
(zeros, or one real row where zeros are invalid), and the keys are named by
:func:`taskdml._keys.key_name` under the caller's prefix, so the dashboard shows whose work it
is. Preprocessing applied before a model (:func:`transformed`) is the same thing with
``transform`` over a list of fitted transformers.

Models whose parts live on workers are not applied here: they answer through
:mod:`taskdml._parts`, computing where their parts are.
"""

import numpy as np

from taskdml import _keys


def call_method(block, estimator, method):
    """Task: ``estimator.<method>(block)`` for one row chunk."""
    return getattr(estimator, method)(block)


def transform_chunk(X, transformers):
    """Apply fitted *transformers* to one chunk, in order."""
    for transformer in transformers:
        X = transformer.transform(X)
    return X


def probe(estimator, method, X):
    """*method*'s output on one row of *X*: its dtype and trailing shape, computing at most
    one row of *X*."""
    try:
        return np.asarray(getattr(estimator, method)(np.zeros((1, X.shape[1]), X.dtype)))
    except Exception:  # zeros may be invalid for this estimator; one real row is not
        return np.asarray(getattr(estimator, method)(X[:1].compute()))


def apply_chunkwise(estimator, method, X, *, prefix):
    """``estimator.<method>(X)`` as a dask array with one task per row chunk of *X*.

    Parameters
    ----------
    estimator : fitted estimator
    method : str
        ``predict``, ``predict_proba``, ``decision_function``, ``transform``, ...
    X : dask.array.Array of shape (n_samples, n_features)
        Chunked along rows; its feature chunks are joined first.
    prefix : str
        The keys' prefix (a step's name, or the estimator's).

    Returns
    -------
    dask.array.Array
        1-D or 2-D, chunked as *X*'s rows.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> model = LinearRegression().fit(np.eye(3), [0.0, 1.0, 2.0])
    >>> apply_chunkwise(model, "predict", da.eye(3, chunks=2), prefix="demo").chunks
    ((2, 1),)
    """
    import dask

    X = X.rechunk({1: -1})
    sample = probe(estimator, method, X)
    model = dask.delayed(
        estimator, traverse=False, name=_keys.key_name(prefix, estimator, phase="model")
    )
    name = _keys.key_name(prefix, model.key, X.name, method, phase=method.replace("_", "-"))
    if sample.ndim == 1:
        chunks, drop_axis = (X.chunks[0],), 1
    else:
        chunks, drop_axis = (X.chunks[0],) + tuple((n,) for n in sample.shape[1:]), []
    return X.map_blocks(
        call_method,
        model,
        method,
        name=name,
        dtype=sample.dtype,
        meta=sample[:0],
        drop_axis=drop_axis,
        chunks=chunks,
    )


def transformed(X, transformers):
    """*X* (a dask array) with fitted *transformers* applied lazily, chunk by chunk."""
    if not transformers:
        return X
    import dask

    n_features = transform_chunk(X[:1].compute(), transformers).shape[1]
    fitted = dask.delayed(list(transformers), pure=True)
    return X.map_blocks(
        transform_chunk,
        fitted,
        dtype=float,
        chunks=(X.chunks[0], (n_features,)),
        name=_keys.key_name("transform", X.name, fitted.key, phase="transform"),
    )
