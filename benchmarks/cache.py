"""What the step cache costs, and what resuming after a crash saves.

1. **The cache's overhead on the quickstart** (``pipelines/quickstart.yaml`` as shipped:
   200,000 × 20 in 10 chunks, a scaler, 3 epochs of a data-parallel SGDClassifier, an
   evaluation). One ``LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1")`` and
   one client for everything, so that the cluster's start is not counted; one untimed run
   first (imports, first calls). Then ``--repeats`` rounds, each running the pipeline three
   ways back to back through ``taskdml.run_pipeline`` (recorded in a run directory, as the CLI
   does): without a cache, with an empty store (*cold*: every step runs and is written), and
   again with that store (*warm*: every step is read back). Seconds are the medians over the
   rounds; the ratios are to the run without a cache.
2. **Resume after SIGKILL**, through the ``taskdml`` command in its own process group
   (killed with its embedded cluster, as a crash would): for each case the uninterrupted run's
   seconds (with an empty cache, as the command runs by default), the seconds of ``taskdml
   resume`` after the kill, and the work reused or done again, from the run's records:

   - *after two steps*: ``pipelines/data_parallel.yaml``, killed once ``data`` and ``split``
     completed;
   - *mid training*: a 60-epoch sync training of 200,000 × 20 with checkpoints every
     second (``DASK_TASKDML__ELASTIC__CHECKPOINT_S=1``), killed at its first checkpoint;
   - *mid search*: ``pipelines/search.yaml`` with 40 trials (ASHA), killed 0.5 s after its
     first checkpoint.

``python benchmarks/cache.py`` rewrites its block of ``benchmarks/RESULTS.md``; ``--quick``
is a smoke run that prints only.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _results

ROOT = Path(__file__).resolve().parents[1]
TASKDML = str(Path(sys.executable).with_name("taskdml"))
PACKAGES = ("taskdml", "dask", "distributed", "scikit-learn", "zarr", "numpy")
LONG_TRAINING = """\
taskdml: 1
name: long
cluster: {n_workers: 2, threads_per_worker: 1}
steps:
  data:
    call: taskdml.datasets:make_classification
    with: {n_samples: 200_000, n_features: 20, chunk_size: 10_000, random_state: 0}
  model:
    fit: sklearn.linear_model:SGDClassifier
    with: {random_state: 0}
    parallel: {epochs: 60, sync_every: 2, random_state: 0}
    inputs: {data: data}
"""


def overhead(repeats, overrides, folder):
    """Median seconds of the quickstart without a cache, cold and warm; the store's size."""
    from distributed import Client, LocalCluster

    from taskdml import load_pipeline, run_pipeline

    pipeline = load_pipeline(ROOT / "pipelines" / "quickstart.yaml", overrides=overrides)
    seconds = {"no cache": [], "cold": [], "warm": []}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):

        def timed(cache):
            began = time.perf_counter()
            run_pipeline(pipeline, client, run_root=folder / "runs", cache=cache)
            return time.perf_counter() - began

        timed(None)
        for round_ in range(repeats):
            store = folder / f"store-{round_}"
            seconds["no cache"].append(timed(None))
            seconds["cold"].append(timed(store))
            seconds["warm"].append(timed(store))
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    return {mode: statistics.median(values) for mode, values in seconds.items()}, size


def _manifest(folder):
    found = sorted((folder / "runs").glob("*/manifest.json"))
    return json.loads(found[-1].read_text()) if found else {}


