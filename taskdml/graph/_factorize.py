"""Matrix factorisation on a bipartite graph held on the workers: alternating least squares
and mini-batch SGD, in TUX2's MEGA shape.

:func:`als` runs one long-running task per partition of a
:class:`~taskdml.graph._bipartite.BipartiteGraph`, pinned where the partition lives (as
:mod:`taskdml.graph._supersteps` does), and each task runs every iteration itself, in
TUX2's MEGA shape with the whole of a partition's ratings as its mini-batch:

1. **Exchange** the user factors: each partition sends every other partition the rows of its
   users that partition mirrors (``user_sends``), worker to worker through the direct
   collective (:mod:`taskdml.parallel.collective._direct`), never through the client;
2. **Apply** the item half-step: a partition solves the normal equations of its own items
   from the user factors it mirrors (the ``by_item`` view of its ratings);
3. **Exchange** the new item factors likewise (``item_sends``), and **apply** the user
   half-step on the ``by_user`` view;
4. **GlobalSync**: the training squared error and the number of ratings, all-reduced, give
   every partition the iteration's training RMSE (recorded in the history; rank 0 publishes
   it as a ``superstep`` event).

The formulation is Spark MLlib's explicit-feedback ALS: each vertex solves
``(F_r^T F_r + lambda_v I) x = F_r^T r`` over the factors ``F_r`` of the vertices it has
ratings with, where ``lambda_v = reg * n_ratings(v)`` (``weighted_reg=True``: MLlib's
"ALS-WR" scaling) or ``reg`` (``weighted_reg=False``); items are solved first, from the
user factors, as MLlib does. A vertex without ratings gets a zero factor (MLlib leaves it out
of the model; a prediction for it is then 0). The initial user factors are drawn as MLlib
draws them (normal rows scaled to unit norm), from blocks of 1,024 rows seeded by
``(seed, block)``: they do not depend on the partitioning.

:func:`sgd_factorize` keeps the same layout with real mini-batches: each partition updates
its own users and its copies of the item vectors they rated, and :func:`push_pull` (the
exchange both it and :mod:`taskdml.graph._logistic` use) sends the touched item rows to
their owners, which combine them (here: average the copies) and send the new values back to
every partition that mirrors them.

**Checkpoints and lost workers** (on a cluster), as the vertex programs have them
(:mod:`taskdml.graph._supersteps`, whose :class:`~taskdml.graph._supersteps.Segments` loop
:func:`run_bipartite` runs): with ``checkpoint_every=N`` (``"auto"``: every
:data:`~taskdml.graph._supersteps.CHECKPOINT_EVERY` inside a pipeline step, none outside)
the run goes in segments of ``N`` iterations, each segment's tasks starting from the last
one's state on the same workers (the user factors for ALS, the users' and the owned items'
factors for SGD: after an epoch's last GlobalSync every mirror equals its owner's). Between
segments the client takes a copy as the checkpoint, written in a step through
:func:`taskdml.cache._checkpoints.claim` under a token of the algorithm, its parameters and
the user and item ranges; a run of the same finds it and goes on from there
(``resumed_from``). A lost worker makes the run cut the graph again on the workers left
(:meth:`~taskdml.graph._bipartite.BipartiteGraph.repartitioned`) and go on from the last
checkpoint. Every random stream is seeded by (seed, block) or (seed, epoch, partition), never
by where a segment starts, so the factors equal an uninterrupted run's exactly.

The factors stay on the workers, one future per partition, and are returned as dask
arrays chunked by partition. Imports: numpy in the task functions; dask, xarray,
distributed and scikit-learn's ``check_random_state`` inside the functions that run on the
client; :mod:`taskdml.graph._supersteps`, whose ``pinned_tasks``, ``in_threads``,
``as_partition`` and ``Segments`` run every graph algorithm's partitions, on workers or in
threads.
"""

import dataclasses
import functools
import operator
import time

import numpy as np

from taskdml import _events
from taskdml.graph._bipartite import BipartiteGraph, partition_bipartite
from taskdml.graph._supersteps import (
    Segments,
    as_partition,
    check_every,
    in_threads,
    pinned_tasks,
)

