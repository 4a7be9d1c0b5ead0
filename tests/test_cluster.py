"""Warm workers: the modules a run needs are imported on every worker from its start."""

import os
import sys

import pytest

from taskdml import PipelineSpec, Step
from taskdml._warm import warmed
from taskdml.cluster._connect import (
    KIND_MODULES,
    WARM_MODULES,
    connect,
    pipeline_modules,
    warm,
)

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
    """Without wait the call returns None at once; the plugin's thread imports meanwhile,
    and warmed returns once they are done (at once on workers never warmed)."""
    warmed(fresh_client)
    assert warm(fresh_client, [UNUSED]) is None
    warmed(fresh_client)
    assert fresh_client.run(_imported, [UNUSED]).popitem()[1] == {UNUSED: True}
    assert warm(fresh_client, [UNUSED], wait=True).popitem()[1]["errors"] == {}


def _on_path(folder):
    sys.path.insert(0, folder)


def test_held_counts_the_warm_imports_of_a_cluster_just_started(tmp_path):
    """A step's output is persisted or left lazy against the workers' memory with their warm
    imports in it, as the step that reads it finds them: on a cluster just started, the
    imports are under way and no heartbeat has reported them yet. Here an import of 300 MiB
    makes data persisted against the memory before it (under half) stream (over half)."""
    import dask.array as da
    from distributed import Client, LocalCluster, futures_of

    from taskdml.parallel.engine._stream import _process_memory
    from taskdml.runner._values import held

    (tmp_path / "taskdml_test_ballast.py").write_text('BALLAST = b"x" * (300 * 2**20)\n')
    limit = 2**30
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            memory_limit=limit,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.run(_on_path, str(tmp_path))
        (before,) = client.run(_process_memory).values()
        nbytes = (limit - before) // 2 - 75 * 2**20
        value = da.zeros(nbytes // 8, chunks=2**20)
        warm(client, ["taskdml_test_ballast"])
        assert not futures_of(held(value, client))


def test_pipeline_modules_lists_every_named_module_then_the_basics():
    """The modules of the call, fit and search targets in step order (each followed by the one
    that defines the target), then what the kinds run on the workers, then WARM_MODULES; the
    steps to skip (reused from the cache) add nothing, and with none left nothing is warmed."""
    pipeline = PipelineSpec(
        "named",
        [
            Step("data", call="taskdml.datasets:load_sklearn", with_={"name": "iris"}),
            Step("spread", fit=f"{UNUSED}:LabelSpreading", inputs={"data": "data"}),
            Step("bayes", fit="sklearn.naive_bayes:GaussianNB", inputs={"data": "data"}),
            Step("score", evaluate=["accuracy"], inputs={"model": "bayes", "data": "data"}),
        ],
    )
    assert pipeline_modules(pipeline, skip={"data", "spread", "bayes", "score"}) == []
    assert pipeline_modules(pipeline, skip={"spread", "bayes"}) == [
        "taskdml.datasets",
        "taskdml.datasets._bundled",
        *KIND_MODULES["evaluate"],
        *WARM_MODULES,
    ]
    assert pipeline_modules(pipeline) == [
        "taskdml.datasets",
        "taskdml.datasets._bundled",
        UNUSED,
        "sklearn.semi_supervised._label_propagation",
        "sklearn.naive_bayes",
        *KIND_MODULES["fit"],
        *KIND_MODULES["evaluate"],
        *WARM_MODULES,
    ]


def test_connect_warms_only_the_clusters_it_starts(cluster):
    """An embedded cluster gets the plugin; a cluster reached by address is left as it is."""
    block = {"n_workers": 1, "threads_per_worker": 1, "dashboard_address": "127.0.0.1:0"}
    with connect(block, warm_modules=[UNUSED]) as client:
        assert client.run(_plugins).popitem()[1] == ["taskdml-warm"]
    with connect({"address": cluster.scheduler_address}, warm_modules=[UNUSED]) as client:
        assert all("taskdml-warm" not in names for names in client.run(_plugins).values())


@pytest.mark.parametrize(
    "block",
    [
        {"dashboard_address": ":0"},
        {"spec": {"class": "distributed:LocalCluster", "kwargs": {"dashboard_address": "0"}}},
        {"spec": {"class": "distributed:LocalCluster", "kwargs": {}}},
    ],
    ids=["port-only", "spec-port-only", "spec-default"],
)
def test_embedded_dashboard_binds_loopback(block):
    """A LocalCluster started here serves its dashboard on 127.0.0.1 when the file gives a
    port without a host (which distributed binds to 0.0.0.0) or nothing (LocalCluster's own
    default is ":8787")."""
    from taskdml.cluster._connect import _start

    options = {"n_workers": 1, "processes": False, "threads_per_worker": 1}
    if "spec" in block:
        block["spec"]["kwargs"].update(options)
    else:
        block = {**block, **options}
    with _start(block, None, None) as cluster:
        assert cluster.scheduler.http_server.address == "127.0.0.1"


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


def _allowed():
    """The threads a pipeline file may ask of this machine, from the machine itself."""
    return max(4, 2 * len(os.sched_getaffinity(0)))


def _memory():
    from distributed.system import MEMORY_LIMIT

    return MEMORY_LIMIT


SILOS = {f"site_{i}": {"load": "x:y", "resources": {f"site_{i}": 1}} for i in range(500)}

# (what the file asks, the key capped, its value after, a text of the warning)
CAPS = [
    ({"n_workers": 500}, "n_workers", lambda: _allowed(), "asks for 500 workers of 1 thread,"),
    ({"threads_per_worker": 10**4}, "threads_per_worker", lambda: 2, "10000 threads for each of"),
    (
        {"n_workers": 500, "threads_per_worker": 2},
        "n_workers",
        lambda: _allowed() // 2,
        "cluster.n_workers: the pipeline file asks for 500 workers of 2 threads",
    ),
    (
        {"n_workers": 1, "memory_limit": "1000TB"},
        "memory_limit",
        lambda: _memory(),
        "cluster.memory_limit: the pipeline file asks for memory_limit '1000TB' for each of 1 "
        "worker (909.49 TiB in all), more than this machine's",
    ),
    (
        {"n_workers": 2, "memory_limit": 0},
        "memory_limit",
        lambda: _memory() // 2,
        "memory_limit 0 for each of 2 workers (no limit)",
    ),
]


@pytest.mark.parametrize(("block", "key", "capped", "text"), CAPS)
def test_a_file_cannot_ask_the_embedded_cluster_for_more_than_the_machine(block, key, capped, text):
    """Workers x threads beyond twice the cores (at least 4), and workers x memory_limit beyond
    the machine's memory, are capped, with a warning naming the key path and the value."""
    from taskdml.cluster import within_machine
    from taskdml.exceptions import ClusterLimitWarning

    with pytest.warns(ClusterLimitWarning) as caught:
        result = within_machine({**block, "dashboard_address": None}, silos={})
    assert result[key] == capped()
    messages = [str(warning.message) for warning in caught]
    assert any(text in message and f"cluster.{key}:" in message for message in messages)
    assert all("capped to" in message and "--scheduler ADDRESS" in message for message in messages)


def test_a_request_within_the_machine_or_from_the_command_line_is_left_alone():
    """What fits is untouched, and --workers (n_workers=) is the user's own request."""
    import warnings

    from taskdml.cluster import within_machine

    block = {"n_workers": 2, "threads_per_worker": 1, "memory_limit": "1GiB"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert within_machine(block) == block
        assert within_machine({"n_workers": 3}, n_workers=500) == {"n_workers": 3}
        assert (
            within_machine({"address": "tcp://127.0.0.1:8786", "n_workers": 500})["n_workers"]
            == 500
        )


def test_silo_workers_count_and_too_many_silos_are_refused():
    """Silo workers share the budget (the file's workers give way), and more silos than the
    budget is a ClusterUnavailable that says to bring a cluster."""
    from taskdml.cluster import within_machine
    from taskdml.exceptions import ClusterLimitWarning, ClusterUnavailable

    three = dict(list(SILOS.items())[:3])
    with pytest.warns(ClusterLimitWarning, match="besides 3 silo workers"):
        assert within_machine({"n_workers": 500}, silos=three)["n_workers"] == _allowed() - 3
    with pytest.raises(ClusterUnavailable, match="the file's 500 silos would each start a worker"):
        within_machine({}, silos=SILOS)


def test_a_local_cluster_class_is_capped_like_the_default():
    """spec.class distributed:LocalCluster: its kwargs, scale and adapt.maximum are capped; a
    cluster class that runs elsewhere is not."""
    from taskdml.cluster import within_machine
    from taskdml.exceptions import ClusterLimitWarning

    spec = {"class": "distributed:LocalCluster", "kwargs": {"n_workers": 500}, "scale": 500}
    with pytest.warns(ClusterLimitWarning) as caught:
        capped = within_machine({"spec": spec})["spec"]
    assert capped["kwargs"]["n_workers"] == capped["scale"] == _allowed()
    assert {str(w.message).split(":")[0] for w in caught} == {
        "cluster.spec.kwargs.n_workers",
        "cluster.spec.scale",
    }
    with pytest.warns(ClusterLimitWarning, match="cluster.spec.adapt.maximum: the pipeline file"):
        adapt = {"class": "distributed:LocalCluster", "adapt": {"maximum": 500}}
        assert within_machine({"spec": adapt})["spec"]["adapt"]["maximum"] == _allowed()


def test_connect_starts_the_capped_cluster_and_lets_workers_through(tmp_path):
    """A real embedded cluster: the file's 500 workers start as the budget's; --workers N
    (n_workers=) starts N even beyond it; the file's memory_limit is capped per worker."""
    from taskdml.cluster import connect
    from taskdml.exceptions import ClusterLimitWarning

    block = {"n_workers": 500, "processes": False, "dashboard_address": None}
    with pytest.warns(ClusterLimitWarning, match="500 workers"):
        with connect(block) as client:
            assert len(client.nthreads()) == _allowed()
    with connect(block, n_workers=_allowed() + 1) as client:
        assert len(client.nthreads()) == _allowed() + 1
    huge = {"n_workers": 1, "processes": False, "dashboard_address": None, "memory_limit": "1PB"}
    with pytest.warns(ClusterLimitWarning, match="memory_limit '1PB'"):
        with connect(huge) as client:
            limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    assert limits == [_memory()]


def test_the_dry_run_shows_the_capped_cluster(tmp_path):
    """`taskdml run --dry-run` says how many workers would start: capped, or what --workers
    asks."""
    from click.testing import CliRunner

    from cli.main import cli
    from taskdml.exceptions import ClusterLimitWarning

    path = tmp_path / "p.yaml"
    path.write_text(
        "taskdml: 1\nname: greedy\ncluster: {n_workers: 500}\nsteps:\n  data:\n"
        "    call: taskdml.datasets:load_sklearn\n    with: {name: iris}\n"
    )
    with pytest.warns(ClusterLimitWarning, match="cluster.n_workers"):
        result = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert f"with {_allowed()} workers" in result.output, result.output
    result = CliRunner().invoke(cli, ["run", str(path), "--dry-run", "--workers", "500"])
    assert "with 500 workers" in result.output, result.output


def test_a_training_asks_a_fresh_cluster_for_its_imports_once(fresh_client):
    """train() on a client registers, first thing, one plugin that imports the engine's, the
    estimator's and its merge rule's modules on every worker; a second training with the same
    estimator on the same client registers nothing more. Both trainings (one replica, seeded)
    are the sync loop of reference_loops.py from scikit-learn's SGDClassifier on the same
    chunks."""
    import dask
    import dask.array as da
    import numpy as np
    from reference_loops import chunks_of, merge_linear_sgd, reference_sync
    from sklearn.linear_model import SGDClassifier

    from taskdml.parallel import train
    from taskdml.parallel.engine._warmup import worker_modules

    X = da.random.default_rng(0).standard_normal((400, 3), chunks=(100, 3))
    y = (X[:, 0] > 0).astype(int)
    expected = reference_sync(
        SGDClassifier(random_state=0), chunks_of(*dask.compute(X, y), X.chunks[0]), [0, 1],
        merge_linear_sgd, n_replicas=1, sync_every=1, epochs=1, shuffle=True, random_state=0,
    )  # fmt: skip
    for _ in range(2):
        result = train(
            SGDClassifier(random_state=0), X, y, epochs=1, random_state=0, client=fresh_client
        )
        (plugins,) = fresh_client.run(_prepared).values()
        assert len(plugins) == 1, plugins
        np.testing.assert_array_equal(result.estimator.coef_, expected.coef_)
        np.testing.assert_array_equal(result.estimator.intercept_, expected.intercept_)
    (modules,) = plugins.values()
    assert modules == worker_modules(SGDClassifier())
    assert "sklearn.linear_model._stochastic_gradient" in modules
    assert all(fresh_client.run(_imported, modules).popitem()[1].values())


def _prepared(dask_worker):
    from taskdml._warm import PREPARED_PREFIX

    return {
        name: list(plugin.modules)
        for name, plugin in dask_worker.plugins.items()
        if name.startswith(PREPARED_PREFIX)
    }


def test_scatter_goes_straight_to_workers_on_loopback_unless_the_client_says_otherwise(
    client, handler_calls
):
    """taskdml's scatter skips the scheduler for the session cluster's loopback workers (its
    ``scatter`` handler is never called), and ``client.direct_to_workers = False`` sends it
    through the scheduler as distributed's default does; the data arrives either way."""
    import numpy as np

    from taskdml._client import scatter

    data = np.arange(1_000.0)
    with handler_calls("scatter") as calls:
        try:
            [future] = scatter(client, [data], hash=False)
            assert np.array_equal(future.result(), data) and calls == []
            client.direct_to_workers = False
            [future] = scatter(client, [data + 1], hash=False)
            assert np.array_equal(future.result(), data + 1) and calls == ["scatter"]
        finally:
            client.direct_to_workers = None
