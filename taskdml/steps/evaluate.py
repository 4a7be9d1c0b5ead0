"""``evaluate:`` steps: metrics of a fitted model, computed chunk-wise where the data lives.

When the model input comes from a ``foreach`` step (one model per item), every model is
evaluated, all in one graph, and the metrics are keyed by item.

The same chunk tasks also reduce the predictions to what the run's picture of the step needs
(:func:`taskdml.metrics.evaluate_graph` with ``diagnostics=True``): a confusion matrix, or a
bounded sample of residuals. It goes into the step's manifest entry as ``diagnostics``
(keyed by item after a foreach), where :mod:`taskdml.runs._pictures` reads it.
"""

import dask

from taskdml.metrics import evaluate_graph
from taskdml.runner._values import step_data
from taskdml.steps.fit import as_transformers

MAX_RESIDUALS = 2000
"""How many ``(prediction, residual)`` pairs a regressor's evaluation keeps for its picture,
shared among the models of a foreach (the manifest holds them all)."""

MIN_RESIDUALS = 200
"""The fewest pairs kept per model, however many models a foreach has."""


def run(step, inputs, context):
    """Evaluate ``inputs["model"]`` on ``inputs["data"]``, chunk-wise.

    Parameters
    ----------
    step : Step
    inputs : dict
        ``model`` (one model, or ``{item: model}``), ``data`` (any value
        :func:`taskdml.runner._values.step_data` accepts) and optionally ``preprocess``.
    context : StepContext

    Returns
    -------
    dict
        ``{"metrics": {metric: value}}``, or ``{"metrics": {item: {metric: value}}}``.
    """
    preprocess = as_transformers(inputs.get("preprocess", []))
    models = inputs["model"]
    single = not isinstance(models, dict)
    models = {None: models} if single else models
    data = step_data(inputs, "data", context)
    graphs = [
        evaluate_graph(
            model,
            data,
            list(step.target),
            preprocess=preprocess,
            diagnostics=True,
            max_residuals=max(MIN_RESIDUALS, MAX_RESIDUALS // len(models)),
        )
        for model in models.values()
    ]
    results = dask.compute(*graphs)
    values = {
        label: {name: float(value) for name, value in scores.items()}
        for label, (scores, _) in zip(models, results)
    }
    found = {label: diagnostics for label, (_, diagnostics) in zip(models, results)}
    values = values[None] if single else values
    context.note(diagnostics=found[None] if single else found)
    context.record_metrics(values)
    return {"metrics": values}
