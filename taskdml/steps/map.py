"""``map:`` steps: a user function applied to every chunk of a dataset, where the chunk lives.

``map: module:function`` is :func:`xarray.map_blocks` for a pipeline: the function receives
one chunk, an in-memory ``xarray.Dataset`` (the input's variables along ``sample`` for that
chunk's rows, NumPy-backed, and its coordinates without a ``sample`` dim, such as
``feature``), plus the step's ``with`` values and any inputs other than ``data`` as keyword
arguments, and returns the transformed chunk, an ``xarray.Dataset`` with the same rows::

    def add_squares(chunk, scale=1.0):
        X = np.hstack([chunk.X.values, chunk.X.values ** 2 * scale])
        return xr.Dataset({"X": (("sample", "feature"), X), "y": chunk.y})

Build a new Dataset when the width of ``X`` changes (``chunk.assign`` would keep the old
``feature`` coordinate and fail to align). A function may instead return a tuple ``(X, y)``
of the chunk's rows (``y`` may be ``None``), and must for features an xarray Dataset cannot
hold: a ``scipy.sparse`` ``X`` (hashed text, :func:`taskdml.datasets.text.hash_text`) stays a CSR
matrix in every output chunk. A Dataset chunk rather than ``(X, y)`` arrays
because it carries the target and the feature names with the rows, and because a table (one
variable per column) has no single ``X``.

**One task per chunk**, keyed ``(<step>-<token>, i)``, depending only on chunk ``i`` of the
input, so the scheduler runs it where the chunk is; the output keeps the input's row chunks.
Each output variable is then picked from those results (``<step>-output``). The output's
variables are found by running the function on chunk 0 — its task is the step's own first
task, so nothing runs twice — or declared with ``features: 20`` (or a list of names): ``X``
with that many float64 features, and ``y`` when the input has one. Variables of the result
without a ``sample`` dim are dropped; every chunk's result is checked against chunk 0's.

A function that raises fails the step with the chunk's index, its rows and the error:
``'mod:f' failed on chunk 2 (samples 500..749): ValueError: ...``.

When to use which step for the user's own code: ``call:`` for a function run once (a loader,
a report, or a graph builder marked :func:`taskdml.builds_graph`, which builds lazy Dask
collections in the client for work across chunks); ``map:`` for per-chunk work on chunked
data, which stays where it is.
"""

from taskdml import _keys
from taskdml.exceptions import StepFailed


def run(step, inputs, context):
    """Apply the step's function to every chunk of ``inputs["data"]``.

    Parameters
    ----------
    step : Step
        A ``map:`` step (``with``, ``foreach``, ``features``).
    inputs : dict
        ``data`` (any value :func:`taskdml.runner._values.step_data` accepts); other inputs are
        passed to the function as keyword arguments.
    context : StepContext

    Returns
    -------
    dict
        ``{"data": dataset}``, or ``{"data": {item: dataset}}`` for a foreach step.
    """
    from taskdml.pipeline._model import thaw
    from taskdml.runner._values import step_data

    function = context.pipeline.resolve(step)
    data = step_data(inputs, "data", context)
    others = {name: value for name, value in inputs.items() if name != "data"}
    items = step.foreach_items()
    results = [
        map_chunks(
            function,
            data,
            {**thaw(step.with_ or {}), **others, **kwargs},
            client=context.client,
            features=thaw(step.features),
            name=(step.target, index),
        )
        for index, (_, kwargs) in enumerate(items)
    ]
    _wait(results)
    if items[0][0] is None:
        return {"data": results[0]}
    return {"data": {label: result for (label, _), result in zip(items, results)}}


