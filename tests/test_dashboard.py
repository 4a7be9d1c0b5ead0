"""The taskdml page of the Dask dashboard: its state from a run's events, its JSON, and the
page itself in headless Chromium (Debian's ``chromium``, driven by Playwright)."""

import json
import os
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from browser import CHROMIUM, launch
from distributed import Client, LocalCluster
from sklearn.metrics import accuracy_score, f1_score, log_loss, roc_auc_score
from sklearn.preprocessing import StandardScaler

import taskdml
import taskdml.runs._dashboard
from taskdml import datasets
from taskdml.runs._dashboard import RunState
from taskdml.runs._directory import load_model

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("TASKDML_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
METRIC = re.compile(r"(\w+)=(-?[0-9.e+-]+)")
"""A metric as the dashboard's steps table shows it (``accuracy=0.7716``)."""


def test_the_state_follows_a_runs_events_and_counts_its_steps_tasks():
    """Steps move through their states, epochs, trials and metrics are kept, and the tasks of
    a step are counted by their keys' prefix."""
    state = RunState()
    steps = [{"name": "data", "kind": "call", "inputs": []},
             {"name": "model", "kind": "fit", "inputs": ["data"]}]  # fmt: skip
    state.apply({"event": "run_started", "run_id": "r1", "pipeline": "p", "steps": steps})
    state.apply({"event": "step_started", "run_id": "r1", "step": "data"})
    for key, finish in [(("data-abc", 0), "waiting"), (("data-abc", 0), "memory"),
                        (("data-abc", 1), "waiting"), ("other-xyz", "waiting")]:  # fmt: skip
        state.transition(key, finish)
    state.apply({"event": "step_cached", "run_id": "r1", "step": "data", "duration_s": 0.1})
    state.apply({"event": "epoch", "run_id": "r1", "step": "model", "epoch": 1, "epochs": 2,
                 "validation_score": 0.8})  # fmt: skip
    state.apply({"event": "trial", "run_id": "r1", "step": "model", "trial": 3, "score": 0.7,
                 "status": "stopped at rung 0"})  # fmt: skip
    state.apply({"event": "run_finished", "run_id": "r1", "status": "succeeded"})
    (run,) = state.snapshot()["runs"]
    assert run["status"] == "succeeded"
    assert run["steps"]["data"]["state"] == "cached"
    assert run["steps"]["data"]["tasks"] == {"done": 1, "seen": 2, "erred": 0}
    assert run["steps"]["model"]["epochs"][0]["validation_score"] == 0.8
    assert run["steps"]["model"]["trials"]["3"]["status"] == "stopped at rung 0"
    state.transition(("data-abc", 2), "waiting")  # the run is over: nothing counted
    assert run["steps"]["data"]["tasks"]["seen"] == 2


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A graph run (PageRank in supersteps), a search run and a quickstart run (4 epochs) on a
    cluster with a dashboard: the cluster's address, the runs and the events each run handed
    to its callback."""
    folder = tmp_path_factory.mktemp("dashboard")
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
        ) as cluster,
        Client(cluster) as client,
    ):
        quickstart = taskdml.load_pipeline(
            ROOT / "pipelines" / "quickstart.yaml",
            overrides=["n_samples=20000", "chunk_size=2500", "epochs=4"],
        )
        search = taskdml.load_pipeline(
            ROOT / "pipelines" / "search.yaml",
            overrides=["trials=9", "steps.data.with.n_samples=60000",
                       "steps.data.with.chunk_size=7500"],
        )  # fmt: skip
        folder.joinpath("graph.yaml").write_text(GRAPH_PIPELINE)
        graph = taskdml.load_pipeline(folder / "graph.yaml")
        events = {"graph": [], "quickstart": [], "search": []}
        runs = {
            "graph": taskdml.run_pipeline(
                graph, client, run_root=folder, on_event=events["graph"].append
            ),
            "search": taskdml.run_pipeline(
                search, client, run_root=folder, on_event=events["search"].append
            ),
            "quickstart": taskdml.run_pipeline(
                quickstart, client, run_root=folder, on_event=events["quickstart"].append
            ),
        }
        yield client.dashboard_link.rsplit("/status", 1)[0], runs, events


GRAPH_PIPELINE = """\
taskdml: 1
name: graph_dash
steps:
  graph:
    call: taskdml.datasets:make_sbm
    with: {sizes: [150, 100], p_in: 0.05, p_out: 0.004, chunk_vertices: 125, random_state: 0}
  ranks:
    call: taskdml.graph:pagerank
    inputs: {graph: graph}
    with: {tol: 1.0e-9}
"""
"""PageRank of a small SBM graph on the workers: its supersteps go to the dashboard."""


def _power_iteration_changes(alpha=0.85, tol=1e-9):
    """The L1 change of each step of PageRank's power iteration (written here, networkx's
    dangling rule) on GRAPH_PIPELINE's graph, made here, until it is below *tol*: what the
    run's supersteps must have measured, one per superstep."""
    edges = datasets.make_sbm([150, 100], 0.05, 0.004, chunk_vertices=125, random_state=0)
    n, src, dst = edges.attrs["shape"][0], edges.src.values, edges.dst.values
    A = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    A = A + sp.triu(A, 1).T + sp.tril(A, -1).T  # undirected: each edge stored once
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    x, changes = np.full(n, 1.0 / n), []
    while not changes or changes[-1] >= tol:
        new = alpha * (P.T @ x + x[out == 0].sum() / n) + (1 - alpha) / n
        changes.append(np.abs(new - x).sum())
        x = new
    return changes


