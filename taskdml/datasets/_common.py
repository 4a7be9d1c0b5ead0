"""Helpers every loader shares: argument checks, row chunking, and the assembly of the paired
``X``/``y`` dask arrays into a Dataset in taskdml's data convention.
"""

import math
import numbers
import secrets

import dask.array as da
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from taskdml._keys import key_name
from taskdml.exceptions import DataError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _check_int(function, name, value, *, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DataError(
            f"{function}: {name} must be an integer >= {minimum}, got {value!r}. "
            f"Pass e.g. {name}={max(minimum, 1)}."
        )
    return int(value)


def _check_real(function, name, value, *, low=None, high=None, low_open=False):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        bounds = []
        if low is not None:
            bounds.append(f"{'>' if low_open else '>='} {low}")
        if high is not None:
            bounds.append(f"<= {high}")
        expected = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")
        raise DataError(f"{function}: {name} must be {expected}, got {value!r}.")
    return float(value)


def _resolve_seed(function, random_state):
    """Turn ``random_state`` into a non-negative int seed, drawn once when it is ``None``."""
    if random_state is None:
        return secrets.randbits(63)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int64).max, dtype=np.int64))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int64).max))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state >= 0:
            return int(random_state)
    raise DataError(
        f"{function}: random_state must be None, a non-negative integer, a "
        f"numpy.random.RandomState or a numpy.random.Generator, got {random_state!r}. "
        "Pass an integer such as random_state=0 for reproducible data."
    )


def _row_chunks(n_samples, chunk_size):
    full, rest = divmod(n_samples, chunk_size)
    return (chunk_size,) * full + ((rest,) if rest else ())


def _feature_names(n_features):
    return np.array([f"x{i}" for i in range(n_features)])


def _paired_arrays(prefix, token, chunk_task, row_chunks, n_features, y_dtype, shared=None):
    """Build ``X`` and ``y`` dask arrays whose chunk ``i`` comes from one task.

    ``chunk_task(start, stop, shared_key)`` returns the task (a tuple) that makes the pair
    ``(X_chunk, y_chunk)`` for rows ``[start, stop)``; *shared*, when given, is stored once in
    the graph under ``shared_key`` (the generator's model) instead of in every task.
    """
    layers, dependencies = {}, {}
    shared_key = None
    if shared is not None:
        shared_key = key_name(prefix, token, phase="model")
        layers[shared_key] = {shared_key: shared}
        dependencies[shared_key] = set()
    pairs = key_name(prefix, token, phase="generate")
    bounds = np.cumsum((0,) + row_chunks).tolist()
    layers[pairs] = {
        (pairs, i): chunk_task(bounds[i], bounds[i + 1], shared_key) for i in range(len(row_chunks))
    }
    dependencies[pairs] = {shared_key} if shared_key else set()

    X_name, y_name = key_name(prefix, token, "X"), key_name(prefix, token, "y")
    layers[X_name] = {(X_name, i, 0): (_pick, (pairs, i), 0) for i in range(len(row_chunks))}
    layers[y_name] = {(y_name, i): (_pick, (pairs, i), 1) for i in range(len(row_chunks))}
    dependencies[X_name] = dependencies[y_name] = {pairs}
    graph = HighLevelGraph(layers, dependencies)
    X = da.Array(
        graph, X_name, (row_chunks, (n_features,)), meta=np.empty((0, n_features), np.float64)
    )
    y = da.Array(graph, y_name, (row_chunks,), meta=np.empty((0,), y_dtype))
    return X, y


def _xy_dataset(X, y, feature_names, attrs=None):
    data_vars = {"X": (("sample", "feature"), X)}
    if y is not None:
        data_vars["y"] = (("sample",), y)
    coords = {"feature": feature_names} if feature_names is not None else None
    return xr.Dataset(data_vars, coords=coords, attrs=attrs or {})


def _pick(pair, index):
    return pair[index]


def as_float64(block):
    """*block* as a float64 NumPy array (a ``map_blocks`` function of the readers)."""
    return np.asarray(block, dtype=np.float64)
