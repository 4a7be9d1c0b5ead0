"""Running pipelines on a real cluster: outputs, run directory, names, spans, failures."""

import json
import os

import dask
import numpy as np
import pytest

from taskdml import PipelineSpec, Step, StepFailed, loads_pipeline, run_pipeline
from taskdml.datasets import make_blobs

ALLOW = {"allow": ["taskdml.*", "sklearn.*", "pipeline_functions"]}

TRAIN = """\
taskdml: 1
name: train_small
params: {seed: 0}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 6000, n_features: 8, chunk_size: 1000, random_state: "${params.seed}"}
  split:
    call: taskdml.datasets:train_test_split
    inputs: {data: data}
    with: {random_state: "${params.seed}"}
    outputs: [train, test]
  scale:
    fit: sklearn.preprocessing:StandardScaler
    inputs: {data: split.train}
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {random_state: 0}
    parallel: {epochs: 5, random_state: 0}   # seeded: a run is reproducible
    inputs: {data: split.train, preprocess: scale}
  report:
    evaluate: [accuracy, roc_auc]
    inputs: {model: model, data: split.test, preprocess: scale}
"""


def _prefixes(client):
    return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))


def _split_in_memory(seed):
    """TRAIN's data and split, computed in memory."""
    from taskdml import datasets

    data = datasets.make_classification(
        n_samples=6000, n_features=8, chunk_size=1000, random_state=seed
    )
    train, test = datasets.train_test_split(data, random_state=seed)
    train, test = train.compute(), test.compute()
    return train["X"].values, train["y"].values, test["X"].values, test["y"].values


def test_pipeline_runs_and_records_everything(client, tmp_path):
    """A run returns metrics and writes the whole run directory; its accuracy is the saved
    model's on the test rows, and within 3 points of the same SGDClassifier fitted to
    convergence in memory by scikit-learn on the same rows (0.87; over data seeds 0-4 and
    shuffle seeds 0-1 the 5-epoch run stays within 1.6 points of that reference)."""
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import accuracy_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    run = run_pipeline(loads_pipeline(TRAIN, overrides=["seed=1"]), client, run_root=tmp_path)
    assert run.status == "succeeded"
    X_train, y_train, X_test, y_test = _split_in_memory(1)
    scaler, model = run.model("scale"), run.model("model")
    X_scaled = scaler.transform(X_test)
    scores = model.decision_function(X_scaled)
    accuracy = run.metrics["report"]["accuracy"]
    assert accuracy == pytest.approx(accuracy_score(y_test, model.predict(X_scaled)))
    assert run.metrics["report"]["roc_auc"] == pytest.approx(roc_auc_score(y_test, scores))
    in_memory = StandardScaler().fit(X_train)
    reference = (
        SGDClassifier(random_state=0)
        .fit(in_memory.transform(X_train), y_train)
        .score(in_memory.transform(X_test), y_test)
    )
    assert abs(accuracy - reference) <= 0.03, reference
    files = {path.name for path in run.path.iterdir()}
    assert {
        "pipeline.yaml",
        "resolved.yaml",
        "overrides.txt",
        "manifest.json",
        "events.jsonl",
        "metrics.json",
        "models",
    } <= files
    assert (run.path / "overrides.txt").read_text() == "seed=1\n"
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["status"] == "succeeded"
    assert {entry["state"] for entry in manifest["steps"].values()} == {"completed"}
    assert manifest["steps"]["model"]["artifacts"]["model"]["format"] in ("skops", "joblib")
    assert manifest["versions"]["dask"] and manifest["cluster"]["workers"] == 2
    events = [
        json.loads(line)["event"] for line in (run.path / "events.jsonl").read_text().splitlines()
    ]
    assert events[0] == "run_started" and events[-1] == "run_finished"
    model = run.model("model")
    assert type(model).__name__ == "SGDClassifier" and hasattr(model, "coef_")


