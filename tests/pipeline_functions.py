"""User functions that test pipelines call as tasks (a stand-in for a user's own module)."""

import time


def wait_and_return(value, seconds=0.0):
    """Sleep, then return *value*: a task whose timing tests can observe."""
    time.sleep(seconds)
    return value


def add(a, b):
    return a + b


def pair(value):
    """Return two outputs."""
    return value, value * 2


def fail(message="boom"):
    raise RuntimeError(message)


def flaky(counter, failures, error="ConnectionError"):
    """Fail with *error* the first *failures* calls (counted in the file *counter*), then
    return the number of calls: a service that comes back."""
    from pathlib import Path

    path = Path(counter)
    calls = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(calls))
    if calls <= failures:
        raise {"ConnectionError": ConnectionError, "ValueError": ValueError}[error](
            f"call {calls} failed"
        )
    return calls


def count_samples(data):
    """Receives an in-memory dataset, as plain callables do."""
    return int(data.sizes["sample"])


def column_sums(data):
    """The sums of an in-memory dataset's X, by feature."""
    import numpy as np

    return np.asarray(data["X"].values).sum(axis=0)


def meet(value, mine, other, timeout=120):
    """Set the event *mine*, wait for the event *other*, return *value*.

    Two steps that call ``meet`` with their names swapped finish only if they run at the same
    time: a test of concurrency that reads no clock (the timeout only turns a hang into an error).
    """
    from distributed import Event

    Event(mine).set()
    if not Event(other).wait(timeout):
        raise TimeoutError(f"{other!r} never started while {mine!r} was running")
    return value


def worker_facts():
    """The process, memory limit and threads of the worker that runs this task."""
    import os

    from distributed import get_worker

    worker = get_worker()
    return {
        "pid": os.getpid(),
        "memory_limit": worker.memory_manager.memory_limit,
        "nthreads": worker.state.nthreads,
    }


def process_id():
    """The id of the process this runs in."""
    import os

    return os.getpid()


