"""Feature-sharded linear models: each worker holds a block of the columns and only partial
margins and gradients move; the steps equal plain gradient descent on all the columns."""

import dask.array as da
import numpy as np
import pytest

from taskdml.parallel.estimators._feature_sharded import FeatureSharded, margin_gradient


def _data(n_samples=400, n_features=7, chunk=100, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, n_features))
    y = (X @ rng.normal(size=n_features) + 0.1 * rng.normal(size=n_samples) > 0).astype(float)
    return X, y, da.from_array(X, chunks=(chunk, n_features)), da.from_array(y, chunks=chunk)


def _unsharded_step(X, y, w, b, loss, learning_rate, alpha):
    gradient, intercept = margin_gradient(y, b, loss, learning_rate, X @ w)
    return w - learning_rate * (X.T @ gradient / len(y) + alpha * w), intercept


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
    w, b = np.zeros(X.shape[1]), 0.0
    rng = np.random.RandomState(0)
    for _ in range(3):
        for i in rng.permutation(4):
            rows = slice(100 * i, 100 * (i + 1))
            w, b = _unsharded_step(X[rows], y[rows], w, b, "log_loss", 0.5, 0.0)
    np.testing.assert_allclose(model.coef_, w, rtol=0, atol=1e-10)
    assert (model.predict(X) == y).mean() > 0.8


def test_each_blocks_columns_stay_on_its_worker(client):
    """The column blocks of the data and the weights live on the worker of their block."""
    _, _, dX, dy = _data()
    model = FeatureSharded(n_blocks=2).fit(dX, dy)
    homes = [set(client.who_has([future])[future.key]) for _, future in model.blocks_]
    assert all(len(home) == 1 for home in homes) and homes[0] != homes[1]


def test_a_bad_configuration_is_refused(client):
    """Too many blocks, or an unknown loss: a ValueError that says what is allowed."""
    _, _, dX, dy = _data(n_features=3)
    with pytest.raises(ValueError, match="n_blocks must be between 1 and the 3 features"):
        FeatureSharded(n_blocks=5).fit(dX, dy)
    with pytest.raises(ValueError, match="loss must be one of"):
        FeatureSharded(loss="hinge").fit(dX, dy)
