"""``report.html``: a run, readable after its cluster is gone.

:func:`write_report` draws the run's pictures (:func:`taskdml.runs._pictures.draw_run`) and writes
one self-contained HTML file beside them — inline CSS, the pictures embedded as ``data:``
URIs, no script and no external link — so the file can be mailed, attached to a ticket or
opened offline. Everything in it comes from the run directory's records (``manifest.json``,
``metrics.json``, ``resolved.yaml``, and ``events.jsonl`` for the supersteps of graph steps), so
it can be written again for any recorded run. A graph step's facts (supersteps run, converged or
not, why it stopped, the time per superstep) are shown with its convergence picture. The
pictures and the report are listed in the manifest (``pictures``, ``report``).

The page is built with :class:`string.Template` and :func:`html.escape` (no template
engine: taskdml does not depend on one).
"""

import base64
import html
import json
import string
import warnings
from pathlib import Path

from taskdml.exceptions import ReportWarning
from taskdml.runs._pictures import STATE_COLOURS, draw_run, graph_steps, step_state

__all__ = ["REPORT_NAME", "render_report", "write_report"]

REPORT_NAME = "report.html"
"""The report's file name in the run directory."""


def write_report(run_dir, *, on_error="raise"):
    """Draw the pictures of a run and write its ``report.html``; note both in the manifest.

    Parameters
    ----------
    run_dir : path or RunDirectory
        The run directory. A :class:`taskdml.runs._directory.RunDirectory` (as the runner passes)
        has its manifest updated through it.
    on_error : {"raise", "warn"}, default "raise"
        What a failure to draw or write does: raise, or warn with a :class:`ReportWarning`
        and return ``None`` (the runner's choice: a picture never fails a run).

    Returns
    -------
    dict or None
        ``{"report": "report.html", "pictures": {name: path}}``, paths relative to the run
        directory.

    Examples
    --------
    >>> from taskdml.runs._report import write_report
    >>> written = write_report(".taskdml/runs/20250101-120000-abcdef")  # doctest: +SKIP
    >>> written["report"]  # doctest: +SKIP
    'report.html'
    """
    from taskdml.runs._directory import RunDirectory

    try:
        directory = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory.reopen(run_dir)
        pictures = draw_run(directory.path)
        directory.write_text(REPORT_NAME, render_report(directory.path, pictures))
        directory.update_manifest(pictures=pictures, report=REPORT_NAME)
    except Exception as error:  # matplotlib, a full disk, odd records: the run stands
        if on_error != "warn":
            raise
        path = getattr(run_dir, "path", run_dir)
        warnings.warn(
            f"the pictures and report.html of the run in {path} were not written: "
            f"{type(error).__name__}: {error}. Write them again with "
            f"taskdml.write_report({str(path)!r}).",
            ReportWarning,
            stacklevel=2,
        )
        return None
    return {"report": REPORT_NAME, "pictures": pictures}


def render_report(run_dir, pictures=None):
    """The HTML of a run's report, from its records and the pictures already drawn.

    Parameters
    ----------
    run_dir : path
    pictures : dict, optional
        ``{name: path}`` of the pictures to embed; default the manifest's ``pictures``.

    Returns
    -------
    str
    """
    import yaml

    run_dir = Path(run_dir)
    manifest = _read(run_dir / "manifest.json", {})
    metrics = _read(run_dir / "metrics.json", {})
    resolved = run_dir / "resolved.yaml"
    spec = yaml.safe_load(resolved.read_text(encoding="utf-8")) if resolved.exists() else {}
    status = manifest.get("status", "unknown")
    duration = manifest.get("duration_s")
    pictures = manifest.get("pictures", {}) if pictures is None else pictures
    graphs = graph_steps(run_dir, manifest.get("steps", {}))
    shown = {f"convergence-{name}.png" for name in graphs}
    return _PAGE.substitute(
        title=_e(f"taskdml run {manifest.get('run_id', run_dir.name)}"),
        css=_CSS,
        run_id=_e(manifest.get("run_id", run_dir.name)),
        pipeline=_e(manifest.get("pipeline", "?")),
        status=_e(status),
        status_colour=STATE_COLOURS.get({"succeeded": "completed"}.get(status, status), "#ffffff"),
        facts=_facts(manifest, duration),
        params=_mapping_table((spec or {}).get("params") or {}, "no parameters"),
        steps=_steps_table(manifest.get("steps", {})),
        metrics=_metrics_section(metrics),
        graphs=_graphs_section(run_dir, graphs, pictures),
        pictures=_pictures_section(
            run_dir, {name: path for name, path in pictures.items() if name not in shown}
        ),
        versions=_mapping_table(manifest.get("versions") or {}, "not recorded"),
    )


