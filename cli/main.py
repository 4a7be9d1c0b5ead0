"""The ``taskdml`` command: parse, call one library function, print.

Heavy imports (dask, scikit-learn) happen inside command bodies so ``--help`` stays fast.
Errors the user can fix print one message and exit with their code from ``EXIT_CODES``;
``--verbose`` or ``TASKDML_FULL_ERROR=1`` adds the traceback.
"""

import json
import os
import sys
import traceback

import click

# The one table of exit codes: `--help` prints it and README quotes the same sentence (a test
# compares them, and compares each exception's exit_code with it).
EXIT_CODES = (
    (0, "success"),
    (1, "a step failed (with -m: in any run)"),
    (2, "usage error"),
    (3, "invalid pipeline"),
    (4, "cluster unavailable"),
    (5, "run not found"),
    (130, "interrupted"),
)
EXIT_CODES_TEXT = "Exit codes: " + " · ".join(f"{code} {text}" for code, text in EXIT_CODES) + "."


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


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "TASKDML"},
    epilog=EXIT_CODES_TEXT,
)
@click.version_option(package_name="taskdml", prog_name="taskdml")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks of errors.")
def cli(verbose):
    """Run machine-learning pipelines on Dask."""


def _run_dir_option(function):
    """``--run-dir`` of every command that reads or writes runs.

    The default folder is the library's (``taskdml.runs._directory.DEFAULT_ROOT``, used when the
    option is absent); it is only named here, in the help, and a test checks that the two agree.
    """
    return click.option(
        "--run-dir",
        type=click.Path(file_okay=False),
        help="Folder of the run directories [default: .taskdml/runs].",
    )(function)


def _cluster_options(function):
    """Where a run runs: ``--scheduler``, ``--workers``."""
    function = click.option(
        "--workers", type=click.IntRange(min=1), help="Workers of the embedded LocalCluster."
    )(function)
    return click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Use a running scheduler (tcp://127.0.0.1:8786, or tls://... with cluster.security).",
    )(function)


def _watch_options(function):
    """Watching a run: ``--events FILE``, ``--report``."""
    function = click.option(
        "--report",
        is_flag=True,
        help="Save Dask's performance report as performance-report.html in the run directory.",
    )(function)
    return click.option(
        "--events",
        type=click.Path(dir_okay=False, writable=True),
        help="Append the run's events to FILE as JSON lines, as they happen (the run "
        "directory's events.jsonl has them too).",
    )(function)


def _cache_options(function):
    """The step cache: ``--cache-dir``, ``--no-cache``, ``--explain``.

    Like ``--run-dir``, the default folder is the library's
    (``taskdml.cache._store.DEFAULT_CACHE``), named here only in the help.
    """
    function = click.option(
        "--explain",
        is_flag=True,
        help="Say why each step ran or was reused (with --dry-run: which would be).",
    )(function)
    function = click.option(
        "--no-cache", is_flag=True, help="Neither reuse nor store step outputs."
    )(function)
    return _cache_dir_option(function)


def _cache_dir_option(function):
    """``--cache-dir`` of every command that uses the step cache."""
    return click.option(
        "--cache-dir",
        metavar="PATH_OR_URL",
        envvar="TASKDML_CACHE_DIR",
        help="The step cache: a folder or an fsspec URL the workers reach too "
        "[default: .taskdml/cache; env TASKDML_CACHE_DIR].",
    )(function)


