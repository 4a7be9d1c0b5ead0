"""Sparse logistic regression on the sample-feature bipartite graph: TUX2's example of ML
in the MEGA model.

A sparse table is a bipartite graph: ``src`` the samples, ``dst`` the features, ``weight``
the non-zero values (``edges_from_scipy(X)`` of a scipy.sparse ``X``). Cut by
:func:`~taskdml.graph.partition_bipartite`, partition ``p`` holds its samples' rows and
mirrors the features they use; it owns the weights of the features of its item range. One
task per partition, where it lives, runs every epoch:

- **Mini-batch**: it shuffles its labelled samples (``numpy.random.default_rng([seed,
  epoch, partition])``) and cuts them into *n_batches*; the global mini-batch ``b`` is the
  union of every partition's batch ``b``;
- **Exchange**: each partition sends the owners the log-loss gradient of the features its
  batch touched (:func:`~taskdml.graph._factorize.push_pull`, worker to worker); the
  intercept's gradient and the batch size are all-reduced;
- **GlobalSync / Apply**: each owner sums the gradients of its features and takes the step
  ``w_j -= learning_rate * (g_j / batch_size + alpha * w_j)`` on the features the global
  batch touched (the L2 penalty applied lazily, where the batch has data), then sends the
  new weights to every partition that mirrors them.

So the run is one machine's mini-batch gradient descent on the global batches, whatever the
partitioning: the tests compare it with such a loop, and its accuracy with scikit-learn's
``SGDClassifier``. Samples labelled ``-1`` are not trained on but scored.

Checkpoints every ``checkpoint_every`` epochs and lost workers as
:mod:`taskdml.graph._factorize` has them (:func:`~taskdml.graph._factorize.run_bipartite`):
a segment goes on from its features' weights and the intercept (the mirrors, equal to their
owners' weights after each push-pull, are exchanged again), and the result equals an
uninterrupted run's.
"""

import dataclasses
import functools
import time

import numpy as np

from taskdml import _events
from taskdml.graph._bipartite import BipartiteGraph, partition_bipartite
from taskdml.graph._factorize import Algorithm, _exchange, _seed, push_pull, run_bipartite


@dataclasses.dataclass(frozen=True)
class _Spec:
    alpha: float
    learning_rate: float
    n_epochs: int
    n_batches: int
    seed: int


def _sigmoid(z):
    from scipy.special import expit

    return expit(z)


def gradient_step(learning_rate, alpha, size, weights, total, count):
    """The owner's apply: a gradient step on the weights the global batch touched (summed
    gradient *total* over a batch of *size* samples, L2 penalty *alpha*)."""
    changed = count > 0
    weights[changed] -= learning_rate * (total[changed] / size + alpha * weights[changed])
    return changed


def _pick(outcome, *path):
    for index in path:
        outcome = outcome[index]
    return outcome


