"""Live progress of a run: a redrawn block of step lines on a terminal, plain lines otherwise."""

import json
import sys
import threading
import time

import click

from taskdml.cluster._connect import NO_DASHBOARD

SYMBOLS = {
    "pending": "·",
    "running": "▶",
    "completed": "✓",
    "cached": "=",
    "failed": "✗",
    "skipped": "-",
}


def describe(summary):
    """One short phrase for a step's output summary.

    Parameters
    ----------
    summary : dict or None
        A step's ``summary`` from the manifest (:func:`taskdml.runner._runner.summarize`).

    Returns
    -------
    str
    """
    parts = []
    for name, value in (summary or {}).items():
        if isinstance(value, dict) and value.get("type") == "dataset":
            parts.append(
                f"{name}: {value['n_samples']:,}×{value['n_features']} in {value['chunks']} chunks"
            )
        elif isinstance(value, dict) and value.get("type") == "table":
            parts.append(
                f"{name}: {value['n_samples']:,} rows × {len(value['columns'])} columns "
                f"in {value['chunks']} chunks"
            )
        elif isinstance(value, dict) and value.get("type") == "graph result":
            parts.append(
                f"{name}: {value['vertices']:,} vertices, {value['supersteps']} supersteps"
                + (", converged" if value["converged"] else "")  # else: see report.html
            )
        elif (
            isinstance(value, dict)
            and value
            and all(isinstance(v, (int, float)) for v in value.values())
        ):
            parts.append(", ".join(f"{k}={v:.4g}" for k, v in value.items()))
        elif isinstance(value, dict) and "type" in value:
            parts.append(f"{name}: {value['type']}")
        elif isinstance(value, dict):
            parts.append(f"{name}: {len(value)} items")
    return "; ".join(parts)


class Progress:
    """Receives run events; shows them on *stream*.

    Parameters
    ----------
    steps : sequence of str
        Step names, in the order to show them.
    stream : file, optional
        Default ``sys.stderr`` (stdout stays free for ``--json``).
    live : bool, optional
        Redraw a block of lines in place; default: when *stream* is a terminal.
    events : path, optional
        Also append every event to this file as a JSON line.
    """

    def __init__(self, steps, stream=None, live=None, events=None):
        self.events = open(events, "a", encoding="utf-8") if events else None  # noqa: SIM115
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.order = list(steps)
        self.state = {name: {"state": "pending"} for name in steps}
        self.start = time.monotonic()
        self.run_id = None  # known at run_started
        self.drawn = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        if self.live:
            threading.Thread(target=self._tick, daemon=True).start()

    def __call__(self, event):
        kind = event["event"]
        with self.lock:
            if self.events is not None:
                self.events.write(json.dumps(event, default=str) + "\n")
                self.events.flush()
                if kind == "run_finished":
                    self.events.close()
                    self.events = None
            if kind == "run_started":
                self.run_id = event.get("run_id")
                dashboard = (
                    f"dashboard: {event['dashboard']}" if event["dashboard"] else NO_DASHBOARD
                )
                if event.get("dashboard_port_taken"):
                    dashboard += f" (port {event['dashboard_port_taken']} is taken)"
                if event.get("taskdml_page"):
                    dashboard += f"; taskdml page: {event['taskdml_page']}"
                self._line(
                    f"taskdml: running {event['pipeline']} on {event['workers']} workers "
                    f"({event['threads']} threads); {dashboard}"
                )
                if event.get("run_dir"):
                    self._line(f"run directory: {event['run_dir']}")
            elif kind.startswith("step_"):
                self._step(kind, event)
            elif kind in ("epoch", "round", "trial") and event.get("step") in self.state:
                self._progress(kind, event)
            elif kind == "superstep" and event.get("step") in self.state:
                self._superstep(event)
            elif kind == "tasks":
                for name, tasks in event["steps"].items():
                    if name in self.state:
                        self.state[name]["tasks"] = tasks
            elif kind == "run_finished":
                self.stopped.set()
                if self.live:
                    self._redraw()

    def _step(self, kind, event):
        if kind == "step_retried":  # still running: say why it starts again
            self._line(
                f"  ↻ {event['step']:<16} retrying in {event['wait_s']:g}s after {event['error']}"
            )
            return
        entry = self.state[event["step"]]
        entry["state"] = {
            "step_started": "running",
            "step_finished": "completed",
            "step_cached": "cached",
            "step_failed": "failed",
            "step_skipped": "skipped",
        }[kind]
        entry["since"] = time.monotonic()
        entry.update(
            {k: event[k] for k in ("duration_s", "summary", "error", "items") if k in event}
        )
        if self.live:
            self._redraw()
        else:
            self._line(self._format(event["step"]))

    def _progress(self, kind, event):
        """Where a running step stands: its epoch and round, or its trials."""
        entry = self.state[event["step"]]
        if kind == "trial":
            entry.setdefault("trials", {})[event["trial"]] = event.get("status", "")
        else:
            entry["epoch"] = (
                (event["epoch"] - 1 + (event["round"] / max(event["of"], 1)), event["epochs"])
                if kind == "round"
                else (event["epoch"], event["epochs"])
            )
            entry["at_most"] = event.get("at_most", False)
        if not self.live and kind == "epoch":
            self._line(f"  · {event['step']:<16} epoch {_of(event['epoch'], event)}")

    def _superstep(self, event):
        """Where a graph step stands: its last superstep and the change it measured."""
        entry = self.state[event["step"]]
        entry["superstep"] = (event["superstep"] + 1, event.get("change"))
        if not self.live and event["superstep"] % 10 == 0:  # the first, then every tenth
            self._line(f"  · {event['step']:<16}{_superstep(entry)}")

    def _format(self, name):
        entry = self.state[name]
        state = entry["state"]
        elapsed = entry.get("duration_s")
        if elapsed is None and state == "running":
            elapsed = time.monotonic() - entry["since"]
        text = f"  {SYMBOLS[state]} {name:<16} {state:<9}"
        text += f" {elapsed:7.2f}s" if elapsed is not None else " " * 9
        if entry.get("items") and state == "running":
            text += f"  {len(entry['items'])} items"
        if state == "running":
            text += _standing(entry, elapsed)
        if state in ("completed", "cached"):
            text += f"  {describe(entry.get('summary'))}"
        if state == "failed":
            text += f"  {entry.get('error', '')}".splitlines()[0] if entry.get("error") else ""
        return text

    def _line(self, text):
        click.echo(text, file=self.stream)
        self.drawn = 0

    def _redraw(self):
        if self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
        for name in self.order:
            self.stream.write(self._format(name)[:200] + "\n")
        self.stream.flush()
        self.drawn = len(self.order)

    def _tick(self):
        while not self.stopped.wait(0.5):
            with self.lock:
                if self.drawn:
                    self._redraw()


