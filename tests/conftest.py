"""Shared fixtures: one real two-worker LocalCluster on 127.0.0.1 for the whole session."""

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


@pytest.fixture
def seed():
    """The seed tests use unless they sweep seeds."""
    return 0
