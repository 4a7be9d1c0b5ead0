"""The one place where inputs are unwrapped: xarray objects to arrays, chunked data to dask arrays.

taskdml's data model has two forms, both chunked along a ``sample`` dim:

- **arrays**: an ``xarray.Dataset`` with a variable ``X`` (dims ``sample``, ``feature``) and
  optionally ``y`` (dims ``sample``), a ``DataArray`` with those dims, or a plain dask array
  chunked along samples. Numeric only.
- **tables**: an ``xarray.Dataset`` without ``X`` whose feature columns are separate 1-D
  variables along ``sample`` (any dtype: numbers, strings as object arrays, booleans), the
  target as ``y``, every variable on the same sample chunks. A column read as a category
  carries the attribute ``categorical=True`` and becomes a pandas ``category`` column.
  Tables are what scikit-learn's mixed-column tools need: :func:`unwrap` hands them on as a
  dask DataFrame with one partition per sample chunk (pandas DataFrames with the column
  names, so a ``ColumnTransformer`` selects columns by name, and a ``RangeIndex`` of the
  global row numbers), and ``y`` as a dask array on the same chunks.

Every entry point (:class:`taskdml.DataParallel`, the searches, the engine) reads its inputs
through :func:`unwrap`, and the ones that need chunked inputs through :func:`as_dask`, so an
input is accepted or refused with the same message wherever it is given.
"""

import contextvars
from typing import NamedTuple

import numpy as np

from taskdml._compat import collection_meta
from taskdml.exceptions import DataError, did_you_mean


class Unwrapped(NamedTuple):
    """What :func:`unwrap` returns: the arrays, and the ``X`` DataArray they came from."""

    X: object
    y: object
    sample_weight: object
    template: object  # the X DataArray, dims (sample, feature); None if X was not xarray


def is_chunked(X):
    """Whether *X* is chunked data: a dask collection or an xarray object."""
    from dask.base import is_dask_collection

    if is_dask_collection(X):
        return True
    import xarray as xr

    return isinstance(X, (xr.Dataset, xr.DataArray))


def is_table(data):
    """Whether *data* is a table: a ``Dataset`` without ``X`` whose variables all have the
    single dim ``sample`` (see the module docstring)."""
    import xarray as xr

    return (
        isinstance(data, xr.Dataset)
        and "X" not in data.data_vars
        and any(name != "y" for name in data.data_vars)
        and all(var.dims == ("sample",) for var in data.data_vars.values())
    )


def _inner_y(data, y, what):
    """*data*'s variable ``y`` if it has one (refused when *y* is given too), else *y*."""
    if "y" not in data.data_vars:
        return y
    if y is not None:
        raise DataError(
            f"y was given twice: as an argument and as the {what}'s variable 'y'; pass one of them."
        )
    return data["y"]


def is_frame(X):
    """Whether *X* is a dask DataFrame."""
    from dask.base import is_dask_collection

    return is_dask_collection(X) and hasattr(X, "columns") and hasattr(X, "npartitions")


def outside_annotations(function, *args, **kwargs):
    """``function(*args, **kwargs)`` outside dask annotations, the current client still current.

    dask DataFrames ignore annotations (such as a pipeline step's span) under query planning
    and warn when one is built inside them, so taskdml builds them in a fresh context; the
    distributed client that was current (``Client.as_current``) is made current there again.
    """
    from taskdml._client import current_client

    client = current_client()

    def run():
        if client is None:
            return function(*args, **kwargs)
        with client.as_current():
            return function(*args, **kwargs)

    return contextvars.Context().run(run)


def _plain_strings(part, columns):
    """Task: *columns* of one partition as object columns with ``nan`` for missing values."""
    import pandas as pd

    part = part.copy()
    for column in columns:
        values = part[column].astype(object)
        part[column] = values.where(pd.notna(values), np.nan)
    return part


def plain_strings(frame):
    """*frame* with its string columns as object columns and ``nan`` for missing values.

    dask DataFrames hold text as pandas ``string`` columns whose missing value is ``pd.NA``,
    which scikit-learn's encoders and imputers do not read as missing (``NaN`` and ``None``
    they do).
    """
    import pandas as pd

    columns = [name for name, dtype in frame.dtypes.items() if isinstance(dtype, pd.StringDtype)]
    if not columns:
        return frame
    meta = collection_meta(frame).astype(dict.fromkeys(columns, object))
    return frame.map_partitions(_plain_strings, columns, meta=meta)


