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

The estimator is a classifier (``log_loss``: binary, any two labels) or a regressor
(``squared_error``) by its loss, as scikit-learn's tags say (``is_classifier``, the
cross-validation splitters and ``check_estimator`` follow them), with ``score``: accuracy or
R². Without a distributed client (in-memory data, or dask data on the local scheduler) the
blocks are trained in this process with the same task functions in the same order, so the
weights are the same to rounding; in-memory data is one chunk, one full-batch step per epoch.
"""

import numbers

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from taskdml import _keys
from taskdml._client import current_client, scatter

LOSSES = ("log_loss", "squared_error")


def partial_margin(X_block, weights):
    """``X_k w_k``: a block's share of the margins of a chunk's rows."""
    return np.asarray(X_block @ weights).ravel()


def margin_gradient(y, intercept, loss, learning_rate, *partials):
    """Sum the blocks' partial margins; the loss's derivative per row and the new intercept."""
    margin = np.sum(partials, axis=0) + intercept
    if loss == "log_loss":
        gradient = expit(margin) - y
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


def _is_classifier(estimator):
    return estimator.loss != "squared_error"


class FeatureSharded(BaseEstimator):
    """A binary linear classifier (``log_loss``) or regressor (``squared_error``) whose
    features are split across workers (see the module docstring).

    It is a classifier or a regressor by its ``loss`` (scikit-learn's tags follow it), with
    ``score``: accuracy or R².

    Parameters
    ----------
    loss : {"log_loss", "squared_error"}, default="log_loss"
        ``"log_loss"``: a binary classifier (logistic regression) of any two labels;
        ``"squared_error"``: a linear regressor.
    n_blocks : int, optional
        Column blocks, one per worker; default the number of workers (1 without a client).
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
    classes_ : ndarray of shape (2,)
        The two labels (``log_loss`` only); ``classes_[1]`` is the positive one.
    blocks_ : list of (slice, Future or ndarray)
        Each block's columns and its weights: on its worker (a future), or in this process
        without a client.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        When ``X`` was a DataFrame with string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from taskdml.parallel import FeatureSharded
    >>> X = np.random.default_rng(0).normal(size=(200, 4))
    >>> y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    >>> model = FeatureSharded(n_blocks=2, learning_rate=0.5, epochs=50).fit(X, y)
    >>> model.classes_.tolist(), model.score(X, y)
    (['no', 'yes'], 0.965)
    >>> model.coef_.round(1)  # the label follows the first two features
    array([2.2, 2. , 0.2, 0. ])
    >>> from sklearn.base import is_regressor
    >>> is_regressor(FeatureSharded(loss="squared_error"))
    True

    On dask arrays with a distributed client, each block's columns and weights stay on one
    worker:

    >>> import dask.array as da
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

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, RegressorTags

        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        if _is_classifier(self):
            tags.estimator_type = "classifier"
            tags.classifier_tags = ClassifierTags(multi_class=False)
        else:
            tags.estimator_type = "regressor"
            tags.regressor_tags = RegressorTags()
        return tags

    def fit(self, X, y):
        """Train on *X* and *y*, one row chunk per mini-batch.

        Parameters
        ----------
        X : dask.array.Array or array-like of shape (n_samples, n_features)
            A dask array is trained chunk by chunk along rows; in-memory data is one chunk.
        y : dask.array.Array or array-like of shape (n_samples,)
            Two labels (``log_loss``) or numbers (``squared_error``).

        Returns
        -------
        self
        """
        import dask.array as da

        self._check_params()
        classifier = _is_classifier(self)
        chunked = isinstance(X, da.Array)
        if chunked:
            if y is None:
                raise ValueError(f"{type(self).__name__} requires y to be passed, but it is None.")
            y = da.asarray(y)
            labels = np.unique(y.compute()) if classifier else None
            n_features = X.shape[1]
            self.__dict__.pop("feature_names_in_", None)
        else:
            X, y = validate_data(
                self, X, y, dtype=[np.float64, np.float32], y_numeric=not classifier, reset=True
            )
            labels = np.unique(y) if classifier else None
            n_features = X.shape[1]
        if classifier:
            labels = _binary_labels(y if not chunked else labels, labels)
            target = (y == labels[1]).astype(float)
        else:
            target = y.astype(float)
        client = current_client() if chunked else None
        workers = sorted(client.nthreads()) if client is not None else []
        n_blocks = self.n_blocks or max(len(workers), 1)
        if not 1 <= n_blocks <= n_features:
            raise ValueError(
                f"n_blocks must be between 1 and the {n_features} features, got {n_blocks}."
            )
        bounds = np.linspace(0, n_features, n_blocks + 1).astype(int)
        columns = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        rng = check_random_state(self.random_state)
        if client is not None:
            weights, intercept = self._fit_on_workers(client, workers, columns, X, target, rng)
            self.coef_ = np.concatenate(client.gather(weights))
        else:
            chunks = _row_chunks(X, target) if chunked else [(X, target)]
            weights, intercept = self._fit_here(columns, chunks, rng)
            self.coef_ = np.concatenate(weights)
        self.blocks_ = list(zip(columns, weights))
        self.intercept_ = float(intercept)
        self.n_features_in_ = n_features
        if classifier:
            self.classes_ = labels
        else:
            self.__dict__.pop("classes_", None)
        return self

    def _check_params(self):
        name = type(self).__name__
        if self.loss not in LOSSES:
            raise ValueError(f"{name}: loss must be one of {LOSSES}, got {self.loss!r}.")
        for parameter, low, optional in (("n_blocks", 1, True), ("epochs", 1, False)):
            value = getattr(self, parameter)
            if value is None and optional:
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
                allowed = f"an integer >= {low}" + (" or None" if optional else "")
                raise ValueError(f"{name}: {parameter} must be {allowed}; got {value!r}.")
        for parameter, positive in (("learning_rate", True), ("alpha", False)):
            value = getattr(self, parameter)
            if (
                not isinstance(value, numbers.Real)
                or isinstance(value, bool)
                or value < 0
                or positive
                and value == 0
            ):
                allowed = "a number > 0" if positive else "a number >= 0"
                raise ValueError(f"{name}: {parameter} must be {allowed}; got {value!r}.")

    def _fit_here(self, columns, chunks, rng):
        """The blocks trained in this process: the same task functions in the same order."""
        weights = [np.zeros(c.stop - c.start) for c in columns]
        intercept = 0.0
        for _ in range(self.epochs):
            for i in rng.permutation(len(chunks)):
                X_chunk, y_chunk = chunks[int(i)]
                partials = [partial_margin(X_chunk[:, c], w) for c, w in zip(columns, weights)]
                step = margin_gradient(y_chunk, intercept, self.loss, self.learning_rate, *partials)
                weights = [
                    block_update(w, X_chunk[:, c], step, self.learning_rate, self.alpha)
                    for c, w in zip(columns, weights)
                ]
                intercept = _intercept(step)
        return weights, intercept

    def _fit_on_workers(self, client, workers, columns, X, y, rng):
        """The blocks trained where they live: block ``k``'s columns and weights on one
        worker; per chunk, partial margins in, a gradient out."""
        n_blocks = len(columns)
        X = X.rechunk({1: -1})
        y = y.rechunk({0: X.chunks[0]})
        homes = [workers[k % len(workers)] for k in range(n_blocks)]
        chunks = [  # chunks[k][i]: block k's columns of row chunk i, held on block k's worker
            _chunk_futures(client.persist(X[:, cols], workers=[home], allow_other_workers=False))
            for cols, home in zip(columns, homes)
        ]
        targets = _chunk_futures(client.persist(y))
        token = _keys.key_name("vertical", self.get_params(), X.name, y.name)
        names = {
            phase: _keys.key_name("vertical", token, phase=phase)
            for phase in ("margin", "step", "update")
        }
        weights = [
            scatter(client, np.zeros(c.stop - c.start), workers=[home])
            for c, home in zip(columns, homes)
        ]
        intercept = 0.0
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
        return weights, (intercept.result() if hasattr(intercept, "result") else intercept)

    def _checked(self, X):
        """*X* as the fitted model reads it: a dask array as it is, the rest validated."""
        import dask.array as da

        check_is_fitted(self)
        if isinstance(X, da.Array):
            if X.ndim != 2 or X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has shape {X.shape}, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input."
                )
            return X
        return validate_data(self, X, dtype=[np.float64, np.float32], reset=False)

    def _margin(self, X):
        X = self._checked(X)
        return X @ self.coef_ + self.intercept_

    @available_if(_is_classifier)
    def decision_function(self, X):
        """The margins ``X coef_ + intercept_`` (``log_loss`` only: a regressor's are its
        predictions).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
            Computed chunk-wise for a dask array.
        """
        return self._margin(X)

    def predict(self, X):
        """Labels (of ``classes_``) for ``log_loss``, values for ``squared_error``.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples,)
        """
        margin = self._margin(X)
        if not _is_classifier(self):
            return margin
        positive = margin > 0
        if hasattr(positive, "dask"):
            return positive.map_blocks(_labels, self.classes_, dtype=self.classes_.dtype)
        return _labels(positive, self.classes_)

    @available_if(_is_classifier)
    def predict_proba(self, X):
        """Probabilities of ``classes_`` (``log_loss`` only): ``sigmoid(margin)`` for the
        positive class.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask.array.Array of shape (n_samples, 2)
        """
        margin = self._margin(X)
        if hasattr(margin, "dask"):
            return margin.map_blocks(_proba, new_axis=1, chunks=(margin.chunks[0], (2,)))
        return _proba(margin)

    def score(self, X, y, sample_weight=None):
        """Accuracy (``log_loss``) or R² (``squared_error``) of the predictions of *X*.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
        y : array-like or dask.array.Array of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            In-memory data only.

        Returns
        -------
        float
        """
        import dask
        import dask.array as da
        from sklearn.metrics import accuracy_score, r2_score

        predicted = self.predict(X)
        if not isinstance(predicted, da.Array):
            metric = accuracy_score if _is_classifier(self) else r2_score
            return float(metric(y, predicted, sample_weight=sample_weight))
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__}.score does not take sample_weight with dask input; "
                "compute the data first, or score without weights."
            )
        y = da.asarray(y)
        if _is_classifier(self):
            return float((predicted == y).mean().compute())
        residual, total = dask.compute(((y - predicted) ** 2).sum(), ((y - y.mean()) ** 2).sum())
        return float(1 - residual / total) if total else 0.0


