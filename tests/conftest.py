"""Shared fixtures: one real two-worker LocalCluster on 127.0.0.1 for the whole session, and
one `dask scheduler` with two `dask worker` processes for the tests that only run on one."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cluster():
    """A real LocalCluster with two worker processes on loopback."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        memory_limit="4GiB",
    ) as cluster:
        yield cluster


@pytest.fixture
def client(cluster):
    """A client of the session cluster (not the default client outside the test)."""
    from distributed import Client

    with Client(cluster, set_as_default=True) as client:
        yield client


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """The CLI's step cache of each test is its own (``TASKDML_CACHE_DIR``): a test's
    commands never reuse another test's steps, nor write into the working folder."""
    monkeypatch.setenv("TASKDML_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def wait_for():
    """``wait_for(condition, timeout, what)``: poll *condition* until it is true, or raise
    TimeoutError naming *what* after *timeout* seconds."""
    import time

    def wait(condition, timeout, what):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}")
            time.sleep(0.05)

    return wait


@pytest.fixture
def handler_calls(cluster):
    """``handler_calls(name)``: a context in which each call of the session scheduler's
    handler *name* (``"scatter"``, ``"broadcast"`` for ``client.run``) is appended to the
    list it yields; the real handler answers as before, and comes back on exit."""

    @contextlib.contextmanager
    def counting(name):
        handlers, calls = cluster.scheduler.handlers, []
        original = handlers[name]

        async def counted(*args, **kwargs):
            calls.append(name)
            return await original(*args, **kwargs)

        handlers[name] = counted
        try:
            yield calls
        finally:
            handlers[name] = original

    return counting


@pytest.fixture
def seed():
    """The seed tests use unless they sweep seeds."""
    return 0


# --------------------------------------------------------------------------------------------
# Clusters of separate processes: `dask scheduler` and `dask worker` from this environment.

START_TIMEOUT = 60


def _free_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _started_processes(folder):
    """``start(*args, env=None, name=...)`` for commands from this environment's bin, run in
    *folder* (their logs too); every one is stopped by PID on exit."""
    started, logs = [], contextlib.ExitStack()
    bin_dir = Path(sys.executable).parent

    def start(*args, env=None, name="process"):
        log = logs.enter_context(open(folder / f"{name}-{len(started)}.log", "w"))  # noqa: SIM115
        process = subprocess.Popen(
            [str(bin_dir / args[0]), *args[1:]],
            cwd=folder,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append((name, process))
        return process

    def stop(processes):
        for process in processes:  # SIGTERM to all, then wait: they close side by side
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)

    try:
        yield start
    finally:
        # Everything else before the schedulers: a worker whose scheduler went first may hang
        # in its close until it is killed.
        stop([process for name, process in reversed(started) if name != "scheduler"])
        stop([process for name, process in reversed(started) if name == "scheduler"])
        logs.close()


@pytest.fixture
def processes(tmp_path):
    """Start commands from this environment's bin; every one is stopped by PID at teardown
    (their logs stay in tmp_path, to read when a test fails)."""
    with _started_processes(tmp_path) as start:
        yield start


class DaskProcesses:
    """A `dask scheduler` and single-threaded `dask worker` processes on 127.0.0.1."""

    def __init__(self, start):
        self._start = start
        self.flags = []

    def start(self, *, workers=(None,), scheduler=None, protocol="tcp", tls=()):
        """The scheduler (with *scheduler*: extra environment variables) and one worker per
        entry of *workers* (its environment, or None); the address once they all joined."""
        from distributed.security import Security

        port = _free_port()
        address = f"{protocol}://127.0.0.1:{port}"
        self.flags = [str(part) for option in tls for part in option]
        self._start(
            "dask",
            "scheduler",
            "--protocol",
            protocol,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dashboard-address",
            "127.0.0.1:0",
            *self.flags,
            env=scheduler,
            name="scheduler",
        )
        for env in workers:
            self.add_worker(address, env)
        self.security = None
        if tls:
            files = dict(tls)
            self.security = Security(
                tls_ca_file=str(files["--tls-ca-file"]),
                tls_client_cert=str(files["--tls-cert"]),
                tls_client_key=str(files["--tls-key"]),
                require_encryption=True,
            )
        self.wait_for(address, len(workers))
        return address

    def add_worker(self, address, env=None):
        """One more worker process (not waited for)."""
        return self._start(
            "dask",
            "worker",
            address,
            "--nthreads",
            "1",
            "--host",
            "127.0.0.1",
            "--dashboard-address",
            "127.0.0.1:0",
            "--no-nanny",
            *self.flags,
            env=env,
            name="worker",
        )

    def wait_for(self, address, n_workers):
        import time

        from distributed import Client

        deadline = time.monotonic() + START_TIMEOUT
        while True:  # the scheduler may not listen yet
            try:
                with Client(
                    address, timeout="5s", set_as_default=False, security=self.security
                ) as client:
                    client.wait_for_workers(n_workers, timeout=START_TIMEOUT)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


@pytest.fixture
def dask_cluster(processes):
    """:class:`DaskProcesses`, stopped by PID at teardown."""
    return DaskProcesses(processes)


@pytest.fixture(scope="session")
def separate_scheduler(tmp_path_factory):
    """The address of a `dask scheduler` and two `dask worker` processes shared by the tests
    that only run a pipeline on them (a test that changes its cluster uses dask_cluster)."""
    with _started_processes(tmp_path_factory.mktemp("separate-scheduler")) as start:
        yield DaskProcesses(start).start(workers=(None, None))


def pytest_collection_modifyitems(items):
    """The files with the most ``slow`` tests first, the others in their order: with the
    suite in two processes (``-n 2 --dist loadfile``, the README's command) the files of
    minutes start early, and the two processes end together."""
    slow = {}
    for item in items:
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    order = {path: position for position, path in enumerate(slow)}
    items.sort(key=lambda item: (-slow[item.path], order[item.path]))