_INIT_BLOCK = 1024
RMSE = ["rmse", "training RMSE"]
"""The ``measure`` of a factorisation's ``superstep`` events: the field and its name."""
_SOLVE_CHUNK = 1 << 13
"""Ratings per chunk of :func:`solve_side`'s products (whole rows; cache-sized)."""


# -- the task functions ---------------------------------------------------------------------


def initial_factors(seed, start, stop, rank):
    """MLlib's initial factors of the vertices ``[start, stop)``: normal rows scaled to unit
    norm, drawn per block of 1,024 vertices (the same rows whatever the partitioning)."""
    rows = []
    for block in range(start // _INIT_BLOCK, -(-stop // _INIT_BLOCK)):
        drawn = np.random.default_rng([seed, block]).standard_normal((_INIT_BLOCK, rank))
        lo, hi = block * _INIT_BLOCK, (block + 1) * _INIT_BLOCK
        rows.append(drawn[max(start, lo) - lo : min(stop, hi) - lo])
    factors = np.concatenate(rows) if rows else np.zeros((0, rank))
    return factors / np.linalg.norm(factors, axis=1, keepdims=True)


def solve_side(side, mirrored, reg, weighted_reg, with_error=False):
    """The least-squares factors of *side*'s rows (a :class:`SideCSR`) given the factors of
    the vertices it mirrors, in its column order; rows without ratings get zeros.

    The rows' normal equations are built together, about :data:`_SOLVE_CHUNK` ratings (whole
    rows) at a time: per rating, the ``rank * (rank + 1) / 2`` products of the upper triangle
    of ``f f^T`` and the ``rank`` entries of ``r f``, laid out one product per row so that
    ``numpy.add.reduceat`` sums each vertex's contiguous ratings; then one batched
    ``numpy.linalg.solve`` over the stacked ``rank x rank`` systems. The memory is that of a
    chunk times the rank squared, never ratings times rank squared.

    With *with_error*, also the summed squared error of the rows' ratings for the new
    factors, from the same sums: ``sum r^2 - x . b - lambda |x|^2`` per row, since
    ``(G + lambda I) x = b`` (:func:`squared_error` computes it rating by rating)."""
    rank = mirrored.shape[1]
    counts = side.counts
    upper_a, upper_b = np.triu_indices(rank)
    n_upper = len(upper_a)
    rated = np.flatnonzero(counts > 0)
    starts = side.indptr[rated]
    sums = np.empty((n_upper + rank + 1, len(rated)))
    by_component = np.ascontiguousarray(mirrored.T)
    first = 0
    while first < len(rated):
        last = max(first + 1, int(np.searchsorted(starts, starts[first] + _SOLVE_CHUNK)))
        lo, hi = int(starts[first]), int(side.indptr[rated[last - 1] + 1])
        F = np.take(by_component, side.columns[lo:hi], axis=1)
        products = np.empty((n_upper + rank + 1, hi - lo))
        at = 0
        for a in range(rank):
            np.multiply(F[a], F[a:], out=products[at : at + rank - a])
            at += rank - a
        np.multiply(F, side.values[lo:hi], out=products[n_upper:-1])
        np.square(side.values[lo:hi], out=products[-1])
        np.add.reduceat(products, starts[first:last] - lo, axis=1, out=sums[:, first:last])
        first = last
    gram = np.empty((len(rated), rank, rank))
    gram[:, upper_a, upper_b] = gram[:, upper_b, upper_a] = sums[:n_upper].T
    lam = reg * (counts[rated] if weighted_reg else np.ones(len(rated)))
    gram[:, np.arange(rank), np.arange(rank)] += lam[:, None]
    out = np.zeros((side.n_rows, rank))
    if len(rated):
        out[rated] = np.linalg.solve(gram, sums[n_upper:-1].T[:, :, None])[:, :, 0]
    if not with_error:
        return out
    x = out[rated]
    error = (
        sums[-1].sum() - np.einsum("ij,ji->", x, sums[n_upper:-1]) - (lam * (x * x).sum(1)).sum()
    )
    return out, float(error)


def squared_error(side, own, mirrored):
    """The summed squared error of *side*'s ratings for its rows' factors *own*."""
    rows = np.repeat(np.arange(side.n_rows), side.counts)
    predicted = np.einsum("ij,ij->i", own[rows], mirrored[side.columns])
    return float(((side.values - predicted) ** 2).sum())


def _exchange(collective, part, rank, factors, sends, mirrors, tag):
    """The mirrored factors of *part* (its columns' order): send each partition the rows it
    mirrors of *factors* (its own), take its own rows locally, receive the others."""
    for peer, indices in sends.items():
        if peer != rank:
            collective.send(peer, tag, factors[indices])
    blocks = []
    for owner in sorted(mirrors):
        blocks.append(factors[sends[rank]] if owner == rank else collective.receive(owner, tag))
    width = factors.shape[1]
    return np.concatenate(blocks) if blocks else np.zeros((0, width))


def als_iterations(part, init, spec, collective, rank, tags, first=0, stop=None, start=None):
    """ALS iterations ``first .. stop - 1`` (all by default) of partition *part*, from its
    initial user factors (*init*, see :func:`_initial`) or, going on from an earlier segment,
    from *start*'s user factors (``start[0]``); returns ``(user factors, item factors,
    history)``."""
    users = _initial(part, init, spec) if start is None else start[0]
    history = []
    items = np.zeros((part.by_item.n_rows, users.shape[1]))
    for iteration in range(first, spec.n_iter if stop is None else stop):
        began = time.perf_counter()
        mirrored = _exchange(
            collective, part, rank, users, part.user_sends, part.user_mirrors, ("users", iteration)
        )
        waited = time.perf_counter() - began
        items = solve_side(part.by_item, mirrored, spec.reg, spec.weighted_reg)
        at = time.perf_counter()
        mirrored = _exchange(
            collective, part, rank, items, part.item_sends, part.item_mirrors, ("items", iteration)
        )
        waited += time.perf_counter() - at
        users, error = solve_side(part.by_user, mirrored, spec.reg, spec.weighted_reg, True)
        at = time.perf_counter()
        totals = collective.allreduce_sum(
            ("rmse", iteration), rank, [error, len(part.by_user.values)]
        )
        done = time.perf_counter()
        entry = {
            "superstep": iteration,
            "rmse": float(np.sqrt(totals[0] / max(totals[1], 1.0))),
            "seconds": done - began,
            "exchange_s": waited + (done - at),
        }
        history.append(entry)
        if rank == 0 and tags is not None:
            _events.publish_from(tags, "superstep", **entry, measure=RMSE)
    return users, items, history


def bipartite_task(iterate, part, block, spec, collective, rank, tags, first, stop, start):
    """One partition's task: ``iterate``'s iterations ``first .. stop - 1`` (one segment of
    :func:`run_bipartite`) between the collective's join and leave."""
    return as_partition(
        collective, rank, iterate, part, block, spec, collective, rank, tags, first, stop, start
    )


def _initial(part, init, spec):
    start, stop = part.bounds("user")
    if init is None:
        return initial_factors(spec.seed, start, stop, spec.rank)
    return np.asarray(init, dtype=float).reshape(stop - start, spec.rank)


@dataclasses.dataclass(frozen=True)
class _Spec:
    rank: int
    reg: float
    n_iter: int
    weighted_reg: bool
    seed: int


# -- the run: segments between checkpoints on a cluster, threads here ---------------------


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A bipartite algorithm as :func:`run_bipartite` runs it.

    Attributes
    ----------
    name : str
        Names it in its checkpoints' token and its tasks' keys (alphabetic).
    iterate : callable
        ``iterate(part, block, spec, collective, rank, tags, first, stop, start)``: one
        partition's iterations ``first .. stop - 1``, from *block* (``start is None``) or
        from an earlier segment's outcome or checkpointed state *start*; returns an outcome
        tuple whose last item is the history.
    kept : tuple of int
        The positions of an outcome a checkpoint holds (the others are ``None`` in it): all
        that *iterate* reads of *start*.
    n_iter : str
        The field of the spec that holds the number of iterations.
    """

    name: str
    iterate: object
    kept: tuple
    n_iter: str = "n_iter"


@dataclasses.dataclass
class BipartiteRun:
    """What :func:`run_bipartite` returns: per partition its last outcome (futures on a
    cluster), rank 0's history, the graph the last segment ran on, where the run went on
    from a checkpoint (``resumed_from``, ``None`` from the start) and its lost workers
    (``restarts``), as :class:`~taskdml.graph._supersteps.SuperstepResult` says them."""

    outcomes: list
    history: list
    graph: object
    resumed_from: int = None
    restarts: list = dataclasses.field(default_factory=list)


def run_bipartite(graph, algorithm, spec, blocks, timeout, checkpoint_every="auto"):
    """Run *algorithm* on every partition of *graph*: on a cluster one pinned task per
    partition and segment (:class:`~taskdml.graph._supersteps.Segments`: checkpoints every
    *checkpoint_every* iterations, resumed in a pipeline step, going on after lost
    workers); without a client, a thread per partition here (no checkpoints)."""
    check_every(checkpoint_every)
    if graph.client is None:

        def run(rank, part, block, peer):
            return algorithm.iterate(part, block, spec, peer, rank, None, 0, None, None)

        outcomes = in_threads(graph, blocks, timeout, run)
        return BipartiteRun(outcomes, outcomes[0][-1], graph)
    segments = _Segments(graph, algorithm, spec, blocks, timeout, checkpoint_every)
    outcomes, history, _, graph, restarts = segments.run()
    return BipartiteRun(outcomes, history, graph, segments.resumed_from, restarts)


def _summary(outcome):
    """A segment's ``(history, converged)``: the bipartite algorithms run all their
    iterations."""
    return outcome[-1], False


def _kept(outcome, positions):
    """The items of *outcome* at *positions*, ``None`` elsewhere (a checkpoint's state,
    read by ``iterate`` as it reads an outcome)."""
    return tuple(outcome[i] if i in positions else None for i in range(max(positions) + 1))


class _Segments(Segments):
    """:func:`run_bipartite` on a cluster: the tasks of each segment, its token."""

    summary = staticmethod(_summary)

    def __init__(self, graph, algorithm, spec, blocks, timeout, every):
        from dask.base import tokenize

        self.algorithm, self.spec, self.blocks, self.timeout = algorithm, spec, blocks, timeout
        self.state = functools.partial(_kept, positions=algorithm.kept)
        # the step's cache key names the graph, the data and init; a checkpoint also says
        # which algorithm, parameters and vertex ranges it holds the state of
        token = tokenize(
            algorithm.name,
            dataclasses.asdict(spec),
            np.asarray(graph.user_bounds).tolist(),
            np.asarray(graph.item_bounds).tolist(),
        )
        super().__init__(graph, getattr(spec, algorithm.n_iter), every, token)

    def submit(self, graph, first, stop, start):
        def arguments(rank, collective, tags):
            begin = None if start is None else start[rank]
            return (self.algorithm.iterate, graph.partitions[rank], self.blocks[rank], self.spec,
                    collective, rank, tags, first, stop, begin)  # fmt: skip

        name = self.algorithm.name
        return pinned_tasks(graph, bipartite_task, arguments, self.timeout, self.spec, name)


# -- the model ------------------------------------------------------------------------------


@dataclasses.dataclass
class FactorizationModel:
    """The factors :func:`als` found, left on the workers.

    Attributes
    ----------
    user_factors : xarray.Dataset
        ``factors`` along ``("src_vertex", "component")``, a dask array chunked by partition.
    item_factors : xarray.Dataset
        ``factors`` along ``("dst_vertex", "component")``.
    history : list of dict
        Per iteration: ``superstep``, ``rmse`` (training), ``seconds``, ``exchange_s``
        (ALS).
    graph : BipartiteGraph or None
        The partitions the last iterations ran on (cut again after a lost worker); ``None``
        for a model a pipeline step read back from its cache.
    resumed_from : int or None
        The iteration a run found checkpointed and started from (``None``: from the start).
    restarts : list of dict
        Per worker loss: ``superstep`` (the iteration the run went on from) and
        ``workers`` (those that left).

    A pipeline step's cache writes the factors where they are, as Zarr, and reads them back
    lazily (:mod:`taskdml._parts`): the model is never gathered whole.
    """

    user_factors: object
    item_factors: object
    history: list
    graph: object
    resumed_from: int = None
    restarts: list = dataclasses.field(default_factory=list)

    @property
    def n_iter_(self):
        """The number of iterations run."""
        return len(self.history)

    def predict(self, users, items):
        """The predicted ratings ``U[users] . V[items]``.

        Parameters
        ----------
        users, items : array-like of int, or dask arrays chunked alike
            Dask arrays are predicted where they are (a dask array comes back); arrays in
            memory pull the factors here (a numpy array comes back).

        Returns
        -------
        numpy.ndarray or dask.array.Array
        """
        import dask
        import dask.array as da

        U, V = self.user_factors.factors.data, self.item_factors.factors.data
        if not isinstance(users, da.Array) and not isinstance(items, da.Array):
            U, V = self._compute(U, V)
            return predict_block(np.asarray(users), np.asarray(items), U, V)
        users, items = da.asarray(users), da.asarray(items)
        (u_one,), (v_one,) = (
            x.rechunk((x.shape[0], x.shape[1])).to_delayed().ravel() for x in (U, V)
        )
        task = dask.delayed(predict_block, pure=True)
        blocks = [
            da.from_delayed(task(u, i, u_one, v_one), shape=(n,), dtype=float)
            for u, i, n in zip(
                users.to_delayed().ravel(), items.to_delayed().ravel(), users.chunks[0]
            )
        ]
        return da.concatenate(blocks)

    def rmse(self, edges):
        """The RMSE of the predicted ratings of *edges* (a ratings Dataset: ``src``, ``dst``,
        ``weight``), computed where the edges are.

        Returns
        -------
        float
        """
        predicted = self.predict(edges.src.data, edges.dst.data)
        error = ((predicted - edges.weight.data) ** 2).mean()
        return float(np.sqrt(self._compute(error)[0]))

    def _compute(self, *arrays):
        import dask

        client = getattr(self.graph, "client", None)
        if client is not None:
            return tuple(client.compute(list(arrays), sync=True))
        # threads of this process, or (read from a cache, no graph) the current scheduler
        return dask.compute(*arrays, scheduler="sync" if self.graph is not None else None)

    def __taskdml_parts__(self):
        """``(shell, [user_factors, item_factors])``: the factors are parts on the workers
        (:mod:`taskdml._parts`), the shell keeps the history."""
        shell = dataclasses.replace(self, user_factors=None, item_factors=None, graph=None)
        return shell, [self.user_factors, self.item_factors]

    def __taskdml_with_parts__(self, parts):
        user_factors, item_factors = parts
        return dataclasses.replace(self, user_factors=user_factors, item_factors=item_factors)


def predict_block(users, items, U, V):
    """``U[users] . V[items]``, row by row."""
    users, items = np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64)
    return np.einsum("ij,ij->i", U[users], V[items])


def als(
    ratings,
    rank=10,
    reg=0.1,
    n_iter=10,
    *,
    weighted_reg=True,
    init=None,
    random_state=None,
    n_partitions=None,
    timeout=600.0,
    client=None,
    checkpoint_every="auto",
):
    """Alternating least squares on a bipartite rating graph, on the workers.

    Parameters
    ----------
    ratings : xarray.Dataset or BipartiteGraph
        ``src`` (users), ``dst`` (items) and ``weight`` (ratings) along ``edge``, attr
        ``shape = [n_users, n_items]`` (:func:`taskdml.datasets.make_ratings`), or a graph
        :func:`~taskdml.graph.partition_bipartite` already cut.
    rank : int, default=10
        The number of latent factors.
    reg : float, default=0.1
        The regularisation ``lambda`` (Spark MLlib's ``regParam``).
    n_iter : int, default=10
        Iterations (each an item then a user half-step; MLlib's ``maxIter``).
    weighted_reg : bool, default=True
        ``True``: each vertex's ``lambda`` is ``reg`` times its number of ratings, as MLlib
        does; ``False``: plain ``reg``.
    init : array-like of shape (n_users, rank), optional
        The initial user factors (default: MLlib's unit-norm normal rows, from
        *random_state*).
    random_state : int, RandomState or None
        Seed of the initial factors (an int is used as it is; otherwise one is drawn from
        it).
    n_partitions : int, optional
        Partitions to cut *ratings* into (default: one per worker).
    timeout : float, default=600
        Seconds a partition waits for another's factors before it raises.
    client : distributed.Client or False, optional
        Default: the current one; without one, the partitions run in threads here.
    checkpoint_every : int, "auto" or None, default="auto"
        Iterations between checkpoints, as :func:`~taskdml.graph.run_supersteps` takes
        them: on a cluster the run goes in segments of that many iterations, each
        segment's tasks starting from the last one's factors where they are; a lost worker
        makes the run go on from the last checkpoint on the workers left, and inside a
        pipeline step they are written to the store, so that ``taskdml resume`` goes on
        from there (``resumed_from``). ``"auto"``:
        :data:`~taskdml.graph._supersteps.CHECKPOINT_EVERY` inside a pipeline step, none
        outside. The factors do not depend on it. A run without an int *random_state*
        draws its seed anew, so it goes on from no checkpoint.

    Returns
    -------
    FactorizationModel

    Examples
    --------
    >>> from taskdml.datasets import make_ratings
    >>> graph = make_ratings(60, 40, rank=2, density=0.5, noise=0.0, random_state=0)
    >>> model = als(graph, rank=2, reg=1e-3, n_iter=20, random_state=0, client=False)
    >>> model.history[-1]["rmse"] < 0.05
    True
    >>> model.user_factors.factors.shape
    (60, 2)
    """
    if int(rank) < 1 or int(n_iter) < 1 or not float(reg) >= 0:
        raise ValueError(
            f"als needs rank >= 1, n_iter >= 1 and reg >= 0; got rank={rank!r}, "
            f"n_iter={n_iter!r}, reg={reg!r}."
        )
    graph = ratings
    if not isinstance(graph, BipartiteGraph):
        graph = partition_bipartite(ratings, n_partitions, client=client)
    n_users = graph.shape[0]
    spec = _Spec(int(rank), float(reg), int(n_iter), bool(weighted_reg), _seed(random_state))
    blocks = [None] * graph.n_partitions
    if init is not None:
        init = np.asarray(init, dtype=float)
        if init.shape != (n_users, spec.rank):
            raise ValueError(
                f"init must have shape (n_users, rank) = {(n_users, spec.rank)}; got {init.shape}."
            )
        bounds = graph.user_bounds
        blocks = [init[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return _model(run_bipartite(graph, ALS, spec, blocks, timeout, checkpoint_every), spec)


ALS = Algorithm("als", als_iterations, kept=(0,))
"""ALS goes on from the user factors (the items are solved from them first)."""


def _model(ran, spec):
    """The :class:`FactorizationModel` of a run whose outcomes are ``(users, items,
    history)``."""
    return FactorizationModel(
        _factors(ran.graph, ran.outcomes, 0, "src_vertex", spec.rank),
        _factors(ran.graph, ran.outcomes, 1, "dst_vertex", spec.rank),
        ran.history,
        ran.graph,
        ran.resumed_from,
        ran.restarts,
    )


def _factors(graph, outcomes, which, dim, rank):
    """The factors of one side as an xarray Dataset, a dask array chunked by partition,
    computed where the partitions are."""
    import dask
    import dask.array as da
    import xarray as xr

    sizes = graph.sizes("user" if which == 0 else "item")
    if graph.client is None:
        array = da.concatenate([da.from_array(outcome[which]) for outcome in outcomes])
    else:
        pick = dask.delayed(operator.itemgetter(which), pure=True)
        array = da.concatenate(
            [
                da.from_delayed(pick(outcome), shape=(size, rank), dtype=float)
                for outcome, size in zip(outcomes, sizes)
            ]
        )
    return xr.Dataset({"factors": ((dim, "component"), array)})


# -- SGD in the MEGA shape ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _SGDSpec:
    rank: int
    reg: float
    learning_rate: float
    n_epochs: int
    n_batches: int
    sync_every: int
    seed: int


def _sgd_initial(part, init, spec):
    (u0, u1), (i0, i1) = part.bounds("user"), part.bounds("item")
    if init is None:
        users = initial_factors(spec.seed, u0, u1, spec.rank)
        return users, initial_factors(spec.seed + 1, i0, i1, spec.rank)
    users, items = init
    users = np.asarray(users, dtype=float).reshape(u1 - u0, spec.rank)
    return users, np.asarray(items, dtype=float).reshape(i1 - i0, spec.rank)


def push_pull(collective, part, rank, masters, mirrored, payload, touched, tag, combine):
    """The MEGA exchange of the item side: every partition sends each owner the rows of
    *payload* (aligned with its mirrored items) it *touched*; each owner gives what it got,
    summed per item with their count, to ``combine(masters, total, count)``, which updates
    its *masters* in place and returns which changed; the changed values go back to every
    partition that mirrors them, into *mirrored* (in place). Clears *touched*."""
    offsets, at = {}, 0
    for owner in sorted(part.item_mirrors):
        offsets[owner], at = at, at + len(part.item_mirrors[owner])

    def touched_of(owner):
        block = slice(offsets[owner], offsets[owner] + len(part.item_mirrors[owner]))
        rows = np.flatnonzero(touched[block])
        local = part.item_mirrors[owner][rows] - int(part.item_bounds[owner])
        return local, payload[block][rows]

    for owner in part.item_mirrors:
        if owner != rank:
            collective.send(owner, ("up", tag), touched_of(owner))
    total = np.zeros((len(masters), *payload.shape[1:]))
    count = np.zeros(len(masters))
    for sender in sorted(part.item_sends):
        local, values = (
            touched_of(rank) if sender == rank else collective.receive(sender, ("up", tag))
        )
        np.add.at(total, local, values)
        np.add.at(count, local, 1.0)
    changed = combine(masters, total, count)
    for peer, indices in part.item_sends.items():
        positions = np.flatnonzero(changed[indices])
        if peer != rank:
            collective.send(peer, ("down", tag), (positions, masters[indices[positions]]))
    for owner in sorted(part.item_mirrors):
        if owner == rank:
            indices = part.item_sends[rank]
            positions = np.flatnonzero(changed[indices])
            values = masters[indices[positions]]
        else:
            positions, values = collective.receive(owner, ("down", tag))
        mirrored[offsets[owner] + positions] = values
    touched[:] = False


def _average(masters, total, count):
    """GlobalSync's rule: an item's new vector is the mean of the copies touched since the
    last sync."""
    changed = count > 0
    masters[changed] = total[changed] / count[changed, None]
    return changed


def sgd_epochs(part, init, spec, collective, rank, tags, first=0, stop=None, start=None):
    """Epochs ``first .. stop - 1`` (all by default) of one partition: mini-batches of its
    users' ratings, GlobalSync of the touched item vectors every ``sync_every`` mini-batches
    and at the end of each epoch; from *init* (see :func:`_sgd_initial`) or an earlier
    segment's *start* (its user factors and its items' factors, copied); returns ``(user
    factors, item factors, history)``."""
    if start is None:
        users, masters = _sgd_initial(part, init, spec)
    else:
        users, masters = start[0].copy(), start[1].copy()
    side = part.by_user
    mirrored = _exchange(
        collective, part, rank, masters, part.item_sends, part.item_mirrors, ("items", -1)
    )
    rows = np.repeat(np.arange(side.n_rows), side.counts)
    touched = np.zeros(len(mirrored), dtype=bool)
    history, syncs, lr, reg = [], 0, spec.learning_rate, spec.reg
    for epoch in range(first, spec.n_epochs if stop is None else stop):
        began = time.perf_counter()
        order = np.random.default_rng([spec.seed, epoch, rank]).permutation(len(rows))
        for step, batch in enumerate(np.array_split(order, spec.n_batches)):
            u, c, r = rows[batch], side.columns[batch], side.values[batch]
            Uu, Vc = users[u], mirrored[c]
            error = np.einsum("ij,ij->i", Uu, Vc) - r
            np.add.at(users, u, -lr * (error[:, None] * Vc + reg * Uu))
            np.add.at(mirrored, c, -lr * (error[:, None] * Uu + reg * Vc))
            touched[c] = True
            last = step == spec.n_batches - 1
            if last or (step + 1) % spec.sync_every == 0:
                push_pull(
                    collective, part, rank, masters, mirrored, mirrored, touched, syncs, _average
                )
                syncs += 1
        error = squared_error(side, users, mirrored)
        totals = collective.allreduce_sum(("sgd", epoch), rank, [error, len(side.values)])
        entry = {
            "superstep": epoch,
            "rmse": float(np.sqrt(totals[0] / max(totals[1], 1.0))),
            "seconds": time.perf_counter() - began,
        }
        history.append(entry)
        if rank == 0 and tags is not None:
            _events.publish_from(tags, "superstep", **entry, measure=RMSE)
    return users, masters, history


def sgd_factorize(
    ratings,
    rank=10,
    reg=0.01,
    learning_rate=0.05,
    n_epochs=20,
    *,
    n_batches=10,
    sync_every=1,
    init=None,
    random_state=None,
    n_partitions=None,
    timeout=600.0,
    client=None,
    checkpoint_every="auto",
):
    """Matrix factorisation by mini-batch SGD on the workers, in TUX2's MEGA shape.

    Each partition owns its users (no one else updates them) and keeps a copy of the item
    vectors its users rated. Every epoch it shuffles its ratings
    (``numpy.random.default_rng([seed, epoch, partition])`` permutes them, taken in (user,
    item) order) and cuts them into *n_batches* **mini-batches**; on each it takes one
    gradient step of ``(U_u . V_i - r)^2 + reg (|U_u|^2 + |V_i|^2)`` per rating, all from the
    values before the step (summed where a vertex occurs twice). Every *sync_every*
    mini-batches and at the end of each epoch, a **GlobalSync**: it **exchanges** the item
    vectors it touched with their owners, worker to worker; each owner averages the copies
    it received of each item and sends the new vector back to every partition that mirrors
    it (**apply**). The training RMSE is all-reduced after each epoch. On one partition this
    is plain mini-batch SGD.

    Parameters
    ----------
    ratings : xarray.Dataset or BipartiteGraph
        As :func:`als`.
    rank : int, default=10
    reg : float, default=0.01
        The L2 penalty on each rating's two vectors.
    learning_rate : float, default=0.05
    n_epochs : int, default=20
    n_batches : int, default=10
        Mini-batches per epoch and partition (all partitions take as many).
    sync_every : int, default=1
        Mini-batches between two GlobalSyncs.
    init : tuple of two arrays, optional
        The initial ``(user factors, item factors)``, of shapes ``(n_users, rank)`` and
        ``(n_items, rank)`` (default: unit-norm normal rows, as :func:`als`).
    random_state : int, optional
        The seed of the shuffles and the initial factors (an int is used as it is).
    n_partitions, timeout, client, checkpoint_every
        As :func:`als` (an epoch is an iteration).

    Returns
    -------
    FactorizationModel

    Examples
    --------
    >>> from taskdml.datasets import make_ratings
    >>> graph = make_ratings(60, 40, rank=2, density=0.5, noise=0.0, random_state=0)
    >>> model = sgd_factorize(graph, rank=2, n_epochs=30, random_state=0, client=False)
    >>> model.history[-1]["rmse"] < model.history[0]["rmse"]
    True
    """
    if int(rank) < 1 or int(n_epochs) < 1 or int(n_batches) < 1 or int(sync_every) < 1:
        raise ValueError(
            "sgd_factorize needs rank, n_epochs, n_batches and sync_every >= 1; got "
            f"rank={rank!r}, n_epochs={n_epochs!r}, n_batches={n_batches!r}, "
            f"sync_every={sync_every!r}."
        )
    graph = ratings
    if not isinstance(graph, BipartiteGraph):
        graph = partition_bipartite(ratings, n_partitions, client=client)
    spec = _SGDSpec(
        int(rank),
        float(reg),
        float(learning_rate),
        int(n_epochs),
        int(n_batches),
        int(sync_every),
        _seed(random_state),
    )
    blocks = [None] * graph.n_partitions
    if init is not None:
        U0, V0 = (np.asarray(x, dtype=float) for x in init)
        expected = ((graph.shape[0], spec.rank), (graph.shape[1], spec.rank))
        if (U0.shape, V0.shape) != expected:
            raise ValueError(
                f"init must be (user factors, item factors) of shapes {expected}; got "
                f"{(U0.shape, V0.shape)}."
            )
        ub, ib = graph.user_bounds, graph.item_bounds
        blocks = [(U0[ub[p] : ub[p + 1]], V0[ib[p] : ib[p + 1]]) for p in range(len(blocks))]
    return _model(run_bipartite(graph, SGD, spec, blocks, timeout, checkpoint_every), spec)


SGD = Algorithm("sgd", sgd_epochs, kept=(0, 1), n_iter="n_epochs")
"""SGD goes on from the user factors and the item factors their owners hold (after an
epoch's last GlobalSync, every copy of an item equals its owner's)."""


def _seed(random_state):
    """An int seed as it is; otherwise one drawn from *random_state*."""
    from sklearn.utils import check_random_state

    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    return int(check_random_state(random_state).randint(2**31 - 1))
