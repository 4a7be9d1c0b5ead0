"""Run a ``PipelineSpec`` on a Dask cluster and record it.

The runner walks the DAG with ``graphlib.TopologicalSorter``: every step whose inputs are
ready starts at once in its own client-side thread, so independent steps (and the ``foreach``
items inside a step) run side by side on the cluster. The run's client is made current once,
in the calling thread (``Client.as_current`` also sets dask's process-wide config, so entering
it from several threads would leave it behind), and every step thread starts from a copy of
that context. A step's thread builds the step's Dask graph inside
``distributed.span(pipeline, step)`` (Fine Performance Metrics by step) and
:func:`taskdml._keys.step_scope` (every key prefixed by the step's name). Steps exchange lazy
values — persisted ``xarray.Dataset``s and ``Future``s — so data stays on the workers.

Before any step, the user's own packages that the pipeline names are shipped to the scheduler
and every worker, the workers' package versions are compared with the client's
(:func:`taskdml.cluster._versions.check_cluster`), and every module the pipeline names is checked to
import there (:mod:`taskdml.cluster._project`); a package missing or too far apart, or a module that
does not import, is a :class:`ClusterUnavailable` (exit 4) that names it, the process and the
fix, with nothing run. On a cluster the run started itself, the workers began importing what
the steps need when they started (:func:`taskdml.cluster._connect.pipeline_modules`), and the
first step waits until they are done: its seconds are its own, not the workers' start.

When a step fails, steps that do not depend on it still run (what can be computed is kept);
its dependants are skipped. The run directory (:mod:`taskdml.runs._directory`) is updated at every
transition, and every transition is also handed to ``on_event`` for live display.
"""

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import datetime
import graphlib
import threading
import time
import traceback
import uuid

from taskdml import _events, _keys, _warm
from taskdml.cache import _checkpoints as _checkpoint
from taskdml.cluster._versions import check_cluster, required_distributions, versions
from taskdml.exceptions import ClusterUnavailable, StepFailed, TaskdmlError, TrackingError
from taskdml.pipeline._kinds import KINDS
from taskdml.runner._plan import plan_run
from taskdml.runner._reuse import Reuse
from taskdml.runs._directory import RunDirectory, atomic_write, load_model
from taskdml.runs._report import write_report

MAX_CONCURRENT_STEPS = 16


@dataclasses.dataclass
class Run:
    """The outcome of :func:`run_pipeline`.

    Attributes
    ----------
    run_id : str
    path : pathlib.Path or None
        The run directory (``None`` when the run was not recorded).
    status : str
        ``"succeeded"``, ``"failed"`` or ``"interrupted"``.
    steps : dict
        Per step: ``state``, ``duration_s``, ``summary``, ``error``, ``artifacts``.
    metrics : dict
        ``{evaluate_step: {metric: value}}``.
    outputs : dict
        ``{step: {output: value}}``: lazy datasets and futures, usable while the client that
        ran the pipeline is open.
    """

    run_id: str
    path: object
    status: str
    steps: dict
    metrics: dict
    outputs: dict

    def model(self, step, item=None):
        """Load the model that *step* saved.

        Parameters
        ----------
        step : str
            A ``fit`` or ``search`` step.
        item : str, optional
            The ``foreach`` item's label, e.g. ``"alpha=0.1"``.

        Returns
        -------
        estimator

        Raises
        ------
        RunNotFound
            When the run saved no such model.
        """
        return load_model(self.path, step if item is None else f"{step}[{item}]")


