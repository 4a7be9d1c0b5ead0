"""taskdml: machine-learning pipelines on Dask, with data-parallel training.

Three ways in: ``taskdml run PIPELINE.yaml`` (the CLI over pipeline files),
:func:`load_pipeline` / :func:`run_pipeline` (the same from Python), and the scikit-learn
estimators (:class:`DataParallel`) that drop into existing code.

The public names are imported on first use (PEP 562): a Dask worker that unpickles one task
function imports that function's module and what it needs, not dask.array, xarray and the
pipeline runner along with the whole package.

Examples
--------
>>> import taskdml
>>> pipeline = taskdml.load_pipeline("pipelines/quickstart.yaml")  # doctest: +SKIP
>>> run = taskdml.run_pipeline(pipeline)  # doctest: +SKIP
"""

from taskdml._lazy import exports

__version__ = "0.1.0"  # the one place the version is written; pyproject.toml reads it

# public name -> the module that defines it
_LAZY = {
    "ASHASearchCV": "taskdml.model_selection",
    "GridSearchCV": "taskdml.model_selection",
    "HyperbandSearchCV": "taskdml.model_selection",
    "RandomizedSearchCV": "taskdml.model_selection",
    "SuccessiveHalvingSearchCV": "taskdml.model_selection",
    "ClusterUnavailable": "taskdml.exceptions",
    "DataError": "taskdml.exceptions",
    "PipelineError": "taskdml.exceptions",
    "RunNotFound": "taskdml.exceptions",
    "StepFailed": "taskdml.exceptions",
    "TaskdmlError": "taskdml.exceptions",
    "ClassSharded": "taskdml.parallel",
    "FeatureSharded": "taskdml.parallel",
    "DataParallel": "taskdml.parallel",
    "DifferentialPrivacy": "taskdml.parallel",
    "FederatedResult": "taskdml.parallel",
    "Silo": "taskdml.parallel",
    "train_federated": "taskdml.parallel",
    "MergeRule": "taskdml.parallel",
    "SequentialFallbackWarning": "taskdml.parallel",
    "TrainResult": "taskdml.parallel",
    "get_merge_rule": "taskdml.parallel",
    "register_merge": "taskdml.parallel",
    "register_unmergeable": "taskdml.parallel",
    "train": "taskdml.parallel",
    "unmergeable_reason": "taskdml.parallel",
    "Pipeline": "taskdml.pipeline",
    "Step": "taskdml.pipeline",
    "Run": "taskdml.runner",
    "run_pipeline": "taskdml.runner",
    "resume_run": "taskdml.runner",
    "Cache": "taskdml.cache",
    "schema": "taskdml.pipeline",
    "versions": "taskdml.cluster",
    "available_metrics": "taskdml.metrics",
    "evaluate": "taskdml.metrics",
    "dump_pipeline": "taskdml.pipeline",
    "load_pipeline": "taskdml.pipeline",
    "loads_pipeline": "taskdml.pipeline",
    "builds_graph": "taskdml.steps.call",
    "init_project": "taskdml.templates",
    "ProjectError": "taskdml.exceptions",
    "VersionMismatchWarning": "taskdml.exceptions",
    "InsecureConnectionWarning": "taskdml.exceptions",
    "ClusterLimitWarning": "taskdml.exceptions",
    "CacheWarning": "taskdml.exceptions",
    "ReportWarning": "taskdml.exceptions",
    "write_report": "taskdml.runs",
    "compare_runs": "taskdml.runs",
}

__all__ = [
    "ASHASearchCV",
    "Cache",
    "CacheWarning",
    "ClassSharded",
    "ClusterLimitWarning",
    "GridSearchCV",
    "HyperbandSearchCV",
    "InsecureConnectionWarning",
    "RandomizedSearchCV",
    "SuccessiveHalvingSearchCV",
    "ClusterUnavailable",
    "DataError",
    "DataParallel",
    "DifferentialPrivacy",
    "FederatedResult",
    "FeatureSharded",
    "MergeRule",
    "Pipeline",
    "PipelineError",
    "ProjectError",
    "ReportWarning",
    "Run",
    "RunNotFound",
    "SequentialFallbackWarning",
    "Silo",
    "Step",
    "StepFailed",
    "TaskdmlError",
    "TrainResult",
    "VersionMismatchWarning",
    "__version__",
    "available_metrics",
    "builds_graph",
    "compare_runs",
    "dump_pipeline",
    "evaluate",
    "get_merge_rule",
    "init_project",
    "load_pipeline",
    "loads_pipeline",
    "register_merge",
    "register_unmergeable",
    "resume_run",
    "run_pipeline",
    "schema",
    "train",
    "train_federated",
    "unmergeable_reason",
    "versions",
    "write_report",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
