"""Values registered per class and found along an object's MRO, with built-ins loaded lazily.

The merge rules (:mod:`taskdml.parallel.merge`) and the chunk-wise fits of transformers
(:mod:`taskdml.parallel.chunkwise`) are both such registries. Their built-in entries are
registered by a loader — a module whose import registers them, or a function — named with
:meth:`ClassRegistry.register_lazy`, as :meth:`dask.utils.Dispatch.register_lazy` does: the
registry imports nothing until the first lookup or registration, so a worker that unpickled
one task function pays for no rule module it does not use, yet knows every built-in rule when
it looks one up. Loaders run before any registration, so a user's entry for a built-in class
replaces the built-in and is never overwritten by it later. A re-entrant lock makes a lookup
in another thread wait until the loaders are done; the loading thread itself may register.
"""

import importlib
import threading


class ClassRegistry:
    """``{class: value}``, looked up along a class's MRO.

    Examples
    --------
    >>> registry = ClassRegistry()
    >>> registry.register(int, "integers")
    >>> registry.lookup(bool)  # bool subclasses int
    'integers'
    >>> registry.lookup(str) is None
    True
    """

    def __init__(self):
        self._values = {}
        self._pending = []
        self._lock = threading.RLock()

    def register_lazy(self, loader):
        """Run *loader* (a module name to import, or a function) before the next use."""
        with self._lock:
            self._pending.append(loader)

    def _load(self):
        with self._lock:
            while self._pending:
                loader = self._pending.pop(0)
                if isinstance(loader, str):
                    importlib.import_module(loader)
                else:
                    loader()

    def register(self, cls, value):
        """Register *value* for *cls* and its subclasses (replacing what *cls* had)."""
        self._load()
        self._values[cls] = value

    def lookup(self, cls):
        """The value of the first class along *cls*'s MRO that has one, else ``None``."""
        self._load()
        for klass in cls.__mro__:
            if klass in self._values:
                return self._values[klass]
        return None

    def items(self):
        """``(class, value)`` of every registration, built-ins included."""
        self._load()
        return list(self._values.items())
