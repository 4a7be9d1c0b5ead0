"""The training engine: one estimator trained over the chunks of a dask array.

Every entry point — a pipeline's ``fit`` step, ``taskdml.DataParallel``, a search trial —
calls :func:`train`. The data is a dask array chunked along samples; chunk tasks read the
chunks where they live. The ``sequential`` strategy chains ``partial_fit`` through the
chunks, one replica walking all of them (dask-ml's ``Incremental``); an estimator without
``partial_fit`` is fitted in one task on the concatenated chunks.
"""

import numpy as np

from taskdml import _keys
from taskdml.parallel import _tasks


def train(estimator, X, y=None, *, preprocess=(), classes=None, epochs=1, client=None):
    """Fit a clone of *estimator* on dask arrays *X* (and *y*); return the fitted estimator.

    Parameters
    ----------
    estimator : scikit-learn estimator
    X : dask.array.Array, shape (n_samples, n_features), chunked along samples
    y : dask.array.Array, shape (n_samples,), optional
    preprocess : sequence of fitted transformers, applied to every chunk first
    classes : array-like, optional
        All labels, for classifiers trained with ``partial_fit``; found from *y* if omitted.
    epochs : int
        Passes over the data (``partial_fit`` estimators only).
    client : distributed.Client, optional
        Defaults to the current client, or dask's local scheduler without one.
    """
    import dask
    from sklearn.base import clone, is_classifier

    estimator = clone(estimator)
    X_chunks = X.to_delayed().ravel()
    y_chunks = None if y is None else y.to_delayed().ravel()
    transformers = dask.delayed(list(preprocess), pure=True)
    if not hasattr(estimator, "partial_fit"):
        key = _keys.key_name("train", estimator, X.name, None if y is None else y.name, phase="fit")
        result = dask.delayed(_tasks.fit_all, pure=True)(
            estimator, list(X_chunks), None if y is None else list(y_chunks), transformers,
            dask_key_name=key)
        return _compute(result, client)
    fit_kwargs = {}
    if is_classifier(estimator) and y is not None:
        fit_kwargs["classes"] = np.asarray(classes) if classes is not None else _classes(y_chunks, client)
    key = _keys.key_name("train", estimator, X.name, None if y is None else y.name, epochs, phase="fit")
    state = estimator
    for step, index in enumerate(i for _ in range(epochs) for i in range(len(X_chunks))):
        state = dask.delayed(_tasks.partial_fit_chunk, pure=True)(
            state, X_chunks[index], None if y is None else y_chunks[index], transformers,
            fit_kwargs, dask_key_name=(key, step))
    return _compute(state, client)


def _classes(y_chunks, client):
    import dask

    key = _keys.key_name("train", [c.key for c in y_chunks], phase="classes")
    labels = [dask.delayed(_tasks.chunk_labels, pure=True)(chunk, dask_key_name=(key, i))
              for i, chunk in enumerate(y_chunks)]
    return np.unique(np.concatenate(_compute(labels, client)))


def _compute(value, client):
    import dask

    if client is not None:
        return client.compute(value, sync=True)
    return dask.compute(value)[0]
