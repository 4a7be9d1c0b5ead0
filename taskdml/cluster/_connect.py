"""Start or reach the Dask cluster a run uses.

Precedence: an explicit ``Client`` > an address given on the command line (``--scheduler``) >
the pipeline's ``cluster`` block (``taskdml run --cluster MODULE:CLASS`` sets its ``spec.class``)
(``address``, ``spec`` or LocalCluster settings) > a LocalCluster with one single-threaded
worker process per core. Everything taskdml starts itself binds to 127.0.0.1, the dashboard
too unless its address names a host (:func:`loopback_dashboard`: distributed serves a port
alone on every interface), a ``spec`` LocalCluster's as well; any other cluster class named in
``spec`` is the user's choice and binds where it is told.

Any deployment, one pipeline file: an address may be ``tcp://`` or ``tls://``, the latter with
the block's ``security`` (the keyword arguments of ``distributed.security.Security``, also given
to a cluster class started here). A ``spec`` class is any cluster manager the allow-list
:data:`CLUSTER_CLASSES` admits (``distributed:LocalCluster``, ``dask_jobqueue:SLURMCluster``,
``dask_kubernetes.operator:KubeCluster``, ...), started with ``spec.kwargs`` and then sized with
``scale: N`` or ``adapt: {minimum, maximum}``: nothing here is particular to one of them. The
runner then checks that the workers run the client's versions (:mod:`taskdml.cluster._versions`).
The client is never made the process-wide default: the runner activates it per step with
``Client.as_current``, so embedding taskdml in a program with its own client is safe.

**What a file may ask of this machine.** A pipeline file is data from anyone, and the cluster
started here runs on the machine of whoever runs the file, so what the file's ``cluster`` block
asks of a LocalCluster (the default, or ``spec.class`` a LocalCluster) is capped, with a
:class:`~taskdml.exceptions.ClusterLimitWarning` naming the key and what it got:
workers × ``threads_per_worker``, silo workers included, to :data:`THREADS_PER_CORE` threads
per core (at least :data:`MIN_THREADS`): twice the cores leaves room for tasks that wait on
I/O, while 500 worker processes would take 140 GiB for their imports alone; and workers ×
``memory_limit`` (no limit counts as all of it) to the machine's memory, so that the limits
still stop a worker before the machine runs out. What the command line asks for is not
capped: ``--workers N`` (``n_workers=``); for more threads or memory, start the cluster
yourself and pass ``--scheduler``. ``imports.trust`` does not lift the caps: a file can
write it about itself.

**Warm workers.** A fresh worker imports scikit-learn (and taskdml, which imports it) on its
first task: about a second and 280 MiB per worker, paid on the critical path of the first
step that needs it. :func:`warm` registers a worker plugin that imports a list of modules on
every worker (and on workers that join later) as soon as it is registered, while the client
goes on: the imports overlap whatever the client does meanwhile (preparing the run, loading
data). The runner warms the clusters it starts itself with :func:`pipeline_modules` (the
modules of every callable and estimator the pipeline names, what its step kinds run on the
workers, and the basics of :data:`WARM_MODULES`), and its first step waits until they are
imported; a cluster reached by address or a client passed in is left as it is
(call :func:`warm` on it yourself). The user's own packages, unlike these imports, reach every
cluster, started here or not: the runner ships them after connecting
(:mod:`taskdml.cluster._project`). :func:`taskdml._warm.warmed` waits until the imports
are done (the runner does, before it weighs a step's output against the workers' memory).

How the plugin imports, and why on the worker's event loop, is in :mod:`taskdml._warm`.
"""

import contextlib
import dataclasses
import logging
import os
import warnings
import weakref

from taskdml import _compat
from taskdml._warm import warm
from taskdml.exceptions import (
    ClusterLimitWarning,
    ClusterUnavailable,
    InsecureConnectionWarning,
    PipelineError,
)
from taskdml.pipeline._model import resolve_callable, thaw
from taskdml.pipeline._schema import SECURITY_FILES

