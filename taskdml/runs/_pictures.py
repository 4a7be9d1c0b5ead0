"""Pictures of a run, drawn from its run directory's records alone.

Every picture reads ``manifest.json`` (and ``resolved.yaml`` for the DAG's edges), never a
live object, so the pictures of a finished, failed or interrupted run can be drawn again
after its cluster is gone: :func:`draw_run` draws them all. The runner calls
:func:`taskdml.runs._report.write_report`, which calls :func:`draw_run`, when a run ends.

- ``training-<step>.png``: per ``fit`` step that trained with the engine, its
  ``training.history``: validation score and training loss per epoch where the history holds
  them (else each epoch's duration), one line per ``foreach`` item, and the sync period
  (``sync_every``) on a second axis.
- ``evaluation-<step>.png``: per ``evaluate`` step, the confusion matrix of a classifier or
  the residuals of a regressor against its predictions (the step's ``diagnostics``).
- ``dag.png``: the steps in layers by topological depth, coloured by their final state, with
  their durations.

- ``convergence-<step>.png``: per step that ran graph supersteps (:mod:`taskdml.graph`), its
  ``superstep`` events from ``events.jsonl``: the measured change (L1 change, vertices
  changed, training RMSE or loss: what the algorithm's events carry) per superstep, on a log
  scale where it spans decades, with the tolerance line, and the seconds of each superstep
  (the part spent exchanging with the other partitions shaded).

Search steps draw their own ``trials-<step>.png`` while they run
(:func:`taskdml.model_selection.plot_trials`).

Figures are built with matplotlib's object API (:class:`matplotlib.figure.Figure`), never
pyplot, so the user's backend and pyplot's figures are left alone.
"""

import json
import textwrap
from pathlib import Path

__all__ = [
    "STATE_COLOURS",
    "dag_edges",
    "draw_convergence",
    "draw_dag",
    "draw_evaluation",
    "draw_run",
    "draw_training",
    "graph_steps",
    "step_state",
]

STATE_COLOURS = {
    "completed": "#8fd19e",
    "cached": "#9ec5fe",
    "failed": "#f1959b",
    "skipped": "#dee2e6",
    "interrupted": "#ffda6a",
    "running": "#ffda6a",
    "pending": "#f8f9fa",
}
"""Fill colour of a step's box in ``dag.png`` (and of its state in ``report.html``)."""


def step_state(entry):
    """A step's state as shown: ``cached`` for a completed step read from the cache.

    Parameters
    ----------
    entry : dict
        The step's manifest entry.

    Returns
    -------
    str
    """
    state = entry.get("state", "pending")
    return "cached" if state == "completed" and entry.get("cache", {}).get("hit") else state


def draw_run(run_dir):
    """Draw every picture of the run in *run_dir* into it.

    Parameters
    ----------
    run_dir : path
        A run directory (with its ``manifest.json``).

    Returns
    -------
    dict
        ``{file name: path relative to run_dir}`` of the pictures drawn now and the search
        pictures already there, DAG first.
    """
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    steps = manifest.get("steps", {})
    pictures = {}
    graphs = graph_steps(run_dir, steps)
    _save(draw_dag, run_dir, "dag.png", pictures, steps, dag_edges(run_dir, steps))
    for name, entry in steps.items():
        training = entry.get("training")
        if entry.get("kind") == "fit" and training and _has_history(training):
            _save(draw_training, run_dir, f"training-{name}.png", pictures, name, training)
        if entry.get("kind") == "evaluate" and entry.get("diagnostics"):
            _save(
                draw_evaluation,
                run_dir,
                f"evaluation-{name}.png",
                pictures,
                name,
                entry["diagnostics"],
            )
        plot = entry.get("artifacts", {}).get("plot")
        if graphs.get(name, {}).get("events"):  # supersteps that ran in this run
            _save(draw_convergence, run_dir, f"convergence-{name}.png", pictures, graphs[name])
        if plot and (run_dir / plot["path"]).exists():
            pictures[Path(plot["path"]).name] = plot["path"]
    return pictures


