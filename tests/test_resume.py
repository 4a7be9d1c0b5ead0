"""Resume after a crash: the CLI SIGKILLed (with its embedded cluster) after two steps, or in
the middle of a long training or search once its first checkpoint file appears, then
``taskdml resume``: no completed step runs again, the training or search continues from its
last checkpoint, and the result is the reference's bit for bit wherever an uninterrupted run
is itself deterministic: the loops of reference_loops.py for sync SGD with an integer period
and async SGD with one replica (scikit-learn's scaler and naive Bayes beside them), an
uninterrupted run for a synchronous successive halving and an ASHA search trial by trial."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import holds
import numpy as np
import pytest

from taskdml.runs._directory import load_model

ROOT = Path(__file__).resolve().parents[1]
TASKDML = str(Path(sys.executable).with_name("taskdml"))
DATA_PARALLEL = str(ROOT / "pipelines" / "data_parallel.yaml")
SMALLER = ("n_samples=40000", "chunk_size=4000")
LONG_TRAINING = """\
taskdml: 1
name: long
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 40_000, n_features: 20, chunk_size: 2_000, random_state: 0}
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


SEARCH = """\
taskdml: 1
name: search
imports: {allow: ["taskdml.*", "sklearn.*", holds]}
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 60_000, n_features: 20, n_informative: 10, chunk_size: 5_000,
           random_state: 0}
  tune:
    search: holds:HeldSGD   # an SGDClassifier that holds where the test says
    method: METHOD
    with: {loss: log_loss, random_state: 0, holds: [[45_000, HOLD]]}   # a promoted trial
    space:
      alpha: {loguniform: [1.0e-6, 1.0e-1]}
      penalty: [l2, l1, elasticnet]
    budget: {trials: 12, max_epochs: 9, min_epochs: 1, reduction_factor: 3}
    validation_fraction: 0.25
    scoring: accuracy
    parallel: {random_state: 0}   # no strategy: every trial trains alone, deterministically
    inputs: {data: data}
"""


HELD_SPACE = {"alpha": ("loguniform", 1e-6, 1e-1), "penalty": ["l2", "l1", "elasticnet"]}


def _sampled(space, n_trials):
    """scikit-learn's ParameterSampler's candidates for the search step's seed (0), which
    seeds the candidates; ``("loguniform", a, b)`` and ``("uniform", a, b)`` are the files'
    ``{loguniform: [a, b]}`` and ``{uniform: [a, b]}``."""
    import pandas as pd
    from scipy.stats import loguniform, uniform
    from sklearn.model_selection import ParameterSampler

    made = {"loguniform": lambda a, b: loguniform(a, b), "uniform": lambda a, b: uniform(a, b - a)}
    distributions = {
        name: made[value[0]](*value[1:]) if isinstance(value, tuple) else value
        for name, value in space.items()
    }
    return pd.DataFrame(list(ParameterSampler(distributions, n_trials, random_state=0)))


def _rungs(min_epochs, max_epochs, eta):
    """The rungs' budgets: ``min_epochs * eta**k`` up to ``max_epochs``."""
    rungs = []
    while min_epochs * eta ** len(rungs) <= max_epochs:
        rungs.append(min_epochs * eta ** len(rungs))
    return rungs


