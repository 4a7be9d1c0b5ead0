"""The algorithms on graphs the datasets' generators make on the workers: an R-MAT graph
(duplicates, self-loops, dangling vertices) and an SBM with its communities."""

import numpy as np
import scipy.sparse as sp
from sklearn.semi_supervised import LabelSpreading

from taskdml.datasets import make_rmat, make_sbm
from taskdml.graph import label_spreading, pagerank, partition_graph


def _matrix(edges):
    """The scipy matrix of an edges Dataset (the test reads the edges; duplicates summed)."""
    n = edges.attrs["shape"][0]
    src, dst = edges.src.values, edges.dst.values
    A = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    return A if edges.attrs["directed"] else A + sp.triu(A, 1).T + sp.tril(A, -1).T


def test_pagerank_of_an_rmat_graph_equals_the_power_iteration(client):
    """PageRank of a generated R-MAT graph (2**10 vertices, 16 edges each, in 4 chunks),
    on 3 partitions, equals the power iteration on its scipy matrix to 1e-10 (L1)."""
    edges = make_rmat(10, 16, chunk_edges=4096, random_state=0)
    A = _matrix(edges)
    n = A.shape[0]
    ranks = pagerank(partition_graph(edges, 3, client=client)).pagerank.values
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    x = np.full(n, 1.0 / n)
    for _ in range(1000):
        x, last = 0.85 * (P.T @ x + x[out == 0].sum() / n) + 0.15 / n, x
        if np.abs(x - last).sum() < 1e-13:
            break
    assert (out == 0).any()  # dangling vertices are in the test
    assert np.abs(ranks - x).sum() < 1e-10
    np.testing.assert_allclose(ranks, x, rtol=0, atol=1e-10)


def test_label_spreading_on_a_generated_sbm_is_at_least_as_accurate_as_scikit_learn(client):
    """On a generated SBM (3 communities, 5% of vertices labelled), label spreading is as
    accurate as LabelSpreading on the same graph, whose distributions it equals."""
    graph = make_sbm([200, 200, 200], 0.05, 0.005, random_state=1)
    truth = graph.community.values
    n = len(truth)
    labels = np.full(n, -1)
    known = np.random.default_rng(1).choice(n, size=n // 20, replace=False)
    labels[known] = truth[known]
    out = label_spreading(graph, labels, n_partitions=2, client=client)
    dense = _matrix(graph).toarray()
    reference = LabelSpreading(
        kernel=lambda X, Y: dense[X[:, 0].astype(int)][:, Y[:, 0].astype(int)], alpha=0.2
    ).fit(np.arange(n)[:, None], labels)
    np.testing.assert_allclose(
        out.label_distributions.values, reference.label_distributions_, atol=1e-12
    )
    unknown = labels < 0
    accuracy = (out.label.values[unknown] == truth[unknown]).mean()
    assert accuracy >= (reference.transduction_[unknown] == truth[unknown]).mean()
