"""Vertex-cut (2D) partitions: PageRank against a power iteration written here, components
against scipy's csgraph, the blocks against the grid rule, and ``cut="auto"`` against the
top-1% in-degree share computed here."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from taskdml.datasets import make_rmat, make_sbm
from taskdml.graph import connected_components, pagerank, partition_graph


@pytest.fixture(scope="module")
def rmat():
    """An R-MAT graph of 512 vertices (duplicates and self-loops kept) and its matrix."""
    edges = make_rmat(9, 8, random_state=3).compute()
    n = 2**9
    src, dst = edges.src.values, edges.dst.values
    A = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))  # duplicates summed
    return edges, A


def power_iteration(A, alpha=0.85, n_iter=400):
    """PageRank by the textbook loop: rank over out-weight along the edges, the dangling
    mass and the jump spread uniformly."""
    n = A.shape[0]
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out > 0)) @ A
    x = np.full(n, 1.0 / n)
    for _ in range(n_iter):
        x = alpha * (P.T @ x + x[out == 0].sum() / n) + (1 - alpha) / n
    return x


@pytest.mark.parametrize("n_partitions", [2, 3])
@pytest.mark.parametrize("where", ["process", "cluster"])
def test_vertex_cut_pagerank_equals_power_iteration(request, rmat, n_partitions, where):
    edges, A = rmat
    client = request.getfixturevalue("client") if where == "cluster" else False
    graph = partition_graph(edges, n_partitions, client=client, cut="vertex")
    assert graph.cut == "vertex"
    stats = graph.stats()
    assert all(s["cut"] == "vertex" for s in stats)
    # every edge sits in exactly one block; partials and gathers pair up
    assert sum(s["in_edges"] for s in stats) == A.nnz
    assert sum(s["partials_sent"] for s in stats) == sum(s["partials_received"] for s in stats)
    rank = pagerank(graph, tol=1e-13).pagerank.values
    assert np.abs(rank - power_iteration(A)).sum() < 1e-10


def test_vertex_cut_blocks_follow_the_grid(rmat):
    """On 4 partitions (a 2 x 2 grid) each block holds the edges whose destination is in its
    row half and source in its column half; a 1 x 2 grid (2 partitions) mirrors no source."""
    edges, A = rmat
    graph = partition_graph(edges, 4, client=False, cut="vertex")
    coo = A.tocoo()
    for k, part in enumerate(graph.partitions):
        rows = [np.arange(part.start, part.stop)]
        rows += [part.partials[q] for q in sorted(part.partials)]
        columns = [np.arange(part.start, part.stop)]
        columns += [part.mirrors[q] for q in sorted(part.mirrors)]
        rows, columns = np.concatenate(rows), np.concatenate(columns)
        held = part.csr.tocoo()
        got = sp.csr_matrix((held.data, (rows[held.row], columns[held.col])), shape=A.shape)
        mine = ((coo.col >= 256) == (k >= 2)) & ((coo.row >= 256) == (k % 2 == 1))
        expected = sp.csr_matrix((coo.data[mine], (coo.col[mine], coo.row[mine])), A.shape)
        assert abs(got - expected).max() == 0  # stored as (destination, source)
        np.testing.assert_allclose(part.out_weight, A.sum(axis=1).A1[part.start : part.stop])
        np.testing.assert_allclose(part.in_weight, A.sum(axis=0).A1[part.start : part.stop])
    pair = partition_graph(edges, 2, client=False, cut="vertex").stats()
    assert [s["mirrors"] for s in pair] == [0, 0]


@pytest.mark.parametrize("n_partitions", [2, 3])
def test_vertex_cut_components_equal_csgraph(client, rmat, n_partitions):
    edges, A = rmat
    where = client if n_partitions == 3 else False
    graph = partition_graph(edges, n_partitions, client=where, directed=False, cut="vertex")
    labels = connected_components(graph).component.values
    _, expected = csgraph.connected_components(A, directed=True, connection="weak")
    first = {c: np.flatnonzero(expected == c).min() for c in np.unique(expected)}
    np.testing.assert_array_equal(labels, [first[c] for c in expected])


def top1_share(src, dst, n):
    """The share of the edges into the top 1% of vertices by in-degree."""
    degree = np.sort(np.bincount(dst, minlength=n))[::-1]
    return degree[: -(-n // 100)].sum() / len(dst)


def test_auto_picks_vertex_cut_on_rmat_and_edge_cut_on_sbm(rmat):
    edges, _ = rmat
    sbm = make_sbm([200, 200], 0.05, 0.01, directed=True, random_state=0).compute()
    for data, cut in ((edges, "vertex"), (sbm, "edge")):
        n = data.attrs["shape"][0]
        share = top1_share(data.src.values, data.dst.values, n)
        graph = partition_graph(data, 2, client=False, cut="auto")
        stats = graph.stats()[0]
        assert stats["auto_measure"] == "top1_in_share"
        assert stats["top1_in_share"] == pytest.approx(share, abs=1e-12)
        assert (share > stats["auto_threshold"]) == (cut == "vertex")
        assert graph.cut == stats["cut"] == cut
    with pytest.raises(ValueError, match="bulk-synchronous"):
        pagerank(partition_graph(edges, 2, client=False, cut="vertex"), staleness=1)
