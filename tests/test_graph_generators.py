"""Tests of taskdml.datasets' graph generators against their definitions: R-MAT's quadrant and
degree formulas, SBM's per-block binomial densities and complete blocks, the planted rating
model, scikit-learn's kneighbors_graph, and values independent of the chunking."""

import itertools
import math

import dask
import dask.array
import numpy as np
import pytest
import scipy.sparse
import scipy.special
from dask.utils import key_split
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.neighbors import kneighbors_graph

from taskdml import datasets
from taskdml._keys import step_scope
from taskdml.exceptions import DataError

# Every bound below is a mean plus or minus this many standard deviations of the exact
# distribution (binomial or chi-square), computed in the test.
SIGMAS = 5


def _edges(graph, *names):
    """The graph's edge variables, computed together on the local scheduler."""
    names = names or ("src", "dst")
    return dask.compute(*[graph[name].data for name in names], scheduler="sync")


def _within(count, n, p):
    """Whether *count* is within SIGMAS standard deviations of Binomial(n, p)'s mean."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p)) + 1e-9


def _check_graph(graph, shape, directed, weighted):
    assert graph.attrs["shape"] == list(shape) and graph.attrs["directed"] is directed
    names = ["src", "dst"] + ["weight"] * weighted
    assert [n for n in graph.data_vars if graph[n].dims == ("edge",)] == names
    assert all(graph[n].data.chunks == graph.src.data.chunks for n in names)
    assert graph.src.dtype == graph.dst.dtype == np.int64
    assert not any(math.isnan(c) for c in graph.src.data.chunks[0])


# --------------------------------------------------------------------------------------------
# R-MAT


def test_rmat_quadrant_frequencies_match_abcd():
    """Over all levels, the (src bit, dst bit) pairs fall in the four quadrants with the
    probabilities a, b, c, d within binomial bounds."""
    scale, a, b, c = 9, 0.45, 0.25, 0.15
    graph = datasets.make_rmat(scale, 8, a=a, b=b, c=c, permute=False, random_state=3)
    _check_graph(graph, (512, 512), True, False)
    src, dst = _edges(graph)
    n_draws = len(src) * scale
    assert len(src) == 8 * 2**scale
    levels = np.arange(scale)[:, None]
    src_bits, dst_bits = (src[None, :] >> levels) & 1, (dst[None, :] >> levels) & 1
    for (s, d), p in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [a, b, c, 1 - a - b - c]):
        count = int(((src_bits == s) & (dst_bits == d)).sum())
        assert _within(count, n_draws, p), (s, d, count, n_draws * p)


@pytest.mark.parametrize("side", ["out", "in"])
def test_rmat_degrees_by_popcount_match_the_kronecker_formula(side):
    """The edges whose endpoint has k one-bits number Binomial(m, C(s, k) q0^(s-k) q1^k), with
    q1 = c + d for sources and b + d for targets."""
    scale, a, b, c = 10, 0.57, 0.19, 0.19
    m = 16 * 2**scale
    graph = datasets.make_rmat(scale, a=a, b=b, c=c, permute=False, random_state=0)
    src, dst = _edges(graph)
    ends, q1 = (src, 1 - a - b) if side == "out" else (dst, b + (1 - a - b - c))
    popcount = np.array([bin(v).count("1") for v in range(2**scale)])
    degree = np.bincount(ends, minlength=2**scale)
    for k in range(scale + 1):
        p = scipy.special.comb(scale, k) * (1 - q1) ** (scale - k) * q1**k
        assert _within(int(degree[popcount == k].sum()), m, p), k


def test_rmat_permutation_relabels_vertices_bijectively():
    """The permuted graph is the unpermuted one under one bijection of the vertex ids: its
    degree sequences are the same multisets and the edge set maps one to one."""
    plain = _edges(datasets.make_rmat(8, permute=False, random_state=5))
    permuted = _edges(datasets.make_rmat(8, permute=True, random_state=5))
    mapping = {}
    for u, v in zip(np.concatenate(plain), np.concatenate(permuted)):
        assert mapping.setdefault(int(u), int(v)) == v
    assert len(set(mapping.values())) == len(mapping)
    assert set(mapping.values()) <= set(range(2**8))
    for before, after in zip(plain, permuted):
        degrees = np.bincount(before, minlength=256), np.bincount(after, minlength=256)
        assert (np.sort(degrees[0]) == np.sort(degrees[1])).all()
        assert (degrees[0][list(mapping)] == degrees[1][list(mapping.values())]).all()
    assert (plain[0] != permuted[0]).any()


def test_rmat_weights_are_uniform_and_chunking_never_changes_values():
    """Any chunk_edges gives the same edges and weights; the weights are uniform on [0, 1)
    (mean within the bound of n uniform draws)."""
    graphs = [
        datasets.make_rmat(7, weighted=True, chunk_edges=size, random_state=11)
        for size in (2048, 333, 10**6)
    ]
    assert graphs[1].src.data.chunks[0][:2] == (333, 333)
    values = [_edges(g, "src", "dst", "weight") for g in graphs]
    for other in values[1:]:
        for x, y in zip(values[0], other):
            np.testing.assert_array_equal(x, y)
    weight = values[0][2]
    assert weight.min() >= 0 and weight.max() < 1
    assert abs(weight.mean() - 0.5) <= SIGMAS * math.sqrt(1 / 12 / len(weight))


def test_rmat_on_the_cluster_equals_local(client):
    """The cluster computes the same edges as the local scheduler, one task per chunk named
    after the generator."""
    graph = datasets.make_rmat(8, chunk_edges=1000, random_state=2)
    local = _edges(graph)
    remote = client.compute([graph.src.data, graph.dst.data], sync=True)
    for x, y in zip(local, remote):
        np.testing.assert_array_equal(x, y)
    graph_keys = graph.src.data.__dask_graph__()
    generate = [k for k in graph_keys if key_split(k) == "make_rmat-generate"]
    assert len(generate) == len(graph.src.data.chunks[0]) == 5


@settings(max_examples=10, deadline=None)
@given(chunk_edges=st.integers(16, 9000), seed=st.integers(0, 2**32))
def test_rmat_and_sbm_values_never_depend_on_chunk_edges(chunk_edges, seed):
    """Property: any chunk_edges gives the edges of one chunk, for R-MAT (chunks of exactly
    chunk_edges) and SBM (chunks of whole ranges) alike."""
    rmat = [
        datasets.make_rmat(6, 4, chunk_edges=size, random_state=seed)
        for size in (chunk_edges, 10**6)
    ]
    assert rmat[0].src.data.chunks[0][0] == min(chunk_edges, 256)
    sbm = [
        datasets.make_sbm([40, 30], 0.3, 0.05, chunk_edges=size, random_state=seed)
        for size in (chunk_edges, 10**6)
    ]
    for chunked, whole in (rmat, sbm):
        for x, y in zip(_edges(chunked), _edges(whole)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "make",
    [
        lambda: datasets.make_rmat(4, random_state=0),
        lambda: datasets.make_sbm([5, 5], 0.5, 0.1, random_state=0),
        lambda: datasets.make_ratings(20, 5, rank=2, density=0.5, random_state=0),
        lambda: datasets.make_knn_graph(np.arange(20.0).reshape(10, 2), 2),
    ],
)
def test_graph_keys_are_named_after_the_step(make):
    """Inside a pipeline step every key of the graph is the step's name and alphabetic phases,
    so the dashboard groups the generator's tasks under the step."""
    with step_scope("graph"):
        graph = make()
    names = {key_split(k) for var in graph.data_vars.values() for k in var.data.__dask_graph__()}
    assert names <= {"graph", "graph-generate", "graph-candidates", "array"}
    assert "graph-generate" in names