@pytest.mark.parametrize("sync_every", ["auto", 3])
def test_the_manifest_records_the_sync_period(client, tmp_path, sync_every):
    """A fit step's manifest entry has each epoch's period in its history and stats; with
    "auto" also the measurements it was chosen from. With an integer period the model is the
    sync loop of reference_loops.py over the scaled train chunks."""
    text = (
        TRAIN.replace("n_samples: 6000", "n_samples: 16000")
        .replace("chunk_size: 1000", "chunk_size: 500")
        .replace("parallel: {epochs: 5,", f"parallel: {{sync_every: {sync_every}, epochs: 2,")
    )
    run = run_pipeline(loads_pipeline(text), client, run_root=tmp_path)
    manifest = json.loads((run.path / "manifest.json").read_text())
    training = manifest["steps"]["model"]["training"]
    periods = [entry["sync_every"] for entry in training["history"]]
    assert len(periods) == 2 and all(period >= 1 for period in periods)
    if sync_every == "auto":
        assert training["stats"]["sync_every"] == periods
        assert len(training["stats"]["block_s"]) == len(training["stats"]["round_s"]) == 2
    else:
        assert training["stats"]["sync_every"] == 3 and periods == [3, 3]
        from reference_loops import chunks_of, merge_linear_sgd, reference_sync
        from sklearn.linear_model import SGDClassifier

        from taskdml import datasets

        data = datasets.make_classification(
            n_samples=16000, n_features=8, chunk_size=500, random_state=0
        )
        train, _ = datasets.train_test_split(data, random_state=0)
        scaled = run.model("scale").transform(train.X.values)  # what the model trained on
        expected = reference_sync(
            SGDClassifier(random_state=0), chunks_of(scaled, train.y.values, train.X.chunks[0]),
            [0, 1], merge_linear_sgd, n_replicas=2, sync_every=3, epochs=2, shuffle=True,
            random_state=0,
        )  # fmt: skip
        np.testing.assert_array_equal(run.model("model").coef_, expected.coef_)
    assert training["stats"]["rounds"] == sum(entry["rounds"] for entry in training["history"])


def test_keys_and_spans_are_named_after_steps(client, tmp_path):
    """Dashboard prefixes start with the step name; each step has its own span; the named
    steps computed scikit-learn's scaler on the train rows and its model's accuracy."""
    from sklearn.metrics import accuracy_score
    from sklearn.preprocessing import StandardScaler

    run = run_pipeline(loads_pipeline(TRAIN), client, run_root=tmp_path)
    prefixes = _prefixes(client)
    assert {
        "data-generate",
        "split-train",
        "split-test",
        "scale-inspect",
        "scale-fit",  # a small scaler: fitted at once on one worker
        "model-replica",
        "report-statistics",
    } <= prefixes
    spans = client.run_on_scheduler(
        lambda dask_scheduler: [s.name for s in dask_scheduler.extensions["spans"].spans.values()]
    )
    assert {("train_small", step) for step in ("data", "split", "scale", "model", "report")} <= set(
        spans
    )
    X_train, _, X_test, y_test = _split_in_memory(0)
    reference = StandardScaler().fit(X_train)
    np.testing.assert_allclose(run.model("scale").mean_, reference.mean_, rtol=1e-12)
    predicted = run.model("model").predict(reference.transform(X_test))
    expected = accuracy_score(y_test, predicted)
    assert run.metrics["report"]["accuracy"] == pytest.approx(expected, rel=1e-12)


