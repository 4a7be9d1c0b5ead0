"""The built-in graph algorithms, each a vertex program run in supersteps on the workers.

Each public function takes a graph (the edges Dataset, a scipy.sparse matrix, a networkx
graph, or a :class:`~taskdml.graph._partition.PartitionedGraph` already on the workers), runs
its program (:mod:`taskdml.graph._program`) with :func:`~taskdml.graph._supersteps.run_supersteps`,
and returns an xarray Dataset along ``vertex`` whose variables are dask arrays chunked by
partition, left on the workers; its attrs say how many supersteps ran (``n_iter``), whether
the run converged, the per-superstep history, and where a run went on from a checkpoint
(``resumed_from``, ``restarts``: see :mod:`taskdml.graph._supersteps`).

What each one equals, and so what the tests compare it with:

- :func:`pagerank`: networkx's ``pagerank`` (its scipy power iteration): a dangling vertex's
  rank goes to every vertex in proportion to the personalization vector; stops when the L1
  change is below ``tol``;
- :func:`connected_components`: ``scipy.sparse.csgraph.connected_components`` (weak
  components of a directed graph), each labelled by its smallest vertex (min-label
  propagation: as many supersteps as the largest component's diameter, plus one);
- :func:`label_spreading`: scikit-learn's ``LabelSpreading`` on the graph as its affinity
  (``S = D^-1/2 A D^-1/2`` with the diagonal dropped, ``F <- alpha S F + (1 - alpha) Y``, its
  stopping rule and its final normalisation);
- :func:`propagate_features`: SGC's ``S^k X``, with ``S = D~^-1/2 (A + I) D~^-1/2``.
"""

import numpy as np

from taskdml.graph._partition import PartitionedGraph, partition_graph
from taskdml.graph._program import VertexProgram
from taskdml.graph._supersteps import run_supersteps

# -- the programs ---------------------------------------------------------------------------


class PageRankProgram(VertexProgram):
    """PageRank in pull form: a vertex gathers its in-neighbours' rank over their out-weight;
    the dangling mass is an all-reduced measure, spread by the personalization (each
    partition's block of it and of the start vector come as its data)."""

    tolerates_staleness = True  # a contraction / a monotone propagation

    measure_names = ("change", "dangling")

    def __init__(self, alpha, tol, personal_sum=1.0):
        self.alpha, self.tol, self.personal_sum = alpha, tol, personal_sum

    def init(self, part, data):
        n = int(part.bounds[-1])
        personal = np.full(part.n_local, 1.0 / n) if data is None else np.asarray(data)
        personal = personal / self.personal_sum
        # what every superstep reuses, computed once per partition: the reciprocal of each
        # vertex's out-weight (0 for a dangling vertex), the dangling vertices, and the
        # personalization scaled both ways the update needs
        weight = part.out_weight
        self.inverse_ = np.divide(1.0, weight, out=np.zeros_like(personal), where=weight != 0)
        self.dangling_ = np.flatnonzero(weight == 0)
        self.jump_, self.spread_ = (1 - self.alpha) * personal, self.alpha * personal
        return np.full(part.n_local, 1.0 / n)

    def message(self, part, values):
        return values * self.inverse_

    def apply(self, part, values, gathered, totals):
        new = gathered * self.alpha
        new += self.spread_ * totals[1]  # the dangling mass, spread by the personalization
        new += self.jump_
        return new

    def measures(self, part, old, new):
        if old is None:
            return [np.inf, float(new[self.dangling_].sum())]
        difference = new - old
        return [float(np.abs(difference, out=difference).sum()), float(new[self.dangling_].sum())]

    def converged(self, totals, superstep):
        return totals[0] < self.tol


