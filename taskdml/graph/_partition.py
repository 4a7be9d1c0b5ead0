"""A graph partitioned over the workers: edge-cut by contiguous vertex ranges, pull form
(or a 2D vertex cut, :class:`VertexCutPartition`, see :func:`partition_graph`'s ``cut``).

A graph enters as the edges Dataset every step passes (``src``, ``dst``, optional
``weight`` along ``edge``; attrs ``shape`` and ``directed``), or as a scipy.sparse matrix or a
networkx graph, which :func:`edges_from_scipy` and :func:`edges_from_networkx` turn into that
Dataset. :func:`partition_graph` cuts it into ``P`` :class:`Partition` objects held on the
workers, one future each, spread round-robin over the workers:

- partition ``p`` owns the vertices ``[bounds[p], bounds[p + 1])`` (contiguous ranges of
  nearly equal size: the cut is by vertex ids, so a graph whose ids follow its locality cuts
  few edges, and any vertex's owner is a ``searchsorted``);
- it holds the CSR of the edges pointing *into* its vertices (pull form: one superstep's
  gather is one sparse product, rows = its vertices, columns = their sources), the weighted
  out-degree of its own vertices (built from the edges leaving them, wherever those edges
  are stored) and the weight of their self-loops;
- the columns of the CSR are its own vertices first, then its *mirrors*, the remote sources
  it reads, grouped by the partition that owns them: a superstep concatenates its own values
  and what each neighbour sent, in that order, and multiplies;
- ``sends[q]`` lists which of its own vertices partition ``q`` mirrors, computed once here,
  so a superstep sends each neighbour exactly the values it reads.

Why built this way: the edge list never comes to the client. Each edge chunk is split on
the worker that holds it, in one task that reads it once and cuts it into one piece per
partition (a stable grouping of its edges by owner: each piece keeps the chunk's order, so
the partitions do not depend on how the pieces are cut); each partition is
assembled from its pieces on the worker it is pinned to; the mirror lists go from each
partition to each other as small tasks of vertex ids (a ``P x P`` of them, tiny next to the
edges); the send lists are attached where the partition lives. An undirected graph stores
each edge once; its partitions hold both directions (a self-loop once), which is what
networkx's ``to_directed`` and a symmetric scipy matrix give. Bipartite graphs (two vertex
kinds) are not partitioned here yet.

Partitions that would not fit the workers' memory are built out of core instead
(:mod:`taskdml.graph._spill`): each partition's task reads the edge chunks itself, one at a
time, and writes its CSR to its worker's disk, which every superstep streams in row blocks.

Imports: numpy and scipy in the task functions; dask, xarray and distributed inside the
functions that build graphs on the client.
"""

import dataclasses
import operator

import numpy as np

from taskdml import _client, _keys
from taskdml.graph import _spill


@dataclasses.dataclass
class Partition:
    """One partition of a graph, as it lives on its worker (see the module docstring).

    Attributes
    ----------
    index : int
        Its rank among the partitions.
    bounds : numpy.ndarray
        The vertex ranges of every partition (``P + 1`` ids).
    csr : scipy.sparse.csr_matrix or SpilledCSR
        The in-edges of its vertices: ``csr[i, j]`` is the weight of the edge from column
        ``j``'s vertex to vertex ``start + i``; columns are its own vertices, then its mirrors.
        Out of core, a :class:`~taskdml.graph._spill.SpilledCSR` on its worker's disk.
    mirrors : dict
        ``{q: global ids}``: the vertices of partition ``q`` it reads, in column order.
    sends : dict
        ``{q: local indices}``: its own vertices that partition ``q`` reads, in ``q``'s order.
    out_weight : numpy.ndarray
        The summed weight of the edges leaving each of its vertices.
    loops : numpy.ndarray
        The weight of each of its vertices' self-loop (0 without one).
    """

    index: int
    bounds: np.ndarray
    csr: object
    mirrors: dict
    out_weight: np.ndarray
    loops: np.ndarray
    sends: dict = dataclasses.field(default_factory=dict)

    cut = "edge"
    """How the graph was cut: ``"edge"`` (this class) or ``"vertex"``
    (:class:`VertexCutPartition`)."""

    def combine(self, program, gathered, collective, superstep):
        """The gather of its own vertices, given the gather of its CSR's rows: here the same
        (an edge-cut partition holds every in-edge of its vertices)."""
        return gathered

    @property
    def start(self):
        """The first vertex it owns."""
        return int(self.bounds[self.index])

    @property
    def stop(self):
        """One past the last vertex it owns."""
        return int(self.bounds[self.index + 1])

    @property
    def n_local(self):
        """How many vertices it owns."""
        return self.stop - self.start

    @property
    def in_weight(self):
        """The summed weight of the edges into each of its vertices (self-loops included)."""
        return np.asarray(self.csr.sum(axis=1)).ravel()