def map_chunks(function, data, kwargs, *, client, features=None, name=None):
    """``function(chunk, **kwargs)`` for every sample chunk of *data*, persisted on the workers.

    Parameters
    ----------
    function : callable
        ``function(chunk: xarray.Dataset, **kwargs)`` returning an ``xarray.Dataset`` or an
        ``(X, y)`` tuple with the same rows.
    data : xarray.Dataset
        Dask-backed along ``sample``.
    kwargs : dict
        Keyword arguments of every call (futures among them are resolved on the workers).
    client : distributed.Client
    features : int or list of str, optional
        The output's ``X`` width (or feature names); found from chunk 0 when omitted.
    name : object, optional
        What, besides the inputs, tells this map from others (tokenized into the keys).

    Returns
    -------
    xarray.Dataset
        The results, one chunk per input chunk, persisted.

    Raises
    ------
    StepFailed
        When the function raises or returns a wrong chunk (the chunk and its rows named).
    """
    import dask.array as da
    import numpy as np
    import xarray as xr
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    along = [v for v, var in data.data_vars.items() if "sample" in var.dims]
    chunked = {}
    for v in along:
        var = data[v].transpose("sample", ...)
        array = var.data if isinstance(var.data, da.Array) else da.asarray(var.data)
        chunked[v] = (var.dims, array.rechunk(dict.fromkeys(range(1, array.ndim), -1)))
    coords = _small_coords(data)
    data = xr.Dataset(chunked, coords=coords)
    if along:
        data = data.unify_chunks()
    rows = data.chunksizes["sample"] if along else ()
    bounds = np.cumsum((0,) + tuple(rows)).tolist()
    target = getattr(function, "__module__", "?") + ":" + getattr(function, "__qualname__", "?")

    arrays = [data[v].data for v in along]
    map_name = _keys.key_name("map", name, [a.name for a in arrays], kwargs)
    layer = {
        (map_name, i): (
            _apply_chunk,
            function,
            target,
            i,
            bounds[i],
            bounds[i + 1],
            [(v, data[v].dims) for v in along],
            [(a.name, i) + (0,) * (a.ndim - 1) for a in arrays],
            coords,
            kwargs,
        )
        for i in range(len(rows))
    }
    graph = HighLevelGraph.from_collections(map_name, layer, dependencies=arrays)
    pieces = client.compute(
        [Delayed((map_name, i), graph, layer=map_name) for i in range(len(rows))]
    )
    if not pieces:
        raise StepFailed(f"{target!r} cannot be mapped: the input has no rows.")
    if features is None:
        schema = client.submit(
            _schema, pieces[0], key=_keys.key_name("map", map_name, phase="schema")
        ).result()
    else:
        names = list(features) if isinstance(features, (list, tuple)) else None
        width = len(names) if names is not None else int(features)
        schema = {
            "variables": [("X", ("sample", "feature"), "<f8", (width,), False)],
            "coords": {},
        }
        if names is not None:
            schema["coords"]["feature"] = (("feature",), np.array(names))
        if "y" in data.data_vars:
            schema["variables"].append(("y", ("sample",), data["y"].dtype.str, (), False))

    variables = {}
    for v, dims, dtype, tail, is_sparse in schema["variables"]:
        out = _keys.key_name("map", map_name, v, phase="output")
        zeros = (0,) * len(tail)
        out_layer = {
            (out, i, *zeros): (_pick, piece, v, tail, dtype, target, i, bounds[i], bounds[i + 1])
            for i, piece in enumerate(pieces)
        }
        out_graph = HighLevelGraph.from_collections(out, out_layer, dependencies=[])
        variables[v] = (
            dims,
            da.Array(
                out_graph,
                out,
                (tuple(rows),) + tuple((t,) for t in tail),
                meta=_meta(tail, dtype, is_sparse),
            ),
        )
    return client.persist(xr.Dataset(variables, coords=schema["coords"]))


def _meta(tail, dtype, is_sparse):
    """An empty block like the output's: a CSR matrix for sparse features."""
    import numpy as np
    from scipy import sparse

    if is_sparse:
        return sparse.csr_matrix((0,) + tuple(tail), dtype=np.dtype(dtype))
    return np.empty((0,) + tuple(tail), np.dtype(dtype))


def _wait(datasets):
    """Block until every chunk is computed; raise the error of the first chunk that failed."""
    from distributed import futures_of, wait

    futures = [future for dataset in datasets for future in futures_of(dataset)]
    wait(futures)
    for future in sorted(futures, key=lambda future: (future.key[1:], str(future.key[0]))):
        if future.status == "error":
            future.result()


