"""The merge-rule registry and the two calls the data-parallel engine makes.

A merge rule knows how to fold replicas of one estimator family back into one global
estimator. The registry maps estimator classes to rules and is searched along the class's
MRO, so a subclass inherits its parent's rule unless it registers its own.

Rules for additive statistics (naive Bayes counts, scaler moments, k-means counts) need the
state the round *started* from: each replica holds ``start + its chunks``, so summing replicas
counts the start once per replica. The merge signature is fixed at ``fn(replicas, weights)``,
so the start travels inside the replicas instead: :func:`prepare_start` and
:func:`merge_replicas` leave on the estimator they return a small snapshot of the attributes
the rule lists in ``MergeRule.start_state`` (attribute ``_taskdml_round_start``). The engine
broadcasts that estimator, each worker ``partial_fit``\\s its copy (which leaves the snapshot
alone), and the next merge reads it back with :func:`round_start`. No snapshot means the round
started from an unfitted estimator.

When the training ends, :func:`without_round_start` drops the snapshot and applies the rule's
``finish``, for rules whose replicas carry more than the user asked for (IncrementalPCA's keep
every component, and are truncated to ``n_components`` once, there).

The built-in rules live in :mod:`taskdml.parallel.merge._builtin`, which registers them when
it is imported; it is the registry's lazy loader (:class:`taskdml._registry.ClassRegistry`), so
the rules are known in any process that merges, a worker that has unpickled only a replica's
task function included, and a user's rule registered for a built-in class is not overwritten by
them later. A class maps to its :class:`MergeRule` or, when it cannot be merged, to an
:class:`_Unmergeable` reason.
"""

import copy
import dataclasses
from collections.abc import Callable

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from taskdml._registry import ClassRegistry

_START_ATTR = "_taskdml_round_start"

RULES = ClassRegistry()
"""Every class's :class:`MergeRule` or :class:`_Unmergeable` reason."""
RULES.register_lazy("taskdml.parallel.merge._builtin")


@dataclasses.dataclass(frozen=True)
class _Unmergeable:
    reason: str