def _track_option(function):
    """``--track URI``: log the run to MLflow (``taskdml[tracking]``)."""
    return click.option(
        "--track",
        metavar="URI",
        help="Log the run to MLflow: a folder (mlruns), sqlite:///FILE or http://HOST:PORT of "
        "a tracking server; overrides the file's tracking.mlflow.",
    )(function)


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("pipeline_file", type=click.Path(dir_okay=False), required=False)
@click.argument("overrides", nargs=-1)
@_cluster_options
@click.option(
    "--cluster",
    "cluster_class",
    metavar="MODULE:CLASS",
    help="Start this cluster manager (dask_jobqueue:SLURMCluster): sets cluster.spec.class; "
    "give its kwargs, scale or adapt in the file or as overrides like "
    "+cluster.spec.kwargs.cores=4.",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Trust the file like code: it may name deserialisers and code loaders "
    "(sets imports.trust).",
)
@_run_dir_option
@_cache_options
@click.option(
    "--resume",
    metavar="RUN",
    help="Continue RUN (an id, a path or 'latest') instead of starting one: the same as "
    "'taskdml resume RUN'.",
)
@_watch_options
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option(
    "-m",
    "--multirun",
    is_flag=True,
    help="Sweep: one run per combination of the OVERRIDES in Hydra's sweep grammar "
    "(alpha=0.1,1 n=range(1,4) steps.fit.parallel.mode=glob(*)), one after the other on one "
    "cluster, then their comparison, saved in RUN_DIR/sweeps/.",
)
@click.option("--fail-fast", is_flag=True, help="With -m: stop at the first run that fails.")
@_track_option
@_errors
def run(
    pipeline_file,
    overrides,
    scheduler,
    workers,
    cluster_class,
    trust,
    run_dir,
    cache_dir,
    no_cache,
    explain,
    resume,
    events,
    report,
    dry_run,
    as_json,
    multirun,
    fail_fast,
    track,
):
    """Run PIPELINE_FILE, with OVERRIDES like seed=3, a.b=1, +new=1, ~gone.

    Steps whose outputs are in the step cache (same spec, code, inputs and files) are reused,
    not run again; a step that fails or is interrupted can be continued with 'taskdml resume'.
    With -m, OVERRIDES like alpha=0.1,1 sweep: one run per combination, steps that do not
    depend on the swept keys computed once; exit 1 when any run failed.
    """
    from taskdml import load_pipeline

    if fail_fast and not multirun:
        raise click.UsageError("--fail-fast is for sweeps: add -m (--multirun).")
    if multirun:
        if resume is not None:
            raise click.UsageError(
                "-m starts a sweep of new runs; resume one of its runs with --resume RUN alone."
            )
        if pipeline_file is None:
            raise click.MissingParameter(param_hint="'PIPELINE_FILE'", param_type="argument")
        if cluster_class:
            overrides = (f"++cluster.spec.class={cluster_class}", *overrides)
        if trust:
            overrides = ("++imports.trust=true", *overrides)
        _sweep(
            pipeline_file,
            overrides,
            scheduler=scheduler,
            workers=workers,
            run_dir=run_dir,
            cache=None if no_cache else _cache(cache_dir),
            fail_fast=fail_fast,
            dry_run=dry_run,
            as_json=as_json,
            events=events,
            report=report,
            explain=explain,
            track=track,
        )
        return
    if resume is not None:
        if pipeline_file is not None:
            raise click.UsageError("give a PIPELINE_FILE or --resume RUN, not both.")
        watch = {"events": events, "report": report, "track": track}
        _resume(resume, scheduler, workers, run_dir, cache_dir, no_cache, explain, as_json, watch)
        return
    if pipeline_file is None:
        raise click.MissingParameter(
            param_hint="'PIPELINE_FILE' (or --resume RUN)", param_type="argument"
        )
    if cluster_class:  # the same as an override: the file's cluster block names the class
        overrides = (f"++cluster.spec.class={cluster_class}", *overrides)
    if trust:
        overrides = ("++imports.trust=true", *overrides)
    pipeline = load_pipeline(pipeline_file, overrides=overrides)
    if pipeline.trust:
        click.echo(
            f"trusting {pipeline_file} like code (imports.trust): it may run code it does not "
            "show, such as pickled objects it loads.",
            err=True,
        )
    cache = None if no_cache else _cache(cache_dir)
    if dry_run:
        _dry_run(pipeline, scheduler, workers, cache if explain else None, as_json)
        return
    _run_and_report(
        lambda progress: _library_run(
            pipeline,
            run_root=run_dir,
            scheduler=scheduler,
            n_workers=workers,
            on_event=progress,
            cache=cache,
            performance_report=report,
            track=track,
        ),
        pipeline,
        run_dir=run_dir,
        cache_dir=cache_dir,
        explain=explain,
        as_json=as_json,
        events=events,
    )


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("run_id", metavar="RUN")
@_cluster_options
@_run_dir_option
@_cache_options
@_watch_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@_track_option
@_errors
def resume(
    run_id,
    scheduler,
    workers,
    run_dir,
    cache_dir,
    no_cache,
    explain,
    events,
    report,
    as_json,
    track,
):
    """Continue RUN (an id, an id prefix, a path, or 'latest') after a failure or a crash.

    Its completed steps are reused from the step cache, a training that checkpointed
    continues from its last checkpoint, and the rest runs; the run directory is the same (and
    the MLflow run, when it was tracked).
    """
    watch = {"events": events, "report": report, "track": track}
    _resume(run_id, scheduler, workers, run_dir, cache_dir, no_cache, explain, as_json, watch)


