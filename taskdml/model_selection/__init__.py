"""Hyperparameter search over (data-parallel) trials: grid, random, halving, Hyperband, ASHA."""

from taskdml.model_selection._adaptive import (
    ASHASearchCV,
    HyperbandSearchCV,
    SuccessiveHalvingSearchCV,
)
from taskdml.model_selection._grid import GridSearchCV, RandomizedSearchCV
from taskdml.model_selection._report import plot_trials, trials_frame

__all__ = [
    "ASHASearchCV",
    "GridSearchCV",
    "HyperbandSearchCV",
    "RandomizedSearchCV",
    "SuccessiveHalvingSearchCV",
    "plot_trials",
    "trials_frame",
]
