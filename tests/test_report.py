"""A run's pictures, its report.html, and `taskdml runs show` / `runs compare`."""

import json
import re
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner
from sklearn.metrics import confusion_matrix

from cli.main import cli
from taskdml import ReportWarning, StepFailed, load_pipeline, loads_pipeline, run_pipeline
from taskdml.metrics import evaluate_graph
from taskdml.runs._report import write_report

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["n_samples=20000", "chunk_size=5000"]

REGRESSION = """\
taskdml: 1
name: regression_small
steps:
  data:
    call: taskdml.datasets:make_regression
    with: {n_samples: 6000, n_features: 5, noise: 10.0, chunk_size: 1500, random_state: 0}
  model:
    fit: sklearn.linear_model:LinearRegression
    inputs: {data: data}
  check:
    evaluate: [r2, mae]
    inputs: {model: model, data: data}
"""

FAILS = """\
taskdml: 1
name: fails_late
imports: {allow: [taskdml.*, pipeline_functions]}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 2000, n_features: 4, chunk_size: 1000, random_state: 0}
  boom:
    call: pipeline_functions:fail
    with: {message: disk full}
  after:
    call: pipeline_functions:add
    inputs: {a: boom}
    with: {b: 1}
"""


def _quickstart(client, root, epochs):
    pipeline = load_pipeline(ROOT / "pipelines" / "quickstart.yaml", [*SMALL, f"epochs={epochs}"])
    return run_pipeline(pipeline, client, run_root=root)


def _quickstart_test_rows(seed=0):
    """The test rows of quickstart with SMALL, made here."""
    from taskdml import datasets

    data = datasets.make_classification(
        n_samples=20_000, n_features=20, n_informative=10, chunk_size=5_000, random_state=seed
    )
    _, test = datasets.train_test_split(data, test_size=0.2, random_state=seed)
    test = test.compute()
    return test["X"].values, test["y"].values


def _is_png(path):
    import matplotlib.image

    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and matplotlib.image.imread(path).ndim == 3


@pytest.mark.slow
def test_run_writes_pictures_and_a_self_contained_report(client, tmp_path):
    """A run leaves the DAG, training and evaluation pictures (valid PNGs, listed in the
    manifest) and a report.html that holds the steps, the metrics and every picture inline,
    with no external link; its confusion matrix is the saved model's on the test rows."""
    run = _quickstart(client, tmp_path, epochs=1)
    manifest = json.loads((run.path / "manifest.json").read_text())
    expected = {"dag.png", "training-scale.png", "training-model.png", "evaluation-report.png"}
    assert set(manifest["pictures"]) == expected
    assert all(_is_png(run.path / path) for path in manifest["pictures"].values())
    counts = np.asarray(manifest["steps"]["report"]["diagnostics"]["counts"])
    assert counts.sum() == manifest["steps"]["split"]["summary"]["test"]["n_samples"]
    assert np.trace(counts) / counts.sum() == pytest.approx(run.metrics["report"]["accuracy"])
    X_test, y_test = _quickstart_test_rows()
    predicted = run.model("model").predict(run.model("scale").transform(X_test))
    np.testing.assert_array_equal(counts, confusion_matrix(y_test, predicted))

    page = (run.path / manifest["report"]).read_text()
    for step in ("data", "split", "scale", "model", "report"):
        assert f"<b>{step}</b>" in page
    assert f"{run.metrics['report']['accuracy']:.4f}" in page and "roc_auc" in page
    assert page.count("src='data:image/png;base64,") == len(expected)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<script" not in page and "<link" not in page
    assert run.run_id in page and "succeeded" in page and "n_samples" in page


@pytest.mark.slow
def test_regressor_gets_a_residual_plot(client, tmp_path):
    """An evaluate step of a regressor records a bounded residual sample and draws it: the
    model is scikit-learn's LinearRegression on the same rows, its r2 and mae are
    scikit-learn's, and each sampled pair is one row's prediction and ``y - prediction``."""
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import mean_absolute_error, r2_score

    from taskdml import datasets

    run = run_pipeline(loads_pipeline(REGRESSION), client, run_root=tmp_path)
    found = json.loads((run.path / "manifest.json").read_text())["steps"]["check"]["diagnostics"]
    assert found["kind"] == "residuals" and found["n_samples"] == 6000
    assert len(found["prediction"]) == len(found["residual"]) == 2000
    assert _is_png(run.path / "evaluation-check.png")
    data = datasets.make_regression(
        n_samples=6000, n_features=5, noise=10.0, chunk_size=1500, random_state=0
    ).compute()
    X, y = data["X"].values, data["y"].values
    reference = LinearRegression().fit(X, y)
    np.testing.assert_allclose(run.model("model").coef_, reference.coef_, rtol=1e-9)
    predicted = reference.predict(X)
    assert run.metrics["check"]["r2"] == pytest.approx(r2_score(y, predicted), rel=1e-9)
    assert run.metrics["check"]["mae"] == pytest.approx(mean_absolute_error(y, predicted), rel=1e-9)
    # each sampled pair is one row's prediction and residual (the row whose pair of
    # scikit-learn's is nearest), written to 6 significant digits; 2000 distinct rows
    sampled, residuals = np.asarray(found["prediction"]), np.asarray(found["residual"])
    distance = np.abs(sampled[:, None] - predicted) + np.abs(residuals[:, None] - (y - predicted))
    rows = distance.argmin(axis=1)
    assert len(set(rows.tolist())) == 2000
    np.testing.assert_allclose(sampled, predicted[rows], rtol=1e-5)
    np.testing.assert_allclose(residuals, y[rows] - predicted[rows], rtol=1e-5)


