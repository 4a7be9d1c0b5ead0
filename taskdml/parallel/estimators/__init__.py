"""The engine as scikit-learn estimators: :class:`DataParallel` (:mod:`._data_parallel`),
:class:`ClassSharded` (:mod:`._class_sharded`: a one-vs-rest model split by class across
workers, optionally with replicas per shard) and :class:`FeatureSharded`
(:mod:`._feature_sharded`: a linear model split by feature, the blocks exchanging partial
margins). May import the engine, the merge rules, the chunk-wise transformers and
:mod:`taskdml.metrics`.
"""
