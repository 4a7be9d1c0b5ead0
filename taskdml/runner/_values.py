"""Step inputs as data: whatever a step produced, in the chunked form the consuming step reads.

Steps exchange values as they were produced: lazy collections (a graph builder's persisted
``xarray.Dataset`` or dask array), ``Future``\\ s (a plain callable's result, kept on the worker
that computed it) and in-memory objects. Every step that takes data — ``fit``, ``search``,
``evaluate``, ``map`` and a graph builder's ``data`` argument — reads it through
:func:`step_data`, so a value is accepted or refused with the same message everywhere.

**The chunked form** is an ``xarray.Dataset`` of dask arrays chunked along ``sample``: ``X``
(dims ``sample, feature``) and optionally ``y`` (dims ``sample``), or, for a table with
non-numeric columns, one variable per column along ``sample`` and the target as ``y``.

**What converts, and how.** A lazy ``Dataset`` passes unchanged; a 2-D dask array or
``DataArray`` becomes ``X``; a dask DataFrame is cut at its partitions. One in-memory value —
a 2-D NumPy array, a tuple ``(X, y)``, a pandas DataFrame, an in-memory ``Dataset`` — is
chunked *on the worker that holds it*: a small task describes it (types and sizes only reach
the client), then one task per variable and chunk slices the rows out of it, so the data never
travels through the client (a value already in the client is scattered once). There are four
chunks of equal rows, or more when that keeps each under 64 MiB (as :mod:`taskdml.datasets`'
readers); they start on the worker that held the value, and training spreads them.

**Tables.** A DataFrame's target is the column named by ``frame.attrs["target"]`` (the same
attribute taskdml's loaders set on a Dataset) or, without it, the column ``y``; with neither,
there is no ``y``. All-numeric (or boolean) feature columns become float64 ``X`` with the
column names as the ``feature`` coordinate; otherwise every column becomes its own variable
(the table form), left for the consuming step to encode or refuse. Row labels (a DataFrame's
index, a ``sample`` coordinate) are not kept.

The task functions here are module-level and import only NumPy at module level, so a worker
that runs them imports little.
"""

import math

import numpy as np

from taskdml._client import scatter
from taskdml.exceptions import DataError

ACCEPTED = (
    "an xarray.Dataset along 'sample' (X dims sample, feature and y dims sample, or a "
    "table), a 2-D NumPy or dask array, a tuple (X, y), a pandas or dask DataFrame (target: "
    "the column attrs['target'] or 'y'), or a Future of one of these"
)
# As taskdml.datasets (readers): no chunk made here holds more than this.
_TARGET_CHUNK_BYTES = 64 * 2**20
_CHUNKS = 4


def held(value, client):
    """*value* persisted on the workers if it is a lazy collection, unless it is larger than
    ``data="auto"`` persists (:func:`taskdml.parallel.engine._stream.choose`): then it stays lazy,
    and the steps that read it stream it (a Zarr store larger than the cluster's memory).

    Parameters
    ----------
    value : object
        A graph builder's result, or a step output read back from the cache.
    client : distributed.Client

    Returns
    -------
    object
        *value* persisted, or as given (not a collection, or too large to persist).
    """
    import math

    import dask

    from taskdml.parallel.engine import _stream

    if not dask.is_dask_collection(value):
        return value
    try:
        nbytes = value.nbytes  # arrays and Datasets; a dask DataFrame does not know its size
    except (AttributeError, NotImplementedError):
        nbytes = math.nan
    if not math.isnan(nbytes):
        from taskdml._warm import warmed

        # Measured once the workers hold their warm imports, as the reading step will find
        # them: on a cluster just started they would not count yet, and a store over half
        # the free memory could be persisted (then the reading step cannot stream it).
        warmed(client)
        if _stream.choose_for(client, "auto", nbytes)[0] == "stream":
            return value
    return client.persist(value)


def step_data(inputs, argument, context):
    """The running step's input *argument* as taskdml's chunked dataset.

    Parameters
    ----------
    inputs : dict
        The step's inputs, ``{argument: value}``.
    argument : str
        The input that holds data (``"data"``).
    context : StepContext
        Gives the client, and the step whose ``inputs`` name the producer.

    Returns
    -------
    xarray.Dataset
        Chunked along ``sample`` (see the module docstring).

    Raises
    ------
    DataError
        When the value cannot be data; the message names both steps, both types and the fix.
    """
    step = context.step
    producer = next(
        (
            ref_step + (f".{output}" if output else "")
            for name, _, ref_step, output in step.references()
            if name == argument
        ),
        "its input",
    )
    return as_dataset(
        inputs[argument],
        client=context.client,
        producer=producer,
        consumer=(step.name, step.kind),
        argument=argument,
    )


