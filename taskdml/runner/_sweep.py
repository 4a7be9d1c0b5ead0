"""Sweeps: one run per combination of ``taskdml run -m`` overrides, then their comparison.

:func:`run_sweep` expands the command line's overrides in Hydra's sweep grammar
(:func:`taskdml.pipeline._spec.parse_sweep`), loads and validates every combination before
anything runs (a bad value or key is an error with nothing started), then runs them one after
the other with :func:`taskdml.runner.run_pipeline` on one cluster: the embedded one started
once, or the scheduler given, unless the swept keys change the file's ``cluster`` block, when
each run opens its own. Each run has its own run directory, its overrides in its manifest and
the sweep's id and values under ``sweep``. Steps whose cache key does not depend on the swept
keys are computed by the first run and reused from the step cache by the others
(:mod:`taskdml.runner._reuse`), so nothing here decides reuse.

A failing combination does not stop the others unless ``fail_fast``. The sweep's folder,
``<run root>/sweeps/<sweep id>/``, holds ``sweep.json`` (the combinations, their runs and
states) and :func:`taskdml.runs._directory.compare_runs` of its runs as ``compare.json``, and
one row per run (swept values, status, metrics) as ``compare.md`` and ``compare.csv``.
"""

import contextlib
import csv
import dataclasses
import datetime
import io
import json
import secrets
from pathlib import Path

from taskdml.exceptions import StepFailed
from taskdml.pipeline._spec import load_pipeline, parse_sweep
from taskdml.runner._runner import run_pipeline
from taskdml.runs._directory import DEFAULT_ROOT, RunDirectory, atomic_write, compare_runs


@dataclasses.dataclass
class SweepResult:
    """The outcome of :func:`run_sweep`.

    Attributes
    ----------
    sweep_id : str
    path : pathlib.Path
        The sweep's folder (``sweep.json``, ``compare.json``, ``compare.md``, ``compare.csv``).
    keys : tuple of str
        The swept keys.
    runs : list of dict
        Per combination, in sweep order: ``index``, ``values`` (``{key: value}``),
        ``overrides``, ``run_id``, ``run_dir``, ``status`` (``succeeded``, ``failed``,
        ``interrupted``, or ``not run`` after ``fail_fast`` or an interrupt stopped the sweep)
        and ``error``.
    comparison : dict
        :func:`~taskdml.runs._directory.compare_runs` of the runs that have a run directory.
    """

    sweep_id: str
    path: Path
    keys: tuple
    runs: list
    comparison: dict

    @property
    def failed(self):
        """The runs that did not succeed (failed, or not run after ``fail_fast``)."""
        return [run for run in self.runs if run["status"] != "succeeded"]


