"""Chunked data sets: generators, loaders, readers, a chunk-preserving split, text and silos.

Every loader returns an :class:`xarray.Dataset` in taskdml's data convention: a variable ``X``
with dims ``("sample", "feature")`` (float64, a dask array chunked along ``sample`` only, one
chunk along ``feature``) and, when there are labels, ``y`` with dims ``("sample",)`` chunked
identically. A ``feature`` coordinate carries the feature names when they are known. Chunk
sizes are always known (never NaN).

**Data is made where it lives.** Nothing of size ``n_samples`` is built on the client: each
chunk is generated, loaded or read inside its own task, so a 100-million-row data set costs the
client a graph, not memory. Every dask key is named by :func:`taskdml._keys.key_name`, so the
dashboard groups the tasks under the function's name (``make_classification``,
``train_test_split-test``) or, inside a pipeline, under the step's name.

The subsystem sits just above the base modules (``taskdml.exceptions``, ``taskdml._keys``,
``taskdml._data``) and imports nothing else of taskdml. Its modules: ``_generators``
(``make_*`` tables), ``_graphs`` (generated graphs with ground truth as edge Datasets:
R-MAT, stochastic block model, planted ratings, kNN graph; ``split_edges``), ``_bundled``
(scikit-learn's data sets), ``_files`` (Zarr, netCDF), ``_tables``
(CSV, Parquet), ``_split`` (``train_test_split``), ``text`` (a generated corpus and hashed
features) and ``silos`` (a data set split across federated parties), ``_common`` (what they
share). Pipeline files name them through this package (``taskdml.datasets:read_csv``).
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "make_blobs": "taskdml.datasets._generators",
    "make_classification": "taskdml.datasets._generators",
    "make_regression": "taskdml.datasets._generators",
    "make_knn_graph": "taskdml.datasets._graphs",
    "make_ratings": "taskdml.datasets._graphs",
    "make_rmat": "taskdml.datasets._graphs",
    "make_sbm": "taskdml.datasets._graphs",
    "split_edges": "taskdml.datasets._graphs",
    "load_sklearn": "taskdml.datasets._bundled",
    "read_edges": "taskdml.datasets._files",
    "read_netcdf": "taskdml.datasets._files",
    "read_zarr": "taskdml.datasets._files",
    "write_netcdf": "taskdml.datasets._files",
    "write_zarr": "taskdml.datasets._files",
    "read_csv": "taskdml.datasets._tables",
    "read_parquet": "taskdml.datasets._tables",
    "train_test_split": "taskdml.datasets._split",
    "hash_text": "taskdml.datasets.text",
    "make_documents": "taskdml.datasets.text",
    "load_held_out": "taskdml.datasets.silos",
    "load_silo": "taskdml.datasets.silos",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
