"""Workers made ready ahead of the work that needs them: imports paid once per cluster.

A fresh worker imports what a task needs when it unpickles the task: scikit-learn, the
estimator's module, taskdml's task modules. Left to the tasks, a training pays these imports
on its critical path, in several stages (the chunks' inspection, the collective's plugin,
the replicas), each a round trip that waits for the slowest worker. :func:`warm` registers a
worker plugin that imports a list of modules on every worker, and on every worker that joins
later, as soon as it is registered, while the client goes on; :func:`prepare` does it once
per client and list, for the engines (:func:`taskdml.parallel.train` calls it first thing,
so the imports overlap the client's own work and the data's first movement, and a later
training on the same cluster pays nothing).

The imports run on the worker's event loop, just after the plugin's registration has been
answered, not in a thread of their own: a worker unpickles tasks and data on its event loop,
and two threads importing one package at once (taskdml's modules import each other) can see
it half-initialised and fail ("cannot import name ... from partially initialized module").
Messages that arrive meanwhile wait for the imports, which their tasks need anyway. The plugin
travels by value, so that unpickling it does not import taskdml: that is the cost hidden.
The same plugin undoes a side effect of distributed's environment on the worker's allocator
(:data:`WORKER_MMAP_THRESHOLD`), which made NumPy-heavy fits 1.5× slower in a worker than
in a plain process.

:func:`check_loadable` is the other half: the user's objects (an estimator, a ``scoring``
callable) unpickled on every worker before the first task that carries them is sent. A
worker that cannot unpickle a task message (its class or function lives in a module only the
client can import) drops its connection to the scheduler, which gives the task to another
worker that drops it too: the work never ends and nothing is raised. One ``client.run`` per
fit (a few ms on a local cluster; nothing for a payload its workers loaded before) turns that
into an error that names the parameter, the module and the fix.
"""

import asyncio
import hashlib
import importlib
import pickle
import sys
import threading
import time
import weakref

from taskdml import _compat
from taskdml._client import in_task
from taskdml.exceptions import WorkerImportError

WARM_PLUGIN = "taskdml-warm"
"""The name of the plugin :func:`warm` registers (the runner's list for a cluster it started)."""
PREPARED_PREFIX = "taskdml-imports-"
"""Names of the plugins :func:`prepare` registers: the prefix and a digest of the list."""
WARM_DELAY = 0.05
"""Seconds between the plugin's setup and its imports: its registration is answered first."""

WORKER_MMAP_THRESHOLD = 4 * 2**20
"""glibc's ``M_MMAP_THRESHOLD`` the plugins set on a worker where distributed started it with
``MALLOC_TRIM_THRESHOLD_`` (its default, to hand freed memory back) and the user set no
mmap threshold. Setting the trim threshold freezes glibc's mmap threshold at 128 KiB, so
every NumPy temporary above that is a fresh ``mmap`` whose pages fault in again: an
``MLPClassifier`` fit on 75,000 × 20 rows took 2.9 s in a worker (459,000 page faults, 0.5 s
of system time) against 1.9-2.0 s in a plain process and in the same worker with this
threshold (3,000 faults; 1, 4 and 32 MiB alike). Blocks above it (chunks) still come from
and go back to the system at once."""

_PREPARED = weakref.WeakKeyDictionary()  # client -> {plugin name}
_LOADABLE = weakref.WeakKeyDictionary()  # client -> {digest of a payload its workers loaded}
_PREPARED_LOCK = threading.Lock()  # searches train from several threads at once