def _save(draw, run_dir, name, pictures, *args):
    figure = draw(*args)
    temporary = run_dir / f".{name}.tmp.png"
    figure.savefig(temporary, dpi=110)
    temporary.replace(run_dir / name)
    pictures[name] = name


def dag_edges(run_dir, steps):
    """The DAG's edges, read from the run's ``resolved.yaml``: ``{step: [its inputs' steps]}``.

    Parameters
    ----------
    run_dir : path
    steps : iterable of str
        The steps of the manifest; edges to steps not in it are left out.

    Returns
    -------
    dict
    """
    import yaml

    path = Path(run_dir) / "resolved.yaml"
    spec = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    edges = {}
    for name in steps:
        inputs = ((spec or {}).get("steps", {}).get(name) or {}).get("inputs") or {}
        sources = [
            ref.partition(".")[0]
            for refs in inputs.values()
            for ref in ([refs] if isinstance(refs, str) else refs)
        ]
        edges[name] = [source for source in dict.fromkeys(sources) if source in steps]
    return edges


def _depths(edges):
    """Each step's layer: 0 without inputs, else one more than its deepest input."""
    depth = {}

    def of(name, seen=()):
        if name not in depth:
            parents = [p for p in edges.get(name, []) if p not in seen]
            depth[name] = 1 + max((of(p, (*seen, name)) for p in parents), default=-1)
        return depth[name]

    for name in edges:
        of(name)
    return depth