def test_independent_steps_run_concurrently(client, tmp_path):
    """Two steps that do not depend on each other run at once: each waits for the other's
    signal (distributed.Event), which only arrives if both are running; no clock is read."""
    import uuid

    a, b = f"slow_a-{uuid.uuid4().hex}", f"slow_b-{uuid.uuid4().hex}"
    pipeline = PipelineSpec(
        "concurrent",
        [
            Step(
                "slow_a", call="pipeline_functions:meet", with_={"value": 1, "mine": a, "other": b}
            ),
            Step(
                "slow_b", call="pipeline_functions:meet", with_={"value": 2, "mine": b, "other": a}
            ),
            Step("total", call="pipeline_functions:add", inputs={"a": "slow_a", "b": "slow_b"}),
        ],
        imports=ALLOW,
    )
    events = []
    scheduler_before = dask.config.get("scheduler", None)
    run = run_pipeline(pipeline, client, run_root=tmp_path, on_event=events.append)
    assert dask.config.get("scheduler", None) == scheduler_before  # no process-wide leftovers
    assert run.outputs["total"]["result"].result() == 3
    order = [(e["event"], e.get("step")) for e in events if e.get("step")]
    assert order.index(("step_started", "total")) > max(
        order.index(("step_finished", "slow_a")), order.index(("step_finished", "slow_b"))
    )


def test_foreach_fans_out_into_named_items(client, tmp_path):
    """foreach runs the product of values; outputs are keyed by item; keys carry indices."""
    pipeline = PipelineSpec(
        "fan",
        [
            Step("sweep", call="pipeline_functions:add", foreach={"a": [1, 2], "b": [10, 20]}),
            Step(
                "split", call="pipeline_functions:pair", with_={"value": 5}, outputs=["one", "two"]
            ),
        ],
        imports=ALLOW,
    )
    run = run_pipeline(pipeline, client, record=False)
    results = {label: future.result() for label, future in run.outputs["sweep"]["result"].items()}
    assert results == {"a=1,b=10": 11, "a=1,b=20": 21, "a=2,b=10": 12, "a=2,b=20": 22}
    keys = [future.key for future in run.outputs["sweep"]["result"].values()]
    assert all(isinstance(key, tuple) and key[0].startswith("sweep-") for key in keys)
    assert [key[1] for key in keys] == [0, 1, 2, 3]
    assert run.outputs["split"]["two"].result() == 10


def test_plain_callables_receive_in_memory_data(client):
    """A lazy dataset input is computed on the workers and arrives in memory."""
    pipeline = PipelineSpec(
        "memory",
        [
            Step(
                "data",
                call="taskdml.datasets:make_blobs",
                with_={"n_samples": 3000, "chunk_size": 500, "random_state": 0},
            ),
            Step("count", call="pipeline_functions:count_samples", inputs={"data": "data"}),
            Step("sums", call="pipeline_functions:column_sums", inputs={"data": "data"}),
        ],
        imports=ALLOW,
    )
    run = run_pipeline(pipeline, client, record=False)
    assert run.outputs["count"]["result"].result() == 3000
    # The rows that arrive are the generator's: their sums, computed here in NumPy.
    made = make_blobs(n_samples=3000, chunk_size=500, random_state=0)
    expected = np.asarray(made.X.compute(scheduler="sync")).sum(axis=0)
    np.testing.assert_allclose(run.outputs["sums"]["result"].result(), expected, rtol=1e-12)


def test_failed_step_keeps_what_finished(client, tmp_path):
    """A failing step fails the run; upstream and independent work is kept, dependants skipped."""
    pipeline = PipelineSpec(
        "failing",
        [
            Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
            Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
            Step("broken", call="pipeline_functions:fail", with_={"message": "bad input at row 7"}),
            Step("after", call="pipeline_functions:add", inputs={"a": "broken", "b": "broken"}),
        ],
        imports=ALLOW,
    )
    with pytest.raises(
        StepFailed, match="step 'broken' failed: RuntimeError: bad input at row 7"
    ) as info:
        run_pipeline(pipeline, client, run_root=tmp_path)
    manifest = json.loads((info.value.run_dir / "manifest.json").read_text())
    states = {name: entry["state"] for name, entry in manifest["steps"].items()}
    assert states == {
        "data": "completed",
        "model": "completed",
        "broken": "failed",
        "after": "skipped",
    }
    assert manifest["status"] == "failed"
    # What finished is kept, and is right: the saved model is scikit-learn's GaussianNB on iris.
    from sklearn.datasets import load_iris
    from sklearn.naive_bayes import GaussianNB

    from taskdml.runs._directory import load_model

    saved = load_model(info.value.run_dir, "model")
    reference = GaussianNB().fit(*load_iris(return_X_y=True))
    np.testing.assert_array_equal(saved.class_count_, reference.class_count_)
    np.testing.assert_allclose(saved.theta_, reference.theta_, rtol=1e-12)


