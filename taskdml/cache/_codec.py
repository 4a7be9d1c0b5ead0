"""How the step cache writes a step's outputs and reads them back.

A step's outputs are a tree — the dict of its outputs, a foreach step's dict of items, lists
and tuples — whose leaves are values. :func:`encode` writes every leaf into a folder in the
format made for it and returns the tree as JSON (the *node* of each leaf names its file and
format); :func:`decode` rebuilds the values from that JSON:

==========================================  ===============================================
value                                       written as
==========================================  ===============================================
``None``, bool, int, float, str, and lists  inline in the JSON
and dicts of them; NumPy scalars
chunked ``xarray.Dataset`` or dask array    Zarr (format 2), written by the workers
dask DataFrame                              Parquet, one file per partition
NumPy array                                 ``.npy`` (no pickle)
``scipy.sparse`` matrix                     ``.npz``
pandas DataFrame                            Parquet
estimator                                   skops, or joblib where skops cannot (recorded)
``distributed.Future``                      its value's format, written by the worker that
                                            holds it, and read back into a future there
a model whose parts live on workers         its shell (joblib or skops), its parts as the
(:mod:`taskdml._parts`)                     values they are (futures, chunked datasets)
anything else                               joblib (recorded)
==========================================  ===============================================

Chunked values are written where their chunks are, uncompressed (features in floating point
hardly compress, and compressing the quickstart's data took 2-3 times as long as writing it),
and read back lazily, chunked as they were
(Zarr needs regular chunks, so irregular ones are written regular and re-chunked on reading),
so a step fed from the cache trains on the same chunks in the same order. joblib files are
pickles: the cache reads only entries it signed itself (:mod:`taskdml.cache._store`).

The folder is a URL or a path (anything fsspec opens); the functions that run on workers take
it as a string.
"""

import io
import posixpath

from taskdml._parts import parts_of, with_parts


def encode(value, folder, name, client):
    """Write *value* under *folder* and return its node.

    Parameters
    ----------
    value : object
        A step's outputs, or any part of them.
    folder : str
        Path or URL of the folder its files go to.
    name : str
        The stem of its files (children get ``name.0``, ``name.1``, ...).
    client : distributed.Client or None
        Writes futures and chunked values on the workers.

    Returns
    -------
    dict
        The node (JSON) that :func:`decode` reads.
    """
    import dask

    if _is_json(value):
        return {"kind": "json", "value": value}
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {
            "kind": "dict",
            "items": {
                key: encode(item, folder, f"{name}.{i}", client)
                for i, (key, item) in enumerate(value.items())
            },
        }
    if isinstance(value, (list, tuple)):
        return {
            "kind": type(value).__name__,
            "items": [encode(item, folder, f"{name}.{i}", client) for i, item in enumerate(value)],
        }
    if type(value).__name__ == "Future":
        written = client.submit(_encode_in_memory, value, folder, name, pure=False)
        return {"kind": "future", "value": written.result()}
    split = parts_of(value)
    if split is not None:  # its shell here, each part written by the worker that holds it
        shell, shards = split
        return {
            "kind": "sharded",
            "model": _encode_in_memory(shell, folder, name),
            "shards": encode(shards, folder, f"{name}.shard", client),
        }
    if dask.is_dask_collection(value):
        return _encode_collection(value, folder, name)
    return _encode_in_memory(value, folder, name)


