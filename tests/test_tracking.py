"""MLflow tracking: a run logged to a real `mlflow server` (SQLite backend) and to a local
folder, read back through MLflow's own client; bad tracking URIs exit 2 before any step."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("mlflow")

from cli.main import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
SMALL = ["params.n_samples=2000", "params.chunk_size=500"]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 with a SQLite backend, started when the module's
    first test starts (it boots while that test runs) and stopped by its process group."""
    folder = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
        "--artifacts-destination", str(folder / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(folder / "server.log", "wb")  # noqa: SIM115  (closed after the server)
    server = subprocess.Popen(
        command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    uri = f"http://127.0.0.1:{port}"

    def ready(timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=1) as answer:
                    if answer.status == 200:
                        return uri
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(
                        f"mlflow server did not answer: {(folder / 'server.log').read_text()}"
                    ) from None
            time.sleep(0.1)

    yield ready
    os.killpg(server.pid, signal.SIGKILL)  # the server and the uvicorn process it started
    server.wait()
    log.close()


@pytest.mark.parametrize(
    "where, message",
    [
        ("http://127.0.0.1:9", "does not answer"),  # the discard port: nothing listens
        ("mlruns", "sqlite:///"),  # MLflow 3 refuses a folder store unless asked to allow it
    ],
)
def test_unusable_tracking_uri_exits_2(mlflow_server, where, message, tmp_path):
    """A tracking server that does not answer, or a store MLflow refuses, is a usage error
    (exit 2) that names the URI and what to do, with no run directory written. (Its first
    parameter boots the module's server meanwhile.)"""
    track = where if where.startswith("http") else (tmp_path / where).as_uri()
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        cli, ["run", str(QUICKSTART), *SMALL, "--run-dir", str(runs), "--track", track]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and track in result.output
    assert "Traceback" not in result.output and not runs.exists()


def test_run_tracked_on_an_mlflow_server(mlflow_server, cluster, tmp_path):
    """`taskdml run --track http://...` against a real server: params, per-step metrics, the
    training's history per epoch, report.html and pictures as artifacts; the logged model
    loads with mlflow.sklearn.load_model and predicts what the run's own saved model
    predicts; `taskdml resume` continues the same MLflow run."""
    import mlflow
    import mlflow.sklearn

    from taskdml.runs._directory import load_model

    uri = mlflow_server()
    result = CliRunner().invoke(
        cli,
        ["run", str(QUICKSTART), *SMALL, "--scheduler", cluster.scheduler_address,
         "--run-dir", str(tmp_path), "--track", uri, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    run_dir = Path(summary["run_dir"])
    tracked = json.loads((run_dir / "manifest.json").read_text())["mlflow"]
    reader = mlflow.MlflowClient(uri)
    logged = reader.get_run(tracked["run_id"])
    assert logged.data.params["model.fit"] == "sklearn.linear_model:SGDClassifier"
    assert logged.data.params["model.parallel.strategy"] == "sync"
    for name, value in summary["metrics"]["report"].items():
        assert logged.data.metrics[f"report.{name}"] == value
    history = json.loads((run_dir / "manifest.json").read_text())["steps"]["model"]["training"]
    losses = reader.get_metric_history(tracked["run_id"], "model.train_loss")
    assert [(m.step, m.value) for m in losses] == [
        (epoch["epoch"], epoch["train_loss"]) for epoch in history["history"]
    ]
    artifacts = {a.path for a in reader.list_artifacts(tracked["run_id"])}
    assert {"report.html", "dag.png", "training-model.png", "models"} <= artifacts

    mlflow.set_tracking_uri(uri)
    model_uri = f"runs:/{tracked['run_id']}/models/model"
    logged_model = mlflow.sklearn.load_model(model_uri)
    own = load_model(run_dir, "model")
    rows = np.random.default_rng(0).normal(size=(50, 20))
    np.testing.assert_array_equal(logged_model.predict(rows), own.predict(rows))
    np.testing.assert_array_equal(logged_model.coef_, own.coef_)
    signature = mlflow.models.get_model_info(model_uri).signature
    assert list(signature.inputs.to_dict()[0]["tensor-spec"]["shape"]) == [-1, 20]

    resumed = CliRunner().invoke(
        cli, ["resume", str(run_dir), "--scheduler", cluster.scheduler_address]
    )  # no --track: the manifest's MLflow run is continued
    assert resumed.exit_code == 0, resumed.output
    runs = reader.search_runs([tracked["experiment_id"]])
    assert [r.info.run_id for r in runs] == [tracked["run_id"]]
    assert runs[0].info.status == "FINISHED"
    assert len(reader.get_metric_history(tracked["run_id"], "model.train_loss")) == len(losses)
