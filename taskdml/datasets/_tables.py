"""Tables through dask.dataframe: CSV and Parquet, one chunk per partition.

Column names are validated up front (a :class:`~taskdml.exceptions.DataError` with the columns
available and a "did you mean"); categorical columns stay categorical for a ``Pipeline``'s
encoders.
"""

import os

import numpy as np
import xarray as xr

from taskdml._compat import collection_meta
from taskdml._keys import key_name
from taskdml.datasets._common import _xy_dataset
from taskdml.datasets._files import _check_files
from taskdml.exceptions import DataError, did_you_mean


def _object_columns(part, columns):
    """Task: *columns* of one partition as object arrays with ``nan`` for missing values,
    what scikit-learn's encoders and imputers read as missing (``pd.NA`` is not)."""
    import pandas as pd

    part = part.copy()
    for column in columns:
        values = part[column].astype(object)
        part[column] = values.where(pd.notna(values), np.nan)
    return part


def _from_dataframe(function, path, frame, target, features, categorical=None):
    """Turn a lazy dask DataFrame into ``X``/``y`` (numeric features) or a table (any
    non-numeric or categorical feature), with known chunk lengths."""
    columns = [str(c) for c in frame.columns]
    where = f"{function}: {os.fspath(path) if not isinstance(path, (list, tuple)) else path!r}"

    def check(param, column):
        if column not in columns:
            raise DataError(
                f"{where} has no column {param}={column!r}; its columns are {columns}."
                f"{did_you_mean(column, columns)}"
            )

    if target is not None:
        check("target", target)
    if features is None:
        features = [c for c in columns if c != target]
    else:
        if isinstance(features, str):
            features = [features]
        features = list(features)
        for column in features:
            check("features", column)
    if not features:
        raise DataError(f"{where}: no feature columns left (found only target={target!r}).")
    if target in features:
        raise DataError(f"{where}: target={target!r} is also listed in features; remove it.")
    categorical = [categorical] if isinstance(categorical, str) else list(categorical or ())
    for column in categorical:
        check("categorical", column)
        if column not in features:
            raise DataError(
                f"{where}: categorical column {column!r} is not a feature (the features are "
                f"{features}); remove it from categorical or add it to features."
            )
    import pandas as pd

    not_numeric = [
        c
        for c in features
        if not (
            pd.api.types.is_numeric_dtype(frame.dtypes[c])
            or pd.api.types.is_bool_dtype(frame.dtypes[c])
        )
    ]
    frame = frame[features + ([target] if target is not None else [])]
    lengths = tuple(int(n) for n in frame.map_partitions(len).compute())
    if not sum(lengths):
        raise DataError(f"{where} has no rows: nothing to train or score on. Check the file(s).")
    if not_numeric:
        meta = collection_meta(frame).copy()
        for column in not_numeric:
            meta[column] = meta[column].astype(object)
        frame = frame.map_partitions(_object_columns, not_numeric, meta=meta)
    columns = _Columns(function, frame, lengths)
    y = None if target is None else columns.take(target)
    if not_numeric or categorical:
        return _table(columns, features, categorical, y)
    X = columns.take(features, np.float64)
    return _xy_dataset(X, y, np.array(features, dtype=str))


class _Columns:
    """Columns of a lazy frame as dask arrays on *lengths*, all taken from one task per
    partition. dask plans each column selection of a frame as a read of its own: a table of
    31 columns from a CSV file parsed every chunk 32 times, once per column and once for
    ``y`` (400,000 × 32 in 14 chunks: 30 s to compute every column, against 1.1 s now)."""

    def __init__(self, function, frame, lengths):
        self.function, self.lengths = function, lengths
        self.meta = collection_meta(frame)
        self.parts = frame.to_delayed()  # the partitions, every column read at once

    def take(self, columns, dtype=None):
        """A dask array of one column (a name: 1-D) or of several (a list: 2-D, as *dtype*),
        its chunks named for the step (``read_csv-…``)."""
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph

        if dtype is None:
            dtype = _dtype(self.meta[columns])
        name = key_name(self.function, [part.key for part in self.parts], columns)
        tail = (len(columns),) if isinstance(columns, list) else ()
        layer = {
            (name, i, *(0,) * len(tail)): (_values, part.key, columns, dtype)
            for i, part in enumerate(self.parts)
        }
        graph = HighLevelGraph.from_collections(name, layer, dependencies=self.parts)
        chunks = (self.lengths, *((n,) for n in tail))
        return da.Array(graph, name, chunks, meta=np.empty((0, *tail), dtype=dtype))


def _dtype(column):
    """The NumPy dtype of a column's values: a nullable number's is ``float64`` (its missing
    values as ``nan``, what scikit-learn's imputers read), the others' as NumPy has them."""
    import pandas as pd

    kind = column.dtype
    if pd.api.types.is_extension_array_dtype(kind) and pd.api.types.is_numeric_dtype(kind):
        return np.dtype(np.float64)
    return np.asarray(column).dtype


