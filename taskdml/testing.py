"""Conformance checks for users' extensions of taskdml.

:func:`check_merge` runs a merge rule the way the data-parallel engine does -- a prepared
start, replicas trained on different chunks, a merge, a second round from the merged
estimator -- and checks the laws every rule must keep, and for exact rules the laws that
make them exact, and for averaging rules the laws that tell an average from a wrong one
(a copy of one replica, a sum, an unweighted mean). It needs no Dask.
"""

import copy
import inspect

import numpy as np

from taskdml._compat import _num_samples, _safe_indexing
from taskdml.parallel import MergeRule, get_merge_rule, unmergeable_reason
from taskdml.parallel.merge._registry import (
    _START_ATTR,
    _finish_with,
    _merge_with,
    _prepare_with,
    _same_value,
)

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


# -- the laws of an average ---------------------------------------------------------------
#
# Which learned arrays a built-in rule averages (a weighted mean by rows seen, so each lies
# in the replicas' convex hull), by family. The other families cannot keep these laws, and
# wrong rules break their other laws instead:
# - exact families (naive Bayes, scalers, IncrementalPCA) add statistics or pool moments:
#   a sum is right for them, and law (d), equality with one pass, tells a wrong rule;
# - "minibatch-kmeans" pools the points each centre absorbed, so a merged centre moves as
#   far as all the round's points take it, outside the replicas' hull when they all pulled
#   it the same way; "minibatch-nmf" adds decayed update sums and recomputes H from them;
# - the ASGD running means (``_average_coef``) are pooled over all iterates, not averaged;
# - "stateless" (HashingVectorizer) learns nothing: any replica is the merge;
# - meta-estimators hold sub-estimators: their averaged arrays are the wrapped family's;
# - "mlp" adds every replica's change to the round's start (a compensation for the steps an
#   average loses): its weights leave the hull by design, and merging R copies of one replica
#   moves R times as far. Only its opt-out, "mlp-averaged", averages.
_AVERAGED = {
    "linear-sgd": lambda e: (
        ("_standard_coef", "_standard_intercept")
        if e.average
        else ("coef_", "intercept_", "offset_")
    ),
    "mlp-averaged": lambda e: ("coefs_", "intercepts_"),
    "rbm": lambda e: ("components_", "intercept_hidden_", "intercept_visible_"),
    "online-lda": lambda e: ("components_",),
    "dictionary-learning": lambda e: ("components_", "_A", "_B"),
}
# Families whose rule reads each replica's rows from its own counter (``t_``) rather than
# from ``weights``: swapping the weights rightly changes nothing for them, so law (j) checks
# only that their average is not the unweighted one.
_SHARES_FROM_COUNTERS = {"linear-sgd", "mlp-averaged"}


def _registered_family(estimator):
    rule = get_merge_rule(type(estimator))
    return None if rule is None else rule.family


def _shares_from_counters(estimator):
    family = _registered_family(estimator)
    if family == "meta":
        inner = getattr(estimator, "estimator", None)
        return inner is not None and _registered_family(inner) in _SHARES_FROM_COUNTERS
    return family in _SHARES_FROM_COUNTERS


def _as_arrays(value):
    if isinstance(value, (list, tuple)):
        return [np.asarray(v, dtype=float) for v in value]
    return [np.asarray(value, dtype=float)]


def _averaged_parts(estimator, averaged=None):
    """``{path: getter}`` of the arrays the rule for *estimator* averages by rows seen."""
    if averaged is not None:
        names = tuple(averaged)
    else:
        family = _registered_family(estimator)
        if family == "meta":
            return _meta_parts(estimator)
        names = _AVERAGED[family](estimator) if family in _AVERAGED else ()
    return {
        name: (lambda e, name=name: _as_arrays(getattr(e, name)))
        for name in names
        if hasattr(estimator, name)
    }


def _meta_parts(estimator):
    parts = {}
    if hasattr(estimator, "estimators_"):
        for i, sub in enumerate(estimator.estimators_):
            for path, get in _averaged_parts(sub).items():
                parts[f"estimators_[{i}].{path}"] = lambda e, i=i, get=get: get(e.estimators_[i])
    elif hasattr(estimator, "estimator_"):
        for path, get in _averaged_parts(estimator.estimator_).items():
            parts[f"estimator_.{path}"] = lambda e, get=get: get(e.estimator_)
    return parts


def _tolerance(values, rtol, atol):
    dtype = np.result_type(*[np.asarray(v).dtype for v in values])
    eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else 0.0
    scale = np.max([np.abs(v) for v in values], axis=0)
    return atol + max(rtol, 64 * eps) * scale


def _states_differ(a, b, rule, rtol, atol):
    try:
        _assert_same_state(a, b, rule, "", rtol, atol)
    except AssertionError:
        return True
    return False


