"""``parallel: {mode: ...}``: model-parallel, federated, task-parallel and automatic steps."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from click.testing import CliRunner
from sklearn.linear_model import SGDClassifier

from cli.main import cli
from taskdml import PipelineError, load_pipeline, loads_pipeline, run_pipeline
from taskdml.parallel import ClassSharded
from taskdml.parallel._choice import choose_fit, choose_search, sharded_model_bytes
from taskdml.runs._directory import load_model

ROOT = Path(__file__).resolve().parents[2]

WIDE = """
taskdml: 1
name: wide
steps:
  corpus:
    call: taskdml.datasets:make_documents
    with: {{n_documents: 3000, n_topics: 12, chunk_size: 500, random_state: 0}}
  hashed:
    map: taskdml.datasets:hash_text
    with: {{n_features: 2048, alternate_sign: false}}
    inputs: {{data: corpus}}
  split:
    call: taskdml.datasets:train_test_split
    inputs: {{data: hashed}}
    with: {{test_size: 0.2, random_state: 0}}
    outputs: [train, test]
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {{loss: log_loss, alpha: 1.0e-4, random_state: 0}}
    parallel: {parallel}
    inputs: {{data: split.train}}
  report:
    evaluate: [{metrics}]
    inputs: {{model: model, data: split.test}}