class ComponentsProgram(VertexProgram):
    """Min-label propagation: every vertex takes the smallest label among itself and its
    neighbours until none changes."""

    tolerates_staleness = True  # a contraction / a monotone propagation

    combiner = "min"
    measure_names = ("change", "roots")
    measure_label = "vertices changed"

    def init(self, part, data):
        return np.arange(part.start, part.stop, dtype=float)

    def apply(self, part, values, gathered, totals):
        return np.minimum(values, gathered)

    def measures(self, part, old, new):
        changed = np.inf if old is None else float((new != old).sum())
        roots = float((new == np.arange(part.start, part.stop)).sum())
        return [changed, roots]

    def converged(self, totals, superstep):
        return totals[0] == 0

    def result(self, part, values):
        return values.astype(np.int64)


class LabelSpreadingProgram(VertexProgram):
    """scikit-learn's LabelSpreading iteration on the graph as its affinity matrix."""

    tolerates_staleness = True  # a contraction / a monotone propagation

    def __init__(self, alpha, tol, n_classes):
        self.alpha, self.tol, self.n_classes = alpha, tol, n_classes

    def init(self, part, data):
        labels = np.asarray(data)
        onehot = np.zeros((part.n_local, self.n_classes))
        known = labels >= 0
        onehot[np.flatnonzero(known), labels[known]] = 1.0
        self.static_ = (1 - self.alpha) * onehot
        degree = part.in_weight - part.loops
        degree[degree == 0] = 1.0  # scipy's normed laplacian: isolated vertices keep 1
        self.scale_ = 1.0 / np.sqrt(degree)[:, None]
        return onehot

    def message(self, part, values):
        return values * self.scale_

    def apply(self, part, values, gathered, totals):
        gathered = gathered - part.loops[:, None] * values * self.scale_  # no self-affinity
        return self.alpha * gathered * self.scale_ + self.static_

    def converged(self, totals, superstep):
        return totals[0] < self.tol

    def result(self, part, values):
        normalizer = values.sum(axis=1, keepdims=True)
        normalizer[normalizer == 0] = 1
        return values / normalizer


class PropagateProgram(VertexProgram):
    """SGC's propagation: ``k`` products with the self-looped, symmetric-normalised
    adjacency."""

    measure_names = ()

    def init(self, part, data):
        self.scale_ = 1.0 / np.sqrt(part.in_weight + 1.0)[:, None]
        return np.asarray(data, dtype=float)

    def message(self, part, values):
        return values * self.scale_

    def apply(self, part, values, gathered, totals):
        return (gathered + values * self.scale_) * self.scale_

    def measures(self, part, old, new):
        return []


# -- the public functions -------------------------------------------------------------------


def pagerank(
    graph,
    alpha=0.85,
    personalization=None,
    tol=1e-12,
    max_iter=1000,
    *,
    n_partitions=None,
    client=None,
    staleness=0,
):
    """PageRank of every vertex, computed on the workers in supersteps.

    Parameters
    ----------
    graph : xarray.Dataset, scipy.sparse matrix, networkx graph or PartitionedGraph
        An undirected graph counts each edge both ways; edge weights weigh the walk.
    alpha : float, default=0.85
        The damping factor.
    personalization : array-like of shape (n_vertices,), optional
        Where the walk restarts (and where dangling vertices send their rank), normalised
        to sum to 1; default: uniform.
    tol : float, default=1e-12
        Stop when the L1 change of a superstep is below it.
    max_iter : int, default=1000
        The most supersteps.
    n_partitions : int, optional
        Partitions to cut *graph* into when it is not partitioned yet (default: one per
        worker).
    client : distributed.Client, optional
    staleness : int, default=0
        Supersteps a partition may run ahead of its neighbours' values
        (:func:`~taskdml.graph.run_supersteps`); ``0``: bulk-synchronous.

    Returns
    -------
    xarray.Dataset
        ``pagerank`` along ``vertex``; attrs ``n_iter``, ``converged``, ``history``.

    Examples
    --------
    Without a client, a small graph is partitioned and iterated in this process:

    >>> import networkx as nx
    >>> ranks = pagerank(nx.path_graph(3), client=False)
    >>> ranks.pagerank.values.round(4).tolist()
    [0.2568, 0.4865, 0.2568]
    """
    graph = _partitioned(graph, n_partitions, client, directed=None)
    data, total = None, 1.0
    if personalization is not None:
        data = _blocks(graph, personalization, "personalization", 1)
        total = float(_sum(graph, personalization))
        if not total > 0:
            raise ValueError(
                f"personalization must be non-negative with a positive sum; its sum is {total}."
            )
    program = PageRankProgram(alpha, tol, total)
    result = run_supersteps(graph, program, data, max_iter=max_iter, staleness=staleness)
    return _dataset({"pagerank": result.as_array()}, result)


