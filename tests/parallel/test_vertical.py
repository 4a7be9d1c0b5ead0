"""Feature-sharded linear models: each worker holds a block of the columns and only partial
margins and gradients move; the steps equal plain gradient descent on all the columns,
written here from the definitions."""

import dask.array as da
import numpy as np
import pytest
from distributed import Client
from scipy.special import expit
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

from taskdml.parallel import FeatureSharded


def _data(n_samples=400, n_features=7, chunk=100, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, n_features))
    y = (X @ rng.normal(size=n_features) + 0.1 * rng.normal(size=n_samples) > 0).astype(float)
    return X, y, da.from_array(X, chunks=(chunk, n_features)), da.from_array(y, chunks=chunk)


def _unsharded_step(X, y, w, b, loss, learning_rate, alpha):
    """One gradient step on all the columns, from the definitions: the loss's derivative per
    row (``sigmoid(margin) - y`` for the log loss, ``margin - y`` for the squared error), its
    mean for the intercept, and ``X.T @ gradient / n + alpha * w`` for the weights."""
    margin = X @ w + b
    gradient = expit(margin) - y if loss == "log_loss" else margin - y
    return (
        w - learning_rate * (X.T @ gradient / len(y) + alpha * w),
        b - learning_rate * gradient.mean(),
    )


def _unsharded_epochs(X, y, epochs, learning_rate, alpha, random_state, n_chunks=4):
    """Epochs of unsharded steps over the chunks of 100 rows in the seeded order."""
    w, b = np.zeros(X.shape[1]), 0.0
    rng = np.random.RandomState(random_state)
    for _ in range(epochs):
        for i in rng.permutation(n_chunks):
            rows = slice(100 * i, 100 * (i + 1))
            w, b = _unsharded_step(X[rows], y[rows], w, b, "log_loss", learning_rate, alpha)
    return w, b


@pytest.mark.parametrize("loss", ["log_loss", "squared_error"])
@pytest.mark.parametrize("n_blocks", [1, 2, 3])
def test_one_step_equals_the_unsharded_gradient_step(client, loss, n_blocks):
    """One mini-batch on column blocks gives the weights of one step on all the columns,
    to 1e-10."""
    X, y, dX, dy = _data(n_samples=100, chunk=100)
    model = FeatureSharded(loss=loss, n_blocks=n_blocks, learning_rate=0.3, alpha=0.01)
    model.fit(dX, dy)
    w, b = _unsharded_step(X, y, np.zeros(X.shape[1]), 0.0, loss, 0.3, 0.01)
    np.testing.assert_allclose(model.coef_, w, rtol=0, atol=1e-10)
    assert abs(model.intercept_ - b) < 1e-10


def test_epochs_over_chunks_equal_the_same_steps_unsharded_and_learn(client):
    """Three epochs over four chunks in the seeded order: the same weights as the unsharded
    steps in that order, and a classifier better than chance."""
    X, y, dX, dy = _data()
    model = FeatureSharded(n_blocks=3, learning_rate=0.5, epochs=3, random_state=0).fit(dX, dy)
    w, b = _unsharded_epochs(X, y, epochs=3, learning_rate=0.5, alpha=0.0, random_state=0)
    np.testing.assert_allclose(model.coef_, w, rtol=0, atol=1e-10)
    assert model.intercept_ == pytest.approx(b, abs=1e-10)
    assert (model.predict(X) == y).mean() > 0.8


def test_each_blocks_columns_stay_on_its_worker(client):
    """The column blocks of the data and the weights live on the worker of their block, and
    the weights are those of the unsharded steps (the defaults: rate 0.1, no penalty, one
    epoch)."""
    X, y, dX, dy = _data()
    model = FeatureSharded(n_blocks=2, random_state=0).fit(dX, dy)
    homes = [set(client.who_has([future])[future.key]) for _, future in model.blocks_]
    assert all(len(home) == 1 for home in homes) and homes[0] != homes[1]
    w, b = _unsharded_epochs(X, y, epochs=1, learning_rate=0.1, alpha=0.0, random_state=0)
    np.testing.assert_allclose(model.coef_, w, rtol=0, atol=1e-10)
    assert model.intercept_ == pytest.approx(b, abs=1e-10)