def draw_dag(steps, edges):
    """The pipeline DAG, steps coloured by state and labelled with their durations.

    A layered layout: a step's layer is its topological depth, an edge that skips layers
    runs through a narrow slot of its own in each layer between (so it crosses no box), and
    each layer is ordered by the mean position of its inputs (fewer crossings).

    Parameters
    ----------
    steps : dict
        ``{step: manifest entry}`` (``kind``, ``state``, ``duration_s``, ``cache``).
    edges : dict
        ``{step: [steps it reads from]}`` (:func:`dag_edges`).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from taskdml.runs._pictures import draw_dag
    >>> figure = draw_dag(
    ...     {"data": {"kind": "call", "state": "completed", "duration_s": 0.5},
    ...      "model": {"kind": "fit", "state": "failed", "duration_s": 2.0}},
    ...     {"data": [], "model": ["data"]})
    >>> figure.axes[0].get_title()
    'pipeline DAG: 2 steps'
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch, Patch

    box_w, box_h, slot_w, gap_x, gap_y = 2.6, 0.9, 0.3, 0.4, 0.8
    centre, routes, n_layers, width = _layout(steps, edges, box_w, slot_w, gap_x)

    def top(level):
        return -level * (box_h + gap_y) + box_h

    figure = Figure(figsize=(0.8 * width + 2.2, max(2.5, 0.8 * n_layers * (box_h + gap_y) + 0.8)))
    axis = figure.subplots()
    for points in routes:  # (x, level) of the input, of each slot between, of the step
        (x0, level0), *between, (x1, level1) = points
        xs, ys = [x0], [top(level0) - box_h]
        for x, level in between:
            xs += [x, x]
            ys += [top(level), top(level) - box_h]
        xs.append(x1)
        ys.append(top(level1))
        axis.plot(xs[:-1], ys[:-1], color="#555555", linewidth=1, zorder=1)
        axis.annotate(
            "",
            xy=(xs[-1], ys[-1]),
            xytext=(xs[-2], ys[-2]),
            zorder=1,
            arrowprops={
                "arrowstyle": "-|>",
                "color": "#555555",
                "lw": 1,
                "shrinkA": 0,
                "shrinkB": 0,
            },
        )
    used = {}
    for name, entry in steps.items():
        x, level = centre[name]
        state = step_state(entry)
        used[state] = STATE_COLOURS.get(state, "#ffffff")
        axis.add_patch(
            FancyBboxPatch(
                (x - box_w / 2, top(level) - box_h),
                box_w,
                box_h,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor=used[state],
                edgecolor="#333333",
                linewidth=1,
                zorder=2,
            )
        )
        duration = entry.get("duration_s")
        detail = f"{entry.get('kind', '?')} · {state}"
        if duration is not None:
            detail += f" · {_seconds(duration)}"
        y = top(level) - box_h
        axis.text(
            x,
            y + box_h * 0.64,
            _clip(name, 22),
            ha="center",
            va="center",
            fontsize=9,
            fontweight="bold",
            zorder=3,
        )
        axis.text(x, y + box_h * 0.3, detail, ha="center", va="center", fontsize=7.5, zorder=3)
    axis.set_xlim(-0.2, width + 0.2)
    axis.set_ylim(top(n_layers - 1) - box_h - 0.2, box_h + 0.2)
    axis.set_aspect("equal")
    axis.axis("off")
    axis.set_title(f"pipeline DAG: {len(steps)} steps", fontsize=11)
    axis.legend(
        handles=[Patch(facecolor=c, edgecolor="#333333", label=s) for s, c in used.items()],
        title="state",
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        title_fontsize=8,
        frameon=False,
    )
    figure.tight_layout()
    return figure


def _layout(steps, edges, box_w, slot_w, gap_x):
    """``centre`` ``{step: (x, layer)}``, the edges' ``routes`` (lists of ``(x, layer)``),
    the number of layers and the width."""
    depth = _depths({name: edges.get(name, []) for name in steps})
    n_layers = 1 + max(depth.values(), default=0)
    layers = [[] for _ in range(n_layers)]
    for name in steps:
        layers[depth[name]].append(name)
    chains = []  # per edge: the input, one slot per layer between, the step
    for name in steps:
        for parent in edges.get(name, []):
            slots = [
                ("slot", len(chains), level) for level in range(depth[parent] + 1, depth[name])
            ]
            for slot in slots:
                layers[slot[2]].append(slot)
            chains.append([parent, *slots, name])
    above = {}
    for chain in chains:
        for upper, lower in zip(chain, chain[1:]):
            above.setdefault(lower, []).append(upper)
    order = {}
    for level, nodes in enumerate(layers):
        if level:  # by the mean position of the nodes above, then file order
            nodes.sort(
                key=lambda n: (
                    sum(order[u] for u in above.get(n, [])) / len(above[n])
                    if above.get(n)
                    else float("inf")
                )
            )
        for i, node in enumerate(nodes):
            order[node] = i
    widths = [
        sum(slot_w if isinstance(n, tuple) else box_w for n in nodes) + gap_x * (len(nodes) - 1)
        for nodes in layers
    ]
    widest = max(widths)
    centre = {}
    for level, (nodes, layer_w) in enumerate(zip(layers, widths)):
        x = (widest - layer_w) / 2
        for node in nodes:
            node_w = slot_w if isinstance(node, tuple) else box_w
            centre[node] = (x + node_w / 2, level)
            x += node_w + gap_x
    routes = [[centre[node] for node in chain] for chain in chains]
    return {name: centre[name] for name in steps}, routes, n_layers, widest


def _seconds(value):
    return f"{value:.2f}s" if value < 60 else f"{value / 60:.1f} min"


def _clip(text, width):
    return text if len(text) <= width else text[: width - 1] + "…"


_CURVES = {
    "validation_score": "validation score",
    "train_loss": "training loss",
}
"""What a history may hold per epoch, drawn in this order; else the throughput or the time."""

_FALLBACK = {
    "rows_per_s": ("rows per second", "throughput per epoch"),
    "duration_s": ("epoch duration (s)", "time per epoch"),
}


def _with_throughput(history):
    """The history's rows with ``rows_per_s``: the epoch's rows (``samples_seen`` is
    cumulative) over its ``duration_s``."""
    rows, seen = [], 0
    for row in history:
        row = dict(row)
        if "samples_seen" in row and row.get("duration_s"):
            row["rows_per_s"] = (row["samples_seen"] - seen) / row["duration_s"]
            seen = row["samples_seen"]
        rows.append(row)
    return rows


def _has_history(training):
    """Whether a training entry (or any item's, after a foreach) has epochs or rounds to
    draw; a class-sharded training has none."""
    runs = [training] if "history" in training else training.values()
    return any(entry.get("history") for entry in runs)


def draw_training(step, training):
    """A training's history per epoch: scores and losses (else throughput or durations), and
    the sync period.

    Parameters
    ----------
    step : str
    training : dict
        The manifest's ``training`` entry of the step: ``{"strategy", "history", "stats"}``,
        or ``{item: {...}}`` after a ``foreach``.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from taskdml.runs._pictures import draw_training
    >>> history = [{"epoch": 1, "duration_s": 0.4, "sync_every": 2, "train_loss": 0.9},
    ...            {"epoch": 2, "duration_s": 0.3, "sync_every": 4, "train_loss": 0.7}]
    >>> figure = draw_training("model", {"strategy": "sync", "history": history})
    >>> figure.axes[0].get_ylabel()
    'training loss'
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    runs = {None: training} if "history" in training else training
    runs = {
        item: {**entry, "history": _with_throughput(entry["history"])}
        for item, entry in runs.items()
        if entry.get("history")
    }
    entries = [row for entry in runs.values() for row in entry["history"]]
    curves = [key for key in _CURVES if any(key in row for row in entries)] or [
        next((key for key in _FALLBACK if any(key in row for row in entries)), "duration_s")
    ]
    figure = Figure(figsize=(max(6.4, 5.2 * len(curves)), 3.6))
    axes = figure.subplots(1, len(curves), squeeze=False)[0]
    synced = any("sync_every" in row for row in entries)
    along = "epoch" if all("epoch" in row for row in entries) else "round"  # federated: rounds
    for axis, key in zip(axes, curves):
        twin = axis.twinx() if synced and axis is axes[-1] else None
        for i, (item, entry) in enumerate(runs.items()):
            colour = f"C{i % 10}"
            rows = [row for row in entry["history"] if key in row]
            label = item if item is not None else entry.get("strategy", "training")
            axis.plot(
                [row[along] for row in rows],
                [row[key] for row in rows],
                marker="o",
                markersize=4,
                color=colour,
                label=label,
            )
            if twin is not None:
                rows = [row for row in entry["history"] if "sync_every" in row]
                twin.step(
                    [row[along] for row in rows],
                    [row["sync_every"] for row in rows],
                    where="mid",
                    color=colour,
                    linestyle=":",
                    marker="s",
                    markersize=3,
                    alpha=0.6,
                )
        axis.set_xlabel(along)
        ylabel, title = _FALLBACK.get(key, (_CURVES.get(key), _CURVES.get(key)))
        axis.set_ylabel(ylabel)
        axis.set_title(title.replace("epoch", along), fontsize=9)
        epochs = sorted({row[along] for row in entries})
        if len(epochs) <= 12:
            axis.set_xticks(epochs)
        else:
            axis.xaxis.get_major_locator().set_params(integer=True)
        if twin is not None:
            twin.set_ylabel("sync_every (chunks per round)", fontsize=8)
            twin.yaxis.get_major_locator().set_params(integer=True)
            top = max(row.get("sync_every", 1) for row in entries)
            twin.set_ylim(0, top * 1.3 + 0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    if synced:
        handles.append(Line2D([], [], color="grey", linestyle=":", marker="s", markersize=3))
        labels.append("sync_every (right axis)")
    column_w = 0.065 * max(len(str(label)) for label in labels) + 0.7  # inches, at 8 pt
    columns = max(1, min(4, len(handles), int(figure.get_figwidth() // column_w)))
    legend_h = 0.2 * -(-len(handles) // columns) + (0.45 if len(runs) > 1 else 0.25)
    figure.set_figheight(figure.get_figheight() + legend_h)
    figure.legend(
        handles,
        labels,
        loc="lower center",
        ncol=columns,
        fontsize=8,
        frameon=False,
        title="item" if len(runs) > 1 else None,
        title_fontsize=8,
    )
    strategies = sorted({str(entry.get("strategy")) for entry in runs.values()})
    figure.suptitle(f"training of {step} ({', '.join(strategies)})", fontsize=11)
    figure.tight_layout(rect=(0, legend_h / figure.get_figheight(), 1, 1))
    return figure


def draw_evaluation(step, diagnostics):
    """An evaluate step's confusion matrix (classifier) or residual plot (regressor).

    Parameters
    ----------
    step : str
    diagnostics : dict
        The step's manifest ``diagnostics``: ``{"kind": "confusion", "labels", "counts"}`` or
        ``{"kind": "residuals", "prediction", "residual", "n_samples"}``, or ``{item: ...}``
        after a ``foreach``.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from taskdml.runs._pictures import draw_evaluation
    >>> found = {"kind": "confusion", "labels": [0, 1], "counts": [[50, 3], [7, 40]]}
    >>> draw_evaluation("report", found).axes[0].get_xlabel()
    'predicted label'
    """
    from matplotlib.figure import Figure

    panels = {None: diagnostics} if "kind" in diagnostics else diagnostics
    columns = min(4, len(panels))
    rows = -(-len(panels) // columns)
    confusion = next(iter(panels.values()))["kind"] == "confusion"
    n_labels = len(next(iter(panels.values())).get("labels", ()))
    side = max(3.6, min(7.0, 0.45 * n_labels + 2.2)) if confusion else 4.2
    figure = Figure(
        figsize=(side * columns + 0.4, side * rows * (0.95 if confusion else 0.8) + 0.6)
    )
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for axis, (item, found) in zip(axes, panels.items()):
        title = "" if item is None else str(item)
        if found["kind"] == "confusion":
            _confusion_panel(axis, found, title)
        else:
            _residual_panel(axis, found, title)
    for axis in axes[len(panels) :]:
        axis.axis("off")
    what = "confusion matrix" if confusion else "residuals against predictions"
    figure.suptitle(f"{step}: {what}", fontsize=11)
    figure.tight_layout()
    return figure


def _confusion_panel(axis, found, title):
    import numpy as np

    counts = np.asarray(found["counts"], dtype=float)
    labels = [str(label) for label in found["labels"]]
    totals = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    image = axis.imshow(share, cmap="Blues", vmin=0, vmax=1)
    if len(labels) <= 12:
        for (i, j), count in np.ndenumerate(counts):
            colour = "white" if share[i, j] > 0.6 else "black"
            size = 7 if len(labels) > 6 else 9
            axis.text(j, i, f"{int(count)}", ha="center", va="center", fontsize=size, color=colour)
    ticks = range(len(labels))
    step = max(1, len(labels) // 12)
    axis.set_xticks(ticks[::step], labels[::step], rotation=45 if max(map(len, labels)) > 3 else 0)
    axis.set_yticks(ticks[::step], labels[::step])
    axis.set_xlabel("predicted label")
    axis.set_ylabel("true label")
    accuracy = np.trace(counts) / max(counts.sum(), 1)
    axis.set_title(f"{title + ': ' if title else ''}accuracy {accuracy:.3f}", fontsize=9)
    colorbar = axis.figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
    colorbar.set_label("share of the true label's rows", fontsize=8)


def _residual_panel(axis, found, title):
    prediction, residual = found["prediction"], found["residual"]
    axis.scatter(prediction, residual, s=6, alpha=0.4, color="tab:blue", label="sampled row")
    axis.axhline(0.0, color="tab:red", linewidth=1, label="zero residual")
    axis.set_xlabel("prediction")
    axis.set_ylabel("residual (true - predicted)")
    shown = f"{len(prediction):,} of {found.get('n_samples', len(prediction)):,} rows"
    axis.set_title(f"{title + ': ' if title else ''}{shown}", fontsize=9)
    axis.legend(fontsize=7, loc="upper right")


# -- graph steps ------------------------------------------------------------------------------


def graph_steps(run_dir, steps):
    """What the ``superstep`` events in a run's ``events.jsonl`` say of each graph step.

    A step run again (``taskdml resume``, a retry) keeps each superstep's last event.

    Parameters
    ----------
    run_dir : path
    steps : dict
        ``{step: manifest entry}``.

    Returns
    -------
    dict
        ``{step: facts}``, a step's facts being ``step``, ``state``, ``events`` (per item:
        ``{item or None: [event, ...]}`` in superstep order), ``measure`` (the event field
        drawn, or ``None``), ``label`` (what it is), ``tol`` and ``max_iter`` (``None`` where
        the events do not say), ``supersteps`` (the most run by an item), ``converged``
        (``None``: not known) and ``why`` (why the supersteps stopped, in words). A step
        read from the cache has its result's ``supersteps`` and ``converged`` and no events.

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> from taskdml.runs._pictures import graph_steps
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> events = [{"event": "superstep", "step": "ranks", "superstep": i, "change": c,
    ...            "seconds": 0.01, "tol": 1e-3, "max_iter": 100}
    ...           for i, c in enumerate([0.5, 0.01, 1e-4])]
    >>> _ = (folder / "events.jsonl").write_text("\\n".join(map(json.dumps, events)))
    >>> graph_steps(folder, {"ranks": {"state": "completed"}})["ranks"]["why"]
    'converged after 3 supersteps: L1 change 0.0001 below tol 0.001'
    """
    path = Path(run_dir) / "events.jsonl"
    found = {}
    if path.exists():
        with open(path, encoding="utf-8") as log:
            for line in log:
                event = json.loads(line) if line.strip() else {}
                if event.get("event") == "superstep" and event.get("step") in steps:
                    by_item = found.setdefault(event["step"], {}).setdefault(event.get("item"), {})
                    by_item[event["superstep"]] = event
    return {
        name: _graph_facts(
            name, steps[name], {k: sorted(v.values(), key=_number) for k, v in by_item.items()}
        )
        for name, by_item in found.items()
    } | {
        name: _reused_facts(name, entry, result)
        for name, entry in steps.items()
        if name not in found and (result := _graph_result(entry)) is not None
    }


def _graph_result(entry):
    """The summary of a step's graph algorithm result (:func:`taskdml.runner._runner.summarize`)."""
    for value in (entry.get("summary") or {}).values():
        if isinstance(value, dict) and value.get("type") == "graph result":
            return value
    return None


def _reused_facts(name, entry, result):
    """A graph step whose supersteps did not run in this run (read from the cache): what its
    result says."""
    why = "; ".join(map(str, (entry.get("cache") or {}).get("why") or [])) or "not run here"
    return {
        "step": name,
        "state": step_state(entry),
        "events": {},
        "measure": None,
        "label": None,
        "tol": None,
        "max_iter": None,
        "supersteps": result["supersteps"],
        "converged": result["converged"],
        "why": f"no superstep ran in this run: {why}",
    }


def _number(event):
    return event["superstep"]


def _graph_facts(name, entry, events):
    rows = [event for item in events.values() for event in item]
    # the field the algorithm measures convergence by, and its name (the event says)
    measure, label = rows[-1].get("measure") or (None, None)
    tol = next((e["tol"] for e in rows if e.get("tol") is not None), None)
    max_iter = next((e["max_iter"] for e in rows if e.get("max_iter") is not None), None)
    supersteps = max(len(item) for item in events.values())
    result = _graph_result(entry)  # the result's own word
    converged = None if result is None else bool(result["converged"])
    state = step_state(entry)
    last = rows[-1].get(measure) if measure else None
    if state in ("failed", "interrupted", "running"):
        why = f"{state} after {supersteps} supersteps"
    elif measure is None:
        converged = None  # a set number of supersteps (SGC's k)
        why = f"ran its {supersteps} supersteps (no measure, no convergence test)"
    elif converged is None and tol is None and max_iter is None:
        why = f"ran {supersteps} iterations (a set number; {label} {last:.3g} at the last)"
    elif converged or (converged is None and _below(last, tol)):
        converged = True
        why = f"converged after {supersteps} supersteps: {label} {last:.3g}" + (
            f" below tol {tol:g}" if tol is not None else " (the program's test)"
        )
    elif max_iter is not None and supersteps >= max_iter:
        converged = False
        why = f"stopped at max_iter={max_iter}, {label} {last:.3g}" + (
            f", above tol {tol:g}" if tol is not None else ""
        )
    else:
        why = f"stopped after {supersteps} supersteps with {label} {last:.3g}"
    return {
        "step": name,
        "state": state,
        "events": events,
        "measure": measure,
        "label": label,
        "tol": tol,
        "max_iter": max_iter,
        "supersteps": supersteps,
        "converged": converged,
        "why": why,
    }


def _below(value, tol):
    return value is not None and tol is not None and value < tol


def draw_convergence(facts):
    """A graph step's convergence: its measure per superstep with the tolerance, and the
    seconds of each superstep.

    Parameters
    ----------
    facts : dict
        A step's facts from :func:`graph_steps`.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from taskdml.runs._pictures import draw_convergence
    >>> events = [{"superstep": i, "change": 0.5 * 0.1**i, "seconds": 0.02, "exchange_s": 0.005}
    ...           for i in range(6)]
    >>> facts = {"step": "ranks", "events": {None: events}, "measure": "change",
    ...          "label": "L1 change", "tol": 1e-5, "max_iter": 100, "supersteps": 6,
    ...          "converged": True, "why": "converged after 6 supersteps"}
    >>> figure = draw_convergence(facts)
    >>> figure.axes[0].get_yscale(), figure.axes[0].get_ylabel()
    ('log', 'L1 change')
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    measure, label, tol = facts["measure"], facts["label"], facts["tol"]
    runs = facts["events"]
    figure = Figure(figsize=(10.4 if measure else 5.6, 3.9))
    axes = figure.subplots(1, 2 if measure else 1, squeeze=False)[0]
    for axis in axes:  # superstep numbers: whole
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    many = len(runs) > 1
    if measure:
        axis = axes[0]
        values = []
        for i, (item, rows) in enumerate(runs.items()):
            rows = [row for row in rows if isinstance(row.get(measure), (int, float))]
            xs, ys = [row["superstep"] + 1 for row in rows], [row[measure] for row in rows]
            values += ys
            axis.plot(
                xs,
                ys,
                marker="o",
                markersize=3,
                color=f"C{i % 10}",
                label=str(item) if many else label,
            )
        if tol is not None and tol > 0:
            axis.axhline(tol, color="tab:red", linestyle="--", linewidth=1, label=f"tol {tol:g}")
        _scale(axis, values + ([tol] if tol else []))
        axis.set_xlabel("superstep")
        axis.set_ylabel(label)
        axis.set_title(f"{label} per superstep", fontsize=9)
        axis.legend(fontsize=8, loc="best")
    axis = axes[-1]
    for i, (item, rows) in enumerate(runs.items()):
        xs = [row["superstep"] + 1 for row in rows]
        seconds = [row.get("seconds") or 0.0 for row in rows]
        colour = f"C{i % 10}"
        if len(xs) <= 12 and not many:  # a few supersteps (SGC's k): bars, not a line
            axis.bar(xs, seconds, color=colour, width=0.6, label="superstep")
            axis.set_xticks(xs)
        else:
            axis.plot(
                xs,
                seconds,
                color=colour,
                linewidth=1.2,
                marker="." if len(xs) < 60 else None,
                label=(f"{item}: " if many else "") + "superstep",
            )
        if any("exchange_s" in row for row in rows):
            exchange = [row.get("exchange_s") or 0.0 for row in rows]
            name = (f"{item}: " if many else "") + "of which exchange"
            if len(xs) <= 12 and not many:
                axis.bar(xs, exchange, color="white", alpha=0.45, width=0.6, hatch="//", label=name)
            else:
                axis.fill_between(xs, exchange, color=colour, alpha=0.25, linewidth=0, label=name)
    axis.set_ylim(bottom=0)
    axis.set_xlabel("superstep")
    axis.set_ylabel("seconds")
    axis.set_title("seconds per superstep", fontsize=9)
    axis.legend(fontsize=8, loc="upper right")
    title = f"{facts['step']}: {facts['why']}"
    figure.suptitle(textwrap.fill(title, int(figure.get_figwidth() * 11)), fontsize=10)
    figure.tight_layout()
    return figure


def _scale(axis, values):
    """A log scale where the positive values span more than two decades (a symmetric log
    one, linear below the smallest positive value, where zeros are among them)."""
    positive = [v for v in values if v > 0]
    if not positive or max(positive) / min(positive) < 100 or min(values) < 0:
        return
    if min(values) == 0:
        axis.set_yscale("symlog", linthresh=min(positive))
        axis.set_ylim(bottom=0)
    else:
        axis.set_yscale("log")
