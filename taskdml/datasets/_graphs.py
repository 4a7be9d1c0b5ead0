"""Generated graphs with ground truth, as edge Datasets made chunk by chunk on the cluster.

A graph is an :class:`xarray.Dataset` of edges: ``src`` and ``dst`` (int64) and, when the graph
is weighted, ``weight`` (float64), all along dim ``"edge"`` and chunked identically; attrs
``shape = [n_src, n_dst]`` and ``directed``. Vertex data (the ground truth a generator planted)
comes as variables along ``"vertex"`` (bipartite graphs: ``"src_vertex"`` / ``"dst_vertex"``).

Every generator follows :mod:`taskdml.datasets._generators`: the parameters of the graph (a
handful of numbers, or one count per range of vertex pairs) are drawn once on the client, and
each edge chunk is made in its own task. Randomness comes in fixed internal units, each with its
own ``SeedSequence(seed, spawn_key=(kind, unit))``, and a chunk task generates the units it
covers, so the values depend on the seed only, never on ``chunk_edges`` or on the workers:

- **R-MAT** draws edges in blocks of ``_EDGE_BLOCK`` edges; a chunk generates the blocks
  overlapping its edge range and slices them. Every edge is kept (duplicates and self loops
  too, as Graph500's generator does), so the edge count is exactly ``edge_factor * 2**scale``
  and chunk sizes are known without looking at the data.
- **SBM** and **ratings** are Bernoulli graphs: each vertex pair is an edge independently with
  its probability. The pair space of each block pair (SBM) or the users × items grid (ratings)
  is cut into ranges holding about ``_RANGE_EDGES`` expected edges; the client draws each
  range's edge count (binomial), so every chunk's length is known, and the task draws that many
  distinct pairs of the range. No n × n matrix is ever made; chunks are whole ranges, so
  ``chunk_edges`` is a bound, not an exact size.
- The **kNN graph** of a feature table is computed blockwise: one task per (query chunk,
  reference chunk) keeps the nearest candidates, one task per query chunk merges them.

These internal sizes are part of the output's definition: changing one changes every value.
"""

import dataclasses
import math
import numbers

import dask.array as da
import numpy as np
import xarray as xr
from dask.highlevelgraph import HighLevelGraph

from taskdml._keys import key_name
from taskdml.datasets._common import _check_int, _check_real, _resolve_seed
from taskdml.exceptions import DataError

# Edges per internal random block of R-MAT. Part of the output's definition: never change it.
_EDGE_BLOCK = 1 << 16
# Expected edges per range of vertex pairs (SBM, ratings). Part of the output's definition.
_RANGE_EDGES = 1 << 16
# Rows per internal random block of vertex data (planted factors). Part of the definition.
_VERTEX_BLOCK = 4096
# Distance-matrix entries one kNN task holds at once (bounds its memory: 32 MiB of float64).
_KNN_ENTRIES = 1 << 22


def _model_rng(seed):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))


def _unit_rng(seed, kind, unit):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(kind, unit)))


def _pick(outputs, index):
    return outputs[index]


def _chunks_of(n, chunk):
    full, rest = divmod(n, chunk)
    return (chunk,) * full + ((rest,) if rest else ()) or (0,)


def _edge_dataset(prefix, token, tasks, edge_chunks, outputs, *, dependencies=()):
    """Edge variables whose chunk ``i`` comes from ``tasks[i]``, one task per chunk.

    Each task returns a tuple of 1-D arrays, one per ``(name, dtype)`` of *outputs*; a
    variable's chunk is an item of that tuple, so a chunk is generated once for all variables.
    """
    generate = key_name(prefix, token, phase="generate")
    graph = HighLevelGraph.from_collections(
        generate,
        {(generate, i): task for i, task in enumerate(tasks)},
        dependencies=list(dependencies),
    )
    layers, deps = dict(graph.layers), dict(graph.dependencies)
    names = []
    for j, (name, _) in enumerate(outputs):
        key = key_name(prefix, token, name)
        layers[key] = {(key, i): (_pick, (generate, i), j) for i in range(len(tasks))}
        deps[key] = {generate}
        names.append(key)
    graph = HighLevelGraph(layers, deps)
    return {
        name: (("edge",), da.Array(graph, key, (edge_chunks,), meta=np.empty((0,), dtype)))
        for key, (name, dtype) in zip(names, outputs)
    }


