"""The taskdml command: every example pipeline, a real scheduler/worker pair, exit codes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = sorted((ROOT / "pipelines").glob("*.yaml"))
TASKDML = str(Path(sys.executable).with_name("taskdml"))


@pytest.mark.slow
@pytest.mark.parametrize("path", PIPELINES, ids=[p.stem for p in PIPELINES])
def test_every_example_pipeline_runs(path, cluster, tmp_path):
    """Each file in pipelines/ runs to success (on the shared test cluster)."""
    result = CliRunner().invoke(cli, ["run", str(path), "--scheduler", cluster.scheduler_address,
                                      "--run-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["status"] == "succeeded" and summary["metrics"]


@pytest.mark.slow
def test_quickstart_end_to_end_through_the_entry_point(tmp_path):
    """The installed `taskdml` runs quickstart on its own embedded cluster and reports accuracy."""
    done = subprocess.run([TASKDML, "run", str(ROOT / "pipelines" / "quickstart.yaml"), "n_samples=40000",
                           "chunk_size=10000", "--workers", "2", "--run-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "accuracy" in done.stdout and "succeeded" in done.stdout
    assert "dashboard: http://127.0.0.1:" in done.stderr
    assert len(list(tmp_path.glob("*/manifest.json"))) == 1


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def scheduler_and_worker(tmp_path):
    """A separately started `dask scheduler` + `dask worker` on 127.0.0.1, stopped by PID."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    dask = str(Path(sys.executable).with_name("dask"))
    processes = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                   "--dashboard-address", "127.0.0.1:0"], cwd=tmp_path, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    processes.append(subprocess.Popen([dask, "worker", address, "--nworkers", "2", "--nthreads", "1",
                                       "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"],
                                      cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    try:
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


@pytest.mark.slow
def test_same_file_runs_on_a_separate_scheduler(scheduler_and_worker, tmp_path):
    """quickstart.yaml runs unchanged against `dask scheduler` + `dask worker` via --scheduler."""
    done = subprocess.run([TASKDML, "run", str(ROOT / "pipelines" / "quickstart.yaml"), "n_samples=40000",
                           "--scheduler", scheduler_and_worker, "--run-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    manifest = json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())
    assert manifest["cluster"]["scheduler"] == scheduler_and_worker
    assert manifest["cluster"]["cluster"] == "address"
    assert summary["metrics"]["report"]["accuracy"] > 0.6


def test_unreachable_scheduler_exits_4(tmp_path):
    """A scheduler that does not answer gives exit 4 and says how to start one."""
    path = ROOT / "pipelines" / "quickstart.yaml"
    result = CliRunner().invoke(cli, ["run", str(path), "--scheduler", f"tcp://127.0.0.1:{_free_port()}",
                                      "--run-dir", str(tmp_path)])
    assert result.exit_code == 4
    assert "could not connect to the scheduler" in result.output and "dask scheduler" in result.output
    assert "Traceback" not in result.output


def test_failing_step_exits_1_and_points_at_the_run(cluster, tmp_path):
    """A step that raises gives exit 1, the error, and the run directory."""
    path = tmp_path / "fails.yaml"
    path.write_text("taskdml: 1\nname: fails\nimports: {allow: [pipeline_functions]}\nsteps:\n"
                    "  boom:\n    call: pipeline_functions:fail\n    with: {message: disk full}\n")
    result = CliRunner().invoke(cli, ["run", str(path), "--scheduler", cluster.scheduler_address,
                                      "--run-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1
    assert "step 'boom' failed: RuntimeError: disk full" in result.output
    assert "taskdml runs show" in result.output


def test_runs_list_and_show(cluster, tmp_path):
    """runs list shows the run; runs show (by prefix or 'latest') shows its steps and metrics."""
    runs = str(tmp_path / "runs")
    CliRunner().invoke(cli, ["run", str(ROOT / "pipelines" / "digits_sweep.yaml"), "--scheduler",
                             cluster.scheduler_address, "--run-dir", runs])
    listed = json.loads(CliRunner().invoke(cli, ["runs", "list", "--run-dir", runs, "--json"]).output)
    assert [entry["status"] for entry in listed] == ["succeeded"]
    shown = CliRunner().invoke(cli, ["runs", "show", listed[0]["run_id"][:12], "--run-dir", runs])
    assert "balanced_accuracy" in shown.output and "sweep" in shown.output
    assert CliRunner().invoke(cli, ["runs", "show", "latest", "--run-dir", runs]).exit_code == 0
    missing = CliRunner().invoke(cli, ["runs", "show", "nope", "--run-dir", runs])
    assert missing.exit_code == 5 and "no run 'nope'" in missing.output


@pytest.mark.slow
def test_interrupt_exits_130_and_keeps_the_ledger(tmp_path):
    """Ctrl-C during a run exits 130 and leaves the manifest marked interrupted."""
    path = tmp_path / "slow.yaml"
    path.write_text("taskdml: 1\nname: slow\nimports: {allow: [pipeline_functions]}\n"
                    "cluster: {n_workers: 1}\nsteps:\n  quick:\n    call: pipeline_functions:add\n"
                    "    with: {a: 1, b: 2}\n  wait:\n    call: pipeline_functions:wait_and_return\n"
                    "    inputs: {value: quick}\n    with: {seconds: 60}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    process = subprocess.Popen([TASKDML, "run", str(path), "--run-dir", str(tmp_path / "runs")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    manifest = None
    while time.monotonic() < deadline:
        found = list((tmp_path / "runs").glob("*/manifest.json"))
        if found and '"wait"' in found[0].read_text() and '"running"' in found[0].read_text():
            manifest = found[0]
            break
        time.sleep(0.2)
    assert manifest is not None, "the run never reached its slow step"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    recorded = json.loads(manifest.read_text())
    assert recorded["status"] == "interrupted"
    assert recorded["steps"]["quick"]["state"] == "completed"
    assert recorded["steps"]["wait"]["state"] == "interrupted"