@dataclasses.dataclass
class StepContext:
    """What a step kind's ``run`` function may use besides its inputs.

    Attributes
    ----------
    client : distributed.Client
        The run's client.
    pipeline : PipelineSpec
    step : Step
        The step being run.
    recorder : object
        The run's recorder of step states, artifacts and metrics (private to the runner);
        step kinds use the methods below rather than the recorder itself.
    """

    client: object
    pipeline: object
    step: object
    recorder: object

    def save_model(self, model, item=None):
        """Persist *model* in the run directory (if recording) and note it in the manifest.

        Parameters
        ----------
        model : estimator
        item : str, optional
            The ``foreach`` item the model belongs to.
        """
        if self.recorder.directory is not None:
            name = self.step.name if item is None else f"{self.step.name}[{item}]"
            artifact = self.recorder.directory.save_model(name, model)
            self.recorder.add_artifact(
                self.step.name, "model" if item is None else f"model[{item}]", artifact
            )

    def record_training(self, result, item=None):
        """Note the engine's strategy, history and facts of a fit in the manifest.

        Parameters
        ----------
        result : TrainResult
        item : str, optional
            The ``foreach`` item the training belongs to.
        """
        entry = {
            "strategy": result.strategy,
            "history": result.history,
            "stats": dict(result.stats),
        }
        self.recorder.step(
            self.step.name,
            training=entry
            if item is None
            else {**self.recorder.steps.get(self.step.name, {}).get("training", {}), item: entry},
        )

    def record_search(self, trials, plot):
        """Write a search's trials table and picture to ``trials-<step>.csv`` and ``.png``.

        Parameters
        ----------
        trials : pandas.DataFrame
            One row per trial.
        plot : callable
            ``plot(path)`` draws the search's picture into *path*.
        """
        if self.recorder.directory is None:
            return
        directory, name = self.recorder.directory, f"trials-{self.step.name}"
        directory.write_text(f"{name}.csv", trials.to_csv(index=False))
        directory.write_with(f"{name}.png", plot)
        self.recorder.add_artifact(
            self.step.name, "trials", {"path": f"{name}.csv", "format": "csv"}
        )
        self.recorder.add_artifact(self.step.name, "plot", {"path": f"{name}.png", "format": "png"})

    def note(self, **fields):
        """Add facts of the step to its manifest entry (``resumed_from`` of a search, say).

        Parameters
        ----------
        **fields
            JSON-able values.
        """
        self.recorder.step(self.step.name, **fields)

    def record_metrics(self, values):
        """Keep an evaluate step's metrics for :attr:`Run.metrics` and ``metrics.json``.

        Parameters
        ----------
        values : dict
            ``{metric: value}``, or ``{item: {metric: value}}`` after a foreach.
        """
        self.recorder.metrics[self.step.name] = values
        if self.recorder.directory is not None:
            self.recorder.directory.record_metrics(self.step.name, values)
        with _events.scope(self.recorder.run_id if self.recorder.client else None, self.step.name):
            for name, value in values.items():
                _events.publish("metric", name=name, value=value)


class _Recorder:
    """Step states in memory, mirrored to the run directory and to the event callback."""

    def __init__(self, directory, on_event):
        self.directory, self.on_event = directory, on_event
        self.steps, self.metrics = {}, {}
        self.reuse = None  # the run's use of the cache (taskdml.runner._reuse.Reuse)
        self.client, self.run_id = None, None  # set once connected: events go to the cluster too
        self.interrupted = False
        self.tracking = None  # the run's MLflow run (taskdml.runs._mlflow.Tracking), if tracked
        self._lock = threading.Lock()

    def step(self, name, **fields):
        with self._lock:
            self.steps.setdefault(name, {}).update(fields)
        if self.directory is not None:
            self.directory.update_step(name, **fields)

    def write_file(self, relative, data):
        """Write *data* (bytes) at *relative* in the run directory, atomically."""
        if self.directory is not None:
            atomic_write(self.directory.path / relative, data)

    def add_artifact(self, step, name, artifact):
        with self._lock:
            artifacts = self.steps.setdefault(step, {}).setdefault("artifacts", {})
            artifacts[name] = artifact
            artifacts = dict(artifacts)
        if self.directory is not None:
            self.directory.update_step(step, artifacts=artifacts)

    def event(self, event_type, /, **fields):
        event = {
            "event": event_type,
            "time": datetime.datetime.now().isoformat(timespec="milliseconds"),
            **fields,
        }
        self.record(event)
        self.publish(event)

    def record(self, event):
        """Keep *event* in the run directory and hand it to the callback."""
        if self.directory is not None:
            self.directory.append_event(event)
        if self.on_event is not None:
            self.on_event(event)

    def publish(self, event):
        """Send *event* to the cluster's event log (the dashboard page's source)."""
        if self.client is None:
            return
        try:
            self.client.log_event(
                _events.TOPIC, _events.plain({**event, "time": time.time(), "run_id": self.run_id})
            )
        except Exception:  # the dashboard's view is not worth a run
            pass

    def heard(self, logged):
        """An event of the cluster's log (``(time, event)``): an ``epoch``, ``round``,
        ``trial`` or ``metric`` of this run, published where the work ran, is recorded."""
        _, event = logged
        if event.get("run_id") == self.run_id and event.get("event") in _events.PROGRESS:
            self.record(event)


