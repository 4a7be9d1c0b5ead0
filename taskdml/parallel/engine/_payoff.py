"""Whether shipping in-memory data to replicas can pay for itself.

Data that lies in this process has to travel to the workers before replicas can train on it,
and that costs about as much as one cheap pass over it: a one-pass family (naive Bayes, a
scaler) on rows it reads once gains less from *w* replicas than the shipping costs, while an
estimator that passes over the data many times (SGD until its ``tol`` stops it, k-means) or
does much work per row (IncrementalPCA's SVDs) gains more. So the cost of an epoch is
measured, not guessed: the estimator trained on a probe of the first rows as a replica trains
on a chunk (in its ``fit``'s mini-batches where it has them), in this process, scaled to all
of them. Training distributed pays when the least number of epochs its stopping rule can run,
times that epoch, times the share *w* replicas take off it, is more than the data's bytes at
:data:`SHIP_BYTES_PER_S`; otherwise ``estimator.fit`` in this process is the faster training
(:class:`~taskdml.DataParallel` says so in ``stats_["local"]``).

A model's first ``partial_fit`` pays once what later calls do not (its classes, buffers,
first touches of the code), and a probe of a few milliseconds scaled a hundredfold carries
that and the machine's noise with it: near the line, one probe decided differently from one
call to the next (``benchmarks/parity.py``'s GaussianNB on 10^6 rows in memory ran in this
process on its first call and distributed on some later ones: 0.26 against 0.27-0.84 s). So a
verdict "distributing pays" by less than :data:`CONFIRM_MARGIN` is checked again on the
fastest of :data:`STEADY_PROBES` more calls of the same model (the cost per call it will have
in training); a verdict against distributing stands, since the first call only
over-estimates.
"""

import time
import warnings

import numpy as np
from dask.utils import format_bytes
from sklearn.base import clone, is_classifier

from taskdml.parallel.engine._tasks import fit_chunk
from taskdml.parallel.engine._train import _stopping_rule

__all__ = ["SHIP_BYTES_PER_S", "distributing_pays", "least_epochs", "weigh"]

SHIP_BYTES_PER_S = 700e6
"""How fast in-memory data reaches the workers: 168 MB scattered to two local workers in
0.23 s on a calm 2-core machine (loopback; a network is slower, which only makes fitting in
this process win more often than this estimate says)."""

PROBE_SHARE = 0.01
"""The share of the rows the probe trains on, within :data:`PROBE_ROWS`."""

PROBE_ROWS = (2_000, 20_000)

CONFIRM_MARGIN = 2.0
"""A first probe that says distributing saves less than this many times the shipping is
checked again on later calls."""

STEADY_PROBES = 2


def least_epochs(stopping):
    """The fewest epochs a :class:`~taskdml.parallel.merge._stopping.Stopping` can train: a
    rule that watches a value stops at the earliest after its first epoch and ``patience``
    more without improvement."""
    if stopping.on is None or not stopping.patience:
        return stopping.max_epochs
    return min(stopping.max_epochs, stopping.patience + 1)


def distributing_pays(estimator, X, y, sample_weight, nbytes, replicas):
    """``(True, None)`` when *replicas* replicas would save more than shipping *nbytes* of
    in-memory data to them costs, else ``(False, reason)`` with the figures compared. An
    estimator whose ``partial_fit`` cannot be probed here (none, a Pipeline, an error that
    the engine's checks will name) is left to the engine: ``(True, None)``."""
    if replicas < 2 or not hasattr(estimator, "partial_fit"):
        return True, None
    rows = X.shape[0] if hasattr(X, "shape") else len(X)
    probe = min(rows, max(PROBE_ROWS[0], min(PROBE_ROWS[1], int(rows * PROBE_SHARE))))
    kwargs = {"classes": np.unique(y[:probe])} if is_classifier(estimator) else {}
    args = (
        X[:probe],
        None if y is None else y[:probe],
        kwargs,
        None if sample_weight is None else sample_weight[:probe],
    )
    model = clone(estimator)
    try:
        probe_s = _timed_probe(model, *args)
    except (TypeError, ValueError):
        return True, None
    stopping = _stopping_rule(estimator, "auto", None, None, None, rows)
    epoch_s = probe_s * rows / probe
    verdict = weigh(epoch_s, stopping, replicas, nbytes, probe)
    if verdict[0] and not weigh(epoch_s / CONFIRM_MARGIN, stopping, replicas, nbytes)[0]:
        for _ in range(STEADY_PROBES):  # near the line: the fastest call decides
            probe_s = min(probe_s, _timed_probe(model, *args))
        verdict = weigh(probe_s * rows / probe, stopping, replicas, nbytes, probe)
    return verdict


def _timed_probe(model, X, y, fit_kwargs, weight):
    """Seconds of *model* trained on the probe's rows as a replica trains on a chunk
    (:func:`~taskdml.parallel.engine._tasks.fit_chunk`: in the mini-batches of the family's
    own ``fit`` where its ``partial_fit`` takes everything as one; MiniBatchKMeans' 1,024-row
    steps cost 5× one call on 20,000 rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        began = time.perf_counter()
        fit_chunk(model, X, y, (), fit_kwargs, weight)
        return time.perf_counter() - began


def weigh(epoch_s, stopping, replicas, nbytes, probe=None):
    """:func:`distributing_pays`'s rule on an epoch of *epoch_s* seconds in this process."""
    epochs = least_epochs(stopping)
    saves = epochs * epoch_s * (1 - 1 / replicas)
    ships = nbytes / SHIP_BYTES_PER_S
    if saves > ships:
        return True, None
    measured = "" if probe is None else f" (trained on {probe:,} rows)"
    return False, (
        f"in-memory data of {format_bytes(nbytes)}: an epoch measured at about "
        f"{epoch_s:.2g} s{measured}, at least {epochs} epoch{'s' if epochs != 1 else ''} "
        f"({stopping.source}); {replicas} replicas would save at most {saves:.2g} s and "
        f"shipping the data costs about {ships:.2g} s: estimator.fit in this process, where "
        "the data lies"
    )