def _small_coords(data):
    """Coordinates without a ``sample`` dim (feature names), as ``{name: (dims, values)}``:
    small, shipped with every task."""
    import numpy as np

    return {
        str(c): (coord.dims, np.asarray(coord.values))
        for c, coord in data.coords.items()
        if "sample" not in coord.dims
    }


def _where(target, index, start, stop):
    return f"{target!r} failed on chunk {index} (samples {start}..{stop - 1})"


def _apply_chunk(function, target, index, start, stop, variables, blocks, coords, kwargs):
    """Run *function* on chunk *index* (rows ``[start, stop)``) as an in-memory Dataset.

    Returns the result as a record, ``{"variables": {name: (dims, values)}, "coords": {...}}``
    (samples first), from a Dataset or from an ``(X, y)`` tuple.
    """
    import xarray as xr

    chunk = xr.Dataset(
        {v: (dims, block) for (v, dims), block in zip(variables, blocks)}, coords=coords
    )
    try:
        result = function(chunk, **kwargs)
    except Exception as error:
        where = _where(target, index, start, stop)
        raise StepFailed(f"{where}: {type(error).__name__}: {error}") from error
    record = _record(result)
    rows = {values.shape[0] for _, values in record["variables"].values()} if record else set()
    if record is None or rows != {stop - start}:
        found = (
            f"a Dataset with dims {dict(result.sizes)}"
            if isinstance(result, xr.Dataset)
            else f"rows {sorted(rows)}"
            if record
            else type(result).__name__
        )
        raise StepFailed(
            f"{_where(target, index, start, stop)}: it returned {found}; a map function "
            f"returns an xarray.Dataset with the chunk's {stop - start} rows along 'sample', "
            "or a tuple (X, y) of them (X may be a scipy.sparse matrix)."
        )
    return record


def _record(result):
    """A map function's result as a record of arrays along ``sample``, or ``None``."""
    import numpy as np
    import xarray as xr
    from scipy import sparse

    if isinstance(result, xr.Dataset):
        variables = {
            str(v): (
                ("sample",) + tuple(d for d in var.dims if d != "sample"),
                var.transpose("sample", ...).values,
            )
            for v, var in result.data_vars.items()
            if "sample" in var.dims
        }
        return {"variables": variables, "coords": _small_coords(result)}
    if isinstance(result, tuple) and len(result) == 2 and getattr(result[0], "ndim", 0) == 2:
        X, y = result
        X = X.tocsr() if sparse.issparse(X) else np.asarray(X)
        variables = {"X": (("sample", "feature"), X)}
        if y is not None:
            variables["y"] = (("sample",), np.asarray(y))
        return {"variables": variables, "coords": {}}
    return None


def _schema(record):
    """The variables (along ``sample``: dims, dtype, width, sparse or not) and the small
    coordinates of one result chunk."""
    from scipy import sparse

    variables = [
        (v, dims, values.dtype.str, tuple(values.shape[1:]), sparse.issparse(values))
        for v, (dims, values) in record["variables"].items()
    ]
    return {"variables": variables, "coords": record["coords"]}


def _pick(record, variable, tail, dtype, target, index, start, stop):
    """One variable of a result chunk, samples first, checked against chunk 0's shape (or
    the declared ``features``) and cast to its dtype; a sparse one stays sparse (CSR)."""
    import numpy as np
    from scipy import sparse

    if variable not in record["variables"]:
        raise StepFailed(
            f"{_where(target, index, start, stop)}: its result has no variable {variable!r}, "
            f"which chunk 0's has (or 'features' declares); return the same variables "
            f"for every chunk. It returned {sorted(record['variables'])}."
        )
    _, values = record["variables"][variable]
    if tuple(values.shape[1:]) != tuple(tail):
        raise StepFailed(
            f"{_where(target, index, start, stop)}: its {variable!r} has shape {values.shape}; "
            f"expected (rows, {', '.join(map(str, tail))}) as in chunk 0 (or 'features')."
        )
    if sparse.issparse(values):
        return values.astype(np.dtype(dtype), copy=False)
    return np.asarray(values, dtype=np.dtype(dtype))