def _arange_and_pid(n):
    import os

    import dask.array as da

    return da.arange(n, chunks=max(1, n // 2)), os.getpid()


def arange_and_pid_unmarked(n):
    """A plain callable: runs as a task on a worker."""
    return _arange_and_pid(n)


def _mark(function):
    from taskdml import builds_graph

    return builds_graph(function)


@_mark
def arange_and_pid_marked(n):
    """A graph builder: runs in the client, its dask array is persisted on the workers."""
    return _arange_and_pid(n)


class MajorityClassifier:
    """A user's own classifier: skops does not trust its type, so runs save it with joblib."""

    def get_params(self, deep=True):
        return {}

    def fit(self, X, y):
        import numpy as np

        values, counts = np.unique(y, return_counts=True)
        self.classes_, self.majority_ = values, values[counts.argmax()]
        return self

    def predict(self, X):
        import numpy as np

        return np.full(len(X), self.majority_)


def warm_imports(path):
    """Write, as JSON to *path*, the modules this worker's warm plugin imports and whether each
    is imported when this task runs (without waiting for the plugin); return *path*."""
    import json
    import sys

    from distributed import get_worker

    plugin = get_worker().plugins["taskdml-warm"]
    with open(path, "w") as file:
        json.dump({module: module in sys.modules for module in plugin.modules}, file)
    return path


def classification_arrays(n_samples=400, n_features=4, seed=0):
    """A plain callable returning in-memory ``(X, y)`` NumPy arrays; column 0 is the row index."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n_samples)
    X = rng.normal(size=(n_samples, n_features)) + y[:, None]
    X[:, 0] = np.arange(n_samples)
    return X, y


def classification_values(kind, n_samples=400, n_features=4, seed=0):
    """The same rows as :func:`classification_arrays`, as one value of type *kind*."""
    import pandas as pd
    import xarray as xr

    X, y = classification_arrays(n_samples, n_features, seed)
    columns = [f"f{i}" for i in range(n_features)]
    if kind == "numpy":
        return X, y
    if kind == "numpy_X":
        return X
    if kind == "pandas":
        return pd.DataFrame(X, columns=columns).assign(y=y)
    if kind == "pandas_target":
        frame = pd.DataFrame(X, columns=columns).assign(label=y)
        frame.attrs["target"] = "label"
        return frame
    if kind == "xarray":
        return xr.Dataset(
            {"X": (("sample", "feature"), X), "y": (("sample",), y)}, coords={"feature": columns}
        )
    if kind == "table":
        return pd.DataFrame(X, columns=columns).assign(city=["a", "b"] * (n_samples // 2), y=y)
    raise ValueError(kind)


def text():
    """A plain callable whose result is not data."""
    return "not data"


def add_squares(chunk, scale=1.0):
    """A map function: appends the squares of the features (times *scale*) to ``X``."""
    import numpy as np
    import xarray as xr

    X = np.hstack([chunk.X.values, chunk.X.values**2 * scale])
    return xr.Dataset({"X": (("sample", "feature"), X), "y": chunk.y})


def fail_at_row(chunk, row):
    """A map function that raises on the chunk holding row *row* (column 0 is the row index)."""
    if (chunk.X[:, 0] == row).any():
        raise ValueError(f"cannot handle row {row}")
    return chunk


def table_rows(chunk):
    """A map function over a table chunk: the number of characters of ``city``, as ``X``."""
    import numpy as np

    lengths = np.array([len(city) for city in chunk.city.values], dtype=np.float64)
    return chunk.assign(X=(("sample", "feature"), np.stack([lengths, chunk.f1.values], 1)))


def _builder(function):
    from taskdml import builds_graph

    return builds_graph(function)


@_builder
def lazy_values(kind, n_samples=400, n_features=4, seed=0):
    """A graph builder returning :func:`classification_values`' rows as a dask DataFrame
    (``kind="dask_frame"``), a tuple of dask arrays (``kind="dask_arrays"``), 4 chunks, or
    in memory (``kind="memory_pandas"``: ``classification_values("pandas")``)."""
    import dask.array as da
    import dask.dataframe as dd

    if kind.startswith("memory_"):  # an in-memory value, returned to the client
        return classification_values(kind.removeprefix("memory_"), n_samples, n_features, seed)
    if kind == "dask_frame":
        frame = classification_values("pandas", n_samples, n_features, seed)
        return dd.from_pandas(frame, npartitions=4, sort=False)
    X, y = classification_arrays(n_samples, n_features, seed)
    return da.from_array(X, chunks=(n_samples // 4, -1)), da.from_array(y, chunks=n_samples // 4)


def text_chunk(chunk):
    """A map function that returns no Dataset."""
    return "not data"


def transform_chunk(chunk, model, offset=0.0):
    """A map function that applies a fitted transformer (another step's model) to ``X``."""
    return chunk.assign(X=chunk.X.copy(data=model.transform(chunk.X.values) + offset))


def build_pipeline(categorical, numeric, alpha=1e-4):
    """A factory a ``fit:`` step names: one-hot encode, scale, then a linear classifier."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    return make_pipeline(
        ColumnTransformer(
            [("cat", OneHotEncoder(), list(categorical)), ("num", StandardScaler(), list(numeric))]
        ),
        SGDClassifier(alpha=alpha, random_state=0),
    )


def fitted_scaler():
    """A fitted transformer, as a ``preprocess`` input."""
    from sklearn.preprocessing import StandardScaler

    return StandardScaler().fit([[0.0], [1.0]])


def mismatched_rows(n_samples=100):
    """``(X, y)`` whose y is 10 rows short: bad data a user's loader can return."""
    import numpy as np

    return np.zeros((n_samples, 3)), np.zeros(n_samples - 10)


def factor_rmse(model, ratings):
    """The RMSE of *model*'s factors on *ratings*, by numpy on the values a plain ``call:``
    step receives (a factorisation model from a graph step, its factors in memory)."""
    import numpy as np

    U, V = model.user_factors.factors.values, model.item_factors.factors.values
    src, dst, rating = ratings.src.values, ratings.dst.values, ratings.weight.values
    return float(np.sqrt(np.mean((rating - (U[src] * V[dst]).sum(1)) ** 2)))