def as_dataset(value, *, client, producer="?", consumer=("?", "data"), argument="data"):
    """*value* as an ``xarray.Dataset`` of dask arrays chunked along ``sample``.

    Parameters
    ----------
    value : object
        A lazy or in-memory dataset, array, tuple ``(X, y)``, DataFrame, or a ``Future`` of one.
    client : distributed.Client
        Runs the description and chunking tasks and holds their results.
    producer : str
        The step (``"split"`` or ``"split.train"``) the value comes from, for messages.
    consumer : (str, str)
        The name and kind of the step it goes to, for messages.
    argument : str, default "data"
        The consumer's input, for messages.

    Returns
    -------
    xarray.Dataset
        Persisted on the workers when it was chunked here; a lazy input is returned as given.

    Raises
    ------
    DataError
        When *value* is none of the accepted types (see the module docstring).
    """
    import dask
    from distributed import Future

    name, kind = consumer

    def refuse(found, why=""):
        return DataError(
            f"step {name!r} ({kind}) cannot read input {argument!r} from step {producer!r}: "
            f"{producer!r} gave {found}, but a {kind} step needs data: {ACCEPTED}.{why} "
            f"Make step {producer.split('.')[0]!r} return one of these."
        )

    if isinstance(value, dict):
        raise refuse(
            f"the {len(value)} items of a foreach step (a dict)",
            " Give each item a step of its own, or drop the foreach.",
        )
    if isinstance(value, Future):
        from taskdml._keys import key_name

        plan = client.submit(
            describe, value, key=key_name("values", value.key, phase="inspect")
        ).result()
        if "refused" in plan:
            raise refuse(f"a Future of {plan['refused']}", plan["why"])
        return _chunked(value, plan, client)
    if dask.is_dask_collection(value) or (
        isinstance(value, tuple) and any(dask.is_dask_collection(v) for v in value)
    ):
        return _lazy(value, refuse)
    plan = describe(value)
    if "refused" in plan:
        raise refuse(plan["refused"], plan["why"])
    # A key of its own: steps that scatter an equal value at once must not share (and release) it.
    return _chunked(scatter(client, [value], hash=False)[0], plan, client)


def _lazy(value, refuse):
    """A lazy collection in the chunked form (its graph is kept: no chunk is computed here)."""
    import dask.array as da
    import xarray as xr

    if isinstance(value, xr.Dataset):
        if "sample" not in value.dims:
            raise refuse(
                f"an xarray.Dataset with dims {list(value.dims)}",
                " Rename its rows' dim to 'sample' (ds.rename({'row': 'sample'})).",
            )
        return value
    if isinstance(value, xr.DataArray) and set(value.dims) == {"sample", "feature"}:
        return xr.Dataset({"X": value.transpose("sample", "feature")})
    if isinstance(value, da.Array) and value.ndim == 2:
        if any(math.isnan(size) for size in value.chunks[0]):
            value = value.compute_chunk_sizes()
        return xr.Dataset({"X": (("sample", "feature"), value.rechunk({1: -1}))})
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, da.Array) for v in value):
        X, y = value
        if X.ndim == 2 and y.ndim == 1 and X.shape[0] == y.shape[0]:
            X = X.rechunk({1: -1})
            return xr.Dataset(
                {"X": (("sample", "feature"), X), "y": (("sample",), y.rechunk((X.chunks[0],)))}
            )
    if type(value).__name__ == "DataFrame" and hasattr(value, "map_partitions"):
        return _dask_frame(value)
    shape = getattr(value, "shape", None)
    raise refuse(
        f"a lazy {type(value).__name__}" + (f" of shape {shape}" if shape is not None else ""),
        " An array must be 2-D (samples, features).",
    )


def _target_column(frame):
    target = getattr(frame, "attrs", {}).get("target", "y")
    return target if target in list(frame.columns) else None


def _numeric(dtypes):
    import pandas as pd

    return all(pd.api.types.is_numeric_dtype(t) or pd.api.types.is_bool_dtype(t) for t in dtypes)


