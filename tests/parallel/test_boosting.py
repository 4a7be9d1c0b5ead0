"""XGBoost and LightGBM trained by their own Dask training where replicas would run: the
engine's result is the plain in-memory estimator, and a grid search's trials train the same
way; compared with the same libraries fitted in memory."""

import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from distributed import get_task_stream
from sklearn import model_selection as sk
from sklearn.datasets import make_classification

from taskdml.model_selection.grid._search import GridSearchCV
from taskdml.parallel import train

xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def rows():
    return make_classification(4_000, 10, n_informative=6, random_state=0)


def test_lightgbm_trains_with_its_dask_training_and_returns_lgbmclassifier(client, rows):
    """train() hands LGBMClassifier to lightgbm's Dask training on both workers; the result is
    an LGBMClassifier that scores within a point of one fitted in memory on the same rows."""
    X, y = rows
    Xd, yd = da.from_array(X, chunks=(1_000, 10)), da.from_array(y, chunks=1_000)
    params = dict(n_estimators=20, num_leaves=15, verbose=-1, random_state=0)
    result = train(lightgbm.LGBMClassifier(**params), Xd, yd, strategy="sync", client=client)
    assert result.strategy == "native" and type(result.estimator) is lightgbm.LGBMClassifier
    assert result.stats["dask_class"] == "lightgbm.dask:DaskLGBMClassifier"
    assert len(result.stats["workers"]) == 2
    in_memory = lightgbm.LGBMClassifier(**params).fit(X, y)
    assert abs(result.estimator.score(X, y) - in_memory.score(X, y)) <= 0.01
    np.testing.assert_array_equal(result.estimator.classes_, in_memory.classes_)


def test_grid_search_trials_train_with_xgboost_dask(client, rows):
    """Each trial (2 candidates x 2 folds, and the refit) trains with xgboost.dask on the
    workers holding its chunks; the scores and the best candidate are scikit-learn's GridSearchCV of
    XGBClassifier in memory on the same folds, to 2 points."""
    X, y = rows
    Xd, yd = da.from_array(X, chunks=(1_000, 10)), da.from_array(y, chunks=1_000)
    grid = {"n_estimators": [2, 30]}
    estimator = xgboost.XGBClassifier(max_depth=3, tree_method="hist", random_state=0)
    with get_task_stream(client) as stream:
        search = GridSearchCV(estimator, grid, cv=2, strategy="sync").fit(Xd, yd)
    # xgboost.dask's training task ("fn") on each worker holding the trial's chunks, not the
    # one task that fits a trial on its chunks gathered ("search-fit")
    names = [key_split(task["key"]) for task in stream.data]
    assert "search-fit" not in names and names.count("fn") >= 2 * 2 + 1
    reference = sk.GridSearchCV(estimator, grid, cv=sk.KFold(2)).fit(X, y)
    assert search.best_params_ == reference.best_params_
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"], atol=0.02
    )
    assert type(search.best_estimator_) is xgboost.XGBClassifier
