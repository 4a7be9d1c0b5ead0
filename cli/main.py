"""The ``taskdml`` command: parse, call one library function, print.

Heavy imports (dask, scikit-learn) happen inside command bodies so ``--help`` stays fast.
Errors the user can fix print one message and exit with the code DESIGN.md documents;
``--verbose`` or ``TASKDML_FULL_ERROR=1`` adds the traceback.
"""

import json
import os
import sys
import traceback

import click

EXIT_CODES = """Exit codes: 0 success, 1 a step failed, 2 usage error, 3 invalid pipeline,
4 cluster unavailable, 5 run not found / resume impossible, 130 interrupted."""


class TaskdmlClickError(click.ClickException):
    """A library error shown as a one-line CLI error with its documented exit code."""

    def __init__(self, error):
        super().__init__(str(error))
        self.exit_code = getattr(error, "exit_code", 1)

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


def _errors(function):
    """Turn taskdml errors into CLI errors; keep the traceback for --verbose."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from taskdml.exceptions import TaskdmlError

        try:
            return function(*args, **kwargs)
        except TaskdmlError as error:
            if _verbose():
                traceback.print_exc()
            raise TaskdmlClickError(error) from None

    return wrapper


def _verbose():
    context = click.get_current_context(silent=True)
    root = context.find_root().params if context else {}
    return root.get("verbose") or os.environ.get("TASKDML_FULL_ERROR") == "1"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "TASKDML"},
             epilog=EXIT_CODES)
@click.version_option(package_name="taskdml", prog_name="taskdml")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks of errors.")
def cli(verbose):
    """Run machine-learning pipelines on Dask."""


@cli.command(epilog=EXIT_CODES)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--scheduler", metavar="ADDRESS", help="Use a running scheduler (tcp://127.0.0.1:8786).")
@click.option("--workers", type=click.IntRange(min=1), help="Workers of the embedded LocalCluster.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=".taskdml/runs", show_default=True,
              help="Folder that receives the run directory.")
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@_errors
def run(pipeline_file, overrides, scheduler, workers, run_dir, dry_run, as_json):
    """Run PIPELINE_FILE, with OVERRIDES like seed=3, a.b=1, +new=1, ~gone."""
    from taskdml import load_pipeline, run_pipeline
    from taskdml.exceptions import StepFailed
    from taskdml.render import render

    from cli.progress import Progress

    pipeline = load_pipeline(pipeline_file, overrides=overrides)
    if dry_run:
        where = scheduler or pipeline.cluster.get("address") or _local(pipeline, workers)
        if as_json:
            click.echo(json.dumps({"pipeline": pipeline.name, "plan": json.loads(render(pipeline, "json")),
                                   "cluster": where, "dry_run": True}, indent=2))
        else:
            click.echo(render(pipeline) + f"\n\nwould run on: {where} (dry run: nothing ran)")
        return
    progress = Progress([step.name for step in pipeline.ordered_steps()],
                        live=False if as_json else None)
    try:
        result = run_pipeline(pipeline, run_root=run_dir, scheduler=scheduler, n_workers=workers,
                              on_event=progress)
    except StepFailed as error:
        if as_json:
            click.echo(json.dumps(_summary_from_dir(error.run_dir, error.exit_code), indent=2))
        click.echo(f"\nrun failed; what finished is kept in {error.run_dir}\n"
                   f"see it with: taskdml runs show {error.run_dir}", err=True)
        raise
    except KeyboardInterrupt:
        click.echo("\ninterrupted; the run directory keeps what finished.", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(_summary_from_dir(result.path, 0), indent=2))
    else:
        order = [step.name for step in pipeline.ordered_steps()]
        click.echo(_results_table({name: result.steps[name] for name in order if name in result.steps},
                                  result.metrics))
        click.echo(f"\nrun {result.run_id} succeeded; recorded in {result.path}")


def _local(pipeline, workers):
    from taskdml.cluster import default_workers

    n = workers or pipeline.cluster.get("n_workers") or default_workers()
    return f"embedded LocalCluster on 127.0.0.1 with {n} workers"


def _summary_from_dir(path, exit_code):
    manifest = json.loads(open(os.path.join(path, "manifest.json"), encoding="utf-8").read())
    metrics_file = os.path.join(path, "metrics.json")
    metrics = json.loads(open(metrics_file, encoding="utf-8").read()) if os.path.exists(metrics_file) else {}
    return {"run_id": manifest["run_id"], "run_dir": str(path), "status": manifest["status"],
            "exit_code": exit_code, "duration_s": manifest.get("duration_s"),
            "steps": {name: {k: v for k, v in entry.items() if k != "traceback"}
                      for name, entry in manifest.get("steps", {}).items()},
            "metrics": metrics}


def _results_table(steps, metrics):
    from cli.progress import describe

    lines = ["", f"{'step':<17} {'state':<9} {'time':>8}  result"]
    for name, entry in steps.items():
        duration = entry.get("duration_s")
        time = f"{duration:7.2f}s" if duration is not None else ""
        result = (describe(entry.get("summary")) if entry.get("state") == "completed"
                  else entry.get("error", entry.get("reason", "")))
        lines.append(f"{name:<17} {entry.get('state', ''):<9} {time:>8}  {result}")
    for step, values in metrics.items():
        lines += ["", f"metrics of {step}:"]
        lines += _metric_lines(values, indent="  ")
    return "\n".join(lines)


def _metric_lines(values, indent):
    """Metrics as ``name value`` lines, or a table of items by metrics after a foreach."""
    if not all(isinstance(value, dict) for value in values.values()):
        return [f"{indent}{name:<24} {value:.4f}" for name, value in values.items()]
    names = list(next(iter(values.values())))
    width = max(len(label) for label in values)
    lines = [f"{indent}{'item':<{width}}  " + "  ".join(f"{name:>{max(len(name), 8)}}" for name in names)]
    for label, row in values.items():
        lines.append(f"{indent}{label:<{width}}  "
                     + "  ".join(f"{row[name]:>{max(len(name), 8)}.4f}" for name in names))
    return lines


@cli.command(epilog=EXIT_CODES)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@_errors
def validate(pipeline_file, overrides):
    """Check PIPELINE_FILE (with OVERRIDES) without running anything."""
    from taskdml import load_pipeline

    pipeline = load_pipeline(pipeline_file, overrides=overrides)
    click.echo(f"{pipeline_file}: valid pipeline {pipeline.name!r} with {len(pipeline.steps)} steps.")


@cli.command(epilog=EXIT_CODES)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid", "dot", "json"]), default="text",
              show_default=True)
@_errors
def show(pipeline_file, overrides, fmt):
    """Print the DAG of PIPELINE_FILE."""
    from taskdml import load_pipeline
    from taskdml.render import render

    click.echo(render(load_pipeline(pipeline_file, overrides=overrides), fmt))


@cli.group()
def runs():
    """Inspect recorded runs."""


@runs.command("list")
@click.option("--run-dir", type=click.Path(file_okay=False), default=".taskdml/runs", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def runs_list(run_dir, as_json):
    """List the runs under --run-dir, oldest first."""
    from taskdml.runs import list_runs

    entries = list_runs(run_dir)
    if as_json:
        click.echo(json.dumps([{k: e.get(k) for k in ("run_id", "pipeline", "status", "duration_s", "path")}
                               for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"no runs under {run_dir}")
    for entry in entries:
        click.echo(f"{entry['run_id']}  {entry.get('pipeline', '?'):<20} {entry.get('status', '?'):<11} "
                   f"{entry.get('duration_s', '')}s")


@runs.command("show")
@click.argument("run")
@click.option("--run-dir", type=click.Path(file_okay=False), default=".taskdml/runs", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_errors
def runs_show(run, run_dir, as_json):
    """Show RUN (an id, an id prefix, a path, or 'latest')."""
    from taskdml.runs import find_run

    manifest = find_run(run, run_dir)
    summary = _summary_from_dir(manifest["path"], 0 if manifest.get("status") == "succeeded" else 1)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"run {summary['run_id']} of {manifest.get('pipeline')}: {summary['status']} "
               f"in {summary['duration_s']}s ({summary['run_dir']})")
    click.echo(_results_table(summary["steps"], summary["metrics"]))


@cli.command()
def schema():
    """Print the JSON Schema of the pipeline file format."""
    from taskdml._schema import SCHEMA

    click.echo(json.dumps(SCHEMA, indent=2))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def version(as_json):
    """Print the versions of taskdml and its stack."""
    from taskdml.runner import _versions

    versions = _versions()
    if as_json:
        click.echo(json.dumps(versions, indent=2))
    else:
        for name, value in versions.items():
            click.echo(f"{name:<14} {value}")


def main():
    cli(prog_name="taskdml")
