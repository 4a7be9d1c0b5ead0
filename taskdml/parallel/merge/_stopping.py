"""How far a family trains when asked to train "as far as ``fit`` would" (``epochs="auto"``).

``est.fit`` decides its own number of passes: the linear SGD family runs up to ``max_iter``
epochs and stops once the epoch's training loss has not improved by ``tol`` for
``n_iter_no_change`` epochs in a row (or the validation score, with ``early_stopping``); an
MLP does the same with its own defaults; ``MiniBatchKMeans`` stops after
``max_no_improvement`` batches without a better inertia; naive Bayes, scalers and
IncrementalPCA make one pass. A merge rule states its family's rule as a ``stopping``
callable (:class:`~taskdml.parallel.merge._registry.MergeRule`): ``stopping(estimator,
n_samples) -> Stopping``, read from the estimator's own parameters. A family without one
makes one pass.

The loss is *progressive*, as scikit-learn's own: each replica adds the loss of a chunk
under its current model just before it trains on that chunk (scikit-learn's SGD adds each
row's loss before its update), so an epoch's loss costs one prediction per chunk and no
extra pass over the data. ``loss(estimator, X, y)`` returns the chunk's summed loss; the
engine records the epoch's mean as ``train_loss`` and decides with :func:`stop_reason`,
which is scikit-learn's rule written once for losses and scores.

The losses are written here from their definitions (``sklearn/linear_model/_sgd_fast``:
hinge with threshold 1, the perceptron's hinge with threshold 0, log, modified Huber,
squared, Huber, epsilon-insensitive and their squares), summed over the one-vs-all
problems of a multiclass model. They leave out the penalty, as scikit-learn's SGD loss
does; the MLP's leaves out its L2 term (``alpha``), which scikit-learn's ``loss_`` adds.
"""

import dataclasses
import math
from collections.abc import Callable

import numpy as np

__all__ = [
    "ONE_PASS",
    "Stopping",
    "kmeans_stopping",
    "mlp_stopping",
    "passes",
    "sgd_stopping",
    "stop_reason",
]


@dataclasses.dataclass(frozen=True)
class Stopping:
    """When a training stops.

    Parameters
    ----------
    max_epochs : int
        The most epochs.
    on : {"train_loss", "validation_score"} or None
        What the rule watches (lower loss or higher score is better); None trains
        ``max_epochs``.
    tol : float
        The improvement over the best so far that counts.
    patience : int or None
        Epochs in a row without such an improvement before training stops.
    loss : callable or None
        ``loss(estimator, X, y) -> float``, the summed loss of one chunk's rows (``on ==
        "train_loss"``).
    source : str
        Where the rule comes from, for ``stats["stopping"]`` and messages.
    validation_fraction : float or None
        The share of rows held out to score when the estimator asks for ``early_stopping``.
    relative : bool
        Whether ``tol`` is a share of the best value so far rather than an amount.
    """

    max_epochs: int
    on: str | None = None
    tol: float = 0.0
    patience: int | None = None
    loss: Callable | None = None
    source: str = ""
    validation_fraction: float | None = None
    relative: bool = False


ONE_PASS = Stopping(1, source="one pass over the data, as fit makes")


def passes(parameter):
    """The rule of a family whose ``fit`` makes as many passes as its *parameter* says
    (``LatentDirichletAllocation.max_iter``, ``BernoulliRBM.n_iter``)."""

    def stopping(estimator, n_samples):
        epochs = getattr(estimator, parameter)
        return Stopping(epochs, source=f"{type(estimator).__name__}({parameter}={epochs})")

    return stopping


def stop_reason(history, stopping):
    """Why training stops after the last entry of *history*, or None to go on.

    scikit-learn's rule (``_plain_sgd``, ``MLP._update_no_improvement_count``): an epoch
    whose value is not better than the best before it by ``tol`` adds one to a count that
    any better epoch resets; training stops when the count reaches ``patience``, and after
    ``max_epochs`` in any case. Entries are dicts with ``epoch`` (counted from 1) and the
    value watched.
    """
    if stopping.on is not None and stopping.patience:
        sign = -1.0 if stopping.on == "train_loss" else 1.0
        best, count = -math.inf, 0
        for entry in history:
            if stopping.on not in entry:
                continue
            value = sign * entry[stopping.on]
            tol = (
                stopping.tol * abs(best) if stopping.relative and best > -math.inf else stopping.tol
            )
            count = count + 1 if value < best + tol else 0
            best = max(best, value)
        if count >= stopping.patience:
            return (
                f"{stopping.on} did not improve by tol={stopping.tol:g} for "
                f"{stopping.patience} epochs"
            )
    if history and history[-1]["epoch"] >= stopping.max_epochs:
        return f"{stopping.max_epochs} epochs done"
    return None


