"""Supersteps on the workers: a user's vertex program against scipy, the per-superstep
events, and a failing partition that stops the others."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from taskdml import _events
from taskdml.graph import VertexProgram, edges_from_scipy, partition_graph, run_supersteps


class HopsFrom(VertexProgram):
    """Hop distance from one vertex: a min over in-edges of the source's distance + 1."""

    combiner = "min"

    def __init__(self, source):
        self.source = source

    def init(self, part, data):
        values = np.full(part.n_local, np.inf)
        if part.start <= self.source < part.stop:
            values[self.source - part.start] = 0.0
        return values

    def edge_value(self, message, weight):
        return message + 1.0

    def apply(self, part, values, gathered, totals):
        return np.minimum(values, gathered)

    def measures(self, part, old, new):
        return [np.inf if old is None else float((old != new).sum())]

    def converged(self, totals, superstep):
        return totals[0] == 0


def _graph(n=400, seed=3):
    A = sp.random(n, n, density=0.006, format="csr", random_state=seed)
    A.data[:] = 1.0
    return A


@pytest.mark.parametrize("n_partitions", [2, 3])
def test_a_vertex_program_of_a_few_lines_equals_scipy(client, n_partitions):
    """Hop distances from vertex 0 of a directed graph, run on 2 or 3 partitions (3 on 2
    one-thread workers: two share a worker), equal scipy's unweighted shortest paths; the
    history ends with no change and the values stay on the workers, chunked by partition."""
    A = _graph()
    graph = partition_graph(edges_from_scipy(A, chunk_size=300), n_partitions, client=client)
    result = run_supersteps(graph, HopsFrom(0), max_iter=500)
    expected = shortest_path(A, unweighted=True, indices=0)
    hops = result.as_array()
    assert hops.chunks == (tuple(graph.sizes),)
    np.testing.assert_array_equal(hops.compute(), expected)
    assert result.converged and result.history[-1]["change"] == 0
    finite = expected[np.isfinite(expected)]
    assert result.n_iter == finite.max() + 1  # the last superstep changes nothing
    assert [h["superstep"] for h in result.history] == list(range(result.n_iter))


def test_each_superstep_is_published_as_an_event(client):
    """Inside a run's scope, rank 0 publishes one ``superstep`` event per superstep with
    the history's numbers."""
    A = _graph(seed=4)
    graph = partition_graph(edges_from_scipy(A), 2, client=client)
    with _events.scope("run-graph-test", "hops"):
        result = run_supersteps(graph, HopsFrom(1), max_iter=500)
    events = [
        e
        for _, e in client.get_events(_events.TOPIC)
        if e.get("run_id") == "run-graph-test" and e["event"] == "superstep"
    ]
    assert [(e["superstep"], e["change"]) for e in events] == [
        (h["superstep"], h["change"]) for h in result.history
    ]
    assert all(e["step"] == "hops" and isinstance(e["seconds"], float) for e in events)


class FailsOnOne(HopsFrom):
    def apply(self, part, values, gathered, totals):
        if part.index == 1:
            raise ArithmeticError("planted failure")
        return super().apply(part, values, gathered, totals)


def test_a_failing_partition_stops_the_others(client):
    """A partition that raises tells the others, which stop at once, and its own error is
    the one raised."""
    graph = partition_graph(edges_from_scipy(_graph()), 2, client=client)
    with pytest.raises(ArithmeticError, match="planted failure"):
        run_supersteps(graph, FailsOnOne(0), max_iter=50, timeout=60)


def test_the_scheduler_sees_one_task_per_partition_whatever_the_supersteps(client):
    """However many supersteps run, the cluster runs one superstep task per partition (and
    one that reads the history): the messages of the supersteps never become tasks."""
    from distributed import get_task_stream

    A = _graph(seed=6)
    graph = partition_graph(edges_from_scipy(A), 3, client=client)
    client.gather(graph.partitions)
    with get_task_stream(client) as stream:
        result = run_supersteps(graph, HopsFrom(0), max_iter=500)
    assert result.n_iter > 3
    keys = [task["key"] for task in stream.data]
    supersteps = [key for key in keys if "superstep" in str(key)]
    assert sorted(key[1] for key in supersteps) == [0, 1, 2]
    assert len(keys) == len(supersteps) + 1


def test_without_a_client_the_same_program_runs_in_threads_here():
    """With client=False the partitions are built and iterated in this process, one thread
    per partition, and give scipy's hop distances as the cluster does; a failure there
    stops the other threads too."""
    A = _graph(seed=7)
    graph = partition_graph(edges_from_scipy(A), 3, client=False)
    assert graph.client is None and graph.sizes == [133, 134, 133]
    result = run_supersteps(graph, HopsFrom(2), max_iter=500)
    np.testing.assert_array_equal(
        result.as_array().compute(), shortest_path(A, unweighted=True, indices=2)
    )
    assert result.converged
    with pytest.raises(ArithmeticError, match="planted"):
        run_supersteps(graph, FailsOnOne(0), max_iter=50, timeout=60)
