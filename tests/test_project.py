"""The user's own code: importable in the client, shipped to every worker, checked before a run.

The runs go through the installed ``taskdml`` console script in a fresh process whose working
directory is the project, with only taskdml itself on PYTHONPATH (a console script, unlike
``python -m``, does not put the working directory on ``sys.path``).
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import taskdml
from taskdml.cluster._project import collect, project_packages
from taskdml.pipeline._paths import importable

ROOT = Path(taskdml.__file__).resolve().parents[1]
TASKDML = str(Path(sys.executable).with_name("taskdml"))
ENV = {  # taskdml from this checkout; nothing of the user's project
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT)] + [os.environ.get("PYTHONPATH", "")]),
}
PIPELINE = """\
taskdml: 1
name: user
cluster: {n_workers: 1, threads_per_worker: 1}
imports: {allow: ["sklearn.*", "taskdml.*", "myproject.*"]}
steps:
  mark:
    call: myproject.features:mark
    with: {path: "${oc.env:MARK_FILE}"}
"""
FEATURES = """\
from pathlib import Path

VERSION = {version!r}


def mark(path):
    Path(path).write_text(VERSION)
    return VERSION
"""


def write_project(folder, version="first"):
    """``user_pipeline.yaml`` next to the package ``myproject`` (whose ``mark`` writes a file)."""
    (folder / "myproject").mkdir(parents=True, exist_ok=True)
    (folder / "myproject" / "__init__.py").write_text("")
    (folder / "myproject" / "features.py").write_text(FEATURES.format(version=version))
    (folder / "user_pipeline.yaml").write_text(PIPELINE)
    return folder / "user_pipeline.yaml"


def taskdml_cli(*args, cwd, **env):
    """Run the ``taskdml`` console script in *cwd*; return the finished process."""
    return subprocess.run(
        [TASKDML, *args],
        cwd=cwd,
        env={**ENV, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def separate_cluster(tmp_path_factory):
    """`dask scheduler` + two `dask worker` processes on 127.0.0.1, started in another folder
    (they cannot import the project from their working directory), stopped by PID."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    address = f"tcp://127.0.0.1:{_free_port()}"
    dask = str(Path(sys.executable).with_name("dask"))
    common = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    commands = [
        [dask, "scheduler", "--port", address.rsplit(":", 1)[1], *common],
        [dask, "worker", address, "--nworkers", "2", "--nthreads", "1", *common],
    ]
    processes = []
    try:
        for command in commands:
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=elsewhere,
                    env=ENV,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        from distributed import Client

        with Client(address, timeout="30s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)


def versions_on(address):
    """``myproject.features.VERSION`` as imported by the scheduler and each worker."""
    from distributed import Client

    def version():
        import importlib

        return importlib.import_module("myproject.features").VERSION

    with Client(address, timeout="30s", set_as_default=False) as client:
        return sorted(client.run(version).values()) + [client.run_on_scheduler(version)]


def test_project_packages_are_the_allowed_ones_found_next_to_the_pipeline(tmp_path, monkeypatch):
    """Only packages named by imports.allow, found in the project and not installed, ship."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    for package in ("myproject", "other", "sklearn"):  # sklearn: installed, so never shipped
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "helper.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "p.yaml").write_text("")
    directories = importable(tmp_path / "p.yaml")
    assert str(tmp_path.resolve()) in sys.path
    found = project_packages(["sklearn.*", "myproject.*", "helper", "notes*"], directories)
    assert found == {"helper": tmp_path / "helper.py", "myproject": tmp_path / "myproject"}


def test_collect_skips_bytecode_and_changes_digest_with_content(tmp_path):
    """The shipped files leave out __pycache__ and .pyc; an edit gives a new digest."""
    write_project(tmp_path)
    (tmp_path / "myproject" / "__pycache__").mkdir()
    (tmp_path / "myproject" / "__pycache__" / "features.cpython-311.pyc").write_bytes(b"x")
    files, digest = collect({"myproject": tmp_path / "myproject"})
    assert sorted(files) == ["myproject/__init__.py", "myproject/features.py"]
    write_project(tmp_path, version="second")
    assert collect({"myproject": tmp_path / "myproject"})[1] != digest


@pytest.mark.slow
def test_project_runs_on_the_embedded_cluster_from_its_folder(tmp_path):
    """`taskdml run user_pipeline.yaml` in the project's folder imports and runs myproject."""
    write_project(tmp_path)
    done = taskdml_cli(
        "run",
        "user_pipeline.yaml",
        "--run-dir",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        MARK_FILE=str(tmp_path / "mark.txt"),
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mark.txt").read_text() == "first"


@pytest.mark.slow
def test_changed_module_runs_new_code_on_long_lived_workers(separate_cluster, tmp_path):
    """Two runs against the same `dask scheduler`/`dask worker`s, the package edited between
    them: the second runs the new code, and every worker and the scheduler import it."""
    mark = tmp_path / "mark.txt"
    for version in ("first", "second version"):
        write_project(tmp_path, version=version)
        done = taskdml_cli(
            "run",
            "user_pipeline.yaml",
            "--scheduler",
            separate_cluster,
            "--run-dir",
            str(tmp_path / "runs"),
            "--json",
            cwd=tmp_path,
            MARK_FILE=str(mark),
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "succeeded"
        assert mark.read_text() == version
        assert versions_on(separate_cluster) == [version] * 3


@pytest.mark.slow
def test_module_that_does_not_import_on_the_workers_exits_4(separate_cluster, tmp_path):
    """A shipped module importing a module that is not shipped: exit 4 before any step, with
    the module, the worker, the error and the fix."""
    write_project(tmp_path)
    (tmp_path / "helper.py").write_text("")  # importable in the client only: not in allow
    with (tmp_path / "myproject" / "features.py").open("a") as features:
        features.write("\nimport helper  # noqa\n")
    done = taskdml_cli(
        "run",
        "user_pipeline.yaml",
        "--scheduler",
        separate_cluster,
        "--run-dir",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        MARK_FILE=str(tmp_path / "mark.txt"),
    )
    assert done.returncode == 4, done.stderr
    message = " ".join(done.stderr.split())
    assert "cannot import 'myproject.features' on worker tcp://127.0.0.1:" in message
    assert "ModuleNotFoundError: No module named 'helper'" in message
    assert "Add 'helper.*' to imports.allow" in message and "install it on the workers" in message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "mark.txt").exists()
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert {entry["state"] for entry in manifest["steps"].values()} == {"pending"}
    assert manifest["status"] == "failed" and "No module named 'helper'" in manifest["error"]


def _assert_init_run_is_scikit_learns(summary, n_samples, chunk_size):
    """The new project's run against scikit-learn on its rows: the template's data and split
    made here, its ``add_interactions`` (products of the first three neighbouring columns)
    written with NumPy, StandardScaler fitted in memory, the accuracy of the run's model."""
    import numpy as np
    from sklearn.metrics import accuracy_score
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets
    from taskdml.runs._directory import load_model

    data = datasets.make_classification(
        n_samples=n_samples, n_features=8, n_informative=4, chunk_size=chunk_size, random_state=0
    )
    train, test = datasets.train_test_split(data, test_size=0.2, random_state=0)
    train, test = train.compute(), test.compute()

    def with_products(X):
        return np.hstack([X, X[:, :3] * X[:, 1:4]])

    X_train, X_test = with_products(train["X"].values), with_products(test["X"].values)
    reference = StandardScaler().fit(X_train)
    scaler = load_model(summary["run_dir"], "scale")
    np.testing.assert_allclose(scaler.mean_, reference.mean_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scaler.var_, reference.var_, rtol=1e-10)
    predicted = load_model(summary["run_dir"], "model").predict(reference.transform(X_test))
    expected = accuracy_score(test["y"].values, predicted)
    assert summary["metrics"]["report"]["accuracy"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
def test_init_then_run_and_test_the_new_project(tmp_path):
    """`taskdml init` writes a project whose pipeline runs and whose tests pass; its scaler is
    scikit-learn's StandardScaler on the train rows with the neighbouring products (computed
    here with NumPy) appended, and its accuracy scikit-learn's on the test rows so made; a
    second `taskdml init` there refuses to overwrite (exit 2)."""
    project = tmp_path / "new"
    done = taskdml_cli("init", str(project), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "taskdml run pipeline.yaml" in (project / "README.md").read_text()
    ran = taskdml_cli(
        "run",
        "pipeline.yaml",
        "n_samples=8000",
        "chunk_size=4000",
        "--workers",
        "1",
        "--run-dir",
        str(tmp_path / "runs"),
        "--json",
        cwd=project,
    )
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["status"] == "succeeded" and summary["metrics"]["report"]["accuracy"] > 0.6
    _assert_init_run_is_scikit_learns(summary, n_samples=8000, chunk_size=4000)
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout
    again = taskdml_cli("init", str(project), cwd=tmp_path)
    assert again.returncode == 2
    assert "already exist" in again.stderr and "pipeline.yaml" in again.stderr


@pytest.mark.slow
def test_workers_that_join_later_receive_the_package(tmp_path, monkeypatch):
    """run_pipeline on a client's cluster, then one more worker: it imports the shipped copy
    (from its local directory), not the folder it inherited on sys.path."""
    import importlib

    from distributed import Client, LocalCluster

    from taskdml import load_pipeline, run_pipeline

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARK_FILE", str(tmp_path / "mark.txt"))
    (tmp_path / "latejoin").mkdir()
    (tmp_path / "latejoin" / "__init__.py").write_text("")
    (tmp_path / "latejoin" / "features.py").write_text(FEATURES.format(version="late"))
    path = tmp_path / "user_pipeline.yaml"
    path.write_text(PIPELINE.replace("myproject", "latejoin"))

    def shipped_file():
        import importlib

        return importlib.import_module("latejoin.features").__file__

    try:
        with (
            LocalCluster(
                n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
            ) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):
            run_pipeline(load_pipeline(path), client=client, record=False)
            cluster.scale(2)
            client.wait_for_workers(2, timeout=60)
            files = client.run(shipped_file)
        assert len(files) == 2
        assert all(f"taskdml-project{os.sep}" in file for file in files.values()), files
        assert (tmp_path / "mark.txt").read_text() == "late"
    finally:
        for module in [m for m in sys.modules if m.split(".")[0] == "latejoin"]:
            del sys.modules[module]
        importlib.invalidate_caches()