CLUSTER_CLASSES = (
    "distributed",
    "distributed.*",
    "dask_jobqueue",
    "dask_jobqueue.*",
    "dask_kubernetes",
    "dask_kubernetes.*",
    "dask_cloudprovider.*",
    "dask_gateway",
)
CONNECT_TIMEOUT = "10s"
"""How long a run tries to reach a scheduler before exit 4 (dask config
``taskdml.connect-timeout`` overrides it)."""
WARM_MODULES = ("taskdml", "sklearn.base", "sklearn.utils", "sklearn.metrics")
"""What every run's workers need whatever the pipeline names: taskdml's task functions (which
import scikit-learn's base, utilities and metrics)."""
KIND_MODULES = {
    "fit": ("taskdml.parallel.engine._train", "taskdml.parallel.merge._builtin"),
    "search": ("taskdml.parallel.engine._train", "taskdml.parallel.merge._builtin"),
    "evaluate": ("taskdml.metrics",),
    "predict": ("taskdml.runs._predict",),
}
"""What the tasks of a step kind unpickle on the workers, by kind: the training engine's
replicas and the merge rules (whose registry loads every built-in family at its first
lookup), the chunk-wise metrics."""
THREADS_PER_CORE = 2
"""Threads (workers × threads_per_worker) per core a pipeline file may ask of this machine."""
MIN_THREADS = 4
"""Threads a pipeline file may always ask of this machine, however few its cores."""
PORT_TAKEN = r"Port \d+ is already in use"
"""The start of distributed's warning when a dashboard port is taken (a regular expression)."""
_ASKED_DASHBOARD = weakref.WeakKeyDictionary()  # cluster started here -> dashboard port it asked


def machine():
    """What this process may use of the machine: ``(cores, bytes of memory)``.

    Returns
    -------
    tuple of int
        :func:`default_workers` and ``distributed.system.MEMORY_LIMIT`` (which counts
        cgroup and rlimit limits).
    """
    from distributed.system import MEMORY_LIMIT

    return default_workers(), MEMORY_LIMIT


def default_workers():
    """Worker processes of the embedded cluster when nothing says otherwise: one per core.

    Returns
    -------
    int
        The cores this process may run on (at least 1).
    """
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )


@dataclasses.dataclass(frozen=True)
class Target:
    """The cluster a run will use, chosen before it starts (:func:`choose`).

    Attributes
    ----------
    kind : {"client", "address", "spec", "local"}
        A client passed in; a scheduler address; a cluster class of the file's ``spec``; the
        embedded ``LocalCluster``.
    description : str
        What ``--dry-run`` prints ("embedded LocalCluster on 127.0.0.1 with 2 workers").
    cluster : dict
        The file's ``cluster`` block.
    address : str or None
    n_workers : int or None
        Workers of a cluster started here (``None``: a spec's own default).
    client : distributed.Client or None
    silos : dict
    """

    kind: str
    description: str
    cluster: dict
    address: str | None = None
    n_workers: int | None = None
    client: object = None
    silos: dict = dataclasses.field(default_factory=dict)


def choose(cluster=None, *, scheduler=None, n_workers=None, client=None, silos=None):
    """Where a run goes, by the one precedence rule: a client passed in, then a scheduler
    address (the command line's, then the file's), then the file's ``spec``, then the embedded
    ``LocalCluster`` (*n_workers*, then the file's ``n_workers``, then one per core).

    Parameters
    ----------
    cluster : mapping, optional
        The pipeline's ``cluster`` block.
    scheduler, n_workers, client, silos
        As :func:`connect` takes them.

    Returns
    -------
    Target

    Examples
    --------
    >>> choose({"n_workers": 2}).description
    'embedded LocalCluster on 127.0.0.1 with 2 workers'
    >>> choose({"n_workers": 2}, scheduler="tcp://10.0.0.5:8786").kind
    'address'
    """
    cluster, silos = thaw(cluster or {}), thaw(silos or {})
    if client is not None:
        where = getattr(client, "scheduler", None)
        where = getattr(where, "address", None) or "the client passed in"
        return Target("client", f"the client passed in ({where})", cluster, client=client)
    address = scheduler or cluster.get("address")
    if address:
        return Target("address", address, cluster, address=address, silos=silos)
    cluster = within_machine(cluster, n_workers, silos)  # what a file may ask of this machine
    spec = cluster.get("spec")
    if spec:
        return Target(
            "spec",
            f"{spec['class']} started with {spec.get('kwargs', {})!r}",
            cluster,
            n_workers=n_workers,
            silos=silos,
        )
    n = n_workers or cluster.get("n_workers") or default_workers()
    return Target(
        "local",
        f"embedded LocalCluster on 127.0.0.1 with {n} workers",
        cluster,
        n_workers=n,
        silos=silos,
    )


