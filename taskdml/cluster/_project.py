"""The user's own code, importable in the client, on the scheduler and on every worker.

A pipeline file may name callables of the user's project (``myproject.features:add``, with
``myproject.*`` in ``imports.allow``). Three places must import them:

- **the client** validates the pipeline by importing them: :func:`importable` appends the
  pipeline file's directory and the working directory to ``sys.path`` (a console script, unlike
  ``python -m``, has neither), at the end, so a folder there never shadows an installed package;
- **the scheduler** unpickles every task graph, and the graph refers to the user's functions by
  module and name, so it imports them too;
- **every worker**, including workers that join later, runs them.

:func:`ship` sends the project's packages as bytes in a scheduler plugin; the scheduler writes
them under its local directory and registers a worker plugin with the same bytes, which each
worker (and each later one) writes under its own local directory. A package is shipped when it
is named by the top level of an ``imports.allow`` glob, found in the pipeline file's directory
or the working directory, and imported from there by the client: not the whole directory, and
never an installed package (site-packages, or an editable install elsewhere), nor taskdml or the
standard library. Files go to ``<local directory>/taskdml-project/<names>/<digest>/``, a folder
per content digest put first on ``sys.path``: a changed file gives a new folder, the old one is
removed, and the shipped packages' modules are dropped from a worker's ``sys.modules``, so the
next task imports the new code (a stale ``.pyc`` cannot be picked up: the folder is new). The
scheduler, which only unpickles the code and never runs it, drops only the modules an earlier
copy put there: a scheduler that lives in a user's own process (a ``LocalCluster`` in a notebook
or a test session that another client runs a pipeline on) keeps the modules that process
imported itself, whose classes it pickles by reference. Unchanged files
change nothing, so modules already imported stay imported. One plugin per set of package names:
two projects with different packages share a cluster; two versions of one package do not.
A process that is the client itself (the embedded cluster's scheduler, threads-only workers)
is left alone: it already imports from the project's directories. The client's own modules are
not reloaded either: a long-lived Python session (a notebook) that edits its package reloads it
itself (``importlib.reload``) before the next run, as it would without taskdml.

Why not distributed's own tools: ``UploadDirectory`` ships a whole folder, to workers through
their nannies only (a ``--no-nanny`` worker gets nothing), extracting it over the previous copy;
``Client.upload_file`` reloads only the top-level modules of an archive, not their submodules.
Neither drops a package's stale submodules, which is what makes an edit reach long-lived workers.

:func:`check` then asks every worker and the scheduler, in one call each, whether every module
the pipeline names can be imported there, and raises :class:`ClusterUnavailable` (exit 4)
naming the module, the process, the error and the fix, before any step runs. Shipped modules
are imported (that is also what reloads them); other modules are only looked up
(``importlib.util.find_spec`` of their top-level package), so the check does not wait for
scikit-learn to import.
"""

import fnmatch
import hashlib
import importlib
import importlib.util
import os
import shutil
import socket
import sys
from pathlib import Path

from dask.utils import format_bytes

from taskdml import _compat
from taskdml.exceptions import ClusterUnavailable
from taskdml.pipeline._paths import project_directories

PLUGIN_PREFIX = "taskdml-project"
MAX_BYTES = 50 * 2**20
"""The most a project's shipped files may weigh; more is data, which belongs in a loader."""
SKIPPED = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo")
_installed = {}  # plugin name -> (digest, path on sys.path), in this process


def project_packages(allow, directories):
    """The top-level packages and modules of the project that :func:`ship` sends.

    Parameters
    ----------
    allow : sequence of str
        ``imports.allow`` globs; their first dotted part names the candidates.
    directories : sequence of path

    Returns
    -------
    dict
        ``{name: path of the package folder or module file}``, for each candidate found in
        *directories* that this process imports from there.

    Examples
    --------
    >>> project_packages(["sklearn.*", "taskdml.*"], ["."])
    {}
    """
    tops = {glob.split(".")[0] for glob in allow}
    found = {}
    for directory in map(Path, directories):
        if not directory.is_dir():
            continue
        for entry in sorted(directory.iterdir()):
            name = entry.name.removesuffix(".py") if entry.is_file() else entry.name
            if name in found or not name.isidentifier():
                continue
            if entry.is_file() and entry.suffix != ".py":
                continue
            if entry.is_dir() and not (entry / "__init__.py").is_file():
                continue
            if not any(fnmatch.fnmatchcase(name, top) for top in tops):
                continue
            if name == "taskdml" or name in sys.stdlib_module_names:
                continue
            if _imported_from(name) == entry.resolve():
                found[name] = entry
    return found