def test_wrong_output_count_is_explained(client):
    """A callable returning fewer values than declared outputs names the fix."""
    pipeline = PipelineSpec(
        "outputs",
        [
            Step(
                "three", call="pipeline_functions:pair", with_={"value": 1}, outputs=["a", "b", "c"]
            ),
        ],
        imports=ALLOW,
    )
    with pytest.raises(StepFailed, match="declares 3 outputs but its callable returned 2 values"):
        run_pipeline(pipeline, client, record=False)


def test_cluster_spec_starts_the_named_class(tmp_path):
    """cluster.spec builds the named cluster class with its kwargs, computes on it what
    scikit-learn computes in memory, and closes it."""
    text = (
        TRAIN
        + """\
cluster:
  spec:
    class: distributed:LocalCluster
    kwargs: {n_workers: 1, threads_per_worker: 1, host: 127.0.0.1, dashboard_address: "127.0.0.1:0"}
"""
    )
    run = run_pipeline(loads_pipeline(text), run_root=tmp_path)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["cluster"]["cluster"] == "LocalCluster" and manifest["cluster"]["workers"] == 1
    assert manifest["cluster"]["scheduler"].startswith("tcp://127.0.0.1:")
    # and it computed the pipeline right: the scaler is scikit-learn's on the same training rows
    from sklearn.preprocessing import StandardScaler

    reference = StandardScaler().fit(_split_in_memory(0)[0])
    np.testing.assert_allclose(run.model("scale").mean_, reference.mean_, rtol=1e-12)
    np.testing.assert_allclose(run.model("scale").var_, reference.var_, rtol=1e-10)


SEARCH = """\
taskdml: 1
name: search_small
steps:
  data:
    call: taskdml.datasets:load_sklearn
    with: {name: digits, chunk_size: 300}
  tune:
    search: sklearn.linear_model:SGDClassifier
    method: METHOD
    with: {random_state: 0}
    space: SPACE
    budget: {trials: 4, max_epochs: 3}
    cv: 3
    inputs: {data: data}
  report:
    evaluate: [accuracy]
    inputs: {model: tune.best_model, data: data}
"""


@pytest.mark.parametrize(
    "method,space",
    [
        ("grid", "{alpha: [1.0e-4, 1.0e-2], penalty: [l2, l1]}"),
        ("random", "{alpha: {loguniform: [1.0e-5, 1.0e-1]}}"),
        ("asha", "{alpha: {loguniform: [1.0e-5, 1.0e-1]}}"),
    ],
)
def test_search_step_outputs_and_records_trials(client, tmp_path, method, space):
    """A search step gives the best model and parameters, writes trials-tune.csv and a PNG,
    and its report is the saved best model's accuracy computed in memory by scikit-learn."""
    import pandas as pd
    from sklearn.datasets import load_digits
    from sklearn.metrics import accuracy_score

    pipeline = loads_pipeline(SEARCH.replace("METHOD", method).replace("SPACE", space))
    run = run_pipeline(pipeline, client, run_root=tmp_path)
    searched = set(pipeline.step("tune").space)
    best = run.outputs["tune"]["best_params"]
    assert set(best) == searched  # every searched parameter, and nothing else
    trials = pd.read_csv(run.path / "trials-tune.csv")
    assert len(trials) == 4 and {"score", "state"} <= set(trials.columns)  # budget.trials, 2x2 grid
    assert (run.path / "trials-tune.png").read_bytes()[:4] == b"\x89PNG"
    model = run.model("tune")
    assert {name: model.get_params()[name] for name in searched} == best
    X, y = load_digits(return_X_y=True)
    assert run.metrics["report"]["accuracy"] == pytest.approx(accuracy_score(y, model.predict(X)))


