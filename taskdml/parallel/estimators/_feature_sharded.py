"""Feature-sharded (vertical) linear models: each worker holds a block of the columns.

For data too wide for one worker, or columns held by different parties (the vertical case of
federated learning), :class:`FeatureSharded` splits the features into ``n_blocks`` contiguous
blocks. Block ``k``'s columns of every row chunk, and its weights ``w_k``, live on one worker
and never leave it. A linear model's margin is a sum over the blocks,
``m = X w + b = sum_k X_k w_k + b``, so one mini-batch (one row chunk) of gradient descent is:

1. every block computes its partial margins ``X_k w_k`` on its worker (a vector of the
   chunk's rows: the only thing a block sends);
2. one task sums them, adds the intercept and computes the loss's derivative per row,
   ``g = sigmoid(m) - y`` (``log_loss``) or ``m - y`` (``squared_error``), and the new
   intercept; it holds ``y`` (the label holder of vertical federated learning);
3. every block updates its own weights, ``w_k -= learning_rate * (X_k^T g / n + alpha * w_k)``
   with ``g`` sent back to it.

The result is exactly plain mini-batch gradient descent on all the columns (the margins are
summed in block order; tested against the unsharded step to 1e-10). The exchange is two Dask
task hops per mini-batch; ``benchmarks/model_parallel.py`` measures its cost. Blocks are
chained futures (state in, new state out), one chain per block, pinned to its worker.
"""

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from taskdml import _keys
from taskdml._client import resolve_client

LOSSES = ("log_loss", "squared_error")


def partial_margin(X_block, weights):
    """``X_k w_k``: a block's share of the margins of a chunk's rows."""
    return np.asarray(X_block @ weights).ravel()


def margin_gradient(y, intercept, loss, learning_rate, *partials):
    """Sum the blocks' partial margins; the loss's derivative per row and the new intercept."""
    margin = np.sum(partials, axis=0) + intercept
    if loss == "log_loss":
        gradient = 1.0 / (1.0 + np.exp(-margin)) - y
    else:
        gradient = margin - y
    return gradient, intercept - learning_rate * float(np.mean(gradient))


def block_update(weights, X_block, step, learning_rate, alpha):
    """A block's new weights after one mini-batch (``step``: the gradient and intercept)."""
    gradient = step[0]
    return weights - learning_rate * (
        np.asarray(X_block.T @ gradient).ravel() / len(gradient) + alpha * weights
    )


def _intercept(step):
    return step[1]


def _chunk_futures(array):
    """The futures of a persisted array's row chunks, in order."""
    from distributed import futures_of

    by_key = {future.key: future for future in futures_of(array)}
    return [by_key[key] for key in _row_keys(array)]


def _row_keys(array):
    return [(array.name, i, 0) if array.ndim == 2 else (array.name, i)
            for i in range(len(array.chunks[0]))]  # fmt: skip


class FeatureSharded(BaseEstimator):
    """A binary linear classifier (``log_loss``) or regressor (``squared_error``) whose
    features are split across workers (see the module docstring).

    Parameters
    ----------
    loss : {"log_loss", "squared_error"}, default="log_loss"
    n_blocks : int, optional
        Column blocks, one per worker; default the number of workers.
    learning_rate : float, default=0.1
    alpha : float, default=0.0
        L2 penalty.
    epochs : int, default=1
        Passes over the row chunks (each chunk is one mini-batch), in a shuffled order.
    random_state : int, RandomState or None
        Seeds the order of the chunks.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Gathered from the blocks at the end of ``fit``.
    intercept_ : float
    blocks_ : list of (slice, Future)
        Each block's columns and its weights on its worker.

    Examples
    --------
    >>> import dask.array as da
    >>> from taskdml.parallel import FeatureSharded
    >>> X = da.random.default_rng(0).random((400, 6), chunks=(100, 6))
    >>> y = (X[:, 0] > 0.5).astype(float)
    >>> model = FeatureSharded(n_blocks=2, epochs=2, random_state=0).fit(X, y)  # doctest: +SKIP
    """

    def __init__(
        self,
        loss="log_loss",
        n_blocks=None,
        learning_rate=0.1,
        alpha=0.0,
        epochs=1,
        random_state=None,
    ):
        self.loss = loss
        self.n_blocks = n_blocks
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.epochs = epochs
        self.random_state = random_state

    def fit(self, X, y):
        """Train on *X* (a dask array chunked along rows) and *y*, one chunk per mini-batch.

        Parameters
        ----------
        X : dask.array.Array of shape (n_samples, n_features)
        y : dask.array.Array of shape (n_samples,)

        Returns
        -------
        self
        """
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}.")
        client = resolve_client(required="FeatureSharded.fit")
        workers = sorted(client.nthreads())
        n_blocks = self.n_blocks or len(workers)
        n_features = X.shape[1]
        if not 1 <= n_blocks <= n_features:
            raise ValueError(
                f"n_blocks must be between 1 and the {n_features} features, got {n_blocks}."
            )
        bounds = np.linspace(0, n_features, n_blocks + 1).astype(int)
        columns = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        X = X.rechunk({1: -1})
        homes = [workers[k % len(workers)] for k in range(n_blocks)]
        chunks = [  # chunks[k][i]: block k's columns of row chunk i, held on block k's worker
            _chunk_futures(client.persist(X[:, cols], workers=[home], allow_other_workers=False))
            for cols, home in zip(columns, homes)
        ]
        targets = _chunk_futures(client.persist(y.astype(float)))
        token = _keys.key_name("vertical", self.get_params(), X.name, y.name)
        names = {
            phase: _keys.key_name("vertical", token, phase=phase)
            for phase in ("margin", "step", "update")
        }
        weights = [
            client.scatter(np.zeros(c.stop - c.start), workers=[home])
            for c, home in zip(columns, homes)
        ]
        intercept = 0.0
        rng = check_random_state(self.random_state)
        for epoch in range(self.epochs):
            for i in rng.permutation(len(targets)):
                i = int(i)
                partials = [
                    client.submit(
                        partial_margin,
                        chunks[k][i],
                        weights[k],
                        workers=[homes[k]],
                        key=(names["margin"], epoch, i, k),
                    )  # fmt: skip
                    for k in range(n_blocks)
                ]
                step = client.submit(
                    margin_gradient,
                    targets[i],
                    intercept,
                    self.loss,
                    self.learning_rate,
                    *partials,
                    key=(names["step"], epoch, i),
                )
                weights = [
                    client.submit(
                        block_update,
                        weights[k],
                        chunks[k][i],
                        step,
                        self.learning_rate,
                        self.alpha,
                        workers=[homes[k]],
                        key=(names["update"], epoch, i, k),
                    )  # fmt: skip
                    for k in range(n_blocks)
                ]
                intercept = client.submit(_intercept, step, key=(names["step"], epoch, i, "b"))
        self.blocks_ = list(zip(columns, weights))
        self.coef_ = np.concatenate(client.gather(weights))
        self.intercept_ = float(intercept.result())
        self.n_features_in_ = n_features
        return self

    def decision_function(self, X):
        """The margins ``X coef_ + intercept_``.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
            Computed chunk-wise for a dask array.
        """
        return X @ self.coef_ + self.intercept_

    def predict(self, X):
        """Labels (0 or 1) for ``log_loss``, values for ``squared_error``.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
        """
        margin = self.decision_function(X)
        return (margin > 0).astype(int) if self.loss == "log_loss" else margin
