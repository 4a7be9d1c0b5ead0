"""``fit:`` steps: an estimator trained on a dataset by the training engine."""

from taskdml.parallel.engine import train
from taskdml.pipeline import resolve_callable, thaw


def run(step, inputs, context):
    """Fit the step's estimator on ``inputs["data"]``; return ``{"model": estimator}``."""
    estimator = resolve_callable(step.target, context.pipeline.allow)(**thaw(step.with_ or {}))
    data = inputs["data"]
    preprocess = inputs.get("preprocess", [])
    preprocess = preprocess if isinstance(preprocess, list) else [preprocess]
    options = thaw(step.parallel or {})
    model = train(estimator, data["X"].data, data["y"].data if "y" in data else None,
                  preprocess=preprocess, classes=step.classes, epochs=options.get("epochs", 1),
                  client=context.client)
    context.save_model(model)
    return {"model": model}
