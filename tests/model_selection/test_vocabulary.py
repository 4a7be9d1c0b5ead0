"""The adaptive searches' vocabulary: one order of parameters for the three, scikit-learn's
names first; dask-ml's and scikit-learn's other names run the same search.

Each alias is compared with the canonical name on the same data and seed: the same trials, the
same scores, the same best parameters (in process, without a client, so the runs are
deterministic).
"""

import inspect
import math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import loguniform
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import ParameterSampler

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


def _rungs(min_epochs, max_epochs, eta):
    """The rungs' budgets, ``min_epochs * eta**k`` up to ``max_epochs``."""
    rungs = []
    while min_epochs * eta ** len(rungs) <= max_epochs:
        rungs.append(min_epochs * eta ** len(rungs))
    return rungs


def _halving_ends(n_trials, min_epochs, max_epochs, eta):
    """``{budget: trials ending there}`` of a synchronous halving: rung k keeps
    ``n_trials // eta**k`` trials, at least one."""
    rungs = _rungs(min_epochs, max_epochs, eta)
    kept = [max(1, n_trials // eta**k) for k in range(len(rungs))] + [0]
    return {budget: kept[k] - kept[k + 1] for k, budget in enumerate(rungs)}


def _assert_documented(search, n_trials=6, min_epochs=1, max_epochs=9, eta=3, plateaus=False):
    """What the canonical values mean, worked out here rather than by another run: the trials
    are scikit-learn's ParameterSampler's candidates for the seed (0); without plateau stops
    (which end a trial between rungs) every budget is a rung, and synchronous halving ends as
    many trials at each rung as its arithmetic says."""
    results = search.cv_results_
    assert results["params"] == list(ParameterSampler(SPACE, n_trials, random_state=0))
    if plateaus:
        return
    assert set(results["budget"]) <= set(_rungs(min_epochs, max_epochs, eta))
    if isinstance(search, SuccessiveHalvingSearchCV):
        ends = _halving_ends(n_trials, min_epochs, max_epochs, eta)
        assert dict(Counter(results["budget"].tolist())) == ends


def _assert_hyperband_documented(search, max_epochs=9, eta=3):
    """Li et al.'s brackets for *max_epochs*: bracket s starts ``ceil((s_max + 1) * eta**s /
    (s + 1))`` trials at ``max_epochs // eta**s`` epochs and halves them to *max_epochs*."""
    s_max = len(_rungs(1, max_epochs, eta)) - 1
    ends = Counter()
    for s in range(s_max + 1):
        n_models = math.ceil((s_max + 1) * eta**s / (s + 1))
        ends.update(_halving_ends(n_models, max_epochs // eta**s, max_epochs, eta))
    assert search.n_trials_ == sum(ends.values())
    assert dict(Counter(search.cv_results_["budget"].tolist())) == dict(ends)


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
    ours = _run(search_class, data, **params, **aliases)
    _assert_same_search(ours, _run(search_class, data, **SAMPLED))
    _assert_documented(ours)


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
    _assert_documented(ours, plateaus=True)
    rungs = _rungs(1, 9, 3)
    assert ours.metadata["rungs"] == [(max(1, 6 // 3**k), b) for k, b in enumerate(rungs)]


@pytest.mark.parametrize(
    "aliases, replaces",
    [
        ({"parameters": DISTRIBUTIONS}, "param_distributions"),
        ({"max_iter": 9}, "max_epochs"),
        ({"aggressiveness": 3}, "reduction_factor"),
        ({"factor": 3}, "reduction_factor"),
        ({"test_size": 0.25}, "validation_fraction"),
    ],
    ids=lambda value: value if isinstance(value, str) else next(iter(value)),
)
def test_hyperband_takes_the_same_names_and_dask_mls(aliases, replaces, data):
    """Hyperband's names are the other searches' (param_distributions, max_epochs,
    reduction_factor); dask-ml's (parameters, max_iter, aggressiveness) run the same search."""
    canonical = {
        "param_distributions": DISTRIBUTIONS,
        "max_epochs": 9,
        "reduction_factor": 3,
        "validation_fraction": 0.25,
    }
    params = {key: value for key, value in canonical.items() if key != replaces}
    ours = _run(HyperbandSearchCV, data, **params, **aliases)
    _assert_same_search(ours, _run(HyperbandSearchCV, data, **canonical))
    assert ours.metadata_ == _run(HyperbandSearchCV, data, **canonical).metadata_
    _assert_hyperband_documented(ours)


def test_a_dask_ml_hyperband_call_runs_as_written(data):
    """dask-ml's positional call HyperbandSearchCV(model, parameters, max_iter=, aggressiveness=)
    is the same search as under the canonical names."""
    dask_ml = HyperbandSearchCV(
        SGDClassifier(random_state=0), DISTRIBUTIONS, max_iter=9, aggressiveness=3, random_state=0
    )
    assert dask_ml.metadata == HyperbandSearchCV(SGDClassifier(), max_epochs=9).metadata
    _assert_same_search(
        dask_ml.fit(*data),
        _run(HyperbandSearchCV, data, param_distributions=DISTRIBUTIONS, max_epochs=9),
    )
    _assert_hyperband_documented(dask_ml)


SEARCHES = [ASHASearchCV, SuccessiveHalvingSearchCV, HyperbandSearchCV]


def test_the_three_searches_take_their_parameters_in_one_order():
    """The parameters the searches share come in the same order in each: the space, the
    budget, validation, the engine's options (the options table's), refit and the seed, then
    the other libraries' names; the engine's options have the table's defaults."""
    from taskdml.parallel.engine import _options

    orders = [list(inspect.signature(search).parameters) for search in SEARCHES]
    shared = [name for name in orders[0] if all(name in order for order in orders)]
    for order in orders:
        assert [name for name in order if name in shared] == shared
    assert shared[:2] == ["estimator", "param_distributions"]
    engine = list(_options.names("adaptive"))
    assert shared[shared.index("strategy") :][: len(engine)] == engine
    for search in SEARCHES:
        parameters = inspect.signature(search).parameters
        for name, default in _options.defaults("adaptive").items():
            assert parameters[name].default == default, (search.__name__, name)


@pytest.mark.parametrize("search_class", SEARCHES)
def test_the_engines_options_are_parameters_set_params_reaches(search_class):
    """strategy, sync_every, ... are constructor parameters: get_params, set_params and clone
    see them (they were a parallel dict before 0.2)."""
    search = search_class(SGDClassifier(), SPACE).set_params(strategy="sync", sync_every=2)
    assert clone(search).get_params()["strategy"] == "sync"
    assert clone(search).get_params()["sync_every"] == 2


def test_the_deprecated_names_warn_and_still_run(data):
    """n_iter (RandomizedSearchCV's name, no halving search's) and the parallel dict work for
    one more release, with a FutureWarning that names the replacement: the same search."""
    params = {k: v for k, v in SAMPLED.items() if k != "n_trials"}
    with pytest.warns(FutureWarning, match=r"ASHASearchCV\(n_iter=\) .* write n_trials="):
        old = _run(ASHASearchCV, data, n_iter=6, **params)
    _assert_same_search(old, _run(ASHASearchCV, data, **SAMPLED))
    _assert_documented(old)
    with pytest.warns(FutureWarning, match=r"SuccessiveHalvingSearchCV\(parallel=...\) is dep"):
        old = _run(SuccessiveHalvingSearchCV, data, parallel={"shuffle": False}, **SAMPLED)
    _assert_same_search(old, _run(SuccessiveHalvingSearchCV, data, shuffle=False, **SAMPLED))
    _assert_documented(old)


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
            SuccessiveHalvingSearchCV(SGDClassifier(), SPACE, n_trials=5, n_candidates=6),
            r"n_trials=5 and n_candidates=6 \(scikit-learn's name\) set the same parameter, "
            r"n_trials; give it once",
        ),
        (
            ASHASearchCV(SGDClassifier(), SPACE, aggressiveness=2, factor=3),
            r"aggressiveness=2 \(dask-ml's name\) and factor=3 \(scikit-learn's name\) "
            r"set the same parameter, reduction_factor",
        ),
        (
            HyperbandSearchCV(SGDClassifier(), SPACE, parameters=SPACE),
            r"param_distributions=.* and parameters=.* \(dask-ml's name\) set the same "
            r"parameter, param_distributions",
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
            r"no parameter space; pass param_distributions \(or parameters\)",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_alias_errors_name_what_was_given(search, message):
    """A parameter given twice, or a bad value under an alias, fails at fit naming the alias."""
    with pytest.raises(ValueError, match=message):
        search.fit(*make_classification(60, 4, random_state=0))