def _standing(entry, elapsed):
    """A running step's bar, what it counts and the time left: ``[####······] epoch 2 of 4,
    ETA 3 s``, or its trials by state."""
    trials = entry.get("trials")
    if trials:
        ended = sum(1 for state in trials.values() if state not in ("running", "paused"))
        counts = {}
        for state in trials.values():
            word = "stopped" if state.startswith("stopped") else state
            counts[word] = counts.get(word, 0) + 1
        parts = ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))
        return f"  {len(trials)} trials seen: {parts} ({ended} ended)"
    if "superstep" in entry and "epoch" not in entry:
        return _superstep(entry)
    if "epoch" not in entry:
        tasks = entry.get("tasks")
        if not tasks:
            return ""
        return f"  {_bar(tasks['done'] / tasks['seen'])} {tasks['done']} of {tasks['seen']} tasks"
    done, total = entry["epoch"]
    if entry.get("at_most"):  # the training stops when its rule says: no bar, no ETA
        return f"  epoch {int(done) + 1 if done < total else total} (at most {total})"
    fraction = min(1.0, done / max(total, 1))
    current = min(int(done) + 1, total) if done < total else total
    text = f"  {_bar(fraction)} epoch {current} of {total}"
    if 0 < fraction < 1 and elapsed:
        text += f", ETA {elapsed * (1 - fraction) / fraction:.0f} s"
    return text


def _superstep(entry):
    """`` superstep 12 (change 3.1e-07)``: a graph step's last superstep."""
    number, change = entry["superstep"]
    return f"  superstep {number}" + ("" if change is None else f" (change {change:.3g})")


def _of(epoch, event):
    """``3 of 5``, or ``3 (at most 1000)`` for a training that stops by its rule."""
    if event.get("at_most"):
        return f"{epoch} (at most {event['epochs']})"
    return f"{epoch} of {event['epochs']}"


def _bar(fraction):
    """``[####······]`` for *fraction* of 1."""
    filled = round(10 * min(1.0, max(0.0, fraction)))
    return "[" + "#" * filled + "·" * (10 - filled) + "]"
