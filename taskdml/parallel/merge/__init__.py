"""Merge rules: how replicas of one estimator become one estimator again.

:mod:`._registry` holds :class:`MergeRule`, the registry and ``merge_replicas``/
``prepare_start``; one module per estimator family (:mod:`._linear`, :mod:`._neural`,
:mod:`._bayes`, :mod:`._moments`, :mod:`._cluster`, :mod:`._decomposition`, :mod:`._meta`)
registers its rules; :mod:`._builtin` imports them all and is registered lazily with the
registry, so the first lookup (on the client or on a worker) knows every built-in rule.
May import the base modules only.
"""