def _check_differs_from_every_replica(merged, replicas, rule, name, rtol, atol):
    """Law (g): when the replicas moved apart, the merge is none of them."""
    if not any(_states_differ(replicas[0], r, rule, rtol, atol) for r in replicas[1:]):
        return  # nothing was learned that tells them apart (a stateless estimator)
    for i, replica in enumerate(replicas):
        if not _states_differ(merged, replica, rule, rtol, atol):
            raise AssertionError(
                f"{name}: the merge of {len(replicas)} replicas that moved apart equals "
                f"replica {i}; a merge must combine them (keeping one replica drops the "
                f"others' rows)."
            )


def _close(a, b, rtol, atol):
    return all(
        x.shape == y.shape and np.all(np.abs(x - y) <= _tolerance([x, y], rtol, atol))
        for x, y in zip(a, b)
    )


def _check_average_laws(rule, replicas, weights, merged, parts, name, rtol, atol):
    """Laws (h), (i) and (j) on the arrays the rule averages."""
    for path, get in parts.items():
        values = [get(r) for r in replicas]
        # (h) each averaged array lies in the replicas' convex hull, element by element
        for k, ours in enumerate(get(merged)):
            theirs = [v[k] for v in values]
            low, high = np.min(theirs, axis=0), np.max(theirs, axis=0)
            slack = _tolerance(theirs, rtol, atol)
            outside = (ours < low - slack) | (ours > high + slack)
            if np.any(outside):
                where = tuple(int(i) for i in np.argwhere(outside)[0])
                raise AssertionError(
                    f"{name}: attribute {path!r} of the merge leaves the replicas' convex "
                    f"hull at index {where} ({ours[where]!r} not in [{low[where]!r}, "
                    f"{high[where]!r}]): an average of the replicas cannot (a sum can)."
                )

    # (i) merging R copies of one replica gives that replica's averaged arrays
    copies = _merge_with(
        rule, [copy.deepcopy(replicas[0]) for _ in replicas], weights[:1] * len(replicas)
    )
    for path, get in parts.items():
        if not _close(get(copies), get(replicas[0]), rtol, atol):
            raise AssertionError(
                f"{name}: merging {len(replicas)} copies of one replica changes its "
                f"attribute {path!r}; an average of equal values is that value."
            )

    # (j) with unequal rows the rows count: the average is not the unweighted mean, and
    # (for rules that take the rows from ``weights``) swapping two weights changes it
    if len(set(weights)) == 1 or len(replicas) < 2:
        return
    moved = [
        path
        for path, get in parts.items()
        if not _close(get(replicas[0]), get(replicas[1]), rtol, atol)
    ]
    if not moved:
        return
    unweighted = {
        path: [np.mean(arrays, axis=0) for arrays in zip(*[parts[path](r) for r in replicas])]
        for path in moved
    }
    if all(_close(parts[path](merged), unweighted[path], rtol, atol) for path in moved):
        raise AssertionError(
            f"{name}: replicas that saw {weights} rows merge into the unweighted mean of "
            f"{moved}; weight each replica by the rows it saw."
        )
    if _shares_from_counters(replicas[0]):
        return
    pair, pair_weights = replicas[:2], weights[:2]
    if pair_weights[0] == pair_weights[1]:
        return
    forward = _merge_with(rule, pair, pair_weights)
    swapped = _merge_with(rule, pair, pair_weights[::-1])
    if all(_close(parts[p](forward), parts[p](swapped), rtol, atol) for p in moved):
        raise AssertionError(
            f"{name}: swapping the weights {pair_weights} of two replicas does not change "
            f"{moved}; the merge must weight each replica by the rows it saw."
        )


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


def _assert_usable(estimator, X_probe, chunk, classes, what):
    """Raise AssertionError unless *estimator* predicts/transforms *X_probe* and trains
    again with ``partial_fit`` on *chunk* (a copy; *what* names it in the message)."""
    try:
        _use_output(estimator, X_probe)
        _partial_fit(copy.deepcopy(estimator), *chunk, classes)
    except Exception as error:
        raise AssertionError(
            f"{what} cannot predict/transform or partial_fit again: {type(error).__name__}: {error}"
        ) from error


def _use_output(estimator, X):
    for method in ("predict", "transform", "score_samples"):
        if hasattr(estimator, method):
            getattr(estimator, method)(X)
            return method
    return None


