"""An estimator's method applied chunk by chunk, where the chunks live.

The one place a fitted ``estimator.<method>(X)`` on a dask array becomes a lazy array of one
task per row chunk: the estimator is one key of the graph (sent once to each worker that needs
it, not once per chunk), the output's dtype and trailing shape come from a probe on one row
(zeros, or one real row where zeros are invalid), and the keys are named by
:func:`taskdml._keys.key_name` under the caller's prefix, so the dashboard shows whose work it
is. Preprocessing applied before a model (:func:`transformed`) is the same thing with
``transform`` over a list of fitted transformers.

Chunks that are not one dask array are applied with the same pieces: :func:`map_parts` (a
task per part, for the partitions of a table or the chunks a model's shards predict on: delayed
objects, or futures pinned where a part lives; :func:`make_task` for one) and :func:`stacked`
(the per-part results as one dask array of rows).

Models whose parts live on workers are not applied here: they answer through
:mod:`taskdml._parts`, computing where their parts are (with :func:`make_task` and
:func:`stacked`).
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


def map_parts(function, parts, *args, keys, client=None, **where):
    """``function(*args, part)`` for every part, one task each.

    Parameters
    ----------
    function : callable
        Module-level, so that it pickles.
    parts : list
        Delayed objects or futures (the row chunks of a table, the blocks of an array), or
        in-memory values.
    *args
        Leading arguments, the same for every part (a model, a transformer).
    keys : list
        The key of each part's task (see :func:`taskdml._keys.key_name`).
    client : distributed.Client, optional
        Submit the tasks now, as futures (with *where*'s ``workers=`` and
        ``allow_other_workers=``, to run where a model's part lives); delayed objects without.

    Returns
    -------
    list
        One delayed object or future per part.

    Examples
    --------
    >>> import dask
    >>> parts = [dask.delayed(list)(range(n)) for n in (2, 3)]
    >>> dask.compute(*map_parts(len, parts, keys=[("demo-len", 0), ("demo-len", 1)]))
    (2, 3)
    """
    return [
        make_task(function, *args, part, key=key, client=client, **where)
        for part, key in zip(parts, keys)
    ]


def make_task(function, *args, key, client=None, **where):
    """``function(*args)`` as one task named *key*: a future submitted by *client* (with
    *where*'s ``workers=`` and ``allow_other_workers=``), or a delayed object without one."""
    if client is not None:
        return client.submit(function, *args, key=key, **where)
    import dask

    return dask.delayed(function, pure=True)(*args, dask_key_name=key)


def stacked(values, rows, *, dtype, width=None):
    """One dask array of rows from per-part results, without computing them.

    Parameters
    ----------
    values : list
        Delayed objects or futures, one per part, each computing a NumPy array of that
        part's rows.
    rows : sequence of int
        The rows of each part.
    dtype : dtype
    width : int, optional
        Columns of each result; 1-D results without.

    Returns
    -------
    dask.array.Array
        Chunked as the parts.

    Examples
    --------
    >>> import dask
    >>> import numpy as np
    >>> values = [dask.delayed(np.ones)((n, 2)) for n in (2, 3)]
    >>> stacked(values, [2, 3], dtype=float, width=2).chunks
    ((2, 3), (2,))
    """
    import dask.array as da

    pieces = [
        da.from_delayed(value, shape=(n,) if width is None else (n, width), dtype=dtype)
        for value, n in zip(values, rows)
    ]
    return da.concatenate(pieces) if len(pieces) > 1 else pieces[0]
