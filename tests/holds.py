"""A training that a test holds where it wants to act on it (a module that pipelines run by
the tests import too: the run and its workers find it on ``PYTHONPATH``).

A test that kills or adds a worker "while the training runs" must know that the training has
not ended yet, whatever the machine's speed: :class:`HeldSGD` stops at given numbers of rows
seen and waits for the test to let it go on.
"""

from sklearn.linear_model import SGDClassifier

HOLD_TIMEOUT_S = 120
"""How long a held training waits for its test (only turns a hang into an error)."""

_PASSED = set()  # the holds this process has seen released


class HeldSGD(SGDClassifier):
    """An SGDClassifier that a test holds at given points of its training.

    *holds* lists ``[rows, name]`` pairs: a ``partial_fit`` that starts with at least *rows*
    rows seen (``t_``; in a data-parallel training or a search's trial, since the training
    began) sets the ``distributed.Event`` ``name + "-reached"`` and waits for the Event
    *name*. Until the test sets it, the training can neither pass that point nor end: the
    test acts on the cluster (adds a worker, kills one) while the training is held there,
    and no guess of how long it runs decides whether it acted in time.
    """

    def __init__(self, *, holds=(), loss="hinge", penalty="l2", alpha=1e-4, random_state=None):
        super().__init__(loss=loss, penalty=penalty, alpha=alpha, random_state=random_state)
        self.holds = holds

    def partial_fit(self, X, y=None, classes=None, sample_weight=None):
        seen = getattr(self, "t_", 0.0)
        for rows, name in self.holds:
            if seen >= rows and name not in _PASSED:
                _hold(name)
        return super().partial_fit(X, y, classes=classes, sample_weight=sample_weight)


def _hold(name):
    from distributed import Event

    Event(f"{name}-reached").set()
    if not Event(name).wait(HOLD_TIMEOUT_S):
        raise TimeoutError(f"held at {name!r} for {HOLD_TIMEOUT_S} s: the test never let go")
    _PASSED.add(name)


def stop_requested():
    """The sync trainings this worker process was asked to stop for a re-plan (run on the
    workers by ``Client.run``)."""
    from taskdml.parallel.engine import _elastic

    return sorted(_elastic._REQUESTED)


def held_pagerank(graph, hold, at):
    """PageRank of *graph* (a pipeline's edges Dataset) whose rank-0 partition holds after
    superstep *at*: it sets the ``distributed.Event`` ``hold + "-reached"`` and waits for
    *hold* (once per worker process). Marked as a graph builder: it runs in the client."""
    from taskdml.graph import partition_graph, run_supersteps
    from taskdml.graph._algorithms import PageRankProgram, _dataset

    class HeldPageRank(PageRankProgram):
        def init(self, part, data):
            self.index_ = part.index
            return super().init(part, data)

        def converged(self, totals, superstep):
            if superstep == at and self.index_ == 0 and hold not in _PASSED:
                _hold(hold)
            return super().converged(totals, superstep)

    result = run_supersteps(partition_graph(graph), HeldPageRank(0.85, 1e-12), max_iter=1000)
    return _dataset({"pagerank": result.as_array()}, result)


held_pagerank.__taskdml_builds_graph__ = True


def save_values(result, variable, path):
    """Write *result*'s *variable* to the ``.npy`` file *path* (a plain callable: a task)."""
    import numpy as np

    np.save(path, np.asarray(result[variable].values))
    return path


def held_als(ratings, hold, at, rank, reg, n_iter, random_state, init_seed):
    """ALS of *ratings* (:func:`taskdml.graph.als`'s run, checkpointed as it is) from the
    user factors ``default_rng(init_seed).standard_normal((n_users, rank))``, whose rank-0
    partition holds after iteration *at* (as :func:`held_pagerank`); the factors as a
    Dataset (``users``, ``items``; attrs ``history`` and ``resumed_from``). Marked as a graph
    builder: it runs in the client."""
    import dataclasses

    import numpy as np
    import xarray as xr

    from taskdml.graph import partition_bipartite
    from taskdml.graph._factorize import ALS, _model, _seed, _Spec, run_bipartite

    def iterations(part, init, spec, collective, rank_, tags, first=0, stop=None, start=None):
        if rank_ != 0 or hold in _PASSED or not first <= at < stop - 1:
            return ALS.iterate(part, init, spec, collective, rank_, tags, first, stop, start)
        done = ALS.iterate(part, init, spec, collective, rank_, tags, first, at + 1, start)
        _hold(hold)
        rest = ALS.iterate(part, init, spec, collective, rank_, tags, at + 1, stop, done)
        return (*rest[:-1], done[-1] + rest[-1])

    graph = partition_bipartite(ratings)
    spec = _Spec(rank, reg, n_iter, True, _seed(random_state))
    held = dataclasses.replace(ALS, iterate=iterations)
    init = np.random.default_rng(init_seed).standard_normal((graph.shape[0], rank))
    bounds = graph.user_bounds
    blocks = [init[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    model = _model(run_bipartite(graph, held, spec, blocks, 600.0), spec)
    attrs = {"history": model.history, "resumed_from": model.resumed_from}
    return xr.Dataset(
        {
            "users": (("src_vertex", "component"), model.user_factors.factors.data),
            "items": (("dst_vertex", "component"), model.item_factors.factors.data),
        },
        attrs={k: v for k, v in attrs.items() if v is not None},
    )


held_als.__taskdml_builds_graph__ = True