@pytest.mark.slow
def test_failed_run_still_gets_its_pictures_and_report(client, tmp_path):
    """A run with a failed step still draws what finished: the DAG shows the failure."""
    with pytest.raises(StepFailed) as raised:
        run_pipeline(loads_pipeline(FAILS), client, run_root=tmp_path)
    folder = Path(raised.value.run_dir)
    assert _is_png(folder / "dag.png")
    page = (folder / "report.html").read_text()
    assert "RuntimeError: disk full" in page and "skipped" in page and "failed" in page


def test_report_of_unreadable_records_warns_instead_of_failing(tmp_path):
    """With on_error='warn', records that cannot be drawn give a ReportWarning that says how
    to write the report again, not an exception."""
    broken = {"kind": "confusion", "labels": [0, 1], "counts": "not counts"}
    steps = {"report": {"kind": "evaluate", "state": "completed", "diagnostics": broken}}
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "x", "steps": steps}))
    with pytest.warns(ReportWarning, match=r"were not written: .*taskdml.write_report\("):
        assert write_report(tmp_path, on_error="warn") is None
    with pytest.raises(ValueError):
        write_report(tmp_path)


@pytest.mark.parametrize("chunks", [700, 1234, 5000])
def test_diagnostics_do_not_depend_on_chunking(chunks):
    """The confusion matrix equals scikit-learn's and the residual sample is the same rows
    for any chunking (each row's priority comes from its row number)."""
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.metrics import confusion_matrix

    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 3))
    y = X @ [1.0, 2.0, 3.0] + rng.normal(size=5000)
    labels = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)

    def data(target):
        return xr.Dataset(
            {
                "X": (("sample", "feature"), da.from_array(X, chunks=(chunks, 3))),
                "y": ("sample", da.from_array(target, chunks=chunks)),
            }
        )

    classifier = LogisticRegression().fit(X, labels)
    graph = evaluate_graph(classifier, data(labels), ["accuracy"], diagnostics=True)
    _, found = dask.compute(graph, scheduler="sync")[0]
    assert found["counts"] == confusion_matrix(labels, classifier.predict(X)).tolist()
    regressor = LinearRegression().fit(X, y)
    graph = evaluate_graph(regressor, data(y), ["r2"], diagnostics=True, max_residuals=50)
    _, found = dask.compute(graph, scheduler="sync")[0]
    reference = evaluate_graph(
        regressor, data(y).chunk({"sample": 5000}), ["r2"], diagnostics=True, max_residuals=50
    )
    assert found == dask.compute(reference, scheduler="sync")[0][1]
    assert len(found["prediction"]) == 50 and found["n_samples"] == 5000


@pytest.mark.slow
def test_runs_show_and_compare(client, tmp_path):
    """runs show prints the report's and pictures' paths; runs compare puts both runs' params
    and metrics side by side and marks the parameter that differs; the metrics it shows are
    scikit-learn's accuracy and log loss of each run's saved model on the test rows."""
    from sklearn.metrics import accuracy_score, log_loss

    first, second = _quickstart(client, tmp_path, 1), _quickstart(client, tmp_path, 2)
    runs = str(tmp_path)
    shown = CliRunner().invoke(cli, ["runs", "show", first.run_id, "--run-dir", runs])
    assert shown.exit_code == 0, shown.output
    assert f"report:  {first.path / 'report.html'}" in shown.output
    assert f"picture: {first.path / 'training-model.png'}" in shown.output

    compared = CliRunner().invoke(
        cli, ["runs", "compare", first.run_id, second.run_id, "--run-dir", runs]
    )
    assert compared.exit_code == 0, compared.output
    lines = compared.output.splitlines()
    assert lines[0].split() == [first.run_id, second.run_id]
    assert next(line for line in lines if line.startswith("* epochs")).split() == [
        "*",
        "epochs",
        "1",
        "2",
    ]
    accuracy = next(line for line in lines if line.strip().startswith("report.accuracy")).split()
    assert accuracy[1:] == [
        f"{first.metrics['report']['accuracy']:.4f}",
        f"{second.metrics['report']['accuracy']:.4f}",
    ]
    as_json = json.loads(
        CliRunner()
        .invoke(cli, ["runs", "compare", first.run_id, second.run_id, "--run-dir", runs, "--json"])
        .output
    )
    assert as_json["differ"] == ["epochs"]
    assert as_json["settings"] == {"model.parallel.epochs": [1, 2]}
    assert as_json["metrics"]["report.log_loss"] == [
        first.metrics["report"]["log_loss"],
        second.metrics["report"]["log_loss"],
    ]
    missing = CliRunner().invoke(cli, ["runs", "compare", first.run_id, "nope", "--run-dir", runs])
    assert missing.exit_code == 5 and "no run 'nope'" in missing.output
    X_test, y_test = _quickstart_test_rows()
    for run, column in ((first, 0), (second, 1)):
        model, X_scaled = run.model("model"), run.model("scale").transform(X_test)
        expected = accuracy_score(y_test, model.predict(X_scaled))
        assert run.metrics["report"]["accuracy"] == pytest.approx(expected, rel=1e-12)
        expected = log_loss(y_test, model.predict_proba(X_scaled))
        assert as_json["metrics"]["report.log_loss"][column] == pytest.approx(expected, rel=1e-9)