def table_frame(table):
    """A table's feature columns as a dask DataFrame, one partition per sample chunk.

    Each partition is built by one task from its chunk of every column (text columns as
    object columns with ``nan`` for missing values, the ``categorical`` ones as pandas
    ``category`` columns), so the frame adds one task per chunk to the table's graph: dask's
    own conversion (``Dataset.to_dask_dataframe``) makes a frame per column and joins them,
    which costs seconds of scheduling at a few thousand rows.

    Parameters
    ----------
    table : xarray.Dataset
        A table (:func:`is_table`); ``y`` is left out.

    Returns
    -------
    dask.dataframe.DataFrame
        Partitions aligned with the sample chunks, known divisions (global row numbers).

    Examples
    --------
    >>> import numpy as np
    >>> import xarray as xr
    >>> from taskdml._data import table_frame
    >>> table = xr.Dataset({"a": ("sample", np.arange(4.0)),
    ...                     "g": ("sample", np.array(["x", "y", "x", "z"], dtype=object))})
    >>> frame = table_frame(table.chunk({"sample": 2}))
    >>> frame.npartitions, list(frame.columns), frame.compute()["g"].tolist()
    (2, ['a', 'g'], ['x', 'y', 'x', 'z'])
    """
    import dask
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    from taskdml import _compat
    from taskdml._keys import key_name

    columns = [name for name in table.data_vars if name != "y"]
    categorical = [name for name in columns if table[name].attrs.get("categorical")]
    arrays = [table[name].data for name in columns]
    chunked = [a for a in arrays if isinstance(a, da.Array)]
    rows = chunked[0].chunks[0] if chunked else (table.sizes["sample"],)
    table = table[columns].chunk({"sample": rows})
    blocks = [table[name].data.to_delayed().ravel() for name in columns]
    starts = np.concatenate([[0], np.cumsum(rows)]).tolist()
    name = key_name("table_frame", table, phase="frame")
    part = dask.delayed(_frame_part, pure=True)
    parts = [
        part(
            starts[i],
            columns,
            categorical,
            *[column[i] for column in blocks],
            dask_key_name=(name, i),
        )
        for i in range(len(rows))
    ]
    empty = [np.empty(0, dtype=table[name].dtype) for name in columns]
    meta = _frame_part(0, columns, categorical, *empty)
    divisions = (*starts[:-1], starts[-1] - 1)
    graph = HighLevelGraph.merge(*[p.__dask_graph__() for p in parts])
    keys = [p.key for p in parts]
    frame = outside_annotations(_compat.from_graph, graph, meta, divisions, keys, name)
    _KNOWN_LENGTHS[tokenize(frame)] = tuple(rows)
    return frame


def _frame_part(start, columns, categorical, *chunks):
    """Task: one partition of :func:`table_frame`, rows ``start...`` of *columns* (numeric
    columns of one dtype in one block, as pandas keeps them)."""
    import pandas as pd

    index = pd.RangeIndex(start, start + len(chunks[0]))
    text = {name for name, values in zip(columns, chunks) if values.dtype.kind in "OSU"}
    numeric = [(n, v) for n, v in zip(columns, chunks) if n not in text and n not in categorical]
    by_dtype = {}
    for name, values in numeric:
        by_dtype.setdefault(values.dtype, []).append((name, values))
    frames = [
        pd.DataFrame(
            np.column_stack([v for _, v in group]), index=index, columns=[n for n, _ in group]
        )
        for group in by_dtype.values()
    ]
    others = {}
    for name, values in zip(columns, chunks):
        if name in categorical:
            others[name] = pd.Categorical(values)
        elif name in text:  # object with NaN for missing: what scikit-learn's encoders read
            series = pd.Series(values, index=index, dtype=object)
            others[name] = series.where(series.notna(), np.nan)
    frames.append(pd.DataFrame(others, index=index))
    return pd.concat(frames, axis=1)[columns]


# Partition lengths of the frames made by table_frame (known from the sample chunks), so that
# they are not counted again; a few hundred names at most are kept.
_KNOWN_LENGTHS = {}


