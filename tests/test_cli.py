"""The taskdml command: every example pipeline, a real scheduler/worker pair, exit codes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
# Every example: the files in pipelines/ and one per project folder (pipelines/<project>/).
PIPELINES = sorted((ROOT / "pipelines").glob("*.yaml")) + sorted(
    (ROOT / "pipelines").glob("*/pipeline.yaml")
)
TASKDML = str(Path(sys.executable).with_name("taskdml"))
# Examples run with these overrides in the suite (tests/steps/test_parallel_modes.py trains
# the wide model class-sharded), and examples that start their own cluster.
SMALLER = {
    "wide_text": ["n_topics=20", "n_features=8192", "n_documents=4000"],
    "federated": ["rounds=3"],
}
EMBEDDED = {"federated"}
# Subprocesses find tests/pipeline_functions.py, and whatever this process found first.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ),
}


def _quickstart_rows(n_samples, test_size=0.2, seed=0, chunk_size=20_000):
    """The quickstart's train and test rows, made here: ``(X_train, y_train, X_test, y_test)``."""
    from taskdml import datasets

    data = datasets.make_classification(
        n_samples=n_samples, n_features=20, n_informative=10, chunk_size=chunk_size,
        random_state=seed,
    )  # fmt: skip
    train, test = datasets.train_test_split(data, test_size=test_size, random_state=seed)
    train, test = train.compute(), test.compute()
    return train["X"].values, train["y"].values, test["X"].values, test["y"].values


def _in_memory_accuracies(n_samples, test_size, seed, estimator_seeds, **estimator):
    """The quickstart model fitted in memory by scikit-learn on the quickstart's own rows, once
    per seed in *estimator_seeds*: its test accuracies."""
    from sklearn.linear_model import SGDClassifier
    from sklearn.preprocessing import StandardScaler

    X_train, y_train, X_test, y_test = _quickstart_rows(n_samples, test_size, seed)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    return [
        SGDClassifier(**estimator, random_state=estimator_seed)
        .fit(X_train, y_train)
        .score(X_test, y_test)
        for estimator_seed in estimator_seeds
    ]