def _imported_from(name):
    """The folder or file this process imports top-level module *name* from, or ``None``."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent if origin.name == "__init__.py" else origin


def collect(packages):
    """The files of *packages*, as bytes, and their digest.

    Parameters
    ----------
    packages : dict
        ``{name: path}`` from :func:`project_packages`.

    Returns
    -------
    files : dict
        ``{relative posix path: bytes}``, e.g. ``{"myproject/features.py": b"..."}``.
    digest : str
        A hash of every path and content.

    Raises
    ------
    ClusterUnavailable
        When the files weigh more than :data:`MAX_BYTES`.
    """
    files = {}
    for path in map(Path, sorted(packages.values())):
        if path.is_file():
            files[path.name] = path.read_bytes()
            continue
        for root, folders, names in os.walk(path):
            folders[:] = sorted(f for f in folders if f not in SKIPPED and not f.startswith("."))
            for file in sorted(names):
                if file.startswith(".") or file.endswith(SKIPPED_SUFFIXES):
                    continue
                full = Path(root, file)
                files[full.relative_to(path.parent).as_posix()] = full.read_bytes()
    size = sum(map(len, files.values()))
    if size > MAX_BYTES:
        raise ClusterUnavailable(
            f"the project's packages {', '.join(sorted(packages))} weigh {format_bytes(size)}, "
            f"more than the {format_bytes(MAX_BYTES)} taskdml ships to the workers. Move data "
            "files out of the packages (read them in a step), or install the packages on the "
            "workers."
        )
    digest = hashlib.sha256()
    for relative, content in sorted(files.items()):
        digest.update(relative.encode() + b"\0" + hashlib.sha256(content).digest())
    return files, digest.hexdigest()[:16]


def ship(client, pipeline):
    """Send the project's packages to the scheduler and every worker of *client*'s cluster.

    Workers that join later receive them too; see the module docstring for which packages
    and how they are kept current.

    Parameters
    ----------
    client : distributed.Client
    pipeline : PipelineSpec

    Returns
    -------
    list of str
        The names shipped (empty when the pipeline names no project package).

    Raises
    ------
    ClusterUnavailable
        When the scheduler or a worker could not install them.
    """
    source = getattr(pipeline.source, "path", None)
    packages = project_packages(pipeline.allow, project_directories(source))
    if not packages:
        return []
    files, digest = collect(packages)
    names = tuple(sorted(packages))
    plugin = _scheduler_plugin(names, files, digest, (socket.gethostname(), os.getpid()))
    try:
        client.register_plugin(plugin, name=plugin.name)
    except Exception as error:
        raise ClusterUnavailable(
            f"could not ship the project's packages {', '.join(names)} to the cluster: "
            f"{type(error).__name__}: {error}. The scheduler and every worker need the same "
            "taskdml as this client; if they have it, see the scheduler's log, or install the "
            "packages on them (taskdml does not ship installed packages)."
        ) from error
    return list(names)


def check(client, pipeline, shipped=()):
    """Raise unless every module the pipeline names imports on the scheduler and every worker.

    Parameters
    ----------
    client : distributed.Client
    pipeline : PipelineSpec
    shipped : sequence of str
        Top-level names :func:`ship` sent: these are imported, the rest only looked up.

    Raises
    ------
    ClusterUnavailable
        Naming the module, the process, the error and the fix.
    """
    targets = [
        tuple(step.target.split(":", 1))
        for step in pipeline.steps
        if step.kind not in ("evaluate", "predict")  # their targets name no callable
    ]
    targets = list(dict.fromkeys(targets))
    shipped = tuple(shipped)
    answers = client.run(_import_errors, targets, shipped, on_error="return")
    for address, answer in answers.items():
        if isinstance(answer, BaseException):  # e.g. a worker without taskdml cannot run it
            raise ClusterUnavailable(
                f"worker {address} did not answer taskdml's import check: "
                f"{type(answer).__name__}: {answer}. Check that it runs and has the same "
                "taskdml installed as this client."
            )
    failures = {f"worker {address}": errors for address, errors in answers.items()}
    try:
        failures["the scheduler"] = client.run_on_scheduler(_import_errors, targets, shipped)
    except Exception:  # a scheduler that forbids run_on_scheduler: the workers were checked
        pass
    problems = [
        (where, module, error, missing)
        for where, errors in failures.items()
        for module, (error, missing) in errors.items()
    ]
    if not problems:
        return
    where, module, error, missing = problems[0]
    more = f" ({len(problems) - 1} more like it)" if len(problems) > 1 else ""
    if missing is None:
        fix = f"Fix the error in {module!r}, which taskdml shipped, or install it on the workers."
    elif missing in shipped:
        fix = f"{missing!r} was shipped but does not import there: see the workers' logs."
    else:
        fix = (
            f"Add '{missing}.*' to imports.allow and keep {missing!r} next to the pipeline file "
            "or in the working directory (taskdml then ships it to the workers), or install it "
            "on the workers."
        )
    raise ClusterUnavailable(f"cannot import {module!r} on {where}: {error}{more}. {fix}")


def _import_errors(targets, shipped):
    """``{module: (error, top-level module missing or None)}`` for targets that fail here."""
    errors = {}
    for module, attr in targets:
        top = module.split(".")[0]
        try:
            if top in shipped:
                owner = importlib.import_module(module)
                if attr and not hasattr(owner, attr.split(".")[0]):
                    errors[module] = (f"module {module!r} has no attribute {attr!r}", None)
            elif importlib.util.find_spec(top) is None:
                errors[module] = (f"ModuleNotFoundError: No module named {top!r}", top)
        except ModuleNotFoundError as error:  # the shipped module imports something missing
            errors[module] = (
                f"ModuleNotFoundError: {error}",
                (error.name or "").split(".")[0] or None,
            )
        except Exception as error:  # whatever the user's module raises on import
            errors[module] = (f"{type(error).__name__}: {error}", None)
    return errors


def _install(local_directory, name, names, files, digest, origin, *, runs_code=True):
    """Write *files* under *local_directory*, put them first on ``sys.path``, drop old modules:
    every module of the packages in a process that runs the code (*runs_code*, a worker), and
    only those an earlier copy loaded in one that does not (the scheduler).

    Nothing happens in the client's own process (*origin*), or when *digest* is installed.
    """
    if origin == (socket.gethostname(), os.getpid()):
        return
    if _installed.get(name, (None,))[0] == digest:
        return
    home = Path(local_directory, PLUGIN_PREFIX, name.removeprefix(PLUGIN_PREFIX + "-"))
    target = home / digest
    if not target.is_dir():
        partial = home / f".{digest}-{os.getpid()}"
        for relative, content in files.items():
            path = partial / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        partial.rename(target)
    for old in home.iterdir():
        if old != target and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    sys.path[:] = [entry for entry in sys.path if not entry.startswith(str(home) + os.sep)]
    sys.path.insert(0, str(target))
    shipped = str(home) + os.sep
    for module in [m for m in sys.modules if m.split(".")[0] in names]:
        if runs_code or (getattr(sys.modules[module], "__file__", None) or "").startswith(shipped):
            del sys.modules[module]
    importlib.invalidate_caches()
    _installed[name] = (digest, str(target))


def _plugin_name(names):
    return f"{PLUGIN_PREFIX}-{'+'.join(names)}"


def _scheduler_plugin(names, files, digest, origin):
    """The scheduler plugin of :func:`ship`, its class built here: importing this module (as
    :func:`importable` does when a pipeline is loaded) does not import distributed."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class ShipProject(SchedulerPlugin):
        def __init__(self):
            self.name = _plugin_name(names)

        async def start(self, scheduler):
            _compat.remove_scheduler_plugin(scheduler, self.name)  # no "overwriting" warning
            _install(
                scheduler.local_directory, self.name, names, files, digest, origin,
                runs_code=False,
            )  # fmt: skip
            await _compat.register_worker_plugin(
                scheduler, _worker_plugin(self.name, names, files, digest, origin), self.name
            )

    return ShipProject()


def _worker_plugin(name, names, files, digest, origin):
    from distributed.diagnostics.plugin import WorkerPlugin

    class ShipProject(WorkerPlugin):
        def setup(self, worker):
            _install(worker.local_directory, name, names, files, digest, origin)

    plugin = ShipProject()
    plugin.name = name
    return plugin
