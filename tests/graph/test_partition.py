"""The partitioned graph: each partition's in-edges, out-weights, self-loops, mirrors and
send lists against the scipy matrix they come from, and where the partitions live."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from taskdml.graph import edges_from_networkx, edges_from_scipy, partition_graph


def random_graph(n=300, density=0.02, seed=0):
    """A weighted directed scipy graph with self-loops, dangling and isolated vertices."""
    A = sp.random(n, n, density=density, format="lil", random_state=seed)
    A[5, :] = 0  # dangling: no out-edges
    A[7, :] = 0
    A[:, 7] = 0  # isolated
    A[11, 11] = 0.5
    return sp.csr_matrix(A)


def _global_in_edges(partition, n):
    """The partition's CSR with its columns mapped back to global vertex ids (n columns)."""
    order = [np.arange(partition.start, partition.stop)]
    order += [partition.mirrors[q] for q in sorted(partition.mirrors)]
    columns = np.concatenate(order)
    coo = partition.csr.tocoo()
    return sp.csr_matrix((coo.data, (coo.row, columns[coo.col])), shape=(partition.n_local, n))


@pytest.mark.parametrize("n_partitions", [2, 3])
@pytest.mark.parametrize("directed", [True, False])
def test_partitions_hold_the_in_edges_of_their_vertices(client, n_partitions, directed):
    """Every partition holds exactly the rows of A.T (A + A.T off the diagonal plus the
    diagonal once, undirected) of its vertices, their out-weights and self-loops; its send
    lists are what each other partition mirrors of it; it lives on its worker."""
    A = random_graph()
    if directed:
        edges, full = edges_from_scipy(A, chunk_size=700), A
    else:
        sym = sp.triu(A + A.T).tocsr()
        edges = edges_from_scipy(sym + sp.triu(sym, 1).T, directed=False, chunk_size=500)
        full = sym + sp.triu(sym, 1).T
    graph = partition_graph(edges, n_partitions, client=client)
    assert graph.sizes == np.diff(np.linspace(0, 300, n_partitions + 1).round()).tolist()
    parts = client.gather(graph.partitions)
    who = client.who_has(graph.partitions)
    out_weight = np.asarray(full.sum(axis=1)).ravel()
    for p, part in enumerate(parts):
        assert list(who[graph.partitions[p].key]) == [graph.workers[p]]
        rows = slice(part.start, part.stop)
        expected = full.T.tocsr()[rows]
        assert abs(_global_in_edges(part, 300) - expected).max() < 1e-12
        np.testing.assert_allclose(part.out_weight, out_weight[rows], atol=1e-12)
        np.testing.assert_allclose(part.loops, full.diagonal()[rows], atol=1e-12)
        for q, other in enumerate(parts):
            if q != p and p in other.mirrors:
                np.testing.assert_array_equal(part.sends[q], other.mirrors[p] - part.start)
            else:
                assert q not in part.sends
    stats = graph.stats()
    for part, stat in zip(parts, stats):
        reads = {int(v) for v in part.csr.tocoo().col if v >= part.n_local}
        assert stat == {
            "vertices": part.n_local,
            "in_edges": (full.T.tocsr()[part.start : part.stop] != 0).sum(),
            "mirrors": len(reads),
            "sends": sum(len(idx) for idx in part.sends.values()),
            "out_of_core": False,
            "edge_bytes": part.csr.data.nbytes + part.csr.indices.nbytes + part.csr.indptr.nbytes,
        }
    assert sum(s["mirrors"] for s in stats) == sum(s["sends"] for s in stats)


def test_edges_from_networkx_match_its_scipy_matrix(client):
    """A networkx graph (undirected, weighted) partitions to the same in-edges as its
    scipy array."""
    G = nx.gnm_random_graph(120, 400, seed=1)
    for u, v in G.edges:
        G.edges[u, v]["weight"] = 1.0 + (u + v) % 3
    G.add_edge(3, 3, weight=2.0)
    edges = edges_from_networkx(G)
    assert edges.attrs == {"shape": [120, 120], "directed": False}
    full = nx.to_scipy_sparse_array(G, nodelist=range(120), format="csr")
    graph = partition_graph(edges, 2, client=client)
    for part in client.gather(graph.partitions):
        expected = full.T.tocsr()[part.start : part.stop]
        assert abs(_global_in_edges(part, 120) - expected).max() < 1e-12


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: edges_from_scipy(sp.csr_matrix([[0, 1], [0, 0]]), directed=False), "symmetric"),
        (lambda: edges_from_networkx(nx.relabel_nodes(nx.path_graph(2), {0: "a"})), "0 .. 1"),
    ],
)
def test_bad_graphs_say_what_to_do(call, message):
    """A non-symmetric matrix given as undirected, or nodes that are not 0 .. n-1, raise
    a message that says how to fix them."""
    with pytest.raises(ValueError, match=message):
        call()


def test_an_edge_to_a_vertex_outside_the_shape_is_refused(client):
    """An edge whose id is outside the attr 'shape' fails the build, naming the vertex."""
    edges = edges_from_scipy(sp.csr_matrix(np.ones((4, 4))))
    edges.attrs["shape"] = [3, 3]
    with pytest.raises(ValueError, match="vertex 3, outside 0 .. 2"):
        client.gather(partition_graph(edges, 2, client=client).partitions)


def test_an_edge_list_read_from_csv_ranks_as_networkx_on_the_same_rows(client, tmp_path):
    """A weighted edge list written as CSV, read by read_csv in chunks and turned into the
    edges Dataset by edges_from_table: its PageRank on the cluster is networkx's on the same
    rows (read back here with pandas)."""
    import pandas as pd

    from taskdml.datasets import read_csv
    from taskdml.graph import edges_from_table, pagerank

    coo = random_graph(n=200, density=0.03, seed=3).tocoo()
    path = tmp_path / "edges.csv"
    frame = pd.DataFrame({"from": coo.row, "to": coo.col, "amount": coo.data})
    frame.to_csv(path, index=False)
    edges = edges_from_table(read_csv(path, blocksize=8_000), src="from", dst="to",
                             weight="amount")  # fmt: skip
    assert edges.src.data.numblocks[0] > 1 and edges.attrs["shape"] == [200, 200]
    ranks = pagerank(edges, tol=1e-13, client=client)
    rows = pd.read_csv(path)
    reference = nx.DiGraph()
    reference.add_nodes_from(range(200))
    reference.add_weighted_edges_from(rows[["from", "to", "amount"]].itertuples(index=False))
    expected = nx.pagerank(reference, alpha=0.85, tol=1e-15, max_iter=1000, weight="weight")
    got = np.asarray(ranks.pagerank)
    assert np.abs(got - [expected[v] for v in range(200)]).sum() < 1e-10


@pytest.mark.parametrize(
    "frame, options, message",
    [
        ({"a": [0, 1], "b": [1, 0]}, {}, "no column 'src' for src; the table has"),
        ({"src": [0.5, 1], "dst": [1, 0]}, {}, "whole numbers from 0"),
        ({"src": [-1, 1], "dst": [1, 0]}, {}, "whole numbers from 0"),
    ],
)
def test_a_table_that_is_not_an_edge_list_says_what_to_do(frame, options, message):
    """A missing column, or ids that are not whole numbers from 0, name the fix."""
    import pandas as pd

    from taskdml.graph import edges_from_table

    with pytest.raises(ValueError, match=message):
        edges_from_table(pd.DataFrame(frame), **options)