# --------------------------------------------------------------------------------------------
# SBM


@pytest.mark.parametrize("directed", [False, True])
def test_sbm_block_densities_within_binomial_bounds(directed):
    """Edges per block pair follow Binomial(pairs, p_in or p_out), with no self loops and no
    duplicate pairs, and community is the planted block of each vertex."""
    sizes, p_in, p_out = [1500, 900, 300], 0.06, 0.004
    graph = datasets.make_sbm(
        sizes, p_in, p_out, directed=directed, chunk_edges=40_000, random_state=1
    )
    _check_graph(graph, (2700, 2700), directed, False)
    src, dst = _edges(graph)
    community = graph.community.compute(scheduler="sync").values
    np.testing.assert_array_equal(community, np.repeat(np.arange(3), sizes))
    assert (src != dst).all()
    assert len(np.unique(src * 2700 + dst)) == len(src)
    if not directed:
        assert (src < dst).all()
    block_src, block_dst = community[src], community[dst]
    for i, j in itertools.product(range(3), repeat=2):
        count = int(((block_src == i) & (block_dst == j)).sum())
        if i == j:
            pairs, p = sizes[i] * (sizes[i] - 1) // (1 if directed else 2), p_in
        elif directed or i < j:
            pairs, p = sizes[i] * sizes[j], p_out
        else:
            assert count == 0
            continue
        assert _within(count, pairs, p), (i, j, count, pairs * p)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("sizes", [[7, 6], [1], [2, 5, 4]])
