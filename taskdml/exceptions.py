"""Every error taskdml raises on purpose.

``TaskdmlError`` is the base. Each subclass also subclasses the builtin it refines, so code
written for scikit-learn (``except ValueError``) still catches it, and carries the exit code
the CLI uses for it (see DESIGN.md, "Exit codes").
"""

import difflib


class TaskdmlError(Exception):
    """Base class of every error raised by taskdml on purpose."""

    exit_code = 1


class PipelineError(TaskdmlError, ValueError):
    """The pipeline file or ``Pipeline`` object is invalid; nothing has run."""

    exit_code = 3


class DataError(TaskdmlError, ValueError):
    """The data handed to a step is unusable: a missing column, NaNs, unseen labels, ..."""

    exit_code = 1


class StepFailed(TaskdmlError, RuntimeError):
    """A step raised while the pipeline ran; the run directory keeps what was computed."""

    exit_code = 1

    def __init__(self, message, *, step=None, run_dir=None):
        super().__init__(message)
        self.step = step
        self.run_dir = run_dir


class ClusterUnavailable(TaskdmlError, ConnectionError):
    """No Dask cluster could be started or reached."""

    exit_code = 4


class ResumeImpossible(TaskdmlError, LookupError):
    """A run to resume or show does not exist or does not match."""

    exit_code = 5


def did_you_mean(word, choices):
    """Return ``" Did you mean 'x'?"`` for the closest of *choices*, or ``""``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