@dataclasses.dataclass(frozen=True)
class MergeRule:
    """How to merge the replicas of one estimator family.

    Parameters
    ----------
    fn : callable
        ``fn(replicas, weights) -> estimator``. ``replicas`` are fitted copies that all
        started from the same global estimator and each ran ``partial_fit`` on different
        chunks; ``weights`` are the rows each replica saw this round. Returns a new
        estimator (inputs untouched) whose whole learned state, private parts included,
        is the merge.
    exact : bool
        Whether the merge equals one pass of ``partial_fit`` over all the data (see
        ``reference``), up to floating-point rounding.
    exact_when : callable or None
        ``exact_when(estimator) -> bool | None`` narrows ``exact`` for one configuration
        (IncrementalPCA's opt-out rule, whose replicas keep only ``n_components``, is exact
        only without truncation); None means it cannot tell yet (an unfitted estimator),
        and ``exact`` stands.
    prepare : callable or None
        ``prepare(estimator, X_first_chunk, y_first_chunk, classes) -> estimator``: a new,
        initialised but untrained estimator, so that every replica starts from the same
        random initialisation. Given an already fitted estimator it returns a copy of it.
    family : str
        Short name of the estimator family, for messages and logs.
    notes : str
        What the rule does and where it is approximate.
    reference : {"serial", "one_call"}
        What an exact merge equals: ``"serial"``, ``partial_fit`` over the chunks in order;
        ``"one_call"``, a single ``partial_fit`` over all rows at once (for estimators whose
        chunked ``partial_fit`` depends on the chunking, such as ``GaussianNB.epsilon_``).
    private_state : tuple of str
        Private attributes the rule merges; :func:`taskdml.testing.check_merge` compares
        them along with every public fitted attribute (name ending in ``_``).
    start_state : tuple of str
        Attributes (dotted paths allowed, such as ``"_optimizer.t"``) whose values at the
        start of the round the rule needs; read them with :func:`round_start`.
    min_rows : callable or None
        ``min_rows(estimator, n_features) -> int``: the fewest rows one ``partial_fit`` batch
        of this configuration accepts (``IncrementalPCA``: ``n_features``, as its replicas
        keep every component). The engine merges smaller chunks with their neighbours so
        that every block a replica trains on holds at least that many. None means any
        non-empty batch.
    finish : callable or None
        ``finish(estimator) -> None``: turns, in place, the global estimator of a finished
        training into the one handed back to the user, for rules whose ``prepare`` gives the
        replicas more state than the user asked for (IncrementalPCA's replicas keep every
        component; ``finish`` truncates once to ``n_components``). It is applied by
        :func:`without_round_start`, so the engine, the federated training and the scores
        taken between epochs all see the finished estimator. It must leave alone an
        estimator that ``prepare`` never saw (a sequential pass) or that it already
        finished. None: the global estimator is handed back as it is.
    batch_rows : callable or None
        ``batch_rows(estimator) -> int``: the rows of one mini-batch as the family's own
        ``fit`` takes them, for families whose ``partial_fit`` takes all it is given as one
        mini-batch (MiniBatchKMeans, MiniBatchNMF, MiniBatchDictionaryLearning,
        BernoulliRBM: their ``batch_size``). The engine feeds a training block to
        ``partial_fit`` in consecutive slices of about that many rows
        (:func:`~taskdml.parallel.engine._tasks.fit_chunk`), so a block of 100,000 rows is
        a hundred steps, as in ``fit``, rather than one. None: one call per block (SGD steps
        row by row, an MLP and LDA slice their argument themselves).
    stopping : callable or None
        ``stopping(estimator, n_samples) -> Stopping``: how far this family's own ``fit``
        trains, read from the estimator's parameters
        (:mod:`taskdml.parallel.merge._stopping`); the engine follows it when asked to train
        as far as ``fit`` would (``epochs="auto"``). None means one pass.
    """

    fn: Callable
    exact: bool = False
    exact_when: Callable | None = None
    prepare: Callable | None = None
    family: str = ""
    notes: str = ""
    reference: str = "serial"
    private_state: tuple = ()
    start_state: tuple = ()
    min_rows: Callable | None = None
    stopping: Callable | None = None
    finish: Callable | None = None
    batch_rows: Callable | None = None
    min_merges: int | None = None

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(f"MergeRule.fn must be callable, got {self.fn!r}.")
        if self.min_rows is not None and not callable(self.min_rows):
            raise TypeError(f"MergeRule.min_rows must be callable or None, got {self.min_rows!r}.")
        if self.prepare is not None and not callable(self.prepare):
            raise TypeError(f"MergeRule.prepare must be callable or None, got {self.prepare!r}.")
        if self.stopping is not None and not callable(self.stopping):
            raise TypeError(f"MergeRule.stopping must be callable or None, got {self.stopping!r}.")
        for name in ("finish", "batch_rows"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"MergeRule.{name} must be callable or None, got {value!r}.")
        if self.min_merges is not None and (
            isinstance(self.min_merges, bool)
            or not isinstance(self.min_merges, int)
            or self.min_merges < 1
        ):
            raise ValueError(
                f"MergeRule.min_merges must be an integer >= 1 or None, got {self.min_merges!r}."
            )
        if self.reference not in ("serial", "one_call"):
            raise ValueError(
                f"MergeRule.reference must be 'serial' or 'one_call', got {self.reference!r}."
            )


def register_merge(
    estimator_class,
    merge_fn,
    *,
    exact=False,
    exact_when=None,
    prepare=None,
    family=None,
    notes="",
    reference="serial",
    private_state=(),
    start_state=(),
    min_rows=None,
    stopping=None,
    finish=None,
    batch_rows=None,
    min_merges=None,
):
    """Register how replicas of ``estimator_class`` (and its subclasses) are merged.

    Parameters
    ----------
    estimator_class : type
        The estimator class; subclasses inherit the rule unless they register their own.
    merge_fn : callable
        ``merge_fn(replicas, weights) -> estimator``; see :class:`MergeRule`.
    exact, exact_when, prepare, finish, family, notes, reference, private_state, start_state,
    stopping, batch_rows, min_merges
        See :class:`MergeRule`. ``family`` defaults to the class name.
    min_rows
        See :class:`MergeRule`.

    Returns
    -------
    MergeRule
        The registered rule; it replaces any earlier rule or unmergeable mark for the class.

    Examples
    --------
    >>> import copy
    >>> from sklearn.naive_bayes import MultinomialNB
    >>> from taskdml.parallel import get_merge_rule, register_merge
    >>> class MyNB(MultinomialNB):
    ...     pass
    >>> def keep_first(replicas, weights):
    ...     return copy.deepcopy(replicas[0])
    >>> rule = register_merge(MyNB, keep_first, family="demo")
    >>> get_merge_rule(MyNB()).family
    'demo'
    """
    if not isinstance(estimator_class, type):
        raise TypeError(
            f"register_merge expects an estimator class, got {estimator_class!r}; "
            f"pass type(estimator) to register the class of an instance."
        )
    rule = MergeRule(
        fn=merge_fn,
        exact=bool(exact),
        exact_when=exact_when,
        prepare=prepare,
        family=family or estimator_class.__name__,
        notes=notes,
        reference=reference,
        private_state=tuple(private_state),
        start_state=tuple(start_state),
        min_rows=min_rows,
        stopping=stopping,
        finish=finish,
        batch_rows=batch_rows,
        min_merges=min_merges,
    )
    RULES.register(estimator_class, rule)
    return rule