def run_pipeline(
    pipeline,
    client=None,
    *,
    run_root=None,
    record=True,
    scheduler=None,
    n_workers=None,
    on_event=None,
    cache=None,
    resume=None,
    performance_report=False,
    track=None,
):
    """Run *pipeline* and return a :class:`Run`.

    Parameters
    ----------
    pipeline : PipelineSpec
    client : distributed.Client, optional
        Run on this client's cluster. Otherwise the pipeline's ``cluster`` block (or
        *scheduler*, *n_workers*) decides, and a cluster started here is closed at the end.
    run_root : path, optional
        Where the run directory is created; default :data:`taskdml.runs._directory.DEFAULT_ROOT`
        (``.taskdml/runs`` in the working directory).
    record : bool, default True
        Write a run directory.
    scheduler : str, optional
        Address of a running scheduler, overriding the file's cluster block.
    n_workers : int, optional
        Workers of the embedded LocalCluster.
    on_event : callable, optional
        Called with each event dict (``run_started``, ``step_started``, ``step_cached``,
        ``step_retried``, ``step_finished``, ``step_failed``, ``step_skipped``,
        ``run_finished``).
    cache : bool, path, URL or Cache, optional
        Reuse the outputs of steps whose key is in this store, and store the others
        (:mod:`taskdml.runner._reuse`); ``True`` is :data:`taskdml.cache._store.DEFAULT_CACHE`.
        Default: no cache (the CLI caches by default).
    resume : path, optional
        The directory of a run to continue (see :func:`resume_run`): the run is recorded
        there again, and with *cache* its completed steps and checkpoints are reused.
    performance_report : bool, default False
        Save Dask's performance report of the steps (task stream, worker profiles,
        bandwidth) as ``performance-report.html`` in the run directory.
    track : str, optional
        Log the run to MLflow at this tracking URI (a folder, ``sqlite:///FILE`` or a server's
        ``http://`` address), overriding the file's ``tracking.mlflow``; a resumed run
        continues the MLflow run it was tracked in (:mod:`taskdml.runs._mlflow`).

    Raises
    ------
    StepFailed
        When a step failed; ``error.run_dir`` holds what was recorded.
    ClusterUnavailable
        When the cluster cannot be reached, a worker lacks a package the run needs or runs a
        version that breaks runs (dask, distributed, a scikit-learn minor version, ...), or a
        module the pipeline names does not import on its scheduler or a worker (checked before
        any step runs). Harmless differences are a ``VersionMismatchWarning``.
    TrackingError
        When the run is tracked in MLflow but mlflow is not installed or the tracking server
        does not answer (before any step runs).

    Notes
    -----
    The user's own packages that the pipeline names (``myproject.*`` in ``imports.allow``,
    found next to the pipeline file or in the working directory) are shipped to the
    scheduler and every worker, also workers that join later, and re-shipped when they change
    (:mod:`taskdml.cluster._project`).

    Examples
    --------
    >>> from taskdml import PipelineSpec, Step, run_pipeline
    >>> pipe = PipelineSpec("iris", [
    ...     Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
    ...     Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
    ...     Step("score", evaluate=["accuracy"], inputs={"model": "model", "data": "data"}),
    ... ])
    >>> run = run_pipeline(pipe, record=False, n_workers=1)  # doctest: +SKIP
    >>> run.metrics["score"]["accuracy"] > 0.9  # doctest: +SKIP
    True
    """
    from taskdml.cluster import _connect as clusters
    from taskdml.cluster import _project

    plan = plan_run(
        pipeline, cache=as_cache(cache), client=client, scheduler=scheduler, n_workers=n_workers
    )
    earlier = RunDirectory.reopen(resume) if resume is not None else None
    tracking = _tracking(pipeline, track, earlier, record)
    if resume is not None:
        directory = earlier
    else:
        directory = RunDirectory(run_root) if record else None
    recorder = _Recorder(directory, on_event)
    recorder.run_id = (
        directory.run_id if directory is not None else f"unrecorded-{uuid.uuid4().hex[:6]}"
    )
    recorder.reuse = Reuse(plan, recorder)
    if directory is not None:
        _write_definition(directory, pipeline, resumed=resume is not None)
    if tracking is not None:
        tracking.begin(directory, pipeline)
        recorder.tracking = tracking
    started = time.perf_counter()
    status = "failed"
    try:
        reused = {planned.name for planned in plan.steps if planned.reuse}
        with clusters.open_target(
            plan.cluster, warm_modules=clusters.pipeline_modules(pipeline, skip=reused)
        ) as active:
            if plan.cluster.kind in ("local", "spec"):
                _client_imports()  # while the workers import theirs (open_target warmed them)
            info = clusters.describe(active)
            info["taskdml_page"] = _follow(recorder, active)
            inputs = pipeline.dependencies()
            if directory is not None:
                directory.update_manifest(
                    pipeline=pipeline.name, status="running", cluster=info, versions=versions()
                )
            recorder.event(
                "run_started",
                pipeline=pipeline.name,
                run_id=recorder.run_id,
                run_dir=str(directory.path) if directory else None,
                resumed=resume is not None,
                steps=[
                    {
                        "name": s.name,
                        "kind": s.kind,
                        "inputs": sorted(inputs[s.name]),
                    }
                    for s in pipeline.ordered_steps()
                ],
                **info,
            )
            try:  # before any step: the user's code on the cluster, the versions, the imports
                shipped = _project.ship(active, pipeline)
                check_cluster(
                    active,
                    required_distributions(clusters.pipeline_modules(pipeline), shipped),
                )
                _project.check(active, pipeline, shipped=shipped)
                recorder.reuse.check_reach(active)
                if plan.cluster.kind in ("local", "spec"):  # warmed by open_target
                    _warm.warmed(active)  # the first step finds its workers ready
            except ClusterUnavailable as error:
                if directory is not None:
                    directory.update_manifest(error=str(error))
                raise
            with (
                active.as_current(),  # entered once here: dask's config is process-wide
                _performance_report(directory if performance_report else None),
                _watching_tasks(recorder, active),
            ):
                outputs, status = _execute(pipeline, active, recorder)
            if recorder.client is not None:
                recorder.publish({"event": "run_finished", "status": status})
                active.unsubscribe_topic(_events.TOPIC)
                recorder.client = None
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        duration = round(time.perf_counter() - started, 3)
        if directory is not None:
            directory.update_manifest(
                status=status,
                duration_s=duration,
                finished=datetime.datetime.now().isoformat(timespec="seconds"),
            )
            write_report(directory, on_error="warn")
        if recorder.tracking is not None:
            recorder.tracking.run_finished(status)
        recorder.event("run_finished", status=status, duration_s=duration)
    run = Run(
        _run_id(directory),
        directory.path if directory else None,
        status,
        recorder.steps,
        recorder.metrics,
        outputs,
    )
    if status != "succeeded":
        failed = [name for name, entry in recorder.steps.items() if entry.get("state") == "failed"]
        first = recorder.steps[failed[0]]
        raise StepFailed(
            f"step {failed[0]!r} failed: {first['error']}", step=failed[0], run_dir=run.path
        )
    return run