def connected_components(graph, *, max_iter=None, n_partitions=None, client=None, staleness=0):
    """The connected components (weak, for a directed graph), by min-label propagation.

    Parameters
    ----------
    graph : xarray.Dataset, scipy.sparse matrix, networkx graph or PartitionedGraph
    max_iter : int, optional
        The most supersteps (default: the number of vertices, which always suffices).
    n_partitions : int, optional
        As in :func:`pagerank`.
    client : distributed.Client, optional
    staleness : int, default=0
        As in :func:`pagerank` (the labels are the same whatever it is).

    Returns
    -------
    xarray.Dataset
        ``component`` along ``vertex``: the smallest vertex of its component; attrs
        ``n_components`` and those of :func:`pagerank`.

    Examples
    --------
    >>> import networkx as nx
    >>> out = connected_components(nx.Graph([(0, 1), (2, 3)]), client=False)
    >>> out.component.values.tolist(), out.attrs["n_components"]
    ([0, 0, 2, 2], 2)
    """
    graph = _partitioned(graph, n_partitions, client, directed=False)
    # one hop per superstep, up to s + 1 with stale values, and s more to see it settled
    max_iter = max_iter or (graph.n_vertices + 1) * (staleness + 1) + staleness
    result = run_supersteps(graph, ComponentsProgram(), max_iter=max_iter, staleness=staleness)
    out = _dataset({"component": result.as_array(dtype=np.int64)}, result)
    out.attrs["n_components"] = int(result.history[-1]["roots"]) if result.history else 0
    return out


def label_spreading(
    graph,
    labels,
    alpha=0.2,
    tol=1e-3,
    max_iter=30,
    *,
    n_partitions=None,
    client=None,
    staleness=0,
):
    """Spread the known labels over the graph, as scikit-learn's ``LabelSpreading`` does
    with the graph as its affinity matrix.

    Parameters
    ----------
    graph : xarray.Dataset, scipy.sparse matrix, networkx graph or PartitionedGraph
        Treated as undirected (a directed graph as ``A + A.T``).
    labels : array-like of shape (n_vertices,)
        Integer classes ``0 .. n_classes - 1``, and ``-1`` where unknown.
    alpha : float, default=0.2
        How much of a vertex's distribution comes from its neighbours.
    tol : float, default=1e-3
        Stop when the L1 change of the distributions is below it.
    max_iter : int, default=30
    n_partitions : int, optional
    client : distributed.Client, optional
    staleness : int, default=0
        As in :func:`pagerank`.

    Returns
    -------
    xarray.Dataset
        ``label`` (the most likely class) and ``label_distributions`` (``vertex`` x
        ``class``); attrs as :func:`pagerank`'s.

    Examples
    --------
    >>> import networkx as nx
    >>> out = label_spreading(nx.path_graph(4), [0, -1, -1, 1], client=False)
    >>> out.label.values.tolist()
    [0, 0, 1, 1]
    """
    import dask.array as da

    graph = _partitioned(graph, n_partitions, client, directed=False)
    data = _blocks(graph, labels, "labels", 1)
    n_classes = int(_max(graph, labels)) + 1
    program = LabelSpreadingProgram(alpha, tol, n_classes)
    result = run_supersteps(graph, program, data, max_iter=max_iter, staleness=staleness)
    distributions = result.as_array(tail=(n_classes,))
    return _dataset(
        {
            "label": (("vertex",), da.argmax(distributions, axis=1)),
            "label_distributions": (("vertex", "class"), distributions),
        },
        result,
    )