@dataclasses.dataclass
class VertexCutPartition(Partition):
    """One partition of a vertex-cut graph (see :func:`partition_graph`'s ``cut``).

    It holds one block of the 2D grid of edges (those whose destination lies in its row
    block and source in its column block), and is the *master* of the vertex range
    ``[start, stop)``: the values of those vertices live here, and only here are they
    applied. The attributes of :class:`Partition` mean the same with these differences:

    - ``csr``: its edges, rows its own vertices first (all of them, a row empty where it
      holds no edge into it) then the remote destinations it touches (``partials``' ids in
      order); columns its own vertices, then the mirrors (remote sources), as in edge-cut;
    - ``out_weight``, ``loops`` and :attr:`in_weight` are over the *whole* graph (summed
      from every block as the partitions are built), not over its block.

    Attributes
    ----------
    partials : dict
        ``{q: global ids}``: the vertices mastered by partition ``q`` that its edges point
        into (its CSR's rows after its own), whose partial gathers it sends to ``q``.
    gathers : dict
        ``{q: local indices}``: its own vertices whose partial gathers partition ``q`` sends
        it, in ``q``'s order.
    in_total : numpy.ndarray
        The summed weight of the edges into each of its vertices, over the whole graph.
    """

    partials: dict = dataclasses.field(default_factory=dict)
    gathers: dict = dataclasses.field(default_factory=dict)
    in_total: np.ndarray = None

    cut = "vertex"

    @property
    def in_weight(self):
        """The summed weight of the edges into each of its vertices (self-loops included)."""
        return self.in_total

    def combine(self, program, gathered, collective, superstep):
        """The second exchange of a vertex-cut superstep: send the partial gathers of the
        remote rows to their masters, receive those of its own vertices from every partition
        whose edges point into them, and combine them with the program's combiner, in rank
        order (the same floats whatever the timing)."""
        ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[program.combiner]
        row = self.n_local
        for q in sorted(self.partials):
            size = len(self.partials[q])
            collective.send(q, ("partial", superstep), gathered[row : row + size])
            row += size
        own = gathered[: self.n_local]
        for q in sorted(self.gathers):
            indices = self.gathers[q]
            part = collective.receive(q, ("partial", superstep))
            own[indices] = ufunc(own[indices], part)  # indices are distinct within one q
        return own


# -- the task functions ---------------------------------------------------------------------


def split_chunk(src, dst, weight, bounds, both_ways):
    """One edge chunk cut into the pieces every partition needs (one task on the chunk's
    worker, which reads the chunk once): piece ``p`` holds partition ``p``'s in-edges as
    ``(local row, global source, weight)`` and the out-weight its vertices get from this
    chunk, the edges in the chunk's order. Without weights a piece's weight is ``None``
    (every edge weighs 1): a third fewer bytes go to the partition's worker."""
    src, dst, weight = _checked(src, dst, weight, bounds, both_ways)
    n_partitions = len(bounds) - 1
    into, into_at = _grouped(dst, bounds)
    out_of, out_at = _grouped(src, bounds)
    pieces = []
    for p in range(n_partitions):
        start, stop = int(bounds[p]), int(bounds[p + 1])
        edges = into[into_at[p] : into_at[p + 1]]
        leaving = out_of[out_at[p] : out_at[p + 1]]
        weighing = None if weight is None else weight[leaving]
        out_weight = np.bincount(src[leaving] - start, weighing, minlength=stop - start)
        weights = None if weight is None else weight[edges]
        pieces.append((dst[edges] - start, src[edges], weights, out_weight.astype(float)))
    return tuple(pieces)


def _checked(src, dst, weight, bounds, both_ways):
    """A chunk's edges as arrays, their ids checked, both ways if *both_ways*."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    weight = None if weight is None else np.asarray(weight, dtype=float)
    n = int(bounds[-1])
    for name, ids in (("src", src), ("dst", dst)):
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise ValueError(
                f"the edges' {name} holds vertex {bad}, outside 0 .. {n - 1} (the graph's "
                f"attr 'shape' is {n} vertices): fix the ids or the shape."
            )
    if both_ways:
        back = src != dst  # a self-loop is one edge either way
        src, dst = np.concatenate([src, dst[back]]), np.concatenate([dst, src[back]])
        weight = None if weight is None else np.concatenate([weight, weight[back]])
    return src, dst, weight


def grid_of(n_partitions):
    """The ``r x c`` grid of a vertex cut into *n_partitions* blocks: ``r`` the largest
    divisor not above its square root (``1 x 2`` for 2, ``1 x 3`` for 3, ``2 x 2`` for 4)."""
    r = max(d for d in range(1, int(np.sqrt(n_partitions)) + 1) if n_partitions % d == 0)
    return r, n_partitions // r


def split_chunk_2d(src, dst, weight, bounds, both_ways):
    """One edge chunk cut into the pieces of a vertex cut (see :func:`partition_graph`):
    piece ``k`` holds the edges of grid block ``k`` as ``(global destination, global
    source, weight)``, then the out-weight, in-weight and self-loop weight that partition
    ``k``'s own vertices (its master range) get from this chunk."""
    src, dst, weight = _checked(src, dst, weight, bounds, both_ways)
    n, n_partitions = int(bounds[-1]), len(bounds) - 1
    r, c = grid_of(n_partitions)
    row = np.searchsorted(np.linspace(0, n, r + 1).round(), dst, side="right") - 1
    column = np.searchsorted(np.linspace(0, n, c + 1).round(), src, side="right") - 1
    block = np.minimum(row, r - 1) * c + np.minimum(column, c - 1)
    order = np.argsort(
        block.astype(np.uint16 if n_partitions < 1 << 16 else np.int64), kind="stable"
    )
    at = np.concatenate([[0], np.cumsum(np.bincount(block, minlength=n_partitions))])
    into, into_at = _grouped(dst, bounds)
    out_of, out_at = _grouped(src, bounds)
    loop = src == dst
    pieces = []
    for p in range(n_partitions):
        start, stop = int(bounds[p]), int(bounds[p + 1])
        edges = order[at[p] : at[p + 1]]
        arriving, leaving = into[into_at[p] : into_at[p + 1]], out_of[out_at[p] : out_at[p + 1]]
        sums = []
        for ids, chosen in ((src, leaving), (dst, arriving), (dst, arriving[loop[arriving]])):
            weighing = None if weight is None else weight[chosen]
            sums.append(np.bincount(ids[chosen] - start, weighing, stop - start).astype(float))
        weights = None if weight is None else weight[edges]
        pieces.append((dst[edges], src[edges], weights, *sums))
    return tuple(pieces)


