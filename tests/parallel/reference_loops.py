"""Reference loops for data-parallel training, written here from the definitions and nothing
of taskdml: plain NumPy and scikit-learn in this process.

- The merges: the linear-SGD rule (coefficients and intercepts averaged with shares equal to
  the rows each replica saw, ``t_`` = the start's plus every replica's rows, ASGD's running
  means pooled over all iterates), MiniBatchKMeans (each centre pools the points the
  replicas assigned to it), LDA (topic-word parameters averaged by rows), and the MLP's
  compensated rule (the start plus every replica's change). A merge is a copy of the first
  replica with the merged arrays, as the replicas' other state (random generators,
  encoders) is the same in every replica or is replica 0's.
- :func:`reference_sync`: chunk ``i`` belongs to replica ``i mod R``; each round every
  replica copies the global model and ``partial_fit``\\s its next ``sync_every`` chunks; the
  replicas that saw rows are merged in rank order.
- :func:`reference_sync_windows`: :func:`reference_sync` with each round's length given (the
  periods a run recorded).
- :func:`replay_async`: a parameter server's pushes replayed in the order it recorded.
- :func:`reference_sync_until`: :func:`reference_sync` that stops as scikit-learn's SGD does:
  the epoch's loss is the sum, over every chunk, of the chunk's loss under the replica's
  model just before it trains on it (none while the model is unfitted), and training stops
  after ``patience`` epochs in a row whose mean loss is not below the best before by ``tol``.
"""

import copy
import math

import numpy as np
from scipy.special import psi
from sklearn.utils import check_random_state


