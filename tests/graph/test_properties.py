"""Properties of graph runs: results do not depend on how the graph is cut or chunked, and
the docstrings' examples run (in this process, without a client)."""

import doctest
import importlib

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csgraph

from taskdml.graph import connected_components, edges_from_scipy, pagerank


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 60),
    density=st.floats(0.0, 0.15),
    n_partitions=st.integers(1, 5),
    chunk_size=st.integers(1, 50),
    seed=st.integers(0, 2**16),
)
def test_results_do_not_depend_on_the_cut_or_the_chunks(n, density, n_partitions, chunk_size, seed):
    """PageRank and components of random directed graphs (empty ones included), cut into
    1 to 5 partitions from edges in chunks of any size, equal the power iteration and
    csgraph."""
    n_partitions = min(n_partitions, n)
    A = sp.random(n, n, density=density, format="csr", random_state=seed)
    edges = edges_from_scipy(A, chunk_size=chunk_size)
    ranks = pagerank(edges, n_partitions=n_partitions, client=False).pagerank.values
    out = np.asarray(A.sum(axis=1)).ravel()
    P = sp.diags(np.divide(1.0, out, out=np.zeros(n), where=out != 0)) @ A
    x = np.full(n, 1.0 / n)
    for _ in range(1000):
        x, last = 0.85 * (P.T @ x + x[out == 0].sum() / n) + 0.15 / n, x
        if np.abs(x - last).sum() < 1e-13:
            break
    assert np.abs(ranks - x).sum() < 1e-10
    np.testing.assert_allclose(ranks, x, rtol=0, atol=1e-10)
    labels = connected_components(edges, n_partitions=n_partitions, client=False)
    _, expected = csgraph.connected_components(A, directed=True, connection="weak")
    pairs = set(zip(labels.component.values.tolist(), expected.tolist()))
    assert len(pairs) == len(set(expected.tolist())) == labels.attrs["n_components"]


@pytest.mark.parametrize("module", ["_partition", "_program", "_algorithms"])
def test_the_docstring_examples_run(module):
    """Every example in the graph modules' docstrings gives the output it shows."""
    results = doctest.testmod(importlib.import_module(f"taskdml.graph.{module}"))
    assert results.attempted > 0 and results.failed == 0
