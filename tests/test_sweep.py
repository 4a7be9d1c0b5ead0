"""`taskdml run -m`: Hydra's sweep grammar, one run per combination on one cluster, the steps
that do not depend on the swept keys computed once, and the sweep's comparison."""

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import cli
from taskdml import PipelineError, loads_pipeline
from taskdml.pipeline._spec import parse_sweep, sweep_values

MODES = ["data", "model", "federated", "task", "auto"]  # the schema's choices of parallel.mode

# Hydra's documented examples (hydra.cc, "Extended Override syntax" and "Basic Override
# syntax"), each with the values the page says it sweeps; None: one value, not a sweep. glob's
# examples run over parallel.mode's choices instead of Hydra's config group.
HYDRA_EXAMPLES = [
    ("db=mysql,postgresql", ["mysql", "postgresql"]),
    ("db=choice(mysql,postgresql)", ["mysql", "postgresql"]),
    ("num=range(0,5)", [0, 1, 2, 3, 4]),
    ("num=range(0,5,2)", [0, 2, 4]),
    ("num=range(0,10,3.3)", [0.0, 3.3, 6.6, 9.9]),
    ("num=range(5)", [0, 1, 2, 3, 4]),  # "when only start is defined, it is the stop"
    ("num=range(5,0,-2)", [5, 3, 1]),  # negative step: r[i] = start + step*i > stop
    ("num=range(1,2.5,0.5)", [1.0, 1.5, 2.0]),
    ("x=sort(1,3,2)", [1, 2, 3]),
    ("x=sort(1,3,2,reverse=true)", [3, 2, 1]),
    ("x=sort(choice(1,2,3))", [1, 2, 3]),
    ("x=sort(sweep=choice(1,2,3))", [1, 2, 3]),
    ("x=sort(choice(1,2,3),reverse=true)", [3, 2, 1]),
    ("x=sort(range(1,10),reverse=true)", [9, 8, 7, 6, 5, 4, 3, 2, 1]),
    ("x=sort([1,3,2])", None),  # a list, sorted: one value
    ("x=sort(1)", None),
    ("x=[1,2],[3,4]", [[1, 2], [3, 4]]),  # a sweep over two lists
    ("x=[1,2]", None),
    ("x='a,b'", None),  # quoted: one value
    ('x="a,b",c', ["a,b", "c"]),
    (r"x=a\,b,c", ["a,b", "c"]),  # an escaped comma
    ("x='1',2", ["1", 2]),  # a quoted number stays a string
    ("x=1", None),
    ("steps.fit.parallel.mode=glob(*)", MODES),
    ("steps.fit.parallel.mode=glob(*,exclude=auto)", MODES[:-1]),
    ("steps.fit.parallel.mode=glob([d*,m*],exclude=data)", ["model"]),
]

DEMO = """taskdml: 1
name: demo
params: {seed: 0, alpha: 0.1, loss: hinge, x: 0, num: 0, db: a}
steps:
  data:
    call: taskdml.datasets:load_sklearn
    with: {name: iris}
  fit:
    fit: sklearn.linear_model:SGDClassifier
    with: {alpha: "${params.alpha}"}
    parallel: {mode: auto}
    inputs: {data: data}
"""


@pytest.mark.parametrize(("item", "expected"), HYDRA_EXAMPLES, ids=[i for i, _ in HYDRA_EXAMPLES])
def test_hydra_documented_sweeps(item, expected):
    """Each of Hydra's documented sweep examples sweeps the values its page gives, and each
    value reaches the pipeline unchanged through the run's own override."""
    found = sweep_values(item)
    if expected is None:
        assert found is None
        return
    assert found == pytest.approx(expected) if isinstance(expected[0], float) else found == expected
    assert [type(v) for v in found] == [type(v) for v in expected]
    sweep = parse_sweep([item])
    key = item.split("=", 1)[0]
    for i, value in enumerate(found):
        (override,) = sweep.overrides(i)
        if key.startswith("steps."):  # (a federated step would also need silos)
            assert override == f"{key}={value}"
        else:
            pipeline = loads_pipeline(DEMO, overrides=[override])
            assert (
                pipeline.to_dict()["params"][key] == value
                or list(pipeline.to_dict()["params"][key]) == value
            )


