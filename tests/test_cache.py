"""The step cache: a second run reuses every step, a change reruns exactly what it touches and
says why, values come back as they went in, and only what the store wrote is read."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from click.testing import CliRunner
from sklearn.linear_model import SGDClassifier
from sklearn.preprocessing import StandardScaler

from cli.main import cli
from taskdml import Cache, CacheWarning, load_pipeline, run_pipeline
from taskdml.cache._codec import decode, encode
from taskdml.runs._directory import list_runs, load_model

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "pipelines" / "quickstart.yaml")
SMALL = ("n_samples=20000", "chunk_size=5000", "epochs=1")


def _run(*args, cache, runs):
    result = CliRunner().invoke(
        cli, ["run", QUICKSTART, *SMALL, *args, "--run-dir", str(runs), "--cache-dir", str(cache)]
    )
    assert result.exit_code == 0, result.output
    return result.output


def _quickstart_train_rows(n_samples, seed=0):
    """The quickstart's train rows, made here."""
    from taskdml import datasets

    data = datasets.make_classification(
        n_samples=n_samples, n_features=20, n_informative=10, chunk_size=5_000, random_state=seed
    )
    train, _ = datasets.train_test_split(data, test_size=0.2, random_state=seed)
    return train.X.values


@pytest.mark.slow
def test_a_second_run_reuses_every_step_and_a_change_reruns_only_what_it_touches(tmp_path):
    """Run twice: every step reused, same metrics, models in the run directory, the reused
    scaler scikit-learn's on the same rows; change the model's alpha: the model and the
    evaluation run, and --explain says why."""
    cache, runs = tmp_path / "cache", tmp_path / "runs"
    _run(cache=cache, runs=runs)
    again = _run("--explain", cache=cache, runs=runs)
    for step in ("data", "split", "scale", "model", "report"):
        assert f"  {step:<16} reused  reused the outputs of run" in again
    first, second = list_runs(runs)
    assert first["steps"]["report"]["state"] == second["steps"]["report"]["state"] == "completed"
    assert second["steps"]["model"]["cache"]["hit"] is True
    assert second["steps"]["model"]["training"] == first["steps"]["model"]["training"]
    metrics = [(Path(r["path"]) / "metrics.json").read_text() for r in (first, second)]
    assert metrics[0] == metrics[1]
    np.testing.assert_array_equal(
        load_model(first["path"], "model").coef_, load_model(second["path"], "model").coef_
    )
    reference = StandardScaler().fit(_quickstart_train_rows(20_000))  # recomputed in memory
    np.testing.assert_allclose(load_model(second["path"], "scale").mean_, reference.mean_)
    np.testing.assert_allclose(load_model(second["path"], "scale").var_, reference.var_)
    changed = _run("steps.model.with.alpha=1e-3", "--explain", cache=cache, runs=runs)
    for step in ("data", "split", "scale"):
        assert f"  {step:<16} reused" in changed
    assert "  model            ran     with.alpha changed 0.0001 -> 0.001" in changed
    assert "  report           ran     input model re-ran" in changed
    planned = CliRunner().invoke(
        cli, ["run", QUICKSTART, *SMALL, "seed=1", "--dry-run", "--explain",
              "--cache-dir", str(cache)],
    )  # fmt: skip
    assert "  data             run     with.random_state changed 0 -> 1" in planned.output
    assert len(list_runs(runs)) == 3  # the dry run recorded nothing


PROJECT_PIPELINE = """\
taskdml: 1
name: project
imports: {allow: ["taskdml.*", "sklearn.*", "numpy", "shop.*"]}
cluster: {n_workers: 1, threads_per_worker: 1}
steps:
  table:
    call: taskdml.datasets:read_csv
    with: {path: sales.csv, target: y}
  total:
    call: shop.features:total
    inputs: {frame: table}
"""


def _write_project(folder, factor):
    (folder / "shop").mkdir(exist_ok=True)
    (folder / "shop" / "__init__.py").write_text("")
    (folder / "shop" / "features.py").write_text(
        f"def total(frame):\n    return float(frame['X'].sum().compute()) * {factor}\n"
    )