def _recorded_supersteps(run_path, step):
    """``[(superstep, change)]`` of *step*'s superstep events, read from ``events.jsonl``."""
    lines = (Path(run_path) / "events.jsonl").read_text().splitlines()
    return [
        (event["superstep"], event["change"])
        for event in map(json.loads, lines)
        if event["event"] == "superstep" and event["step"] == step
    ]


def _scaled_test_rows(run_path, n_samples, chunk_size):
    """The test rows of a run of quickstart or search.yaml (seed 0), made here, scaled by
    scikit-learn's StandardScaler fitted in memory on the train rows, which the run's
    ``scale`` step must be: ``(X_test, y_test)``."""
    data = datasets.make_classification(
        n_samples=n_samples, n_features=20, n_informative=10, chunk_size=chunk_size, random_state=0
    )
    train, test = datasets.train_test_split(data, test_size=0.2, random_state=0)
    train, test = train.compute(), test.compute()
    reference = StandardScaler().fit(train["X"].values)
    scaler = load_model(run_path, "scale")
    np.testing.assert_allclose(scaler.mean_, reference.mean_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scaler.var_, reference.var_, rtol=1e-10)
    return reference.transform(test["X"].values), test["y"].values


def _quickstart_metrics(run_path):
    """scikit-learn's metrics of the quickstart run's model on its test rows (made here): what
    its ``report`` step must have recorded, and every page must show."""
    X_test, y_test = _scaled_test_rows(run_path, 20_000, 2500)
    model = load_model(run_path, "model")
    proba = model.predict_proba(X_test)
    return {
        "accuracy": accuracy_score(y_test, model.predict(X_test)),
        "f1_macro": f1_score(y_test, model.predict(X_test), average="macro"),
        "roc_auc": roc_auc_score(y_test, proba[:, 1]),
        "log_loss": log_loss(y_test, proba),
    }


def test_the_json_endpoint_lists_the_runs_steps_epochs_and_trials(finished_run):
    """/taskdml/api/state holds both runs, newest first, every step completed, the model's
    four epochs and the search's nine trials; the quickstart's accuracy there is
    scikit-learn's accuracy of its model on its test rows."""
    address, runs, _ = finished_run
    state = json.load(urllib.request.urlopen(f"{address}/taskdml/api/state", timeout=30))
    newest, older = state["runs"][:2]
    assert newest["run_id"] == runs["quickstart"].run_id and newest["status"] == "succeeded"
    assert {n: s["state"] for n, s in newest["steps"].items()} == dict.fromkeys(
        ["data", "split", "scale", "model", "report"], "completed"
    )
    assert [e["epoch"] for e in newest["steps"]["model"]["epochs"]] == [1, 2, 3, 4]
    assert newest["steps"]["report"]["metrics"]["accuracy"] > 0.6
    X_test, y_test = _scaled_test_rows(runs["quickstart"].path, 20_000, 2500)
    expected = accuracy_score(y_test, load_model(runs["quickstart"].path, "model").predict(X_test))
    assert newest["steps"]["report"]["metrics"]["accuracy"] == pytest.approx(expected, rel=1e-12)
    assert len(older["steps"]["tune"]["trials"]) == 9
    # the graph run's supersteps: those of events.jsonl, and the power iteration's changes
    (graph,) = [run for run in state["runs"] if run["run_id"] == runs["graph"].run_id]
    shown = [(e["superstep"], e["change"]) for e in graph["steps"]["ranks"]["supersteps"]]
    recorded = _recorded_supersteps(runs["graph"].path, "ranks")
    assert shown == recorded
    changes = _power_iteration_changes()
    assert [number for number, _ in shown] == list(range(len(changes)))
    np.testing.assert_allclose([change for _, change in shown], changes, rtol=1e-6, atol=1e-15)
    assert graph["steps"]["ranks"]["supersteps"][-1]["tol"] == 1e-9


