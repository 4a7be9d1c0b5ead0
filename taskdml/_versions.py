"""The versions of taskdml and its stack, as recorded in every run's manifest."""

import importlib.metadata

PACKAGES = ("taskdml", "dask", "distributed", "scikit-learn", "xarray", "numpy", "pandas")


def versions():
    """The installed versions of taskdml and the libraries it runs on.

    Returns
    -------
    dict
        ``{distribution name: version}`` for taskdml, dask, distributed, scikit-learn, xarray,
        numpy and pandas; ``None`` for one that is not installed.

    Examples
    --------
    >>> import taskdml
    >>> sorted(taskdml.versions())[:3]
    ['dask', 'distributed', 'numpy']
    """
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found