def register_unmergeable(estimator_class, reason):
    """Mark ``estimator_class`` (and its subclasses) as impossible to merge, with the reason.

    The engine trains such estimators with one sequential pass and warns with ``reason``.

    Parameters
    ----------
    estimator_class : type
        The estimator class; its subclasses inherit the mark.
    reason : str
        Why it cannot be merged, quoted in the engine's warning.

    Examples
    --------
    >>> from sklearn.cluster import Birch
    >>> from taskdml.parallel import register_unmergeable, unmergeable_reason
    >>> class MyBirch(Birch):
    ...     pass
    >>> register_unmergeable(MyBirch, "demo reason")
    >>> unmergeable_reason(MyBirch())
    'MyBirch cannot be merged: demo reason'
    """
    if not isinstance(estimator_class, type):
        raise TypeError(f"register_unmergeable expects a class, got {estimator_class!r}.")
    RULES.register(estimator_class, _Unmergeable(str(reason)))


def _lookup(cls):
    """The first rule or unmergeable reason along ``cls``'s MRO, as ``(rule, reason)``."""
    found = RULES.lookup(cls)
    if isinstance(found, _Unmergeable):
        return None, found.reason
    return found, None


def _inner_estimator(estimator):
    """The estimator a meta-estimator instance wraps, or None."""
    if isinstance(estimator, type):
        return None
    inner = getattr(estimator, "estimator", None)
    if inner is None or isinstance(inner, str) or not hasattr(inner, "get_params"):
        return None
    return inner


def get_merge_rule(estimator):
    """The merge rule for an estimator (instance or class), or None if it has none.

    Looks the class up along its MRO. For a meta-estimator instance
    (``OneVsRestClassifier(SGDClassifier())`` and the like) the rule is specialised to the
    wrapped estimator: None when that one cannot be merged, and exact only when its rule is.
    A rule's ``exact_when`` narrows ``exact`` for the instance's configuration.

    Parameters
    ----------
    estimator : estimator instance or class

    Returns
    -------
    MergeRule or None

    Examples
    --------
    >>> from sklearn.linear_model import Perceptron
    >>> from taskdml.parallel import get_merge_rule
    >>> rule = get_merge_rule(Perceptron())     # inherited from the SGD classifiers
    >>> rule.family, rule.exact
    ('linear-sgd', False)
    """
    cls = estimator if isinstance(estimator, type) else type(estimator)
    rule, _ = _lookup(cls)
    if rule is None or not hasattr(estimator, "partial_fit"):
        return None
    if rule.exact and rule.exact_when is not None and not isinstance(estimator, type):
        if rule.exact_when(estimator) is False:
            rule = dataclasses.replace(rule, exact=False)
    inner = _inner_estimator(estimator) if rule.family == "meta" else None
    if inner is not None:
        inner_rule = get_merge_rule(inner)
        if inner_rule is None:
            return None
        return dataclasses.replace(
            rule,
            exact=rule.exact and inner_rule.exact,
            reference=inner_rule.reference,
            notes=f"{rule.notes} Wrapped estimator: {inner_rule.family}.",
        )
    return rule


