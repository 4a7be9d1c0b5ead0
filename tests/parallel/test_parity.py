"""The drop-in promise, quickly: ``DataParallel(est).fit`` with defaults scores as ``est.fit``.

The quick version of ``benchmarks/parity.py``: scores on a held-out split against
scikit-learn's own ``fit`` on the same rows (the oracle), within half a point; time is the
benchmark's business, not asserted here. In-memory data of this size is fitted where it lies,
dask data of many chunks with replicas when asked (``strategy="sync"``), which is where
averaging could cost accuracy.
"""

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits, load_wine, make_classification
from sklearn.linear_model import Perceptron, SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from taskdml import DataParallel

ESTIMATORS = {
    "sgd-hinge": make_pipeline(StandardScaler(), SGDClassifier(random_state=0)),
    "sgd-log": make_pipeline(StandardScaler(), SGDClassifier(loss="log_loss", random_state=0)),
    "perceptron": make_pipeline(StandardScaler(), Perceptron(random_state=0)),
    "gaussian-nb": GaussianNB(),
}


def _split(X, y):
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("load", [load_digits, load_wine], ids=["digits", "wine"])
def test_defaults_score_as_fit_on_bundled_data(client, name, load):
    """In memory, defaults: the same test score as est.fit (it is est.fit, where the data lies)."""
    X_train, X_test, y_train, y_test = _split(*load(return_X_y=True))
    estimator = ESTIMATORS[name]
    expected = clone(estimator).fit(X_train, y_train).score(X_test, y_test)
    model = DataParallel(clone(estimator)).fit(X_train, y_train)
    assert model.score(X_test, y_test) >= expected - 0.005


@pytest.mark.parametrize("loss", ["hinge", "log_loss"])
def test_replicas_with_auto_epochs_score_as_fit(client, loss):
    """40,000 rows in 8 dask chunks, 2 replicas merged after every chunk, epochs as far as
    SGDClassifier.fit goes: the test score is within half a point of est.fit's."""
    X, y = make_classification(
        40_000, 20, n_informative=10, flip_y=0.05, class_sep=0.8, random_state=0
    )
    X = StandardScaler().fit_transform(X)
    X_train, X_test, y_train, y_test = _split(X, y)
    estimator = SGDClassifier(loss=loss, random_state=0)
    expected = clone(estimator).fit(X_train, y_train).score(X_test, y_test)
    chunks = -(-len(X_train) // 8)
    model = DataParallel(clone(estimator), strategy="sync", sync_every=1, random_state=0).fit(
        da.from_array(X_train, chunks=(chunks, -1)), da.from_array(y_train, chunks=chunks)
    )
    assert model.n_epochs_ > 1 and "did not improve" in model.stats_["stopped"]
    assert model.score(X_test, y_test) >= expected - 0.005
    np.testing.assert_array_equal(model.classes_, [0, 1])