"""


def _wide(parallel="{mode: model, n_shards: 3, epochs: 2}", metrics="accuracy, f1_macro"):
    return loads_pipeline(WIDE.format(parallel=parallel, metrics=metrics))


def _chunks(dataset):
    """The (X, y) chunks of a chunked dataset, in order, in memory."""
    X, y = dataset["X"].data, dataset["y"].data
    return [
        (X.blocks[i].compute(), y.blocks[i].compute()) for i in range(len(X.chunks[0]))
    ]  # fmt: skip


@pytest.mark.slow
def test_model_mode_equals_the_unsharded_model_and_is_saved_and_cached(client, tmp_path):
    """A class-sharded fit step trains the shards on their workers; its coefficients equal
    the unsharded model's trained on the same chunks in the same order, its evaluation runs
    where the shards are, it is saved shard by shard and reused from the cache."""
    run = run_pipeline(_wide(), client, run_root=tmp_path / "runs", cache=tmp_path / "cache")
    model = run.outputs["model"]["model"]
    assert isinstance(model, ClassSharded) and len(model.shards_) == 3
    holders = client.who_has(model.shards_)
    assert all(len(holders[shard.key]) == 1 for shard in model.shards_)

    reference = SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0)
    train = _chunks(run.outputs["split"]["train"])
    for _ in range(2):
        for X, y in train:
            reference.partial_fit(X, y, classes=model.classes_)
    shards = client.gather(model.shards_)
    coef = np.vstack([e.coef_ for shard in shards for e in shard.estimators])
    assert np.array_equal(coef, reference.coef_)

    test = _chunks(run.outputs["split"]["test"])
    X_test = scipy.sparse.vstack([X for X, _ in test])
    y_test = np.concatenate([y for _, y in test])
    expected = (reference.predict(X_test) == y_test).mean()
    assert run.metrics["report"]["accuracy"] == pytest.approx(expected)

    saved = load_model(run.path, "model")  # the shards in this process
    assert np.array_equal(saved.predict(X_test), reference.predict(X_test))
    record = json.loads((run.path / "manifest.json").read_text())["steps"]["model"]
    assert record["artifacts"]["model"]["format"] == "sharded"
    assert record["training"]["stats"]["shards"] == 3

    # Reused from the cache as futures on the workers, and evaluated anew with them.
    wider = _wide(metrics="accuracy, balanced_accuracy, roc_auc_ovr")
    again = run_pipeline(wider, client, run_root=tmp_path / "runs", cache=tmp_path / "cache")
    steps = json.loads((again.path / "manifest.json").read_text())["steps"]
    assert steps["model"]["cache"]["hit"] and not steps["report"]["cache"]["hit"]
    assert again.metrics["report"]["accuracy"] == pytest.approx(expected)


@pytest.mark.slow
def test_auto_records_its_choice_and_runs_show_says_why(client, tmp_path):
    """mode: auto picks data parallelism for a model that fits the workers, records why,
    and `taskdml runs show` prints it."""
    run = run_pipeline(
        _wide("{mode: auto, epochs: 1, sync_every: 1}"), client, run_root=tmp_path / "runs"
    )
    record = json.loads((run.path / "manifest.json").read_text())["steps"]["model"]
    choice = record["parallel"]
    assert choice["mode"] == "data" and choice["asked"] == "auto"
    assert choice["model_bytes"] == 12 * 2048 * 8 and choice["n_chunks"] == 6
    # coef_'s bytes: a float64 per class and feature; the split keeps the corpus's chunks.
    n_classes, n_features, n_documents, chunk_size = 12, 2048, 3000, 500
    assert choice["model_bytes"] == n_classes * n_features * np.dtype(np.float64).itemsize
    assert choice["n_chunks"] == math.ceil(n_documents / chunk_size)
    assert "replicas train on the chunks" in choice["reason"]
    assert record["training"]["strategy"] == "sync"
    shown = CliRunner().invoke(cli, ["runs", "show", str(run.path)])
    assert shown.exit_code == 0, shown.output
    assert "parallelism of model: data (auto: " in shown.output


def test_the_automatic_rule(client):
    """Model parallel when three copies of coef_ outgrow the smallest worker; one task for
    one chunk; searches with many candidates on small data train a trial per task."""
    limit = min(w["memory_limit"] for w in client.scheduler_info()["workers"].values())
    wide = SGDClassifier()
    big = choose_fit(wide, 2**20, 1000, 10, 10**6, client)
    assert big.mode == "model" and big.facts["model_bytes"] == 1000 * 2**20 * 8
    assert "3 times in a merge" in big.reason and big.facts["worker_memory_limit"] == limit
    # The rule computed here: coef_ is n_classes x n_features float64s; model parallel when
    # three copies of it outgrow the smallest worker's memory limit.
    n_features, n_classes = 2**20, 1000
    model_bytes = n_classes * n_features * 8
    assert big.facts["model_bytes"] == model_bytes
    assert big.mode == ("model" if 3 * model_bytes > limit else "data")
    assert choose_fit(wide, 20, 5, 1, 10**6, client).mode == "task"
    assert choose_fit(wide, 20, 5, 8, 10**6, client).mode == "data"
    from sklearn.ensemble import RandomForestClassifier

    assert sharded_model_bytes(RandomForestClassifier(), 20, 5) is None
    assert choose_fit(RandomForestClassifier(), 2**20, 1000, 8, 10**6, client).mode == "data"
    assert choose_search(12, 10**6, client).mode == "task"
    assert choose_search(1, 10**6, client).mode == "data"
    assert choose_search(12, limit, client).mode == "data"


@pytest.mark.slow
def test_task_mode_trains_in_one_chain(client, tmp_path):
    """mode: task trains one partial_fit chain (no replicas, no merges): scikit-learn's
    partial_fit over the train chunks in the engine's seeded order (reference_loops.py)."""
    from reference_loops import merge_linear_sgd, reference_sync

    parallel = "{mode: task, epochs: 1, random_state: 0}"
    run = run_pipeline(_wide(parallel), client, run_root=tmp_path / "runs")
    record = json.loads((run.path / "manifest.json").read_text())["steps"]["model"]
    assert record["training"]["strategy"] == "sequential"
    assert record["training"]["stats"]["replicas"] == 1
    expected = reference_sync(
        SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0),
        _chunks(run.outputs["split"]["train"]), np.arange(12), merge_linear_sgd, n_replicas=1,
        sync_every=1, epochs=1, shuffle=True, random_state=0,
    )  # fmt: skip
    np.testing.assert_array_equal(run.outputs["model"]["model"].coef_, expected.coef_)
    assert run.metrics["report"]["accuracy"] > 0.5