def _cli(args, folder, env, background=False):
    command = [TASKDML, *args, "--run-dir", "runs"]
    environment = {**os.environ, "TASKDML_CACHE_DIR": str(folder / "cache"), **env}
    if background:
        return subprocess.Popen(
            command, cwd=folder, env=environment, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    began = time.perf_counter()
    subprocess.run(command, cwd=folder, env=environment, check=True, capture_output=True)
    return time.perf_counter() - began


def _kill_when(process, condition, then_wait=0.0):
    while not condition():
        if process.poll() is not None:
            raise RuntimeError("the run ended before it could be killed")
        time.sleep(0.02)
    time.sleep(then_wait)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def resume_case(name, pipeline_args, folder, condition, then_wait=0.0, env=None):
    """Seconds of an uninterrupted run and of the resume after a kill, and the records."""
    env = env or {}
    clean, killed = folder / f"{name}-clean", folder / f"{name}-killed"
    for path in (clean, killed):
        path.mkdir()
        (path / "long.yaml").write_text(LONG_TRAINING)
    uninterrupted = _cli(pipeline_args, clean, env)  # with the cache, as the command runs
    process = _cli(pipeline_args, killed, env, background=True)
    _kill_when(process, lambda: condition(killed), then_wait)
    before = _manifest(killed)
    resumed = _cli(["resume", "latest"], killed, env)
    return {"uninterrupted_s": uninterrupted, "resume_s": resumed, "before": before,
            "after": _manifest(killed)}  # fmt: skip


def _completed(folder):
    steps = _manifest(folder).get("steps", {})
    return sum(entry.get("state") == "completed" for entry in steps.values())


def _checkpointed(folder):
    return any((folder / "cache" / "checkpoints").glob("*/*.checkpoint"))


def resumes(folder, quick):
    search_trials = "trials=12" if quick else "trials=40"
    cases = {
        "after two steps": resume_case(
            "steps", ["run", str(ROOT / "pipelines" / "data_parallel.yaml")], folder,
            lambda f: _completed(f) >= 2,
        ),
        "mid training": resume_case(
            "training", ["run", "long.yaml"], folder, _checkpointed,
            env={"DASK_TASKDML__ELASTIC__CHECKPOINT_S": "1"},
        ),
        "mid search": resume_case(
            "search", ["run", str(ROOT / "pipelines" / "search.yaml"), search_trials], folder,
            _checkpointed, then_wait=0.5,
        ),
    }  # fmt: skip
    return cases


def _work(name, case):
    after = case["after"]["steps"]
    reused = [s for s, e in after.items() if e.get("cache", {}).get("hit")]
    ran = [s for s, e in after.items() if not e.get("cache", {}).get("hit")]
    text = f"steps reused: {', '.join(reused) or 'none'}; run: {', '.join(ran)}"
    if name == "mid training":
        training = after["model"]["training"]
        start = training["stats"].get("resumed_from", {})
        text += (
            f"; training resumed in epoch {start.get('epoch')} after "
            f"{start.get('rounds_before')} of its rounds, {len(training['history'])} epochs "
            "recorded once each"
        )
    if name == "mid search":
        start = after["tune"].get("resumed_from", {})
        text += (
            f"; search resumed from {start.get('results')} results, "
            f"{start.get('in_flight')} steps in flight run again"
        )
    return text


def report(seconds, size, cases, facts):
    base = seconds["no cache"]
    lines = [
        f"Run {facts['date']} with `{facts['command']}`.  ",
        f"Machine: {_results.machine_line(facts['machine'])}  ",
        f"Versions: {_results.versions_line(facts['versions'])}",
        "",
        f"### The cache's overhead on the quickstart (median of {facts['repeats']} rounds)",
        "",
        "| run | seconds | ratio to no cache |",
        "| --- | ---: | ---: |",
    ]
    for mode, value in seconds.items():
        lines.append(f"| {mode} | {value:.2f} | {value / base:.2f}× |")
    lines += [
        "",
        f"The store holds {size / 2**20:.1f} MiB after one run (the data and its split as "
        "Zarr, the models as skops).",
        "",
        "### Resume after SIGKILL",
        "",
        "| case | uninterrupted s | resume s | ratio | work reused and run again |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, case in cases.items():
        ratio = case["resume_s"] / case["uninterrupted_s"]
        lines.append(
            f"| {name} | {case['uninterrupted_s']:.1f} | {case['resume_s']:.1f} | "
            f"{ratio:.2f}× | {_work(name, case)} |"
        )
    lines += [
        "",
        "Both columns of seconds include the command's own start (an embedded cluster of 2 "
        "workers, imports): about 4 s of each on this machine.",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the overhead runs")
    parser.add_argument("--quick", action="store_true", help="a smoke run that prints only")
    parser.add_argument("--out", default=_results.RESULTS, help="markdown file to update")
    args = parser.parse_args(argv)
    facts = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/cache.py" + (" --quick" if args.quick else ""),
        "machine": _results.machine(),
        "versions": _results.versions(PACKAGES),
        "repeats": 1 if args.quick else args.repeats,
    }
    folder = Path(tempfile.mkdtemp(prefix="taskdml-cache-bench-"))
    try:
        overrides = ("n_samples=40000", "chunk_size=10000") if args.quick else ()
        seconds, size = overhead(facts["repeats"], overrides, folder)
        cases = resumes(folder, args.quick)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = report(seconds, size, cases, facts)
    print(text)
    if not args.quick:
        title = "Step cache and resume (`benchmarks/cache.py`)"
        _results.write_section(args.out, text, "cache.py", title)


if __name__ == "__main__":
    main()