def _binary_labels(y, labels):
    """The two labels of a binary target, or the error scikit-learn's checks expect."""
    from sklearn.utils.multiclass import check_classification_targets, type_of_target

    if not hasattr(y, "dask"):
        check_classification_targets(y)
        kind = type_of_target(y, input_name="y")
        if kind != "binary":
            raise ValueError(
                "Only binary classification is supported. The type of the target is "
                f"{kind}: FeatureSharded(loss='log_loss') learns one margin; for more classes "
                "use taskdml.ClassSharded."
            )
    if len(labels) != 2:
        raise ValueError(
            f"FeatureSharded(loss='log_loss') needs samples of 2 classes; got {len(labels)} "
            f"class{'es' if len(labels) != 1 else ''} ({labels.tolist()!r})."
        )
    return labels


def _labels(positive, classes):
    return classes[np.asarray(positive).astype(int)]


def _proba(margin):
    positive = expit(np.asarray(margin))
    return np.column_stack([1 - positive, positive])


def _row_chunks(X, y):
    """The row chunks of dask *X* and *y* computed in this process, one at a time."""
    X = X.rechunk({1: -1})
    y = y.rechunk({0: X.chunks[0]})
    return _LazyChunks(X, y)


class _LazyChunks:
    """``chunks[i]``: row chunk ``i`` of *X* and *y*, computed when it is read."""

    def __init__(self, X, y):
        self.X, self.y = X, y

    def __len__(self):
        return len(self.X.chunks[0])

    def __getitem__(self, i):
        import dask

        X_chunk, y_chunk = dask.compute(self.X.blocks[i], self.y.blocks[i], scheduler="sync")
        return np.asarray(X_chunk), np.asarray(y_chunk)
