"""Public names imported on first use (PEP 562), for taskdml's packages.

A Dask worker that unpickles one task function imports that function's module and what it
needs; with eager ``__init__``\\s it would import every subpackage (dask.array, xarray, the
runner) along with it. Each package lists its public names and where they live, and takes
its ``__getattr__`` and ``__dir__`` from :func:`exports`.
"""

import importlib
import sys


def exports(package, names):
    """``(__getattr__, __dir__)`` for *package* whose public *names* map to their modules.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : dict
        ``{public name: module that defines it}``.

    Returns
    -------
    tuple of callable
        A module ``__getattr__`` that imports a name's module on first use and caches the
        value on the package (later lookups skip it), and a ``__dir__`` that lists
        ``__all__`` with what is already loaded.

    Examples
    --------
    >>> import taskdml
    >>> "GridSearchCV" in dir(taskdml)
    True
    """

    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        module = sys.modules[package]
        return sorted(set(vars(module)) | set(module.__all__))

    return __getattr__, __dir__
