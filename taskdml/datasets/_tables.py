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
from taskdml.datasets._common import _as_float64, _xy_dataset
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
    y = None
    if target is not None:
        y_rows = frame[target].to_dask_array(lengths=lengths)
        y = y_rows.map_blocks(np.asarray, dtype=y_rows.dtype, name=key_name(function, y_rows.name))
    if not_numeric or categorical:
        return _table(function, frame, features, not_numeric, categorical, lengths, y)
    X_rows = frame[features].to_dask_array(lengths=lengths)
    X = X_rows.map_blocks(_as_float64, dtype=np.float64, name=key_name(function, X_rows.name, "X"))
    return _xy_dataset(X, y, np.array(features, dtype=str))


def _table(function, frame, features, not_numeric, categorical, lengths, y):
    """A table (see :mod:`taskdml._data`): one variable per feature column, on *lengths*."""
    objects = [c for c in features if c in not_numeric]
    if objects:
        meta = collection_meta(frame).copy()
        for column in objects:
            meta[column] = meta[column].astype(object)
        frame = frame.map_partitions(_object_columns, objects, meta=meta)
    data_vars = {}
    for column in features:
        rows = frame[column].to_dask_array(lengths=lengths)
        values = rows.map_blocks(
            np.asarray, dtype=rows.dtype, name=key_name(function, rows.name, column)
        )
        attrs = {"categorical": True} if column in categorical else {}
        data_vars[column] = xr.Variable(("sample",), values, attrs=attrs)
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
