"""``search:`` steps over a factory's Pipeline on a table read from a CSV."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import loguniform
from sklearn import model_selection as sk

from taskdml import PipelineError, loads_pipeline, run_pipeline
from taskdml.datasets import read_csv, train_test_split
from taskdml.exceptions import StepFailed

FILE = """
taskdml: 1
name: tabular_search
imports: {{allow: ["taskdml.*", "sklearn.*", "pipeline_functions"]}}
steps:
  data:
    call: taskdml.datasets:read_csv
    with: {{path: "{path}", target: label, categorical: [grade], blocksize: 4000}}
  split:
    call: taskdml.datasets:train_test_split
    with: {{test_size: 0.25, random_state: 0}}
    inputs: {{data: data}}
    outputs: [train, test]
  tune:
    search: pipeline_functions:build_pipeline
    with: {{categorical: [grade], numeric: [a, b]}}
    {search}
    cv: 3
    parallel: {{random_state: 0}}
    inputs: {{data: split.train{extra}}}
  report:
    evaluate: [accuracy]
    inputs: {{model: tune.best_model, data: split.test}}
"""

GRID = "method: grid\n    space: {sgdclassifier__alpha: [1.0e-4, 1.0e-3, 1.0e-2]}"
RANDOM = (
    "method: random\n    space: {sgdclassifier__alpha: {loguniform: [1.0e-5, 1.0e-1]}}\n"
    "    budget: {trials: 3}"
)


@pytest.fixture
def csv(tmp_path):
    """A CSV of 400 rows: two numeric columns, a grade, a label."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 400))
    grade = np.where(a > 0.5, "high", np.where(a < -0.5, "low", "mid"))
    label = (a + b + rng.normal(scale=0.5, size=400) > 0).astype(int)
    path = tmp_path / "table.csv"
    pd.DataFrame({"a": a, "b": b, "grade": grade, "label": label}).to_csv(path, index=False)
    return path


def _train_frame(path):
    """The pipeline's training split, computed, as scikit-learn's input."""
    data = read_csv(path, target="label", categorical=["grade"], blocksize=4000)
    train, _ = train_test_split(data, test_size=0.25, random_state=0)
    frame = train.compute().drop_vars("y").to_dataframe().reset_index(drop=True)
    frame["grade"] = frame["grade"].astype(object)
    return frame, train["y"].values


@pytest.mark.parametrize(
    "search, reference",
    [
        (GRID, lambda p: sk.GridSearchCV(p, {"sgdclassifier__alpha": [1e-4, 1e-3, 1e-2]}, cv=3)),
        (
            RANDOM,
            lambda p: sk.RandomizedSearchCV(
                p,
                {"sgdclassifier__alpha": loguniform(1e-5, 1e-1)},
                n_iter=3,
                cv=3,
                random_state=0,
            ),
        ),
    ],
    ids=["grid", "random"],
)
def test_a_search_step_tunes_a_factory_pipeline_on_a_table(
    csv, client, tmp_path, search, reference
):
    """A grid or random `search:` step over a factory's Pipeline on a table finds
    scikit-learn's best parameters and mean scores on the same training rows."""
    from pipeline_functions import build_pipeline

    pipeline = loads_pipeline(FILE.format(path=csv, search=search, extra=""))
    run = run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    tune = run.outputs["tune"]
    X, y = _train_frame(csv)
    theirs = reference(build_pipeline(["grade"], ["a", "b"])).fit(X, y)
    assert tune["best_params"] == theirs.best_params_
    assert type(tune["best_model"]).__name__ == "Pipeline"
    np.testing.assert_array_equal(
        tune["trials"]["score"].to_numpy(), theirs.cv_results_["mean_test_score"]
    )
    assert run.outputs["report"]["metrics"]["accuracy"] > 0.85


def test_a_search_steps_space_names_the_pipelines_parameters(csv):
    """A mistyped Pipeline parameter in `space:` is named with a "did you mean"."""
    search = GRID.replace("alpha", "alhpa")
    with pytest.raises(
        PipelineError,
        match=r"takes no parameter 'sgdclassifier__alhpa'\. Did you mean 'sgdclassifier__alpha'",
    ):
        loads_pipeline(FILE.format(path=csv, search=search, extra=""))


def test_an_adaptive_search_step_refuses_a_table(csv, client, tmp_path):
    """An asha step on a table fails with what to use instead."""
    search = (
        "method: asha\n    space: {sgdclassifier__alpha: {loguniform: [1.0e-5, 1.0e-1]}}\n"
        "    budget: {trials: 2, max_epochs: 2}"
    )
    pipeline = loads_pipeline(FILE.format(path=csv, search=search, extra=""))
    with pytest.raises(
        StepFailed,
        match=r"step 'tune' failed: ASHASearchCV trains its trials incrementally.*"
        r"\(method: grid or random in a search step\)",
    ):
        run_pipeline(pipeline, client, record=False)


def test_a_preprocess_input_is_refused_on_a_table(csv, client, tmp_path):
    """A `preprocess` input to a search on a table is refused: the Pipeline encodes."""
    file = FILE.format(path=csv, search=GRID, extra=", preprocess: prep").replace(
        "  tune:", "  prep:\n    call: pipeline_functions:fitted_scaler\n  tune:"
    )
    pipeline = loads_pipeline(file)
    with pytest.raises(
        StepFailed,
        match=r"step 'tune' failed: a 'preprocess' input cannot be applied to a table; put the "
        r"transformers into the Pipeline",
    ):
        run_pipeline(pipeline, client, record=False)
