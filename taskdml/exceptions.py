"""Every error taskdml raises on purpose.

``TaskdmlError`` is the base. Each subclass also subclasses the builtin it refines, so code
written for scikit-learn (``except ValueError``) still catches it, and carries the exit code
the CLI uses for it (the table is ``cli.main.EXIT_CODES``; README, "Command line").
"""

import difflib


class TaskdmlError(Exception):
    """Base class of every error raised by taskdml on purpose."""

    exit_code = 1


class PipelineError(TaskdmlError, ValueError):
    """The pipeline file or ``PipelineSpec`` object is invalid; nothing has run.

    ``problems`` lists every ``(key_path, text)`` found, so a file loader can prefix each with
    the file, line and column the key path came from.
    """

    exit_code = 3

    def __init__(self, message=None, *, problems=()):
        self.problems = list(problems)
        if message is None:
            message = "\n".join(f"{dotted(path)}: {text}" for path, text in self.problems)
        super().__init__(message)


class DataError(TaskdmlError, ValueError):
    """The data handed to a step is unusable: a missing column, NaNs, unseen labels, ..."""

    exit_code = 1


class StepFailed(TaskdmlError, RuntimeError):
    """A step raised while the pipeline ran; the run directory keeps what was computed.

    Attributes
    ----------
    step : str or None
        The first step that failed.
    run_dir : pathlib.Path or None
        The run directory (``None`` when the run was not recorded).
    """

    exit_code = 1

    def __init__(self, message, *, step=None, run_dir=None):
        super().__init__(message)
        self.step = step
        self.run_dir = run_dir


class ClusterUnavailable(TaskdmlError, ConnectionError):
    """No Dask cluster could be started or reached."""

    exit_code = 4


class WorkerImportError(TaskdmlError, ImportError):
    """The workers cannot load an object a fit sends them: its class or function lives in a
    module that this process imports and the workers do not (:func:`taskdml._warm.check_loadable`,
    before the first task that carries it). The message names the parameter, the module and
    the fix."""

    exit_code = 1


class ProjectError(TaskdmlError, ValueError):
    """``taskdml init`` cannot write a project: a file it would write exists, or the package
    name is unusable. Nothing was written."""

    exit_code = 2


class RunNotFound(TaskdmlError, LookupError):
    """No recorded run matches the name given, or a run holds no model for the step asked.

    Raised by :func:`taskdml.runs._directory.find_run` (an unknown or ambiguous id) and
    :func:`taskdml.runs._directory.load_model`; the message names the run and how to list the
    recorded ones.
    """

    exit_code = 5


class TrackingError(TaskdmlError, ValueError):
    """A run cannot be tracked in MLflow as asked (``--track``, the file's ``tracking:``):
    mlflow is not installed, the server does not answer, or it refuses the experiment. Raised
    before any step runs (:mod:`taskdml.runs._mlflow`)."""

    exit_code = 2


def did_you_mean(word, choices):
    """A "did you mean" hint for a mistyped name.

    A choice that differs only in case (``x`` for ``X``) wins over every other.

    Parameters
    ----------
    word : str
    choices : iterable

    Returns
    -------
    str
        ``" Did you mean 'x'?"`` for the closest of *choices*, or ``""``.

    Examples
    --------
    >>> did_you_mean("sed", ["seed", "alpha"])
    " Did you mean 'seed'?"
    """
    choices = [str(choice) for choice in choices]
    same_but_case = [choice for choice in choices if choice.lower() == str(word).lower()]
    close = same_but_case or difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def dotted(path):
    """Render a key path as ``steps.scale.inputs[0]`` (``(top level)`` for the root).

    Parameters
    ----------
    path : sequence of str and int

    Returns
    -------
    str

    Examples
    --------
    >>> dotted(("steps", "scale", "inputs", 0))
    'steps.scale.inputs[0]'
    """
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class VersionMismatchWarning(UserWarning):
    """A package differs between the client and the cluster in a way that should not break a
    run (a numpy patch release, a tornado minor release); pin it to silence the warning."""


class InsecureConnectionWarning(UserWarning):
    """taskdml connects to a scheduler on another host over plain ``tcp://``: messages,
    pickled tasks included, cross the network unencrypted and unauthenticated."""


class ClusterLimitWarning(UserWarning):
    """A pipeline file asked the cluster taskdml starts on this machine for more workers,
    threads or memory than the machine has; the request was capped
    (:mod:`taskdml.cluster._connect`)."""


class ReportWarning(UserWarning):
    """A run's pictures or ``report.html`` could not be written (:mod:`taskdml.runs._report`); the
    run's outcome and its other records are unaffected."""


class CacheWarning(UserWarning):
    """A step's outputs could not be stored in the step cache, or a cache entry was refused
    (:mod:`taskdml.cache._store`); the run goes on without it."""