def _check_round(
    rule,
    replicas,
    weights,
    exact,
    reference,
    idle,
    X_probe,
    chunk,
    classes,
    rtol,
    atol,
    name,
    averaged,
):
    """Merge one round's replicas and check laws (a) to (j).

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
    _assert_usable(merged, X_probe, chunk, classes, f"{name}: the merged estimator")

    # (g) replicas that moved apart merge into something that is none of them
    _check_differs_from_every_replica(merged, replicas, rule, name, rtol, atol)
    parts = _averaged_parts(replicas[0], averaged)
    if parts:
        _check_average_laws(rule, replicas, weights, merged, parts, name, rtol, atol)

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


_NO_PARAM = object()
_PLAIN_PARAMS = (type(None), bool, int, float, complex, str, bytes, np.number, np.ndarray)


def _param_differences(asked, got, prefix=""):
    """The parameters (``get_params(deep=False)``, recursing into estimators) that differ;
    random generators are skipped, and other objects compared by type only."""
    differ = []
    ours, theirs = asked.get_params(deep=False), got.get_params(deep=False)
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name, _NO_PARAM), theirs.get(name, _NO_PARAM)
        if _is_random_state(a) or _is_random_state(b):
            continue
        if hasattr(a, "get_params") and not isinstance(a, type):
            if type(a) is not type(b):
                differ.append(prefix + name)
            else:
                differ.extend(_param_differences(a, b, f"{prefix}{name}."))
        elif isinstance(a, (*_PLAIN_PARAMS, list, tuple, dict)):
            if not _same_value(a, b):
                differ.append(prefix + name)
        elif type(a) is not type(b):
            differ.append(prefix + name)
    return differ


def _check_handed_back(estimator, merged, rule, chunk, X_probe, classes, name, rtol, atol):
    """Law (k) on the estimator a training would hand back after *merged*; returns it."""
    handed = _finish_with(rule, copy.deepcopy(merged))
    if type(handed) is not type(estimator):
        raise AssertionError(
            f"{name}: the estimator handed back is a {type(handed).__name__}, not a "
            f"{type(estimator).__name__}"
        )
    differ = _param_differences(estimator, handed)
    if differ:
        raise AssertionError(
            f"{name}: the estimator handed back has other parameters than the one asked "
            f"for: {differ}; a rule whose prepare changes parameters needs a finish that "
            f"restores them."
        )
    again = _finish_with(rule, copy.deepcopy(handed))
    _assert_same_state(again, handed, rule, f"{name}: finishing twice", rtol, atol)
    _assert_usable(handed, X_probe, chunk, classes, f"{name}: the estimator handed back")
    return handed


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
    averaged=None,
):
    """Check that a merge rule keeps the laws the data-parallel engine relies on.

    Splits the rows, in order, into ``2 * n_replicas`` ragged chunks and runs two
    synchronous rounds as the engine does: :func:`~taskdml.parallel.prepare_start`
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
    (g) when the replicas moved apart, the merge equals none of them (keeping one replica
        breaks this);

    and for the arrays the rule averages by rows seen (``averaged``; for built-in families
    the ones their rule averages, for example ``coef_`` and ``intercept_`` of SGD):

    (h) each lies, element by element, between the replicas' smallest and largest value
        (their convex hull): a sum leaves it;
    (i) merging ``n_replicas`` copies of one replica gives that replica's values;
    (j) with unequal rows, the merge is not the unweighted mean, and for rules that take
        the rows from ``weights`` (not from a counter such as SGD's ``t_``) swapping two
        unequal weights changes it;

    and for exact rules, (d) the final merge equals one pass over all chunks in order
    (``partial_fit`` chunk by chunk from the prepared start, or one ``partial_fit`` on all
    rows for a rule whose ``reference`` is ``"one_call"``), and so do the two as a training
    hands them back (the rule's ``finish`` applied). States are compared attribute by
    attribute: every attribute ending in ``_`` plus the rule's ``private_state``. Finally

    (k) the estimator a training hands back (the round-2 merge without its round-start
        record, finished by the rule's ``finish``) is of the estimator's class, has the
        parameters asked for (a ``prepare`` that changes them, as IncrementalPCA's gives its
        replicas every component, needs a ``finish`` that restores them), is unchanged by
        finishing it again, and can predict/transform and ``partial_fit`` again.

    IncrementalPCA's law is (d) at any ``n_components``: the replicas of its prepared start
    keep every component, so two merged rounds equal the serial pass of that start, and
    handed back (truncated once) they equal batch PCA of the rows.

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
    averaged : sequence of str, optional
        Fitted attributes (arrays, or lists of arrays such as ``coefs_``) the rule
        averages by rows seen, for laws (h) to (j); defaults to those of the built-in rule
        registered for the estimator's class, and to none for other classes.

    Returns
    -------
    estimator
        The merged estimator of round 2, as a training hands it back (law (k)).

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
            averaged,
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
        _assert_same_state(
            _finish_with(rule, copy.deepcopy(global_)),
            _finish_with(rule, serial),
            rule,
            f"{name}: two merged rounds vs {pass_name} over all rows, as handed back",
            rtol,
            atol,
        )
    return _check_handed_back(
        estimator, global_, rule, chunks[0], X_probe, classes, f"{name}, handed back", rtol, atol
    )