def converged(reason):
    """Whether *reason* (of :func:`stop_reason`) is convergence rather than the epoch limit."""
    return reason is not None and "did not improve" in reason


# -- losses, from their definitions -------------------------------------------------------------


def _hinge(threshold):
    return lambda p, y: np.maximum(0.0, threshold - p * y)


def _squared_hinge(p, y):
    return np.maximum(0.0, 1.0 - p * y) ** 2


def _log(p, y):
    # log(1 + exp(-z)) = max(-z, 0) + log1p(exp(-|z|)), in place: a quarter of the time of
    # np.logaddexp(0, -z) on a chunk, which a replica pays before every partial_fit
    z = p * y
    loss = np.maximum(-z, 0.0)
    np.abs(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    np.log1p(z, out=z)
    loss += z
    return loss


def _modified_huber(p, y):
    z = p * y
    return np.where(z >= 1.0, 0.0, np.where(z >= -1.0, (1.0 - z) ** 2, -4.0 * z))


def _squared(p, y):
    return 0.5 * (p - y) ** 2


def _huber(epsilon):
    def loss(p, y):
        r = np.abs(p - y)
        return np.where(r <= epsilon, 0.5 * r**2, epsilon * r - 0.5 * epsilon**2)

    return loss


def _epsilon_insensitive(epsilon, power=1):
    return lambda p, y: np.maximum(0.0, np.abs(y - p) - epsilon) ** power


def _pointwise(estimator):
    """The per-row loss ``f(p, y)`` of an SGD-family estimator's ``loss`` parameter."""
    name, epsilon = estimator.loss, getattr(estimator, "epsilon", 0.1)
    losses = {
        "hinge": _hinge(1.0),
        "perceptron": _hinge(0.0),
        "squared_hinge": _squared_hinge,
        "log_loss": _log,
        "modified_huber": _modified_huber,
        "squared_error": _squared,
        "huber": _huber(epsilon),
        "epsilon_insensitive": _epsilon_insensitive(epsilon),
        "squared_epsilon_insensitive": _epsilon_insensitive(epsilon, 2),
    }
    return losses[name]


def _sgd_loss(estimator, X, y):
    """The summed loss of one chunk under an SGD-family model: per one-vs-all problem for a
    classifier (labels as +1/-1), on the decision function (a one-class SVM: ``y = 1`` and
    ``p = decision_function + 1``, as its fit sets them)."""
    from sklearn.base import is_classifier

    classifier = is_classifier(estimator)
    if not classifier and y is None:  # SGDOneClassSVM
        return float(_hinge(1.0)(estimator.decision_function(X) + 1.0, 1.0).sum())
    p = _decision(estimator, X, classifier)
    if not classifier:  # a regressor predicts its decision
        return float(_pointwise(estimator)(p, np.asarray(y, float)).sum())
    classes = estimator.classes_
    if p.ndim == 1:
        signs = (np.asarray(y) == classes[1]) * 2.0 - 1.0
    else:
        signs = (np.asarray(y)[:, None] == classes[None, :]) * 2.0 - 1.0
    return float(_pointwise(estimator)(p, signs).sum())


def _decision(estimator, X, classifier):
    """A linear model's decision function on one chunk: ``X @ coef_.T + intercept_``, without
    ``decision_function``'s input check (a scan of the chunk that the ``partial_fit`` after it
    makes again), for an array or sparse matrix of the model's width; anything else goes
    through ``decision_function`` (a regressor's ``predict``) and its clear errors."""
    import scipy.sparse
    from sklearn.utils.extmath import safe_sparse_dot

    coef = estimator.coef_
    plain = isinstance(X, np.ndarray) or scipy.sparse.issparse(X)
    if not plain or X.ndim != 2 or X.shape[1] != coef.shape[-1]:
        return (estimator.decision_function if classifier else estimator.predict)(X)
    p = safe_sparse_dot(X, coef.T, dense_output=True) + estimator.intercept_
    return p.ravel() if p.ndim == 2 and p.shape[1] == 1 else p


def sgd_stopping(estimator, n_samples):
    """The SGD family's ``fit``: up to ``max_iter`` epochs, ``tol`` and ``n_iter_no_change``
    on the training loss, or on the validation score with ``early_stopping``."""
    return _tol_rule(estimator, _sgd_loss)


def _tol_rule(estimator, loss, beyond=0):
    """The rule of ``fit`` for an estimator with ``max_iter``, ``tol``, ``n_iter_no_change``
    and ``early_stopping``/``validation_fraction`` (SGD, MLP): ``tol=None`` trains
    ``max_iter`` epochs. *beyond*: epochs without improvement past ``n_iter_no_change``
    before the stop (SGD stops when the count reaches it, an MLP when it exceeds it)."""
    tol = estimator.tol
    patience = estimator.n_iter_no_change + beyond
    source = (
        f"{type(estimator).__name__}(max_iter={estimator.max_iter}, tol={tol}, "
        f"n_iter_no_change={estimator.n_iter_no_change}"
    )
    if tol is None:
        return Stopping(estimator.max_iter, source=source + ")")
    if getattr(estimator, "early_stopping", False):
        return Stopping(
            estimator.max_iter,
            "validation_score",
            tol,
            patience,
            source=source + f", early_stopping=True, validation_fraction="
            f"{estimator.validation_fraction})",
            validation_fraction=estimator.validation_fraction,
        )
    return Stopping(estimator.max_iter, "train_loss", tol, patience, loss, source + ")")


def _mlp_loss(estimator, X, y):
    """The summed loss of one chunk under an MLP (its ``loss_`` without the L2 term): log loss
    of the predicted probabilities for a classifier, half the squared error per output for a
    regressor."""
    from sklearn.base import is_classifier

    if is_classifier(estimator):
        from sklearn.metrics import log_loss

        proba = estimator.predict_proba(X)
        return float(log_loss(y, proba, labels=estimator.classes_, normalize=False))
    predicted = estimator.predict(X).reshape(len(X), -1)
    residual = predicted - np.asarray(y, dtype=float).reshape(len(X), -1)
    return float((0.5 * residual**2).mean(axis=1).sum())


def mlp_stopping(estimator, n_samples):
    """An MLP's ``fit``: up to ``max_iter`` epochs, ``tol`` and ``n_iter_no_change`` on the
    training loss, or on the validation score with ``early_stopping`` (solver ``sgd`` or
    ``adam``; ``lbfgs`` has no ``partial_fit``). Its count must exceed ``n_iter_no_change``
    (``_multilayer_perceptron``: ``_no_improvement_count > n_iter_no_change``), one epoch
    more than SGD's."""
    return _tol_rule(estimator, _mlp_loss, beyond=1)


def _inertia(estimator, X, y):
    return float(-estimator.score(X))


KMEANS_RELATIVE_TOL = 1e-3
"""The share of the best inertia an epoch must improve on to count (k-means, ``"auto"``)."""


def kmeans_stopping(estimator, n_samples):
    """``MiniBatchKMeans.fit``: up to ``max_iter`` epochs, stopping once the inertia has not
    improved for ``max_no_improvement`` batches of ``batch_size`` rows, which here is that
    many rows, rounded up to whole epochs (at least one); ``max_no_improvement=None`` trains
    ``max_iter`` epochs. Its ``tol`` on the centres' movement is not followed.

    ``fit`` watches a running average of each batch's inertia, which stops improving once
    batch-to-batch noise drowns the progress; an epoch's inertia, summed over every chunk, is
    smooth and keeps improving by ever smaller amounts (measured: 100 epochs, ``max_iter``,
    on 100,000 rows where ``fit`` took 2). So an epoch counts as an improvement only when it
    betters the best by :data:`KMEANS_RELATIVE_TOL` of it."""
    patience = estimator.max_no_improvement
    source = (
        f"{type(estimator).__name__}(max_iter={estimator.max_iter}, "
        f"max_no_improvement={patience}, batch_size={estimator.batch_size})"
    )
    if patience is None:
        return Stopping(estimator.max_iter, source=source)
    epochs = max(1, math.ceil(patience * estimator.batch_size / max(n_samples, 1)))
    return Stopping(
        estimator.max_iter, "train_loss", KMEANS_RELATIVE_TOL, epochs, _inertia,
        source + f"; an epoch must better the inertia by {KMEANS_RELATIVE_TOL:g} of it",
        relative=True,
    )  # fmt: skip