def _vertex_array(prefix, token, name, function, args, n, chunk, width=None, dtype=np.float64):
    """A vertex variable whose chunk of rows ``[start, stop)`` is ``function(*args, start,
    stop)``, made in its own task."""
    key = key_name(prefix, token, name)
    row_chunks = _chunks_of(n, chunk)
    bounds = np.cumsum((0,) + row_chunks).tolist()
    tail = (0,) if width is not None else ()
    layer = {
        (key, i, *tail): (function, *args, bounds[i], bounds[i + 1]) for i in range(len(row_chunks))
    }
    chunks = (row_chunks, (width,)) if width is not None else (row_chunks,)
    meta = np.empty((0, width) if width is not None else (0,), dtype)
    return da.Array(HighLevelGraph.from_collections(key, layer, []), key, chunks, meta=meta)


def _graph_dataset(variables, shape, directed, attrs=None):
    return xr.Dataset(
        variables,
        attrs={
            "shape": [int(shape[0]), int(shape[1])],
            "directed": bool(directed),
            **(attrs or {}),
        },
    )


# ---------------------------------------------------------------------------------------------
# R-MAT


@dataclasses.dataclass(frozen=True, eq=False)
class _RmatModel:
    seed: int
    scale: int
    n_edges: int
    a: float
    b: float
    c: float
    weighted: bool
    permutation: tuple  # ((multiplier, increment), ...) of the id bijection; () keeps ids


def _rmat_block(model, block):
    """Edges ``[block * _EDGE_BLOCK, ...)`` of an R-MAT graph: ``scale`` quadrant draws each."""
    start = block * _EDGE_BLOCK
    n = min(start + _EDGE_BLOCK, model.n_edges) - start
    rng = _unit_rng(model.seed, 1, block)
    draws = rng.random((model.scale, n))
    src = np.zeros(n, dtype=np.int64)
    dst = np.zeros(n, dtype=np.int64)
    ab, abc = model.a + model.b, model.a + model.b + model.c
    for level in range(model.scale):
        u = draws[level]
        src <<= 1
        dst <<= 1
        src |= u >= ab  # quadrants c and d: the lower half of the adjacency matrix
        dst |= ((u >= model.a) & (u < ab)) | (u >= abc)  # quadrants b and d: the right half
    weight = rng.random(n) if model.weighted else None
    if model.permutation:
        src, dst = _permuted(src, model), _permuted(dst, model)
    return src, dst, weight


