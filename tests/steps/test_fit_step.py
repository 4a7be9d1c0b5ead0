"""``fit:`` steps: estimator classes and factories that return a Pipeline, on tables."""

import numpy as np
import pandas as pd
import pytest

from taskdml import PipelineError, loads_pipeline, run_pipeline

FILE = """
taskdml: 1
name: tabular
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
  model:
    fit: pipeline_functions:build_pipeline
    with: {{categorical: [grade], numeric: [a, b]{extra}}}
    parallel: {{epochs: 3, sync_every: 1, random_state: 0}}
    inputs: {{data: split.train}}
  report:
    evaluate: [accuracy, roc_auc]
    inputs: {{model: model, data: split.test}}
"""


@pytest.fixture
def csv(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 600))
    grade = np.where(a > 0.5, "high", np.where(a < -0.5, "low", "mid"))
    frame = pd.DataFrame({"a": a, "b": b, "grade": grade, "label": (a + b > 0).astype(int)})
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_a_factory_fits_a_pipeline_on_a_table(csv, client, tmp_path):
    """`fit:` may name a function that returns a Pipeline; it trains on a CSV table and is
    evaluated on the test table chunk by chunk; its encoder and scaler, fitted chunk-wise,
    are scikit-learn's fitted in memory on the same train rows."""
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    from taskdml.datasets import read_csv, train_test_split

    path, frame = csv
    pipeline = loads_pipeline(FILE.format(path=path, extra=""))
    run = run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    model = run.outputs["model"]["model"]
    assert type(model).__name__ == "Pipeline"
    encoder = model[0].named_transformers_["cat"]
    assert encoder.categories_[0].tolist() == ["high", "low", "mid"]
    table = read_csv(path, target="label", categorical=["grade"], blocksize=4000)
    train, _ = train_test_split(table, test_size=0.25, random_state=0)
    rows = train.drop_vars("y").compute().to_dataframe().reset_index(drop=True)
    categories = OneHotEncoder().fit(rows[["grade"]].astype(object)).categories_
    assert [c.tolist() for c in encoder.categories_] == [c.tolist() for c in categories]
    scaler = StandardScaler().fit(rows[["a", "b"]])
    np.testing.assert_allclose(model[0].named_transformers_["num"].mean_, scaler.mean_)
    np.testing.assert_allclose(model[0].named_transformers_["num"].var_, scaler.var_)
    accuracy = (model.predict(frame[["a", "b", "grade"]]) == frame.label).mean()
    assert accuracy > 0.9
    report = run.outputs["report"]["metrics"]
    assert report["accuracy"] > 0.9 and report["roc_auc"] > 0.95, report


def test_factory_arguments_are_checked(csv):
    """A factory's unknown argument is named with its accepted ones."""
    path, _ = csv
    with pytest.raises(PipelineError, match=r"takes no argument 'alhpa'.*Did you mean 'alpha'"):
        loads_pipeline(FILE.format(path=path, extra=", alhpa: 0.1"))
