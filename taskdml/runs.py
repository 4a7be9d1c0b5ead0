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

from taskdml.exceptions import ResumeImpossible, did_you_mean

DEFAULT_ROOT = Path(".taskdml") / "runs"


def atomic_write(path, data):
    """Write *data* (str or bytes) to *path* so readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.",
                                     delete=False, **({} if mode == "wb" else {"encoding": "utf-8"})) as tmp:
        tmp.write(data)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, path)


def _json(value):
    return json.dumps(value, indent=2, sort_keys=False, default=str) + "\n"


class RunDirectory:
    """The folder of one run, written as the run goes."""

    def __init__(self, root=DEFAULT_ROOT, run_id=None):
        now = datetime.datetime.now()
        self.run_id = run_id or f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        self.path = Path(root) / self.run_id
        self.path.mkdir(parents=True, exist_ok=False)
        self._lock = threading.Lock()
        self.manifest = {"run_id": self.run_id, "created": now.isoformat(timespec="seconds")}
        self.metrics = {}

    def write_text(self, name, text):
        atomic_write(self.path / name, text)

    def write_with(self, name, write):
        """Let ``write(path)`` produce file *name*, atomically (a temporary name, then rename)."""
        final = self.path / name
        temporary = final.with_name(f".{final.stem}.tmp{final.suffix}")
        write(temporary)
        os.chmod(temporary, 0o644)
        os.replace(temporary, final)

    def update_manifest(self, **fields):
        """Merge *fields* into the manifest and rewrite it."""
        with self._lock:
            self.manifest.update(fields)
            atomic_write(self.path / "manifest.json", _json(self.manifest))

    def update_step(self, step, **fields):
        """Merge *fields* into one step's manifest entry and rewrite the manifest."""
        with self._lock:
            self.manifest.setdefault("steps", {}).setdefault(step, {}).update(fields)
            atomic_write(self.path / "manifest.json", _json(self.manifest))

    def record_metrics(self, step, values):
        with self._lock:
            self.metrics[step] = values
            atomic_write(self.path / "metrics.json", _json(self.metrics))

    def append_event(self, event):
        with self._lock, open(self.path / "events.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(event, default=str) + "\n")

    def save_model(self, step, model):
        """Persist a fitted model; return ``{"path", "format"}`` for the manifest."""
        import skops.io

        try:
            data = skops.io.dumps(model)
            untrusted = skops.io.get_untrusted_types(data=data)
            if untrusted:
                raise TypeError(f"types skops does not trust: {untrusted}")
            artifact = {"path": str(Path("models") / f"{step}.skops"), "format": "skops"}
        except Exception as error:  # skops refuses many types; joblib takes them all
            import io

            import joblib

            buffer = io.BytesIO()
            joblib.dump(model, buffer)
            data = buffer.getvalue()
            artifact = {"path": str(Path("models") / f"{step}.joblib"), "format": "joblib",
                        "why_not_skops": f"{type(error).__name__}: {error}"}
        atomic_write(self.path / artifact["path"], data)
        return artifact


def load_model(run_path, step):
    """Load a model a run saved (skops files are loaded with only trusted types)."""
    folder = Path(run_path) / "models"
    skops_file, joblib_file = folder / f"{step}.skops", folder / f"{step}.joblib"
    if skops_file.exists():
        import skops.io

        return skops.io.load(skops_file)
    if joblib_file.exists():
        import joblib

        return joblib.load(joblib_file)
    raise ResumeImpossible(f"run {run_path} saved no model for step {step!r}.")


def list_runs(root=DEFAULT_ROOT):
    """Manifests of the runs under *root*, oldest first."""
    root = Path(root)
    runs = []
    for manifest in sorted(root.glob("*/manifest.json")):
        try:
            runs.append(json.loads(manifest.read_text(encoding="utf-8")) | {"path": str(manifest.parent)})
        except (OSError, ValueError):
            continue
    return runs


def find_run(run, root=DEFAULT_ROOT):
    """The manifest of *run*: an id, a unique id prefix, a path, or ``latest``."""
    runs = list_runs(root)
    if run == "latest" and runs:
        return runs[-1]
    if Path(run, "manifest.json").exists():
        return json.loads(Path(run, "manifest.json").read_text(encoding="utf-8")) | {"path": str(run)}
    matches = [entry for entry in runs if entry["run_id"].startswith(run)]
    if len(matches) == 1:
        return matches[0]
    ids = [entry["run_id"] for entry in runs]
    if not matches:
        raise ResumeImpossible(f"no run {run!r} under {root}.{did_you_mean(run, ids)} "
                               "'taskdml runs list' shows the runs.")
    raise ResumeImpossible(f"{run!r} matches {len(matches)} runs: {', '.join(m['run_id'] for m in matches)}.")