def _permuted(ids, model):
    """A seeded bijection of ``[0, 2**scale)``: rounds of an odd multiply-add and an xorshift,
    each invertible modulo ``2**scale``; no table of ``2**scale`` entries is ever made."""
    mask = np.uint64((1 << model.scale) - 1)
    shift = np.uint64(max(1, (model.scale + 1) // 2))
    x = ids.astype(np.uint64)
    for multiplier, increment in model.permutation:
        x = (x * np.uint64(multiplier) + np.uint64(increment)) & mask
        x ^= x >> shift
    return x.astype(np.int64)


def _rmat_edges(model, start, stop):
    """Edges ``[start, stop)`` of an R-MAT graph: the task behind every edge chunk."""
    parts = []
    for block in range(start // _EDGE_BLOCK, max(start, stop - 1) // _EDGE_BLOCK + 1):
        block_start = block * _EDGE_BLOCK
        lo, hi = max(start, block_start) - block_start, min(stop, model.n_edges) - block_start
        parts.append([array[lo:hi] for array in _rmat_block(model, block) if array is not None])
    return tuple(np.concatenate(arrays) for arrays in zip(*parts))


def make_rmat(
    scale,
    edge_factor=16,
    *,
    a=0.57,
    b=0.19,
    c=0.19,
    directed=True,
    weighted=False,
    permute=True,
    chunk_edges=1_000_000,
    random_state=None,
):
    """Generate an R-MAT (Kronecker) power-law graph, chunk by chunk on the cluster.

    Each edge picks one quadrant of the adjacency matrix with probabilities ``a, b, c`` and
    ``d = 1 - a - b - c``, then a quadrant of that quadrant, ``scale`` times, which sets one bit
    of ``src`` (quadrants c, d) and of ``dst`` (quadrants b, d) per level (Chakrabarti et al.,
    2004). The defaults are Graph500's. Duplicate edges and self loops are **kept**, as
    Graph500's generator keeps them: the edge count is then exactly ``edge_factor *
    2**scale`` and the values do not depend on the chunking; drop them in the algorithm, or
    treat duplicates as a multigraph (scipy sums them into one weighted entry).

    Parameters
    ----------
    scale : int
        ``2**scale`` vertices (1 to 62).
    edge_factor : int, default=16
        Edges per vertex: ``edge_factor * 2**scale`` edges (Graph500's 16).
    a, b, c : float, default=0.57, 0.19, 0.19
        Quadrant probabilities (top-left, top-right, bottom-left); ``d = 1 - a - b - c`` must
        be >= 0.
    directed : bool, default=True
        Stored in ``attrs["directed"]``; an undirected graph stores each edge once.
    weighted : bool, default=False
        Add ``weight``, uniform in ``[0, 1)`` (Graph500's SSSP weights).
    permute : bool, default=True
        Relabel the vertices with a bijection of ``[0, 2**scale)`` drawn from the seed (as
        Graph500 does), so high degrees are not concentrated on low ids. The bijection is
        computed per id (rounds of odd multiply-add and xorshift on ``scale`` bits): no
        permutation table is made or shipped.
    chunk_edges : int, default=1_000_000
        Edges per chunk. The values do not depend on it.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    xarray.Dataset
        ``src``, ``dst`` (int64) and, if *weighted*, ``weight`` along ``"edge"``; attrs
        ``shape = [2**scale, 2**scale]``, ``directed``.

    Examples
    --------
    >>> from taskdml.datasets import make_rmat
    >>> edges = make_rmat(10, chunk_edges=5_000, random_state=0)
    >>> edges.sizes["edge"], edges.attrs["shape"], edges.src.chunks[0][:2]
    (16384, [1024, 1024], (5000, 5000))
    >>> bool((make_rmat(10, chunk_edges=777, random_state=0).dst == edges.dst).all())
    True
    """
    fn = "make_rmat"
    scale = _check_int(fn, "scale", scale, minimum=1)
    if scale > 62:
        raise DataError(f"{fn}: scale must be <= 62 (int64 vertex ids), got {scale}.")
    edge_factor = _check_int(fn, "edge_factor", edge_factor, minimum=1)
    a = _check_real(fn, "a", a, low=0.0, high=1.0)
    b = _check_real(fn, "b", b, low=0.0, high=1.0)
    c = _check_real(fn, "c", c, low=0.0, high=1.0)
    if a + b + c > 1.0 + 1e-12:
        raise DataError(
            f"{fn}: a + b + c must be <= 1 (d = 1 - a - b - c is the fourth quadrant's "
            f"probability), got {a} + {b} + {c} = {a + b + c}. Lower one of them."
        )
    chunk_edges = _check_int(fn, "chunk_edges", chunk_edges, minimum=1)
    seed = _resolve_seed(fn, random_state)
    permutation = ()
    if permute:
        keys = _model_rng(seed).integers(0, 1 << 62, size=(3, 2), dtype=np.int64)
        permutation = tuple((int(m) | 1, int(k)) for m, k in keys)
    n_edges = edge_factor << scale
    model = _RmatModel(seed, scale, n_edges, a, b, c, bool(weighted), permutation)
    edge_chunks = _chunks_of(n_edges, chunk_edges)
    bounds = np.cumsum((0,) + edge_chunks).tolist()
    tasks = [(_rmat_edges, model, bounds[i], bounds[i + 1]) for i in range(len(edge_chunks))]
    outputs = [("src", np.int64), ("dst", np.int64)] + ([("weight", np.float64)] * weighted)
    params = (seed, scale, edge_factor, a, b, c, bool(weighted), permute, chunk_edges)
    variables = _edge_dataset(fn, params, tasks, edge_chunks, outputs)
    return _graph_dataset(variables, (1 << scale, 1 << scale), directed)


# ---------------------------------------------------------------------------------------------
# Bernoulli graphs: ranges of vertex pairs, each with a binomial count drawn on the client


def _pair_ranges(n_pairs, probability):
    """``(lo, hi)`` bounds cutting ``[0, n_pairs)`` into ranges of about ``_RANGE_EDGES``
    expected edges."""
    if n_pairs <= 0 or probability <= 0:
        return np.empty((0, 2), dtype=np.int64)
    length = max(1, min(n_pairs, math.ceil(_RANGE_EDGES / probability)))
    lo = np.arange(0, n_pairs, length, dtype=np.int64)
    return np.stack([lo, np.minimum(lo + length, n_pairs)], axis=1)


def _grouped(counts, chunk_edges):
    """Consecutive ranges grouped into chunks of at most *chunk_edges* edges (a range with
    more stays alone): ``[(first, stop), ...]`` and the chunks' edge counts."""
    groups, sizes, first, total = [], [], 0, 0
    for r, count in enumerate(counts.tolist()):
        if total and total + count > chunk_edges:
            groups.append((first, r))
            sizes.append(total)
            first, total = r, 0
        total += count
    if len(counts):
        groups.append((first, len(counts)))
        sizes.append(total)
    return groups, tuple(sizes)


def _distinct_pairs(rng, lo, hi, count):
    """*count* distinct pair indices drawn uniformly from ``[lo, hi)``, sorted."""
    return lo + np.sort(rng.choice(hi - lo, size=count, replace=False, shuffle=False))


@dataclasses.dataclass(frozen=True, eq=False)
class _SbmModel:
    seed: int
    offsets: np.ndarray  # first vertex of each community, and n_vertices
    directed: bool


def _within_block(index, n, directed):
    """Ordered (directed) or unordered pairs ``u != v`` of ``[0, n)`` from a pair index."""
    if directed:
        u, r = np.divmod(index, n - 1)
        return u, r + (r >= u)
    # Each unordered pair once: u with (u + k) mod n for k = 1 .. (n - 1) // 2, and for an
    # even n also k = n / 2 for u < n / 2 (the circle method; integer arithmetic only).
    half = (n - 1) // 2
    rest = index >= n * half
    u = np.where(rest, index - n * half, index // max(half, 1))
    k = np.where(rest, n // 2, index % max(half, 1) + 1)
    v = (u + k) % n
    return np.minimum(u, v), np.maximum(u, v)


def _sbm_edges(model, ranges):
    """The edges of consecutive pair ranges of an SBM: the task behind every edge chunk.

    *ranges* rows: ``(range id, block i, block j, lo, hi, count)``.
    """
    sources, targets = [], []
    sizes = np.diff(model.offsets)
    for range_id, i, j, lo, hi, count in ranges.tolist():
        index = _distinct_pairs(_unit_rng(model.seed, 1, range_id), lo, hi, count)
        if i == j:
            u, v = _within_block(index, int(sizes[i]), model.directed)
        else:
            u, v = np.divmod(index, sizes[j])
        sources.append(u + model.offsets[i])
        targets.append(v + model.offsets[j])
    if not sources:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(sources).astype(np.int64), np.concatenate(targets).astype(np.int64)


def _communities(offsets, start, stop):
    return np.searchsorted(offsets, np.arange(start, stop), side="right").astype(np.int64) - 1


def make_sbm(
    sizes,
    p_in,
    p_out,
    *,
    directed=False,
    chunk_edges=1_000_000,
    chunk_vertices=1_000_000,
    random_state=None,
):
    """Generate a stochastic block model with its communities, chunk by chunk on the cluster.

    Vertices ``0 .. sum(sizes) - 1`` are cut into consecutive communities of the given sizes;
    each pair of distinct vertices is an edge independently, with probability *p_in* inside a
    community and *p_out* between two (no self loops, no duplicates). For each pair of
    communities the client draws binomial edge counts over ranges of the pairs, and each task
    draws that many distinct pairs of its ranges: no n × n matrix is made.

    Parameters
    ----------
    sizes : sequence of int
        Number of vertices of each community (each >= 1).
    p_in, p_out : float
        Edge probabilities inside and between communities, in ``[0, 1]``.
    directed : bool, default=False
        Directed: each ordered pair ``(u, v)`` is an edge with its probability. Undirected:
        each unordered pair once, stored with ``src < dst``.
    chunk_edges : int, default=1_000_000
        Largest number of edges per chunk (chunks hold whole ranges of about 65,536 expected
        edges). The values do not depend on it.
    chunk_vertices : int, default=1_000_000
        Vertices per chunk of ``community``.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    xarray.Dataset
        ``src``, ``dst`` (int64) along ``"edge"``, ``community`` (int64) along ``"vertex"``;
        attrs ``shape``, ``directed``, ``sizes``, ``p_in``, ``p_out``.

    Examples
    --------
    >>> from taskdml.datasets import make_sbm
    >>> graph = make_sbm([300, 200], p_in=0.1, p_out=0.01, random_state=0)
    >>> graph.attrs["shape"], graph.sizes["vertex"], int(graph.community.sum())
    ([500, 500], 500, 200)
    >>> bool((graph.src < graph.dst).all())
    True
    """
    fn = "make_sbm"
    if isinstance(sizes, numbers.Integral) or not hasattr(sizes, "__len__") or not len(sizes):
        raise DataError(
            f"{fn}: sizes must be a non-empty sequence of community sizes, got {sizes!r}. "
            "Pass e.g. sizes=[500, 500]."
        )
    sizes = [_check_int(fn, "sizes[]", size, minimum=1) for size in sizes]
    p_in = _check_real(fn, "p_in", p_in, low=0.0, high=1.0)
    p_out = _check_real(fn, "p_out", p_out, low=0.0, high=1.0)
    chunk_edges = _check_int(fn, "chunk_edges", chunk_edges, minimum=1)
    chunk_vertices = _check_int(fn, "chunk_vertices", chunk_vertices, minimum=1)
    seed = _resolve_seed(fn, random_state)
    offsets = np.cumsum([0] + sizes).astype(np.int64)
    n_vertices = int(offsets[-1])

    rows = []
    for i, n_i in enumerate(sizes):
        for j, n_j in enumerate(sizes):
            if i == j:
                n_pairs, p = n_i * (n_i - 1) // (1 if directed else 2), p_in
            elif directed or i < j:
                n_pairs, p = n_i * n_j, p_out
            else:
                continue
            for lo, hi in _pair_ranges(n_pairs, p).tolist():
                rows.append((i, j, lo, hi, p))
    table = np.array([r[:4] for r in rows], dtype=np.int64).reshape(-1, 4)
    probabilities = np.array([r[4] for r in rows], dtype=np.float64)
    counts = _model_rng(seed).binomial(table[:, 3] - table[:, 2], probabilities).astype(np.int64)
    ranges = np.column_stack([np.arange(len(table), dtype=np.int64), table, counts])

    model = _SbmModel(seed, offsets, bool(directed))
    groups, edge_chunks = _grouped(counts, chunk_edges)
    tasks = [(_sbm_edges, model, ranges[first:stop]) for first, stop in groups]
    if not tasks:
        tasks, edge_chunks = [(_sbm_edges, model, ranges[:0])], (0,)
    params = (seed, sizes, p_in, p_out, bool(directed), chunk_edges)
    variables = _edge_dataset(
        fn, params, tasks, edge_chunks, [("src", np.int64), ("dst", np.int64)]
    )
    community = _vertex_array(
        fn,
        (params, chunk_vertices),
        "community",
        _communities,
        (offsets,),
        n_vertices,
        chunk_vertices,
        dtype=np.int64,
    )
    variables["community"] = (("vertex",), community)
    attrs = {"sizes": sizes, "p_in": p_in, "p_out": p_out}
    return _graph_dataset(variables, (n_vertices, n_vertices), directed, attrs)


# ---------------------------------------------------------------------------------------------
# Ratings: a bipartite graph from a planted low-rank model


def _factor_rows(seed, kind, rank, start, stop):
    """Rows ``[start, stop)`` of a planted factor matrix (``kind`` 2: users, 3: items), made
    from fixed blocks of ``_VERTEX_BLOCK`` rows so they do not depend on the chunking.

    Entries are normal with variance ``rank ** -0.5``, so a user's and an item's dot product
    has variance 1 whatever the rank.
    """
    out = np.empty((stop - start, rank), dtype=np.float64)
    for block in range(start // _VERTEX_BLOCK, max(start, stop - 1) // _VERTEX_BLOCK + 1):
        block_start = block * _VERTEX_BLOCK
        rows = _unit_rng(seed, kind, block).normal(scale=rank**-0.25, size=(_VERTEX_BLOCK, rank))
        lo, hi = max(start, block_start), min(stop, block_start + _VERTEX_BLOCK)
        out[lo - start : hi - start] = rows[lo - block_start : hi - block_start]
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class _RatingsModel:
    seed: int
    n_items: int
    rank: int
    users_per_range: int
    noise: float


def _ratings_edges(model, ranges, *item_chunks):
    """The ratings of consecutive user ranges: the task behind every edge chunk.

    *ranges* rows: ``(range id, pairs, count)``; range ``r`` holds the users ``[r *
    users_per_range, ...)`` (fewer in the last one) and its pairs are ``user * n_items + item``.
    """
    items = np.concatenate(item_chunks) if item_chunks else np.empty((0, model.rank))
    users, rated, ratings = [], [], []
    for range_id, n_pairs, count in ranges.tolist():
        first = range_id * model.users_per_range
        user_factors = _factor_rows(
            model.seed, 2, model.rank, first, first + n_pairs // model.n_items
        )
        rng = _unit_rng(model.seed, 1, range_id)
        index = _distinct_pairs(rng, 0, n_pairs, count)
        user, item = np.divmod(index, model.n_items)
        rating = np.einsum("ij,ij->i", user_factors[user], items[item])
        if model.noise > 0:
            rating += rng.normal(scale=model.noise, size=count)
        users.append(user + first)
        rated.append(item)
        ratings.append(rating)
    if not users:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    return (
        np.concatenate(users).astype(np.int64),
        np.concatenate(rated).astype(np.int64),
        np.concatenate(ratings),
    )


def make_ratings(
    n_users,
    n_items,
    *,
    rank=10,
    density=0.01,
    noise=0.1,
    chunk_edges=1_000_000,
    chunk_vertices=100_000,
    random_state=None,
):
    """Generate a bipartite rating graph from a planted low-rank model, chunk by chunk.

    Users ``u`` and items ``i`` have planted factors ``U[u]`` and ``V[i]`` (``rank`` normal
    entries of variance ``rank ** -0.5``); each (user, item) pair is rated independently with
    probability *density*, and its rating is ``U[u] @ V[i] + noise * N(0, 1)`` (real values of
    variance about ``1 + noise**2``, not stars). ``src`` is the user, ``dst`` the item.

    To hold out ratings, split the edges with :func:`split_edges` (the user's own business:
    the planted factors stay on both sides).

    Parameters
    ----------
    n_users, n_items : int
        Vertices on the ``src`` and ``dst`` sides.
    rank : int, default=10
        Rank of the planted model.
    density : float, default=0.01
        Probability that a pair is rated, in ``(0, 1]``.
    noise : float, default=0.1
        Standard deviation of the Gaussian noise on each rating.
    chunk_edges : int, default=1_000_000
        Largest number of ratings per chunk (chunks hold whole ranges of users). The values do
        not depend on it.
    chunk_vertices : int, default=100_000
        Rows per chunk of the factor variables.
    random_state : int, RandomState, Generator or None
        Seed of everything. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    xarray.Dataset
        ``src``, ``dst`` (int64), ``weight`` (float64, the rating) along ``"edge"``;
        ``user_factors`` along ``("src_vertex", "component")`` and ``item_factors`` along
        ``("dst_vertex", "component")``; attrs ``shape = [n_users, n_items]``,
        ``directed=True``, ``rank``, ``density``, ``noise``.

    Examples
    --------
    >>> import numpy as np
    >>> from taskdml.datasets import make_ratings
    >>> graph = make_ratings(200, 50, rank=3, density=0.2, noise=0.0, random_state=0)
    >>> graph.attrs["shape"], graph.user_factors.shape
    ([200, 50], (200, 3))
    >>> U, V = graph.user_factors.values, graph.item_factors.values
    >>> bool(np.allclose((U[graph.src] * V[graph.dst]).sum(1), graph.weight))
    True
    """
    fn = "make_ratings"
    n_users = _check_int(fn, "n_users", n_users, minimum=1)
    n_items = _check_int(fn, "n_items", n_items, minimum=1)
    rank = _check_int(fn, "rank", rank, minimum=1)
    density = _check_real(fn, "density", density, low=0.0, high=1.0, low_open=True)
    noise = _check_real(fn, "noise", noise, low=0.0)
    chunk_edges = _check_int(fn, "chunk_edges", chunk_edges, minimum=1)
    chunk_vertices = _check_int(fn, "chunk_vertices", chunk_vertices, minimum=1)
    seed = _resolve_seed(fn, random_state)

    users_per_range = max(1, min(n_users, math.ceil(_RANGE_EDGES / (density * n_items))))
    first = np.arange(0, n_users, users_per_range, dtype=np.int64)
    n_pairs = (np.minimum(first + users_per_range, n_users) - first) * n_items
    counts = _model_rng(seed).binomial(n_pairs, density).astype(np.int64)
    ranges = np.column_stack([np.arange(len(first), dtype=np.int64), n_pairs, counts])
    model = _RatingsModel(seed, n_items, rank, users_per_range, noise)
    params = (seed, n_users, n_items, rank, density, noise)

    item_factors = _vertex_array(
        fn,
        (params, chunk_vertices),
        "items",
        _factor_rows,
        (seed, 3, rank),
        n_items,
        chunk_vertices,
        width=rank,
    )
    user_factors = _vertex_array(
        fn,
        (params, chunk_vertices),
        "users",
        _factor_rows,
        (seed, 2, rank),
        n_users,
        chunk_vertices,
        width=rank,
    )
    item_keys = [(item_factors.name, i, 0) for i in range(item_factors.numblocks[0])]
    groups, edge_chunks = _grouped(counts, chunk_edges)
    tasks = [(_ratings_edges, model, ranges[lo:hi], *item_keys) for lo, hi in groups]
    outputs = [("src", np.int64), ("dst", np.int64), ("weight", np.float64)]
    variables = _edge_dataset(
        fn, (params, chunk_edges), tasks, edge_chunks, outputs, dependencies=[item_factors]
    )
    variables["user_factors"] = (("src_vertex", "component"), user_factors)
    variables["item_factors"] = (("dst_vertex", "component"), item_factors)
    attrs = {"rank": rank, "density": density, "noise": noise}
    return _graph_dataset(variables, (n_users, n_items), True, attrs)


# ---------------------------------------------------------------------------------------------
# k-nearest-neighbour graph of a feature table


def _knn_candidates(queries, reference, query_start, reference_start, n_candidates):
    """The *n_candidates* nearest rows of *reference* to each query row: ``(distances,
    global indices)``, computed in slices of queries that bound the distance matrix.

    A query's own row is given the distance -1, so it is always among its candidates whatever
    the ties (duplicated rows) and sorts first; :func:`_knn_edges` turns it back into 0.
    """
    from sklearn.metrics.pairwise import euclidean_distances

    n_candidates = min(n_candidates, len(reference))
    distances = np.empty((len(queries), n_candidates))
    indices = np.empty((len(queries), n_candidates), dtype=np.int64)
    step = max(1, _KNN_ENTRIES // max(1, len(reference)))
    for lo in range(0, len(queries), step):
        block = euclidean_distances(queries[lo : lo + step], reference)
        rows = np.arange(query_start + lo, query_start + lo + len(block))
        own = rows - reference_start
        inside = (own >= 0) & (own < len(reference))
        block[np.flatnonzero(inside), own[inside]] = -1.0
        nearest = np.argpartition(block, n_candidates - 1, axis=1)[:, :n_candidates]
        distances[lo : lo + step] = np.take_along_axis(block, nearest, axis=1)
        indices[lo : lo + step] = nearest + reference_start
    return distances, indices


def _knn_edges(query_start, n_neighbors, include_self, weighted, *candidates):
    """Merge one query chunk's candidates from every reference chunk into its k edges.

    Candidates are ordered by distance, then index, the query's own row first (its distance
    is exactly 0); without *include_self* that row is dropped, as scikit-learn's
    ``kneighbors()`` drops it, so a sample is never its own neighbour.
    """
    distances = np.concatenate([c[0] for c in candidates], axis=1)
    indices = np.concatenate([c[1] for c in candidates], axis=1)
    order = np.lexsort((indices, distances), axis=1)
    first = 0 if include_self else 1
    distances = np.take_along_axis(distances, order, axis=1)[:, first : first + n_neighbors]
    indices = np.take_along_axis(indices, order, axis=1)[:, first : first + n_neighbors]
    np.maximum(distances, 0.0, out=distances)
    src = np.repeat(np.arange(query_start, query_start + len(indices)), n_neighbors)
    edges = (src.astype(np.int64), indices.ravel())
    return edges + (distances.ravel(),) if weighted else edges


def make_knn_graph(X, n_neighbors=5, *, mode="connectivity", include_self=False):
    """The k-nearest-neighbour graph of a feature table, computed blockwise on the cluster.

    Each sample is joined to its *n_neighbors* nearest samples (Euclidean distance), as
    :func:`sklearn.neighbors.kneighbors_graph` does: one task per pair of (query chunk,
    reference chunk) keeps the nearest candidates, and one task per query chunk merges them,
    so no task holds more than two chunks and a bounded block of distances. The graph is
    directed (``i`` to each of its neighbours); ties are broken by the lower index, and a
    sample is never its own neighbour unless *include_self* (then it is the first).

    Parameters
    ----------
    X : xarray.Dataset, xarray.DataArray, dask array or array-like
        The samples: taskdml's ``X`` (``("sample", "feature")``), chunked along samples.
    n_neighbors : int, default=5
        Neighbours per sample.
    mode : {"connectivity", "distance"}, default="connectivity"
        ``"distance"`` adds ``weight``, the distance to each neighbour.
    include_self : bool, default=False
        Count each sample as its own first neighbour (scikit-learn's ``include_self``).

    Returns
    -------
    xarray.Dataset
        ``src`` (the sample), ``dst`` (its neighbour), int64, and with ``mode="distance"``
        ``weight`` along ``"edge"``, ``n_neighbors`` edges per sample in sample order, on the
        sample chunks times ``n_neighbors``; attrs ``shape = [n_samples, n_samples]``,
        ``directed=True``, ``n_neighbors``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.neighbors import kneighbors_graph
    >>> from taskdml.datasets import make_blobs, make_knn_graph
    >>> data = make_blobs(300, chunk_size=100, random_state=0)
    >>> graph = make_knn_graph(data, n_neighbors=4)
    >>> graph.src.chunks
    ((400, 400, 400),)
    >>> A = kneighbors_graph(data.X.values, 4).tocoo()
    >>> bool((np.sort(A.row * 300 + A.col) == np.sort(graph.src * 300 + graph.dst)).all())
    True
    """
    from taskdml._data import as_dask, is_chunked

    fn = "make_knn_graph"
    if mode not in ("connectivity", "distance"):
        raise DataError(
            f"{fn}: mode must be 'connectivity' or 'distance', got {mode!r}. "
            "Pass mode='distance' to keep the distances as weights."
        )
    if not is_chunked(X):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise DataError(f"{fn}: X must be 2-D (samples, features), got shape {X.shape}.")
        X = da.from_array(X, chunks=(max(1, len(X)), X.shape[1]))
    X = as_dask(X)[0]
    if not isinstance(X, da.Array):
        raise DataError(
            f"{fn}: X must hold numeric features (an X variable or a dask array), got a table. "
            "Give the Dataset's X, or stack the columns into one."
        )
    X = X.astype(np.float64)
    n_samples = X.shape[0]
    n_neighbors = _check_int(fn, "n_neighbors", n_neighbors, minimum=1)
    most = n_samples if include_self else n_samples - 1
    if n_neighbors > most:
        raise DataError(
            f"{fn}: n_neighbors must be <= {most} for {n_samples} samples "
            f"(include_self={include_self}), got {n_neighbors}. Lower n_neighbors."
        )
    weighted = mode == "distance"
    n_candidates = n_neighbors + (0 if include_self else 1)
    row_chunks = X.chunks[0]
    bounds = np.cumsum((0,) + row_chunks).tolist()
    blocks = [(X.name, i, 0) for i in range(len(row_chunks))]
    token = (X.name, n_neighbors, mode, include_self)

    candidates = key_name(fn, token, phase="candidates")
    layer = {
        (candidates, q, r): (
            _knn_candidates,
            blocks[q],
            blocks[r],
            bounds[q],
            bounds[r],
            n_candidates,
        )
        for q in range(len(blocks))
        for r in range(len(blocks))
    }
    graph = HighLevelGraph.from_collections(candidates, layer, dependencies=[X])
    holder = da.Array(graph, candidates, ((1,) * len(blocks), (1,) * len(blocks)), dtype=object)
    tasks = [
        (
            _knn_edges,
            bounds[q],
            n_neighbors,
            include_self,
            weighted,
            *[(candidates, q, r) for r in range(len(blocks))],
        )
        for q in range(len(blocks))
    ]
    edge_chunks = tuple(n * n_neighbors for n in row_chunks)
    outputs = [("src", np.int64), ("dst", np.int64)] + [("weight", np.float64)] * weighted
    variables = _edge_dataset(fn, token, tasks, edge_chunks, outputs, dependencies=[holder])
    attrs = {"n_neighbors": n_neighbors}
    return _graph_dataset(variables, (n_samples, n_samples), True, attrs)


# ---------------------------------------------------------------------------------------------
# Held-out edges


def split_edges(edges, *, test_size=0.25, random_state=None):
    """Split a graph's edges into a train and a test graph, without moving any chunk.

    :func:`taskdml.datasets.train_test_split` applied along ``"edge"``: edge ``e`` goes to
    the test side when a counter-based hash of ``(seed, e)`` is among the ``n_test`` smallest,
    so the split is exact in size, deterministic for a seed and independent of the chunking.
    Every edge variable is split; vertex variables (ground truth, planted factors) and attrs
    are kept on both sides. Both sides keep every vertex (``attrs["shape"]``): a vertex whose
    edges all went to the test side is a cold-start vertex of the training graph.

    Parameters
    ----------
    edges : xarray.Dataset
        A graph with an ``"edge"`` dim (see the module docstring).
    test_size : float or int, default=0.25
        Fraction of edges in ``(0, 1)``, or number of edges, in the test graph.
    random_state : int, RandomState, Generator or None
        Seed of the split. ``None`` draws a fresh seed once, at call time.

    Returns
    -------
    train, test : xarray.Dataset

    Examples
    --------
    >>> from taskdml.datasets import make_ratings, split_edges
    >>> graph = make_ratings(300, 40, rank=2, density=0.25, random_state=0)
    >>> train, test = split_edges(graph, test_size=0.2, random_state=0)
    >>> test.sizes["edge"] == round(0.2 * graph.sizes["edge"] + 0.5 - 1e-9)
    True
    >>> train.user_factors.shape == graph.user_factors.shape
    True
    """
    from taskdml.datasets._split import train_test_split

    fn = "split_edges"
    if not isinstance(edges, xr.Dataset) or "edge" not in edges.dims:
        found = list(edges.dims) if isinstance(edges, xr.Dataset) else type(edges).__name__
        raise DataError(
            f"{fn}: edges must be an xarray.Dataset with an 'edge' dim (a graph from "
            f"taskdml.datasets.make_* or a reader), got {found!r}."
        )
    if "sample" in edges.dims:
        raise DataError(
            f"{fn}: edges must not have a 'sample' dim (it is used to split along 'edge'), "
            "found one. Drop or rename it first."
        )
    try:
        parts = train_test_split(
            edges.rename({"edge": "sample"}), test_size=test_size, random_state=random_state
        )
    except DataError as error:
        raise DataError(str(error).replace("train_test_split", fn).replace("row", "edge")) from None
    return tuple(part.rename({"sample": "edge"}) for part in parts)
