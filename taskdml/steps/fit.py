"""``fit:`` steps: an estimator trained on a dataset by the training engine.

``fit:`` names an estimator class, or a factory that returns an estimator (a scikit-learn
``Pipeline`` whose ``ColumnTransformer`` encodes a table's columns, say); ``with`` and
``foreach`` are its arguments. ``parallel:`` carries the engine's options (``strategy``,
``sync_every``, ``staleness``, ``epochs``, ``shuffle``, ``random_state``). The manifest
records each training's history and facts, the sync periods among them (with ``sync_every:
auto``, what they were chosen from). With ``foreach``, every item is its own estimator (item
values are estimator parameters), trained side by side: each item's training runs in its own
client thread, in the step's context (client, span and key names).
"""

import concurrent.futures
import contextvars

from taskdml import _events
from taskdml._pipeline import thaw
from taskdml._values import step_data
from taskdml.parallel import _checkpoint, train


def run(step, inputs, context):
    """Fit the step's estimator on ``inputs["data"]`` with the training engine.

    Parameters
    ----------
    step : Step
    inputs : dict
        ``data`` (any value :func:`taskdml._values.step_data` accepts) and optionally
        ``preprocess`` (fitted transformers).
    context : StepContext

    Returns
    -------
    dict
        ``{"model": estimator}``, or ``{"model": {item: estimator}}`` with foreach.
    """
    # An estimator class, or a factory that returns an estimator (a Pipeline, say).
    estimator_class = context.pipeline.resolve(step)
    options = thaw(step.parallel or {})
    preprocess = as_transformers(inputs.get("preprocess", []))
    data = step_data(inputs, "data", context)

    def fit_item(label, params):
        estimator = estimator_class(**thaw(step.with_ or {}), **params)
        # each item's training keeps its own checkpoints, and tags its events
        with _checkpoint.item(label), _events.item(label):
            result = train(
                estimator,
                data,  # X and y, or a table (feature columns as variables, and y)
                preprocess=preprocess,
                classes=step.classes,
                client=context.client,
                **options,
            )
        context.save_model(result.estimator, item=label)
        context.record_training(result, item=label)
        return result.estimator

    items = step.foreach_items()
    if items[0][0] is None:
        return {"model": fit_item(None, {})}
    with concurrent.futures.ThreadPoolExecutor(len(items), thread_name_prefix=step.name) as pool:
        futures = {
            label: pool.submit(contextvars.copy_context().run, fit_item, label, params)
            for label, params in items
        }
        return {"model": {label: future.result() for label, future in futures.items()}}


def as_transformers(preprocess):
    """The ``preprocess`` input as a list of fitted transformers.

    Parameters
    ----------
    preprocess : estimator or list of estimators

    Returns
    -------
    list

    Raises
    ------
    PipelineError
        When it is the dict of models a foreach step produced.
    """
    from taskdml.exceptions import PipelineError

    preprocess = preprocess if isinstance(preprocess, list) else [preprocess]
    for transformer in preprocess:
        if isinstance(transformer, dict):
            raise PipelineError(
                "a 'preprocess' input must be one fitted model, not the "
                f"{len(transformer)} models of a foreach step; pick one with a "
                "step of its own."
            )
    return preprocess
