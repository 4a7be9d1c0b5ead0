"""The task functions of taskdml: pure, module-level, state in and new state out.

The engine, the grid searches and the adaptive searches build their graphs from these, so
one piece of work is one function wherever it runs: :func:`fit_chunk` (``partial_fit`` on one
chunk, in a replica or as :func:`partial_fit_chunk` or :func:`partial_fit_link`, one link of a
chain of tasks),
:func:`fit_concatenated` (an estimator without ``partial_fit``, fitted once on chunks
concatenated), :func:`concatenate_parts` (small chunks joined into one training block),
:func:`chunk_labels` and :func:`transform_chunk`. :func:`epoch_order` is the one seeded chunk
order of an epoch. Every estimator that arrives as an argument is copied before it is
trained: a threaded scheduler hands the same object to several tasks.
"""

import copy

import numpy as np

from taskdml._apply import transform_chunk
from taskdml._compat import relink_birch_views
from taskdml.parallel.merge._registry import batch_rows


def partial_fit_chunk(estimator, X, y, transformers, fit_kwargs, weight=None, row_seed=None):
    """Return a copy of *estimator* after ``partial_fit`` on one chunk (see :func:`fit_chunk`)."""
    estimator = copy.deepcopy(estimator)
    fit_chunk(estimator, X, y, transformers, fit_kwargs, weight, row_seed)
    return estimator


def partial_fit_link(
    carried, X, y, transformers, fit_kwargs, weight=None, row_seed=None, loss=None
):
    """One link of a sequential epoch: *carried* is ``(estimator, loss, rows)``, the model so
    far and the epoch's progressive loss and the rows it covers; returns the same after
    ``partial_fit`` on this chunk (see :func:`fit_chunk`; the estimator is copied)."""
    estimator, total, counted = carried
    estimator = copy.deepcopy(estimator)
    rows, before = fit_chunk(estimator, X, y, transformers, fit_kwargs, weight, row_seed, loss)
    if before is None:
        return estimator, total, counted
    return estimator, total + before, counted + rows


def fit_chunk(estimator, X, y, transformers, fit_kwargs, weight=None, row_seed=None, loss=None):
    """``partial_fit`` *estimator* in place on one chunk; return the rows it saw and, with
    *loss*, the chunk's loss before the update: ``(rows, loss or None)``.

    The chunk's rows are permuted first when *row_seed* (a seed for
    :func:`numpy.random.default_rng`) is given, then *transformers* apply; *weight* goes to
    ``partial_fit`` as ``sample_weight``. A family whose ``partial_fit`` takes its whole
    argument as one mini-batch gets the chunk in slices of its own ``fit``'s mini-batch
    (the merge rule's ``batch_rows``, :func:`batch_slices`). *loss* is
    ``loss(estimator, X, y)``, the summed loss of the transformed chunk under the model as
    it is before this ``partial_fit`` (the progressive loss of
    :mod:`taskdml.parallel.merge._stopping`); an estimator not fitted yet has none.
    """
    if row_seed is not None:
        rows = np.random.default_rng(row_seed).permutation(X.shape[0])
        X, y = X[rows], None if y is None else y[rows]
        weight = None if weight is None else weight[rows]
    X = transform_chunk(X, transformers)
    relink_birch_views(estimator)  # a copied or unpickled Birch lost its views
    before = None
    if loss is not None and is_fitted(estimator):
        before = loss(estimator, X, y)
    for rows in batch_slices(X.shape[0], batch_rows(estimator)):
        kwargs = dict(fit_kwargs)
        if weight is not None:
            kwargs["sample_weight"] = weight[rows]
        if y is None:
            estimator.partial_fit(X[rows], **kwargs)
        else:
            estimator.partial_fit(X[rows], y[rows], **kwargs)
    return X.shape[0], before