@contextlib.contextmanager
def connect(
    cluster=None,
    *,
    scheduler=None,
    n_workers=None,
    client=None,
    warm_modules=(),
    silos=None,
):
    """Yield a ``distributed.Client`` for a run, and close what this call started.

    Parameters
    ----------
    cluster : mapping, optional
        The pipeline's ``cluster`` block.
    scheduler : str, optional
        Address of a running scheduler (``tcp://`` or ``tls://``, with the block's
        ``security`` for the latter); overrides *cluster*'s address and spec.
    n_workers : int, optional
        Worker count of an embedded LocalCluster; overrides ``cluster.n_workers``.
    client : distributed.Client, optional
        Use this client as it is and leave it open.
    warm_modules : sequence of str, optional
        Modules the workers of a cluster started here import in the background from their
        start (:func:`warm`); not used for a cluster reached by address or *client*.
    silos : mapping, optional
        The pipeline's ``silos`` block. An embedded LocalCluster gets one more worker per silo
        that names ``resources``, started with them and named ``silo-<name>``; any other
        cluster must already have workers with those resources.

    Yields
    ------
    distributed.Client
        Not the default client: callers activate it with ``Client.as_current``.

    Raises
    ------
    ClusterUnavailable
        When the cluster cannot be started or the scheduler cannot be reached; the message
        says how to fix it.
    """
    target = choose(cluster, scheduler=scheduler, n_workers=n_workers, client=client, silos=silos)
    with open_target(target, warm_modules=warm_modules) as opened:
        yield opened


@contextlib.contextmanager
def open_target(target, *, warm_modules=()):
    """Yield a ``distributed.Client`` for *target* (:func:`choose`); close what was started.

    Parameters
    ----------
    target : Target
    warm_modules : sequence of str, optional
        As :func:`connect` takes them.

    Yields
    ------
    distributed.Client
    """
    if target.kind == "client":
        yield target.client
        return
    cluster = target.cluster
    security = _security(cluster.get("security"))
    with contextlib.ExitStack() as stack:
        if target.kind == "address":
            where = f"the scheduler at {target.address}"
            yield stack.enter_context(_client(target.address, where, security))
            return
        deployment = stack.enter_context(_start(cluster, target.n_workers, security))
        started = stack.enter_context(
            _client(deployment, f"the cluster {type(deployment).__name__}")
        )
        _size(deployment, cluster.get("spec", {}))
        if target.kind == "local" and _add_silo_workers(deployment, target.silos):
            started.wait_for_workers(len(deployment.worker_spec), timeout=120)
        if warm_modules:
            warm(started, warm_modules)
        yield started


