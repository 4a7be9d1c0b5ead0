"""Hyperparameter search over (data-parallel) trials: grid, random, halving, Hyperband, ASHA.

The names are imported on first use (PEP 562), so a worker that unpickles a task function
from ``_grid_tasks`` or ``_adaptive_run`` imports only that module, not the estimators.
"""

from taskdml._lazy import exports

# public name -> the module that defines it
_LAZY = {
    "ASHASearchCV": "taskdml.model_selection.adaptive._search",
    "HyperbandSearchCV": "taskdml.model_selection.adaptive._search",
    "SuccessiveHalvingSearchCV": "taskdml.model_selection.adaptive._search",
    "GridSearchCV": "taskdml.model_selection.grid._search",
    "RandomizedSearchCV": "taskdml.model_selection.grid._search",
    "plot_trials": "taskdml.model_selection._report",
    "trials_frame": "taskdml.model_selection._report",
}

__all__ = [
    "ASHASearchCV",
    "GridSearchCV",
    "HyperbandSearchCV",
    "RandomizedSearchCV",
    "SuccessiveHalvingSearchCV",
    "plot_trials",
    "trials_frame",
]


__getattr__, __dir__ = exports(__name__, _LAZY)
