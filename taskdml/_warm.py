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
"""

import asyncio
import hashlib
import importlib
import threading
import time
import weakref

from taskdml import _compat

WARM_PLUGIN = "taskdml-warm"
"""The name of the plugin :func:`warm` registers (the runner's list for a cluster it started)."""
PREPARED_PREFIX = "taskdml-imports-"
"""Names of the plugins :func:`prepare` registers: the prefix and a digest of the list."""
WARM_DELAY = 0.05
"""Seconds between the plugin's setup and its imports: its registration is answered first."""

_PREPARED = weakref.WeakKeyDictionary()  # client -> {plugin name}
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
        def __init__(self, modules, name, idempotent):
            self.modules, self.name, self.idempotent = modules, name, idempotent

        def setup(self, worker):
            self.seconds, self.errors, self.done = None, {}, asyncio.Event()
            asyncio.get_running_loop().call_later(WARM_DELAY, self.run)

        def run(self):
            started = time.perf_counter()
            for module in self.modules:
                try:
                    importlib.import_module(module)
                except Exception as error:  # the task that needs it raises the real error
                    self.errors[module] = f"{type(error).__name__}: {error}"
            self.seconds = time.perf_counter() - started
            self.done.set()

    return WarmImports(modules, name, idempotent)


async def _warmed(name, dask_worker):
    try:
        plugin = _compat.worker_plugin(dask_worker, name)
    except KeyError:
        return None
    await plugin.done.wait()
    return {"seconds": plugin.seconds, "errors": dict(plugin.errors)}