def _assert_quickstart_run_is_scikit_learns(run_dir, n_samples):
    """A quickstart run's scaler is scikit-learn's StandardScaler fitted in memory on the same
    train rows, and its reported accuracy is scikit-learn's accuracy of its model on the test
    rows so scaled."""
    from sklearn.metrics import accuracy_score
    from sklearn.preprocessing import StandardScaler

    from taskdml.runs._directory import load_model

    X_train, _, X_test, y_test = _quickstart_rows(n_samples)
    reference = StandardScaler().fit(X_train)
    scaler = load_model(run_dir, "scale")
    np.testing.assert_allclose(scaler.mean_, reference.mean_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scaler.var_, reference.var_, rtol=1e-10)
    model = load_model(run_dir, "model")
    expected = accuracy_score(y_test, model.predict(reference.transform(X_test)))
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    assert metrics["report"]["accuracy"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", PIPELINES, ids=[p.parent.name if p.stem == "pipeline" else p.stem for p in PIPELINES]
)
def test_every_example_pipeline_runs(path, cluster, tmp_path):
    """Each file in pipelines/ runs to success: on the shared test cluster, smaller where the
    example is sized for a point (wide_text), or on its own embedded cluster where it needs
    workers of its own (federated: a worker per silo). quickstart's scaler and accuracy are
    scikit-learn's on its own rows; graph_features' classifier on graph features beats the
    same classifier on the table alone."""
    where = ["--scheduler", cluster.scheduler_address] if path.stem not in EMBEDDED else []
    result = CliRunner().invoke(
        cli,
        ["run", str(path), *SMALLER.get(path.stem, []), *where, "--run-dir", str(tmp_path),
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["status"] == "succeeded" and summary["metrics"]
    if path.stem == "quickstart":
        _assert_quickstart_run_is_scikit_learns(summary["run_dir"], 200_000)
    if path.stem == "graph_features":  # the graph features beat the accounts' own fields
        assert summary["metrics"]["report"]["accuracy"] > (
            summary["metrics"]["plain_report"]["accuracy"] + 0.1
        )
    if path.stem == "xgboost":
        _assert_xgboost_run_is_xgboosts(summary)


def _assert_xgboost_run_is_xgboosts(summary):
    """xgboost.yaml trained with XGBoost's own Dask training on both workers, and scores within
    0.5 points of xgboost.XGBClassifier fitted in memory on the same split; its reported
    accuracy is scikit-learn's of its saved model on the test rows."""
    import xgboost
    from sklearn.metrics import accuracy_score

    from taskdml.runs._directory import load_model

    training = summary["steps"]["model"]["training"]
    assert training["strategy"] == "native" and len(training["stats"]["workers"]) == 2
    X_train, y_train, X_test, y_test = _quickstart_rows(40_000, chunk_size=5_000)
    in_memory = xgboost.XGBClassifier(
        n_estimators=100, max_depth=6, learning_rate=0.3, tree_method="hist", random_state=0
    ).fit(X_train, y_train)
    accuracy = summary["metrics"]["report"]["accuracy"]
    assert abs(accuracy - in_memory.score(X_test, y_test)) <= 0.005
    model = load_model(summary["run_dir"], "model")
    assert type(model) is xgboost.XGBClassifier
    assert accuracy == pytest.approx(accuracy_score(y_test, model.predict(X_test)), rel=1e-12)


@pytest.mark.slow
def test_quickstart_end_to_end_through_the_entry_point(tmp_path):
    """The installed `taskdml` runs quickstart on its own embedded cluster; its scaler and the
    accuracy it reports are scikit-learn's on the same rows; with the dashboard's port held by
    another process it says so in its own line, without distributed's warning."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [
                TASKDML,
                "run",
                str(ROOT / "pipelines" / "quickstart.yaml"),
                "n_samples=40000",
                "chunk_size=10000",
                f"++cluster.dashboard_address='127.0.0.1:{port}'",
                "--workers",
                "2",
                "--run-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    assert "accuracy" in done.stdout and "succeeded" in done.stdout
    (line,) = [line for line in done.stderr.splitlines() if "dashboard: http://127.0.0.1:" in line]
    assert line.startswith("taskdml: running quickstart") and f"(port {port} is taken)" in line
    assert "already in use" not in done.stderr and "UserWarning" not in done.stderr
    (manifest,) = tmp_path.glob("*/manifest.json")
    _assert_quickstart_run_is_scikit_learns(manifest.parent, 40_000)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_same_file_runs_on_a_separate_scheduler(separate_scheduler, tmp_path):
    """quickstart.yaml runs unchanged against `dask scheduler` + `dask worker` via --scheduler."""
    scheduler_and_worker = separate_scheduler
    done = subprocess.run(
        [
            TASKDML,
            "run",
            str(ROOT / "pipelines" / "quickstart.yaml"),
            "n_samples=40000",
            "--scheduler",
            scheduler_and_worker,
            "--run-dir",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    manifest = json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())
    assert manifest["cluster"]["scheduler"] == scheduler_and_worker
    assert manifest["cluster"]["cluster"] == "address"
    # The reference: the same SGDClassifier, 3 epochs, fitted in memory by scikit-learn on the
    # same rows with seeds 0-4 (0.71-0.75 here: three epochs of SGD depend on the seed). The
    # data-parallel fit (2 replicas, model averaging) must score within 2 points of that range.
    reference = _in_memory_accuracies(
        40_000, 0.2, 0, range(5), loss="log_loss", alpha=1e-4, max_iter=3, tol=None
    )
    accuracy = summary["metrics"]["report"]["accuracy"]
    assert min(reference) - 0.02 <= accuracy <= max(reference) + 0.02, (accuracy, reference)


def test_unreachable_scheduler_exits_4(tmp_path):
    """A scheduler that does not answer gives exit 4 and says how to start one (after
    the connect timeout, shortened here through dask's config: what is checked is the exit
    and the message, not how long the client tries)."""
    import dask

    path = ROOT / "pipelines" / "quickstart.yaml"
    address = f"tcp://127.0.0.1:{_free_port()}"
    with dask.config.set({"taskdml.connect-timeout": "1s"}):
        result = CliRunner().invoke(cli, ["run", str(path), "--scheduler", address,
                                          "--run-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 4
    assert (
        "could not connect to the scheduler" in result.output and "dask scheduler" in result.output
    )
    assert "Traceback" not in result.output


def test_failing_step_exits_1_and_points_at_the_run(cluster, tmp_path):
    """A step that raises gives exit 1, the error, and the run directory."""
    path = tmp_path / "fails.yaml"
    path.write_text(
        "taskdml: 1\nname: fails\nimports: {allow: [pipeline_functions]}\nsteps:\n"
        "  boom:\n    call: pipeline_functions:fail\n    with: {message: disk full}\n"
    )
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(path),
            "--scheduler",
            cluster.scheduler_address,
            "--run-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert result.exit_code == 1
    assert "step 'boom' failed: RuntimeError: disk full" in result.output
    assert "taskdml runs show" in result.output


def test_runs_list_and_show(cluster, tmp_path):
    """runs list shows the run; runs show (by prefix or 'latest') shows its steps and metrics;
    each swept model's recorded balanced accuracy is scikit-learn's on the test rows, scaled
    by the run's scaler, which is scikit-learn's StandardScaler on the train rows."""
    runs = str(tmp_path / "runs")
    CliRunner().invoke(
        cli,
        [
            "run",
            str(ROOT / "pipelines" / "digits_sweep.yaml"),
            "alphas=[0.001]",  # a sweep of two fits, not eight
            "--scheduler",
            cluster.scheduler_address,
            "--run-dir",
            runs,
        ],
    )
    listed = json.loads(
        CliRunner().invoke(cli, ["runs", "list", "--run-dir", runs, "--json"]).output
    )
    assert [entry["status"] for entry in listed] == ["succeeded"]
    shown = CliRunner().invoke(cli, ["runs", "show", listed[0]["run_id"][:12], "--run-dir", runs])
    assert "balanced_accuracy" in shown.output and "sweep" in shown.output
    assert CliRunner().invoke(cli, ["runs", "show", "latest", "--run-dir", runs]).exit_code == 0
    missing = CliRunner().invoke(cli, ["runs", "show", "nope", "--run-dir", runs])
    assert missing.exit_code == 5 and "no run 'nope'" in missing.output
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets
    from taskdml.runs._directory import load_model

    (run_dir,) = (path.parent for path in Path(runs).glob("*/manifest.json"))
    train, test = datasets.train_test_split(
        datasets.load_sklearn("digits", chunk_size=300), test_size=0.25, random_state=0
    )
    train, test = train.compute(), test.compute()
    reference = StandardScaler().fit(train["X"].values)
    np.testing.assert_allclose(load_model(run_dir, "scale").mean_, reference.mean_, atol=1e-12)
    X_test = reference.transform(test["X"].values)
    recorded = json.loads((run_dir / "metrics.json").read_text())["report"]
    assert len(recorded) == 2  # alpha=0.001 with l2 and l1
    for item, metrics in recorded.items():
        predicted = load_model(run_dir, f"sweep[{item}]").predict(X_test)
        expected = balanced_accuracy_score(test["y"].values, predicted)
        assert metrics["balanced_accuracy"] == pytest.approx(expected, rel=1e-12), item


@pytest.mark.slow
def test_interrupt_exits_130_and_keeps_the_ledger(tmp_path):
    """Ctrl-C during a run exits 130 and leaves the manifest marked interrupted.

    SIGINT goes out once the manifest records the step ``wait`` itself as running (every step
    is listed from the start, so the text alone says nothing about which one runs).
    """
    path = tmp_path / "slow.yaml"
    path.write_text(
        "taskdml: 1\nname: slow\nimports: {allow: [pipeline_functions]}\n"
        "cluster: {n_workers: 1}\nsteps:\n  quick:\n    call: pipeline_functions:add\n"
        "    with: {a: 1, b: 2}\n  wait:\n    call: pipeline_functions:wait_and_return\n"
        "    inputs: {value: quick}\n    with: {seconds: 60}\n"
    )
    # as a terminal starts it: SIGINT not ignored, whatever this process inherited (a shell
    # ignores it in the jobs it starts in the background, and the child would inherit that)
    with_sigint = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            with_sigint,
            TASKDML,
            "run",
            str(path),
            "--run-dir",
            str(tmp_path / "runs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, "TASKDML_CACHE_DIR": str(tmp_path / "cache")},
    )
    deadline = time.monotonic() + 180  # a guard against a hang, not a measurement
    manifest = None
    while manifest is None and time.monotonic() < deadline and process.poll() is None:
        for found in (tmp_path / "runs").glob("*/manifest.json"):
            state = json.loads(found.read_text()).get("steps", {}).get("wait", {}).get("state")
            if state == "running":  # manifest.json is replaced atomically: always whole
                manifest = found
        time.sleep(0.1)
    assert manifest is not None, f"the step 'wait' was never recorded as running: {process.stderr}"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    recorded = json.loads(manifest.read_text())
    assert recorded["status"] == "interrupted"
    assert recorded["steps"]["quick"]["state"] == "completed"
    assert recorded["steps"]["wait"]["state"] == "interrupted"
    runs = tmp_path / "runs"
    assert f"continue it with: taskdml resume {recorded['run_id']} --run-dir {runs}" in stderr


FAILS = (
    "taskdml: 1\nname: fails\nimports: {allow: [pipeline_functions]}\nsteps:\n"
    "  fine:\n    call: pipeline_functions:add\n    with: {a: 1, b: 2}\n"
    "  boom:\n    call: pipeline_functions:fail\n    with: {message: disk full}\n"
)


def _fake_run(root, run_id, status="succeeded"):
    """A recorded run written through the library's own RunDirectory."""
    from taskdml.runs._directory import RunDirectory

    directory = RunDirectory(root, run_id=run_id)
    directory.update_manifest(
        pipeline="demo",
        status=status,
        duration_s=1.0,
        steps={"a": {"kind": "call", "state": "completed"}},
    )
    return directory


def test_exit_codes_are_one_table_shared_by_help_readme_and_errors():
    """--help and README print the same exit-code sentence; each error carries its code."""
    from cli.main import EXIT_CODES, EXIT_CODES_TEXT
    from taskdml import ClusterUnavailable, PipelineError, RunNotFound, StepFailed

    def words(text):
        return " ".join(text.split())

    assert EXIT_CODES_TEXT in words(CliRunner().invoke(cli, ["--help"]).output)
    assert EXIT_CODES_TEXT in words((ROOT / "README.md").read_text(encoding="utf-8"))
    codes = {text: code for code, text in EXIT_CODES}
    assert (
        (
            StepFailed.exit_code,
            PipelineError.exit_code,
            ClusterUnavailable.exit_code,
            RunNotFound.exit_code,
        )
        == (
            codes["a step failed (with -m: in any run)"],
            codes["invalid pipeline"],
            codes["cluster unavailable"],
            codes["run not found"],
        )
        == (1, 3, 4, 5)
    )


@pytest.mark.parametrize("command", [["run"], ["runs", "list"], ["runs", "show"]])
def test_run_dir_help_names_the_library_default(command):
    """The --run-dir default named in --help is the folder taskdml.runs._directory really uses."""
    from taskdml.runs._directory import DEFAULT_ROOT

    shown = " ".join(CliRunner().invoke(cli, command + ["--help"]).output.split())
    assert f"[default: {DEFAULT_ROOT}]" in shown


@pytest.mark.parametrize(
    "command", [["run"], ["resume"], ["cache", "list"], ["cache", "clear"], ["cache", "gc"]]
)
def test_cache_dir_help_names_the_library_default(command):
    """The --cache-dir default named in --help is the store taskdml.Cache() really uses."""
    from taskdml.cache._store import DEFAULT_CACHE

    shown = " ".join(CliRunner().invoke(cli, command + ["--help"]).output.split())
    assert f"[default: {DEFAULT_CACHE}; env TASKDML_CACHE_DIR]" in shown


def test_usage_errors_exit_2(tmp_path):
    """A missing argument or an out-of-range option is a usage error: exit 2, nothing runs."""
    missing = CliRunner().invoke(cli, ["run"])
    assert missing.exit_code == 2 and "Missing argument" in missing.output
    path = tmp_path / "p.yaml"
    path.write_text(FAILS)
    zero = CliRunner().invoke(
        cli, ["run", str(path), "--workers", "0", "--run-dir", str(tmp_path / "runs")]
    )
    assert zero.exit_code == 2 and "--workers" in zero.output
    assert not (tmp_path / "runs").exists()


def test_cluster_that_fails_to_start_exits_4(tmp_path):
    """A cluster class that raises while starting gives exit 4, its error, and the fix."""
    path = tmp_path / "p.yaml"
    path.write_text(
        FAILS + "cluster:\n  spec:\n    class: distributed:LocalCluster\n"
        "    kwargs: {n_workers: 1, no_such_option: 1}\n"
    )
    result = CliRunner().invoke(cli, ["run", str(path), "--run-dir", str(tmp_path / "runs")])
    assert result.exit_code == 4, result.output
    assert "could not start LocalCluster(n_workers=1, no_such_option=1)" in result.output
    assert "--scheduler ADDRESS" in result.output and "Traceback" not in result.output


def test_run_not_found_and_ambiguous_prefix_exit_5(tmp_path):
    """An unknown run and a prefix of two runs exit 5, naming the run and `taskdml runs list`."""
    runs = tmp_path / "runs"
    _fake_run(runs, "20260101-000000-aaaaaa")
    _fake_run(runs, "20260101-000000-aabbbb")
    missing = CliRunner().invoke(cli, ["runs", "show", "no-such-run", "--run-dir", str(runs)])
    assert missing.exit_code == 5
    assert "no run 'no-such-run'" in missing.output
    assert f"taskdml runs list --run-dir {runs}" in missing.output
    ambiguous = CliRunner().invoke(
        cli, ["runs", "show", "20260101-000000-aa", "--run-dir", str(runs)]
    )
    assert ambiguous.exit_code == 5
    assert (
        "'20260101-000000-aa' matches 2 runs" in ambiguous.output
        and "20260101-000000-aaaaaa, 20260101-000000-aabbbb" in ambiguous.output
    )
    assert "taskdml runs list" in ambiguous.output
    assert "Traceback" not in missing.output + ambiguous.output


@pytest.mark.parametrize("how", ["flag", "env", "neither"])
def test_verbose_or_full_error_adds_the_traceback(tmp_path, how):
    """-v and TASKDML_FULL_ERROR=1 add the traceback to a user error; without them, none."""
    args = ["runs", "show", "nope", "--run-dir", str(tmp_path)]
    env = {"TASKDML_FULL_ERROR": "1"} if how == "env" else {"TASKDML_FULL_ERROR": None}
    result = CliRunner().invoke(cli, (["-v"] if how == "flag" else []) + args, env=env)
    assert result.exit_code == 5 and "error: no run 'nope'" in result.output
    assert ("Traceback" in result.output) == (how != "neither")
    if how != "neither":
        assert "RunNotFound" in result.output


def test_version_json_gives_the_installed_versions():
    """version --json lists the versions importlib.metadata reports for the stack."""
    import importlib.metadata

    import dask
    import sklearn

    import taskdml

    shown = json.loads(CliRunner().invoke(cli, ["version", "--json"]).output)
    assert shown == taskdml.versions()
    assert shown["taskdml"] == taskdml.__version__ == importlib.metadata.version("taskdml")
    assert shown["dask"] == dask.__version__ and shown["scikit-learn"] == sklearn.__version__


def test_runs_show_json_is_the_recorded_run(tmp_path):
    """runs show --json reports the manifest and metrics files as they are on disk."""
    from taskdml.runs._directory import run_summary

    directory = _fake_run(tmp_path, "20260101-000000-cccccc", status="failed")
    directory.update_step("a", traceback="long text", state="failed", error="RuntimeError: x")
    directory.record_metrics("report", {"accuracy": 0.5})
    shown = json.loads(
        CliRunner()
        .invoke(cli, ["runs", "show", "latest", "--run-dir", str(tmp_path), "--json"])
        .output
    )
    manifest = json.loads((directory.path / "manifest.json").read_text())
    assert shown == run_summary("20260101", tmp_path)
    assert shown["run_id"] == manifest["run_id"] and shown["status"] == "failed"
    assert shown["exit_code"] == 1 and shown["run_dir"] == str(directory.path)
    assert shown["steps"]["a"] == {"kind": "call", "state": "failed", "error": "RuntimeError: x"}
    assert shown["metrics"] == json.loads((directory.path / "metrics.json").read_text())


def test_dry_run_json_prints_the_plan_and_runs_nothing(tmp_path):
    """--dry-run --json gives the resolved pipeline, its order and the cluster; no run dir."""
    path = tmp_path / "p.yaml"
    path.write_text(FAILS)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(path),
            "+a=1",
            "--dry-run",
            "--json",
            "--workers",
            "3",
            "--run-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["dry_run"] is True and shown["pipeline"] == "fails"
    assert shown["plan"]["order"] == ["fine", "boom"]
    assert shown["plan"]["pipeline"]["params"] == {"a": 1}
    assert shown["cluster"] == "embedded LocalCluster on 127.0.0.1 with 3 workers"
    assert not (tmp_path / "runs").exists()


def test_run_json_after_a_failure_reports_the_run(cluster, tmp_path):
    """run --json after a failing step prints the run's JSON on stdout, then exits 1."""
    path = tmp_path / "p.yaml"
    path.write_text(FAILS)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(path),
            "--scheduler",
            cluster.scheduler_address,
            "--run-dir",
            str(tmp_path / "runs"),
            "--json",
        ],
    )
    assert result.exit_code == 1
    shown = json.loads(result.stdout)
    assert shown["status"] == "failed" and shown["exit_code"] == 1
    assert shown["steps"]["fine"]["state"] == "completed"
    assert shown["steps"]["boom"] == {
        **shown["steps"]["boom"],
        "state": "failed",
        "error": "RuntimeError: disk full",
    }
    assert "traceback" not in shown["steps"]["boom"]
    assert Path(shown["run_dir"]).parent == tmp_path / "runs"