def test_shuffle_is_a_permutation_and_sweeps_multiply_in_hydras_order():
    """shuffle(...) sweeps the same values in some order; num1=range(0,3) num2=range(0,3) are
    Hydra's 9 jobs, the last key varying fastest; plain overrides go to every run as written."""
    assert sorted(sweep_values("x=shuffle(a,b,c)")) == ["a", "b", "c"]
    assert sorted(sweep_values("x=shuffle(range(1,10))")) == list(range(1, 10))
    sweep = parse_sweep(["num1=range(0,3)", "seed=3", "num2=range(0,3)"])
    assert [tuple(c.values()) for c in sweep.combinations] == list(
        itertools.product(range(3), range(3))
    )
    assert sweep.overrides(5) == ("seed=3", "num1=1", "num2=2")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("alpha=range(a)", "params.alpha: range() takes numbers"),
        ("alpha=range(3,1)", "params.alpha: 'range(3,1)' is empty"),
        ("alpha=range(0,1,0)", "params.alpha: range() needs a step other than 0"),
        ("alpha=glob(*)", "params.alpha: glob() selects among the choices"),
        ("alpha=interval(0,1)", "params.alpha: interval() is for optimising sweepers"),
        ("alpha=choice()", "params.alpha: choice() is empty"),
        ("alpha=a,,b", "params.alpha: 'a,,b' has an empty element"),
        ("steps.fit.parallel.mode=glob(x*)", "selects none of the key's choices"),
    ],
)
def test_bad_sweep_values_name_the_key(item, message):
    """A sweep value that cannot be read is a PipelineError naming the override and key."""
    with pytest.raises(PipelineError) as error:
        parse_sweep([item])
    assert f"override {item!r}" in str(error.value) and message in str(error.value)


def test_a_sweep_without_multirun_says_how_to_run_it():
    """alpha=0.1,1 without -m is refused as Hydra refuses it: run with -m, or quote it."""
    with pytest.raises(PipelineError, match=r"is a sweep over 2 values: run it with -m"):
        loads_pipeline(DEMO, overrides=["db=a,b"])
    assert loads_pipeline(DEMO, overrides=["db='a,b'"]).params["db"] == "a,b"


PIPELINE = """taskdml: 1
name: swept
params: {alpha: 1.0e-4, loss: hinge}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 400, n_features: 6, n_informative: 4, chunk_size: 200, random_state: 0}
  split:
    call: taskdml.datasets:train_test_split
    inputs: {data: data}
    with: {test_size: 0.25, random_state: 0}
    outputs: [train, test]
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {loss: "${params.loss}", alpha: "${params.alpha}", random_state: 0}
    inputs: {data: split.train}
  report:
    evaluate: [accuracy]
    inputs: {model: model, data: split.test}
"""