@pytest.mark.slow
def test_user_code_and_data_files_are_part_of_the_key(tmp_path, monkeypatch, client):
    """Editing the user's module reruns its step (``code of shop.features changed``); a new
    data file reruns the reader and what follows (``file sales.csv changed``). Each run's total,
    reused or not, is the one pandas computes from the table written here and the factor."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pipeline.yaml").write_text(PROJECT_PIPELINE)
    sales = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "y": [0, 1]})
    sales.to_csv("sales.csv", index=False)
    _write_project(tmp_path, 1)

    def run():
        pipeline = load_pipeline(tmp_path / "pipeline.yaml")
        return run_pipeline(pipeline, cache=tmp_path / "cache", run_root=tmp_path / "runs")

    def total(result):
        """The total the step stored (the run's futures went with its cluster), read back."""
        store = Cache(tmp_path / "cache")
        stored = store.load(store.lookup(result.steps["total"]["cache"]["key"]), client)
        (value,) = stored.values()
        return value.result()

    first = run()
    assert first.steps["total"]["cache"]["why"] == ["first run of this step with this cache"]
    assert total(first) == sales[["a", "b"]].to_numpy().sum() * 1
    reused = run()
    assert reused.steps["total"]["cache"]["hit"] is True
    assert total(reused) == sales[["a", "b"]].to_numpy().sum() * 1
    _write_project(tmp_path, 2)
    edited = run()
    assert edited.steps["table"]["cache"]["hit"] is True
    assert edited.steps["total"]["cache"]["why"] == ["code of shop.features changed"]
    assert total(edited) == sales[["a", "b"]].to_numpy().sum() * 2
    sales = pd.DataFrame({"a": [5.0], "b": [6.0], "y": [1]})
    sales.to_csv("sales.csv", index=False)
    os.utime("sales.csv", ns=(1, 1))  # a new file, whatever the clock's resolution
    new_data = run()
    assert new_data.steps["table"]["cache"]["why"] == ["file sales.csv changed"]
    assert new_data.steps["total"]["cache"]["why"] == ["input table re-ran"]
    assert total(new_data) == sales[["a", "b"]].to_numpy().sum() * 2


class _Opaque:
    """A value of no known format: pickled (joblib)."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Opaque) and other.value == self.value


def _fitted():
    return SGDClassifier(random_state=0).fit([[0.0, 1.0], [1.0, 0.0]], [0, 1])


VALUES = {
    "json": {"alpha": 0.001, "names": ["a", "b"], "n": 3, "none": None},
    "numpy_scalar": np.float32(0.25),
    "array": np.arange(12.0).reshape(3, 4),
    "random_array": np.random.default_rng(0).normal(size=(3, 4)),
    "sparse": scipy.sparse.random(5, 4, density=0.5, format="csr", random_state=0),
    "frame": pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}),
    "tuple": (np.arange(3), "label"),
    "opaque": _Opaque([1, 2]),
    "nan": float("nan"),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_in_memory_values_come_back_as_they_went_in(name, tmp_path):
    """Each kind of value is written in its format and read back equal (no cluster)."""
    value = VALUES[name]
    node = encode({"out": value}, str(tmp_path), "out", client=None)
    back = decode(node, str(tmp_path), client=None)["out"]
    if scipy.sparse.issparse(value):
        assert (back != value).nnz == 0
    elif isinstance(value, pd.DataFrame):
        pd.testing.assert_frame_equal(back, value)
    elif isinstance(value, tuple):
        assert isinstance(back, tuple) and back[1] == value[1]
        np.testing.assert_array_equal(back[0], value[0])
    elif isinstance(value, float) and value != value:
        assert back != back
    else:
        np.testing.assert_array_equal(back, value)
        assert type(back) is type(value)


def test_a_model_comes_back_through_skops(tmp_path):
    """A fitted estimator is written with skops and predicts the same when read back."""
    model = _fitted()
    node = encode(model, str(tmp_path), "out", client=None)
    assert node["kind"] == "model" and node["format"] == "skops"
    back = decode(node, str(tmp_path), client=None)
    np.testing.assert_array_equal(back.coef_, model.coef_)


def test_chunked_values_and_futures_come_back_chunked_as_they_were(client, tmp_path):
    """A Dataset with irregular chunks, a dask array and a Future (written by its worker)
    come back equal, with the same chunks, and the future as a future."""
    import dask.array as da
    import xarray as xr

    X = da.random.default_rng(0).random((100, 3), chunks=((30, 30, 25, 15), 3))
    dataset = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", X[:, 0] > 0.5)})
    future = client.submit(np.arange, 10)
    outputs = {"data": dataset, "array": X, "result": future}
    node = encode(outputs, str(tmp_path), "out", client)
    back = decode(node, str(tmp_path), client)
    assert back["data"].chunks == dataset.chunks and back["array"].chunks == X.chunks
    xr.testing.assert_equal(back["data"].compute(), dataset.compute())
    np.testing.assert_array_equal(back["array"].compute(), X.compute())
    assert type(back["result"]).__name__ == "Future"
    np.testing.assert_array_equal(back["result"].result(), np.arange(10))


def _stored(store):
    return store.store(
        "k" * 32,
        {"model": _fitted(), "n": 3},
        client=None,
        about={"pipeline": "p", "step": "model", "run_id": "r", "parts": {}, "record": {}},
    )


def test_an_entry_the_store_did_not_write_is_refused(tmp_path):
    """An entry copied from another store (another secret) is not read: a warning and a miss;
    a file changed after it was written is refused when read."""
    ours, theirs = Cache(tmp_path / "ours"), Cache(tmp_path / "theirs")
    _stored(theirs)
    shutil.copytree(tmp_path / "theirs" / "entries", tmp_path / "ours" / "entries")
    with pytest.warns(CacheWarning, match="signature does not match this store's key"):
        assert ours.lookup("k" * 32) is None
    entry = theirs.lookup("k" * 32)
    assert theirs.load(entry, None)["n"] == 3
    # The model comes back as scikit-learn fits it.
    np.testing.assert_array_equal(theirs.load(entry, None)["model"].coef_, _fitted().coef_)
    model_file = next((tmp_path / "theirs" / "entries" / ("k" * 32)).glob("*.skops"))
    model_file.write_bytes(model_file.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="changed since the cache wrote it"):
        theirs.load(entry, None)


def test_cache_commands_list_clear_and_collect(tmp_path):
    """`taskdml cache list` shows entries, `gc` removes leftovers and entries the store did not
    sign, `clear` empties it."""
    store = Cache(tmp_path / "cache")
    _stored(store)
    (tmp_path / "cache" / "tmp" / "half-written").mkdir(parents=True)
    foreign = tmp_path / "cache" / "entries" / ("f" * 32)
    shutil.copytree(tmp_path / "cache" / "entries" / ("k" * 32), foreign)
    (foreign / "entry.sig").write_text("0" * 64)
    listed = CliRunner().invoke(cli, ["cache", "list", "--cache-dir", str(tmp_path / "cache")])
    assert listed.exit_code == 0
    assert "kkkkkkkkkkkk p                  model" in listed.output
    assert "(not signed by this cache: gc removes it)" in listed.output
    collected = CliRunner().invoke(cli, ["cache", "gc", "--cache-dir", str(tmp_path / "cache")])
    assert collected.output.startswith("removed 1 entries")
    assert not foreign.exists() and not (tmp_path / "cache" / "tmp" / "half-written").exists()
    kept = store.lookup("k" * 32)
    assert kept is not None
    # What gc kept still loads as scikit-learn fits the model.
    np.testing.assert_array_equal(store.load(kept, None)["model"].coef_, _fitted().coef_)
    cleared = CliRunner().invoke(
        cli, ["cache", "clear", "--cache-dir", str(tmp_path / "cache"), "--pipeline", "p"]
    )
    assert cleared.output.startswith("removed 1 entries") and store.entries() == []


FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    from cli.main import main
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # and for the workers it starts
    sys.argv = ["taskdml", *sys.argv[2:]]
    main()
    """
)


