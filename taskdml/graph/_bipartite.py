"""A bipartite graph (users x items, samples x features) partitioned over the workers, in
both orientations: the layout of TUX2's heterogeneous graphs for ML.

A bipartite graph is the edges Dataset whose ``src`` indexes the left side (users) and
``dst`` the right side (items), with ``shape = [n_users, n_items]`` and the ratings in
``weight``. :func:`partition_bipartite` cuts it into ``P`` :class:`BipartitePart` objects,
one future each, spread round-robin over the workers. Partition ``p`` owns

- the users ``[user_bounds[p], user_bounds[p + 1])`` and the ratings they gave, as a CSR of
  its users' rows (``by_user``) whose columns are the items they rated, *mirrored* from the
  partitions that own them (``item_mirrors[q]``: the global ids of ``q``'s items it reads,
  in column order, ``q`` ascending, itself included);
- the items ``[item_bounds[p], item_bounds[p + 1])`` and the ratings they received, the
  transposed view (``by_item``), whose columns are the users who rated them (mirrors
  likewise in ``user_mirrors``): what ALS's item half-step reads;
- the send lists: ``user_sends[q]`` / ``item_sends[q]``, its own users / items that
  partition ``q`` mirrors (local indices, in ``q``'s column order; ``q == p`` included, served
  without a message).

So every rating is stored twice, once per orientation, each time where its half-step
solves: a half-step sends each partition exactly the factors it mirrors and nothing else.

Why built this way (as :func:`~taskdml.graph._partition.partition_graph`): the edge list
never comes to the client. One task per (edge chunk, partition) piece splits a chunk where it
is; each partition is assembled from its pieces on the worker it is pinned to; the mirror
lists travel between partitions as a ``P x P`` of small tasks of vertex ids. The CSR keeps
duplicated (user, item) pairs as separate ratings (no summing): each rating is one term of
the least squares, as in Spark MLlib.

After a worker left, :meth:`BipartiteGraph.repartitioned` cuts the same ranges again from
the edges on the workers left (the partitions' keys name their workers), for the runs of
:mod:`taskdml.graph._factorize` that go on from their last checkpoint.

Imports: numpy in the task functions; dask and xarray inside the functions that build
graphs on the client.
"""

import dataclasses

import numpy as np

from taskdml import _client, _keys


@dataclasses.dataclass
class SideCSR:
    """The ratings of one orientation of a partition, rows = its own vertices.

    Attributes
    ----------
    indptr : numpy.ndarray
        Row ``r``'s ratings are ``[indptr[r], indptr[r + 1])``.
    columns : numpy.ndarray
        The column (an index into the mirrored vertices) of each rating.
    values : numpy.ndarray
        The ratings.
    """

    indptr: np.ndarray
    columns: np.ndarray
    values: np.ndarray

    @property
    def n_rows(self):
        """How many own vertices (rows)."""
        return len(self.indptr) - 1

    @property
    def counts(self):
        """How many ratings each row has."""
        return np.diff(self.indptr)


@dataclasses.dataclass
class BipartitePart:
    """One partition of a bipartite graph, as it lives on its worker (see the module
    docstring)."""

    index: int
    user_bounds: np.ndarray
    item_bounds: np.ndarray
    by_user: SideCSR
    by_item: SideCSR
    item_mirrors: dict
    user_mirrors: dict
    user_sends: dict = dataclasses.field(default_factory=dict)
    item_sends: dict = dataclasses.field(default_factory=dict)

    def bounds(self, side):
        """``(start, stop)`` of the vertices of *side* (``"user"`` or ``"item"``) it owns."""
        edges = self.user_bounds if side == "user" else self.item_bounds
        return int(edges[self.index]), int(edges[self.index + 1])


# -- the task functions ---------------------------------------------------------------------


