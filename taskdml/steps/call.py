"""``call:`` steps: any allowed Python callable, as a Dask task or as a graph builder.

Two kinds of callables meet here:

- **graph builders** — taskdml's own functions (``taskdml.datasets:make_classification``)
  and any function marked with :func:`builds_graph` — run in the client thread of the step
  and return lazy Dask collections (an ``xarray.Dataset`` of chunked arrays); the step
  persists them on the workers, so their chunks are computed where they will be used and
  never travel through the client — unless they are larger than ``data="auto"`` persists
  (:mod:`taskdml.parallel.engine._stream`): those stay lazy, and the steps that read them stream;
- **plain callables** run as one Dask task per ``foreach`` item, keyed ``(step-<token>, i)``.
  Lazy inputs are computed on the workers and arrive in memory (a model whose parts live on
  the workers, :mod:`taskdml._parts`, as its shell and its parts); the results stay on the
  cluster as futures, which every step that takes data accepts (:mod:`taskdml.runner._values`).

A graph builder's input called ``data`` is taskdml's chunked dataset whatever its producer
returned (a plain callable's NumPy array or DataFrame is chunked on its worker first); its
other inputs arrive as produced (a plain callable's result as a ``distributed.Future``).

Which kind of step for the user's own code:

- ``call:`` a plain function, once per ``foreach`` item: a loader, a feature table built in
  memory, a report; it runs on a worker and gets in-memory values;
- ``map:`` a function of one chunk, applied to every chunk where the chunk lives (see
  :mod:`taskdml.steps.map`): row-wise feature engineering on data too big for one worker;
- ``call:`` of a function marked :func:`builds_graph`: it runs in the client and returns lazy
  Dask collections (dask arrays, an xarray.Dataset) built from chunked inputs, for work that
  needs more than one chunk at a time (a rechunk, a join, a global statistic).
"""

import operator

from taskdml import _keys
from taskdml._parts import parts_of, with_parts
from taskdml.exceptions import StepFailed
from taskdml.pipeline._model import thaw
from taskdml.runner._values import held, step_data


def builds_graph(function):
    """Mark *function* as a graph builder.

    A ``call:`` step runs a graph builder in the client and persists the lazy Dask collections
    it returns on the workers (see the module docstring); other callables run as one task per
    item and receive in-memory values.

    Parameters
    ----------
    function : callable

    Returns
    -------
    callable
        *function* itself, marked.

    Examples
    --------
    >>> import dask.array as da
    >>> import taskdml
    >>> @taskdml.builds_graph
    ... def ones(n):
    ...     return da.ones(n, chunks=10)
    >>> taskdml.steps.call.is_graph_builder(ones)
    True
    """
    function.__taskdml_builds_graph__ = True
    return function


def is_graph_builder(function):
    """Whether a ``call:`` step runs *function* in the client (see :func:`builds_graph`).

    Parameters
    ----------
    function : callable

    Returns
    -------
    bool
        True for functions marked with :func:`builds_graph` and taskdml's own functions.
    """
    return getattr(function, "__taskdml_builds_graph__", False) or (
        getattr(function, "__module__", "") or ""
    ).startswith("taskdml.")


def run(step, inputs, context):
    """Run a ``call`` step.

    Parameters
    ----------
    step : Step
    inputs : dict
        ``{argument: value}``, from the steps it reads.
    context : StepContext

    Returns
    -------
    dict
        ``{output: value}``, or ``{output: {item: value}}`` for a foreach step.
    """
    function = context.pipeline.resolve(step)
    items = step.foreach_items()
    run_item = _submit
    if is_graph_builder(function):
        run_item = _build
        if "data" in inputs:
            inputs = {**inputs, "data": step_data(inputs, "data", context)}
    results = [
        run_item(function, step, {**thaw(step.with_ or {}), **inputs, **kwargs}, index, context)
        for index, (_, kwargs) in enumerate(items)
    ]
    results = [_outputs(step, result, context) for result in results]
    _wait([value for result in results for value in result.values()], context.client)
    if items[0][0] is None:
        return results[0]
    return {
        name: {label: result[name] for (label, _), result in zip(items, results)}
        for name in step.output_names
    }


def _build(function, step, kwargs, index, context):
    result = function(**kwargs)
    if isinstance(result, tuple):
        return tuple(held(value, context.client) for value in result)
    return held(result, context.client)


def _submit(function, step, kwargs, index, context):
    import dask

    kwargs = {name: _shippable(value) for name, value in kwargs.items()}
    key = (_keys.key_name(step.name, step.target, kwargs), index)
    return context.client.compute(dask.delayed(function, pure=True)(**kwargs, dask_key_name=key))


def _shippable(value):
    """A model whose parts live on workers (:mod:`taskdml._parts`), as its shell and its
    parts: what it holds of this process (a graph's client) stays here, and its chunked parts
    are computed for the task like any lazy input."""
    split = parts_of(value)
    return value if split is None else with_parts(*split)


def _outputs(step, result, context):
    """Name the values a call returned after the step's ``outputs``."""
    names = step.output_names
    if len(names) == 1:
        return {names[0]: result}
    if type(result).__name__ == "Future":
        count = context.client.submit(
            _count_outputs,
            result,
            len(names),
            step.name,
            key=_keys.key_name(step.name, result.key, phase="outputs"),
        )
        return {
            name: context.client.submit(
                operator.getitem,
                count,
                position,
                key=(_keys.key_name(step.name, result.key, phase="output"), position),
            )
            for position, name in enumerate(names)
        }
    return dict(zip(names, _count_outputs(result, len(names), step.name)))


def _count_outputs(result, expected, step):
    if not isinstance(result, (tuple, list)) or len(result) != expected:
        found = (
            f"{len(result)} values"
            if isinstance(result, (tuple, list))
            else f"one {type(result).__name__}"
        )
        raise StepFailed(
            f"step {step!r} declares {expected} outputs but its callable returned "
            f"{found}; make it return a tuple of {expected} or fix 'outputs'."
        )
    return tuple(result)


def _wait(values, client):
    """Block until every future and persisted collection among *values* is computed."""
    from distributed import futures_of, wait

    futures = [f for value in values for f in futures_of(value)]
    wait(futures)
    for future in futures:
        if future.status == "error":
            future.result()