def within_machine(cluster, n_workers=None, silos=None):
    """The ``cluster`` block with what it asks of this machine capped (see the module docstring).

    Parameters
    ----------
    cluster : dict
        The pipeline's ``cluster`` block, plain dicts; not changed.
    n_workers : int, optional
        Workers the command line asks for (``--workers``): not capped.
    silos : mapping, optional
        The pipeline's ``silos`` block: the embedded cluster starts a worker more for each silo
        that names ``resources``.

    Returns
    -------
    dict
        A copy, capped where a LocalCluster started here would ask more of the machine than a
        pipeline file may; each cap warns with a :class:`~taskdml.exceptions.ClusterLimitWarning`.
        The blocks of other clusters come back as they are.

    Raises
    ------
    ClusterUnavailable
        When the silo workers alone exceed what a file may ask for.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     capped = within_machine({"n_workers": 10**6, "threads_per_worker": 1})
    >>> capped["n_workers"] <= max(MIN_THREADS, THREADS_PER_CORE * machine()[0])
    True
    """
    import copy

    from dask.utils import format_bytes

    cluster = copy.deepcopy(cluster)
    if cluster.get("address"):
        return cluster  # a scheduler that runs elsewhere
    spec = cluster.get("spec")
    at, block = "cluster", cluster
    if spec:
        from distributed import LocalCluster

        try:
            cls = resolve_callable(spec["class"], CLUSTER_CLASSES)
        except PipelineError:  # not importable here: starting it says so, a plan need not
            return cluster
        if not (isinstance(cls, type) and issubclass(cls, LocalCluster)):
            return cluster  # its workers run where the cluster manager puts them
        at, block = "cluster.spec.kwargs", spec.setdefault("kwargs", {})
    silo_workers = 0 if spec else sum("resources" in silo for silo in (silos or {}).values())
    cores, memory = machine()
    limit = max(MIN_THREADS, THREADS_PER_CORE * cores)
    allowed = (
        f"more than the {limit} threads a pipeline file may ask of this machine "
        f"({THREADS_PER_CORE} per core, {_count(cores, 'core')})"
    )
    yourself = "start the cluster yourself and pass --scheduler ADDRESS"
    fix = f"Ask for more workers on the command line with --workers N, or {yourself}."
    if silo_workers > limit:
        raise ClusterUnavailable(
            f"silos: the file's {silo_workers} silos would each start a worker in the embedded "
            f"cluster, {allowed}. Run it on a cluster whose workers hold the silos' resources: "
            "--scheduler ADDRESS."
        )
    threads = block.get("threads_per_worker") or 1
    default = max(1, cores // threads) if spec else cores  # as LocalCluster and _start choose
    workers = n_workers or block.get("n_workers") or default
    if n_workers is None and "n_workers" in block and (workers + silo_workers) * threads > limit:
        workers = max(1, limit // threads - silo_workers)
        besides = f" besides {silo_workers} silo workers" if silo_workers else ""
        _cap(
            block,
            f"{at}.n_workers",
            workers,
            f"{block['n_workers']} workers of {_count(threads, 'thread')}{besides}, {allowed}",
            fix,
        )
    if "threads_per_worker" in block and (workers + silo_workers) * threads > limit:
        threads = max(1, limit // (workers + silo_workers))
        _cap(
            block,
            f"{at}.threads_per_worker",
            threads,
            f"{block['threads_per_worker']} threads for each of "
            f"{_count(workers + silo_workers, 'worker')}, {allowed}",
            f"For more threads, {yourself}.",
        )
    for sized, key in ((spec, "scale"), ((spec or {}).get("adapt"), "maximum")):
        if sized and sized.get(key, 0) * threads > limit:
            workers = max(1, limit // threads)
            where = "cluster.spec.scale" if key == "scale" else "cluster.spec.adapt.maximum"
            asked = f"{sized[key]} workers of {_count(threads, 'thread')}, {allowed}"
            _cap(sized, where, workers, asked, f"For more workers, {yourself}.")
    each = _bytes(block.get("memory_limit", "auto"), memory)
    processes = workers + silo_workers
    if each is not None and each * processes > memory:
        asked = "no limit" if each == float("inf") else f"{format_bytes(each * processes)} in all"
        _cap(
            block,
            f"{at}.memory_limit",
            memory // processes,
            f"memory_limit {block['memory_limit']!r} for each of {_count(processes, 'worker')} "
            f"({asked}), more than this machine's {format_bytes(memory)}",
            f"The limits must stop a worker before the machine runs out; for more, {yourself}.",
        )
    return cluster


def _cap(block, where, value, asked, fix):
    """Set the last key of *where* in *block* to *value*, and say so."""
    from dask.utils import format_bytes

    key = where.rpartition(".")[2]
    shown = format_bytes(value) if key == "memory_limit" else value
    warnings.warn(
        f"{where}: the pipeline file asks for {asked}; capped to {shown}. {fix}",
        ClusterLimitWarning,
        stacklevel=3,
    )
    block[key] = value


def _count(n, noun):
    return f"{n} {noun}{'s' * (n != 1)}"


def _bytes(limit, memory):
    """A ``memory_limit`` in bytes (infinity for no limit), or ``None`` for ``"auto"`` and what
    LocalCluster will refuse itself."""
    from dask.utils import parse_bytes

    if limit in (None, "auto") or isinstance(limit, bool):
        return None
    try:
        number = float(limit)
    except ValueError:
        try:
            number = parse_bytes(limit)
        except ValueError:
            return None
    if number <= 0:  # LocalCluster reads 0 as no limit
        return float("inf")
    return number * memory if number <= 1 else number


def _security(block):
    """``distributed.security.Security`` from the block's ``security`` keys, or ``None``.

    The keys are Security's keyword arguments (the schema lists them, so a misspelt one is a
    pipeline error with a "did you mean"); TLS versions are written 1.2 or 1.3.
    """
    if not block:
        return None
    import ssl

    from distributed.security import Security

    versions = {1.2: ssl.TLSVersion.TLSv1_2, 1.3: ssl.TLSVersion.TLSv1_3}
    kwargs = {
        key: versions[value] if key in ("tls_min_version", "tls_max_version") else value
        for key, value in block.items()
    }
    missing = [kwargs[key] for key in SECURITY_FILES if key in kwargs]
    missing = [path for path in missing if not os.path.isfile(path)]
    if missing:
        raise ClusterUnavailable(
            f"the cluster's security block names {missing[0]!r}, which is not a file. Give the "
            "PEM files' paths, relative to the pipeline file with ${path:certs/client.pem}."
        )
    return Security(**kwargs)


def _start(cluster, n_workers, security):
    from distributed import LocalCluster

    spec = cluster.get("spec")
    if spec:
        cls = resolve_callable(spec["class"], CLUSTER_CLASSES)
        kwargs = dict(spec.get("kwargs", {}))
        if n_workers:
            kwargs["n_workers"] = n_workers
        asked = dict(kwargs)  # what the file and the command line say, for the message
        if security is not None:
            kwargs.setdefault("security", security)
        if isinstance(cls, type) and issubclass(cls, LocalCluster):  # its default is ":8787"
            kwargs["dashboard_address"] = loopback_dashboard(
                kwargs.get("dashboard_address", DASHBOARD_ADDRESS)
            )
        return _guarded(cls, kwargs, asked)
    kwargs = {
        "n_workers": n_workers or cluster.get("n_workers") or default_workers(),
        "threads_per_worker": cluster.get("threads_per_worker", 1),
        "processes": cluster.get("processes", True),
        "memory_limit": cluster.get("memory_limit", "auto"),
        "host": "127.0.0.1",
        "dashboard_address": loopback_dashboard(
            cluster.get("dashboard_address", DASHBOARD_ADDRESS)
        ),
        "silence_logs": logging.ERROR,
    }
    if not kwargs["processes"]:  # threads in this process: inproc:// cannot take a host
        kwargs["protocol"] = "tcp://"
    return _guarded(LocalCluster, kwargs)


DASHBOARD_ADDRESS = "127.0.0.1:8787"
"""Where a LocalCluster started here serves its dashboard when the file does not say."""


def loopback_dashboard(address):
    """*address* for a LocalCluster's dashboard, on 127.0.0.1 unless it names a host.

    distributed serves a dashboard address without a host (``":8787"``, ``"8787"``, the
    default of ``LocalCluster``) on every interface, 0.0.0.0: the cluster's state, task code
    and profiles open to the network. A port alone is taken as a port on 127.0.0.1; an
    address that names a host (``"0.0.0.0:8787"`` to serve the network on purpose) and
    ``None`` (no dashboard) are kept.

    Examples
    --------
    >>> loopback_dashboard(":8787"), loopback_dashboard(0), loopback_dashboard("0.0.0.0:8787")
    ('127.0.0.1:8787', '127.0.0.1:0', '0.0.0.0:8787')
    """
    if address is None:
        return None
    addresses = []
    for part in str(address).split(","):  # distributed takes a comma-separated list
        host, _, port = part.strip().rpartition(":")
        addresses.append(part.strip() if host else f"127.0.0.1:{port}")
    return ",".join(addresses)


def _add_silo_workers(cluster, silos):
    """Add a worker per silo that names resources to a LocalCluster; whether any was added.

    This is how a federated pipeline runs on one machine: each silo's worker group is a
    worker of its own, holding its resource, so the silo's tasks go there only.
    """
    import copy

    added = False
    for name, silo in silos.items():
        if "resources" in silo:
            spec = copy.deepcopy(cluster.new_spec)
            spec["options"]["resources"] = dict(silo["resources"])
            cluster.worker_spec[f"silo-{name}"] = spec
            added = True
    if added:
        cluster.scale(len(cluster.worker_spec))
    return added


def _size(deployment, spec):
    """``scale: N`` or ``adapt: {minimum, maximum}`` on a cluster manager started here."""
    try:
        if "scale" in spec:
            deployment.scale(spec["scale"])
        elif "adapt" in spec:
            deployment.adapt(**spec["adapt"])
    except Exception as error:  # a manager without scale/adapt, or one that refuses
        raise ClusterUnavailable(
            f"could not size {type(deployment).__name__} with "
            f"{'scale' if 'scale' in spec else 'adapt'}: {type(error).__name__}: {error}. "
            "Use a cluster manager that can scale (any distributed.SpecCluster: LocalCluster, "
            "dask_jobqueue's SLURMCluster, dask_kubernetes' KubeCluster), or remove it."
        ) from error


def _guarded(cls, kwargs, shown=None):
    """``cls(**kwargs)``, or :class:`ClusterUnavailable` naming the class and *shown* (default
    *kwargs*: what the file asked for, without what taskdml added to it)."""
    try:
        with warnings.catch_warnings():
            # distributed warns, with its source line, when the dashboard's port is taken and
            # it binds another: describe() says so in taskdml's words instead. The filter is
            # process-wide while it lasts, which it must be: the scheduler starts (and warns)
            # in the cluster's own event-loop thread.
            warnings.filterwarnings("ignore", message=PORT_TAKEN, category=UserWarning)
            deployment = cls(**kwargs)
    except Exception as error:  # any failure to deploy is the same failure for the user
        shown = kwargs if shown is None else shown
        raise ClusterUnavailable(
            f"could not start {cls.__name__}({_kwargs(shown)}): {type(error).__name__}: {error}. "
            "Check the cluster block of the pipeline file, or pass --scheduler ADDRESS to use a "
            "running scheduler."
        ) from error
    asked = _port(kwargs.get("dashboard_address"))
    if asked is not None:
        with contextlib.suppress(TypeError):  # a cluster class that cannot be weakly referenced
            _ASKED_DASHBOARD[deployment] = asked
    return deployment


def _port(address):
    """The port a ``dashboard_address`` asks for (``"127.0.0.1:8787"``, ``":8787"``, 8787), or
    ``None`` for none, any (0) or one not written as a number.

    Examples
    --------
    >>> _port("127.0.0.1:8787"), _port(":0"), _port(None), _port(8787)
    (8787, None, None, 8787)
    """
    if address is None or isinstance(address, bool):
        return None
    try:
        return int(str(address).rpartition(":")[2]) or None
    except ValueError:
        return None


def _client(target, what, security=None):
    import dask
    from distributed import Client

    timeout = dask.config.get("taskdml.connect-timeout", CONNECT_TIMEOUT)

    if isinstance(target, str) and plain_remote(target):
        warnings.warn(
            f"connecting to {target} over plain tcp://: the messages, pickled tasks and data "
            "included, are neither encrypted nor authenticated on the network. Use tls:// "
            "with a security block in the cluster block (or keep the scheduler on 127.0.0.1).",
            InsecureConnectionWarning,
            stacklevel=4,
        )
    if isinstance(target, str) and target.startswith("tls://") and security is None:
        from distributed.security import Security

        if Security().get_connection_args("client")["ssl_context"] is None:
            raise ClusterUnavailable(
                f"{target} is a TLS address but nothing says which certificates to use. Add a "
                "security block to the cluster block (tls_ca_file, tls_client_cert, "
                "tls_client_key), or set distributed.comm.tls in dask's configuration."
            )
    try:
        return Client(target, timeout=timeout, set_as_default=False, **_given(security=security))
    except (OSError, TimeoutError) as error:
        raise ClusterUnavailable(
            f"could not connect to {what} within {timeout}: {error}. Start one with "
            "'dask scheduler --host 127.0.0.1' and 'dask worker tcp://127.0.0.1:8786', or fix "
            "the address (cluster.address in the file or --scheduler)."
        ) from error


def _given(**kwargs):
    return {key: value for key, value in kwargs.items() if value is not None}


def plain_remote(address):
    """Whether *address* is plain ``tcp://`` to a host other than this one's loopback.

    Examples
    --------
    >>> plain_remote("tcp://10.0.0.5:8786"), plain_remote("tcp://127.0.0.1:8786")
    (True, False)
    >>> plain_remote("tls://10.0.0.5:8786"), plain_remote("tcp://localhost:8786")
    (False, False)
    """
    import ipaddress
    from urllib.parse import urlsplit

    if not address.startswith("tcp://"):
        return False
    host = urlsplit(address).hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: not known to be this machine
        return True


def describe(client):
    """What the run ran on, for the manifest and the progress line.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    dict
        ``scheduler`` (address), ``dashboard`` (the link, or ``None`` when the scheduler serves
        no dashboard), ``workers``, ``threads`` and ``cluster`` (the deployment's class name,
        or ``"address"`` for a scheduler reached by address); ``dashboard_port_taken``, the
        port a cluster started here asked for its dashboard, when something else held it and
        the dashboard went to another port (distributed's own warning is silenced).
    """
    threads = client.nthreads()
    described = {
        "scheduler": _compat.scheduler_address(client),
        "dashboard": client.dashboard_link if serves_dashboard(client) else None,
        "workers": len(threads),
        "threads": sum(threads.values()),
        "cluster": type(client.cluster).__name__ if client.cluster is not None else "address",
    }
    asked = _ASKED_DASHBOARD.get(client.cluster) if client.cluster is not None else None
    if asked is not None and described["dashboard"]:
        from urllib.parse import urlsplit

        if urlsplit(described["dashboard"]).port != asked:
            described["dashboard_port_taken"] = asked
    return described


NO_DASHBOARD = (
    "no dashboard: the scheduler serves none (it needs bokeh>=3.1 installed where "
    "it runs, and its dashboard enabled)"
)


def serves_dashboard(client):
    """Whether the scheduler of *client* really serves the Bokeh dashboard.

    A scheduler always answers HTTP on its dashboard port (health, metrics, a page asking for
    bokeh), so ``client.dashboard_link`` alone does not say a dashboard is there: this asks
    the scheduler whether a Bokeh application is mounted on its HTTP server.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    bool
        ``False`` also when the scheduler refuses to run the check.
    """
    try:
        return bool(client.run_on_scheduler(_bokeh_mounted))
    except Exception:  # a scheduler that forbids run_on_scheduler: nothing proves a dashboard
        return False


def _bokeh_mounted(dask_scheduler):
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:
        return False
    application = getattr(dask_scheduler, "http_application", None)
    return any(isinstance(app, BokehTornado) for app in getattr(application, "applications", ()))


def _kwargs(kwargs):
    return ", ".join(f"{key}={value!r}" for key, value in kwargs.items())


def pipeline_modules(pipeline, skip=()):
    """The modules a pipeline's workers need: its callables' and estimators', what its step
    kinds run there, then the basics.

    Parameters
    ----------
    pipeline : PipelineSpec
    skip : collection of str, optional
        Steps that will not run (the plan reuses their outputs from the cache): their modules
        are left out, unless another step needs them.

    Returns
    -------
    list of str
        The module of every ``call``, ``fit`` and ``search`` target in step order, each
        followed by the module that defines the target when another does (a lazy package such
        as ``taskdml.datasets`` imports nothing until an attribute is asked for); then
        :data:`KIND_MODULES` of the pipeline's kinds; then :data:`WARM_MODULES`; without
        repeats. Empty when every step is skipped.

    Examples
    --------
    >>> from taskdml import PipelineSpec, Step
    >>> pipe = PipelineSpec("iris", [
    ...     Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
    ...     Step("model", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
    ... ])
    >>> pipeline_modules(pipe)[:3]
    ['taskdml.datasets', 'taskdml.datasets._bundled', 'sklearn.naive_bayes']
    """
    steps = [step for step in pipeline.ordered_steps() if step.name not in skip]
    if not steps:  # a rerun read from the cache: the workers need only what reading needs
        return []
    named = []
    for step in steps:
        if step.kind not in ("evaluate", "predict"):  # their targets name no callable
            named += [step.target.partition(":")[0], _defining_module(step.target)]
    kinds = [module for step in steps for module in KIND_MODULES.get(step.kind, ())]
    return [m for m in dict.fromkeys(named + kinds + list(WARM_MODULES)) if m is not None]


def _defining_module(target):
    """The module that defines ``"module:attr"``, if its module is imported here already (the
    pipeline's validation imported it): no import of the user's code happens for this."""
    import sys

    module, _, attr = target.partition(":")
    loaded = sys.modules.get(module)
    if loaded is None or not attr:
        return None
    try:
        found = getattr(loaded, attr.partition(".")[0])
    except Exception:  # a lazy attribute that fails: the step will say so
        return None
    defining = getattr(found, "__module__", None)
    return defining if isinstance(defining, str) else None
