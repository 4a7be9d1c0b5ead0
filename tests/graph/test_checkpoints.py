"""Checkpoints of graph supersteps and lost workers: a run that finds a checkpoint of the same
graph, program and data goes on from its superstep; a run whose worker is SIGKILLed mid-run
(when the recorded ``superstep`` events say it got there) goes on from its last checkpoint
on the workers left. Both equal an uninterrupted run bit for bit, and networkx's PageRank."""

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from taskdml import _events
from taskdml.cache import Cache, _checkpoints
from taskdml.graph import edges_from_networkx, partition_graph, run_supersteps
from taskdml.graph._algorithms import PageRankProgram

HERE = {"PYTHONPATH": str(Path(__file__).parent)}  # the `dask` processes import HeldPageRank


def _graph():
    return nx.gnp_random_graph(300, 0.02, seed=5, directed=True)


def _reference(graph):
    """networkx's PageRank in vertex order (its own power iteration)."""
    ranks = nx.pagerank(graph, alpha=0.85, tol=1e-13, max_iter=1000)
    return np.array([ranks[v] for v in range(graph.number_of_nodes())])


class HeldPageRank(PageRankProgram):
    """PageRank whose partition *rank* waits after superstep *at* until the distributed
    Event *hold* is set (once set, it never waits again)."""

    def __init__(self, hold, rank, at):
        super().__init__(0.85, 1e-12)
        self.hold, self.rank, self.at = hold, rank, at

    def init(self, part, data):
        self.index_ = part.index
        return super().init(part, data)

    def converged(self, totals, superstep):
        if superstep == self.at and self.index_ == self.rank:
            from distributed import Event

            Event(self.hold).wait()
        return super().converged(totals, superstep)


def test_a_run_that_finds_a_checkpoint_goes_on_from_its_superstep(client, tmp_path):
    """A run stopped at superstep 5 leaves its checkpoint of superstep 4 (every 2) in the
    step's store; the same program on the same graph run again in that step starts from
    superstep 4 and ends with an uninterrupted run's ranks and history, bit for bit."""
    edges = edges_from_networkx(_graph(), chunk_size=1500)
    graph = partition_graph(edges, 2, client=client)
    uninterrupted = run_supersteps(graph, PageRankProgram(0.85, 1e-12), max_iter=1000)
    expected = uninterrupted.as_array().compute()
    store = Cache(tmp_path / "cache")
    with _checkpoints.scope(store, "step-key"):
        cut = run_supersteps(graph, PageRankProgram(0.85, 1e-12), max_iter=5, checkpoint_every=2)
    assert cut.n_iter == 5 and cut.resumed_from is None
    with _checkpoints.scope(store, "step-key"):
        resumed = run_supersteps(
            graph, PageRankProgram(0.85, 1e-12), max_iter=1000, checkpoint_every=2
        )
    assert resumed.resumed_from == 4
    assert [h["superstep"] for h in resumed.history] == list(range(uninterrupted.n_iter))
    assert [h["change"] for h in resumed.history] == [h["change"] for h in uninterrupted.history]
    np.testing.assert_array_equal(resumed.as_array().compute(), expected)
    np.testing.assert_allclose(expected, _reference(_graph()), rtol=0, atol=1e-12)
    with _checkpoints.scope(store, "step-key"):  # another program: the checkpoint is not its
        other = run_supersteps(graph, PageRankProgram(0.5, 1e-12), max_iter=1000)
    assert other.resumed_from is None


def _superstep_reached(client, run_id, superstep):
    return any(
        e.get("run_id") == run_id and e["event"] == "superstep" and e["superstep"] >= superstep
        for _, e in client.get_events(_events.TOPIC)
    )


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_run_the_run_ends_as_an_uninterrupted_one(dask_cluster):
    """Three partitions on three `dask worker` processes, a checkpoint every 2 supersteps;
    partition 1 holds after superstep 4 and, once the recorded events say superstep 4 was
    reached, its worker is SIGKILLed. The run goes on from the checkpoint of superstep 4 on
    the two workers left and ends with the uninterrupted run's ranks and history."""
    from distributed import Client, Event

    address = dask_cluster.start(workers=(HERE, HERE, HERE), scheduler=HERE)
    hold, run_id = f"graph-hold-{uuid.uuid4().hex}", uuid.uuid4().hex
    with Client(address, set_as_default=False) as client:
        edges = edges_from_networkx(_graph(), chunk_size=1500)
        graph = partition_graph(edges, 3, client=client)
        uninterrupted = run_supersteps(graph, PageRankProgram(0.85, 1e-12), max_iter=1000)
        expected = client.compute(uninterrupted.as_array()).result()
        outcome = {}

        def run():
            with _events.scope(run_id, "pagerank"):
                try:
                    outcome["result"] = run_supersteps(
                        graph, HeldPageRank(hold, 1, 4), max_iter=1000, checkpoint_every=2
                    )
                except Exception as error:  # noqa: BLE001 - reported below
                    outcome["error"] = error

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 60  # a guard against a hang, not a measurement
        while not _superstep_reached(client, run_id, 4):
            assert thread.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.02)
        victim = graph.workers[1]
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)  # a worker process this test started
        Event(hold, client=client).set()
        thread.join(90)
        assert "error" not in outcome, outcome.get("error")
        result = outcome["result"]
        assert result.restarts == [{"superstep": 4, "workers": [victim]}]
        assert victim not in result.graph.workers and len(set(result.graph.workers)) == 2
        assert [h["superstep"] for h in result.history] == list(range(uninterrupted.n_iter))
        assert [h["change"] for h in result.history] == [h["change"] for h in uninterrupted.history]
        np.testing.assert_array_equal(client.compute(result.as_array()).result(), expected)
        np.testing.assert_allclose(expected, _reference(_graph()), rtol=0, atol=1e-12)