def _resume(run_id, scheduler, workers, run_dir, cache_dir, no_cache, explain, as_json, watch):
    from taskdml.runner._runner import recorded_pipeline

    pipeline, folder = recorded_pipeline(run_id, run_dir)
    click.echo(f"resuming run {folder.name}", err=True)
    _run_and_report(
        lambda progress: _library_run(
            pipeline,
            resume=folder,
            scheduler=scheduler,
            n_workers=workers,
            on_event=progress,
            cache=None if no_cache else _cache(cache_dir),
            performance_report=watch["report"],
            track=watch.get("track"),
        ),
        pipeline,
        run_dir=run_dir,
        cache_dir=cache_dir,
        explain=explain,
        as_json=as_json,
        events=watch["events"],
    )


def _sweep(path, overrides, *, run_dir, cache, dry_run, as_json, events, explain, **options):
    """``run -m``: every combination run by ``run_sweep``, then the comparison; exit 1 when
    any run failed."""
    from cli.progress import Progress
    from taskdml.pipeline._spec import load_pipeline, parse_sweep
    from taskdml.runner import run_sweep

    if dry_run:
        sweep = parse_sweep(overrides)
        combinations = [sweep.overrides(i) for i in range(len(sweep.combinations))]
        for items in combinations:
            load_pipeline(path, items)  # each one valid, or the error names it
        if as_json:
            document = {"keys": list(sweep.keys), "runs": [list(c) for c in combinations]}
            click.echo(json.dumps({**document, "dry_run": True}, indent=2))
            return
        click.echo(f"would run {len(combinations)} runs (dry run: nothing ran):")
        for i, items in enumerate(combinations, 1):
            click.echo(f"  {i}. {' '.join(items)}")
        return
    progress = {}

    def on_run(index, total, values, pipeline):
        shown = " ".join(f"{key}={_setting(value)}" for key, value in values.items())
        click.echo(f"\nsweep run {index + 1}/{total}: {shown}", err=True)
        order = [step.name for step in pipeline.ordered_steps()]
        progress[index] = Progress(order, live=False if as_json else None, events=events)
        return progress[index]

    try:
        result = run_sweep(
            path,
            overrides,
            run_root=run_dir,
            scheduler=options["scheduler"],
            n_workers=options["workers"],
            cache=cache,
            fail_fast=options["fail_fast"],
            on_run=on_run,
            performance_report=options["report"],
            track=options["track"],
        )
    except KeyboardInterrupt:
        current = progress[max(progress)].run_id if progress else None
        click.echo(
            "\ninterrupted; the sweep's finished runs are kept and compared under "
            f"{run_dir or '.taskdml/runs'}/sweeps/.\n"
            f"continue the interrupted run with: {_resume_command(current, run_dir, None)}",
            err=True,
        )
        sys.exit(130)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "sweep_id": result.sweep_id,
                    "sweep_dir": str(result.path),
                    "keys": list(result.keys),
                    "runs": result.runs,
                    "comparison": result.comparison,
                    "exit_code": 1 if result.failed else 0,
                },
                indent=2,
                default=str,
            )
        )
    else:
        if result.comparison:
            click.echo("\n" + _comparison_text(result.comparison))
        if explain:
            from taskdml.runs._directory import run_summary

            for run in result.runs:
                if run["run_dir"]:
                    steps = run_summary(run["run_dir"])["steps"]
                    click.echo(f"\nrun {run['run_id']}:" + _explanation(steps, list(steps)))
        click.echo(
            f"\nsweep {result.sweep_id}: {len(result.runs) - len(result.failed)} of "
            f"{len(result.runs)} runs succeeded; compared in {result.path}"
        )
    if result.failed:
        for run in result.failed:
            what = run["error"] or "not run (--fail-fast stopped the sweep)"
            click.echo(f"  {' '.join(run['overrides'])}: {what}", err=True)
        sys.exit(1)


