"""Partitions out of core: each partition's CSR built on its worker's disk from an edge list in
a Zarr store, one chunk at a time, and streamed in row blocks every superstep. The results
equal scipy's and csgraph's; the edge bytes a partition holds are one block's."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph

from taskdml.datasets import make_blobs, read_edges, write_zarr
from taskdml.exceptions import DataError
from taskdml.graph import connected_components, edges_from_scipy, pagerank, partition_graph
from taskdml.graph._spill import BYTES_PER_EDGE, MEMORY_SHARE, should_spill


def weighted_graph(n=400, seed=3):
    """Directed and weighted, with dangling vertices, an isolated one, a self-loop and a hub
    whose in-degree is larger than a block."""
    A = sp.random(n, n, density=0.01, format="lil", random_state=seed)
    A[4, :] = 0
    A[9, :] = 0
    A[:, 9] = 0
    A[30, 30] = 0.6
    A[np.arange(100, 300), 17] = 1.5  # vertex 17: 200+ in-edges
    return sp.csr_matrix(A)


def power_iteration(A, alpha=0.85, tol=1e-13, max_iter=2000):
    """PageRank by the power iteration, written from its definition (a dangling vertex's
    rank goes to every vertex alike)."""
    n = A.shape[0]
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        new = alpha * (P.T @ x + x[out == 0].sum() / n) + (1 - alpha) / n
        if np.abs(new - x).sum() < tol:
            return new
        x = new
    raise AssertionError("the reference did not converge")


@pytest.fixture
def stored(tmp_path):
    """The weighted graph's edge list in a Zarr store, opened lazily."""
    path = write_zarr(edges_from_scipy(weighted_graph(), chunk_size=500), tmp_path / "edges.zarr")
    return read_edges(path)


def test_pagerank_streamed_from_disk_equals_scipy(client, stored):
    """Partitions built out of core from a Zarr store, on the workers, hold the in-edges of
    their vertices (counts as scipy's), keep in memory only one block of edges (its bytes
    bounded by the block size, or a hub row's in-degree), and PageRank streamed from disk
    equals the power iteration to 1e-10 (L1); cut again after a lost worker they stay out of
    core."""
    edges, A = stored, weighted_graph()
    assert edges.src.data.npartitions == -(-A.nnz // 500)  # lazy, the store's chunks
    block = 64
    graph = partition_graph(edges, 2, out_of_core=True, block_edges=block, client=client)
    stats = graph.stats()
    in_degree = np.diff(A.T.tocsr().indptr)
    hub = int(in_degree.max())
    assert hub > block
    for p, s in enumerate(stats):
        rows = slice(graph.bounds[p], graph.bounds[p + 1])
        assert s["out_of_core"] and s["in_edges"] == in_degree[rows].sum()
        # int32 indices and float64 weights of one block, plus its row pointers
        assert s["edge_bytes"] <= max(block, hub) * 12 + (s["vertices"] + 1) * 4
        assert s["edge_bytes"] < s["in_edges"] * 12 / 2
    ranks = pagerank(graph)
    reference = power_iteration(A)
    assert np.abs(ranks.pagerank.values - reference).sum() < 1e-10
    np.testing.assert_allclose(ranks.pagerank.values, reference, rtol=0, atol=1e-10)
    assert all(s["out_of_core"] for s in graph.repartitioned().stats())


def test_components_streamed_from_disk_equal_csgraph(stored):
    """The min-gather streamed block by block from disk (undirected, in this process) gives
    csgraph's components, each labelled by its smallest vertex."""
    edges, A = stored, weighted_graph()
    graph = partition_graph(
        edges, 3, directed=False, out_of_core=True, block_edges=50, client=False
    )
    assert all(s["out_of_core"] for s in graph.stats())
    labels = connected_components(graph, client=False).component.values
    n, expected = csgraph.connected_components(A, directed=True, connection="weak")
    smallest = np.array([np.flatnonzero(expected == c).min() for c in range(n)])
    np.testing.assert_array_equal(labels, smallest[expected])


def test_out_of_core_is_chosen_by_the_workers_memory_limit(client, stored):
    """Partitions go out of core when their in-edges, at the bytes each costs while built,
    would pass the share of the smallest memory limit; never without a limit. On the test
    cluster (4 GiB a worker) a small graph stays in memory, and the same graph then given a
    block size is cut again out of core, not taken from the in-memory partitions."""
    limit = 4 * 2**30
    fits = int(MEMORY_SHARE * limit / BYTES_PER_EDGE)
    assert not should_spill(fits, limit) and should_spill(fits + 1, limit)
    assert not should_spill(10**12, 0) and not should_spill(10**12, None)
    assert not any(s["out_of_core"] for s in partition_graph(stored, 2, client=client).stats())
    spilled = partition_graph(stored, 2, block_edges=1000, client=client).stats()
    assert all(s["out_of_core"] for s in spilled)


def test_bad_block_sizes_and_stores_say_what_to_do(client, tmp_path):
    """A block size below 1 is refused, and so is a Zarr store that holds no edge list,
    naming what it lacks and how to write one."""
    with pytest.raises(ValueError, match=r"block_edges must be a positive int; got 0"):
        partition_graph(edges_from_scipy(weighted_graph()), 2, block_edges=0, client=client)
    path = write_zarr(make_blobs(50, random_state=0), tmp_path / "blobs.zarr")
    with pytest.raises(DataError, match=r"lacks \['dst', 'src', \"attr 'shape'\"\].*write_zarr"):
        read_edges(path)
