"""Where a pipeline's own modules are found: the pipeline file's directory, then the working
directory, made importable in this process when the file is loaded (the cluster's workers get
the same modules shipped by :mod:`taskdml.cluster._project`).
"""

import importlib
import os
import sys
from pathlib import Path


def importable(pipeline_file=None):
    """Make the pipeline file's directory and the working directory importable here.

    Appends them to ``sys.path`` (after the installed packages) unless already there.

    Parameters
    ----------
    pipeline_file : path, optional

    Returns
    -------
    list of pathlib.Path
        The project's directories: the pipeline file's, then the working directory.
    """
    directories = project_directories(pipeline_file)
    present = {_resolved(entry) for entry in sys.path}
    for directory in directories:
        if directory not in present:
            sys.path.append(str(directory))
    importlib.invalidate_caches()
    return directories


def project_directories(pipeline_file=None):
    """The directories a project's packages are looked for in, without repeats.

    Parameters
    ----------
    pipeline_file : path, optional

    Returns
    -------
    list of pathlib.Path
    """
    found = [Path(pipeline_file).resolve().parent] if _is_file(pipeline_file) else []
    return list(dict.fromkeys(found + [Path.cwd().resolve()]))


def _is_file(path):
    return path is not None and not str(path).startswith("<") and Path(path).is_file()


def _resolved(entry):
    return Path(entry or os.getcwd()).resolve()
