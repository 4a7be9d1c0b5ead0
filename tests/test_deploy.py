"""Any Dask deployment, one pipeline file: a scheduler address (tcp:// and tls://), a cluster
class from the file or the command line with scale/adapt, and the version check before a run.

The clusters here are real processes: ``dask scheduler`` and ``dask worker`` from this
environment's ``bin``, on 127.0.0.1, stopped by PID at teardown. The version tests give a
worker a different installed package the way an environment really differs: a directory on
the worker's ``PYTHONPATH`` holding an installed distribution (its module and its
``.dist-info``, the files pip writes), which the worker's ``importlib.metadata`` finds first.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["n_samples=4000", "chunk_size=1000", "epochs=1", "++steps.model.parallel.sync_every=1"]
"""quickstart.yaml, small (a few seconds on two workers) and deterministic for two replicas."""


def _run(*args):
    """`taskdml run ...` through the CLI, in this process."""
    return CliRunner().invoke(cli, ["run", *map(str, args)])


def _pipeline(tmp_path, cluster, name="pipeline.yaml"):
    """quickstart.yaml with its cluster line replaced by *cluster* (YAML flow text)."""
    text = (ROOT / "pipelines" / "quickstart.yaml").read_text()
    original = "cluster: {n_workers: 2, threads_per_worker: 1}"
    assert original in text
    path = tmp_path / name
    path.write_text(text.replace(original, f"cluster: {cluster}"))
    return path


def _manifest(runs):
    (path,) = Path(runs).glob("*/manifest.json")
    return json.loads(path.read_text())


def _accuracy(runs):
    (path,) = Path(runs).glob("*/metrics.json")
    return json.loads(path.read_text())["report"]["accuracy"]


def _assert_scikit_learns(runs):
    """The QUICK run's scaler is scikit-learn's StandardScaler fitted in memory on its train
    rows (made here with the file's seed and sizes), and its reported accuracy is
    scikit-learn's accuracy of its model on the test rows so scaled."""
    import numpy as np
    from sklearn.metrics import accuracy_score
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets
    from taskdml.runs._directory import load_model

    data = datasets.make_classification(
        n_samples=4000, n_features=20, n_informative=10, chunk_size=1000, random_state=0
    )
    train, test = datasets.train_test_split(data, test_size=0.2, random_state=0)
    train, test = train.compute(), test.compute()
    (run_dir,) = (path.parent for path in Path(runs).glob("*/manifest.json"))
    reference = StandardScaler().fit(train["X"].values)
    scaler = load_model(run_dir, "scale")
    np.testing.assert_allclose(scaler.mean_, reference.mean_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scaler.var_, reference.var_, rtol=1e-10)
    predicted = load_model(run_dir, "model").predict(reference.transform(test["X"].values))
    expected = accuracy_score(test["y"].values, predicted)
    assert _accuracy(runs) == pytest.approx(expected, rel=1e-12)


@pytest.fixture(scope="module")
def fixed_accuracy(tmp_path_factory):
    """quickstart's accuracy on the embedded cluster of its file (two worker processes)."""
    runs = tmp_path_factory.mktemp("fixed")
    result = _run(ROOT / "pipelines" / "quickstart.yaml", *QUICK, "--run-dir", runs)
    assert result.exit_code == 0, result.output
    return _accuracy(runs)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_scheduler_address_from_the_command_line_and_from_the_file(
    separate_scheduler, fixed_accuracy, tmp_path
):
    """quickstart runs unchanged on `dask scheduler` + two `dask worker`s via --scheduler, and
    with the same address written in the file's cluster block, to the embedded cluster's
    accuracy (within 0.5 pp); each run's scaler and accuracy are scikit-learn's on its rows."""
    address = separate_scheduler
    for where, args in {
        "cli": [ROOT / "pipelines" / "quickstart.yaml", "--scheduler", address],
        "file": [_pipeline(tmp_path, f"{{address: '{address}'}}")],
    }.items():
        runs = tmp_path / f"runs-{where}"
        result = _run(*args, *QUICK, "--run-dir", runs)
        assert result.exit_code == 0, result.output
        cluster = _manifest(runs)["cluster"]
        assert (cluster["scheduler"], cluster["cluster"], cluster["workers"]) == (
            address,
            "address",
            2,
        )
        assert abs(_accuracy(runs) - fixed_accuracy) <= 0.005
        _assert_scikit_learns(runs)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "sizing", ["scale: 2", "adapt: {minimum: 1, maximum: 2}"], ids=["scale", "adapt"]
)
def test_cluster_class_from_the_file_with_scale_or_adapt(sizing, fixed_accuracy, tmp_path):
    """A spec naming distributed:LocalCluster with no workers of its own, sized by scale or
    adapt, runs quickstart; the manifest names the class; with scale: 2, the accuracy is the
    embedded cluster's (within 0.5 pp; adapt may train on one worker or re-plan); either way
    the scaler and the accuracy are scikit-learn's on the run's rows."""
    kwargs = "{n_workers: 0, threads_per_worker: 1, host: 127.0.0.1, dashboard_address: null}"
    path = _pipeline(
        tmp_path, f"{{spec: {{class: 'distributed:LocalCluster', kwargs: {kwargs}, {sizing}}}}}"
    )
    result = _run(path, *QUICK, "--run-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    assert _manifest(tmp_path / "runs")["cluster"]["cluster"] == "LocalCluster"
    if sizing.startswith("scale"):
        assert abs(_accuracy(tmp_path / "runs") - fixed_accuracy) <= 0.005
    _assert_scikit_learns(tmp_path / "runs")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cluster_class_from_the_command_line(tmp_path):
    """--cluster MODULE:CLASS starts that class with kwargs and scale given as overrides; the
    run's scaler and accuracy are scikit-learn's on its rows."""
    result = _run(
        ROOT / "pipelines" / "quickstart.yaml",
        *QUICK,
        "+cluster.spec.kwargs.n_workers=0",
        "+cluster.spec.kwargs.host=127.0.0.1",
        "+cluster.spec.kwargs.dashboard_address=null",
        "+cluster.spec.scale=2",
        "--cluster",
        "distributed:LocalCluster",
        "--run-dir",
        tmp_path / "runs",
    )
    assert result.exit_code == 0, result.output
    assert _manifest(tmp_path / "runs")["cluster"]["cluster"] == "LocalCluster"
    _assert_scikit_learns(tmp_path / "runs")


def _certificate(directory):
    """A self-signed certificate and its key, used as CA and by every role (as
    Security.temporary does), written with the openssl command (CI must have it: a
    missing command fails the test rather than skipping it)."""
    if shutil.which("openssl") is None:
        pytest.fail("the TLS test needs the openssl command to make its certificates: install it")
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=dask-internal", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tls_scheduler_with_the_security_block(dask_cluster, tmp_path):
    """A `dask scheduler --protocol tls` with certificates: the file's address tls://... and its
    security block (paths through ${path:...}) run quickstart, to scikit-learn's scaler and
    accuracy on its rows; without the block, exit 4."""
    cert, key = _certificate(tmp_path)
    tls = [("--tls-ca-file", cert), ("--tls-cert", cert), ("--tls-key", key)]
    address = dask_cluster.start(protocol="tls", tls=tls)
    security = (
        "{tls_ca_file: '${path:cert.pem}', tls_client_cert: '${path:cert.pem}', "
        "tls_client_key: '${path:key.pem}', require_encryption: true, tls_min_version: 1.2}"
    )
    path = _pipeline(tmp_path, f"{{address: '{address}', security: {security}}}")
    result = _run(path, *QUICK, "--run-dir", tmp_path / "runs")
    assert result.exit_code == 0, result.output
    assert _manifest(tmp_path / "runs")["cluster"]["scheduler"] == address
    _assert_scikit_learns(tmp_path / "runs")

    bare = _pipeline(tmp_path, f"{{address: '{address}'}}", name="bare.yaml")
    result = _run(bare, *QUICK, "--run-dir", tmp_path / "runs")
    assert result.exit_code == 4
    assert "is a TLS address but nothing says which certificates to use" in result.output
    assert "Add a security block" in result.output


@pytest.mark.parametrize(
    ("cluster", "code", "message"),
    [
        (
            "{address: 'tls://127.0.0.1:9', security: {tls_ca_fil: x}}",
            3,
            "cluster.security.tls_ca_fil: unknown key 'tls_ca_fil'. Did you mean 'tls_ca_file'?",
        ),
        (
            "{address: 'tls://127.0.0.1:9', security: {tls_ca_file: '${path:nowhere.pem}'}}",
            4,
            "nowhere.pem', which is not a file. Give the PEM files' paths",
        ),
        (
            "{address: 'tcp://127.0.0.1:9', spec: {class: 'distributed:LocalCluster'}}",
            3,
            "cluster.spec: give either address (a running scheduler) or spec",
        ),
        (
            "{spec: {class: 'distributed:LocalCluster', scale: 2, adapt: {maximum: 2}}}",
            3,
            "give either scale (a fixed number of workers) or adapt (a range), not both",
        ),
        (
            "{spec: {class: 'distributed:LocalCluster', adapt: {minimum: 3, maximum: 2}}}",
            3,
            "expected minimum <= maximum, found minimum=3 and maximum=2; swap them.",
        ),
        (
            "{spec: {class: 'distributed:LocalCluster', adapt: {maximun: 2}}}",
            3,
            "unknown key 'maximun'. Did you mean 'maximum'?",
        ),
    ],
    ids=["misspelt-key", "missing-file", "address-and-spec", "scale-and-adapt", "range", "typo"],
)
def test_cluster_block_errors(cluster, code, message, tmp_path):
    """Mistakes in the cluster block: a pipeline error (3) or an unusable cluster (4), each
    saying what to fix; nothing is started."""
    result = _run(_pipeline(tmp_path, cluster), "--run-dir", tmp_path / "runs")
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_tls_address_without_certificates_exits_4(tmp_path):
    """--scheduler tls://... with no security block and no TLS configuration: exit 4, and the
    message says what to add."""
    result = _run(
        ROOT / "pipelines" / "quickstart.yaml",
        "--scheduler",
        "tls://127.0.0.1:9",
        "--run-dir",
        tmp_path / "runs",
    )
    assert result.exit_code == 4
    assert "tls://127.0.0.1:9 is a TLS address but nothing says which certificates" in result.output


def test_help_names_the_cluster_option():
    """`taskdml run --help` offers --cluster MODULE:CLASS next to --scheduler."""
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "--cluster MODULE:CLASS" in result.output and "--scheduler ADDRESS" in result.output


def test_security_keys_are_securitys_arguments():
    """The schema's security keys are exactly distributed.security.Security's."""
    from distributed.security import Security

    from taskdml import schema

    keys = schema()["properties"]["cluster"]["properties"]["security"]["properties"]
    assert set(keys) == set(Security.__slots__)


def test_dry_run_names_a_cluster_class(tmp_path):
    """--dry-run with --cluster says which class would be started, not the LocalCluster."""
    result = _run(
        ROOT / "pipelines" / "quickstart.yaml",
        "--cluster",
        "dask_jobqueue:SLURMCluster",
        "+cluster.spec.kwargs.cores=4",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output
    assert "would run on: dask_jobqueue:SLURMCluster started with {'cores': 4}" in result.output


# --- the version check -------------------------------------------------------------------


def _install(site, name, version, code="def ones(n=3):\n    return [1] * n\n"):
    """Install a one-module distribution *name* at *version* into *site*, as pip lays it out."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{name}.py").write_text(code)
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "RECORD").write_text(f"{name}.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    (info / "INSTALLER").write_text("pip\n")
    return site


def _probe_pipeline(tmp_path):
    """A pipeline that calls probe_tdml:ones; its folder holds no probe_tdml (not shipped)."""
    folder = tmp_path / "pipeline"
    folder.mkdir()
    path = folder / "probe.yaml"
    path.write_text(
        "taskdml: 1\nname: probe\nimports: {allow: ['probe_tdml.*']}\n"
        "steps:\n  ones:\n    call: probe_tdml:ones\n    with: {n: 3}\n"
    )
    return path


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("worker_version", "code", "expected"),
    [
        (
            None,
            4,
            "probe_tdml: 1.0.0 here, missing on worker tcp://127.0.0.1:",
        ),
        ("1.0.5", 0, "probe_tdml: 1.0.0 here, 1.0.5 on worker tcp://127.0.0.1:"),
    ],
    ids=["missing-fails", "patch-apart-warns"],
)
def test_package_the_pipeline_names_is_checked_on_the_workers(
    worker_version, code, expected, dask_cluster, tmp_path, monkeypatch
):
    """A distribution the pipeline names, installed here: missing on the worker, the run
    stops with exit 4 and the pip command; another version there (not a critical package),
    the run goes on with a VersionMismatchWarning."""
    from taskdml import VersionMismatchWarning

    monkeypatch.syspath_prepend(str(_install(tmp_path / "client-site", "probe_tdml", "1.0.0")))
    env = None
    if worker_version:
        site = _install(tmp_path / "worker-site", "probe_tdml", worker_version)
        env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    address = dask_cluster.start(workers=(env,), scheduler=env)  # it imports what steps name
    with pytest.warns(VersionMismatchWarning) if code == 0 else _no_warning() as caught:
        result = _run(
            _probe_pipeline(tmp_path), "--scheduler", address, "--run-dir", tmp_path / "runs"
        )
    assert result.exit_code == code, result.output
    if code == 4:
        assert expected in result.output and ": the run needs it there" in result.output
        assert "Fix: install them with pip install 'probe_tdml==1.0.0' where the scheduler" in (
            " ".join(result.output.split())
        )
    else:
        assert expected in str(caught[0].message)
        assert "harmless for a run; pin them to silence this" in str(caught[0].message)


class _no_warning:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_worker_with_another_taskdml_release_fails_before_the_run(dask_cluster, tmp_path):
    """A worker whose environment has another minor release of taskdml installed (its code and
    its dist-info first on the worker's path): exit 4 before any step, naming the package, the
    two versions, why it matters and the pip command."""
    import importlib.metadata

    import taskdml

    mine = importlib.metadata.version("taskdml")
    major, minor = mine.split(".")[:2]
    other = f"{major}.{int(minor) + 1}.0"
    site = tmp_path / "worker-site"
    shutil.copytree(Path(taskdml.__file__).parent, site / "taskdml")
    info = site / f"taskdml-{other}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: taskdml\nVersion: {other}\n")
    (info / "top_level.txt").write_text("taskdml\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    address = dask_cluster.start(workers=(env,))
    result = _run(
        ROOT / "pipelines" / "quickstart.yaml",
        *QUICK,
        "--scheduler",
        address,
        "--run-dir",
        tmp_path / "runs",
    )
    assert result.exit_code == 4, result.output
    text = " ".join(result.output.split())
    assert f"taskdml: {mine} here, {other} on worker tcp://127.0.0.1:" in text
    assert "task functions and merge rules must be the same code on both sides" in text
    assert f"pip install 'taskdml=={mine}'" in text
    manifest = _manifest(tmp_path / "runs")
    assert manifest["status"] == "failed"
    assert {step["state"] for step in manifest["steps"].values()} == {"pending"}
