"""Run a pipeline: plan it, execute its steps on the cluster, and record what happened.

:mod:`._runner` holds ``run_pipeline``/``resume_run``: it builds the run's plan, connects the
cluster, executes the steps as their inputs become ready (each kind's ``run`` imported by name
from :mod:`taskdml.pipeline._kinds`) and hands every record to the run directory;
:mod:`._reuse` is its use of the step cache (reuse stored outputs or store new ones, and
``--dry-run``'s plan); :mod:`._values` turns what one step produced into what the next reads.

May import every lower layer (pipeline, cluster, cache, runs, the engines); never
:mod:`taskdml.steps` (named only) or ``cli``.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "Run": "taskdml.runner._runner",
    "resume_run": "taskdml.runner._runner",
    "run_pipeline": "taskdml.runner._runner",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
