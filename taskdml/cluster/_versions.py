"""The versions of taskdml and its stack: recorded in every run's manifest, and checked on the
cluster before a run.

**The check.** Before any step, :func:`check_cluster` asks the scheduler and every worker for
their package versions (``Client.get_versions``, which reads installed distributions' metadata,
as ``importlib.metadata`` does here) and compares them with this process's. distributed's own
``get_versions(check=True)`` only warns, about every difference alike; users expect more and
less than that. More: a worker without taskdml, scikit-learn or a package the pipeline names
cannot run the pipeline, and a worker whose dask or distributed differs, or whose scikit-learn
differs in its minor version, fails later and obscurely (protocol errors, estimators that do
not unpickle): these stop the run before it starts, as :class:`ClusterUnavailable` (exit 4),
with the command that fixes them. Less: a numpy patch release or a tornado minor release apart
is harmless, and is a :class:`VersionMismatchWarning`. :data:`STRICT` says, per distribution,
how many leading release numbers must agree; any other difference warns.
"""

import importlib.metadata
import warnings

from taskdml.exceptions import ClusterUnavailable, VersionMismatchWarning

PACKAGES = ("taskdml", "dask", "distributed", "scikit-learn", "xarray", "numpy", "pandas")
SERIALISATION = ("cloudpickle", "msgpack", "tornado", "toolz")
"""distributed's own requirements: every process of a cluster needs them."""
STRICT = {
    "python": (2, "pickled functions and classes do not move between Python minor versions"),
    "dask": (None, "the client, scheduler and workers must run the same dask"),
    "distributed": (None, "the client, scheduler and workers speak one protocol version"),
    "cloudpickle": (1, "its pickles do not load across major versions"),
    "msgpack": (1, "its messages do not decode across major versions"),
    "taskdml": (2, "task functions and merge rules must be the same code on both sides"),
    "scikit-learn": (2, "estimators pickled by one minor version are not supported by another"),
    "numpy": (1, "arrays pickled by one major version do not load in another"),
    "pandas": (1, "frames pickled by one major version do not load in another"),
}
"""``{distribution: (leading release numbers that must agree, None for all; why)}``."""
SCHEDULER_PACKAGES = ("python", "dask", "distributed", "cloudpickle", "msgpack", "tornado", "toolz")
"""What the scheduler runs of the stack: it routes tasks and does not run them."""


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


def required_distributions(modules, shipped=()):
    """The distributions that provide *modules* here, with taskdml's stack.

    Parameters
    ----------
    modules : sequence of str
        Module names (:func:`taskdml.cluster._connect.pipeline_modules`).
    shipped : sequence of str
        Top-level names taskdml ships to the cluster itself: not required there.

    Returns
    -------
    list of str
        :data:`PACKAGES`, distributed's requirements, then the distributions of *modules*
        (a module not installed as a distribution here, e.g. found on ``PYTHONPATH``, has
        none: the import check covers it).
    """
    providers = importlib.metadata.packages_distributions()
    named = [
        distribution
        for module in modules
        if module.split(".")[0] not in shipped
        for distribution in providers.get(module.split(".")[0], ())
    ]
    return list(dict.fromkeys([*PACKAGES, *SERIALISATION, *named]))


def check_cluster(client, required):
    """Raise unless the cluster runs this client's versions of what the run needs.

    Parameters
    ----------
    client : distributed.Client
    required : sequence of str
        Distributions every worker needs (:func:`required_distributions`): missing on a worker,
        each is an error.

    Returns
    -------
    list of str
        The harmless differences, one line each, also issued as one
        :class:`VersionMismatchWarning`.

    Raises
    ------
    ClusterUnavailable
        Naming each package that is missing or differs in a way that breaks runs, where, why
        it matters, and the install command that fixes it.
    """
    required = list(required)
    report = client.get_versions(packages=[name for name in required if name != "python"])
    here = report["client"]["packages"]
    places = {"the scheduler": _only(report["scheduler"]["packages"], SCHEDULER_PACKAGES)}
    places.update(
        (f"worker {address}", answer["packages"])
        for address, answer in sorted(report["workers"].items())
        if isinstance(answer, dict)
    )
    errors, notes = [], []
    for name in ["python", *required, "lz4"]:
        mine = here.get(name)
        theirs = {}
        for where, packages in places.items():
            if name in packages and packages[name] != mine:
                theirs.setdefault(packages[name], []).append(where)
        for version, where in theirs.items():
            line = f"{name}: {mine or 'missing'} here, {version or 'missing'} on {_places(where)}"
            if version is None and mine is not None and name in required:
                errors.append((name, mine, f"{line}: the run needs it there"))
            elif mine is not None and version is not None and _breaks(name, mine, version):
                errors.append((name, mine, f"{line}: {STRICT[name][1]}"))
            else:
                notes.append(line)
    if errors:
        lines = "\n".join(f"  {line}" for _, _, line in errors)
        raise ClusterUnavailable(
            f"the cluster does not run this client's packages:\n{lines}\n"
            f"Fix: {_fix([(name, mine) for name, mine, _ in errors])} where the scheduler and "
            "workers run, then restart them; or run taskdml from the workers' environment."
        )
    if notes:
        warnings.warn(
            "versions differ between this client and the cluster (harmless for a run; pin them "
            "to silence this): " + "; ".join(notes),
            VersionMismatchWarning,
            stacklevel=2,
        )
    return notes


def _only(packages, names):
    return {name: version for name, version in packages.items() if name in names}


def _places(where):
    if len(where) <= 2:
        return " and ".join(where)
    return f"{where[0]} and {len(where) - 1} more"


def _breaks(name, mine, theirs):
    """Whether *theirs* differs from *mine* in the release numbers :data:`STRICT` fixes."""
    if name not in STRICT:
        return False
    leading = STRICT[name][0]
    if leading is None:
        return True
    return _release(mine)[:leading] != _release(theirs)[:leading]


def _release(version):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:  # "3.12.3.final.0" for python, or a local scheme: numbers first
        return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def _fix(packages):
    python = [mine for name, mine in packages if name == "python"]
    pins = " ".join(f"'{name}=={mine}'" for name, mine in packages if name != "python")
    parts = [f"install them with pip install {pins}"] if pins else []
    if python:
        parts.insert(0, f"use Python {'.'.join(python[0].split('.')[:2])}")
    return " and ".join(parts)