def chunks_of(X, y, chunk_rows):
    """``(X, y)`` per chunk of *chunk_rows* rows (``y`` may be None)."""
    bounds = np.cumsum((0, *chunk_rows))
    return [(X[a:b], None if y is None else y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def epoch_order(n_chunks, seed, epoch, rank, shuffle):
    """The engine's documented order of a replica's chunks in an epoch: a permutation drawn
    from ``numpy.random.default_rng([seed, epoch, rank])``, or the chunks in order."""
    if not shuffle:
        return list(range(n_chunks))
    return [int(i) for i in np.random.default_rng([seed, epoch, rank]).permutation(n_chunks)]


def engine_seed(random_state):
    """The one seed a training draws from its ``random_state``."""
    return int(check_random_state(random_state).randint(2**31 - 1))


MINI_BATCH_FAMILIES = (
    "MiniBatchKMeans", "MiniBatchNMF", "MiniBatchDictionaryLearning", "BernoulliRBM"
)  # fmt: skip
"""Estimators whose ``partial_fit`` takes its whole argument as one mini-batch while their
``fit`` steps in mini-batches of ``batch_size`` rows."""


def fit(estimator, X, y, classes):
    """``partial_fit`` *estimator* in place on one chunk; the rows it saw.

    A mini-batch family gets the chunk as its ``fit`` would take it: ``ceil(n / batch_size)``
    consecutive slices, slice ``i`` from row ``i * n // parts`` to ``(i + 1) * n // parts``.
    """
    n = X.shape[0]  # sparse chunks have no len
    parts = 1
    if type(estimator).__name__ in MINI_BATCH_FAMILIES and n > estimator.batch_size:
        parts = -(-n // estimator.batch_size)
    for i in range(parts):
        rows = slice(i * n // parts, (i + 1) * n // parts)
        if y is None:
            estimator.partial_fit(X[rows])
        elif classes is None:
            estimator.partial_fit(X[rows], y[rows])
        else:
            estimator.partial_fit(X[rows], y[rows], classes=classes)
    return n


def mean_by_rows(values, rows):
    """``sum(rows_k / total * values_k)``, in rank order."""
    total = float(sum(rows))
    return sum(float(n) / total * np.asarray(v) for n, v in zip(rows, values))


# -- merges: merge(start, replicas, rows) -> the next global model ---------------------------


def merge_linear_sgd(start, replicas, rows):
    """The linear-SGD rule (SGDClassifier, SGDRegressor): rows-seen mean of ``coef_`` and
    ``intercept_``; with ``average``, the plain iterates averaged likewise and the running
    means of the iterates pooled: ``(sum_k m_k a_k - (K - 1) m_0 a_0) / (m_0 + sum_k (m_k -
    m_0))`` with ``m = max(0, t_ - average)`` iterates in a mean."""
    t0 = float(getattr(start, "t_", 1.0))
    merged = copy.deepcopy(replicas[0])
    merged.t_ = t0 + float(sum(rows))
    merged.n_iter_ = max(r.n_iter_ for r in replicas)
    if not start.average:
        merged.coef_ = mean_by_rows([r.coef_ for r in replicas], rows)
        merged.intercept_ = mean_by_rows([r.intercept_ for r in replicas], rows)
        return merged
    merged._standard_coef = mean_by_rows([r._standard_coef for r in replicas], rows)
    merged._standard_intercept = mean_by_rows([r._standard_intercept for r in replicas], rows)

    def held(t):
        return max(0.0, float(t) - float(start.average))

    m0, counts = held(t0), [held(r.t_) for r in replicas]
    pooled = m0 + sum(m - m0 for m in counts)
    for name in ("_average_coef", "_average_intercept"):
        values = [np.asarray(getattr(r, name)) for r in replicas]
        if pooled <= 0:
            setattr(merged, name, values[0].copy())
            continue
        total = sum(m * v for m, v in zip(counts, values))
        if m0 > 0:
            total = total - (len(values) - 1) * m0 * np.asarray(getattr(start, name))
        setattr(merged, name, total / pooled)
    # What scikit-learn's partial_fit shows once the counter is at t_.
    averaging = start.average <= merged.t_ - 1
    coef = merged._average_coef if averaging else merged._standard_coef
    intercept = merged._average_intercept if averaging else merged._standard_intercept
    binary = len(getattr(start, "classes_", ())) == 2 or (
        hasattr(replicas[0], "classes_") and len(replicas[0].classes_) == 2
    )
    merged.coef_ = coef.reshape(1, -1) if binary else coef
    merged.intercept_ = np.atleast_1d(intercept).copy()
    return merged


def merge_kmeans(start, replicas, rows):
    """MiniBatchKMeans: ``c = (W_0 c_0 + sum_k (W_k c_k - W_0 c_0)) / (W_0 + sum_k (W_k -
    W_0))`` per centre, over the replicas whose count of that centre grew; ``n_steps_``
    adds every replica's steps."""
    w0, c0 = np.asarray(start._counts, dtype=float), np.asarray(start.cluster_centers_)
    mass, weight = w0[:, None] * c0, w0.copy()
    for r in replicas:
        grew = r._counts > w0
        mass[grew] += r._counts[grew, None] * r.cluster_centers_[grew] - w0[grew, None] * c0[grew]
        weight[grew] += r._counts[grew] - w0[grew]
    merged = copy.deepcopy(replicas[0])
    merged.cluster_centers_ = np.where(weight[:, None] > 0, mass / weight[:, None], c0)
    merged._counts = weight
    merged.n_steps_ = start.n_steps_ + sum(r.n_steps_ - start.n_steps_ for r in replicas)
    return merged


def merge_lda(start, replicas, rows):
    """LDA: ``components_`` (lambda) averaged by rows, ``exp(E[log beta])`` recomputed from
    it, ``n_batch_iter_`` adds every replica's batches."""
    merged = copy.deepcopy(replicas[0])
    lam = mean_by_rows([r.components_ for r in replicas], rows)
    merged.components_ = lam
    merged.exp_dirichlet_component_ = np.exp(psi(lam) - psi(lam.sum(axis=1))[:, None])
    b0 = start.n_batch_iter_
    merged.n_batch_iter_ = b0 + sum(r.n_batch_iter_ - b0 for r in replicas)
    return merged


def merge_mlp(start, replicas, rows):
    """MLP, compensated: weights = the start plus every replica's change; ``t_`` adds every
    replica's rows. (Enough for plain SGD without momentum at a constant rate, whose steps
    read nothing else of the optimiser.)"""
    merged = copy.deepcopy(replicas[0])
    for name in ("coefs_", "intercepts_"):
        layers = zip(getattr(start, name), *(getattr(r, name) for r in replicas))
        setattr(merged, name, [s + sum(v - s for v in vs) for s, *vs in layers])
    merged.t_ = start.t_ + sum(rows)
    merged.n_iter_ = max(r.n_iter_ for r in replicas)
    return merged


# -- loops -----------------------------------------------------------------------------------


def reference_sync(
    start,
    chunks,
    classes,
    merge,
    *,
    n_replicas,
    sync_every,
    epochs,
    shuffle=False,
    random_state=0,
):
    """The sync strategy as a plain loop of replicas from the global model *start* over
    *chunks* (``(X, y)`` pairs); *merge* is one of the merges above."""
    owned = [[c for i, c in enumerate(chunks) if i % n_replicas == r] for r in range(n_replicas)]
    seed = engine_seed(random_state)
    rounds = math.ceil(max(len(o) for o in owned) / sync_every)
    state = copy.deepcopy(start)
    for epoch in range(epochs):
        orders = [epoch_order(len(o), seed, epoch, r, shuffle) for r, o in enumerate(owned)]
        for round_index in range(rounds):
            trained, rows = [], []
            for rank in range(n_replicas):
                window = orders[rank][round_index * sync_every : (round_index + 1) * sync_every]
                if not window:
                    continue
                replica = copy.deepcopy(state)
                rows.append(sum(fit(replica, *owned[rank][p], classes) for p in window))
                trained.append(replica)
            state = merge(state, trained, rows)
    return state


def reference_sync_windows(
    start, chunks, classes, merge, *, n_replicas, windows, shuffle=False, random_state=0
):
    """:func:`reference_sync` with the length of every round given: ``windows[e]`` lists, round
    by round, how many of its next chunks each replica trains in epoch ``e`` (the periods a
    run recorded: ``"auto"`` probes with rounds of one chunk first). A replica whose chunks
    ran out sits the round out."""
    owned = [[c for i, c in enumerate(chunks) if i % n_replicas == r] for r in range(n_replicas)]
    seed = engine_seed(random_state)
    state = copy.deepcopy(start)
    for epoch, lengths in enumerate(windows):
        orders = [epoch_order(len(o), seed, epoch, r, shuffle) for r, o in enumerate(owned)]
        done = 0
        for length in lengths:
            trained, rows = [], []
            for rank in range(n_replicas):
                window = orders[rank][done : done + length]
                if not window:
                    continue
                replica = copy.deepcopy(state)
                rows.append(sum(fit(replica, *owned[rank][p], classes) for p in window))
                trained.append(replica)
            state = merge(state, trained, rows)
            done += length
    return state


def replay_async(start, chunks, classes, merge, pushes, *, n_replicas, epochs, shuffle, seed):
    """A parameter server's training rebuilt from its record: *pushes* lists, in the order
    they were merged, ``(rank, version the replica had pulled)``. Replica ``r`` trains its
    chunks (``i mod R == r``) epoch after epoch in the engine's order, one per push, on a copy
    of the global model of the version it pulled. A push that nothing was merged before
    since that version becomes the global model; otherwise the global model and the replica
    are merged as two replicas that started from that version, weighted by the rows the
    global model absorbed since then and the replica's."""
    owned = [[c for i, c in enumerate(chunks) if i % n_replicas == r] for r in range(n_replicas)]
    queues = [
        [o[p] for e in range(epochs) for p in epoch_order(len(o), seed, e, r, shuffle)]
        for r, o in enumerate(owned)
    ]
    versions, absorbed = [copy.deepcopy(start)], [0]  # per version: the model, rows so far
    for rank, pulled in pushes:
        replica = copy.deepcopy(versions[pulled])
        rows = fit(replica, *queues[rank].pop(0), classes)
        since = absorbed[-1] - absorbed[pulled]
        if since == 0:
            merged = replica
        else:
            merged = merge(versions[pulled], [versions[-1], replica], [since, rows])
        versions.append(merged)
        absorbed.append(absorbed[-1] + rows)
    assert not any(queues), "the record left chunks untrained"
    return versions[-1]


def reference_sync_until(
    start, chunks, classes, merge, loss, *, n_replicas, sync_every, max_epochs, tol, patience
):
    """``(model, per-epoch mean losses)`` of sync training in chunk order (no shuffle) until
    the loss rule stops it; *loss* is ``loss(model, X, y) -> summed loss of the rows``."""
    owned = [[c for i, c in enumerate(chunks) if i % n_replicas == r] for r in range(n_replicas)]
    rounds = math.ceil(max(len(o) for o in owned) / sync_every)
    state, means, best, count = copy.deepcopy(start), [], math.inf, 0
    for _ in range(max_epochs):
        total, counted = 0.0, 0
        for round_index in range(rounds):
            trained, rows = [], []
            for rank in range(n_replicas):
                window = owned[rank][round_index * sync_every : (round_index + 1) * sync_every]
                if not window:
                    continue
                replica, seen = copy.deepcopy(state), 0
                for X, y in window:
                    if hasattr(replica, "coef_"):
                        total, counted = total + loss(replica, X, y), counted + len(X)
                    seen += fit(replica, X, y, classes)
                trained.append(replica)
                rows.append(seen)
            state = merge(state, trained, rows)
        means.append(total / counted)
        count = count + 1 if means[-1] > best - tol else 0
        best = min(best, means[-1])
        if count >= patience:
            break
    return state, means