def _tracking(pipeline, track, earlier, record):
    """The run's MLflow tracking (or ``None``), connected before anything is recorded."""
    from taskdml.runs._mlflow import Tracking, tracking_target

    target = tracking_target(pipeline, track, earlier.manifest if earlier else None)
    if target is None:
        return None
    if not record:
        raise TrackingError(
            f"tracking in MLflow ({target[0]}) logs the run directory's records: run with "
            "record=True, or without track= and the file's tracking: block."
        )
    return Tracking(*target)


CLIENT_MODULES = ("skops.io",)
"""What a run's client imports in any case, and early: skops writes and reads the models of the
run directory and the step cache (about half a second, which a cached step paid alone)."""


def _client_imports():
    import importlib

    for module in CLIENT_MODULES:
        with contextlib.suppress(ImportError):  # the step that needs it says so
            importlib.import_module(module)


def resume_run(run, *, run_root=None, cache=True, **options):
    """Continue a run that failed or was interrupted, in its own run directory.

    With the cache, every step whose key is stored is reused, and a training that
    checkpointed continues from its last checkpoint (:mod:`taskdml.cache._checkpoints`); the
    rest runs.

    Parameters
    ----------
    run : str or path
        A run id, a unique prefix of one, a run directory, or ``"latest"``.
    run_root : path, optional
        The folder of run directories (default ``.taskdml/runs``).
    cache : bool, path, URL or Cache, default True
        The store the run used.
    **options
        Passed to :func:`run_pipeline` (``scheduler``, ``n_workers``, ``on_event``, ...).

    Returns
    -------
    Run

    Raises
    ------
    RunNotFound
        When *run* matches no recorded run.
    """
    pipeline, folder = recorded_pipeline(run, run_root)
    return run_pipeline(pipeline, resume=folder, cache=cache, **options)


