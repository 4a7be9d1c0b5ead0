"""The one place where inputs are unwrapped: xarray objects to arrays, chunked data to dask arrays.

taskdml's data model is an ``xarray.Dataset`` with a variable ``X`` (dims ``sample``,
``feature``) and optionally ``y`` (dims ``sample``), a ``DataArray`` with those dims, or a
plain dask array chunked along samples. Every entry point
(:class:`taskdml.DataParallel`, the searches, the engine) reads its inputs through
:func:`unwrap`, and the ones that need dask arrays through :func:`as_dask`, so an input is
accepted or refused with the same message wherever it is given.
"""

from typing import NamedTuple

import numpy as np

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


def unwrap(X, y=None, sample_weight=None):
    """Unwrap xarray inputs; leave every other input as it is.

    Parameters
    ----------
    X : xarray.Dataset, xarray.DataArray or array-like
        A ``Dataset`` holds ``X`` (dims ``sample``, ``feature``) and optionally ``y``; a
        ``DataArray`` must have dims ``sample`` and ``feature`` (in any order).
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

    if isinstance(X, xr.Dataset):
        if "X" not in X.data_vars:
            raise DataError(
                f"the Dataset has no variable 'X'.{did_you_mean('X', X.data_vars)} Its "
                f"variables are {sorted(map(str, X.data_vars))}; expected 'X' (dims "
                "sample, feature) and optionally 'y' (dims sample)."
            )
        if "y" in X.data_vars:
            if y is not None:
                raise DataError(
                    "y was given twice: as an argument and as the Dataset's variable "
                    "'y'; pass one of them."
                )
            y = X["y"]
        X = X["X"]
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
    X : dask array, xarray.Dataset or xarray.DataArray
        Unwrapped with :func:`unwrap`; must then be a dask array.
    y, sample_weight : dask array, xarray.DataArray or array-like, optional
        In-memory arrays are cut into X's row chunks; dask arrays are rechunked to them.

    Returns
    -------
    tuple
        ``(X, y, sample_weight)``, ``None`` where not given.

    Raises
    ------
    DataError
        X is not a dask array (a dask DataFrame, say) or not 2-D, or the row counts differ.

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
    if not isinstance(X, da.Array):
        raise DataError(
            f"chunked X must be a dask array or an xarray object, got "
            f"{type(X).__name__}; convert a dask DataFrame with "
            ".to_dask_array(lengths=True)."
        )
    if X.ndim != 2:
        raise DataError(f"X must be 2-D (samples, features), got shape {X.shape}.")
    X = X.rechunk({1: -1})
    rows = X.chunks[0]
    aligned = []
    for name, array in (("y", y), ("sample_weight", sample_weight)):
        if array is None:
            aligned.append(None)
            continue
        if not isinstance(array, da.Array):
            array = np.asarray(array)
            array = da.from_array(array, chunks=(rows,) + array.shape[1:])
        if array.shape[0] != X.shape[0]:
            raise DataError(f"X has {X.shape[0]:,} rows but {name} has {array.shape[0]:,}.")
        aligned.append(array.rechunk({0: rows}))
    return (X, *aligned)
