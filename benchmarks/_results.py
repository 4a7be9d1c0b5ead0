"""What every benchmark writes with its figures: the machine, the versions, and its block of
``RESULTS.md``.

Each script owns one generated block of ``benchmarks/RESULTS.md``, between its own markers
(``<!-- NAME: generated, begin -->`` ... ``end -->``), under a section heading it creates the
first time; a run replaces only that block, so analysis written around it is kept. The scripts
run as ``python benchmarks/NAME.py``, which puts this directory on ``sys.path``: they import
this module as ``_results``.
"""

import contextlib
import datetime
import os
import platform
import re
import subprocess
import time

import psutil

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
"""The results file every benchmark updates unless told another."""


def markers(script):
    """The begin and end markers of *script*'s generated block (``"search.py"``)."""
    return f"<!-- {script}: generated, begin -->", f"<!-- {script}: generated, end -->"


def machine(detail=False):
    """``nproc`` (CPUs this process may use), ``memory_gib``, ``cpu`` (the model name; with
    *detail* also its family and model numbers) and ``platform``."""
    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        fields = dict(
            re.findall(r"^(model name|cpu family|model)\s*:\s*(.*)$", cpuinfo.read(), re.M)
        )
        if detail:
            model = (
                f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, "
                f"model {fields.get('model', '?')})"
            )
        else:
            model = fields.get("model name", model)
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": nproc,
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "cpu": model,
        "platform": platform.platform(),
    }


IDLE_SHARE = 0.05
"""Other processes' CPU, as a share of the machine's CPUs, under which a run counts as calm:
0.1 cores on 2 CPUs, 0.8 on 16."""


def load_note(foreign_cores, nproc, during=""):
    """The sentence a report gives the machine's load: *foreign_cores*, the CPU other
    processes used on average (*during* the timed parts, say), against :data:`IDLE_SHARE` of
    *nproc* CPUs."""
    if foreign_cores > IDLE_SHARE * nproc:
        return (
            f"**The machine was not idle**: other processes used {foreign_cores:.2f} of {nproc} "
            f"cores on average{during}; timings are inflated and noisy, rerun on a calm machine."
        )
    return (
        f"The machine was idle apart from this benchmark (other processes: {foreign_cores:.2f} "
        f"of {nproc} cores on average)."
    )


def machine_line(found=None):
    """*found* (default :func:`machine`) as one line: CPUs, model, memory, platform."""
    m = found or machine()
    return f"{m['nproc']} CPUs, {m['cpu']}, {m['memory_gib']:.1f} GiB memory, {m['platform']}"


def versions(packages):
    """Python's and each installed package's version, by name; taskdml's with its git commit
    (and a note when ``taskdml/`` has uncommitted changes)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in packages:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        here = os.path.dirname(os.path.abspath(__file__))

        def git(*words):
            return subprocess.run(
                ["git", *words], cwd=here, check=True, capture_output=True, text=True
            ).stdout.strip()

        commit = git("rev-parse", "--short", "HEAD")
        if git("status", "--porcelain", "--", os.path.join(here, "..", "taskdml")):
            commit += ", with uncommitted changes in taskdml/"
        found["taskdml"] = f"{found.get('taskdml', '?')} (git {commit})"
    return found


def versions_line(found):
    """*found* (from :func:`versions`) as ``name version, name version, ...``."""
    return ", ".join(f"{k} {v}" for k, v in found.items())


def write_section(path, body, script, title):
    """Replace *script*'s generated block in *path* with *body*; a file or block that does
    not exist yet is created, the block under the heading ``## title``."""
    begin, end = markers(script)
    block = f"{begin}\n{body}\n{end}"
    if os.path.exists(path):
        with open(path) as existing:
            text = existing.read()
    else:
        text = "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


def header(facts):
    """The first lines of a block, from the facts :func:`publish` gathers: the command, the
    date and the benchmark's seconds, the machine, the versions (Markdown line breaks)."""
    return [
        f"Command: `{facts['command']}`  ",
        f"Date: {facts['date']} UTC; whole benchmark {facts['wall_s']:.0f} s  ",
        f"Machine: {machine_line(facts['machine'])}  ",
        f"Versions: {versions_line(facts['versions'])}  ",
    ]


def publish(report, rows, args, script, title, packages, began):
    """The end of a benchmark run: its facts (date, command, machine, versions, workers,
    seconds since *began*), ``report(rows, facts)`` printed and, unless ``args.quick``,
    written as *script*'s block of ``args.out`` under *title*."""
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "command": f"python benchmarks/{script}" + (" --quick" if args.quick else ""),
        "machine": machine(),
        "versions": versions(packages),
        "workers": args.workers,
        "wall_s": time.perf_counter() - began,
    }
    text = report(rows, facts)
    print(text)
    if not args.quick:
        write_section(args.out, text, script, title)