def recorded_pipeline(run, run_root=None):
    """The pipeline a recorded run ran, loaded again, and the run's directory.

    The pipeline file is read as it is now (a fix made since applies; the run directory's
    copy if the file is gone), with the run's overrides.

    Parameters
    ----------
    run : str or path
        A run id, a unique prefix of one, a run directory, or ``"latest"``.
    run_root : path, optional

    Returns
    -------
    pipeline : PipelineSpec
    folder : pathlib.Path
    """
    from pathlib import Path

    from taskdml.pipeline._spec import load_pipeline
    from taskdml.runs._directory import find_run

    manifest = find_run(run, run_root)
    folder = Path(manifest["path"])
    source = manifest.get("source")
    path = source if source and Path(source).exists() else folder / "pipeline.yaml"
    return load_pipeline(path, overrides=manifest.get("overrides", ())), folder


def _performance_report(directory):
    """Dask's performance report of the block, saved in the run directory (or nothing)."""
    import contextlib

    from distributed import performance_report

    if directory is None:
        return contextlib.nullcontext()
    directory.update_manifest(performance_report="performance-report.html")
    return performance_report(filename=str(directory.path / "performance-report.html"))


@contextlib.contextmanager
def _watching_tasks(recorder, client, every_s=1.0):
    """While the block runs, hand the callback a ``tasks`` event every *every_s* seconds: the
    tasks done of those seen, per running step, as the dashboard plugin counts them (for the
    terminal's progress; not recorded in ``events.jsonl``)."""
    from taskdml.runs._dashboard import step_tasks

    stop = threading.Event()

    def watch():
        while not stop.wait(every_s):
            try:
                counts = client.run_on_scheduler(step_tasks, recorder.run_id)
            except Exception:  # the cluster is going away: nothing more to show
                return
            if counts:
                recorder.on_event({"event": "tasks", "steps": counts})

    watcher = None
    if recorder.on_event is not None and recorder.client is not None:
        watcher = threading.Thread(target=watch, name="taskdml-tasks", daemon=True)
        watcher.start()
    try:
        yield
    finally:
        stop.set()
        if watcher is not None:
            watcher.join(timeout=5)


def _follow(recorder, client):
    """Let the run's events reach the cluster and come back from it: install the dashboard
    plugin (:mod:`taskdml.runs._dashboard`), and subscribe to the events topic, so that epochs,
    rounds and trials published on workers are recorded here. Returns the taskdml page's
    address (``None`` without a dashboard, or when the scheduler cannot take the plugin).
    The dask config ``taskdml.events: false`` turns all of it off."""
    import warnings

    import dask

    from taskdml.runs import _dashboard as dashboard

    if not dask.config.get("taskdml.events", True):  # opted out: nothing goes to the cluster
        return None
    recorder.client = client
    client.subscribe_topic(_events.TOPIC, recorder.heard)
    try:
        return dashboard.register(client)
    except Exception as error:  # a scheduler without taskdml: the run goes on without the page
        warnings.warn(f"the taskdml dashboard page is not available: {error}", stacklevel=3)
        return None


def _run_id(directory):
    return directory.run_id if directory is not None else "unrecorded"


def as_cache(cache):
    """The :class:`~taskdml.cache._store.Cache` that *cache* names (``None`` for no cache).

    Parameters
    ----------
    cache : None, bool, path, URL or Cache

    Returns
    -------
    Cache or None
    """
    from taskdml.cache._store import Cache

    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache()
    return cache if isinstance(cache, Cache) else Cache(cache)


def _write_definition(directory, pipeline, resumed=False):
    from taskdml.pipeline._spec import dump_pipeline

    if resumed:
        earlier = directory.manifest.get("resumed", [])
        directory.update_manifest(
            status="starting",
            resumed=[
                *earlier,
                {
                    "at": datetime.datetime.now().isoformat(timespec="seconds"),
                    "after": directory.manifest.get("status"),
                },
            ],
            steps={step.name: {"kind": step.kind, "state": "pending"} for step in pipeline.steps},
        )
        return
    source = pipeline.source
    directory.write_text("pipeline.yaml", source.text if source else dump_pipeline(pipeline))
    directory.write_text("resolved.yaml", dump_pipeline(pipeline))
    overrides = source.overrides if source else ()
    directory.write_text("overrides.txt", "".join(f"{item}\n" for item in overrides))
    directory.update_manifest(
        pipeline=pipeline.name,
        status="starting",
        source=source.path if source else None,
        overrides=list(overrides),
        steps={step.name: {"kind": step.kind, "state": "pending"} for step in pipeline.steps},
    )