def assemble_2d(bounds, index, *pieces):
    """Vertex-cut partition *index* from its pieces (on the worker it is pinned to),
    without its send and gather lists yet."""
    import scipy.sparse as sp

    start, stop = int(bounds[index]), int(bounds[index + 1])
    n_local = stop - start
    empty = np.zeros(0, np.int64)
    into = np.concatenate([p[0] for p in pieces]) if pieces else empty
    sources = np.concatenate([p[1] for p in pieces]) if pieces else empty
    if pieces and pieces[0][2] is not None:
        weight = np.concatenate([p[2] for p in pieces])
    else:
        weight = np.ones(len(into))
    totals = [sum((p[k] for p in pieces), np.zeros(n_local)) for k in (3, 4, 5)]
    lists, positions = [], []
    for ids in (into, sources):  # own vertices first, then the remote ones by master
        own = (ids >= start) & (ids < stop)
        remote = np.unique(ids[~own])
        owners = np.searchsorted(bounds, remote, side="right") - 1
        lists.append({int(q): remote[owners == q] for q in np.unique(owners)})
        position = np.empty(len(ids), dtype=np.int64)
        position[own] = ids[own] - start
        position[~own] = n_local + np.searchsorted(remote, ids[~own])
        positions.append((position, n_local + len(remote)))
    (rows, n_rows), (columns, n_columns) = positions
    csr = sp.csr_matrix((weight, (rows, columns)), shape=(n_rows, n_columns))
    csr.sum_duplicates()
    out_weight, in_total, loops = totals
    return VertexCutPartition(
        index, np.asarray(bounds), csr, lists[1], out_weight, loops, {}, lists[0], {}, in_total
    )


def _grouped(ids, bounds):
    """The positions of *ids* grouped by the partition owning each (stable: in their order
    within a group), and where each partition's group starts."""
    if len(bounds) == 2:  # one partition owns everything
        return np.arange(len(ids)), np.array([0, len(ids)])
    owner = np.searchsorted(bounds, ids, side="right") - 1
    small = np.uint16 if len(bounds) <= 1 << 16 else np.int64  # a radix sort for few owners
    order = np.argsort(owner.astype(small), kind="stable")
    at = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(bounds) - 1))])
    return order, at


def assemble(bounds, index, *pieces):
    """Partition *index* from its pieces (a task on the worker it is pinned to), without its
    send lists yet."""
    import scipy.sparse as sp

    start, stop = int(bounds[index]), int(bounds[index + 1])
    n_local = stop - start
    rows = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    sources = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
    if pieces and pieces[0][2] is not None:
        weight = np.concatenate([p[2] for p in pieces])
    else:
        weight = np.ones(len(rows))
    out_weight = sum((p[3] for p in pieces), np.zeros(n_local))
    own = (sources >= start) & (sources < stop)
    loops = np.bincount(rows[sources == rows + start], weight[sources == rows + start], n_local)
    remote = np.unique(sources[~own])
    owners = np.searchsorted(bounds, remote, side="right") - 1
    mirrors = {int(q): remote[owners == q] for q in np.unique(owners)}
    # columns: own vertices, then mirrors in partition order (remote is sorted, so is owners)
    columns = np.empty(len(sources), dtype=np.int64)
    columns[own] = sources[own] - start
    columns[~own] = n_local + np.searchsorted(remote, sources[~own])
    csr = sp.csr_matrix((weight, (rows, columns)), shape=(n_local, n_local + len(remote)))
    csr.sum_duplicates()
    return Partition(index, np.asarray(bounds), csr, mirrors, out_weight, loops)


def spill(bounds, index, chunks, both_ways, block_edges, name):
    """Partition *index* built out of core (:mod:`taskdml.graph._spill`) on the worker that
    runs it, from *chunks* (:class:`~taskdml.graph._spill.EdgeChunks`) that it reads one at
    a time, without its send lists yet."""

    def split():
        for c in range(len(chunks)):
            yield split_chunk(*chunks.read(c), bounds, both_ways)[index]

    csr, mirrors, out_weight, loops = _spill.spill_csr(bounds, index, split, block_edges, name)
    return Partition(index, np.asarray(bounds), csr, mirrors, out_weight, loops)


