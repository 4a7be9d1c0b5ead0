"""Searches over a scikit-learn Pipeline on tables (mixed columns read from a CSV).

Grid and random searches gather a table and score exactly as scikit-learn does on the same
pandas DataFrame; the adaptive searches refuse a table and say what to do instead.
"""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import loguniform
from sklearn import model_selection as sk
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import taskdml
from taskdml import DataError
from taskdml._data import unwrap
from taskdml.datasets import read_csv

FEATURES = ["a", "b", "grade"]


def pipeline():
    """One-hot the grade, impute and scale the numbers, then a linear classifier."""
    return make_pipeline(
        ColumnTransformer(
            [
                ("cat", OneHotEncoder(handle_unknown="ignore"), ["grade"]),
                ("num", make_pipeline(SimpleImputer(), StandardScaler()), ["a", "b"]),
            ]
        ),
        SGDClassifier(random_state=0),
    )


@pytest.fixture
def csv(tmp_path, seed):
    """A CSV of 240 rows: two numeric columns (with missing values), a grade, a label."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, 240))
    grade = np.where(a > 0.5, "high", np.where(a < -0.5, "low", "mid"))
    label = (a + b + rng.normal(scale=0.5, size=240) > 0).astype(int)
    a[::17] = np.nan
    frame = pd.DataFrame({"a": a, "b": b, "grade": grade, "label": label})
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    return path


def _inputs(path, form):
    """The CSV as a table (chunked), or as its dask DataFrame and y; and as pandas."""
    table = read_csv(path, target="label", categorical=["grade"], blocksize=2000)
    assert table.chunks["sample"][1:], "the table should have several chunks"
    frame = pd.read_csv(path)
    expected = (frame[FEATURES], frame["label"].to_numpy())
    if form == "table":
        return (table,), expected
    X, y, _, _ = unwrap(table)
    return (X, y), expected


SEARCHES = {
    "grid": lambda module: module.GridSearchCV(
        pipeline(), {"sgdclassifier__alpha": [1e-4, 1e-3, 1e-2]}, cv=3
    ),
    "random": lambda module: module.RandomizedSearchCV(
        pipeline(),
        {"sgdclassifier__alpha": loguniform(1e-5, 1e-1), "sgdclassifier__penalty": ["l2", "l1"]},
        n_iter=4,
        cv=3,
        random_state=0,
    ),
}


@pytest.mark.parametrize("form", ["table", "dask DataFrame"])
@pytest.mark.parametrize("kind", sorted(SEARCHES))
def test_a_search_on_a_table_scores_as_scikit_learn(csv, client, form, kind):
    """Grid and random searches of a Pipeline on a table (or its dask DataFrame) give
    scikit-learn's split scores, ranks and best parameters exactly, and score the same."""
    args, (X, y) = _inputs(csv, form)
    ours = SEARCHES[kind](taskdml).fit(*args)
    theirs = SEARCHES[kind](sk).fit(X, y)
    for key in ["split0_test_score", "split1_test_score", "split2_test_score"]:
        np.testing.assert_array_equal(ours.cv_results_[key], theirs.cv_results_[key])
    np.testing.assert_array_equal(
        ours.cv_results_["rank_test_score"], theirs.cv_results_["rank_test_score"]
    )
    assert ours.best_params_ == theirs.best_params_
    assert type(ours.best_estimator_).__name__ == "Pipeline"
    assert ours.score(*args) == theirs.score(X, y)


def test_a_table_too_big_to_gather_is_refused(csv, client, monkeypatch):
    """A table over the gathering limit is refused with its size and what to do."""
    monkeypatch.setattr("taskdml._data.MAX_GATHERED_CELLS", 100)
    (table,), _ = _inputs(csv, "table")
    search = taskdml.GridSearchCV(pipeline(), {"sgdclassifier__alpha": [1e-4]}, cv=3)
    with pytest.raises(
        DataError,
        match=r"240 rows × 3 columns = 720 cells; a search over a table gathers it into one "
        r"pandas DataFrame, up to 100 cells\. Search on a sample of the rows",
    ):
        search.fit(table)


ADAPTIVE = {
    "ASHASearchCV": lambda: taskdml.ASHASearchCV(
        SGDClassifier(), {"alpha": [1e-4, 1e-3]}, n_trials=2, max_epochs=2
    ),
    "SuccessiveHalvingSearchCV": lambda: taskdml.SuccessiveHalvingSearchCV(
        SGDClassifier(), {"alpha": [1e-4, 1e-3]}, n_trials=2, max_epochs=2
    ),
    "HyperbandSearchCV": lambda: taskdml.HyperbandSearchCV(
        SGDClassifier(), {"alpha": [1e-4, 1e-3]}, max_iter=2
    ),
}


@pytest.mark.parametrize("form", ["table", "dask DataFrame", "pandas DataFrame"])
@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_searches_refuse_a_table(csv, name, form):
    """ASHA, halving and Hyperband refuse a table, naming its columns and what to use."""
    args, (X, y) = _inputs(csv, form)
    if form == "pandas DataFrame":
        args = (X, y)
    with pytest.raises(
        DataError,
        match=rf"{name} trains its trials incrementally on numeric arrays, but X is a table of "
        r"columns \('a', 'b', 'grade'\)\. Search a Pipeline over a table with GridSearchCV or "
        r"RandomizedSearchCV \(method: grid or random in a search step\), or encode",
    ):
        ADAPTIVE[name]().fit(*args)
