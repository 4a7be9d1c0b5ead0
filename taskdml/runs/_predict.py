"""Batch prediction: a fitted model applied to a dataset chunk by chunk, where it lives.

What the ``predict:`` step and ``taskdml predict`` share. :func:`predictions` turns a model
and a chunked dataset into a lazy ``xarray.Dataset`` of one variable, ``prediction`` (dims
``sample``, or ``sample, output`` for ``predict_proba``, ``decision_function`` and
``transform``): one task per row chunk of ``X`` (through :func:`taskdml._apply.apply_chunkwise`)
or per partition of a table (a ``Pipeline`` whose ``ColumnTransformer`` encodes the columns
gets each partition as a pandas DataFrame), the model one key of the graph. A model trained
with its preprocessing inside (a ``Pipeline``) carries it; nothing is fitted here.

:func:`write_predictions` writes them where they are computed: every row chunk's task writes
its own part (a Parquet file, a CSV part, a region of a Zarr store), so a retried task writes
the same part again rather than appending twice, and nothing of the rows reaches the client.
A ``.parquet`` output is a folder of one file per chunk (``part-000000.parquet``, ...: read in
name order they are the rows in order), with the input's row number as the index ``row``; a
``.csv`` output is one file, its parts joined in order by one task on a worker (a streamed
copy) and then removed; a ``.zarr`` output is a store of ``prediction`` along ``sample``.
Reading, predicting and writing form one independent chain per chunk, so the cluster holds a
few chunks at a time however large the data (a Zarr store larger than the workers' memory is
streamed: read lazily, chunk by chunk).

:func:`predict_run` is the command line's: a run's saved model (skops; a joblib file only when
trusted), a data path, an output path.
"""

import os
import shutil
from pathlib import Path

import numpy as np

from taskdml import _keys
from taskdml.exceptions import DataError, PipelineError, did_you_mean

METHODS = ("predict", "predict_proba", "decision_function", "transform")
"""The methods a ``predict:`` step may apply."""

SUFFIXES = (".parquet", ".zarr", ".csv")
"""The output formats, by the path's suffix."""


def output_format(path):
    """``"parquet"``, ``"zarr"`` or ``"csv"`` from *path*'s suffix.

    Raises
    ------
    DataError
        For any other suffix, with the ones accepted.
    """
    suffix = Path(str(path).rstrip("/")).suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(
            f"cannot write predictions to {str(path)!r}: its suffix {suffix or '(none)'!r} is "
            f"not one of {', '.join(SUFFIXES)}.{did_you_mean(suffix, SUFFIXES)} Name the "
            "output e.g. predictions.parquet."
        )
    return suffix[1:]


def check_method(model, method):
    """Refuse a *method* that is not one of :data:`METHODS` or that *model* lacks.

    Raises
    ------
    DataError
        Naming the model, the method and the methods it has.
    """
    if method not in METHODS:
        raise DataError(
            f"unknown method {method!r}.{did_you_mean(method, METHODS)} Use one of "
            f"{', '.join(METHODS)}."
        )
    if not hasattr(model, method):  # a Pipeline answers for its last step (available_if)
        has = [name for name in METHODS if hasattr(model, name)]
        raise DataError(
            f"the model ({_describe(model)}) has no method {method!r}; it has "
            f"{', '.join(has) or 'none of ' + ', '.join(METHODS)}. Use one of those."
        )


def _describe(model):
    steps = getattr(model, "steps", None)
    if steps:
        return "Pipeline(" + ", ".join(type(step).__name__ for _, step in steps) + ")"
    return type(model).__name__


def predictions(model, data, method="predict", *, prefix="predict"):
    """*model*'s *method* over every row of *data*, lazily, one task per row chunk.

    Parameters
    ----------
    model : fitted estimator or Pipeline
    data : xarray.Dataset
        taskdml's chunked data: ``X`` (``y`` is ignored), or a table.
    method : str, default "predict"
        One of :data:`METHODS`.
    prefix : str, default "predict"
        The tasks' key prefix outside a pipeline step.

    Returns
    -------
    xarray.Dataset
        ``prediction`` along ``sample`` (and ``output``: the classes for ``predict_proba`` and
        a multi-class ``decision_function``), chunked as *data*'s rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from taskdml.datasets import make_blobs
    >>> data = make_blobs(100, chunk_size=30, random_state=0)
    >>> model = LogisticRegression().fit(data.X.values, data.y.values)
    >>> found = predictions(model, data, "predict_proba")
    >>> found.prediction.dims, found.prediction.data.chunks[0]
    (('sample', 'output'), (30, 30, 30, 10))
    >>> bool(np.allclose(found.prediction.values, model.predict_proba(data.X.values)))
    True
    """
    import xarray as xr

    from taskdml._apply import apply_chunkwise
    from taskdml._data import as_dask, is_frame
    from taskdml._parts import parts_of

    check_method(model, method)
    if parts_of(model) is not None:
        raise DataError(
            "a model whose parts live on workers (trained with parallel: {mode: model}) "
            "cannot be applied by a predict step yet; call its own "
            f"{method}(X) on the dask array."
        )
    X = as_dask(data)[0]
    if is_frame(X):
        values = _table_predictions(model, method, X, prefix)
    else:
        values = apply_chunkwise(model, method, X, prefix=prefix)
    dims = ("sample",) if values.ndim == 1 else ("sample", "output")
    coords = {}
    classes = getattr(model, "classes_", None)
    if values.ndim == 2 and classes is not None and len(classes) == values.shape[1]:
        coords["output"] = np.asarray(classes)
    return xr.Dataset({"prediction": (dims, values)}, coords=coords)