def partition_stats(partition):
    """The sizes of *partition* (see :meth:`PartitionedGraph.stats`)."""
    csr = partition.csr
    spilled = hasattr(csr, "row_blocks")
    stats = {
        "vertices": partition.n_local,
        "in_edges": int(csr.nnz),
        "mirrors": int(sum(len(ids) for ids in partition.mirrors.values())),
        "sends": int(sum(len(idx) for idx in partition.sends.values())),
        "out_of_core": spilled,
        "edge_bytes": int(
            csr.resident_bytes
            if spilled
            else csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes
        ),
    }
    if partition.cut == "vertex":  # an edge-cut's stats as they were
        partials = partition.partials
        touched = [*partition.mirrors.values(), *partials.values()]
        stats.update(
            cut="vertex",
            partials_sent=int(sum(len(ids) for ids in partials.values())),
            partials_received=int(sum(len(idx) for idx in partition.gathers.values())),
            replicas=int(len(np.unique(np.concatenate(touched)))) if touched else 0,
        )
    return stats


def mirrored_from(partition, owner):
    """The vertices of partition *owner* that *partition* reads, as *owner*'s local indices
    (a small task: vertex ids, no edges)."""
    ids = partition.mirrors.get(owner, np.zeros(0, np.int64))
    return ids - int(partition.bounds[owner])


def partialled_to(partition, owner):
    """The vertices of partition *owner* whose partial gathers *partition* sends it, as
    *owner*'s local indices (vertex cut; a small task)."""
    ids = partition.partials.get(owner, np.zeros(0, np.int64))
    return ids - int(partition.bounds[owner])


def with_gathers(partition, *incoming):
    """Vertex-cut *partition* with its gather lists: ``incoming[q]``, the partials that
    partition ``q`` sends it."""
    gathers = {q: idx for q, idx in enumerate(incoming) if q != partition.index and len(idx)}
    return dataclasses.replace(partition, gathers=gathers)


def with_sends(partition, *needed):
    """*partition* with its send lists: ``needed[q]``, what partition ``q`` reads of it."""
    sends = {q: idx for q, idx in enumerate(needed) if q != partition.index and len(idx)}
    return dataclasses.replace(partition, sends=sends)


# -- the graph as data ----------------------------------------------------------------------


def edges_from_scipy(matrix, directed=True, chunk_size=None):
    """The edges Dataset of a scipy.sparse (or dense) adjacency matrix.

    Parameters
    ----------
    matrix : scipy.sparse matrix or array, shape (n_src, n_dst)
        ``matrix[i, j]`` is the weight of the edge from ``i`` to ``j``.
    directed : bool, default=True
        ``False``: *matrix* is symmetric and each edge is stored once (its upper triangle).
    chunk_size : int, optional
        Edges per chunk (default: about 4 chunks).

    Returns
    -------
    xarray.Dataset
        ``src``, ``dst`` (int64) and ``weight`` (float64) along ``edge``; attrs ``shape`` and
        ``directed``.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> edges = edges_from_scipy(sp.csr_matrix([[0, 1], [0, 0]]))
    >>> edges.src.values.tolist(), edges.dst.values.tolist(), edges.attrs["shape"]
    ([0], [1], [2, 2])
    """
    import scipy.sparse as sp

    coo = sp.coo_matrix(matrix)
    if not directed:
        if coo.shape[0] != coo.shape[1] or abs(sp.csr_matrix(coo) - sp.csr_matrix(coo).T).nnz:
            raise ValueError(
                "edges_from_scipy(directed=False) needs a symmetric square matrix; got one of "
                f"shape {coo.shape} that is not symmetric. Pass directed=True, or "
                "matrix + matrix.T."
            )
        coo = sp.triu(coo).tocoo()
    coo.sum_duplicates()
    keep = coo.data != 0
    return _edges_dataset(
        coo.row[keep], coo.col[keep], coo.data[keep], list(coo.shape), directed, chunk_size
    )


def edges_from_networkx(graph, weight="weight", chunk_size=None):
    """The edges Dataset of a networkx graph whose nodes are ``0 .. n - 1``.

    Parameters
    ----------
    graph : networkx.Graph or networkx.DiGraph
        Its nodes must be the integers ``0 .. n - 1`` (``networkx.convert_node_labels_to_integers``
        makes them so).
    weight : str, default="weight"
        The edge attribute holding the weight (1 where absent).
    chunk_size : int, optional
        Edges per chunk (default: about 4 chunks).

    Returns
    -------
    xarray.Dataset
        As :func:`edges_from_scipy`; ``directed`` is ``graph.is_directed()``.

    Examples
    --------
    >>> import networkx as nx
    >>> edges = edges_from_networkx(nx.path_graph(3))
    >>> edges.src.values.tolist(), edges.dst.values.tolist(), edges.attrs["directed"]
    ([0, 1], [1, 2], False)
    """
    n = graph.number_of_nodes()
    if set(graph.nodes) != set(range(n)):
        raise ValueError(
            f"edges_from_networkx needs nodes 0 .. {n - 1}; got others, e.g. "
            f"{sorted(set(graph.nodes) - set(range(n)), key=repr)[:3]!r}. Relabel them with "
            "networkx.convert_node_labels_to_integers(graph)."
        )
    triples = [(u, v, d.get(weight, 1.0)) for u, v, d in graph.edges(data=True)]
    src, dst, w = (np.asarray(c) for c in zip(*triples)) if triples else ([], [], [])
    return _edges_dataset(src, dst, w, [n, n], graph.is_directed(), chunk_size)


