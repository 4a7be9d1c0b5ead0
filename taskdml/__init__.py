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

from taskdml._pipeline import Pipeline, Step
from taskdml._runner import Run, run_pipeline
from taskdml._schema import schema
from taskdml._versions import versions
from taskdml.exceptions import (
    ClusterUnavailable,
    DataError,
    PipelineError,
    RunNotFound,
    StepFailed,
    TaskdmlError,
)
from taskdml.metrics import available_metrics, evaluate
from taskdml.model_selection import (
    ASHASearchCV,
    GridSearchCV,
    HyperbandSearchCV,
    RandomizedSearchCV,
    SuccessiveHalvingSearchCV,
)
from taskdml.parallel import (
    DataParallel,
    MergeRule,
    SequentialFallbackWarning,
    TrainResult,
    get_merge_rule,
    register_merge,
    register_unmergeable,
    train,
    unmergeable_reason,
)
from taskdml.spec import dump_pipeline, load_pipeline, loads_pipeline
from taskdml.steps.call import builds_graph

__version__ = "0.1.0"  # the one place the version is written; pyproject.toml reads it

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
    "Run",
    "RunNotFound",
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
    "schema",
    "train",
    "unmergeable_reason",
    "versions",
]
