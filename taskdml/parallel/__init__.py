"""The data-parallel engine: :func:`train`, the :class:`DataParallel` meta-estimator, and the
merge rules that turn replicas back into one estimator.

Importing the package registers the built-in merge rules, so a worker that unpickles any
engine function knows them too. The implementation lives in private modules: ``_engine``
(strategies and the driver of a training), ``_replica`` and ``_collective`` (what replicas
do and how they all-reduce), ``_merge`` and ``_merge_*`` (the rules per estimator family),
``_estimator`` (:class:`DataParallel`), ``_tasks`` (the task functions shared with the
searches) and ``_chunks`` (the inspection of every chunk before training).
"""

from taskdml.parallel._engine import SequentialFallbackWarning, TrainResult, train
from taskdml.parallel._estimator import DataParallel
from taskdml.parallel._merge import (
    MergeRule,
    get_merge_rule,
    merge_replicas,
    prepare_start,
    register_merge,
    register_mlp_merge,
    register_unmergeable,
    round_start,
    unmergeable_reason,
)

__all__ = [
    "DataParallel",
    "MergeRule",
    "SequentialFallbackWarning",
    "TrainResult",
    "get_merge_rule",
    "merge_replicas",
    "prepare_start",
    "register_merge",
    "register_mlp_merge",
    "register_unmergeable",
    "round_start",
    "train",
    "unmergeable_reason",
]
