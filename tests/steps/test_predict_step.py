"""``predict:`` steps and ``taskdml predict``: a fitted model applied chunk by chunk, every row
written once, equal to the model's own method in memory on the same rows."""

import json

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

from taskdml import PipelineError, loads_pipeline, run_pipeline
from taskdml.exceptions import StepFailed

FILE = """
taskdml: 1
name: scoring
imports: {{allow: ["taskdml.*", "sklearn.*", "pipeline_functions"]}}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {{n_samples: 700, n_features: 6, n_informative: 4, chunk_size: 200, random_state: 0}}
  model:
    fit: sklearn.naive_bayes:GaussianNB
    inputs: {{data: data}}
  score:
    predict: {method}
    path: {path}
    inputs: {{model: model, data: data}}
"""


def _read(path):
    """An output read back with pandas/xarray alone: rows by their recorded row number."""
    if str(path).endswith(".zarr"):
        return xr.open_zarr(path, consolidated=False)["prediction"].values
    frame = pd.read_parquet(path) if str(path).endswith(".parquet") else pd.read_csv(path)
    frame = frame.set_index("row") if "row" in frame.columns else frame
    return frame


@pytest.mark.parametrize(
    "method, suffix",
    [("predict", "parquet"), ("predict_proba", "csv"), ("predict_proba", "zarr")],
)
def test_predictions_written_once_equal_the_models_own(method, suffix, client, tmp_path):
    """A fit step's model applied by a predict step: the lazy output and the file read back
    hold every row once, in order, equal to the fitted GaussianNB's own method on the rows
    in memory (and to scikit-learn's GaussianNB fitted here on the same rows)."""
    from sklearn.naive_bayes import GaussianNB

    out = tmp_path / f"scores.{suffix}"
    pipeline = loads_pipeline(FILE.format(method=method, path=out))
    run = run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    data = run.outputs["data"]["result"].compute()
    X, y = data["X"].values, data["y"].values
    reference = getattr(GaussianNB().fit(X, y), method)(X)
    model = run.outputs["model"]["model"]
    np.testing.assert_allclose(getattr(model, method)(X), reference, rtol=1e-10)
    lazy = run.outputs["score"]["predictions"]["prediction"]
    assert lazy.data.chunks[0] == (200, 200, 200, 100)
    np.testing.assert_allclose(lazy.values, reference, rtol=1e-10)
    found = _read(out)
    if suffix == "zarr":
        np.testing.assert_allclose(found, reference, rtol=1e-10)
    else:
        assert found.index.tolist() == list(range(len(X)))  # each row once, in order
        np.testing.assert_allclose(found.to_numpy().squeeze(), reference, rtol=1e-10)
    if suffix == "parquet":
        assert sorted(p.name for p in out.iterdir()) == [f"part-{i:06d}.parquet" for i in range(4)]
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["steps"]["score"]["predictions"]["rows"] == len(X)


TABLE = """
taskdml: 1
name: table_scoring
imports: {{allow: ["taskdml.*", "sklearn.*", "pipeline_functions"]}}
steps:
  data:
    call: taskdml.datasets:read_csv
    with: {{path: "{csv}", target: label, categorical: [grade], blocksize: 4000}}
  model:
    fit: pipeline_functions:build_pipeline
    with: {{categorical: [grade], numeric: [a, b]}}
    parallel: {{epochs: 3, sync_every: 1, random_state: 0}}
    inputs: {{data: data}}
  score:
    predict: decision_function
    inputs: {{model: model, data: data}}
"""


