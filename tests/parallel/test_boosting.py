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


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_asha_rounds_continue_the_booster_as_one_fit_would(library, rows):
    """An adaptive step from budget 1 to 3 of 9 grows 3 more rounds of 9 on the trial's booster
    of 3: its probabilities are those of the library's own fit of 9 rounds, as n_estimators=27
    scaled to the budget."""
    from taskdml.model_selection.adaptive._run import boost_rounds

    X, y = rows
    chunks = [(X[i : i + 1_000], y[i : i + 1_000]) for i in range(0, 4_000, 1_000)]
    estimator = (
        xgboost.XGBClassifier(n_estimators=27, max_depth=3, tree_method="hist", n_jobs=1)
        if library == "xgboost"
        else lightgbm.LGBMClassifier(n_estimators=27, num_leaves=7, verbose=-1, n_jobs=1)
    )
    first = boost_rounds(None, estimator, chunks, 0, 1, 9)
    grown = boost_rounds(first, estimator, chunks, 1, 3, 9)
    assert first.n_estimators == 3 and grown.n_estimators == 9
    reference = type(estimator)(**{**estimator.get_params(), "n_estimators": 9}).fit(X, y)
    np.testing.assert_allclose(grown.predict_proba(X), reference.predict_proba(X), rtol=1e-5)


def test_asha_search_of_xgboost_counts_rounds(client, rows):
    """ASHA over XGBClassifier's learning rate on chunked data: every step grows rounds
    (``steps`` "rounds"), and the best model refitted at the best trial's budget is
    XGBClassifier fitted in memory on every row for as many rounds."""
    from taskdml.model_selection import ASHASearchCV

    X, y = rows
    Xd, yd = da.from_array(X, chunks=(500, 10)), da.from_array(y, chunks=500)
    estimator = xgboost.XGBClassifier(n_estimators=27, max_depth=3, tree_method="hist")
    search = ASHASearchCV(
        estimator, {"learning_rate": [0.1, 1.0]}, n_trials=2, max_epochs=9, min_epochs=1,
        reduction_factor=3, validation_fraction=0.25, random_state=0,
    ).fit(Xd, yd)  # fmt: skip
    assert set(", ".join(search.trials_["steps"]).split(", ")) == {"rounds"}
    best = search.best_estimator_
    budget = int(search.cv_results_["budget"][search.best_index_])
    rounds = max(1, round(27 * budget / 9))
    assert best.get_booster().num_boosted_rounds() == rounds
    reference = xgboost.XGBClassifier(
        **{**estimator.get_params(), **search.best_params_, "n_estimators": rounds}
    ).fit(X, y)
    np.testing.assert_allclose(best.predict_proba(X), reference.predict_proba(X), rtol=1e-5)