def min_batch_rows(estimator, n_features):
    """The fewest rows one ``partial_fit`` batch of *estimator* accepts (1 without a minimum).

    From the merge rule's ``min_rows``; for a meta-estimator, from the wrapped estimator's.
    """
    rule = get_merge_rule(estimator)
    if rule is None:
        return 1
    inner = _inner_estimator(estimator) if rule.family == "meta" else None
    if inner is not None:
        return max(1, min_batch_rows(inner, n_features))
    if rule.min_rows is None or isinstance(estimator, type):
        return 1
    return max(1, int(rule.min_rows(estimator, n_features)))


def batch_rows(estimator):
    """The rows of one ``partial_fit`` mini-batch as *estimator*'s ``fit`` takes them, or
    None where one ``partial_fit`` call per block is what ``fit`` would do (see
    :class:`MergeRule`'s ``batch_rows``; a meta-estimator's: None)."""
    rule = get_merge_rule(estimator)
    if rule is None or rule.batch_rows is None or isinstance(estimator, type):
        return None
    return max(1, int(rule.batch_rows(estimator)))


def unmergeable_reason(estimator):
    """Why an estimator (instance or class) cannot be merged, or None if it can.

    The text is meant to be quoted in the warning the engine gives when it falls back to a
    sequential pass.

    Parameters
    ----------
    estimator : estimator instance or class

    Returns
    -------
    str or None

    Examples
    --------
    >>> from sklearn.cluster import Birch
    >>> from sklearn.linear_model import SGDRegressor
    >>> from taskdml.parallel import unmergeable_reason
    >>> unmergeable_reason(SGDRegressor()) is None
    True
    >>> unmergeable_reason(Birch()).startswith("Birch cannot be merged")
    True
    """
    cls = estimator if isinstance(estimator, type) else type(estimator)
    name = cls.__name__
    rule, reason = _lookup(cls)
    if reason is not None:
        return f"{name} cannot be merged: {reason}"
    if not hasattr(estimator, "partial_fit"):
        return f"{name} has no partial_fit, so it cannot be trained data-parallel."
    if rule is None:
        return (
            f"no merge rule is registered for {name}; register one with "
            f"taskdml.parallel.register_merge({name}, merge_fn) to train it "
            f"data-parallel."
        )
    inner = _inner_estimator(estimator) if rule.family == "meta" else None
    if inner is not None:
        inner_reason = unmergeable_reason(inner)
        if inner_reason is not None:
            return f"{name} wraps {type(inner).__name__}: {inner_reason}"
    return None


def _require_rule(estimator, what):
    rule = get_merge_rule(estimator)
    if rule is None:
        raise ValueError(
            f"Cannot {what} {type(estimator).__name__}: {unmergeable_reason(estimator)}"
        )
    return rule


# -- the round-start snapshot -------------------------------------------------------------

_MISSING = object()


