"""Conformance checks for users' extensions of taskdml.

:func:`check_merge` runs a merge rule the way the data-parallel engine does -- a prepared
start, replicas trained on different chunks, a merge, a second round from the merged
estimator -- and checks the laws every rule must keep, and for exact rules the laws that
make them exact. It needs no Dask.
"""

import copy
import inspect

import numpy as np

from taskdml._sklearn_compat import _num_samples, _safe_indexing
from taskdml.parallel._merge_registry import _START_ATTR, _merge_with, _prepare_with
from taskdml.parallel.merge import MergeRule, get_merge_rule, unmergeable_reason

__all__ = ["check_merge"]


# -- comparing learned state --------------------------------------------------------------


def _is_random_state(value):
    return isinstance(value, (np.random.RandomState, np.random.Generator))


def _compare(a, b, path, rtol, atol, strict=False):
    """Raise AssertionError naming ``path`` where ``a`` and ``b`` differ.

    ``strict`` compares everything bit for bit, random generators included; otherwise
    floats are compared with ``rtol``/``atol`` and random generators are skipped.
    """
    if _is_random_state(a) or _is_random_state(b):
        if strict and type(a) is type(b) and isinstance(a, np.random.RandomState):
            _compare(a.get_state(legacy=False), b.get_state(legacy=False), path, 0, 0, True)
        return
    if type(a) is not type(b) and not (np.isscalar(a) and np.isscalar(b)):
        raise AssertionError(f"{path}: type {type(a).__name__} != {type(b).__name__}")
    if isinstance(a, np.ndarray) or np.isscalar(a) and not isinstance(a, (str, bytes)):
        a_arr, b_arr = np.asarray(a), np.asarray(b)
        if a_arr.shape != b_arr.shape:
            raise AssertionError(f"{path}: shape {a_arr.shape} != {b_arr.shape}")
        numeric = a_arr.dtype.kind in "fciub" and b_arr.dtype.kind in "fciub"
        if strict or not numeric or a_arr.dtype.kind in "biu" and b_arr.dtype.kind in "biu":
            if not np.array_equal(a_arr, b_arr, equal_nan=numeric):
                raise AssertionError(f"{path}: {a!r} != {b!r}")
            return
        if not np.allclose(a_arr, b_arr, rtol=rtol, atol=atol, equal_nan=True):
            diff = np.abs(a_arr.astype(float) - b_arr.astype(float))
            worst = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.ndim else ()
            raise AssertionError(
                f"{path} differs beyond rtol={rtol:g}, atol={atol:g}: largest difference "
                f"{float(diff[worst]):.3g} at index {tuple(int(i) for i in worst)} "
                f"({a_arr[worst]!r} vs {b_arr[worst]!r})"
            )
        return
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{path}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", rtol, atol, strict)
        return
    if isinstance(a, dict):
        if a.keys() != b.keys():
            raise AssertionError(f"{path}: keys {sorted(a)} != {sorted(b)}")
        for key in a:
            _compare(a[key], b[key], f"{path}[{key!r}]", rtol, atol, strict)
        return
    if a is None or isinstance(a, (str, bytes, bool, type)):
        if a != b:
            raise AssertionError(f"{path}: {a!r} != {b!r}")
        return
    if hasattr(a, "__dict__"):
        state_a, state_b = dict(vars(a)), dict(vars(b))
        if not strict:
            # The round-start record is bookkeeping of the merge, not learned state.
            state_a.pop(_START_ATTR, None)
            state_b.pop(_START_ATTR, None)
        _compare(state_a, state_b, path, rtol, atol, strict)
    # Other objects (Cython loss functions, ...) have no comparable state: same type is enough.


def _learned_attributes(estimator, rule):
    public = [k for k in vars(estimator) if k.endswith("_") and not k.startswith("__")]
    private = [k for k in rule.private_state if hasattr(estimator, k)]
    return sorted(set(public) | set(private))


def _assert_same_state(got, expected, rule, what, rtol, atol):
    got_names = _learned_attributes(got, rule)
    expected_names = _learned_attributes(expected, rule)
    if got_names != expected_names:
        raise AssertionError(
            f"{what}: the fitted attributes differ: only in the merge "
            f"{sorted(set(got_names) - set(expected_names))}, only in the reference "
            f"{sorted(set(expected_names) - set(got_names))}"
        )
    for name in got_names:
        _compare(
            getattr(got, name), getattr(expected, name), f"{what}: attribute {name!r}", rtol, atol
        )


