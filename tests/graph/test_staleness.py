"""Bounded-staleness supersteps: ``staleness=0`` is the bulk-synchronous run bit for bit; with
``staleness=2`` PageRank equals a power iteration to its tolerance bound and components
equal scipy's exactly, in this process (one partition held back by an event, so the other
reads stale mirrors) and on the workers (the direct collective's newest-message receive),
with checkpoints; a program that does not declare it tolerates staleness is refused."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from taskdml.cache import Cache, _checkpoints
from taskdml.graph import (
    VertexProgram,
    connected_components,
    edges_from_scipy,
    pagerank,
    partition_graph,
    run_supersteps,
)
from taskdml.graph._algorithms import ComponentsProgram, PageRankProgram
from taskdml.parallel.collective._direct import Mailbox, _p2p_superstep

ALPHA, TOL = 0.85, 1e-10


def directed_graph(n=300, seed=0):
    A = sp.random(n, n, density=0.01, format="lil", random_state=seed)
    A[3, :] = 0  # a dangling vertex
    return sp.csr_matrix(A)


def undirected_graph(n=300, seed=1):
    A = sp.random(n, n, density=0.004, format="csr", random_state=seed)
    return sp.csr_matrix(A + A.T)


def power_iteration(A, alpha=ALPHA):
    """PageRank from its definition, iterated to machine precision (uniform restarts; a
    dangling vertex's rank goes out uniformly)."""
    n = A.shape[0]
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    x = np.full(n, 1.0 / n)
    for _ in range(3000):
        new = alpha * (P.T @ x + x[out == 0].sum() / n) + (1 - alpha) / n
        if np.abs(new - x).sum() < 1e-15:
            return new
        x = new
    raise AssertionError("the reference did not converge")


class HeldBack:
    """Partition 1 waits, in its second apply (superstep 1), until partition 0 has applied
    superstep 3: partition 0 then reads partition 1's messages of superstep 1, two
    supersteps old. An ordering by events (shared by the partitions' shallow copies)."""

    def init(self, part, data):
        self.applied_ = 0
        return super().init(part, data)

    def apply(self, part, values, gathered, totals):
        if part.index == 0 and self.applied_ == 3:
            self.ahead.set()
        if part.index == 1 and self.applied_ == 1:
            assert self.ahead.wait(20), "partition 0 never ran ahead"
        self.applied_ += 1
        return super().apply(part, values, gathered, totals)


class HeldPageRank(HeldBack, PageRankProgram):
    pass


class HeldComponents(HeldBack, ComponentsProgram):
    pass


def _lags(outcomes):
    return [h["staleness_max"] for outcome in outcomes for h in outcome[1]]


def test_staleness_zero_is_the_synchronous_run_bit_for_bit():
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A), 3, client=False)
    bsp = pagerank(graph, tol=TOL)
    zero = pagerank(graph, tol=TOL, staleness=0)
    np.testing.assert_array_equal(zero.pagerank.values, bsp.pagerank.values)
    assert [h["change"] for h in zero.attrs["history"]] == [
        h["change"] for h in bsp.attrs["history"]
    ]
    assert not any("staleness_max" in h for h in zero.attrs["history"])  # as it was


def test_stale_pagerank_with_a_partition_held_back_is_within_the_tolerance_bound():
    """With staleness=2 and partition 1 held back, partition 0 reads two-superstep-old
    mirrors (recorded), and the ranks are within a few tol / (1 - alpha) of the reference."""
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A), 2, client=False)
    program = HeldPageRank(ALPHA, TOL)
    program.ahead = threading.Event()
    result = run_supersteps(graph, program, max_iter=1000, staleness=2)
    ranks = result.as_array().compute()
    assert result.converged
    assert np.abs(ranks - power_iteration(A)).sum() <= 5 * TOL / (1 - ALPHA)
    lags = _lags(result.outcomes)
    assert max(lags) == 2 and min(lags) >= 0
    assert result.outcomes[0][1][3]["staleness_max"] == 2  # partition 0 at superstep 3


def test_stale_components_with_a_partition_held_back_equal_scipy_exactly():
    A = undirected_graph()
    graph = partition_graph(edges_from_scipy(A), 2, client=False)
    program = HeldComponents()
    program.ahead = threading.Event()
    result = run_supersteps(graph, program, max_iter=1000, staleness=2)
    _, labels = csgraph.connected_components(A, directed=False)
    found = result.as_array(dtype=np.int64).compute()
    first = {label: np.flatnonzero(labels == label).min() for label in np.unique(labels)}
    np.testing.assert_array_equal(found, [first[label] for label in labels])
    lags = _lags(result.outcomes)
    assert 0 < max(lags) <= 2
    assert [h["measured"] for h in result.history[:3]] == [None, None, 0]
    assert result.history[-1]["measured"] == result.history[-1]["superstep"] - 2


