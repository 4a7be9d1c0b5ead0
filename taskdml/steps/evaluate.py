"""``evaluate:`` steps: metrics of a fitted model, computed chunk-wise where the data lives."""

from taskdml.metrics import evaluate


def run(step, inputs, context):
    """Evaluate ``inputs["model"]`` on ``inputs["data"]``; return ``{"metrics": {name: value}}``."""
    preprocess = inputs.get("preprocess", [])
    preprocess = preprocess if isinstance(preprocess, list) else [preprocess]
    values = evaluate(inputs["model"], inputs["data"], list(step.target), preprocess=preprocess)
    values = {name: float(value) for name, value in values.items()}
    context.record_metrics(values)
    return {"metrics": values}
