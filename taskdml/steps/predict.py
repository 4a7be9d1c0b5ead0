"""``predict:`` steps: a fitted model applied to a dataset chunk by chunk, where it lives.

``predict:`` names the method (``predict``, ``predict_proba``, ``decision_function``,
``transform``); the model is ``inputs.model`` (a ``fit`` step's model or a ``search``'s
``best_model``: a ``Pipeline`` carries the preprocessing it was trained with) or ``model:
{run, step}``, the model a recorded run saved, loaded as the trust rules say (skops always,
joblib only in a trusted file). The output ``predictions`` is a lazy ``xarray.Dataset``
(``prediction`` along ``sample``) chunked as the data's rows; with ``path:`` the workers also
write it there, each chunk by the task that computed it
(:func:`taskdml.runs._predict.write_predictions`), and the manifest records what was written.
The work is :mod:`taskdml.runs._predict`; this module reads the step and says where a problem
is in the file.
"""

from taskdml.exceptions import DataError, PipelineError, RunNotFound
from taskdml.runner._values import step_data
from taskdml.runs import _predict


def run(step, inputs, context):
    """Apply the step's model to ``inputs["data"]``, chunk-wise, and write it to ``path``.

    Parameters
    ----------
    step : Step
    inputs : dict
        ``data`` (any value :func:`taskdml.runner._values.step_data` accepts) and ``model``
        unless the step names a recorded run's.
    context : StepContext

    Returns
    -------
    dict
        ``{"predictions": xarray.Dataset}``.
    """
    model = _model(step, inputs, context)
    try:
        _predict.check_method(model, step.predict)
    except DataError as error:
        raise DataError(f"{_where(context, 'predict')}: {error}") from None
    if step.path is not None:
        try:
            _predict.output_format(step.path)
        except DataError as error:
            raise DataError(f"{_where(context, 'path')}: {error}") from None
    found = _predict.predictions(
        model, step_data(inputs, "data", context), step.predict, prefix=step.name
    )
    if step.path is not None:
        written = _predict.write_predictions(found, step.path)
        context.note(predictions=written)
        context.recorder.add_artifact(
            step.name, "predictions", {"path": written["path"], "format": written["format"]}
        )
    return {"predictions": found}


def _model(step, inputs, context):
    """``inputs["model"]``, or the recorded run's model that ``model: {run, step}`` names."""
    if step.model is None:
        model = inputs["model"]
        if isinstance(model, dict):
            raise PipelineError(
                f"{_where(context, 'inputs', 'model')}: a predict step applies one model, not "
                f"the {len(model)} models of a foreach step; pick one with a step of its own, "
                "or name a recorded run's model with model: {run, step}."
            )
        return model
    directory = context.recorder.directory
    root = directory.path.parent if directory is not None else None
    try:
        model, _ = _predict.saved_model(
            step.model["run"], step.model["step"], root=root, trust=context.pipeline.trust
        )
    except (RunNotFound, PipelineError) as error:
        raise type(error)(f"{_where(context, 'model')}: {error}") from None
    return model


def _where(context, *keys):
    """``file:line:column: steps.<name>.<keys>`` of the running step's key, from its file."""
    from taskdml.exceptions import dotted

    path = ("steps", context.step.name) + keys
    source = context.pipeline.source
    location = None
    if source is not None and source.text:
        from taskdml.pipeline._yaml import load_with_locations

        try:
            locations = load_with_locations(source.text, str(source.path))[1]
        except PipelineError:
            locations = {}
        location = next(
            (locations[path[:n]] for n in range(len(path), 1, -1) if path[:n] in locations), None
        )
    return f"{location}: {dotted(path)}" if location else dotted(path)
