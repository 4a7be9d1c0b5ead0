"""Models whose parts live on workers, seen through a protocol instead of their classes.

A model split across workers (:class:`~taskdml.parallel.ClassSharded`: one shard of its
classes per worker; the graph models :class:`~taskdml.graph.FactorizationModel` and
:class:`~taskdml.graph.SparseLogisticModel`: chunked factors or weights on the workers) must
never be gathered whole: the cache writes each part from the worker that holds it, a run
directory saves it part by part, and an evaluation predicts where the parts are (the last
two for ClassSharded, the only one of them that classifies). The layers that do this
(``cache``, ``runs``, ``metrics``) sit below the engines, so they cannot know the class; the
model answers three methods instead, as dask collections answer ``__dask_graph__`` (the
graph models the first two: they are not evaluated as classifiers):

``__taskdml_parts__()``
    ``(shell, parts)``: a small copy without its parts, and the parts (futures or in-memory
    values); ``None`` when the model holds no parts (unfitted).
``__taskdml_with_parts__(parts)``
    Called on the shell: the model with *parts*.
``__taskdml_chunk_values__(X, method)``
    *method*'s result on every chunk of the dask array *X*, computed where the parts are:
    ``(values, rows, chunked)``, one future (or delayed without a client) per chunk.
"""


def parts_of(model):
    """``(shell, parts)`` of a model whose parts live on workers, else ``None``.

    Examples
    --------
    >>> from sklearn.linear_model import SGDClassifier
    >>> parts_of(SGDClassifier()) is None
    True
    """
    split = getattr(model, "__taskdml_parts__", None)
    return None if split is None else split()


def with_parts(shell, parts):
    """The model :func:`parts_of` split, joined again with *parts*."""
    return shell.__taskdml_with_parts__(list(parts))


def chunk_values(model, X, method):
    """Per chunk of *X*, *method*'s result computed where *model*'s parts are."""
    return model.__taskdml_chunk_values__(X, method)


def gathered(part):
    """One part in this process: the value of a future, or the part itself."""
    from distributed import Future

    return part.result() if isinstance(part, Future) else part
