"""The plan stage: one RunPlan for --dry-run and for the run, and one cluster precedence rule."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from taskdml import Cache, load_pipeline, run_pipeline
from taskdml.cluster._connect import choose, default_workers
from taskdml.runner import plan_run

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "pipelines" / "quickstart.yaml"
SMALL = ["n_samples=4000", "chunk_size=2000", "epochs=1"]


@pytest.mark.parametrize(
    ("block", "options", "kind", "description"),
    [
        ({}, {}, "local", f"embedded LocalCluster on 127.0.0.1 with {default_workers()} workers"),
        ({"n_workers": 3}, {}, "local", "embedded LocalCluster on 127.0.0.1 with 3 workers"),
        (
            {"n_workers": 3},
            {"n_workers": 1},
            "local",
            "embedded LocalCluster on 127.0.0.1 with 1 workers",
        ),  # noqa: E501
        ({"address": "tcp://10.0.0.5:8786"}, {"n_workers": 1}, "address", "tcp://10.0.0.5:8786"),
        (
            {"address": "tcp://10.0.0.5:8786"},
            {"scheduler": "tcp://10.0.0.6:8786"},
            "address",
            "tcp://10.0.0.6:8786",
        ),  # fmt: skip
        (
            {"spec": {"class": "distributed:LocalCluster", "kwargs": {"n_workers": 2}}},
            {},
            "spec",
            "distributed:LocalCluster started with {'n_workers': 2}",
        ),  # fmt: skip
        (
            {"spec": {"class": "distributed:LocalCluster"}},
            {"scheduler": "tcp://10.0.0.6:8786"},
            "address",
            "tcp://10.0.0.6:8786",
        ),  # fmt: skip
    ],
)
def test_cluster_precedence(block, options, kind, description):
    """A command-line scheduler beats the file's address, which beats its spec, which beats
    the embedded cluster; --workers beats the file's n_workers, which beats one per core."""
    target = choose(block, **options)
    assert (target.kind, target.description) == (kind, description)


def test_a_client_passed_in_wins_over_everything(client):
    """A client given to run_pipeline is used as it is, whatever the file says."""
    target = choose({"address": "tcp://10.0.0.5:8786"}, scheduler="tcp://10.0.0.6:8786",
                    client=client)  # fmt: skip
    assert target.kind == "client" and client.scheduler.address in target.description


@pytest.mark.slow
def test_dry_run_and_run_follow_one_plan(tmp_path, client):
    """The keys and reuse decisions --dry-run prints are the plan's, the run records exactly
    the plan's keys, and after the run the same plan reuses every step; what the planned run
    computed is scikit-learn's scaler and accuracy on the same rows."""
    cache = Cache(tmp_path / "cache")
    pipeline = load_pipeline(QUICKSTART, SMALL)
    before = plan_run(pipeline, cache=cache)
    assert [planned.reuse for planned in before.steps] == [False] * len(before.steps)
    assert [planned.name for planned in before.steps] == [
        step.name for step in pipeline.ordered_steps()
    ]
    shown = CliRunner().invoke(
        cli,
        [
            "run",
            str(QUICKSTART),
            *SMALL,
            "--dry-run",
            "--explain",
            "--json",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],  # fmt: skip
    )
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    assert document["cache"] == {p.name: {"cache": p.cache_record()} for p in before.steps}
    run = run_pipeline(pipeline, client, cache=cache, run_root=tmp_path / "runs")
    recorded = {name: entry["cache"]["key"] for name, entry in run.steps.items()}
    assert recorded == {planned.name: planned.key.key for planned in before.steps}
    after = plan_run(pipeline, cache=cache)
    assert [planned.reuse for planned in after.steps] == [True] * len(after.steps)
    assert after.cluster.description == before.cluster.description
    from sklearn.metrics import accuracy_score
    from sklearn.preprocessing import StandardScaler

    from taskdml import datasets

    data = datasets.make_classification(
        n_samples=4000, n_features=20, n_informative=10, chunk_size=2000, random_state=0
    )
    train, test = datasets.train_test_split(data, test_size=0.2, random_state=0)
    train, test = train.compute(), test.compute()
    reference = StandardScaler().fit(train["X"].values)
    np.testing.assert_allclose(run.model("scale").mean_, reference.mean_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(run.model("scale").var_, reference.var_, rtol=1e-10)
    predicted = run.model("model").predict(reference.transform(test["X"].values))
    expected = accuracy_score(test["y"].values, predicted)
    assert run.metrics["report"]["accuracy"] == pytest.approx(expected, rel=1e-12)