def _dask_frame(frame):
    """A dask DataFrame cut at its partitions (one pass counts their rows)."""
    import xarray as xr

    from taskdml._keys import key_name
    from taskdml.datasets._common import as_float64

    target = _target_column(frame)
    features = [c for c in frame.columns if c != target]
    lengths = tuple(int(n) for n in frame.map_partitions(len).compute())
    variables = {}
    if _numeric(frame.dtypes[features]):
        rows = frame[features].to_dask_array(lengths=lengths)
        X = rows.map_blocks(
            as_float64, dtype=np.float64, name=key_name("values", rows.name, phase="float")
        )
        variables["X"] = (("sample", "feature"), X)
    else:
        for column in features:
            variables[str(column)] = (("sample",), frame[column].to_dask_array(lengths=lengths))
    if target is not None:
        variables["y"] = (("sample",), frame[target].to_dask_array(lengths=lengths))
    coords = {"feature": [str(c) for c in features]} if "X" in variables else None
    return xr.Dataset(variables, coords=coords)


# --------------------------------------------------------------------------------------------
# One in-memory value, chunked where it lives
# --------------------------------------------------------------------------------------------


def describe(value):
    """How to chunk *value*: its rows and variables, or why it cannot be data.

    Runs on the worker that holds a plain callable's result; only this description reaches
    the client.

    Parameters
    ----------
    value : object

    Returns
    -------
    dict
        ``{"n_samples", "variables": [(name, dims, dtype, tail shape, source)], "coords"}``,
        or ``{"refused": type name, "why": hint}``.
    """
    import pandas as pd

    name = type(value).__name__
    module = type(value).__module__.split(".")[0]
    if isinstance(value, pd.DataFrame):
        return _describe_frame(value)
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            return {"refused": f"a {name} of {len(value)} values", "why": " A tuple is (X, y)."}
        X, y = value
        plan = describe(X)
        if "refused" in plan or plan["variables"][0][0] != "X" or len(plan["variables"]) != 1:
            return {
                "refused": f"a tuple ({type(X).__name__}, {type(y).__name__})",
                "why": " In a tuple (X, y), X must be a 2-D array or a numeric DataFrame.",
            }
        y_shape = np.shape(y)
        if len(y_shape) != 1 or y_shape[0] != plan["n_samples"]:
            return {
                "refused": f"a tuple (X, y) with X of {plan['n_samples']} rows and y of shape "
                f"{y_shape}",
                "why": " y must be 1-D, one value per row of X.",
            }
        plan["variables"][0] = plan["variables"][0][:4] + ((0,) + plan["variables"][0][4],)
        y_dtype = np.asarray(y[:1]).dtype if not isinstance(y, pd.Series) else y.dtype
        plan["variables"].append(("y", ("sample",), np.dtype(y_dtype).str, (), (1, "array", None)))
        return plan
    if module == "xarray" and name == "Dataset":
        return _describe_xarray(value)
    if module == "xarray" and name == "DataArray":
        if set(value.dims) != {"sample", "feature"}:
            return {"refused": f"a DataArray with dims {value.dims}", "why": ""}
        n, width = value.sizes["sample"], value.sizes["feature"]
        coords = (
            {"feature": np.asarray(value["feature"].values)} if "feature" in value.coords else {}
        )
        return {
            "n_samples": n,
            "variables": [
                ("X", ("sample", "feature"), value.dtype.str, (width,), ("dataarray", None))
            ],
            "coords": coords,
        }
    if isinstance(value, np.ndarray):
        if value.ndim != 2 or value.dtype.kind not in "biuf":
            return {
                "refused": f"a NumPy array of shape {value.shape} and dtype {value.dtype}",
                "why": " An array must be 2-D (samples, features) and numeric.",
            }
        return {
            "n_samples": value.shape[0],
            "variables": [("X", ("sample", "feature"), "<f8", value.shape[1:], ("array", "f8"))],
            "coords": {},
        }
    return {"refused": f"{name} ({type(value).__module__}.{name})", "why": ""}


