"""A run's records, mirrored to an MLflow tracking server.

MLflow is one more reader of the run directory, not a second recorder: the runner records as
always (:mod:`taskdml.runs._directory`), and at the end of each step and of the run it hands
:class:`Tracking` the step's name, and this module reads what the records now hold and logs it
through MLflow's own client (``mlflow.MlflowClient``):

- at the start, the resolved pipeline's parameters, flattened with step-name prefixes
  (``params.seed``, ``model.fit``, ``model.with.alpha``, ``model.parallel.strategy``);
- per step, its duration, an evaluate step's metrics (``report.accuracy``), a training's history
  per epoch (``model.train_loss`` with ``step=`` the epoch), the trained model as an MLflow
  model (scikit-learn flavour, in the format the run saved it, with a signature inferred from
  a few of the step's input rows) under ``models/<step>``, a search's trials table;
- nested runs: one per ``foreach`` item (its parameters, metrics, history and model) and one per
  search trial (its parameters and scores);
- at the end, ``report.html``, the pictures and the pipeline files as artifacts, and the
  MLflow run's status.

The MLflow run's id (with the nested runs' and the steps already logged) is kept in the
manifest's ``mlflow`` entry, so ``taskdml resume`` continues the same MLflow run. mlflow is
imported only when tracking is asked; a missing package or an unreachable server is a
:class:`~taskdml.exceptions.TrackingError` (exit 2) before any step runs. A failure to log once
the run is going is a warning: the run's own records stand.
"""

import contextlib
import io
import json
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from taskdml.exceptions import TrackingError

__all__ = ["Tracking", "tracking_target"]

SAMPLE_ROWS = 5
"""How many input rows a logged model's signature is inferred from."""

_NOT_PARAMS = ("inputs", "outputs", "foreach")


def tracking_target(pipeline, track=None, manifest=None):
    """Where a run is tracked: ``(uri, experiment)``, or ``None`` when it is not.

    Parameters
    ----------
    pipeline : PipelineSpec
        Its ``tracking:`` block (``{mlflow: URI, experiment: NAME}``) is the default.
    track : str, optional
        A tracking URI that overrides the file's (``--track``).
    manifest : dict, optional
        A resumed run's manifest: the MLflow run it was tracked in is continued.

    Returns
    -------
    tuple of (str, str) or None
    """
    block = dict(pipeline.tracking or {})
    earlier = (manifest or {}).get("mlflow") or {}
    uri = track or block.get("mlflow") or earlier.get("tracking_uri")
    if not uri:
        return None
    return uri, block.get("experiment") or earlier.get("experiment") or pipeline.name


