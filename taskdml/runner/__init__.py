"""Run a pipeline: plan it, execute its steps on the cluster, and record what happened.

:mod:`._plan` plans a run once (steps in order, cache keys and reuse decisions with their
reasons, the cluster): ``--dry-run`` prints that plan and :mod:`._runner` executes it.
:mod:`._runner` holds ``run_pipeline``/``resume_run``: it connects the planned cluster,
executes the steps as their inputs become ready (each kind's ``run`` imported by name from
:mod:`taskdml.pipeline._kinds`) and hands every record to the run directory through its
recorder, the only writer of the run's records; :mod:`._reuse` is its use of the step cache
(reuse stored outputs or store new ones); :mod:`._values` turns what one step produced into
what the next reads. :mod:`._sweep` runs one run per combination of ``-m`` overrides on one
cluster and records their comparison.

May import every lower layer (pipeline, cluster, cache, runs, the engines); never
:mod:`taskdml.steps` (named only) or ``cli``.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "RunPlan": "taskdml.runner._plan",
    "plan_run": "taskdml.runner._plan",
    "Run": "taskdml.runner._runner",
    "resume_run": "taskdml.runner._runner",
    "run_pipeline": "taskdml.runner._runner",
    "run_sweep": "taskdml.runner._sweep",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