def _describe_frame(frame):
    target = _target_column(frame)
    features = [c for c in frame.columns if c != target]
    variables = []
    coords = {}
    if _numeric(frame.dtypes[features]):
        variables.append(
            ("X", ("sample", "feature"), "<f8", (len(features),), ("frame", features, "f8"))
        )
        coords["feature"] = np.array([str(c) for c in features])
    else:
        for column in features:
            dtype = frame[column].to_numpy()[:0].dtype
            variables.append((str(column), ("sample",), dtype.str, (), ("frame", column, None)))
    if target is not None:
        dtype = frame[target].to_numpy()[:0].dtype
        variables.append(("y", ("sample",), dtype.str, (), ("frame", target, None)))
    return {"n_samples": len(frame), "variables": variables, "coords": coords}


def _describe_xarray(ds):
    if "sample" not in ds.dims:
        return {
            "refused": f"an xarray.Dataset with dims {list(ds.dims)}",
            "why": " Rename its rows' dim to 'sample' (ds.rename({'row': 'sample'})).",
        }
    variables = []
    for name, var in ds.data_vars.items():
        if "sample" in var.dims:
            dims = ("sample",) + tuple(d for d in var.dims if d != "sample")
            tail = tuple(ds.sizes[d] for d in dims[1:])
            variables.append((str(name), dims, var.dtype.str, tail, ("xarray", name, dims)))
    coords = {
        str(name): np.asarray(coord.values)
        for name, coord in ds.coords.items()
        if coord.dims and "sample" not in coord.dims and coord.dims == (name,)
    }
    return {"n_samples": ds.sizes["sample"], "variables": variables, "coords": coords}


def chunk_rows(n_samples, row_bytes):
    """Rows per chunk for data that arrives in one piece: four chunks or more, of equal size,
    none over 64 MiB.

    Parameters
    ----------
    n_samples : int
    row_bytes : int
        Bytes of one row, every variable together.

    Returns
    -------
    int

    Examples
    --------
    >>> chunk_rows(1_000, 80), chunk_rows(150, 40), chunk_rows(2_000_000, 168)
    (250, 38, 333334)
    """
    n_chunks = max(_CHUNKS, math.ceil(n_samples * row_bytes / _TARGET_CHUNK_BYTES))
    return max(1, math.ceil(n_samples / n_chunks))


def _rows(value, source, start, stop):
    """Rows ``[start, stop)`` of one variable of *value*, as described by :func:`describe`."""
    kind = source[0]
    if isinstance(kind, int):  # a position in a tuple (X, y)
        value, source = value[kind], source[1:]
        kind = source[0]
    if kind == "frame":
        _, columns, dtype = source
        part = value.iloc[start:stop]
        if isinstance(columns, list):
            return part[columns].to_numpy(dtype=dtype, na_value=np.nan)
        return part[columns].to_numpy()
    if kind == "xarray":
        _, name, dims = source
        return np.asarray(value[name].transpose(*dims).isel(sample=slice(start, stop)).values)
    if kind == "dataarray":
        return np.asarray(value.transpose("sample", "feature").isel(sample=slice(start, stop)))
    dtype = source[1]
    if hasattr(value, "iloc"):
        block = value.iloc[start:stop].to_numpy()
    else:
        block = np.asarray(value[start:stop])
    return block.astype(dtype) if dtype else block


def _chunked(future, plan, client):
    """The dataset *plan* describes, sliced out of *future*'s value on the workers."""
    import dask.array as da
    import xarray as xr
    from dask.highlevelgraph import HighLevelGraph

    from taskdml._keys import key_name

    n = plan["n_samples"]
    row_bytes = sum(
        np.dtype(dtype).itemsize * math.prod(tail) for _, _, dtype, tail, _ in plan["variables"]
    )
    size = chunk_rows(n, row_bytes)
    bounds = (list(range(0, n, size)) or [0]) + [n]
    rows = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:])) or (0,)
    variables = {}
    for name, dims, dtype, tail, source in plan["variables"]:
        array_name = key_name("values", future.key, name, size, phase="chunk")
        zeros = (0,) * len(tail)
        layer = {
            (array_name, i, *zeros): (_rows, future, source, start, stop)
            for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:]))
        }
        graph = HighLevelGraph.from_collections(array_name, layer, dependencies=[])
        chunks = (rows,) + tuple((t,) for t in tail)
        meta = np.empty((0,) + tuple(tail), dtype=np.dtype(dtype))
        variables[name] = (dims, da.Array(graph, array_name, chunks, meta=meta))
    return client.persist(xr.Dataset(variables, coords=plan["coords"]))
