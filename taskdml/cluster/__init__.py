"""The cluster a run uses: start or reach it, ship the user's code to it, check its versions.

:mod:`._connect` starts the embedded ``LocalCluster`` or reaches any other (an address, a
cluster class such as dask-jobqueue's), with TLS and the warm-up of imports; :mod:`._project`
makes the user's own modules importable on the scheduler and every worker; :mod:`._versions`
records the stack's versions and compares them with the workers'.

May import the base modules and :mod:`taskdml.pipeline` (a pipeline's cluster block and
modules); nothing that runs steps or records.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "choose": "taskdml.cluster._connect",
    "connect": "taskdml.cluster._connect",
    "describe": "taskdml.cluster._connect",
    "within_machine": "taskdml.cluster._connect",
    "versions": "taskdml.cluster._versions",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