def test_stale_runs_on_the_workers(client):
    """On the workers (the direct collective's newest-message receive): PageRank within the
    bound and components equal to scipy's."""
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A), 2, client=client)
    tol = 1e-8  # fewer supersteps than TOL; the same bound
    program = PageRankProgram(ALPHA, tol)
    result = run_supersteps(graph, program, max_iter=1000, staleness=2)
    assert result.converged
    assert np.abs(result.as_array().compute() - power_iteration(A)).sum() <= 5 * tol / (1 - ALPHA)
    assert all(0 <= h["staleness_max"] <= 2 for h in result.history)

    U = undirected_graph()
    out = connected_components(edges_from_scipy(U), n_partitions=2, client=client, staleness=2)
    n, labels = csgraph.connected_components(U, directed=False)
    assert out.attrs["n_components"] == n
    first = {label: np.flatnonzero(labels == label).min() for label in np.unique(labels)}
    np.testing.assert_array_equal(out.component.values, [first[label] for label in labels])


class Plain(VertexProgram):
    def init(self, part, data):
        return np.zeros(part.n_local)

    def apply(self, part, values, gathered, totals):
        return gathered


def test_a_program_that_does_not_tolerate_staleness_is_refused():
    graph = partition_graph(edges_from_scipy(undirected_graph()), 2, client=False)
    with pytest.raises(ValueError, match="tolerates_staleness"):
        run_supersteps(graph, Plain(), staleness=1)
    with pytest.raises(ValueError, match="staleness must be"):
        run_supersteps(graph, ComponentsProgram(), staleness=-1)


def test_the_mailbox_hands_the_newest_message_in_range_and_drops_older_ones():
    box = Mailbox()
    for tag in ["p2p:1", "p2p:2", "p2p:5", "p2p:('measures', 9)", "sum:3:x0"]:
        box.put(0, {"tag": tag, "value": tag})
    box.put(1, {"tag": "p2p:4", "value": "other sender"})
    message, number = box.take_newest(0, _p2p_superstep, 1, 3, timeout=0)
    assert (message["value"], number) == ("p2p:2", 2)
    assert set(box.messages) == {
        (0, "p2p:2"),  # kept: the next superstep may read it again
        (0, "p2p:5"),
        (0, "p2p:('measures', 9)"),
        (0, "sum:3:x0"),
        (1, "p2p:4"),
    }
    assert box.take_newest(0, _p2p_superstep, 2, 2, timeout=0)[1] == 2
    assert box.take_newest(0, _p2p_superstep, 6, 8, timeout=0) is None
    assert box.take_newest(0, _p2p_superstep, 3, 8, timeout=0)[1] == 5
    assert (0, "p2p:2") not in box.messages
    box.fail("planted")
    with pytest.raises(RuntimeError, match="planted"):
        box.take_newest(0, _p2p_superstep, 6, 8, timeout=0)


def test_a_stale_run_goes_on_from_its_checkpoint(client, tmp_path):
    """A stale run cut at superstep 5 leaves its checkpoint of superstep 3 (every 3); run again
    in the same step it starts there and ends within the bound (timing decides the rest: not
    bit for bit); a synchronous run does not take a stale run's checkpoint."""
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A), 2, client=client)
    store, tol = Cache(tmp_path / "cache"), 1e-8
    with _checkpoints.scope(store, "step-key"):  # a step's scope: one run each
        cut = run_supersteps(
            graph, PageRankProgram(ALPHA, tol), max_iter=5, staleness=2, checkpoint_every=3
        )
    with _checkpoints.scope(store, "step-key"):  # fewer segments, the same checkpoint
        resumed = run_supersteps(
            graph, PageRankProgram(ALPHA, tol), max_iter=1000, staleness=2, checkpoint_every=20
        )
    with _checkpoints.scope(store, "step-key"):
        synchronous = run_supersteps(graph, PageRankProgram(ALPHA, tol), max_iter=3)
    assert cut.n_iter == 5 and resumed.resumed_from == 3 and resumed.converged
    # a segment's last superstep sums the measures of all its supersteps not summed yet
    assert [h["measured"] for h in cut.history] == [None, None, 2, None, 4]
    assert [h["superstep"] for h in resumed.history] == list(range(resumed.n_iter))
    ranks = resumed.as_array().compute()
    assert np.abs(ranks - power_iteration(A)).sum() <= 5 * tol / (1 - ALPHA)
    assert synchronous.resumed_from is None