def _events(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").open()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cli_killed_after_two_steps_resumes_without_running_them_again(tmp_path, cluster):
    """SIGKILL after data and split completed; `taskdml resume latest` reuses both (no
    step_started for them), runs the rest, and its models are the references on the same
    rows: scikit-learn's scaler and naive Bayes fitted in memory, the SGD of the sync loop
    of reference_loops.py on the chunks so scaled."""
    killed = tmp_path / "killed"
    killed.mkdir()
    args = ["run", DATA_PARALLEL, *SMALLER, "--run-dir", "runs"]
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    process = _start(args, killed)  # killed with its embedded cluster
    _kill_when(process, lambda: len(_completed(killed)) >= 2)
    before = _manifest(killed)
    assert before["status"] == "running" and set(_completed(killed)) == {"data", "split"}
    _run(["resume", "latest", "--run-dir", "runs", *where], killed)
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
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync
    from sklearn.linear_model import SGDClassifier
    from sklearn.naive_bayes import GaussianNB
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets

    data = datasets.make_classification(
        40_000, 30, n_informative=12, n_redundant=6, chunk_size=4_000, random_state=0
    )
    train, _ = datasets.train_test_split(data, test_size=0.2, random_state=0)
    X, y = train.X.values, train.y.values
    run = killed / "runs" / after["run_id"]
    scaler = StandardScaler().fit(X)
    np.testing.assert_allclose(load_model(run, "scale").mean_, scaler.mean_, atol=1e-12)
    np.testing.assert_allclose(load_model(run, "scale").var_, scaler.var_, rtol=1e-10)
    bayes = GaussianNB().fit(X, y)
    np.testing.assert_allclose(load_model(run, "bayes").theta_, bayes.theta_, atol=1e-12)
    np.testing.assert_allclose(load_model(run, "bayes").var_, bayes.var_, rtol=1e-9)
    scaled = load_model(run, "scale").transform(X)  # the chunks the run's sgd trained on
    expected = reference_sync(
        SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0),
        chunks_of(scaled, y, train.X.chunks[0]), [0, 1], merge_linear_sgd, n_replicas=2,
        sync_every=4, epochs=5, shuffle=True, random_state=0,
    )  # fmt: skip
    np.testing.assert_array_equal(load_model(run, "sgd").coef_, expected.coef_)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_training_killed_mid_way_continues_from_its_last_checkpoint(tmp_path, cluster):
    """With checkpoints every 0.5 s, SIGKILL once the first is written; the resumed training
    starts after epoch 1, records every epoch once, and equals, bit for bit, the sync loop of
    reference_loops.py on the same data (what an uninterrupted training equals:
    tests/parallel/test_reference.py)."""
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "long.yaml").write_text(LONG_TRAINING)
    often = {"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "0.5"}
    args = ["run", "long.yaml", "--run-dir", "runs"]
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    process = _start(args, killed, **often)  # killed with its embedded cluster
    checkpoints = killed / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    assert _manifest(killed)["steps"]["model"]["state"] == "running"
    _run(["resume", "latest", "--run-dir", "runs", *where], killed, **often)
    training = _manifest(killed)["steps"]["model"]["training"]
    resumed_from = training["stats"]["resumed_from"]
    assert resumed_from["epoch"] > 1 or resumed_from["rounds_before"] > 0
    assert [entry["epoch"] for entry in training["history"]] == list(range(1, 31))
    assert not any(checkpoints.iterdir())  # removed once the step was stored
    model = load_model(killed / "runs" / _manifest(killed)["run_id"], "model")
    expected = _long_training_reference(n_replicas=2, sync_every=2, epochs=30)
    np.testing.assert_array_equal(model.coef_, expected.coef_)
    np.testing.assert_array_equal(model.intercept_, expected.intercept_)


GRAPH = """\
taskdml: 1
name: graph
imports: {allow: ["taskdml.*", holds]}
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  graph:
    call: taskdml.datasets:make_sbm
    with: {sizes: [300, 200], p_in: 0.05, p_out: 0.005, random_state: 0}
  ranks:
    call: holds:held_pagerank   # taskdml.graph:pagerank whose rank 0 holds after superstep 12
    inputs: {graph: graph}
    with: {hold: HOLD, at: 12}
  saved:
    call: holds:save_values
    inputs: {result: ranks}
    with: {variable: pagerank, path: PATH}
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_graph_run_killed_mid_way_goes_on_from_its_checkpointed_superstep(
    tmp_path, cluster, client
):
    """PageRank in a pipeline step checkpoints every 10 supersteps (the default); SIGKILL the
    CLI while its superstep 12 is held (the checkpoint of superstep 10 is on disk); `taskdml
    resume` publishes supersteps 10, 11, ... (none before), and the ranks are networkx's."""
    import networkx as nx
    from distributed import Event

    from taskdml.datasets import make_sbm

    killed, hold = tmp_path / "killed", f"resume-graph-{uuid.uuid4().hex}"
    killed.mkdir()
    saved = killed / "ranks.npy"
    (killed / "graph.yaml").write_text(GRAPH.replace("HOLD", hold).replace("PATH", str(saved)))
    shutil.copy(Path(__file__).with_name("holds.py"), killed / "holds.py")
    where = ["--scheduler", cluster.scheduler_address]
    process = _start(["run", "graph.yaml", "--run-dir", "runs", *where], killed)
    reached = Event(f"{hold}-reached", client=client)
    checkpoints = killed / "cache" / "checkpoints"
    _kill_when(process, lambda: reached.is_set() and any(checkpoints.glob("*/*.checkpoint")))
    assert _manifest(killed)["steps"]["ranks"]["state"] == "running"
    Event(hold, client=client).set()  # the held partition's client is gone: let its task end
    _run(["resume", "latest", "--run-dir", "runs", *where], killed)
    manifest = _manifest(killed)
    assert manifest["status"] == "succeeded"
    events = _events(killed / "runs" / manifest["run_id"])
    resumed = events[max(i for i, e in enumerate(events) if e["event"] == "run_started") :]
    supersteps = [e["superstep"] for e in resumed if e["event"] == "superstep"]
    assert supersteps == list(range(10, 10 + len(supersteps))) and len(supersteps) > 3
    assert not any(checkpoints.iterdir())  # removed once the step was stored
    sbm = make_sbm([300, 200], p_in=0.05, p_out=0.005, random_state=0)
    reference = nx.Graph()
    reference.add_nodes_from(range(500))
    reference.add_edges_from(zip(sbm.src.values.tolist(), sbm.dst.values.tolist()))
    ranks = nx.pagerank(reference, alpha=0.85, tol=1e-14, max_iter=1000)
    expected = np.array([ranks[v] for v in range(500)])
    np.testing.assert_allclose(np.load(saved), expected, rtol=0, atol=1e-10)
    # the session cluster's scheduler runs in this process: the CLI shipped it its copy of
    # holds.py, and it kept this process's own module (classes pickled by reference)
    assert sys.modules["holds"] is holds


def _long_training_reference(**options):
    """LONG_TRAINING's model by the loop of reference_loops.py, on its data made here."""
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync
    from sklearn.linear_model import SGDClassifier

    from taskdml.datasets import make_classification

    data = make_classification(40_000, 20, chunk_size=2_000, random_state=0)
    chunks = chunks_of(data.X.values, data.y.values, data.X.chunks[0])
    return reference_sync(
        SGDClassifier(random_state=0), chunks, [0, 1], merge_linear_sgd, shuffle=True,
        random_state=0, **options,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_search_killed_mid_way_goes_on_from_its_checkpoint(tmp_path, cluster):
    """SIGKILL an ASHA search step after its first checkpoint; the resumed search starts from
    the recorded results (``resumed_from``), and no trial ran a step twice: every trial ran
    one step per rung it reached."""
    import pandas as pd

    # Its full data: on a calm machine a search on 60,000 rows can end before its first
    # checkpoint is written (the halving and ASHA tests below do, at load 0.6).
    args = ["run", str(ROOT / "pipelines" / "search.yaml"), "trials=30", "--run-dir", "runs"]
    process = _start(args, tmp_path)
    checkpoints = tmp_path / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    _run(["resume", "latest", "--run-dir", "runs", *where], tmp_path)
    manifest = _manifest(tmp_path)
    assert manifest["steps"]["tune"]["resumed_from"]["results"] > 0
    trials = pd.read_csv(tmp_path / "runs" / manifest["run_id"] / "trials-tune.csv")
    assert len(trials) == 30 and trials["score"].notna().all()
    steps = trials["steps"].str.split(", ").str.len()
    assert (steps == trials["rung"] + 1).all()
    # The trials are ParameterSampler's 30 candidates of search.yaml's space, each ending at
    # one of the rungs (1, 3, 9 epochs), and the resume lost or added none.
    space = {
        "alpha": ("loguniform", 1e-6, 1e-1),
        "penalty": ["l2", "l1", "elasticnet"],
        "l1_ratio": ("uniform", 0.0, 1.0),
    }
    sampled = _sampled(space, 30)
    np.testing.assert_allclose(trials["alpha"], sampled["alpha"], rtol=1e-12)
    np.testing.assert_allclose(trials["l1_ratio"], sampled["l1_ratio"], rtol=1e-12)
    assert trials["penalty"].tolist() == sampled["penalty"].tolist()
    assert set(trials["budget"]) <= set(_rungs(1, 9, 3))


def _held_search(folder, method, hold):
    """A search pipeline in *folder* whose trials hold at their second epoch until the
    distributed Event *hold* is set (``holds.HeldSGD``, shipped with the file)."""
    folder.mkdir()
    (folder / "search.yaml").write_text(SEARCH.replace("METHOD", method).replace("HOLD", hold))
    shutil.copy(Path(__file__).with_name("holds.py"), folder / "holds.py")


def _killed_and_resumed(killed, args, where, hold, client):
    """Run *args* in *killed* on the cluster *where* names with a checkpoint after every
    result; SIGKILL it once a trial holds at its second epoch (all of the first rung's results
    are in, and checkpointed, before any trial is promoted) and the checkpoint is on disk; let
    the held trial go, resume on the same cluster; the manifest of the resumed run."""
    from distributed import Event

    process = _start([*args, *where], killed, DASK_TASKDML__SEARCH__CHECKPOINT_S="0")
    reached = Event(f"{hold}-reached", client=client)
    checkpoints = killed / "cache" / "checkpoints"
    _kill_when(process, lambda: reached.is_set() and any(checkpoints.glob("*/*.checkpoint")))
    Event(hold, client=client).set()  # the held trial's client is gone: let its task end
    _run(["resume", "latest", "--run-dir", "runs", *where], killed)
    return _manifest(killed)


def _trials(folder, manifest):
    import pandas as pd

    return pd.read_csv(folder / "runs" / manifest["run_id"] / "trials-tune.csv")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_halving_search_killed_mid_way_equals_an_uninterrupted_one(tmp_path, cluster, client):
    """Synchronous successive halving, SIGKILLed while a promoted trial holds (its first
    rung checkpointed) and resumed from it, gives an uninterrupted run's trials (rungs, every
    rung's score, states), best parameters and best model, bit for bit."""
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    hold = f"resume-halving-{uuid.uuid4().hex}"
    for folder in (killed, clean):
        _held_search(folder, "halving", hold)
    args = ["run", "search.yaml", "--run-dir", "runs"]
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    resumed = _killed_and_resumed(killed, args, where, hold, client)
    assert resumed["steps"]["tune"]["resumed_from"]["results"] > 0
    _run([*args, "--no-cache", *where], clean)
    uninterrupted = _manifest(clean)
    assert "resumed_from" not in uninterrupted["steps"]["tune"]
    columns = ["trial", "alpha", "penalty", "budget", "rung", "score", "score_rung_0",
               "score_rung_1", "score_rung_2", "state"]  # fmt: skip
    got, expected = _trials(killed, resumed), _trials(clean, uninterrupted)
    assert got[columns].equals(expected[columns]), (got[columns], expected[columns])
    # Both are ParameterSampler's candidates, and the halving's arithmetic: rung k keeps
    # 12 // 3**k trials, so 8 end at 1 epoch, 3 at 3 and one at 9.
    sampled = _sampled(HELD_SPACE, 12)
    np.testing.assert_allclose(got["alpha"], sampled["alpha"], rtol=1e-12)
    assert got["penalty"].tolist() == sampled["penalty"].tolist()
    kept = [max(1, 12 // 3**k) for k in range(3)] + [0]
    ends = {budget: kept[k] - kept[k + 1] for k, budget in enumerate(_rungs(1, 9, 3))}
    assert got["budget"].value_counts().to_dict() == ends
    summary = resumed["steps"]["tune"]["summary"]
    assert summary["best_params"] == uninterrupted["steps"]["tune"]["summary"]["best_params"]
    np.testing.assert_array_equal(
        load_model(killed / "runs" / resumed["run_id"], "tune").coef_,
        load_model(clean / "runs" / uninterrupted["run_id"], "tune").coef_,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_asha_search_killed_mid_way_scores_each_trial_as_an_uninterrupted_one(
    tmp_path, cluster, client
):
    """ASHA, SIGKILLed once its first checkpoint is written and resumed from it: every trial
    started, ran one step per rung it reached, and every score a trial has at a rung equals
    the uninterrupted run's for that trial and rung. (Which trials ASHA promotes depends on
    the order results arrive in, in any run; a trial's training and score up to a rung do
    not.)"""
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    hold = f"resume-asha-{uuid.uuid4().hex}"
    for folder in (killed, clean):
        _held_search(folder, "asha", hold)
    args = ["run", "search.yaml", "--run-dir", "runs"]
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    resumed = _killed_and_resumed(killed, args, where, hold, client)
    assert resumed["steps"]["tune"]["resumed_from"]["results"] > 0
    _run([*args, "--no-cache", *where], clean)
    got = _trials(killed, resumed).set_index("trial")
    expected = _trials(clean, _manifest(clean)).set_index("trial")
    assert list(got.index) == list(expected.index) == list(range(12))
    assert got[["alpha", "penalty"]].equals(expected[["alpha", "penalty"]])
    sampled = _sampled(HELD_SPACE, 12)  # both: ParameterSampler's candidates
    np.testing.assert_allclose(got["alpha"], sampled["alpha"], rtol=1e-12)
    assert got["penalty"].tolist() == sampled["penalty"].tolist()
    assert set(got["budget"]) <= set(_rungs(1, 9, 3))
    rungs = [f"score_rung_{k}" for k in range(3)]
    assert got["score_rung_0"].notna().all() and expected["score_rung_0"].notna().all()
    both = got[rungs].notna() & expected[rungs].notna()
    assert both.sum().sum() > 12  # some trials were promoted in both runs
    same = (got[rungs] == expected[rungs]) | ~both
    assert same.all().all(), (got[rungs], expected[rungs])
    assert (got["steps"].str.split(", ").str.len() == got["rung"] + 1).all()  # none twice


ONE_REPLICA_ASYNC = LONG_TRAINING.replace("n_workers: 2", "n_workers: 1").replace(
    "epochs: 30, sync_every: 2", "epochs: 20, strategy: async"
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_one_replica_async_training_killed_mid_way_equals_the_serial_loop(tmp_path):
    """An async training with one replica (one worker: its pushes are one serial pass, so an
    uninterrupted run is deterministic), SIGKILLed once its server's first copy is written
    and resumed from it, absorbs every chunk of every epoch once and equals, bit for bit, the
    serial partial_fit loop over the chunks in the engine's order (reference_loops.py, one
    replica)."""
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "long.yaml").write_text(ONE_REPLICA_ASYNC)
    often = {"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "0.5"}
    args = ["run", "long.yaml", "--run-dir", "runs"]
    process = _start(args, killed, **often)
    checkpoints = killed / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    _run(["resume", "latest", "--run-dir", "runs"], killed, **often)
    resumed = _manifest(killed)
    training = resumed["steps"]["model"]["training"]
    assert training["strategy"] == "async" and training["stats"]["replicas"] == 1
    assert 0 < training["stats"]["resumed_from"]["updates"] < 20 * 20
    assert training["stats"]["updates"] == 20 * 20
    model = load_model(killed / "runs" / resumed["run_id"], "model")
    expected = _long_training_reference(n_replicas=1, sync_every=1, epochs=20)
    np.testing.assert_array_equal(model.coef_, expected.coef_)
    np.testing.assert_array_equal(model.intercept_, expected.intercept_)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_async_training_killed_mid_way_trains_only_what_its_server_had_not_absorbed(
    tmp_path, cluster
):
    """An async training writes each copy of its server's state as a checkpoint; killed after
    the first, the resumed training goes on from it and every chunk of every epoch is absorbed
    once in all (updates = epochs × chunks)."""
    (tmp_path / "long.yaml").write_text(
        LONG_TRAINING.replace("epochs: 30, sync_every: 2", "epochs: 20, strategy: async")
    )
    often = {"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "0.5"}
    process = _start(["run", "long.yaml", "--run-dir", "runs"], tmp_path, **often)
    checkpoints = tmp_path / "cache" / "checkpoints"
    _kill_when(process, lambda: any(checkpoints.glob("*/*.checkpoint")))
    where = ["--scheduler", cluster.scheduler_address]  # the session's cluster: 2 x 1 thread
    _run(["resume", "latest", "--run-dir", "runs", *where], tmp_path, **often)
    training = _manifest(tmp_path)["steps"]["model"]["training"]
    assert training["strategy"] == "async"
    assert 0 < training["stats"]["resumed_from"]["updates"] < 20 * 20
    assert training["stats"]["updates"] == 20 * 20
    # One update per chunk and epoch: LONG_TRAINING's 40,000 rows in chunks of 2,000.
    epochs, n_chunks = 20, math.ceil(40_000 / 2_000)
    assert training["stats"]["updates"] == epochs * n_chunks
