"""The adaptive searches' vocabulary: dask-ml's and scikit-learn's names run the same search.

Each alias is compared with the canonical name on the same data and seed: the same trials, the
same scores, the same best parameters (in process, without a client, so the runs are
deterministic).
"""

import numpy as np
import pytest
from scipy.stats import loguniform
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

from taskdml.model_selection import ASHASearchCV, HyperbandSearchCV, SuccessiveHalvingSearchCV

SPACE = {"alpha": [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]}
DISTRIBUTIONS = {"alpha": loguniform(1e-5, 1.0)}  # Hyperband samples more than six


@pytest.fixture(scope="module")
def data():
    return make_classification(600, 6, n_informative=3, random_state=0)


def _run(search_class, data, **params):
    search = search_class(SGDClassifier(random_state=0), random_state=0, **params)
    return search.fit(*data)


def _assert_same_search(ours, reference):
    results, expected = ours.cv_results_, reference.cv_results_
    assert results["params"] == expected["params"]
    for key in ("mean_test_score", "budget", "rung"):
        np.testing.assert_array_equal(results[key], expected[key])
    assert list(results["state"]) == list(expected["state"])
    assert ours.best_params_ == reference.best_params_
    np.testing.assert_array_equal(ours.best_estimator_.coef_, reference.best_estimator_.coef_)


SAMPLED = {
    "param_distributions": SPACE,
    "n_trials": 6,
    "min_epochs": 1,
    "max_epochs": 9,
    "reduction_factor": 3,
    "validation_fraction": 0.25,
}


@pytest.mark.parametrize("search_class", [ASHASearchCV, SuccessiveHalvingSearchCV])
@pytest.mark.parametrize(
    "aliases",
    [
        {"parameters": SPACE},
        {"n_initial_parameters": 6},
        {"n_iter": 6},
        {"n_candidates": 6},
        {"n_initial_iter": 1},
        {"max_iter": 9},
        {"aggressiveness": 3},
        {"factor": 3},
        {"test_size": 0.25},
    ],
    ids=lambda aliases: next(iter(aliases)),
)
def test_an_alias_runs_the_canonical_search(search_class, aliases, data):
    """ASHA and successive halving: each dask-ml/scikit-learn alias gives the canonical run."""
    canonical = {
        "parameters": "param_distributions",
        "n_initial_parameters": "n_trials",
        "n_iter": "n_trials",
        "n_candidates": "n_trials",
        "n_initial_iter": "min_epochs",
        "max_iter": "max_epochs",
        "aggressiveness": "reduction_factor",
        "factor": "reduction_factor",
        "test_size": "validation_fraction",
    }
    params = {
        key: value
        for key, value in SAMPLED.items()
        if key not in {canonical[alias] for alias in aliases}
    }
    _assert_same_search(
        _run(search_class, data, **params, **aliases), _run(search_class, data, **SAMPLED)
    )


def test_a_dask_ml_successive_halving_call_runs_as_written(data):
    """dask-ml's SuccessiveHalvingSearchCV keywords, all at once, give the canonical run."""
    dask_ml = {
        "parameters": SPACE,
        "n_initial_parameters": 6,
        "n_initial_iter": 1,
        "max_iter": 9,
        "aggressiveness": 3,
        "test_size": 0.25,
        "patience": 2,
        "tol": 1e-3,
        "scoring": "accuracy",
    }
    canonical = dict(SAMPLED, patience=2, tol=1e-3, scoring="accuracy")
    ours = _run(SuccessiveHalvingSearchCV, data, **dask_ml)
    _assert_same_search(ours, _run(SuccessiveHalvingSearchCV, data, **canonical))
    assert ours.metadata == SuccessiveHalvingSearchCV(SGDClassifier(), **canonical).metadata


@pytest.mark.parametrize(
    "aliases, replaces",
    [
        ({"param_distributions": DISTRIBUTIONS}, "parameters"),
        ({"max_epochs": 9}, "max_iter"),
        ({"reduction_factor": 3}, "aggressiveness"),
        ({"factor": 3}, "aggressiveness"),
        ({"test_size": 0.25}, "validation_fraction"),
    ],
    ids=lambda value: value if isinstance(value, str) else next(iter(value)),
)
def test_hyperband_accepts_the_other_names(aliases, replaces, data):
    """Hyperband (dask-ml's names) accepts scikit-learn's and taskdml's: the same run."""
    canonical = {
        "parameters": DISTRIBUTIONS,
        "max_iter": 9,
        "aggressiveness": 3,
        "validation_fraction": 0.25,
    }
    params = {key: value for key, value in canonical.items() if key != replaces}
    ours = _run(HyperbandSearchCV, data, **params, **aliases)
    _assert_same_search(ours, _run(HyperbandSearchCV, data, **canonical))
    assert ours.metadata_ == _run(HyperbandSearchCV, data, **canonical).metadata_


def test_aliases_are_stored_as_given():
    """get_params and clone keep an alias as passed, and the canonical parameter at its default."""
    search = SuccessiveHalvingSearchCV(
        SGDClassifier(), parameters=SPACE, n_initial_parameters=4, aggressiveness=2
    )
    params = clone(search).get_params()
    assert params["n_initial_parameters"] == 4 and params["n_trials"] == 20
    assert params["aggressiveness"] == 2 and params["reduction_factor"] == 3
    assert params["parameters"] == SPACE and params["param_distributions"] is None
    assert search.metadata["n_models"] == 4


@pytest.mark.parametrize(
    "search, message",
    [
        (
            SuccessiveHalvingSearchCV(SGDClassifier(), SPACE, n_trials=5, n_iter=6),
            r"n_trials=5 and n_iter=6 \(scikit-learn's name\) set the same parameter, "
            r"n_trials; give it once",
        ),
        (
            ASHASearchCV(SGDClassifier(), SPACE, aggressiveness=2, factor=3),
            r"aggressiveness=2 \(dask-ml's name\) and factor=3 \(scikit-learn's name\) "
            r"set the same parameter, reduction_factor",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), SPACE, param_distributions=SPACE),
            r"parameters=.* and param_distributions=.* set the same parameter, parameters",
        ),
        (
            ASHASearchCV(SGDClassifier(), SPACE, n_initial_parameters=0),
            r"n_initial_parameters must be an integer >= 1, got 0",
        ),
        (
            SuccessiveHalvingSearchCV(SGDClassifier(), SPACE, n_initial_iter=5, max_iter=3),
            r"n_initial_iter \(5\) must not exceed max_iter \(3\)",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), SPACE, factor=1),
            r"factor must be an integer >= 2, got 1",
        ),
        (
            ASHASearchCV(SGDClassifier(), SPACE, test_size=2.0),
            r"test_size must be a number in \(0, 1\), got 2.0",
        ),
        (
            ASHASearchCV(SGDClassifier()),
            r"no parameter space; pass param_distributions \(or parameters\)",
        ),
        (
            HyperbandSearchCV(SGDClassifier()),
            r"no parameter space; pass parameters \(or param_distributions\)",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_alias_errors_name_what_was_given(search, message):
    """A parameter given twice, or a bad value under an alias, fails at fit naming the alias."""
    with pytest.raises(ValueError, match=message):
        search.fit(*make_classification(60, 4, random_state=0))