def test_a_pipeline_model_applies_its_own_preprocessing_to_a_table(client, tmp_path):
    """A Pipeline (one-hot encoder and scaler, then SGD) fitted on a CSV table scores each
    partition of the table as a pandas DataFrame: equal to the Pipeline's decision_function
    on the whole table read by pandas, row for row, in the file's order."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 600))
    grade = np.where(a > 0.5, "high", np.where(a < -0.5, "low", "mid"))
    frame = pd.DataFrame({"a": a, "b": b, "grade": grade, "label": (a + b > 0).astype(int)})
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    run = run_pipeline(loads_pipeline(TABLE.format(csv=path)), client, run_root=tmp_path / "r")
    model = run.outputs["model"]["model"]
    assert type(model).__name__ == "Pipeline"
    lazy = run.outputs["score"]["predictions"]["prediction"]
    assert len(lazy.data.chunks[0]) > 1
    expected = model.decision_function(pd.read_csv(path)[["a", "b", "grade"]])
    np.testing.assert_allclose(lazy.values, expected, rtol=1e-10)


SAVED = """
taskdml: 1
name: from_a_run
imports: {{trust: {trust}}}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {{n_samples: 700, n_features: 6, n_informative: 4, chunk_size: 200, random_state: 1}}
  score:
    predict: {method}
    model: {{run: "{run}", step: {step}}}
    inputs: {{data: data}}
"""


def test_a_recorded_runs_model_and_the_command_line(client, tmp_path):
    """A recorded run's saved model (loaded with skops) scores new rows in a pipeline and
    through `taskdml predict RUN DATA --out` on the same cluster; both equal the saved model
    loaded and applied in memory; the Parquet output holds each row once."""
    from cli.main import cli
    from taskdml.datasets import make_classification, write_zarr
    from taskdml.runs import load_model

    first = run_pipeline(
        loads_pipeline(FILE.format(method="predict", path=tmp_path / "a.parquet")),
        client,
        run_root=tmp_path / "runs",
    )
    saved = load_model(first.path, "model")
    pipeline = loads_pipeline(SAVED.format(trust="false", method="predict_proba",
                                           run=first.path, step="model"))  # fmt: skip
    run = run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    X = run.outputs["data"]["result"]["X"].values
    np.testing.assert_allclose(
        run.outputs["score"]["predictions"]["prediction"].values, saved.predict_proba(X)
    )
    store = tmp_path / "new.zarr"
    write_zarr(make_classification(500, 6, n_informative=4, chunk_size=150, random_state=2), store)
    out = tmp_path / "cli.parquet"
    result = CliRunner().invoke(
        cli,
        ["predict", str(first.path), str(store), "--out", str(out), "--step", "model",
         "--scheduler", client.scheduler.address, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"] == 500
    found = _read(out)
    assert found.index.tolist() == list(range(500))
    X_new = xr.open_zarr(store, consolidated=False)["X"].values
    np.testing.assert_array_equal(found["prediction"].to_numpy(), saved.predict(X_new))


def test_bad_predict_steps_say_where_and_what(client, tmp_path):
    """Unknown output suffix, unknown method, a method the model lacks, an unknown step of a
    recorded run, and a model given twice: each error names file:line and the key."""
    with pytest.raises(PipelineError) as error:
        loads_pipeline(FILE.format(method="predict", path=tmp_path / "out.txt"))
    assert "<string>:14:" in str(error.value) and "steps.score.path" in str(error.value)
    assert "a path ending in .parquet, .zarr or .csv" in str(error.value)
    with pytest.raises(PipelineError) as error:
        loads_pipeline(FILE.format(method="predict_probba", path=tmp_path / "o.csv"))
    assert "steps.score.predict" in str(error.value) and "Did you mean 'predict_proba'" in str(
        error.value
    )
    both = FILE.format(method="predict", path=tmp_path / "o.csv") + (
        "    model: {run: latest, step: model}\n"
    )
    with pytest.raises(PipelineError, match="not both"):
        loads_pipeline(both)
    lacks = FILE.format(method="transform", path=tmp_path / "o.csv")
    with pytest.raises(StepFailed) as error:
        run_pipeline(loads_pipeline(lacks), client, run_root=tmp_path / "runs")
    assert "<string>:13:" in str(error.value) and "steps.score.predict" in str(error.value)
    assert "has no method 'transform'; it has predict, predict_proba" in str(error.value)
    first = next((tmp_path / "runs").iterdir())
    unknown = SAVED.format(trust="false", method="predict", run=first, step="modle")
    with pytest.raises(StepFailed) as error:
        run_pipeline(loads_pipeline(unknown), client, run_root=tmp_path / "runs")
    assert "<string>:11:" in str(error.value) and "steps.score.model" in str(error.value)
    assert "no model of step 'modle'" in str(error.value)