def edges_from_table(table, src="src", dst="dst", weight=None, *, directed=True, shape=None):
    """The edges Dataset of an edge list read as a table: a CSV or Parquet file through
    :func:`taskdml.datasets.read_csv` / ``read_parquet`` (its chunks stay where they are), an
    xarray table, or a pandas DataFrame.

    Parameters
    ----------
    table : xarray.Dataset or pandas.DataFrame
        A Dataset with ``X`` whose ``feature`` coordinate names the columns (what the readers
        return), or whose variables along ``sample`` are the columns (``y`` included).
    src, dst : str, default="src", "dst"
        The columns of the edges' two ends: whole numbers from 0.
    weight : str, optional
        The column of the edges' weights (default: every edge weighs 1).
    directed : bool, default=True
        ``False``: each row is an edge both ways.
    shape : (int, int), optional
        The vertices on each side (default: one more than the largest id, computed where the
        chunks are with the check that every id is a whole number from 0).

    Returns
    -------
    xarray.Dataset
        ``src``, ``dst`` (int64) and ``weight`` (float64) along ``edge``, chunked as the
        table's rows; attrs ``shape`` and ``directed``.

    Examples
    --------
    >>> import pandas as pd
    >>> edges = edges_from_table(pd.DataFrame({"src": [0, 2], "dst": [1, 0], "w": [0.5, 2.0]}),
    ...                          weight="w")
    >>> edges.dst.values.tolist(), edges.weight.values.tolist(), edges.attrs["shape"]
    ([1, 0], [0.5, 2.0], [3, 3])
    """
    import dask
    import dask.array as da
    import xarray as xr

    if hasattr(table, "columns") and not hasattr(table, "data_vars"):  # pandas
        names = [str(c) for c in table.columns]

        def column(name):
            return da.from_array(np.asarray(table[name]), chunks=-1)
    else:
        by_feature = "X" in table.data_vars and "feature" in table.coords
        names = [str(f) for f in table.feature.values] if by_feature else []
        names += [n for n, v in table.data_vars.items() if v.dims == ("sample",)]

        def column(name):
            if name in table.data_vars and table[name].dims == ("sample",):
                return table[name].data
            return table.X.sel(feature=name).data

    for role, name in (("src", src), ("dst", dst), ("weight", weight)):
        if name is not None and name not in names:
            raise ValueError(
                f"edges_from_table: no column {name!r} for {role}; the table has {names}. "
                f"Pass {role}= the column's name."
            )
    ends = [da.asarray(column(src)), da.asarray(column(dst))]
    ids = [end.astype(np.int64) for end in ends]
    if shape is None:
        exact, low, high = dask.compute(
            da.stack([(e == i).all() for e, i in zip(ends, ids)]).all(),
            da.minimum(ids[0].min(), ids[1].min()),
            da.maximum(ids[0].max(), ids[1].max()),
        )
        if not exact or low < 0:
            raise ValueError(
                f"edges_from_table: the columns {src!r} and {dst!r} must hold vertex ids, whole "
                "numbers from 0; map other keys to ids first (e.g. pandas.factorize)."
            )
        shape = [int(high) + 1] * 2
    weights = (
        da.ones_like(ids[0], dtype=np.float64)
        if weight is None
        else da.asarray(column(weight)).astype(np.float64)
    )
    return xr.Dataset(
        {"src": ("edge", ids[0]), "dst": ("edge", ids[1]), "weight": ("edge", weights)},
        attrs={"shape": [int(n) for n in shape], "directed": bool(directed)},
    )