def _read(path, default):
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def _e(value):
    return html.escape(str(value), quote=True)


def _facts(manifest, duration):
    cluster = manifest.get("cluster") or {}
    rows = {
        "started": manifest.get("created"),
        "finished": manifest.get("finished"),
        "duration": f"{duration:.2f} s" if duration is not None else None,
        "pipeline file": manifest.get("source"),
        "overrides": " ".join(manifest.get("overrides") or []) or None,
        "cluster": ", ".join(f"{k}: {v}" for k, v in cluster.items() if k != "dashboard") or None,
        "dashboard (while the cluster ran)": cluster.get("dashboard"),
        "resumed": ", ".join(f"{r.get('at')} after {r.get('after')}" for r in manifest["resumed"])
        if manifest.get("resumed")
        else None,
        "error": manifest.get("error"),
    }
    return _mapping_table({k: v for k, v in rows.items() if v is not None}, "")


def _mapping_table(mapping, empty):
    if not mapping:
        return f"<p class='muted'>{_e(empty)}</p>"
    rows = "".join(
        f"<tr><th>{_e(key)}</th><td><code>{_e(_plain(value))}</code></td></tr>"
        for key, value in mapping.items()
    )
    return f"<table class='facts'>{rows}</table>"


def _plain(value):
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _steps_table(steps):
    rows = []
    for name, entry in steps.items():
        state = step_state(entry)
        duration = entry.get("duration_s")
        cache = entry.get("cache") or {}
        cached = "yes" if cache.get("hit") else "no"
        why = "; ".join(map(str, cache.get("why") or []))
        note = entry.get("error") or entry.get("reason") or ""
        rows.append(
            "<tr>"
            f"<td><b>{_e(name)}</b></td><td>{_e(entry.get('kind', ''))}</td>"
            f"<td><span class='state' style='background:{STATE_COLOURS.get(state, '#fff')}'>"
            f"{_e(state)}</span></td>"
            f"<td class='num'>{'' if duration is None else f'{duration:.2f} s'}</td>"
            f"<td>{cached}</td><td class='small'>{_e(why)}</td>"
            f"<td class='small'>{_e(note)}</td>"
            "</tr>"
        )
    return (
        "<table class='grid'><tr><th>step</th><th>kind</th><th>state</th><th>time</th>"
        "<th>cached</th><th>why (cache)</th><th>error or reason</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _metrics_section(metrics):
    if not metrics:
        return "<p class='muted'>no evaluate step finished</p>"
    parts = []
    for step, values in metrics.items():
        parts.append(f"<h3>{_e(step)}</h3>")
        if all(isinstance(value, dict) for value in values.values()):  # after a foreach
            names = list(dict.fromkeys(n for row in values.values() for n in row))
            head = "".join(f"<th>{_e(n)}</th>" for n in names)
            body = "".join(
                f"<tr><td>{_e(item)}</td>"
                + "".join(f"<td class='num'>{_number(row.get(n))}</td>" for n in names)
                + "</tr>"
                for item, row in values.items()
            )
            parts.append(f"<table class='grid'><tr><th>item</th>{head}</tr>{body}</table>")
        else:
            body = "".join(
                f"<tr><td>{_e(n)}</td><td class='num'>{_number(v)}</td></tr>"
                for n, v in values.items()
            )
            parts.append(
                f"<table class='grid'><tr><th>metric</th><th>value</th></tr>{body}</table>"
            )
    return "".join(parts)


def _number(value):
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else _e(value)


def _pictures_section(run_dir, pictures):
    figures = [_figure(run_dir, name, path) for name, path in pictures.items()]
    return "".join(figures) or "<p class='muted'>no pictures</p>"


def _figure(run_dir, name, path):
    file = run_dir / path
    if not file.exists():
        return ""
    data = base64.b64encode(file.read_bytes()).decode("ascii")
    return (
        f"<figure><img alt='{_e(name)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{_e(path)}</figcaption></figure>"
    )


def _graphs_section(run_dir, graphs, pictures):
    """Per graph step: its supersteps, whether it converged and why it stopped, the time per
    superstep, and its convergence picture."""
    if not graphs:
        return ""
    parts = ["<h2>Graph steps</h2>"]
    for name, facts in graphs.items():
        rows = [row for item in facts["events"].values() for row in item]
        seconds = [row["seconds"] for row in rows if isinstance(row.get("seconds"), (int, float))]
        exchange = [row["exchange_s"] for row in rows if isinstance(row.get("exchange_s"), float)]
        last = rows[-1].get(facts["measure"]) if facts["measure"] and rows else None
        converged = {True: "yes", False: "no", None: "not tested"}[facts["converged"]]
        table = {
            "supersteps run": facts["supersteps"],
            "converged": converged,
            "why it stopped": facts["why"],
            f"last {facts['label']}": None if last is None else f"{last:.4g}",
            "tolerance": None if facts["tol"] is None else f"{facts['tol']:g}",
            "max_iter": facts["max_iter"],
            "seconds per superstep": f"{sum(seconds) / len(seconds):.4f} s mean, "
            f"{max(seconds):.4f} s most"
            if seconds
            else None,
            "of which exchanging": f"{sum(exchange) / max(sum(seconds), 1e-12):.0%}"
            if exchange and seconds
            else None,
            "items": ", ".join(map(str, facts["events"])) if len(facts["events"]) > 1 else None,
        }
        rows_html = "".join(
            f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>"
            for key, value in table.items()
            if value is not None
        )
        picture = f"convergence-{name}.png"
        parts.append(
            f"<h3 id='graph-{_e(name)}'>{_e(name)}</h3>"
            f"<table class='facts graph' data-step='{_e(name)}'>{rows_html}</table>"
            + (_figure(run_dir, picture, pictures[picture]) if picture in pictures else "")
        )
    return "".join(parts)


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #212529;
       margin: 2em auto; max-width: 1200px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
     border-bottom: 1px solid #dee2e6; padding-bottom: .2em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { padding: .25em .7em; text-align: left; vertical-align: top; }
table.grid th, table.grid td { border: 1px solid #dee2e6; }
table.grid th { background: #f1f3f5; }
table.facts th { color: #495057; font-weight: 600; padding-left: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.small { font-size: .85em; color: #495057; max-width: 28em; }
.state { padding: .05em .5em; border-radius: .6em; border: 1px solid #adb5bd; }
.muted { color: #6c757d; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #dee2e6; }
figcaption { font-size: .85em; color: #6c757d; }
code { font-size: .9em; }
"""

_PAGE = string.Template(
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>$title</title>
<style>$css</style>
</head>
<body>
<h1>Run <code>$run_id</code> of <code>$pipeline</code>
  <span class="state" style="background:$status_colour">$status</span></h1>
$facts
<h2>Parameters</h2>
$params
<h2>Steps</h2>
$steps
<h2>Metrics</h2>
$metrics
$graphs
<h2>Pictures</h2>
$pictures
<h2>Versions</h2>
$versions
</body>
</html>
"""
)