def test_sbm_complete_blocks_give_every_pair_once(sizes, directed):
    """With p_in = 1, p_out = 0 the edges are exactly every pair of vertices in one community,
    and with p_in = 0, p_out = 1 every pair across two (enumerated in the test)."""
    block = np.repeat(np.arange(len(sizes)), sizes)
    n = len(block)
    pairs = itertools.permutations(range(n), 2) if directed else itertools.combinations(range(n), 2)
    pairs = list(pairs)
    for p_in, same in [(1.0, True), (0.0, False)]:
        graph = datasets.make_sbm(sizes, p_in, 1.0 - p_in, directed=directed, random_state=0)
        src, dst = _edges(graph)
        expected = sorted((u, v) for u, v in pairs if (block[u] == block[v]) == same)
        assert sorted(zip(src.tolist(), dst.tolist())) == expected


def test_sbm_values_do_not_depend_on_chunk_edges():
    """chunk_edges changes the chunks (whole ranges, at most chunk_edges edges unless one
    range holds more) but not the edges."""
    big, small = (
        datasets.make_sbm([3000, 2000], 0.05, 0.002, chunk_edges=size, random_state=4)
        for size in (10**7, 70_000)
    )
    assert len(big.src.data.chunks[0]) == 1 and len(small.src.data.chunks[0]) > 2
    for x, y in zip(_edges(big), _edges(small)):
        np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------------------------
# Ratings


def test_ratings_equal_the_planted_model_without_noise():
    """With noise=0 every rating is the dot product of its user's and item's planted factors,
    pairs are distinct, and the number of ratings is within Binomial(n_users * n_items,
    density)'s bounds; other chunkings give the same ratings."""
    n_users, n_items, density = 9000, 60, 0.3
    graph = datasets.make_ratings(
        n_users, n_items, rank=4, density=density, noise=0.0, chunk_edges=50_000, random_state=7
    )
    _check_graph(graph, (n_users, n_items), True, True)
    assert graph.user_factors.dims == ("src_vertex", "component")
    assert graph.item_factors.dims == ("dst_vertex", "component")
    src, dst, weight = _edges(graph, "src", "dst", "weight")
    U = graph.user_factors.compute(scheduler="sync").values
    V = graph.item_factors.compute(scheduler="sync").values
    assert U.shape == (n_users, 4) and V.shape == (n_items, 4)
    np.testing.assert_allclose(weight, np.sum(U[src] * V[dst], axis=1), rtol=1e-12, atol=1e-12)
    assert len(np.unique(src * n_items + dst)) == len(src)
    assert src.max() < n_users and dst.max() < n_items
    assert _within(len(src), n_users * n_items, density)
    for rated in np.bincount(dst, minlength=n_items):
        assert _within(rated, n_users, density)
    other = datasets.make_ratings(
        n_users,
        n_items,
        rank=4,
        density=density,
        noise=0.0,
        chunk_edges=10**7,
        chunk_vertices=777,
        random_state=7,
    )
    np.testing.assert_array_equal(other.user_factors.values, U)
    for x, y in zip(_edges(other, "src", "dst", "weight"), (src, dst, weight)):
        np.testing.assert_array_equal(x, y)


def test_ratings_noise_has_the_planted_variance(client):
    """The residuals against the planted factors have variance noise**2 (chi-square bound),
    and the factors' dot products have variance about 1."""
    noise = 0.3
    graph = datasets.make_ratings(2000, 80, rank=5, density=0.1, noise=noise, random_state=8)
    src, dst, weight, U, V = client.compute(
        [graph[n].data for n in ("src", "dst", "weight", "user_factors", "item_factors")],
        sync=True,
    )
    residual = weight - np.sum(U[src] * V[dst], axis=1)
    n = len(residual)
    assert abs(np.sum(residual**2) / noise**2 - n) <= SIGMAS * math.sqrt(2 * n)
    assert 0.8 < np.var(U @ V.T) < 1.2


# --------------------------------------------------------------------------------------------
# kNN graph


