"""``search:`` steps with method halving and hyperband, through run_pipeline on a real cluster.

The reference is the search class the step names, fitted directly on the same data with the
same settings, and scikit-learn's own estimator fitted in memory with the best parameters.
"""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import loguniform
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier

from taskdml import loads_pipeline, run_pipeline
from taskdml.datasets import load_sklearn
from taskdml.model_selection import HyperbandSearchCV, SuccessiveHalvingSearchCV

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

SEARCH = """\
taskdml: 1
name: search_METHOD
steps:
  data:
    call: taskdml.datasets:load_sklearn
    with: {name: digits, chunk_size: 300}
  tune:
    search: sklearn.linear_model:SGDClassifier
    method: METHOD
    with: {random_state: 0}
    space: {alpha: {loguniform: [1.0e-5, 1.0e-1]}}
    budget: BUDGET
    cv: 3
    parallel: {random_state: 0}
    inputs: {data: data}
  report:
    evaluate: [accuracy]
    inputs: {model: tune.best_model, data: data}
"""

CASES = {
    "halving": (
        "{trials: 6, max_epochs: 3, min_epochs: 1, reduction_factor: 3}",
        lambda: SuccessiveHalvingSearchCV(
            SGDClassifier(random_state=0),
            {"alpha": loguniform(1e-5, 1e-1)},
            n_trials=6,
            max_epochs=3,
            min_epochs=1,
            reduction_factor=3,
            cv=3,
            random_state=0,
        ),
    ),
    "hyperband": (
        "{max_epochs: 3, reduction_factor: 3}",
        lambda: HyperbandSearchCV(
            SGDClassifier(random_state=0),
            {"alpha": loguniform(1e-5, 1e-1)},
            max_iter=3,
            aggressiveness=3,
            cv=3,
            random_state=0,
        ),
    ),
}


@pytest.mark.parametrize("method", list(CASES))
def test_search_step_equals_the_search_class_and_scikit_learn(client, tmp_path, method):
    """A halving/hyperband step gives the direct search's trials and best model, and the best
    model scores within 5 points of scikit-learn's SGDClassifier fitted in memory."""
    budget, make_search = CASES[method]
    text = SEARCH.replace("METHOD", method).replace("BUDGET", budget)
    run = run_pipeline(loads_pipeline(text), client, run_root=tmp_path)

    data = load_sklearn("digits", chunk_size=300)
    direct = make_search().fit(data.X.data, data.y.data)
    trials = pd.read_csv(run.path / "trials-tune.csv")
    assert len(trials) == len(direct.trials_) == direct.n_trials_
    np.testing.assert_allclose(
        np.sort(trials["score"].dropna()), np.sort(direct.trials_["score"].dropna()), rtol=1e-12
    )
    assert run.outputs["tune"]["best_params"] == pytest.approx(direct.best_params_, rel=1e-12)
    if method == "halving":  # halving keeps fewer trials at each rung: budgets really differ
        assert trials["budget"].nunique() > 1

    X, y = load_digits(return_X_y=True)
    step_accuracy = run.metrics["report"]["accuracy"]
    assert step_accuracy == pytest.approx(run.outputs["tune"]["best_model"].score(X, y))
    in_memory = SGDClassifier(random_state=0, **direct.best_params_).fit(X, y).score(X, y)
    assert abs(step_accuracy - in_memory) <= 0.05, (step_accuracy, in_memory)
