"""Run directories: the durable record of every run.

``.taskdml/runs/<timestamp>-<id>/`` holds

- ``pipeline.yaml`` (the file as loaded), ``resolved.yaml`` (after overrides and
  interpolation), ``overrides.txt``;
- ``manifest.json``: run and step states, durations, artifacts, versions, cluster;
- ``events.jsonl``: one JSON object per event, appended as it happens;
- ``metrics.json``: every evaluate step's numbers;
- ``models/<step>.skops`` (or ``.joblib`` where skops cannot persist the model safely).

Every file but the event log is written atomically (a temporary file in the same folder, then
``os.replace``), so a crash never leaves half a manifest. The manifest is rewritten at every
step transition, so what finished before a failure or an interrupt stays recorded.
"""

import datetime
import json
import os
import secrets
import tempfile
import threading
from pathlib import Path

from taskdml._parts import gathered, parts_of, with_parts
from taskdml.cache._models import dump_model, load_model_bytes
from taskdml.exceptions import RunNotFound, did_you_mean

DEFAULT_ROOT = Path(".taskdml") / "runs"
"""Where runs are recorded when no folder is given (relative to the working directory)."""


def atomic_write(path, data):
    """Write *data* to *path* so readers see the old file or the new one, never half of one.

    Parameters
    ----------
    path : path
        The file; its folder is created if needed.
    data : str or bytes
        Text (written as UTF-8) or bytes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with tempfile.NamedTemporaryFile(
        mode,
        dir=path.parent,
        prefix=f".{path.name}.",
        delete=False,
        **({} if mode == "wb" else {"encoding": "utf-8"}),
    ) as tmp:
        tmp.write(data)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)


def _json(value):
    return json.dumps(value, indent=2, sort_keys=False, default=str) + "\n"


class RunDirectory:
    """The folder of one run, written as the run goes.

    Parameters
    ----------
    root : path, optional
        The folder of run directories; default :data:`DEFAULT_ROOT`.
    run_id : str, optional
        Default ``<YYYYmmdd-HHMMSS>-<6 hex digits>``.

    Attributes
    ----------
    run_id : str
    path : pathlib.Path
        ``root / run_id``, created empty (an existing folder is an error).
    manifest : dict
        What ``manifest.json`` holds.
    metrics : dict
        What ``metrics.json`` holds.
    """

    def __init__(self, root=None, run_id=None):
        now = datetime.datetime.now()
        self.run_id = run_id or f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        self.path = Path(DEFAULT_ROOT if root is None else root) / self.run_id
        self.path.mkdir(parents=True, exist_ok=False)
        self._lock = threading.Lock()
        self.manifest = {"run_id": self.run_id, "created": now.isoformat(timespec="seconds")}
        self.metrics = {}

    @classmethod
    def reopen(cls, path):
        """The run directory at *path*, to record a resumed run in it again.

        Parameters
        ----------
        path : path
            A run directory (with its ``manifest.json``).

        Returns
        -------
        RunDirectory
        """
        directory = cls.__new__(cls)
        directory.path = Path(path)
        directory.manifest = _read_json(directory.path / "manifest.json")
        directory.run_id = directory.manifest["run_id"]
        metrics = directory.path / "metrics.json"
        directory.metrics = _read_json(metrics) if metrics.exists() else {}
        directory._lock = threading.Lock()
        return directory

    def write_text(self, name, text):
        """Write the file *name* of the run directory atomically.

        Parameters
        ----------
        name : str
        text : str
        """
        atomic_write(self.path / name, text)

    def write_with(self, name, write):
        """Let ``write(path)`` produce file *name*, atomically (a temporary name, then rename).

        Parameters
        ----------
        name : str
        write : callable
            ``write(path)`` writes the whole file at *path*.
        """
        final = self.path / name
        temporary = final.with_name(f".{final.stem}.tmp{final.suffix}")
        write(temporary)
        os.chmod(temporary, 0o644)
        os.replace(temporary, final)

    def update_manifest(self, **fields):
        """Merge *fields* into the manifest and rewrite it.

        Parameters
        ----------
        **fields
            Top-level manifest keys.
        """
        with self._lock:
            self.manifest.update(fields)
            atomic_write(self.path / "manifest.json", _json(self.manifest))

    def update_step(self, step, **fields):
        """Merge *fields* into one step's manifest entry and rewrite the manifest.

        Parameters
        ----------
        step : str
        **fields
            Keys of the step's entry (``state``, ``duration_s``, ``artifacts``, ...).
        """
        with self._lock:
            self.manifest.setdefault("steps", {}).setdefault(step, {}).update(fields)
            atomic_write(self.path / "manifest.json", _json(self.manifest))

    def record_metrics(self, step, values):
        """Set an evaluate step's metrics and rewrite ``metrics.json``.

        Parameters
        ----------
        step : str
        values : dict
        """
        with self._lock:
            self.metrics[step] = values
            atomic_write(self.path / "metrics.json", _json(self.metrics))

    def append_event(self, event):
        """Append one event as a JSON line to ``events.jsonl``.

        Parameters
        ----------
        event : dict
        """
        with self._lock, open(self.path / "events.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(event, default=str) + "\n")

    def save_model(self, step, model):
        """Persist a fitted model under ``models/`` (:func:`dump_model` picks the format).

        A :class:`~taskdml.parallel.ClassSharded` model becomes a folder
        ``models/<step>.sharded/``: its shell and one file per shard, gathered one at a time.

        Parameters
        ----------
        step : str
            The file's stem: the step name, or ``"step[item]"``.
        model : estimator

        Returns
        -------
        dict
            ``{"path", "format"}`` (and ``"why_not_skops"`` for joblib) for the manifest.
        """
        split = parts_of(model)
        if split is None:
            data, artifact = dump_model(model)
            artifact = {"path": str(Path("models") / f"{step}.{artifact['format']}"), **artifact}
            atomic_write(self.path / artifact["path"], data)
            return artifact
        # A model split across workers: a folder of its shell and one file per shard, each
        # shard brought here alone, so this process never holds the whole model.
        shell, shards = split
        folder = Path("models") / f"{step}.sharded"
        data, facts = dump_model(shell)
        atomic_write(self.path / folder / f"model.{facts['format']}", data)
        for i, shard in enumerate(shards):
            data, facts = dump_model(gathered(shard))
            atomic_write(self.path / folder / f"shard-{i:04d}.{facts['format']}", data)
        return {**facts, "path": str(folder), "format": "sharded", "shards": len(shards)}


def load_model(run_path, step):
    """Load a model a run saved.

    Parameters
    ----------
    run_path : path
        The run directory.
    step : str
        The step name, or ``"step[item]"`` for one item of a ``foreach`` step.

    Returns
    -------
    estimator
        skops files are loaded with only the types skops trusts; joblib files (written where
        skops could not persist the model) with joblib. A model trained class-sharded
        (``parallel: {mode: model}``) comes back with its shards in this process.

    Raises
    ------
    RunNotFound
        When the run saved no model for *step*.
    """
    folder = Path(run_path) / "models"
    for format in ("skops", "joblib"):
        if (folder / f"{step}.{format}").exists():
            return load_model_bytes((folder / f"{step}.{format}").read_bytes(), format)
    if (folder / f"{step}.sharded").is_dir():
        files = sorted((folder / f"{step}.sharded").iterdir())
        loaded = [load_model_bytes(f.read_bytes(), f.suffix[1:]) for f in files]
        return with_parts(loaded[0], loaded[1:])  # model.*, then shard-0000.* ...
    raise RunNotFound(
        f"run {run_path} saved no model for step {step!r}; the artifacts of "
        f"each step are listed in {Path(run_path) / 'manifest.json'}."
    )


def list_runs(root=None):
    """Manifests of the runs under *root*, oldest first.

    Parameters
    ----------
    root : path, optional
        The folder of run directories; default :data:`DEFAULT_ROOT` (``.taskdml/runs``).

    Returns
    -------
    list of dict
        Each run's ``manifest.json`` with its ``path`` added, by the time it was created;
        unreadable manifests are skipped.
    """
    root = Path(DEFAULT_ROOT if root is None else root)
    runs = []
    for manifest in root.glob("*/manifest.json"):
        try:
            runs.append(_read_json(manifest) | {"path": str(manifest.parent)})
        except (OSError, ValueError):
            continue
    # by when they were created: a folder renamed or named by hand does not pass for the latest
    return sorted(runs, key=lambda run: (str(run.get("created", "")), run["path"]))


def find_run(run, root=None):
    """The manifest of *run*: an id, a unique id prefix, a path, or ``latest``.

    Parameters
    ----------
    run : str or path
        A run id, a prefix that matches one run id, a run directory, or ``"latest"``.
    root : path, optional
        The folder of run directories; default :data:`DEFAULT_ROOT` (``.taskdml/runs``).

    Returns
    -------
    dict
        The run's ``manifest.json`` with its ``path`` added.

    Raises
    ------
    RunNotFound
        When no run matches, or a prefix matches several; the message names *run* and how to
        list the recorded runs.
    """
    root = Path(DEFAULT_ROOT if root is None else root)
    runs = list_runs(root)
    if run == "latest" and runs:
        return runs[-1]
    if Path(run, "manifest.json").exists():
        return _read_json(Path(run, "manifest.json")) | {"path": str(run)}
    matches = [entry for entry in runs if entry["run_id"].startswith(str(run))]
    if len(matches) == 1:
        return matches[0]
    listing = "taskdml runs list" + ("" if root == DEFAULT_ROOT else f" --run-dir {root}")
    if not matches:
        ids = [entry["run_id"] for entry in runs]
        held = (
            f"{len(runs)} recorded run{'s' if len(runs) != 1 else ''}"
            if runs
            else "no recorded runs"
        )
        raise RunNotFound(
            f"no run {run!r} under {root} ({held}).{did_you_mean(run, ids)} "
            f"See the recorded runs with '{listing}'."
        )
    raise RunNotFound(
        f"{run!r} matches {len(matches)} runs under {root}: "
        f"{', '.join(m['run_id'] for m in matches)}. Give more of the id; "
        f"'{listing}' shows them all."
    )


def run_summary(run, root=None, *, exit_code=None):
    """What a recorded run did, as one JSON-able dict (``taskdml runs show --json``).

    Parameters
    ----------
    run : str or path
        Anything :func:`find_run` accepts: an id, an id prefix, a run directory or ``"latest"``.
    root : path, optional
        The folder of run directories; default :data:`DEFAULT_ROOT` (``.taskdml/runs``).
    exit_code : int, optional
        The exit code to report; default 0 for a run that succeeded and 1 otherwise.

    Returns
    -------
    dict
        ``run_id``, ``pipeline``, ``run_dir``, ``status``, ``exit_code``, ``duration_s``,
        ``steps`` (each step's manifest entry without its traceback), ``metrics``, and the
        paths of ``report`` (``report.html``, or ``None``) and the ``pictures``
        (``{name: path}``) that exist.

    Raises
    ------
    RunNotFound
        When *run* matches no recorded run, or several.
    """
    manifest = find_run(run, root)
    folder, report = Path(manifest["path"]), manifest.get("report")
    metrics_file = Path(manifest["path"], "metrics.json")
    metrics = _read_json(metrics_file) if metrics_file.exists() else {}
    if exit_code is None:
        exit_code = 0 if manifest.get("status") == "succeeded" else 1
    return {
        "run_id": manifest["run_id"],
        "pipeline": manifest.get("pipeline"),
        "run_dir": str(manifest["path"]),
        "status": manifest["status"],
        "exit_code": exit_code,
        "duration_s": manifest.get("duration_s"),
        "steps": {
            name: {k: v for k, v in entry.items() if k != "traceback"}
            for name, entry in manifest.get("steps", {}).items()
        },
        "metrics": metrics,
        "report": str(folder / report) if report and (folder / report).exists() else None,
        "pictures": {
            name: str(folder / path)
            for name, path in (manifest.get("pictures") or {}).items()
            if (folder / path).exists()
        },
    }


def compare_runs(runs, root=None):
    """Parameters and metrics of several recorded runs, side by side.

    Parameters
    ----------
    runs : sequence of str or path
        Anything :func:`find_run` accepts, one per run, in the order of the columns.
    root : path, optional
        The folder of run directories; default :data:`DEFAULT_ROOT` (``.taskdml/runs``).

    Returns
    -------
    dict
        ``runs``: per run ``run_id``, ``pipeline``, ``status``, ``duration_s``, ``run_dir``;
        ``params``: ``{name: [value per run]}``, every resolved ``params`` entry of any run;
        ``differ``: the names of ``params`` whose values differ; ``settings``:
        ``{"<step>.<with|parallel|foreach>.<key>": [value per run]}``, only those that
        differ; ``metrics``: ``{"<step>.<metric>": [value per run]}`` (``<step>[<item>]``
        after a foreach). A run that lacks an entry has ``None`` there.

    Raises
    ------
    RunNotFound
        When a run matches no recorded run, or several.

    Examples
    --------
    >>> from taskdml.runs._directory import compare_runs
    >>> table = compare_runs(["20250101-120000-abcdef", "latest"])  # doctest: +SKIP
    >>> table["differ"], table["metrics"]["report.accuracy"]  # doctest: +SKIP
    (['epochs'], [0.8712, 0.8893])
    """
    manifests = [find_run(run, root) for run in runs]
    specs = [_resolved(Path(manifest["path"])) for manifest in manifests]
    params = _side_by_side([spec.get("params") or {} for spec in specs])
    settings = _side_by_side([_settings(spec) for spec in specs])
    metrics = _side_by_side(
        [
            _flat_metrics(_read_json(Path(m["path"], "metrics.json")))
            if Path(m["path"], "metrics.json").exists()
            else {}
            for m in manifests
        ]
    )
    return {
        "runs": [
            {
                "run_id": manifest["run_id"],
                "pipeline": manifest.get("pipeline"),
                "status": manifest.get("status"),
                "duration_s": manifest.get("duration_s"),
                "run_dir": str(manifest["path"]),
            }
            for manifest in manifests
        ],
        "params": params,
        "differ": [name for name, values in params.items() if _differ(values)],
        "settings": {name: values for name, values in settings.items() if _differ(values)},
        "metrics": metrics,
    }


def _resolved(folder):
    import yaml

    path = folder / "resolved.yaml"
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else {}


def _settings(spec):
    """``{"<step>.<with|parallel|foreach>.<key>": value}`` of a resolved pipeline."""
    found = {}
    for step, entry in (spec.get("steps") or {}).items():
        for block in ("with", "parallel", "foreach"):
            for key, value in ((entry or {}).get(block) or {}).items():
                found[f"{step}.{block}.{key}"] = value
    return found


def _flat_metrics(metrics):
    found = {}
    for step, values in metrics.items():
        for name, value in values.items():
            if isinstance(value, dict):  # after a foreach: {item: {metric: value}}
                found.update({f"{step}[{name}].{metric}": v for metric, v in value.items()})
            else:
                found[f"{step}.{name}"] = value
    return found


def _side_by_side(mappings):
    names = list(dict.fromkeys(name for mapping in mappings for name in mapping))
    return {name: [mapping.get(name) for mapping in mappings] for name in names}


def _differ(values):
    return any(
        json.dumps(v, sort_keys=True, default=str)
        != json.dumps(values[0], sort_keys=True, default=str)
        for v in values
    )


def _read_json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))
