"""Every kind of parallel training, and its extension points.

One folder per concern: ``engine/`` (:func:`train`: data-parallel training, sync rounds or an
async parameter server, streaming, elastic re-planning), ``collective/`` (the all-reduce and
the parameter server), ``merge/`` (:class:`MergeRule`, the registry and one module per
estimator family), ``chunkwise/`` (a ``Pipeline``'s transformers fitted chunk-wise),
``estimators/`` (:class:`DataParallel`, :class:`ClassSharded`, :class:`FeatureSharded`),
``federated/`` (:func:`train_federated` across silos) and ``_choice`` (the ``auto`` mode of
a pipeline step). Dependencies run one way: estimators → engine → collective, chunkwise →
merge → the base modules.

The built-in merge rules are registered before the first lookup or registration, so a worker
that unpickles any engine function knows them too. The names below are imported on first use
(PEP 562), so such a worker imports only the modules its task needs.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "SequentialFallbackWarning": "taskdml.parallel.engine._train",
    "TrainResult": "taskdml.parallel.engine._train",
    "train": "taskdml.parallel.engine._train",
    "ClassSharded": "taskdml.parallel.estimators._class_sharded",
    "FeatureSharded": "taskdml.parallel.estimators._feature_sharded",
    "DataParallel": "taskdml.parallel.estimators._data_parallel",
    "ChunkwiseFit": "taskdml.parallel.chunkwise._tabular",
    "fit_chunkwise": "taskdml.parallel.chunkwise._tabular",
    "register_chunkwise": "taskdml.parallel.chunkwise._tabular",
    "DifferentialPrivacy": "taskdml.parallel.federated._privacy",
    "dp_epsilon": "taskdml.parallel.federated._privacy",
    "FederatedResult": "taskdml.parallel.federated._train",
    "Silo": "taskdml.parallel.federated._train",
    "train_federated": "taskdml.parallel.federated._train",
    "MergeRule": "taskdml.parallel.merge._builtin",
    "get_merge_rule": "taskdml.parallel.merge._builtin",
    "merge_replicas": "taskdml.parallel.merge._builtin",
    "prepare_start": "taskdml.parallel.merge._builtin",
    "register_incremental_pca_merge": "taskdml.parallel.merge._builtin",
    "register_merge": "taskdml.parallel.merge._builtin",
    "register_mlp_merge": "taskdml.parallel.merge._builtin",
    "register_unmergeable": "taskdml.parallel.merge._builtin",
    "round_start": "taskdml.parallel.merge._builtin",
    "unmergeable_reason": "taskdml.parallel.merge._builtin",
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
    "register_incremental_pca_merge",
    "register_merge",
    "register_mlp_merge",
    "register_unmergeable",
    "round_start",
    "train",
    "train_federated",
    "unmergeable_reason",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
