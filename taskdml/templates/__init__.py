"""New projects: ``taskdml init`` writes a pipeline file, a package of the user's code, tests.

The files are templates in ``project/`` (``*.tmpl``, with ``{{package}}`` for the package's
name and ``package/`` for its folder), shipped as package data. Nothing is overwritten: when a
file to be written exists, nothing is written at all.
"""

import importlib.resources
import importlib.util
import keyword
from pathlib import Path

from taskdml.exceptions import ProjectError

PLACEHOLDER = "{{package}}"


def init_project(directory=".", package="myproject"):
    """Write a new taskdml project into *directory*.

    The project: ``pipeline.yaml`` (taskdml's steps around a ``call:`` of the package's
    ``features.add_interactions``), the package ``<package>/`` (``__init__.py``,
    ``features.py``), ``tests/test_features.py``, ``pyproject.toml`` (pytest's settings) and a
    ``README.md`` with the commands that run the pipeline and the tests.

    Parameters
    ----------
    directory : path, default "."
        Created if missing; may exist, but none of the files to be written may.
    package : str, default "myproject"
        The package's name: a lowercase identifier that is not already importable (an installed
        package or the standard library would shadow it on the workers).

    Returns
    -------
    list of pathlib.Path
        The files written.

    Raises
    ------
    ProjectError
        When *package* is unusable or a file exists; nothing is written then.

    Examples
    --------
    >>> import tempfile
    >>> from taskdml.templates import init_project
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = init_project(folder, "demo")
    ...     sorted(path.relative_to(folder).as_posix() for path in written)[:3]
    ['README.md', 'demo/__init__.py', 'demo/features.py']
    """
    directory = Path(directory)
    if not (package.isidentifier() and package.islower() and not keyword.iskeyword(package)):
        raise ProjectError(
            f"cannot use {package!r} as the package's name: it must be a lowercase Python "
            "identifier, e.g. 'myproject'. Pass another with --package."
        )
    if not (directory / package).is_dir() and importlib.util.find_spec(package) is not None:
        raise ProjectError(
            f"cannot use {package!r} as the package's name: a module of that name is already "
            "installed, and would be imported in its place. Pass another with --package."
        )
    files = {
        directory / _target(relative, package): text.replace(PLACEHOLDER, package)
        for relative, text in _templates()
    }
    existing = sorted(str(path) for path in files if path.exists())
    if existing:
        raise ProjectError(
            f"not writing the project into {str(directory)!r}: {', '.join(existing)} already "
            "exist(s). Choose an empty or new folder (taskdml init DIR), or move them away."
        )
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)


def _templates():
    """``(relative path, text)`` of every template file, in a stable order."""
    found = []
    stack = [(importlib.resources.files(__name__) / "project", ())]
    while stack:
        folder, parts = stack.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                stack.append((entry, parts + (entry.name,)))
            elif entry.name.endswith(".tmpl"):
                found.append(("/".join(parts + (entry.name,)), entry.read_text(encoding="utf-8")))
    return sorted(found)


def _target(relative, package):
    parts = relative.removesuffix(".tmpl").split("/")
    return Path(*(package if part == "package" else part for part in parts))
