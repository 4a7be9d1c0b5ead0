"""The tabular example: a CSV with a categorical column and missing values, a scikit-learn
Pipeline built by the project's factory, fitted chunk-wise and data-parallel."""

import sys
from pathlib import Path

from taskdml import load_pipeline, run_pipeline
from taskdml.datasets import read_csv, train_test_split

PROJECT = Path(__file__).resolve().parents[1] / "pipelines" / "tabular"


def _frame(dataset):
    """A computed table as scikit-learn's input: a DataFrame of the features, and y."""
    frame = dataset.drop_vars("y").to_dataframe().reset_index(drop=True)
    frame["grade"] = frame["grade"].astype(object)
    return frame, dataset["y"].values


def test_tabular_pipeline_is_within_a_point_of_scikit_learn(client, monkeypatch):
    """The example's accuracy is within 1 pp of the same Pipeline fitted in memory by
    scikit-learn on the same split for the same epochs."""
    run = run_pipeline(load_pipeline(PROJECT / "pipeline.yaml"), client=client, record=False)
    ours = run.metrics["report"]["accuracy"]
    monkeypatch.syspath_prepend(str(PROJECT))  # the project's package, as the runner finds it
    from tumours.models import build_pipeline

    data = read_csv(PROJECT / "data" / "tumours.csv", target="malignant", categorical=["grade"])
    train, test = train_test_split(data, test_size=0.25, random_state=0)
    (X_train, y_train), (X_test, y_test) = _frame(train.compute()), _frame(test.compute())
    model = build_pipeline(alpha=1e-3, random_state=0)
    model.set_params(sgdclassifier__max_iter=10, sgdclassifier__tol=None)
    theirs = model.fit(X_train, y_train).score(X_test, y_test)
    assert abs(ours - theirs) <= 0.01, (ours, theirs)
    sys.modules.pop("tumours.models", None)
    sys.modules.pop("tumours", None)