class Tracking:
    """The MLflow run of one taskdml run (the runner's handle).

    Parameters
    ----------
    uri : str
        A tracking URI: a local folder (``mlruns``), ``sqlite:///mlflow.db`` or a server's
        ``http(s)://`` address.
    experiment : str
        The experiment's name (created if it does not exist).

    Raises
    ------
    TrackingError
        When mlflow is not installed, the server does not answer, or MLflow refuses the URI.
    """

    def __init__(self, uri, experiment):
        _check_reachable(uri)
        try:
            import mlflow  # noqa: F401  (lazily: only a tracked run needs it)
        except ImportError as error:
            raise TrackingError(
                f"the run is tracked in MLflow ({uri}) but mlflow is not installed "
                f"({error}); install it with: pip install 'taskdml[tracking]', or drop "
                "--track / the file's tracking: block."
            ) from None
        from mlflow import MlflowClient

        self.uri, self.experiment = uri, experiment
        try:
            self.client = MlflowClient(tracking_uri=uri)
            found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment)
            )
        except Exception as error:
            raise TrackingError(
                f"MLflow at {uri} refused experiment {experiment!r}: "
                f"{type(error).__name__}: {error}. Check the tracking URI (--track or "
                "tracking.mlflow) and that the server is the one you meant."
            ) from None
        self.directory = self.pipeline = self.run_id = None
        self.state = {}
        self._lock = threading.Lock()

    def begin(self, directory, pipeline):
        """Open the MLflow run of *directory* (or continue the one its manifest names) and log
        the pipeline's parameters.

        Parameters
        ----------
        directory : RunDirectory
            The run's records (a tracked run must be recorded).
        pipeline : PipelineSpec
        """
        if directory is None:
            raise TrackingError(
                "an MLflow-tracked run must be recorded: run it with record=True (the "
                "tracking logs what the run directory holds)."
            )
        self.directory, self.pipeline = directory, pipeline
        try:
            self._open(directory, pipeline)
        except Exception as error:
            raise TrackingError(
                f"MLflow at {self.uri} did not open the run of {directory.path}: "
                f"{type(error).__name__}: {error}"
            ) from None

    def _open(self, directory, pipeline):
        from mlflow.entities import Param

        earlier = directory.manifest.get("mlflow") or {}
        tags = {"taskdml.run_id": directory.run_id, "taskdml.pipeline": pipeline.name}
        if earlier.get("run_id") and earlier.get("tracking_uri") == self.uri:
            self.run_id, self.state = earlier["run_id"], earlier
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, tags=tags, run_name=directory.run_id)
            self.run_id = run.info.run_id
            self.state = {"items": {}, "trials": {}, "logged": []}
        self.state.update(
            tracking_uri=self.uri,
            experiment=self.experiment,
            experiment_id=self.experiment_id,
            run_id=self.run_id,
        )
        self._save_state()
        logged = self.client.get_run(self.run_id).data.params
        params = [
            Param(key, value)
            for key, value in flat_params(pipeline.to_dict()).items()
            if key not in logged  # an MLflow param is written once (a resumed run has them)
        ]
        self._batch(self.run_id, params=params)

    def step_finished(self, step, inputs=None):
        """Log what the records hold of *step*, which has just completed (run or reused).

        Parameters
        ----------
        step : Step
        inputs : dict, optional
            The step's input values: a few rows of its ``data`` give a model's signature.
        """
        with self._lock, self._warn_on_failure(f"step {step.name!r}"):
            if step.name in self.state["logged"]:  # before a resume
                return
            entry = self.directory.manifest.get("steps", {}).get(step.name, {})
            self._log_step(step, entry, inputs)
            self.state["logged"].append(step.name)
            self._save_state()

    def run_finished(self, status):
        """Log the report, pictures and pipeline files as artifacts and end the MLflow run.

        Parameters
        ----------
        status : str
            The taskdml run's: ``"succeeded"``, ``"failed"`` or ``"interrupted"``.
        """
        from mlflow.entities import Metric, RunTag

        with self._lock, self._warn_on_failure("the run's end"):
            manifest, folder = self.directory.manifest, self.directory.path
            files = ["pipeline.yaml", "resolved.yaml", manifest.get("report") or ""]
            files += list((manifest.get("pictures") or {}).values())
            for name in files:
                if name and (folder / name).is_file():
                    self.client.log_artifact(self.run_id, str(folder / name))
            tags = [RunTag("taskdml.status", status)]
            tags += [
                RunTag(f"taskdml.step.{name}", str(entry.get("state")))
                for name, entry in manifest.get("steps", {}).items()
            ]
            metrics = []
            if isinstance(manifest.get("duration_s"), (int, float)):
                metrics.append(Metric("duration_s", manifest["duration_s"], _now(), 0))
            self._batch(self.run_id, metrics=metrics, tags=tags)
            ended = {"succeeded": "FINISHED", "interrupted": "KILLED"}.get(status, "FAILED")
            # MLflow prints a server run's address on stdout (taken by --json): said on stderr
            with contextlib.redirect_stdout(io.StringIO()):
                for nested in [*self.state["items"].values(), *_flatten(self.state["trials"])]:
                    self.client.set_terminated(nested, status=ended)
            with contextlib.redirect_stdout(sys.stderr):
                self.client.set_terminated(self.run_id, status=ended)

    # -- one step ------------------------------------------------------------------------------

    def _log_step(self, step, entry, inputs):
        from mlflow.entities import Metric

        metrics = []
        if isinstance(entry.get("duration_s"), (int, float)):
            metrics.append(Metric(f"{step.name}.step_duration_s", entry["duration_s"], _now(), 0))
        values = self.directory.metrics.get(step.name) or {}
        for name, value in values.items():
            if isinstance(value, dict):  # after a foreach: {item: {metric: value}}
                self._batch(self._item_run(name), metrics=_metrics(step.name, value))
            else:
                metrics += _metrics(step.name, {name: value})
        training = entry.get("training") or {}
        if "history" in training:
            metrics += _history(step.name, training["history"])
        else:  # per foreach item
            for item, trained in training.items():
                self._batch(self._item_run(item), metrics=_history(step.name, trained["history"]))
        self._batch(self.run_id, metrics=metrics)
        for name, artifact in (entry.get("artifacts") or {}).items():
            if name == "model" or name.startswith("model["):
                item = name[len("model[") : -1] if name != "model" else None
                run_id = self.run_id if item is None else self._item_run(item)
                self._log_model(step, item, artifact, inputs, run_id)
            elif name == "trials":
                self.client.log_artifact(self.run_id, str(self.directory.path / artifact["path"]))
                self._log_trials(step, self.directory.path / artifact["path"])

    def _log_model(self, step, item, artifact, inputs, run_id):
        import mlflow.sklearn
        import sklearn

        from taskdml.runs._directory import load_model

        if artifact.get("format") == "sharded":
            return  # split across workers: MLflow's sklearn flavour holds one estimator
        name = step.name if item is None else f"{step.name}[{item}]"
        model = load_model(self.directory.path, name)
        skops = artifact.get("format") == "skops"
        requirements = [f"scikit-learn=={sklearn.__version__}"] + ["skops"] * skops
        options = {"serialization_format": "skops" if skops else "cloudpickle"}
        if skops:
            import skops.io

            options["skops_trusted_types"] = skops.io.get_untrusted_types(
                data=skops.io.dumps(model)
            )
        with tempfile.TemporaryDirectory() as folder:
            mlflow.sklearn.save_model(
                model,
                Path(folder) / step.name,
                signature=self._signature(step, model, inputs),
                pip_requirements=requirements,
                **options,
            )
            self.client.log_artifacts(run_id, str(Path(folder) / step.name), f"models/{step.name}")

    def _signature(self, step, model, inputs):
        """MLflow's signature of *model* from a few rows of the step's ``data`` input, run
        through the preprocessing the step was given (loaded from the records)."""
        from mlflow.models import infer_signature

        from taskdml.runs._directory import load_model

        try:
            data = (inputs or {}).get("data")
            if data is None or "X" not in getattr(data, "data_vars", {}):
                return None
            rows = data["X"][:SAMPLE_ROWS].values
            for name in _preprocess_steps(step):
                rows = load_model(self.directory.path, name).transform(rows)
            method = getattr(model, "predict", None) or model.transform
            return infer_signature(rows, method(rows))
        except Exception as error:  # the model is still logged, without a signature
            warnings.warn(
                f"MLflow: no signature for the model of step {step.name!r}: "
                f"{type(error).__name__}: {error}",
                stacklevel=4,
            )
            return None

    def _log_trials(self, step, path):
        import pandas as pd
        from mlflow.entities import Metric, Param, RunTag

        done = self.state["trials"].setdefault(step.name, [])
        grids = step.space if isinstance(step.space, (list, tuple)) else [step.space or {}]
        space = {key for grid in grids for key in grid}
        for position, row in pd.read_csv(path).iterrows():
            if position < len(done):
                continue
            run = self.client.create_run(
                self.experiment_id,
                tags={"mlflow.parentRunId": self.run_id, "taskdml.step": step.name},
                run_name=f"{step.name} trial {row.get('trial', position)}",
            )
            params, metrics, tags = [], [], []
            for key, value in row.items():
                if pd.isna(value):
                    continue
                if key in space:
                    params.append(Param(key, str(value)))
                elif key == "trial":  # in the run's name
                    continue
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    metrics.append(Metric(key, float(value), _now(), 0))
                else:
                    tags.append(RunTag(f"taskdml.{key}", str(value)[:5000]))
            self._batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
            done.append(run.info.run_id)

    def _item_run(self, item):
        """The nested run of a ``foreach`` item (made the first time a step logs to it)."""
        from mlflow.entities import Param

        if item not in self.state["items"]:
            run = self.client.create_run(
                self.experiment_id,
                tags={"mlflow.parentRunId": self.run_id, "taskdml.item": item},
                run_name=item,
            )
            self.state["items"][item] = run.info.run_id
            params = _item_params(self.pipeline, item)
            self._batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return self.state["items"][item]

    # -- plumbing ------------------------------------------------------------------------------

    def _batch(self, run_id, metrics=(), params=(), tags=()):
        """``log_batch`` within MLflow's limits per request (1000 metrics, 100 params/tags)."""
        metrics, params, tags = list(metrics), list(params), list(tags)
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000])
        for start in range(0, max(len(params), len(tags)), 100):
            self.client.log_batch(
                run_id, params=params[start : start + 100], tags=tags[start : start + 100]
            )

    def _save_state(self):
        self.directory.update_manifest(mlflow=json.loads(json.dumps(self.state)))

    @contextlib.contextmanager
    def _warn_on_failure(self, what):
        try:
            yield
        except Exception as error:  # the run's own records stand; MLflow missed a part
            warnings.warn(
                f"MLflow at {self.uri} did not take {what} of run {self.directory.run_id}: "
                f"{type(error).__name__}: {error}",
                stacklevel=4,
            )