def batch_slices(n_rows, batch):
    """The row slices in which a block of *n_rows* goes to ``partial_fit``: one slice of
    everything when *batch* is None or covers it, else ``ceil(n_rows / batch)`` consecutive
    slices of nearly equal size (none much smaller than *batch*, so a family's minimum
    batch holds whenever the block holds it).

    Examples
    --------
    >>> from taskdml.parallel.engine._tasks import batch_slices
    >>> batch_slices(5, None)
    [slice(None, None, None)]
    >>> [(s.start, s.stop) for s in batch_slices(2500, 1024)]
    [(0, 833), (833, 1666), (1666, 2500)]
    """
    if batch is None or n_rows <= batch:
        return [slice(None)]
    parts = -(-n_rows // batch)
    bounds = [i * n_rows // parts for i in range(parts + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def is_fitted(estimator):
    """Whether scikit-learn's ``check_is_fitted`` accepts *estimator* (False for an estimator
    it cannot read)."""
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(estimator)
    except Exception:  # NotFittedError, or an estimator check_is_fitted cannot read
        return False
    return True


def fit_concatenated(estimator, chunks, transformers=(), threads=None):
    """A copy of *estimator* fitted once on *chunks* concatenated (no ``partial_fit``).

    Parameters
    ----------
    estimator : scikit-learn estimator
        Copied, never modified.
    chunks : list of tuple
        ``(X, y)`` or ``(X, y, sample_weight)`` per chunk, in row order; ``y`` and
        ``sample_weight`` are ``None`` in every chunk or in none.
    transformers : sequence of fitted transformers, default=()
        Applied to the concatenated ``X`` before the fit.
    threads : dict, optional
        ``{host: threads}``: the BLAS and OpenMP threads the fit may use on a worker of that
        host (:func:`taskdml.parallel.engine._train._lone_fit_threads`); distributed starts
        its workers with one, against oversubscription among their tasks. Without it, or on
        another host, the worker's setting stands.

    Returns
    -------
    estimator
        The fitted copy.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LinearRegression
    >>> from taskdml.parallel.engine._tasks import fit_concatenated
    >>> X = np.arange(8.0).reshape(4, 2)
    >>> model = fit_concatenated(LinearRegression(), [(X[:2], X[:2, 0]), (X[2:], X[2:, 0])])
    >>> model.coef_.round(6).tolist()
    [0.5, 0.5]
    """
    estimator = copy.deepcopy(estimator)
    X_parts, y_parts, *weight_parts = zip(*chunks)
    X = transform_chunk(concatenate_parts(*X_parts), transformers)
    with _thread_limits(threads):
        return _fit_joined(estimator, X, y_parts, weight_parts)


def _thread_limits(threads):
    """A context of this worker host's share of *threads* for BLAS and OpenMP (nothing
    changed outside a worker, or for one thread)."""
    import contextlib

    from taskdml._compat import address_host

    try:
        from distributed import get_worker

        limit = (threads or {}).get(address_host(get_worker().address), 1)
    except ValueError:  # not in a worker
        limit = 1
    if limit <= 1:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=limit)


def _fit_joined(estimator, X, y_parts, weight_parts):
    kwargs = {}
    if weight_parts and weight_parts[0][0] is not None:
        # a Pipeline routes fit parameters by step name: the weights are its last step's
        steps = getattr(estimator, "steps", None)
        name = f"{steps[-1][0]}__sample_weight" if steps else "sample_weight"
        kwargs[name] = np.concatenate(weight_parts[0])
    if y_parts[0] is None:
        return estimator.fit(X, **kwargs)
    return estimator.fit(X, np.concatenate([np.asarray(part) for part in y_parts]), **kwargs)


def concatenate_parts(*parts):
    """The rows of *parts* (arrays, sparse matrices, pandas objects or ``None``s) stacked in
    order (a task)."""
    if parts[0] is None:
        return None
    if hasattr(parts[0], "iloc"):  # pandas DataFrames or Series: their columns kept
        import pandas as pd

        return pd.concat(parts)
    from scipy import sparse

    if any(sparse.issparse(part) for part in parts):
        return sparse.vstack(parts, format=parts[0].format if sparse.issparse(parts[0]) else "csr")
    return np.concatenate(parts)


def chunk_labels(y):
    """The distinct labels of one chunk of y (a small array)."""
    return np.unique(y)


def epoch_order(items, seed_parts, shuffle=True):
    """The order in which *items* (chunks or their indices) are visited in one epoch.

    Parameters
    ----------
    items : sequence
        What to order: a replica's chunks, a fold's chunk indices.
    seed_parts : tuple of int
        The seed of this order, e.g. ``(seed, epoch, rank)`` for a replica of the engine or
        ``(seed, trial + 1, fold + 1, epoch)`` for an adaptive search's trial: a permutation
        of ``numpy.random.default_rng(list(seed_parts))``.
    shuffle : bool, default=True
        ``False`` keeps the order of *items*.

    Returns
    -------
    list
        The items, in the order of this epoch.

    Examples
    --------
    >>> from taskdml.parallel.engine._tasks import epoch_order
    >>> epoch_order(["a", "b", "c"], (0, 1, 2), shuffle=False)
    ['a', 'b', 'c']
    >>> sorted(epoch_order(["a", "b", "c"], (0, 1, 2)))
    ['a', 'b', 'c']
    """
    if not shuffle:
        return list(items)
    return [items[i] for i in np.random.default_rng(list(seed_parts)).permutation(len(items))]