def warm(client, modules, *, wait=False, name=WARM_PLUGIN):
    """Import *modules* on every worker of *client*'s cluster, without waiting for them.

    Registers a worker plugin (``distributed.WorkerPlugin``) named *name*: each worker, and
    each worker that joins later, imports the modules in order on its event loop just after
    answering the registration (see the module docstring for why not in a thread), so a task
    that arrives later finds them imported, or waits only for what is left of the import. The
    call returns once every worker has the plugin, unless *wait*. A module that fails to
    import is skipped and reported (the task that needs it will raise the real error).
    Calling it again with the same *name* replaces the list. On a cluster whose workers are
    busy, the worker's event loop is held for the import (distributed may log that it was
    unresponsive).

    Parameters
    ----------
    client : distributed.Client
    modules : sequence of str
        Module names, e.g. ``["sklearn.linear_model", "taskdml"]``.
    wait : bool, default False
        Wait until every current worker has imported them.
    name : str, default "taskdml-warm"

    Returns
    -------
    dict or None
        With *wait*: ``{worker address: {"seconds": s, "errors": {module: message}}}``.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from taskdml._warm import warm
    >>> with LocalCluster(n_workers=1, host="127.0.0.1", dashboard_address=None) as cluster:
    ...     with Client(cluster) as client:
    ...         report = warm(client, ["sklearn.linear_model"], wait=True)
    ...         [entry["errors"] for entry in report.values()]
    [{}]
    """
    client.register_plugin(_warm_plugin(tuple(modules), name), name=name)
    if wait:
        return warmed(client, name)
    return None


def warmed(client, name=WARM_PLUGIN):
    """Wait until every worker has imported the modules of the plugin *name*; its report.

    Parameters
    ----------
    client : distributed.Client
    name : str, default "taskdml-warm"

    Returns
    -------
    dict
        ``{worker address: {"seconds": s, "errors": {module: message}}}``; a worker without
        the plugin (it joined a cluster that was never warmed) reports ``None``.
    """
    return client.run(_warmed, name)


def prepare(client, modules):
    """:func:`warm` *modules*, once per client: a no-op when this client already did.

    The plugin's name is a digest of the list and the plugin is idempotent, so another client
    of the same cluster asking for the same list costs one message to the scheduler, and the
    workers import nothing twice.

    Parameters
    ----------
    client : distributed.Client
    modules : sequence of str

    Returns
    -------
    bool
        Whether a plugin was registered now.
    """
    if getattr(client, "asynchronous", False):  # its calls are coroutines: not here
        return False
    modules = tuple(dict.fromkeys(modules))
    name = PREPARED_PREFIX + hashlib.sha1(" ".join(modules).encode()).hexdigest()[:12]
    with _PREPARED_LOCK:
        done = _PREPARED.setdefault(client, set())
        if name in done:
            return False
        done.add(name)
    try:
        client.register_plugin(_warm_plugin(modules, name, idempotent=True), name=name)
    except Exception:  # a scheduler that refuses plugins: the tasks import what they need
        return False
    return True


def _warm_plugin(modules, name, idempotent=False):
    """A plugin instance of a class built here, so that it is pickled by value (see above)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class WarmImports(WorkerPlugin):
        def __init__(self, modules, name, idempotent, mmap_threshold):
            self.modules, self.name, self.idempotent = modules, name, idempotent
            self.mmap_threshold = mmap_threshold

        def setup(self, worker):
            self.seconds, self.errors, self.done = None, {}, asyncio.Event()
            self.set_mmap_threshold()
            asyncio.get_running_loop().call_later(WARM_DELAY, self.run)

        def set_mmap_threshold(self):
            """:data:`WORKER_MMAP_THRESHOLD` set where distributed's environment froze it."""
            import contextlib
            import ctypes
            import os

            m_mmap_threshold = -3  # glibc's malloc.h
            if "MALLOC_TRIM_THRESHOLD_" not in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
                return
            with contextlib.suppress(OSError, AttributeError):  # not glibc: left as it is
                ctypes.CDLL("libc.so.6").mallopt(m_mmap_threshold, self.mmap_threshold)

        def run(self):
            started = time.perf_counter()
            for module in self.modules:
                try:
                    importlib.import_module(module)
                except Exception as error:  # the task that needs it raises the real error
                    self.errors[module] = f"{type(error).__name__}: {error}"
            self.seconds = time.perf_counter() - started
            self.done.set()

    return WarmImports(modules, name, idempotent, WORKER_MMAP_THRESHOLD)


async def _warmed(name, dask_worker):
    try:
        plugin = _compat.worker_plugin(dask_worker, name)
    except KeyError:
        return None
    await plugin.done.wait()
    return {"seconds": plugin.seconds, "errors": dict(plugin.errors)}