def _table_predictions(model, method, X, prefix):
    """A table's partitions, each a pandas DataFrame, through *model* (a Pipeline)."""
    import dask

    from taskdml._apply import map_parts, stacked
    from taskdml._data import outside_annotations, partition_lengths

    rows = partition_lengths(X)
    sample = np.asarray(getattr(model, method)(X.head(1, npartitions=1)))
    node = dask.delayed(model, traverse=False, name=_keys.key_name(prefix, model, phase="model"))
    parts = outside_annotations(lambda: list(X.to_delayed()))
    name = _keys.key_name(prefix, node.key, dask.base.tokenize(X), method, phase="predict")
    values = map_parts(
        _call_on_part, parts, node, method, keys=[(name, i) for i in range(len(parts))]
    )
    width = None if sample.ndim == 1 else sample.shape[1]
    return stacked(values, rows, dtype=sample.dtype, width=width)


def _call_on_part(model, method, part):
    """Task: ``model.<method>(part)`` for one partition of a table, as a NumPy array."""
    return np.asarray(getattr(model, method)(part))


def write_predictions(found, path):
    """Write :func:`predictions`' result to *path*, each chunk by the task that computed it.

    Parameters
    ----------
    found : xarray.Dataset
        ``prediction`` along ``sample`` (lazy).
    path : str or path
        Ends in ``.parquet`` (a folder of one file per chunk), ``.csv`` (one file) or
        ``.zarr`` (a store); replaced if it exists.

    Returns
    -------
    dict
        ``{"path", "format", "rows", "parts"}`` of what was written.
    """
    import dask

    fmt = output_format(path)
    path = os.path.abspath(os.fspath(path))
    values = found["prediction"].data
    rows = values.chunks[0]
    columns = _columns(found)
    _remove(path)
    if fmt == "zarr":
        regular = values.rechunk({0: max(rows)}) if len(set(rows[:-1])) > 1 else values
        store = found.copy(data={"prediction": regular})
        store.to_zarr(path, mode="w", consolidated=False, compute=True)
        return {"path": path, "format": fmt, "rows": int(sum(rows)), "parts": len(rows)}
    folder = path if fmt == "parquet" else path + ".parts"
    os.makedirs(folder)
    blocks = values.to_delayed().ravel()
    starts = np.cumsum((0,) + tuple(rows))
    name = _keys.key_name("predict", values.name, path, phase="write")
    written = [
        dask.delayed(_write_part, pure=True)(
            block, fmt, folder, i, int(starts[i]), columns, dask_key_name=(name, i)
        )
        for i, block in enumerate(blocks)
    ]
    if fmt == "csv":
        joined = dask.delayed(_join_csv, pure=True)(
            written, path, folder, dask_key_name=_keys.key_name("predict", name, phase="join")
        )
        n_rows = dask.compute(joined)[0]
    else:
        n_rows = sum(dask.compute(*written))
    return {"path": path, "format": fmt, "rows": int(n_rows), "parts": len(rows)}


def _columns(found):
    values = found["prediction"]
    if values.ndim == 1:
        return ["prediction"]
    if "output" in found.coords:
        return [str(label) for label in found["output"].values.tolist()]
    return [str(i) for i in range(values.shape[1])]


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    if os.path.isdir(path + ".parts"):
        shutil.rmtree(path + ".parts")


def _frame(block, start, columns):
    import pandas as pd

    block = np.asarray(block)
    index = pd.RangeIndex(start, start + len(block), name="row")
    return pd.DataFrame(block.reshape(len(block), -1), index=index, columns=columns)


def _write_part(block, fmt, folder, i, start, columns):
    """Task: one chunk's predictions as its own part (written whole, then renamed)."""
    frame = _frame(block, start, columns)
    final = os.path.join(folder, f"part-{i:06d}.{fmt}")
    partial = final + ".tmp"
    if fmt == "parquet":
        import pyarrow

        frame.to_parquet(partial)
        # Arrow keeps freed buffers in its own pool: on a small worker streaming hundreds of
        # chunks they would stay counted against its memory limit (and pause it).
        pyarrow.default_memory_pool().release_unused()
    else:
        frame.to_csv(partial, header=i == 0)
    os.replace(partial, final)
    return len(frame)


