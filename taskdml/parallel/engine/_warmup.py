"""What a training's workers import, asked for once per client before the training needs it.

On a fresh cluster the workers import the engine's task modules, the collective, the merge
rule and the estimator's own module (scikit-learn's, mostly) when the first task that needs
each arrives: the chunks' inspection, the collective's plugin, the replicas. Each stage is a
round trip that waits for the slowest worker's import, so a first training paid them one after
the other. :func:`prepare`, called first thing by :func:`~taskdml.parallel.train`, asks every
worker for all of them at once (:func:`taskdml._warm.prepare`: a plugin, registered once per
client and list), so they are imported while the client builds and sends the training's first
tasks, and a later training with the same modules sends nothing.
"""

from taskdml import _warm

ENGINE_MODULES = (
    "taskdml.parallel.engine._chunks",
    "taskdml.parallel.engine._tasks",
    "taskdml.parallel.engine._replica",
    "taskdml.parallel.engine._train",
    "taskdml.parallel.collective._direct",
)
"""The engine's modules that its tasks, plugins and messages unpickle on a worker (``_train``
holds the replica tasks' entry point)."""


def worker_modules(estimator):
    """The modules a worker imports to train *estimator*: the engine's, then those of the
    estimator and every estimator among its parameters, then its merge rule's.

    Parameters
    ----------
    estimator : scikit-learn estimator

    Returns
    -------
    list of str

    Examples
    --------
    >>> from sklearn.linear_model import SGDClassifier
    >>> worker_modules(SGDClassifier())[-2:]
    ['sklearn.linear_model._stochastic_gradient', 'taskdml.parallel.merge._linear']
    """
    from sklearn.pipeline import Pipeline

    from taskdml.parallel.merge._registry import get_merge_rule

    found = list(ENGINE_MODULES)
    parts = [estimator]
    if hasattr(estimator, "get_params"):
        parts += [v for v in estimator.get_params(deep=True).values() if _is_estimator(v)]
    for part in parts:
        found.append(type(part).__module__)
        if isinstance(part, Pipeline):  # fitted chunk-wise
            found.append("taskdml.parallel.chunkwise._tabular")
        rule = get_merge_rule(part) if hasattr(part, "partial_fit") else None
        if rule is not None:
            found += [f.__module__ for f in (rule.fn, rule.prepare) if f is not None]
    return list(dict.fromkeys(found))


def prepare(client, estimator):
    """Ask *client*'s workers to import what training *estimator* needs, without waiting.

    Parameters
    ----------
    client : distributed.Client or None
        Nothing happens without one.
    estimator : scikit-learn estimator

    Returns
    -------
    bool
        Whether the workers were asked now (``False``: no client, or already asked).
    """
    if client is None:
        return False
    return _warm.prepare(client, worker_modules(estimator))


def _is_estimator(value):
    return hasattr(value, "get_params") and not isinstance(value, type)
