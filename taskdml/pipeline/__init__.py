"""The pipeline as data: the file format, its loading and validation, and the immutable model.

``load → validate``: :mod:`._yaml` reads YAML safely, remembering where every key came from;
:mod:`._spec` applies overrides and ``${...}`` interpolation and builds the model;
:mod:`._schema` is the file format (one JSON Schema) and its checker; :mod:`._model` holds
``Step`` and ``PipelineSpec``, which validate themselves when built; :mod:`._kinds` declares the
step kinds (their code lives in :mod:`taskdml.steps` and is named, never imported, here);
:mod:`._trust` is the threat model of ``imports``; :mod:`._render` draws the DAG as text.

May import the base modules, :mod:`taskdml.metrics` and :mod:`taskdml.model_selection` (to
check metric names and search spaces); nothing that runs or records.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "PipelineSpec": "taskdml.pipeline._model",
    "Step": "taskdml.pipeline._model",
    "schema": "taskdml.pipeline._schema",
    "dump_pipeline": "taskdml.pipeline._spec",
    "load_pipeline": "taskdml.pipeline._spec",
    "loads_pipeline": "taskdml.pipeline._spec",
}

__all__ = sorted(_LAZY)

# Renamed in 0.2 (it shadowed sklearn.pipeline.Pipeline), importable until 0.3.
_DEPRECATED = {
    "Pipeline": ("taskdml.pipeline._model", "PipelineSpec", "taskdml.pipeline.PipelineSpec")
}

__getattr__, __dir__ = exports(__name__, _LAZY, _DEPRECATED)