def decode(node, folder, client):
    """The value *node* describes, read from *folder*.

    Parameters
    ----------
    node : dict
        What :func:`encode` returned.
    folder : str
    client : distributed.Client or None
        Reads futures back on a worker.

    Returns
    -------
    object
        Chunked values come back lazy (read when computed), futures as futures.
    """
    kind = node["kind"]
    if kind == "dict":
        return {key: decode(item, folder, client) for key, item in node["items"].items()}
    if kind in ("list", "tuple"):
        items = [decode(item, folder, client) for item in node["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "future":
        return client.submit(_decode_in_memory, node["value"], folder, pure=False)
    if kind == "sharded":
        shell = _decode_in_memory(node["model"], folder)
        return with_parts(shell, decode(node["shards"], folder, client))
    if kind in _COLLECTIONS:
        return _COLLECTIONS[kind](node, folder)
    return _decode_in_memory(node, folder)


def _is_json(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return not isinstance(value, float) or value == value  # NaN is not JSON
    if isinstance(value, list):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _url(folder, name):
    return posixpath.join(folder, name)


def _fs(folder):
    import fsspec

    return fsspec.core.url_to_fs(folder)


def _write_bytes(folder, name, data):
    fs, path = _fs(folder)
    with fs.open(posixpath.join(path, name), "wb") as file:
        file.write(data)


def _read_bytes(folder, name):
    fs, path = _fs(folder)
    with fs.open(posixpath.join(path, name), "rb") as file:
        return file.read()


def _encode_collection(value, folder, name):
    """Zarr or Parquet written by the workers that hold the chunks."""
    import dask.array as da
    import dask.dataframe as dd
    import xarray as xr

    path = f"{name}.zarr"
    arrays = value.data_vars.values() if isinstance(value, xr.Dataset) else [value]
    for array in arrays:
        if _is_sparse(getattr(array.data if hasattr(array, "dims") else array, "_meta", None)):
            raise TypeError(
                "its chunks are scipy.sparse matrices, which Zarr cannot store (the cache "
                "stores dense chunked data)"
            )
    if isinstance(value, xr.Dataset):
        regular = value.chunk({dim: _regular(sizes) for dim, sizes in value.chunks.items()})
        for variable in regular.variables.values():
            variable.encoding.pop("chunks", None)  # a dataset read from Zarr keeps its own
        raw = {name: {"compressors": None} for name in regular.data_vars}  # see above
        regular.to_zarr(
            _url(folder, path), mode="w-", zarr_format=2, consolidated=True, encoding=raw
        )
        texts = [key for key, array in value.data_vars.items() if array.dtype == object]
        return {"kind": "dataset", "path": path, "chunks": dict(value.chunks), "objects": texts}
    if isinstance(value, da.Array):
        regular = value.rechunk(tuple(_regular(sizes) for sizes in value.chunks))
        regular.to_zarr(_url(folder, path), zarr_format=2, compressors=None)
        return {"kind": "dask_array", "path": path, "chunks": [list(c) for c in value.chunks]}
    if isinstance(value, dd.DataFrame):
        path = f"{name}.parquet"
        value.to_parquet(_url(folder, path), write_index=True)
        return {"kind": "dask_frame", "path": path}
    raise TypeError(f"the cache cannot store a {type(value).__name__}")


def _regular(sizes):
    """Zarr's chunking of a dimension chunked as *sizes*: all as large as the largest."""
    return max(sizes) if sizes else 1


def _decode_dataset(node, folder):
    import xarray as xr

    value = xr.open_zarr(_url(folder, node["path"]), chunks={}, consolidated=True)
    chunks = {dim: tuple(sizes) for dim, sizes in node["chunks"].items()}
    try:
        same = dict(value.chunks) == chunks
    except ValueError:  # variables chunked apart (Zarr chunks a text column its own way)
        same = False
    if not same:
        value = value.chunk(chunks)
    for key in node.get("objects", ()):  # Zarr gives text back as NumPy strings
        value[key] = value[key].astype(object)
    for variable in value.variables.values():
        variable.encoding.clear()  # written again elsewhere, it is chunked as it is now
    return value


def _decode_dask_array(node, folder):
    import dask.array as da

    value = da.from_zarr(_url(folder, node["path"]))
    chunks = tuple(tuple(sizes) for sizes in node["chunks"])
    return value if value.chunks == chunks else value.rechunk(chunks)


def _decode_dask_frame(node, folder):
    import dask.dataframe as dd

    return dd.read_parquet(_url(folder, node["path"]))


_COLLECTIONS = {
    "dataset": _decode_dataset,
    "dask_array": _decode_dask_array,
    "dask_frame": _decode_dask_frame,
}


def _encode_in_memory(value, folder, name):
    """Write an in-memory *value* (in the client, or on the worker that holds it)."""
    import numpy as np

    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"kind": "scalar", "value": value.item(), "dtype": value.dtype.str}
    if isinstance(value, np.ndarray) and value.dtype.kind != "O":
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        return _written(folder, f"{name}.npy", buffer.getvalue(), "array")
    if _is_sparse(value):
        import scipy.sparse

        buffer = io.BytesIO()
        scipy.sparse.save_npz(buffer, value)
        return _written(folder, f"{name}.npz", buffer.getvalue(), "sparse")
    if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
        try:
            buffer = io.BytesIO()
            value.to_parquet(buffer)
            return _written(folder, f"{name}.parquet", buffer.getvalue(), "frame")
        except Exception as error:  # columns of Python objects Parquet cannot type
            return _pickled(value, folder, name, error)
    if hasattr(value, "fit") and hasattr(value, "get_params"):
        from taskdml.cache._models import dump_model

        data, facts = dump_model(value)
        return _written(folder, f"{name}.{facts['format']}", data, "model") | facts
    return _pickled(value, folder, name, None)


def _is_sparse(value):
    return type(value).__module__.startswith("scipy.sparse")


def _pickled(value, folder, name, error):
    import joblib

    buffer = io.BytesIO()
    joblib.dump(value, buffer)
    node = _written(folder, f"{name}.joblib", buffer.getvalue(), "pickle")
    node["type"] = f"{type(value).__module__}.{type(value).__qualname__}"
    if error is not None:
        node["why_pickled"] = f"{type(error).__name__}: {error}"
    return node


def _written(folder, path, data, kind):
    import hashlib

    _write_bytes(folder, path, data)
    return {"kind": kind, "path": path, "sha256": hashlib.sha256(data).hexdigest()}


def _decode_in_memory(node, folder):
    """The value of an in-memory *node* (in the client, or on a worker)."""
    import hashlib

    import numpy as np

    kind = node["kind"]
    if kind == "json":
        return node["value"]
    if kind == "scalar":
        return np.dtype(node["dtype"]).type(node["value"])
    data = _read_bytes(folder, node["path"])
    if hashlib.sha256(data).hexdigest() != node["sha256"]:
        raise ValueError(f"{_url(folder, node['path'])} changed since the cache wrote it")
    if kind == "array":
        return np.load(io.BytesIO(data), allow_pickle=False)
    if kind == "sparse":
        import scipy.sparse

        return scipy.sparse.load_npz(io.BytesIO(data))
    if kind == "frame":
        import pandas as pd

        return pd.read_parquet(io.BytesIO(data))
    if kind == "model":
        from taskdml.cache._models import load_model_bytes

        return load_model_bytes(data, node["format"])
    if kind == "pickle":
        import joblib

        return joblib.load(io.BytesIO(data))
    raise ValueError(f"unknown cache node kind {kind!r}")
