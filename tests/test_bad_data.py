"""Bad data, refused clearly: each case is a real file read by a pipeline, and the run exits
1 (a step failed) with a message that names the step, the chunk or file, and the fix."""

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner

from cli.main import cli

# (case, the file the data step reads, its reader and arguments, an extra line of the model
# step, the failing step, what the message must say)
CASES = [
    (
        "nan",
        "nan.csv",
        "read_csv",
        {"target": "label"},
        "",
        "model",
        "chunk 0 (rows 0–199) of X holds 1 NaN or infinite values; impute or drop them",
    ),
    (
        "inf",
        "inf.csv",
        "read_csv",
        {"target": "label"},
        "",
        "model",
        "of X holds 1 NaN or infinite values",
    ),
    (
        "unseen-labels",
        "labels.csv",
        "read_csv",
        {"target": "label"},
        "    classes: [0, 1]\n",
        "model",
        "of y holds labels [7] that are not in classes=[0, 1]; add them to classes",
    ),
    (
        "text-column",
        "text.csv",
        "read_csv",
        {"target": "label"},
        "",
        "model",
        "the columns ['b'] are not numeric, and only a scikit-learn Pipeline can train on them",
    ),
    ("no-rows", "empty.csv", "read_csv", {"target": "label"}, "", "data", "empty.csv' has no rows"),
    (
        "missing-file",
        "nope.csv",
        "read_csv",
        {"target": "label"},
        "",
        "data",
        "no file or directory matches path=",
    ),
    (
        "missing-column",
        "ok.csv",
        "read_csv",
        {"target": "lable"},
        "",
        "data",
        "has no column target='lable'; its columns are ['a', 'b', 'c', 'label']. Did you mean",
    ),
    (
        "missing-variable",
        "store.zarr",
        "read_zarr",
        {"x": "features"},
        "",
        "data",
        "has no variable x='features'; its variables are ['X', 'y']",
    ),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad")
    rng = np.random.default_rng(0)
    X = rng.random((200, 3))
    y = (X[:, 0] > 0.5).astype(int)
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y)
    frame.to_csv(path / "ok.csv", index=False)
    frame.iloc[:0].to_csv(path / "empty.csv", index=False)
    frame.assign(b=np.where(np.arange(200) == 150, np.nan, frame.b)).to_csv(
        path / "nan.csv", index=False
    )
    frame.assign(a=np.where(np.arange(200) == 10, np.inf, frame.a)).to_csv(
        path / "inf.csv", index=False
    )
    frame.assign(label=np.where(np.arange(200) == 5, 7, y)).to_csv(path / "labels.csv", index=False)
    frame.assign(b="x").to_csv(path / "text.csv", index=False)
    xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)}).to_zarr(
        path / "store.zarr"
    )
    return path


@pytest.mark.parametrize(
    ("data_file", "reader", "arguments", "extra", "step", "fragment"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_data_fails_its_step_naming_where_and_the_fix(
    cluster, files, tmp_path, data_file, reader, arguments, extra, step, fragment
):
    """Exit 1, `step '<name>' failed:` and the case's own message."""
    arguments = {"path": str(files / data_file), **arguments}
    pipeline = tmp_path / "bad.yaml"
    pipeline.write_text(
        "taskdml: 1\nname: bad\nsteps:\n  data:\n"
        f"    call: taskdml.datasets:{reader}\n    with: {arguments!r}\n"
        "  model:\n    fit: sklearn.linear_model:SGDClassifier\n"
        f"{extra}    inputs: {{data: data}}\n"
    )
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(pipeline),
            "--scheduler",
            cluster.scheduler_address,
            "--run-dir",
            str(tmp_path / "runs"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert f"step {step!r} failed" in result.output
    assert fragment in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_x_and_y_of_different_lengths_fail_the_step_that_reads_them(cluster, tmp_path):
    """A loader returning y shorter than X: exit 1 at the fit, naming both lengths and the
    loader to fix."""
    pipeline = tmp_path / "bad.yaml"
    pipeline.write_text(
        "taskdml: 1\nname: bad\nimports: {allow: [pipeline_functions, sklearn.*]}\nsteps:\n"
        "  data:\n    call: pipeline_functions:mismatched_rows\n"
        "  model:\n    fit: sklearn.linear_model:SGDClassifier\n    inputs: {data: data}\n"
    )
    result = CliRunner().invoke(
        cli,
        ["run", str(pipeline), "--scheduler", cluster.scheduler_address,
         "--run-dir", str(tmp_path / "runs")],
    )  # fmt: skip
    message = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "step 'model' failed" in message
    assert "a tuple (X, y) with X of 100 rows and y of shape (90,)" in message
    assert "Make step 'data' return one of these" in message