def _get_path(obj, path):
    for name in path.split("."):
        obj = getattr(obj, name, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


def _record_start(estimator, rule):
    """Store on ``estimator`` the values of ``rule.start_state`` it has now."""
    if not rule.start_state:
        return
    snapshot = {}
    for path in rule.start_state:
        value = _get_path(estimator, path)
        if value is not _MISSING:
            snapshot[path] = copy.deepcopy(value)
    setattr(estimator, _START_ATTR, snapshot)


def restart_from(estimator, replica):
    """A copy of *estimator* whose round-start record is *replica*'s.

    The parameter server merges its current global estimator with a replica that started
    from an older version; both must claim the same start for the merge to count the
    replica's own progress once.
    """
    ahead = copy.deepcopy(estimator)
    setattr(ahead, _START_ATTR, copy.deepcopy(getattr(replica, _START_ATTR, None)))
    return ahead


def without_round_start(estimator):
    """*estimator* as handed back to users, in place: without the round-start record, and
    finished by its rule's ``finish`` (IncrementalPCA truncated to ``n_components``).

    Idempotent. Score an estimator between epochs through :func:`handed_back`, which leaves
    the global estimator (the next round's start) alone.
    """
    rule = get_merge_rule(estimator) if hasattr(estimator, "partial_fit") else None
    return _finish_with(rule, estimator)


def _finish_with(rule, estimator):
    """:func:`without_round_start` with *rule*'s ``finish`` (none when *rule* is None)."""
    estimator.__dict__.pop(_START_ATTR, None)
    if rule is not None and rule.finish is not None:
        rule.finish(estimator)
    return estimator


def handed_back(estimator):
    """What a training that stopped now would hand back: *estimator* itself when its rule
    has no ``finish``, else a finished copy (the global estimator stays the next start)."""
    rule = get_merge_rule(estimator) if hasattr(estimator, "partial_fit") else None
    if rule is None or rule.finish is None:
        return estimator
    return without_round_start(copy.deepcopy(estimator))


def round_start(replicas):
    """The round-start values a rule asked for, as ``{attribute path: value}``.

    Empty when the round started from an unfitted estimator. Attributes the start did not
    have yet are absent. Use it inside a merge function registered with ``start_state``.

    Parameters
    ----------
    replicas : list of estimators
        The replicas a merge function receives (the first carries the round start).

    Returns
    -------
    dict
        ``{attribute path: value}`` for the rule's ``start_state``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.preprocessing import MaxAbsScaler
    >>> from taskdml.parallel import merge_replicas, prepare_start, round_start
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> start = prepare_start(MaxAbsScaler(), X[:2])
    >>> round_start([start])
    {}
    >>> merged = merge_replicas([start.partial_fit(X)], [6])
    >>> int(round_start([merged])["n_samples_seen_"])
    6
    """
    return dict(getattr(replicas[0], _START_ATTR, None) or {})


def _same_value(a, b):
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        # NaN only in numeric arrays: feature_names_in_ is an object array of strings.
        numeric = a.dtype.kind in "fc" and b.dtype.kind in "fc"
        return np.array_equal(a, b, equal_nan=numeric)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b) or (a != a and b != b)
    except (TypeError, ValueError):
        return type(a) is type(b)


# -- the two calls the engine makes -------------------------------------------------------


def _check_replicas(replicas, weights):
    replicas = list(replicas)
    if not replicas:
        raise ValueError("merge_replicas got no replicas; pass at least one fitted estimator.")
    weights = np.asarray(list(weights), dtype=float)
    if weights.shape != (len(replicas),):
        raise ValueError(
            f"merge_replicas got {len(replicas)} replicas but {weights.size} weights; pass "
            f"one weight (the rows the replica saw this round) per replica."
        )
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(
            f"merge_replicas weights must be finite and non-negative, got {weights.tolist()!r}."
        )
    kinds = {type(r) for r in replicas}
    if len(kinds) > 1:
        raise TypeError(
            f"merge_replicas got replicas of different classes "
            f"{sorted(k.__name__ for k in kinds)!r}; all replicas must be copies of one estimator."
        )
    return replicas, weights.tolist()


def _check_agreement(replicas):
    first = replicas[0]
    for attr in ("classes_", "n_features_in_", "feature_names_in_"):
        if not hasattr(first, attr):
            continue
        for i, replica in enumerate(replicas[1:], start=1):
            if not _same_value(getattr(first, attr), getattr(replica, attr, None)):
                raise ValueError(
                    f"Replicas 0 and {i} disagree on {attr}: {getattr(first, attr)!r} != "
                    f"{getattr(replica, attr, None)!r}. Every replica must see the same "
                    f"columns, and classifiers need the same classes= on their first "
                    f"partial_fit."
                )


def _is_fitted(estimator):
    try:
        check_is_fitted(estimator)
    except NotFittedError:
        return False
    return True


def _merge_with(rule, replicas, weights):
    """Validate, merge with ``rule`` and record the next round's start on the result."""
    replicas, weights = _check_replicas(replicas, weights)
    # A replica of an unfitted start that saw no rows is still unfitted (one-vs-one leaves a
    # pair's estimator untouched when a chunk has neither class): it carries nothing.
    fitted = [i for i, replica in enumerate(replicas) if _is_fitted(replica)]
    if not fitted:
        merged = copy.deepcopy(replicas[0])
        _record_start(merged, rule)
        return merged
    replicas, weights = [replicas[i] for i in fitted], [weights[i] for i in fitted]
    _check_agreement(replicas)
    if rule.start_state:
        starts = [getattr(r, _START_ATTR, None) or {} for r in replicas]
        for i, other in enumerate(starts[1:], start=1):
            if starts[0].keys() != other.keys() or not all(
                _same_value(starts[0][k], other[k]) for k in starts[0]
            ):
                raise ValueError(
                    f"Replicas 0 and {i} did not start this round from the same global "
                    f"{type(replicas[0]).__name__}: broadcast the estimator returned by "
                    f"prepare_start or merge_replicas to every replica."
                )
    merged = rule.fn(replicas, weights)
    if type(merged) is not type(replicas[0]):
        raise TypeError(
            f"The {rule.family!r} merge returned {type(merged).__name__}, expected "
            f"{type(replicas[0]).__name__}."
        )
    if any(merged is r for r in replicas):
        raise ValueError(
            f"The {rule.family!r} merge returned one of its inputs; it must return a new "
            f"estimator (copy.deepcopy the replica it starts from)."
        )
    _record_start(merged, rule)
    return merged