def bipartite_piece(src, dst, weight, user_bounds, item_bounds, index):
    """The part of one edge chunk partition *index* holds (a task on the chunk's worker):
    ``(user rows, items, ratings)`` of its users and ``(item rows, users, ratings)`` of its
    items."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    weight = np.ones(len(src)) if weight is None else np.asarray(weight, dtype=float)
    for name, ids, n in (("src", src, user_bounds[-1]), ("dst", dst, item_bounds[-1])):
        if len(ids) and (ids.min() < 0 or ids.max() >= n):
            bad = ids[(ids < 0) | (ids >= n)][0]
            raise ValueError(
                f"the edges' {name} holds vertex {bad}, outside 0 .. {n - 1} (the graph's "
                f"attr 'shape' is {[int(user_bounds[-1]), int(item_bounds[-1])]}): fix the "
                "ids or the shape."
            )
    u0, u1 = int(user_bounds[index]), int(user_bounds[index + 1])
    i0, i1 = int(item_bounds[index]), int(item_bounds[index + 1])
    mine = (src >= u0) & (src < u1)
    rated = (dst >= i0) & (dst < i1)
    return (src[mine] - u0, dst[mine], weight[mine]), (dst[rated] - i0, src[rated], weight[rated])


def _side(n_rows, rows, columns, values, bounds):
    """The CSR of one orientation and its mirrors, from ``(local row, global column id,
    value)`` triples; columns are grouped by owner (global ids are sorted, so are owners)."""
    remote = np.unique(columns)
    owners = np.searchsorted(bounds, remote, side="right") - 1
    mirrors = {int(q): remote[owners == q] for q in np.unique(owners)}
    local = np.searchsorted(remote, columns)
    order = np.lexsort((local, rows))  # stable: duplicated pairs stay separate ratings
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n_rows))])
    return SideCSR(indptr.astype(np.int64), local[order], values[order]), mirrors


def assemble_bipartite(user_bounds, item_bounds, index, *pieces):
    """Partition *index* from its pieces (a task on the worker it is pinned to), without its
    send lists yet."""

    def joined(side, k, dtype):
        parts = [p[side][k] for p in pieces]
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    sides = []
    for side, (own, other) in enumerate(((user_bounds, item_bounds), (item_bounds, user_bounds))):
        n_rows = int(own[index + 1] - own[index])
        rows, cols = joined(side, 0, np.int64), joined(side, 1, np.int64)
        sides.append(_side(n_rows, rows, cols, joined(side, 2, float), other))
    (by_user, item_mirrors), (by_item, user_mirrors) = sides
    return BipartitePart(
        index,
        np.asarray(user_bounds),
        np.asarray(item_bounds),
        by_user,
        by_item,
        item_mirrors,
        user_mirrors,
    )


def bipartite_mirrored(part, owner):
    """What *part* reads of partition *owner*: ``(users, items)`` as *owner*'s local
    indices (a small task: vertex ids, no edges)."""
    empty = np.zeros(0, np.int64)
    users = part.user_mirrors.get(owner, empty) - int(part.user_bounds[owner])
    items = part.item_mirrors.get(owner, empty) - int(part.item_bounds[owner])
    return users, items


def with_bipartite_sends(part, *needed):
    """*part* with its send lists: ``needed[q]``, what partition ``q`` reads of it."""
    users = {q: u for q, (u, _) in enumerate(needed) if len(u)}
    items = {q: i for q, (_, i) in enumerate(needed) if len(i)}
    return dataclasses.replace(part, user_sends=users, item_sends=items)


def bipartite_stats(part):
    """The sizes of *part* (see :meth:`BipartiteGraph.stats`)."""
    return {
        "users": part.by_user.n_rows,
        "items": part.by_item.n_rows,
        "ratings": len(part.by_user.values),
        "item_mirrors": int(sum(len(v) for v in part.item_mirrors.values())),
        "user_mirrors": int(sum(len(v) for v in part.user_mirrors.values())),
    }


# -- the partitioned graph ------------------------------------------------------------------


@dataclasses.dataclass
class BipartiteGraph:
    """A bipartite graph cut into partitions held on the workers (see
    :func:`partition_bipartite`).

    Attributes
    ----------
    partitions : list of distributed.Future
        One :class:`BipartitePart` per future, ``partitions[p]`` on ``workers[p]`` (the
        objects themselves without a client).
    workers : list of str
        The worker holding each partition (``None`` without a client).
    user_bounds, item_bounds : numpy.ndarray
        Partition ``p`` owns the users ``[user_bounds[p], user_bounds[p + 1])`` and the
        items ``[item_bounds[p], item_bounds[p + 1])``.
    shape : tuple of int
        ``(n_users, n_items)``.
    client : distributed.Client or None
    name : str
        The token of the graph, for the keys of the work on it.
    source : xarray.Dataset or None
        The edges, which :meth:`repartitioned` cuts again.
    """

    partitions: list
    workers: list
    user_bounds: np.ndarray
    item_bounds: np.ndarray
    shape: tuple
    client: object
    name: str
    source: object = None

    def repartitioned(self):
        """The same partitions (same user and item ranges) built again from the edges on
        the workers the cluster has now: after a worker left, dask recomputes what it held.

        Returns
        -------
        BipartiteGraph
        """
        return partition_bipartite(self.source, self.n_partitions, client=self.client)

    @property
    def n_partitions(self):
        """The number of partitions."""
        return len(self.partitions)

    def sizes(self, side):
        """The number of vertices of *side* each partition owns.

        Parameters
        ----------
        side : {"user", "item"}

        Returns
        -------
        list of int
        """
        return np.diff(self.user_bounds if side == "user" else self.item_bounds).tolist()

    def stats(self):
        """What each partition holds, read where the partitions are.

        Returns
        -------
        list of dict
            Per partition: ``users``, ``items``, ``ratings`` (stored once per orientation)
            and ``user_mirrors`` / ``item_mirrors`` (the factors it receives every
            half-step).

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> from taskdml.graph import edges_from_scipy
        >>> graph = partition_bipartite(edges_from_scipy(sp.eye(4, 3)), 2, client=False)
        >>> [s["ratings"] for s in graph.stats()]
        [2, 1]
        """
        if self.client is None:
            return [bipartite_stats(p) for p in self.partitions]
        return self.client.gather([self.client.submit(bipartite_stats, p) for p in self.partitions])


def partition_bipartite(edges, n_partitions=None, *, client=None):
    """Cut a bipartite graph into partitions held on the workers, by user and by item ranges.

    Parameters
    ----------
    edges : xarray.Dataset
        ``src`` (users), ``dst`` (items) and optional ``weight`` (ratings; 1 without) along
        ``edge``; attr ``shape = [n_users, n_items]`` (as :func:`taskdml.datasets.make_ratings`
        returns).
    n_partitions : int, optional
        Default: one per worker.
    client : distributed.Client or False, optional
        Default: the current client. With none (or ``False``) the partitions are built and
        kept in this process.

    Returns
    -------
    BipartiteGraph

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from taskdml.graph import edges_from_scipy
    >>> graph = partition_bipartite(edges_from_scipy(sp.eye(4, 3)), 2, client=False)
    >>> graph.sizes("user"), graph.sizes("item"), graph.shape
    ([2, 2], [2, 1], (4, 3))
    """
    import dask
    import dask.array as da

    from taskdml.graph._partition import as_edges

    client = _client.resolve_client(client)
    edges = as_edges(edges)
    n_users, n_items = (int(s) for s in edges.attrs["shape"])
    workers = [None] if client is None else sorted(client.scheduler_info(n_workers=-1)["workers"])
    n_partitions = int(n_partitions or len(workers))
    if n_partitions < 1:
        raise ValueError(f"n_partitions must be at least 1; got {n_partitions}.")
    user_bounds = np.linspace(0, n_users, n_partitions + 1).round().astype(np.int64)
    item_bounds = np.linspace(0, n_items, n_partitions + 1).round().astype(np.int64)
    placed = [workers[p % len(workers)] for p in range(n_partitions)]

    columns = [edges.src.data, edges.dst.data]
    if "weight" in edges.data_vars:
        columns.append(edges.weight.data)
    columns = [c if isinstance(c, da.Array) else da.from_array(np.asarray(c)) for c in columns]
    blocks = [c.to_delayed().ravel() for c in columns]
    if len({len(b) for b in blocks}) != 1:
        raise ValueError("the edges' src, dst and weight must be chunked alike along 'edge'.")
    if len(blocks) == 2:
        blocks.append([None] * len(blocks[0]))
    parts = ([c.name for c in columns], user_bounds, item_bounds)
    # the partitions' keys name their workers: a graph cut again (repartitioned) lands elsewhere
    names = {
        phase: _keys.key_name(
            "bipartite", *parts, *([] if phase == "piece" else [placed]), phase=phase
        )
        for phase in ("piece", "assemble", "mirrors", "partition")
    }
    piece = dask.delayed(bipartite_piece, pure=True)
    build = dask.delayed(assemble_bipartite, pure=True)
    mirrored = dask.delayed(bipartite_mirrored, pure=True)
    attach = dask.delayed(with_bipartite_sends, pure=True)
    raw = []
    for p, worker in enumerate(placed):
        pieces = [
            piece(s, d, w, user_bounds, item_bounds, p, dask_key_name=(names["piece"], c, p))
            for c, (s, d, w) in enumerate(zip(*blocks))
        ]
        with dask.annotate(workers=[worker], allow_other_workers=False):
            raw.append(
                build(user_bounds, item_bounds, p, *pieces, dask_key_name=(names["assemble"], p))
            )
    final = []
    for q, worker in enumerate(placed):
        needed = [
            mirrored(raw[p], q, dask_key_name=(names["mirrors"], p, q)) for p in range(n_partitions)
        ]
        with dask.annotate(workers=[worker], allow_other_workers=False):
            final.append(attach(raw[q], *needed, dask_key_name=(names["partition"], q)))
    if client is None:
        partitions = list(dask.compute(*final, scheduler="sync"))
    else:
        partitions = client.compute(final)
    name = _keys.key_name("bipartite", *parts)
    return BipartiteGraph(
        partitions, placed, user_bounds, item_bounds, (n_users, n_items), client, name, edges
    )