def _arrays(value, seen=None):
    """Every ndarray reachable from ``value`` through containers and ``__dict__``."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _arrays(item, seen)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _arrays(item, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        for item in vars(value).values():
            yield from _arrays(item, seen)


# -- running a rule the way the engine does -----------------------------------------------


def _accepts_classes(estimator):
    parameters = inspect.signature(estimator.partial_fit).parameters
    return "classes" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _partial_fit(estimator, X, y, classes):
    """``estimator.partial_fit`` on one chunk; returns the estimator (some return None)."""
    if y is None:
        estimator.partial_fit(X)
    elif classes is not None and _accepts_classes(estimator):
        estimator.partial_fit(X, y, classes=classes)
    else:
        estimator.partial_fit(X, y)
    return estimator


def _chunk_bounds(n_samples, n_chunks, rng):
    """Ragged chunk boundaries (sizes within about 30% of each other), rows kept in order."""
    if n_samples < n_chunks:
        raise ValueError(
            f"check_merge needs at least {n_chunks} rows for {n_chunks // 2} replicas over "
            f"two rounds, got {n_samples}; pass more rows or fewer n_replicas."
        )
    sizes = rng.uniform(0.7, 1.3, size=n_chunks)
    sizes = np.maximum(1, np.floor(sizes / sizes.sum() * n_samples)).astype(int)
    sizes[-1] += n_samples - sizes.sum()
    if sizes[-1] < 1:
        sizes = np.full(n_chunks, n_samples // n_chunks)
        sizes[-1] += n_samples - sizes.sum()
    return np.concatenate([[0], np.cumsum(sizes)])


def _rows(data, start, stop):
    return None if data is None else _safe_indexing(data, np.arange(start, stop))


def _use_output(estimator, X):
    for method in ("predict", "transform", "score_samples"):
        if hasattr(estimator, method):
            getattr(estimator, method)(X)
            return method
    return None


def _check_round(
    rule, replicas, weights, exact, reference, idle, X_probe, chunk, classes, rtol, atol, name
):
    """Merge one round's replicas and check laws (a), (b), (c), (e) and (f).

    ``idle`` is the round's start when it is fitted (round 2), else None.
    """
    kept = [copy.deepcopy(r) for r in replicas]
    merged = _merge_with(rule, replicas, weights)

    # (a) the inputs are untouched and share no memory with the result
    for i, (before, after) in enumerate(zip(kept, replicas)):
        try:
            _compare(vars(after), vars(before), f"replica {i}", 0.0, 0.0, strict=True)
        except AssertionError as error:
            raise AssertionError(f"{name}: the merge mutated its input: {error}") from None
    merged_arrays = list(_arrays(merged))
    for i, replica in enumerate(replicas):
        for ours in merged_arrays:
            for theirs in _arrays(replica):
                if np.may_share_memory(ours, theirs):
                    raise AssertionError(
                        f"{name}: the merged estimator shares an array of shape "
                        f"{ours.shape} with replica {i}; return copies, or the next "
                        f"partial_fit will write into the replica."
                    )

    # (b) same class, usable, trainable again
    if type(merged) is not type(replicas[0]):
        raise AssertionError(f"{name}: the merge returned {type(merged).__name__}")
    _use_output(merged, X_probe)
    _partial_fit(copy.deepcopy(merged), *chunk, classes)

    # (c) merging one replica gives that replica back
    if reference == "serial" or idle is None:
        single = _merge_with(rule, [replicas[0]], [weights[0]])
        _assert_same_state(single, replicas[0], rule, f"{name}: merging one replica", rtol, atol)

    # (f) a replica that saw no rows (a copy of the round's start) changes nothing
    if idle is not None:
        with_idle = _merge_with(rule, [replicas[0], copy.deepcopy(idle)], [weights[0], 0.0])
        alone = _merge_with(rule, [replicas[0]], [weights[0]])
        _assert_same_state(
            with_idle, alone, rule, f"{name}: adding a replica that saw no rows", rtol, atol
        )

    # (e) exact merges do not depend on the order of the replicas
    if exact and len(replicas) > 1:
        backwards = _merge_with(rule, replicas[::-1], weights[::-1])
        _assert_same_state(backwards, merged, rule, f"{name}: merging in reverse order", rtol, atol)
    return merged


def _exact_for(rule, fitted):
    """The rule's exactness for this configuration, once a fitted replica tells."""
    if rule.exact and rule.exact_when is not None:
        return rule.exact_when(fitted) is not False
    return rule.exact


