"""Arithmetic shared by the merge rules: proportions, weighted means, sums of deltas."""

import numpy as np


def proportions(weights):
    """``weights / sum(weights)``; equal shares when every weight is 0.

    With one replica the share is exactly 1.0, so a weighted mean returns that replica's
    values bit for bit.
    """
    w = np.asarray(weights, dtype=float)
    total = w.sum()
    if total <= 0:
        return np.full(w.shape, 1.0 / len(w))
    return w / total


def weighted_mean(values, shares):
    """``sum(share * value)``, in the dtype of the first value (float32 stays float32)."""
    first = np.asarray(values[0])
    acc = shares[0] * first
    for share, value in zip(shares[1:], values[1:]):
        acc = acc + share * np.asarray(value)
    if np.issubdtype(first.dtype, np.floating):
        acc = np.asarray(acc, dtype=first.dtype)
    return np.ascontiguousarray(acc) if np.ndim(acc) else acc[()]


def sum_of_deltas(values, start=None):
    """``values[0] + sum(v - start for v in values[1:])``: the start counted once.

    Every replica holds ``start + what it saw``; this adds what each saw to the start once.
    ``start=None`` means the round started from nothing.
    """
    acc = np.array(values[0], copy=True)
    for value in values[1:]:
        acc = acc + (np.asarray(value) if start is None else np.asarray(value) - start)
    return acc


def seen_since_start(counter_values, start_value, weights):
    """Per-replica increments of a counter since the round start, or ``weights``.

    Falls back to the engine's ``weights`` when the counter did not move (so the shares
    stay meaningful for replicas that saw no rows).
    """
    seen = np.asarray(counter_values, dtype=float) - float(start_value)
    if np.all(seen >= 0) and seen.sum() > 0:
        return seen
    return np.asarray(weights, dtype=float)


def batch_size(estimator):
    """The estimator's ``batch_size``: the mini-batch of its ``fit`` (a rule's ``batch_rows``)."""
    return estimator.batch_size
