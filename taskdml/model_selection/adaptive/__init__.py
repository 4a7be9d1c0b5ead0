"""Adaptive searches (ASHA, successive halving, Hyperband), split as Ray Tune splits them:
:mod:`._policy` decides who trains next and for how long without Dask; :mod:`._run` lays the
data out and drives trial steps as tasks; :mod:`._results` builds ``cv_results_``;
:mod:`._search` holds the estimators and their parameters.
"""