ONE_STEP = """\
taskdml: 1
name: facts
imports: {allow: [pipeline_functions]}
CLUSTER
steps:
  facts:
    call: pipeline_functions:worker_facts
"""


def test_cluster_keys_in_the_file_reach_the_workers():
    """The file's threads_per_worker, processes and memory_limit, as a task sees its worker:
    2 threads, 2**30 bytes, and (processes: false) the same process as the caller."""
    import pipeline_functions

    from taskdml.cluster._connect import connect

    block = (
        "cluster: {n_workers: 1, threads_per_worker: 2, processes: false, "
        "memory_limit: 1GiB, dashboard_address: '127.0.0.1:0'}"
    )
    pipeline = loads_pipeline(ONE_STEP.replace("CLUSTER", block))
    with connect(pipeline.cluster) as client:  # what run_pipeline does with the file's block
        facts = client.submit(pipeline_functions.worker_facts, pure=False).result()
    assert facts == {"pid": os.getpid(), "memory_limit": 2**30, "nthreads": 2}


def test_cluster_address_in_the_file_uses_that_scheduler(cluster, tmp_path):
    """cluster.address runs on the scheduler it names, and leaves it running."""
    block = f"cluster: {{address: '{cluster.scheduler_address}'}}"
    run = run_pipeline(loads_pipeline(ONE_STEP.replace("CLUSTER", block)), run_root=tmp_path)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["cluster"]["scheduler"] == cluster.scheduler_address
    assert manifest["cluster"]["cluster"] == "address"
    assert cluster.scheduler.status.name == "running"


def test_models_skops_cannot_trust_are_saved_with_joblib(tmp_path):
    """A model of a type skops does not trust is saved with joblib, and says why; it loads back."""
    import pipeline_functions
    from sklearn.linear_model import LogisticRegression

    from taskdml import RunNotFound
    from taskdml.runs._directory import RunDirectory, load_model

    X, y = np.arange(20.0).reshape(10, 2), np.array([0] * 3 + [1] * 7)
    directory = RunDirectory(tmp_path)
    own = directory.save_model("own", pipeline_functions.MajorityClassifier().fit(X, y))
    assert own["format"] == "joblib" and own["path"] == os.path.join("models", "own.joblib")
    assert "MajorityClassifier" in own["why_not_skops"]
    assert (load_model(directory.path, "own").predict(X) == 1).all()
    known = directory.save_model("known", LogisticRegression().fit(X, y))
    assert known["format"] == "skops"
    np.testing.assert_array_equal(
        load_model(directory.path, "known").coef_, LogisticRegression().fit(X, y).coef_
    )
    with pytest.raises(RunNotFound, match="saved no model for step 'other'"):
        load_model(directory.path, "other")


def test_graph_builders_run_in_the_client_and_plain_callables_on_workers(client):
    """@builds_graph runs in this process and its array is persisted on the cluster; the same
    function unmarked runs as a task in a worker process."""
    from distributed import futures_of

    pipeline = PipelineSpec(
        "builders",
        [
            Step(
                "built",
                call="pipeline_functions:arange_and_pid_marked",
                with_={"n": 10},
                outputs=["array", "pid"],
            ),
            Step(
                "task",
                call="pipeline_functions:arange_and_pid_unmarked",
                with_={"n": 10},
                outputs=["array", "pid"],
            ),
        ],
        imports=ALLOW,
    )
    run = run_pipeline(pipeline, client, record=False)
    built = run.outputs["built"]
    assert built["pid"] == os.getpid()
    assert dask.is_dask_collection(built["array"]) and futures_of(built["array"])
    np.testing.assert_array_equal(built["array"].compute(), np.arange(10))
    worker_pids = set(client.run(os.getpid).values())
    assert run.outputs["task"]["pid"].result() in worker_pids