def propagate_features(graph, X, k=2, *, n_partitions=None, client=None):
    """SGC's propagated features ``S^k X``, ``S = D~^-1/2 (A + I) D~^-1/2``.

    Parameters
    ----------
    graph : xarray.Dataset, scipy.sparse matrix, networkx graph or PartitionedGraph
        Treated as undirected (a directed graph as ``A + A.T``).
    X : array-like, dask array or Dataset of shape (n_vertices, n_features)
        The vertices' features (a Dataset: its ``X``); a dask array is rechunked to the
        partitions and read where they live.
    k : int, default=2
        How many hops.
    n_partitions : int, optional
    client : distributed.Client, optional

    Returns
    -------
    xarray.Dataset
        ``features`` (``vertex`` x ``feature``); attrs as :func:`pagerank`'s.

    Examples
    --------
    >>> import networkx as nx, numpy as np
    >>> out = propagate_features(nx.path_graph(3), np.eye(3), k=1, client=False)
    >>> out.features.values.round(3).tolist()
    [[0.5, 0.408, 0.0], [0.408, 0.333, 0.408], [0.0, 0.408, 0.5]]
    """

    if hasattr(X, "data_vars"):  # a table Dataset (a pipeline's value): its X
        X = X["X"].data
    graph = _partitioned(graph, n_partitions, client, directed=False)
    blocks = _blocks(graph, X, "X", 2)
    result = run_supersteps(graph, PropagateProgram(), blocks, max_iter=int(k))
    features = result.as_array(tail=(X.shape[1],))
    return _dataset({"features": (("vertex", "feature"), features)}, result)


# -- helpers ----------------------------------------------------------------------------------


def _partitioned(graph, n_partitions, client, directed):
    if isinstance(graph, PartitionedGraph):
        if directed is False and graph.directed:
            raise ValueError(
                "this algorithm treats the graph as undirected, and these partitions hold "
                "directed edges; partition it with partition_graph(..., directed=False)."
            )
        return graph
    return partition_graph(graph, n_partitions, directed=directed, client=client)


def _blocks(graph, values, name, ndim):
    """*values* (one row per vertex) as one block per partition: a dask array rechunked to
    the partitions, its blocks read where they are; an in-memory one sliced."""
    import dask.array as da

    shape = getattr(values, "shape", None) or np.shape(values)
    if len(shape) != ndim or shape[0] != graph.n_vertices:
        expected = "(n_vertices,)" if ndim == 1 else "(n_vertices, n_features)"
        raise ValueError(
            f"{name} must have shape {expected} with n_vertices = {graph.n_vertices}; got "
            f"{tuple(shape)}."
        )
    if isinstance(values, da.Array):
        chunks = (tuple(graph.sizes), *values.shape[1:])
        return list(values.rechunk(chunks).to_delayed().ravel())
    values = np.asarray(values)
    return [values[a:b] for a, b in zip(graph.bounds[:-1], graph.bounds[1:])]


def _reduced(graph, scalar):
    """A dask scalar computed where the graph is (on its cluster, or here)."""
    if graph.client is None:
        return scalar.compute(scheduler="sync")
    return graph.client.compute(scalar).result()


def _sum(graph, values):
    """The sum of *values*, reduced on the cluster when it is a dask array."""
    return _reduced(graph, values.sum()) if hasattr(values, "dask") else np.sum(values)


def _max(graph, values):
    """The largest of *values*, reduced on the cluster when it is a dask array."""
    return _reduced(graph, values.max()) if hasattr(values, "dask") else np.max(values)


def _dataset(variables, result):
    import xarray as xr

    variables = {k: v if isinstance(v, tuple) else (("vertex",), v) for k, v in variables.items()}
    attrs = {"n_iter": result.n_iter, "converged": bool(result.converged)}
    attrs["history"] = result.history
    if result.resumed_from is not None:  # went on from a checkpoint (taskdml resume)
        attrs["resumed_from"] = result.resumed_from
    if result.restarts:  # went on after lost workers
        attrs["restarts"] = result.restarts
    return xr.Dataset(variables, attrs=attrs)