def _library_run(pipeline, **options):
    from taskdml import run_pipeline

    return run_pipeline(pipeline, **options)


def _cache(cache_dir):
    from taskdml import Cache

    return Cache(cache_dir)


def _run_and_report(start, pipeline, *, run_dir, cache_dir, explain, as_json, events=None):
    """Run with live progress; print the results, or what failed and how to resume."""
    from cli.progress import Progress
    from taskdml.exceptions import StepFailed
    from taskdml.runs._directory import run_summary

    order = [step.name for step in pipeline.ordered_steps()]
    progress = Progress(order, live=False if as_json else None, events=events)
    try:
        result = start(progress)
    except StepFailed as error:
        if as_json and error.run_dir is not None:
            click.echo(json.dumps(run_summary(error.run_dir, exit_code=error.exit_code), indent=2))
        if explain and error.run_dir is not None:
            click.echo(_explanation(run_summary(error.run_dir)["steps"], order), err=True)
        if error.run_dir is not None:
            for name, entry in run_summary(error.run_dir)["steps"].items():
                for frame in entry.get("where", []):
                    click.echo(f"  in your code ({name}): {frame.strip()}", err=True)
        click.echo(
            f"\nrun failed; what finished is kept in {error.run_dir}\n"
            f"see it with: taskdml runs show {error.run_dir}\n"
            f"continue it with: {_resume_command(progress.run_id, run_dir, cache_dir)}",
            err=True,
        )
        raise
    except KeyboardInterrupt:
        click.echo(
            "\ninterrupted; the run directory keeps what finished.\n"
            f"continue it with: {_resume_command(progress.run_id, run_dir, cache_dir)}",
            err=True,
        )
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(run_summary(result.path, exit_code=0), indent=2))
        return
    steps = {name: result.steps[name] for name in order if name in result.steps}
    click.echo(_results_table(steps, result.metrics))
    if explain:
        click.echo(_explanation(steps, order))
    click.echo(f"\nrun {result.run_id} succeeded; recorded in {result.path}")


def _resume_command(run_id, run_dir, cache_dir):
    command = f"taskdml resume {run_id or 'latest'}"
    if run_dir:
        command += f" --run-dir {run_dir}"
    if cache_dir:
        command += f" --cache-dir {cache_dir}"
    return command


def _explanation(steps, order, planned=False):
    """Why each step ran or was reused (or, *planned*, would be), from ``cache`` entries."""
    lines = ["", f"why each step {'would run or be' if planned else 'ran or was'} reused:"]
    for name in order:
        cache = steps.get(name, {}).get("cache")
        if cache is None:
            continue
        verb = {(True, True): "reuse", (True, False): "run", (False, True): "reused"}.get(
            (planned, bool(cache.get("hit"))), "ran"
        )
        lines.append(f"  {name:<16} {verb:<7} {'; '.join(cache.get('why', []))}")
        if cache.get("not_stored"):
            lines.append(f"  {'':<16} {'':<7} not stored: {cache['not_stored']}")
    return "\n".join(lines)


