"""Live events of a run, from wherever the work happens, through Dask's event log.

A run's events go to the cluster's scheduler under the topic :data:`TOPIC` (Dask's structured
event log: ``Client.log_event`` / ``Worker.log_event``), so that they work on any cluster:

- the runner publishes its own (``run_started``, ``step_started``, ``step_cached``,
  ``step_finished``, ``step_failed``, ...) from the client;
- a training publishes ``epoch`` (each epoch's history entry) and ``round`` (its progress in
  the epoch, at most every :data:`ROUND_EVERY_S` seconds) from its rank-0 replica, on
  whichever worker it runs;
- a search publishes ``trial`` (each step's result, each trial's final state) from the client
  thread that drives it; an evaluation publishes ``metric``; an async training publishes
  ``server_copy`` (each copy of its parameter server's state the client keeps: ``pushed``,
  the chunks it had absorbed) from the client; graph supersteps publish ``superstep``
  (number, measures, seconds, and ``measure``: the field to plot and its name) from the
  rank-0 partition's worker (:mod:`taskdml.graph`).

The scheduler's taskdml plugin (:mod:`taskdml.runs._dashboard`) keeps the state of the run from
them for the dashboard page, and the runner subscribes to the topic, so the terminal's progress
and the run's ``events.jsonl`` get the events that happened on workers too.

Code that publishes does not know the run: the runner opens a :func:`scope` (the run's id
and the step) around each step, and :func:`where` gives what to tag an event with. A training
reads it once in the client (it goes to the replicas in the training's plan, see
:func:`publish_from`); outside a run nothing is published.
"""

import contextlib
import contextvars
import time

TOPIC = "taskdml"
"""The topic of Dask's event log that taskdml's events go to."""

PROGRESS = frozenset({"epoch", "round", "trial", "metric", "superstep"})
"""The events published where the work runs (the runner's own are recorded as it makes them)."""

ROUND_EVERY_S = 1.0
"""A training publishes its progress in an epoch at most this often."""

_where = contextvars.ContextVar("taskdml_events", default=None)


@contextlib.contextmanager
def scope(run_id, step):
    """Tag the events published inside the block with the run and the step (none are
    published when *run_id* is ``None``)."""
    token = _where.set(None if run_id is None else {"run_id": run_id, "step": step})
    try:
        yield
    finally:
        _where.reset(token)


@contextlib.contextmanager
def item(label):
    """Tag the events published inside the block with a ``foreach`` item too."""
    outer = _where.get()
    token = _where.set(None if outer is None else {**outer, "item": label})
    try:
        yield
    finally:
        _where.reset(token)


def where():
    """The run, step (and item) of the events published here, or ``None`` outside a run."""
    return _where.get()


def plain(event):
    """*event* with only JSON types (what Dask's event log carries): NumPy scalars as
    numbers, anything else unknown as its text."""
    import json

    def convert(value):
        return value.item() if hasattr(value, "item") else str(value)

    return json.loads(json.dumps(event, default=convert))


def publish(kind, /, **fields):
    """Publish an event of *kind* for the step running here (nothing outside a run)."""
    publish_from(_where.get(), kind, **fields)


def publish_from(tags, kind, /, **fields):
    """Publish an event of *kind* tagged with *tags* (from :func:`where`), from a client or a
    worker task (nothing when *tags* is ``None`` or there is neither)."""
    if tags is None:
        return
    event = plain({"event": kind, "time": time.time(), **tags, **fields})
    try:
        from distributed import get_worker

        get_worker().log_event(TOPIC, event)
        return
    except ValueError:  # not in a worker task: the client's
        pass
    from taskdml._client import current_client

    client = current_client()
    if client is not None:  # else a local training outside a cluster
        client.log_event(TOPIC, event)