def _execute(pipeline, client, recorder):
    """Run every step as soon as its inputs are ready; return ``(outputs, status)``."""
    sorter = graphlib.TopologicalSorter(pipeline.dependencies())
    sorter.prepare()
    outputs, failed = {}, []
    pool = concurrent.futures.ThreadPoolExecutor(
        MAX_CONCURRENT_STEPS, thread_name_prefix="taskdml-step"
    )
    running = {}
    try:
        while True:
            for name in sorter.get_ready():
                step = pipeline.step(name)
                inputs = _inputs(step, outputs)
                running[
                    pool.submit(
                        contextvars.copy_context().run,
                        _run_step,
                        pipeline,
                        step,
                        inputs,
                        client,
                        recorder,
                    )
                ] = name
            if not running:
                break
            done, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                name = running.pop(future)
                try:
                    outputs[name] = future.result()
                except Exception:  # recorded by _run_step; dependants are skipped below
                    failed.append(name)
                else:
                    sorter.done(name)
    except KeyboardInterrupt:
        recorder.interrupted = True
        for name in running.values():
            recorder.step(name, state="interrupted")
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    for step in pipeline.steps:
        if step.name not in outputs and step.name not in failed:
            blocked = sorted(pipeline.dependencies()[step.name] - set(outputs))
            recorder.step(
                step.name, state="skipped", reason=f"input from {', '.join(blocked)} missing"
            )
            recorder.event("step_skipped", step=step.name, because=blocked)
    return outputs, ("failed" if failed else "succeeded")


def _inputs(step, outputs):
    """The values of a step's inputs: ``{argument: value or [values]}``."""
    values = {}
    for argument, position, ref_step, ref_output in step.references():
        produced = outputs[ref_step]
        value = produced[ref_output] if ref_output else next(iter(produced.values()))
        if position is None:
            values[argument] = value
        else:
            values.setdefault(argument, []).append(value)
    return values


def _run_step(pipeline, step, inputs, client, recorder):
    started = time.perf_counter()
    try:
        items = [label for label, _ in step.foreach_items() if label is not None]
        recorder.step(
            step.name,
            state="running",
            started=datetime.datetime.now().isoformat(timespec="seconds"),
        )
        produced = recorder.reuse.reuse(step, StepContext(client, pipeline, step, recorder))
        if produced is not None:
            return _tracked(
                step, inputs, _finished(step, produced, started, recorder, True), recorder
            )
        recorder.event("step_started", step=step.name, kind=step.kind, items=items)
        produced = _attempts(pipeline, step, inputs, client, recorder)
        recorder.reuse.keep(step, produced, StepContext(client, pipeline, step, recorder))
    except Exception as error:
        if recorder.interrupted:  # the cluster went away under us: already marked interrupted
            raise
        duration = round(time.perf_counter() - started, 3)
        message = _describe_error(error)
        where = user_frames(error)
        recorder.step(
            step.name,
            state="failed",
            duration_s=duration,
            error=message,
            where=where,
            traceback=traceback.format_exc(),
        )
        recorder.event(
            "step_failed", step=step.name, duration_s=duration, error=message, where=where
        )
        raise
    return _tracked(step, inputs, _finished(step, produced, started, recorder, False), recorder)


def _tracked(step, inputs, produced, recorder):
    """*produced*, after the step's records went to MLflow (when the run is tracked)."""
    if recorder.tracking is not None:
        recorder.tracking.step_finished(step, inputs)
    return produced


