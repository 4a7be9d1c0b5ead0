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


def count_samples(data):
    """Receives an in-memory dataset, as plain callables do."""
    return int(data.sizes["sample"])


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
    is imported once it is done; return *path*."""
    import json
    import sys
    import time

    from distributed import get_worker

    plugin = get_worker().plugins["taskdml-warm"]
    deadline = time.monotonic() + 60
    while not plugin.done.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path, "w") as file:
        json.dump({module: module in sys.modules for module in plugin.modules}, file)
    return path


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