def partition_lengths(frame, client=None):
    """The rows of each partition of a dask DataFrame: known for :func:`table_frame`'s
    frames, otherwise counted chunk-wise (only the counts reach the client), on *client* if
    given."""
    from dask.base import tokenize

    if len(_KNOWN_LENGTHS) > 512:
        _KNOWN_LENGTHS.clear()
    name = tokenize(frame)
    known = _KNOWN_LENGTHS.get(name)
    if known is None:

        def count():
            lengths = frame.map_partitions(len)
            return lengths.compute() if client is None else client.compute(lengths).result()

        known = tuple(int(n) for n in outside_annotations(count))
        _KNOWN_LENGTHS[name] = known
    return known


def unwrap(X, y=None, sample_weight=None):
    """Unwrap xarray inputs; leave every other input as it is.

    Parameters
    ----------
    X : xarray.Dataset, xarray.DataArray or array-like
        A ``Dataset`` holds ``X`` (dims ``sample``, ``feature``) and optionally ``y``, or is
        a table (feature columns as variables along ``sample``; it comes back as a dask
        DataFrame, see :func:`table_frame`); a ``DataArray`` must have dims ``sample`` and
        ``feature`` (in any order).
    y, sample_weight : xarray.DataArray or array-like, optional
        A ``DataArray`` gives its data.

    Returns
    -------
    Unwrapped
        ``(X, y, sample_weight, template)``: the arrays (dask arrays stay lazy, NumPy stays in
        memory), ``X`` with samples first, and *template*, the ``X`` DataArray (``None`` when
        ``X`` was not an xarray object).

    Raises
    ------
    DataError
        A ``Dataset`` without ``X``; ``y`` given both as an argument and in the ``Dataset``;
        a ``DataArray`` whose dims are not ``sample`` and ``feature``.

    Examples
    --------
    >>> import numpy as np
    >>> import xarray as xr
    >>> from taskdml._data import unwrap
    >>> data = xr.Dataset({"X": (("feature", "sample"), np.zeros((2, 5))),
    ...                    "y": ("sample", np.arange(5))})
    >>> X, y, weight, template = unwrap(data)
    >>> X.shape, y.tolist(), weight, template.dims
    ((5, 2), [0, 1, 2, 3, 4], None, ('sample', 'feature'))
    """
    import xarray as xr

    if is_table(X):
        y = _inner_y(X, y, "table")
        X = table_frame(X)
    if isinstance(X, xr.Dataset):
        if "X" not in X.data_vars:
            raise DataError(
                f"the Dataset has no variable 'X'.{did_you_mean('X', X.data_vars)} Its "
                f"variables are {sorted(map(str, X.data_vars))}; expected 'X' (dims "
                "sample, feature) and optionally 'y' (dims sample)."
            )
        y = _inner_y(X, y, "Dataset")
        X = X["X"]
    if is_frame(X):
        X = outside_annotations(plain_strings, X)
    template = None
    if isinstance(X, xr.DataArray):
        if set(X.dims) != {"sample", "feature"}:
            raise DataError(
                f"X has dims {X.dims}; expected ('sample', 'feature'). Rename them, "
                f"e.g. X.rename({{{X.dims[0]!r}: 'sample', ...}})."
            )
        template = X.transpose("sample", "feature")
        X = template.data
    if isinstance(y, xr.DataArray):
        y = y.data
    if isinstance(sample_weight, xr.DataArray):
        sample_weight = sample_weight.data
    return Unwrapped(X, y, sample_weight, template)


def as_dask(X, y=None, sample_weight=None):
    """Chunked inputs as dask arrays: X 2-D in one feature chunk, the others on X's row chunks.

    Parameters
    ----------
    X : dask array, dask DataFrame, xarray.Dataset or xarray.DataArray
        Unwrapped with :func:`unwrap`; must then be a dask array or a dask DataFrame (a
        table), which is returned as it is, with ``y`` and ``sample_weight`` on its
        partitions.
    y, sample_weight : dask array, dask Series, xarray.DataArray or array-like, optional
        In-memory arrays are cut into X's row chunks; dask arrays are rechunked to them.

    Returns
    -------
    tuple
        ``(X, y, sample_weight)``, ``None`` where not given.

    Raises
    ------
    DataError
        X is neither a dask array nor a dask DataFrame, or not 2-D, or the row counts differ.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from taskdml._data import as_dask
    >>> X, y, weight = as_dask(da.zeros((6, 4), chunks=(3, 2)), np.arange(6))
    >>> X.chunks, y.chunks, weight
    (((3, 3), (4,)), ((3, 3),), None)
    """
    import dask.array as da

    X, y, sample_weight, _ = unwrap(X, y, sample_weight)
    if is_frame(X):
        return (X, *_aligned(partition_lengths(X), y, sample_weight))
    if not isinstance(X, da.Array):
        raise DataError(
            f"chunked X must be a dask array, a dask DataFrame or an xarray object, got "
            f"{type(X).__name__}."
        )
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples, features), got shape {X.shape}.")
    X = X.rechunk({1: -1})
    return (X, *_aligned(X.chunks[0], y, sample_weight))