def user_frames(error, most=5):
    """The frames of *error*'s traceback in the user's own code (not Python's, an installed
    library's or taskdml's), innermost last: ``["path:line in function: source", ...]``.

    Parameters
    ----------
    error : BaseException
        Raised in the client or, re-raised by distributed, in a worker task.
    most : int, default 5
        The innermost frames kept.

    Returns
    -------
    list of str
    """
    import os
    import re
    import sys
    import sysconfig

    from taskdml.cluster._project import PLUGIN_PREFIX

    library = {os.path.realpath(p) for p in sysconfig.get_paths().values()}
    library |= {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    library.add(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # taskdml itself
    shipped = re.compile(
        rf".*{re.escape(os.sep)}{PLUGIN_PREFIX}{re.escape(os.sep)}[^/]+/[0-9a-f]+/"
    )
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = os.path.realpath(frame.filename)
        if frame.filename.startswith("<") or any(
            path.startswith(folder + os.sep) for folder in library
        ):
            continue
        shown = shipped.sub("", frame.filename)  # a shipped copy: the path in the project
        frames.append(f"{shown}:{frame.lineno} in {frame.name}: {frame.line or ''}")
    return frames[-most:]


def _finished(step, produced, started, recorder, cached):
    duration = round(time.perf_counter() - started, 3)
    summary = {name: summarize(value) for name, value in produced.items()}
    recorder.step(step.name, state="completed", duration_s=duration, summary=summary)
    recorder.event(
        "step_cached" if cached else "step_finished",
        step=step.name,
        duration_s=duration,
        summary=summary,
    )
    return produced


def _attempts(pipeline, step, inputs, client, recorder):
    """Run *step*; run it again after a failure with an exception its ``retries`` marks
    transient, waiting ``backoff_s`` (doubled each time), at most ``retries.times`` times.
    Every retry is recorded: the step's ``retried`` (the errors, in order) and an event."""
    from distributed import span

    transient = step.transient(pipeline.allow, pipeline.trust)
    retries = dict(step.retries or {})
    wait, retried = float(retries.get("backoff_s", 1.0)), []
    while True:
        context = StepContext(client, pipeline, step, recorder)
        try:
            with (
                span(pipeline.name, step.name),
                _keys.step_scope(step.name, len(retried)),
                _checkpoint.scope(recorder.reuse.cache, recorder.reuse.key(step)),
                _events.scope(recorder.run_id if recorder.client else None, step.name),
            ):
                return KINDS[step.kind].runner()(step, inputs, context)
        except transient as error:
            if len(retried) >= retries["times"] or recorder.interrupted:
                raise
            retried.append(_describe_error(error))
        recorder.step(step.name, retried=retried)
        recorder.event("step_retried", step=step.name, error=retried[-1], wait_s=wait)
        time.sleep(wait)
        wait *= 2


def _describe_error(error):
    if isinstance(error, TaskdmlError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def summarize(value):
    """A short JSON-able description of a step output for the manifest and the CLI.

    Parameters
    ----------
    value : object
        A step output: a dataset, a future, an estimator, a scalar, or a dict of them.

    Returns
    -------
    dict or scalar
        Datasets give ``n_samples``, ``n_features``, ``chunks`` and ``nbytes``, tables (no
        ``X``) ``n_samples`` and their ``columns``, a graph algorithm's result its
        ``vertices``, ``supersteps`` and whether it ``converged``; other objects their type
        (and a short repr).
    """
    import dask

    from taskdml._data import is_table

    if isinstance(value, dict):
        return {str(key): summarize(item) for key, item in value.items()}
    if hasattr(value, "data_vars") and "X" in getattr(value, "data_vars", {}):
        n_samples, n_features = value["X"].shape
        return {
            "type": "dataset",
            "n_samples": int(n_samples),
            "n_features": int(n_features),
            "chunks": len(value["X"].chunks[0]) if value["X"].chunks else 1,
            "nbytes": int(value.nbytes),
        }
    if hasattr(value, "data_vars") and {"n_iter", "converged"} <= set(value.attrs):
        return {  # a graph algorithm's result (taskdml.graph): its vertices and supersteps
            "type": "graph result",
            "vertices": int(max(value.sizes.values(), default=0)),
            "supersteps": int(value.attrs["n_iter"]),
            "converged": bool(value.attrs["converged"]),
        }
    if is_table(value):
        return {
            "type": "table",
            "n_samples": int(value.sizes["sample"]),
            "columns": [str(name) for name in value.data_vars],
            "chunks": len(value.chunks["sample"]) if value.chunks else 1,
        }
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if type(value).__name__ == "Future":  # finished: its type is known, its value stays put
        held = getattr(value, "type", None)
        return {"type": f"{held.__name__} on a worker" if held else "Future"}
    if dask.is_dask_collection(value):
        return {"type": type(value).__name__}
    return {"type": type(value).__name__, "repr": repr(value)[:200]}
