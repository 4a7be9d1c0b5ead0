"""The built-in algorithms against independent references: a scipy power iteration and
networkx for PageRank, scipy's csgraph for components, scikit-learn's LabelSpreading and its
formula for label spreading, and S^k X in scipy for SGC's features."""

import dask.array as da
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import csgraph
from sklearn.semi_supervised import LabelSpreading

from taskdml.graph import (
    connected_components,
    edges_from_networkx,
    edges_from_scipy,
    label_spreading,
    pagerank,
    partition_graph,
    propagate_features,
)


def directed_graph(n=500, seed=0):
    """Weighted, directed, with dangling vertices (no out-edges), isolated ones and a
    self-loop."""
    A = sp.random(n, n, density=0.008, format="lil", random_state=seed)
    A[3, :] = 0
    A[8, :] = 0
    A[:, 8] = 0
    A[20, 20] = 0.7
    return sp.csr_matrix(A)


def power_iteration(A, alpha=0.85, p=None, tol=1e-13, max_iter=2000):
    """PageRank by the power iteration, written from its definition (networkx's dangling
    rule: a dangling vertex's rank goes out as the personalization)."""
    n = A.shape[0]
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    p = np.full(n, 1.0 / n) if p is None else p / p.sum()
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        new = alpha * (P.T @ x + x[out == 0].sum() * p) + (1 - alpha) * p
        if np.abs(new - x).sum() < tol:
            return new
        x = new
    raise AssertionError("the reference did not converge")


@pytest.mark.parametrize("n_partitions", [2, 3])
def test_pagerank_equals_the_power_iteration(client, n_partitions):
    """PageRank of a directed graph with dangling and isolated vertices equals the power
    iteration to 1e-10 (L1), plain and personalised, on 2 and 3 (uneven) partitions."""
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A, chunk_size=600), n_partitions, client=client)
    ranks = pagerank(graph)
    assert ranks.pagerank.data.chunks == (tuple(graph.sizes),)
    reference = power_iteration(A)
    assert np.abs(ranks.pagerank.values - reference).sum() < 1e-10
    np.testing.assert_allclose(ranks.pagerank.values, reference, rtol=0, atol=1e-10)
    assert ranks.attrs["converged"] and ranks.attrs["n_iter"] == len(ranks.attrs["history"])
    p = np.random.default_rng(1).random(A.shape[0])
    personal = pagerank(graph, alpha=0.7, personalization=da.from_array(p, chunks=128))
    reference = power_iteration(A, 0.7, p)
    assert np.abs(personal.pagerank.values - reference).sum() < 1e-10
    np.testing.assert_allclose(personal.pagerank.values, reference, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda g, u: pagerank(g, personalization=np.zeros(500)), "positive sum"),
        (lambda g, u: pagerank(g, personalization=np.ones(3)), r"shape \(n_vertices,\)"),
        (lambda g, u: propagate_features(u, np.ones(500)), r"\(n_vertices, n_features\)"),
        (lambda g, u: label_spreading(g, np.zeros(500, int)), "undirected"),
    ],
)
def test_bad_arguments_say_what_was_expected(client, call, message):
    """A personalization of zero sum or the wrong length, features of one dimension, and
    directed partitions given to an undirected algorithm are refused with what to do."""
    A = directed_graph()
    graph = partition_graph(edges_from_scipy(A), 2, client=client)
    undirected = partition_graph(edges_from_scipy(A), 2, directed=False, client=client)
    with pytest.raises(ValueError, match=message):
        call(graph, undirected)


@pytest.mark.parametrize("directed", [True, False])
def test_pagerank_equals_networkx(client, directed):
    """On a small networkx graph (directed or not, weighted, with an isolated vertex),
    PageRank equals networkx's to 1e-10 (L1)."""
    G = nx.gnp_random_graph(150, 0.03, seed=2, directed=directed)
    for u, v in G.edges:
        G.edges[u, v]["weight"] = 1.0 + (u * v) % 4
    G.add_node(150)
    expected = nx.pagerank(G, alpha=0.85, tol=1e-14, max_iter=1000)
    ranks = pagerank(edges_from_networkx(G), n_partitions=3, client=client)
    expected = np.array([expected[v] for v in range(151)])
    assert np.abs(ranks.pagerank.values - expected).sum() < 1e-10
    np.testing.assert_allclose(ranks.pagerank.values, expected, rtol=0, atol=1e-12)


def _same_partition(a, b):
    """Two labelings name the same partition of the vertices."""
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.mark.parametrize("directed, n_partitions", [(True, 2), (False, 3)])
def test_components_equal_csgraph(client, directed, n_partitions):
    """Components (weak ones, directed) equal scipy's csgraph as partitions of the
    vertices, each labelled by its smallest vertex, and their number too."""
    A = sp.random(600, 600, density=0.0015, format="csr", random_state=5)
    edges = edges_from_scipy(A) if directed else edges_from_scipy(A + A.T, directed=False)
    out = connected_components(edges, n_partitions=n_partitions, client=client)
    n_expected, expected = csgraph.connected_components(A, directed=True, connection="weak")
    labels = out.component.values
    assert _same_partition(labels, expected)
    assert out.attrs["n_components"] == n_expected
    for component in np.unique(labels):
        assert component == np.flatnonzero(labels == component).min()