def _edges_dataset(src, dst, weight, shape, directed, chunk_size):
    import dask.array as da
    import xarray as xr

    n_edges = len(src)
    chunk_size = chunk_size or max(1, -(-n_edges // 4))
    columns = {
        "src": np.asarray(src, dtype=np.int64),
        "dst": np.asarray(dst, dtype=np.int64),
        "weight": np.asarray(weight, dtype=np.float64),
    }
    return xr.Dataset(
        {k: ("edge", da.from_array(v, chunks=chunk_size)) for k, v in columns.items()},
        attrs={"shape": [int(s) for s in shape], "directed": bool(directed)},
    )


def as_edges(graph):
    """*graph* as the edges Dataset (a Dataset as it is; scipy or networkx converted)."""
    import scipy.sparse as sp

    if hasattr(graph, "data_vars"):
        missing = {"src", "dst"} - set(graph.data_vars)
        if missing or "shape" not in graph.attrs:
            raise ValueError(
                "a graph Dataset needs variables 'src' and 'dst' along 'edge' and the attr "
                f"'shape'; missing {sorted(missing | ({'shape'} - set(graph.attrs)))}. An edge "
                "list read as a table (read_csv, read_parquet) becomes one with "
                "taskdml.graph.edges_from_table(table, src=..., dst=...)."
            )
        return graph
    if sp.issparse(graph):
        return edges_from_scipy(graph)
    if hasattr(graph, "is_directed") and hasattr(graph, "edges"):
        return edges_from_networkx(graph)
    raise TypeError(
        "a graph is an edges Dataset, a scipy.sparse matrix or a networkx graph; got "
        f"{type(graph).__name__}."
    )


# -- the partitioned graph ------------------------------------------------------------------


@dataclasses.dataclass
class PartitionedGraph:
    """A graph cut into partitions held on the workers (see :func:`partition_graph`).

    Attributes
    ----------
    partitions : list of distributed.Future
        One :class:`Partition` per future, ``partitions[p]`` on ``workers[p]`` (the
        :class:`Partition` objects themselves without a client).
    workers : list of str
        The worker holding each partition (``None`` without a client).
    bounds : numpy.ndarray
        Partition ``p`` owns the vertices ``[bounds[p], bounds[p + 1])``.
    n_vertices : int
        The number of vertices.
    directed : bool
        Whether the partitions hold the edges one way (``False``: both ways).
    client : distributed.Client or None
        The client whose cluster holds them (``None``: this process holds them).
    name : str
        The token of the graph, for the keys of the work on it.
    source : tuple or None
        ``(edges, directed, options)``: what :meth:`repartitioned` cuts again, and how
        (``out_of_core``, ``block_edges``).
    """

    partitions: list
    workers: list
    bounds: np.ndarray
    n_vertices: int
    directed: bool
    client: object
    name: str
    source: tuple = None
    cut: str = "edge"
    cut_choice: dict = None

    def repartitioned(self):
        """The same partitions (same vertex ranges) built again from the edges on the
        workers the cluster has now: after a worker left, dask recomputes what it held.

        Returns
        -------
        PartitionedGraph
        """
        edges, directed, options = self.source
        return partition_graph(
            edges, self.n_partitions, directed=directed, client=self.client, **options
        )

    @property
    def n_partitions(self):
        """The number of partitions."""
        return len(self.partitions)

    @property
    def sizes(self):
        """The number of vertices each partition owns."""
        return np.diff(self.bounds).tolist()

    def stats(self):
        """What each partition holds and what moves between them every superstep.

        Returns
        -------
        list of dict
            Per partition: ``vertices``, ``in_edges`` (stored entries of its CSR),
            ``mirrors`` (remote vertices it reads: values received per superstep),
            ``sends`` (values it sends per superstep), with a vertex cut ``cut`` and
            ``partials_sent`` / ``partials_received`` (partial gathers sent to masters /
            received from the other blocks per superstep), ``replicas`` (the remote vertices
            its edges touch: mirrors and partials' destinations), and where
            ``cut="auto"`` chose, ``cut``, ``auto_measure``, ``top1_in_share`` and
            ``auto_threshold`` (see :func:`partition_graph`), ``out_of_core`` (whether its CSR is
            on disk) and ``edge_bytes`` (the bytes of edges it holds in memory: its whole
            CSR, or out of core the most that one streamed block holds), read where the
            partitions are.

        Examples
        --------
        >>> import networkx as nx
        >>> graph = partition_graph(nx.path_graph(4), 2, client=False)
        >>> [s["mirrors"] for s in graph.stats()]
        [1, 1]
        """
        if self.client is None:
            stats = [partition_stats(p) for p in self.partitions]
        else:
            stats = self.client.gather(
                [self.client.submit(partition_stats, p) for p in self.partitions]
            )
        if self.cut_choice is None:
            return stats
        return [{**s, "cut": self.cut, **self.cut_choice} for s in stats]


def partition_graph(
    graph,
    n_partitions=None,
    *,
    directed=None,
    client=None,
    out_of_core=None,
    block_edges=None,
    cut="edge",
):
    """Cut *graph* into partitions held on the workers.

    Parameters
    ----------
    graph : xarray.Dataset, scipy.sparse matrix or networkx graph
        The edges Dataset (``src``, ``dst``, optional ``weight`` along ``edge``; attrs
        ``shape`` and ``directed``), or a matrix or graph that
        :func:`edges_from_scipy` / :func:`edges_from_networkx` convert.
    n_partitions : int, optional
        How many partitions (default: one per worker).
    directed : bool, optional
        ``False`` treats every edge as both ways, whatever the graph's ``directed`` attr
        says (a directed graph becomes ``A + A.T``); default: the attr.
    client : distributed.Client or False, optional
        Default: the current client. With none (or ``False``), the partitions are built and
        kept in this process, and the supersteps run in threads here: for small graphs.
    out_of_core : bool, optional
        ``True``: each partition's CSR is built on its worker's disk from the edge chunks,
        one chunk at a time, and every superstep streams it in row blocks (see
        :mod:`taskdml.graph._spill`): a worker then holds its vertices' values and one block
        of edges. Default: out of core when the partitions would not fit half the smallest
        worker memory limit (about 64 bytes per in-edge while they are built). The edges
        should then be lazy (a Zarr store through :func:`taskdml.datasets.read_edges`, or a
        generator's chunks): each partition computes every chunk itself, twice.
    block_edges : int, optional
        The most in-edges of one streamed block (default
        :data:`~taskdml.graph._spill.BLOCK_EDGES`); given, it implies ``out_of_core=True``
        unless that is ``False``.
    cut : {"edge", "vertex", "auto"}, default="edge"
        ``"edge"``: partition ``p`` holds every in-edge of its vertex range (the module
        docstring). ``"vertex"``: a 2D vertex cut, as PowerGraph's for power-law graphs:
        the ``P`` partitions form an ``r x c`` grid (:func:`grid_of`: ``1 x 2`` for 2,
        ``2 x 2`` for 4) and edge ``(u, v)`` goes to the block of ``v``'s row range and
        ``u``'s column range, so a high in-degree vertex's edges are spread over its row's
        ``c`` blocks instead of all landing on one partition. Each vertex keeps one master
        (partition ``p`` masters the same range ``[bounds[p], bounds[p + 1])`` as in edge
        cut) and is mirrored where its edges are; a superstep sends masters' messages to the
        blocks reading them, gathers each block's edges (a partial gather per touched
        vertex), sends the partials to the masters, which combine them with the program's
        combiner and apply (:class:`VertexCutPartition`). Why a grid and not PowerGraph's
        hashed or greedy edge placement: a block is found from two ``searchsorted`` per
        edge in the chunk's own task, with no coordination (greedy needs the placement so
        far) and a bound a hash lacks: a vertex is replicated on at most ``r + c - 1``
        partitions. ``"auto"``: vertex cut when the in-degree distribution is heavy-tailed,
        i.e. when the top 1% of vertices by in-degree receive more than
        :data:`AUTO_TOP1_SHARE` of the edges (a near-regular graph puts about 1-3% there,
        an R-MAT or power-law graph 20% or more), edge cut otherwise; the measure and the
        choice are in :meth:`PartitionedGraph.stats`. A vertex cut is built in memory only
        (``out_of_core`` is not built for it: ``"auto"`` then picks edge cut) and runs
        bulk-synchronous (``staleness=0``).

    Returns
    -------
    PartitionedGraph

    Examples
    --------
    >>> import networkx as nx
    >>> graph = partition_graph(nx.path_graph(10), 2, client=False)
    >>> graph.sizes, graph.directed
    ([5, 5], False)
    >>> star = nx.star_graph(199)  # one hub: its edges are most of the graph
    >>> partition_graph(star, 2, client=False, cut="auto").cut
    'vertex'
    """
    import dask
    import dask.array as da

    client = _client.resolve_client(client)
    edges = as_edges(graph)
    n_src, n_dst = (int(s) for s in edges.attrs["shape"])
    if n_src != n_dst:
        raise ValueError(
            f"partition_graph handles graphs of one vertex kind; this one is bipartite "
            f"(shape {[n_src, n_dst]}). Bipartite (MEGA) partitions are not built yet."
        )
    info = {None: {}} if client is None else client.scheduler_info(n_workers=-1)["workers"]
    workers = sorted(info, key=str)
    n_partitions = int(n_partitions or len(workers))
    if not 1 <= n_partitions <= max(1, n_src):
        raise ValueError(
            f"n_partitions must be between 1 and the number of vertices ({n_src}); got "
            f"{n_partitions}."
        )
    both_ways = not (edges.attrs.get("directed", True) if directed is None else directed)
    if cut not in ("edge", "vertex", "auto"):
        raise ValueError(f"cut must be 'edge', 'vertex' or 'auto'; got {cut!r}.")
    choice = None
    if cut == "auto":
        share = top1_in_share(edges, both_ways, n_src, client)
        cut = "vertex" if share > AUTO_TOP1_SHARE else "edge"
        choice = {"auto_measure": "top1_in_share", "top1_in_share": share}
        choice["auto_threshold"] = AUTO_TOP1_SHARE
        if out_of_core and cut == "vertex":
            cut = "edge"
    if cut == "vertex" and (out_of_core or block_edges is not None):
        raise ValueError(
            "cut='vertex' builds partitions in memory only; out of core, use cut='edge'."
        )
    bounds = np.linspace(0, n_src, n_partitions + 1).round().astype(np.int64)
    placed = [workers[p % len(workers)] for p in range(n_partitions)]
    options = {"out_of_core": out_of_core, "block_edges": block_edges, "cut": cut}
    if out_of_core is None and block_edges is not None:
        out_of_core = True  # a block size asks for blocks
    if out_of_core is None:
        per_worker = -(-n_partitions // len(workers))
        in_edges = edges.sizes["edge"] * (2 if both_ways else 1) / n_partitions * per_worker
        limits = [worker.get("memory_limit") or 0 for worker in info.values()]
        out_of_core = _spill.should_spill(in_edges, min(limits) if all(limits) else 0)
        if out_of_core and cut == "vertex":
            if choice is None:
                raise ValueError(
                    "cut='vertex' builds partitions in memory only, and these would not fit "
                    "the workers' memory: use cut='edge' (out of core), or more workers."
                )
            cut, options["cut"] = "edge", "edge"
    block_edges = _spill.BLOCK_EDGES if block_edges is None else int(block_edges)
    if block_edges < 1:
        raise ValueError(f"block_edges must be a positive int; got {block_edges!r}.")

    columns = [edges.src.data, edges.dst.data]
    if "weight" in edges.data_vars:
        columns.append(edges.weight.data)
    columns = [c if isinstance(c, da.Array) else da.from_array(np.asarray(c)) for c in columns]
    columns = da.unify_chunks(*sum(([c, "i"] for c in columns), []))[1]
    blocks = [c.to_delayed().ravel() for c in columns]
    if len(blocks) == 2:
        blocks.append([None] * len(blocks[0]))
    parts = ([c.name for c in columns], bounds, both_ways)
    if cut == "vertex":  # edge-cut keys as they were
        parts = (*parts, "vertex")
    # the partitions' keys name their workers (a graph cut again lands elsewhere) and, out of
    # core, the block size (the same graph in memory is other partitions)
    held = [placed, block_edges if out_of_core else None]
    names = {
        phase: _keys.key_name(
            "graph", *parts, *(held if phase not in ("split", "piece") else []), phase=phase
        )
        for phase in ("split", "piece", "assemble", "spill", "mirrors", "partition", "partials")
    }
    vertex = cut == "vertex"
    split = dask.delayed(split_chunk_2d if vertex else split_chunk, pure=True)
    take = dask.delayed(operator.getitem, pure=True)
    build = dask.delayed(assemble_2d if vertex else assemble, pure=True)
    mirrors = dask.delayed(mirrored_from, pure=True)
    attach = dask.delayed(with_sends, pure=True)
    splits = [
        split(s, d, w, bounds, both_ways, dask_key_name=(names["split"], c))
        for c, (s, d, w) in enumerate(zip(*blocks))
    ]
    raw = []
    if out_of_core:  # each partition reads the chunks itself, one at a time
        chunks = _spill.EdgeChunks(list(zip(*blocks)), names["spill"])
        spilled = dask.delayed(spill, pure=True)
        for p, worker in enumerate(placed):
            with dask.annotate(workers=[worker], allow_other_workers=False):
                raw.append(
                    spilled(bounds, p, chunks, both_ways, block_edges, names["spill"],
                          dask_key_name=(names["spill"], p, block_edges))
                )  # fmt: skip
    for p, worker in enumerate([] if out_of_core else placed):
        pieces = [
            take(chunk, p, dask_key_name=(names["piece"], c, p)) for c, chunk in enumerate(splits)
        ]
        with dask.annotate(workers=[worker], allow_other_workers=False):
            raw.append(build(bounds, p, *pieces, dask_key_name=(names["assemble"], p)))
    final = []
    for q, worker in enumerate(placed):
        needed = [
            mirrors(raw[p], q, dask_key_name=(names["mirrors"], p, q)) for p in range(n_partitions)
        ]
        with dask.annotate(workers=[worker], allow_other_workers=False):
            final.append(attach(raw[q], *needed, dask_key_name=(names["partition"], q)))
    if vertex:  # the masters learn which partials come to them
        partials = dask.delayed(partialled_to, pure=True)
        gathers = dask.delayed(with_gathers, pure=True)
        for q, worker in enumerate(placed):
            incoming = [
                partials(raw[p], q, dask_key_name=(names["partials"], p, q))
                for p in range(n_partitions)
            ]
            with dask.annotate(workers=[worker], allow_other_workers=False):
                final[q] = gathers(final[q], *incoming, dask_key_name=(names["partials"], q))
    if client is None:  # a small graph in this process: partitions as objects, no futures
        partitions = list(dask.compute(*final, scheduler="sync"))
    else:
        partitions = client.compute(final)
    name = _keys.key_name("graph", *parts)
    return PartitionedGraph(
        partitions, placed, bounds, n_src, not both_ways, client, name,
        (edges, directed, options), cut, choice,
    )  # fmt: skip


AUTO_TOP1_SHARE = 0.1
"""``cut="auto"`` picks a vertex cut when the top 1% of vertices by in-degree receive more
than this share of the edges."""


def top1_in_share(edges, both_ways, n, client):
    """The share of the edges that point into the top 1% of vertices by in-degree (an
    undirected graph's degree), computed where the edge chunks are: one ``bincount`` per
    chunk, summed, and its top ``ceil(n / 100)``; only the number comes back."""
    import dask
    import dask.array as da

    src, dst = edges.src.data, edges.dst.data
    if not isinstance(dst, da.Array):
        src, dst = da.from_array(np.asarray(src)), da.from_array(np.asarray(dst))
    counts = da.bincount(dst, minlength=n)
    if both_ways:  # the other direction, a self-loop counted once
        counts = counts + da.bincount(src, weights=(src != dst).astype(float), minlength=n)
    k = max(1, -(-n // 100))
    share = da.topk(counts, k).sum() / da.maximum(counts.sum(), 1)
    if client is None:
        return float(dask.compute(share, scheduler="sync")[0])
    return float(client.compute(share).result())
