"""taskdml: machine-learning pipelines on Dask, with data-parallel training.

Three ways in: ``taskdml run PIPELINE.yaml`` (the CLI over pipeline files),
:func:`load_pipeline` / :func:`run_pipeline` (the same from Python), and the scikit-learn
estimators (:class:`DataParallel`) that drop into existing code.

Examples
--------
>>> import taskdml
>>> pipeline = taskdml.load_pipeline("pipelines/quickstart.yaml")  # doctest: +SKIP
>>> run = taskdml.run_pipeline(pipeline)  # doctest: +SKIP
"""

from taskdml.exceptions import (ClusterUnavailable, DataError, PipelineError, ResumeImpossible,
                                StepFailed, TaskdmlError)
from taskdml.metrics import available_metrics, evaluate
from taskdml.model_selection import (ASHASearchCV, GridSearchCV, HyperbandSearchCV,
                                     RandomizedSearchCV, SuccessiveHalvingSearchCV)
from taskdml.parallel.engine import SequentialFallbackWarning, TrainResult, train
from taskdml.parallel.estimator import DataParallel
from taskdml.parallel.merge import (MergeRule, get_merge_rule, register_merge, register_unmergeable,
                                    unmergeable_reason)
from taskdml.pipeline import Pipeline, Step
from taskdml.runner import Run, run_pipeline
from taskdml.spec import dump_pipeline, load_pipeline, loads_pipeline
from taskdml.steps.call import builds_graph

__version__ = "0.1.0"

__all__ = [
    "ASHASearchCV",
    "GridSearchCV",
    "HyperbandSearchCV",
    "RandomizedSearchCV",
    "SuccessiveHalvingSearchCV",
    "ClusterUnavailable",
    "DataError",
    "DataParallel",
    "MergeRule",
    "Pipeline",
    "PipelineError",
    "ResumeImpossible",
    "Run",
    "SequentialFallbackWarning",
    "Step",
    "StepFailed",
    "TaskdmlError",
    "TrainResult",
    "__version__",
    "available_metrics",
    "builds_graph",
    "dump_pipeline",
    "evaluate",
    "get_merge_rule",
    "load_pipeline",
    "loads_pipeline",
    "register_merge",
    "register_unmergeable",
    "run_pipeline",
    "train",
    "unmergeable_reason",
]