def test_the_event_stream_of_a_search_run_is_whole(finished_run):
    """events.jsonl parses line by line; every step started and finished; every trial of the
    search ends in a final state; the callback got the same events (and the terminal's
    ``tasks`` counts, which are not recorded); the metric events' values are scikit-learn's
    accuracy and ROC AUC of the best model on the test rows."""
    _, runs, events = finished_run
    lines = (Path(runs["search"].path) / "events.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    handed = [e["event"] for e in events["search"] if e["event"] != "tasks"]  # not recorded
    assert [e["event"] for e in logged] == handed
    assert logged[0]["event"] == "run_started" and logged[-1]["event"] == "run_finished"
    steps = {"data", "split", "scale", "tune", "report"}
    assert {e["step"] for e in logged if e["event"] == "step_started"} == steps
    assert {e["step"] for e in logged if e["event"] == "step_finished"} == steps
    final = {}
    for event in logged:
        if event["event"] == "trial":
            final[event["trial"]] = event["status"]
    assert len(final) == 9
    assert all(s == "completed" or s.startswith("stopped at rung") for s in final.values())
    assert {e["name"] for e in logged if e["event"] == "metric"} == {"accuracy", "roc_auc"}
    X_test, y_test = _scaled_test_rows(runs["search"].path, 60_000, 7500)
    best = load_model(runs["search"].path, "tune")
    expected = {
        "accuracy": accuracy_score(y_test, best.predict(X_test)),
        "roc_auc": roc_auc_score(y_test, best.predict_proba(X_test)[:, 1]),
    }
    for event in logged:
        if event["event"] == "metric":
            assert event["value"] == pytest.approx(expected[event["name"]], rel=1e-9), event


@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),  # CI installs it (.ci/run): never skipped
    reason="Debian's chromium is not installed (apt-get install chromium)",
)
def test_the_page_in_chromium_shows_the_steps_and_a_training_curve(finished_run):
    """Headless Chromium opens /taskdml: the steps are listed with their states, the DAG and a
    training curve are drawn; a screenshot is kept in build/test-artifacts/."""
    from playwright.sync_api import sync_playwright

    address, runs, _ = finished_run
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(f"{address}/taskdml", timeout=30_000)
            page.wait_for_selector("#steps tbody tr[data-step='model']", timeout=30_000)
            rows = page.locator("#steps tbody tr")
            assert rows.count() == 5
            states = {
                rows.nth(i).get_attribute("data-step"): rows.nth(i).locator(".state").inner_text()
                for i in range(5)
            }
            assert states == dict.fromkeys(["data", "split", "scale", "model", "report"],
                                           "completed")  # fmt: skip
            assert page.locator("#dag svg g[data-state='completed']").count() == 5
            # the report step's row shows its metrics, to 4 decimals: scikit-learn's values
            shown = page.locator("#steps tbody tr[data-step='report']").inner_text()
            metrics = {name: float(value) for name, value in METRIC.findall(shown)}
            expected = _quickstart_metrics(runs["quickstart"].path)
            assert metrics.keys() == expected.keys(), shown
            for name, value in expected.items():
                assert metrics[name] == pytest.approx(value, abs=6e-5), (name, shown)
            curve = page.locator("svg.curve[aria-label='model: validation score per epoch']")
            if curve.count() == 0:  # no validation data: the loss or the period is drawn
                curve = page.locator("svg.curve")
            assert curve.count() >= 1 and curve.first.locator("polyline").count() >= 1
            assert page.locator("#status").inner_text() == "succeeded"
            page.select_option("#pick", runs["search"].run_id)
            page.wait_for_selector("table.leaderboard[data-step='tune']", timeout=30_000)
            assert page.locator("table.leaderboard tr").count() == 1 + 9
            # the graph run: PageRank's superstep and change, its curve against the tolerance
            page.select_option("#pick", runs["graph"].run_id)
            curve = page.locator("svg.convergence[data-step='ranks']")
            curve.wait_for(timeout=30_000)
            recorded = _recorded_supersteps(runs["graph"].path, "ranks")
            assert curve.get_attribute("data-scale") == "log"
            assert curve.locator("circle").count() == len(recorded)
            assert curve.locator("line.tolerance").count() == 1
            row = page.locator("#steps tbody tr[data-step='ranks']").inner_text()
            assert f"superstep {len(recorded)} (at most 1000)" in row, row
            assert f"{recorded[-1][1]:.2e}" in row, row  # the last change, as the page writes it
            page.screenshot(path=str(ARTIFACTS / "dashboard-graph.png"), full_page=True)
            page.select_option("#pick", runs["quickstart"].run_id)
            page.wait_for_selector("#steps tbody tr[data-step='model']", timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


@pytest.mark.slow
def test_a_scheduler_started_elsewhere_loads_the_page_with_preload(dask_cluster):
    """`dask scheduler` with taskdml.runs._dashboard preloaded serves /taskdml before any run, and
    a run on it keeps that plugin (it is not installed twice)."""
    preload = {"DASK_DISTRIBUTED__SCHEDULER__PRELOAD": '["taskdml.runs._dashboard"]'}
    address = dask_cluster.start(workers=(None,), scheduler=preload)

    def plugins(dask_scheduler):  # pickled by value: the scheduler cannot import the tests
        return [name for name in dask_scheduler.plugins if name.startswith("taskdml")]

    with Client(address, set_as_default=False) as client:
        assert client.run_on_scheduler(plugins) == ["taskdml-dashboard"]
        link = client.dashboard_link.rsplit("/status", 1)[0]
        assert json.load(urllib.request.urlopen(f"{link}/taskdml/api/state"))["runs"] == []
        page = taskdml.runs._dashboard.register(client)
        assert page == f"{link}/taskdml"
        assert client.run_on_scheduler(plugins) == ["taskdml-dashboard"]


@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (apt-get install chromium)",
)
def test_report_html_of_a_finished_run_opens_offline_in_chromium(finished_run):
    """report.html of the quickstart run opens from the file alone (no request leaves it):
    its steps table, its metrics and every picture are there and drawn."""
    from playwright.sync_api import sync_playwright

    _, runs, _ = finished_run
    report = Path(runs["quickstart"].path) / "report.html"
    requested = []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.on("request", lambda request: requested.append(request.url))
            page.goto(report.as_uri(), timeout=30_000)
            text = page.inner_text("body")
            for step in ("data", "split", "scale", "model", "report"):
                assert step in text
            assert "accuracy" in text and runs["quickstart"].run_id in text
            # the metrics table, to 4 decimals: scikit-learn's values on the run's test rows
            expected = _quickstart_metrics(runs["quickstart"].path)
            for name, value in expected.items():
                (shown,) = re.findall(rf"^{name}\s+(\S+)$", text, flags=re.MULTILINE)
                assert float(shown) == pytest.approx(value, abs=6e-5), (name, shown)
            images = page.locator("img")
            assert images.count() >= 3  # the DAG, the training, the evaluation
            widths = [
                images.nth(i).evaluate("img => img.naturalWidth") for i in range(images.count())
            ]
            assert all(width > 100 for width in widths)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert [url for url in requested if not url.startswith(("file:", "data:"))] == []