def logistic_epochs(part, labels, spec, collective, rank, tags, first=0, stop=None, start=None):
    """Epochs ``first .. stop - 1`` (all by default) of one partition (see the module
    docstring), from zeros or from an earlier segment's ``start[1]`` (its features' weights,
    copied, and the intercept); returns ``(probabilities of its samples, (weights of its
    features, intercept), history)``."""
    side = part.by_user
    labels = np.asarray(labels).ravel()
    i0, i1 = part.bounds("item")
    weights, intercept = np.zeros(i1 - i0), 0.0
    mirrored = np.zeros(sum(len(v) for v in part.item_mirrors.values()))
    if start is not None:  # every mirror equals its owner's weight after a push_pull
        weights, intercept = start[1][0].copy(), start[1][1]
        sends, mirrors = part.item_sends, part.item_mirrors
        mirrored = _exchange(collective, part, rank, weights[:, None], sends, mirrors, "w")[:, 0]
    touched = np.zeros(len(mirrored), dtype=bool)
    rows = np.repeat(np.arange(side.n_rows), side.counts)
    labelled = np.flatnonzero(labels >= 0)
    history, step = [], 0
    for epoch in range(first, spec.n_epochs if stop is None else stop):
        began = time.perf_counter()
        order = labelled[np.random.default_rng([spec.seed, epoch, rank]).permutation(len(labelled))]
        for batch in np.array_split(order, spec.n_batches):
            chosen = np.zeros(side.n_rows, dtype=bool)
            chosen[batch] = True
            edges = chosen[rows]
            r, c, v = rows[edges], side.columns[edges], side.values[edges]
            margin = np.bincount(r, v * mirrored[c], minlength=side.n_rows) + intercept
            error = _sigmoid(margin) - labels.clip(0)
            error[~chosen] = 0.0
            gradient = np.bincount(c, v * error[r], minlength=len(mirrored))
            touched[c] = True
            totals = collective.allreduce_sum(("batch", step), rank, [error.sum(), len(batch)])
            size = max(totals[1], 1.0)
            intercept -= spec.learning_rate * totals[0] / size
            apply = functools.partial(gradient_step, spec.learning_rate, spec.alpha, size)
            push_pull(collective, part, rank, weights, mirrored, gradient, touched, step, apply)
            step += 1
        margin = np.bincount(rows, side.values * mirrored[side.columns], minlength=side.n_rows)
        probability = _sigmoid(margin + intercept)
        y, p = labels[labelled], np.clip(probability[labelled], 1e-15, 1 - 1e-15)
        loss = -float((y * np.log(p) + (1 - y) * np.log(1 - p)).sum())
        totals = collective.allreduce_sum(("loss", epoch), rank, [loss, len(labelled)])
        entry = {
            "superstep": epoch,
            "log_loss": float(totals[0] / max(totals[1], 1.0)),
            "seconds": time.perf_counter() - began,
        }
        history.append(entry)
        if rank == 0 and tags is not None:
            _events.publish_from(
                tags, "superstep", **entry, measure=["log_loss", "training log loss"]
            )
    return probability, (weights, intercept), history


LOGISTIC = Algorithm("logit", logistic_epochs, kept=(1,), n_iter="n_epochs")
"""Logistic regression goes on from the weights (their owners') and the intercept."""


@dataclasses.dataclass
class SparseLogisticModel:
    """What :func:`sparse_logistic_regression` found.

    Attributes
    ----------
    coef : xarray.Dataset
        ``coef`` along ``dst_vertex`` (one weight per feature), a dask array chunked by
        partition, left on the workers.
    intercept : float
    samples : xarray.Dataset
        ``probability`` (of class 1) and ``label`` (0 or 1) along ``src_vertex``, for every
        sample (the unlabelled too), left on the workers.
    history : list of dict
        Per epoch: ``superstep``, ``log_loss`` (over the labelled samples), ``seconds``.
    resumed_from : int or None
        The epoch a run found checkpointed and started from (``None``: from the start).
    restarts : list of dict
        Per worker loss: ``superstep`` (the epoch the run went on from) and ``workers``.

    A pipeline step's cache writes ``coef`` and ``samples`` where they are, as Zarr, and
    reads them back lazily (:mod:`taskdml._parts`).
    """

    coef: object
    intercept: float
    samples: object
    history: list
    resumed_from: int = None
    restarts: list = dataclasses.field(default_factory=list)

    @property
    def n_iter_(self):
        """The number of epochs run."""
        return len(self.history)

    def __taskdml_parts__(self):
        """``(shell, [coef, samples])``: the chunked results are parts on the workers
        (:mod:`taskdml._parts`), the shell keeps the intercept and the history."""
        return dataclasses.replace(self, coef=None, samples=None), [self.coef, self.samples]

    def __taskdml_with_parts__(self, parts):
        coef, samples = parts
        return dataclasses.replace(self, coef=coef, samples=samples)