def _dry_run(pipeline, scheduler, workers, cache, as_json):
    from taskdml.pipeline._render import render
    from taskdml.runner import plan_run

    plan = plan_run(pipeline, cache=cache, scheduler=scheduler, n_workers=workers)
    would = {planned.name: {"cache": planned.cache_record()} for planned in plan.steps}
    if as_json:
        document = {
            "pipeline": pipeline.name,
            "plan": json.loads(render(pipeline, "json")),
            "cluster": plan.cluster.description,
            "dry_run": True,
        }
        if cache is not None:
            document["cache"] = would
        click.echo(json.dumps(document, indent=2))
        return
    click.echo(
        render(pipeline) + f"\n\nwould run on: {plan.cluster.description} (dry run: nothing ran)"
    )
    if cache is not None:
        click.echo(_explanation(would, list(would), planned=True))


def _results_table(steps, metrics):
    from cli.progress import describe

    lines = ["", f"{'step':<17} {'state':<9} {'time':>8}  result"]
    for name, entry in steps.items():
        duration = entry.get("duration_s")
        time = f"{duration:7.2f}s" if duration is not None else ""
        state = "cached" if entry.get("cache", {}).get("hit") else entry.get("state", "")
        result = (
            describe(entry.get("summary"))
            if entry.get("state") == "completed"
            else entry.get("error", entry.get("reason", ""))
        )
        lines.append(f"{name:<17} {state:<9} {time:>8}  {result}")
    chosen = {name: entry["parallel"] for name, entry in steps.items() if "parallel" in entry}
    for name, choice in chosen.items():
        lines += ["", f"parallelism of {name}: {choice['mode']} (auto: {choice['reason']})"]
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
    lines = [
        f"{indent}{'item':<{width}}  " + "  ".join(f"{name:>{max(len(name), 8)}}" for name in names)
    ]
    for label, row in values.items():
        lines.append(
            f"{indent}{label:<{width}}  "
            + "  ".join(f"{row[name]:>{max(len(name), 8)}.4f}" for name in names)
        )
    return lines


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@_errors
def validate(pipeline_file, overrides):
    """Check PIPELINE_FILE (with OVERRIDES) without running anything."""
    from taskdml import load_pipeline

    pipeline = load_pipeline(pipeline_file, overrides=overrides)
    click.echo(
        f"{pipeline_file}: valid pipeline {pipeline.name!r} with {len(pipeline.steps)} steps."
    )


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot", "json"]),
    default="text",
    show_default=True,
)
@_errors
def show(pipeline_file, overrides, fmt):
    """Print the DAG of PIPELINE_FILE."""
    from taskdml import load_pipeline
    from taskdml.pipeline._render import render

    click.echo(render(load_pipeline(pipeline_file, overrides=overrides), fmt))


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option(
    "--package", default="myproject", show_default=True, help="Name of the package of your code."
)
@_errors
def init(directory, package):
    """Write a new project into DIRECTORY: a pipeline, a package of your code, its tests."""
    from taskdml import init_project

    written = init_project(directory, package)
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(
        f"\nrun it with:  cd {directory} && taskdml run pipeline.yaml\n"
        f"test it with: cd {directory} && python -m pytest"
    )


@cli.group()
def runs():
    """Inspect recorded runs."""