def flat_params(document):
    """A pipeline file's parameters as MLflow params: ``params.*`` and each step's settings
    with its name as prefix (``model.fit``, ``model.with.alpha``), values as text.

    Parameters
    ----------
    document : dict
        A pipeline as :meth:`PipelineSpec.to_dict` gives it.

    Returns
    -------
    dict
    """
    flat = {}

    def walk(prefix, value):
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}", item)
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            flat[prefix] = text[:6000]  # MLflow's longest param value

    walk("params", document.get("params") or {})
    for step, spec in document.get("steps", {}).items():
        for key, value in spec.items():
            if key not in _NOT_PARAMS:
                walk(f"{step}.{key}", value)
    return {key: value for key, value in flat.items() if key != "params"}


def _item_params(pipeline, item):
    for step in pipeline.steps:
        for label, params in step.foreach_items():
            if label == item:
                return params
    return {}


def _preprocess_steps(step):
    """The steps whose saved models the step's ``preprocess`` input names, in order."""
    names = [ref for argument, _, ref, _ in step.references() if argument == "preprocess"]
    return names


def _metrics(prefix, values):
    from mlflow.entities import Metric

    return [
        Metric(f"{prefix}.{name}", float(value), _now(), 0)
        for name, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


def _history(prefix, history):
    """A training's history, one metric per numeric field, ``step=`` the epoch."""
    from mlflow.entities import Metric

    return [
        Metric(f"{prefix}.{name}", float(value), _now(), int(epoch["epoch"]))
        for epoch in history
        if isinstance(epoch.get("epoch"), int)
        for name, value in epoch.items()
        if name != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


def _flatten(trials):
    return [run_id for runs in trials.values() for run_id in runs]


def _now():
    return int(time.time() * 1000)


def _check_reachable(uri, timeout_s=5.0):
    """A server URI must answer its ``/health`` endpoint now, not after MLflow's retries."""
    import urllib.error
    import urllib.request

    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s):
            return
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise TrackingError(
            f"the MLflow tracking server at {uri} does not answer ({reason}). Start it (mlflow "
            "server --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000), "
            "or give another --track URI / tracking.mlflow (a folder or sqlite:///FILE "
            "needs no server)."
        ) from None
