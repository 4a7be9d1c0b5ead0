"""taskdml: machine-learning pipelines on Dask.

Examples
--------
>>> import taskdml
>>> pipeline = taskdml.load_pipeline("pipelines/quickstart.yaml")  # doctest: +SKIP
>>> run = taskdml.run_pipeline(pipeline)  # doctest: +SKIP
"""

from taskdml.exceptions import (ClusterUnavailable, DataError, PipelineError, ResumeImpossible,
                                StepFailed, TaskdmlError)
from taskdml.pipeline import Pipeline, Step
from taskdml.runner import Run, run_pipeline
from taskdml.spec import dump_pipeline, load_pipeline, loads_pipeline
from taskdml.steps.call import builds_graph

__version__ = "0.1.0"

__all__ = [
    "ClusterUnavailable",
    "DataError",
    "Pipeline",
    "PipelineError",
    "ResumeImpossible",
    "Run",
    "Step",
    "StepFailed",
    "TaskdmlError",
    "__version__",
    "builds_graph",
    "dump_pipeline",
    "load_pipeline",
    "loads_pipeline",
    "run_pipeline",
]