@runs.command("list")
@_run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON on stdout.")
def runs_list(run_dir, as_json):
    """List the runs under --run-dir, oldest first."""
    from taskdml.runs._directory import DEFAULT_ROOT, list_runs

    entries = list_runs(run_dir)
    if as_json:
        keys = ("run_id", "pipeline", "status", "duration_s", "path")
        click.echo(json.dumps([{k: e.get(k) for k in keys} for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"no runs under {run_dir or DEFAULT_ROOT}")
    for entry in entries:
        click.echo(
            f"{entry['run_id']}  {entry.get('pipeline', '?'):<20} "
            f"{entry.get('status', '?'):<11} {entry.get('duration_s', '')}s"
        )


@runs.command("show", epilog=EXIT_CODES_TEXT)
@click.argument("run")
@_run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON on stdout.")
@_errors
def runs_show(run, run_dir, as_json):
    """Show RUN (an id, an id prefix, a path, or 'latest')."""
    from taskdml.runs._directory import run_summary

    summary = run_summary(run, run_dir)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(
        f"run {summary['run_id']} of {summary['pipeline']}: {summary['status']} "
        f"in {summary['duration_s']}s ({summary['run_dir']})"
    )
    click.echo(_results_table(summary["steps"], summary["metrics"]))
    if summary["report"] or summary["pictures"]:
        click.echo("")
    if summary["report"]:
        click.echo(f"report:  {summary['report']}")
    for path in summary["pictures"].values():
        click.echo(f"picture: {path}")


@runs.command("compare", epilog=EXIT_CODES_TEXT)
@click.argument("runs_", metavar="RUN RUN...", nargs=-1, required=True)
@_run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON on stdout.")
@_errors
def runs_compare(runs_, run_dir, as_json):
    """Show the parameters and metrics of RUNs side by side, one column per run.

    Every parameter of the pipelines' params block is shown (* marks those that differ);
    of the steps' with, parallel and foreach settings, only those that differ.
    """
    from taskdml.runs._directory import compare_runs

    table = compare_runs(runs_, run_dir)
    if as_json:
        click.echo(json.dumps(table, indent=2, default=str))
        return
    click.echo(_comparison_text(table))


def _comparison_text(table):
    runs = table["runs"]
    header = ["", *(run["run_id"] for run in runs)]
    rows = [
        ["pipeline", *(str(run["pipeline"]) for run in runs)],
        ["status", *(str(run["status"]) for run in runs)],
        ["duration", *(_cell(run["duration_s"], "s") for run in runs)],
    ]
    sections = [("", rows)]
    params = [
        [("* " if name in table["differ"] else "  ") + name, *map(_setting, values)]
        for name, values in table["params"].items()
    ]
    sections.append(("parameters (* differs)", params))
    settings = [[f"  {name}", *map(_setting, values)] for name, values in table["settings"].items()]
    sections.append(("step settings that differ", settings))
    metrics = [[f"  {name}", *map(_cell, values)] for name, values in table["metrics"].items()]
    sections.append(("metrics", metrics))
    every = [header] + [row for _, section in sections for row in section]
    widths = [max(len(row[i]) for row in every) for i in range(len(header))]

    def line(row):
        return "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    lines = [line(header)]
    for title, section in sections:
        if title:
            lines += ["", title + ":" if section else f"{title}: none"]
        lines += [line(row) for row in section]
    return "\n".join(lines)


def _cell(value, unit=""):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if not unit else f"{value:.2f}{unit}"
    return _setting(value)


def _setting(value):
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value, default=str)


@cli.group()
def cache():
    """Inspect and prune the step cache."""


@cache.command("list")
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON on stdout.")
def cache_list(cache_dir, as_json):
    """List the cached step outputs, oldest first."""
    entries = _cache(cache_dir).entries()
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not entries:
        click.echo(f"no cached steps in {_cache(cache_dir).url}")
        return
    click.echo(f"{'key':<12} {'pipeline':<18} {'step':<16} {'size':>9}  created  run")
    for entry in entries:
        flag = "" if entry["valid"] else "  (not signed by this cache: gc removes it)"
        click.echo(
            f"{entry['key'][:12]:<12} {entry['pipeline'] or '?':<18} {entry['step'] or '?':<16} "
            f"{_size(entry['bytes']):>9}  {entry['created']}  {entry['run_id']}{flag}"
        )
    total = sum(entry["bytes"] for entry in entries)
    click.echo(f"{len(entries)} entries, {_size(total)} in {_cache(cache_dir).url}")


@cache.command("clear")
@_cache_dir_option
@click.option("--pipeline", help="Only the entries of this pipeline.")
@click.option("--step", help="Only the entries of this step (with --pipeline).")
def cache_clear(cache_dir, pipeline, step):
    """Remove cached step outputs: all of them, or those of one pipeline or step."""
    removed = _cache(cache_dir).clear(pipeline=pipeline, step=step)
    click.echo(f"removed {len(removed)} entries ({_size(sum(e['bytes'] for e in removed))})")


@cache.command("gc")
@_cache_dir_option
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    metavar="DAYS",
    help="Remove entries not used for DAYS days.",
)
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Keep at most SIZE (like 10GB or 500MiB), removing the least recently used first.",
)
def cache_gc(cache_dir, older_than, max_size):
    """Remove what crashes left behind, finished steps' checkpoints, entries this cache did
    not sign, and (with the options) old or least recently used entries."""
    removed = _cache(cache_dir).gc(
        older_than_s=None if older_than is None else older_than * 86400,
        max_bytes=None if max_size is None else _parse_size(max_size),
    )
    click.echo(f"removed {len(removed)} entries ({_size(sum(e['bytes'] for e in removed))})")