def _prepare_with(rule, estimator, X, y=None, classes=None):
    if rule.prepare is not None:
        start = rule.prepare(estimator, X, y, classes)
        if start is estimator:
            raise ValueError(
                f"The {rule.family!r} prepare returned its input; it must return a new estimator."
            )
    else:
        start = copy.deepcopy(estimator)
    _record_start(start, rule)
    return start


def merge_replicas(replicas, weights, *, rule=None):
    """Merge the replicas of one round into the next global estimator.

    Checks that the replicas are of one class, agree on ``classes_`` and the features,
    and started from the same global estimator; calls the rule; and records on the result
    the start of the next round (see the module docstring).

    Parameters
    ----------
    replicas : list of estimators
        Copies of the global estimator (from :func:`prepare_start` or the last
        ``merge_replicas``), each ``partial_fit`` on different chunks.
    weights : list of float
        Rows each replica saw this round; 0 for a replica that saw none. Replicas that are
        still unfitted (a round that started unfitted, and no rows) are left out.

    Returns
    -------
    estimator
        A new estimator; broadcast it unchanged (no ``clone``) to start the next round.

    Examples
    --------
    >>> import copy
    >>> import numpy as np
    >>> from sklearn.preprocessing import StandardScaler
    >>> from taskdml.parallel import merge_replicas, prepare_start
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> start = prepare_start(StandardScaler(), X[:50])
    >>> a = copy.deepcopy(start).partial_fit(X[:50])
    >>> b = copy.deepcopy(start).partial_fit(X[50:])
    >>> merged = merge_replicas([a, b], [50, 50])
    >>> bool(np.allclose(merged.mean_, X.mean(axis=0)))
    True
    """
    replicas = list(replicas)
    if not replicas:
        raise ValueError("merge_replicas got no replicas; pass at least one fitted estimator.")
    rule = rule or _require_rule(replicas[0], "merge replicas of")
    return _merge_with(rule, replicas, weights)


def prepare_start(estimator, X, y=None, classes=None, *, rule=None):
    """The global estimator to broadcast before round 1.

    Runs the rule's ``prepare`` (so replicas share one random initialisation: MLP weights,
    k-means centres, ...) or copies the estimator, and records the round-start state.

    Engine contract: call it once, on the first chunk, before round 1 -- also for an
    estimator that is already fitted (warm start), since the merge of additive statistics
    needs to know where the round started. Broadcast its result unchanged; every replica
    ``partial_fit``\\s a copy (passing ``classes=`` is harmless on every call); merge them
    with :func:`merge_replicas`; broadcast that result; repeat. Never ``clone`` in between:
    clone drops the learned state and the round-start record.

    Parameters
    ----------
    estimator : estimator
        Unfitted, or fitted to continue training; it is not modified.
    X, y : array-like
        The first chunk (used only to initialise, never trained on).
    classes : array-like, optional
        All classes, for classifiers.
    rule : MergeRule, optional
        As in :func:`merge_replicas`.

    Returns
    -------
    estimator
        A new estimator.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.neural_network import MLPRegressor
    >>> from taskdml.parallel import prepare_start
    >>> X, y = np.ones((8, 2)), np.arange(8.0)
    >>> start = prepare_start(MLPRegressor(hidden_layer_sizes=(3,)), X, y)
    >>> [w.shape for w in start.coefs_], start.t_
    ([(2, 3), (3, 1)], 0)
    """
    return _prepare_with(rule or _require_rule(estimator, "prepare"), estimator, X, y, classes)
