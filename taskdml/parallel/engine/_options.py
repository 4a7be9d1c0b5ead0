"""The engine's options, declared once: one row per option, read by every entry point.

An option of data-parallel training is a keyword argument of :func:`train` that is not data
(``strategy``, ``epochs``, ``sync_every``, ...). The same option reaches the engine through
five doors: ``train`` itself, :class:`DataParallel`, :class:`ClassSharded`, the searches
(``GridSearchCV``, ``RandomizedSearchCV``: ``"search"``; ASHA, halving, Hyperband:
``"adaptive"``) and a pipeline step's ``parallel:`` block. :data:`OPTIONS` says, for each
option, in the spirit of scikit-learn's ``_parameter_constraints``:

- ``constraint``: what it accepts, as a predicate, a phrase for messages ("an integer >= 1")
  and a JSON Schema for the pipeline file;
- ``default`` and, in ``defaults``, the entry points whose default differs (a search trains
  each candidate as a chain of tasks unless told otherwise, ``ClassSharded`` merges after
  every chunk);
- ``doc``: one line, the pipeline file's description of the key;
- ``takers``: the entry points that accept it, and ``modes``: the ``parallel.mode``\\ s of a
  pipeline step that read it (an empty tuple: not a pipeline key).

From the table, :func:`check` validates an entry point's values with one message format
(``DataParallel: epochs must be an integer >= 1; got 0.``; ``train``, ``DataParallel`` and the
searches use it, ``ClassSharded`` still checks its own four), :func:`names` and
:func:`defaults` list what an entry point takes (tests compare them with the signatures), and
:func:`pipeline_properties` and :func:`mode_keys` write the pipeline file's ``parallel``
block (:mod:`taskdml.pipeline._schema`). An entry point's own default always passes its check
(``strategy=None`` is ``train``'s "choose", not a value the others accept).

:data:`RENAMED` holds the names this vocabulary replaced, accepted for one release with a
``FutureWarning``. May import only the base modules: the pipeline layer reads this module.
"""

import dataclasses
import numbers

from taskdml.exceptions import did_you_mean

__all__ = ["OPTIONS", "RENAMED", "Option", "check", "defaults", "mode_keys", "names"]

ENTRY_POINTS = ("train", "DataParallel", "ClassSharded", "search", "adaptive")
"""Who takes options: :func:`train`, the estimators, and the two families of searches."""

STRATEGIES = ("sync", "async", "sequential")
DATA_MODES = ("auto", "persist", "stream")


@dataclasses.dataclass(frozen=True)
class Constraint:
    """What an option accepts: a predicate, the phrase messages use, and a JSON Schema."""

    accepts: object  # callable: value -> bool
    text: str
    schema: dict
    choices: tuple = ()  # for a "did you mean" on a misspelt string

    def __str__(self):
        return self.text


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _integer(low, none=False):
    text = f"an integer >= {low}" + (" or None" if none else "")
    types = ["integer", "null"] if none else "integer"
    return Constraint(
        lambda value: (none and value is None) or (_is_integer(value) and value >= low),
        text,
        {"type": types, "minimum": low},
    )


def _one_of(*values):
    return Constraint(
        lambda value: isinstance(value, str) and value in values,
        "one of " + ", ".join(map(repr, values)),
        {"enum": list(values)},
        choices=values,
    )


_EPOCHS = Constraint(
    lambda value: (_is_integer(value) and value >= 1) or value == "auto" and isinstance(value, str),
    "an integer >= 1 or 'auto' (as far as the estimator's own fit would train)",
    {
        "anyOf": [
            {"type": "integer", "minimum": 1, "title": "an integer >= 1"},
            {"const": "auto", "title": "'auto'"},
        ]
    },
)
_BOOLEAN = Constraint(lambda value: isinstance(value, bool), "True or False", {"type": "boolean"})
_NUMBER = Constraint(
    lambda value: isinstance(value, numbers.Real) and not isinstance(value, bool),
    "a number",
    {"type": "number"},
)
_SYNC_EVERY = Constraint(
    lambda value: (_is_integer(value) and value >= 1) or value == "auto" and isinstance(value, str),
    "an integer >= 1 (blocks a replica trains between two merges) or 'auto' (chosen from "
    "measured timings)",
    {
        "anyOf": [
            {"type": "integer", "minimum": 1, "title": "an integer >= 1"},
            {"const": "auto", "title": "'auto'"},
        ]
    },
)


