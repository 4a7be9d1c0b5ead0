"""Warm workers: the modules a run needs are imported on every worker from its start."""

import sys

import pytest

from taskdml import PipelineSpec, Step
from taskdml.cluster._connect import WARM_MODULES, connect, pipeline_modules, warm

UNUSED = "sklearn.semi_supervised"  # imported by nothing a worker runs unless asked


def _imported(modules):
    return {module: module in sys.modules for module in modules}


@pytest.fixture
def fresh_client():
    """A client of a new one-worker LocalCluster (processes): nothing imported yet."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


def test_warm_imports_the_modules_on_every_worker(fresh_client):
    """After warm(wait=True) the modules are in the workers' sys.modules, which they were not;
    a module that cannot be imported is reported, not raised."""
    modules = [UNUSED, "sklearn.cross_decomposition", "no_such_module_here"]
    assert not any(fresh_client.run(_imported, modules[:2]).popitem()[1].values())
    report = warm(fresh_client, modules, wait=True)
    (entry,) = report.values()
    assert list(entry["errors"]) == ["no_such_module_here"]
    assert "ModuleNotFoundError" in entry["errors"]["no_such_module_here"]
    imported = fresh_client.run(_imported, modules[:2]).popitem()[1]
    assert imported == {UNUSED: True, "sklearn.cross_decomposition": True}


def test_warm_returns_before_the_imports_finish(fresh_client):
    """Without wait the call returns None at once; the plugin's thread imports meanwhile."""
    assert warm(fresh_client, [UNUSED]) is None
    assert warm(fresh_client, [UNUSED], wait=True).popitem()[1]["errors"] == {}


def test_pipeline_modules_lists_every_named_module_then_the_basics():
    """The modules of the call, fit and search targets in step order, then WARM_MODULES."""
    pipeline = PipelineSpec(
        "named",
        [
            Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
            Step("spread", fit=f"{UNUSED}:LabelSpreading", inputs={"data": "data"}),
            Step("bayes", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
            Step("score", evaluate=["accuracy"], inputs={"model": "bayes", "data": "data"}),
        ],
    )
    assert pipeline_modules(pipeline) == [
        "taskdml.datasets",
        UNUSED,
        "sklearn.naive_bayes",
        *WARM_MODULES,
    ]


def test_connect_warms_only_the_clusters_it_starts(cluster):
    """An embedded cluster gets the plugin; a cluster reached by address is left as it is."""
    block = {"n_workers": 1, "threads_per_worker": 1, "dashboard_address": "127.0.0.1:0"}
    with connect(block, warm_modules=[UNUSED]) as client:
        assert client.run(_plugins).popitem()[1] == ["taskdml-warm"]
    with connect({"address": cluster.scheduler_address}, warm_modules=[UNUSED]) as client:
        assert all("taskdml-warm" not in names for names in client.run(_plugins).values())


def _plugins(dask_worker):
    return sorted(name for name in dask_worker.plugins if name.startswith("taskdml-warm"))


def test_docstring_examples_run():
    """The examples in taskdml.cluster._connect's docstrings run."""
    import doctest

    import taskdml.cluster._connect

    failures, tried = doctest.testmod(taskdml.cluster._connect)
    assert tried > 0 and failures == 0


@pytest.mark.parametrize(
    ("address", "warned"),
    [
        ("tcp://127.0.0.1:8786", False),
        ("tcp://localhost:8786", False),
        ("tcp://[::1]:8786", False),
        ("tls://10.0.0.5:8786", False),
        ("tcp://10.0.0.5:8786", True),
        ("tcp://[2001:db8::1]:8786", True),
        ("tcp://scheduler.example:8786", True),
    ],
)
def test_plain_tcp_to_another_host_is_flagged(address, warned):
    """Plain tcp:// to anything but this machine's loopback gets an InsecureConnectionWarning
    when taskdml connects (tls:// and loopback do not)."""
    from taskdml.cluster._connect import plain_remote

    assert plain_remote(address) is warned
