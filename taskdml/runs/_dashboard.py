"""The taskdml page of the Dask dashboard: the runs on a cluster, live, at ``/taskdml``.

:class:`DashboardPlugin` is a scheduler plugin. The runner registers it on every cluster it
runs on; a scheduler started elsewhere loads it with ``dask scheduler --preload
taskdml.runs._dashboard``. On the scheduler it keeps the state of the last :data:`KEEP_RUNS` runs,
from two sources:

- the run's events (:mod:`taskdml._events`: steps started, cached, finished and failed;
  epochs and rounds of trainings; trials of searches; metrics), which reach every scheduler
  plugin through Dask's event log;
- the scheduler's own task transitions: every key taskdml makes starts with its step's name
  (:mod:`taskdml._keys`), so the plugin counts each step's tasks, done of seen.

It serves, on the scheduler's HTTP server (the dashboard's address):

- ``/taskdml``: a page that polls the state every second and draws the pipeline's DAG with
  each step's state, per-step progress, training curves (score and loss per epoch, the sync
  period), a graph step's supersteps (its last superstep and change in the progress, the
  change per superstep against the tolerance, on a log scale where it spans decades, and the
  seconds per superstep), a search's trial leaderboard (stopped trials marked with the rung
  they stopped at) and links to the dashboard's own pages;
- ``/taskdml/api/state``: the same state as JSON, for scripts.

The transition hook is on the scheduler's hot path: it does one string split and two
dictionary lookups per transition, and nothing at all while no run is active.
"""

import collections
import importlib.resources
import json
import time

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import web

from taskdml import _compat
from taskdml._events import TOPIC

PAGE = (importlib.resources.files("taskdml.runs") / "dashboard.html").read_text(encoding="utf-8")
"""The page: self-contained (no scripts or styles from elsewhere: clusters often have no
internet); it polls ``api/state`` every second and draws the newest run, or the one picked."""

NAME = "taskdml-dashboard"
"""The plugin's name on the scheduler."""

KEEP_RUNS = 5
"""Runs kept in the state (the oldest are dropped)."""

MOST_ROUNDS = 400
"""Round events kept per training (the oldest are thinned out)."""

MOST_SUPERSTEPS = 1000
"""Superstep events kept per graph step (then every other one is dropped, the last kept)."""


class RunState:
    """The live state of the runs, built from their events (pure Python: tested alone).

    Attributes
    ----------
    runs : collections.OrderedDict
        ``{run_id: run}``, oldest first; see :meth:`apply` for what a run holds.
    """

    def __init__(self):
        self.runs = collections.OrderedDict()
        self.active = {}  # step name -> its run, for the runs in progress

    def apply(self, event):
        """Update the state with one event (a dict from :mod:`taskdml._events`)."""
        kind, run_id = event.get("event"), event.get("run_id")
        if kind == "run_started":
            self._start(event)
            return
        run = self.runs.get(run_id)
        if run is None:
            return
        if kind == "run_finished":
            run.update(status=event.get("status"), finished=event.get("time"))
            for name in run["steps"]:
                self.active.pop(name, None)
            return
        step = run["steps"].get(event.get("step"))
        if step is None:
            return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(step, event)

    def _start(self, event):
        steps = {
            entry["name"]: {
                "name": entry["name"],
                "kind": entry["kind"],
                "inputs": entry.get("inputs", []),
                "state": "pending",
                "tasks": {"done": 0, "seen": 0, "erred": 0},
                "epochs": [],
                "rounds": [],
                "supersteps": [],
                "trials": {},
                "metrics": {},
            }
            for entry in event.get("steps", [])
        }
        run = {
            "run_id": event["run_id"],
            "pipeline": event.get("pipeline"),
            "status": "running",
            "started": event.get("time"),
            "finished": None,
            "run_dir": event.get("run_dir"),
            "steps": steps,
        }
        self.runs[event["run_id"]] = run
        while len(self.runs) > KEEP_RUNS:
            _, dropped = self.runs.popitem(last=False)
            for name in dropped["steps"]:
                if self.active.get(name) is dropped:
                    del self.active[name]
        for name in steps:
            self.active[name] = run

    def transition(self, key, finish):
        """Count a task of a step of an active run: seen when it is first waiting, done in
        memory, erred when it fails."""
        if not self.active:
            return
        name = key[0] if isinstance(key, tuple) else key
        if not isinstance(name, str):
            return
        step = name.split("-", 1)[0]
        run = self.active.get(step)
        if run is None:
            return
        tasks = run["steps"][step]["tasks"]
        if finish in ("waiting", "queued", "no-worker"):
            tasks["seen"] += 1
        elif finish == "memory":
            tasks["done"] += 1
        elif finish == "erred":
            tasks["erred"] += 1

    def snapshot(self):
        """The state as JSON-able data: the runs, newest first."""
        return {"time": time.time(), "runs": list(reversed(self.runs.values()))}


