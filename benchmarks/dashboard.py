"""What watching a run costs: the dashboard plugin and the events, on and off.

One ``LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1")`` with a dashboard and
one client for everything; one untimed run of each pipeline first. Then ``--repeats`` rounds,
each running, back to back through ``taskdml.run_pipeline`` without the cache, each pipeline
with the events on (the default: the plugin installed, every event published to the
scheduler's event log, the client subscribed to it) and off (dask config ``taskdml.events:
false``). The pipelines: ``pipelines/quickstart.yaml`` as shipped, and ``pipelines/search.yaml``
(ASHA, 18 trials: one ``trial`` event per step of a trial). Seconds are medians over the
rounds; the ratio is on / off. Also the number of events one run published.

``python benchmarks/dashboard.py`` rewrites its block of ``benchmarks/RESULTS.md``;
``--quick`` is a smoke run that prints only.
"""

import argparse
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import _results

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("taskdml", "dask", "distributed", "bokeh")


def measure(repeats, quick, folder):
    """``{pipeline: {"on": s, "off": s, "events": n}}``."""
    import dask
    from distributed import Client, LocalCluster

    from taskdml import load_pipeline, run_pipeline

    small = ["n_samples=40000", "chunk_size=10000"] if quick else []
    pipelines = {
        "quickstart": load_pipeline(ROOT / "pipelines" / "quickstart.yaml", overrides=small),
        "search": load_pipeline(
            ROOT / "pipelines" / "search.yaml", overrides=["trials=6"] if quick else []
        ),
    }
    found = {name: {"on": [], "off": [], "events": 0} for name in pipelines}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0"
        ) as cluster,
        Client(cluster) as client,
    ):

        def timed(pipeline, on):
            events = []
            with dask.config.set({"taskdml.events": on}):
                began = time.perf_counter()
                run_pipeline(pipeline, client, run_root=folder, on_event=events.append)
                return time.perf_counter() - began, len(events)

        for pipeline in pipelines.values():
            timed(pipeline, True)
        for _ in range(repeats):
            for name, pipeline in pipelines.items():
                for on in (True, False):
                    seconds, count = timed(pipeline, on)
                    found[name]["on" if on else "off"].append(seconds)
                    if on:
                        found[name]["events"] = count
    return {
        name: {"on": statistics.median(v["on"]), "off": statistics.median(v["off"]),
               "events": v["events"]}
        for name, v in found.items()
    }  # fmt: skip


def report(found, facts):
    lines = [
        f"Run {facts['date']} with `{facts['command']}`.  ",
        f"Machine: {_results.machine_line(facts['machine'])}  ",
        f"Versions: {_results.versions_line(facts['versions'])}",
        "",
        "| pipeline | events off s | events on s | on / off | events in a run |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, v in found.items():
        lines.append(
            f"| {name} | {v['off']:.3f} | {v['on']:.3f} | {v['on'] / v['off']:.2f}× | "
            f"{v['events']} |"
        )
    lines += ["", f"Medians of {facts['repeats']} rounds, the two ways interleaved."]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--quick", action="store_true", help="a smoke run that prints only")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    args = parser.parse_args(argv)
    facts = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/dashboard.py" + (" --quick" if args.quick else ""),
        "machine": _results.machine(),
        "versions": _results.versions(PACKAGES),
        "repeats": 1 if args.quick else args.repeats,
    }
    with tempfile.TemporaryDirectory(prefix="taskdml-dashboard-bench-") as folder:
        found = measure(facts["repeats"], args.quick, Path(folder))
    text = report(found, facts)
    print(text)
    if not args.quick:
        title = "Watching a run: the dashboard plugin and events (`benchmarks/dashboard.py`)"
        _results.write_section(args.out, text, "dashboard.py", title)


if __name__ == "__main__":
    main()