def test_no_dashboard_is_said_and_not_linked(tmp_path):
    """A scheduler with its dashboard off gets no link: the run says how to get one."""
    from taskdml.cluster._connect import NO_DASHBOARD

    path = tmp_path / "p.yaml"
    path.write_text(
        FAILS.split("  boom:")[0] + "cluster:\n  spec:\n"
        "    class: distributed:LocalCluster\n"
        "    kwargs: {n_workers: 1, host: 127.0.0.1,\n"
        "             dashboard_address: '127.0.0.1:0',\n"
        "             scheduler_kwargs: {dashboard: false}}\n"
    )
    result = CliRunner().invoke(cli, ["run", str(path), "--run-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert NO_DASHBOARD in result.output and "/status" not in result.output
    manifest = json.loads(next((tmp_path / "runs").glob("*/manifest.json")).read_text())
    assert manifest["cluster"]["dashboard"] is None


def test_the_dashboard_link_serves_the_dashboard(client):
    """The link a run records answers with Dask's Bokeh status page."""
    import urllib.request

    from taskdml.cluster._connect import describe

    link = describe(client)["dashboard"]
    assert link and link.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(link, timeout=30) as response:
        page = response.read().decode()
    assert response.status == 200 and "bokeh" in page.lower()
    assert "dask needs bokeh" not in page.lower()  # the page a scheduler without bokeh shows


@pytest.mark.parametrize(
    ("error", "code", "attempts"), [("ConnectionError", 0, 3), ("ValueError", 1, 1)]
)
def test_retries_run_a_step_again_on_transient_errors_only(
    cluster, tmp_path, error, code, attempts
):
    """A step with retries on ConnectionError runs again after one (with its backoff) and the
    manifest lists the errors; another error fails it at once."""
    counter = tmp_path / "calls"
    path = tmp_path / "flaky.yaml"
    path.write_text(
        "taskdml: 1\nname: flaky\nimports: {allow: [pipeline_functions]}\nsteps:\n"
        "  fetch:\n    call: pipeline_functions:flaky\n"
        f"    with: {{counter: '{counter}', failures: 2, error: {error}}}\n"
        "    retries: {times: 3, errors: [ConnectionError, TimeoutError], backoff_s: 0.05}\n"
    )
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        cli, ["run", str(path), "--scheduler", cluster.scheduler_address, "--run-dir", str(runs)]
    )
    assert result.exit_code == code, result.output
    assert int(counter.read_text()) == attempts
    (manifest,) = runs.glob("*/manifest.json")
    step = json.loads(manifest.read_text())["steps"]["fetch"]
    assert step.get("retried", []) == (
        ["ConnectionError: call 1 failed", "ConnectionError: call 2 failed"] if code == 0 else []
    )


def test_retries_on_a_name_that_is_no_exception_is_refused(tmp_path):
    """retries.errors must name exception classes; a typo gets a did-you-mean and exit 3."""
    path = tmp_path / "typo.yaml"
    path.write_text(
        "taskdml: 1\nname: typo\nsteps:\n  data:\n    call: taskdml.datasets:load_sklearn\n"
        "    with: {name: iris}\n    retries: {times: 2, errors: [ConectionError]}\n"
    )
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 3
    assert "steps.data.retries.errors" in result.output
    assert "ConnectionError" in result.output


@pytest.mark.slow
def test_events_file_and_performance_report(cluster, tmp_path):
    """--events FILE gets every event of the run as JSON lines, epochs of the training among
    them; --report saves Dask's performance report in the run directory; what ran is
    scikit-learn's scaler and accuracy on the same rows."""
    events = tmp_path / "events.jsonl"
    result = CliRunner().invoke(
        cli,
        ["run", str(ROOT / "pipelines" / "quickstart.yaml"), "n_samples=20000",
         "chunk_size=5000", "epochs=2", "--scheduler", cluster.scheduler_address,
         "--run-dir", str(tmp_path / "runs"), "--events", str(events), "--report"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("epoch") == 2  # the model's two (the small scaler is fitted at once)
    assert kinds.count("metric") == 4
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "performance-report.html").stat().st_size > 10_000
    assert json.loads((run / "manifest.json").read_text())["performance_report"] == (
        "performance-report.html"
    )
    _assert_quickstart_run_is_scikit_learns(run, 20_000)