def _step_state(state):
    def apply(step, event):
        step["state"] = state
        for field in ("duration_s", "error", "summary", "items", "kind"):
            if field in event:
                step[field] = event[field]
        if state == "running":
            step["started"] = event.get("time")

    return apply


def _epoch(step, event):
    step["epochs"].append(
        {
            k: event.get(k)
            for k in (
                "item",
                "epoch",
                "epochs",
                "validation_score",
                "train_loss",
                "sync_every",
                "rounds",
                "duration_s",
            )
        }  # fmt: skip
    )


def _round(step, event):
    rounds = step["rounds"]
    rounds.append({k: event.get(k) for k in ("item", "epoch", "epochs", "round", "of", "time")})
    if len(rounds) > MOST_ROUNDS:
        del rounds[::2]


def _superstep(step, event):
    """A graph superstep: its number, the algorithm's measures, seconds, ``tol`` and
    ``max_iter`` (the event's fields but the run's tags)."""
    supersteps = step["supersteps"]
    supersteps.append({k: v for k, v in event.items() if k not in ("event", "run_id", "step")})
    if len(supersteps) > MOST_SUPERSTEPS:
        del supersteps[-2::-2]  # every other one, from the last but one: the last stays


def _trial(step, event):
    trial = step["trials"].setdefault(str(event.get("trial")), {"trial": event.get("trial")})
    for field in ("params", "rung", "budget", "score", "status", "error"):
        if field in event:
            trial[field] = event[field]


def _metric(step, event):
    step["metrics"][str(event.get("name"))] = event.get("value")


_HANDLERS = {
    "step_started": _step_state("running"),
    "step_retried": _step_state("running"),
    "step_finished": _step_state("completed"),
    "step_cached": _step_state("cached"),
    "step_failed": _step_state("failed"),
    "step_skipped": _step_state("skipped"),
    "epoch": _epoch,
    "round": _round,
    "superstep": _superstep,
    "trial": _trial,
    "metric": _metric,
}


class DashboardPlugin(SchedulerPlugin):
    """Keep the state of taskdml runs and serve it at ``/taskdml`` (see the module)."""

    name = NAME

    def __init__(self):
        self.state = RunState()

    async def start(self, scheduler):
        routes = [
            (r"/taskdml/?", _PageHandler),
            (r"/taskdml/api/state", _StateHandler, {"plugin": self}),
        ]
        _compat.add_http_application(scheduler, web.Application(routes))

    def log_event(self, topic, msg):
        if topic == TOPIC and isinstance(msg, dict):
            self.state.apply(msg)

    def transition(self, key, start, finish, *args, **kwargs):
        self.state.transition(key, finish)


class _PageHandler(web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE)


class _StateHandler(web.RequestHandler):
    def initialize(self, plugin):
        self.plugin = plugin

    def get(self):
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(self.plugin.state.snapshot(), default=str))


def register(client):
    """Install the plugin on *client*'s scheduler unless it is there (a preload, an earlier
    run); return the dashboard page's address, or ``None`` when there is no dashboard.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    str or None
    """
    present = client.run_on_scheduler(_has_plugin)
    if not present:
        client.register_plugin(DashboardPlugin(), name=NAME)
    link = client.dashboard_link
    if not link or "status" not in link:
        return None
    return link.rsplit("/status", 1)[0] + "/taskdml"


def step_tasks(run_id, dask_scheduler=None):
    """``{step: {"done", "seen", "erred"}}`` of the running steps of *run_id* (run on the
    scheduler by :meth:`distributed.Client.run_on_scheduler`; empty without the plugin)."""
    plugin = _compat.scheduler_plugin(dask_scheduler, NAME)
    run = plugin.state.runs.get(run_id) if plugin is not None else None
    if run is None:
        return {}
    return {
        name: dict(step["tasks"])
        for name, step in run["steps"].items()
        if step["state"] == "running" and step["tasks"]["seen"]
    }


def _has_plugin(dask_scheduler):
    return _compat.scheduler_plugin(dask_scheduler, NAME) is not None


def dask_setup(scheduler):
    """``dask scheduler --preload taskdml.runs._dashboard`` installs the plugin at the start."""
    scheduler.add_plugin(DashboardPlugin(), name=NAME)