def _values(part, columns, dtype):
    """Task: *columns* of one partition as a NumPy array of *dtype* (missing values ``nan``
    in a float one)."""
    values = part[columns]
    if np.dtype(dtype).kind == "f":
        return values.to_numpy(dtype=dtype, na_value=np.nan)
    return values.to_numpy(dtype=dtype)


def _table(columns, features, categorical, y):
    """A table (see :mod:`taskdml._data`): one variable per feature column."""
    data_vars = {}
    for column in features:
        attrs = {"categorical": True} if column in categorical else {}
        data_vars[column] = xr.Variable(("sample",), columns.take(column), attrs=attrs)
    if y is not None:
        data_vars["y"] = xr.Variable(("sample",), y)
    return xr.Dataset(data_vars)


def _without_annotations(function, *args, **kwargs):
    """Build dask DataFrames outside annotations (see :func:`taskdml._data.outside_annotations`)."""
    from taskdml._data import outside_annotations

    return outside_annotations(function, *args, **kwargs)


def read_csv(path, *, target=None, features=None, categorical=None, blocksize="64MB"):
    """Read CSV file(s) through :func:`dask.dataframe.read_csv` as chunked ``X``/``y``.

    One pass over the files counts the rows of each block (only the counts reach the client),
    so the chunk sizes are known.

    Parameters
    ----------
    path : str, os.PathLike or list
        A file, a glob or a list of files.
    target : str, optional
        The label column; ``None`` for no ``y``.
    features : list of str, optional
        The feature columns; by default every column but ``target``.
    categorical : list of str, optional
        Feature columns to treat as categories (marked ``categorical=True``; pandas
        ``category`` columns once unwrapped).
    blocksize : str or int, default="64MB"
        Bytes per chunk, as in dask.

    Returns
    -------
    xarray.Dataset
        Numeric features only (and no ``categorical``): ``X`` (float64) and ``y``, feature
        names as the ``feature`` coordinate. Otherwise a table (see :mod:`taskdml._data`):
        one variable per feature column, with the file's dtypes (strings as objects,
        missing values as ``nan``), and ``y``; fit it with a scikit-learn ``Pipeline``
        whose ``ColumnTransformer`` encodes the columns.

    Examples
    --------
    >>> import tempfile, os
    >>> import pandas as pd
    >>> from taskdml.datasets import read_csv
    >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "label": [0, 1, 0]}).to_csv(
    ...     path, index=False)
    >>> data = read_csv(path, target="label")
    >>> data.feature.values.tolist(), data.y.values.tolist()
    (['a', 'b'], [0, 1, 0])

    A string column makes a table:

    >>> pd.DataFrame({"a": [1, 2, 3], "grade": ["low", "high", "low"], "label": [0, 1, 0]}
    ...              ).to_csv(path, index=False)
    >>> table = read_csv(path, target="label", categorical=["grade"])
    >>> sorted(table.data_vars), table.grade.values.tolist(), table.grade.attrs
    (['a', 'grade', 'y'], ['low', 'high', 'low'], {'categorical': True})
    """

    def read():
        import dask.dataframe as dd

        frame = dd.read_csv(_check_files("read_csv", path), blocksize=blocksize)
        return _from_dataframe("read_csv", path, frame, target, features, categorical)

    return _without_annotations(read)


def _as_read(part):
    return part


def read_parquet(path, *, target=None, features=None, categorical=None):
    """Read a Parquet file or directory through :func:`dask.dataframe.read_parquet`.

    Parameters
    ----------
    path : str, os.PathLike or list
        A file, a directory of files or a list of files.
    target : str, optional
        The label column; ``None`` for no ``y``.
    features : list of str, optional
        The feature columns; by default every column but ``target``.
    categorical : list of str, optional
        Feature columns to treat as categories, as in :func:`read_csv`.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention, one chunk per Parquet partition: ``X``/``y`` for
        numeric features, a table otherwise (as in :func:`read_csv`).

    Examples
    --------
    >>> import tempfile, os
    >>> import pandas as pd
    >>> from taskdml.datasets import read_parquet
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pd.DataFrame({"a": [1.0, 2.0], "label": [1, 0]}).to_parquet(path)
    >>> read_parquet(path, target="label").X.values.tolist()
    [[1.0], [2.0]]
    """

    def read():
        import dask.dataframe as dd

        frame = dd.read_parquet(_check_files("read_parquet", path))
        # dask fuses the partitions of small files when only some columns are read, so the
        # one-column selections behind y would have fewer partitions than the row counts
        # taken on the whole table: a map over the partitions keeps the files' partitions.
        frame = frame.map_partitions(_as_read, meta=collection_meta(frame))
        return _from_dataframe("read_parquet", path, frame, target, features, categorical)

    return _without_annotations(read)