def test_report_html_of_a_graph_run_shows_its_supersteps(finished_run):
    """report.html of the graph run gives PageRank's supersteps run (the power iteration's
    count), that it converged below its tolerance, and its convergence picture, which the
    pictures list notes."""
    _, runs, _ = finished_run
    path = Path(runs["graph"].path)
    changes = _power_iteration_changes()
    page = (path / "report.html").read_text()
    (table,) = re.findall(r"<table class='facts graph' data-step='ranks'>(.*?)</table>", page)
    facts = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table))
    assert int(facts["supersteps run"]) == len(changes) == len(_recorded_supersteps(path, "ranks"))
    assert facts["converged"] == "yes" and facts["tolerance"] == "1e-09"
    assert facts["why it stopped"].startswith(f"converged after {len(changes)} supersteps")
    assert float(facts["last L1 change"]) == pytest.approx(changes[-1], rel=1e-3)
    assert "alt='convergence-ranks.png'" in page
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["pictures"]["convergence-ranks.png"] == "convergence-ranks.png"
    header = (path / "convergence-ranks.png").read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(header[16:20], "big") > 600
    summary = manifest["steps"]["ranks"]["summary"]["result"]
    assert summary == {"type": "graph result", "vertices": 250, "supersteps": len(changes),
                       "converged": True}  # fmt: skip