def _size(n_bytes):
    from dask.utils import format_bytes

    return format_bytes(n_bytes)


def _parse_size(text):
    from dask.utils import parse_bytes

    try:
        return parse_bytes(text)
    except (ValueError, TypeError):
        raise click.BadParameter(
            f"{text!r} is not a size like 10GB or 500MiB", param_hint="--max-size"
        ) from None


@cli.command(epilog=EXIT_CODES_TEXT)
@click.argument("run_id", metavar="RUN")
@click.argument("data", type=click.Path(exists=True))
@click.option(
    "--out",
    required=True,
    type=click.Path(),
    help="Where the workers write the predictions: a .parquet folder, a .zarr store or a "
    ".csv file (replaced if it exists).",
)
@click.option("--step", help="The step whose saved model to apply [default: the run's only one].")
@click.option(
    "--method",
    type=click.Choice(["predict", "predict_proba", "decision_function", "transform"]),
    default="predict",
    show_default=True,
)
@click.option(
    "--trust",
    is_flag=True,
    help="Load a model the run saved with joblib (a pickle, which runs code).",
)
@_cluster_options
@_run_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON on stdout.")
@_errors
def predict(run_id, data, out, step, method, trust, scheduler, workers, run_dir, as_json):
    """Apply RUN's saved model to DATA (a .zarr store, .parquet or .csv), chunk by chunk.

    RUN is an id, an id prefix, a path or 'latest'. The workers read DATA, predict and write
    each chunk to --out; no row passes through this process.
    """
    from taskdml.runs._predict import predict_run

    written = predict_run(
        run_id,
        data,
        out,
        step=step,
        method=method,
        root=run_dir,
        trust=trust,
        scheduler=scheduler,
        n_workers=workers,
    )
    if as_json:
        click.echo(json.dumps(written, indent=2))
        return
    click.echo(
        f"{written['rows']} rows of {written['method']} by {written['step']} written to "
        f"{written['path']} ({written['format']}, {written['parts']} parts)"
    )


@cli.command()
def schema():
    """Print the JSON Schema of the pipeline file format."""
    from taskdml import schema

    click.echo(json.dumps(schema(), indent=2))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the versions as JSON on stdout.")
def version(as_json):
    """Print the versions of taskdml and its stack."""
    from taskdml import versions

    found = versions()
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        for name, value in found.items():
            click.echo(f"{name:<14} {value}")


def main():
    """The ``taskdml`` console script."""
    cli(prog_name="taskdml")
