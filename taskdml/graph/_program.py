"""The vertex-program API: a graph algorithm as a few vectorised methods per partition.

A superstep (:mod:`taskdml.graph._supersteps`) does the same five things for every
program, on every partition at once:

1. ``message(part, values)``: what each of its vertices sends along its out-edges (PageRank:
   its rank over its out-degree); the values its neighbours mirror go to them;
2. the *gather*: a ``combiner`` (``"sum"``, ``"min"``, ``"max"``) over the in-edges of each
   vertex of ``edge_value(source message, edge weight)``, done on the partition's CSR (for a
   sum of weight times message, one sparse product);
3. ``apply(part, values, gathered, totals)``: the new values of its vertices, from the old,
   the gathered and the last superstep's global ``totals``;
4. ``measures(part, old, new)``: a few numbers per partition, summed over all partitions by
   an all-reduce (the L1 change, PageRank's dangling mass, ...);
5. ``converged(totals, superstep)``: whether to stop, decided alike on every partition from
   the same totals.

Why this shape: it is Pregel's (messages along edges, a combiner, a vote to halt) and
PowerGraph's gather-apply-scatter, written per partition over arrays instead of per vertex,
so a program costs NumPy and scipy time, not Python time per vertex. Programs are plain
objects that pickle (they travel to every partition's task); state lives in the vertex
values, which may be 1-D or 2-D (one row per vertex: label distributions, features).
"""

import numpy as np

COMBINERS = ("sum", "min", "max")
"""How a gather combines the values of a vertex's in-edges."""


class VertexProgram:
    """Base class of vertex programs; override what the algorithm needs.

    Attributes
    ----------
    combiner : {"sum", "min", "max"}
        How the gather combines in-edges (default ``"sum"``).
    measure_names : tuple of str
        The names of the numbers :meth:`measures` returns, the first being the change that
        the history reports (default ``("change",)``).
    measure_label : str
        What the first measure is, in words: the pictures, the report and the dashboard
        name it so (default ``"L1 change"``, what the default :meth:`measures` computes; a
        program with measures of its own says what its first one is).
    tolerates_staleness : bool
        Whether the program converges to its result from mirror values and totals up to a
        few supersteps old (a contraction, a monotone propagation), so that
        :func:`~taskdml.graph.run_supersteps` may run it with ``staleness > 0``; default
        ``False``: a program runs bulk-synchronous unless it says so.

    Examples
    --------
    Degree counting in one superstep: every vertex sends 1, and sums what it receives.

    >>> import numpy as np
    >>> class InDegree(VertexProgram):
    ...     def init(self, part, data):
    ...         return np.zeros(part.n_local)
    ...     def message(self, part, values):
    ...         return np.ones(part.n_local)
    ...     def apply(self, part, values, gathered, totals):
    ...         return gathered
    ...     def converged(self, totals, superstep):
    ...         return True
    >>> import networkx as nx
    >>> from taskdml.graph import partition_graph, run_supersteps
    >>> graph = partition_graph(nx.DiGraph([(0, 1), (2, 1)]), client=False)
    >>> run_supersteps(graph, InDegree()).as_array().compute().tolist()
    [0.0, 2.0, 0.0]
    """

    combiner = "sum"
    measure_names = ("change",)
    measure_label = "L1 change"
    tolerates_staleness = False

    def init(self, part, data):
        """The initial values of *part*'s vertices (*data*: its block of the vertex data
        the run was given, or ``None``).

        Parameters
        ----------
        part : Partition
        data : object or None

        Returns
        -------
        numpy.ndarray
        """
        raise NotImplementedError

    def message(self, part, values):
        """What *part*'s vertices send along their out-edges (default: their values).

        Parameters
        ----------
        part : Partition
        values : numpy.ndarray

        Returns
        -------
        numpy.ndarray
        """
        return values

    edge_value = None
    """``edge_value(message, weight)``, vectorised over edges: what an edge carries to the
    gather. ``None``: weight times message for ``"sum"`` (a sparse product), the message
    itself for ``"min"`` and ``"max"``."""

    def apply(self, part, values, gathered, totals):
        """The new values of *part*'s vertices.

        Parameters
        ----------
        part : Partition
        values : numpy.ndarray
            Their values before this superstep.
        gathered : numpy.ndarray
            The combined in-edges of each vertex (the combiner's identity for none).
        totals : numpy.ndarray
            The all-reduced :meth:`measures` of the last superstep (of :meth:`init`'s values
            before the first).

        Returns
        -------
        numpy.ndarray
        """
        raise NotImplementedError

    def measures(self, part, old, new):
        """Numbers of this partition summed over all partitions after each superstep
        (default: the L1 change of its values).

        Parameters
        ----------
        part : Partition
        old, new : numpy.ndarray or None
            Its values before and after (``old`` is ``None`` for :meth:`init`'s values).

        Returns
        -------
        sequence of float
            One number per name in :attr:`measure_names`.
        """
        change = np.inf if old is None else float(np.abs(new - old).sum())
        return [change]

    def converged(self, totals, superstep):
        """Whether to stop after *superstep* (0-based), given the summed :meth:`measures`
        (default: never; the run stops at ``max_iter``).

        Parameters
        ----------
        totals : numpy.ndarray
        superstep : int

        Returns
        -------
        bool
        """
        return False

    def result(self, part, values):
        """What a partition hands back at the end (default: its values).

        Parameters
        ----------
        part : Partition
        values : numpy.ndarray

        Returns
        -------
        numpy.ndarray
        """
        return values


def gather(program, part, full):
    """The gather of *program* on *part*, given *full*: the messages of its own vertices then
    of its mirrors, in its CSR's column order."""
    csr, combiner = part.csr, program.combiner
    if combiner not in COMBINERS:
        raise ValueError(f"combiner must be one of {COMBINERS}; got {combiner!r}.")
    if hasattr(csr, "row_blocks"):  # spilled to disk (graph/_spill): a block of rows at a time
        return csr.gather(lambda block: _gather_rows(program, block, full))
    return _gather_rows(program, csr, full)


def _gather_rows(program, csr, full):
    combiner = program.combiner
    if combiner == "sum" and program.edge_value is None:
        return csr @ full
    carried = full[csr.indices]
    weights = csr.data.reshape((-1,) + (1,) * (carried.ndim - 1))
    if program.edge_value is not None:
        carried = program.edge_value(carried, weights)
    ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[combiner]
    identity = {"sum": 0.0, "min": np.inf, "max": -np.inf}[combiner]
    out = np.full(
        (csr.shape[0],) + carried.shape[1:], identity, dtype=np.result_type(carried, float)
    )
    nonempty = np.diff(csr.indptr) > 0
    if carried.shape[0]:
        out[nonempty] = ufunc.reduceat(carried, csr.indptr[:-1][nonempty], axis=0)
    return out
