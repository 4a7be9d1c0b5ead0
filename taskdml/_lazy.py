"""Public names imported on first use (PEP 562), for taskdml's packages.

A Dask worker that unpickles one task function imports that function's module and what it
needs; with eager ``__init__``\\s it would import every subpackage (dask.array, xarray, the
runner) along with it. Each package lists its public names and where they live, and takes
its ``__getattr__`` and ``__dir__`` from :func:`exports`, which also keeps names dropped from
a package's API importable for one release, with a ``FutureWarning`` that says what to use.
"""

import importlib
import importlib.util
import sys
import warnings


def exports(package, names, deprecated=None):
    """``(__getattr__, __dir__)`` for *package* whose public *names* map to their modules.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : dict
        ``{public name: module that defines it}``.
    deprecated : dict, optional
        ``{old name: (module, name there, what to write instead)}``: names that still
        resolve, for one release, with a ``FutureWarning``; they are in neither ``__all__``
        nor ``dir()``.

    Returns
    -------
    tuple of callable
        A module ``__getattr__`` that imports a name's module on first use and caches the
        value on the package (later lookups skip it), and imports a subpackage or module
        named as an attribute (``taskdml.parallel.train`` after ``import taskdml``); and a
        ``__dir__`` that lists ``__all__`` with what is already loaded.

    Examples
    --------
    >>> import taskdml
    >>> "GridSearchCV" in dir(taskdml)
    True
    """

    def __getattr__(name):
        if name in (deprecated or {}):
            module, attribute, instead = deprecated[name]
            warnings.warn(
                f"{package}.{name} is deprecated since taskdml 0.2 and will be removed in 0.3: "
                f"use {instead}.",
                FutureWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(module), attribute)
        if name not in names:
            if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
                return importlib.import_module(f"{package}.{name}")  # taskdml.parallel.train
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        module = sys.modules[package]
        return sorted(set(vars(module)) | set(module.__all__))

    return __getattr__, __dir__
