"""Checkpoints of long trainings inside a pipeline step.

A sync training on a cluster already stops every ``taskdml.elastic.checkpoint-s`` seconds
(60 by default) at a round, with the global state in the client
(:mod:`taskdml.parallel.engine._elastic`). Inside a pipeline step run with a cache, the engine also
writes that state to the store (:meth:`taskdml.cache._store.Cache.save_checkpoint`: atomically,
signed): the merged model, where the epoch stood (the chunks each replica had left), the
rounds and sync period so far, and the history. A training shorter than the period writes
none. When the step runs again with the same key — ``taskdml resume`` after a crash, or the
same pipeline run again — the training starts from its last checkpoint instead of from the
start, and the step's stats say so (``resumed_from``). The epoch order and shuffles are
functions of the seed and the epoch, so with a fixed seed and an integer ``sync_every`` the
result equals an uninterrupted training's. An async training writes each copy of its parameter
server's state that the client takes (every ``checkpoint-s`` too) with the chunks the server
had not absorbed; a resumed one trains only those, so every chunk of every epoch is absorbed
once. The checkpoints are removed when the step's outputs are stored.

The runner opens a :func:`scope` around each step; a ``fit`` step names each ``foreach``
item's training (:func:`item`), and every training in it :func:`claim`\\ s the next name, so
a step that trains several times (a ``Pipeline``'s steps) keeps one checkpoint per training.
"""

import contextlib
import contextvars
import dataclasses
import itertools

_scope = contextvars.ContextVar("taskdml_checkpoints", default=None)


@dataclasses.dataclass
class _Scope:
    store: object
    key: str
    prefix: str
    counter: object = dataclasses.field(default_factory=itertools.count)


@dataclasses.dataclass(frozen=True)
class Checkpoints:
    """Where one training keeps its last checkpoint.

    Attributes
    ----------
    store : Cache
    key : str
        The step's cache key.
    name : str
        The training's name in the step.
    """

    store: object
    key: str
    name: str

    def save(self, state):
        """Replace the last checkpoint with *state*."""
        self.store.save_checkpoint(self.key, self.name, state)

    def load(self):
        """The last checkpoint's state, or ``None``."""
        return self.store.load_checkpoint(self.key, self.name)


@contextlib.contextmanager
def scope(store, key):
    """Let the trainings inside the block checkpoint to *store* under the step's *key*
    (nothing when *store* or *key* is ``None``)."""
    token = _scope.set(None if store is None or key is None else _Scope(store, key, ""))
    try:
        yield
    finally:
        _scope.reset(token)


@contextlib.contextmanager
def item(label):
    """Name the trainings inside the block after a ``foreach`` item."""
    outer = _scope.get()
    if outer is None or label is None:
        yield
        return
    token = _scope.set(_Scope(outer.store, outer.key, f"{_safe(label)}-"))
    try:
        yield
    finally:
        _scope.reset(token)


def claim():
    """The :class:`Checkpoints` of the next training in this scope, or ``None`` outside one."""
    current = _scope.get()
    if current is None:
        return None
    name = f"{current.prefix}training-{next(current.counter)}"
    return Checkpoints(current.store, current.key, name)


def _safe(label):
    return "".join(char if char.isalnum() or char in "-_.=" else "_" for char in str(label))
