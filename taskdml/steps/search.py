"""``search:`` steps: a hyperparameter search over the step's estimator, as Dask tasks.

``method`` picks the search class (grid and random: every candidate × fold a task; halving,
hyperband, asha: incremental trials that continue from their state and stop early). Every
trial may train data-parallel (``parallel``). Like ``fit:``, the step may name a factory
(a function returning a scikit-learn ``Pipeline``, given ``with:``), and ``space:`` then names
the Pipeline's parameters (``sgdclassifier__alpha``). A table (mixed columns) is searched by
grid and random only, gathered into memory (see :mod:`taskdml.model_selection.grid._search`; the
Pipeline sees every label, so ``classes`` is not needed); the adaptive methods refuse it with
what to do. The outputs are the best model (refitted), its parameters and the trials table;
the run directory gets ``trials-<step>.csv`` and ``.png``.
"""

from taskdml._apply import transformed
from taskdml._data import is_table, unwrap
from taskdml.exceptions import PipelineError
from taskdml.model_selection._report import plot_trials, trials_frame
from taskdml.model_selection._space import from_spec
from taskdml.parallel._choice import choose_search
from taskdml.pipeline._model import thaw
from taskdml.runner._values import step_data
from taskdml.steps.fit import as_transformers


def run(step, inputs, context):
    """Search on ``inputs["data"]``; return the best model, its parameters and the trials.

    Parameters
    ----------
    step : Step
        A ``search:`` step (``method``, ``space``, ``budget``, ``parallel``, ...).
    inputs : dict
        ``data`` (any value :func:`taskdml.runner._values.step_data` accepts) and optionally
        ``preprocess`` (fitted transformers).
    context : StepContext
        Records the trials table and picture, and saves the best model.

    Returns
    -------
    dict
        ``best_model`` (refitted on all the data), ``best_params`` and ``trials`` (the table
        of :func:`taskdml.model_selection.trials_frame`).
    """
    estimator = context.pipeline.resolve(step)(**thaw(step.with_ or {}))
    data = step_data(inputs, "data", context)
    options = thaw(step.parallel or {})
    mode = options.pop("mode", "data")
    if mode == "auto":
        choice = choose_search(_candidates(make_search(step, estimator, options)),
                               _data_bytes(data), context.client)  # fmt: skip
        context.note(parallel=choice.record())
        mode = choice.mode
    if mode == "data" and "mode" in (step.parallel or {}):  # asked for: replicas, merged
        options.setdefault("strategy", "sync")
    if mode == "task":  # every trial a chain of tasks (grid, random) or one task per step
        seed = {k: options[k] for k in ("random_state",) if k in options}
        options = {**seed, "strategy": "sequential"} if step.method in ("grid", "random") else seed
    search = make_search(step, estimator, options)
    preprocess = as_transformers(inputs.get("preprocess", []))
    if is_table(data) and preprocess:
        raise PipelineError(
            "a 'preprocess' input cannot be applied to a table; "
            "put the transformers into the Pipeline that the step's factory returns."
        )
    if is_table(data) and step.method in ("grid", "random"):
        # The Pipeline encodes the columns; the search gathers the table (gathered_table).
        search.fit(data)
    else:
        X, y, _, _ = unwrap(data)
        X = transformed(X, preprocess)
        fit_kwargs = {"classes": list(step.classes)} if step.classes is not None else {}
        search.fit(X, y, **fit_kwargs)
    trials = trials_frame(search)
    if "resumed_from" in getattr(search, "metadata_", {}):  # went on from a checkpoint
        context.note(resumed_from=search.metadata_["resumed_from"])
    context.record_search(trials, lambda path: plot_trials(search, path))
    context.save_model(search.best_estimator_)
    return {
        "best_model": search.best_estimator_,
        "best_params": dict(search.best_params_),
        "trials": trials,
    }


def _candidates(search):
    """How many candidates *search* trains."""
    from sklearn.model_selection import ParameterGrid

    if hasattr(search, "metadata"):  # the adaptive searches know before fitting
        return search.metadata["n_models"]
    if hasattr(search, "n_iter"):
        return search.n_iter
    return len(ParameterGrid(search.param_grid))


def _data_bytes(data):
    """Bytes of the data's X; for sparse chunks the bytes they would take dense (an upper
    bound: their size is unknown until they are computed)."""
    X = unwrap(data)[0]
    return X.nbytes if hasattr(X, "nbytes") else X.memory_usage(deep=True).sum().compute()


def make_search(step, estimator, parallel):
    """The search object a step describes.

    Parameters
    ----------
    step : Step
        A ``search:`` step; ``method`` picks the class (``grid``, ``random``, ``halving``,
        ``hyperband`` or ``asha``), ``budget`` its size (``trials``, ``max_epochs``,
        ``min_epochs``, ``reduction_factor``).
    estimator : estimator
        The estimator to search over.
    parallel : dict
        How every trial trains: the step's ``parallel`` for its mode, the engine's options the
        search takes (``random_state`` in it seeds the search).

    Returns
    -------
    search : estimator
        An unfitted search of :mod:`taskdml.model_selection`.
    """
    from taskdml.model_selection import (
        ASHASearchCV,
        GridSearchCV,
        HyperbandSearchCV,
        RandomizedSearchCV,
        SuccessiveHalvingSearchCV,
    )

    budget = thaw(step.budget or {})
    space = from_spec(thaw(step.space))
    options = dict(parallel)
    seed = options.pop("random_state", None)
    scoring = step.scoring
    validation = (
        {"cv": step.cv}
        if step.cv
        else ({"validation_fraction": step.validation_fraction} if step.validation_fraction else {})
    )
    if step.method == "grid":
        return GridSearchCV(
            estimator, space, scoring=scoring, cv=step.cv, random_state=seed, **options
        )
    if step.method == "random":
        return RandomizedSearchCV(
            estimator,
            space,
            n_iter=budget["trials"],
            scoring=scoring,
            cv=step.cv,
            random_state=seed,
            **options,
        )
    incremental = {"scoring": scoring, "random_state": seed, **validation, **options}
    if step.method == "hyperband":
        return HyperbandSearchCV(
            estimator,
            space,
            max_epochs=budget["max_epochs"],
            reduction_factor=budget.get("reduction_factor", 3),
            **incremental,
        )
    rungs = {
        "max_epochs": budget["max_epochs"],
        "min_epochs": budget.get("min_epochs", 1),
        "reduction_factor": budget.get("reduction_factor", 3),
    }
    if step.method == "halving":
        return SuccessiveHalvingSearchCV(
            estimator, space, n_trials=budget["trials"], **rungs, **incremental
        )
    return ASHASearchCV(estimator, space, n_trials=budget["trials"], **rungs, **incremental)
