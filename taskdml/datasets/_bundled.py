"""scikit-learn's bundled data sets (iris, digits, wine, ...) as chunked Datasets, each chunk
loaded by its own task.
"""

import math

import numpy as np

from taskdml.datasets._common import _check_int, _paired_arrays, _row_chunks, _xy_dataset
from taskdml.exceptions import DataError, did_you_mean

# name -> (loader in sklearn.datasets, target column for multi-output data sets)
_SKLEARN_DATASETS = {
    "iris": ("load_iris", None),
    "digits": ("load_digits", None),
    "wine": ("load_wine", None),
    "breast_cancer": ("load_breast_cancer", None),
    "diabetes": ("load_diabetes", None),
    "linnerud": ("load_linnerud", "Weight"),
}


def _sklearn_arrays(name):
    import sklearn.datasets

    loader, target = _SKLEARN_DATASETS[name]
    bunch = getattr(sklearn.datasets, loader)()
    X = np.asarray(bunch.data, dtype=np.float64)
    if target is None:
        y, target_name = np.asarray(bunch.target), "target"
    else:
        y, target_name = bunch.target[:, list(bunch.target_names).index(target)], target
    y = y.astype(np.int64 if np.issubdtype(y.dtype, np.integer) else np.float64)
    return X, y, [str(f) for f in bunch.feature_names], target_name


def _sklearn_rows(name, start, stop):
    X, y, _, _ = _sklearn_arrays(name)
    return X[start:stop], y[start:stop]


def load_sklearn(name, *, chunk_size=None):
    """Load one of scikit-learn's bundled (no download) data sets as chunked data.

    The client reads the file once for its shape and feature names; every chunk is then
    loaded again inside its own task, so no data travels from the client.

    Parameters
    ----------
    name : {"iris", "digits", "wine", "breast_cancer", "diabetes", "linnerud"}
        The data set. ``y`` is the class label (int64) for iris, digits, wine and
        breast_cancer, the disease progression (float64) for diabetes, and the ``Weight``
        column (float64) of linnerud's three physiological targets.
    chunk_size : int, optional
        Rows per chunk; by default about four chunks.

    Returns
    -------
    xarray.Dataset
        ``X``, ``y``, a ``feature`` coordinate with scikit-learn's feature names, and attrs
        ``source`` (the scikit-learn loader) and ``target`` (the name of ``y``).

    Examples
    --------
    >>> from taskdml.datasets import load_sklearn
    >>> iris = load_sklearn("iris")
    >>> iris.X.shape, iris.X.chunks[0], str(iris.feature.values[0]), iris.attrs["target"]
    ((150, 4), (38, 38, 38, 36), 'sepal length (cm)', 'target')
    """
    if name not in _SKLEARN_DATASETS:
        raise DataError(
            f"load_sklearn: unknown data set name={name!r}; expected one of "
            f"{sorted(_SKLEARN_DATASETS)}.{did_you_mean(name, _SKLEARN_DATASETS)}"
        )
    X, y, feature_names, target_name = _sklearn_arrays(name)
    n_samples, n_features = X.shape
    if chunk_size is None:
        chunk_size = math.ceil(n_samples / 4)
    chunk_size = _check_int("load_sklearn", "chunk_size", chunk_size, minimum=1)

    def chunk_task(start, stop, _):
        return (_sklearn_rows, name, start, stop)

    X, y = _paired_arrays(
        "load_sklearn",
        (name, chunk_size),
        chunk_task,
        _row_chunks(n_samples, chunk_size),
        n_features,
        y.dtype,
    )
    attrs = {"source": f"sklearn.datasets.{_SKLEARN_DATASETS[name][0]}", "target": target_name}
    return _xy_dataset(X, y, np.array(feature_names), attrs)