@pytest.mark.parametrize("mode", ["connectivity", "distance"])
@pytest.mark.parametrize("include_self", [False, True])
def test_knn_graph_equals_sklearn(client, mode, include_self):
    """The blockwise kNN graph of a chunked table is scikit-learn's kneighbors_graph: the same
    neighbours, and the same distances with mode='distance'."""
    data = datasets.make_blobs(700, 4, centers=3, chunk_size=160, random_state=0)
    graph = datasets.make_knn_graph(data, n_neighbors=6, mode=mode, include_self=include_self)
    weighted = mode == "distance"
    _check_graph(graph, (700, 700), True, weighted)
    assert graph.src.data.chunks[0] == tuple(6 * n for n in data.X.data.chunks[0])
    names = ("src", "dst", "weight") if weighted else ("src", "dst")
    values = client.compute([graph[n].data for n in names], sync=True)
    ours = scipy.sparse.csr_matrix(
        (values[2] if weighted else np.ones(len(values[0])), (values[0], values[1])),
        shape=(700, 700),
    )
    X = data.X.values
    reference = kneighbors_graph(X, 6, mode=mode, include_self=include_self)
    reference = reference.tocsr().sorted_indices()
    ours = ours.sorted_indices()
    np.testing.assert_array_equal(ours.indptr, reference.indptr)
    np.testing.assert_array_equal(ours.indices, reference.indices)
    np.testing.assert_allclose(ours.data, reference.data, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("include_self", [False, True])
def test_knn_graph_with_duplicated_rows_matches_sklearn_distances(include_self):
    """With every row 4 times (ties at distance 0, across chunk boundaries too), each
    sample's neighbour distances are scikit-learn's, and the sample itself is a neighbour only
    with include_self, as the first."""
    X = np.repeat(np.random.default_rng(0).normal(size=(40, 3)), 4, axis=0)
    graph = datasets.make_knn_graph(
        dask.array.from_array(X, chunks=(37, 3)), 5, mode="distance", include_self=include_self
    )
    src, dst, weight = _edges(graph, "src", "dst", "weight")
    reference = kneighbors_graph(X, 5, mode="distance", include_self=include_self).tocsr()
    own = (src == dst).reshape(-1, 5)
    assert (own[:, 0] == include_self).all() and not own[:, 1:].any()
    np.testing.assert_allclose(
        np.sort(weight.reshape(-1, 5), axis=1),
        np.sort(reference.data.reshape(-1, 5), axis=1),
        atol=1e-7,
    )


# --------------------------------------------------------------------------------------------
# split_edges


def test_split_edges_partitions_the_edges_exactly():
    """The test side holds ceil(test_size * n_edges) edges, train and test together are the
    graph's edges, and vertex variables and attrs stay on both sides."""
    graph = datasets.make_ratings(500, 40, rank=2, density=0.25, chunk_edges=1000, random_state=0)
    train, test = datasets.split_edges(graph, test_size=0.2, random_state=3)
    src, dst, weight = _edges(graph, "src", "dst", "weight")
    assert test.sizes["edge"] == math.ceil(0.2 * len(src))
    assert train.sizes["edge"] + test.sizes["edge"] == len(src)
    parts = [np.stack(_edges(part, "src", "dst", "weight"), 1) for part in (train, test)]
    np.testing.assert_array_equal(
        np.sort(np.concatenate(parts).view("f8,f8,f8"), axis=0),
        np.sort(np.stack([src, dst, weight], 1).astype("f8").view("f8,f8,f8"), axis=0),
    )
    for part in (train, test):
        assert part.attrs == graph.attrs and part.user_factors.shape == (500, 2)


# --------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: datasets.make_rmat(0), r"make_rmat: scale must be an integer >= 1, got 0"),
        (lambda: datasets.make_rmat(63), r"scale must be <= 62"),
        (
            lambda: datasets.make_rmat(4, a=0.5, b=0.3, c=0.3),
            r"a \+ b \+ c must be <= 1 .* Lower one of them",
        ),
        (lambda: datasets.make_rmat(4, chunk_edges=0), r"chunk_edges must be an integer >= 1"),
        (lambda: datasets.make_sbm(5, 0.1, 0.1), r"make_sbm: sizes must be a non-empty sequence"),
        (lambda: datasets.make_sbm([5, 0], 0.1, 0.1), r"sizes\[\] must be an integer >= 1, got 0"),
        (lambda: datasets.make_sbm([5], 1.5, 0.1), r"p_in must be a finite number >= 0.0"),
        (lambda: datasets.make_ratings(10, 10, density=0), r"density must be a finite number > 0"),
        (lambda: datasets.make_ratings(10, 10, noise=-1), r"noise must be a finite number >= 0"),
        (
            lambda: datasets.make_knn_graph(np.zeros((5, 2)), n_neighbors=5),
            r"n_neighbors must be <= 4 for 5 samples \(include_self=False\), got 5",
        ),
        (
            lambda: datasets.make_knn_graph(np.zeros((5, 2)), mode="dist"),
            r"mode must be 'connectivity' or 'distance', got 'dist'",
        ),
        (
            lambda: datasets.split_edges(datasets.make_blobs(10)),
            r"split_edges: edges must be an xarray.Dataset with an 'edge' dim",
        ),
        (
            lambda: datasets.split_edges(datasets.make_rmat(3), test_size=2.0),
            r"split_edges: test_size must be a float in \(0, 1\)",
        ),
    ],
)
def test_generator_errors_name_the_parameter_and_the_fix(call, message):
    """Bad arguments raise DataError naming the function, the parameter and the fix."""
    with pytest.raises(DataError, match=message):
        call()