def test_a_bad_configuration_is_refused(client):
    """Too many blocks, or an unknown loss: a ValueError that says what is allowed; as many
    blocks as features is allowed."""
    X, y, dX, dy = _data(n_features=3)
    with pytest.raises(ValueError, match="n_blocks must be between 1 and the 3 features"):
        FeatureSharded(n_blocks=5).fit(dX, dy)
    # The bound is inclusive: a block per column trains as the unsharded steps.
    model = FeatureSharded(n_blocks=3, random_state=0).fit(dX, dy)
    w, b = _unsharded_epochs(X, y, epochs=1, learning_rate=0.1, alpha=0.0, random_state=0)
    np.testing.assert_allclose(model.coef_, w, rtol=0, atol=1e-10)
    assert model.intercept_ == pytest.approx(b, abs=1e-10)
    with pytest.raises(ValueError, match="loss must be one of"):
        FeatureSharded(loss="hinge").fit(dX, dy)


# -- a scikit-learn estimator ---------------------------------------------------------------


def test_without_a_client_the_blocks_train_here_with_the_same_weights(cluster):
    """Without a client (in-memory data, or dask data on the local scheduler) the blocks train
    in this process: the same steps as on the cluster, the same weights to rounding, those of
    the unsharded steps."""
    X, y, dX, dy = _data()
    params = dict(n_blocks=3, learning_rate=0.5, alpha=0.01, epochs=2, random_state=0)
    with Client(cluster, set_as_default=True):
        on_cluster = FeatureSharded(**params).fit(dX, dy)
    here = FeatureSharded(**params).fit(dX, dy)
    assert all(isinstance(weights, np.ndarray) for _, weights in here.blocks_)
    np.testing.assert_allclose(here.coef_, on_cluster.coef_, rtol=0, atol=1e-12)
    assert here.intercept_ == pytest.approx(on_cluster.intercept_, abs=1e-12)
    w, _ = _unsharded_epochs(X, y, epochs=2, learning_rate=0.5, alpha=0.01, random_state=0)
    np.testing.assert_allclose(here.coef_, w, rtol=0, atol=1e-10)
    in_memory = FeatureSharded(n_blocks=3, learning_rate=0.5, epochs=2).fit(X, y)
    one_step = FeatureSharded(n_blocks=1, learning_rate=0.5, epochs=2).fit(X, y)
    np.testing.assert_allclose(in_memory.coef_, one_step.coef_, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "loss, kind, metric",
    [("log_loss", "classifier", accuracy_score), ("squared_error", "regressor", r2_score)],
)
def test_the_loss_makes_it_a_classifier_or_a_regressor_with_score(loss, kind, metric):
    """log_loss: a binary classifier of any two labels (predict gives them back,
    predict_proba, accuracy); squared_error: a regressor (R²). Dask input scores the same."""
    X, y, dX, _ = _data()
    target = np.where(y > 0, "spam", "ham") if kind == "classifier" else X @ np.arange(7.0)
    model = FeatureSharded(loss=loss, learning_rate=0.05, epochs=200).fit(X, target)
    assert get_tags(model).estimator_type == kind
    predicted = model.predict(X)
    assert model.score(X, target) == pytest.approx(metric(target, predicted))
    assert model.score(X, target) > 0.8
    dask_target = da.from_array(target, chunks=100)
    assert model.score(dX, dask_target) == pytest.approx(model.score(X, target))
    if kind == "classifier":
        assert set(predicted) <= {"ham", "spam"} and model.classes_.tolist() == ["ham", "spam"]
        np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)
        assert model.predict_proba(dX).compute().shape == (len(X), 2)
    else:
        assert not hasattr(model, "predict_proba")


def test_more_than_two_classes_are_refused_with_the_alternative():
    """log_loss learns one margin: three labels are refused, naming ClassSharded."""
    X, _, _, _ = _data()
    with pytest.raises(ValueError, match="Only binary classification is supported.*ClassSharded"):
        FeatureSharded().fit(X, np.arange(len(X)) % 3)


@parametrize_with_checks(
    [
        FeatureSharded(n_blocks=1, learning_rate=0.5, epochs=100, random_state=0),
        FeatureSharded(loss="squared_error", n_blocks=1, learning_rate=0.1, epochs=100),
    ]
)
def test_check_estimator(estimator, check):
    """FeatureSharded passes scikit-learn's estimator checks (in-memory data: the blocks train
    in this process, no client needed)."""
    check(estimator)