@pytest.mark.slow
def test_a_full_disk_fails_the_step_clearly_and_keeps_what_was_stored(tmp_path, cluster):
    """With a file-size limit below one chunk (the disk 'fills' while the data step's outputs
    are written), the run fails at that step with exit 1, what to do, no traceback; the earlier
    entries stay whole and are reused, and no half entry is left."""
    cache, runs = tmp_path / "cache", tmp_path / "runs"
    where = ("--scheduler", cluster.scheduler_address)  # the runs without a limit
    _run(*where, cache=cache, runs=runs)
    stored = Cache(cache).entries()
    common = [QUICKSTART, *SMALL, "--run-dir", str(runs), "--cache-dir", str(cache)]
    bigger = [*common, "n_samples=40000", "chunk_size=20000"]  # chunks of 3 MiB
    full = subprocess.run(  # on its embedded cluster: its workers inherit the limit
        [sys.executable, "-c", FULL_DISK, str(2**20), "run", *bigger],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert full.returncode == 1, full.stderr
    error = full.stderr.splitlines()[-1]  # above it: the progress, and the workers' logs
    assert error.startswith("error: step 'data' failed: the disk is full (or a file-size limit")
    assert "point --cache-dir at a larger disk" in error
    assert Cache(cache).entries() == stored
    assert list((cache / "tmp").iterdir()) == []
    again = _run("--explain", *where, cache=cache, runs=runs)
    assert again.count("reused  reused the outputs of run") == 5


def test_a_packages_fingerprint_covers_its_submodules(tmp_path, monkeypatch):
    """A step that names ``pkg:function`` is keyed by every module of the package, so an
    edit in a submodule (where the function really lives) changes the key."""
    from taskdml.cache._keys import fingerprint

    package = tmp_path / "keyedpkg"
    package.mkdir()
    (package / "__init__.py").write_text("from keyedpkg._impl import f\n")
    (package / "_impl.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = fingerprint("keyedpkg")
    (package / "_impl.py").write_text("def f():\n    return 2\n")
    assert fingerprint("keyedpkg") != before
    assert fingerprint("keyedpkg._impl") != fingerprint("keyedpkg")