def _aligned(rows, y, sample_weight):
    """*y* and *sample_weight* as dask arrays on the row chunks *rows*."""
    import dask.array as da

    n_rows = sum(rows)
    aligned = []
    for name, array in (("y", y), ("sample_weight", sample_weight)):
        if array is None:
            aligned.append(None)
            continue
        if is_frame(array) or hasattr(array, "to_dask_array"):  # a dask Series
            # Optimised first: a column read alone may be read in fewer, larger partitions
            # than the frame it came from, and the lengths must count those.
            array = array.optimize().to_dask_array(lengths=True)
        if not isinstance(array, da.Array):
            array = np.asarray(array)
            array = da.from_array(array, chunks=(rows,) + array.shape[1:])
        if array.shape[0] != n_rows:
            raise DataError(f"X has {n_rows:,} rows but {name} has {array.shape[0]:,}.")
        aligned.append(array.rechunk({0: rows}))
    return aligned


# The largest table (rows × feature columns) that a search gathers into one pandas DataFrame.
MAX_GATHERED_CELLS = 10_000_000


def gathered_table(X, y=None, *, max_cells=None):
    """A table or dask DataFrame as a pandas DataFrame and a NumPy ``y``; other inputs as given.

    The searches over a scikit-learn ``Pipeline`` on mixed columns use this to run their
    in-memory path, which scores every candidate × fold exactly as scikit-learn does. Only
    tables up to *max_cells* (:data:`MAX_GATHERED_CELLS` when ``None``, about 80 MB of
    numbers) are gathered; the partition lengths are known (:func:`partition_lengths`), so a
    table that is too big is refused before any of it is computed.

    Parameters
    ----------
    X : xarray.Dataset, dask DataFrame or any other input
        A table (:func:`is_table`) or a dask DataFrame is gathered; anything else is returned
        as it is, with *y*.
    y : xarray.DataArray, dask array, dask Series or array-like, optional
        The table's ``y`` when omitted.
    max_cells : int, optional

    Returns
    -------
    tuple
        ``(X, y)``.

    Raises
    ------
    DataError
        The table has more than *max_cells* cells.

    Examples
    --------
    >>> import numpy as np
    >>> import xarray as xr
    >>> from taskdml._data import gathered_table
    >>> table = xr.Dataset({"a": ("sample", np.arange(4.0)),
    ...                     "b": ("sample", np.array(list("xyxy"), dtype=object)),
    ...                     "y": ("sample", np.array([0, 1, 0, 1]))}).chunk({"sample": 2})
    >>> X, y = gathered_table(table)
    >>> type(X).__name__, list(X.columns), y.tolist()
    ('DataFrame', ['a', 'b'], [0, 1, 0, 1])
    """
    import dask

    if not (is_table(X) or is_frame(X)):
        return X, y
    X, y, _, _ = unwrap(X, y)
    max_cells = MAX_GATHERED_CELLS if max_cells is None else max_cells
    n_rows = sum(partition_lengths(X))
    n_cells = n_rows * len(X.columns)
    if n_cells > max_cells:
        raise DataError(
            f"the table has {n_rows:,} rows × {len(X.columns)} columns = {n_cells:,} cells; "
            f"a search over a table gathers it into one pandas DataFrame, up to "
            f"{max_cells:,} cells. Search on a sample of the rows (e.g. a train_test_split "
            "step with a smaller train_size), or encode the columns into numbers with a map "
            "step first and search on the chunked arrays."
        )
    # One compute each: a DataFrame (an expression) and a dask array (a graph) don't mix.
    X = outside_annotations(dask.compute, X)[0]
    y = dask.compute(y)[0]
    if hasattr(y, "to_numpy"):
        y = y.to_numpy()
    return X, y
