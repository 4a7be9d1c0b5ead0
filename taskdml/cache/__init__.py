"""Storage that outlives a run: the step cache and the checkpoints of long trainings.

:mod:`._store` is the store (a folder or fsspec URL of signed entries, written atomically);
:mod:`._keys` computes what a step's outputs depend on and explains why a step ran again;
:mod:`._codec` writes each kind of value (chunked data by the workers, models through skops);
:mod:`._checkpoints` is the scope in which a training finds where to checkpoint (the store is
handed in by the runner, so the engines never import the store).

May import the base modules only: the runner decides what to store and when.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "Cache": "taskdml.cache._store",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = exports(__name__, _LAZY)