def _is_seed(value):
    import numpy as np

    return value is None or _is_integer(value) or isinstance(value, np.random.RandomState)


_SEED = Constraint(
    _is_seed, "an integer, a numpy RandomState or None", {"type": ["integer", "null"]}
)
_SCORING = Constraint(
    lambda value: value is None or isinstance(value, str) or callable(value),
    "a scorer name, a callable scorer(estimator, X, y) or None",
    {"type": ["string", "null"]},
)


def _is_validation(value):
    if value is None or isinstance(value, tuple | list) and len(value) == 2:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < 1


_VALIDATION = Constraint(
    _is_validation, "a fraction in (0, 1), a tuple (X_val, y_val) or None", {"type": "null"}
)
_WORKERS = Constraint(
    lambda value: value is None or isinstance(value, list | tuple | set),
    "a list of worker addresses or None",
    {"type": ["array", "null"], "items": {"type": "string"}},
)


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of the engine: see the module docstring for the fields."""

    name: str
    constraint: Constraint
    default: object
    doc: str
    takers: tuple
    modes: tuple = ()
    defaults: dict = dataclasses.field(default_factory=dict)

    def default_for(self, taker):
        """The default of this option for entry point *taker*."""
        return self.defaults.get(taker, self.default)


_ENGINE = ("train", "DataParallel")
_SEARCHES = ("search", "adaptive")

OPTIONS = {
    option.name: option
    for option in (
        Option(
            "strategy",
            _one_of(*STRATEGIES),
            None,
            "sync: replicas merged every sync_every blocks; async: a parameter server; "
            "sequential: one replica walks every chunk (default: chosen: with epochs auto, "
            "data of one chunk or at most 64 MiB is fitted at once on one worker; else sync "
            "when the estimator has a merge rule, else sequential; an adaptive search: "
            "sequential)",
            takers=(*_ENGINE, *_SEARCHES),
            modes=("data",),
            defaults={"adaptive": "sequential"},
        ),
        Option(
            "epochs",
            _EPOCHS,
            "auto",
            "passes over the data, or 'auto' (data and task modes' default): as far as the "
            "estimator's own fit would train, up to its max_iter, stopping with its tol and "
            "n_iter_no_change on the training loss (model mode: default 1)",
            takers=(*_ENGINE, "ClassSharded", "search"),
            modes=("data", "model", "task"),
            defaults={"train": 1, "ClassSharded": 1},
        ),
        Option(
            "sync_every",
            _SYNC_EVERY,
            "auto",
            "blocks each replica trains between two merges, or 'auto' (the default): chosen "
            "from measured timings (model: default 1)",
            takers=(*_ENGINE, "ClassSharded", *_SEARCHES),
            modes=("data", "model"),
            defaults={"ClassSharded": 1},
        ),
        Option(
            "staleness",
            _integer(0, none=True),
            0,
            "async: chunks a replica may run ahead of the slowest (default 0, lock-step; "
            "null: unbounded)",
            takers=(*_ENGINE, *_SEARCHES),
            modes=("data",),
        ),
        Option(
            "shuffle",
            _BOOLEAN,
            True,
            "visit each replica's chunks in a new seeded order every epoch (a grid or "
            "random search: default false)",
            takers=(*_ENGINE, *_SEARCHES),
            modes=("data", "task"),
            defaults={"search": False},
        ),
        Option(
            "shuffle_rows",
            _BOOLEAN,
            False,
            "also shuffle the rows inside each chunk, seeded per epoch and chunk",
            takers=("train", "search"),
        ),
        Option(
            "random_state",
            _SEED,
            None,
            "seeds the chunk order (the wrapped estimator's own random_state seeds it; a "
            "grid or random search's candidate i trains with random_state + i)",
            takers=(*_ENGINE, "search"),
            modes=("data", "model", "task"),
        ),
        Option(
            "validation",
            _VALIDATION,
            None,
            "data scored after every epoch: a fraction of each chunk's rows, or (X_val, y_val)",
            takers=("DataParallel",),
        ),
        Option(
            "scoring",
            _SCORING,
            None,
            "the scorer of validation (default: the estimator's score)",
            takers=_ENGINE,
        ),
        Option(
            "tol",
            _NUMBER,
            1e-4,
            "early stopping: the improvement of the validation score that counts",
            takers=_ENGINE,
        ),
        Option(
            "n_iter_no_change",
            _integer(1, none=True),
            None,
            "early stopping: epochs without an improvement of tol before training stops",
            takers=_ENGINE,
        ),
        Option(
            "chunk_size",
            _integer(1, none=True),
            None,
            "rows per chunk of in-memory data (default: about one chunk per worker)",
            takers=("DataParallel",),
        ),
        Option(
            "n_replicas",
            _integer(1, none=True),
            None,
            "replicas of the model (data: default one per worker), or of every shard (model: "
            "hybrid shards x replicas, default 1), merged every sync_every blocks",
            takers=(*_ENGINE, "ClassSharded", "search"),
            modes=("data", "model"),
            defaults={"ClassSharded": 1},
        ),
        Option(
            "n_shards",
            _integer(1, none=True),
            None,
            "model: shards of the classes (default one per worker)",
            takers=("ClassSharded",),
            modes=("model",),
        ),
        Option(
            "workers",
            _WORKERS,
            None,
            "the worker addresses the replicas may run on (default: every worker)",
            takers=("train",),
        ),
        Option(
            "data",
            _one_of(*DATA_MODES),
            "auto",
            "persist the data in the workers' memory, or stream it: replicas read their "
            "chunks as they train (auto: stream when the data is over half the memory the "
            "workers have free)",
            takers=(*_ENGINE, *_SEARCHES),
            modes=("data",),
        ),
        Option(
            "prefetch",
            _integer(0),
            2,
            "chunks a streaming replica reads ahead (default 2)",
            takers=(*_ENGINE, *_SEARCHES),
            modes=("data",),
        ),
    )
}
"""Every option of the engine, in the order the signatures list them."""

RENAMED = {"shards": "n_shards", "replicas": "n_replicas"}
"""Old name -> new name: ``ClassSharded(replicas=)`` and a pipeline's ``parallel: {shards,
replicas}``, accepted with a ``FutureWarning`` in 0.2 and removed in 0.3."""


def names(taker):
    """The options entry point *taker* accepts, in the table's order.

    Parameters
    ----------
    taker : str
        One of ``"train"``, ``"DataParallel"``, ``"ClassSharded"``, ``"search"`` (the grid
        and random searches) or ``"adaptive"`` (ASHA, halving, Hyperband).

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> from taskdml.parallel.engine._options import names
    >>> names("adaptive")
    ('strategy', 'sync_every', 'staleness', 'shuffle', 'data', 'prefetch')
    """
    if taker not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {taker!r}; one of {', '.join(ENTRY_POINTS)}.")
    return tuple(name for name, option in OPTIONS.items() if taker in option.takers)


def defaults(taker):
    """``{option: default}`` for entry point *taker*.

    Examples
    --------
    >>> from taskdml.parallel.engine._options import defaults
    >>> defaults("search")["strategy"], defaults("DataParallel")["strategy"]
    ('sequential', 'sync')
    """
    return {name: OPTIONS[name].default_for(taker) for name in names(taker)}


def _is_default(value, default):
    return value is default or (type(value) is type(default) and value == default)


def check(taker, values, owner=None):
    """*values* if every one is valid for entry point *taker*, else a ValueError naming the
    first invalid option, what it accepts and what it got.

    Parameters
    ----------
    taker : str
        The entry point (see :func:`names`); its own defaults always pass.
    values : dict
        ``{option: value}``; every option must be one *taker* accepts.
    owner : str, optional
        Who was given the values (a class name), the message's prefix.

    Returns
    -------
    dict
        *values*, unchanged.

    Raises
    ------
    ValueError
        ``"{owner}: {option} must be {what it accepts}; got {value!r}."``, with a "did you
        mean" for a misspelt choice.

    Examples
    --------
    >>> from taskdml.parallel.engine._options import check
    >>> check("DataParallel", {"epochs": 3, "sync_every": "auto"}, "DataParallel")
    {'epochs': 3, 'sync_every': 'auto'}
    >>> try:
    ...     check("DataParallel", {"strategy": "synk"}, "DataParallel")
    ... except ValueError as error:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    DataParallel: strategy must be one of 'sync', 'async', 'sequential'; got 'synk'.
    Did you mean 'sync'?
    """
    prefix = f"{owner}: " if owner else ""
    for name, value in values.items():
        option = OPTIONS[name]
        if taker not in option.takers:
            raise TypeError(f"{prefix}{taker} does not take the option {name!r}.")
        constraint = option.constraint
        if _is_default(value, option.default_for(taker)) or constraint.accepts(value):
            continue
        hint = did_you_mean(value, constraint.choices) if isinstance(value, str) else ""
        raise ValueError(f"{prefix}{name} must be {constraint}; got {value!r}.{hint}")
    return values


def check_keys(taker, keys, owner=None, where="parallel"):
    """Raise a ValueError for the first of *keys* that entry point *taker* does not take.

    Parameters
    ----------
    taker : str
    keys : iterable of str
        The keys of a dict of options (a search's deprecated ``parallel=``).
    owner : str, optional
        The message's prefix.
    where : str, default="parallel"
        What held the keys, for the message.

    Examples
    --------
    >>> from taskdml.parallel.engine._options import check_keys
    >>> try:
    ...     check_keys("adaptive", ["strategi"], "ASHASearchCV")
    ... except ValueError as error:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    ASHASearchCV: unknown key 'strategi' in parallel. Did you mean 'strategy'?
    Valid keys: strategy, sync_every, staleness, shuffle, data, prefetch.
    """
    prefix = f"{owner}: " if owner else ""
    valid = names(taker)
    for key in keys:
        if key not in valid:
            raise ValueError(
                f"{prefix}unknown key {key!r} in {where}.{did_you_mean(key, valid)} "
                f"Valid keys: {', '.join(valid)}."
            )


def mode_keys():
    """``{mode: keys}``: the ``parallel`` keys each pipeline mode reads (federated's are the
    pipeline's own, :mod:`taskdml.pipeline._schema`).

    Examples
    --------
    >>> from taskdml.parallel.engine._options import mode_keys
    >>> mode_keys()["model"]
    ('epochs', 'sync_every', 'random_state', 'n_replicas', 'n_shards')
    """
    modes = {}
    for name, option in OPTIONS.items():
        for mode in option.modes:
            modes.setdefault(mode, []).append(name)
    return {mode: tuple(keys) for mode, keys in modes.items()}


def pipeline_properties():
    """The JSON Schema of every option a pipeline's ``parallel`` block may hold, and of the
    renamed keys it still accepts (``"deprecated": true``).

    Returns
    -------
    dict
        ``{key: JSON Schema}``, in the table's order, the renamed keys last.
    """
    properties = {
        name: {**option.constraint.schema, "description": option.doc}
        for name, option in OPTIONS.items()
        if option.modes
    }
    for old, new in RENAMED.items():
        properties[old] = {
            **properties[new],
            "deprecated": True,
            "description": f"deprecated since 0.2 (removed in 0.3): the old name of {new}",
        }
    return properties
