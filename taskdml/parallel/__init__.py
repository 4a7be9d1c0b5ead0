"""The data-parallel engine: :func:`train`, the :class:`DataParallel` meta-estimator, and the
merge rules that turn replicas back into one estimator.

The built-in merge rules are registered before the first lookup or registration (the
registry, ``_merge_registry``, imports ``_merge`` itself), so a worker that unpickles any
engine function knows them too. The names below are imported on first use (PEP 562), so
such a worker imports only the modules its task needs. The implementation lives in private
modules: ``_engine`` (strategies and the driver of a training), ``_replica`` and
``_collective`` (what replicas do and how they all-reduce), ``_merge`` and ``_merge_*`` (the
rules per estimator family), ``_estimator`` (:class:`DataParallel`), ``_tasks`` (the task
functions shared with the searches), ``_chunks`` (the inspection of every chunk before
training), ``_sharded`` (:class:`ClassSharded`: a one-vs-rest model split by class across
workers, model parallelism), ``_vertical`` (:class:`FeatureSharded`: a linear model split by
feature, the blocks exchanging partial margins), ``_tabular`` (scikit-learn Pipelines:
transformers fitted chunk-wise, the last step trained by the engine) and ``_federated`` with
``_federated_privacy`` (FedAvg across data silos pinned to their workers, secure aggregation,
client-level differential privacy).
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "SequentialFallbackWarning": "taskdml.parallel._engine",
    "TrainResult": "taskdml.parallel._engine",
    "train": "taskdml.parallel._engine",
    "ClassSharded": "taskdml.parallel._sharded",
    "FeatureSharded": "taskdml.parallel._vertical",
    "DataParallel": "taskdml.parallel._estimator",
    "ChunkwiseFit": "taskdml.parallel._tabular",
    "fit_chunkwise": "taskdml.parallel._tabular",
    "register_chunkwise": "taskdml.parallel._tabular",
    "DifferentialPrivacy": "taskdml.parallel._federated_privacy",
    "dp_epsilon": "taskdml.parallel._federated_privacy",
    "FederatedResult": "taskdml.parallel._federated",
    "Silo": "taskdml.parallel._federated",
    "train_federated": "taskdml.parallel._federated",
    "MergeRule": "taskdml.parallel._merge",
    "get_merge_rule": "taskdml.parallel._merge",
    "merge_replicas": "taskdml.parallel._merge",
    "prepare_start": "taskdml.parallel._merge",
    "register_merge": "taskdml.parallel._merge",
    "register_mlp_merge": "taskdml.parallel._merge",
    "register_unmergeable": "taskdml.parallel._merge",
    "round_start": "taskdml.parallel._merge",
    "unmergeable_reason": "taskdml.parallel._merge",
}

__all__ = [
    "ChunkwiseFit",
    "ClassSharded",
    "DataParallel",
    "DifferentialPrivacy",
    "FederatedResult",
    "FeatureSharded",
    "MergeRule",
    "SequentialFallbackWarning",
    "Silo",
    "TrainResult",
    "dp_epsilon",
    "fit_chunkwise",
    "get_merge_rule",
    "merge_replicas",
    "prepare_start",
    "register_chunkwise",
    "register_merge",
    "register_mlp_merge",
    "register_unmergeable",
    "round_start",
    "train",
    "train_federated",
    "unmergeable_reason",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