def _join_csv(counts, path, folder):
    """Task: the CSV parts copied into one file in order (streamed), then removed."""
    parts = sorted(Path(folder).glob("part-*.csv"))
    partial = path + ".tmp"
    with open(partial, "wb") as out:
        for part in parts:
            with open(part, "rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)
    os.replace(partial, path)
    shutil.rmtree(folder)
    return sum(counts)


def saved_model(run, step=None, *, root=None, trust=False):
    """The model a recorded run saved for *step*, loaded as the trust rules allow.

    Parameters
    ----------
    run : str or path
        A run id, a unique prefix, a run directory or ``"latest"``.
    step : str, optional
        The step (``"step[item]"`` for a foreach item); by default the run's only model.
    root : path, optional
        The folder of run directories.
    trust : bool, default=False
        Load a model saved with joblib (a pickle: it runs code); skops files are loaded with
        only the types skops trusts either way.

    Returns
    -------
    (estimator, str)
        The model and the step it was saved by.

    Raises
    ------
    RunNotFound
        No such run, or no model of that step (with the steps that saved one).
    PipelineError
        A joblib model without *trust*.
    """
    from taskdml.exceptions import RunNotFound
    from taskdml.runs._directory import find_run, load_model

    manifest = find_run(run, root)
    folder = Path(manifest["path"]) / "models"
    saved = sorted(
        {entry.name.rsplit(".", 1)[0] for entry in folder.iterdir()} if folder.is_dir() else ()
    )
    if step is None:
        if len(saved) != 1:
            raise RunNotFound(
                f"run {manifest['run_id']} saved {len(saved)} models "
                f"({', '.join(saved) or 'none'}); name one with --step."
            )
        step = saved[0]
    if step not in saved:
        raise RunNotFound(
            f"run {manifest['run_id']} saved no model of step {step!r}.{did_you_mean(step, saved)} "
            f"Its models: {', '.join(saved) or 'none'}."
        )
    if (folder / f"{step}.joblib").exists() and not trust:
        raise PipelineError(
            f"the model of step {step!r} in run {manifest['run_id']} is a joblib file (a "
            "pickle, which runs code when loaded). Load it only if you trust the run like "
            "code: 'imports: {trust: true}' in the pipeline file, or --trust."
        )
    return load_model(manifest["path"], step), step


def read_data(path):
    """A Zarr store, Parquet file/folder or CSV file, as taskdml's chunked data (lazy).

    Raises
    ------
    DataError
        For another suffix.
    """
    from taskdml import datasets

    suffix = Path(str(path).rstrip("/")).suffix.lower()
    if suffix == ".zarr":
        import xarray as xr

        opened = xr.open_zarr(path, consolidated=False)
        return datasets.read_zarr(path, y="y" if "y" in opened.data_vars else None)
    if suffix == ".parquet":
        return datasets.read_parquet(path)
    if suffix == ".csv":
        return datasets.read_csv(path)
    raise DataError(
        f"cannot read {str(path)!r}: its suffix {suffix or '(none)'!r} is not one of "
        f"{', '.join(SUFFIXES)}. Give a Zarr store, a Parquet file or folder, or a CSV file."
    )


def predict_run(
    run,
    data,
    out,
    *,
    step=None,
    method="predict",
    root=None,
    trust=False,
    scheduler=None,
    n_workers=None,
):
    """``taskdml predict``: a recorded run's model applied to the data at *data*, written to
    *out* by the workers of a cluster (an embedded one, or *scheduler*'s).

    Parameters
    ----------
    run : str or path
        As :func:`saved_model`.
    data : str or path
        A ``.zarr`` store (``X``, and ``y`` if present, which is ignored), a ``.parquet`` file
        or folder, or a ``.csv`` file (every column a feature, unless the model names its
        features: ``feature_names_in_``).
    out : str or path
        As :func:`write_predictions`.
    step, method, root, trust
        As :func:`saved_model` and :func:`predictions`.
    scheduler : str, optional
        A running scheduler's address; by default a ``LocalCluster`` started for the call.
    n_workers : int, optional
        The embedded cluster's workers.

    Returns
    -------
    dict
        What was written (:func:`write_predictions`), with the ``run``, ``step`` and
        ``method``.
    """
    output_format(out)  # before anything is read
    model, step = saved_model(run, step, root=root, trust=trust)
    check_method(model, method)
    from taskdml.cluster._connect import connect

    with connect(scheduler=scheduler, n_workers=n_workers) as client, client.as_current():
        found = read_data(data)
        names = getattr(model, "feature_names_in_", None)
        if names is not None:  # the model's columns, in its order (a target column left out)
            names = [str(name) for name in names]
            found = found[names] if "feature" not in found.dims else found.sel(feature=names)
        written = write_predictions(predictions(model, found, method), out)
    return {**written, "run": str(run), "step": step, "method": method}