@pytest.mark.slow
def test_the_federated_example_runs_on_its_silo_workers(tmp_path):
    """pipelines/federated.yaml on its embedded cluster: a worker per silo holding the silo's
    resource, the silos' rows trained there, and the merged model evaluated centrally."""
    pipeline = load_pipeline(ROOT / "pipelines" / "federated.yaml", overrides=["rounds=3"])
    run = run_pipeline(pipeline, run_root=tmp_path / "runs")
    record = json.loads((run.path / "manifest.json").read_text())["steps"]["model"]
    stats = record["training"]["stats"]
    assert sorted(stats["workers"]) == ["hospital_a", "hospital_b", "hospital_c"]
    addresses = [address for found in stats["workers"].values() for address in found]
    assert len(set(addresses)) == 3  # one worker each, not shared
    assert stats["secure_aggregation"] and len(record["training"]["history"]) == 3
    assert sum(stats["n_samples"].values()) == 1437  # the digits' training rows
    assert run.metrics["report"]["accuracy"] > 0.8
    # Within 5 points of scikit-learn's model fitted centrally on the silos' pooled rows.
    from taskdml.datasets import load_held_out, load_silo

    chunks = [chunk for silo in range(3) for chunk in load_silo(silo=silo, random_state=0)]
    X = np.concatenate([X for X, _ in chunks])
    y = np.concatenate([y for _, y in chunks])
    held_out = load_held_out(random_state=0)
    central = SGDClassifier(loss="log_loss", alpha=1e-3, random_state=0).fit(X, y)
    expected = central.score(held_out.X.values, held_out.y.values)
    assert run.metrics["report"]["accuracy"] >= expected - 0.05, expected


def test_a_federated_step_needs_workers_with_its_silos_resources(client, tmp_path):
    """On a cluster without the silos' workers the step fails and says how to start them."""
    pipeline = load_pipeline(ROOT / "pipelines" / "federated.yaml", overrides=["rounds=1"])
    with pytest.raises(Exception, match="no worker has the resources") as caught:
        run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    assert "--resources" in str(caught.value)


@pytest.mark.parametrize(
    "step, message",
    [
        ("parallel: {mode: data, rounds: 3}", "'rounds' does not apply to mode 'data'; it "
         "belongs to mode 'federated'"),
        ("parallel: {mode: model, strategy: sync}", "'strategy' does not apply to mode 'model'"),
        ("parallel: {mode: federated}", "a federated step needs rounds"),
        ("parallel: {mode: federated, rounds: 2, silos: [hospital_x]}",
         "unknown silo 'hospital_x'. Did you mean 'hospital_a'?"),
        ("parallel: {mode: federated, rounds: 2}\n    inputs: {data: held_out}",
         "unknown input 'data' for a 'fit' step. Allowed: none. A federated step's data is "
         "loaded by its silos."),
        ("parallel: {mode: sideways}", "expected one of 'data', 'model', 'federated', 'task', "
         "'auto'"),
    ],
)  # fmt: skip
def test_parallel_blocks_are_checked(step, message):
    """Mistakes in a step's parallel block name the key and the mode it belongs to."""
    text = f"""
taskdml: 1
name: checked
silos:
  hospital_a:
    load: taskdml.datasets:load_silo
    with: {{silo: 0}}
    resources: {{hospital_a: 1}}
steps:
  held_out:
    call: taskdml.datasets:load_held_out
  model:
    fit: sklearn.linear_model:SGDClassifier
    {step}
"""
    with pytest.raises(PipelineError, match="") as caught:
        loads_pipeline(text)
    assert message in str(caught.value)


def test_the_old_names_shards_and_replicas_warn_where_they_are_and_still_load():
    """parallel: {shards, replicas}, the keys before 0.2: one FutureWarning each, with the
    file, line and column, and the same step as under n_shards and n_replicas."""
    with pytest.warns(FutureWarning) as caught:
        old = _wide("{mode: model, shards: 2, replicas: 2}")
    messages = sorted(str(warning.message) for warning in caught)
    assert len(messages) == 2
    assert messages[0].startswith("<string>:20:")
    assert "steps.model.parallel.shards is deprecated since taskdml 0.2" in messages[0]
    assert "rename it n_shards" in messages[0]
    assert "steps.model.parallel.replicas is deprecated" in messages[1]
    new = _wide("{mode: model, n_shards: 2, n_replicas: 2}")
    assert old.step("model").parallel == new.step("model").parallel
    with pytest.raises(PipelineError, match="'shards' is the old name of 'n_shards', and both"):
        _wide("{mode: model, shards: 2, n_shards: 2}")