def check_loadable(client, objects, *, owner):
    """Raise unless every worker of *client* can unpickle each of *objects*.

    Each object is pickled here with cloudpickle, as distributed pickles a task's arguments
    (by reference to its module, by value from ``__main__``), and unpickled on
    every current worker by one ``client.run``; a worker that joins later is not checked, nor
    is anything when called from inside a task (a search's replicated step trains with
    :func:`taskdml.parallel.train` in one: its objects reached the workers already). An
    estimator is checked as an unfitted clone (its classes and parameters are what the workers
    must import; a fitted state is not sent for it), and a payload the client's workers
    loaded before is not sent again: repeated fits, a search's trainings and a ``partial_fit``
    loop pay the round trip once.

    Parameters
    ----------
    client : distributed.Client or None
        Nothing is checked without one, nor with an asynchronous one.
    objects : dict
        ``{parameter name: object}``, e.g. ``{"estimator": est, "scoring": scorer}``;
        ``None`` values and strings are skipped.
    owner : str
        Who checks, for the message (``"ASHASearchCV.fit"``).

    Raises
    ------
    WorkerImportError
        Naming *owner*, the parameter, the module a worker could not import (and where this
        process imports it from), the worker, and how to make it importable there.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from sklearn.linear_model import SGDClassifier
    >>> with LocalCluster(n_workers=1, host="127.0.0.1", dashboard_address=None) as cluster:
    ...     with Client(cluster) as client:
    ...         check_loadable(client, {"estimator": SGDClassifier()}, owner="example")
    """
    if client is None or getattr(client, "asynchronous", False) or in_task():
        return
    import cloudpickle

    loaded = _LOADABLE.setdefault(client, set())
    payloads = {
        name: cloudpickle.dumps(_unfitted(value), protocol=pickle.HIGHEST_PROTOCOL)
        for name, value in objects.items()
        if value is not None and not isinstance(value, str)
    }
    digests = {name: hashlib.sha1(payload).digest() for name, payload in payloads.items()}
    payloads = {name: p for name, p in payloads.items() if digests[name] not in loaded}
    if not payloads:
        return
    answers = client.run(_unpickle_errors, payloads, on_error="return")
    for address, answer in sorted(answers.items()):
        if isinstance(answer, BaseException):  # a worker that cannot run taskdml at all
            raise WorkerImportError(
                f"{owner}: worker {address} did not answer the check that it can load "
                f"{', '.join(payloads)}: {type(answer).__name__}: {answer}. Check that it "
                "runs and has the same taskdml installed as this client."
            )
        for name, (error, module) in answer.items():
            raise WorkerImportError(_message(owner, name, objects[name], error, module, address))
    loaded.update(digests[name] for name in payloads)


def _unfitted(value):
    """*value*, or an unfitted clone of it when it is a scikit-learn estimator."""
    if not hasattr(value, "get_params") or isinstance(value, type):
        return value
    from sklearn.base import clone

    try:
        return clone(value)
    except Exception:  # not clonable (a parameter it does not keep): checked as it is
        return value


def _message(owner, name, value, error, module, address):
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    if module is None:
        return (
            f"{owner}: the workers cannot load {name}={shown}: {error} (on worker {address}). "
            "Make the same version of its code importable on the workers as here."
        )
    path = getattr(sys.modules.get(module), "__file__", None)
    here = f" (here from {path})" if path else ""
    upload = f"client.upload_file({path!r})" if path else "client.upload_file(path)"
    return (
        f"{owner}: the workers cannot import module {module!r}, which {name}={shown} needs: "
        f"{error} (on worker {address}). It is importable in this process{here} but not on "
        f"the workers. Install {module!r} on the workers, send it with {upload}, or put its "
        "directory on the workers' path (PYTHONPATH where they start)."
    )


def _unpickle_errors(payloads):
    """``{name: (error, module missing or None)}`` for the payloads this worker cannot load."""
    errors = {}
    for name, payload in payloads.items():
        try:
            pickle.loads(payload)
        except ModuleNotFoundError as error:
            errors[name] = (f"ModuleNotFoundError: {error}", error.name)
        except Exception as error:  # a class or function missing from the module, ...
            errors[name] = (f"{type(error).__name__}: {error}", None)
    return errors
