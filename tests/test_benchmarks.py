"""The benchmark scripts still run: their smoke runs (``--quick``), which print only."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scaling_quick_run(tmp_path):
    """benchmarks/scaling.py --quick trains on 1 and 2 workers, streams, measures memory and
    models the speed-up, without touching RESULTS.md."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaling.py"),
            "--quick",
            "--tmp",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for section in ("### Speed-up", "### Streaming against persisting", "### Peak memory"):
        assert section in run.stdout
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == results


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_model_parallel_quick_run(tmp_path):
    """benchmarks/model_parallel.py --quick trains and predicts a sharded model on 4 workers,
    compares it with the unsharded one, the feature-sharded steps with the in-process ones, and
    leaves RESULTS.md alone."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "model_parallel.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "### A model larger than one worker" in run.stdout
    assert "equals the unsharded one bit for bit: yes" in run.stdout
    assert "The weights equal the in-process steps to 1e-10: yes" in run.stdout
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == results


def _search_benchmark():
    """benchmarks/search.py as a module (its functions, not its run)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import search
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return search


def test_search_incumbent_rule_on_written_evaluations():
    """The incumbent of benchmarks/search.py's time-to-score table: at each evaluation, the
    best validation score among the evaluations at the largest budget reached so far; a larger
    budget's first evaluation takes over even when it scores lower. Written by hand."""
    search = _search_benchmark()
    evaluations = [  # in no particular order, as files of several processes give them
        {"time": 4.0, "budget": 3, "score": 0.70, "holdout": 0.71},
        {"time": 1.0, "budget": 1, "score": 0.60, "holdout": 0.58},
        {"time": 2.0, "budget": 1, "score": 0.65, "holdout": 0.66},
        {"time": 3.0, "budget": 1, "score": 0.62, "holdout": 0.90},  # a better holdout, unseen
        {"time": 5.0, "budget": 1, "score": 0.99, "holdout": 0.99},  # a lower budget: ignored
        {"time": 6.0, "budget": 3, "score": 0.75, "holdout": 0.74},
        {"time": 7.0, "budget": 3, "score": 0.75, "holdout": 0.50},  # a tie: the earlier stays
        {"time": 8.0, "budget": 9, "score": 0.68, "holdout": 0.69},
    ]
    trajectory = search.incumbent_trajectory(evaluations)
    assert trajectory == [
        (1.0, 0.58, 1, 0.60),
        (2.0, 0.66, 1, 0.65),
        (3.0, 0.66, 1, 0.65),
        (4.0, 0.71, 3, 0.70),
        (5.0, 0.71, 3, 0.70),
        (6.0, 0.74, 3, 0.75),
        (7.0, 0.74, 3, 0.75),
        (8.0, 0.69, 9, 0.68),
    ]
    assert search.time_to_reach(trajectory, 0.70) == 4.0
    assert search.time_to_reach(trajectory, 0.74) == 6.0
    assert search.time_to_reach(trajectory, 0.75) is None


def test_search_recording_scorer_in_asha(client, tmp_path):
    """The recording scorer of benchmarks/search.py inside taskdml's ASHASearchCV on a real
    cluster: one record per score in ``history_``, with the same (budget, score) pairs (the
    budget read from the scoring task's key), and the records' holdout accuracy is
    scikit-learn's ``score`` of the same coefficients."""
    from sklearn.linear_model import SGDClassifier

    from taskdml import ASHASearchCV
    from taskdml.datasets import make_classification

    search_module = _search_benchmark()
    # The scorer travels by reference: the workers import benchmarks/search.py as this
    # process does (run as a script, the benchmark's ``__main__`` travels by value).
    benchmarks = str(ROOT / "benchmarks")
    client.run(exec, f"import sys; sys.path.insert(0, {benchmarks!r})")
    data = make_classification(3_000, 8, n_informative=4, chunk_size=300, random_state=0)
    X, y = data["X"].data, data["y"].data
    directory = tmp_path / "records"
    directory.mkdir()
    search = ASHASearchCV(
        SGDClassifier(loss="log_loss", random_state=0),
        {"alpha": [1e-5, 1e-4, 1e-3, 1e-2]},
        n_trials=4,
        max_epochs=3,
        reduction_factor=3,
        scoring=search_module.RecordingScorer(str(directory)),
        random_state=0,
    )
    try:
        search.fit(X, y, classes=[0, 1])
    finally:
        client.run(exec, f"import sys; sys.path.remove({benchmarks!r})")
    records = search_module.read_records(str(directory))
    reported = sorted((event["budget"], event["score"]) for event in search.history_)
    assert sorted((r["budget"], r["score"]) for r in records) == reported
    assert {budget for budget, _ in reported} == {1, 3}

    X_np, y_np = X.compute(), y.compute()
    search_module.holdout_accuracy(records, X_np, y_np)
    for record in records:
        model = SGDClassifier().fit(X_np[:10], y_np[:10])  # then given the record's weights
        model.coef_, model.intercept_ = record["coef"], record["intercept"]
        assert record["holdout"] == model.score(X_np, y_np)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_search_adaptive_quick_run(tmp_path):
    """benchmarks/search.py --quick --parts adaptive, on 20,000 rows, runs every adaptive
    method with its recording scorer (each records as many scores as the search reports, each
    with a budget), prints the time-to-score table and the issue 27 check, and leaves
    RESULTS.md alone."""
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "search.py"),
            *("--quick", "--parts", "adaptive", "--sizes", "20000"),
        ],
        capture_output=True,
        text=True,
        timeout=160,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "failed" not in run.stderr, run.stderr[-3000:]
    assert "*Time to a held-out score*" in run.stdout
    assert "(issue 27): ASHA reaches HalvingRandomSearchCV (n_jobs=2)'s final" in run.stdout
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text() == results