def _events(run_dir):
    lines = Path(run_dir, "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_multirun_of_four_computes_the_shared_steps_once(cluster, tmp_path):
    """run -m of 2 x 2 combinations: four runs on the one cluster given, with their own
    directories and overrides; data
    and split (which do not depend on the swept keys) ran in the first run only and were
    reused by the three others, model ran in each; the saved comparison has one row per run
    whose accuracy is the run's metrics file's and scikit-learn's on the test rows."""
    from sklearn.metrics import accuracy_score

    from taskdml import datasets
    from taskdml.runs._directory import load_model

    path, runs = tmp_path / "swept.yaml", tmp_path / "runs"
    path.write_text(PIPELINE)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "-m",
            str(path),
            "alpha=1e-4,1e-2",
            "loss=hinge,log_loss",
            "--scheduler",
            cluster.scheduler_address,
            "--run-dir",
            str(runs),
            "--json",
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    combinations = list(itertools.product([1e-4, 1e-2], ["hinge", "log_loss"]))
    assert [tuple(run["values"].values()) for run in summary["runs"]] == combinations
    run_dirs = [Path(run["run_dir"]) for run in summary["runs"]]
    assert len(set(run_dirs)) == 4
    for i, (run_dir, (alpha, loss)) in enumerate(zip(run_dirs, combinations)):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "succeeded"
        assert manifest["cluster"]["scheduler"] == cluster.scheduler_address  # one cluster
        assert manifest["sweep"] == {
            "id": summary["sweep_id"],
            "index": i,
            "of": 4,
            "values": {"alpha": alpha, "loss": loss},
        }
        assert manifest["overrides"] == summary["runs"][i]["overrides"]
        assert (run_dir / "overrides.txt").read_text().split() == manifest["overrides"]
        ran = {e["step"] for e in _events(run_dir) if e["event"] == "step_finished"}
        reused = {e["step"] for e in _events(run_dir) if e["event"] == "step_cached"}
        assert (ran, reused) == (
            ({"data", "split", "model", "report"}, set())
            if i == 0
            else ({"model", "report"}, {"data", "split"})
        )
        assert {name: step["cache"]["hit"] for name, step in manifest["steps"].items()} == {
            "data": i > 0,
            "split": i > 0,
            "model": False,
            "report": False,
        }
        fitted = load_model(run_dir, "model")
        assert (fitted.alpha, fitted.loss) == (alpha, loss)

    folder = Path(summary["sweep_dir"])
    assert folder.parent == runs / "sweeps" and folder.name == summary["sweep_id"]
    with open(folder / "compare.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    assert len(rows) == 4
    _, test = datasets.train_test_split(
        datasets.make_classification(
            n_samples=400, n_features=6, n_informative=4, chunk_size=200, random_state=0
        ),
        test_size=0.25,
        random_state=0,
    )
    test = test.compute()
    for row, run_dir in zip(rows, run_dirs):
        assert row["run_id"] == run_dir.name and row["status"] == "succeeded"
        own = json.loads((run_dir / "metrics.json").read_text())["report"]["accuracy"]
        assert float(row["report.accuracy"]) == own
        predicted = load_model(run_dir, "model").predict(test["X"].values)
        assert own == pytest.approx(accuracy_score(test["y"].values, predicted), rel=1e-12)
    compared = json.loads((folder / "compare.json").read_text())
    assert [run["run_id"] for run in compared["runs"]] == [d.name for d in run_dirs]
    assert compared["differ"] == ["alpha", "loss"]
    markdown = (folder / "compare.md").read_text().splitlines()
    assert len(markdown) == 2 + 4 and markdown[0].startswith("| run_id | status | alpha | loss")
    # nothing but the runs and the sweep's folder in the run root
    assert sorted(p.name for p in runs.iterdir()) == sorted([*(d.name for d in run_dirs), "sweeps"])


def test_a_failing_combination_does_not_stop_the_others_unless_fail_fast(cluster, tmp_path):
    """A combination whose data step raises (more informative features than features) fails,
    the next still runs, the sweep exits 1 and names the failure; with --fail-fast the next
    one is not run."""
    path, runs = tmp_path / "swept.yaml", tmp_path / "runs"
    path.write_text(PIPELINE)
    where = ["--scheduler", cluster.scheduler_address, "--run-dir", str(runs), "--json"]
    swept = "steps.data.with.n_informative=10,4"
    result = CliRunner().invoke(cli, ["run", "-m", str(path), swept, *where])
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert [run["status"] for run in summary["runs"]] == ["failed", "succeeded"]
    assert "step 'data' failed" in summary["runs"][0]["error"]
    assert summary["exit_code"] == 1 and "n_informative=10: step 'data' failed" in result.stderr
    stopped = CliRunner().invoke(cli, ["run", "-m", str(path), swept, "--fail-fast", *where])
    assert stopped.exit_code == 1
    assert [run["status"] for run in json.loads(stopped.stdout)["runs"]] == ["failed", "not run"]
    assert "--fail-fast stopped the sweep" in stopped.stderr


def test_a_bad_sweep_value_exits_3_naming_the_key_with_nothing_run(tmp_path):
    """run -m FILE alpha=range(a): exit 3, the key and the fix; no run directory."""
    path, runs = tmp_path / "swept.yaml", tmp_path / "runs"
    path.write_text(PIPELINE)
    result = CliRunner().invoke(
        cli, ["run", "-m", str(path), "alpha=range(a)", "--run-dir", str(runs)]
    )
    assert result.exit_code == 3
    assert "override 'alpha=range(a)': params.alpha: range() takes numbers" in result.output
    assert "alpha=range(1,4)" in result.output and not runs.exists()
    combined = CliRunner().invoke(cli, ["run", "-m", str(path), "nope=1,2", "--run-dir", str(runs)])
    assert combined.exit_code == 3 and "params.nope is not in the file" in combined.output
    assert not runs.exists()


def test_multirun_dry_run_lists_the_runs(tmp_path):
    """-m --dry-run validates every combination and lists them; nothing runs."""
    path = tmp_path / "swept.yaml"
    path.write_text(PIPELINE)
    result = CliRunner().invoke(
        cli, ["run", "-m", str(path), "alpha=range(1,3)", "loss=hinge", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["runs"] == [
        ["loss=hinge", "alpha=1"],
        ["loss=hinge", "alpha=2"],
    ]
    assert np.array_equal(
        [1, 2], [int(r[1].split("=")[1]) for r in json.loads(result.output)["runs"]]
    )
