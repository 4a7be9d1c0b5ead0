"""``parallel: {mode: auto}``: which kind of parallelism a step trains with, and why.

The rule weighs sizes against the memory the workers have:

- **model** when a one-vs-rest linear model that :class:`~taskdml.parallel.ClassSharded` can
  split would take more than a third of the smallest worker's memory limit: a data-parallel
  replica holds the model about three times during a merge (its own, the one it receives and
  the sum), so such a model would not train data-parallel;
- **task** for a fit whose data is one chunk (there is nothing to split between replicas), and
  for a search with at least as many candidates as workers whose data takes at most a quarter
  of the smallest worker's limit: every trial then trains in one task, and the trials keep
  every worker busy without a merge;
- **data** otherwise.

Federated training is never chosen: it needs silos, which a step names on purpose. The choice
and the numbers it came from go into the step's manifest entry (``parallel``) and are shown by
``taskdml runs show``.
"""

import dataclasses

COPIES_IN_MERGE = 3
"""How many copies of the model a data-parallel replica holds at once during a merge."""

SEARCH_DATA_SHARE = 4
"""A search trains one task per trial when its data takes at most 1/this of a worker."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """The mode a step trains with.

    Attributes
    ----------
    mode : str
        ``"data"``, ``"model"`` or ``"task"``.
    reason : str
        One sentence saying why, with the sizes compared.
    facts : dict
        The numbers the choice came from (bytes, counts).
    """

    mode: str
    reason: str
    facts: dict

    def record(self):
        """The choice as the manifest keeps it.

        Returns
        -------
        dict
            ``{"mode", "asked": "auto", "reason", **facts}``.
        """
        return {"mode": self.mode, "asked": "auto", "reason": self.reason, **self.facts}


def worker_memory(client):
    """The smallest worker memory limit and their sum, in bytes (``None`` without limits).

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    (int or None, int or None)
    """
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    limits = [worker.get("memory_limit") or 0 for worker in workers]
    if not limits or not all(limits):
        return None, None
    return min(limits), sum(limits)


def sharded_model_bytes(estimator, n_features, n_classes):
    """Bytes of ``coef_`` of *estimator* if :class:`ClassSharded` can split it, else ``None``.

    Parameters
    ----------
    estimator : estimator
    n_features, n_classes : int

    Returns
    -------
    int or None
        ``rows x n_features x 8`` (float64), a row per class (one for two classes).
    """
    from taskdml.parallel.estimators._class_sharded import _kind

    try:
        _kind(estimator)
    except (TypeError, ValueError):
        return None
    rows = n_classes if n_classes > 2 else 1
    return rows * n_features * 8


def choose_fit(estimator, n_features, n_classes, n_chunks, data_bytes, client):
    """The mode of a ``fit:`` step with ``mode: auto``.

    Parameters
    ----------
    estimator : estimator
    n_features : int or None
        Columns the model sees (after preprocessing; ``None`` for a table).
    n_classes : int or None
        Classes of a classifier (``None`` for a regressor).
    n_chunks : int
        Row chunks of the data.
    data_bytes : int or None
        Bytes of the data's X (``None`` for a table).
    client : distributed.Client

    Returns
    -------
    Choice

    Examples
    --------
    >>> from sklearn.linear_model import SGDClassifier
    >>> sharded_model_bytes(SGDClassifier(), n_features=2**20, n_classes=1000) / 2**30
    7.8125
    """
    smallest, total = worker_memory(client)
    model_bytes = None
    if n_features and n_classes:
        model_bytes = sharded_model_bytes(estimator, n_features, n_classes)
    facts = {
        "model_bytes": model_bytes,
        "data_bytes": data_bytes and int(data_bytes),
        "n_chunks": n_chunks,
        "worker_memory_limit": smallest,
        "cluster_memory_limit": total,
    }
    if model_bytes and smallest and COPIES_IN_MERGE * model_bytes > smallest:
        return Choice(
            "model",
            f"coef_ takes {_size(model_bytes)} ({n_classes} classes x {n_features} features): a "
            f"data-parallel replica would hold it {COPIES_IN_MERGE} times in a merge, more than "
            f"the smallest worker's {_size(smallest)}; its classes are split across workers",
            facts,
        )
    if n_chunks == 1:
        return Choice("task", "the data is one chunk: nothing to split between replicas", facts)
    model = f"the model ({_size(model_bytes)}) fits" if model_bytes else "the model fits"
    where = f"each worker's {_size(smallest)}" if smallest else "the workers (no memory limit)"
    return Choice(
        "data",
        f"{model} {where} {COPIES_IN_MERGE} times over, and the data has {n_chunks} chunks: "
        "replicas train on the chunks where they are and are merged",
        facts,
    )


def choose_search(n_candidates, data_bytes, client):
    """The mode of a ``search:`` step with ``mode: auto``.

    Parameters
    ----------
    n_candidates : int
        Candidates the search trains (a grid's size, or its budget of trials).
    data_bytes : int
        Bytes of the data's X.
    client : distributed.Client

    Returns
    -------
    Choice
    """
    smallest, total = worker_memory(client)
    n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
    facts = {
        "n_candidates": n_candidates,
        "n_workers": n_workers,
        "data_bytes": int(data_bytes),
        "worker_memory_limit": smallest,
        "cluster_memory_limit": total,
    }
    small = smallest is None or SEARCH_DATA_SHARE * data_bytes <= smallest
    if n_candidates >= n_workers and small:
        return Choice(
            "task",
            f"{n_candidates} candidates keep {n_workers} workers busy and the data "
            f"({_size(data_bytes)}) fits one worker: every trial trains in one task, no merges",
            facts,
        )
    why = (
        f"fewer candidates ({n_candidates}) than workers ({n_workers})"
        if n_candidates < n_workers
        else f"the data ({_size(data_bytes)}) takes more than 1/{SEARCH_DATA_SHARE} of a "
        f"worker's {_size(smallest)}"
    )
    return Choice("data", f"{why}: every trial trains data-parallel", facts)


def _size(n):
    from dask.utils import format_bytes

    return "unknown" if n is None else format_bytes(n)