def run_sweep(
    path,
    overrides,
    *,
    run_root=None,
    scheduler=None,
    n_workers=None,
    cache=None,
    fail_fast=False,
    on_run=None,
    performance_report=False,
    track=None,
):
    """Run the pipeline file *path* once per combination of the sweeps in *overrides*.

    Parameters
    ----------
    path : str or Path
        The pipeline file.
    overrides : sequence of str
        Overrides in Hydra's sweep grammar: ``alpha=0.1,1``, ``n=range(1,4)``,
        ``steps.fit.parallel.mode=glob(*)``, and plain ones applied to every run.
    run_root : path, optional
        The folder of run directories (default ``.taskdml/runs``); the sweep's folder is
        ``<run_root>/sweeps/<sweep id>``.
    scheduler, n_workers, cache, performance_report, track
        As :func:`~taskdml.runner.run_pipeline` takes them, for every run (``track``: each
        run its own MLflow run).
    fail_fast : bool, default False
        Stop at the first run that fails; the rest are recorded as ``not run``.
    on_run : callable, optional
        ``on_run(index, total, values, pipeline)`` before each run; what it returns is the
        run's ``on_event``.

    Returns
    -------
    SweepResult

    Raises
    ------
    PipelineError
        When a sweep value cannot be read or a combination is not a valid pipeline; nothing
        has run.
    ClusterUnavailable
        When the cluster cannot be reached.

    Examples
    --------
    >>> from taskdml.runner._sweep import run_sweep
    >>> result = run_sweep("pipelines/quickstart.yaml", ["epochs=1,2"])  # doctest: +SKIP
    >>> [run["status"] for run in result.runs]  # doctest: +SKIP
    ['succeeded', 'succeeded']
    """
    from taskdml.cluster import _connect as clusters

    sweep = parse_sweep(overrides)
    total = len(sweep.combinations)
    pipelines = [load_pipeline(path, sweep.overrides(i)) for i in range(total)]
    now = datetime.datetime.now()
    sweep_id = f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    folder = Path(DEFAULT_ROOT if run_root is None else run_root) / "sweeps" / sweep_id
    runs = [
        {
            "index": i,
            "values": combination,
            "overrides": list(sweep.overrides(i)),
            "run_id": None,
            "run_dir": None,
            "status": "not run",
            "error": None,
        }
        for i, combination in enumerate(sweep.combinations)
    ]
    first = pipelines[0]
    shared = all(p.cluster == first.cluster and p.silos == first.silos for p in pipelines)
    target = clusters.choose(
        first.cluster, scheduler=scheduler, n_workers=n_workers, silos=first.silos
    )
    modules = list(dict.fromkeys(m for p in pipelines for m in clusters.pipeline_modules(p)))
    opened = clusters.open_target(target, warm_modules=modules) if shared else None
    try:
        with opened or contextlib.nullcontext() as client:
            where = {"client": client} if client is not None else {}
            where = where or {"scheduler": scheduler, "n_workers": n_workers}
            for i, pipeline in enumerate(pipelines):
                on_event = on_run(i, total, sweep.combinations[i], pipeline) if on_run else None
                entry = runs[i]
                try:
                    run = run_pipeline(
                        pipeline,
                        run_root=run_root,
                        cache=cache,
                        on_event=on_event,
                        performance_report=performance_report,
                        track=track,
                        **where,
                    )
                    entry.update(run_id=run.run_id, run_dir=str(run.path), status="succeeded")
                except StepFailed as error:
                    run_dir = error.run_dir and str(error.run_dir)
                    entry.update(run_dir=run_dir, status="failed", error=str(error))
                    entry["run_id"] = Path(run_dir).name if run_dir else None
                except KeyboardInterrupt:
                    entry["status"] = "interrupted"
                    raise
                finally:
                    if entry["run_dir"]:
                        _mark(entry, sweep_id, total)
                if fail_fast and entry["status"] == "failed":
                    break
    finally:
        comparison = _record(folder, sweep_id, path, overrides, sweep, runs)
    return SweepResult(sweep_id, folder, sweep.keys, runs, comparison)


def _mark(entry, sweep_id, total):
    """The sweep's id, this run's place in it and its swept values, in the run's manifest."""
    directory = RunDirectory.reopen(entry["run_dir"])
    directory.update_manifest(
        sweep={"id": sweep_id, "index": entry["index"], "of": total, "values": entry["values"]}
    )


def _record(folder, sweep_id, path, overrides, sweep, runs):
    """Write the sweep's folder; return the comparison of its recorded runs."""
    recorded = [run for run in runs if run["run_dir"]]
    comparison = compare_runs([run["run_dir"] for run in recorded]) if recorded else {}
    document = {
        "sweep_id": sweep_id,
        "pipeline_file": str(path),
        "overrides": list(overrides),
        "keys": list(sweep.keys),
        "runs": runs,
    }
    atomic_write(folder / "sweep.json", json.dumps(document, indent=2, default=str) + "\n")
    atomic_write(
        folder / "compare.json",
        json.dumps({"sweep_id": sweep_id, **comparison}, indent=2, default=str) + "\n",
    )
    header, rows = sweep_rows(sweep.keys, runs, comparison)
    atomic_write(folder / "compare.md", _markdown(header, rows))
    atomic_write(folder / "compare.csv", _csv(header, rows))
    return comparison


def sweep_rows(keys, runs, comparison):
    """One row per run: id, status, each swept key's value, each metric (``<step>.<name>``).

    Parameters
    ----------
    keys : sequence of str
        The swept keys.
    runs : list of dict
        :attr:`SweepResult.runs`.
    comparison : dict
        :func:`~taskdml.runs._directory.compare_runs` of the runs that have a run directory,
        in the same order.

    Returns
    -------
    (list of str, list of list)
        The header and the rows.
    """
    metrics = comparison.get("metrics", {})
    header = ["run_id", "status", *keys, *metrics]
    rows, column = [], 0
    for run in runs:
        values = [run["values"].get(key) for key in keys]
        if run["run_dir"]:
            found = [metrics[name][column] for name in metrics]
            column += 1
        else:
            found = [None] * len(metrics)
        rows.append([run["run_id"], run["status"], *values, *found])
    return header, rows


def _text(value):
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _markdown(header, rows):
    def line(cells):
        return "| " + " | ".join(_text(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)]) + "\n"


def _csv(header, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_text(c) for c in row] for row in rows])
    return out.getvalue()