def sparse_logistic_regression(
    graph,
    labels,
    alpha=1e-4,
    learning_rate=0.5,
    n_epochs=10,
    *,
    n_batches=10,
    random_state=None,
    n_partitions=None,
    timeout=600.0,
    client=None,
    checkpoint_every="auto",
):
    """Binary logistic regression on the sample-feature bipartite graph, on the workers.

    Parameters
    ----------
    graph : xarray.Dataset or BipartiteGraph
        ``src`` the samples, ``dst`` the features, ``weight`` the values (the non-zeros of a
        sparse ``X``; :func:`~taskdml.graph.edges_from_scipy` makes it from one).
    labels : array-like or dask array of shape (n_samples,)
        0 or 1, and -1 for a sample not to train on (it is still scored).
    alpha : float, default=1e-4
        The L2 penalty.
    learning_rate : float, default=0.5
    n_epochs : int, default=10
    n_batches : int, default=10
        Mini-batches per epoch (every partition cuts its samples into as many).
    random_state : int, optional
        The seed of the shuffles (an int is used as it is).
    n_partitions, timeout, client, checkpoint_every
        As :func:`~taskdml.graph.als` (an epoch is an iteration).

    Returns
    -------
    SparseLogisticModel

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from taskdml.graph import edges_from_scipy
    >>> X = sp.csr_matrix(np.eye(4))
    >>> model = sparse_logistic_regression(
    ...     edges_from_scipy(X), [0, 1, 0, 1], n_epochs=50, n_batches=1, client=False
    ... )
    >>> model.samples.label.values.tolist()
    [0, 1, 0, 1]
    """
    import dask
    import dask.array as da
    import xarray as xr

    if int(n_epochs) < 1 or int(n_batches) < 1:
        raise ValueError(
            f"sparse_logistic_regression needs n_epochs and n_batches >= 1; got "
            f"n_epochs={n_epochs!r}, n_batches={n_batches!r}."
        )
    if not isinstance(graph, BipartiteGraph):
        graph = partition_bipartite(graph, n_partitions, client=client)
    n_samples = graph.shape[0]
    if np.shape(labels) != (n_samples,):
        raise ValueError(
            f"labels must have shape (n_samples,) = ({n_samples},); got {np.shape(labels)}."
        )
    bounds, sizes = graph.user_bounds, graph.sizes("user")
    if isinstance(labels, da.Array):
        blocks = list(labels.rechunk((tuple(sizes),)).to_delayed().ravel())
    else:
        labels = np.asarray(labels)
        blocks = [labels[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    spec = _Spec(
        float(alpha), float(learning_rate), int(n_epochs), int(n_batches), _seed(random_state)
    )
    ran = run_bipartite(graph, LOGISTIC, spec, blocks, timeout, checkpoint_every)
    outcomes, graph = ran.outcomes, ran.graph
    if graph.client is None:
        probability = da.concatenate([da.from_array(o[0]) for o in outcomes])
        coef = da.concatenate([da.from_array(o[1][0]) for o in outcomes])
        intercept = outcomes[0][1][1]
    else:
        pick = dask.delayed(_pick, pure=True)
        probability = da.concatenate(
            [da.from_delayed(pick(o, 0), shape=(n,), dtype=float) for o, n in zip(outcomes, sizes)]
        )
        coef = da.concatenate(
            [
                da.from_delayed(pick(o, 1, 0), shape=(n,), dtype=float)
                for o, n in zip(outcomes, graph.sizes("item"))
            ]
        )
        intercept = graph.client.submit(_pick, outcomes[0], 1, 1, pure=False).result()
    samples = xr.Dataset(
        {
            "probability": ("src_vertex", probability),
            "label": ("src_vertex", (probability > 0.5).astype(np.int64)),
        }
    )
    coef = xr.Dataset({"coef": ("dst_vertex", coef)})
    return SparseLogisticModel(
        coef, float(intercept), samples, ran.history, ran.resumed_from, ran.restarts
    )