def test_the_embedded_cluster_warms_what_the_pipeline_names(tmp_path):
    """run_pipeline's own cluster imports, on its worker, the modules of every callable and
    estimator the pipeline names, what its fit steps run there (the engine) and the basics,
    from the plugin it registered at start: all imported when the first step runs. The
    estimator it fitted there is scikit-learn's LabelSpreading on iris."""
    from sklearn.datasets import load_iris
    from sklearn.semi_supervised import LabelSpreading

    from taskdml.cluster._connect import pipeline_modules

    target = tmp_path / "warm.json"
    pipeline = PipelineSpec(
        "warmed",
        [
            Step("probe", call="pipeline_functions:warm_imports", with_={"path": str(target)}),
            Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
            Step("spread", fit="sklearn.semi_supervised:LabelSpreading", inputs={"data": "data"}),
        ],
        imports=ALLOW,
        cluster={"n_workers": 1, "threads_per_worker": 1, "dashboard_address": "127.0.0.1:0"},
    )
    run = run_pipeline(pipeline, record=False, cache=False)
    imported = json.loads(target.read_text())
    assert list(imported) == pipeline_modules(pipeline)
    assert {"sklearn.semi_supervised", "taskdml.parallel.engine._train"} <= set(imported)
    assert all(imported.values()), imported
    spread = run.outputs["spread"]["model"]
    reference = LabelSpreading().fit(*load_iris(return_X_y=True))
    np.testing.assert_array_equal(spread.transduction_, reference.transduction_)
    np.testing.assert_allclose(spread.label_distributions_, reference.label_distributions_)


def test_a_failed_step_names_the_frames_of_the_users_code(tmp_path, client):
    """A step failing inside the user's function records (and publishes) where in the user's
    code, without Python's, Dask's or taskdml's frames."""
    from taskdml import PipelineSpec, Step, run_pipeline
    from taskdml.exceptions import StepFailed

    pipeline = PipelineSpec(
        "fails",
        [Step("bad", call="pipeline_functions:fail", with_={"message": "no luck"})],
        imports={"allow": ["pipeline_functions"]},
    )
    events = []
    with pytest.raises(StepFailed):
        run_pipeline(pipeline, client, run_root=tmp_path, on_event=events.append)
    (failed,) = [e for e in events if e["event"] == "step_failed"]
    (frame,) = failed["where"]
    assert frame.endswith("in fail: raise RuntimeError(message)")
    assert "pipeline_functions.py:" in frame


def test_a_long_step_reports_its_tasks_done_of_seen(tmp_path, client):
    """While a step runs longer than a second, the callback gets ``tasks`` events with the
    step's tasks done of those seen (the terminal's progress of steps that are not
    trainings)."""
    from taskdml import PipelineSpec, Step, run_pipeline

    pipeline = PipelineSpec(
        "slow",
        [Step("wait", call="pipeline_functions:wait_and_return",
              with_={"value": 1, "seconds": 2.5})],
        imports={"allow": ["pipeline_functions"]},
    )  # fmt: skip
    events = []
    run_pipeline(pipeline, client, record=False, on_event=events.append)
    counts = [e["steps"]["wait"] for e in events if e["event"] == "tasks"]
    assert counts and counts[0] == {"done": 0, "seen": 1, "erred": 0}


def test_latest_is_the_run_created_last_whatever_its_folder_is_called(tmp_path):
    """`latest` is the run created last, not the last folder name in sort order (a folder
    copied or named by hand)."""
    from taskdml.runs._directory import RunDirectory, find_run, list_runs

    first, second = RunDirectory(tmp_path), RunDirectory(tmp_path)
    first.update_manifest(created="2026-01-02T00:00:00")
    second.update_manifest(created="2026-01-03T00:00:00")
    (tmp_path / first.run_id).rename(tmp_path / "zzz-named-by-hand")
    assert [os.path.basename(run["path"]) for run in list_runs(tmp_path)] == [
        "zzz-named-by-hand",
        second.run_id,
    ]
    assert find_run("latest", tmp_path)["run_id"] == second.run_id
