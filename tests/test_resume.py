"""Resume after a crash: the CLI SIGKILLed (with its embedded cluster) after two steps, or in
the middle of a long training, then ``taskdml resume``: no completed step runs again, the
training continues from its last checkpoint, and the final model equals an uninterrupted
run's bit for bit."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from taskdml.runs._directory import load_model

ROOT = Path(__file__).resolve().parents[1]
TASKDML = str(Path(sys.executable).with_name("taskdml"))
DATA_PARALLEL = str(ROOT / "pipelines" / "data_parallel.yaml")
SMALLER = ("n_samples=120000", "chunk_size=10000")
LONG_TRAINING = """\
taskdml: 1
name: long
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 200_000, n_features: 20, chunk_size: 10_000, random_state: 0}
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {random_state: 0}
    parallel: {epochs: 30, sync_every: 2, random_state: 0}
    inputs: {data: data}
"""


def _start(args, folder, **env):
    """The CLI in its own process group (its cluster's processes with it), in *folder*."""
    return subprocess.Popen(
        [TASKDML, *args],
        cwd=folder,
        env={**os.environ, "TASKDML_CACHE_DIR": str(folder / "cache"), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _kill_when(process, condition, timeout=240):
    """SIGKILL the CLI and every process it started once *condition()* holds."""
    deadline = time.monotonic() + timeout  # a guard against a hang, not a measurement
    while not condition():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    return time.monotonic()


def _manifest(folder):
    found = sorted((folder / "runs").glob("*/manifest.json"))
    return json.loads(found[-1].read_text()) if found else {}


def _completed(folder):
    steps = _manifest(folder).get("steps", {})
    return [name for name, entry in steps.items() if entry.get("state") == "completed"]


def _run(args, folder, **env):
    done = subprocess.run(
        [TASKDML, *args],
        cwd=folder,
        env={**os.environ, "TASKDML_CACHE_DIR": str(folder / "cache"), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def _events(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").open()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cli_killed_after_two_steps_resumes_without_running_them_again(tmp_path):
    """SIGKILL after data and split completed; `taskdml resume latest` reuses both (no
    step_started for them), runs the rest, and its models equal an uninterrupted run's."""
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    killed.mkdir(), clean.mkdir()
    args = ["run", DATA_PARALLEL, *SMALLER, "--run-dir", "runs"]
    process = _start(args, killed)
    _kill_when(process, lambda: len(_completed(killed)) >= 2)
    before = _manifest(killed)
    assert before["status"] == "running" and set(_completed(killed)) == {"data", "split"}
    _run(["resume", "latest", "--run-dir", "runs"], killed)
    after = _manifest(killed)
    assert after["run_id"] == before["run_id"] and after["status"] == "succeeded"
    assert after["resumed"][0]["after"] == "running"
    assert {n: e["cache"]["hit"] for n, e in after["steps"].items()} == {
        "data": True,
        "split": True,
        "scale": False,
        "sgd": False,
        "bayes": False,
        "sgd_report": False,
        "bayes_report": False,
    }
    events = _events(Path(killed / "runs" / after["run_id"]))
    resumed = events[max(i for i, e in enumerate(events) if e["event"] == "run_started") :]
    started = {e["step"] for e in resumed if e["event"] == "step_started"}
    assert started == {"scale", "sgd", "bayes", "sgd_report", "bayes_report"}
    assert {e["step"] for e in resumed if e["event"] == "step_cached"} == {"data", "split"}
    _run([*args, "--no-cache"], clean)
    uninterrupted = _manifest(clean)
    for step, attribute in (("sgd", "coef_"), ("bayes", "theta_"), ("scale", "mean_")):
        np.testing.assert_array_equal(
            getattr(load_model(killed / "runs" / after["run_id"], step), attribute),
            getattr(load_model(clean / "runs" / uninterrupted["run_id"], step), attribute),
        )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_training_killed_mid_way_continues_from_its_last_checkpoint(tmp_path):
    """With checkpoints every 0.5 s, SIGKILL once the first is written; the resumed training
    starts after epoch 1, records every epoch once, and equals an uninterrupted training."""
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    for folder in (killed, clean):
        folder.mkdir()
        (folder / "long.yaml").write_text(LONG_TRAINING)
    often = {"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "0.5"}
    args = ["run", "long.yaml", "--run-dir", "runs"]
    process = _start(args, killed, **often)
    checkpoints = killed / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    assert _manifest(killed)["steps"]["model"]["state"] == "running"
    _run(["resume", "latest", "--run-dir", "runs"], killed, **often)
    training = _manifest(killed)["steps"]["model"]["training"]
    resumed_from = training["stats"]["resumed_from"]
    assert resumed_from["epoch"] > 1 or resumed_from["rounds_before"] > 0
    assert [entry["epoch"] for entry in training["history"]] == list(range(1, 31))
    assert not any(checkpoints.iterdir())  # removed once the step was stored
    _run([*args, "--no-cache"], clean)
    np.testing.assert_array_equal(
        load_model(killed / "runs" / _manifest(killed)["run_id"], "model").coef_,
        load_model(clean / "runs" / _manifest(clean)["run_id"], "model").coef_,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_search_killed_mid_way_goes_on_from_its_checkpoint(tmp_path):
    """SIGKILL an ASHA search step after its first checkpoint; the resumed search starts from
    the recorded results (``resumed_from``), and no trial ran a step twice: every trial ran
    one step per rung it reached."""
    import pandas as pd

    args = ["run", str(ROOT / "pipelines" / "search.yaml"), "trials=30", "--run-dir", "runs"]
    process = _start(args, tmp_path)
    checkpoints = tmp_path / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    _run(["resume", "latest", "--run-dir", "runs"], tmp_path)
    manifest = _manifest(tmp_path)
    assert manifest["steps"]["tune"]["resumed_from"]["results"] > 0
    trials = pd.read_csv(tmp_path / "runs" / manifest["run_id"] / "trials-tune.csv")
    assert len(trials) == 30 and trials["score"].notna().all()
    steps = trials["steps"].str.split(", ").str.len()
    assert (steps == trials["rung"] + 1).all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_async_training_killed_mid_way_trains_only_what_its_server_had_not_absorbed(tmp_path):
    """An async training writes each copy of its server's state as a checkpoint; killed after
    the first, the resumed training goes on from it and every chunk of every epoch is absorbed
    once in all (updates = epochs × chunks)."""
    (tmp_path / "long.yaml").write_text(
        LONG_TRAINING.replace("epochs: 30, sync_every: 2", "epochs: 40, strategy: async")
    )
    often = {"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "0.5"}
    process = _start(["run", "long.yaml", "--run-dir", "runs"], tmp_path, **often)
    checkpoints = tmp_path / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    _run(["resume", "latest", "--run-dir", "runs"], tmp_path, **often)
    training = _manifest(tmp_path)["steps"]["model"]["training"]
    assert training["strategy"] == "async"
    assert 0 < training["stats"]["resumed_from"]["updates"] < 40 * 20
    assert training["stats"]["updates"] == 40 * 20
