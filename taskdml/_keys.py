"""The one place where Dask keys are named.

Dask's dashboard groups tasks by ``key_split(key)``: the first word of the key and then only
purely alphabetic words. So every key taskdml makes is ``f"{prefix}-{token}"`` where the prefix
is the pipeline step's name (``scale``), optionally followed by alphabetic phases
(``scale-transform``, ``tune-trial-fit``), and the token is ``dask.base.tokenize`` of the inputs
that determine the result, so identical work gets an identical key. Indices (chunk, epoch,
trial) go into a tuple key ``(name, i, ...)``, never into the string.

Code that builds graphs asks :func:`key_name` for a name. Inside a pipeline step the runner
sets the step's name with :func:`step_scope`; outside one (plain library use) the caller's
default prefix is used.
"""

import contextlib
import contextvars
import re

from dask.base import tokenize

_current_step = contextvars.ContextVar("taskdml_step", default=None)
_attempt = contextvars.ContextVar("taskdml_attempt", default=0)
_PHASE = re.compile(r"^[a-z]+(-[a-z]+)*$")


@contextlib.contextmanager
def step_scope(step_name, attempt=0):
    """Name every key built inside the block after pipeline step *step_name*; a step run
    again after a failure (*attempt* > 0) gets new keys, not the failed run's results."""
    token, attempt_token = _current_step.set(step_name), _attempt.set(attempt)
    try:
        yield
    finally:
        _current_step.reset(token)
        _attempt.reset(attempt_token)


def current_step():
    """The pipeline step whose graph is being built, or ``None`` outside the runner."""
    return _current_step.get()


def key_name(default_prefix, *token_parts, phase=None):
    """Return a Dask key name ``"<prefix>[-<phase>]-<token>"``.

    Parameters
    ----------
    default_prefix : str
        Prefix used outside a pipeline step, e.g. ``"make_classification"``.
    *token_parts
        Everything the result depends on; tokenized deterministically.
    phase : str, optional
        Alphabetic words joined by ``-`` (``"transform"``, ``"trial-fit"``), appended to the
        prefix so the dashboard shows them as their own group.
    """
    prefix = _current_step.get() or default_prefix
    if phase is not None:
        if not _PHASE.match(phase):
            raise ValueError(f"key phase must be lowercase alphabetic words, got {phase!r}")
        prefix = f"{prefix}-{phase}"
    attempt = (_attempt.get(),) if _attempt.get() else ()
    return f"{prefix}-{tokenize(prefix, *token_parts, *attempt, ensure_deterministic=False)}"
