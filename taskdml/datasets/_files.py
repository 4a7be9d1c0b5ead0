"""Files through xarray: Zarr and netCDF, read lazily and written by the workers.

The readers validate variable names up front and raise :class:`~taskdml.exceptions.DataError`
with the names available and a "did you mean".
"""

import importlib.util
import os

import dask
import numpy as np
import xarray as xr

from taskdml._keys import key_name
from taskdml.datasets._common import _check_int, as_float64
from taskdml.exceptions import DataError, did_you_mean

# Target bytes per chunk for readers whose file does not say how it is chunked.
_TARGET_CHUNK_BYTES = 64 * 2**20


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _from_xarray(function, path, ds, x, y, chunk_size):
    """Select, rename and chunk ``x``/``y`` of a lazily opened file into the convention."""
    where = f"{function}: {path!r}"
    names = sorted(ds.data_vars)
    for param, var in (("x", x), ("y", y)):
        if var is not None and var not in ds.data_vars:
            raise DataError(
                f"{where} has no variable {param}={var!r}; its variables are {names}."
                f"{did_you_mean(var, names)}"
                + (" Pass y=None for data without labels." if param == "y" else "")
            )
    X = ds[x]
    if X.ndim != 2:
        raise DataError(
            f"{where}: variable {x!r} must be 2-D (samples, features), found dims {X.dims}."
        )
    sample_dim, feature_dim = X.dims
    if y is not None and ds[y].dims != (sample_dim,):
        raise DataError(
            f"{where}: variable {y!r} must be 1-D along {x!r}'s first dim {sample_dim!r}, "
            f"found dims {ds[y].dims}."
        )
    if chunk_size is None:
        encoding = X.encoding
        disk_chunks = encoding.get("chunks") or encoding.get("chunksizes")
        if disk_chunks:
            chunk_size = int(disk_chunks[0])
        else:
            chunk_size = max(1, _TARGET_CHUNK_BYTES // (8 * max(1, X.shape[1])))
    chunk_size = _check_int(function, "chunk_size", chunk_size, minimum=1)

    selected = ds[[x] if y is None else [x, y]].drop_encoding()
    # Through temporary names, so that swapped or clashing names cannot collide.
    selected = selected.rename({x: "__X", sample_dim: "__sample", feature_dim: "__feature"})
    if y is not None:
        selected = selected.rename({y: "__y"})
    selected = selected.rename({"__X": "X", "__sample": "sample", "__feature": "feature"})
    if y is not None:
        selected = selected.rename({"__y": "y"})
    name = key_name(function, os.path.abspath(path), _mtime(path), x, y, chunk_size)
    selected = selected.chunk(
        {"sample": chunk_size, "feature": -1}, name_prefix=f"{name}-", token=name
    )
    if selected.X.dtype != np.float64:
        X_data = selected.X.data
        selected["X"] = selected.X.copy(
            data=X_data.map_blocks(
                as_float64, dtype=np.float64, name=key_name(function, X_data.name, "float64")
            )
        )
    if "feature" in selected.coords and selected.feature.dtype.kind not in "iuf":
        names = np.array([str(name) for name in selected.feature.values.tolist()])
        selected = selected.assign_coords(feature=names)
    return selected


def _check_path(function, path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(
            f"{function}: no file or directory at path={path!r}. Check the path (relative paths "
            f"are taken from {os.getcwd()!r})."
        )
    return path


def _check_files(function, path):
    """*path* (a path, a glob or a list of them), once every local one matches a file or
    directory; URLs (``s3://``) are left to their filesystem."""
    import glob

    for one in path if isinstance(path, (list, tuple)) else [path]:
        one = os.fspath(one)
        if "://" not in one and not glob.glob(one):
            raise DataError(
                f"{function}: no file or directory matches path={one!r}. Check the path "
                f"(relative paths are taken from {os.getcwd()!r})."
            )
    return path


def read_zarr(path, *, x="X", y="y", chunk_size=None):
    """Open a zarr store lazily as chunked ``X``/``y`` data.

    Parameters
    ----------
    path : str or os.PathLike
        The zarr store (a directory).
    x : str, default="X"
        Name of the 2-D feature variable. Its dims may have any names: the first is taken
        as ``sample``, the second as ``feature`` (a coordinate on it becomes ``feature``).
    y : str or None, default="y"
        Name of the 1-D label variable along the sample dim, or ``None`` for no labels.
    chunk_size : int, optional
        Rows per chunk; by default the store's own chunking along samples.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention; nothing is read until the data is computed.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_blobs, read_zarr, write_zarr
    >>> path = os.path.join(tempfile.mkdtemp(), "blobs.zarr")
    >>> _ = write_zarr(make_blobs(100, chunk_size=30, random_state=0), path)
    >>> read_zarr(path).X.chunks
    ((30, 30, 30, 10), (2,))
    """
    path = _check_path("read_zarr", path)
    ds = xr.open_dataset(path, engine="zarr", chunks=None, cache=False, consolidated=False)
    return _from_xarray("read_zarr", path, ds, x, y, chunk_size)


def read_netcdf(path, *, x="X", y="y", chunk_size=None):
    """Open a netCDF file lazily as chunked ``X``/``y`` data.

    Parameters
    ----------
    path : str or os.PathLike
        The netCDF file (netCDF4/HDF5 through h5netcdf, or netCDF3 through scipy).
    x : str, default="X"
        Name of the 2-D feature variable; its first dim is the sample dim.
    y : str or None, default="y"
        Name of the 1-D label variable, or ``None`` for no labels.
    chunk_size : int, optional
        Rows per chunk; by default the file's own chunking, or about 64 MiB per chunk.

    Returns
    -------
    xarray.Dataset
        In taskdml's data convention.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_blobs, read_netcdf, write_netcdf
    >>> path = os.path.join(tempfile.mkdtemp(), "blobs.nc")
    >>> _ = write_netcdf(make_blobs(100, random_state=0), path)
    >>> read_netcdf(path, chunk_size=40).X.chunks
    ((40, 40, 20), (2,))
    """
    path = _check_path("read_netcdf", path)
    ds = xr.open_dataset(path, chunks=None, cache=False)
    return _from_xarray("read_netcdf", path, ds, x, y, chunk_size)


def _writable(function, data, path, overwrite):
    if not isinstance(data, xr.Dataset):
        raise DataError(f"{function}: data must be an xarray.Dataset, got {type(data).__name__}.")
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise DataError(f"{function}: {path!r} already exists. Pass overwrite=True to replace it.")
    data = data.drop_encoding()
    # zarr v3 has no stable fixed-width unicode type; variable-length strings round-trip.
    strings = {k: v.astype(object) for k, v in data.coords.items() if v.dtype.kind == "U"}
    return path, data.assign_coords(strings)


def write_zarr(data, path, *, overwrite=False):
    """Write a data set to a zarr store, chunk by chunk from where each chunk lives.

    Zarr needs equal chunks along ``sample`` (the last may be shorter); data with irregular
    chunks (the output of :func:`train_test_split`, say) is rechunked to its largest chunk
    first.

    Parameters
    ----------
    data : xarray.Dataset
        The data to write.
    path : str or os.PathLike
        The store to create.
    overwrite : bool, default=False
        Replace an existing store.

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_regression, write_zarr
    >>> path = write_zarr(make_regression(100, 3, random_state=0),
    ...                   os.path.join(tempfile.mkdtemp(), "r.zarr"))
    >>> os.path.isdir(path)
    True
    """
    path, data = _writable("write_zarr", data, path, overwrite)
    if "sample" in data.chunksizes:
        chunks = data.chunksizes["sample"]
        if len(set(chunks[:-1])) > 1 or (len(chunks) > 1 and chunks[-1] > chunks[0]):
            data = data.chunk({"sample": max(chunks)})
    data.to_zarr(path, mode="w", consolidated=False)
    return path


def read_edges(path):
    """Open a graph's edge list from a zarr store lazily, chunked as it is stored.

    The store is one that :func:`write_zarr` wrote from a graph Dataset (``src``, ``dst`` and
    an optional ``weight`` along ``edge``; attrs ``shape`` and ``directed``). Nothing is read
    until a chunk is computed: :func:`taskdml.graph.partition_graph` with
    ``out_of_core=True`` reads it chunk by chunk on the workers, so a graph larger than
    their memory can be partitioned from it.

    Parameters
    ----------
    path : str or os.PathLike
        The zarr store (a directory).

    Returns
    -------
    xarray.Dataset
        The graph Dataset, its variables dask arrays with the store's chunks.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_rmat, read_edges, write_zarr
    >>> path = os.path.join(tempfile.mkdtemp(), "edges.zarr")
    >>> _ = write_zarr(make_rmat(6, chunk_edges=300, random_state=0), path)
    >>> edges = read_edges(path)
    >>> edges.src.chunks, edges.attrs["shape"]
    (((300, 300, 300, 124),), [64, 64])
    """
    path = _check_path("read_edges", path)
    ds = xr.open_zarr(path, consolidated=False)
    missing = sorted({"src", "dst"} - set(ds.data_vars)) + (
        ["attr 'shape'"] * ("shape" not in ds.attrs)
    )
    if missing:
        raise DataError(
            f"read_edges: {path!r} is not a graph's edge list: it lacks {missing} (its "
            f"variables are {sorted(ds.data_vars)}). Write one with write_zarr(edges, path) from "
            "a graph Dataset such as make_rmat's."
        )
    return ds.drop_encoding()


def write_netcdf(data, path, *, overwrite=False):
    """Write a data set to a netCDF file.

    With ``h5py`` installed the file is netCDF4 (h5netcdf) and the chunks are written from
    the workers; without it the file is netCDF3 (scipy), which xarray can only write from
    one process, so the chunks are then computed and written by the local threaded scheduler.

    Parameters
    ----------
    data : xarray.Dataset
        The data to write.
    path : str or os.PathLike
        The file to create.
    overwrite : bool, default=False
        Replace an existing file.

    Returns
    -------
    str
        The path written.

    Examples
    --------
    >>> import tempfile, os
    >>> from taskdml.datasets import make_regression, write_netcdf
    >>> path = write_netcdf(make_regression(100, 3, random_state=0),
    ...                     os.path.join(tempfile.mkdtemp(), "r.nc"))
    >>> os.path.getsize(path) > 0
    True
    """
    path, data = _writable("write_netcdf", data, path, overwrite)
    if os.path.exists(path):
        os.remove(path)
    if importlib.util.find_spec("h5py") is not None:
        data.to_netcdf(path, engine="h5netcdf")
    else:
        with dask.config.set(scheduler="threads"):
            data.to_netcdf(path, engine="scipy")
    return path
