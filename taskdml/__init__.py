"""taskdml: machine-learning pipelines on Dask, with data-parallel training.

Three ways in: ``taskdml run PIPELINE.yaml`` (the CLI over pipeline files),
:func:`load_pipeline` / :func:`run_pipeline` (the same from Python), and the scikit-learn
estimators (:class:`DataParallel`, the sharded models, the searches) that drop into existing
code. The names here are for those users; extension points (merge rules, :func:`train`) are in
:mod:`taskdml.parallel`, and their conformance checks in :mod:`taskdml.testing`.

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

# public name -> the module that defines it: what pipeline and estimator users need. Extension
# points (merge rules, train, TrainResult) live in taskdml.parallel and taskdml.testing.
_LAZY = {
    # pipelines and runs
    "PipelineSpec": "taskdml.pipeline",
    "Step": "taskdml.pipeline",
    "load_pipeline": "taskdml.pipeline",
    "loads_pipeline": "taskdml.pipeline",
    "dump_pipeline": "taskdml.pipeline",
    "schema": "taskdml.pipeline",
    "run_pipeline": "taskdml.runner",
    "resume_run": "taskdml.runner",
    "Run": "taskdml.runner",
    "Cache": "taskdml.cache",
    "builds_graph": "taskdml.steps.call",
    "init_project": "taskdml.templates",
    "write_report": "taskdml.runs",
    "compare_runs": "taskdml.runs",
    "versions": "taskdml.cluster",
    # estimators
    "DataParallel": "taskdml.parallel",
    "ClassSharded": "taskdml.parallel",
    "FeatureSharded": "taskdml.parallel",
    "train_federated": "taskdml.parallel",
    "Silo": "taskdml.parallel",
    "FederatedResult": "taskdml.parallel",
    "DifferentialPrivacy": "taskdml.parallel",
    "GridSearchCV": "taskdml.model_selection",
    "RandomizedSearchCV": "taskdml.model_selection",
    "SuccessiveHalvingSearchCV": "taskdml.model_selection",
    "HyperbandSearchCV": "taskdml.model_selection",
    "ASHASearchCV": "taskdml.model_selection",
    "evaluate": "taskdml.metrics",
    "available_metrics": "taskdml.metrics",
    # errors and warnings
    "TaskdmlError": "taskdml.exceptions",
    "PipelineError": "taskdml.exceptions",
    "DataError": "taskdml.exceptions",
    "StepFailed": "taskdml.exceptions",
    "ClusterUnavailable": "taskdml.exceptions",
    "RunNotFound": "taskdml.exceptions",
    "WorkerImportError": "taskdml.exceptions",
    "ProjectError": "taskdml.exceptions",
    "CacheWarning": "taskdml.exceptions",
    "ReportWarning": "taskdml.exceptions",
    "VersionMismatchWarning": "taskdml.exceptions",
    "InsecureConnectionWarning": "taskdml.exceptions",
    "ClusterLimitWarning": "taskdml.exceptions",
    "SequentialFallbackWarning": "taskdml.parallel",
}

__all__ = ["__version__", *_LAZY]

# Dropped from the top level in 0.2, importable with a FutureWarning until 0.3.
_DEPRECATED = {
    "Pipeline": (
        "taskdml.pipeline._model",
        "PipelineSpec",
        "taskdml.PipelineSpec (the name no longer shadows sklearn.pipeline.Pipeline)",
    ),
    **{
        name: ("taskdml.parallel", name, f"taskdml.parallel.{name}")
        for name in (
            "train",
            "TrainResult",
            "MergeRule",
            "register_merge",
            "register_unmergeable",
            "get_merge_rule",
            "unmergeable_reason",
        )
    },
}


__getattr__, __dir__ = exports(__name__, _LAZY, _DEPRECATED)