def check_merge(
    estimator,
    X,
    y=None,
    *,
    n_replicas=3,
    classes=None,
    exact=None,
    rtol=1e-10,
    atol=1e-12,
    random_state=0,
    rule=None,
):
    """Check that a merge rule keeps the laws the data-parallel engine relies on.

    Splits the rows, in order, into ``2 * n_replicas`` ragged chunks and runs two
    synchronous rounds as the engine does: :func:`~taskdml.parallel.merge.prepare_start`
    on the first chunk, one replica per chunk trained from the global estimator, a merge,
    and a second round from the merged estimator. Each round checks that

    (a) the merge does not mutate its inputs, nor return arrays they share;
    (b) it returns an estimator of the same class that can predict/transform and
        ``partial_fit`` again;
    (c) merging a single replica gives that replica's state (in round 2 only for rules
        whose reference is ``"serial"``: a ``"one_call"`` rule deliberately differs from a
        replica that has run a chunked ``partial_fit``);
    (e) for exact rules, the result does not depend on the order of the replicas;
    (f) in round 2, adding a replica that saw no rows (weight 0, a copy of the start)
        changes nothing -- a rule that sums what it should average breaks this;

    and for exact rules, (d) the final merge equals one pass over all chunks in order
    (``partial_fit`` chunk by chunk, or one ``partial_fit`` on all rows for a rule whose
    ``reference`` is ``"one_call"``). States are compared attribute by attribute: every
    attribute ending in ``_`` plus the rule's ``private_state``.

    Parameters
    ----------
    estimator : estimator
        An unfitted estimator with a registered rule (or pass ``rule``).
    X, y : array-like
        Data; ``y=None`` for transformers and clusterers.
    n_replicas : int, default=3
        Replicas per round.
    classes : array-like, optional
        All classes, passed to every ``partial_fit`` that accepts them.
    exact : bool, optional
        Check the exact laws (d) and (e); defaults to the rule's ``exact`` (narrowed by its
        ``exact_when`` on a fitted replica).
    rtol, atol : float
        Tolerances for floating-point state.
    random_state : int, default=0
        Seeds the chunk sizes.
    rule : MergeRule, optional
        The rule to check; defaults to the registered one.

    Returns
    -------
    estimator
        The merged estimator of round 2.

    Raises
    ------
    AssertionError
        Naming the law and the attribute that broke it.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.naive_bayes import GaussianNB
    >>> from taskdml.testing import check_merge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(120, 3)), rng.integers(0, 2, 120)
    >>> merged = check_merge(GaussianNB(), X, y, classes=[0, 1])
    >>> int(merged.class_count_.sum())
    120
    """
    rule = rule if rule is not None else get_merge_rule(estimator)
    if rule is None:
        raise AssertionError(f"No merge rule to check: {unmergeable_reason(estimator)}")
    if not isinstance(rule, MergeRule):
        raise TypeError(f"check_merge: rule must be a MergeRule, got {rule!r}.")
    name = f"{type(estimator).__name__} ({rule.family} rule)"
    rng = np.random.default_rng(random_state)
    bounds = _chunk_bounds(_num_samples(X), 2 * n_replicas, rng)
    chunks = [(_rows(X, a, b), _rows(y, a, b)) for a, b in zip(bounds[:-1], bounds[1:])]
    X_probe = chunks[0][0]

    start = _prepare_with(rule, estimator, *chunks[0], classes)
    global_ = start
    for round_ in range(2):
        round_chunks = chunks[round_ * n_replicas : (round_ + 1) * n_replicas]
        replicas = [_partial_fit(copy.deepcopy(global_), *chunk, classes) for chunk in round_chunks]
        if exact is None:
            exact = _exact_for(rule, replicas[0])
        weights = [float(_num_samples(chunk[0])) for chunk in round_chunks]
        global_ = _check_round(
            rule,
            replicas,
            weights,
            exact,
            rule.reference,
            None if round_ == 0 else global_,
            X_probe,
            round_chunks[0],
            classes,
            rtol,
            atol,
            f"{name}, round {round_ + 1}",
        )

    if exact:
        pass_name = "one partial_fit" if rule.reference == "one_call" else "a serial pass"
        serial = copy.deepcopy(start)
        if rule.reference == "one_call":
            _partial_fit(serial, X, y, classes)
        else:
            for chunk in chunks:
                _partial_fit(serial, *chunk, classes)
        _assert_same_state(
            global_,
            serial,
            rule,
            f"{name}: two merged rounds vs {pass_name} over all rows",
            rtol,
            atol,
        )
    return global_