@pytest.mark.parametrize(
    "method, budget, parallel, message",
    [
        ("asha", "{trials: 2, max_epochs: 3}", "{epochs: 2}",
         "'epochs' does not apply to method 'asha' (its budget sets each trial's epochs: "
         "budget.max_epochs)"),
        ("hyperband", "{max_epochs: 3}", "{n_replicas: 2}",
         "'n_replicas' does not apply to method 'hyperband'"),
    ],
)  # fmt: skip
def test_a_search_step_takes_the_options_its_search_takes(method, budget, parallel, message):
    """The options table says what each search takes: the rest is refused when the file loads."""
    text = f"""
taskdml: 1
name: s
steps:
  data: {{call: taskdml.datasets:load_sklearn, with: {{name: iris}}}}
  search:
    search: sklearn.linear_model:SGDClassifier
    method: {method}
    space: {{alpha: [0.1, 0.01]}}
    budget: {budget}
    parallel: {parallel}
    inputs: {{data: data}}
"""
    with pytest.raises(PipelineError, match=re.escape(message)):
        loads_pipeline(text)


def test_a_search_cannot_be_model_parallel_and_silos_need_one_place():
    """A search trains data- or task-parallel; a silo names workers or resources, not both;
    a federated step needs a silos block."""
    search = """
taskdml: 1
name: s
steps:
  data: {call: taskdml.datasets:load_sklearn, with: {name: iris}}
  search:
    search: sklearn.linear_model:SGDClassifier
    method: grid
    space: {alpha: [0.1, 0.01]}
    parallel: {mode: model}
    inputs: {data: data}
"""
    with pytest.raises(PipelineError, match="use mode data, task or auto"):
        loads_pipeline(search)
    both = """
taskdml: 1
name: s
silos:
  a: {load: "taskdml.datasets:load_silo", with: {silo: 0}, workers: [w0], resources: {a: 1}}
steps:
  model:
    fit: sklearn.linear_model:SGDClassifier
    parallel: {mode: federated, rounds: 2}
"""
    with pytest.raises(PipelineError, match="one of workers"):
        loads_pipeline(both)
    alone = """
taskdml: 1
name: s
steps:
  model:
    fit: sklearn.linear_model:SGDClassifier
    parallel: {mode: federated, rounds: 2}
"""
    with pytest.raises(PipelineError, match="a federated step needs a silos: block"):
        loads_pipeline(alone)


def test_show_names_the_mode_and_the_silos():
    """`taskdml show` says how each training is parallel, and a federated step's silos."""
    shown = CliRunner().invoke(cli, ["show", str(ROOT / "pipelines" / "federated.yaml")])
    assert shown.exit_code == 0, shown.output
    assert "[federated]  across silos hospital_a, hospital_b, hospital_c" in shown.output
    shown = CliRunner().invoke(cli, ["show", str(ROOT / "pipelines" / "wide_text.yaml")])
    assert "[parallelism chosen at run time]" in shown.output


@pytest.mark.slow
def test_model_mode_with_replicas_is_hybrid(client, tmp_path):
    """shards x replicas: every shard trained by two replicas on distinct workers, merged."""
    pipeline = _wide("{mode: model, n_shards: 2, n_replicas: 2, sync_every: 1}")
    run = run_pipeline(pipeline, client, run_root=tmp_path / "runs")
    stats = json.loads((run.path / "manifest.json").read_text())["steps"]["model"]["training"]
    stats = stats["stats"]
    assert stats["replicas"] == 2 and stats["shards"] == 2
    assert all(len(set(where)) == 2 for where in stats["placement"].values())
    assert run.metrics["report"]["accuracy"] > 0.5
    # The reference loop: chunk i to replica i mod 2, in order (model mode does not shuffle),
    # a merge after every chunk, one epoch; each class's row of coef_ is its own binary
    # problem, so sharding the classes changes nothing.
    from reference_loops import merge_linear_sgd, reference_sync

    expected = reference_sync(
        SGDClassifier(loss="log_loss", alpha=1e-4, random_state=0),
        _chunks(run.outputs["split"]["train"]), np.arange(12), merge_linear_sgd, n_replicas=2,
        sync_every=1, epochs=1, shuffle=False, random_state=0,
    )  # fmt: skip
    shards = client.gather(run.outputs["model"]["model"].shards_)
    coef = np.vstack([e.coef_ for shard in shards for e in shard.estimators])
    np.testing.assert_allclose(coef, expected.coef_, rtol=1e-12, atol=1e-12)
    test = _chunks(run.outputs["split"]["test"])
    X_test = scipy.sparse.vstack([X for X, _ in test])
    y_test = np.concatenate([y for _, y in test])
    accuracy = np.mean(expected.predict(X_test) == y_test)
    assert run.metrics["report"]["accuracy"] == pytest.approx(accuracy)