def sbm(sizes=(150, 150, 100), p_in=0.06, p_out=0.006, seed=0):
    G = nx.stochastic_block_model(list(sizes), _probabilities(len(sizes), p_in, p_out), seed=seed)
    truth = np.repeat(np.arange(len(sizes)), sizes)
    return G, truth


def _probabilities(k, p_in, p_out):
    return [[p_in if i == j else p_out for j in range(k)] for i in range(k)]


def spreading_reference(A, labels, alpha, tol, max_iter):
    """LabelSpreading's iteration written from its formula on the affinity A."""
    W = A.toarray().astype(float)
    np.fill_diagonal(W, 0)
    d = W.sum(axis=1)
    d[d == 0] = 1
    S = W / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    Y = np.zeros((len(labels), labels.max() + 1))
    Y[np.flatnonzero(labels >= 0), labels[labels >= 0]] = 1
    F, previous = Y.copy(), np.zeros_like(Y)
    for _ in range(max_iter):
        if np.abs(F - previous).sum() < tol:
            break
        previous, F = F, alpha * S @ F + (1 - alpha) * Y
    return F / np.where(F.sum(axis=1) == 0, 1, F.sum(axis=1))[:, None]


def test_label_spreading_equals_its_formula_and_scikit_learn(client):
    """On an SBM with 5% of vertices labelled, the distributions equal the formula's
    iteration and scikit-learn's LabelSpreading on the same graph (its kernel), and the
    accuracy on the unlabelled vertices is at least LabelSpreading's."""
    G, truth = sbm()
    G.add_node(400)  # isolated and unlabelled
    truth = np.append(truth, 0)
    n = len(truth)
    rng = np.random.default_rng(0)
    labels = np.full(n, -1)
    known = rng.choice(n - 1, size=int(0.05 * n), replace=False)
    labels[known] = truth[known]
    A = nx.to_scipy_sparse_array(G, nodelist=range(n), format="csr")
    out = label_spreading(
        edges_from_networkx(G), da.from_array(labels, chunks=128), n_partitions=3, client=client
    )
    ours = out.label_distributions.values
    np.testing.assert_allclose(ours, spreading_reference(A, labels, 0.2, 1e-3, 30), atol=1e-12)
    dense = A.toarray().astype(float)
    reference = LabelSpreading(
        kernel=lambda X, Y: dense[X[:, 0].astype(int)][:, Y[:, 0].astype(int)],
        alpha=0.2,
    ).fit(np.arange(n)[:, None], labels)
    np.testing.assert_allclose(ours, reference.label_distributions_, atol=1e-12)
    unknown = labels < 0
    accuracy = (out.label.values[unknown] == truth[unknown]).mean()
    assert accuracy >= (reference.transduction_[unknown] == truth[unknown]).mean()
    assert accuracy > 0.7  # the largest class is 37.5 % of the vertices


@pytest.mark.parametrize("k", [1, 3])
def test_propagated_features_equal_sgc_in_scipy(client, k):
    """S^k X with S = D~^-1/2 (A + I) D~^-1/2, X a dask array chunked unlike the
    partitions, equals the same product in scipy, chunked by partition."""
    A = directed_graph(seed=2)
    A = A + A.T
    X = np.random.default_rng(0).normal(size=(A.shape[0], 4))
    graph = partition_graph(edges_from_scipy(A, directed=False), 3, client=client)
    out = propagate_features(graph, da.from_array(X, chunks=(128, 4)), k=k)
    A_hat = A + sp.eye(A.shape[0])
    scale = sp.diags(1 / np.sqrt(np.asarray(A_hat.sum(axis=1)).ravel()))
    S, expected = scale @ A_hat @ scale, X
    for _ in range(k):
        expected = S @ expected
    assert out.features.data.chunks[0] == tuple(graph.sizes)
    np.testing.assert_allclose(out.features.values, expected, atol=1e-12)
    assert out.attrs["n_iter"] == k


def test_pagerank_without_a_client_equals_the_power_iteration():
    """PageRank of a graph partitioned in this process (client=False) equals the power
    iteration too."""
    A = directed_graph(seed=4)
    ranks = pagerank(edges_from_scipy(A), n_partitions=3, client=False)
    reference = power_iteration(A)
    assert np.abs(ranks.pagerank.values - reference).sum() < 1e-10
    np.testing.assert_allclose(ranks.pagerank.values, reference, rtol=0, atol=1e-10)
